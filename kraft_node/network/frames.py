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

:class:`FileRegion` is the other direction: a part of an answer frame that is a range of a
file (a Fetch answer's records), sent by the server with ``sendfile``.
"""
from __future__ import annotations

import os
import struct
from collections.abc import Callable

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
        self._parts: list[bytes | bytearray | memoryview] | None = None
        self._missing = 0
        self.min_size = min_size
        self.max_size = max_size

    @property
    def buffered(self) -> int:
        """Bytes of an incomplete frame held back."""
        if self._parts is not None:
            return sum(len(p) for p in self._parts)
        return len(self._buf)

    def feed(self, data: bytes | bytearray) -> list[bytes]:
        """Take the next chunk; return the payloads it completes (possibly none).
        Raises :class:`FrameError` on a size below ``min_size`` or above ``max_size``."""
        out: list[bytes] = []
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
            # a chunk (bytes) is sliced directly: one copy, no view object (4-8% of an active
            # controller's CPU under heartbeats, session 18); the bytearray buffer through a view
            out.append(data[pos + 4:end] if type(data) is bytes else bytes(memoryview(data)[pos + 4:end]))
            pos = end
        if data is buf:
            del buf[:pos]
        elif pos < n:
            buf += memoryview(data)[pos:]
        return out


class FileRegion:
    """A byte range of an open file that goes into a response frame without being copied
    through Python: the server sends it with ``sendfile`` from ``fd`` straight to the socket
    (Kafka's ``FileRecords.writeTo``: the records of a Fetch answer).

    The frame's size prefix is computed before any byte is sent, so ``length`` is final:
    if the file can no longer give exactly these bytes (``intact()`` is False -- the log was
    truncated or the segment replaced under the pending answer -- or it ends early), the
    connection is closed mid-frame instead (Kafka closes it on a FileRecords truncated
    during a write); a client never reads a corrupt frame, it reconnects and fetches again.

    ``owner`` is kept alive as long as the region (the storage object that holds ``fd``
    open).  ``len()`` is ``length``, so the wire codec writes the records' length prefix and
    spills the region as a part of its own (``framing.encode_response(chunks=True)``)."""

    __slots__ = ("fd", "position", "length", "owner", "_intact")

    def __init__(self, fd: int, position: int, length: int, owner: object = None,
                 intact: Callable[[], bool] | None = None) -> None:
        if fd < 0 or position < 0 or length < 0:
            raise ValueError(f"invalid file region fd={fd} position={position} length={length}")
        self.fd = fd
        self.position = position
        self.length = length
        self.owner = owner
        self._intact = intact

    def __len__(self) -> int:
        return self.length

    def intact(self) -> bool:
        """Whether the file still holds the bytes the region was made for."""
        return self._intact is None or bool(self._intact())

    def tobytes(self) -> bytes:
        """The bytes, by ``pread`` (TLS connections and loops without sendfile); raises
        :class:`RegionGoneError` when the file no longer holds them."""
        data = os.pread(self.fd, self.length, self.position) if self.length else b""
        if len(data) != self.length or not self.intact():
            raise RegionGoneError(f"file region [{self.position}, {self.position + self.length}) of fd {self.fd} "
                                  f"changed before it was sent")
        return data

    def __repr__(self) -> str:
        return f"FileRegion(fd={self.fd}, position={self.position}, length={self.length})"


class RegionGoneError(Exception):
    """A :class:`FileRegion`'s bytes changed (truncation) before or while it was sent."""


#: the parts of a framed answer that are buffers (anything else in the list is a FileRegion)
BUFFER_TYPES = (bytes, bytearray, memoryview)
