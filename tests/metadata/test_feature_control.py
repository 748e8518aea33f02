"""FeatureControlManager and QuorumFeatures (kraft_node.metadata.controller.features): Kafka's
FeatureControlManagerTest and QuorumFeaturesTest scenarios, restated on a real SnapshotRegistry,
with Kafka's exact messages.  Kafka's tests use a test-only feature (test.feature.version);
here transaction.version and group.version play its part."""
from __future__ import annotations

import pytest

from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.features import (
    FeatureControlManager,
    QuorumFeatures,
    UnknownMetadataVersionError,
    UpgradeType,
    update_failed_error,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import MetadataVersion, supported_features
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.metadata import FeatureLevelRecord, NoOpRecord
from kraft_storage.timeline import SnapshotNotFoundError, SnapshotRegistry

MV = MetadataVersion
TV = "transaction.version"
GV = "group.version"
ELR = "eligible.leader.replicas.version"
KV = "kraft.version"
MVN = "metadata.version"
SAFE, UNSAFE, UPGRADE = UpgradeType.SAFE_DOWNGRADE, UpgradeType.UNSAFE_DOWNGRADE, UpgradeType.UPGRADE


class Cluster:
    """A ClusterFeatureSupportDescriber over fixed lists (Kafka's fake describer)."""

    def __init__(self, brokers=(), controllers=()):
        self.brokers, self.controllers = list(brokers), list(controllers)

    def broker_supported(self):
        return iter(self.brokers)

    def controller_supported(self):
        return iter(self.controllers)


class KRaft:
    def __init__(self, version=0, error=None):
        self.version, self.error, self.calls = version, error, []

    def kraft_version(self):
        return self.version

    def upgrade_kraft_version(self, epoch, version, validate_only):
        self.calls.append((epoch, version, validate_only))
        if self.error is not None:
            raise self.error
        if not validate_only:
            self.version = version


def quorum(*triples, node_id=0, voters=()):
    """Kafka's features(...): the default supported map (unstable levels on) plus overrides."""
    local = QuorumFeatures.default_supported_feature_map(True)
    for i in range(0, len(triples), 3):
        local[triples[i]] = (triples[i + 1], triples[i + 2])
    return QuorumFeatures(node_id, local, list(voters))


def manager(qf=None, *, mv=None, registry=None, cluster=None, kraft=None):
    m = FeatureControlManager(registry if registry is not None else SnapshotRegistry(), qf,
                              cluster_support=cluster, kraft_version_accessor=kraft)
    if mv is not None:
        m.replay(FeatureLevelRecord(name=MVN, feature_level=mv.feature_level), 0)
    return m


def record(name, level):
    return ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0)


def invalid(text):
    return ApiError(Errors.INVALID_UPDATE_VERSION, text)


def refused(feature, text):
    return ControllerResult.of([], {feature: invalid(text)})


def replay_all(m, result, offset=0):
    for r in result.records:
        if isinstance(r.message, FeatureLevelRecord):
            m.replay(r.message, offset)


# ---------------------------------------------------------------- FeatureControlManagerTest

def test_update_features():
    registry = SnapshotRegistry()
    m = manager(quorum(TV, 0, 2), mv=MV.MINIMUM_VERSION, registry=registry)
    registry.idempotent_create_snapshot(-1)
    assert m.finalized_features(epoch=-1) == {MVN: 7}
    assert m.update_features({TV: 3}, {TV: SAFE}, False) == refused(
        TV, "Invalid update version 3 for feature transaction.version. Local controller 0 only supports versions 0-2")
    result = m.update_features({TV: 1, "bar": 1}, {}, False)
    assert result.response == {"bar": invalid(
        "Invalid update version 1 for feature bar. Local controller 0 does not support this feature.")}
    assert result.records == []
    result = m.update_features({TV: 1}, {}, False)
    assert result == ControllerResult.atomic_of([record(TV, 1)], {TV: None})
    assert result.atomic


def test_replay():
    registry = SnapshotRegistry()
    registry.idempotent_create_snapshot(-1)
    m = manager(quorum("foo", 1, 2), mv=MV.MINIMUM_VERSION, registry=registry)
    m.replay(FeatureLevelRecord(name="foo", feature_level=2), 1)
    registry.idempotent_create_snapshot(123)
    assert m.finalized_features(epoch=123) == {MVN: 7, "foo": 2}


def test_replay_of_a_kraft_version_record_changes_nothing():
    """KAFKA-18979: kraft.version lives in the Raft log; a FeatureLevelRecord for it is skipped."""
    registry = SnapshotRegistry()
    m = manager(quorum("foo", 1, 2), mv=MV.MINIMUM_VERSION, registry=registry)
    m.replay(FeatureLevelRecord(name=KV, feature_level=1), 1)
    registry.idempotent_create_snapshot(123)
    assert m.finalized_features(epoch=123) == {MVN: 7}


def test_update_features_error_cases():
    registry = SnapshotRegistry()
    m = manager(quorum("foo", 1, 5, TV, 0, 3), mv=MV.MINIMUM_VERSION, registry=registry,
                cluster=Cluster(brokers=[(5, {TV: (0, 2)})]))
    assert m.update_features({"foo": 3}, {"foo": SAFE}, False) == refused(
        "foo", "Invalid update version 3 for feature foo. Broker 5 does not support this feature.")
    result = m.update_features({TV: 2}, {}, False)
    assert result.response == {TV: None}
    m.replay(result.records[0].message, 2)
    registry.idempotent_create_snapshot(3)
    assert m.update_features({TV: 1}, {}, False) == refused(
        TV, "Invalid update version 1 for feature transaction.version. Can't downgrade the version of this feature "
            "without setting the upgrade type to either safe or unsafe downgrade.")
    assert m.update_features({TV: 1}, {TV: SAFE}, False) == ControllerResult.atomic_of([record(TV, 1)], {TV: None})
    # a broker that supports only a lower range
    assert m.update_features({TV: 3}, {}, False) == refused(
        TV, "Invalid update version 3 for feature transaction.version. Broker 5 only supports versions 0-2")


def test_replay_records():
    m = manager(quorum(GV, 0, 5, TV, 0, 2), mv=MV.MINIMUM_VERSION)
    result = m.update_features({GV: 1, TV: 2}, {}, False)
    assert [r.message for r in result.records] == [FeatureLevelRecord(name=GV, feature_level=1),
                                                   FeatureLevelRecord(name=TV, feature_level=2)]
    replay_all(m, result)
    assert m.metadata_version() is MV.MINIMUM_VERSION
    assert m.finalized_features() == {MVN: 7, GV: 1, TV: 2}
    assert m.feature_level(GV) == 1 and m.feature_level("share.version") == 0


def mv_manager(level=MV.IBP_3_4_IV0, top=MV.IBP_3_6_IV0):
    """Kafka's createTestManager: metadata.version supported 3.3-IV3..3.6-IV0, at 3.4-IV0."""
    return manager(quorum(MVN, MV.MINIMUM_VERSION.feature_level, top.feature_level), mv=level)


def test_apply_metadata_version_change_record():
    m = mv_manager()
    m.replay(FeatureLevelRecord(name=MVN, feature_level=m.metadata_version().feature_level + 1), 1)
    assert m.metadata_version() is MV.IBP_3_5_IV0


def test_cannot_downgrade_to_higher_version():
    for kind in (SAFE, UNSAFE):
        assert mv_manager().update_features({MVN: 9}, {MVN: kind}, True) == refused(
            MVN, "Invalid update version 9 for feature metadata.version. Can't downgrade to a newer version.")


def test_cannot_upgrade_to_lower_version():
    assert mv_manager(MV.IBP_3_5_IV1).update_features({MVN: 9}, {MVN: UPGRADE}, True) == refused(
        MVN, "Invalid update version 9 for feature metadata.version. Can't downgrade the version of this feature "
             "without setting the upgrade type to either safe or unsafe downgrade.")


def test_can_upgrade_to_higher_version():
    assert mv_manager().update_features({MVN: 9}, {MVN: UPGRADE}, True) == ControllerResult.of([], {MVN: None})
    result = mv_manager().update_features({MVN: 9}, {MVN: UPGRADE}, False)
    assert result == ControllerResult.atomic_of([record(MVN, 9)], {MVN: None})


def test_cannot_use_safe_downgrade_if_metadata_changed():
    assert mv_manager().update_features({MVN: 7}, {MVN: SAFE}, True) == refused(
        MVN, "Unsupported metadata.version downgrade from 8 to 7. Refusing to perform the requested downgrade "
             "because it might delete metadata information.")


def test_unsafe_downgrade_is_temporarily_disabled():
    assert mv_manager().update_features({MVN: 7}, {MVN: UNSAFE}, True) == refused(
        MVN, "Unsupported metadata.version downgrade from 8 to 7. Unsafe metadata downgrade is not supported in "
             "this version.")


def test_can_use_safe_downgrade_if_metadata_did_not_change():
    m = mv_manager(MV.IBP_3_5_IV0)
    assert m.update_features({MVN: 8}, {MVN: SAFE}, True) == ControllerResult.of([], {MVN: None})
    # 4.2-IV1 down to 4.0-IV1: no level in between changed the metadata
    m = manager(quorum(), mv=MV.IBP_4_2_IV1)
    assert m.update_features({MVN: 23}, {MVN: SAFE}, False) == ControllerResult.atomic_of(
        [record(MVN, 23)], {MVN: None})


def test_cannot_downgrade_before_minimum_version():
    m = manager(quorum(MVN, 7, 29), mv=MV.MINIMUM_VERSION)
    assert m.update_features({MVN: 6}, {MVN: UNSAFE}, True) == refused(
        MVN, "Invalid update version 6 for feature metadata.version. Local controller 0 only supports versions 7-29")


def test_unknown_metadata_version_inside_the_local_range():
    m = manager(quorum(MVN, 1, 40), mv=MV.IBP_4_2_IV1)
    assert m.update_features({MVN: 30}, {}, True) == refused(
        MVN, "Invalid metadata.version 30. Valid versions are from 7 to 29.")


def test_create_feature_level_records():
    m = manager(QuorumFeatures(0, {MVN: (7, 29), TV: (0, 2)}, []), mv=MV.MINIMUM_VERSION,
                cluster=Cluster(brokers=[(1, {TV: (0, 3)})]))
    result = m.update_features({TV: 1}, {TV: UPGRADE}, False)
    assert result == ControllerResult.atomic_of([record(TV, 1)], {TV: None})
    replay_all(m, result)
    assert m.finalized_features()[TV] == 1
    result = m.update_features({TV: 0}, {TV: UNSAFE}, False)
    assert result == ControllerResult.atomic_of([record(TV, 0)], {TV: None})
    replay_all(m, result)
    assert TV not in m.finalized_features()


def test_upgrade_elr_feature_level():
    m = manager(QuorumFeatures(0, {MVN: (23, 29), ELR: (0, 1)}, []), mv=MV.IBP_4_0_IV1,
                cluster=Cluster(brokers=[(1, {ELR: (0, 1)})]))
    assert not m.is_elr_enabled()
    result = m.update_features({ELR: 1}, {ELR: UPGRADE}, False)
    assert result.response == {ELR: None}
    assert result.records == [record(ELR, 1)]
    replay_all(m, result)
    assert m.finalized_features()[ELR] == 1
    assert m.is_elr_enabled()


def test_elr_needs_metadata_version_4_0_iv1_unless_the_same_request_raises_it():
    m = manager(quorum(), mv=MV.IBP_4_0_IV0)
    assert m.update_features({ELR: 1}, {}, False) == refused(
        ELR, "Invalid update version 1 for feature eligible.leader.replicas.version. eligible.leader.replicas.version "
             "could not be set to 1 because it depends on metadata.version level 23")
    # the dependency is checked against the levels the request proposes
    result = m.update_features({MVN: 23, ELR: 1}, {}, False)
    assert result == ControllerResult.atomic_of([record(MVN, 23), record(ELR, 1)], {MVN: None, ELR: None})


def test_metadata_version_before_any_record():
    m = FeatureControlManager(SnapshotRegistry())
    assert m.metadata_version_or_none() is None
    with pytest.raises(UnknownMetadataVersionError, match="^Unknown metadata version for FeatureControlManager$"):
        m.metadata_version()
    with pytest.raises(UnknownMetadataVersionError):
        m.finalized_features()
    with pytest.raises(UnknownMetadataVersionError):
        m.update_features({GV: 1}, {}, False)
    assert m.snapshot_records(2**63 - 1) == []
    m.replay(FeatureLevelRecord(name=MVN, feature_level=7), 0)
    assert m.metadata_version_or_none() is MV.MINIMUM_VERSION is m.metadata_version()


# ---------------------------------------------------------------- more rules of updateFeatures

def test_unknown_upgrade_type_and_negative_level():
    m = manager(quorum(), mv=MV.IBP_4_0_IV0)
    assert m.update_features({GV: 1}, {GV: UpgradeType.from_code(7)}, False) == refused(
        GV, "Invalid update version 1 for feature group.version. The controller does not support the given upgrade "
            "type.")
    assert m.update_features({GV: -1}, {}, False) == refused(
        GV, "Invalid update version -1 for feature group.version. A feature version cannot be less than 0.")


def test_a_feature_the_software_does_not_know():
    m = manager(quorum("foo.version", 0, 3), mv=MV.IBP_4_0_IV0)
    assert m.update_features({"foo.version": 1}, {}, False) == refused(
        "foo.version", "Invalid update version 1 for feature foo.version. Feature foo.version not found.")


def test_every_voter_must_have_registered_from_3_7_iv0():
    cluster = Cluster(controllers=[(1, {GV: (0, 1)})])
    m = manager(quorum(voters=[0, 1, 2]), mv=MV.IBP_3_7_IV0, cluster=cluster)
    assert m.update_features({GV: 1}, {}, False) == refused(
        GV, "Invalid update version 1 for feature group.version. controller 2 has not registered, and may not "
            "support this feature")
    cluster.controllers.append((2, {GV: (0, 1)}))
    assert m.update_features({GV: 1}, {}, False).response == {GV: None}
    # before controller registration (3.6-IV2), controllers cannot be checked: not a refusal
    old = manager(quorum(voters=[0, 1, 2]), mv=MV.IBP_3_6_IV2, cluster=Cluster())
    assert old.update_features({GV: 1}, {}, False).response == {GV: None}


def test_registered_controllers_must_support_the_level():
    cluster = Cluster(controllers=[(0, {}), (1, {})])  # this controller's own entry is not re-checked
    m = manager(quorum(voters=[0, 1]), mv=MV.IBP_4_0_IV2, cluster=cluster)
    assert m.update_features({GV: 1}, {}, False) == refused(
        GV, "Invalid update version 1 for feature group.version. Controller 1 does not support this feature.")
    cluster.controllers[1] = (1, {TV: (0, 1)})
    assert m.update_features({TV: 2}, {}, False) == refused(
        TV, "Invalid update version 2 for feature transaction.version. Controller 1 only supports versions 0-1")


def test_cluster_support_passed_per_call_overrides_the_constructor():
    m = manager(quorum(), mv=MV.IBP_4_0_IV0, cluster=Cluster(brokers=[(1, {})]))
    assert m.update_features({GV: 1}, {}, False).response == {GV: invalid(
        "Invalid update version 1 for feature group.version. Broker 1 does not support this feature.")}
    ok = m.update_features({GV: 1}, {}, False, Cluster(brokers=[(1, {GV: (0, 1)})]))
    assert ok.response == {GV: None}


def test_the_first_refusal_fails_the_whole_request():
    m = manager(quorum(), mv=MV.IBP_4_0_IV0)
    result = m.update_features({GV: 1, TV: 9, "share.version": 1}, {}, False)
    assert result.records == [] and list(result.response) == [TV]
    top = update_failed_error(result.response[TV])
    assert top == ApiError(Errors.INVALID_UPDATE_VERSION,
                           "The update failed for all features since the following feature had an error: Invalid "
                           "update version 9 for feature transaction.version. Local controller 0 only supports "
                           "versions 0-2")


def test_validate_only_writes_nothing():
    m = manager(quorum(), mv=MV.IBP_4_0_IV0)
    assert m.update_features({GV: 1, MVN: 24}, {}, True) == ControllerResult.of([], {GV: None, MVN: None})
    assert m.finalized_features() == {MVN: 22}


def test_kraft_version_upgrade_goes_through_the_raft_layer():
    kraft = KRaft(0)
    m = manager(quorum(), mv=MV.IBP_3_9_IV0, kraft=kraft)
    assert m.update_features({KV: 1}, {}, True, claimed_epoch=4) == ControllerResult.of([], {KV: None})
    assert kraft.version == 0 and kraft.calls == [(4, 1, True)]
    result = m.update_features({KV: 1}, {}, False, claimed_epoch=4)
    assert result == ControllerResult.atomic_of([ApiMessageAndVersion(NoOpRecord(), 0)], {KV: None})
    assert kraft.version == 1
    assert KV not in m.finalized_features()  # the Raft layer's, not a finalized FeatureLevelRecord
    assert m.update_features({KV: 0}, {KV: SAFE}, False) == refused(
        KV, "Invalid update version 0 for feature kraft.version. Can't downgrade the version of this feature.")
    assert m.update_features({KV: 1}, {KV: SAFE}, False) == ControllerResult.atomic_of([], {KV: None})


def test_kraft_version_refusals():
    m = manager(quorum(), mv=MV.IBP_3_8_IV0, kraft=KRaft(0))
    assert m.update_features({KV: 1}, {}, False) == refused(
        KV, "Invalid update version 1 for feature kraft.version. kraft.version could not be set to 1 because it "
            "depends on metadata.version level 21")
    busy = ApiError(Errors.REQUEST_TIMED_OUT, "voters not caught up")
    m = manager(quorum(), mv=MV.IBP_3_9_IV0, kraft=KRaft(0, error=busy))
    assert m.update_features({KV: 1}, {}, False) == ControllerResult.of([], {KV: busy})
    m = manager(quorum(), mv=MV.IBP_3_9_IV0, kraft=KRaft(0, error=ValueError("no such level")))
    assert m.update_features({KV: 1}, {}, False) == refused(
        KV, "Invalid update version 1 for feature kraft.version. no such level")


def test_upgrade_type_of_request():
    assert UpgradeType.of_request(1, True, 0) is SAFE
    assert UpgradeType.of_request(1, False, 0) is UPGRADE
    assert UpgradeType.of_request(3, False, 1) is UNSAFE
    assert UpgradeType.of_request(9, False, 2) is UpgradeType.UNKNOWN


# ---------------------------------------------------------------- replay, epochs, revert

def test_replay_outside_the_supported_range_is_fatal():
    m = manager(quorum("foo", 1, 2), mv=MV.MINIMUM_VERSION)
    with pytest.raises(ReplayError) as e:
        m.replay(FeatureLevelRecord(name="foo", feature_level=3), 5)
    assert str(e.value) == ("Tried to apply FeatureLevelRecord FeatureLevelRecord(name='foo', featureLevel=3), but "
                            "this controller only supports versions 1-2")
    with pytest.raises(ReplayError, match="only supports versions 7-29"):
        m.replay(FeatureLevelRecord(name=MVN, feature_level=30), 6)
    with pytest.raises(ReplayError, match="featureLevel=1\\), but this controller only supports versions 0$"):
        m.replay(FeatureLevelRecord(name="unknown.version", feature_level=1), 7)
    assert m.finalized_features() == {MVN: 7}


def test_level_zero_removes_a_feature():
    m = manager(quorum(), mv=MV.IBP_4_0_IV0)
    m.replay(FeatureLevelRecord(name=GV, feature_level=1), 1)
    m.replay(FeatureLevelRecord(name=GV, feature_level=0), 2)
    assert m.finalized_features() == {MVN: 22}
    m.replay(FeatureLevelRecord(name=TV, feature_level=0), 3)  # removing an absent feature is fine
    assert m.finalized_features() == {MVN: 22}


def test_reads_at_an_older_epoch_and_revert():
    registry = SnapshotRegistry()
    m = manager(quorum(), registry=registry)
    m.replay(FeatureLevelRecord(name=MVN, feature_level=22), 0)
    m.replay(FeatureLevelRecord(name=GV, feature_level=1), 1)
    registry.get_or_create_snapshot(1)
    m.replay(FeatureLevelRecord(name=MVN, feature_level=26), 2)
    m.replay(FeatureLevelRecord(name=ELR, feature_level=1), 3)
    m.replay(FeatureLevelRecord(name=GV, feature_level=0), 4)
    registry.get_or_create_snapshot(4)

    assert m.finalized_features(epoch=1) == {MVN: 22, GV: 1}
    assert m.metadata_version(epoch=1) is MV.IBP_4_0_IV0 and not m.is_elr_enabled(epoch=1)
    assert m.finalized_features() == m.finalized_features(epoch=4) == {MVN: 26, ELR: 1}
    assert m.is_elr_enabled() and m.feature_level(GV, epoch=1) == 1 and m.feature_level(GV) == 0
    assert m.snapshot_records(1) == [record(MVN, 22), record(GV, 1)]
    assert m.snapshot_records(4) == [record(MVN, 26), record(ELR, 1)]
    with pytest.raises(SnapshotNotFoundError):
        m.finalized_features(epoch=3)

    registry.revert_to_snapshot(1)
    assert m.finalized_features() == {MVN: 22, GV: 1}
    assert m.metadata_version() is MV.IBP_4_0_IV0


def test_revert_to_before_metadata_version_was_set():
    registry = SnapshotRegistry()
    registry.get_or_create_snapshot(-1)
    m = manager(quorum(), registry=registry)
    m.replay(FeatureLevelRecord(name=MVN, feature_level=29), 0)
    assert m.metadata_version_or_none(epoch=-1) is None
    registry.revert_to_snapshot(-1)
    assert m.metadata_version_or_none() is None


def test_updates_planned_then_replayed_then_reverted_leave_no_trace():
    registry = SnapshotRegistry()
    m = manager(quorum(), mv=MV.IBP_4_0_IV3, registry=registry)
    registry.get_or_create_snapshot(10)
    result = m.update_features({MVN: 29, "share.version": 1, "streams.version": 1}, {}, False)
    assert m.finalized_features() == {MVN: 25}  # planning changes nothing
    replay_all(m, result, 11)
    assert m.finalized_features() == {MVN: 29, "share.version": 1, "streams.version": 1}
    registry.revert_to_snapshot(10)
    assert m.finalized_features() == {MVN: 25}


# ---------------------------------------------------------------- QuorumFeaturesTest

LOCAL = {"foo": (0, 3), "bar": (0, 4), "baz": (2, 2)}
QF = QuorumFeatures(0, LOCAL, [0, 1, 2])


def test_default_feature_map():
    assert QuorumFeatures.default_supported_feature_map(False) == supported_features(False)
    assert QuorumFeatures.default_supported_feature_map(False)[MVN] == (7, 29)
    for unstable in (True, False):
        assert all(hi != 0 for _, hi in QuorumFeatures.default_supported_feature_map(unstable).values())


def test_local_supported_feature():
    assert QF.local_supported_feature("foo") == (0, 3)
    assert QF.local_supported_feature("bar") == (0, 4)
    assert QF.local_supported_feature("baz") == (2, 2)
    assert QF.local_supported_feature("quux") == (0, 0)


def test_reason_not_supported():
    assert QuorumFeatures.reason_not_supported(10, "Local controller 0", (0, 3)) == \
        "Local controller 0 only supports versions 0-3"
    assert QuorumFeatures.reason_not_supported(3, "Local controller 0", (0, 3)) is None
    assert QuorumFeatures.reason_not_supported(1, "Broker 4", (0, 0)) == "Broker 4 does not support this feature."
    assert QuorumFeatures.reason_not_supported(1, "Broker 4", (2, 2)) == "Broker 4 only supports versions 2"
    assert QF.reason_not_locally_supported("baz", 3) == "Local controller 0 only supports versions 2"


def test_is_controller_id():
    assert QF.is_controller_id(0) and QF.is_controller_id(1) and QF.is_controller_id(2)
    assert not QF.is_controller_id(3)
    assert manager(QF).is_controller_id(2)


def test_quorum_features_value_semantics():
    assert QF == QuorumFeatures(0, dict(LOCAL), (0, 1, 2))
    assert QF != QuorumFeatures(1, LOCAL, [0, 1, 2])
    assert repr(QF) == ("QuorumFeatures(nodeId=0, localSupportedFeatures={bar: 0-4, baz: 2, foo: 0-3}, "
                        "quorumNodeIds=[0, 1, 2])")
    with pytest.raises(TypeError):
        QF.local_supported_features["foo"] = (0, 9)  # type: ignore[index]
