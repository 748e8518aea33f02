"""Config definitions as data: what keys a topic or broker has, their types, defaults and
validators, their broker synonyms, and the checks Kafka makes on a config change.

Modules (each one Kafka concept):

* ``types``     -- ``ConfigDef``: types, Java-exact parsing and printing, validators, keys;
* ``resources`` -- ``ConfigResource`` (type, name) and ``AlterConfigOp``;
* ``topic``     -- ``LogConfig``: the topic keys, ``ServerTopicConfigSynonyms``, ``LogConfig.validate``;
* ``broker``    -- the ``KafkaConfig`` keys a broker can change at run time, ``DynamicBrokerConfig``'s
  key sets and checks, ``ConfigAdminManager.prepareIncrementalConfigs``;
* ``schema``    -- ``KafkaConfigSchema`` and the ``ConfigEntry`` DescribeConfigs answers with;
* ``validator`` -- ``ControllerConfigurationValidator``.

Errors: a refused config raises ``ApiError(code, Kafka's message)`` or :class:`ConfigError`
(Kafka's ``ConfigException``, answered as INVALID_CONFIG).
"""
from kraft_node.metadata.configs.broker import (
    ALL_DYNAMIC_CONFIGS,
    BROKER_CONFIG_DEF,
    PER_BROKER_CONFIGS,
    dynamic_config_update_mode,
    prepare_incremental_configs,
    validate_broker_config_change,
    validate_dynamic_broker_configs,
)
from kraft_node.metadata.configs.resources import DEFAULT_NODE, AlterConfigOp, ConfigResource, ConfigResourceType
from kraft_node.metadata.configs.schema import (
    EMPTY_CONFIG_SCHEMA,
    KAFKA_CONFIG_SCHEMA,
    ConfigEntry,
    ConfigSource,
    ConfigSynonymEntry,
    KafkaConfigSchema,
)
from kraft_node.metadata.configs.topic import (
    MIN_IN_SYNC_REPLICAS_CONFIG,
    TOPIC_CONFIG_DEF,
    TOPIC_CONFIG_SYNONYMS,
    UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG,
    check_no_null_topic_configs,
    validate_topic_configs,
    validate_topic_name,
)
from kraft_node.metadata.configs.types import ConfigDef, ConfigError, ConfigKey, ConfigSynonym, ConfigType
from kraft_node.metadata.configs.validator import (
    NO_OP_VALIDATOR,
    ConfigurationValidator,
    ControllerConfigurationValidator,
)

__all__ = [
    "ALL_DYNAMIC_CONFIGS", "BROKER_CONFIG_DEF", "PER_BROKER_CONFIGS", "dynamic_config_update_mode",
    "prepare_incremental_configs", "validate_broker_config_change", "validate_dynamic_broker_configs",
    "DEFAULT_NODE", "AlterConfigOp", "ConfigResource", "ConfigResourceType",
    "EMPTY_CONFIG_SCHEMA", "KAFKA_CONFIG_SCHEMA", "ConfigEntry", "ConfigSource", "ConfigSynonymEntry",
    "KafkaConfigSchema", "MIN_IN_SYNC_REPLICAS_CONFIG", "TOPIC_CONFIG_DEF", "TOPIC_CONFIG_SYNONYMS",
    "UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG", "check_no_null_topic_configs", "validate_topic_configs",
    "validate_topic_name", "ConfigDef", "ConfigError", "ConfigKey", "ConfigSynonym", "ConfigType",
    "NO_OP_VALIDATOR", "ConfigurationValidator", "ControllerConfigurationValidator",
]
