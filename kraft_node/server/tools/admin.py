"""A small asyncio admin client for the ``kraft-topics``/``-configs``/``-features``/``-cluster`` tools.

Why not a general client library: these tools need a handful of admin RPCs, sent where Kafka's
``Admin`` sends them, with Kafka's error texts, and nothing else.  What it does, as Kafka's
``KafkaAdminClient`` does it:

* **Bootstrap**: the first ``host:port`` of the list that accepts a connection.  A refused
  connection is retried for :data:`REFUSED_GRACE_S` (a server that is restarting), a host that
  does not resolve or a failed TLS handshake fails at once; every failure names host:port.
* **Versions**: every new connection sends ApiVersions first (at our highest version; an
  ``UNSUPPORTED_VERSION`` answer or an undecodable one makes it ask again at v0) and each
  request then goes at the highest version both sides speak.  An API the peer does not
  advertise is refused before anything is sent (:class:`AdminError` naming the API and peer).
* **Routing** (``route=``): ``"any"`` -- the bootstrap node; ``"controller"`` -- in broker mode
  the node Metadata names as controller (in KRaft a live broker, which forwards the write to
  the active controller), in controller mode (``--bootstrap-controller``, or a bootstrap
  listener that does not serve Metadata: a controller listener) the active controller from
  DescribeCluster; an ``int`` -- that node id (DescribeConfigs/IncrementalAlterConfigs of
  one broker's configs go to that broker, as Kafka routes them).
* **Retries**: ``NOT_CONTROLLER``, ``LEADER_NOT_AVAILABLE``, ``BROKER_NOT_AVAILABLE``, a lost
  connection or a request timeout (which also closes that connection: a peer answers in order,
  so a retry on it would wait behind the stuck request) make it forget the routing, wait ``retry.backoff.ms``
  (100 ms) and send again, until the call's deadline (``default.api.timeout.ms``, 60 s by
  default; each request is bounded by ``request.timeout.ms``, 30 s).

Invariant: one :class:`AdminClient` belongs to one event loop (``asyncio.run`` of one tool
command); :meth:`AdminClient.close` closes every connection it opened.
"""
from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, NoReturn, Sequence

from kraft_node.network import ConnectFailed, ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.protocol.api_keys import API_INFO
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.metadata import MetadataRequest
from kraft_node.server.tools.metadata_quorum import QuorumToolError, _load_props, _targets, client_ssl_context
from kraft_storage.messages.runtime import MessageError

__all__ = ["AdminError", "AdminClient", "AdminSettings", "Node", "error_message", "exception_name",
           "load_settings", "run", "tool_main", "ToolArgumentParser", "UsageError", "REFUSED_GRACE_S"]

#: How long connections refused by every bootstrap address are retried before giving up (s).
REFUSED_GRACE_S = 1.0
#: Kafka's ``retry.backoff.ms`` default.
RETRY_BACKOFF_S = 0.1
#: DescribeCluster endpoint types (KIP-919).
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2

#: Errors after which the request is sent again (to a re-resolved node).
RETRIABLE = frozenset({int(Errors.NOT_CONTROLLER), int(Errors.LEADER_NOT_AVAILABLE),
                       int(Errors.BROKER_NOT_AVAILABLE), int(Errors.NOT_LEADER_OR_FOLLOWER)})

# Kafka's ``Errors`` default messages (what its exceptions say when the server sent none),
# for the codes these tools can meet.
_DEFAULT_MESSAGES = {
    -1: "The server experienced an unexpected error when processing the request.",
    3: "This server does not host this topic-partition.",
    5: "There is no leader for this topic-partition as we are in the middle of a leadership election.",
    7: "The request timed out.",
    8: "The broker is not available.",
    17: "The request attempted to perform an operation on an invalid topic.",
    29: "Topic authorization failed.",
    31: "Cluster authorization failed.",
    35: "The version of API is not supported.",
    36: "Topic with this name already exists.",
    37: "Number of partitions is below 1.",
    38: "Replication factor is below 1 or larger than the number of available brokers.",
    39: "Replica assignment is invalid.",
    40: "Configuration is invalid.",
    41: "This is not the correct controller for this cluster.",
    42: "This most likely occurs because of a request being malformed by the client library or the message was "
        "sent to an incompatible broker. See the broker logs for more details.",
    44: "The request parameters do not satisfy the configured policy.",
    73: "Topic deletion is disabled.",
    85: "No partition reassignment is in progress.",
    95: "The given update version was invalid.",
    96: "Unable to update finalized features due to an unexpected server error.",
    100: "This server does not host this topic ID.",
    102: "The given broker ID was not registered.",
}


def exception_name(code: int) -> str:
    """Kafka's exception class for an error code (``TOPIC_ALREADY_EXISTS`` -> ``TopicExistsException``
    for the few whose class name is not the code's), else the code name in CamelCase + Exception."""
    special = {36: "TopicExistsException", 17: "InvalidTopicException", 3: "UnknownTopicOrPartitionException",
               -1: "UnknownServerException", 7: "TimeoutException", 40: "InvalidConfigurationException"}
    if code in special:
        return special[code]
    try:
        name = Errors(code).name
    except ValueError:
        return f"error code {code}"
    return "".join(p.capitalize() for p in name.split("_")) + ("" if name.endswith("EXCEPTION") else "Exception")


def error_message(code: int, message: str | None) -> str:
    """What Kafka's exception for ``code`` says: the server's message, else the code's default."""
    if message:
        return message
    if code in _DEFAULT_MESSAGES:
        return _DEFAULT_MESSAGES[code]
    try:
        return f"{Errors(code).name} (error code {code})"
    except ValueError:
        return f"error code {code}"


class AdminError(Exception):
    """A failed admin call: its message is one line meant for the tool's user.  ``code`` is the
    Kafka error code when a server answered with one."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class AdminSettings:
    """The client's settings: from the tool's flags and ``--command-config``."""
    bootstrap: tuple[tuple[str, int], ...]
    controller_mode: bool = False
    ssl_context: Any = None
    request_timeout_s: float = 30.0
    api_timeout_s: float = 60.0
    client_id: str = "kraft-admin"


#: --command-config keys the admin client acts on; security.protocol/ssl.* go to the TLS context.
_KNOWN_KEYS = {"request.timeout.ms", "default.api.timeout.ms", "client.id", "security.protocol",
               "bootstrap.servers", "bootstrap.controllers"}


def load_settings(bootstrap_server: str | None, bootstrap_controller: str | None, command_config: str | None,
                  warn: Callable[[str], None]) -> AdminSettings:
    """Settings for one tool run.  Raises :class:`AdminError` with Kafka's message when neither or
    both of the bootstrap flags are given, for a bad ``host:port`` list, an unreadable
    ``--command-config`` or a bad timeout; ``warn`` gets one line per key it does not implement."""
    if bootstrap_server and bootstrap_controller:
        raise AdminError("You cannot specify both --bootstrap-controller and --bootstrap-server.")
    if not bootstrap_server and not bootstrap_controller:
        raise AdminError("You must specify either --bootstrap-controller or --bootstrap-server.")
    text = bootstrap_server or bootstrap_controller
    assert text is not None
    try:
        targets = tuple(_targets(text))
        ssl_context = client_ssl_context(command_config)
        props = _load_props(command_config) if command_config else {}
    except QuorumToolError as exc:
        raise AdminError(str(exc)) from None
    timeouts = {}
    for key, default in (("request.timeout.ms", 30000), ("default.api.timeout.ms", 60000)):
        raw = props.get(key, str(default)).strip()
        try:
            value = int(raw)
        except ValueError:
            raise AdminError(f"{command_config}: {key}={raw!r} is not a number of milliseconds") from None
        if value <= 0:
            raise AdminError(f"{command_config}: {key} must be positive, not {value}")
        timeouts[key] = value / 1000.0
    for key in sorted(props):
        if key not in _KNOWN_KEYS and not key.startswith("ssl."):
            warn(f"WARNING: {command_config}: {key} is not used by kraft's admin client (ignored)")
    return AdminSettings(bootstrap=targets, controller_mode=bootstrap_controller is not None, ssl_context=ssl_context,
                         request_timeout_s=timeouts["request.timeout.ms"],
                         api_timeout_s=timeouts["default.api.timeout.ms"],
                         client_id=props.get("client.id", "kraft-admin").strip() or "kraft-admin")


@dataclass
class _Peer:
    """One open connection and what its ApiVersions said."""
    address: tuple[str, int]
    conn: KafkaConnection
    versions: dict[int, tuple[int, int]]
    api_versions: Any  # the ApiVersionsResponse (features for kraft-features describe)
    where: str = field(init=False)

    def __post_init__(self) -> None:
        self.where = f"{self.address[0]}:{self.address[1]}"

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both sides speak."""
        info = API_INFO[api_key]
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise AdminError(f"{self.where} does not serve {info.name} (not in its ApiVersions answer)",
                             int(Errors.UNSUPPORTED_VERSION))
        lo, hi = max(info.lowest, theirs[0]), min(info.highest, theirs[1])
        if lo > hi:
            raise AdminError(f"{self.where} speaks {info.name} v{theirs[0]}-{theirs[1]}, kraft's client "
                             f"v{info.lowest}-{info.highest}: no common version", int(Errors.UNSUPPORTED_VERSION))
        return hi


class AdminClient:
    """See the module doc.  Use as ``async with AdminClient(settings) as admin: ...``."""

    def __init__(self, settings: AdminSettings):
        self.settings = settings
        self._peers: dict[tuple[str, int], _Peer] = {}
        self._bootstrap: _Peer | None = None
        self._deadline = 0.0
        #: the last Metadata answer (broker mode) -- its brokers and controller id route requests
        self._metadata: Any = None
        #: the active controller's address (controller mode), from DescribeCluster
        self._active: tuple[str, int] | None = None

    async def __aenter__(self) -> AdminClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        peers, self._peers = list(self._peers.values()), {}
        for p in peers:
            await p.conn.close()

    # ------------------------------------------------------------------ connections
    def _left(self) -> float:
        return self._deadline - time.monotonic()

    def _start(self) -> None:
        self._deadline = time.monotonic() + self.settings.api_timeout_s

    async def _open(self, address: tuple[str, int]) -> _Peer:
        peer = self._peers.get(address)
        if peer is not None and peer.conn.connected:
            return peer
        host, port = address
        left = self._left()
        if left <= 0:
            raise AdminError(f"timed out connecting to {host}:{port}")
        conn = await KafkaConnection.open(host, port, timeout=min(left, self.settings.request_timeout_s),
                                          client_id=self.settings.client_id, ssl_context=self.settings.ssl_context)
        try:
            resp = await self._ask_api_versions(conn)
        except BaseException:
            await conn.close()
            raise
        versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}
        peer = _Peer(address, conn, versions, resp)
        self._peers[address] = peer
        return peer

    async def _ask_api_versions(self, conn: KafkaConnection) -> Any:
        top = API_INFO[ApiVersionsRequest.API_KEY].highest
        timeout = max(0.05, min(self._left(), self.settings.request_timeout_s))
        body = ApiVersionsRequest(client_software_name="kraft-admin", client_software_version="1")
        try:
            resp = await conn.request(body, top, timeout)
            if resp.error_code == 0:
                return resp
        except MessageError:
            pass  # an answer at v0 to our newer request: ask again at v0
        resp = await conn.request(ApiVersionsRequest(), 0, timeout)
        if resp.error_code:
            raise AdminError(f"{conn.host}:{conn.port} refused ApiVersions: "
                             f"{error_message(resp.error_code, None)}", resp.error_code)
        return resp

    async def bootstrap(self) -> _Peer:
        """The connection to the first bootstrap address that answers (see the module doc)."""
        if self._bootstrap is not None and self._bootstrap.conn.connected:
            return self._bootstrap
        if self._deadline == 0.0:
            self._start()
        start = time.monotonic()
        last = "no bootstrap server answered"
        while True:
            hopeless = []
            for address in self.settings.bootstrap:
                try:
                    self._bootstrap = await self._open(address)
                    return self._bootstrap
                except ConnectFailed as exc:
                    last = str(exc)
                    if exc.reason in ("unresolved", "tls") or \
                            (exc.reason == "refused" and time.monotonic() - start >= REFUSED_GRACE_S):
                        hopeless.append(last)
                except (OSError, ConnectionClosed, RequestTimeout, asyncio.TimeoutError, MessageError) as exc:
                    last = f"{address[0]}:{address[1]}: {exc or type(exc).__name__}"
            if len(hopeless) == len(self.settings.bootstrap):
                raise AdminError("; ".join(hopeless))
            if self._left() <= 0:
                raise AdminError(f"timed out after {self.settings.api_timeout_s:g}s: {last}")
            await asyncio.sleep(min(0.2, max(0.0, self._left())))

    async def _drop(self, peer: _Peer) -> None:
        if self._peers.get(peer.address) is peer:
            del self._peers[peer.address]
        if self._bootstrap is peer:
            self._bootstrap = None
        await peer.conn.close()

    # ------------------------------------------------------------------ routing
    async def metadata(self, topics: Sequence[str] | None = None) -> Any:
        """A Metadata answer from the bootstrap node: all topics (``topics=None``) or those named.
        Not available in controller mode (controllers do not serve Metadata)."""
        peer = await self.bootstrap()
        version = peer.version_for(MetadataRequest.API_KEY)
        if topics is None:
            req_topics: list[Any] | None = [] if version == 0 else None
        else:
            req_topics = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
        body = MetadataRequest(topics=req_topics, allow_auto_topic_creation=False)
        resp = await self._request(peer, body, version)
        self._metadata = resp
        return resp

    def _serves_metadata(self, peer: _Peer) -> bool:
        return not self.settings.controller_mode and int(MetadataRequest.API_KEY) in peer.versions

    async def describe_cluster(self) -> Any:
        """DescribeCluster from the bootstrap node: brokers (broker mode) or controllers."""
        peer = await self.bootstrap()
        endpoint = CONTROLLER_ENDPOINT if not self._serves_metadata(peer) else BROKER_ENDPOINT
        version = peer.version_for(DescribeClusterRequest.API_KEY)
        if version == 0 and endpoint == CONTROLLER_ENDPOINT:
            raise AdminError(f"{peer.where} speaks DescribeCluster v0 only: it cannot describe controllers")
        resp = await self._request(peer, DescribeClusterRequest(endpoint_type=endpoint) if version >= 1
                                   else DescribeClusterRequest(), version)
        if resp.error_code:
            raise AdminError(error_message(resp.error_code, resp.error_message), resp.error_code)
        return resp

    async def _route(self, route: str | int) -> _Peer:
        boot = await self.bootstrap()
        if route == "any":
            return boot
        if not self._serves_metadata(boot):
            if route == "controller":
                if self._active is None:
                    cluster = await self.describe_cluster()
                    active = next((b for b in cluster.brokers if b.broker_id == cluster.controller_id), None)
                    if active is None:
                        raise _Retry("no active controller known yet")
                    self._active = (active.host, active.port)
                return await self._open(self._active)
            return boot  # a node id in controller mode: the controller we reached answers for it
        if self._metadata is None:
            await self.metadata([])
        md = self._metadata
        wanted = md.controller_id if route == "controller" else route
        node = next((b for b in md.brokers if b.node_id == wanted), None)
        if node is None:
            if route == "controller":
                raise _Retry("no controller known yet")
            raise AdminError(f"broker {route} is not among the brokers Metadata lists "
                             f"({', '.join(str(b.node_id) for b in md.brokers) or 'none'})")
        return await self._open((node.host, node.port))

    # ------------------------------------------------------------------ requests
    async def _request(self, peer: _Peer, body: Any, version: int) -> Any:
        left = self._left()
        if left <= 0:
            raise AdminError(f"timed out after {self.settings.api_timeout_s:g}s waiting for "
                             f"{type(body).__name__[:-7]}")
        return await peer.conn.request(body, version, min(left, self.settings.request_timeout_s))

    async def call(self, make: Callable[[int], Any], api_key: int, route: str | int = "any",
                   errors: Callable[[Any], Iterable[int]] = lambda r: (getattr(r, "error_code", 0),)) -> Any:
        """Send ``make(version)`` where ``route`` says, at the highest common version, and return the
        response; retry on the errors of :data:`RETRIABLE` (``errors(response)`` lists the codes
        in the response) and on lost connections, until the deadline."""
        self._start()
        last = ""
        while True:
            peer = None
            try:
                peer = await self._route(route)
                version = peer.version_for(api_key)
                resp = await self._request(peer, make(version), version)
                codes = [c for c in errors(resp) if c in RETRIABLE]
                if not codes:
                    return resp
                last = f"{peer.where}: {exception_name(codes[0])}"
            except _Retry as exc:
                last = str(exc)
            except ConnectFailed as exc:
                if exc.reason in ("unresolved", "tls"):
                    raise AdminError(str(exc)) from None
                last = str(exc)
            except (ConnectionClosed, RequestTimeout, asyncio.TimeoutError, OSError) as exc:
                last = str(exc) or type(exc).__name__
                if peer is not None:  # as Kafka's NetworkClient: a timed-out connection is dropped, since the
                    await self._drop(peer)  # peer answers in order and would make the retry wait behind it
            self._metadata = None
            self._active = None
            if self._left() <= 0:
                raise AdminError(f"timed out after {self.settings.api_timeout_s:g}s: {last}",
                                 int(Errors.REQUEST_TIMED_OUT))
            await asyncio.sleep(min(RETRY_BACKOFF_S, max(0.0, self._left())))

    async def call_metadata(self, topics: Sequence[str] | None = None) -> Any:
        """:meth:`metadata` under a deadline, with Kafka's message when the bootstrap node is a
        controller (which serves no Metadata)."""
        self._start()
        peer = await self.bootstrap()
        if not self._serves_metadata(peer):
            what = "a controller" if self.settings.controller_mode else "a listener without Metadata"
            raise AdminError(f"{peer.where} is {what}: listing or describing topics needs a broker "
                             f"(--bootstrap-server of a broker listener)", int(Errors.UNSUPPORTED_VERSION))
        try:
            return await self.metadata(topics)
        except (ConnectionClosed, RequestTimeout, asyncio.TimeoutError, OSError) as exc:
            raise AdminError(f"{peer.where}: {exc or type(exc).__name__}") from None

    async def api_versions(self) -> Any:
        """The bootstrap node's ApiVersions answer (its supported and finalized features)."""
        self._start()
        return (await self.bootstrap()).api_versions


class _Retry(Exception):
    """Routing found no node to send to yet: try again after the backoff."""


def run(coro_fn: Callable[[AdminClient], Any], settings: AdminSettings) -> Any:
    """Run ``coro_fn(client)`` with a fresh client on a fresh event loop; close the client after.
    Connection failures come out as :class:`AdminError` (one line, naming host:port)."""
    async def go() -> Any:
        async with AdminClient(settings) as admin:
            try:
                return await coro_fn(admin)
            except (ConnectionClosed, RequestTimeout, asyncio.TimeoutError) as exc:
                raise AdminError(str(exc) or type(exc).__name__) from None
    return asyncio.run(go())


# ---------------------------------------------------------------------- the tools' common frame
class UsageError(Exception):
    """A command line the tool refuses (Kafka's ``printUsageAndExit`` message)."""


class ToolArgumentParser(argparse.ArgumentParser):
    """argparse that raises :class:`UsageError` instead of exiting, so a tool's ``main`` can
    print one line and return 1 (``--help`` still prints the help and exits 0)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def tool_main(prog: str, argv: Sequence[str] | None, body: Callable[[list[str]], int]) -> int:
    """Run ``body(argv)`` as a console script: a usage error, an :class:`AdminError` or a bad
    file prints one line on stderr (``prog: ...`` for usage errors, the message itself otherwise)
    and returns 1; never a traceback for those."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        return body(args)
    except SystemExit as exc:  # --help (0) or argparse's own exit
        return exc.code if isinstance(exc.code, int) else 1
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 1
    except AdminError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
