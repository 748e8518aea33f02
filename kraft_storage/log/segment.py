"""One log segment: ``<base>.log`` with its ``.index`` and ``.timeindex``.

File names are Kafka's: the base offset (the first offset the segment may
hold) printed as 20 zero-padded digits, e.g. ``00000000000000000000.log``.

Invariants kept here:

* ``size`` is the number of bytes of whole, validated batches in the file;
  it is published (assigned) only after the bytes are written, so a reader
  thread bounded by ``size`` sees whole batches only.
* Batch offsets strictly increase; every offset is in
  ``[base_offset, base_offset + 2^31 - 1]`` (index entries store int32
  relative offsets).
* Index entries are added by Kafka 4's per-batch rule (see
  :mod:`kraft_storage._pure._index`), both on append and on recovery, so
  an index rebuilt after a crash equals the one written live.
* ``generation`` increases on every truncation, so a reader that computed a
  byte range before a truncation can detect that its range went stale.
"""
from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from kraft_storage.accel import load
from kraft_storage.errors import CorruptRecordError
from kraft_storage.fileio import disk_full
from kraft_storage.log.index import OffsetIndex, TimeIndex
from kraft_storage.record.batch import CRC_SKIP, CRC_VERIFY, scan_batches

if TYPE_CHECKING:
    from kraft_storage._contracts import AppenderLike, IndexKernel

_k = cast("IndexKernel", load("_index"))

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_WALK_CHUNK = 16384
_RECOVERY_CHUNK = 64 << 20
_HDR27 = struct.Struct(">qi")
_BE64 = struct.Struct(">q")
#: byte offsets in a v2 batch header: magic, and maxTimestamp (Kafka's DefaultRecordBatch)
_MAGIC_AT = 16
_MAX_TS_AT = 35
_I32_MAX = 0x7FFFFFFF


def file_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


def now_ms() -> int:
    return int(time.time() * 1000)


class FileHandle:
    """An fd closed when the last user lets go of it.

    A fetch result keeps the handle of its segment, so deleting or rolling
    the segment never closes the fd under a reader still using it (a deleted
    file stays readable through an open fd)."""
    __slots__ = ("fd", "path", "__weakref__")

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    def __del__(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass


@dataclass
class RecoveryReport:
    """What recovery of one segment found and dropped."""
    segment: str
    valid_bytes: int
    truncated_bytes: int
    batches: int
    next_offset: int | None
    first_dropped_offset: int | None = None
    last_dropped_offset: int | None = None
    reason: str | None = None


@dataclass
class SegmentScan:
    """What :func:`scan_segment_file` found: the good prefix and the first error after it."""
    valid_bytes: int
    file_size: int
    batches: int
    records: int
    #: last offset of the last good batch (base_offset - 1 when there is none)
    last_offset: int
    #: why the scan stopped before the end of the file (None: it did not)
    error: CorruptRecordError | None

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1


def scan_segment_file(fd: int, file_size: int, base_offset: int, path: str, verify_crc: bool = True,
                      on_batches: Callable[[np.ndarray], object] | None = None) -> SegmentScan:
    """Walk a segment file batch by batch (CRC, magic, framing, offsets increasing and
    within int32 of ``base_offset``), reading only; ``on_batches(headers)`` sees each
    run of good batches.  Stops at the first bad one.  Shared by recovery, the clean
    open's rebuild check and ``kraft-storage verify``."""
    prev_last = base_offset - 1
    batches = records = valid = 0
    error: CorruptRecordError | None = None
    mm: mmap.mmap | bytes = mmap.mmap(fd, file_size, access=mmap.ACCESS_READ) if file_size else b""
    crc_mode = CRC_VERIFY if verify_crc else CRC_SKIP
    try:
        pos = 0
        chunk = _RECOVERY_CHUNK
        while pos < file_size:
            end = min(file_size, pos + chunk)
            scan = scan_batches(mm, pos, end, crc_mode=crc_mode, allow_partial_tail=end < file_size,
                                raise_on_error=False, source=path)
            h = scan.headers
            if len(h):
                base = h["base_offset"]
                last = base + h["last_offset_delta"]
                prevs = np.concatenate(([prev_last], last[:-1]))
                bad = (base <= prevs) | (last < base) | (last - base_offset > _I32_MAX)
                if bad.any():
                    i = int(np.argmax(bad))
                    error = CorruptRecordError(
                        f"offsets do not increase: batch [{int(base[i])}, {int(last[i])}] after offset "
                        f"{int(prevs[i])} (segment base {base_offset})",
                        int(h["position"][i]), int(base[i]), path)
                    h = h[:i]
            if len(h):
                if on_batches is not None:
                    on_batches(h)
                batches += len(h)
                records += int(h["records_count"].sum(dtype=np.int64))
                prev_last = int(h["base_offset"][-1]) + int(h["last_offset_delta"][-1])
                valid = int(h["position"][-1]) + int(h["size"][-1])
            if error is not None:
                break
            if scan.error is not None:  # corrupt, or torn at the true end of the file
                error = scan.error
                break
            if scan.end == pos and end < file_size:  # one batch larger than the chunk
                chunk = file_size - pos
                continue
            chunk = _RECOVERY_CHUNK
            pos = scan.end
    finally:
        if isinstance(mm, mmap.mmap):
            mm.close()
    return SegmentScan(valid, file_size, batches, records, prev_last, error)


class LogSegment:
    """A ``.log`` file and its two indexes (see the module doc for invariants)."""

    offset_index: OffsetIndex
    time_index: TimeIndex

    def __init__(self, directory: str, base_offset: int, *, index_interval_bytes: int,
                 max_index_size: int, created_ms: int | None = None, new: bool = False,
                 preallocate: bool = True) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.max_index_size = max_index_size
        prefix = os.path.join(directory, file_prefix(base_offset))
        self.log_path = prefix + LOG_SUFFIX
        flags = os.O_RDWR | os.O_CREAT | (os.O_EXCL if new else 0)
        try:
            fd = os.open(self.log_path, flags, 0o644)
        except OSError as exc:
            err = disk_full(exc, self.log_path, "creating the segment")
            if err is not None:
                raise err from exc
            raise
        self.handle = FileHandle(fd, self.log_path)
        self.size = os.fstat(self.handle.fd).st_size
        self.generation = 0
        #: this open created the .log file (a failed KafkaLog.open removes it again)
        self.created_log = new
        if new:
            for p in (prefix + INDEX_SUFFIX, prefix + TIME_INDEX_SUFFIX):
                if os.path.exists(p):  # a stale index of an old segment with this base
                    os.unlink(p)
        self.offset_index = self.time_index = None  # type: ignore[assignment]  # until opened just below
        try:
            self.offset_index = OffsetIndex(prefix + INDEX_SUFFIX, base_offset, max_index_size,
                                            preallocate=preallocate)
            self.time_index = TimeIndex(prefix + TIME_INDEX_SUFFIX, base_offset, max_index_size,
                                        preallocate=preallocate)
        except BaseException:
            # e.g. a full device while reserving the index space: a new segment leaves
            # no file behind (a roll that fails changes nothing)
            for idx in (self.offset_index,):
                if idx is not None:
                    idx.close(trim=False)
                    if idx.created:
                        os.unlink(idx.path)
            if new:
                for p in (prefix + TIME_INDEX_SUFFIX, self.log_path):
                    try:
                        os.unlink(p)
                    except FileNotFoundError:
                        pass
            raise
        self.bytes_since_last_index_entry = 0
        ts, off = self.time_index.last_entry()
        self.max_timestamp_so_far = ts
        self.offset_of_max_timestamp = off
        self.created_ms = now_ms() if created_ms is None else created_ms
        self.rolling_based_timestamp: int | None = None
        #: next offset after the last batch, when known (None: not computed yet)
        self.next_offset: int | None = base_offset if self.size == 0 else None
        #: page cache dropped below this file position (KafkaLog._drop_flushed_pages)
        self.cache_dropped_to = 0

    # ---- facts ----
    @property
    def fd(self) -> int:
        return self.handle.fd

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"

    def can_hold(self, last_offset: int) -> bool:
        return 0 <= last_offset - self.base_offset <= _I32_MAX

    @property
    def largest_timestamp(self) -> int:
        return self.max_timestamp_so_far

    # ---- appending ----
    def append_scanned(self, ap: AppenderLike) -> int:
        """Write the batches an :class:`Appender` (``kraft_storage._native._logappend``
        or its twin) has scanned, and their index entries; the fast path of
        :meth:`KafkaLog.append_as_leader`/``append_as_follower``.

        The bytes are written first (cut back on failure, so no partial batch
        is ever left behind), then the index entries' bytes, then the index
        counts, then ``size``.  Returns the file position of the first batch."""
        start = self.size
        oi, ti = self.offset_index, self.time_index
        o_n, t_n = oi._s.n, ti._s.n
        # the appender stores at most one entry per batch straight into the maps: their blocks
        # are allocated first (a full device is a DiskFullError here, never a SIGBUS there); an
        # index grown lazily is mapped anew here, so its searcher is taken after
        try:
            oi.reserve_entries(o_n + ap.batches)
            ti.reserve_entries(t_n + ap.batches)
        except BaseException:
            oi.revert_growth()  # (the offset index may have grown before the time index failed)
            raise
        os_, ts_ = oi._s, ti._s
        try:  # (free in CPython 3.11+ unless it raises)
            no, nt, self.bytes_since_last_index_entry, self.max_timestamp_so_far, self.offset_of_max_timestamp = \
                ap.write(self.handle.fd, start, self.base_offset, self.index_interval_bytes,
                         self.bytes_since_last_index_entry, self.max_timestamp_so_far,
                         self.offset_of_max_timestamp, oi._mm, o_n, oi.max_entries, ti._mm, t_n, ti.max_entries)
        except OSError as exc:
            err = disk_full(exc, self.log_path, f"appending {ap.nbytes} bytes at position {start}")
            if err is not None:
                # Drop the frames below: the pure twin's write() holds memoryviews of the
                # index maps, and a kept traceback would stop them from ever being closed.
                exc.__traceback__ = None
                raise err from exc
            raise
        if no != o_n:
            os_.n = no
            oi._dirty = True
        if nt != t_n:
            ts_.n = nt
            ti._dirty = True
        if start == 0 and self.rolling_based_timestamp is None:
            self.rolling_based_timestamp = ap.first_max_timestamp
        self.next_offset = ap.last_offset + 1
        self.size = start + ap.nbytes  # publish last
        return start

    def _index_batches(self, positions: np.ndarray, h: np.ndarray) -> None:
        m = len(h)
        if m == 0:
            return
        if m == 1:  # the common single-batch append: same rule, no array round trips
            row = h[0]
            last = int(row["base_offset"]) + int(row["last_offset_delta"])
            mts = int(row["max_timestamp"])
            if mts > self.max_timestamp_so_far:
                self.max_timestamp_so_far, self.offset_of_max_timestamp = mts, last
            if self.bytes_since_last_index_entry > self.index_interval_bytes:
                if not self.offset_index.is_full:  # (see the cap below)
                    self.offset_index.append(last, int(positions[0]))
                if not self.time_index.is_full:
                    self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            self.bytes_since_last_index_entry += int(row["size"])
            return
        positions = np.ascontiguousarray(positions, dtype=np.int64)
        sizes = np.ascontiguousarray(h["size"], dtype=np.int32)
        lasts = np.ascontiguousarray(h["base_offset"] + h["last_offset_delta"], dtype=np.int64)
        max_tss = np.ascontiguousarray(h["max_timestamp"], dtype=np.int64)
        orel = np.empty(m, np.int64)
        opos = np.empty(m, np.int64)
        tts = np.empty(m, np.int64)
        trel = np.empty(m, np.int64)
        last_ts = self.time_index.last_entry()[0]
        no, nt, self.bytes_since_last_index_entry, self.max_timestamp_so_far, \
            self.offset_of_max_timestamp, _ = _k.plan_entries(
                positions, sizes, lasts, max_tss, self.base_offset, self.index_interval_bytes,
                self.bytes_since_last_index_entry, self.max_timestamp_so_far,
                self.offset_of_max_timestamp, last_ts, orel, opos, tts, trel)
        # Recovery (the only caller) may find more entries than the index holds: the live
        # segment restarted its index interval at every load (as Kafka's does), so it
        # wrote fewer entries than a rebuild from the first batch.  Keep the first ones
        # (an index is sparse: a missing entry only makes a lookup scan further) rather
        # than fail the open; the full index makes the next append roll.  (Kafka would
        # throw "Attempt to append to a full index"; with its defaults it cannot happen.)
        no = min(no, max(self.offset_index.max_entries - self.offset_index.entries, 0))
        nt = min(nt, max(self.time_index.max_entries - self.time_index.entries, 0))
        self.offset_index.append_relative(orel[:no], opos[:no])
        self.time_index.append_relative(tts[:nt], trel[:nt])

    def index_is_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def load_first_batch_timestamp(self) -> int | None:
        """Kafka's ``loadFirstBatchTimestamp``: the first batch's max timestamp, read from
        the file once (a segment loaded from disk, or truncated, does not know it)."""
        if self.rolling_based_timestamp is None and self.size > 0:
            hdr = os.pread(self.handle.fd, _MAX_TS_AT + 8, 0)
            if len(hdr) == _MAX_TS_AT + 8 and hdr[_MAGIC_AT] == 2:
                self.rolling_based_timestamp = _BE64.unpack_from(hdr, _MAX_TS_AT)[0]
        return self.rolling_based_timestamp

    def should_roll(self, messages_size: int, max_timestamp: int, max_offset: int, now: int,
                    segment_bytes: int, segment_ms: int, jitter_ms: int = 0) -> bool:
        """Kafka's ``LogSegment.shouldRoll`` (an empty segment never rolls on size).

        Time: ``max_timestamp - <first batch's max timestamp>`` when the segment has
        one >= 0 (read back from the file after a restart, as Kafka's
        ``timeWaitedForRoll`` does), else ``now - created_ms``."""
        if self.size == 0:
            return not self.can_hold(max_offset)
        if self.size > segment_bytes - messages_size:
            return True
        ts = self.rolling_based_timestamp
        if ts is None:
            ts = self.load_first_batch_timestamp()
        waited = (max_timestamp - ts) if ts is not None and ts >= 0 else (now - self.created_ms)
        if waited > segment_ms - jitter_ms:
            return True
        return self.index_is_full() or not self.can_hold(max_offset)

    def on_become_inactive(self) -> None:
        """Roll: record the final max timestamp, trim the indexes (Kafka's ``onBecomeInactiveSegment``)."""
        self.append_final_time_entry()
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def flush(self, indexes: bool = True) -> None:
        """fdatasync the log; msync the indexes too unless ``indexes`` is False.

        The active segment's indexes need no msync for durability: an
        unclean open always rebuilds the segment holding the recovery point
        (which is the active one after a flush), and a sealed segment's
        indexes are msync'd when it rolls."""
        try:
            os.fdatasync(self.handle.fd)
        except OSError as exc:
            err = disk_full(exc, self.log_path, "flushing")
            if err is not None:
                raise err from exc
            raise
        if indexes:
            self.offset_index.flush()
            self.time_index.flush()

    # ---- reading ----
    def walk_to_offset(self, offset: int, start: int, stop: int) -> tuple[int, int, int, int] | None:
        """The first batch in ``[start, stop)`` whose last offset is >= ``offset``:
        (position, base_offset, last_offset, size), or None.  ``start`` must be a batch boundary."""
        fd = self.handle.fd
        pos = start
        while pos < stop:
            chunk = os.pread(fd, min(stop - pos, _WALK_CHUNK), pos)
            if len(chunk) < 12:
                return None
            scan = scan_batches(chunk, crc_mode=CRC_SKIP, allow_partial_tail=True, raise_on_error=False)
            h = scan.headers
            if len(h):
                last = h["base_offset"] + h["last_offset_delta"]
                i = int(np.searchsorted(last, offset, side="left"))
                if i < len(h):
                    return (pos + int(h["position"][i]), int(h["base_offset"][i]), int(last[i]),
                            int(h["size"][i]))
                pos += scan.end
                continue
            if scan.error is not None and not scan.truncated:
                raise scan.error.with_source(self.log_path)
            hdr = os.pread(fd, 27, pos)  # a batch larger than the chunk
            if len(hdr) < 27:
                return None
            base, length = _HDR27.unpack_from(hdr, 0)
            lod = struct.unpack_from(">i", hdr, 23)[0]
            size = length + 12
            if base + lod >= offset:
                return (pos, base, base + lod, size)
            pos += size
        return None

    def boundary_before(self, start: int, limit: int) -> int:
        """The largest batch boundary <= ``limit`` (>= ``start``, itself a boundary)."""
        if limit >= self.size:
            return self.size
        e = self.offset_index.position_floor(limit)
        pos = max(start, e[1]) if e is not None else start
        fd = self.handle.fd
        while pos < limit:
            hdr = os.pread(fd, 12, pos)
            if len(hdr) < 12:
                break
            _, length = _HDR27.unpack_from(hdr, 0)
            nxt = pos + length + 12
            if nxt > limit or length <= 0:
                break
            pos = nxt
        return pos

    def find_offset(self, offset: int) -> tuple[int, int, int, int] | None:
        """Kafka's ``translateOffset``: the first batch whose last offset is >= ``offset``."""
        _, pos = self.offset_index.lookup(offset)
        return self.walk_to_offset(offset, pos, self.size)

    def read_next_offset(self) -> int:
        """Walk from the last index entry to the end; verifies the tail's CRCs.

        Raises CorruptRecordError when the tail is not whole valid batches."""
        if self.size == 0:
            return self.base_offset
        off, pos = self.offset_index.last_entry()
        data = os.pread(self.handle.fd, self.size - pos, pos)
        try:
            scan = scan_batches(data, crc_mode=CRC_VERIFY, source=self.log_path)
        except CorruptRecordError as exc:  # positions in the file, not in the chunk read
            raise CorruptRecordError(exc.reason, pos + max(exc.position, 0), exc.base_offset,
                                     self.log_path) from None
        if len(scan.headers) == 0:
            raise CorruptRecordError("no batch after the last index entry", pos, None, self.log_path)
        h = scan.headers
        self.next_offset = int(h["base_offset"][-1]) + int(h["last_offset_delta"][-1]) + 1
        return self.next_offset

    # ---- truncation and recovery ----
    def truncate_to(self, offset: int, now: int | None = None) -> int:
        """Drop every batch whose last offset is >= ``offset``; return the bytes dropped.

        The largest timestamp is recomputed from the batches that remain (Kafka's
        ``LogSegment.truncateTo``), not taken from the last time-index entry: the
        time index is sparse, so its last entry misses the batches after the last
        indexed one.  Why the scan can start at the last remaining offset-index
        entry: the time-index entry written with it covers every batch before it,
        and that entry survives the truncation (its offset is <= the indexed one).
        An emptied segment restarts its roll clock at ``now`` (Kafka: ``created``)."""
        found = self.find_offset(offset)
        if found is None:
            return 0
        pos, base, _last, _size = found
        dropped = self.size - pos
        self.generation += 1
        self.size = pos
        os.ftruncate(self.handle.fd, pos)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.max_timestamp_so_far, self.offset_of_max_timestamp = self._rescan_max_timestamp()
        self.bytes_since_last_index_entry = 0
        self.next_offset = base if pos > 0 else self.base_offset
        if pos == 0:
            self.rolling_based_timestamp = None
            self.created_ms = now_ms() if now is None else now
        return dropped

    def _rescan_max_timestamp(self) -> tuple[int, int]:
        """(max timestamp, offset of its first occurrence) over the batches in the file,
        starting from the last time-index entry and scanning from the last offset-index
        entry (see :meth:`truncate_to`)."""
        ts, off = self.time_index.last_entry()
        if self.size == 0:
            return -1, self.base_offset
        _o, pos = self.offset_index.last_entry()
        data = os.pread(self.handle.fd, self.size - pos, pos)
        h = scan_batches(data, crc_mode=CRC_SKIP, allow_partial_tail=True, raise_on_error=False).headers
        if len(h):
            mts = h["max_timestamp"]
            i = int(np.argmax(mts))  # first occurrence of the max, as Kafka's strict ">" keeps
            if int(mts[i]) > ts:
                ts, off = int(mts[i]), int(h["base_offset"][i]) + int(h["last_offset_delta"][i])
        return ts, off

    def recover(self, on_batches: Callable[[np.ndarray], object] | None = None,
                verify_crc: bool = True) -> RecoveryReport:
        """Validate every batch (CRC, magic, sizes, increasing offsets within this
        segment's range), rebuild both indexes, and cut the file after the last
        good batch.  ``on_batches(headers)`` sees each run of good batches (the
        epoch cache uses it)."""
        fd = self.handle.fd
        file_size = os.fstat(fd).st_size
        self.generation += 1
        self.offset_index.resize(self.max_index_size)
        self.time_index.resize(self.max_index_size)
        # blocks for every entry the rebuild could write (at most one per batch of >= 61 bytes,
        # plus the final time entry) before the old entries are dropped: on a full device the
        # open fails here with the indexes as they were (KafkaLog.open trims them back)
        bound = file_size // 61 + 2
        self.offset_index.reserve_entries(bound)
        self.time_index.reserve_entries(bound)
        self.offset_index.reset()
        self.time_index.reset()
        self.bytes_since_last_index_entry = 0
        self.max_timestamp_so_far = -1
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_based_timestamp = None

        def sink(h: np.ndarray) -> None:
            if self.rolling_based_timestamp is None:
                self.rolling_based_timestamp = int(h["max_timestamp"][0])
            self._index_batches(h["position"], h)
            if on_batches is not None:
                on_batches(h)

        scan = scan_segment_file(fd, file_size, self.base_offset, self.log_path, verify_crc, sink)
        valid, batches, prev_last, error = scan.valid_bytes, scan.batches, scan.last_offset, scan.error
        report = RecoveryReport(self.log_path, valid, file_size - valid, batches,
                                prev_last + 1 if batches else self.base_offset)
        if valid < file_size:
            report.first_dropped_offset = prev_last + 1
            report.reason = str(error) if error is not None else "trailing bytes"
            report.last_dropped_offset = self._last_offset_in_tail(valid, file_size)
            os.ftruncate(fd, valid)
        self.size = valid
        self.next_offset = report.next_offset
        # As Kafka's LogSegment.recover: the rebuilt time index ends with the segment's
        # (max timestamp, offset), and the index interval restarts from the end (its
        # bytesSinceLastIndexEntry is that of a freshly loaded segment, 0).
        self.append_final_time_entry()
        self.bytes_since_last_index_entry = 0
        return report

    def validate(self, verify_crc: bool = True) -> "SegmentScan":
        """:func:`scan_segment_file` over this segment: read-only, changes nothing."""
        return scan_segment_file(self.handle.fd, os.fstat(self.handle.fd).st_size, self.base_offset,
                                 self.log_path, verify_crc)

    def _last_offset_in_tail(self, start: int, end: int) -> int | None:
        """Best-effort: the largest last offset among readable batch headers in a dropped tail."""
        data = os.pread(self.handle.fd, min(end - start, 1 << 24), start)
        best = None
        pos = 0
        while pos + 27 <= len(data):
            base, length = _HDR27.unpack_from(data, pos)
            lod = struct.unpack_from(">i", data, pos + 23)[0]
            if length < 49 or data[pos + 16] != 2:
                break
            best = base + lod if best is None else max(best, base + lod)
            pos += length + 12
        return best

    def check_indexes(self) -> None:
        """Raise IndexCorrupt if either index fails its sanity check."""
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.size)

    # ---- lifecycle ----
    def append_final_time_entry(self) -> None:
        """Kafka's ``LogSegment.close``/``onBecomeInactiveSegment``: make the time index's
        last entry the segment's (max timestamp, offset), so the largest timestamp
        survives a restart (a no-op when it already is)."""
        if self.max_timestamp_so_far >= 0:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp,
                                         skip_full_check=True)

    def close(self, trim: bool = True) -> None:
        """Close the indexes; ``trim`` (a clean close): write the final time-index entry,
        msync and cut the indexes to their valid entries first.  ``trim=False`` is a
        crash (tests) or the release of a segment that must stay byte-identical."""
        if trim and self.time_index.is_open:
            self.append_final_time_entry()
            self.offset_index.flush()
            self.time_index.flush()
        self.offset_index.close(trim=trim)
        self.time_index.close(trim=trim)

    def delete(self) -> None:
        """Unlink the files; open readers keep reading through their handles."""
        self.offset_index.delete()
        self.time_index.delete()
        try:
            os.unlink(self.log_path)
        except FileNotFoundError:
            pass
