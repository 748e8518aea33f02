"""Node configuration: ``server.properties`` with Kafka's key names.

Only the keys a KRaft controller-quorum member needs are interpreted; the rest
are kept in ``NodeConfig.props`` for later layers (broker, controller).  Every
problem names the key and the file.

Keys understood (Kafka's meaning):

* ``process.roles``: ``controller``, ``broker`` or ``broker,controller``.
* ``node.id``.
* ``controller.quorum.voters``: static quorum, ``id@host:port,...``.
* ``controller.quorum.bootstrap.servers``: dynamic quorum (KIP-853), ``host:port,...``.
* ``listeners``: ``NAME://host:port,...``; ``controller.listener.names``:
  which of them are controller listeners (first = the one peers use).
* ``log.dirs`` (or ``log.dir``), ``metadata.log.dir`` (defaults to the first log dir).
* ``controller.quorum.*`` timeouts: see :class:`kraft_node.raft.config.QuorumConfig`.
* the controller's keys (Kafka's names, defaults and ranges): ``broker.session.timeout.ms``,
  ``broker.heartbeat.interval.ms``, ``metadata.max.idle.interval.ms``,
  ``metadata.log.max.record.bytes.between.snapshots``, ``metadata.log.max.snapshot.interval.ms``,
  ``metadata.max.retention.bytes``, ``metadata.max.retention.ms``,
  ``leader.imbalance.check.interval.seconds``, ``num.partitions``, ``default.replication.factor``,
  ``controller.performance.sample.period.ms``, ``controller.performance.always.log.threshold.ms``:
  see :class:`ControllerSettings` (``NodeConfig.controller_settings``).
* the broker's keys (``process.roles`` with ``broker``): ``advertised.listeners`` (default:
  ``listeners``; the controller listeners are never advertised to clients),
  ``inter.broker.listener.name`` (or ``security.inter.broker.protocol``, Kafka's fallback:
  the listener named after the protocol, PLAINTEXT by default), ``broker.rack``,
  ``auto.create.topics.enable``: see :class:`BrokerSettings` (``NodeConfig.broker_settings``) and
  the broker checks of :meth:`NodeConfig.from_properties`, which are Kafka's
  (``KafkaConfig.validateValues``) with Kafka's messages.
* ``kraft.metrics.listener`` (kraft's own, not Kafka's): ``host:port`` of the Prometheus
  endpoint (``NodeConfig.metrics_listener``); unset or empty: no endpoint.
* ``listener.security.protocol.map`` (Kafka's default and Kafka's rule that a KRaft
  controller listener missing from an *unset* map is PLAINTEXT): ``PLAINTEXT`` or
  ``SSL`` per listener.  ``SSL`` listeners use the ``ssl.*`` keys (and their
  ``listener.name.<listener>.ssl.*`` overrides) read by :mod:`kraft_node.network.tls`;
  the Raft driver's connections to the other voters use the controller listener's
  protocol and settings, as Kafka's do.

Nothing is silently ignored (issue 19):

* a security setting kraft does not implement refuses the start with a one-line
  :class:`ConfigError` naming the key -- see :data:`UNSUPPORTED` and
  :func:`check_unsupported` for the list and the reasons;
* every other key kraft does not read is reported once at start by
  :func:`warn_unused_keys` with Kafka's words ("These configurations '[a, b]' were
  supplied but are not used yet."), and a key that is not a Kafka config at all but
  close to one gets "did you mean ...?" (Kafka's names: ``kafka_config_keys.txt``).

Ports: port 0 (any free port) is refused where peers need a fixed address:
``controller.quorum.voters``, ``controller.quorum.bootstrap.servers`` and the
controller listener of a node that is, or may become, a voter.

``DEFAULT_CONFIG`` is the embedded single combined node (broker and controller) used when
``kraft-server-start`` is run without a file: Kafka's client listener on 127.0.0.1:9092, the
controller listener on 127.0.0.1:9093, as Kafka's ``config/server.properties`` has them.
"""
from __future__ import annotations

import difflib
import functools
import logging
import os
import re
from dataclasses import dataclass, field

from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.messages import Endpoint
from kraft_storage.errors import KraftStorageError
from kraft_storage.meta_properties import parse_properties

METADATA_TOPIC_DIR = "__cluster_metadata-0"

#: The embedded default: one combined node (broker and controller) on loopback, Kafka's ports
#: (clients on 9092, the controller quorum on 9093), data under the system temp dir.
DEFAULT_CONFIG = """\
# kraft's embedded default: a single combined KRaft node (broker and controller) on loopback.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:9093
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
advertised.listeners=PLAINTEXT://127.0.0.1:9092
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs={tmp}/kraft-default-node-1
"""


class ConfigError(KraftStorageError):
    """A configuration key is missing, malformed or inconsistent."""


#: Kafka's default ``listener.security.protocol.map``.
DEFAULT_PROTOCOL_MAP = {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                        "SASL_SSL": "SASL_SSL"}
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: Security settings kraft does not implement: key -> (values that mean "off", why refused).
#: A key set to anything else refuses the start: running without the protection the
#: operator asked for would be worse than not running.  The same holds for the
#: ``listener.name.<listener>.<key>`` form.  Keys starting with ``sasl.`` (and
#: ``listener.name.<l>.sasl.*``, ``listener.name.<l>.<mechanism>.sasl.*``) are all
#: refused (no SASL here), as is a SASL_* protocol mapped to a listener in use.
UNSUPPORTED: dict[str, tuple[tuple[str, ...], str]] = {
    "authorizer.class.name": (("",), "kraft has no authorizer: every client may send every request"),
    "super.users": (("",), "kraft has no authorizer"),
    "principal.builder.class": (("", "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder"),
                                "kraft has no principals (no authorizer)"),
    "ssl.principal.mapping.rules": (("default",), "kraft has no principals (no authorizer)"),
    "ssl.keystore.password": (("",), "PEM keystores take no store password (Kafka's rule); "
                                     "use ssl.key.password for an encrypted key"),
    "ssl.truststore.password": (("",), "PEM truststores take no password (Kafka's rule)"),
    "ssl.keystore.type": (("", "pem"), "kraft reads PEM stores only (Python's ssl cannot read JKS or PKCS12)"),
    "ssl.truststore.type": (("", "pem"), "kraft reads PEM stores only (Python's ssl cannot read JKS or PKCS12)"),
    "ssl.cipher.suites": (("",), "Java cipher-suite names are not mapped to OpenSSL's"),
    "ssl.provider": (("",), "there are no Java security providers here"),
    "security.providers": (("",), "there are no Java security providers here"),
    "ssl.engine.factory.class": (("",), "there is no pluggable SSL engine here"),
    "ssl.secure.random.implementation": (("",), "OpenSSL's random generator is always used"),
    "ssl.keymanager.algorithm": (("", "sunx509"), "only the default key manager exists here"),
    "ssl.trustmanager.algorithm": (("", "pkix"), "only the default trust manager exists here"),
    "ssl.allow.dn.changes": (("", "false"), "keystores are never reloaded"),
    "ssl.allow.san.changes": (("", "false"), "keystores are never reloaded"),
    "delegation.token.secret.key": (("",), "delegation tokens need SASL, which kraft does not implement"),
    "delegation.token.master.key": (("",), "delegation tokens need SASL, which kraft does not implement"),
}

_INT = (-(2 ** 31), 2 ** 31 - 1)        # Kafka's ConfigDef INT
_LONG = (-(2 ** 63), 2 ** 63 - 1)       # Kafka's ConfigDef LONG
_DECIMAL = re.compile(r"^[+-]?[0-9]+$")  # what Java's parseInt/parseLong accept

#: Kafka's controller keys: key -> (ControllerSettings field, ConfigDef type, smallest value
#: accepted or None for any, largest or None).  The minimums are Kafka's ``atLeast`` where it
#: has one; kraft adds one where Kafka has none but the value cannot work (see ControllerSettings).
_CONTROLLER_KEY_SPECS: dict[str, tuple[str, str, int | None, int | None]] = {
    "broker.session.timeout.ms": ("broker_session_timeout_ms", "INT", 1, None),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", "INT", 1, None),
    "metadata.max.idle.interval.ms": ("metadata_max_idle_interval_ms", "INT", 0, None),
    "metadata.log.max.record.bytes.between.snapshots": ("metadata_log_max_record_bytes_between_snapshots",
                                                        "LONG", 1, None),
    "metadata.log.max.snapshot.interval.ms": ("metadata_log_max_snapshot_interval_ms", "LONG", 0, None),
    "metadata.max.retention.bytes": ("metadata_max_retention_bytes", "LONG", None, None),
    "metadata.max.retention.ms": ("metadata_max_retention_ms", "LONG", None, None),
    "leader.imbalance.check.interval.seconds": ("leader_imbalance_check_interval_seconds", "LONG", 1, None),
    "num.partitions": ("num_partitions", "INT", 1, None),
    "default.replication.factor": ("default_replication_factor", "INT", 1, 32767),
    "controller.performance.sample.period.ms": ("controller_performance_sample_period_ms", "LONG", 100, None),
    "controller.performance.always.log.threshold.ms": ("controller_performance_always_log_threshold_ms",
                                                       "LONG", 0, None),
}
CONTROLLER_KEYS = frozenset(_CONTROLLER_KEY_SPECS)
#: kraft's own key (not Kafka's): ``host:port`` of the Prometheus metrics endpoint.
METRICS_LISTENER_KEY = "kraft.metrics.listener"


def _config_number(props: dict[str, str], key: str, kind: str, low: int | None, high: int | None,
                   default: int, source: str) -> int:
    """``props[key]`` parsed and range-checked as Kafka's ConfigDef does, with its messages
    ("Invalid value X for configuration K: ..."), prefixed by the file."""
    if key not in props:
        return default
    text = props[key].strip()
    lo, hi = _INT if kind == "INT" else _LONG
    if not _DECIMAL.match(text) or not lo <= int(text) <= hi:
        raise ConfigError(f"{source}: Invalid value {text} for configuration {key}: Not a number of type {kind}")
    value = int(text)
    if low is not None and value < low:
        raise ConfigError(f"{source}: Invalid value {value} for configuration {key}: Value must be at least {low}")
    if high is not None and value > high:
        raise ConfigError(f"{source}: Invalid value {value} for configuration {key}: "
                          f"Value must be no more than {high}")
    return value


@dataclass(frozen=True)
class ControllerSettings:
    """The controller's settings from Kafka's keys (``NodeConfig.controller_settings``), with
    Kafka's defaults.  Field names are the keys with dots turned into underscores.

    Invariants (checked by :meth:`from_properties`, which names the key in every error):

    * every value parses as Kafka's INT or LONG and is within Kafka's range for the key;
      kraft adds a floor of 1 where Kafka has none but the value cannot work -- the broker
      session timeout and heartbeat interval, and ``default.replication.factor`` (1 to
      32767, the short a CreateTopics request carries);
    * ``broker.heartbeat.interval.ms`` < ``broker.session.timeout.ms``: a broker that
      heartbeats no more often than its session lasts is fenced between heartbeats
      (Kafka does not refuse this; it logs an ERROR when the interval is more than half
      the timeout, see :meth:`warnings`, and so does kraft).

    ``metadata.max.idle.interval.ms`` 0 disables the no-op record writer
    (:attr:`max_idle_interval_ms` is then None); ``metadata.log.max.snapshot.interval.ms``
    0 disables time-based snapshots; a negative ``metadata.max.retention.bytes`` or
    ``.ms`` means no limit (Kafka's meaning).
    """

    #: How long a broker's lease lasts without a heartbeat (Kafka: 9 s).
    broker_session_timeout_ms: int = 9000
    #: How often brokers heartbeat (Kafka: 2 s).
    broker_heartbeat_interval_ms: int = 2000
    #: How often the active controller writes a NoOpRecord when idle; 0: never.
    metadata_max_idle_interval_ms: int = 500
    #: Committed bytes since the latest snapshot that trigger a new one (20 MiB).
    metadata_log_max_record_bytes_between_snapshots: int = 20 * 1024 * 1024
    #: Longest time committed records wait before a snapshot covers them (1 h); 0: no limit.
    metadata_log_max_snapshot_interval_ms: int = 3_600_000
    #: Log + snapshots size above which old snapshots and segments are deleted (100 MiB); < 0: none.
    metadata_max_retention_bytes: int = 100 * 1024 * 1024
    #: Age above which old snapshots and segments are deleted (7 days); < 0: none.
    metadata_max_retention_ms: int = 604_800_000
    #: How often the controller checks for preferred-leader imbalance (5 min).
    leader_imbalance_check_interval_seconds: int = 300
    #: Partitions of a topic created without a count.
    num_partitions: int = 1
    #: Replication factor of a topic created without one.
    default_replication_factor: int = 1
    #: How often the controller logs its event-queue performance summary (1 min).
    controller_performance_sample_period_ms: int = 60_000
    #: An event slower than this is logged at once (2 s).
    controller_performance_always_log_threshold_ms: int = 2000
    #: the retention keys the config set explicitly (for the warning in :meth:`warnings`)
    retention_keys_set: frozenset[str] = frozenset()

    @property
    def max_idle_interval_ms(self) -> int | None:
        """The no-op writer's period, or None when ``metadata.max.idle.interval.ms`` is 0 (off)."""
        return self.metadata_max_idle_interval_ms or None

    @property
    def leader_imbalance_check_interval_ms(self) -> int:
        return self.leader_imbalance_check_interval_seconds * 1000

    def warnings(self) -> list[str]:
        """Settings Kafka accepts but logs at ERROR (KAFKA-19432): a heartbeat interval longer
        than half the session timeout leaves a broker one missed heartbeat from fencing."""
        out = []
        hb, session = self.broker_heartbeat_interval_ms, self.broker_session_timeout_ms
        if hb * 2 > session:
            out.append(f"broker.heartbeat.interval.ms ({hb} ms) must be less than or equal to half of the "
                       f"broker.session.timeout.ms ({session} ms): a broker that misses one heartbeat is fenced")
        for key in sorted(self.retention_keys_set):
            # Not Kafka's policy: kraft keeps only the latest snapshot and the log after it (the
            # prefix a snapshot covers is deleted when the snapshot is frozen), which is never
            # more than Kafka's retention would keep.
            out.append(f"{key} is not applied as Kafka applies it: kraft deletes the metadata log up to each "
                       "new snapshot and keeps only the latest snapshot (metadata.log.max.record.bytes."
                       "between.snapshots and metadata.log.max.snapshot.interval.ms decide how often)")
        return out

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = "config") -> "ControllerSettings":
        """Read Kafka's controller keys from ``props`` (absent keys keep Kafka's defaults)."""
        defaults = cls()
        kwargs = {field_name: _config_number(props, key, kind, low, high, getattr(defaults, field_name), source)
                  for key, (field_name, kind, low, high) in _CONTROLLER_KEY_SPECS.items()}
        kwargs["retention_keys_set"] = frozenset(k for k in ("metadata.max.retention.bytes",
                                                             "metadata.max.retention.ms") if k in props)
        settings = cls(**kwargs)
        hb, session = settings.broker_heartbeat_interval_ms, settings.broker_session_timeout_ms
        if hb >= session:
            raise ConfigError(f"{source}: broker.heartbeat.interval.ms ({hb}) must be less than "
                              f"broker.session.timeout.ms ({session}): a broker would be fenced between heartbeats")
        return settings


_BOOLEANS = {"true": True, "false": False}


def _config_bool(props: dict[str, str], key: str, default: bool, source: str) -> bool:
    """A Kafka BOOLEAN key (``true``/``false``, any case, as Kafka's ConfigDef parses it)."""
    text = props.get(key, "").strip()
    if not text:
        return default
    if text.lower() not in _BOOLEANS:
        raise ConfigError(f"{source}: {key}: Expected value to be either true or false, not {text!r}")
    return _BOOLEANS[text.lower()]


@dataclass(frozen=True)
class BrokerSettings:
    """The broker role's own keys (Kafka's names and defaults); ``NodeConfig.broker_settings``.

    ``broker.heartbeat.interval.ms`` is read by :class:`ControllerSettings` (the controller
    uses it too: its half-session rule) and taken from there by the broker."""
    #: ``broker.rack``: the rack the broker registers with (None: no rack)
    rack: str | None = None
    #: ``auto.create.topics.enable`` (Kafka: true): Metadata for an unknown topic creates it
    #: through the controller when the client allows it
    auto_create_topics_enable: bool = True
    #: ``controlled.shutdown.enable`` (Kafka: true): SIGTERM asks the controller to move the
    #: broker's leaders away before the process stops
    controlled_shutdown_enable: bool = True
    #: ``initial.broker.registration.timeout.ms`` (Kafka: 60 s): how long a starting broker
    #: may take to register, catch up and be unfenced before its start fails
    initial_registration_timeout_ms: int = 60_000

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = "config") -> "BrokerSettings":
        rack = props.get("broker.rack", "").strip() or None
        timeout = _config_number(props, "initial.broker.registration.timeout.ms", "INT", 1, None, 60_000, source)
        return cls(rack=rack,
                   auto_create_topics_enable=_config_bool(props, "auto.create.topics.enable", True, source),
                   controlled_shutdown_enable=_config_bool(props, "controlled.shutdown.enable", True, source),
                   initial_registration_timeout_ms=timeout)


#: The broker keys kraft reads (see BrokerSettings and NodeConfig's broker checks).
BROKER_KEYS = frozenset({"advertised.listeners", "inter.broker.listener.name", "security.inter.broker.protocol",
                         "broker.rack", "auto.create.topics.enable", "controlled.shutdown.enable",
                         "initial.broker.registration.timeout.ms"})

#: The keys the broker's partitions read (issue 25): used on a node with the broker role only
#: (a controller-only node told ``log.segment.bytes`` is warned that it does not use it).
PARTITION_KEYS = frozenset({
                         # kraft_node/broker/{log_manager,partition,replica_manager}.py, the
                         # LogValidator's broker defaults and the producer state
                         "min.insync.replicas", "message.max.bytes", "replica.lag.time.max.ms",
                         "producer.id.expiration.ms", "producer.id.expiration.check.interval.ms",
                         "log.segment.bytes", "log.roll.ms", "log.roll.hours", "log.roll.jitter.ms",
                         "log.index.size.max.bytes", "log.index.interval.bytes",
                         "log.retention.bytes", "log.retention.ms", "log.retention.minutes", "log.retention.hours",
                         "log.flush.interval.messages", "log.flush.interval.ms",
                         "log.flush.offset.checkpoint.interval.ms", "log.flush.start.offset.checkpoint.interval.ms",
                         "replica.high.watermark.checkpoint.interval.ms", "log.flush.scheduler.interval.ms",
                         "log.retention.check.interval.ms", "log.segment.delete.delay.ms",
                         "log.message.timestamp.type", "log.message.timestamp.before.max.ms",
                         "log.message.timestamp.after.max.ms", "log.cleanup.policy", "compression.type",
                         # the replica fetchers (kraft_node/broker/replica_fetcher.py ReplicaFetcherConfig)
                         "num.replica.fetchers", "replica.fetch.backoff.ms", "replica.fetch.max.bytes",
                         "replica.fetch.response.max.bytes", "replica.fetch.wait.max.ms", "replica.fetch.min.bytes",
                         "replica.socket.timeout.ms",
                         # KIP-392 and KIP-227 (kraft_node/broker/replica_selector.py, fetch_session.py)
                         "replica.selector.class", "max.incremental.fetch.session.cache.slots"})


def parse_metrics_listener(props: dict[str, str], source: str = "config") -> tuple[str, int] | None:
    """``kraft.metrics.listener`` as ``(host, port)``, or None when unset or empty (no
    endpoint).  Port 0 takes any free port (the bound one is logged at start)."""
    text = props.get(METRICS_LISTENER_KEY, "").strip()
    if not text:
        return None
    return _host_port(text, METRICS_LISTENER_KEY, source)


#: Keys kraft reads (besides ``controller.quorum.*``, checked by QuorumConfig, and the
#: ``ssl.*`` keys of :data:`kraft_node.network.tls.SSL_KEYS_USED` when a listener in use is SSL).
USED_KEYS = frozenset({
    "process.roles", "node.id", "listeners", "controller.listener.names", "log.dirs", "log.dir",
    "metadata.log.dir", "listener.security.protocol.map",
    # read by the checks above: set to their "off" values they are used (and harmless)
    *UNSUPPORTED,
    # ControllerSettings and the metrics endpoint
    *CONTROLLER_KEYS, METRICS_LISTENER_KEY, *BROKER_KEYS,
})

_LISTENER_KEY = re.compile(r"^listener\.name\.([^.]+)\.(.+)$")


@functools.lru_cache(maxsize=1)
def kafka_config_names() -> frozenset:
    """Kafka's broker/controller config names (``kafka_config_keys.txt``, extracted from Kafka's sources)."""
    path = os.path.join(os.path.dirname(__file__), "kafka_config_keys.txt")
    with open(path, encoding="utf-8") as f:
        return frozenset(ln.strip() for ln in f if ln.strip() and not ln.startswith("#"))


def _is_sasl_key(key: str) -> bool:
    m = _LISTENER_KEY.match(key)
    rest = m.group(2) if m else key
    return rest.startswith("sasl.") or ".sasl." in rest or rest.startswith("sasl_")


def check_unsupported(props: dict[str, str], source: str = "config") -> None:
    """Refuse security settings kraft does not implement (see :data:`UNSUPPORTED`), naming the key."""
    for key in sorted(props):
        value = props[key].strip()
        if _is_sasl_key(key):
            if key.startswith("sasl.") and not value:
                continue  # an empty sasl.* value asks for nothing
            raise ConfigError(f"{source}: {key} is set, but kraft does not implement SASL; remove it "
                              "(only PLAINTEXT and SSL listeners are supported)")
        m = _LISTENER_KEY.match(key)
        base = m.group(2) if m else key
        rule = UNSUPPORTED.get(base)
        if rule is not None and value.lower() not in rule[0]:
            raise ConfigError(f"{source}: {key}={value} is not supported: {rule[1]}")


@dataclass(frozen=True)
class Voter:
    """A static voter ``id@host:port`` (or KIP-853 ``id@host:port:directoryId``)."""
    id: int
    host: str
    port: int
    directory_id: str | None = None


_HOSTPORT = re.compile(r"^\[?([^\]\s]*?)\]?:(\d+)$")


def _host_port(text: str, key: str, source: str, fixed: bool = False) -> tuple[str, int]:
    """``(host, port)``; with ``fixed``, port 0 ("any free port") is refused: peers dial it."""
    m = _HOSTPORT.match(text.strip())
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise ConfigError(f"{source}: {key}: {text!r} is not host:port")
    if fixed and int(m.group(2)) == 0:
        raise ConfigError(f"{source}: {key}: {text.strip()!r}: port 0 is not allowed here (other nodes "
                          "connect to this address, so it needs a fixed port from 1 to 65535)")
    return m.group(1), int(m.group(2))


def parse_voters(text: str, key: str = "controller.quorum.voters", source: str = "config") -> list[Voter]:
    voters = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        ident, at, rest = entry.partition("@")
        if not at:
            raise ConfigError(f"{source}: {key}: {entry!r} is not id@host:port")
        try:
            vid = int(ident)
        except ValueError:
            raise ConfigError(f"{source}: {key}: voter id {ident!r} is not a number") from None
        dir_id = None
        if rest.count(":") >= 2 and not rest.startswith("["):
            rest, _, dir_id = rest.rpartition(":")
        host, port = _host_port(rest, key, source, fixed=True)
        voters.append(Voter(vid, host, port, dir_id))
    ids = [v.id for v in voters]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{source}: {key}: duplicate voter ids in {text!r}")
    return voters


def parse_listeners(text: str, source: str = "config", key: str = "listeners") -> list[Endpoint]:
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, hp = entry.partition("://")
        if not sep or not name:
            raise ConfigError(f"{source}: {key}: {entry!r} is not NAME://host:port")
        host, port = _host_port(hp, key, source)
        out.append(Endpoint(name.upper(), host, port))
    names = [e.name for e in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: {key}: duplicate listener names in {text!r}")
    return out


@dataclass
class NodeConfig:
    node_id: int
    roles: frozenset
    listeners: list[Endpoint]
    controller_listener_names: list[str]
    log_dirs: list[str]
    metadata_log_dir: str
    voters: list[Voter]
    bootstrap_servers: list[tuple[str, int]]
    quorum: QuorumConfig
    props: dict[str, str] = field(default_factory=dict)
    source: str = "config"
    #: listener name -> security protocol (Kafka's effective listener.security.protocol.map)
    protocol_map: dict[str, str] = field(default_factory=dict)
    _tls: dict = field(default_factory=dict, repr=False, compare=False)
    #: Kafka's controller keys (broker session, snapshots, retention, defaults for new topics)
    controller_settings: ControllerSettings = field(default_factory=ControllerSettings)
    #: ``kraft.metrics.listener``: where the Prometheus endpoint listens, None for no endpoint
    metrics_listener: tuple[str, int] | None = None
    #: the broker's advertised listeners (Kafka's effectiveAdvertisedBrokerListeners:
    #: ``advertised.listeners`` or ``listeners``, without the controller listeners); empty on a
    #: controller-only node.  Port 0 is replaced by the bound port when the broker starts.
    advertised_listeners: list[Endpoint] = field(default_factory=list)
    #: the listener other brokers (and the broker's registration) use: ``inter.broker.listener.name``
    #: or the listener named after ``security.inter.broker.protocol`` (PLAINTEXT); None off brokers
    inter_broker_listener_name: str | None = None
    #: the broker role's keys
    broker_settings: BrokerSettings = field(default_factory=BrokerSettings)

    def security_protocol(self, listener: str) -> str:
        return self.protocol_map.get(listener.upper(), "PLAINTEXT")

    @property
    def controller_security_protocol(self) -> str:
        """The protocol of the controller listener (the first of controller.listener.names):
        what this node's Raft connections to other controllers speak, as in Kafka."""
        return self.security_protocol(self.controller_listener_names[0])

    def server_ssl_context(self, listener: str):
        """The ssl.SSLContext of ``listener``'s server side, or None for a PLAINTEXT listener."""
        return self._ssl_context("server", listener.upper())

    def client_ssl_context(self):
        """The ssl.SSLContext for connections to other controllers (the controller listener's
        settings: truststore, keystore as client certificate, hostname verification), or None
        when the controller listener is PLAINTEXT."""
        return self._ssl_context("client", self.controller_listener_names[0])

    def listener_client_ssl_context(self, listener: str):
        """The ssl.SSLContext for connecting to other brokers on ``listener`` (the replica
        fetchers on the inter-broker listener: that listener's truststore, keystore as client
        certificate, hostname verification), or None when the listener is PLAINTEXT."""
        return self._ssl_context("client", listener)

    def _ssl_context(self, side: str, listener: str):
        """``listener``'s ssl.SSLContext for ``side`` ("server" or "client"), made once; None
        when the listener is not SSL.  A TLS setting that does not load is a ConfigError."""
        if self.security_protocol(listener) != "SSL":
            return None
        key = (side, listener)
        if key not in self._tls:
            from kraft_node.network.tls import TlsConfigError, client_context, server_context
            make = server_context if side == "server" else client_context
            try:
                self._tls[key] = make(self.props, listener, self.source)
            except TlsConfigError as exc:
                raise ConfigError(str(exc)) from None
        return self._tls[key]

    # ------------------------------------------------------------ unused keys
    def _ssl_listeners(self) -> set[str]:
        names = {e.name for e in self.listeners} | set(self.controller_listener_names[:1])
        return {n for n in names if self.security_protocol(n) == "SSL"}

    def is_used(self, key: str) -> bool:
        """Whether kraft reads ``key`` (with this config's listeners and protocols)."""
        from kraft_node.network.tls import SSL_KEYS_USED
        if key in USED_KEYS or key.startswith("controller.quorum."):
            return True
        if key in PARTITION_KEYS:
            return self.is_broker
        ssl_listeners = self._ssl_listeners()
        if key in SSL_KEYS_USED:
            return bool(ssl_listeners)
        m = _LISTENER_KEY.match(key)
        if m:
            if m.group(2) in UNSUPPORTED:
                return True
            return m.group(2) in SSL_KEYS_USED and m.group(1).upper() in ssl_listeners
        return False

    def unused_keys(self) -> list[str]:
        """The supplied keys kraft does not read, sorted."""
        return sorted(k for k in self.props if not self.is_used(k))

    def unused_key_warnings(self) -> list[str]:
        """The lines :func:`warn_unused_keys` logs: Kafka's "were supplied but are not used
        yet" line listing every unused key, then one "did you mean" line per key that is
        not a Kafka config name but is close to one (a typo)."""
        unused = self.unused_keys()
        if not unused:
            return []
        lines = [f"These configurations '[{', '.join(unused)}]' were supplied but are not used yet."]
        known = kafka_config_names()
        for k in unused:
            m = _LISTENER_KEY.match(k)
            if k in known or (m and m.group(2) in known):
                continue
            close = difflib.get_close_matches(k, sorted(known | USED_KEYS | PARTITION_KEYS), n=1, cutoff=0.85)
            if close:
                lines.append(f"{self.source}: {k!r} is not a Kafka config; did you mean {close[0]!r}?")
        return lines

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.roles

    @property
    def broker_listeners(self) -> list[Endpoint]:
        """The listeners this node serves clients on (``listeners`` minus the controller ones);
        empty on a controller-only node."""
        if not self.is_broker:
            return []
        return [e for e in self.listeners if e.name not in self.controller_listener_names]

    @property
    def metadata_partition_dir(self) -> str:
        return os.path.join(self.metadata_log_dir, METADATA_TOPIC_DIR)

    @property
    def controller_endpoint(self) -> Endpoint | None:
        """The listener this node serves Raft RPCs on (the first controller listener)."""
        for name in self.controller_listener_names:
            for e in self.listeners:
                if e.name == name:
                    return e
        return None

    @property
    def all_log_dirs(self) -> list[str]:
        dirs = list(self.log_dirs)
        if self.metadata_log_dir not in dirs:
            dirs.append(self.metadata_log_dir)
        return dirs

    @classmethod
    def from_properties(cls, props: dict[str, str], source: str = "config") -> "NodeConfig":
        def need(key):
            if key not in props or not props[key].strip():
                raise ConfigError(f"{source}: missing required key {key}")
            return props[key].strip()

        roles_text = need("process.roles")
        roles = frozenset(r.strip() for r in roles_text.split(",") if r.strip())
        if not roles or not roles <= {"broker", "controller"}:
            raise ConfigError(f"{source}: process.roles: {roles_text!r} must be broker, controller or both")
        try:
            node_id = int(need("node.id"))
        except ValueError:
            raise ConfigError(f"{source}: node.id: {props['node.id']!r} is not a number") from None
        if node_id < 0:
            raise ConfigError(f"{source}: node.id must be non-negative")
        listeners = parse_listeners(props.get("listeners", ""), source)
        cl_names = [n.strip().upper() for n in props.get("controller.listener.names", "").split(",") if n.strip()]
        if not cl_names:
            raise ConfigError(f"{source}: missing required key controller.listener.names")
        dirs_text = props.get("log.dirs") or props.get("log.dir")
        if not dirs_text:
            raise ConfigError(f"{source}: missing required key log.dirs")
        log_dirs = [d.strip() for d in dirs_text.split(",") if d.strip()]
        metadata_log_dir = props.get("metadata.log.dir", "").strip() or log_dirs[0]
        voters = parse_voters(props.get("controller.quorum.voters", ""), source=source)
        boot = [_host_port(hp, "controller.quorum.bootstrap.servers", source, fixed=True)
                for hp in props.get("controller.quorum.bootstrap.servers", "").split(",") if hp.strip()]
        if voters and boot:
            raise ConfigError(f"{source}: set controller.quorum.voters or controller.quorum.bootstrap.servers, "
                              "not both")
        if not voters and not boot:
            raise ConfigError(f"{source}: one of controller.quorum.voters or "
                              "controller.quorum.bootstrap.servers is required")
        try:
            quorum = QuorumConfig.from_properties(props)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{source}: {exc}") from None
        check_unsupported(props, source)
        cfg = cls(node_id, roles, listeners, cl_names, log_dirs, metadata_log_dir, voters, boot, quorum,
                  dict(props), source)
        cfg.controller_settings = ControllerSettings.from_properties(props, source)
        for line in cfg.controller_settings.warnings():  # Kafka logs these at ERROR when it reads its config
            logging.getLogger("kraft.config").error("%s: %s", source, line)
        cfg.metrics_listener = parse_metrics_listener(props, source)
        if roles == {"broker"} and node_id in {v.id for v in voters}:
            # Kafka's rule (KafkaConfig): a broker-only node is never a voter
            raise ConfigError(f"{source}: process.roles=broker but node.id {node_id} is listed in "
                              "controller.quorum.voters; a node in the voter set needs the controller role")
        # Decision: a controller-role node whose id is not in static controller.quorum.voters
        # runs as an observer (Kafka refuses to start it; its observers are brokers).  Until
        # kraft has a broker this is how an observer of a static quorum is started.
        if cfg.is_controller:
            if cfg.controller_endpoint is None:
                raise ConfigError(f"{source}: controller.listener.names {cl_names} names no entry of listeners")
            if voters and node_id in {v.id for v in voters}:
                me = next(v for v in voters if v.id == node_id)
                ep = cfg.controller_endpoint
                if me.port != ep.port:
                    raise ConfigError(f"{source}: controller.quorum.voters gives node {node_id} port {me.port} "
                                      f"but its controller listener is {ep}")
            ep = cfg.controller_endpoint
            if ep.port == 0 and (boot or node_id in {v.id for v in voters}):
                raise ConfigError(f"{source}: listeners: the controller listener {ep} of a voter needs a fixed "
                                  "port (other voters connect to it), not port 0")
        cfg.protocol_map = _protocol_map(props, listeners, cl_names, source)
        if cfg.is_broker:
            _check_broker(cfg, props, source)
        # Build the TLS contexts now: a bad keystore or truststore fails the start here,
        # naming the key, not at the first connection.
        for e in listeners:
            cfg.server_ssl_context(e.name)
        cfg.client_ssl_context()
        return cfg

    @classmethod
    def from_file(cls, path: str) -> "NodeConfig":
        return cls.from_properties(read_properties_file(path), path)

    @classmethod
    def default(cls) -> "NodeConfig":
        import tempfile
        text = DEFAULT_CONFIG.format(tmp=tempfile.gettempdir())
        return cls.from_properties(parse_properties(text), "embedded default config")


def _protocol_map(props: dict[str, str], listeners: list[Endpoint], cl_names: list[str],
                  source: str) -> dict[str, str]:
    """Kafka's ``effectiveListenerSecurityProtocolMap`` and its checks, with kraft's refusals:
    a listener in use mapped to SASL_* is refused (no SASL here)."""
    key = "listener.security.protocol.map"
    text = props.get(key, "").strip()
    if key in props:
        pmap = {}
        for entry in filter(None, (e.strip() for e in text.split(","))):
            name, sep, proto = entry.partition(":")
            if not sep or not name.strip():
                raise ConfigError(f"{source}: {key}: {entry!r} is not LISTENER_NAME:SECURITY_PROTOCOL")
            proto = proto.strip().upper()
            if proto not in SECURITY_PROTOCOLS:
                raise ConfigError(f"{source}: {key}: {proto!r} is not a security protocol "
                                  f"({', '.join(SECURITY_PROTOCOLS)})")
            pmap[name.strip().upper()] = proto
    else:
        pmap = dict(DEFAULT_PROTOCOL_MAP)
        # Kafka (KRaft): with the map unset, controller listeners map to PLAINTEXT unless a
        # controller listener name or a listener is SSL or SASL_*
        tls_like = ("SSL", "SASL_SSL", "SASL_PLAINTEXT")
        if not any(n in tls_like for n in cl_names) and not any(e.name in tls_like for e in listeners):
            for n in cl_names:
                pmap.setdefault(n, "PLAINTEXT")
    for n in cl_names:
        if n not in pmap:
            raise ConfigError(f"{source}: Controller listener with name {n} defined in controller.listener.names "
                              f"not found in {key}.")
    for e in listeners:
        if e.name not in pmap:
            raise ConfigError(f"{source}: listeners: No security protocol defined for listener {e.name} "
                              f"(add it to {key})")
    for n in sorted({e.name for e in listeners} | set(cl_names[:1])):
        if pmap[n].startswith("SASL_"):
            raise ConfigError(f"{source}: {key} maps listener {n} to {pmap[n]}, but kraft does not implement SASL "
                              "(use PLAINTEXT or SSL)")
    return pmap


def _check_broker(cfg: NodeConfig, props: dict[str, str], source: str) -> None:
    """The broker role's listener rules, Kafka's (``KafkaConfig.validateValues`` for a KRaft
    broker-only or combined node) with Kafka's messages, and its keys (:class:`BrokerSettings`)."""
    cl_names = cfg.controller_listener_names
    if cfg.roles == {"broker"} and any(e.name in cl_names for e in cfg.listeners):
        raise ConfigError(f"{source}: controller.listener.names must not contain a value appearing in the "
                          "'listeners' configuration when running KRaft with just the broker role")
    if "advertised.listeners" in props and props["advertised.listeners"].strip():
        advertised = parse_listeners(props["advertised.listeners"], source, "advertised.listeners")
        for e in advertised:
            if e.name not in cfg.protocol_map:
                raise ConfigError(f"{source}: advertised.listeners: No security protocol defined for listener "
                                  f"{e.name} (add it to listener.security.protocol.map)")
    else:
        advertised = list(cfg.listeners)
    advertised = [e for e in advertised if e.name not in cl_names]
    names = [e.name for e in advertised]
    if not advertised:
        raise ConfigError(f"{source}: There must be at least one broker advertised listener. Perhaps all listeners "
                          "appear in controller.listener.names?")
    if "inter.broker.listener.name" in props and props["inter.broker.listener.name"].strip():
        if "security.inter.broker.protocol" in props:
            raise ConfigError(f"{source}: Only one of inter.broker.listener.name and security.inter.broker.protocol "
                              "should be set.")
        ibl = props["inter.broker.listener.name"].strip().upper()
        if ibl not in cfg.protocol_map:
            raise ConfigError(f"{source}: Listener with name {ibl} defined in inter.broker.listener.name not found "
                              "in listener.security.protocol.map.")
    else:
        proto = props.get("security.inter.broker.protocol", "").strip().upper() or "PLAINTEXT"
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{source}: Invalid security protocol `{proto}` defined in "
                              "security.inter.broker.protocol")
        ibl = proto
    if ibl not in names:
        raise ConfigError(f"{source}: inter.broker.listener.name must be a listener name defined in "
                          f"advertised.listeners. The valid options based on currently configured listeners are "
                          f"{','.join(names)}")
    listener_names = {e.name for e in cfg.listeners}
    if not set(names) <= listener_names:
        raise ConfigError(f"{source}: advertised.listeners listener names must be equal to or a subset of the ones "
                          f"defined in listeners. Found {','.join(names)}. The valid options based on the current "
                          f"configuration are {','.join(sorted(listener_names))}")
    if any(e.host == "0.0.0.0" for e in advertised):
        raise ConfigError(f"{source}: advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. "
                          "Use a routable IP address.")
    cfg.advertised_listeners = advertised
    cfg.inter_broker_listener_name = ibl
    cfg.broker_settings = BrokerSettings.from_properties(props, source)
    # the replica fetchers' settings, checked now (Kafka's cross-checks) rather than at start
    from kraft_node.broker.replica_fetcher import ReplicaFetcherConfig, ReplicaFetcherConfigError
    try:
        ReplicaFetcherConfig.from_properties(props, source=source)
        from kraft_node.broker.fetch_session import max_session_slots_from_properties
        from kraft_node.broker.replica_selector import replica_selector_from_properties
        replica_selector_from_properties(props, source=source)
        max_session_slots_from_properties(props, source=source)
    except (ReplicaFetcherConfigError, ValueError) as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith(f"{source}:") else f"{source}: {text}") from None


def read_properties_file(path: str) -> dict[str, str]:
    """Parse a properties file; errors name the file (and the byte of a non-UTF-8 sequence)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: not a UTF-8 properties file: byte 0x{data[exc.start]:02x} at byte position "
                          f"{exc.start} (line {line}) is not valid UTF-8") from None
    return parse_properties(text)


def warn_unused_keys(cfg: NodeConfig, logger: logging.Logger | None = None) -> list[str]:
    """Log (WARNING, once -- call it once at start) the keys of ``cfg`` that kraft does not
    read, in Kafka's words, with "did you mean" for near-misses.  Returns the lines logged."""
    logger = logger or logging.getLogger("kraft.config")
    lines = cfg.unused_key_warnings()
    for line in lines:
        logger.warning("%s", line)
    return lines
