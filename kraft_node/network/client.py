"""A client connection speaking Kafka's protocol, with pipelining and timeouts.

Requests get increasing correlation ids; responses come back in request order
(Kafka's guarantee per connection), and each is matched to its waiter by
correlation id.  A response for an unknown id is skipped (the late answer to a
request that timed out); a broken frame or a closed socket fails every
outstanding request with :class:`ConnectionClosed`; the connection is then
unusable and the caller reconnects (the Raft driver does, after
``controller.quorum.retry.backoff.ms``).

Two ways to ask:

* ``await conn.request(body, version, timeout)`` -- for tools and tests;
* ``conn.send(body, version, timeout, callback)`` -- the Raft driver's hot
  path: ``callback(response, None)`` or ``callback(None, exc)`` runs straight
  from the socket callback that completed the frame (or from the timeout
  timer), with no task or future in between.

TLS: pass ``ssl_context`` (from :func:`kraft_node.network.tls.client_context`);
the host dialled is the name checked against the server's certificate when the
context verifies host names.  A connection that cannot be made raises
:class:`ConnectFailed` (an OSError) whose message says what and where:
``127.0.0.1:9093: connection refused``, ``host 'x' does not resolve``, ``TLS
handshake failed: ...`` or ``timed out``.

The connection is an :class:`asyncio.Protocol` (as asyncpg and uvloop-based
servers are), so a response costs one ``data_received`` call, not a chain of
coroutine resumptions through a StreamReader.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import ssl
from typing import Callable

from kraft_node.network.frames import FrameError, FrameReader
from kraft_node.protocol.framing import MAX_FRAME_SIZE, decode_response, encode_request
from kraft_storage.messages.runtime import MessageError

log = logging.getLogger(__name__)

#: ``callback(response_body, None)`` on success, ``callback(None, exception)`` on failure.
ResponseCallback = Callable[[object, BaseException | None], None]


class ConnectionClosed(ConnectionError):
    """The connection failed or was closed while requests were outstanding."""


class ConnectFailed(ConnectionClosed):
    """The connection could not be made.  ``reason`` is one of "refused", "unresolved",
    "tls", "timeout", "error"; the message names host:port."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def describe_connect_error(host: str, port: int, exc: BaseException, timeout: float | None = None) \
        -> ConnectFailed:
    """A :class:`ConnectFailed` saying what went wrong connecting to ``host:port``."""
    where = f"{host}:{port}"
    if isinstance(exc, ConnectFailed):
        return exc
    if isinstance(exc, socket.gaierror):
        return ConnectFailed(f"{where}: host {host!r} does not resolve ({exc.strerror})", "unresolved")
    if isinstance(exc, ConnectionRefusedError):
        return ConnectFailed(f"{where}: connection refused", "refused")
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ConnectFailed(f"{where}: TLS handshake failed: {exc.verify_message or exc.reason or exc}", "tls")
    if isinstance(exc, ssl.SSLError):
        return ConnectFailed(f"{where}: TLS handshake failed: {exc.reason or exc}", "tls")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        t = f" after {timeout:g}s" if timeout is not None else ""
        return ConnectFailed(f"{where}: connection timed out{t}", "timeout")
    if isinstance(exc, OSError):
        return ConnectFailed(f"{where}: {exc.strerror or exc}", "error")
    return ConnectFailed(f"{where}: {exc!r}", "error")


class RequestTimeout(TimeoutError):
    """No response within the request timeout."""


class KafkaConnection(asyncio.Protocol):
    """One TCP connection to a Kafka-protocol server."""

    def __init__(self, host: str, port: int, *, client_id: str = "kraft", max_frame_size: int = MAX_FRAME_SIZE,
                 ssl_context: ssl.SSLContext | None = None):
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.client_id = client_id
        self.max_frame_size = max_frame_size
        self._transport: asyncio.Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: corr -> (callback, api key, version, timeout handle)
        self._pending: dict[int, tuple[ResponseCallback, int, int, asyncio.TimerHandle | None]] = {}
        self._corr = itertools.count(1)
        self._frames = FrameReader(min_size=4, max_size=max_frame_size)
        self._error: BaseException | None = None
        self._closed_waiter: asyncio.Future | None = None

    @classmethod
    async def open(cls, host: str, port: int, *, timeout: float = 10.0, **kw) -> "KafkaConnection":
        c = cls(host, port, **kw)
        await c.connect(timeout)
        return c

    @property
    def connected(self) -> bool:
        return self._transport is not None and self._error is None and not self._transport.is_closing()

    async def connect(self, timeout: float = 10.0) -> None:
        self._loop = asyncio.get_running_loop()
        self._closed_waiter = self._loop.create_future()
        kw = {}
        if self.ssl_context is not None:
            kw = {"ssl": self.ssl_context, "server_hostname": self.host}
        try:
            await asyncio.wait_for(self._loop.create_connection(lambda: self, self.host, self.port, **kw), timeout)
        except BaseException as exc:
            # never connected: nothing to wait for at close (a connection made just as the timeout
            # cancelled the attempt was closed again, and connection_lost may have set it already)
            if not self._closed_waiter.done():
                self._closed_waiter.set_result(None)
            if isinstance(exc, (OSError, asyncio.TimeoutError)):
                raise describe_connect_error(self.host, self.port, exc, timeout) from None
            raise

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._frames.feed(data)
        except FrameError as exc:
            self._fail(ConnectionClosed(f"bad response from {self.host}:{self.port}: {exc}"))
            return
        for payload in frames:
            corr = int.from_bytes(payload[:4], "big", signed=True)
            entry = self._pending.pop(corr, None)
            if entry is None:
                continue  # a late answer to a request that timed out: skip it
            callback, api_key, version, timer = entry
            if timer is not None:
                timer.cancel()
            try:
                resp = decode_response(payload, api_key, version)[1]
            except MessageError as exc:
                self._call(callback, None, exc)
            else:
                self._call(callback, resp, None)

    def connection_lost(self, exc) -> None:
        self._fail(ConnectionClosed(f"connection to {self.host}:{self.port} lost"
                                    + (f": {exc}" if exc is not None else "")))
        if self._closed_waiter is not None and not self._closed_waiter.done():
            self._closed_waiter.set_result(None)

    # ------------------------------------------------------------ requests
    def send(self, body, version: int, timeout: float | None, callback: ResponseCallback, *,
             hold: bool = False):
        """Send ``body`` at ``version``; ``callback`` gets the decoded response body, or the
        error (:class:`RequestTimeout` after ``timeout`` seconds, :class:`ConnectionClosed`,
        a :class:`MessageError` for an undecodable answer).  Raises ConnectionClosed at
        once, without calling ``callback``, when the connection is not usable.

        ``hold=True`` encodes and registers the request but does not write it: the caller
        gets ``(correlation_id, frame)`` and later calls :meth:`write_held` (or
        :meth:`abandon`).  Why: a follower encodes its next Fetch while its fsync runs and
        sends it the moment the fsync lands (RaftDriver)."""
        if not self.connected:
            raise ConnectionClosed(f"not connected to {self.host}:{self.port}"
                                   + (f" ({self._error})" if self._error else ""))
        corr = next(self._corr) & 0x7FFFFFFF
        frame = encode_request(body, version, corr, self.client_id)
        timer = self._loop.call_later(timeout, self._on_timeout, corr, type(body).__name__, timeout) \
            if timeout is not None else None
        self._pending[corr] = (callback, body.API_KEY, version, timer)
        if hold:
            return corr, frame
        self._transport.write(frame)
        return None

    def write_held(self, corr: int, frame) -> None:
        """Write a frame from ``send(..., hold=True)``.  If the connection failed meanwhile,
        its callback already had the error and nothing is written."""
        if corr in self._pending and self.connected:
            self._transport.write(frame)

    def abandon(self, corr: int, exc: BaseException) -> None:
        """Never send a held request: its callback gets ``exc`` now (if it has not had an
        error already)."""
        entry = self._pending.pop(corr, None)
        if entry is not None:
            if entry[3] is not None:
                entry[3].cancel()
            self._call(entry[0], None, exc)

    async def request(self, body, version: int, timeout: float = 30.0):
        """Send ``body`` at ``version``; return the decoded response body."""
        fut = asyncio.get_running_loop().create_future()

        def done(resp, exc):
            if not fut.done():
                if exc is None:
                    fut.set_result(resp)
                else:
                    fut.set_exception(exc)
        self.send(body, version, timeout, done)
        return await fut

    def _on_timeout(self, corr: int, what: str, timeout: float) -> None:
        entry = self._pending.pop(corr, None)
        if entry is not None:
            self._call(entry[0], None, RequestTimeout(f"{what} to {self.host}:{self.port} timed out after "
                                                      f"{timeout:.3f}s"))

    @staticmethod
    def _call(callback: ResponseCallback, resp, exc) -> None:
        try:
            callback(resp, exc)
        except Exception:  # noqa: BLE001 - a waiter's bug must not break the connection
            log.exception("response callback failed")

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        pending, self._pending = self._pending, {}
        for callback, _k, _v, timer in pending.values():
            if timer is not None:
                timer.cancel()
            self._call(callback, None, ConnectionClosed(str(exc)))
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._fail(ConnectionClosed("closed by the client"))
        if self._closed_waiter is not None and self._transport is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._closed_waiter), 5)
            except (asyncio.TimeoutError, ConnectionError, OSError):
                pass
