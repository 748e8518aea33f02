"""A client connection speaking Kafka's protocol, with pipelining and timeouts.

Requests get increasing correlation ids; responses come back in request order
(Kafka's guarantee per connection), and each is matched to its waiter by
correlation id.  A response for an unknown id, a broken frame or a closed
socket fails every outstanding request with :class:`ConnectionClosed`; the
connection is then unusable and the caller reconnects (the Raft driver does,
after ``controller.quorum.retry.backoff.ms``).
"""
from __future__ import annotations

import asyncio
import itertools
import struct

from kraft_node.protocol.framing import MAX_FRAME_SIZE, decode_response, encode_request
from kraft_storage.messages._runtime import MessageError

_SIZE = struct.Struct(">i")
_HEADER_CORR = struct.Struct(">i")


class ConnectionClosed(ConnectionError):
    """The connection failed or was closed while requests were outstanding."""


class RequestTimeout(TimeoutError):
    """No response within the request timeout."""


class KafkaConnection:
    """One TCP connection to a Kafka-protocol server."""

    def __init__(self, host: str, port: int, *, client_id: str = "kraft", max_frame_size: int = MAX_FRAME_SIZE):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.max_frame_size = max_frame_size
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, tuple[asyncio.Future, int, int]] = {}
        self._corr = itertools.count(1)
        self._read_task: asyncio.Task | None = None
        self._error: BaseException | None = None

    @classmethod
    async def open(cls, host: str, port: int, *, timeout: float = 10.0, **kw) -> "KafkaConnection":
        c = cls(host, port, **kw)
        await c.connect(timeout)
        return c

    @property
    def connected(self) -> bool:
        return self._writer is not None and self._error is None and not self._writer.is_closing()

    async def connect(self, timeout: float = 10.0) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), timeout)
        self._read_task = asyncio.create_task(self._read_loop())

    async def request(self, body, version: int, timeout: float = 30.0):
        """Send ``body`` at ``version``; return the decoded response body."""
        if not self.connected:
            raise ConnectionClosed(f"not connected to {self.host}:{self.port}"
                                   + (f" ({self._error})" if self._error else ""))
        corr = next(self._corr) & 0x7FFFFFFF
        fut = asyncio.get_running_loop().create_future()
        self._pending[corr] = (fut, body.API_KEY, version)
        self._writer.write(encode_request(body, version, corr, self.client_id))
        try:
            await self._writer.drain()
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            raise RequestTimeout(f"{type(body).__name__} to {self.host}:{self.port} timed out after "
                                 f"{timeout:.3f}s") from None
        except ConnectionError as exc:
            self._fail(exc)
            raise ConnectionClosed(str(exc)) from None
        finally:
            self._pending.pop(corr, None)

    async def _read_loop(self) -> None:
        try:
            while True:
                head = await self._reader.readexactly(4)
                size, = _SIZE.unpack(head)
                if size < 4 or size > self.max_frame_size:
                    raise MessageError(f"invalid response size {size}")
                payload = await self._reader.readexactly(size)
                corr, = _HEADER_CORR.unpack_from(payload, 0)
                entry = self._pending.get(corr)
                if entry is None:
                    # a late answer to a request that timed out: skip it
                    continue
                fut, api_key, version = entry
                if not fut.done():
                    try:
                        fut.set_result(decode_response(payload, api_key, version)[1])
                    except MessageError as exc:
                        fut.set_exception(exc)
        except asyncio.CancelledError:
            self._fail(ConnectionClosed("connection closed"))
        except (asyncio.IncompleteReadError, ConnectionError) as exc:
            self._fail(ConnectionClosed(f"connection to {self.host}:{self.port} lost: {exc}"))
        except MessageError as exc:
            self._fail(ConnectionClosed(f"bad response from {self.host}:{self.port}: {exc}"))

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        for fut, _k, _v in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(ConnectionClosed(str(exc)))
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass
        self._fail(ConnectionClosed("closed by the client"))
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
