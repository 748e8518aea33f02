"""Raw snapshot files: bytes in, bytes out, with crash-safe publication.

:class:`RawSnapshotWriter` is what both the records writer and a follower
receiving FetchSnapshot responses write through: it appends opaque bytes (whole
batches from the records writer, or arbitrary slices -- possibly ending inside
a batch -- from a leader) to a private ``.part`` file.  ``freeze()`` makes the
snapshot exist, durably and atomically:

1. fsync the ``.part`` file (data and size on disk),
2. rename it to ``<id>.checkpoint`` (atomic within a directory),
3. fsync the directory (the rename survives a crash).

Until step 2 no reader can see the snapshot; after step 3 it is complete on
disk.  Closing a writer that was not frozen aborts: the ``.part`` is removed.
While appending, every 8 MiB written is handed to the device at once
(``sync_file_range`` WRITE on Linux, no wait), so a big snapshot is mostly on
disk by the time step 1 runs; durability still comes from step 1 alone.

:class:`RawSnapshotReader` serves a frozen file: its size and any byte slice
(``read(position, max_bytes)``), exactly what a leader puts in a
FetchSnapshot response -- the slice need not end on a batch boundary; the
follower just appends it.  The file is memory-mapped, so slices and the
records reader share one zero-copy view, and an open reader keeps working
after the file is deleted (POSIX keeps the inode alive).
"""
from __future__ import annotations

import mmap
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

from kraft_storage.fileio import StrPath, fsync_dir
from kraft_storage.snapshot.errors import SnapshotError, SnapshotPositionOutOfRange
from kraft_storage.snapshot.files import SnapshotId, create_temp_path, parse_snapshot_path, snapshot_path

__all__ = ["RawSnapshotWriter", "RawSnapshotReader"]

_MAX_WRITE = 1 << 30  # one write(2) call moves at most this much
_WRITEBACK_CHUNK = 8 << 20  # start the device writing every this many bytes


def _load_sync_file_range() -> Callable[[int, int, int, int], int] | None:
    """Linux ``sync_file_range(2)`` through ctypes, or None elsewhere.

    With SYNC_FILE_RANGE_WRITE it starts writeback of a byte range and returns
    at once, so the device writes the snapshot while the encoder produces the
    rest and ``freeze()``'s fsync only waits for the tail.  It gives no
    durability by itself (no metadata, no flush of the device cache): the
    fsync in ``freeze()`` still does that.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2


class RawSnapshotWriter:
    """Appends bytes to ``<id>-<random>.checkpoint.part``; ``freeze()`` publishes the snapshot.

    Use as a context manager: leaving the block without ``freeze()`` (an
    exception, or a FetchSnapshot transfer given up) removes the ``.part``.
    """

    def __init__(self, log_dir: StrPath, snapshot_id: SnapshotId, *, path: StrPath | None = None) -> None:
        """``path`` overrides the published name (``bootstrap.checkpoint``); default ``<id>.checkpoint``."""
        self.log_dir = Path(log_dir)
        self.snapshot_id = SnapshotId(*snapshot_id).validate()
        self.part_path = create_temp_path(self.log_dir, self.snapshot_id)
        self.path = snapshot_path(self.log_dir, self.snapshot_id) if path is None else Path(path)
        try:
            self._fd = os.open(self.part_path, os.O_WRONLY | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0))
        except BaseException:
            os.unlink(self.part_path)
            raise
        self._size = 0
        self._writeback_from = 0   # bytes before this were handed to the device
        self._frozen = False
        self._closed = False

    @classmethod
    def create(cls, log_dir: StrPath, snapshot_id: SnapshotId) -> "RawSnapshotWriter":
        return cls(log_dir, snapshot_id)

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def is_frozen(self) -> bool:
        return self._frozen

    def _check_open(self, what: str) -> None:
        if self._frozen:
            raise SnapshotError(f"cannot {what}: snapshot {self.path.name} is already frozen")
        if self._closed:
            raise SnapshotError(f"cannot {what}: writer of snapshot {self.path.name} is closed")

    def append(self, data: Any) -> int:
        """Append ``data`` (anything with the buffer protocol); return the new size."""
        self._check_open("append")
        mv = memoryview(data).cast("B")
        n = mv.nbytes
        done = 0
        while done < n:
            done += os.write(self._fd, mv[done:done + _MAX_WRITE])
        self._size += n
        if self._size - self._writeback_from >= _WRITEBACK_CHUNK and _sync_file_range is not None:
            # a failure here is harmless: freeze()'s fsync writes everything anyway
            _sync_file_range(self._fd, self._writeback_from, self._size - self._writeback_from,
                             _SYNC_FILE_RANGE_WRITE)
            self._writeback_from = self._size
        return self._size

    def freeze(self) -> Path:
        """fsync, rename ``.part`` to ``.checkpoint`` atomically, fsync the directory; return the path."""
        self._check_open("freeze")
        os.fsync(self._fd)
        os.close(self._fd)
        self._closed = True
        os.replace(self.part_path, self.path)
        self._frozen = True
        fsync_dir(self.log_dir)
        return self.path

    def close(self) -> None:
        """Release the file; without a prior ``freeze()`` this aborts and removes the ``.part``."""
        if self._closed:
            return
        self._closed = True
        os.close(self._fd)
        if not self._frozen:
            try:
                os.unlink(self.part_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A writer dropped without close() must not leak its descriptor; the
        # .part stays for clean_snapshot_dir (we do not delete in a finalizer).
        if not getattr(self, "_closed", True):
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._closed = True

    def __repr__(self) -> str:
        state = "frozen" if self._frozen else ("closed" if self._closed else "open")
        return f"RawSnapshotWriter({self.snapshot_id}, {self._size} bytes, {state})"


class RawSnapshotReader:
    """A frozen snapshot file, memory-mapped: size and byte slices.

    ``snapshot_id`` is parsed from the file name when it is a snapshot name
    (None otherwise, e.g. for ``bootstrap.checkpoint``, unless given).
    """

    def __init__(self, path: StrPath, snapshot_id: SnapshotId | None = None) -> None:
        self.path = Path(path)
        if snapshot_id is None:
            sp = parse_snapshot_path(self.path)
            snapshot_id = sp.snapshot_id if sp is not None else None
        self.snapshot_id = snapshot_id
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            self._mmap = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        self._size = size
        self._view: memoryview | None = memoryview(self._mmap) if self._mmap is not None else memoryview(b"")

    @classmethod
    def open(cls, log_dir: StrPath, snapshot_id: SnapshotId) -> "RawSnapshotReader":
        sid = SnapshotId(*snapshot_id).validate()
        path = snapshot_path(log_dir, sid)
        if not path.exists():
            raise SnapshotError(f"no snapshot {path.name} in {log_dir}")
        return cls(path, sid)

    @property
    def size_in_bytes(self) -> int:
        return self._size

    @property
    def buffer(self) -> memoryview:
        """The whole file, zero copy (valid until ``close()``)."""
        if self._view is None:
            raise SnapshotError(f"snapshot reader of {self.path.name} is closed")
        return self._view

    def read(self, position: int, max_bytes: int) -> bytes:
        """Up to ``max_bytes`` from ``position``, as a FetchSnapshot response carries them.

        The slice may end inside a batch (the follower appends it raw).
        Raises :class:`SnapshotPositionOutOfRange` unless ``0 <= position < size``.
        """
        view = self.buffer
        if not 0 <= position < self._size:
            raise SnapshotPositionOutOfRange(
                f"position {position} outside snapshot {self.path.name} of {self._size} bytes")
        if max_bytes < 0:
            raise ValueError(f"max_bytes {max_bytes} is negative")
        return bytes(view[position:position + max_bytes])

    def close(self) -> None:
        if self._view is None:
            return
        view, self._view = self._view, None
        try:
            view.release()
            if self._mmap is not None:
                self._mmap.close()
        except BufferError:
            # Someone still holds a zero-copy view (e.g. RecordColumns.data):
            # the mapping is released by the GC when the last view goes.
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RawSnapshotReader({self.path.name}, {self._size} bytes)"
