"""ClusterImage / ClusterDelta: Kafka's ClusterImageTest (Kafka 4's ClusterImageFixtures), the cluster
part of ImageDowngradeTest, the replay errors of Kafka's ClusterDelta, and structural sharing."""
from __future__ import annotations

from types import MappingProxyType

import pytest
from support.images import check_all_intermediate_images, image_records, replay_all

from kraft_node.metadata.controller.cluster_control import (
    BrokerRegistration,
    ClusterControlManager,
    ControllerRegistration,
    Endpoint,
)
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.cluster import ClusterDelta, ClusterImage
from kraft_node.metadata.image.writer import UnwritableMetadataError
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH, SnapshotRegistry

MV = MetadataVersion
U = Uuid.from_string


def broker(id: int, epoch: int, incarnation: str, port: int, *, features: dict[str, tuple[int, int]] | None = None,
           rack: str | None = None, fenced: bool = True, in_controlled_shutdown: bool = False,
           is_migrating_zk_broker: bool = False, directories: tuple[Uuid, ...] = ()) -> BrokerRegistration:
    return BrokerRegistration.create(
        id=id, epoch=epoch, incarnation_id=U(incarnation), listeners=[Endpoint("PLAINTEXT", 0, "localhost", port)],
        supported_features=features or {}, rack=rack, fenced=fenced, in_controlled_shutdown=in_controlled_shutdown,
        is_migrating_zk_broker=is_migrating_zk_broker, directories=directories)


def controller(id: int, incarnation: str, port: int, zk_migration_ready: bool) -> ControllerRegistration:
    return ControllerRegistration(id, U(incarnation), zk_migration_ready,
                                  MappingProxyType({"PLAINTEXT": Endpoint("PLAINTEXT", 0, "localhost", port)}),
                                  MappingProxyType({}))


def rec(message: object, version: int = 0) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, version)


FOO = {"foo": (1, 3)}
C1000 = controller(1000, "9ABu6HEgRuS-hjHLgC4cHw", 19092, False)
C1001 = controller(1001, "FdEHF-IqScKfYyjZ1CjfNQ", 19093, True)

IMAGE1 = ClusterImage({
    0: broker(0, 1000, "vZKYST0pSA2HO5x_6hoO2Q", 9092, features=FOO, fenced=True),
    1: broker(1, 1001, "U52uRe20RsGI0RvpcTx33Q", 9093, features=FOO, fenced=False),
    2: broker(2, 123, "hr4TVh3YQiu3p16Awkka6w", 9094, rack="arack", fenced=False),
}, {1000: C1000})

DELTA1_RECORDS = [
    rec(m.UnfenceBrokerRecord(id=0, epoch=1000)),
    rec(m.FenceBrokerRecord(id=1, epoch=1001)),
    rec(m.BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=1000, in_controlled_shutdown=1), 2),
    rec(m.UnregisterBrokerRecord(broker_id=2, broker_epoch=123)),
    rec(m.RegisterControllerRecord(
        controller_id=1001, incarnation_id=U("FdEHF-IqScKfYyjZ1CjfNQ"), zk_migration_ready=True,
        end_points=[m.RegisterControllerRecord.ControllerEndpoint(name="PLAINTEXT", host="localhost", port=19093,
                                                                  security_protocol=0)])),
]

IMAGE2 = ClusterImage({
    0: broker(0, 1000, "vZKYST0pSA2HO5x_6hoO2Q", 9092, features=FOO, fenced=False, in_controlled_shutdown=True),
    1: broker(1, 1001, "U52uRe20RsGI0RvpcTx33Q", 9093, features=FOO, fenced=True),
}, {1000: C1000, 1001: C1001})

DELTA2_RECORDS = DELTA1_RECORDS + [
    rec(m.FenceBrokerRecord(id=0, epoch=1000)),
    rec(m.UnfenceBrokerRecord(id=1, epoch=1001)),
    # 0 is "no change": only a new registration leaves controlled shutdown
    rec(m.BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=1000, in_controlled_shutdown=0), 2),
    rec(m.RegisterBrokerRecord(
        broker_id=2, is_migrating_zk_broker=True, incarnation_id=U("Am5Yse7GQxaw0b2alM74bP"), broker_epoch=1002,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9094,
                                                          security_protocol=0)],
        features=[m.RegisterBrokerRecord.BrokerFeature(name="metadata.version",
                                                       min_supported_version=MV.MINIMUM_VERSION.feature_level,
                                                       max_supported_version=MV.IBP_3_6_IV0.feature_level)],
        rack="rack3"), 3),
]

IMAGE3 = ClusterImage({
    0: broker(0, 1000, "vZKYST0pSA2HO5x_6hoO2Q", 9092, features=FOO, fenced=True, in_controlled_shutdown=True),
    1: broker(1, 1001, "U52uRe20RsGI0RvpcTx33Q", 9093, features=FOO, fenced=False),
    2: broker(2, 1002, "Am5Yse7GQxaw0b2alM74bP", 9094, rack="rack3", fenced=True, is_migrating_zk_broker=True,
              features={"metadata.version": (MV.MINIMUM_VERSION.feature_level, MV.IBP_3_6_IV0.feature_level)}),
}, IMAGE2.controllers)


def check_to_image(image: ClusterImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    check_all_intermediate_images(ClusterImage.EMPTY, ClusterDelta, image,
                                  image_records(image) if records is None else records)


@pytest.mark.parametrize("image", [ClusterImage.EMPTY, IMAGE1, IMAGE2, IMAGE3],
                         ids=["empty", "image1", "image2", "image3"])
def test_image_round_trip(image: ClusterImage) -> None:
    check_to_image(image)


@pytest.mark.parametrize("before,records,after", [(IMAGE1, DELTA1_RECORDS, IMAGE2), (IMAGE2, DELTA2_RECORDS, IMAGE3)],
                         ids=["delta1", "delta2"])
def test_apply_delta(before: ClusterImage, records: list[ApiMessageAndVersion], after: ClusterImage) -> None:
    assert replay_all(ClusterDelta(before), records).apply() == after
    check_to_image(after, image_records(before) + records)


def test_write_order_and_versions() -> None:
    """Brokers by id, then controllers by id; RegisterBrokerRecord at the target's version."""
    for mv, version in [(MV.IBP_3_3_IV3, 1), (MV.IBP_3_7_IV0, 2), (MV.IBP_3_7_IV2, 3), (MV.latest_testing(), 3)]:
        records = image_records(IMAGE2.__class__({1: IMAGE2.brokers[1], 0: IMAGE2.brokers[0]}), mv)
        assert [(type(r.message).__name__, r.message.broker_id, r.version) for r in records] == [
            ("RegisterBrokerRecord", 0, version), ("RegisterBrokerRecord", 1, version)]
    records = image_records(IMAGE2)
    assert [(type(r.message).__name__, r.version) for r in records] == [
        ("RegisterBrokerRecord", 3), ("RegisterBrokerRecord", 3),
        ("RegisterControllerRecord", 0), ("RegisterControllerRecord", 0)]
    assert [r.message.controller_id for r in records[2:]] == [1000, 1001]


def test_loss_of_controller_registrations() -> None:
    image = ClusterImage({}, {1000: C1000})
    losses: list[str] = []
    records = image_records(image, MV.IBP_3_6_IV2, losses.append)
    assert losses == ["controller registration data"]
    assert records == []
    with pytest.raises(UnwritableMetadataError, match=r"Metadata has been lost because the following could not be "
                                                      r"represented in metadata.version 3.6-IV2: controller "
                                                      r"registration data"):
        image_records(image, MV.IBP_3_6_IV2)
    assert len(image_records(image, MV.IBP_3_7_IV0)) == 1


def test_pre_zk_migration_support_version() -> None:
    """ImageDowngradeTest.testPreZkMigrationSupportVersion, the cluster part: written at 3.3-IV3,
    a migrating broker loses that state and its record drops to version 1."""
    record = m.RegisterBrokerRecord(broker_id=123, incarnation_id=U("XgjKo16hRWeWrTui0iR5Nw"), broker_epoch=456,
                                    rack=None, fenced=False, in_controlled_shutdown=True, is_migrating_zk_broker=True)
    image = replay_all(ClusterDelta(ClusterImage.EMPTY), [rec(record, 2)]).apply()
    losses: list[str] = []
    records = image_records(image, MV.IBP_3_3_IV3, losses.append)
    assert losses == ["the isMigratingZkBroker state of one or more brokers"]
    assert records == [rec(m.RegisterBrokerRecord(broker_id=123, incarnation_id=U("XgjKo16hRWeWrTui0iR5Nw"),
                                                  broker_epoch=456, rack=None, fenced=False,
                                                  in_controlled_shutdown=True), 1)]
    assert image_records(image, MV.IBP_3_4_IV0) == [rec(record, 2)]


def test_loss_of_online_log_directories() -> None:
    dirs = (U("c7QfSi6xSIGQVh3Qd5RJxA"), U("rWaCHejCRRiptDMvW5Xw0g"))
    image = ClusterImage({1: broker(1, 10, "U52uRe20RsGI0RvpcTx33Q", 9093, directories=dirs),
                          2: broker(2, 11, "hr4TVh3YQiu3p16Awkka6w", 9094, directories=dirs[:1])})
    losses: list[str] = []
    records = image_records(image, MV.IBP_3_7_IV1, losses.append)
    assert losses == ["the online log directories of one or more brokers"] * 2  # once per broker, as Kafka
    assert [(r.message.log_dirs, r.version) for r in records] == [([], 2), ([], 2)]
    # written in the registration's order (Java's signed Uuid order), every one of them
    assert [r.message.log_dirs for r in image_records(image, MV.IBP_3_7_IV2)] == [[dirs[1], dirs[0]], [dirs[0]]]
    check_to_image(image)


def test_broker_epoch_and_lookups() -> None:
    assert IMAGE1.broker_epoch(2) == 123
    assert IMAGE1.broker_epoch(20) == -1
    assert IMAGE1.contains_broker(0) and not IMAGE1.contains_broker(20)
    assert IMAGE1.broker(20) is None and IMAGE1.broker(1) is IMAGE1.brokers[1]
    assert IMAGE1.controller(1000) is C1000 and IMAGE1.controller(1) is None


def test_is_empty_counts_brokers_only() -> None:
    assert ClusterImage.EMPTY.is_empty()
    assert ClusterImage({}, {1000: C1000}).is_empty()  # Kafka's rule: controllers alone do not count
    assert not IMAGE1.is_empty()


@pytest.mark.parametrize("record,message", [
    (m.FenceBrokerRecord(id=5, epoch=1), "Tried to fence broker 5, but that broker was not registered."),
    (m.UnfenceBrokerRecord(id=5, epoch=1), "Tried to unfence broker 5, but that broker was not registered."),
    (m.BrokerRegistrationChangeRecord(broker_id=5, broker_epoch=1),
     "Tried to change broker 5, but that broker was not registered."),
    (m.FenceBrokerRecord(id=1, epoch=1000),
     "Tried to fence broker 1, but the given epoch, 1000, did not match the current broker epoch, 1001"),
    (m.BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=999, fenced=1),
     "Tried to change broker 0, but the given epoch, 999, did not match the current broker epoch, 1000"),
    (m.BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=1000, fenced=2), "unknown value for fenced field: 2"),
    (m.BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=1000, in_controlled_shutdown=-1),
     "unknown value for inControlledShutdown field: -1"),
    (m.TopicRecord(name="foo"), "ClusterDelta cannot replay TopicRecord"),
])
def test_replay_errors(record: object, message: str) -> None:
    delta = ClusterDelta(IMAGE1)
    with pytest.raises(ReplayError) as info:
        delta.replay(record)
    assert message in str(info.value)
    assert delta.apply() is IMAGE1  # nothing half-applied


def test_unregistered_broker_is_gone_for_later_records_of_the_same_delta() -> None:
    delta = replay_all(ClusterDelta(IMAGE1), [rec(m.UnregisterBrokerRecord(broker_id=1, broker_epoch=1001))])
    with pytest.raises(ReplayError, match="Tried to fence broker 1, but that broker was not registered."):
        delta.replay(m.FenceBrokerRecord(id=1, epoch=1001))


def test_registration_change_directories() -> None:
    d1, d2, d3 = U("c7QfSi6xSIGQVh3Qd5RJxA"), U("rWaCHejCRRiptDMvW5Xw0g"), U("vZKYST0pSA2HO5x_6hoO2Q")
    image = ClusterImage({7: broker(7, 70, "U52uRe20RsGI0RvpcTx33Q", 9092, directories=(d1, d2))})
    # an empty LogDirs is "no change"
    assert replay_all(ClusterDelta(image), [m.BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=70)]
                      ).apply() is image
    after = replay_all(ClusterDelta(image), [
        m.BrokerRegistrationChangeRecord(broker_id=7, broker_epoch=70, fenced=-1, log_dirs=[d3, d1])]).apply()
    assert after.brokers[7] == broker(7, 70, "U52uRe20RsGI0RvpcTx33Q", 9092, fenced=False, directories=(d3, d1))


def test_finish_snapshot_removes_what_is_not_restated() -> None:
    delta = ClusterDelta(IMAGE2)
    restated = [r for r in image_records(IMAGE2) if getattr(r.message, "broker_id", None) == 1
                or getattr(r.message, "controller_id", None) == 1001]
    replay_all(delta, restated)
    delta.finish_snapshot()
    assert delta.apply() == ClusterImage({1: IMAGE2.brokers[1]}, {1001: C1001})


def test_structural_sharing() -> None:
    """One broker changed among 200: every other registration object (and the controllers map) is
    shared with the old image; a no-op change shares the whole image."""
    image = ClusterImage({i: broker(i, 100 + i, "vZKYST0pSA2HO5x_6hoO2Q", 9000 + i, fenced=False)
                          for i in range(200)}, {1000: C1000})
    after = replay_all(ClusterDelta(image), [m.BrokerRegistrationChangeRecord(broker_id=17, broker_epoch=117,
                                                                              fenced=1)]).apply()
    assert after.brokers[17].fenced and not image.brokers[17].fenced
    assert all(after.brokers[i] is image.brokers[i] for i in range(200) if i != 17)
    assert after.controllers is image.controllers
    # a heartbeat that changes nothing, and a re-registration equal to the current one, keep everything
    same = replay_all(ClusterDelta(image), [
        m.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=103, fenced=-1),
        image.brokers[5].to_record(MV.latest_testing())]).apply()
    assert same is image


def test_repr() -> None:
    text = repr(ClusterImage({}, {1000: C1000}))
    assert text.startswith("ClusterImage(brokers=[], controllers=[ControllerRegistration(id=1000")
    assert "changed_brokers={2: None}" in repr(replay_all(ClusterDelta(IMAGE1), [DELTA1_RECORDS[3]]))


class _FixedMetadataVersion:
    def __init__(self, mv: MetadataVersion) -> None:
        self.mv = mv

    def metadata_version(self, *, epoch: int = -1) -> MetadataVersion:
        return self.mv


@pytest.mark.parametrize("mv", [MV.IBP_3_7_IV0, MV.latest_testing()])
def test_same_records_as_the_controller(mv: MetadataVersion) -> None:
    """The controller's ClusterControlManager writes the same registration records, byte for byte and
    each kind in the same order; only the grouping differs (it writes controllers first, Kafka's image
    brokers first)."""
    records = image_records(IMAGE1) + DELTA2_RECORDS
    manager = ClusterControlManager(SnapshotRegistry(), cluster_id="c", feature_control=_FixedMetadataVersion(mv))
    for offset, r in enumerate(records):
        manager.replay(r.message, offset)
    image = replay_all(ClusterDelta(ClusterImage.EMPTY), records).apply()
    assert image == IMAGE3
    ours = [r.encode() for r in image_records(image, mv)]
    theirs = [r.encode() for r in manager.snapshot_records(LATEST_EPOCH)]
    controllers = len(image.controllers)
    assert ours == theirs[controllers:] + theirs[:controllers]
