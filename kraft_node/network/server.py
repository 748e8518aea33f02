"""An asyncio server for Kafka requests.

Per connection, requests are handled one at a time and answered in order, as
Kafka's network processor does (it mutes a channel until its response is
sent).  Handlers are ``async (RequestContext, request) -> response`` looked up
by API key; ApiVersions is answered here from the ApiKeys table unless a
handler overrides it.

Bad input never takes the server down: a frame with an invalid size, an
unknown API or an undecodable body is logged with the peer's address and
the connection is closed (Kafka does the same), except for an ApiVersions
request of a version we do not know, which gets the UNSUPPORTED_VERSION
answer at version 0 (KIP-511) so the client can retry with one we do.
"""
from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass
from typing import Awaitable, Callable

from kraft_node.protocol.api_keys import ApiKeys, answer_api_versions
from kraft_node.protocol.framing import (
    MAX_FRAME_SIZE, UnsupportedApiError, decode_request, encode_response)
from kraft_storage.messages._runtime import MessageError

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""
    header: object          # RequestHeader
    api_version: int
    peer: tuple             # (host, port) of the client
    listener: str           # listener name (e.g. "CONTROLLER")


Handler = Callable[[RequestContext, object], Awaitable[object]]


class KafkaServer:
    """Serve Kafka requests on ``host:port`` with the given handlers."""

    def __init__(self, host: str, port: int, handlers: dict[int, Handler], *, listener: str = "PLAINTEXT",
                 listener_type: str | None = None, max_frame_size: int = MAX_FRAME_SIZE):
        self.host = host
        self.port = port
        self.handlers = dict(handlers)
        self.listener = listener
        #: "broker" or "controller": which APIs ApiVersions advertises.
        self.listener_type = listener_type
        self.max_frame_size = max_frame_size
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task] = set()

    async def start(self) -> int:
        """Listen; returns the bound port (useful with port 0)."""
        self._server = await asyncio.start_server(self._serve, self.host, self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._conns):
            t.cancel()
        for t in list(self._conns):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._conns.add(task)
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            while True:
                try:
                    head = await reader.readexactly(4)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                size, = _SIZE.unpack(head)
                if size < 0 or size > self.max_frame_size:
                    log.warning("closing %s:%s: invalid request size %d (max %d)", peer[0], peer[1], size,
                                self.max_frame_size)
                    return
                try:
                    payload = await reader.readexactly(size)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                out = await self._handle(payload, peer)
                if out is None:
                    return
                writer.write(out)
                await writer.drain()
        except asyncio.CancelledError:
            pass
        except ConnectionError as exc:  # the peer went away while we answered: routine, not a bug
            log.debug("connection from %s:%s lost: %r", peer[0], peer[1], exc)
        except Exception:  # a handler bug must not kill the server
            log.exception("error serving %s:%s; closing the connection", peer[0], peer[1])
        finally:
            self._conns.discard(task)
            writer.close()

    async def _handle(self, payload: bytes, peer) -> bytes | None:
        try:
            header, body = decode_request(payload)
        except UnsupportedApiError as exc:
            h = exc.header
            if h is not None and h.request_api_key == ApiKeys.API_VERSIONS:
                resp, v = answer_api_versions(None, h.request_api_version, self.listener_type)
                return encode_response(resp, v, h.correlation_id)
            log.warning("closing %s:%s: %s", peer[0], peer[1], exc)
            return None
        except MessageError as exc:
            log.warning("closing %s:%s: malformed request: %s", peer[0], peer[1], exc)
            return None
        key, version = header.request_api_key, header.request_api_version
        ctx = RequestContext(header, version, peer, self.listener)
        handler = self.handlers.get(key)
        if handler is None:
            if key == ApiKeys.API_VERSIONS:
                resp, v = answer_api_versions(body, version, self.listener_type)
                return encode_response(resp, v, header.correlation_id)
            log.warning("closing %s:%s: no handler for api key %d on listener %s", peer[0], peer[1], key,
                        self.listener)
            return None
        resp = await handler(ctx, body)
        return encode_response(resp, version, header.correlation_id)
