"""Broker configs a cluster can change at run time: Kafka's ``DynamicBrokerConfig`` key sets,
the ``KafkaConfig`` definitions of those keys, and the checks a broker makes before it forwards
an AlterConfigs/IncrementalAlterConfigs of a BROKER resource to the controller
(``ConfigAdminManager.preprocess`` -> ``DynamicBrokerConfig.validateConfigs``).

Why two validations: Kafka's controller only checks a BROKER resource's *name* (its
``ControllerConfigurationValidator``); the *keys and values* are checked on the broker that
received the request, which knows its static config.  kraft keeps the split: the controller
calls ``ControllerConfigurationValidator`` (validator.py), and a node answering the RPC calls
:func:`validate_broker_config_change` first.

Key sets (Kafka 4.x, ``DynamicBrokerConfig.AllDynamicConfigs``):

* per-broker only (``PER_BROKER_CONFIGS``): the listener and SSL/SASL keys (a cluster-default
  ``""`` resource may not set them: "Cannot update these configs at default cluster level, broker
  id must be specified");
* security keys that are valid only behind a listener prefix (``DYNAMIC_SECURITY_CONFIGS``:
  ``listener.name.<l>.ssl.keystore.location``...);
* cluster-wide or per-broker: the log defaults (the topic keys' first broker synonyms), cleaner,
  thread pools, connection limits, producer-state, remote-log rates, metric reporters and the
  broker quota rates;
* every other Kafka broker key is read-only ("Cannot update these configs dynamically: Set(x)");
  names Kafka does not know are custom configs and are allowed (Kafka's ``customPropsAllowed``).

Kafka's name set is not copied here (``kraft_node/server/kafka_config_keys.txt`` has it and this
layer may not import the node): callers pass it as ``known_names``.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Mapping, MutableMapping, Sequence

from kraft_node.metadata.configs.resources import AlterConfigOp
from kraft_node.metadata.configs.topic import COMPRESSION_TYPES, TOPIC_CONFIG_SYNONYMS
from kraft_node.metadata.configs.types import (
    LONG_MAX,
    ConfigDef,
    ConfigError,
    ConfigKey,
    ConfigType,
    GzipLevel,
    Range,
    ValidList,
    ValidString,
    convert_to_string,
    java_split,
)
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.protocol.errors import Errors

__all__ = [
    "BROKER_CONFIG_DEF", "ALL_DYNAMIC_CONFIGS", "DYNAMIC_SECURITY_CONFIGS", "PER_BROKER_CONFIGS",
    "CLUSTER_LEVEL_LISTENER_CONFIGS", "BROKER_QUOTA_CONFIGS", "DYNAMIC_LOG_CONFIGS", "LISTENER_MECHANISM_CONFIGS",
    "dynamic_config_update_mode", "is_dynamic_broker_config", "broker_config_synonyms", "listener_base_name",
    "validate_dynamic_broker_configs", "validate_broker_config_change", "prepare_incremental_configs",
    "validate_resource_name_is_node_id",
]

_I, _L, _D, _B, _S, _SH, _LIST, _C, _P = (ConfigType.INT, ConfigType.LONG, ConfigType.DOUBLE, ConfigType.BOOLEAN,
                                          ConfigType.STRING, ConfigType.SHORT, ConfigType.LIST, ConfigType.CLASS,
                                          ConfigType.PASSWORD)
INT_MAX = 2 ** 31 - 1
DOUBLE_MAX = 1.7976931348623157e308

#: (name, type, default, validator, doc) of the broker keys kraft defines: every dynamic one
#: and the static synonyms a topic key falls back to.
_BROKER_KEYS: tuple[tuple[str, ConfigType, Any, Any, str], ...] = (
    # --- log defaults (LogConfig.SERVER_CONFIG_DEF, ReplicationConfigs, ServerConfigs, RemoteLogManagerConfig)
    ("log.segment.bytes", _I, 1024 * 1024 * 1024, Range.at_least(1024 * 1024), "Maximum size of a log segment."),
    ("log.roll.ms", _L, None, None, "Time before a new segment rolls (ms)."),
    ("log.roll.hours", _I, 168, Range.at_least(1), "Time before a new segment rolls (hours)."),
    ("log.roll.jitter.ms", _L, None, None, "Segment roll jitter (ms)."),
    ("log.roll.jitter.hours", _I, 0, Range.at_least(0), "Segment roll jitter (hours)."),
    ("log.index.size.max.bytes", _I, 10 * 1024 * 1024, Range.at_least(4), "Maximum offset index size."),
    ("log.flush.interval.messages", _L, LONG_MAX, Range.at_least(1), "Messages between fsyncs."),
    ("log.flush.interval.ms", _L, None, None, "Time between fsyncs (ms)."),
    ("log.flush.scheduler.interval.ms", _L, LONG_MAX, None, "How often the flusher checks logs (ms)."),
    ("log.retention.bytes", _L, -1, None, "Maximum log size before deletion."),
    ("log.retention.ms", _L, None, None, "Log retention (ms)."),
    ("log.retention.minutes", _I, None, None, "Log retention (minutes)."),
    ("log.retention.hours", _I, 168, None, "Log retention (hours)."),
    ("message.max.bytes", _I, 1024 * 1024 + 12, Range.at_least(0), "Largest record batch size allowed."),
    ("log.index.interval.bytes", _I, 4096, Range.at_least(0), "Bytes between offset index entries."),
    ("log.cleaner.delete.retention.ms", _L, 24 * 3_600_000, Range.at_least(0), "Tombstone retention."),
    ("log.cleaner.min.compaction.lag.ms", _L, 0, Range.at_least(0), "Minimum uncompacted time."),
    ("log.cleaner.max.compaction.lag.ms", _L, LONG_MAX, Range.at_least(1), "Maximum uncompacted time."),
    ("log.segment.delete.delay.ms", _L, 60_000, Range.at_least(0), "Delay before deleting a file."),
    ("log.cleaner.min.cleanable.ratio", _D, 0.5, Range.between(0, 1), "Dirty ratio at which cleaning starts."),
    ("log.cleanup.policy", _LIST, ("delete",), ValidList(("compact", "delete")), "Default cleanup policy."),
    ("unclean.leader.election.enable", _B, False, None, "Whether an out-of-sync replica may lead."),
    ("min.insync.replicas", _I, 1, Range.at_least(1), "Minimum in-sync replicas for acks=all."),
    ("compression.type", _S, "producer", ValidString(COMPRESSION_TYPES), "Final compression type."),
    ("compression.gzip.level", _I, -1, GzipLevel(), "gzip compression level."),
    ("compression.lz4.level", _I, 9, Range.between(1, 17), "lz4 compression level."),
    ("compression.zstd.level", _I, 3, Range.between(-131072, 22), "zstd compression level."),
    ("log.preallocate", _B, False, None, "Preallocate segment files."),
    ("log.message.timestamp.type", _S, "CreateTime", ValidString(("CreateTime", "LogAppendTime")), "Timestamp type."),
    ("log.message.timestamp.before.max.ms", _L, LONG_MAX, Range.at_least(0), "Allowed past timestamp skew."),
    ("log.message.timestamp.after.max.ms", _L, 3_600_000, Range.at_least(0), "Allowed future timestamp skew."),
    ("log.local.retention.ms", _L, -2, Range.at_least(-2), "Local retention time of tiered topics."),
    ("log.local.retention.bytes", _L, -2, Range.at_least(-2), "Local retention size of tiered topics."),
    ("remote.log.storage.system.enable", _B, False, None, "Whether tiered storage is enabled (static)."),
    # --- cleaner (CleanerConfig)
    ("log.cleaner.threads", _I, 1, Range.at_least(0), "Cleaner threads."),
    ("log.cleaner.dedupe.buffer.size", _L, 128 * 1024 * 1024, None, "Cleaner dedupe buffer."),
    ("log.cleaner.io.buffer.load.factor", _D, 0.9, None, "Cleaner dedupe buffer load factor."),
    ("log.cleaner.io.buffer.size", _I, 512 * 1024, Range.at_least(0), "Cleaner I/O buffer."),
    ("log.cleaner.io.max.bytes.per.second", _D, DOUBLE_MAX, None, "Cleaner I/O throttle."),
    ("log.cleaner.backoff.ms", _L, 15_000, Range.at_least(0), "Cleaner idle backoff."),
    # --- thread pools
    ("num.io.threads", _I, 8, Range.at_least(1), "Request handler threads."),
    ("num.replica.fetchers", _I, 1, None, "Replica fetcher threads per source broker."),
    ("num.recovery.threads.per.data.dir", _I, 2, Range.at_least(1), "Log recovery threads per dir."),
    ("background.threads", _I, 10, Range.at_least(1), "Background task threads."),
    ("num.network.threads", _I, 3, Range.at_least(1), "Network threads."),
    # --- metrics
    ("metric.reporters", _LIST, ("org.apache.kafka.common.metrics.JmxReporter",), None, "Metric reporter classes."),
    # --- listeners and security (DynamicListenerConfig, BrokerSecurityConfigs)
    ("listeners", _S, "PLAINTEXT://:9092", None, "Listener URIs."),
    ("advertised.listeners", _S, None, None, "Advertised listener URIs."),
    ("listener.security.protocol.map", _S,
     "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT", None,
     "Listener name to security protocol."),
    ("principal.builder.class", _C, "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
     None, "KafkaPrincipalBuilder class."),
    ("ssl.protocol", _S, "TLSv1.3", None, "SSL protocol."),
    ("ssl.provider", _S, None, None, "Security provider."),
    ("ssl.cipher.suites", _LIST, (), None, "Cipher suites."),
    ("ssl.enabled.protocols", _LIST, ("TLSv1.2", "TLSv1.3"), None, "Enabled protocols."),
    ("ssl.keystore.type", _S, "JKS", None, "Key store format."),
    ("ssl.keystore.location", _S, None, None, "Key store file."),
    ("ssl.keystore.password", _P, None, None, "Key store password."),
    ("ssl.key.password", _P, None, None, "Private key password."),
    ("ssl.keystore.key", _P, None, None, "PEM private key."),
    ("ssl.keystore.certificate.chain", _P, None, None, "PEM certificate chain."),
    ("ssl.truststore.type", _S, "JKS", None, "Trust store format."),
    ("ssl.truststore.location", _S, None, None, "Trust store file."),
    ("ssl.truststore.password", _P, None, None, "Trust store password."),
    ("ssl.truststore.certificates", _P, None, None, "PEM trusted certificates."),
    ("ssl.keymanager.algorithm", _S, "SunX509", None, "Key manager algorithm."),
    ("ssl.trustmanager.algorithm", _S, "PKIX", None, "Trust manager algorithm."),
    ("ssl.endpoint.identification.algorithm", _S, "https", None, "Hostname verification algorithm."),
    ("ssl.secure.random.implementation", _S, None, None, "SecureRandom implementation."),
    ("ssl.client.auth", _S, "none", ValidString(("required", "requested", "none")), "Client authentication."),
    ("ssl.engine.factory.class", _C, None, None, "SslEngineFactory class."),
    ("sasl.mechanism.inter.broker.protocol", _S, "GSSAPI", None, "Inter-broker SASL mechanism."),
    ("sasl.jaas.config", _P, None, None, "JAAS login context."),
    ("sasl.enabled.mechanisms", _LIST, ("GSSAPI",), None, "Enabled SASL mechanisms."),
    ("sasl.kerberos.service.name", _S, None, None, "Kerberos service name."),
    ("sasl.kerberos.kinit.cmd", _S, "/usr/bin/kinit", None, "kinit path."),
    ("sasl.kerberos.ticket.renew.window.factor", _D, 0.8, None, "Ticket renew window factor."),
    ("sasl.kerberos.ticket.renew.jitter", _D, 0.05, None, "Ticket renew jitter."),
    ("sasl.kerberos.min.time.before.relogin", _L, 60_000, None, "Minimum time between relogins."),
    ("sasl.kerberos.principal.to.local.rules", _LIST, ("DEFAULT",), None, "Principal mapping rules."),
    ("sasl.login.refresh.window.factor", _D, 0.8, None, "Login refresh window factor."),
    ("sasl.login.refresh.window.jitter", _D, 0.05, None, "Login refresh jitter."),
    ("sasl.login.refresh.min.period.seconds", _SH, 60, None, "Minimum login refresh period."),
    ("sasl.login.refresh.buffer.seconds", _SH, 300, None, "Login refresh buffer."),
    # --- connection limits (SocketServer)
    ("max.connections.per.ip", _I, INT_MAX, Range.at_least(0), "Connections per IP."),
    ("max.connections.per.ip.overrides", _S, "", None, "Per-IP connection limits."),
    ("max.connections", _I, INT_MAX, Range.at_least(0), "Connections per broker."),
    ("max.connection.creation.rate", _I, INT_MAX, Range.at_least(0), "New connections per second."),
    # --- producer state (TransactionLogConfig)
    ("producer.id.expiration.ms", _I, 86_400_000, Range.at_least(1), "Producer id expiration."),
    ("transaction.partition.verification.enable", _B, True, None, "Verify transactional partitions."),
    # --- remote log (DynamicRemoteLogConfig)
    ("remote.log.index.file.cache.total.size.bytes", _L, 1024 * 1024 * 1024, Range.at_least(1), "Index cache size."),
    ("remote.fetch.max.wait.ms", _I, 500, Range.at_least(1), "Remote fetch wait."),
    ("remote.log.manager.copy.max.bytes.per.second", _L, LONG_MAX, Range.at_least(1), "Remote copy quota."),
    ("remote.log.manager.fetch.max.bytes.per.second", _L, LONG_MAX, Range.at_least(1), "Remote fetch quota."),
    ("remote.list.offsets.request.timeout.ms", _L, 30_000, Range.at_least(1), "Remote ListOffsets timeout."),
    # --- broker quotas (QuotaConfig.brokerQuotaConfigs: dynamic only)
    ("leader.replication.throttled.rate", _L, LONG_MAX, Range.at_least(0), "Leader replication throttle."),
    ("follower.replication.throttled.rate", _L, LONG_MAX, Range.at_least(0), "Follower replication throttle."),
    ("replica.alter.log.dirs.io.max.bytes.per.second", _L, LONG_MAX, Range.at_least(0), "Log dir move throttle."),
    # --- policies (static; kraft refuses alter.config.policy.class.name: see ConfigurationControlManager)
    ("alter.config.policy.class.name", _C, None, None, "AlterConfigPolicy class."),
    ("create.topic.policy.class.name", _C, None, None, "CreateTopicPolicy class."),
)

BROKER_CONFIG_DEF = ConfigDef()
for _name, _type, _default, _validator, _doc in _BROKER_KEYS:
    BROKER_CONFIG_DEF.define(_name, _type, _default, _validator, _doc)

#: SslConfigs.RECONFIGURABLE_CONFIGS: dynamic only behind ``listener.name.<listener>.``.
DYNAMIC_SECURITY_CONFIGS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})
#: DynamicListenerConfig.ReconfigurableConfigs
_DYNAMIC_LISTENER_CONFIGS = frozenset({
    "advertised.listeners", "listeners", "listener.security.protocol.map", "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation", "ssl.client.auth",
    "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds", "max.connections",
    "max.connection.creation.rate", "num.network.threads",
})
#: DynamicLogConfig.ReconfigurableConfigs: the first broker synonym of every topic key.
DYNAMIC_LOG_CONFIGS = frozenset(synonyms[0].name for synonyms in TOPIC_CONFIG_SYNONYMS.values())
_LOG_CLEANER_CONFIGS = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "message.max.bytes", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
})
_THREAD_POOL_CONFIGS = frozenset({"num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir",
                                  "background.threads"})
_SOCKET_SERVER_CONFIGS = frozenset({"max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections",
                                    "max.connection.creation.rate"})
_PRODUCER_STATE_CONFIGS = frozenset({"producer.id.expiration.ms", "transaction.partition.verification.enable"})
_REMOTE_LOG_CONFIGS = frozenset({
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
    "remote.list.offsets.request.timeout.ms",
})
#: QuotaConfig.brokerQuotaConfigs(): dynamic-only keys (no static form).
BROKER_QUOTA_CONFIGS = frozenset({"leader.replication.throttled.rate", "follower.replication.throttled.rate",
                                  "replica.alter.log.dirs.io.max.bytes.per.second"})
#: DynamicBrokerConfig.AllDynamicConfigs
ALL_DYNAMIC_CONFIGS = (DYNAMIC_SECURITY_CONFIGS | _LOG_CLEANER_CONFIGS | DYNAMIC_LOG_CONFIGS | _THREAD_POOL_CONFIGS
                       | {"metric.reporters"} | _DYNAMIC_LISTENER_CONFIGS | _SOCKET_SERVER_CONFIGS
                       | _PRODUCER_STATE_CONFIGS | _REMOTE_LOG_CONFIGS)
CLUSTER_LEVEL_LISTENER_CONFIGS = frozenset({"max.connections", "max.connection.creation.rate", "num.network.threads"})
#: Keys only a named broker may set (never the cluster default).
PER_BROKER_CONFIGS = (DYNAMIC_SECURITY_CONFIGS | _DYNAMIC_LISTENER_CONFIGS) - CLUSTER_LEVEL_LISTENER_CONFIGS
#: Keys given as ``listener.name.<l>.<mechanism>.<key>`` (their synonym is the bare key).
LISTENER_MECHANISM_CONFIGS = ("sasl.jaas.config", "sasl.login.callback.handler.class", "sasl.login.class",
                              "sasl.server.callback.handler.class", "connections.max.reauth.ms")

_LISTENER_CONFIG = re.compile(r"listener\.name\.[^.]*\.(.*)")


def listener_base_name(name: str) -> str | None:
    """The key behind a ``listener.name.<listener>.<key>`` override, None for a plain key."""
    match = _LISTENER_CONFIG.fullmatch(name)
    return match.group(1) if match else None


def is_dynamic_broker_config(name: str) -> bool:
    """Whether AlterConfigs may set ``name`` on a broker resource (dynamic or quota key)."""
    base = listener_base_name(name)
    return (base if base is not None else name) in ALL_DYNAMIC_CONFIGS | BROKER_QUOTA_CONFIGS


def dynamic_config_update_mode(name: str) -> str | None:
    """``DynamicBrokerConfig.dynamicConfigUpdateModes``: "per-broker", "cluster-wide", or None
    (read-only)."""
    if name in PER_BROKER_CONFIGS:
        return "per-broker"
    if name in ALL_DYNAMIC_CONFIGS:
        return "cluster-wide"
    return None


def broker_config_synonyms(name: str, match_listener_override: bool) -> list[str]:
    """``DynamicBrokerConfig.brokerConfigSynonyms``: the keys that set the same thing, by
    precedence (``log.roll.ms`` before ``log.roll.hours``...)."""
    groups = (("log.roll.ms", "log.roll.hours"), ("log.roll.jitter.ms", "log.roll.jitter.hours"),
              ("log.retention.ms", "log.retention.minutes", "log.retention.hours"))
    for group in groups:
        if name in group:
            return list(group)
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    base = listener_base_name(name)
    if base is not None and match_listener_override:
        mechanism = next((m for m in LISTENER_MECHANISM_CONFIGS if base.endswith(m)), None)
        return [name, mechanism if mechanism is not None else base]
    return [name]


def _scala_set(names: Iterable[str]) -> str:
    return "Set(" + ", ".join(sorted(names)) + ")"


def validate_dynamic_broker_configs(props: Mapping[str, str], per_broker_config: bool, *,
                                    known_names: Iterable[str] = ()) -> None:
    """``DynamicBrokerConfig.validateConfigs``: raises :class:`ConfigError` with Kafka's text.

    ``known_names``: every broker config name Kafka defines (a name among them that is not
    dynamic is read-only); the names this module defines are always known."""
    known = set(known_names) | set(BROKER_CONFIG_DEF.keys)
    non_dynamic = {n for n in props if n in known and n not in ALL_DYNAMIC_CONFIGS and n not in BROKER_QUOTA_CONFIGS}
    if non_dynamic:
        raise ConfigError(f"Cannot update these configs dynamically: {_scala_set(non_dynamic)}")
    bare_security = {n for n in props if n in DYNAMIC_SECURITY_CONFIGS}
    if bare_security:
        raise ConfigError("These security configs can be dynamically updated only per-listener using the listener "
                          f"prefix: {_scala_set(bare_security)}")
    base_props: dict[str, str | None] = {}
    for name, value in props.items():
        base = listener_base_name(name)
        base_props[base if base is not None else name] = value
    _DYNAMIC_DEF.parse(base_props)  # DynamicConfig.Broker.validate: types and ranges of known keys
    if not per_broker_config:
        per_broker = {n for n in props if n in PER_BROKER_CONFIGS}
        per_broker |= {n for n in props if (b := listener_base_name(n)) is not None
                       and b not in CLUSTER_LEVEL_LISTENER_CONFIGS}
        if per_broker:
            raise ConfigError("Cannot update these configs at default cluster level, broker id must be specified: "
                              f"{_scala_set(per_broker)}")


#: DynamicConfig.Broker's ConfigDef: the quota keys plus the dynamic KafkaConfig keys.
_DYNAMIC_DEF = ConfigDef()
for _key in BROKER_CONFIG_DEF:
    if _key.name in ALL_DYNAMIC_CONFIGS or _key.name in BROKER_QUOTA_CONFIGS:
        _DYNAMIC_DEF.define(_key.name, _key.type, _key.default, _key.validator, _key.documentation)


def validate_resource_name_is_node_id(name: str, node_id: int) -> None:
    """``ConfigAdminManager.validateResourceNameIsCurrentNodeId`` (INVALID_REQUEST)."""
    value = int(name) if re.fullmatch(r"[+-]?[0-9]+", name) else None
    if value is None:
        raise ApiError(Errors.INVALID_REQUEST, f"Node id must be an integer, but it is: {name}")
    if value != node_id:
        raise ApiError(Errors.INVALID_REQUEST, f"Unexpected broker id, expected {node_id}, but received {name}")


def validate_broker_config_change(props: Mapping[str, str], per_broker_config: bool, *,
                                  known_names: Iterable[str] = ()) -> None:
    """``ConfigAdminManager.validateBrokerConfigChange``: the dynamic-config checks, with a
    failure answered as INVALID_REQUEST carrying the check's message (KAFKA-13609 keeps Kafka's
    code)."""
    try:
        validate_dynamic_broker_configs(props, per_broker_config, known_names=known_names)
    except ConfigError as exc:
        raise ApiError(Errors.INVALID_REQUEST, exc.message) from None


def prepare_incremental_configs(ops: Sequence[tuple[str, AlterConfigOp, str | None]],
                                props: MutableMapping[str, str],
                                config_keys: Mapping[str, ConfigKey] | None = None) -> None:
    """``ConfigAdminManager.prepareIncrementalConfigs``: apply ``(name, op, value)`` to a broker
    resource's current ``props`` in place (APPEND/SUBTRACT only on LIST keys; an unset list
    starts from the key's default)."""
    keys = BROKER_CONFIG_DEF.keys if config_keys is None else config_keys

    def list_key(name: str, verb: str) -> ConfigKey:
        key = keys.get(name)
        if key is None:
            raise ApiError(Errors.INVALID_CONFIG, f"Unknown config name: {name}")
        if key.type is not ConfigType.LIST:
            raise ApiError(Errors.INVALID_CONFIG, f"Config value {verb} is not allowed for config key: {name}")
        return key

    for name, op, value in ops:
        if op is AlterConfigOp.SET:
            if value is None:
                raise ApiError(Errors.INVALID_REQUEST, f"Null value not supported for : {name}")
            props[name] = value
        elif op is AlterConfigOp.DELETE:
            props.pop(name, None)
        elif op is AlterConfigOp.APPEND:
            key = list_key(name, "append")
            current = props.get(name, convert_to_string(key.default, ConfigType.LIST))
            old = java_split(current) if current else []
            added = [v for v in java_split(value or "") if v not in old]
            props[name] = ",".join(old + added)
        else:
            key = list_key(name, "subtract")
            current = props.get(name, convert_to_string(key.default, ConfigType.LIST)) or ""
            remaining = java_split(current)
            for v in java_split(value or ""):
                if v in remaining:
                    remaining.remove(v)
            props[name] = ",".join(remaining)
