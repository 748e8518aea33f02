"""Cutting a TCP byte stream into Kafka's size-prefixed frames.

    frame = int32 size (big-endian, counts the payload only) + payload

TCP delivers arbitrary chunks: one ``recv`` may hold half a frame, or several.
:class:`FrameReader` keeps the incomplete tail between chunks and hands back
whole payloads.  It is shared by the server and the client protocols, which
call :meth:`FrameReader.feed` from ``data_received`` (no coroutine, no
StreamReader in between: each hop of a Raft commit pays for every layer here).

Invariant: ``_buf`` holds at most one incomplete frame (everything before it
was handed out), so a stream of small frames never copies more than a frame's
worth of bytes per chunk.
"""
from __future__ import annotations

import struct

from kraft_storage.messages._runtime import MessageError

_SIZE = struct.Struct(">i")


class FrameError(MessageError):
    """A frame's size field is out of range: the stream cannot be resynchronised."""


class FrameReader:
    """Accumulates stream chunks and returns the complete frames' payloads, in order."""

    __slots__ = ("_buf", "min_size", "max_size")

    def __init__(self, *, min_size: int = 0, max_size: int):
        self._buf = bytearray()
        self.min_size = min_size
        self.max_size = max_size

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next chunk; return the payloads it completes (possibly none).
        Raises :class:`FrameError` on a size below ``min_size`` or above ``max_size``."""
        buf = self._buf
        if buf:
            buf += data
            data = buf
        out = []
        pos = 0
        n = len(data)
        while n - pos >= 4:
            size, = _SIZE.unpack_from(data, pos)
            if size < self.min_size or size > self.max_size:
                raise FrameError(f"invalid frame size {size} (allowed {self.min_size}..{self.max_size})")
            end = pos + 4 + size
            if end > n:
                break
            out.append(bytes(data[pos + 4:end]))
            pos = end
        if data is buf:
            if pos:
                del buf[:pos]
        elif pos < n:
            buf += data[pos:]
        return out
