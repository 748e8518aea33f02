"""ConfigurationControlManager's write side (kraft_node.metadata.controller.configuration_control).

Re-states Kafka's ``ConfigurationControlManagerTest`` (4.x, with its test schema, NO_OP validator
and exact expected records and messages), the controller-level parts of ``KRaftClusterTest``
(testIncrementalAlterConfigs, testLegacyAlterConfigs) and ``QuorumControllerTest``
(testConfigurationOperations, testConfigResourceExistenceChecker) over the real validator, and
checks with hypothesis that random valid alters, replayed, give the configs a simple model
predicts.
"""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.metadata.configs import (
    NO_OP_VALIDATOR,
    ConfigDef,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    KafkaConfigSchema,
)
from kraft_node.metadata.configs.types import HOURS_TO_MILLISECONDS
from kraft_node.metadata.controller.configuration_control import (
    NONE,
    AlterConfigOp,
    AlterConfigPolicyRequest,
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
    config_resource_existence_checker,
)
from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.features import FeatureControlManager, QuorumFeatures, UpgradeType
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_storage.messages import metadata as m
from kraft_storage.timeline import SnapshotRegistry

SET, DELETE, APPEND, SUBTRACT = AlterConfigOp.SET, AlterConfigOp.DELETE, AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT
TOPIC, BROKER = ConfigResourceType.TOPIC, ConfigResourceType.BROKER
BROKER0 = ConfigResource.broker("0")
MYTOPIC = ConfigResource.topic("mytopic")
MIN_ISR = "min.insync.replicas"
ELR = "eligible.leader.replicas.version"

# Kafka's ConfigurationControlManagerTest.CONFIGS / SYNONYMS / SCHEMA
TEST_SCHEMA = KafkaConfigSchema(
    {BROKER: (ConfigDef()
              .define("foo.bar", ConfigType.LIST, ("1",))
              .define("baz", ConfigType.STRING)
              .define("quux", ConfigType.INT)
              .define(MIN_ISR, ConfigType.INT, 1)),
     TOPIC: (ConfigDef()
             .define("abc", ConfigType.LIST)
             .define("def", ConfigType.STRING)
             .define("ghi", ConfigType.BOOLEAN, True)
             .define("quuux", ConfigType.LONG)
             .define(MIN_ISR, ConfigType.INT))},
    {"abc": [ConfigSynonym("foo.bar")], "def": [ConfigSynonym("baz")], MIN_ISR: [ConfigSynonym(MIN_ISR)],
     "quuux": [ConfigSynonym("quux", HOURS_TO_MILLISECONDS)]})


def make_manager(**kw: Any) -> ConfigurationControlManager:
    kw.setdefault("schema", TEST_SCHEMA)
    kw.setdefault("validator", NO_OP_VALIDATOR)
    return ConfigurationControlManager(SnapshotRegistry(), **kw)


def rec(rtype: ConfigResourceType, name: str, key: str, value: str | None) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(m.ConfigRecord(resource_type=int(rtype), resource_name=name, name=key, value=value), 0)


def replay_all(manager: Any, records: list[ApiMessageAndVersion]) -> None:
    for i, r in enumerate(records):
        if isinstance(r.message, m.ConfigRecord):
            manager.replay(r.message, i)
        elif not isinstance(r.message, m.ClearElrRecord):
            manager.replay(r.message, i)


def err(code: Errors, message: str | None) -> ApiError:
    return ApiError(code, message)


# ---------------------------------------------------------------------------------------- replay

def test_replay_and_topic_config():
    # ConfigurationControlManagerTest.testReplay
    c = make_manager()
    assert c.configs(BROKER0) == {}
    c.replay(rec(BROKER, "0", "foo.bar", "1,2").message, 0)
    assert c.configs(BROKER0) == {"foo.bar": "1,2"} and c.brokers_with_configs() == {0}
    c.replay(rec(BROKER, "0", "foo.bar", None).message, 1)
    assert c.configs(BROKER0) == {} and c.brokers_with_configs() == set()
    c.replay(rec(TOPIC, "mytopic", "abc", "x,y,z").message, 2)
    c.replay(rec(TOPIC, "mytopic", "def", "blah").message, 3)
    assert c.configs(MYTOPIC) == {"abc": "x,y,z", "def": "blah"}
    assert c.topic_config(MYTOPIC.name, "abc") == "x,y,z"


def test_replay_of_a_non_numeric_broker_resource_is_fatal():
    c = make_manager()
    with pytest.raises(ReplayError, match="the broker name is not an integer"):
        c.replay(rec(BROKER, "blah", "baz", "1").message, 0)
    assert c.resources() == []


# ---------------------------------------------------------------------------------------- incremental

def test_incremental_alter_configs():
    # ConfigurationControlManagerTest.testIncrementalAlterConfigs
    c = make_manager()
    result = c.incremental_alter_configs({
        BROKER0: {"baz": (SUBTRACT, "abc"), "quux": (SET, "abc")},
        MYTOPIC: {"abc": (APPEND, "123")}}, True)
    assert result == ControllerResult.atomic_of(
        [rec(TOPIC, "mytopic", "abc", "123")],
        {BROKER0: err(Errors.INVALID_CONFIG, "Can't SUBTRACT to key baz because its type is not LIST."),
         MYTOPIC: NONE})
    replay_all(c, result.records)
    assert c.incremental_alter_configs({MYTOPIC: {"abc": (DELETE, "xyz")}}, True) == ControllerResult.atomic_of(
        [rec(TOPIC, "mytopic", "abc", None)], {MYTOPIC: NONE})


def test_incremental_alter_config():
    # ConfigurationControlManagerTest.testIncrementalAlterConfig
    c = make_manager()
    result = c.incremental_alter_config(MYTOPIC, {"abc": (APPEND, "123")}, True)
    assert result == ControllerResult.atomic_of([rec(TOPIC, "mytopic", "abc", "123")], NONE)
    replay_all(c, result.records)
    assert c.incremental_alter_config(MYTOPIC, {"abc": (DELETE, "xyz")}, True) == ControllerResult.atomic_of(
        [rec(TOPIC, "mytopic", "abc", None)], NONE)


def test_incremental_alter_multiple_config_values():
    # ConfigurationControlManagerTest.testIncrementalAlterMultipleConfigValues
    c = make_manager()
    result = c.incremental_alter_configs({MYTOPIC: {"abc": (APPEND, "123,456,789")}}, True)
    assert result == ControllerResult.atomic_of([rec(TOPIC, "mytopic", "abc", "123,456,789")], {MYTOPIC: NONE})
    replay_all(c, result.records)
    # it's ok for the appended value to be already present
    result = c.incremental_alter_configs({MYTOPIC: {"abc": (APPEND, "123,456")}}, True)
    assert result == ControllerResult.atomic_of([], {MYTOPIC: NONE})
    result = c.incremental_alter_configs({MYTOPIC: {"abc": (SUBTRACT, "123,456")}}, True)
    assert result == ControllerResult.atomic_of([rec(TOPIC, "mytopic", "abc", "789")], {MYTOPIC: NONE})
    replay_all(c, result.records)
    # it's ok for the deleted value not to be present
    result = c.incremental_alter_configs({MYTOPIC: {"abc": (SUBTRACT, "123456")}}, True)
    assert result == ControllerResult.atomic_of([], {MYTOPIC: NONE})
    assert c.configs(MYTOPIC)["abc"] == "789"


def test_append_to_an_unset_list_starts_from_its_default_and_broker_records_are_always_written():
    # the schema default ("1" for foo.bar) is the starting list; KAFKA-14136: an unchanged
    # BROKER value (and a delete of an absent BROKER key) still writes a record
    c = make_manager()
    result = c.incremental_alter_config(BROKER0, {"foo.bar": (APPEND, "2,1")}, True)
    assert result.records == [rec(BROKER, "0", "foo.bar", "1,2")]
    replay_all(c, result.records)
    assert c.incremental_alter_config(BROKER0, {"foo.bar": (SET, "1,2"), "baz": (DELETE, None)}, True).records == [
        rec(BROKER, "0", "foo.bar", "1,2"), rec(BROKER, "0", "baz", None)]
    # a topic's unchanged value and its absent key's delete write nothing
    c.replay(rec(TOPIC, "mytopic", "def", "x").message, 5)
    assert c.incremental_alter_config(MYTOPIC, {"def": (SET, "x"), "ghi": (DELETE, None)}, True).records == []


def test_subtract_removes_one_occurrence_and_append_of_nothing():
    c = make_manager()
    c.replay(rec(TOPIC, "mytopic", "abc", "a,b,a,,c").message, 0)
    assert c.incremental_alter_config(MYTOPIC, {"abc": (SUBTRACT, "a")}, True).records == [
        rec(TOPIC, "mytopic", "abc", "b,a,c")]
    # Java's "".split(",") is [""]: appending nothing appends an empty element
    assert c.incremental_alter_config(MYTOPIC, {"abc": (APPEND, "")}, True).records == [
        rec(TOPIC, "mytopic", "abc", "a,b,a,c,")]
    assert c.incremental_alter_config(MYTOPIC, {"abc": (APPEND, None)}, True).response == err(
        Errors.INVALID_REQUEST, "Null value not supported for : abc")
    # a wire op id Kafka does not define (ConfigAdminManager's message)
    assert c.incremental_alter_config(MYTOPIC, {"abc": (7, "x")}, True) == ControllerResult.atomic_of(
        [], err(Errors.INVALID_REQUEST, "Unknown operations type 7"))


def test_incremental_alter_configs_without_existence():
    # ConfigurationControlManagerTest.testIncrementalAlterConfigsWithoutExistence
    def checker(resource: ConfigResource) -> None:
        if not resource.name.startswith("Existing"):
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unknown resource.")

    c = make_manager(existence_checker=checker)
    existing_topic = ConfigResource.topic("ExistingTopic")
    result = c.incremental_alter_configs({BROKER0: {"quux": (SET, "1")},
                                          existing_topic: {"def": (SET, "newVal")}}, False)
    assert result == ControllerResult.atomic_of(
        [rec(TOPIC, "ExistingTopic", "def", "newVal")],
        {BROKER0: err(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unknown resource."), existing_topic: NONE})


class MockAlterConfigsPolicy:
    """Kafka's MockAlterConfigsPolicy: each call must equal the next expected request."""

    def __init__(self, expected: list[AlterConfigPolicyRequest]):
        self.expected, self.index = expected, 0

    def __call__(self, actual: AlterConfigPolicyRequest) -> None:
        index, self.index = self.index, self.index + 1
        if index >= len(self.expected):
            raise ApiError(Errors.POLICY_VIOLATION, f"Unexpected config alteration: index out of range at {index}")
        expected = self.expected[index]
        if expected != actual:
            raise ApiError(Errors.POLICY_VIOLATION, f"Expected: {expected}. Got: {actual}")


def test_incremental_alter_configs_with_policy():
    # ConfigurationControlManagerTest.testIncrementalAlterConfigsWithPolicy
    policy = MockAlterConfigsPolicy([
        AlterConfigPolicyRequest(MYTOPIC, {}),
        AlterConfigPolicyRequest(BROKER0, {"foo.bar": "123", "quux": "456", "broker.config.to.remove": None})])
    c = make_manager(alter_config_policy=policy)
    # existing configs are not passed to the policy
    c.replay(rec(BROKER, "0", "broker.config", "123").message, 0)
    c.replay(rec(TOPIC, "mytopic", "topic.config", "123").message, 1)
    c.replay(rec(BROKER, "0", "broker.config.to.remove", "123").message, 2)
    assert c.incremental_alter_configs({
        MYTOPIC: {"foo.bar": (SET, "123")},
        BROKER0: {"foo.bar": (SET, "123"), "quux": (SET, "456"), "broker.config.to.remove": (DELETE, None)}},
        True) == ControllerResult.atomic_of(
        [rec(BROKER, "0", "foo.bar", "123"), rec(BROKER, "0", "quux", "456"),
         rec(BROKER, "0", "broker.config.to.remove", None)],
        {MYTOPIC: err(Errors.POLICY_VIOLATION,
                      "Expected: AlterConfigPolicy.RequestMetadata(resource=ConfigResource(type=TOPIC, "
                      "name='mytopic'), configs={}). Got: AlterConfigPolicy.RequestMetadata(resource="
                      "ConfigResource(type=TOPIC, name='mytopic'), configs={foo.bar=123})"),
         BROKER0: NONE})


def check_for_null_values_policy(request: AlterConfigPolicyRequest) -> None:
    # Kafka's CheckForNullValuesPolicy
    if any(v is None for v in request.configs.values()):
        raise ApiError(Errors.POLICY_VIOLATION, "Legacy Alter Configs should not see null values")


def test_legacy_alter_configs():
    # ConfigurationControlManagerTest.testLegacyAlterConfigs
    c = make_manager(alter_config_policy=check_for_null_values_policy)
    expected1 = [rec(TOPIC, "mytopic", "abc", "456"), rec(TOPIC, "mytopic", "def", "901")]
    assert c.legacy_alter_configs({MYTOPIC: {"abc": "456", "def": "901"}}, True) == ControllerResult.atomic_of(
        expected1, {MYTOPIC: NONE})
    replay_all(c, expected1)
    assert c.legacy_alter_configs({MYTOPIC: {"def": "901"}}, True) == ControllerResult.atomic_of(
        [rec(TOPIC, "mytopic", "abc", None)], {MYTOPIC: NONE})


def test_an_unexpected_exception_in_a_check_is_an_unknown_server_error():
    def broken(request: AlterConfigPolicyRequest) -> None:
        raise RuntimeError("boom")

    c = make_manager(alter_config_policy=broken)
    assert c.incremental_alter_config(MYTOPIC, {"def": (SET, "x")}, True) == ControllerResult.atomic_of(
        [], ApiError(Errors.UNKNOWN_SERVER_ERROR))


def test_the_java_alter_config_policy_class_is_refused_by_name():
    with pytest.raises(ConfigError, match="alter.config.policy.class.name is not supported by kraft: it cannot "
                                          "load the Java class com.example.Policy; unset it"):
        ConfigurationControlManager(SnapshotRegistry(), static_config={
            "alter.config.policy.class.name": "com.example.Policy"})
    ConfigurationControlManager(SnapshotRegistry(), static_config={"alter.config.policy.class.name": ""})


# ---------------------------------------------------------------------------------------- KIP-966

def elr_features(mv: MetadataVersion = MetadataVersion.IBP_4_0_IV1) -> FeatureControlManager:
    features = FeatureControlManager(SnapshotRegistry(),
                                     QuorumFeatures(0, QuorumFeatures.default_supported_feature_map(True), []))
    features.replay(m.FeatureLevelRecord(name="metadata.version", feature_level=mv.feature_level), 0)
    return features


def enable_elr(c: ConfigurationControlManager, features: FeatureControlManager) -> ControllerResult[Any]:
    result = c.update_features({ELR: 1}, {ELR: UpgradeType.UPGRADE}, False)
    for i, r in enumerate(result.records):
        (features if isinstance(r.message, m.FeatureLevelRecord) else c).replay(r.message, 100 + i)
    return result


@pytest.mark.parametrize("static", [False, True])
def test_maybe_generate_elr_safety_records(static):
    # ConfigurationControlManagerTest.testMaybeGenerateElrSafetyRecords
    c = make_manager(static_config={MIN_ISR: "2"} if static else None)
    broker1 = ConfigResource.broker("1")
    result = c.incremental_alter_config(broker1, {MIN_ISR: (SET, "3")}, True)
    assert c.brokers_with_configs() == set()
    assert result == ControllerResult.atomic_of([rec(BROKER, "1", MIN_ISR, "3")], NONE)
    replay_all(c, result.records)
    assert c.brokers_with_configs() == {1}
    records: list[ApiMessageAndVersion] = []
    effective = "2" if static else "1"
    assert c.maybe_generate_elr_safety_records(records) == (
        f"Generating cluster-level min.insync.replicas of {effective}. Removing broker-level min.insync.replicas "
        "for brokers: 1.")
    assert records == [rec(BROKER, "", MIN_ISR, effective), rec(BROKER, "1", MIN_ISR, None)]
    replay_all(c, records)
    assert c.brokers_with_configs() == set()
    assert c.maybe_generate_elr_safety_records(records := []) == "" and records == []


@pytest.mark.parametrize("removal", [False, True])
def test_reject_min_isr_change_when_elr_enabled(removal):
    # ConfigurationControlManagerTest.testRejectMinIsrChangeWhenElrEnabled
    features = elr_features()
    c = make_manager(static_config={MIN_ISR: "2"}, feature_control=features)
    result = enable_elr(c, features)
    assert result.response == {ELR: None}
    assert result.records[0] == rec(BROKER, "", MIN_ISR, "2")  # the safety record leads the batch
    assert features.is_elr_enabled() and c.cluster_config() == {MIN_ISR: "2"}
    op = (DELETE, None) if removal else (SET, "3")
    result = c.incremental_alter_config(ConfigResource.broker("1"), {MIN_ISR: op}, True)
    assert result.response == err(Errors.INVALID_CONFIG,
                                  "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    result = c.incremental_alter_config(ConfigResource.broker(""), {MIN_ISR: op}, True)
    if removal:
        assert result.response == err(Errors.INVALID_CONFIG,
                                      "Cluster-level min.insync.replicas cannot be removed while ELR is enabled.")
        assert result.records == []
    else:
        # KAFKA-16540: a cluster-level change clears every ELR with one record, not one per partition
        assert result == ControllerResult.atomic_of([rec(BROKER, "", MIN_ISR, "3"),
                                                     ApiMessageAndVersion(m.ClearElrRecord(), 0)], NONE)


@pytest.mark.parametrize("elr_mv", [False, True])
def test_elr_upgrade(elr_mv):
    # ConfigurationControlManagerTest.testElrUpgrade
    features = elr_features(MetadataVersion.IBP_4_0_IV1 if elr_mv else MetadataVersion.IBP_4_0_IV0)
    c = make_manager(static_config={MIN_ISR: "2"}, feature_control=features)
    assert not features.is_elr_enabled()
    result = c.update_features({ELR: 1}, {ELR: UpgradeType.UPGRADE}, False)
    if elr_mv:
        assert result.response == {ELR: None}
        for i, r in enumerate(result.records):
            (features if isinstance(r.message, m.FeatureLevelRecord) else c).replay(r.message, i)
        assert features.is_elr_enabled()
    else:
        assert result.response[ELR].error is Errors.INVALID_UPDATE_VERSION and result.records == []


def test_min_isr_changes_clear_elr_only_while_elr_is_on():
    features = elr_features()
    c = make_manager(feature_control=features)
    # ELR off: no ClearElrRecord
    assert c.incremental_alter_config(MYTOPIC, {MIN_ISR: (SET, "2")}, True).records == [
        rec(TOPIC, "mytopic", MIN_ISR, "2")]
    enable_elr(c, features)
    result = c.incremental_alter_configs({MYTOPIC: {MIN_ISR: (SET, "2")},
                                          ConfigResource.topic("other"): {"def": (SET, "x")}}, True)
    assert result.records == [rec(TOPIC, "mytopic", MIN_ISR, "2"), rec(TOPIC, "other", "def", "x"),
                              ApiMessageAndVersion(m.ClearElrRecord(topic_name="mytopic"), 0)]
    # the legacy path too, and a hook can replace the ClearElrRecords
    seen = []
    c2 = make_manager(feature_control=features, min_isr_changed=lambda changes: seen.extend(changes) or [])
    assert c2.legacy_alter_configs({MYTOPIC: {MIN_ISR: "3"}}, True).records == [rec(TOPIC, "mytopic", MIN_ISR, "3")]
    assert seen == [rec(TOPIC, "mytopic", MIN_ISR, "3").message]


# ---------------------------------------------------------------------------------------- effective values

def test_effective_topic_values_fall_back_through_the_synonyms():
    c = ConfigurationControlManager(SnapshotRegistry(), static_config={"log.retention.hours": "2"}, node_id=1)
    topic = "t"
    assert c.topic_config(topic, "retention.ms") == "7200000"  # static, hours converted
    assert c.topic_config_entry(topic, "retention.ms").source is ConfigSource.STATIC_BROKER_CONFIG
    c.replay(rec(BROKER, "", "log.retention.ms", "1000").message, 0)
    assert c.topic_config_entry(topic, "retention.ms").source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    c.replay(rec(BROKER, "1", "log.retention.minutes", "3").message, 1)
    entry = c.topic_config_entry(topic, "retention.ms", include_synonyms=True)
    assert (entry.value, entry.source) == ("180000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("log.retention.minutes", "180000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "1000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.hours", "7200000", ConfigSource.STATIC_BROKER_CONFIG)]
    c.replay(rec(TOPIC, topic, "retention.ms", "5").message, 2)
    assert c.topic_config_entry(topic, "retention.ms").source is ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert c.topic_config("other", "retention.ms") == "180000"  # this node's level, no topic override
    assert c.topic_config(topic, "segment.ms") == "604800000"  # Kafka's default
    with pytest.raises(KeyError, match="Unknown topic config name: nope"):
        c.topic_config(topic, "nope")


def test_min_isr_and_unclean_leader_election():
    c = ConfigurationControlManager(SnapshotRegistry(), static_config={"min.insync.replicas": "2"})
    assert c.min_isr("t") == 2 and not c.unclean_leader_election_enabled("t")
    c.replay(rec(BROKER, "", "min.insync.replicas", "3").message, 0)
    c.replay(rec(BROKER, "", "unclean.leader.election.enable", "TRUE").message, 1)
    c.registry.get_or_create_snapshot(1)
    c.replay(rec(TOPIC, "t", "min.insync.replicas", "1").message, 2)
    c.replay(rec(TOPIC, "t", "unclean.leader.election.enable", " true").message, 3)  # parseBoolean: no trim
    assert c.min_isr("t") == 1 and c.min_isr("u") == 3 and c.min_isr("t", epoch=1) == 3
    assert not c.unclean_leader_election_enabled("t") and c.unclean_leader_election_enabled("u")
    assert c.unclean_leader_election_enabled("t", epoch=1)


def test_describe_configs_and_entries():
    c = ConfigurationControlManager(SnapshotRegistry(), static_config={"log.cleanup.policy": "compact"})
    c.replay(rec(TOPIC, "t", "segment.ms", "100").message, 0)
    c.replay(rec(BROKER, "", "log.roll.ms", "1234567").message, 1)
    out = c.describe_configs({ConfigResource.topic("t"): [], ConfigResource.topic("u"): ["segment.ms"],
                              ConfigResource.topic(""): [], ConfigResource(ConfigResourceType.GROUP, "g"): []})
    assert out[ConfigResource.topic("t")] == (NONE, {"segment.ms": "100"})
    assert out[ConfigResource.topic("u")] == (NONE, {})
    assert out[ConfigResource.topic("")] == (err(Errors.INVALID_REQUEST, "Default topic resources are not allowed."),
                                             {})
    assert out[ConfigResource(ConfigResourceType.GROUP, "g")][0] == err(Errors.INVALID_REQUEST,
                                                                        "Unknown resource type GROUP")
    entries = {e.name: e for e in c.describe_topic_config_entries("t")}
    assert (entries["segment.ms"].value, entries["segment.ms"].source) == ("100", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert (entries["cleanup.policy"].value, entries["cleanup.policy"].source) == (
        "compact", ConfigSource.STATIC_BROKER_CONFIG)
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == (
        "604800000", ConfigSource.DEFAULT_CONFIG)
    assert entries["min.cleanable.dirty.ratio"].value == "0.5" and entries["min.cleanable.dirty.ratio"].type \
        is ConfigType.DOUBLE
    assert [e.name for e in c.describe_topic_config_entries("u", ["segment.ms", "nope"])] == ["segment.ms"]
    assert c.describe_topic_config_entries("u", ["segment.ms"])[0].source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    cluster = c.describe_broker_config_entries("")
    assert [(e.name, e.value, e.source, e.is_read_only) for e in cluster] == [
        ("log.roll.ms", "1234567", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, False)]


# ---------------------------------------------------------------------------------------- KRaftClusterTest

class Cluster:
    """What the existence checker reads: brokers 0-3 registered, controllers 3000-3002, topics."""

    def __init__(self, topics: set[str]):
        self.topics = topics

    def checker(self):
        return config_resource_existence_checker(broker_registered=lambda i: 0 <= i <= 3,
                                                 is_controller_id=lambda i: 3000 <= i <= 3002,
                                                 topic_exists=self.topics.__contains__)


def test_kraft_cluster_incremental_alter_configs():
    # KRaftClusterTest.testIncrementalAlterConfigs (the controller's part; the real validator)
    cluster = Cluster({"foo", "bar"})
    c = ConfigurationControlManager(SnapshotRegistry(), existence_checker=cluster.checker())
    default = ConfigResource.broker("")
    result = c.incremental_alter_configs({default: {"log.roll.ms": (SET, "1234567"),
                                                    "max.connections.per.ip": (SET, "60")}}, False)
    assert result == ControllerResult.atomic_of(
        [rec(BROKER, "", "log.roll.ms", "1234567"), rec(BROKER, "", "max.connections.per.ip", "60")],
        {default: NONE})
    replay_all(c, result.records)
    assert c.describe_configs({default: []}) == {default: (NONE, {"log.roll.ms": "1234567",
                                                                  "max.connections.per.ip": "60"})}
    foo, bar, baz = ConfigResource.topic("foo"), ConfigResource.topic("bar"), ConfigResource.topic("baz")
    assert c.describe_configs({bar: []}) == {bar: (NONE, {})}
    result = c.incremental_alter_configs({foo: {"segment.jitter.ms": (SET, "345")},
                                          bar: {"not.a.real.topic.config": (SET, "789")},
                                          baz: {"segment.jitter.ms": (SET, "678")}}, False)
    assert result == ControllerResult.atomic_of(
        [rec(TOPIC, "foo", "segment.jitter.ms", "345")],
        {foo: NONE, bar: err(Errors.INVALID_CONFIG, "Unknown topic config name: not.a.real.topic.config"),
         baz: err(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'baz' does not exist.")})
    replay_all(c, result.records)
    assert c.describe_configs({foo: []})[foo] == (NONE, {"segment.jitter.ms": "345"})
    broker2 = ConfigResource.broker("2")
    result = c.incremental_alter_configs({broker2: {"max.connections.per.ip": (SET, "7")}}, False)
    assert result == ControllerResult.atomic_of([rec(BROKER, "2", "max.connections.per.ip", "7")], {broker2: NONE})


def test_kraft_cluster_legacy_alter_configs():
    # KRaftClusterTest.testLegacyAlterConfigs (the controller's part)
    c = ConfigurationControlManager(SnapshotRegistry(), existence_checker=Cluster({"foo", "bar"}).checker())
    default = ConfigResource.broker("")
    result = c.legacy_alter_configs({default: {"log.roll.ms": "1234567", "max.connections.per.ip": "6"}}, False)
    assert result.response == {default: NONE}
    replay_all(c, result.records)
    assert c.configs(default) == {"log.roll.ms": "1234567", "max.connections.per.ip": "6"}
    result = c.legacy_alter_configs({default: {"log.roll.ms": "1234567"}}, False)
    # KAFKA-14136 rewrites the unchanged BROKER key; the omitted key is removed
    assert result == ControllerResult.atomic_of([rec(BROKER, "", "log.roll.ms", "1234567"),
                                                 rec(BROKER, "", "max.connections.per.ip", None)], {default: NONE})
    replay_all(c, result.records)
    assert c.configs(default) == {"log.roll.ms": "1234567"}
    foo, bar, baz = ConfigResource.topic("foo"), ConfigResource.topic("bar"), ConfigResource.topic("baz")
    result = c.legacy_alter_configs({foo: {"segment.jitter.ms": "345"}, bar: {"not.a.real.topic.config": "789"},
                                     baz: {"segment.jitter.ms": "678"}}, False)
    assert result.response == {foo: NONE,
                               bar: err(Errors.INVALID_CONFIG, "Unknown topic config name: not.a.real.topic.config"),
                               baz: err(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'baz' does not exist.")}
    assert result.records == [rec(TOPIC, "foo", "segment.jitter.ms", "345")]


def test_configuration_operations():
    # QuorumControllerTest.testConfigurationOperations (manager level: describe reads committed state)
    c = ConfigurationControlManager(SnapshotRegistry())
    assert c.incremental_alter_configs({BROKER0: {"baz": (SET, "123")}}, True).response == {BROKER0: NONE}
    assert c.describe_configs({BROKER0: []}) == {BROKER0: (NONE, {})}
    result = c.incremental_alter_configs({BROKER0: {"baz": (SET, "123")}}, False)
    c.registry.get_or_create_snapshot(0)
    replay_all(c, result.records)
    assert c.describe_configs({BROKER0: []}, epoch=0) == {BROKER0: (NONE, {})}
    assert c.describe_configs({BROKER0: []}) == {BROKER0: (NONE, {"baz": "123"})}


def test_config_resource_existence_checker():
    # QuorumControllerTest.testConfigResourceExistenceChecker (5 brokers, topic foo)
    checker = config_resource_existence_checker(broker_registered=lambda i: 0 <= i <= 4,
                                                is_controller_id=lambda i: False, topic_exists={"foo"}.__contains__)
    checker(ConfigResource.broker(""))
    checker(ConfigResource.broker("3"))
    with pytest.raises(ApiError) as e:
        checker(ConfigResource.broker("10"))
    assert e.value == err(Errors.BROKER_ID_NOT_REGISTERED, "No node with id 10 found.")
    checker(ConfigResource.topic("foo"))
    with pytest.raises(ApiError) as e:
        checker(ConfigResource.topic("bar"))
    assert e.value == err(Errors.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'bar' does not exist.")
    with pytest.raises(ApiError) as e:
        checker(ConfigResource.broker("x1"))
    assert e.value == err(Errors.INVALID_REQUEST, "Invalid broker name x1")
    checker(ConfigResource(ConfigResourceType.BROKER_LOGGER, "77"))  # always allowed
    # a controller id counts as a node
    config_resource_existence_checker(broker_registered=lambda i: False, is_controller_id=lambda i: i == 9,
                                      topic_exists=lambda t: False)(ConfigResource.broker("9"))


def test_the_validator_refuses_bad_values_and_names():
    c = ConfigurationControlManager(SnapshotRegistry())
    t = ConfigResource.topic("t")
    cases = [
        ({"min.insync.replicas": (SET, "0")},
         "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1"),
        ({"cleanup.policy": (APPEND, "foo")},
         "Invalid value foo for configuration cleanup.policy: String must be one of: compact, delete"),
        ({"min.cleanable.dirty.ratio": (SET, "1.5")},
         "Invalid value 1.5 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
        ({"retention.ms": (SET, "1h")}, "Invalid value 1h for configuration retention.ms: Not a number of type LONG"),
        ({"segment.ms": (APPEND, "1")}, "Can't APPEND to key segment.ms because its type is not LIST."),
    ]
    for ops, message in cases:
        assert c.incremental_alter_config(t, ops, True) == ControllerResult.atomic_of(
            [], err(Errors.INVALID_CONFIG, message))
    # APPEND to the default policy list
    assert c.incremental_alter_config(t, {"cleanup.policy": (APPEND, "compact")}, True).records == [
        rec(TOPIC, "t", "cleanup.policy", "delete,compact")]
    bad = ConfigResource.topic("a/b")
    assert c.incremental_alter_config(bad, {"retention.ms": (SET, "1")}, True).response == err(
        Errors.INVALID_TOPIC_EXCEPTION,
        "Topic name is invalid: 'a/b' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'")
    assert c.incremental_alter_config(ConfigResource.broker("blah"), {"x": (SET, "1")}, True).response == err(
        Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number.")


# ---------------------------------------------------------------------------------------- hypothesis

KEYS = {TOPIC: ["abc", "def"], BROKER: ["foo.bar", "baz"]}
LIST_KEYS = {"abc", "foo.bar"}
RESOURCES = [ConfigResource.topic("t1"), ConfigResource.topic("t2"), ConfigResource.broker("0"),
             ConfigResource.broker("")]
token = st.sampled_from(["a", "b", "c", "dd"])


@st.composite
def alter_op(draw: Any) -> tuple[ConfigResource, str, AlterConfigOp, str | None]:
    resource = draw(st.sampled_from(RESOURCES))
    key = draw(st.sampled_from(KEYS[resource.type]))
    ops = [SET, DELETE] + ([APPEND, SUBTRACT] if key in LIST_KEYS else [])
    op = draw(st.sampled_from(ops))
    if op is DELETE:
        return resource, key, op, None
    value = ",".join(draw(st.lists(token, min_size=1, max_size=3)))
    return resource, key, op, value


def model_apply(model: dict[ConfigResource, dict[str, str]], resource: ConfigResource, key: str,
                op: AlterConfigOp, value: str | None) -> None:
    """The expected effect of one op, written independently of the manager."""
    configs = model.setdefault(resource, {})
    if op is SET:
        assert value is not None
        configs[key] = value
    elif op is DELETE:
        configs.pop(key, None)
    else:
        assert value is not None
        start = configs.get(key, "1" if key == "foo.bar" else "")
        items = [x for x in start.split(",") if x]
        for v in value.split(","):
            if op is APPEND and v not in items:
                items.append(v)
            elif op is SUBTRACT and v in items:
                del items[items.index(v)]
        configs[key] = ",".join(items)
    if not configs:
        del model[resource]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(alter_op(), min_size=1, max_size=4), min_size=1, max_size=8))
def test_random_valid_alters_replayed_equal_the_model(batches):
    c = make_manager()
    model: dict[ConfigResource, dict[str, str]] = {}
    offset = 0
    for batch in batches:
        changes: dict[ConfigResource, dict[str, tuple[AlterConfigOp, str | None]]] = {}
        for resource, key, op, value in batch:
            changes.setdefault(resource, {})[key] = (op, value)  # the last op on a key wins, as in a map
        before = c.all_configs()
        result = c.incremental_alter_configs(changes, True)
        assert c.all_configs() == before  # a write changes nothing until replayed
        assert set(result.response.values()) == {NONE} and result.atomic
        c.registry.get_or_create_snapshot(offset)
        for r in result.records:
            offset += 1
            c.replay(r.message, offset)
        for resource, key_ops in changes.items():
            for key, (op, value) in key_ops.items():
                model_apply(model, resource, key, op, value)
        assert c.all_configs() == model
        assert c.brokers_with_configs() == {int(r.name) for r in model if r.type == BROKER and r.name}
    # the snapshot holds the same state
    fresh = make_manager()
    for i, r in enumerate(c.snapshot_records()):
        fresh.replay(r.message, i)
    assert fresh.all_configs() == model


level_maps = st.dictionaries(st.sampled_from(["log.retention.ms", "log.retention.minutes", "log.retention.hours",
                                              "min.insync.replicas", "log.roll.hours", "log.cleanup.policy"]),
                             st.sampled_from(["1", "2", "30", "compact"]), max_size=4)


@settings(max_examples=100, deadline=None)
@given(level_maps, level_maps, level_maps, st.dictionaries(st.sampled_from(["retention.ms", "min.insync.replicas"]),
                                                           st.sampled_from(["5", "6"]), max_size=2))
def test_the_fast_effective_value_equals_the_full_resolution(static, cluster, node, topic):
    c = ConfigurationControlManager(SnapshotRegistry(), static_config=static, node_id=1)
    offset = 0
    for name, configs in (("", cluster), ("1", node)):
        for key, value in configs.items():
            c.replay(rec(BROKER, name, key, value).message, offset := offset + 1)
    for key, value in topic.items():
        c.replay(rec(TOPIC, "t", key, value).message, offset := offset + 1)
    for key in ("retention.ms", "min.insync.replicas", "segment.ms", "cleanup.policy", "segment.jitter.ms"):
        assert c.topic_config("t", key) == c.topic_config_entry("t", key).value
