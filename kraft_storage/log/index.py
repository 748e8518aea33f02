"""The memory-mapped segment indexes: ``.index`` (offset -> position) and ``.timeindex``.

Layouts are in :mod:`kraft_storage._pure._index`.  As in Kafka, an index is
a file preallocated to ``segment.index.bytes`` (rounded down to whole
entries) while its segment is active, memory-mapped read-write, appended
entry by entry, and trimmed to its valid entries when the segment rolls or
the log closes.  The number of valid entries of an untrimmed file is not
stored anywhere: after an unclean shutdown the index is rebuilt from the log
(:meth:`kraft_storage.log.segment.LogSegment.recover`).

Searches go through :class:`IndexSearcher` (native or twin, see
``kraft_storage._native._index``), which reads the mmap directly.

Writer/reader protocol: one writer.  The writer writes an entry's bytes,
then bumps ``searcher.n``; a reader thread only ever searches the first
``n`` entries, so it never sees a half-written entry.  Remapping (resize,
trim) releases the old searcher first: a reader racing with it gets "no
entry" and scans from the segment start instead, which is slower but right.
"""
from __future__ import annotations

import contextlib
import errno
import os
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from kraft_storage.accel import load
from kraft_storage.fileio import StrPath, disk_full

if TYPE_CHECKING:
    from kraft_storage._contracts import IndexKernel

_k = cast("IndexKernel", load("_index"))

OFFSET_ENTRY = np.dtype([("rel", ">i4"), ("pos", ">i4")])
TIME_ENTRY = np.dtype([("ts", ">i8"), ("rel", ">i4")])
_OFF = struct.Struct(">ii")
_TIME = struct.Struct(">qi")


def reserve_space(fd: int, offset: int, length: int, path: StrPath, what: str) -> None:
    """Allocate the blocks of ``[offset, offset + length)`` (``posix_fallocate``; the file
    grows if that range ends past it), so that writing there through an mmap can never hit
    a full device: a page that cannot be allocated on a store through a mapping is a SIGBUS,
    which kills the process without a word (issue 19: a restart on a full tmpfs died with
    rc 135).  A full device here is a :class:`DiskFullError` instead, and the file keeps the
    size it had.  Where the file system cannot preallocate (EOPNOTSUPP/EINVAL), fall back to
    ``ftruncate`` up to the range's end (sparse, as Kafka's ``RandomAccessFile.setLength``;
    never shorter than it was)."""
    before = os.fstat(fd).st_size
    try:
        os.posix_fallocate(fd, offset, length)
    except OSError as exc:
        err = disk_full(exc, path, what)
        if err is not None:
            try:  # leave the file as it was (a failed fallocate may have grown it)
                if os.fstat(fd).st_size != before:
                    os.ftruncate(fd, before)
            except OSError:
                pass
            raise err from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
        if offset + length > before:
            os.ftruncate(fd, offset + length)


#: Blocks of an index are reserved this many bytes at a time ahead of its writes (see
#: :meth:`_MappedIndex.reserve_entries`).
RESERVE_CHUNK = 64 * 1024


class IndexCorrupt(Exception):
    """Internal: an index file failed its sanity check (the caller rebuilds it)."""


class _MappedIndex:
    entry_size = 0
    kind = ""
    dtype: np.dtype

    def __init__(self, path: str, base_offset: int, max_index_size: int, *, writable: bool = True,
                 preallocate: bool = True) -> None:
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self.max_entries = max(max_index_size // self.entry_size, 0)
        exists = os.path.exists(path)
        #: the file did not exist and was created here (a failed open deletes it again)
        self.created = writable and not exists
        fd = os.open(path, (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY, 0o644)
        #: the index is open (``close`` sets it False); it holds no descriptor: see :meth:`_fd`
        self._open = True
        self._mm: Any = None
        #: bytes from the start of the file whose blocks are allocated: an entry is only written
        #: below this (reserve_entries), so a store through the map never faults on a full device
        self._reserved = 0
        self._dirty = False
        #: resize() wants more room than is mapped: mapped at the first write that needs it
        self._grow_pending = False
        #: (mapped length before, entries then) of the last lazy growth: see revert_growth
        self._growth: tuple[int, int] | None = None
        self._mapped = 0
        self._file_size = 0
        self._s = _k.IndexSearcher(None, base_offset, self.kind, 0)
        self.lookup_exact = None
        try:
            length = os.fstat(fd).st_size
            #: the file's size when opened (a failed KafkaLog.open restores what it grew)
            self.opened_size = length
            n = length // self.entry_size if exists else 0
            #: the file was not a whole number of entries when opened (Kafka: corrupt)
            self.misaligned = length % self.entry_size != 0
            if writable and preallocate:
                # the room is mapped at the first write that needs it (see resize): a new log's
                # indexes cost no ftruncate until something is indexed, none at all if it stays idle
                self._map(length - length % self.entry_size, n, resize_file=False, fd=fd)
                self._grow_pending = self._s.capacity < self.max_entries
            else:
                # (a misaligned file is mapped short but not cut: opening changes no byte)
                self._map(length - length % self.entry_size if writable else length, n, resize_file=False, fd=fd)
        except BaseException:
            self._open = False
            if self.created:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise
        finally:
            os.close(fd)

    @contextlib.contextmanager
    def _fd(self) -> Iterator[int]:
        """A descriptor of the index file for one call (resize, reserve, trim, size).

        Why not one kept open: the map is made by ``_k.FileMap`` (``mmap(2)``, which stays valid
        once the file is closed), so an open index holds no descriptor at all -- Kafka's count,
        where a segment's only descriptor is its ``.log``.  A partition log held five (two per
        index with ``mmap.mmap``'s duplicate), so a broker with 10k partition logs needed 50k
        descriptors.  These calls are rare: a reserve every 64 KiB of entries, a roll, a close."""
        fd = os.open(self.path, os.O_RDWR if self.writable else os.O_RDONLY)
        try:
            yield fd
        finally:
            os.close(fd)

    # ---- mapping ----
    def _map(self, length: int, n: int, resize_file: bool = True, fd: int | None = None) -> None:
        if fd is None:
            with self._fd() as own:
                self._map(length, n, resize_file, own)
            return
        self._s.release()
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        size = os.fstat(fd).st_size
        if self.writable and resize_file:
            if length > size:
                # the file gets its whole length sparse (Kafka's RandomAccessFile.setLength: a
                # 10 MiB index costs nothing until written); blocks are reserved in chunks ahead
                # of the writes, so thousands of partition logs do not each hold 20 MiB of disk
                os.ftruncate(fd, length)
                self._reserved = min(self._reserved, size)
            elif length < size:
                os.ftruncate(fd, length)
                self._reserved = min(self._reserved, length)
            size = length
            # what is already there (the entries of an existing file) was written: allocated
            self._reserved = max(self._reserved, min(n * self.entry_size, length))
        if length > 0:
            self._mm = _k.FileMap(fd, length, self.writable)
        #: bytes mapped, and the file's size as this index last saw or set it (trim skips when
        #: both are already the valid entries)
        self._mapped = length
        self._file_size = size
        self._s = _k.IndexSearcher(self._mm, self.base_offset, self.kind, min(n, length // self.entry_size))
        self._bind()

    def _bind(self) -> None:
        pass

    @property
    def entries(self) -> int:
        return self._s.n

    @property
    def is_full(self) -> bool:
        return self._s.n >= self.max_entries

    @property
    def capacity(self) -> int:
        return self._s.capacity

    def entry(self, slot: int) -> tuple[int, int]:
        return self._s.entry(slot)

    def array(self) -> np.ndarray:
        """A copy of the valid entries as a structured big-endian array."""
        if self._mm is None or self._s.n == 0:
            return np.empty(0, dtype=self.dtype)
        return np.frombuffer(self._mm, dtype=self.dtype, count=self._s.n).copy()

    def resize(self, max_index_size: int) -> None:
        """Room for ``max_index_size`` bytes of entries (keeps the valid ones).  Growing is
        deferred to the first write that needs the room (:meth:`_ensure_room`).

        Why lazy (Kafka's ``LazyIndex`` does the same for an index nobody touches): growing the
        file and shrinking it back at close are two journaled ``ftruncate`` calls per index, four
        per partition log -- at a broker's start and shutdown with thousands of idle logs, most
        of their open and close time (session 18)."""
        self.max_entries = max(max_index_size // self.entry_size, 0)
        if self._s.capacity > self.max_entries or not self.writable:
            self._map(max(self.max_entries, self._s.n) * self.entry_size, self._s.n)
        else:
            self._grow_pending = self._s.capacity < self.max_entries

    def _ensure_room(self, n: int) -> bool:
        """Map the whole ``max_entries`` before a write of the first ``n`` entries needs it;
        whether it grew (:meth:`revert_growth` undoes it if that write then fails)."""
        if self._grow_pending and n > self._s.capacity:
            before = self._mapped
            self._grow_pending = False
            self._map(max(self.max_entries, self._s.n) * self.entry_size, self._s.n)
            self._growth = (before, self._s.n)
            return True
        return False

    def revert_growth(self) -> None:
        """Undo the last lazy growth if no entry was added since: an append that failed after
        it (a full device) leaves every file as it found it."""
        growth, self._growth = self._growth, None
        if growth is not None and self._open and self._s.n == growth[1]:
            self._map(growth[0], self._s.n)
            self._grow_pending = True

    def trim_to_valid_size(self) -> None:
        """Cut the file to its valid entries (on roll and close, like Kafka); nothing to do for
        an index that was never grown past them."""
        if not self.writable:
            return
        self._grow_pending = False
        valid = self._s.n * self.entry_size
        if self._mapped == valid and self._file_size == valid:
            return
        self._map(valid, self._s.n)

    def _set_entries(self, n: int) -> None:
        self._s.n = n
        self._dirty = True

    def reset(self) -> None:
        self._set_entries(0)
        self.misaligned = False

    def reserve_entries(self, n: int) -> None:
        """Allocate the blocks of the first ``n`` entries (and up to :data:`RESERVE_CHUNK` bytes
        beyond) before they are written through the map: a page that cannot be allocated on a
        store through a mapping is a SIGBUS that kills the process without a word (issue 19),
        while here a full device is a :class:`DiskFullError` naming the file.  The native
        appender writes entries straight into the map, so the segment reserves room for one
        entry per batch before it calls it."""
        if not self._open:
            return
        grew = self._ensure_room(n)
        need = min(n, self._s.capacity) * self.entry_size
        if need <= self._reserved:
            return
        end = min(max(need, self._reserved + RESERVE_CHUNK), self._s.capacity * self.entry_size)
        try:
            with self._fd() as fd:
                reserve_space(fd, self._reserved, end - self._reserved, self.path, "reserving index space")
        except BaseException:
            if grew:  # a failed append changes no file: the growth goes too
                self.revert_growth()
            raise
        self._reserved = end

    def _write(self, slot: int, data: bytes) -> None:
        self._ensure_room(slot + 1)
        if slot >= self._s.capacity:
            raise ValueError(f"{self.path}: index is full ({self._s.capacity} entries)")
        self.reserve_entries(slot + 1)
        self._mm[slot * self.entry_size:(slot + 1) * self.entry_size] = data  # (capacity > slot: mapped)

    def _write_many(self, arr: np.ndarray) -> None:
        n = self._s.n
        k = len(arr)
        self._ensure_room(n + k)
        if n + k > self._s.capacity:
            raise ValueError(f"{self.path}: index is full ({self._s.capacity} entries)")
        self.reserve_entries(n + k)
        self._mm[n * self.entry_size:(n + k) * self.entry_size] = arr.tobytes()  # (capacity > n: mapped)
        self._set_entries(n + k)

    @property
    def is_open(self) -> bool:
        return self._open

    def file_size(self) -> int:
        return os.stat(self.path).st_size

    def flush(self) -> None:
        if self._dirty and self._mm is not None:
            self._mm.flush()
        self._dirty = False

    def close(self, trim: bool = True) -> None:
        if not self._open:
            return
        try:
            if trim and self.writable:
                self.trim_to_valid_size()
        finally:
            self._open = False
            self._s.release()
            if self._mm is not None:
                self._mm.close()
                self._mm = None

    def delete(self) -> None:
        self.close(trim=False)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def rename(self, new_path: str) -> None:
        os.replace(self.path, new_path)
        self.path = new_path


class OffsetIndex(_MappedIndex):
    """``<base>.index``: sparse (offset, position) entries, keys strictly increasing."""
    entry_size = 8
    kind = "offset"
    dtype = OFFSET_ENTRY

    lookup: Callable[[int], tuple[int, int]]
    lookup_many_into: Callable[[np.ndarray, np.ndarray, np.ndarray], None]

    def _bind(self) -> None:
        # Bind the searcher's methods directly: a single lookup is one native call.
        self.lookup = self._s.lookup
        self.lookup_many_into = self._s.lookup_many

    def last_entry(self) -> tuple[int, int]:
        """(offset, position) of the last entry, or (base_offset, 0) when empty."""
        n = self._s.n
        return self._s.entry(n - 1) if n else (self.base_offset, 0)

    def position_floor(self, position: int) -> tuple[int, int] | None:
        """The entry with the largest position <= ``position``, or None."""
        s = self._s.position_slot(position)
        return None if s < 0 else self._s.entry(s)

    def lookup_many(self, offsets: npt.ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        out_o = np.empty(len(offsets), dtype=np.int64)
        out_p = np.empty(len(offsets), dtype=np.int64)
        self._s.lookup_many(offsets, out_o, out_p)
        return out_o, out_p

    def append(self, offset: int, position: int) -> None:
        """Add an entry; ``offset`` and ``position`` must exceed the last entry's."""
        n = self._s.n
        if n:
            lo, lp = self._s.entry(n - 1)
            if offset <= lo or position <= lp:
                raise ValueError(f"{self.path}: index entry ({offset}, {position}) does not follow "
                                 f"the last entry ({lo}, {lp})")
        rel = offset - self.base_offset
        if not 0 <= rel <= 0x7FFFFFFF:
            raise ValueError(f"{self.path}: offset {offset} is not within int32 of base {self.base_offset}")
        self._write(n, _OFF.pack(rel, position))
        self._set_entries(n + 1)

    def append_relative(self, rel: np.ndarray, pos: np.ndarray) -> None:
        if len(rel) == 0:
            return
        arr = np.empty(len(rel), dtype=OFFSET_ENTRY)
        arr["rel"] = rel
        arr["pos"] = pos
        self._write_many(arr)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose offset is >= ``offset``."""
        s = self._s.offset_slot(offset - 1) if offset > self.base_offset else -1
        self._set_entries(s + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise IndexCorrupt unless both columns strictly increase and positions fit in the log."""
        if self.misaligned:
            raise IndexCorrupt(f"{self.path}: file size is not a multiple of {self.entry_size}")
        a = self.array()
        if len(a) == 0:
            return
        rel = a["rel"].astype(np.int64)
        pos = a["pos"].astype(np.int64)
        if rel[0] < 0 or pos[0] < 0 or np.any(np.diff(rel) <= 0) or np.any(np.diff(pos) <= 0):
            raise IndexCorrupt(f"{self.path}: entries are not strictly increasing")
        if pos[-1] >= max(log_size, 1):
            raise IndexCorrupt(f"{self.path}: last entry points at position {pos[-1]}, log has {log_size} bytes")


class TimeIndex(_MappedIndex):
    """``<base>.timeindex``: (max timestamp so far, offset) entries, timestamps strictly increasing."""
    entry_size = 12
    kind = "time"
    dtype = TIME_ENTRY

    lookup: Callable[[int], tuple[int, int]]

    def _bind(self) -> None:
        self.lookup = self._s.time_lookup

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base_offset) when empty."""
        n = self._s.n
        return self._s.entry(n - 1) if n else (-1, self.base_offset)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Kafka's ``TimeIndex.maybeAppend``: add the entry if ``timestamp`` is newer than the last."""
        n = self._s.n
        if not skip_full_check and n >= self.max_entries:
            raise ValueError(f"{self.path}: time index is full")
        last_ts, last_off = self.last_entry()
        if n and offset < last_off:
            raise ValueError(f"{self.path}: time index entry offset {offset} < last {last_off}")
        if timestamp <= last_ts:
            return False
        if n >= self._s.capacity:  # skip_full_check on a trimmed or full map: grow by one entry
            self._map((n + 1) * self.entry_size, n)
        self._write(n, _TIME.pack(timestamp, offset - self.base_offset))
        self._set_entries(n + 1)
        return True

    def append_relative(self, ts: np.ndarray, rel: np.ndarray) -> None:
        if len(ts) == 0:
            return
        arr = np.empty(len(ts), dtype=TIME_ENTRY)
        arr["ts"] = ts
        arr["rel"] = rel
        self._write_many(arr)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose offset is >= ``offset``."""
        a = self.array()
        k = int(np.searchsorted(a["rel"].astype(np.int64), offset - self.base_offset, side="left"))
        self._set_entries(k)

    def sanity_check(self, log_size: int) -> None:
        if self.misaligned:
            raise IndexCorrupt(f"{self.path}: file size is not a multiple of {self.entry_size}")
        a = self.array()
        if len(a) == 0:
            return
        ts = a["ts"].astype(np.int64)
        rel = a["rel"].astype(np.int64)
        if rel[0] < 0 or np.any(np.diff(ts) <= 0) or np.any(np.diff(rel) < 0):
            raise IndexCorrupt(f"{self.path}: entries are not increasing")
