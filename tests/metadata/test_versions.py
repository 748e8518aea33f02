"""metadata.version and the feature table (kraft_node.metadata.versions): Kafka's
MetadataVersionTest and FeatureTest scenarios, restated, plus the formatter's defaults."""
from __future__ import annotations

import copy
import pickle

import pytest

from kraft_node.metadata.versions import (
    ELIGIBLE_LEADER_REPLICAS_VERSION,
    GROUP_VERSION,
    KRAFT_VERSION,
    PRODUCTION_FEATURES,
    SHARE_VERSION,
    STREAMS_VERSION,
    TRANSACTION_VERSION,
    MetadataVersion,
    bootstrap_records,
    default_feature_levels,
    feature_from_name,
    supported_features,
    validate_version,
    version_range_str,
)

MV = MetadataVersion


def test_table_runs_from_3_3_iv3_to_4_2_iv1_with_unique_increasing_levels():
    levels = [mv.feature_level for mv in MV.VERSIONS]
    assert levels == list(range(7, 30))
    assert MV.MINIMUM_VERSION is MV.IBP_3_3_IV3 is MV.VERSIONS[0]
    assert MV.LATEST_PRODUCTION is MV.IBP_4_2_IV1 is MV.latest_testing()
    assert [mv.name for mv in MV.VERSIONS[:3]] == ["3.3-IV3", "3.4-IV0", "3.5-IV0"]
    assert str(MV.IBP_3_9_IV0) == MV.IBP_3_9_IV0.version() == "3.9-IV0"
    assert MV.IBP_3_9_IV0.short_version() == "3.9"
    assert repr(MV.IBP_4_0_IV3) == "MetadataVersion.IBP_4_0_IV3"
    assert MV.IBP_4_0_IV0.previous() is MV.IBP_3_9_IV0 and MV.IBP_3_3_IV3.previous() is None


def test_ordering():
    assert MV.IBP_3_3_IV3 < MV.IBP_3_4_IV0 <= MV.IBP_3_4_IV0 < MV.IBP_4_2_IV1
    assert MV.IBP_4_0_IV1 > MV.IBP_4_0_IV0 and MV.IBP_4_0_IV1 >= MV.IBP_4_0_IV1
    assert MV.IBP_3_7_IV2.is_at_least(MV.IBP_3_7_IV2) and not MV.IBP_3_7_IV1.is_at_least(MV.IBP_3_7_IV2)
    assert MV.IBP_3_7_IV1.is_less_than(MV.IBP_3_7_IV2)
    assert sorted(reversed(MV.VERSIONS)) == list(MV.VERSIONS)
    assert max(MV.VERSIONS) is MV.IBP_4_2_IV1


def test_from_feature_level():
    for mv in MV.VERSIONS:
        assert MV.from_feature_level(mv.feature_level) is mv
    for bad in (6, 30, -1, 0):
        with pytest.raises(ValueError) as e:
            MV.from_feature_level(bad)
        assert str(e.value) == f"No MetadataVersion with feature level {bad}. Valid feature levels are from 7 to 29."


def test_from_version_string():
    assert MV.from_version_string("3.9-IV0") is MV.IBP_3_9_IV0
    # a bare release is its newest (production) level
    assert MV.from_version_string("3.7") is MV.IBP_3_7_IV4
    assert MV.from_version_string("4.0") is MV.IBP_4_0_IV3
    assert MV.from_version_string("4.2") is MV.IBP_4_2_IV1
    # only the first two parts of a longer release count
    assert MV.from_version_string("3.8.1") is MV.IBP_3_8_IV0
    with pytest.raises(ValueError) as e:
        MV.from_version_string("3.2")
    assert str(e.value).startswith("Unknown metadata.version '3.2'. Supported metadata.version are: 3.3-IV3, "
                                   "3.4-IV0, 3.5-IV0")
    assert str(e.value).endswith("4.2-IV0, 4.2-IV1")
    with pytest.raises(ValueError, match="Unknown metadata.version '4.0-IV9'"):
        MV.from_version_string("4.0-IV9")


def test_instances_survive_pickle_and_copy():
    for mv in (MV.IBP_3_3_IV3, MV.IBP_4_1_IV0):
        assert pickle.loads(pickle.dumps(mv)) is mv
        assert copy.deepcopy(mv) is mv
    assert {MV.IBP_3_9_IV0: 1}[MV.from_feature_level(21)] == 1


def test_did_metadata_change_flags_follow_kafka():
    changed = {mv.name for mv in MV.VERSIONS if mv.did_metadata_change()}
    assert changed == {"3.3-IV3", "3.4-IV0", "3.5-IV2", "3.6-IV1", "3.6-IV2", "3.7-IV0", "3.7-IV2", "4.0-IV1"}


def test_check_if_metadata_changed():
    """Kafka's MetadataVersionTest.testMetadataChanged: a move between two levels changes the
    metadata iff a level above the lower one, up to the higher one, changed it."""
    assert not MV.check_if_metadata_changed(MV.IBP_3_5_IV0, MV.IBP_3_5_IV0)
    assert not MV.check_if_metadata_changed(MV.IBP_3_5_IV1, MV.IBP_3_4_IV0)  # 3.5-IV0 and IV1: no change
    assert not MV.check_if_metadata_changed(MV.IBP_3_4_IV0, MV.IBP_3_5_IV1)  # order does not matter
    assert MV.check_if_metadata_changed(MV.IBP_3_5_IV2, MV.IBP_3_5_IV1)
    assert MV.check_if_metadata_changed(MV.IBP_3_4_IV0, MV.IBP_3_3_IV3)
    assert not MV.check_if_metadata_changed(MV.IBP_4_2_IV1, MV.IBP_4_0_IV1)  # 4.0-IV2..4.2-IV1: none changed
    assert MV.check_if_metadata_changed(MV.IBP_4_2_IV1, MV.IBP_4_0_IV0)      # 4.0-IV1 did
    assert MV.IBP_4_2_IV1.did_metadata_change(MV.IBP_4_0_IV0)
    assert not MV.IBP_4_2_IV1.did_metadata_change(MV.IBP_4_0_IV1)


def test_predicates_switch_on_at_kafkas_levels():
    def first(pred):
        return next(mv for mv in MV.VERSIONS if pred(mv))
    assert first(MV.is_migration_supported) is MV.IBP_3_4_IV0
    assert first(MV.is_scram_supported) is MV.IBP_3_5_IV2
    assert first(MV.is_metadata_transaction_supported) is MV.IBP_3_6_IV1
    assert first(MV.is_delegation_token_supported) is MV.IBP_3_6_IV2
    assert first(MV.is_controller_registration_supported) is MV.IBP_3_7_IV0
    assert first(MV.is_directory_assignment_supported) is MV.IBP_3_7_IV2
    assert first(MV.is_elr_supported) is MV.IBP_4_0_IV1
    assert MV.IBP_3_5_IV2.is_leader_epoch_bump_required_on_isr_shrink()
    assert not MV.IBP_3_6_IV0.is_leader_epoch_bump_required_on_isr_shrink()
    for mv in MV.VERSIONS:  # always on from 3.3-IV3
        assert mv.is_in_controlled_shutdown_state_supported() and mv.is_no_op_record_supported()
        assert mv.is_leader_recovery_supported() and mv.is_broker_registration_change_record_supported()
        assert mv.is_kraft_supported()


def test_record_versions():
    assert [MV.IBP_3_3_IV3.register_broker_record_version(), MV.IBP_3_4_IV0.register_broker_record_version(),
            MV.IBP_3_7_IV1.register_broker_record_version(), MV.IBP_3_7_IV2.register_broker_record_version(),
            MV.IBP_4_2_IV1.register_broker_record_version()] == [1, 2, 2, 3, 3]
    for pick in (MV.partition_record_version, MV.partition_change_record_version):
        assert [pick(MV.IBP_3_7_IV1), pick(MV.IBP_3_7_IV2), pick(MV.IBP_4_0_IV0), pick(MV.IBP_4_0_IV1)] == [0, 1, 1, 2]
    assert MV.IBP_3_7_IV0.register_controller_record_version() == 0
    with pytest.raises(RuntimeError, match="Controller registration is not supported in MetadataVersion 3.6-IV2"):
        MV.IBP_3_6_IV2.register_controller_record_version()
    assert MV.IBP_3_3_IV3.fence_broker_record_version() == 0
    assert MV.IBP_3_3_IV3.producer_ids_record_version() == 0
    mv = MV.IBP_3_7_IV2
    assert (mv.broker_registration_change_record_version(),
            mv.broker_registration_change_record_version(in_controlled_shutdown=True),
            mv.broker_registration_change_record_version(log_dirs=True)) == (0, 1, 2)
    with pytest.raises(RuntimeError):
        MV.IBP_3_7_IV1.broker_registration_change_record_version(log_dirs=True)


def test_record_versions_fit_the_generated_record_classes():
    """Every version a level picks is one the record codec can write."""
    from kraft_storage.messages import metadata as m
    for mv in MV.VERSIONS:
        for cls, v in ((m.RegisterBrokerRecord, mv.register_broker_record_version()),
                       (m.PartitionRecord, mv.partition_record_version()),
                       (m.PartitionChangeRecord, mv.partition_change_record_version()),
                       (m.FenceBrokerRecord, mv.fence_broker_record_version()),
                       (m.ProducerIdsRecord, mv.producer_ids_record_version())):
            assert cls.LOWEST_VERSION <= v <= cls.HIGHEST_VERSION, (mv, cls)


def test_features_ranges_and_names():
    assert [f.name for f in PRODUCTION_FEATURES] == [
        "kraft.version", "transaction.version", "group.version", "eligible.leader.replicas.version",
        "share.version", "streams.version"]
    assert {f.name: f.supported_version_range() for f in PRODUCTION_FEATURES} == {
        "kraft.version": (0, 1), "transaction.version": (0, 2), "group.version": (0, 1),
        "eligible.leader.replicas.version": (0, 1), "share.version": (0, 1), "streams.version": (0, 1)}
    assert feature_from_name("group.version") is GROUP_VERSION
    with pytest.raises(ValueError, match=r"^Feature foo.version not found\.$"):
        feature_from_name("foo.version")
    with pytest.raises(ValueError, match=r"^No feature:group.version with feature level 2$"):
        GROUP_VERSION.from_feature_level(2)


def test_supported_features():
    assert supported_features() == {
        "metadata.version": (7, 29), "kraft.version": (0, 1), "transaction.version": (0, 2),
        "group.version": (0, 1), "eligible.leader.replicas.version": (0, 1), "share.version": (0, 1),
        "streams.version": (0, 1)}


def test_default_levels_follow_each_levels_bootstrap_metadata_version():
    """Feature.defaultValue: the highest level whose bootstrap MV is at or below the MV."""
    assert default_feature_levels(MV.IBP_3_9_IV0) == {}
    assert default_feature_levels(MV.IBP_3_9_IV0, include_kraft_version=True) == {"kraft.version": 1}
    assert default_feature_levels(MV.IBP_4_0_IV0) == {"group.version": 1}
    assert default_feature_levels(MV.IBP_4_0_IV2) == {"group.version": 1, "transaction.version": 2}
    assert default_feature_levels(MV.IBP_4_1_IV0) == {"group.version": 1, "transaction.version": 2,
                                                      "eligible.leader.replicas.version": 1}
    assert default_feature_levels(MV.IBP_4_2_IV0)["share.version"] == 1
    assert "streams.version" not in default_feature_levels(MV.IBP_4_2_IV0)
    assert KRAFT_VERSION.default_level(MV.IBP_3_8_IV0) == 0
    assert TRANSACTION_VERSION.default_level(MV.IBP_4_0_IV1) == 0


def test_bootstrap_records_match_the_checkpoints_kafka_wrote():
    """Kafka 4.0 (release 4.0 = 4.0-IV3) and 4.2 (4.2-IV1) bootstrap.checkpoint contents."""
    def pairs(level):
        return [(r.name, r.feature_level, v) for r, v in bootstrap_records(level)]
    assert pairs(25) == [("metadata.version", 25, 0), ("group.version", 1, 0), ("transaction.version", 2, 0)]
    assert pairs(MV.IBP_4_2_IV1) == [
        ("metadata.version", 29, 0), ("eligible.leader.replicas.version", 1, 0), ("group.version", 1, 0),
        ("share.version", 1, 0), ("streams.version", 1, 0), ("transaction.version", 2, 0)]
    assert pairs(19) == [("metadata.version", 19, 0)]


def test_validate_version_dependencies():
    """Feature.validateVersion's messages (FeatureTest.testValidateVersion...)."""
    elr1 = ELIGIBLE_LEADER_REPLICAS_VERSION.from_feature_level(1)
    validate_version(elr1, {"metadata.version": 23})
    with pytest.raises(ValueError) as e:
        validate_version(elr1, {"metadata.version": 22})
    assert str(e.value) == ("eligible.leader.replicas.version could not be set to 1 because it depends on "
                            "metadata.version level 23")
    with pytest.raises(ValueError) as e:
        validate_version(GROUP_VERSION.from_feature_level(1), {})
    assert str(e.value) == "group.version could not be set to 1 because it depends on metadata.version=4 (3.3-IV0)"
    validate_version(GROUP_VERSION.from_feature_level(0), {})  # level 0 needs nothing
    with pytest.raises(ValueError, match="share.version could not be set to 1 because it depends on "
                                         "metadata.version level 27"):
        validate_version(SHARE_VERSION.from_feature_level(1), {"metadata.version": 26})
    with pytest.raises(ValueError, match="kraft.version could not be set to 1 because it depends on "
                                         "metadata.version level 21"):
        validate_version(KRAFT_VERSION.from_feature_level(1), {"metadata.version": 20})
    validate_version(STREAMS_VERSION.from_feature_level(1), {"metadata.version": 7})


def test_version_range_str():
    assert (version_range_str(3, 3), version_range_str(1, 5), version_range_str(1, 32767)) == ("3", "1-5", "1+")
