"""Errors of the segmented log (all are :class:`KraftStorageError`)."""
from __future__ import annotations

from kraft_storage.errors import KraftStorageError


class OffsetOutOfRange(KraftStorageError):
    """A read asked for an offset outside ``[start_offset, end_offset]``.

    ``end_offset`` itself is a valid fetch offset (it returns no data), as in
    Kafka, so the valid range is closed on both ends.
    """

    def __init__(self, offset: int, start_offset: int, end_offset: int, what: str = "fetch offset"):
        self.offset = offset
        self.start_offset = start_offset
        self.end_offset = end_offset
        super().__init__(f"{what} {offset} is out of range: the log holds offsets "
                         f"[{start_offset}, {end_offset}) and accepts fetches from "
                         f"{start_offset} to {end_offset}")


class OutOfOrderAppend(KraftStorageError):
    """A follower append whose offsets do not continue the log contiguously.

    ``expected`` is the offset the batch should have started at, ``got`` the
    one it has, ``position`` the batch's byte position in the appended buffer.
    """

    def __init__(self, expected: int, got: int, position: int = 0, reason: str = ""):
        self.expected = expected
        self.got = got
        self.position = position
        super().__init__(reason or f"out-of-order append: the batch at position {position} of the "
                         f"appended buffer starts at offset {got}, expected {expected}")


class NotALogDirectory(KraftStorageError):
    """The path is not a Kafka partition log directory (or holds foreign files where segments belong)."""

    def __init__(self, path, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{path}: not a log directory: {reason}")


class LogClosed(KraftStorageError):
    """The log was closed (or its directory deleted) and cannot serve this call."""
