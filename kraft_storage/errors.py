"""Errors raised by kraft_storage.

Every error about bad bytes says *what* is wrong and *where* (file, byte
position, batch base offset), so an operator can find the damage with a hex
editor or ``kraft-dump-log``.
"""
from __future__ import annotations


class KraftStorageError(Exception):
    """Base class of every error raised by kraft_storage."""


class CorruptRecordError(KraftStorageError):
    """A record batch, or a record inside one, is malformed.

    Attributes:
        position: byte position of the batch in the buffer or file (or -1).
        base_offset: the batch's base offset if its header was readable, else None.
        reason: short machine-friendly description of the problem.
        source: file name or other description of the buffer, if known.
    """

    def __init__(self, reason: str, position: int = -1, base_offset: int | None = None,
                 source: str | None = None):
        self.reason = reason
        self.position = position
        self.base_offset = base_offset
        self.source = source
        where = []
        if source:
            where.append(str(source))
        if position >= 0:
            where.append(f"position {position}")
        if base_offset is not None:
            where.append(f"batch base offset {base_offset}")
        msg = reason if not where else f"{reason} ({', '.join(where)})"
        super().__init__(msg)

    def with_source(self, source: str) -> "CorruptRecordError":
        """Return a copy that names the file the buffer came from."""
        return CorruptRecordError(self.reason, self.position, self.base_offset, source)


class UnsupportedCompression(KraftStorageError):
    """The batch uses a codec whose optional library is not installed (or an unknown codec id)."""


class SnapshotNotFoundError(KraftStorageError, LookupError):
    """A timeline read or revert named an epoch that has no live snapshot
    (``kraft_storage.timeline``; raised by both ``_timeline`` twins)."""


class SnapshotEpochError(KraftStorageError, ValueError):
    """A timeline snapshot was requested at an epoch that would break time's order
    (``kraft_storage.timeline``; raised by both ``_timeline`` twins)."""


class OutOfOrderAppend(KraftStorageError):
    """A follower append whose offsets do not continue the log contiguously (raised by
    both ``_logappend`` twins; re-exported by ``kraft_storage.log.errors``).

    ``expected`` is the offset the batch should have started at, ``got`` the
    one it has, ``position`` the batch's byte position in the appended buffer.
    """

    def __init__(self, expected: int, got: int, position: int = 0, reason: str = ""):
        self.expected = expected
        self.got = got
        self.position = position
        super().__init__(reason or f"out-of-order append: the batch at position {position} of the "
                         f"appended buffer starts at offset {got}, expected {expected}")


class DiskFullError(KraftStorageError):
    """ENOSPC (or EDQUOT) while writing ``path``: the device is full (raised by the log
    and by :mod:`kraft_storage.fileio`; re-exported by ``kraft_storage.log.errors``).

    Raised instead of the bare ``OSError`` so that a caller can fail-stop with a
    one-line message (no traceback) that names the file; ``__cause__`` keeps the
    original error."""

    def __init__(self, path: object, what: str, errno_: int | None = None):
        self.path = str(path)
        self.what = what
        self.errno = errno_
        super().__init__(f"{path}: No space left on device ({what})")
