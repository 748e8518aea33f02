"""ClusterControlManager on a real SnapshotRegistry and FeatureControlManager: Kafka's
ClusterControlManagerTest scenarios (exact messages), plus the heartbeat transitions Kafka
tests in ReplicationControlManagerTest and QuorumControllerTest (unfence on catch-up,
controlled shutdown, session expiry) at the records this manager writes."""
from __future__ import annotations

from typing import Any

import pytest

from kraft_node.metadata.controller.cluster_control import (
    BrokerHeartbeatReply,
    BrokerRegistration,
    BrokerRegistrationReply,
    ClusterControlManager,
    ControllerRegistration,
    DirectoryId,
    Endpoint,
)
from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.features import FeatureControlManager
from kraft_node.metadata.controller.heartbeats import UsableBroker
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
from kraft_node.protocol.generated.controller_registration import ControllerRegistrationRequest
from kraft_storage.messages.metadata import (
    BrokerRegistrationChangeRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import SnapshotRegistry

CLUSTER_ID = "fPZv1VBsRFmnlRvmGcOW9w"
MV = MetadataVersion
LATEST = MV.LATEST_PRODUCTION
PLAINTEXT = 0


class ManualClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class Env:
    """A registry, a FeatureControlManager at ``mv`` and a ClusterControlManager wired to it."""

    def __init__(self, mv: MetadataVersion = LATEST, *, activate: bool = True, session_timeout_ms: int = 1000,
                 has_leaderships: Any = None, unclean_shutdown_handler: Any = None):
        self.registry = SnapshotRegistry()
        self.clock = ManualClock()
        self.features = FeatureControlManager(self.registry)
        self.features.replay(FeatureLevelRecord(name="metadata.version", feature_level=mv.feature_level))
        kwargs: dict[str, Any] = {}
        if has_leaderships is not None:
            kwargs["has_leaderships"] = has_leaderships
        if unclean_shutdown_handler is not None:
            kwargs["broker_unclean_shutdown_handler"] = unclean_shutdown_handler
        self.cluster = ClusterControlManager(self.registry, cluster_id=CLUSTER_ID, feature_control=self.features,
                                             clock_ms=self.clock, session_timeout_ms=session_timeout_ms, **kwargs)
        self.features.cluster_support = self.cluster
        if activate:
            self.cluster.activate()

    def replay(self, records: list[ApiMessageAndVersion], first_offset: int) -> int:
        """Replay ``records`` at consecutive offsets; return the last one."""
        offset = first_offset - 1
        for offset, r in enumerate(records, first_offset):
            self.cluster.replay(r.message, offset)
        return offset

    def register(self, broker_id: int, offset: int, *, incarnation: Uuid | None = None, **kw: Any) -> int:
        """Register (and replay) a broker whose records go at ``offset``; return its epoch."""
        result = self.cluster.register_broker(
            broker_request(broker_id, incarnation=incarnation, **kw), offset, self.features.finalized_features())
        self.replay(result.records, offset)
        return result.response.epoch

    def heartbeat(self, broker_id: int, epoch: int, offset: int, *, want_fence: bool = False,
                  want_shut_down: bool = False, offline_log_dirs: tuple[Uuid, ...] = ()):
        req = BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=offset,
                                     want_fence=want_fence, want_shut_down=want_shut_down,
                                     offline_log_dirs=list(offline_log_dirs))
        assert self.cluster.track_broker_heartbeat(broker_id, epoch)
        return self.cluster.process_broker_heartbeat(req)


def incarnation_of(broker_id: int) -> Uuid:
    return Uuid((0xA1 << 120) | broker_id)


def dir_of(broker_id: int, n: int = 0) -> Uuid:
    return Uuid((0xD1 << 120) | (broker_id << 8) | n)


def broker_request(broker_id: int, *, incarnation: Uuid | None = None, cluster_id: str = CLUSTER_ID,
                   log_dirs: Any = None, features: Any = None, rack: str | None = None,
                   listeners: Any = None, is_migrating_zk_broker: bool = False) -> BrokerRegistrationRequest:
    if features is None:
        features = [(MV.FEATURE_NAME, MV.MINIMUM_VERSION.feature_level, LATEST.feature_level)]
    if listeners is None:
        listeners = [BrokerRegistrationRequest.Listener(name="PLAINTEXT", host="localhost", port=9092 + broker_id,
                                                        security_protocol=PLAINTEXT)]
    return BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=cluster_id,
        incarnation_id=incarnation if incarnation is not None else incarnation_of(broker_id),
        listeners=listeners, rack=rack, is_migrating_zk_broker=is_migrating_zk_broker,
        features=[BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                  for n, lo, hi in features],
        log_dirs=list(log_dirs) if log_dirs is not None else [dir_of(broker_id)])


def register_record(broker_id: int, epoch: int, **kw: Any) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch, end_points=[
        RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="example.com", port=9092 + kw.pop("port_delta", 0),
                                            security_protocol=PLAINTEXT)], **kw)


def api_error(fn: Any, *args: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args)
    return info.value


# -- replay ------------------------------------------------------------------------------------

@pytest.mark.parametrize("change_records", [False, True], ids=["fence-unfence-records", "registration-change"])
def test_replay(change_records):
    env = Env()
    cluster = env.cluster
    assert not cluster.is_unfenced(0)
    cluster.replay(register_record(1, 100), 100)
    cluster.check_broker_epoch(1, 100)
    assert api_error(cluster.check_broker_epoch, 1, 101) == \
        ApiError(Errors.STALE_BROKER_EPOCH, "Expected broker epoch 100, but got broker epoch 101")
    assert api_error(cluster.check_broker_epoch, 2, 100) == \
        ApiError(Errors.STALE_BROKER_EPOCH, "No broker registration found for broker id 2")
    assert not cluster.is_unfenced(0) and not cluster.is_unfenced(1)

    cluster.replay(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=100, fenced=-1) if change_records
                   else UnfenceBrokerRecord(id=1, epoch=100), 101)
    assert not cluster.is_unfenced(0) and cluster.is_unfenced(1)
    cluster.replay(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=100, fenced=1) if change_records
                   else FenceBrokerRecord(id=1, epoch=100), 102)
    assert not cluster.is_unfenced(0) and not cluster.is_unfenced(1)


def test_replay_register_broker_record():
    env = Env(activate=False)
    cluster = env.cluster
    assert not cluster.is_unfenced(0) and not cluster.in_controlled_shutdown(0)
    record = register_record(0, 100, rack=None, fenced=True, in_controlled_shutdown=True)
    cluster.replay(record, 100)
    assert not cluster.is_unfenced(0) and cluster.in_controlled_shutdown(0)
    record.in_controlled_shutdown = False
    cluster.replay(record, 100)
    assert not cluster.is_unfenced(0) and not cluster.in_controlled_shutdown(0)
    assert cluster.register_broker_record_offset(0) == 100
    record.fenced = False
    cluster.replay(record, 100)
    assert cluster.is_unfenced(0) and not cluster.in_controlled_shutdown(0)


def test_replay_broker_registration_change_record():
    env = Env(activate=False)
    cluster = env.cluster
    cluster.replay(register_record(0, 100, fenced=False), 100)
    assert cluster.is_unfenced(0) and not cluster.in_controlled_shutdown(0) and cluster.is_active(0)
    cluster.replay(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, in_controlled_shutdown=1), 101)
    assert cluster.is_unfenced(0) and cluster.in_controlled_shutdown(0) and not cluster.is_active(0)
    cluster.replay(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, fenced=-1), 102)
    assert cluster.is_unfenced(0) and cluster.in_controlled_shutdown(0)


def test_replay_errors_name_the_record():
    cluster = Env().cluster
    unregister = UnregisterBrokerRecord(broker_id=1, broker_epoch=100)
    with pytest.raises(ReplayError, match=r"^Unable to replay UnregisterBrokerRecord\(broker_id=1, broker_epoch=100\): "
                                          r"no broker registration found for that id$"):
        cluster.replay(unregister, 5)
    cluster.replay(register_record(1, 99), 99)
    with pytest.raises(ReplayError, match="no broker registration with that epoch found$"):
        cluster.replay(unregister, 100)
    with pytest.raises(ReplayError, match="no broker registration with that epoch found$"):
        cluster.replay(FenceBrokerRecord(id=1, epoch=98), 100)
    with pytest.raises(ReplayError, match="no broker registration found for that id$"):
        cluster.replay(UnfenceBrokerRecord(id=2, epoch=99), 100)
    with pytest.raises(ReplayError, match="unknown value for fenced field: fe$"):
        cluster.replay(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=99, fenced=-2), 100)
    with pytest.raises(ReplayError, match="unknown value for inControlledShutdown field: 2$"):
        cluster.replay(BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=99, in_controlled_shutdown=2), 100)
    bad_protocol = register_record(3, 101)
    bad_protocol.end_points[0].security_protocol = 9
    with pytest.raises(ReplayError, match="^Unknown security protocol 9 in listener PLAINTEXT$"):
        cluster.replay(bad_protocol, 101)
    with pytest.raises(ReplayError, match="cannot replay FeatureLevelRecord"):
        cluster.replay(FeatureLevelRecord(name="x", feature_level=1), 102)
    assert cluster.registration(1) == BrokerRegistration.from_record(register_record(1, 99))


def test_unregister():
    env = Env()
    cluster = env.cluster
    record = register_record(1, 100, incarnation_id=Uuid.from_string(CLUSTER_ID), rack="arack")
    cluster.replay(record, 100)
    assert cluster.registration(1) == BrokerRegistration.create(
        id=1, epoch=100, incarnation_id=Uuid.from_string(CLUSTER_ID),
        listeners=[Endpoint("PLAINTEXT", PLAINTEXT, "example.com", 9092)], rack="arack", fenced=True)
    assert cluster.register_broker_record_offset(1) == 100
    result = cluster.unregister_broker(1)
    assert result.records == [ApiMessageAndVersion(UnregisterBrokerRecord(broker_id=1, broker_epoch=100), 0)]
    env.replay(result.records, 101)
    assert cluster.registration(1) is None and cluster.brokers() == {}
    assert cluster.register_broker_record_offset(1) is None
    assert not cluster.heartbeat_manager.is_registered(1)
    assert api_error(cluster.unregister_broker, 1) == \
        ApiError(Errors.BROKER_ID_NOT_REGISTERED, "Broker ID 1 is not currently registered")


# -- registration ------------------------------------------------------------------------------

def test_registration_with_incorrect_cluster_id():
    env = Env()
    err = api_error(env.cluster.register_broker, broker_request(0, cluster_id="WIjw3grwRZmR2uOpdpVXbg"), 123,
                    env.features.finalized_features())
    assert err == ApiError(Errors.INCONSISTENT_CLUSTER_ID,
                           f"Expected cluster ID {CLUSTER_ID}, but got cluster ID WIjw3grwRZmR2uOpdpVXbg")


@pytest.mark.parametrize("mv", [MV.IBP_3_3_IV3, MV.IBP_3_4_IV0, MV.IBP_3_7_IV2, MV.latest_testing()], ids=str)
def test_register_broker_record_version(mv):
    env = Env(mv)
    log_dirs = [Uuid.from_string("63k9SN1nQOS0dFHSCIMA0A"), Uuid.from_string("Vm1MjsOCR1OjDDydOsDbzg")] \
        if mv.is_directory_assignment_supported() else []
    result = env.cluster.register_broker(
        broker_request(0, incarnation=Uuid.from_string("0H4fUu1xQEKXFYwB1aBjhg"), log_dirs=log_dirs, features=[],
                       listeners=[]), 123, {})
    expected = RegisterBrokerRecord(
        broker_id=0, broker_epoch=123, rack=None, incarnation_id=Uuid.from_string("0H4fUu1xQEKXFYwB1aBjhg"),
        fenced=True, log_dirs=log_dirs, in_controlled_shutdown=False,
        features=[RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=7,
                                                     max_supported_version=7)])
    assert result.records == [ApiMessageAndVersion(expected, mv.register_broker_record_version())]
    assert result.atomic
    assert result.response == BrokerRegistrationReply(123)
    assert mv.register_broker_record_version() == (3 if log_dirs else 2 if mv >= MV.IBP_3_4_IV0 else 1)
    for r in result.records:  # every record encodes at its version
        r.encode()


def test_registration_records_listeners_rack_and_features_in_order():
    env = Env()
    listeners = [BrokerRegistrationRequest.Listener(name=n, host="h", port=p, security_protocol=sp)
                 for n, p, sp in (("INTERNAL", 9093, 1), ("EXTERNAL", 9094, 3))]
    features = [("metadata.version", 7, LATEST.feature_level), ("group.version", 0, 1)]
    env.register(4, 50, listeners=listeners, features=features, rack="r1")
    registration = env.cluster.registration(4)
    assert list(registration.listeners) == ["INTERNAL", "EXTERNAL"]
    assert registration.listeners["EXTERNAL"] == Endpoint("EXTERNAL", 3, "h", 9094)
    assert dict(registration.supported_features) == {"metadata.version": (7, LATEST.feature_level),
                                                     "group.version": (0, 1)}
    assert registration.rack == "r1" and registration.fenced and registration.directories == (dir_of(4),)
    assert env.cluster.broker_supported() == [(4, registration.supported_features)]
    bad = [BrokerRegistrationRequest.Listener(name="X", host="h", port=1, security_protocol=7)]
    assert api_error(env.cluster.register_broker, broker_request(5, listeners=bad), 60,
                     env.features.finalized_features()) == \
        ApiError(Errors.UNKNOWN_SERVER_ERROR, "Unknown security protocol 7 in listener X")


def test_registration_with_unsupported_feature():
    env = Env(MV.IBP_4_0_IV3)
    env.features.replay(FeatureLevelRecord(name="transaction.version", feature_level=2))
    req = broker_request(0, features=[("metadata.version", 7, MV.IBP_4_0_IV3.feature_level)])
    assert api_error(env.cluster.register_broker, req, 123, env.features.finalized_features()) == ApiError(
        Errors.UNSUPPORTED_VERSION, "Unable to register because the broker does not support finalized version 2 of "
                                    "transaction.version. The broker wants a version between 0 and 0, inclusive.")
    req = broker_request(0, features=[("metadata.version", 7, MV.IBP_4_0_IV3.feature_level),
                                      ("transaction.version", 0, 1)])
    assert api_error(env.cluster.register_broker, req, 123, env.features.finalized_features()).message == (
        "Unable to register because the broker does not support finalized version 2 of transaction.version. "
        "The broker wants a version between 0 and 1, inclusive.")
    req = broker_request(0, features=[("metadata.version", 7, MV.IBP_4_0_IV3.feature_level),
                                      ("transaction.version", 0, 2), ("share.version", 0, 1)])
    result = env.cluster.register_broker(req, 123, env.features.finalized_features())
    assert [f.name for f in result.records[0].message.features] == \
        ["metadata.version", "transaction.version", "share.version"]


def test_registration_with_unsupported_kraft_version():
    env = Env(MV.IBP_3_9_IV0)
    # the controller adds the Raft layer's kraft.version to the finalized features
    finalized = dict(env.features.finalized_features(), **{"kraft.version": 1})
    mv_only = [("metadata.version", MV.IBP_3_9_IV0.feature_level, MV.IBP_3_9_IV0.feature_level)]
    message = ("Unable to register because the broker does not support finalized version 1 of kraft.version. "
               "The broker wants a version between 0 and 0, inclusive.")
    assert api_error(env.cluster.register_broker, broker_request(0, features=mv_only), 123, finalized) == \
        ApiError(Errors.UNSUPPORTED_VERSION, message)
    assert api_error(env.cluster.register_broker, broker_request(0, features=mv_only + [("kraft.version", 0, 0)]),
                     123, finalized).message == message
    env.cluster.register_broker(broker_request(0, features=mv_only + [("kraft.version", 1, 1)]), 123, finalized)


def test_registration_with_unsupported_metadata_version():
    env = Env(MV.IBP_3_5_IV0)
    finalized = env.features.finalized_features()
    assert api_error(env.cluster.register_broker, broker_request(0, features=[]), 123, finalized) == ApiError(
        Errors.UNSUPPORTED_VERSION, "Unable to register because the broker does not support finalized version 9 of "
                                    "metadata.version. The broker wants a version between 7 and 7, inclusive.")
    req = broker_request(0, features=[("metadata.version", MV.IBP_3_7_IV0.feature_level, LATEST.feature_level)])
    assert api_error(env.cluster.register_broker, req, 123, finalized).message == (
        "Unable to register because the broker does not support finalized version 9 of metadata.version. "
        f"The broker wants a version between 15 and {LATEST.feature_level}, inclusive.")


def test_zk_brokers_are_refused():
    env = Env()
    assert api_error(env.cluster.register_broker, broker_request(0, is_migrating_zk_broker=True), 10,
                     env.features.finalized_features()) == \
        ApiError(Errors.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers.")


def test_register_controller_with_older_metadata_version():
    env = Env(MV.IBP_3_6_IV2)
    assert api_error(env.cluster.register_controller, ControllerRegistrationRequest(controller_id=1)) == ApiError(
        Errors.UNSUPPORTED_VERSION, "The current MetadataVersion is too old to support controller registrations.")
    assert api_error(env.cluster.controller_supported).error == Errors.UNSUPPORTED_VERSION


def test_register_controller():
    env = Env(MV.IBP_3_7_IV0)
    incarnation = Uuid.from_string("mISEfEFwQIuaD1gKCc5tzQ")
    result = env.cluster.register_controller(ControllerRegistrationRequest(
        controller_id=3000, incarnation_id=incarnation, zk_migration_ready=True,
        listeners=[ControllerRegistrationRequest.Listener(name="CONTROLLER", host="c", port=9093,
                                                          security_protocol=PLAINTEXT)],
        features=[ControllerRegistrationRequest.Feature(name="metadata.version", min_supported_version=7,
                                                        max_supported_version=15)]))
    assert result.atomic and result.response is None
    [record] = result.records
    assert record == ApiMessageAndVersion(RegisterControllerRecord(
        controller_id=3000, incarnation_id=incarnation, zk_migration_ready=False,
        end_points=[RegisterControllerRecord.ControllerEndpoint(name="CONTROLLER", host="c", port=9093,
                                                                security_protocol=PLAINTEXT)],
        features=[RegisterControllerRecord.ControllerFeature(name="metadata.version", min_supported_version=7,
                                                             max_supported_version=15)]), 0)
    assert env.cluster.controllers() == {}
    env.replay(result.records, 5)
    registration = env.cluster.controller_registration(3000)
    assert registration == ControllerRegistration.from_record(record.message)
    assert dict(registration.supported_features) == {"metadata.version": (7, 15)}
    assert env.cluster.controller_supported() == [(3000, registration.supported_features)]
    # the feature manager asks the cluster what every controller supports
    assert env.features.cluster_support.controller_supported() == [(3000, {"metadata.version": (7, 15)})]


def test_register_with_duplicate_directory_id():
    env = Env(activate=False)
    record = register_record(0, 100, log_dirs=[Uuid.from_string("yJGxmjfbQZSVFAlNM3uXZg"),
                                               Uuid.from_string("Mj3CW3OSRi29cFeNJlXuAQ")])
    env.cluster.replay(record, 100)
    env.cluster.activate()
    # the same broker may register again with the same directories
    env.register(0, 101, incarnation=record.incarnation_id, log_dirs=record.log_dirs)

    def refused(broker_id: int, dirs: list[Uuid]) -> str:
        return api_error(env.cluster.register_broker, broker_request(broker_id, incarnation=Uuid.random(),
                                                                     log_dirs=dirs), 200, {}).message

    assert refused(1, []) == "No directories specified in request"
    assert refused(1, [Uuid.from_string("TyNK6XSSQJaJc2q9uflNHg"), Uuid.from_string("Mj3CW3OSRi29cFeNJlXuAQ")]) \
        == "Broker 0 is already registered with directory Mj3CW3OSRi29cFeNJlXuAQ"
    assert refused(1, [Uuid.from_string("TyNK6XSSQJaJc2q9uflNHg"), DirectoryId.UNASSIGNED]) == \
        "Reserved directory ID in request"
    assert refused(1, [Uuid.from_string("aR6lssMrSeyXRf65hiUovQ")] * 2) == "Duplicate directory ID in request"
    assert api_error(env.cluster.register_broker, broker_request(1, log_dirs=[]), 200, {}).error == \
        Errors.INVALID_REGISTRATION


def test_directories_are_not_checked_before_directory_assignment():
    env = Env(MV.IBP_3_7_IV1)
    env.register(1, 10, log_dirs=[])
    result = env.cluster.register_broker(broker_request(2, log_dirs=[dir_of(2)]), 11, {})
    assert result.records[0].message.log_dirs == []


def test_has_online_dir():
    env = Env()
    env.register(1, 10, log_dirs=[Uuid.from_string("dir1SEbpRuG1dcpTRGOvJw"),
                                  Uuid.from_string("dir2xaEwR2m3JHTiy7PWwA")])
    cluster = env.cluster
    assert cluster.registration(1).has_online_dir(Uuid.from_string("dir1SEbpRuG1dcpTRGOvJw"))
    assert cluster.has_online_dir(1, Uuid.from_string("dir1SEbpRuG1dcpTRGOvJw"))
    assert cluster.has_online_dir(1, Uuid.from_string("dir2xaEwR2m3JHTiy7PWwA"))
    assert cluster.has_online_dir(1, DirectoryId.UNASSIGNED)
    assert cluster.has_online_dir(1, DirectoryId.MIGRATING)
    assert not cluster.has_online_dir(1, Uuid.from_string("otherAA1QFK4U1GWzkjZ5A"))
    assert not cluster.has_online_dir(77, Uuid.from_string("8xVRVs6UQHGVonA9SRYseQ"))
    assert not cluster.has_online_dir(1, DirectoryId.LOST)


def test_default_dir():
    env = Env()
    env.cluster.replay(register_record(1, 100, log_dirs=[]), 100)
    env.register(2, 101, log_dirs=[Uuid.from_string("singleOnlineDirectoryA")])
    env.register(3, 102, log_dirs=[Uuid.from_string("s4fRmyNFSH6J0vI8AVA5ew"),
                                   Uuid.from_string("UbtxBcqYSnKUEMcnTyZFWw")])
    assert env.cluster.default_dir(1) == DirectoryId.MIGRATING
    assert env.cluster.default_dir(2) == Uuid.from_string("singleOnlineDirectoryA")
    assert env.cluster.default_dir(3) == DirectoryId.UNASSIGNED
    assert env.cluster.default_dir(4) == DirectoryId.UNASSIGNED


@pytest.mark.parametrize("new_incarnation", [False, True])
def test_re_registration_and_broker_epoch(new_incarnation):
    env = Env()
    first = Uuid.from_string("mISEfEFwQIuaD1gKCc5tzQ")
    second = Uuid.from_string("07OOcU7MQFeSmGAFPP2Zww") if new_incarnation else first
    assert env.register(1, 100, incarnation=first) == 100
    assert env.register(1, 111, incarnation=second) == (111 if new_incarnation else 100)
    registration = env.cluster.registration(1)
    assert registration.incarnation_id == second
    assert registration.epoch == (111 if new_incarnation else 100)
    assert env.cluster.register_broker_record_offset(1) == 111  # the offset of the newest record


def test_same_incarnation_keeps_its_state_and_a_new_one_starts_fenced():
    env = Env()
    epoch = env.register(1, 100)
    env.replay(env.heartbeat(1, epoch, 100).records, 101)
    env.replay(env.cluster.register_broker(broker_request(1), 102, env.features.finalized_features()).records, 102)
    assert env.cluster.is_unfenced(1)  # a retried registration does not fence a running broker
    assert not env.cluster.heartbeat_manager.is_fenced(1)


def test_duplicate_registration_while_the_session_is_live():
    calls = []
    env = Env(unclean_shutdown_handler=lambda broker_id, records: calls.append((broker_id, len(records))))
    epoch = env.register(1, 100)
    assert calls == [(1, 0)]  # a first registration is a new incarnation too
    env.replay(env.heartbeat(1, epoch, 100).records, 101)
    other = broker_request(1, incarnation=Uuid.from_string("07OOcU7MQFeSmGAFPP2Zww"))
    assert api_error(env.cluster.register_broker, other, 200, env.features.finalized_features()) == \
        ApiError(Errors.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id.")
    env.clock.now += 1001  # the old session expires
    result = env.cluster.register_broker(other, 200, env.features.finalized_features())
    assert calls == [(1, 0), (1, 0)]
    assert result.response == BrokerRegistrationReply(200) and result.records[-1].message.fenced
    env.replay(result.records, 200)
    registration = env.cluster.registration(1)
    assert (registration.epoch, registration.fenced) == (200, True)
    assert env.cluster.heartbeat_manager.is_fenced(1)


def test_unclean_shutdown_records_come_before_the_registration():
    marker = ApiMessageAndVersion(FenceBrokerRecord(id=7, epoch=1), 0)
    env = Env(unclean_shutdown_handler=lambda broker_id, records: records.append(marker))
    result = env.cluster.register_broker(broker_request(1), 10, env.features.finalized_features())
    assert result.records[0] is marker and isinstance(result.records[1].message, RegisterBrokerRecord)
    assert result.atomic


def test_standby_refuses_active_only_operations():
    env = Env(activate=False)
    cluster = env.cluster
    assert not cluster.active and not cluster.track_broker_heartbeat(1, 1)
    with pytest.raises(RuntimeError, match="^ClusterControlManager is not active.$"):
        cluster.register_broker(broker_request(1), 10, env.features.finalized_features())
    with pytest.raises(RuntimeError, match="^ClusterControlManager is not active.$"):
        cluster.fence_stale_broker()
    cluster.activate()
    cluster.deactivate()
    with pytest.raises(RuntimeError, match="^ClusterControlManager is not active.$"):
        cluster.usable_brokers()


# -- heartbeats --------------------------------------------------------------------------------

def test_heartbeats_unfence_a_broker_once_it_has_caught_up():
    env = Env()
    epoch = env.register(0, 100)
    result = env.heartbeat(0, epoch, 99)
    assert result.records == []
    assert result.response == BrokerHeartbeatReply(is_caught_up=False, is_fenced=True, in_controlled_shutdown=False,
                                                   should_shut_down=False)
    result = env.heartbeat(0, epoch, 99, want_fence=True)
    assert result.records == [] and result.response.is_fenced
    result = env.heartbeat(0, epoch, 100)
    assert result.records == [ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, fenced=-1), 0)]
    assert result.response == BrokerHeartbeatReply(True, False, False, False)
    assert not env.cluster.is_unfenced(0)  # only replay changes hard state
    env.replay(result.records, 101)
    assert env.cluster.is_unfenced(0) and env.cluster.active_broker_count() == 1
    result = env.heartbeat(0, epoch, 101)
    assert result.records == [] and result.response == BrokerHeartbeatReply(True, False, False, False)


def test_heartbeat_errors():
    env = Env()
    req = BrokerHeartbeatRequest(broker_id=3, broker_epoch=10, current_metadata_offset=5)
    assert api_error(env.cluster.process_broker_heartbeat, req) == \
        ApiError(Errors.STALE_BROKER_EPOCH, "Receive a heartbeat from broker 3 before registration")
    env.register(3, 10)
    req.broker_epoch = 9
    assert api_error(env.cluster.process_broker_heartbeat, req) == \
        ApiError(Errors.STALE_BROKER_EPOCH, "Expected broker epoch 10, but got broker epoch 9")


def test_want_fence_fences_an_unfenced_broker():
    env = Env()
    epoch = env.register(0, 100)
    env.replay(env.heartbeat(0, epoch, 100).records, 101)
    result = env.heartbeat(0, epoch, 101, want_fence=True)
    assert result.records == [ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, fenced=1), 0)]
    assert result.response == BrokerHeartbeatReply(True, True, False, False)
    env.replay(result.records, 102)
    assert not env.cluster.is_unfenced(0) and env.cluster.fenced_broker_ids() == {0}


def test_shutdown_of_a_broker_that_leads_nothing_is_immediate():
    env = Env()
    epoch = env.register(0, 100)
    env.replay(env.heartbeat(0, epoch, 100).records, 101)
    result = env.heartbeat(0, epoch, 101, want_shut_down=True)
    assert result.records == [ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, fenced=1), 0)]
    assert result.response == BrokerHeartbeatReply(True, True, False, True)
    env.replay(result.records, 102)
    # its session ended with the shutdown: the restarted process registers at once
    assert env.register(0, 103, incarnation=Uuid.random()) == 103


def test_controlled_shutdown():
    leaders = {0}
    env = Env(has_leaderships=lambda broker_id: broker_id in leaders)
    e0, e1 = env.register(0, 100), env.register(1, 101)
    env.replay(env.heartbeat(0, e0, 101).records, 102)
    env.replay(env.heartbeat(1, e1, 102).records, 103)

    result = env.heartbeat(0, e0, 103, want_shut_down=True)
    assert result.records == [ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, in_controlled_shutdown=1), 1)]
    assert result.response == BrokerHeartbeatReply(True, False, True, False)
    end = env.replay(result.records, 104)
    env.cluster.update_controlled_shutdown_offset(0, end)
    assert env.cluster.in_controlled_shutdown(0) and not env.cluster.is_active(0)

    # still leading: it waits, and the controlled shutdown is not recorded twice
    result = env.heartbeat(0, e0, 104, want_shut_down=True)
    assert result.records == [] and result.response == BrokerHeartbeatReply(True, False, True, False)
    leaders.clear()
    # broker 1 has not read offset 104 yet
    env.heartbeat(1, e1, 103)
    assert env.heartbeat(0, e0, 104, want_shut_down=True).response.in_controlled_shutdown
    env.heartbeat(1, e1, 104)
    result = env.heartbeat(0, e0, 104, want_shut_down=True)
    assert result.records == [ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, fenced=1), 0)]
    assert result.response == BrokerHeartbeatReply(True, True, False, True)
    env.replay(result.records, 105)
    assert not env.cluster.is_unfenced(0) and env.cluster.in_controlled_shutdown(0)


def test_fence_stale_broker_fences_every_expired_broker_in_one_call():
    """Kafka fences one stale broker per task run; here one run fences every broker whose
    session expired (a zone going dark is one walk, not one run per broker), each with its own
    fence record, in the order the sessions were found expired."""
    env = Env(session_timeout_ms=1000)
    epochs = {b: env.register(b, 100 + b) for b in range(3)}
    offset = 103
    for b in range(3):
        offset = env.replay(env.heartbeat(b, epochs[b], 110).records, offset + 1)
    assert env.cluster.fence_stale_broker().response is False
    env.clock.now += 600
    env.heartbeat(2, epochs[2], 110)  # only broker 2 keeps heartbeating
    env.clock.now += 500
    result = env.cluster.fence_stale_broker()
    assert result.response is True
    assert [(r.message.broker_id, r.message.fenced) for r in result.records] == [(0, 1), (1, 1)]
    offset = env.replay(result.records, offset + 1)
    assert env.cluster.fence_stale_broker() == ControllerResult.of([], False)
    assert env.cluster.fenced_broker_ids() == {0, 1} and env.cluster.is_unfenced(2)
    assert env.cluster.fenced_broker_count() == 2 and env.cluster.active_broker_count() == 1


def test_fence_stale_broker_skips_sessions_that_are_no_longer_current():
    env = Env(session_timeout_ms=1000)
    epoch = env.register(0, 100)
    env.replay(env.heartbeat(0, epoch, 100).records, 101)
    env.cluster.track_broker_heartbeat(0, 55)   # a stale epoch
    env.cluster.track_broker_heartbeat(9, 1)    # an unknown broker
    env.register(1, 102)
    env.cluster.track_broker_heartbeat(1, 102)  # a fenced broker
    env.clock.now += 1001
    env.cluster.track_broker_heartbeat(0, epoch)
    results = []
    while (result := env.cluster.fence_stale_broker()).response:
        results.append(result)
    # the three expired sessions are removed by one run, none of them fenced
    assert len(results) == 1 and results[0].records == []
    assert env.cluster.heartbeat_manager.tracker.sessions().keys() == {(0, epoch)}
    assert env.cluster.is_unfenced(0)


def test_activation_gives_every_broker_a_fresh_session():
    env = Env(activate=False, session_timeout_ms=1000)
    env.cluster.replay(register_record(0, 100, fenced=False), 100)
    env.cluster.replay(register_record(1, 101, fenced=True), 101)
    env.clock.now = 5000
    env.cluster.activate()
    manager = env.cluster.heartbeat_manager
    assert manager.tracker.sessions() == {(0, 100): 5000, (1, 101): 5000}
    assert not manager.is_fenced(0) and manager.is_fenced(1)
    assert env.cluster.fence_stale_broker().response is False
    env.clock.now += 1001
    fenced = []
    while (result := env.cluster.fence_stale_broker()).response:
        fenced += result.records
    assert fenced == [ApiMessageAndVersion(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, fenced=1), 0)]
    env.cluster.deactivate()
    assert not env.cluster.active


def test_expired_heartbeat_counts_and_keeps_the_reported_offset():
    env = Env()
    epoch = env.register(0, 100)
    env.replay(env.heartbeat(0, epoch, 100).records, 101)
    req = BrokerHeartbeatRequest(broker_id=0, broker_epoch=epoch, current_metadata_offset=150, want_shut_down=True)
    env.cluster.process_expired_broker_heartbeat(req)
    assert env.cluster.timed_out_heartbeats == 1
    manager = env.cluster.heartbeat_manager
    assert manager.metadata_offset(0) == 150 and not manager.is_fenced(0)
    req.broker_epoch = 1
    assert api_error(env.cluster.process_expired_broker_heartbeat, req).error == Errors.STALE_BROKER_EPOCH


def test_offline_directories_are_recorded():
    env = Env()
    dirs = [dir_of(0, 1), dir_of(0, 2), dir_of(0, 3)]
    epoch = env.register(0, 100, log_dirs=dirs)
    result = env.heartbeat(0, epoch, 100, offline_log_dirs=(dir_of(0, 2), dir_of(9, 9)))
    assert result.records[-1] == ApiMessageAndVersion(
        BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, log_dirs=[dir_of(0, 1), dir_of(0, 3)]), 2)
    env.replay(result.records, 101)
    assert env.cluster.registration(0).directories == (dir_of(0, 1), dir_of(0, 3))
    assert not env.cluster.has_online_dir(0, dir_of(0, 2))
    # a directory no longer online is no longer owned: another broker may register it
    env.register(1, 110, log_dirs=[dir_of(0, 2)])
    # reporting it again changes nothing
    assert env.heartbeat(0, epoch, 111, offline_log_dirs=(dir_of(0, 2),)).records == []


def test_fence_and_unfence_records_before_registration_change_records():
    class OldMetadataVersion(MetadataVersion):
        def is_broker_registration_change_record_supported(self) -> bool:
            return False

    class Features:
        def metadata_version(self, *, epoch: int = 0) -> MetadataVersion:
            return OldMetadataVersion(6, "3.3", "IV2", True)

    registry = SnapshotRegistry()
    cluster = ClusterControlManager(registry, cluster_id=CLUSTER_ID, feature_control=Features())
    cluster.activate()
    cluster.replay(register_record(0, 100), 100)
    hb = BrokerHeartbeatRequest(broker_id=0, broker_epoch=100, current_metadata_offset=100)
    result = cluster.process_broker_heartbeat(hb)
    assert result.records == [ApiMessageAndVersion(UnfenceBrokerRecord(id=0, epoch=100), 0)]
    cluster.replay(result.records[0].message, 101)
    hb.want_fence = True
    assert cluster.process_broker_heartbeat(hb).records == [ApiMessageAndVersion(FenceBrokerRecord(id=0, epoch=100), 0)]


def test_usable_brokers():
    env = Env()
    for b in range(4):
        epoch = env.register(b, 100 + b, rack=f"rack{b % 2}")
        if b != 3:
            env.replay(env.heartbeat(b, epoch, 200).records, 110 + b)
    assert set(env.cluster.usable_brokers()) == {UsableBroker(0, "rack0", False), UsableBroker(1, "rack1", False),
                                                 UsableBroker(2, "rack0", False), UsableBroker(3, "rack1", True)}
    env.cluster.update_controlled_shutdown_offset(1, 300)
    assert {u.id for u in env.cluster.usable_brokers()} == {0, 2, 3}


# -- reads at an epoch, revert, snapshots -------------------------------------------------------

def test_reads_at_an_epoch_and_revert():
    env = Env()
    epoch = env.register(0, 100)
    env.registry.get_or_create_snapshot(100)
    env.replay(env.heartbeat(0, epoch, 100).records, 101)
    env.register(1, 102)
    assert env.cluster.is_unfenced(0) and not env.cluster.is_unfenced(0, epoch=100)
    assert set(env.cluster.brokers()) == {0, 1} and set(env.cluster.brokers(epoch=100)) == {0}
    assert env.cluster.registration(1, epoch=100) is None
    assert env.cluster.register_broker_record_offset(1, epoch=100) is None
    assert env.cluster.active_broker_count(epoch=100) == 0 and env.cluster.fenced_broker_count(epoch=100) == 1
    env.registry.revert_to_snapshot(100)
    assert set(env.cluster.brokers()) == {0} and not env.cluster.is_unfenced(0)
    # the directory of the reverted registration is free again
    env.register(2, 101, log_dirs=[dir_of(1)])


def test_snapshot_records_rebuild_the_state():
    env = Env(MV.IBP_3_7_IV0)
    for i in range(3):
        env.cluster.replay(register_record(i, 100, port_delta=i, rack=None), 100)
    for i in range(2):
        env.cluster.replay(UnfenceBrokerRecord(id=i, epoch=100), 101)
    env.cluster.replay(BrokerRegistrationChangeRecord(broker_id=0, broker_epoch=100, in_controlled_shutdown=1), 102)
    env.replay(env.cluster.register_controller(ControllerRegistrationRequest(
        controller_id=7, incarnation_id=incarnation_of(7))).records, 103)
    env.registry.get_or_create_snapshot(103)
    records = list(env.cluster.snapshot_records(103))
    version = MV.IBP_3_7_IV0.register_broker_record_version()
    assert records[0] == ApiMessageAndVersion(RegisterControllerRecord(
        controller_id=7, incarnation_id=incarnation_of(7)), 0)
    assert records[1:] == [
        ApiMessageAndVersion(register_record(0, 100, rack=None, fenced=False, in_controlled_shutdown=True), version),
        ApiMessageAndVersion(register_record(1, 100, port_delta=1, rack=None, fenced=False), version),
        ApiMessageAndVersion(register_record(2, 100, port_delta=2, rack=None, fenced=True), version)]
    copy = Env(MV.IBP_3_7_IV0).cluster
    for r in records:
        copy.replay(r.message, 103)
    assert copy.brokers() == env.cluster.brokers() and copy.controllers() == env.cluster.controllers()


def test_fence_stale_broker_holds_pending_changes_back_while_the_commits_lag():
    """Back-pressure (session 15): above ``max_uncommitted_for_continuation`` records written and
    not committed, the stale-broker task continues no pending partition change (it reports more
    to do, and writes nothing); expired sessions are still fenced."""
    env = Env(session_timeout_ms=1000)
    calls = []

    class Pending:
        def continue_pending(self, limit=None):
            calls.append(limit)
            return ControllerResult.of([], False)

        def __getattr__(self, name):
            return getattr(lifecycle, name)
    lifecycle = env.cluster.lifecycle
    env.cluster._lifecycle = Pending()
    backlog = [0]
    env.cluster.uncommitted_records = lambda: backlog[0]
    assert env.cluster.fence_stale_broker().response is False and calls == [None]
    backlog[0] = env.cluster.max_uncommitted_for_continuation + 1
    result = env.cluster.fence_stale_broker()
    assert result.response is True and result.records == [] and calls == [None]  # held back
    epoch = env.register(0, 100)
    env.replay(env.heartbeat(0, epoch, 100).records, 101)
    env.clock.now += 1500
    result = env.cluster.fence_stale_broker()  # an expired session is fenced all the same
    assert [r.message.broker_id for r in result.records] == [0] and calls == [None]
    backlog[0] = 0
    env.cluster.fence_stale_broker()
    assert calls == [None, None]
