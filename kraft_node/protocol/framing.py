"""Size-prefixed Kafka request/response frames.

    frame    = int32 size + payload            (size counts the payload only)
    request  = RequestHeader (v1 or v2) + body
    response = ResponseHeader (v0 or v1) + body

A request header starts with int16 apiKey + int16 apiVersion, which tell the
header version (see ``api_keys.request_header_version``) and the body class.
A response carries only the correlation id, so its decoder must be told which
API and version the request had.
"""
from __future__ import annotations

import logging
import struct
from typing import Any

from kraft_node.protocol.api_keys import (
    API_INFO,
    ApiKeys,
    api_info,
    request_header_version,
    response_header_version,
)
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest as _BrokerHeartbeatRequest
from kraft_node.protocol.headers import RequestHeader, ResponseHeader
from kraft_storage.messages.runtime import Message, MessageError, Writer

__all__ = ["MAX_FRAME_SIZE", "ResponseFrames", "encode_request", "decode_request", "decode_request_header",
           "encode_response", "decode_response", "split_frame", "UnsupportedApiError"]

log = logging.getLogger(__name__)

#: Largest payload accepted (Kafka's default socket.request.max.bytes).
MAX_FRAME_SIZE = 100 * 1024 * 1024

_SIZE = struct.Struct(">i")
#: A response's correlation id: the first field of every response header version, right
#: after the frame's size.
_CORRELATION_AT = 4
_KEY_VERSION = struct.Struct(">hh")
_new_object = object.__new__


class UnsupportedApiError(MessageError):
    """A request for an api key or version kraft has no codec for (``header`` is set)."""

    def __init__(self, reason, header=None):
        super().__init__(reason)
        self.header = header


def split_frame(data, max_size: int = MAX_FRAME_SIZE):
    """``(payload, rest)`` if ``data`` starts with a whole frame, else ``(None, data)``."""
    if len(data) < 4:
        return None, data
    size, = _SIZE.unpack_from(data, 0)
    if size < 0 or size > max_size:
        raise MessageError(f"invalid frame size {size}", 0)
    if len(data) < 4 + size:
        return None, data
    return bytes(data[4:4 + size]), data[4 + size:]


def encode_request(body: Message, version: int, correlation_id: int, client_id: str | None = "") -> bytes:
    """The framed request: header (version chosen from the API version) + body."""
    api_key = body.API_KEY
    info = api_info(api_key)
    if type(body) is not info.request:
        raise MessageError(f"{type(body).__name__} is not a request class")
    hv = request_header_version(api_key, version)
    header = RequestHeader(request_api_key=api_key, request_api_version=version,
                           correlation_id=correlation_id, client_id=client_id)
    return _framed(header, hv, body, version)


def _framed(header: Message, header_version: int, body: Message, version: int, chunks: bool = False):
    """size + header + body written into one buffer: a Fetch answer carries up to
    fetch.max.bytes of records, and joining header, body and size prefix as separate
    ``bytes`` would copy them three more times.

    With ``chunks`` the result is a list of buffers to send in order (for
    ``transport.writelines``): values of at least ``SPILL_MIN_BYTES`` (a Fetch
    answer's records) are not copied into the frame at all."""
    body._check_version(version)
    w = Writer()
    if chunks:
        w.spill = []
    w.out += b"\0\0\0\0"
    header._write(w, header_version)
    body._write(w, version)
    out = w.out
    if not w.spill:
        _SIZE.pack_into(out, 0, len(out) - 4)
        return [out] if chunks else out
    _SIZE.pack_into(out, 0, len(out) - 4 + sum(len(v) for _, v in w.spill))
    parts, pos = [], 0
    view = memoryview(out)
    for at, value in w.spill:
        parts.append(view[pos:at])
        parts.append(value)
        pos = at
    parts.append(view[pos:])
    return parts


def decode_request_header(payload) -> tuple[RequestHeader, int]:
    """``(header, body_position)``; raises UnsupportedApiError for unknown api keys."""
    if len(payload) < 4:
        raise MessageError("request shorter than its api key and version", 0)
    api_key, api_version = _KEY_VERSION.unpack_from(payload, 0)
    info = API_INFO.get(api_key)
    if info is None:
        raise UnsupportedApiError(f"unsupported api key {api_key}")
    hv = 2 if info.is_flexible(api_version) or (api_version > info.highest and info.first_flexible is not None) else 1
    return RequestHeader.read_prefix(payload, 0, hv)


#: (api key << 16 | version) -> (request header version, request class) for supported pairs:
#: the per-request lookups of :func:`decode_request` done once per pair (filled lazily)
_REQUEST_CODECS: dict[int, tuple[int, type, Any]] = {}

#: BrokerHeartbeat v0-v1's body up to its tagged fields: int32 BrokerId, int64 BrokerEpoch,
#: int64 CurrentMetadataOffset, bool WantFence, bool WantShutDown (22 bytes); then a uvarint
#: tag count (0 unless OfflineLogDirs, tag 0 in v1, or unknown tags are sent).
_HEARTBEAT_FIXED = struct.Struct(">iqq??")
_HEARTBEAT_FIXED_SIZE = _HEARTBEAT_FIXED.size


def _lean_broker_heartbeat(payload, pos: int):
    """The controller's most frequent request, decoded with one ``unpack_from`` instead of the
    generated codec's reader calls (2.9 us -> ~0.5 us of the request's CPU).  Only the common
    shape: no tagged fields and no trailing bytes (the body ends with a zero tag count at the
    payload's last byte); anything else returns None and takes the generated codec, so errors,
    tagged fields and the trailing-bytes log are exactly the general path's.  The object is the
    generated class with the same field values (``want_*``: any non-zero byte is True, as the
    codec's ``Reader.boolean`` reads it)."""
    end = pos + _HEARTBEAT_FIXED_SIZE
    if len(payload) != end + 1 or payload[end] != 0:
        return None
    o = _new_object(_BrokerHeartbeatRequest)
    o.broker_id, o.broker_epoch, o.current_metadata_offset, o.want_fence, o.want_shut_down = \
        _HEARTBEAT_FIXED.unpack_from(payload, pos)
    o.offline_log_dirs = []
    o.unknown_tagged_fields = ()
    return o


#: (api key << 16 | version) -> ``lean(payload, body position) -> body or None`` (None: use the
#: generated codec).  Only fixed-layout hot requests; each is tested against the codec.
_LEAN_DECODERS = {
    (int(ApiKeys.BROKER_HEARTBEAT) << 16) | v: _lean_broker_heartbeat
    for v in range(_BrokerHeartbeatRequest.LOWEST_VERSION, _BrokerHeartbeatRequest.HIGHEST_VERSION + 1)
}


def decode_request(payload):
    """``(RequestHeader, request body)`` from a payload (frame without its size).

    Bytes after the body's last field are ignored, as Kafka's ``RequestContext.parseRequest``
    ignores them (it reads the fields it knows and leaves the buffer's remainder): librdkafka
    2.16 sends its all-topics Metadata v12/v13 with 3 trailing bytes, and a server that refused
    them would close every such client's connection (issue 24).  They are logged at DEBUG.
    Responses (:func:`decode_response`) stay strict: kraft's own client reads them."""
    if len(payload) >= 4:
        api_key, api_version = _KEY_VERSION.unpack_from(payload, 0)
        codec = _REQUEST_CODECS.get((api_key << 16) | (api_version & 0xFFFF))
        if codec is not None:  # a supported pair seen before: no table walks
            hv, request_cls, lean = codec
            header, pos = RequestHeader.read_prefix(payload, 0, hv)
            if lean is not None:
                body = lean(payload, pos)
                if body is not None:
                    return header, body
            body, end = request_cls.read_prefix(payload, pos, api_version)
            if end != len(payload):
                _log_trailing(payload, end, header)
            return header, body
    header, pos = decode_request_header(payload)
    info = API_INFO[header.request_api_key]
    if not info.supports(header.request_api_version):
        raise UnsupportedApiError(
            f"unsupported {info.name} version {header.request_api_version} "
            f"(supported {info.lowest}-{info.highest})", header)
    version = header.request_api_version
    body, end = info.request.read_prefix(payload, pos, version)
    pair = (int(header.request_api_key) << 16) | (version & 0xFFFF)
    _REQUEST_CODECS[pair] = (2 if info.is_flexible(version) else 1, info.request, _LEAN_DECODERS.get(pair))
    if end != len(payload):
        _log_trailing(payload, end, header)
    return header, body


def _log_trailing(payload, end: int, header) -> None:
    log.debug("ignoring %d trailing bytes after %s v%d (correlation id %d)", len(payload) - end,
              API_INFO[header.request_api_key].request.NAME, header.request_api_version, header.correlation_id)


def encode_response(body: Message, api_version: int, correlation_id: int, chunks: bool = False):
    """The framed response (one buffer; with ``chunks``, a list of buffers, large
    records left uncopied -- see :func:`_framed`)."""
    api_key = body.API_KEY
    info = api_info(api_key)
    if type(body) is not info.response:
        raise MessageError(f"{type(body).__name__} is not a response class")
    hv = response_header_version(api_key, api_version)
    return _framed(ResponseHeader(correlation_id=correlation_id), hv, body, api_version, chunks)


def decode_response(payload, api_key: int, api_version: int):
    """``(ResponseHeader, response body)`` of the given API and version."""
    info = api_info(api_key)
    hv = response_header_version(api_key, api_version)
    header, pos = ResponseHeader.read_prefix(payload, 0, hv)
    body, end = info.response.read_prefix(payload, pos, api_version)
    if end != len(payload):
        raise MessageError(f"{len(payload) - end} unexpected trailing bytes after {info.response.NAME}", end)
    return header, body


class ResponseFrames:
    """Framed answers that differ only in their correlation id, encoded once.

    Why: the controller answers a steady-state BrokerHeartbeat thousands of times a second
    with one of a handful of bodies (caught up / fenced / shutting down, an error code);
    building the message and running the codec each time was ~10% of the request's CPU.
    Layout kept here: ``int32 size + int32 correlation id + (tagged fields) + body`` -- the
    correlation id sits at bytes 4..8 in every response header version, so a cached frame
    is copied and patched there.  ``key`` must determine the body *and* the API version;
    at most ``max_entries`` frames are kept (the table is dropped when full: the keys are
    few in practice, and a bad caller costs memory at most once)."""

    __slots__ = ("_frames", "max_entries")

    def __init__(self, max_entries: int = 256) -> None:
        self._frames: dict = {}
        self.max_entries = max_entries

    def get(self, key, correlation_id: int) -> bytearray | None:
        """The framed response for ``key`` if it was built before, else None (then call
        :meth:`frame`): the hot path needs no ``build`` closure."""
        template = self._frames.get(key)
        if template is None:
            return None
        out = bytearray(template)
        _SIZE.pack_into(out, _CORRELATION_AT, correlation_id)
        return out

    def frame(self, key, api_version: int, correlation_id: int, build) -> bytearray:
        """The framed response for ``key``: ``build()`` makes its body on the first use."""
        template = self._frames.get(key)
        if template is None:
            template = bytes(encode_response(build(), api_version, 0))
            if len(self._frames) >= self.max_entries:
                self._frames.clear()
            self._frames[key] = template
        out = bytearray(template)
        _SIZE.pack_into(out, _CORRELATION_AT, correlation_id)
        return out
