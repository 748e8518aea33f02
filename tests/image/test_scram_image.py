"""ScramImage / ScramDelta: Kafka's ScramImageTest, the loss below 3.5-IV2, the controller writing the
same bytes, and structural sharing."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import ScramControlManager
from kraft_node.metadata.image.scram import ScramCredentialValue, ScramDelta, ScramImage, ScramMechanism
from kraft_node.metadata.image.writer import UnwritableMetadataError
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages.metadata import NoOpRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord
from kraft_storage.timeline import SnapshotRegistry

SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512
RNG = random.Random(17)


def credential() -> ScramCredentialValue:
    return ScramCredentialValue(RNG.randbytes(1024), RNG.randbytes(1024), RNG.randbytes(1024),
                                1024 + RNG.randrange(1024))


def upsert(name: str, mech: ScramMechanism, value: ScramCredentialValue) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(UserScramCredentialRecord(
        name=name, mechanism=int(mech), salt=value.salt, stored_key=value.stored_key, server_key=value.server_key,
        iterations=value.iterations), 0)


def remove(name: str, mech: ScramMechanism) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(RemoveUserScramCredentialRecord(name=name, mechanism=int(mech)), 0)


IMAGE1_SHA256 = {"alpha": credential(), "beta": credential()}
IMAGE1 = ScramImage({SHA256: IMAGE1_SHA256, SHA512: {"alpha": credential(), "gamma": credential()}})
SECOND_ALPHA_256, SECOND_ALPHA_512 = credential(), credential()
DELTA1_RECORDS = [
    remove("alpha", SHA512), remove("gamma", SHA512),  # every sha512 credential
    upsert("alpha", SHA256, SECOND_ALPHA_256),         # a sha256 credential replaced
    upsert("alpha", SHA512, SECOND_ALPHA_512),         # a sha512 one, re-using the name
]
IMAGE2 = ScramImage({SHA256: {"alpha": SECOND_ALPHA_256, "beta": IMAGE1_SHA256["beta"]},
                     SHA512: {"alpha": SECOND_ALPHA_512}})


def check_to_image(image: ScramImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(ScramImage.EMPTY, ScramDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [ScramImage.EMPTY, IMAGE1, IMAGE2], ids=["empty", "image1", "image2"])
def test_image_round_trip(image: ScramImage) -> None:
    check_to_image(image)


def test_apply_delta1() -> None:
    assert replay_all(ScramDelta(IMAGE1), DELTA1_RECORDS).apply() == IMAGE2
    check_to_image(IMAGE2, image_records(IMAGE1) + DELTA1_RECORDS)


def test_empty_with_invalid_ibp() -> None:
    assert image_records(ScramImage.EMPTY, MetadataVersion.IBP_3_4_IV0) == []


def test_image1_with_invalid_ibp() -> None:
    loss = "ScramImage({SCRAM_SHA_256:alpha, beta},{SCRAM_SHA_512:alpha, gamma},{})"
    with pytest.raises(UnwritableMetadataError) as info:
        image_records(IMAGE1, MetadataVersion.IBP_3_4_IV0)
    assert str(info.value) == ("Metadata has been lost because the following could not be represented in "
                               f"metadata.version 3.4-IV0: {loss}")
    losses: list[str] = []
    assert image_records(IMAGE1, MetadataVersion.IBP_3_5_IV1, losses.append) == []
    assert losses == [loss]
    assert len(image_records(IMAGE1, MetadataVersion.IBP_3_5_IV2)) == 4


def test_same_records_as_the_controller() -> None:
    records = image_records(IMAGE1) + DELTA1_RECORDS + [upsert("delta", SHA512, credential())]
    manager = ScramControlManager(SnapshotRegistry())
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(ScramDelta(ScramImage.EMPTY), records).apply()
    mv = MetadataVersion.latest_testing()
    assert [r.encode() for r in image_records(image, mv)] == [
        r.encode() for r in manager.snapshot_records(metadata_version=mv)]
    with pytest.raises(UnwritableMetadataError) as info:
        list(manager.snapshot_records(metadata_version=MetadataVersion.IBP_3_4_IV0))
    losses: list[str] = []
    image_records(image, MetadataVersion.IBP_3_4_IV0, losses.append)
    assert losses == [info.value.loss]


def test_removal_then_addition_in_one_delta_keeps_the_mechanism() -> None:
    """Kafka's apply would drop SHA512 when the removal empties it, losing the user added after it."""
    image = ScramImage({SHA512: {"alpha": SECOND_ALPHA_512}})
    new = credential()
    after = replay_all(ScramDelta(image), [remove("alpha", SHA512), upsert("zeta", SHA512, new)]).apply()
    assert after == ScramImage({SHA512: {"zeta": new}})
    assert after.credential("zeta", SHA512) == new and after.credential("alpha", SHA512) is None


def test_removing_the_last_user_drops_the_mechanism_and_unknown_is_no_error() -> None:
    after = replay_all(ScramDelta(IMAGE2), [remove("alpha", SHA512), remove("nobody", SHA256),
                                            remove("x", ScramMechanism.UNKNOWN)]).apply()
    assert SHA512 not in after.mechanisms and ScramMechanism.UNKNOWN not in after.mechanisms
    assert after.mechanisms[SHA256] is IMAGE2.mechanisms[SHA256]


def test_unknown_mechanism_code_reads_as_unknown() -> None:
    value = credential()
    record = UserScramCredentialRecord(name="u", mechanism=42, salt=value.salt, stored_key=value.stored_key,
                                       server_key=value.server_key, iterations=value.iterations)
    assert replay_all(ScramDelta(ScramImage.EMPTY), [record]).apply().credential("u", ScramMechanism.UNKNOWN) == value


def test_finish_snapshot() -> None:
    delta = replay_all(ScramDelta(IMAGE1), [upsert("beta", SHA256, IMAGE1_SHA256["beta"])])
    delta.finish_snapshot()
    assert delta.apply() == ScramImage({SHA256: {"beta": IMAGE1_SHA256["beta"]}})


def test_wrong_record_type() -> None:
    with pytest.raises(ReplayError, match="ScramDelta cannot replay NoOpRecord"):
        ScramDelta(IMAGE1).replay(NoOpRecord())


def test_structural_sharing_and_secrets_stay_out_of_repr() -> None:
    image = ScramImage({SHA256: {f"u{i}": credential() for i in range(200)}, SHA512: {"a": credential()}})
    after = replay_all(ScramDelta(image), [upsert("u5", SHA256, credential())]).apply()
    assert after.mechanisms[SHA512] is image.mechanisms[SHA512]
    assert all(after.credential(f"u{i}", SHA256) is image.credential(f"u{i}", SHA256) for i in range(200) if i != 5)
    assert replay_all(ScramDelta(image), [upsert("u5", SHA256, image.credential("u5", SHA256))]).apply() is image
    text = repr(IMAGE2) + repr(replay_all(ScramDelta(IMAGE1), DELTA1_RECORDS))
    assert "alpha" in text and SECOND_ALPHA_256.salt.hex()[:16] not in text and "iterations=" not in text


# -- a model check: random upserts and removals, cut into deltas anywhere ---------------------------

_CREDS = [credential() for _ in range(3)]
_OPS = st.lists(st.tuples(st.sampled_from([SHA256, SHA512]), st.sampled_from(["a", "b", "c"]),
                          st.one_of(st.none(), st.sampled_from(range(3)))), max_size=20)


@settings(max_examples=150, deadline=None)
@given(_OPS, st.lists(st.integers(min_value=0, max_value=20), max_size=4))
def test_any_cut_gives_the_model(ops: list[tuple[ScramMechanism, str, int | None]], cuts: list[int]) -> None:
    model: dict[ScramMechanism, dict[str, ScramCredentialValue]] = {}
    records = []
    for mech, user, which in ops:
        if which is None:
            model.get(mech, {}).pop(user, None)
            records.append(remove(user, mech))
        else:
            model.setdefault(mech, {})[user] = _CREDS[which]
            records.append(upsert(user, mech, _CREDS[which]))
    model = {mech: users for mech, users in model.items() if users}
    image = ScramImage.EMPTY
    bounds = sorted({0, len(records), *(c for c in cuts if c <= len(records))})
    for start, end in zip(bounds, bounds[1:]):
        image = replay_all(ScramDelta(image), records[start:end]).apply()
    assert image == ScramImage(model)
