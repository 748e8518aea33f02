"""Kafka's ``KafkaConfigSchema`` (the controller's view of config types and defaults) and the
``ConfigEntry`` results DescribeConfigs answers with (value, source, synonyms).

Why the controller needs a schema: APPEND/SUBTRACT apply only to LIST keys (``is_splittable``),
an unset list starts from the key's default (``get_default``), a password is never logged
(``is_sensitive``), and a topic's effective value falls back through the broker synonyms:

    topic override (DYNAMIC_TOPIC_CONFIG)
      -> this node's dynamic config   (DYNAMIC_BROKER_CONFIG, resource BROKER "<node id>")
      -> the cluster's dynamic config (DYNAMIC_DEFAULT_BROKER_CONFIG, resource BROKER "")
      -> the node's static config     (STATIC_BROKER_CONFIG)
      -> the topic key's default      (DEFAULT_CONFIG)

each broker level trying the key's synonyms in precedence order and converting the unit
(``log.retention.hours`` -> ms).  The describe helpers give a broker (issue 24) the same
answers Kafka's ``ConfigHelper`` gives, from the committed config maps.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from kraft_node.metadata.configs.broker import (
    ALL_DYNAMIC_CONFIGS,
    BROKER_CONFIG_DEF,
    BROKER_QUOTA_CONFIGS,
    broker_config_synonyms,
)
from kraft_node.metadata.configs.resources import ConfigResourceType
from kraft_node.metadata.configs.topic import MIN_IN_SYNC_REPLICAS_CONFIG, TOPIC_CONFIG_DEF, TOPIC_CONFIG_SYNONYMS
from kraft_node.metadata.configs.types import (
    ConfigDef,
    ConfigKey,
    ConfigSynonym,
    ConfigType,
    parse_type,
)

__all__ = ["ConfigSource", "ConfigSynonymEntry", "ConfigEntry", "KafkaConfigSchema", "KAFKA_CONFIG_SCHEMA",
           "EMPTY_CONFIG_SCHEMA"]


class ConfigSource(enum.IntEnum):
    """Where a described value comes from (DescribeConfigsResponse's ConfigSource byte)."""
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


@dataclass(frozen=True)
class ConfigSynonymEntry:
    """One level a key is set at (DescribeConfigsSynonym); ``value`` None when sensitive."""
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True)
class ConfigEntry:
    """A described config (DescribeConfigsResourceResult / Kafka's admin ConfigEntry).

    ``value`` is the real value (the controller needs it); :attr:`describe_value` is what goes
    on the wire (None for a sensitive key, as Kafka never returns passwords)."""
    name: str
    value: str | None
    source: ConfigSource
    is_sensitive: bool = False
    is_read_only: bool = False
    type: ConfigType | None = None
    documentation: str | None = None
    synonyms: tuple[ConfigSynonymEntry, ...] = ()

    @property
    def describe_value(self) -> str | None:
        return None if self.is_sensitive else self.value

    @property
    def describe_type_id(self) -> int:
        """DescribeConfigs ConfigType byte (0 = UNKNOWN)."""
        return 0 if self.type is None else self.type.describe_id


_EMPTY_DEF = ConfigDef()


class KafkaConfigSchema:
    """Config types and defaults per resource type, and the topic keys' broker synonyms."""

    def __init__(self, config_defs: Mapping[ConfigResourceType, ConfigDef],
                 topic_synonyms: Mapping[str, Sequence[ConfigSynonym]]):
        self.config_defs = dict(config_defs)
        self.topic_synonyms = {k: tuple(v) for k, v in topic_synonyms.items()}

    def _key(self, type_: ConfigResourceType, key: str) -> ConfigKey | None:
        return self.config_defs.get(type_, _EMPTY_DEF).get(key)

    def is_splittable(self, type_: ConfigResourceType, key: str) -> bool:
        """Only LIST keys take APPEND/SUBTRACT."""
        config_key = self._key(type_, key)
        return config_key is not None and config_key.type is ConfigType.LIST

    def is_sensitive(self, type_: ConfigResourceType, key: str) -> bool:
        """True for a password, and for a key the schema does not know (it might be one)."""
        config_key = self._key(type_, key)
        return config_key is None or config_key.type.is_sensitive

    def get_default(self, type_: ConfigResourceType, key: str) -> str | None:
        """The default as config text; None when the key is unknown or has a null default."""
        config_key = self._key(type_, key)
        return None if config_key is None else config_key.default_string

    def config_type(self, type_: ConfigResourceType, key: str) -> ConfigType | None:
        config_key = self._key(type_, key)
        return None if config_key is None else config_key.type

    # ------------------------------------------------------------------ topic resolution
    def resolve_effective_topic_config(self, key: str, static_node_config: Mapping[str, str],
                                       dynamic_cluster_configs: Mapping[str, str],
                                       dynamic_node_configs: Mapping[str, str],
                                       dynamic_topic_configs: Mapping[str, str], *,
                                       include_synonyms: bool = False) -> ConfigEntry:
        """One topic key's effective value and its source (see the module doc for the order).
        ``include_synonyms`` also lists every level the key (or a broker synonym) is set at,
        highest precedence first.  KeyError for a key that is not a topic config."""
        config_key = self._key(ConfigResourceType.TOPIC, key)
        if config_key is None:
            raise KeyError(f"Unknown topic config name: {key}")
        synonyms = self.topic_synonyms.get(key, ())
        levels: list[tuple[str, str, ConfigSource]] = []  # (name, converted value, source)
        if key in dynamic_topic_configs:
            levels.append((key, dynamic_topic_configs[key], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for config_map, source in ((dynamic_node_configs, ConfigSource.DYNAMIC_BROKER_CONFIG),
                                   (dynamic_cluster_configs, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                                   (static_node_config, ConfigSource.STATIC_BROKER_CONFIG)):
            for synonym in synonyms:
                if synonym.name in config_map:
                    levels.append((synonym.name, synonym.converter(config_map[synonym.name]), source))
        value: str | None
        if levels:
            value, source = levels[0][1], levels[0][2]
        else:
            value, source = config_key.default_string, ConfigSource.DEFAULT_CONFIG
        sensitive = config_key.type.is_sensitive
        listed = tuple(ConfigSynonymEntry(name, None if sensitive else v, s) for name, v, s in levels)
        return ConfigEntry(key, value, source, sensitive, False, config_key.type, config_key.documentation or None,
                           listed if include_synonyms else ())

    def effective_topic_value(self, key: str, static_node_config: Mapping[str, str],
                              dynamic_cluster_configs: Mapping[str, str], dynamic_node_configs: Mapping[str, str],
                              dynamic_topic_configs: Mapping[str, str]) -> str | None:
        """Just the value :meth:`resolve_effective_topic_config` resolves (the controller's hot
        path: ``min.insync.replicas`` on ISR changes)."""
        value = dynamic_topic_configs.get(key)
        if value is not None:
            return value
        synonyms = self.topic_synonyms.get(key, ())
        for config_map in (dynamic_node_configs, dynamic_cluster_configs, static_node_config):
            for synonym in synonyms:
                value = config_map.get(synonym.name)
                if value is not None:
                    return synonym.converter(value)
        config_key = self._key(ConfigResourceType.TOPIC, key)
        if config_key is None:
            raise KeyError(f"Unknown topic config name: {key}")
        return config_key.default_string

    def resolve_effective_topic_configs(self, static_node_config: Mapping[str, str],
                                        dynamic_cluster_configs: Mapping[str, str],
                                        dynamic_node_configs: Mapping[str, str],
                                        dynamic_topic_configs: Mapping[str, str], *,
                                        include_synonyms: bool = False) -> dict[str, ConfigEntry]:
        """Every topic key's effective value (CreateTopics' response configs, DescribeConfigs)."""
        return {key.name: self.resolve_effective_topic_config(key.name, static_node_config, dynamic_cluster_configs,
                                                              dynamic_node_configs, dynamic_topic_configs,
                                                              include_synonyms=include_synonyms)
                for key in self.config_defs.get(ConfigResourceType.TOPIC, _EMPTY_DEF)}

    def statically_configured_min_insync_replicas(self, static_node_config: Mapping[str, str]) -> int:
        """The node's static ``min.insync.replicas`` (the broker key's default when unset):
        what the cluster-level value is set to when ELR is turned on."""
        text = static_node_config.get(MIN_IN_SYNC_REPLICAS_CONFIG)
        if text is None:
            default = self._key(ConfigResourceType.BROKER, MIN_IN_SYNC_REPLICAS_CONFIG)
            text = default.default_string if default is not None else None
        if text is None:
            return 1
        value = parse_type(MIN_IN_SYNC_REPLICAS_CONFIG, text, ConfigType.INT)
        assert isinstance(value, int)
        return value

    # ------------------------------------------------------------------ broker describe
    def describe_broker_configs(self, resource_name: str, *, static_config: Mapping[str, str],
                                cluster_configs: Mapping[str, str], node_configs: Mapping[str, str],
                                keys: Iterable[str] | None = None, include_synonyms: bool = False,
                                include_documentation: bool = False) -> list[ConfigEntry]:
        """DescribeConfigs of a BROKER resource, as Kafka's ``ConfigHelper`` answers it.

        ``""`` (the cluster default) lists only the keys set at cluster level (source
        DYNAMIC_DEFAULT_BROKER_CONFIG); a broker id lists every defined key plus every key set
        for it, each with its effective value: node dynamic > cluster dynamic > static >
        default.  ``keys`` restricts the answer (unknown keys are left out, as Kafka does).
        A key is read-only unless it is dynamically alterable."""
        per_broker = resource_name != ""
        if per_broker:
            names = list(BROKER_CONFIG_DEF.keys if ConfigResourceType.BROKER not in self.config_defs
                         else self.config_defs[ConfigResourceType.BROKER].keys)
            names += [n for m in (static_config, cluster_configs, node_configs) for n in m if n not in names]
        else:
            names = list(cluster_configs)
        if keys is not None:
            wanted = set(keys)
            names = [n for n in names if n in wanted]
        out = []
        for name in names:
            config_key = self._key(ConfigResourceType.BROKER, name)
            sensitive = _looks_sensitive(name) if config_key is None else config_key.type.is_sensitive
            levels: list[ConfigSynonymEntry] = []
            synonyms = broker_config_synonyms(name, match_listener_override=True)
            for config_map, source in ((node_configs, ConfigSource.DYNAMIC_BROKER_CONFIG),
                                       (cluster_configs, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                                       (static_config, ConfigSource.STATIC_BROKER_CONFIG)):
                if not per_broker and source is not ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG:
                    continue
                for synonym in synonyms:
                    if synonym in config_map:
                        levels.append(ConfigSynonymEntry(synonym, None if sensitive else config_map[synonym], source))
            if per_broker:
                for synonym in synonyms:
                    synonym_key = self._key(ConfigResourceType.BROKER, synonym)
                    if synonym_key is not None and synonym_key.default_string is not None:
                        levels.append(ConfigSynonymEntry(synonym, None if sensitive else synonym_key.default_string,
                                                         ConfigSource.DEFAULT_CONFIG))
            while levels and levels[0].name != name:  # Kafka drops synonyms ranked above the key itself
                levels.pop(0)
            own = next((m[name] for m in ((node_configs, cluster_configs, static_config) if per_broker
                                          else (cluster_configs,)) if name in m), None)
            if own is None and config_key is not None and per_broker:
                own = config_key.default_string
            source = levels[0].source if levels else ConfigSource.DEFAULT_CONFIG
            out.append(ConfigEntry(
                name, own, source, sensitive,
                name not in ALL_DYNAMIC_CONFIGS and name not in BROKER_QUOTA_CONFIGS,
                config_key.type if config_key is not None else None,
                (config_key.documentation or None) if include_documentation and config_key is not None else None,
                tuple(levels) if include_synonyms else ()))
        return out


def _looks_sensitive(name: str) -> bool:
    """A listener-prefixed or custom key whose base is a password key (Kafka's
    ``DynamicBrokerConfig.isPasswordConfig``: the name ends with a dynamic password key)."""
    return any(name.endswith(k.name) for k in BROKER_CONFIG_DEF if k.type is ConfigType.PASSWORD)


#: The schema of Kafka's own configs (topic and broker keys).
KAFKA_CONFIG_SCHEMA = KafkaConfigSchema({ConfigResourceType.TOPIC: TOPIC_CONFIG_DEF,
                                         ConfigResourceType.BROKER: BROKER_CONFIG_DEF}, TOPIC_CONFIG_SYNONYMS)
#: Kafka's ``KafkaConfigSchema.EMPTY``: no keys known (everything sensitive, nothing splittable).
EMPTY_CONFIG_SCHEMA = KafkaConfigSchema({}, {})
