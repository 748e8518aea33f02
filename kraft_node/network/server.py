"""An asyncio server for Kafka requests.

Per connection, requests are handled one at a time and answered in order, as
Kafka's network processor does (it mutes a channel until its response is
sent) -- except that read-ahead requests of :func:`pipelined` APIs (the
controller's BrokerHeartbeat) are dispatched together; their answers still go
out in request order.  Answers are handed to the transports once per loop
iteration (several of a connection's answers in one write).  Handlers are looked up by API key and called as
``handler(RequestContext, request)``; a handler either

* is ``async`` and returns the response (run as a task: simple, for rare APIs), or
* returns the response at once, or
* returns :data:`DEFERRED` and later calls ``ctx.respond(response)`` exactly once
  -- the Raft driver does this for requests its core answers in a later poll
  (a Fetch parked in the leader's purgatory), with no task or future per request.

ApiVersions is answered here from the ApiKeys table unless a handler overrides it; it
advertises only the APIs this server has handlers for (and ApiVersions), so a client
never picks an API whose request would close the connection.
Each connection is an :class:`asyncio.Protocol`: a request costs one
``data_received`` call (see :mod:`.frames`).  Reading pauses while too many
requests wait behind the one in progress, and answering pauses while the
socket's send buffer is over its high-water mark, so a slow or greedy peer
costs bounded memory.

TLS: with ``ssl_context`` (an :class:`ssl.SSLContext` from
:func:`kraft_node.network.tls.server_context`) the listener speaks TLS only; a
plaintext client or one whose certificate fails verification is dropped during the
handshake (logged at DEBUG by asyncio) and never reaches a handler.  Decision: the
handshake is left to ``create_server(ssl=)``.  Running ``loop.start_tls`` per
connection from ``connection_made`` (to log failed handshakes at INFO, as Kafka logs
failed authentications) was tried and let plaintext requests through on uvloop,
which delivers data before the switch; tests/network/test_tls.py checks both loops.

Zero copy.  An answer's parts may include :class:`~kraft_node.network.frames.FileRegion`
parts (a Fetch answer's records: a range of a segment file).  Such an answer goes out as its
buffers up to the region (``transport.write``), then the region by ``os.sendfile`` from the
file to the socket, then the rest.  The socket's descriptor is shared with the transport, so a
region is sent only while the transport's own buffer is empty (everything before it is on the
wire), and while a region is in flight every later answer of the connection waits behind it
(``_backlog``), which keeps the answers in order.  When the socket is full, the connection
waits for it to become writable through a ``dup`` of its descriptor (uvloop and asyncio both
refuse ``add_writer`` on a transport's own descriptor; uvloop has no ``loop.sendfile``), and
stops dispatching requests meanwhile.  A region whose file changed under it (a truncation)
cannot be sent any more, and the frame's size is already on the wire: the connection is
aborted (Kafka does the same), so a client never reads a corrupt frame.  TLS connections
copy the region with ``pread`` (sendfile would bypass the encryption), and so does every
connection with ``KRAFT_ZERO_COPY=0`` (for A/B measurements); :attr:`RequestContext.zero_copy`
tells a handler whether regions are worth making at all.

Bad input never takes the server down: a frame with an invalid size, an
unknown API or an undecodable body is logged with the peer's address and
the connection is closed (Kafka does the same), except for an ApiVersions
request of a version we do not know, which gets the UNSUPPORTED_VERSION
answer at version 0 (KIP-511) so the client can retry with one we do.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from kraft_node.network.frames import BUFFER_TYPES, FileRegion, FrameError, FrameReader, RegionGoneError
from kraft_node.protocol.api_keys import ApiKeys, answer_api_versions
from kraft_node.protocol.framing import MAX_FRAME_SIZE, UnsupportedApiError, decode_request, encode_response
from kraft_storage.messages.runtime import MessageError

log = logging.getLogger(__name__)

#: Returned by a handler that will answer later through ``ctx.respond``.
DEFERRED = object()

#: Requests read ahead of the one in progress before the connection stops reading.
_MAX_QUEUED = 16

#: Pending answers up to this many bytes in all are joined into one buffer before writing.
_JOIN_MAX_BYTES = 64 * 1024

#: Requests of pipelined APIs (see :func:`pipelined`) one connection may have in progress.
_MAX_PIPELINED = 16

_KEY = struct.Struct(">h")

#: sendfile errors that mean "this descriptor pair cannot sendfile" (copy instead), not a dead peer
_NO_SENDFILE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSOCK, errno.EBADF}


def _zero_copy_default() -> bool:
    value = os.environ.get("KRAFT_ZERO_COPY", "1")
    if value not in ("0", "1"):
        log.warning("KRAFT_ZERO_COPY=%r is neither 0 nor 1; sending file regions with sendfile", value)
    return value != "0" and hasattr(os, "sendfile")


def pipelined(handler: Callable) -> Callable:
    """Mark ``handler`` (a function; methods: mark the function in the class body) as safe to
    run for a connection's next request before the previous one is answered, when both are
    of such APIs.  Kafka's network processor handles one request per connection at a time;
    for a handler whose answers complete in the order it was called (the controller's
    BrokerHeartbeat: one FIFO event queue, one FIFO purgatory) running the read-ahead ones
    at once changes nothing a client can see -- answers still go out in request order --
    and lets one loop iteration answer several of a connection's requests in one write.
    The handler must return its answer or DEFERRED (not a coroutine)."""
    handler.pipelined = True  # type: ignore[attr-defined]
    return handler


class _Slot:
    """A dispatched request's place in its connection's answer order: ``out`` once
    answered (``None``: close the connection there)."""

    __slots__ = ("done", "out")

    def __init__(self) -> None:
        self.done = False
        self.out: Any = None


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body; ``respond`` answers it."""
    header: object          # RequestHeader
    api_version: int
    peer: tuple             # (host, port) of the client
    listener: str           # listener name (e.g. "CONTROLLER")
    _conn: Any = field(default=None, repr=False)
    _answered: bool = field(default=False, repr=False)
    #: where the answer goes in the connection's order (None: a context made by hand)
    _slot: Any = field(default=None, repr=False)

    def respond(self, response) -> None:
        """Send ``response`` (a response body of this request's API).  Only the first call
        counts; after the connection closed it is a no-op."""
        if self._answered:
            return
        self._answered = True
        conn = self._conn
        if conn is None:
            return
        try:
            out = encode_response(response, self.api_version, self.header.correlation_id, chunks=True)
        except Exception:  # noqa: BLE001 - a handler's bad response: close, like any handler bug
            log.exception("cannot encode the answer to %s v%d for %s:%s; closing the connection",
                          type(response).__name__, self.api_version, self.peer[0], self.peer[1])
            out = None
        if self._slot is None:
            conn.answered(out)
        else:
            conn.answered(out, self._slot)

    @property
    def zero_copy(self) -> bool:
        """Whether this connection sends :class:`FileRegion` parts with sendfile (a handler
        that may answer with file regions uses bytes otherwise: TLS, hand-made contexts)."""
        conn = self._conn
        return conn is not None and conn._sockfd >= 0

    def respond_frame(self, out) -> None:
        """Send an already framed response (bytes, or a list of buffers): the broker's cached
        Metadata answers, spliced from bytes encoded once per image.  Only the first answer
        counts, as with :meth:`respond`."""
        if self._answered:
            return
        self._answered = True
        conn = self._conn
        if conn is None:
            return
        if self._slot is None:
            conn.answered(out)
        else:
            conn.answered(out, self._slot)


Handler = Callable[[RequestContext, object], Any]


class KafkaServer:
    """Serve Kafka requests on ``host:port`` with the given handlers."""

    def __init__(self, host: str, port: int, handlers: dict[int, Handler], *, listener: str = "PLAINTEXT",
                 listener_type: str | None = None, max_frame_size: int = MAX_FRAME_SIZE,
                 ssl_context=None, config_key: str = "listeners", zero_copy: bool | None = None):
        self.host = host
        #: an ssl.SSLContext (server side) for an SSL listener, None for PLAINTEXT
        self.ssl_context = ssl_context
        #: the config key the address came from, named in errors
        self.config_key = config_key
        self.port = port
        self.handlers = dict(handlers)
        self.listener = listener
        #: "broker" or "controller": which APIs ApiVersions advertises.
        self.listener_type = listener_type
        self.max_frame_size = max_frame_size
        #: send FileRegion parts with sendfile (None: KRAFT_ZERO_COPY, default on); never over TLS
        self.zero_copy = _zero_copy_default() if zero_copy is None else zero_copy
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[_ServerConnection] = set()
        #: connections with answers not yet handed to their transport (see _ServerConnection.answered)
        self._unflushed: list[_ServerConnection] = []
        #: api key -> (the handler seen, whether it is pipelined): see _is_pipelined
        self._pipelined_cache: dict[int, tuple[Any, bool]] = {}

    def advertised_api_keys(self) -> set[int]:
        """What ApiVersions lists: the keys with a handler, and ApiVersions itself."""
        return {int(k) for k in self.handlers} | {int(ApiKeys.API_VERSIONS)}

    async def start(self, *, serving: bool = True) -> int:
        """Listen; returns the bound port (useful with port 0).  Raises OSError with a message
        naming the listener, host:port and config key when the address cannot be used.

        ``serving=False`` binds the port without accepting connections until
        :meth:`start_serving` (Kafka's broker binds its sockets first, to register the ports,
        and enables request processing only once it is unfenced); clients wait in the
        kernel's accept backlog meanwhile."""
        loop = asyncio.get_running_loop()
        where = f"{self.listener}://{self.host}:{self.port} ({self.config_key})"
        try:
            self._server = await loop.create_server(lambda: _ServerConnection(self), self.host or None, self.port,
                                                    reuse_address=True, ssl=self.ssl_context,
                                                    start_serving=serving)
        except socket.gaierror as exc:  # (a one-part OSError: its str() is the message, no "[Errno n]")
            raise OSError(f"cannot listen on {where}: host {self.host!r} does not resolve ({exc.strerror})") \
                from None
        except OSError as exc:
            raise OSError(f"cannot listen on {where}: {exc.strerror or exc}") from None
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def start_serving(self) -> None:
        """Accept connections on a port bound by ``start(serving=False)``."""
        if self._server is None:
            raise RuntimeError(f"{self.listener}: start() binds the port before start_serving()")
        await self._server.start_serving()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for c in list(self._conns):
            c.close(force=True)
        if self._server is not None:
            await self._server.wait_closed()

    def _flush(self) -> None:
        """Hand every connection's pending answers to its transport (scheduled once per loop
        iteration by the first answer after the previous flush)."""
        conns, self._unflushed = self._unflushed, []
        for conn in conns:
            conn.flush()

    # ------------------------------------------------------------ one request
    def _is_pipelined(self, payload: bytes) -> bool:
        """Whether the request in ``payload`` is for a :func:`pipelined` handler.  Asked per
        request: the answer is cached per api key, with the handler it was computed for (a
        replaced handler, or a replaced handlers dict, is looked at again)."""
        if len(payload) < 2:
            return False
        key = _KEY.unpack_from(payload)[0]
        handler = self.handlers.get(key)
        cached = self._pipelined_cache.get(key)
        if cached is not None and cached[0] is handler:
            return cached[1]
        flag = handler is not None and bool(getattr(handler, "pipelined", False))
        self._pipelined_cache[key] = (handler, flag)
        return flag

    def _dispatch(self, conn: "_ServerConnection", payload: bytes, slot: _Slot) -> None:
        """Decode one request and run its handler; the answer reaches ``conn.answered``
        with ``slot``."""
        peer = conn.peer
        try:
            header, body = decode_request(payload)
        except UnsupportedApiError as exc:
            h = exc.header
            if h is not None and h.request_api_key == ApiKeys.API_VERSIONS:
                resp, v = answer_api_versions(None, h.request_api_version, self.listener_type,
                                              only=self.advertised_api_keys())
                conn.answered(encode_response(resp, v, h.correlation_id), slot)
                return
            log.warning("closing %s:%s: %s", peer[0], peer[1], exc)
            conn.answered(None, slot)
            return
        except MessageError as exc:
            log.warning("closing %s:%s: malformed request: %s", peer[0], peer[1], exc)
            conn.answered(None, slot)
            return
        key, version = header.request_api_key, header.request_api_version
        ctx = RequestContext(header, version, peer, self.listener, conn, False, slot)  # positional: per request
        handler = self.handlers.get(key)
        if handler is None:
            if key == ApiKeys.API_VERSIONS:
                resp, v = answer_api_versions(body, version, self.listener_type, only=self.advertised_api_keys())
                conn.answered(encode_response(resp, v, header.correlation_id), slot)
                return
            log.warning("closing %s:%s: no handler for api key %d on listener %s", peer[0], peer[1], key,
                        self.listener)
            conn.answered(None, slot)
            return
        try:
            res = handler(ctx, body)
        except Exception:  # a handler bug must not kill the server
            log.exception("error serving %s:%s; closing the connection", peer[0], peer[1])
            ctx._answered = True
            conn.answered(None, slot)
            return
        if res is DEFERRED:
            return
        if asyncio.iscoroutine(res):
            conn.run_handler(ctx, res)
            return
        ctx.respond(res)


class _ServerConnection(asyncio.Protocol):
    """One client connection: frames in, one request at a time (several at once only for
    :func:`pipelined` APIs), answers out in request order.

    Invariants: ``_slots`` holds a :class:`_Slot` per dispatched, not yet written request,
    in request order; a slot's answer is written only once every earlier one's is; more
    than one slot exists only while every request in progress is of a pipelined API
    (``_pipelining``)."""

    def __init__(self, server: KafkaServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.peer: tuple = ("?", 0)
        self._frames = FrameReader(max_size=server.max_frame_size)
        self._queue: collections.deque[bytes] = collections.deque()
        #: dispatched requests whose answers are not yet taken, in request order
        self._slots: collections.deque[_Slot] = collections.deque()
        self._pipelining = False    # every request in progress is of a pipelined API
        self._doomed = False        # a request failed: close once the earlier ones are answered
        self._dispatching = False   # re-entrancy guard for _run
        self._write_paused = False
        self._read_paused = False
        self._closed = False
        #: the tasks of coroutine handlers in progress -> their contexts
        self._tasks: dict[asyncio.Task, RequestContext] = {}
        #: answers not yet written (buffers, in order); None: nothing pending
        self._out: list | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the socket's descriptor when FileRegions go out by sendfile, else -1 (copy them)
        self._sockfd = -1
        #: parts not yet sent while a file region is in flight (None: nothing in flight); the
        #: head region has ``_region_sent`` of its bytes on the wire
        self._backlog: collections.deque | None = None
        self._region_sent = 0
        #: a dup of the socket's descriptor watched for writability while a region waits (-1: none)
        self._wfd = -1
        self._close_when_sent = False

    # ------------------------------------------------------------ asyncio.Protocol
    def connection_made(self, transport) -> None:
        self.transport = transport
        self.peer = transport.get_extra_info("peername") or ("?", 0)
        self.server._conns.add(self)
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # driven by hand (tests): answers are written at once
            self._loop = None
        if self.server.zero_copy and self._loop is not None and self.server.ssl_context is None \
                and transport.get_extra_info("sslcontext") is None:
            sock = transport.get_extra_info("socket")
            try:
                self._sockfd = sock.fileno() if sock is not None else -1
            except (OSError, ValueError):
                self._sockfd = -1

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            frames = self._frames.feed(data)
        except FrameError as exc:
            log.warning("closing %s:%s: %s", self.peer[0], self.peer[1], exc)
            self.close()
            return
        if frames:
            self._queue.extend(frames)
            if len(self._queue) > _MAX_QUEUED and not self._read_paused:
                self._read_paused = True
                self.transport.pause_reading()
            self._run()

    def connection_lost(self, exc) -> None:
        if exc is not None:  # the peer went away: routine, not a bug
            log.debug("connection from %s:%s lost: %r", self.peer[0], self.peer[1], exc)
        self._shut()

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._run()

    # ------------------------------------------------------------ requests
    def _run(self) -> None:
        if self._dispatching:
            return
        self._dispatching = True
        try:
            queue, slots, server = self._queue, self._slots, self.server
            while queue and not self._write_paused and self._backlog is None and not self._closed \
                    and not self._doomed:
                if slots:
                    if not self._pipelining or len(slots) >= _MAX_PIPELINED or not server._is_pipelined(queue[0]):
                        break
                else:
                    self._pipelining = server._is_pipelined(queue[0])
                slot = _Slot()
                slots.append(slot)
                server._dispatch(self, queue.popleft(), slot)
            if self._read_paused and len(queue) <= _MAX_QUEUED // 2 and not self._closed:
                self._read_paused = False
                self.transport.resume_reading()
        finally:
            self._dispatching = False

    def answered(self, out, slot: _Slot | None = None) -> None:
        """A request in progress is answered with ``out`` (a framed response: one buffer,
        or a list of buffers sent in order), or the connection must close (``None``:
        malformed input or a handler failure).  ``slot``: which request (None: the oldest).

        Answers are not written here but collected, in request order, and handed to the
        transport once per loop iteration, for every connection at once (one ``call_soon``
        for the server): the controller answers many requests in one slice of its queue,
        often several of one connection's pipelined requests, and each ``transport.write``
        on a socket is a ``send`` of its own.  Answers given before a close still go out."""
        if self._closed:
            return
        slots = self._slots
        if slot is None:
            if not slots:
                return
            slot = slots[0]
        slot.done, slot.out = True, out
        if out is None:
            self._doomed = True  # nothing more is dispatched; earlier answers still go out
        while slots and slots[0].done:
            out = slots.popleft().out
            if out is None:
                self.close()
                return
            self._pend(out)
        if self._queue or self._read_paused:  # (_run has nothing else to do)
            self._run()

    def _pend(self, out) -> None:
        pending = self._out
        if pending is None:
            loop = self._loop
            if loop is None:
                self._write(out if type(out) is list else [out])
                return
            pending = self._out = []
            server = self.server
            if not server._unflushed:
                loop.call_soon(server._flush)
            server._unflushed.append(self)
        if type(out) is list:
            pending.extend(out)
        else:
            pending.append(out)

    def flush(self) -> None:
        """Write the pending answers (one ``write`` when there is one buffer)."""
        out, self._out = self._out, None
        if out and not self._closed:
            self._write(out)

    def _write(self, bufs: list) -> None:
        if self._backlog is not None:  # a file region is in flight: everything waits behind it
            self._backlog.extend(bufs)
            return
        for b in bufs:
            if type(b) not in BUFFER_TYPES:
                self._backlog = collections.deque(bufs)
                self._region_sent = 0
                self._pump()
                return
        if len(bufs) == 1:
            self.transport.write(bufs[0])
        elif sum(map(len, bufs)) <= _JOIN_MAX_BYTES:
            self.transport.write(b"".join(bufs))  # small answers: one copy, one send
        else:
            self.transport.writelines(bufs)

    def run_handler(self, ctx: RequestContext, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks[task] = ctx
        task.add_done_callback(self._handler_done)

    def _handler_done(self, task: asyncio.Task) -> None:
        ctx = self._tasks.pop(task, None)
        if task.cancelled() or ctx is None:
            return
        exc = task.exception()
        if exc is not None:
            log.error("error serving %s:%s; closing the connection", self.peer[0], self.peer[1],
                      exc_info=(type(exc), exc, exc.__traceback__))
            ctx._answered = True
            self.answered(None, ctx._slot)
            return
        ctx.respond(task.result())

    # ------------------------------------------------------------ file regions
    def _pump(self) -> None:
        """Send ``_backlog`` in order: buffers by the transport, regions by sendfile (see the
        module doc).  Returns early, watching the socket, when it is full; the last part sent
        ends the backlog and resumes dispatching."""
        parts = self._backlog
        transport = self.transport
        if parts is None or transport is None or self._closed:
            return
        batch: list = []
        while parts:
            head = parts[0]
            if type(head) in BUFFER_TYPES:
                batch.append(parts.popleft())
                continue
            if self._sockfd < 0 or not isinstance(head, FileRegion):
                try:
                    batch.append(head.tobytes() if isinstance(head, FileRegion) else bytes(head))
                except (RegionGoneError, OSError) as exc:
                    self._abort_send(batch, f"cannot read the answer's records: {exc}")
                    return
                parts.popleft()
                continue
            if batch:
                self._write_buffers(batch)
                batch = []
            if transport.get_write_buffer_size():
                self._wait_writable()  # the bytes before the region must be on the wire first
                return
            sent = self._send_region(head)
            if sent is None:
                return  # aborted, fell back to a copy (the region was replaced), or waiting
            parts.popleft()
            self._region_sent = 0
        if batch:
            self._write_buffers(batch)
        self._backlog = None
        self._stop_waiting()
        if self._close_when_sent:
            self.close()
            return
        self._run()

    def _send_region(self, region: FileRegion) -> int | None:
        """sendfile the rest of ``region``; its length when all of it is sent, None otherwise
        (socket full: waiting for it; connection aborted; or region replaced by its copy)."""
        while self._region_sent < region.length:
            if not region.intact():
                self._abort_send([], f"{region!r} was truncated under a pending Fetch answer")
                return None
            done = self._region_sent
            try:
                n = os.sendfile(self._sockfd, region.fd, region.position + done, region.length - done)
            except BlockingIOError:
                self._wait_writable()
                return None
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno in _NO_SENDFILE and done == 0:
                    # this pair cannot sendfile (an unusual socket or file): copy, from now on
                    log.info("sendfile to %s:%s is not possible (%s); copying file regions", self.peer[0],
                             self.peer[1], exc)
                    self._sockfd = -1
                    self._pump()
                    return None
                self._abort_send([], f"sendfile failed: {exc}")
                return None
            if n == 0:  # the file ends before the region does: truncated under us
                self._abort_send([], f"{region!r}: the file ended during sendfile")
                return None
            self._region_sent = done + n
        return region.length

    def _write_buffers(self, bufs: list) -> None:
        if len(bufs) == 1:
            self.transport.write(bufs[0])
        elif sum(map(len, bufs)) <= _JOIN_MAX_BYTES:
            self.transport.write(b"".join(bufs))
        else:
            self.transport.writelines(bufs)

    def _wait_writable(self) -> None:
        """Call :meth:`_on_writable` when the socket can take more (level-triggered, on a
        ``dup`` of its descriptor: the loops refuse a writer on a transport's own)."""
        if self._wfd >= 0 or self._loop is None:
            return
        self._wfd = os.dup(self._sockfd)
        self._loop.add_writer(self._wfd, self._on_writable)

    def _on_writable(self) -> None:
        if self._closed or self.transport is None:
            self._stop_waiting()
            return
        if self.transport.get_write_buffer_size():
            return  # the transport writes its own bytes first (it is woken by the same event)
        self._pump()

    def _stop_waiting(self) -> None:
        wfd, self._wfd = self._wfd, -1
        if wfd >= 0:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_writer(wfd)
            os.close(wfd)

    def _abort_send(self, batch: list, why: str) -> None:
        """Part of a frame may be on the wire and the rest cannot follow: drop the connection
        (the client reconnects and fetches again; it never reads a corrupt frame)."""
        log.warning("closing %s:%s mid-answer: %s", self.peer[0], self.peer[1], why)
        self._backlog = None
        self._stop_waiting()
        if self.transport is not None:
            self.transport.abort()
        self._shut()

    def close(self, force: bool = False) -> None:
        """Close after the answers already given are written; ``force``: at once, even in the
        middle of a file region (server shutdown)."""
        if self._backlog is not None and not force and not self._closed:
            # a region is in flight: earlier answers still go out, then the close
            self._close_when_sent = True
            self._doomed = True
            if self._out:
                self.flush()
            if not self._read_paused and self.transport is not None:
                self._read_paused = True
                self.transport.pause_reading()
            return
        self._backlog = None
        self._stop_waiting()
        if self.transport is not None:
            if self._out and not self._closed:
                self.flush()  # answers given before the close still go out first
            self.transport.close()
        self._shut()

    def _shut(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._backlog = None
        self._stop_waiting()
        self._queue.clear()
        self._slots.clear()
        self.server._conns.discard(self)
        tasks, self._tasks = self._tasks, {}
        for task in tasks:
            task.cancel()
