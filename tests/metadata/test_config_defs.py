"""Config definitions (kraft_node.metadata.configs): Java-exact parsing and printing, the
validators' messages, the topic and broker tables, LogConfig.validate, the controller's
validator and the broker's dynamic-config checks.

Re-states Kafka's ConfigDefTest (testBadInputs, testInvalidDefaultRange), LogConfigTest
(testFromPropsInvalid, testInvalidCompactionLagConfig, shouldValidateThrottledReplicasConfig, the
tiered-storage cases), ControllerConfigurationValidatorTest, DynamicBrokerConfigTest
(testSecurityConfigs, testConfigUpdateWithSomeInvalidConfigs) and ConfigAdminManagerTest
(testValidateResourceNameIsCurrentNodeId), with Kafka's messages.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraft_node.metadata.configs import (
    ALL_DYNAMIC_CONFIGS,
    BROKER_CONFIG_DEF,
    KAFKA_CONFIG_SCHEMA,
    PER_BROKER_CONFIGS,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_SYNONYMS,
    AlterConfigOp,
    ConfigDef,
    ConfigError,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigType,
    ControllerConfigurationValidator,
    check_no_null_topic_configs,
    dynamic_config_update_mode,
    prepare_incremental_configs,
    validate_broker_config_change,
    validate_dynamic_broker_configs,
    validate_topic_configs,
)
from kraft_node.metadata.configs.broker import (
    DYNAMIC_LOG_CONFIGS,
    broker_config_synonyms,
    listener_base_name,
    validate_resource_name_is_node_id,
)
from kraft_node.metadata.configs.topic import CONFIGS_WITH_NO_SERVER_DEFAULTS, extract_log_config_map
from kraft_node.metadata.configs.types import (
    GzipLevel,
    Range,
    ThrottledReplicaList,
    ValidList,
    ValidString,
    convert_to_string,
    java_double_str,
    java_split,
    parse_java_double,
    parse_type,
)
from kraft_node.metadata.configs.validator import validate_client_metrics_configs
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.protocol.errors import Errors
from kraft_node.server.config import kafka_config_names

T = ConfigResource.topic


def config_error(fn, *args, **kw) -> str:
    with pytest.raises(ConfigError) as e:
        fn(*args, **kw)
    return e.value.message


def api_error(fn, *args, **kw) -> ApiError:
    with pytest.raises(ApiError) as e:
        fn(*args, **kw)
    return e.value


# ---------------------------------------------------------------------------------------- parsing

@pytest.mark.parametrize("type_,text,expected", [
    (ConfigType.INT, " 42 ", 42), (ConfigType.INT, "+7", 7), (ConfigType.INT, "-2147483648", -(2 ** 31)),
    (ConfigType.LONG, "9223372036854775807", 2 ** 63 - 1), (ConfigType.SHORT, "-32768", -32768),
    (ConfigType.DOUBLE, "0.5", 0.5), (ConfigType.DOUBLE, "1e3", 1000.0), (ConfigType.DOUBLE, "1.5d", 1.5),
    (ConfigType.DOUBLE, ".5F", 0.5), (ConfigType.DOUBLE, "0x1p3", 8.0), (ConfigType.DOUBLE, "-Infinity", -math.inf),
    (ConfigType.BOOLEAN, " TRUE ", True), (ConfigType.BOOLEAN, "False", False),
    (ConfigType.STRING, "  a b  ", "a b"), (ConfigType.PASSWORD, " secret ", "secret"),
    (ConfigType.LIST, " a , b,c ", ("a", "b", "c")), (ConfigType.LIST, "a,", ("a", "")), (ConfigType.LIST, "  ", ()),
    (ConfigType.CLASS, " com.example.X ", "com.example.X"),
])
def test_parse_type_follows_java(type_, text, expected):
    assert parse_type("k", text, type_) == expected


def test_nan_parses_as_java_does():
    assert math.isnan(parse_java_double("NaN"))


@pytest.mark.parametrize("type_,text,reason", [
    # ConfigDefTest.testBadInputs (the string inputs)
    (ConfigType.INT, "hello", "Not a number of type INT"), (ConfigType.INT, "42.5", "Not a number of type INT"),
    (ConfigType.INT, "9223372036854775807", "Not a number of type INT"),
    (ConfigType.LONG, "hello", "Not a number of type LONG"), (ConfigType.LONG, "42.5", "Not a number of type LONG"),
    (ConfigType.LONG, "922337203685477580700", "Not a number of type LONG"),
    (ConfigType.DOUBLE, "hello", "Not a number of type DOUBLE"),
    (ConfigType.BOOLEAN, "hello", "Expected value to be either true or false"),
    (ConfigType.BOOLEAN, "truee", "Expected value to be either true or false"),
    (ConfigType.BOOLEAN, "fals", "Expected value to be either true or false"),
    # Python would accept these; Java does not
    (ConfigType.INT, "1_000", "Not a number of type INT"), (ConfigType.INT, "٣", "Not a number of type INT"),
    (ConfigType.SHORT, "32768", "Not a number of type SHORT"),
    (ConfigType.DOUBLE, "nan", "Not a number of type DOUBLE"),
    (ConfigType.DOUBLE, "inf", "Not a number of type DOUBLE"),
    (ConfigType.DOUBLE, "1_0", "Not a number of type DOUBLE"),
    (ConfigType.CLASS, "", "Class  could not be found."),
])
def test_parse_type_refuses_what_java_refuses(type_, text, reason):
    assert config_error(parse_type, "name", text, type_) == f"Invalid value {text} for configuration name: {reason}"


@pytest.mark.parametrize("value,text", [
    (0.5, "0.5"), (2.0, "2.0"), (1e7, "1.0E7"), (1e-3, "0.001"), (5e-4, "5.0E-4"), (1e10, "1.0E10"),
    (123.456, "123.456"), (1.7976931348623157e308, "1.7976931348623157E308"), (-0.0, "-0.0"), (math.nan, "NaN"),
    (math.inf, "Infinity"), (9999999.0, "9999999.0"), (-1.5e-7, "-1.5E-7"),
])
def test_java_double_str(value, text):
    assert java_double_str(value) == text


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_java_double_str_round_trips(value):
    assert parse_java_double(java_double_str(value)) == value


@pytest.mark.parametrize("text,parts", [("a,b", ["a", "b"]), ("a,b,,", ["a", "b"]), ("", [""]), (",", []),
                                        (",a", ["", "a"]), ("a", ["a"])])
def test_java_split(text, parts):
    assert java_split(text) == parts


def test_convert_to_string():
    assert convert_to_string(("delete", "compact"), ConfigType.LIST) == "delete,compact"
    assert convert_to_string(False, ConfigType.BOOLEAN) == "false"
    assert convert_to_string(2 ** 63 - 1, ConfigType.LONG) == "9223372036854775807"
    assert convert_to_string(None, ConfigType.STRING) is None


# ---------------------------------------------------------------------------------------- validators

def test_validator_messages_and_docs():
    assert config_error(Range.at_least(1).ensure_valid, "x", 0) == "Invalid value 0 for configuration x: Value must " \
                                                                  "be at least 1"
    assert config_error(Range.between(0, 1).ensure_valid, "r", 1.2) == "Invalid value 1.2 for configuration r: " \
                                                                       "Value must be no more than 1"
    assert config_error(Range.at_least(1).ensure_valid, "x", None) == "Invalid value null for configuration x: " \
                                                                      "Value must be non-null"
    Range.between(0, 1).ensure_valid("r", math.nan)  # Java's comparisons let NaN through
    assert (str(Range.at_least(1)), str(Range.between(0, 0.5)), str(Range())) == ("[1,...]", "[0,...,0.5]", "[...]")
    assert config_error(ValidString(("a", "b")).ensure_valid, "s", "c") == "Invalid value c for configuration s: " \
                                                                           "String must be one of: a, b"
    assert config_error(ValidList(("compact", "delete")).ensure_valid, "p", ("delete", "")) == \
        "Invalid value  for configuration p: String must be one of: compact, delete"
    assert str(ValidList(("compact", "delete"))) == "[compact, delete]"
    assert config_error(GzipLevel().ensure_valid, "g", -2) == "Invalid value -2 for configuration g: Value must be " \
                                                              "between 1 and 9 or equal to -1"
    GzipLevel().ensure_valid("g", -1)
    assert str(GzipLevel()) == "[1,...,9] or -1"


@pytest.mark.parametrize("text,valid", [
    # LogConfigTest.shouldValidateThrottledReplicasConfig
    ("*", True), ("* ", True), ("", True), (" ", True), ("100:10", True), ("100:10,12:10", True),
    ("100:10,12:10,15:1", True), ("100:10,12:10,15:1  ", True), ("100:0,", True),
    ("100", False), ("100:", False), ("100:0,10", False), ("100:0,10:", False), ("100:0,10:   ", False),
    ("100 :0,10:   ", False), ("100: 0,10:   ", False), ("100:0,10 :   ", False), ("*,100:10", False),
    ("* ,100:10", False),
])
def test_throttled_replica_list(text, valid):
    name = "leader.replication.throttled.replicas"
    if valid:
        ThrottledReplicaList().ensure_valid(name, java_split(text))
    else:
        message = config_error(ThrottledReplicaList().ensure_valid, name, java_split(text))
        assert message.endswith(f"{name} must be the literal '*' or a list of replicas in the following format: "
                                "[partitionId]:[brokerId],[partitionId]:[brokerId],...")
    assert config_error(validate_topic_configs, {name: "1:2,x"}) == (
        f"Invalid value [1:2, x] for configuration {name}: {name} must be the literal '*' or a list of replicas in "
        "the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],...")


def test_defaults_are_validated_at_definition():
    # ConfigDefTest.testInvalidDefaultRange / testInvalidDefaultString
    assert config_error(ConfigDef().define, "name", ConfigType.INT, -1, Range.between(0, 10)) == \
        "Invalid value -1 for configuration name: Value must be at least 0"
    assert config_error(ConfigDef().define, "name", ConfigType.STRING, "bad", ValidString(("valid", "values"))) == \
        "Invalid value bad for configuration name: String must be one of: valid, values"
    with pytest.raises(ValueError, match="Configuration a is defined twice."):
        ConfigDef().define("a", ConfigType.INT, 1).define("a", ConfigType.INT, 1)
    assert config_error(ConfigDef().define("req", ConfigType.INT).parse, {}) == \
        "Missing required configuration \"req\" which has no default value."


# ---------------------------------------------------------------------------------------- topic configs

def test_topic_table():
    # Kafka 4.x LogConfig: 33 keys, the 4.0 removals gone, KIP-1030 defaults
    assert len(TOPIC_CONFIG_DEF.keys) == 33
    for gone in ("message.format.version", "message.timestamp.difference.max.ms", "message.downconversion.enable"):
        assert gone not in TOPIC_CONFIG_DEF
    key = TOPIC_CONFIG_DEF.get
    assert key("segment.bytes").validator == Range.at_least(1024 * 1024)
    assert key("message.timestamp.after.max.ms").default_string == "3600000"
    assert key("cleanup.policy").default_string == "delete" and key("cleanup.policy").type is ConfigType.LIST
    assert key("min.cleanable.dirty.ratio").default_string == "0.5"
    assert key("max.message.bytes").default_string == "1048588"
    assert CONFIGS_WITH_NO_SERVER_DEFAULTS == {"remote.storage.enable", "remote.log.delete.on.disable",
                                               "remote.log.copy.disable", "leader.replication.throttled.replicas",
                                               "follower.replication.throttled.replicas"}


def test_broker_synonyms_default_to_the_topic_defaults():
    # a topic key resolved only through broker defaults gives the topic default (so a cluster
    # that sets nothing behaves as LogConfig's defaults say)
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        for synonym in synonyms:
            assert synonym.name in BROKER_CONFIG_DEF, synonym.name
        broker_value = next((s.converter(d) for s in synonyms
                             if (d := BROKER_CONFIG_DEF.get(s.name).default_string) is not None), None)
        assert broker_value == TOPIC_CONFIG_DEF.get(topic_key).default_string, topic_key


@pytest.mark.parametrize("name", sorted(TOPIC_CONFIG_DEF.keys))
def test_from_props_invalid(name):
    # LogConfigTest.testFromPropsInvalid (Kafka 4.x keys)
    special = {
        "unclean.leader.election.enable": ["not a boolean"], "retention.bytes": ["not_a_number"],
        "retention.ms": ["not_a_number"], "cleanup.policy": ["true", "foobar"],
        "min.cleanable.dirty.ratio": ["not_a_number", "-0.1", "1.2"],
        "min.insync.replicas": ["not_a_number", "0", "-1"],
        "remote.storage.enable": ["not_a_boolean"], "local.retention.ms": ["not_a_number", "-3"],
        "local.retention.bytes": ["not_a_number", "-3"], "compression.gzip.level": ["not_a_number", "-2"],
        "compression.lz4.level": ["not_a_number", "-1"], "compression.zstd.level": ["not_a_number", "-0.1"],
        "remote.log.copy.disable": ["not_a_number", "remove", "0"],
        "remote.log.delete.on.disable": ["not_a_number", "remove", "0"],
    }
    for value in special.get(name, ["not_a_number", "-1"]):
        with pytest.raises(ConfigError):
            validate_topic_configs({name: value})


def test_log_config_validate():
    assert validate_topic_configs({"segment.jitter.ms": "1000", "segment.bytes": "67108864"})["segment.bytes"] == \
        67108864
    # LogConfigTest.testInvalidCompactionLagConfig
    assert api_error(validate_topic_configs, {"max.compaction.lag.ms": "100", "min.compaction.lag.ms": "200"}) == \
        ApiError(Errors.INVALID_CONFIG, "conflict topic config setting min.compaction.lag.ms (200) > "
                                        "max.compaction.lag.ms (100)")
    assert api_error(validate_topic_configs, {"foobar": "abc", "segment.ms": "x"}) == ApiError(
        Errors.INVALID_CONFIG, "Unknown topic config name: foobar")
    # errors follow definition order: segment.bytes is defined before retention.ms
    assert config_error(validate_topic_configs, {"retention.ms": "x", "segment.bytes": "1"}).startswith(
        "Invalid value 1 for configuration segment.bytes")
    # a static log config is validated under the overrides
    assert validate_topic_configs({}, static_log_config={"cleanup.policy": "compact"})["cleanup.policy"] == ("compact",)


def test_tiered_storage_rules():
    # LogConfigTest testEnableRemoteLogStorage / ...OnCompactedTopic / testTopicCreationWithInvalidRetention*
    assert config_error(validate_topic_configs, {"remote.storage.enable": "true"}) == (
        "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage.")
    validate_topic_configs({"remote.storage.enable": "true", "cleanup.policy": "delete"},
                           remote_storage_system_enabled=True)
    for policy in ("compact", "delete,compact", "compact,delete"):
        assert config_error(validate_topic_configs, {"remote.storage.enable": "true", "cleanup.policy": policy},
                            remote_storage_system_enabled=True) == "Remote log storage is unsupported for the " \
                                                                   "compacted topics"
    static = extract_log_config_map({"log.retention.ms": "1000", "log.local.retention.ms": "900"})
    assert config_error(validate_topic_configs, {"remote.storage.enable": "true", "retention.ms": "500"},
                        static_log_config=static, remote_storage_system_enabled=True) == (
        "Invalid value 900 for configuration local.retention.ms: Value must not be more than retention.ms property "
        "value: 500")
    validate_topic_configs({"remote.storage.enable": "false", "retention.ms": "500"}, static_log_config=static)
    assert config_error(validate_topic_configs, {"remote.storage.enable": "true", "retention.bytes": "128",
                                                 "local.retention.bytes": "-1"},
                        remote_storage_system_enabled=True) == (
        "Invalid value -1 for configuration local.retention.bytes: Value must not be -1 as retention.bytes value is "
        "set as 128.")


def test_extract_log_config_map_converts_units():
    assert extract_log_config_map({"log.roll.hours": "2", "log.retention.minutes": "3", "message.max.bytes": "10",
                                   "num.io.threads": "4"}) == {"segment.ms": "7200000", "retention.ms": "180000",
                                                               "max.message.bytes": "10"}
    # the first synonym wins
    assert extract_log_config_map({"log.retention.hours": "1", "log.retention.ms": "5"}) == {"retention.ms": "5"}


def test_null_topic_config_rule():
    # ReplicationControlManagerTest.testCreateTopicsWithConfigs' message
    assert api_error(check_no_null_topic_configs, [("foo", None)]) == ApiError(
        Errors.INVALID_CONFIG, "Null value not supported for topic configs: foo")
    check_no_null_topic_configs([("foo", "notNull")])


# ---------------------------------------------------------------------------------------- controller validator

def test_controller_configuration_validator():
    # ControllerConfigurationValidatorTest
    v = ControllerConfigurationValidator()
    assert api_error(v.validate, T(""), {}, {}) == ApiError(Errors.INVALID_REQUEST,
                                                            "Default topic resources are not allowed.")
    assert api_error(v.validate, T("(<-invalid->)"), {}, {}) == ApiError(
        Errors.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: '(<-invalid->)' contains one or more characters "
                                        "other than ASCII alphanumerics, '.', '_' and '-'")
    assert api_error(v.validate, ConfigResource(ConfigResourceType.BROKER_LOGGER, "foo"), {}, {}) == ApiError(
        Errors.INVALID_REQUEST, "Unknown resource type BROKER_LOGGER")
    assert api_error(v.validate, T("foo"), {"segment.jitter.ms": "10", "segment.bytes": None, "segment.ms": None},
                     {}) == ApiError(Errors.INVALID_CONFIG,
                                     "Null value not supported for topic configs: segment.bytes,segment.ms")
    v.validate(T("foo"), {"segment.jitter.ms": "1000", "segment.bytes": "67108864"}, {})
    assert api_error(v.validate, T("foo"), {"segment.jitter.ms": "1000", "segment.bytes": "67108864",
                                            "foobar": "abc"}, {}) == ApiError(Errors.INVALID_CONFIG,
                                                                              "Unknown topic config name: foobar")
    assert api_error(v.validate, ConfigResource.broker("blah"), {"segment.jitter.ms": "1000"}, {}) == ApiError(
        Errors.INVALID_REQUEST, "Unable to parse broker name as a base 10 number.")
    assert api_error(v.validate, ConfigResource.broker("-1"), {"segment.jitter.ms": "1000"}, {}) == ApiError(
        Errors.INVALID_REQUEST, "Invalid negative broker ID.")
    v.validate(ConfigResource.broker(""), {"anything": "goes"}, {})  # broker keys are the broker's to check
    assert api_error(v.validate, ConfigResource(ConfigResourceType.GROUP, "g"), {}, {}).error is Errors.INVALID_REQUEST
    assert api_error(v.validate_resource, ConfigResource(ConfigResourceType.CLIENT_METRICS, "s")) == ApiError(
        Errors.INVALID_REQUEST, "Unknown resource type CLIENT_METRICS")


@pytest.mark.parametrize("was_enabled", [True, False])
def test_disabling_remote_storage_topic_config(was_enabled):
    # ControllerConfigurationValidatorTest.testDisablingRemoteStorageTopicConfig
    v = ControllerConfigurationValidator()
    new = {"remote.storage.enable": "false"}
    if was_enabled:
        assert api_error(v.validate, T("foo"), new, {"remote.storage.enable": "true"}) == ApiError(
            Errors.INVALID_CONFIG,
            "It is invalid to disable remote storage without deleting remote data. If you want to keep the remote "
            "data and turn to read only, please set `remote.storage.enable=true,remote.log.copy.disable=true`. If you "
            "want to disable remote storage and delete all remote data, please set "
            "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")
    else:
        v.validate(T("foo"), new, {})
        v.validate(T("foo"), new, {"remote.storage.enable": "false"})


def test_client_metrics_configs():
    # ControllerConfigurationValidatorTest client-metrics cases
    v = ControllerConfigurationValidator()
    cm = ConfigResource(ConfigResourceType.CLIENT_METRICS, "subscription-1")
    v.validate(cm, {"interval.ms": "2000", "metrics": "org.apache.kafka.client.producer.partition.queue.,"
                                                      "org.apache.kafka.client.producer.partition.latency",
                    "match": "client_instance_id=b69cc35a-7a54-4790-aa69-cc2bd4ee4538,client_id=1,"
                             "client_software_name=apache-kafka-java,client_software_version=2.8.0-SNAPSHOT,"
                             "client_source_address=127.0.0.1,client_source_port=1234"}, {})
    assert api_error(validate_client_metrics_configs, "", {}) == ApiError(Errors.INVALID_REQUEST,
                                                                          "Subscription name can't be empty")
    for interval in ("10", "3600001"):
        assert api_error(v.validate, cm, {"interval.ms": interval}, {}) == ApiError(
            Errors.INVALID_REQUEST, f"Invalid value {interval} for interval.ms, interval must be between 100 and "
                                    "3600000 (1 hour)")
    assert api_error(v.validate, cm, {"random": "10"}, {}) == ApiError(
        Errors.INVALID_REQUEST, "Unknown client metrics configuration: random")
    assert api_error(v.validate, cm, {"match": "10"}, {}) == ApiError(Errors.INVALID_CONFIG,
                                                                      "Illegal client matching pattern: 10")


# ---------------------------------------------------------------------------------------- broker configs

def test_every_dynamic_key_is_defined_and_known_to_kafka():
    kafka_names = kafka_config_names()
    for name in ALL_DYNAMIC_CONFIGS:
        assert name in BROKER_CONFIG_DEF, name
    # every key defined here is one of Kafka's names (kafka_config_keys.txt)
    assert set(BROKER_CONFIG_DEF.keys) - kafka_names == set()
    assert DYNAMIC_LOG_CONFIGS <= ALL_DYNAMIC_CONFIGS and "log.retention.minutes" not in ALL_DYNAMIC_CONFIGS
    assert dynamic_config_update_mode("listeners") == "per-broker"
    assert dynamic_config_update_mode("max.connections") == "cluster-wide"
    assert dynamic_config_update_mode("log.retention.ms") == "cluster-wide"
    assert dynamic_config_update_mode("broker.id") is None
    assert "ssl.keystore.location" in PER_BROKER_CONFIGS and "num.network.threads" not in PER_BROKER_CONFIGS


def test_dynamic_broker_config_checks():
    known = kafka_config_names()
    # DynamicBrokerConfigTest.testConfigUpdateWithSomeInvalidConfigs
    validate_dynamic_broker_configs({"listener.name.external.ssl.keystore.location": "ks.p12"}, True,
                                    known_names=known)
    assert config_error(validate_dynamic_broker_configs, {"ssl.keystore.type": "PKCS12"}, True, known_names=known) == (
        "These security configs can be dynamically updated only per-listener using the listener prefix: "
        "Set(ssl.keystore.type)")
    assert config_error(validate_dynamic_broker_configs, {"broker.id": "3", "process.roles": "broker"}, True,
                        known_names=known) == "Cannot update these configs dynamically: Set(broker.id, process.roles)"
    assert config_error(validate_dynamic_broker_configs, {"log.cleaner.threads": "invalid"}, True,
                        known_names=known) == "Invalid value invalid for configuration log.cleaner.threads: Not a " \
                                              "number of type INT"
    assert config_error(validate_dynamic_broker_configs, {"log.retention.minutes": "3"}, False, known_names=known) \
        == "Cannot update these configs dynamically: Set(log.retention.minutes)"
    # custom (unknown) keys are allowed, as Kafka's customPropsAllowed
    validate_dynamic_broker_configs({"my.custom.key": "x", "max.connections.per.ip": "60"}, False, known_names=known)


@pytest.mark.parametrize("name", ["ssl.keystore.location", "ssl.keystore.type", "ssl.keystore.password",
                                  "ssl.key.password"])
def test_security_configs(name):
    # DynamicBrokerConfigTest.testSecurityConfigs: only per-broker, only behind a listener prefix
    prefixed = f"listener.name.external.{name}"
    with pytest.raises(ConfigError):
        validate_dynamic_broker_configs({name: "v"}, True)
    validate_dynamic_broker_configs({prefixed: "v"}, True)
    with pytest.raises(ConfigError):
        validate_dynamic_broker_configs({name: "v"}, False)
    assert config_error(validate_dynamic_broker_configs, {prefixed: "v"}, False) == (
        f"Cannot update these configs at default cluster level, broker id must be specified: Set({prefixed})")


def test_broker_change_errors_are_invalid_request():
    # ConfigAdminManager.validateBrokerConfigChange: KAFKA-13609 keeps INVALID_REQUEST
    assert api_error(validate_broker_config_change, {"listeners": "PLAINTEXT://:1"}, False) == ApiError(
        Errors.INVALID_REQUEST, "Cannot update these configs at default cluster level, broker id must be specified: "
                                "Set(listeners)")
    assert api_error(validate_broker_config_change, {"num.io.threads": "0"}, True) == ApiError(
        Errors.INVALID_REQUEST, "Invalid value 0 for configuration num.io.threads: Value must be at least 1")
    validate_broker_config_change({"log.roll.ms": "1234567", "max.connections.per.ip": "60"}, False)


def test_validate_resource_name_is_current_node_id():
    # ConfigAdminManagerTest.testValidateResourceNameIsCurrentNodeId
    validate_resource_name_is_node_id("5", 5)
    assert api_error(validate_resource_name_is_node_id, "", 5) == ApiError(
        Errors.INVALID_REQUEST, "Node id must be an integer, but it is: ")
    assert api_error(validate_resource_name_is_node_id, "3", 5) == ApiError(
        Errors.INVALID_REQUEST, "Unexpected broker id, expected 5, but received 3")
    assert api_error(validate_resource_name_is_node_id, "e", 5) == ApiError(
        Errors.INVALID_REQUEST, "Node id must be an integer, but it is: e")


def test_prepare_incremental_configs():
    props = {"log.cleanup.policy": "compact"}
    ops = [("log.cleanup.policy", AlterConfigOp.APPEND, "delete,compact"), ("metric.reporters", AlterConfigOp.APPEND,
                                                                           "a"),
           ("sasl.enabled.mechanisms", AlterConfigOp.SUBTRACT, "GSSAPI"), ("log.roll.ms", AlterConfigOp.SET, "5"),
           ("x", AlterConfigOp.DELETE, None)]
    prepare_incremental_configs(ops, props)
    assert props == {"log.cleanup.policy": "compact,delete",
                     "metric.reporters": "org.apache.kafka.common.metrics.JmxReporter,a",
                     "sasl.enabled.mechanisms": "", "log.roll.ms": "5"}
    assert api_error(prepare_incremental_configs, [("log.roll.ms", AlterConfigOp.APPEND, "1")], {}) == ApiError(
        Errors.INVALID_CONFIG, "Config value append is not allowed for config key: log.roll.ms")
    assert api_error(prepare_incremental_configs, [("log.roll.ms", AlterConfigOp.SUBTRACT, "1")], {}) == ApiError(
        Errors.INVALID_CONFIG, "Config value subtract is not allowed for config key: log.roll.ms")
    assert api_error(prepare_incremental_configs, [("not.a.kafka.key", AlterConfigOp.SUBTRACT, "1")], {}) == \
        ApiError(Errors.INVALID_CONFIG, "Unknown config name: not.a.kafka.key")


def test_broker_synonyms_and_listener_names():
    assert broker_config_synonyms("log.retention.hours", False) == ["log.retention.ms", "log.retention.minutes",
                                                                    "log.retention.hours"]
    assert broker_config_synonyms("listener.name.x.plain.sasl.jaas.config", True) == [
        "listener.name.x.plain.sasl.jaas.config", "sasl.jaas.config"]
    assert broker_config_synonyms("listener.name.x.ssl.keystore.type", False) == ["listener.name.x.ssl.keystore.type"]
    assert listener_base_name("listener.name.x.ssl.keystore.type") == "ssl.keystore.type"
    assert listener_base_name("ssl.keystore.type") is None


# ---------------------------------------------------------------------------------------- schema

def test_schema_predicates():
    s = KAFKA_CONFIG_SCHEMA
    assert s.is_splittable(ConfigResourceType.TOPIC, "cleanup.policy")
    assert not s.is_splittable(ConfigResourceType.TOPIC, "retention.ms")
    assert not s.is_splittable(ConfigResourceType.TOPIC, "nope")
    assert s.is_sensitive(ConfigResourceType.BROKER, "ssl.key.password")
    assert s.is_sensitive(ConfigResourceType.BROKER, "custom.key")  # unknown: maybe a password
    assert not s.is_sensitive(ConfigResourceType.TOPIC, "retention.ms")
    assert s.get_default(ConfigResourceType.BROKER, "log.cleanup.policy") == "delete"
    assert s.get_default(ConfigResourceType.BROKER, "log.roll.ms") is None
    assert s.statically_configured_min_insync_replicas({}) == 1
    assert s.statically_configured_min_insync_replicas({"min.insync.replicas": "3"}) == 3


def test_describe_broker_configs():
    s = KAFKA_CONFIG_SCHEMA
    static = {"log.roll.hours": "2", "ssl.key.password": "pw"}
    cluster = {"log.roll.ms": "1234567", "max.connections.per.ip": "60"}
    node = {"max.connections.per.ip": "7", "listener.name.a.ssl.keystore.password": "secret"}
    # the cluster default lists only what is set at cluster level (KRaftClusterTest's exhaustive describe)
    assert [(e.name, e.value, e.source) for e in s.describe_broker_configs(
        "", static_config=static, cluster_configs=cluster, node_configs={})] == [
        ("log.roll.ms", "1234567", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("max.connections.per.ip", "60", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    entries = {e.name: e for e in s.describe_broker_configs("2", static_config=static, cluster_configs=cluster,
                                                            node_configs=node, include_synonyms=True)}
    assert (entries["max.connections.per.ip"].value, entries["max.connections.per.ip"].source) == (
        "7", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(x.name, x.value, x.source) for x in entries["max.connections.per.ip"].synonyms] == [
        ("max.connections.per.ip", "7", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("max.connections.per.ip", "60", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("max.connections.per.ip", "2147483647", ConfigSource.DEFAULT_CONFIG)]
    hours = entries["log.roll.hours"]
    assert (hours.value, hours.source, hours.is_read_only) == ("2", ConfigSource.STATIC_BROKER_CONFIG, True)
    assert entries["log.roll.ms"].source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert not entries["log.roll.ms"].is_read_only
    pw = entries["ssl.key.password"]
    assert pw.is_sensitive and pw.value == "pw" and pw.describe_value is None
    assert entries["listener.name.a.ssl.keystore.password"].describe_value is None
    assert entries["num.io.threads"].value == "8" and entries["num.io.threads"].source is ConfigSource.DEFAULT_CONFIG
    assert [e.name for e in s.describe_broker_configs("2", static_config={}, cluster_configs={}, node_configs={},
                                                      keys=["num.io.threads", "nope"])] == ["num.io.threads"]
