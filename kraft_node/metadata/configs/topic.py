"""Topic configs: Kafka's ``LogConfig`` definitions, their broker synonyms
(``ServerTopicConfigSynonyms``) and ``LogConfig.validate``, as data and one validation path.

Version: Kafka 4.x (the 4.0 set kraft's metadata.versions run): ``message.format.version``,
``message.timestamp.difference.max.ms`` and ``message.downconversion.enable`` are gone (removed
in 4.0), ``segment.bytes`` is at least 1 MiB and ``message.timestamp.after.max.ms`` defaults to
one hour (KIP-1030).  Kafka's internal test-only ``internal.segment.bytes`` is not defined.

Why synonyms live with the keys: a topic key with no override takes the first of its broker
synonyms that is set (dynamically for one node, for the cluster, statically), converted to the
topic key's unit (``log.roll.hours`` -> ms); ``KafkaConfigSchema.resolveEffectiveTopicConfig``
and ``KafkaConfig.extractLogConfigMap`` both walk this table.

``validate_topic_configs`` is ``LogConfig.validate(existing, props, staticLogConfig, remote, false)``
as the KRaft controller calls it: unknown names first ("Unknown topic config name: x"), then
every key parsed and validated over the static log config (definition order, first error wins),
then the cross-key rules (compaction lags, tiered storage).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from kraft_node.metadata.configs.types import (
    HOURS_TO_MILLISECONDS,
    LONG_MAX,
    MINUTES_TO_MILLISECONDS,
    ConfigDef,
    ConfigError,
    ConfigSynonym,
    ConfigType,
    GzipLevel,
    Range,
    ThrottledReplicaList,
    ValidList,
    ValidString,
)
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.protocol.errors import Errors

__all__ = [
    "TOPIC_CONFIG_DEF", "TOPIC_CONFIG_SYNONYMS", "CONFIGS_WITH_NO_SERVER_DEFAULTS", "COMPRESSION_TYPES",
    "MIN_IN_SYNC_REPLICAS_CONFIG", "UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG", "CLEANUP_POLICY_CONFIG",
    "REMOTE_LOG_STORAGE_ENABLE_CONFIG", "validate_topic_configs", "validate_topic_names",
    "validate_topic_name", "check_no_null_topic_configs", "extract_log_config_map", "server_synonym",
]

MIN_IN_SYNC_REPLICAS_CONFIG = "min.insync.replicas"
UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG = "unclean.leader.election.enable"
CLEANUP_POLICY_CONFIG = "cleanup.policy"
REMOTE_LOG_STORAGE_ENABLE_CONFIG = "remote.storage.enable"

#: BrokerCompressionType.names(), in Kafka's order (its error message lists them so).
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

_I, _L, _D, _B, _S, _LIST = (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE, ConfigType.BOOLEAN,
                             ConfigType.STRING, ConfigType.LIST)
_WEEK_MS = 7 * 24 * 3_600_000

#: (name, type, default, validator, doc) in LogConfig's definition order.
_TOPIC_KEYS: tuple[tuple[str, ConfigType, Any, Any, str], ...] = (
    ("segment.bytes", _I, 1024 * 1024 * 1024, Range.at_least(1024 * 1024), "Segment file size for the log."),
    ("segment.ms", _L, _WEEK_MS, Range.at_least(1), "Time after which a segment rolls even if not full."),
    ("segment.jitter.ms", _L, 0, Range.at_least(0), "Maximum random jitter subtracted from segment.ms."),
    ("segment.index.bytes", _I, 10 * 1024 * 1024, Range.at_least(4), "Size of the offset index."),
    ("flush.messages", _L, LONG_MAX, Range.at_least(1), "Messages between forced fsyncs."),
    ("flush.ms", _L, LONG_MAX, Range.at_least(0), "Time between forced fsyncs."),
    ("retention.bytes", _L, -1, None, "Maximum partition size before old segments are discarded."),
    ("retention.ms", _L, _WEEK_MS, Range.at_least(-1), "Maximum time a log is retained (-1: no limit)."),
    ("max.message.bytes", _I, 1024 * 1024 + 12, Range.at_least(0), "Largest record batch size allowed."),
    ("index.interval.bytes", _I, 4096, Range.at_least(0), "Bytes between offset index entries."),
    ("delete.retention.ms", _L, 24 * 3_600_000, Range.at_least(0), "How long tombstones are retained."),
    ("min.compaction.lag.ms", _L, 0, Range.at_least(0), "Minimum time a message stays uncompacted."),
    ("max.compaction.lag.ms", _L, LONG_MAX, Range.at_least(1), "Maximum time a message stays uncompacted."),
    ("file.delete.delay.ms", _L, 60_000, Range.at_least(0), "Delay before a deleted file is removed."),
    ("min.cleanable.dirty.ratio", _D, 0.5, Range.between(0, 1), "Dirty ratio at which the cleaner runs."),
    (CLEANUP_POLICY_CONFIG, _LIST, ("delete",), ValidList(("compact", "delete")), "Retention policy."),
    (UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG, _B, False, None, "Whether an out-of-sync replica may lead."),
    (MIN_IN_SYNC_REPLICAS_CONFIG, _I, 1, Range.at_least(1), "Minimum in-sync replicas for acks=all."),
    ("compression.type", _S, "producer", ValidString(COMPRESSION_TYPES), "Final compression type."),
    ("compression.gzip.level", _I, -1, GzipLevel(), "gzip compression level."),
    ("compression.lz4.level", _I, 9, Range.between(1, 17), "lz4 compression level."),
    ("compression.zstd.level", _I, 3, Range.between(-131072, 22), "zstd compression level."),
    ("preallocate", _B, False, None, "Preallocate segment files."),
    ("message.timestamp.type", _S, "CreateTime", ValidString(("CreateTime", "LogAppendTime")),
     "Whether record timestamps are create or append time."),
    ("message.timestamp.before.max.ms", _L, LONG_MAX, Range.at_least(0), "Allowed past timestamp skew."),
    ("message.timestamp.after.max.ms", _L, 3_600_000, Range.at_least(0), "Allowed future timestamp skew."),
    ("leader.replication.throttled.replicas", _LIST, (), ThrottledReplicaList(), "Leader-side throttled replicas."),
    ("follower.replication.throttled.replicas", _LIST, (), ThrottledReplicaList(),
     "Follower-side throttled replicas."),
    (REMOTE_LOG_STORAGE_ENABLE_CONFIG, _B, False, None, "Tiered storage for this topic."),
    ("local.retention.ms", _L, -2, Range.at_least(-2), "Local retention time (-2: retention.ms)."),
    ("local.retention.bytes", _L, -2, Range.at_least(-2), "Local retention size (-2: retention.bytes)."),
    ("remote.log.copy.disable", _B, False, None, "Stop copying segments to remote storage."),
    ("remote.log.delete.on.disable", _B, False, None, "Delete remote data when tiering is disabled."),
)

TOPIC_CONFIG_DEF = ConfigDef()
for _name, _type, _default, _validator, _doc in _TOPIC_KEYS:
    TOPIC_CONFIG_DEF.define(_name, _type, _default, _validator, _doc)


def _log(name: str, converter: Any = None) -> ConfigSynonym:
    return ConfigSynonym("log." + name) if converter is None else ConfigSynonym("log." + name, converter)


#: ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS: topic key -> broker keys, by precedence.
TOPIC_CONFIG_SYNONYMS: dict[str, tuple[ConfigSynonym, ...]] = {
    "segment.bytes": (_log("segment.bytes"),),
    "segment.ms": (_log("roll.ms"), _log("roll.hours", HOURS_TO_MILLISECONDS)),
    "segment.jitter.ms": (_log("roll.jitter.ms"), _log("roll.jitter.hours", HOURS_TO_MILLISECONDS)),
    "segment.index.bytes": (_log("index.size.max.bytes"),),
    "flush.messages": (_log("flush.interval.messages"),),
    "flush.ms": (_log("flush.interval.ms"), _log("flush.scheduler.interval.ms")),
    "retention.bytes": (_log("retention.bytes"),),
    "retention.ms": (_log("retention.ms"), _log("retention.minutes", MINUTES_TO_MILLISECONDS),
                     _log("retention.hours", HOURS_TO_MILLISECONDS)),
    "max.message.bytes": (ConfigSynonym("message.max.bytes"),),
    "index.interval.bytes": (_log("index.interval.bytes"),),
    "delete.retention.ms": (_log("cleaner.delete.retention.ms"),),
    "min.compaction.lag.ms": (_log("cleaner.min.compaction.lag.ms"),),
    "max.compaction.lag.ms": (_log("cleaner.max.compaction.lag.ms"),),
    "file.delete.delay.ms": (_log("segment.delete.delay.ms"),),
    "min.cleanable.dirty.ratio": (_log("cleaner.min.cleanable.ratio"),),
    CLEANUP_POLICY_CONFIG: (_log("cleanup.policy"),),
    UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG: (ConfigSynonym(UNCLEAN_LEADER_ELECTION_ENABLE_CONFIG),),
    MIN_IN_SYNC_REPLICAS_CONFIG: (ConfigSynonym(MIN_IN_SYNC_REPLICAS_CONFIG),),
    "compression.type": (ConfigSynonym("compression.type"),),
    "compression.gzip.level": (ConfigSynonym("compression.gzip.level"),),
    "compression.lz4.level": (ConfigSynonym("compression.lz4.level"),),
    "compression.zstd.level": (ConfigSynonym("compression.zstd.level"),),
    "preallocate": (_log("preallocate"),),
    "message.timestamp.type": (_log("message.timestamp.type"),),
    "message.timestamp.before.max.ms": (_log("message.timestamp.before.max.ms"),),
    "message.timestamp.after.max.ms": (_log("message.timestamp.after.max.ms"),),
    "local.retention.ms": (_log("local.retention.ms"),),
    "local.retention.bytes": (_log("local.retention.bytes"),),
}

#: LogConfig.CONFIGS_WITH_NO_SERVER_DEFAULTS: topic keys no broker key stands for.
CONFIGS_WITH_NO_SERVER_DEFAULTS = frozenset(TOPIC_CONFIG_DEF.keys) - frozenset(TOPIC_CONFIG_SYNONYMS)


def server_synonym(topic_key: str) -> str:
    """ServerTopicConfigSynonyms.serverSynonym: the highest-precedence broker key for a topic key."""
    synonyms = TOPIC_CONFIG_SYNONYMS.get(topic_key)
    if not synonyms:
        raise KeyError(f"No server synonym found for {topic_key}")
    return synonyms[0].name


def extract_log_config_map(static_config: Mapping[str, str]) -> dict[str, str]:
    """``KafkaConfig.extractLogConfigMap``: the topic keys a node's static config sets through
    their broker synonyms (first set synonym wins, converted to the topic key's unit).  Keys the
    static config leaves alone are omitted: their broker default equals the topic default."""
    out: dict[str, str] = {}
    for topic_key, synonyms in TOPIC_CONFIG_SYNONYMS.items():
        for synonym in synonyms:
            value = static_config.get(synonym.name)
            if value is not None:
                out[topic_key] = synonym.converter(value)
                break
    return out


# --------------------------------------------------------------------------- names

_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
MAX_TOPIC_NAME_LENGTH = 249


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: ApiError(INVALID_TOPIC_EXCEPTION, "Topic name is invalid: ...")."""
    if name == "":
        reason = "the empty string is not allowed"
    elif name == ".":
        reason = "'.' is not allowed"
    elif name == "..":
        reason = "'..' is not allowed"
    elif len(name) > MAX_TOPIC_NAME_LENGTH:
        reason = f"the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
    elif not set(name) <= _LEGAL:
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return
    raise ApiError(Errors.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")


def check_no_null_topic_configs(configs: Iterable[tuple[str, str | None]]) -> None:
    """The null-value rule of CreateTopics and the controller's validator:
    ApiError(INVALID_CONFIG, "Null value not supported for topic configs: a,b") naming every
    key given without a value, in the order given."""
    nulls = [name for name, value in configs if value is None]
    if nulls:
        raise ApiError(Errors.INVALID_CONFIG, "Null value not supported for topic configs: " + ",".join(nulls))


def validate_topic_names(props: Mapping[str, object]) -> None:
    """``LogConfig.validateNames``: the first key that is not a topic config is refused."""
    for name in props:
        if name not in TOPIC_CONFIG_DEF:
            raise ApiError(Errors.INVALID_CONFIG, f"Unknown topic config name: {name}")


# --------------------------------------------------------------------------- values

def _invalid(message: str) -> ApiError:
    return ApiError(Errors.INVALID_CONFIG, message)


def _validate_remote_retention(values: Mapping[str, Any], total_key: str, local_key: str, limited: bool) -> None:
    """validateRemoteStorageRetentionSize/Time: with a limited total, a local retention (unless
    -2, "follow the total") must not be -1 (unlimited) nor exceed the total."""
    total, local = values[total_key], values[local_key]
    if limited and local != -2:
        if local == -1:
            raise ConfigError.invalid(local_key, local, f"Value must not be -1 as {total_key} value is set as {total}.")
        if local > total:
            raise ConfigError.invalid(local_key, local, f"Value must not be more than {total_key} property value: "
                                                        f"{total}")


def _validate_values(existing: Mapping[str, str], values: Mapping[str, Any],
                     remote_storage_system_enabled: bool) -> None:
    """``LogConfig.validateTopicLogConfigValues`` (KRaft: fromZK false)."""
    min_lag, max_lag = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if min_lag > max_lag:
        raise _invalid(f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
                       f"max.compaction.lag.ms ({max_lag})")
    if values[REMOTE_LOG_STORAGE_ENABLE_CONFIG]:
        if not remote_storage_system_enabled:
            raise ConfigError("Tiered Storage functionality is disabled in the broker. "
                              "Topic cannot be configured with remote log storage.")
        if any("compact" in p.lower() for p in values[CLEANUP_POLICY_CONFIG]):
            raise ConfigError("Remote log storage is unsupported for the compacted topics")
        _validate_remote_retention(values, "retention.bytes", "local.retention.bytes", values["retention.bytes"] > -1)
        _validate_remote_retention(values, "retention.ms", "local.retention.ms", values["retention.ms"] != -1)
        if values["remote.log.copy.disable"]:
            if values["local.retention.bytes"] != -2 and values["local.retention.bytes"] != values["retention.bytes"]:
                raise _invalid("When `remote.log.copy.disable` is set to true, the `local.retention.bytes` and "
                               "`retention.bytes` must be set to the identical value because there will be no more "
                               "logs copied to the remote storage.")
            if values["local.retention.ms"] != -2 and values["local.retention.ms"] != values["retention.ms"]:
                raise _invalid("When `remote.log.copy.disable` is set to true, the `local.retention.ms` and "
                               "`retention.ms` must be set to the identical value because there will be no more "
                               "logs copied to the remote storage.")
    else:
        was_enabled = existing.get(REMOTE_LOG_STORAGE_ENABLE_CONFIG, "false").strip().lower() == "true"
        if was_enabled and not values["remote.log.delete.on.disable"]:
            raise _invalid("It is invalid to disable remote storage without deleting remote data. If you want to "
                           "keep the remote data and turn to read only, please set "
                           "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to disable remote "
                           "storage and delete all remote data, please set "
                           "`remote.storage.enable=false,remote.log.delete.on.disable=true`.")


def validate_topic_configs(new_configs: Mapping[str, str], *, existing_configs: Mapping[str, str] | None = None,
                           static_log_config: Mapping[str, str] | None = None,
                           remote_storage_system_enabled: bool = False) -> dict[str, Any]:
    """``LogConfig.validate`` of a topic's whole override set (``new_configs``: no None values;
    callers check nulls first).  Returns the parsed effective values (static log config under
    the overrides, defaults elsewhere).  Raises ApiError(INVALID_CONFIG, Kafka's message) or
    :class:`ConfigError` (answered as INVALID_CONFIG too)."""
    validate_topic_names(new_configs)
    combined: dict[str, str | None] = dict(static_log_config or {})
    combined.update(new_configs)
    values = TOPIC_CONFIG_DEF.parse(combined)
    _validate_values(existing_configs or {}, values, remote_storage_system_enabled)
    return values
