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

``DEFAULT_CONFIG`` is the embedded single-node controller used when
``kraft-server-start`` is run without a file.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from kraft_node.raft.config import QuorumConfig
from kraft_storage.errors import KraftStorageError
from kraft_storage.meta_properties import parse_properties

METADATA_TOPIC_DIR = "__cluster_metadata-0"

#: The embedded default: one controller on loopback, data under the system temp dir.
DEFAULT_CONFIG = """\
# kraft's embedded default: a single-node KRaft controller quorum on loopback.
process.roles=controller
node.id=1
controller.quorum.voters=1@127.0.0.1:19093
listeners=CONTROLLER://127.0.0.1:19093
controller.listener.names=CONTROLLER
log.dirs={tmp}/kraft-default-node-1
"""


class ConfigError(KraftStorageError):
    """A configuration key is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int

    def __str__(self):
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True)
class Voter:
    """A static voter ``id@host:port`` (or KIP-853 ``id@host:port:directoryId``)."""
    id: int
    host: str
    port: int
    directory_id: str | None = None


_HOSTPORT = re.compile(r"^\[?([^\]\s]*?)\]?:(\d+)$")


def _host_port(text: str, key: str, source: str) -> tuple[str, int]:
    m = _HOSTPORT.match(text.strip())
    if not m or not 0 <= int(m.group(2)) <= 65535:
        raise ConfigError(f"{source}: {key}: {text!r} is not host:port")
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
        host, port = _host_port(rest, key, source)
        voters.append(Voter(vid, host, port, dir_id))
    ids = [v.id for v in voters]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{source}: {key}: duplicate voter ids in {text!r}")
    return voters


def parse_listeners(text: str, source: str = "config") -> list[Endpoint]:
    out = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        name, sep, hp = entry.partition("://")
        if not sep or not name:
            raise ConfigError(f"{source}: listeners: {entry!r} is not NAME://host:port")
        host, port = _host_port(hp, "listeners", source)
        out.append(Endpoint(name.upper(), host, port))
    names = [e.listener for e in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: listeners: duplicate listener names in {text!r}")
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

    @property
    def is_controller(self) -> bool:
        return "controller" in self.roles

    @property
    def metadata_partition_dir(self) -> str:
        return os.path.join(self.metadata_log_dir, METADATA_TOPIC_DIR)

    @property
    def controller_endpoint(self) -> Endpoint | None:
        """The listener this node serves Raft RPCs on (the first controller listener)."""
        for name in self.controller_listener_names:
            for e in self.listeners:
                if e.listener == name:
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
        boot = [_host_port(hp, "controller.quorum.bootstrap.servers", source)
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
        cfg = cls(node_id, roles, listeners, cl_names, log_dirs, metadata_log_dir, voters, boot, quorum,
                  dict(props), source)
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
        return cfg

    @classmethod
    def from_file(cls, path: str) -> "NodeConfig":
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as exc:
            raise ConfigError(f"{path}: {exc.strerror or exc}") from None
        return cls.from_properties(parse_properties(text), path)

    @classmethod
    def default(cls) -> "NodeConfig":
        import tempfile
        text = DEFAULT_CONFIG.format(tmp=tempfile.gettempdir())
        return cls.from_properties(parse_properties(text), "embedded default config")
