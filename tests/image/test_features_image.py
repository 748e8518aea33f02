"""FeaturesImage / FeaturesDelta: Kafka's FeaturesImageTest (Kafka 4's fixtures) and kraft's choices
(no default metadata.version, pre-release 3.3 levels, kraft.version skipped)."""
from __future__ import annotations

import pytest
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.features import FeatureControlManager
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.features import FeaturesDelta, FeaturesImage, UnknownMetadataVersionError
from kraft_node.metadata.versions import MetadataVersion, bootstrap_records
from kraft_storage.messages.metadata import FeatureLevelRecord, NoOpRecord
from kraft_storage.timeline import LATEST_EPOCH, SnapshotRegistry

LATEST = MetadataVersion.latest_testing()


def level(name: str, value: int) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=value), 0)


IMAGE1 = FeaturesImage({"foo": 2, "bar": 1}, LATEST)
DELTA1_RECORDS = [level("foo", 3), level("bar", 0), level("baz", 8)]  # change, remove, add
IMAGE2 = FeaturesImage({"foo": 3, "baz": 8}, LATEST)
DELTA2_RECORDS = [level("foo", 0), level("baz", 0), level("bar", 1)]  # remove all, add one back
IMAGE3 = FeaturesImage({"bar": 1}, LATEST)


def check_to_image(image: FeaturesImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    if records is None:
        records = image_records(image, image.metadata_version_or_throw())
    check_all_intermediate_images(FeaturesImage.EMPTY, FeaturesDelta, image, records)


def test_empty_image_round_trip() -> None:
    # writing needs a metadata.version: the empty image written at the minimum reads back with it
    records = image_records(FeaturesImage.EMPTY, MetadataVersion.MINIMUM_VERSION)
    check_to_image(FeaturesImage({}, MetadataVersion.MINIMUM_VERSION), records)


@pytest.mark.parametrize("image", [IMAGE1, IMAGE2, IMAGE3], ids=["image1", "image2", "image3"])
def test_image_round_trip(image: FeaturesImage) -> None:
    check_to_image(image)


@pytest.mark.parametrize("before,records,after", [(IMAGE1, DELTA1_RECORDS, IMAGE2), (IMAGE2, DELTA2_RECORDS, IMAGE3)],
                         ids=["delta1", "delta2"])
def test_apply_delta(before: FeaturesImage, records: list[ApiMessageAndVersion], after: FeaturesImage) -> None:
    assert replay_all(FeaturesDelta(before), records).apply() == after
    # the image's records plus the delta's, from empty, also give it (they may differ from `after`'s records)
    check_to_image(after, image_records(before, LATEST) + records)


def test_empty() -> None:
    assert FeaturesImage.EMPTY.is_empty()
    assert FeaturesImage.EMPTY.metadata_version() is None
    assert not FeaturesImage({"foo": 1}, MetadataVersion.MINIMUM_VERSION).is_empty()
    assert not FeaturesImage({}, MetadataVersion.MINIMUM_VERSION).is_empty()
    assert not FeaturesImage({"foo": 1}).is_empty()


def test_metadata_version_or_throw() -> None:
    with pytest.raises(UnknownMetadataVersionError, match="Unknown metadata version for FeaturesImage"):
        FeaturesImage.EMPTY.metadata_version_or_throw()
    assert IMAGE1.metadata_version_or_throw() is LATEST


def test_elr_enabled() -> None:
    assert not FeaturesImage({"eligible.leader.replicas.version": 0}, LATEST).is_elr_enabled()
    assert not FeaturesImage({}, LATEST).is_elr_enabled()
    assert FeaturesImage({"eligible.leader.replicas.version": 1}, LATEST).is_elr_enabled()


def test_write_order_and_target_version() -> None:
    """metadata.version first and at the *target* level, then the others by name, all version 0."""
    image = FeaturesImage({"zeta.version": 1, "group.version": 1, "alpha": 2}, LATEST)
    records = image_records(image, MetadataVersion.IBP_3_7_IV0)
    assert [(r.message.name, r.message.feature_level, r.version) for r in records] == [
        ("metadata.version", MetadataVersion.IBP_3_7_IV0.feature_level, 0),
        ("alpha", 2, 0), ("group.version", 1, 0), ("zeta.version", 1, 0)]


def test_pre_release_3_3_levels_read_as_3_3_iv3() -> None:
    for lvl in range(4, 8):
        image = replay_all(FeaturesDelta(FeaturesImage.EMPTY), [level("metadata.version", lvl)]).apply()
        assert image.metadata_version() is MetadataVersion.IBP_3_3_IV3


@pytest.mark.parametrize("bad", [0, 3, 999])
def test_unknown_metadata_version_level(bad: int) -> None:
    delta = FeaturesDelta(FeaturesImage.EMPTY)
    with pytest.raises(ReplayError, match=f"No MetadataVersion with feature level {bad}"):
        delta.replay(FeatureLevelRecord(name="metadata.version", feature_level=bad))


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="FeaturesDelta cannot replay NoOpRecord"):
        FeaturesDelta(IMAGE1).replay(NoOpRecord())


def test_kraft_version_is_not_a_finalized_feature() -> None:
    image = replay_all(FeaturesDelta(IMAGE1), [level("kraft.version", 1)]).apply()
    assert image is IMAGE1
    assert image.finalized_version("kraft.version") == 0


def test_metadata_version_change() -> None:
    delta = FeaturesDelta(IMAGE1)
    assert delta.metadata_version_change() is None
    delta.replay(FeatureLevelRecord(name="metadata.version", feature_level=LATEST.feature_level))
    assert delta.metadata_version_change() is None  # the same level is no change
    delta.replay(FeatureLevelRecord(name="metadata.version", feature_level=MetadataVersion.IBP_3_9_IV0.feature_level))
    assert delta.metadata_version_change() is MetadataVersion.IBP_3_9_IV0
    assert delta.apply() == FeaturesImage({"foo": 2, "bar": 1}, MetadataVersion.IBP_3_9_IV0)
    assert FeaturesDelta(FeaturesImage.EMPTY).metadata_version_change() is None


def test_finish_snapshot_removes_what_is_not_restated() -> None:
    delta = replay_all(FeaturesDelta(IMAGE1), [level("metadata.version", MetadataVersion.IBP_4_0_IV1.feature_level),
                                               level("foo", 2), level("new.feature", 1)])
    delta.finish_snapshot()
    assert delta.apply() == FeaturesImage({"foo": 2, "new.feature": 1}, MetadataVersion.IBP_4_0_IV1)


def test_unchanged_apply_shares_the_image() -> None:
    assert FeaturesDelta(IMAGE1).apply() is IMAGE1
    assert replay_all(FeaturesDelta(IMAGE1), [level("foo", 2)]).apply() is IMAGE1


def test_finalized_version_lookup_and_repr() -> None:
    assert IMAGE1.finalized_version("foo") == 2
    assert IMAGE1.finalized_version("nope") == 0
    assert IMAGE1.finalized_version("metadata.version") == LATEST.feature_level
    assert FeaturesImage.EMPTY.finalized_version("metadata.version") == 0
    assert repr(IMAGE1) == f"FeaturesImage(metadata_version={LATEST}, finalized_versions={{bar=1, foo=2}})"
    assert hash(IMAGE1) == hash(FeaturesImage({"bar": 1, "foo": 2}, LATEST))
    with pytest.raises(AttributeError):
        IMAGE1.finalized_versions = {}  # type: ignore[misc]  # a read-only property


def test_same_records_as_the_controller() -> None:
    mv = MetadataVersion.LATEST_PRODUCTION
    records = [ApiMessageAndVersion(r, v) for r, v in bootstrap_records(mv)] + [level("group.version", 0)]
    manager = FeatureControlManager(SnapshotRegistry())
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(FeaturesDelta(FeaturesImage.EMPTY), records).apply()
    assert len(image.finalized_versions) >= 3 and "group.version" not in image.finalized_versions
    theirs = [r.encode() for r in manager.snapshot_records(LATEST_EPOCH)]
    assert [r.encode() for r in image_records(image, mv)] == theirs
