"""Pure-Python twin of the segment-index kernels (``kraft_storage._native._index``).

The executable specification of the native module: same classes, same
arguments, same answers, written plainly.

Byte layouts (Kafka's, big-endian, entries packed back to back from byte 0):

* ``.index`` (offset index), 8 bytes per entry::

      0  relativeOffset  int32   offset - segment base offset
      4  position        int32   byte position of a batch in the .log file

* ``.timeindex``, 12 bytes per entry::

      0  timestamp       int64   max timestamp seen so far in the segment
      8  relativeOffset  int32   last offset of the batch that carried it

Invariant (kept by the writer, :mod:`kraft_storage.log.index`): in the
first ``n`` entries both columns of the offset index strictly increase and
the time index's timestamps strictly increase, so "largest entry whose key
is <= target" is a binary search.  Kafka's lookup answers when no entry
qualifies: ``(base_offset, 0)`` for the offset index, ``(-1, base_offset)``
for the time index.

The index-entry rule (``plan_entries``) is Kafka 4's ``LogSegment.append``
and ``LogSegment.recover``: walking the batches in order, first fold the
batch's max timestamp into the running maximum, then, if more than
``index.interval.bytes`` bytes were appended since the last entry, add an
offset entry (batch last offset, batch position) and a time entry (running
max timestamp, the last offset of the batch that set it) when that
timestamp is larger than the time index's last one; then count the batch's
bytes.
"""
from __future__ import annotations

import mmap
import struct

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12
_I32_MAX = 0x7FFFFFFF
_OFF = struct.Struct(">ii")
_TIME = struct.Struct(">qi")
_BE32 = struct.Struct(">i")
_BE64 = struct.Struct(">q")


class IndexSearcher:
    """Binary search over a memory-mapped Kafka index (see the module doc)."""

    def __init__(self, buf, base_offset: int, kind: str, n: int = 0):
        if kind not in ("offset", "time"):
            raise ValueError(f"unknown index kind {kind!r}")
        self._esize = OFFSET_ENTRY_SIZE if kind == "offset" else TIME_ENTRY_SIZE
        self.base_offset = base_offset
        self._mv = None
        self._cap = 0
        if buf is not None:
            self._mv = memoryview(buf).cast("B")
            self._cap = self._mv.nbytes // self._esize
        if n < 0 or n > self._cap:
            self.release()
            raise ValueError(f"{n} entries do not fit in a buffer of {self._cap} entries")
        self.n = n

    def release(self) -> None:
        self.n = 0
        self._cap = 0
        if self._mv is not None:
            self._mv.release()
            self._mv = None

    @property
    def capacity(self) -> int:
        return self._cap

    def _valid(self) -> int:
        return min(self.n, self._cap)

    def entry(self, slot: int):
        n = self._valid()
        if slot < 0 or slot >= n:
            raise IndexError(f"index slot {slot} out of range [0, {n})")
        if self._esize == OFFSET_ENTRY_SIZE:
            rel, pos = _OFF.unpack_from(self._mv, slot * 8)
            return (self.base_offset + rel, pos)
        ts, rel = _TIME.unpack_from(self._mv, slot * 12)
        return (ts, self.base_offset + rel)

    def _floor(self, key_at, target: int) -> int:
        lo, hi = 0, self._valid() - 1  # answer in [lo-1, hi]
        ans = -1
        while lo <= hi:
            mid = (lo + hi) // 2
            if key_at(mid) <= target:
                ans = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return ans

    def _rel_key(self, slot: int) -> int:
        return _BE32.unpack_from(self._mv, slot * 8)[0]

    def _pos_key(self, slot: int) -> int:
        return _BE32.unpack_from(self._mv, slot * 8 + 4)[0]

    def _ts_key(self, slot: int) -> int:
        return _BE64.unpack_from(self._mv, slot * 12)[0]

    def _need(self, esize: int, what: str) -> None:
        if self._esize != esize:
            raise TypeError(f"{what} on the wrong kind of index")

    def offset_slot(self, offset: int) -> int:
        self._need(8, "offset_slot")
        return self._floor(self._rel_key, min(offset - self.base_offset, _I32_MAX))

    def lookup(self, offset: int):
        self._need(8, "lookup")
        s = self.offset_slot(offset)
        if s < 0:
            return (self.base_offset, 0)
        return self.entry(s)

    def position_slot(self, position: int) -> int:
        self._need(8, "position_slot")
        return self._floor(self._pos_key, min(position, _I32_MAX))

    def lookup_many(self, offsets, out_offsets, out_positions) -> None:
        self._need(8, "lookup_many")
        if len(out_offsets) < len(offsets) or len(out_positions) < len(offsets):
            raise ValueError("output arrays are shorter than the input")
        for i in range(len(offsets)):
            out_offsets[i], out_positions[i] = self.lookup(int(offsets[i]))

    def time_slot(self, timestamp: int) -> int:
        self._need(12, "time_slot")
        return self._floor(self._ts_key, timestamp)

    def time_lookup(self, timestamp: int):
        self._need(12, "time_lookup")
        s = self.time_slot(timestamp)
        if s < 0:
            return (-1, self.base_offset)
        return self.entry(s)


def plan_entries(positions, sizes, last_offsets, max_timestamps, base_offset: int, interval: int,
                 bytes_since: int, max_ts: int, offset_of_max_ts: int, last_time_ts: int,
                 out_off_rel, out_off_pos, out_ts, out_ts_rel):
    """Index entries for a run of batches; see the module doc for the rule.

    Returns (n_offset_entries, n_time_entries, bytes_since, max_ts,
    offset_of_max_ts, last_time_ts)."""
    m = len(positions)
    if len(sizes) < m or len(last_offsets) < m or len(max_timestamps) < m:
        raise ValueError("input columns differ in length")
    if min(len(out_off_rel), len(out_off_pos), len(out_ts), len(out_ts_rel)) < m:
        raise ValueError("output arrays are shorter than the input")
    no = nt = 0
    for i in range(m):
        if int(max_timestamps[i]) > max_ts:
            max_ts = int(max_timestamps[i])
            offset_of_max_ts = int(last_offsets[i])
        if bytes_since > interval:
            out_off_rel[no] = int(last_offsets[i]) - base_offset
            out_off_pos[no] = int(positions[i])
            no += 1
            if max_ts > last_time_ts:
                out_ts[nt] = max_ts
                out_ts_rel[nt] = offset_of_max_ts - base_offset
                nt += 1
                last_time_ts = max_ts
            bytes_since = 0
        bytes_since += int(sizes[i])
    return no, nt, bytes_since, max_ts, offset_of_max_ts, last_time_ts


class FileMap(mmap.mmap):
    """A shared mapping of ``length`` bytes of the file open on ``fd``: ``mmap.mmap`` itself.

    The native twin maps with ``mmap(2)`` and keeps no descriptor; ``mmap.mmap`` duplicates the
    descriptor and holds it until closed (CPython 3.11), so this fallback costs one descriptor
    per mapped index more, and behaves the same otherwise (buffer protocol, slices, ``flush``,
    ``close`` raising ``BufferError`` while a buffer is exported)."""

    def __new__(cls, fd: int, length: int, writable: bool) -> FileMap:
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        return super().__new__(cls, fd, length, access=mmap.ACCESS_WRITE if writable else mmap.ACCESS_READ)
