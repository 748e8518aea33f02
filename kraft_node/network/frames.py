"""Cutting a TCP byte stream into Kafka's size-prefixed frames.

    frame = int32 size (big-endian, counts the payload only) + payload

TCP delivers arbitrary chunks: one ``recv`` may hold half a frame, or several.
:class:`FrameReader` keeps the incomplete tail between chunks and hands back
whole payloads.  It is shared by the server and the client protocols, which
call :meth:`FrameReader.feed` from ``data_received`` (no coroutine, no
StreamReader in between: each hop of a Raft commit pays for every layer here).

Copies.  A small frame split across chunks waits in ``_buf`` (a bytearray
holding at most one incomplete frame).  A large one -- a Fetch answer of up to
fetch.max.bytes -- arrives as dozens of chunks; those are kept as a list and
joined once when the last arrives, so each byte of it is copied once here
(it used to be three times: into ``_buf``, a slice, ``bytes()``), which was a
quarter of a follower's CPU at saturation.

Invariant: at most one incomplete frame is held, either in ``_buf`` or, when
``_parts`` is not None, as ``_parts`` (its payload bytes so far) with
``_missing`` payload bytes still to come.
"""
from __future__ import annotations

import struct

from kraft_storage.messages.runtime import MessageError

_SIZE = struct.Struct(">i")


class FrameError(MessageError):
    """A frame's size field is out of range: the stream cannot be resynchronised."""


#: An incomplete frame at least this large is collected as a list of chunks.
LARGE_FRAME_BYTES = 32 * 1024


class FrameReader:
    """Accumulates stream chunks and returns the complete frames' payloads, in order."""

    __slots__ = ("_buf", "_parts", "_missing", "min_size", "max_size", "large")

    def __init__(self, *, min_size: int = 0, max_size: int, large: int = LARGE_FRAME_BYTES):
        self._buf = bytearray()
        self.large = large
        self._parts: list | None = None
        self._missing = 0
        self.min_size = min_size
        self.max_size = max_size

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        if self._parts is not None:
            return sum(len(p) for p in self._parts)
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next chunk; return the payloads it completes (possibly none).
        Raises :class:`FrameError` on a size below ``min_size`` or above ``max_size``."""
        out = []
        pos = 0
        parts = self._parts
        if parts is not None:  # the rest of a large frame
            missing = self._missing
            if len(data) < missing:
                parts.append(data)
                self._missing = missing - len(data)
                return out
            parts.append(memoryview(data)[:missing])
            out.append(b"".join(parts))
            self._parts = None
            pos = missing
        buf = self._buf
        if buf:
            buf += data
            data = buf
        n = len(data)
        while n - pos >= 4:
            size, = _SIZE.unpack_from(data, pos)
            if size < self.min_size or size > self.max_size:
                raise FrameError(f"invalid frame size {size} (allowed {self.min_size}..{self.max_size})")
            end = pos + 4 + size
            if end > n:
                if size >= self.large:
                    # (``_buf`` changes later: copy out of it; a chunk is immutable: a view)
                    self._parts = [bytes(data[pos + 4:]) if data is buf else memoryview(data)[pos + 4:]]
                    self._missing = end - n
                    pos = n
                break
            out.append(bytes(memoryview(data)[pos + 4:end]))
            pos = end
        if data is buf:
            del buf[:pos]
        elif pos < n:
            buf += memoryview(data)[pos:]
        return out
