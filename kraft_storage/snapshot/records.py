"""KRaft snapshots as records: the writer that lays them out, the reader that checks them.

Layout of a snapshot (what Kafka's RecordsSnapshotWriter produces; checked
against every ``.checkpoint`` in the Kafka fixtures)::

    offset 0..h-1  control batch   SnapshotHeaderRecord (type 3)
                                   [KRaftVersionRecord (type 5) [VotersRecord (type 6)]]
    offset h..     data batches    metadata records, value = framed record, key null
    offset last    control batch   SnapshotFooterRecord (type 4)

Every batch: magic 2, base offsets contiguous from 0, partition leader epoch =
the snapshot id's epoch (0 for the bootstrap snapshot), producer id/epoch/base
sequence -1, CREATE_TIME, no transactional bit.  Every record of a batch
carries the batch's single timestamp (timestamp delta 0, no headers): Kafka
reads the clock once when it *starts* a batch (the header batch and footer
batch also read it once each).  The header's LastContainedLogTimestamp is the
append time of the last log record the snapshot covers (0 for bootstrap).

Batch boundaries (Kafka's BatchAccumulator + BatchBuilder, uncompressed):
a batch's size is the 61-byte header plus its records' exact sizes.  One
``append(records)`` call puts all its records in the *current* batch if
``size + needed <= max_batch_size``; otherwise the current batch is completed
and a new one started (clock read); if the records cannot fit even then
(``61 + needed > max_batch_size``) :class:`SnapshotBatchTooLarge` is raised.
``append_framed`` (bulk) behaves as if each record were appended on its own,
so it packs greedily.  Kafka sizes the snapshot batches with
``KafkaRaftClient.MAX_BATCH_SIZE_BYTES`` (8 MiB), our default.

The reader insists on the header being the first record of the first
batch, the footer being the last record of the last batch, and no other
control batch in between (a snapshot is a state dump; nothing else writes
control records into it), then gives the data section as columns.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

import numpy as np

from kraft_storage.errors import CorruptRecordError
from kraft_storage.fileio import StrPath
from kraft_storage.messages.control import (
    ControlRecordType,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    decode_control_record,
    encode_control_key,
    encode_control_value,
)
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import MessageError
from kraft_storage.record import (
    HEADER_SIZE,
    RecordColumns,
    build_batch,
    build_batches,
    decode_record_columns,
    scan_batches,
)
from kraft_storage.record.constants import CONTROL_MASK, Compression
from kraft_storage.snapshot.errors import SnapshotBatchTooLarge, SnapshotError
from kraft_storage.snapshot.files import BOOTSTRAP_FILENAME, BOOTSTRAP_SNAPSHOT_ID, SnapshotId
from kraft_storage.snapshot.raw import RawSnapshotReader, RawSnapshotWriter

__all__ = ["RecordsSnapshotWriter", "RecordsSnapshotReader", "MAX_BATCH_SIZE_BYTES",
           "record_sizes", "read_bootstrap_checkpoint", "write_bootstrap_checkpoint"]

#: Kafka's KafkaRaftClient.MAX_BATCH_SIZE_BYTES, the batch size of log and snapshot batches.
MAX_BATCH_SIZE_BYTES = 8 * 1024 * 1024

# Per-thread encode buffer kept between writers (see _complete_batch).
_ENCODE_BUFFERS = threading.local()


def _now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------
# Exact record sizes (what BatchBuilder.bytesNeededForRecords computes)
# ---------------------------------------------------------------------------

_VARINT_LIMITS = (1 << 6, 1 << 13, 1 << 20, 1 << 27)  # zigzag varint of v >= 0 grows at these v


def _varint_size(x: np.ndarray, x_max: int | None = None) -> np.ndarray:
    """Bytes of the zigzag varint of each (non-negative, < 2**31) int in ``x``, as int64.

    ``x_max``: an upper bound of ``x`` if the caller knows one (saves a pass).
    """
    x = np.asarray(x, dtype=np.int64)
    out = np.where(x >= _VARINT_LIMITS[0], np.int64(2), np.int64(1))
    if len(x):
        top = int(x.max()) if x_max is None else x_max
        for lim in _VARINT_LIMITS[1:]:
            if top < lim:
                break
            out += x >= lim
    return out


def _delta_varint_sizes(first: int, count: int) -> np.ndarray:
    """``_varint_size(np.arange(first, first + count))`` without the per-element
    compares: the sizes of consecutive offset deltas step up at fixed limits."""
    out = np.ones(count, dtype=np.int64)
    for lim in _VARINT_LIMITS:
        start = lim - first
        if start >= count:
            break
        out[max(start, 0):] += 1
    return out


def record_sizes(value_len: np.ndarray, offset_delta: np.ndarray) -> np.ndarray:
    """On-disk size of records with null key, timestamp delta 0, no headers.

    Record layout: varint length, then the body: attributes (1), varlong
    timestamp delta (1 for 0), varint offset delta, varint key length (-1: 1),
    varint value length, value, varint header count (0: 1).
    """
    return _sizes_from_body_base(_body_base(value_len), offset_delta)


def _body_base(value_len: np.ndarray, *, consume: bool = False) -> np.ndarray:
    """Body size without the offset-delta varint: 4 fixed bytes + varint(len) + len.

    ``consume``: ``value_len`` is a scratch int64 array the result may
    overwrite (a bulk append of N records then allocates nothing of size N:
    fresh arrays of that size cost more in page faults than the arithmetic).
    """
    value_len = np.asarray(value_len, dtype=np.int64)
    steps = _varint_steps(value_len)
    base = value_len if consume else value_len.copy()
    base += 5                          # 4 fixed bytes + the varint's first byte
    for step in steps:
        base += step
    return base


def _varint_steps(x: np.ndarray, x_max: int | None = None) -> list[np.ndarray]:
    """Boolean arrays ``x >= limit`` for each varint limit ``x`` reaches
    (varint size = 1 + their sum); computed before ``x`` is overwritten."""
    if not len(x):
        return []
    top = int(x.max()) if x_max is None else x_max
    return [x >= lim for lim in _VARINT_LIMITS if top >= lim]


def _sizes_from_body_base(base: np.ndarray, offset_delta: np.ndarray) -> np.ndarray:
    body: np.ndarray = base + _varint_size(offset_delta)
    body += _varint_size(body)
    return body


# ---------------------------------------------------------------------------
# Writer
# ---------------------------------------------------------------------------

def _as_arrow(values: Any) -> tuple[object, np.ndarray]:
    """Sequence of bytes (or (message, version) pairs), or (data, offsets) -> (data, offsets)."""
    if (isinstance(values, tuple) and len(values) == 2
            and not isinstance(values[1], (bytes, bytearray, memoryview, int))):
        data, off = values
        off = np.ascontiguousarray(off, dtype=np.int64)
        n = memoryview(data).nbytes
        if off.ndim != 1 or len(off) < 1:
            raise ValueError("offsets must be a 1-d array of N+1 positions")
        if len(off) > 1 and (off[0] < 0 or off[-1] > n or bool(np.any(off[1:] < off[:-1]))):
            raise ValueError(f"offsets must be non-decreasing positions within the {n}-byte buffer")
        return data, off
    if isinstance(values, list) and all(type(v) is bytes for v in values):
        parts = values  # framed already (the image writer's records): joined as they are
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    else:
        parts = [_framed(v) for v in values]
        lens = np.fromiter((len(p) for p in parts), dtype=np.int64, count=len(parts))
    off = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    return b"".join(parts), off


def _framed(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, tuple) and len(v) == 2:
        framed: bytes = encode_metadata_record(v[0], v[1])
        return framed
    raise TypeError(f"a snapshot record is framed bytes or a (message, version) pair, not {type(v).__name__}")


class RecordsSnapshotWriter:
    """Writes a snapshot's records through a :class:`RawSnapshotWriter`.

    Args:
        raw: an empty raw writer (its snapshot id gives the epoch of every batch).
        last_contained_log_timestamp: goes in the SnapshotHeaderRecord.
        max_batch_size: bound on each data batch, header included (see module doc).
        kraft_version: when > 0, a KRaftVersionRecord follows the header (Kafka
            writes it when the cluster's kraft.version is 1).
        voters: a VotersRecord written after it (requires kraft_version > 0).
        clock: returns the current time in ms; read once per batch started
            (inject a fixed sequence to reproduce a file byte for byte).
        compression: codec of every batch.  Boundaries are computed on
            uncompressed sizes (Kafka's are approximate when compressing).
    """

    def __init__(self, raw: RawSnapshotWriter, *, last_contained_log_timestamp: int = 0,
                 max_batch_size: int = MAX_BATCH_SIZE_BYTES, kraft_version: int = 0,
                 voters: VotersRecord | None = None, clock: Callable[[], int] | None = None,
                 compression: Compression | str | int = Compression.NONE) -> None:
        if raw.size_in_bytes != 0:
            raise SnapshotError(f"initializing a records writer with a non-empty snapshot {raw.snapshot_id}")
        if kraft_version == 0 and voters is not None:
            raise SnapshotError("a voter set is not expected when kraft.version is 0")
        if max_batch_size <= HEADER_SIZE:
            raise ValueError(f"max_batch_size {max_batch_size} leaves no room for records")
        self.raw = raw
        self.snapshot_id = raw.snapshot_id
        self.max_batch_size = int(max_batch_size)
        self._clock = clock or _now_ms
        self._compression = Compression.parse(compression)
        self._epoch = raw.snapshot_id.epoch
        self._next_offset = 0
        self._batch: _OpenBatch | None = None
        self._freeze_size = None
        self._buf: bytearray | None = None
        control: list[tuple[ControlRecordType, Any]] = [(ControlRecordType.SNAPSHOT_HEADER,
                    SnapshotHeaderRecord(version=0, last_contained_log_timestamp=last_contained_log_timestamp))]
        if kraft_version > 0:
            control.append((ControlRecordType.KRAFT_VERSION,
                            KRaftVersionRecord(version=0, k_raft_version=kraft_version)))
            if voters is not None:
                control.append((ControlRecordType.KRAFT_VOTERS, voters))
        self._append_control(control)

    # -- properties Kafka's SnapshotWriter exposes --
    @property
    def last_contained_log_offset(self) -> int:
        return self.snapshot_id.end_offset - 1

    @property
    def last_contained_log_epoch(self) -> int:
        return self.snapshot_id.epoch

    @property
    def is_frozen(self) -> bool:
        return self.raw.is_frozen

    @property
    def next_offset(self) -> int:
        """Offset the next record appended will get."""
        return self._next_offset + (self._batch.count if self._batch else 0)

    # -- appending --
    def _check(self) -> None:
        if self.raw.is_frozen:
            raise SnapshotError(f"append not supported: snapshot {self.snapshot_id} is already frozen")

    def _append_control(self, items: Sequence[tuple[ControlRecordType, Any]]) -> None:
        now = int(self._clock())
        recs = [(encode_control_key(t), encode_control_value(t, body), now) for t, body in items]
        self.raw.append(build_batch(recs, base_offset=self._next_offset, partition_leader_epoch=self._epoch,
                                    compression=self._compression, is_control=True, timestamp=now))
        self._next_offset += len(recs)

    def _start_batch(self) -> "_OpenBatch":
        self._batch = _OpenBatch(self._next_offset, int(self._clock()))
        return self._batch

    def _complete_batch(self) -> None:
        b, self._batch = self._batch, None
        if b is None or b.count == 0:
            return
        data, off = b.arrow()
        kwargs: dict[str, Any] = dict(timestamp=b.timestamp, records_per_batch=b.count, base_offset=b.base_offset,
                      partition_leader_epoch=self._epoch, compression=self._compression)
        if self._compression == Compression.NONE:
            # Encode into one buffer reused for every batch, then write(2) it:
            # a fresh 8 MiB result per batch costs ~2,000 page faults to fill
            # and arrives cold at write(2); the reused one stays mapped and
            # mostly cached.  b.size is the exact uncompressed batch size.
            buf = self._encode_buffer(b.size)
            n = build_batches((data, off), out=buf, **kwargs)
            self.raw.append(memoryview(buf)[:n])
        else:
            self.raw.append(build_batches((data, off), **kwargs))
        self._next_offset += b.count

    def _encode_buffer(self, size: int) -> bytearray:
        buf = self._buf
        if buf is None or len(buf) < size:
            buf = getattr(_ENCODE_BUFFERS, "buf", None)   # this thread's last writer's
            if buf is None or len(buf) < size:
                buf = bytearray(max(size, min(self.max_batch_size, 64 << 20)))
            # one per thread: the next writer skips faulting in a fresh one
            _ENCODE_BUFFERS.buf = buf
            self._buf = buf
        return buf

    def append(self, records: Sequence[Any]) -> None:
        """Append records that must share one batch (Kafka's ``SnapshotWriter.append``).

        ``records``: framed values (bytes) and/or ``(message, version)`` pairs,
        or Arrow-style ``(data, offsets)``.
        """
        self._check()
        data, off = _as_arrow(records)
        n = len(off) - 1
        if n == 0:
            return
        b = self._batch or self._start_batch()
        needed = int(record_sizes(np.diff(off), np.arange(b.count, b.count + n)).sum())
        if b.size + needed > self.max_batch_size:
            if HEADER_SIZE + needed > self.max_batch_size:
                raise SnapshotBatchTooLarge(
                    f"{n} records need {HEADER_SIZE + needed} bytes in one batch, more than "
                    f"max_batch_size {self.max_batch_size} (snapshot {self.snapshot_id})")
            self._complete_batch()
            b = self._start_batch()
            needed = int(record_sizes(np.diff(off), np.arange(0, n)).sum())
        b.add(data, off, needed, keep=False)

    def append_framed(self, values: Any) -> None:
        """Bulk append of many framed values, packed greedily into batches.

        ``values``: Arrow-style ``(data, offsets)`` (one buffer holding every
        framed record back to back, ``offsets`` of N+1 positions), or a
        sequence of bytes / ``(message, version)`` pairs.  Same bytes as N
        calls of ``append([value])``, at memcpy+CRC speed: full batches are
        encoded straight from ``data``.
        """
        self._check()
        data, off = _as_arrow(values)
        n = len(off) - 1
        if n == 0:
            return
        base = _body_base(np.diff(off), consume=True)
        body_max = int(base.max())     # + at most 5 bytes of offset-delta varint
        # Lower bound of every record's size (offset delta varint counted as 1
        # byte): its prefix sums bound how many records can fit from any start.
        lower = np.empty(n + 1, dtype=np.int64)
        lower[0] = 0
        body = lower[1:]
        np.add(base, 1, out=body)
        steps = _varint_steps(body, body_max + 1)
        body += 1
        for step in steps:
            body += step
        del steps
        np.cumsum(body, out=body)
        i = 0
        b = self._batch or self._start_batch()
        while i < n:
            room = self.max_batch_size - b.size
            hi = int(np.searchsorted(lower, lower[i] + room, side="right")) - 1  # records i..hi-1 may fit
            k = 0
            if hi > i:
                body = base[i:hi] + _delta_varint_sizes(b.count, hi - i)
                body += _varint_size(body, body_max + 5)
                cum = np.cumsum(body)
                k = int(np.searchsorted(cum, room, side="right"))
            if k == 0:
                if b.count == 0:
                    raise SnapshotBatchTooLarge(
                        f"record {i} of the bulk append ({int(off[i + 1] - off[i])} bytes) does not fit in a batch "
                        f"of max_batch_size {self.max_batch_size} (snapshot {self.snapshot_id})")
                self._complete_batch()
                b = self._start_batch()
                continue
            full = i + k < n  # the next record did not fit: this batch is done
            b.add(data, off[i:i + k + 1], int(cum[k - 1]), keep=full)
            i += k
            if full:
                self._complete_batch()
                b = self._start_batch()

    def freeze(self) -> int:
        """Complete the last batch, write the footer, fsync and publish; return the file size."""
        self._check()
        self._complete_batch()
        self._append_control([(ControlRecordType.SNAPSHOT_FOOTER, SnapshotFooterRecord(version=0))])
        self.raw.freeze()
        return self.raw.size_in_bytes

    def close(self) -> None:
        """Close; a snapshot not frozen is aborted (its ``.part`` removed)."""
        self._batch = None
        self._buf = None
        self.raw.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def create(cls, log_dir: StrPath, snapshot_id: SnapshotId, **kwargs: Any) -> "RecordsSnapshotWriter":
        """A writer of a new snapshot ``snapshot_id`` in ``log_dir``."""
        raw = RawSnapshotWriter(log_dir, snapshot_id)
        try:
            return cls(raw, **kwargs)
        except BaseException:
            raw.close()
            raise


class _OpenBatch:
    """The batch being filled: its base offset, start time, size so far and record segments.

    Segments are (data, offsets) pieces of the callers' buffers.  A piece that
    outlives the call that gave it (``keep=False``) is copied, so callers may
    reuse their buffers.
    """
    __slots__ = ("base_offset", "timestamp", "size", "count", "segments")

    def __init__(self, base_offset: int, timestamp: int) -> None:
        self.base_offset = base_offset
        self.timestamp = timestamp
        self.size = HEADER_SIZE
        self.count = 0
        self.segments: list[tuple[Any, np.ndarray]] = []

    def add(self, data: Any, off: np.ndarray, nbytes: int, keep: bool) -> None:
        if not keep:
            lo, hi = int(off[0]), int(off[-1])
            data = bytes(memoryview(data).cast("B")[lo:hi])
            off = off - lo
        self.segments.append((data, off))
        self.size += nbytes
        self.count += len(off) - 1

    def arrow(self) -> tuple[object, np.ndarray]:
        if len(self.segments) == 1:
            return self.segments[0]
        parts: list[memoryview] = []
        offs, pos = [np.zeros(1, np.int64)], 0
        for data, off in self.segments:
            lo, hi = int(off[0]), int(off[-1])
            parts.append(memoryview(data).cast("B")[lo:hi])
            offs.append(off[1:] - lo + pos)
            pos += hi - lo
        return b"".join(parts), np.concatenate(offs)


# ---------------------------------------------------------------------------
# Reader
# ---------------------------------------------------------------------------

class RecordsSnapshotReader:
    """A frozen snapshot, checked and decoded columnar.

    Opening scans every batch (CRC-checked unless ``verify_crc=False``),
    decodes the first and last batches, and checks the layout; the data
    section is decoded on demand.

    Attributes:
        snapshot_id: from the file name (or given; BOOTSTRAP for ``bootstrap.checkpoint``).
        header: the SnapshotHeaderRecord.  ``footer``: the SnapshotFooterRecord.
        kraft_version: from a KRaftVersionRecord after the header, else 0.
        voters: the VotersRecord after it, or None.
        control_batches: BATCH_DTYPE rows of the header and footer batches.
        batches: BATCH_DTYPE rows of the data batches (positions in the file).
    """

    def __init__(self, source: RawSnapshotReader | StrPath, *, snapshot_id: SnapshotId | None = None,
                 verify_crc: bool = True) -> None:
        if isinstance(source, RawSnapshotReader):
            self.raw, self._owns = source, False
        else:
            self.raw, self._owns = RawSnapshotReader(source, snapshot_id), True
        try:
            self.snapshot_id = snapshot_id if snapshot_id is not None else self.raw.snapshot_id
            self.name = str(self.raw.path)
            self._buf: memoryview | None = self.raw.buffer
            self._load(verify_crc)
        except BaseException:
            self.close()
            raise

    @classmethod
    def open(cls, log_dir: StrPath, snapshot_id: SnapshotId, **kwargs: Any) -> "RecordsSnapshotReader":
        return cls(RawSnapshotReader.open(log_dir, snapshot_id), **kwargs)._owning()

    def _owning(self) -> Self:
        self._owns = True
        return self

    def _fail(self, msg: str, row: Any = None) -> SnapshotError:
        where = f"{self.name}"
        if row is not None:
            where += f", position {int(row['position'])}, batch base offset {int(row['base_offset'])}"
        return SnapshotError(f"{msg} ({where})")

    def _controls(self, row: Any) -> list[tuple[ControlRecordType, Any]]:
        """(type, body) of every record of control batch ``row``."""
        cols = decode_record_columns(self._buf, row.reshape(1), source=self.name)
        out: list[tuple[ControlRecordType, Any]] = []
        for i in range(len(cols)):
            try:
                out.append(decode_control_record(cols.key(i), cols.value(i)))
            except MessageError as exc:
                raise CorruptRecordError(f"bad control record at offset {int(cols.offset[i])}: {exc}",
                                         int(row["position"]), int(row["base_offset"]), self.name) from None
        return out

    def _load(self, verify_crc: bool) -> None:
        scan = scan_batches(self._buf, verify_crc=verify_crc, source=self.name)
        h = scan.headers
        if len(h) < 2:
            raise self._fail(f"a snapshot needs a header batch and a footer batch, found {len(h)} batch(es)")
        control = (h["attributes"] & CONTROL_MASK) != 0
        if not control[0]:
            raise self._fail("first batch is not a control batch (snapshot header missing)", h[0])
        if not control[-1]:
            raise self._fail("last batch is not a control batch (snapshot footer missing)", h[-1])
        middle = np.flatnonzero(control[1:-1])
        if len(middle):
            raise self._fail("control batch inside the data section of a snapshot", h[1 + int(middle[0])])
        first = self._controls(h[0])
        if not first or first[0][0] != ControlRecordType.SNAPSHOT_HEADER:
            got = first[0][0].name if first else "no record"
            raise self._fail(f"first record is not a SnapshotHeader ({got})", h[0])
        self.header: SnapshotHeaderRecord = first[0][1]
        self.kraft_version = 0
        self.voters: VotersRecord | None = None
        for ctype, body in first[1:]:
            if ctype == ControlRecordType.KRAFT_VERSION:
                self.kraft_version = body.k_raft_version
            elif ctype == ControlRecordType.KRAFT_VOTERS:
                self.voters = body
            else:
                raise self._fail(f"unexpected {ctype.name} control record in the snapshot header batch", h[0])
        last = self._controls(h[-1])
        if not last or any(t != ControlRecordType.SNAPSHOT_FOOTER for t, _ in last) or len(last) != 1:
            got = ", ".join(t.name for t, _ in last) or "no record"
            raise self._fail(f"last batch is not a single SnapshotFooter ({got})", h[-1])
        self.footer: SnapshotFooterRecord = last[0][1]
        self.control_batches = h[[0, -1]]
        self.batches = h[1:-1]

    @property
    def last_contained_log_timestamp(self) -> int:
        ts: int = self.header.last_contained_log_timestamp
        return ts

    @property
    def size_in_bytes(self) -> int:
        return self.raw.size_in_bytes

    @property
    def records_count(self) -> int:
        """Number of data records (header/footer excluded)."""
        return int(self.batches["records_count"].sum(dtype=np.int64))

    def records(self) -> RecordColumns:
        """Every data record of the snapshot, as columns (zero copy when uncompressed)."""
        return decode_record_columns(self._buf, self.batches, source=self.name)

    def iter_batches(self) -> Iterator[tuple[np.ndarray, RecordColumns]]:
        """``(batch header row, its RecordColumns)`` for each data batch, in order."""
        for i in range(len(self.batches)):
            yield self.batches[i], decode_record_columns(self._buf, self.batches[i:i + 1], source=self.name)

    def values(self) -> tuple[object, np.ndarray]:
        """The data records' framed values Arrow-style ``(data, offsets)`` (one copy).

        Feeding them to ``RecordsSnapshotWriter.append_framed`` re-creates the
        records; with the same boundaries and clock, the same bytes.
        """
        cols = self.records()
        if np.any(cols.value_len < 0):
            raise self._fail("a data record has a null value")
        lens = cols.value_len.astype(np.int64)
        off = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens, out=off[1:])
        mv = memoryview(cols.data).cast("B")
        if len(lens) == 0:
            return b"", off
        # Values of consecutive records are not adjacent on disk: gather them.
        data = b"".join(mv[p:p + n] for p, n in zip(cols.value_pos.tolist(), lens.tolist()))
        return data, off

    def metadata_records(self) -> Iterator[tuple[int, int, int, object]]:
        """``(offset, api_key, version, message)`` for every data record (convenience, not fast)."""
        cols = self.records()
        for i in range(len(cols)):
            off = int(cols.offset[i])
            api_key, version, msg = decode_metadata_record(cols.value(i), off)
            yield off, api_key, version, msg

    def close(self) -> None:
        self._buf = None
        if getattr(self, "_owns", False) and getattr(self, "raw", None) is not None:
            self.raw.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"RecordsSnapshotReader({Path(self.name).name}, id={self.snapshot_id}, "
                f"{len(self.batches)} data batches, {self.records_count} records)")


# ---------------------------------------------------------------------------
# bootstrap.checkpoint (pre-KIP-853 bootstrap file)
# ---------------------------------------------------------------------------

def read_bootstrap_checkpoint(path: StrPath, **kwargs: Any) -> RecordsSnapshotReader:
    """Open ``<log dir>/bootstrap.checkpoint`` (or a directory holding it) as snapshot (0, 0)."""
    p = Path(path)
    if p.is_dir():
        p = p / BOOTSTRAP_FILENAME
    return RecordsSnapshotReader(p, snapshot_id=BOOTSTRAP_SNAPSHOT_ID, **kwargs)


def write_bootstrap_checkpoint(directory: StrPath, records: Sequence[Any], *, clock: Callable[[], int] | None = None,
                               max_batch_size: int = MAX_BATCH_SIZE_BYTES) -> Path:
    """Write ``<directory>/bootstrap.checkpoint`` as ``kafka-storage format`` does.

    All ``records`` go in one ``append`` (one data batch), as Kafka's
    BootstrapDirectory does; header timestamp 0, epoch 0.  Written to a
    ``.part`` and renamed, so an existing file is replaced atomically.
    """
    d = Path(directory)
    dest = d / BOOTSTRAP_FILENAME
    raw = RawSnapshotWriter(d, BOOTSTRAP_SNAPSHOT_ID, path=dest)
    with RecordsSnapshotWriter(raw, clock=clock, max_batch_size=max_batch_size) as w:
        w.append(records)
        w.freeze()
    return dest
