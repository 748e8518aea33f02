"""The broker's channel to the active controller (Kafka's ``NodeToControllerChannelManager``
with a ``RaftControllerNodeProvider``).

Why one small class: the broker has two kinds of traffic for the active controller -- its own
lifecycle (BrokerRegistration, BrokerHeartbeat) and the admin writes it forwards (Envelope,
CreateTopics...) -- and both need the same thing: "deliver this request to whichever
controller is active now, and keep trying until a deadline".  The caller never sees which
node answered or how many connections it took.

API (the whole of it)::

    channel = ControllerChannel(active_controller, client_id="broker-1")
    response = await channel.send(request_body)             # version: highest both support
    response = await channel.send(body, 4, timeout_s=5.0)   # a fixed version, own deadline
    await channel.close()

``active_controller()`` returns ``(node id, host, port)`` of the active controller on the
controller listener, or None while none is known; on a broker it reads the Raft observer's
leader (``KraftNode._active_controller_address``).  It is asked again before every attempt.

Invariants:

* at most one connection is open at a time; it is to the controller ``active_controller()``
  named last.  When that answer changes, or the connection fails, or a response carries
  NOT_CONTROLLER, the connection is closed and the next attempt opens a new one (requests
  still outstanding on the old one fail with ConnectionClosed and are retried);
* a connection learns the controller's API ranges with one ApiVersions exchange, the first
  time a request without a fixed version is sent on it; the version used is the highest in
  both kraft's and the controller's range;
* ``send`` retries -- while no controller is known, when the connection cannot be made or
  is lost, when one attempt times out (each attempt is bounded by ``request_timeout_ms`` and
  by what is left of the deadline), and when the response says NOT_CONTROLLER -- waiting
  ``retry_backoff_ms`` between attempts, until its deadline; then it raises
  :class:`ControllerUnavailableError` naming the controller tried last and why it failed;
* NOT_CONTROLLER anywhere in the response counts, not only a top-level error code: Kafka's
  channel looks at the response's ``errorCounts()`` (CreateTopics, for one, answers it per
  topic).  Every other error is the caller's to handle: the response is returned as is;
* a request is never sent to two controllers at once; a retried request may have been
  applied by the controller that failed to answer (as in Kafka, which requeues it too), so
  a caller whose request is not idempotent must be prepared to see its effect twice (the
  controller refuses a duplicate CreateTopics with TOPIC_ALREADY_EXISTS).
"""
from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

from kraft_node.network.client import ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.protocol.api_keys import API_INFO, UNSUPPORTED_VERSION
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_storage.messages.runtime import Message, MessageError

__all__ = ["ControllerChannel", "ControllerChannelError", "ControllerUnavailableError",
           "UnsupportedControllerVersionError", "ActiveControllerProvider", "error_name", "response_has_error"]

log = logging.getLogger(__name__)

#: ``() -> (node id, host, port)`` of the active controller, or None while none is known.
ActiveControllerProvider = Callable[[], tuple[int, str, int] | None]

#: Kafka's defaults: ``retry.backoff.ms`` and ``controller.socket.timeout.ms``
DEFAULT_RETRY_BACKOFF_MS = 100
DEFAULT_REQUEST_TIMEOUT_MS = 30_000
#: how long making a TCP (and TLS) connection may take, at most
CONNECT_TIMEOUT_S = 10.0


class ControllerChannelError(Exception):
    """A request could not be delivered to the active controller."""


class ControllerUnavailableError(ControllerChannelError, TimeoutError):
    """No controller answered the request before its deadline (or the channel was closed).
    The message names the controller tried last and why that attempt failed."""


class UnsupportedControllerVersionError(ControllerChannelError):
    """The active controller and kraft share no version of the API (Kafka's version
    mismatch): retrying the same controller cannot help, so ``send`` raises at once."""


def error_name(code: int) -> str:
    """Kafka's name of an error code (``NOT_CONTROLLER``), or the number if kraft does not know it."""
    try:
        return Errors(code).name
    except ValueError:
        return f"error code {code}"


def response_has_error(message: Any, code: int) -> bool:
    """True if ``code`` is the ``error_code`` of ``message`` or of any struct inside it
    (Kafka's ``AbstractResponse.errorCounts().containsKey(error)``)."""
    if getattr(message, "error_code", None) == code:
        return True
    for name in getattr(type(message), "__slots__", ()):
        value = getattr(message, name, None)
        if isinstance(value, list):
            for item in value:
                if isinstance(item, Message) and response_has_error(item, code):
                    return True
        elif isinstance(value, Message) and response_has_error(value, code):
            return True
    return False


class ControllerChannel:
    """Requests to whichever controller is active; see the module doc for the invariants.

    ``client_id`` goes in every request header (Kafka: ``broker-<id>-heartbeat`` and
    ``broker-<id>-forwarding``).  ``ssl_context``: a TLS client context for the controller
    listener, None for PLAINTEXT.  ``retry_backoff_ms``: the pause between attempts.
    ``request_timeout_ms``: the bound on one attempt, and the deadline of a ``send`` that
    gives no ``timeout_s``.

    Runs on one asyncio loop; ``send`` may be called concurrently (requests share the one
    connection, pipelined)."""

    def __init__(self, active_controller: ActiveControllerProvider, *, client_id: str,
                 ssl_context: ssl.SSLContext | None = None, retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS) -> None:
        if retry_backoff_ms < 0:
            raise ValueError(f"retry_backoff_ms must be >= 0, not {retry_backoff_ms}")
        if request_timeout_ms <= 0:
            raise ValueError(f"request_timeout_ms must be > 0, not {request_timeout_ms}")
        self._active_controller = active_controller
        self.client_id = client_id
        self.ssl_context = ssl_context
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_s = request_timeout_ms / 1000
        self._conn: KafkaConnection | None = None
        #: (node id, host, port) the open connection goes to
        self._conn_target: tuple[int, str, int] | None = None
        #: api key -> (min, max) the controller at ``_conn_target`` supports; None until asked
        self._versions: dict[int, tuple[int, int]] | None = None
        #: held while the connection is replaced or its ApiVersions asked: one at a time
        self._lock = asyncio.Lock()
        self._closed = asyncio.Event()
        #: counters for tests and metrics: connections opened, NOT_CONTROLLER answers seen
        self.connections_opened = 0
        self.not_controller_responses = 0

    @property
    def connected_to(self) -> tuple[int, str, int] | None:
        """The controller the open connection goes to, or None."""
        if self._conn is not None and self._conn.connected:
            return self._conn_target
        return None

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    # ------------------------------------------------------------ sending
    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None,
                   restamp: Callable[[], Any] | None = None) -> Any:
        """Deliver ``body`` (a generated request) to the active controller and return its
        response body.  ``version``: the version to send, or None for the highest both sides
        support.  ``timeout_s``: the deadline for all attempts (default: ``request_timeout_ms``).
        ``restamp``: called before each attempt; what it returns is sent in that attempt instead
        of ``body`` (same API), and None means "send no more attempts": ``send`` raises
        :class:`ControllerUnavailableError` at once.  Forwarding uses it to carry the client's
        remaining timeout to the controller, so that no attempt can start a write after the
        client has stopped waiting (:mod:`kraft_node.broker.forwarding`).

        Raises :class:`ControllerUnavailableError` at the deadline or once the channel is
        closed, and :class:`UnsupportedControllerVersionError` when no version fits."""
        api_key = int(body.API_KEY)
        info = API_INFO.get(api_key)
        if info is None:
            raise ValueError(f"{type(body).__name__}: api key {api_key} has no codec in kraft")
        if version is not None and not info.supports(version):
            raise ValueError(f"{info.name} version {version} is outside kraft's range {info.lowest}-{info.highest}")
        total = self.request_timeout_s if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        deadline = loop.time() + total
        last = "no attempt was made"
        answered = False
        while True:
            if self.closed:
                raise ControllerUnavailableError(f"{info.name} not sent: the controller channel is closed ({last})")
            target = self._active_controller()
            if target is None:
                last = "no active controller is known"
                answered = False
            else:
                where = f"controller {target[0]} at {target[1]}:{target[2]}"
                remaining = deadline - loop.time()
                conn: KafkaConnection | None = None
                try:
                    conn = await self._connection(target, remaining)
                    v = version if version is not None else await self._pick_version(conn, target, info.name,
                                                                                      api_key, remaining)
                    attempt_s = max(0.001, min(self.request_timeout_s, deadline - loop.time()))
                    sent = body if restamp is None else restamp()
                    if sent is None:
                        raise ControllerUnavailableError(
                            f"{info.name} not sent again: its own deadline has passed (last: {last})")
                    response = await conn.request(sent, v, timeout=attempt_s)
                except (UnsupportedControllerVersionError, ControllerUnavailableError):
                    raise  # no version fits / restamp said stop (a TimeoutError, hence an OSError)
                except (OSError, ConnectionError, RequestTimeout, MessageError) as exc:
                    # ConnectFailed/ConnectionClosed are ConnectionErrors, RequestTimeout a TimeoutError.
                    # An attempt the deadline cut short says nothing new: the error keeps naming
                    # the controller's last answer (a loaded host's retry may start with ~1 ms left)
                    if answered and loop.time() >= deadline:
                        last = f"{last} (a later attempt ran out of time: {exc})"
                    else:
                        last = f"{where}: {exc}"
                        answered = False
                    await self._forget(conn)
                else:
                    if not response_has_error(response, int(Errors.NOT_CONTROLLER)):
                        return response
                    self.not_controller_responses += 1
                    last = f"{where} answered NOT_CONTROLLER"
                    answered = True
                    log.debug("%s answered %s with NOT_CONTROLLER: disconnecting and asking for the active one",
                              where, info.name)
                    await self._forget(conn)
            left = deadline - loop.time()
            if left <= 0:
                raise ControllerUnavailableError(
                    f"{info.name} got no answer from the active controller within {total:g}s; last: {last}")
            await self._pause(min(self.retry_backoff_s, left))

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds``, or less if the channel is closed meanwhile."""
        try:
            await asyncio.wait_for(self._closed.wait(), seconds)
        except TimeoutError:
            pass

    async def _connection(self, target: tuple[int, str, int], timeout_s: float) -> KafkaConnection:
        """The open connection to ``target``, made now if there is none (closing one to another
        controller first)."""
        async with self._lock:
            conn = self._conn
            if conn is not None and self._conn_target == target and conn.connected:
                return conn
            await self._drop()
            if self.closed:
                raise ConnectionClosed("the controller channel is closed")
            _nid, host, port = target
            conn = KafkaConnection(host, port, client_id=self.client_id, ssl_context=self.ssl_context)
            await conn.connect(max(0.001, min(CONNECT_TIMEOUT_S, timeout_s)))
            if self.closed:  # closed while connecting: do not leave it open
                await conn.close()
                raise ConnectionClosed("the controller channel is closed")
            self._conn, self._conn_target, self._versions = conn, target, None
            self.connections_opened += 1
            log.info("[ControllerChannel %s] connected to the active controller %d at %s:%d",
                     self.client_id, *target)
            return conn

    async def _pick_version(self, conn: KafkaConnection, target: tuple[int, str, int], name: str,
                            api_key: int, timeout_s: float) -> int:
        """The highest version of ``api_key`` both kraft and ``target`` support (ApiVersions is
        asked once per connection)."""
        async with self._lock:
            if self._conn is not conn:
                raise ConnectionClosed(f"connection to {target[1]}:{target[2]} was replaced")
            if self._versions is None:
                self._versions = await self._api_versions(conn, max(0.001, min(self.request_timeout_s, timeout_s)))
            theirs = self._versions.get(api_key)
        info = API_INFO[api_key]
        if theirs is None:
            raise UnsupportedControllerVersionError(
                f"controller {target[0]} at {target[1]}:{target[2]} does not support {name} (api key {api_key})")
        low, high = max(info.lowest, theirs[0]), min(info.highest, theirs[1])
        if low > high:
            raise UnsupportedControllerVersionError(
                f"controller {target[0]} at {target[1]}:{target[2]} supports {name} versions "
                f"{theirs[0]}-{theirs[1]}, kraft {info.lowest}-{info.highest}: none in common")
        return high

    @staticmethod
    async def _api_versions(conn: KafkaConnection, timeout_s: float) -> dict[int, tuple[int, int]]:
        """Ask ApiVersions at kraft's highest version; a server that does not know it answers
        UNSUPPORTED_VERSION in a v0 body (KIP-511), so then ask again at v0."""
        top = ApiVersionsRequest.HIGHEST_VERSION
        try:
            resp = await conn.request(ApiVersionsRequest(client_software_name="kraft",
                                                         client_software_version="1"), top, timeout=timeout_s)
            unsupported = resp.error_code == UNSUPPORTED_VERSION
        except MessageError:
            unsupported = True
        if unsupported:
            resp = await conn.request(ApiVersionsRequest(), 0, timeout=timeout_s)
        if resp.error_code != 0:
            raise ConnectionClosed(f"ApiVersions to {conn.host}:{conn.port} answered {error_name(resp.error_code)}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    async def _forget(self, conn: KafkaConnection | None) -> None:
        """Close ``conn`` if it is still the open connection, so the next attempt asks
        ``active_controller()`` afresh and reconnects.  (None: the connection was never made;
        one that another send has replaced already is left alone.)"""
        if conn is None:
            return
        async with self._lock:
            if self._conn is conn:
                await self._drop()

    async def _drop(self) -> None:
        conn, self._conn, self._conn_target, self._versions = self._conn, None, None, None
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        """Close the connection; ``send`` calls waiting or in progress raise
        :class:`ControllerUnavailableError` (their outstanding requests fail)."""
        self._closed.set()
        conn, self._conn, self._conn_target, self._versions = self._conn, None, None, None
        if conn is not None:
            await conn.close()
