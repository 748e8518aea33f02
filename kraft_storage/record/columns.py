"""Columnar record decoding: many batches into flat numpy arrays, no object per record.

``decode_records(buf)`` scans and CRC-checks the batches in ``buf`` and
decodes every record into :class:`RecordColumns`: parallel arrays of offset,
timestamp, key and value positions/lengths, header positions/counts, the
record's batch row and its attributes byte.  Keys and values are *positions
into* ``RecordColumns.data``: when no batch is compressed, ``data`` is the
caller's buffer itself (zero copy); otherwise it is a new buffer holding each
batch's records section, decompressed, back to back.

This is what replay uses: the Raft listener, the metadata loader and the
Spark reader all consume columns, and only convenience code asks for
:class:`Record` objects (:meth:`RecordColumns.records`).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from kraft_storage.accel import load
from kraft_storage.errors import CorruptRecordError, UnsupportedCompression
from kraft_storage.record import compression as _compression
from kraft_storage.record.batch import BatchScan, scan_batches
from kraft_storage.record.constants import COMPRESSION_MASK, HEADER_SIZE

if TYPE_CHECKING:
    from typing import TypeAlias

    from kraft_storage._contracts import BatchKernel, RecordLike

    #: The ten column arrays, in RecordColumns' field order (offset ... attributes).
    _Columns: TypeAlias = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                np.ndarray, np.ndarray, np.ndarray, np.ndarray]

_k = cast("BatchKernel", load("_batch"))
Record = _k.Record

_OK, _CAPACITY = 0, 3
_NO_OFFSET = -(2**63)


@dataclass
class RecordColumns:
    """Decoded records, one array entry per record (all arrays the same length).

    ``key_len``/``value_len`` are -1 for null.  ``batch`` indexes
    ``batches`` (the BATCH_DTYPE rows the records came from).  Positions
    index ``data``.
    """
    data: Any  # the caller's buffer (bytes, mmap, memoryview...) or the decompressed bytes
    batches: np.ndarray
    offset: np.ndarray
    timestamp: np.ndarray
    key_pos: np.ndarray
    key_len: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    headers_pos: np.ndarray
    headers_count: np.ndarray
    batch: np.ndarray
    attributes: np.ndarray
    #: The full-capacity arrays the columns are views of (see ``reuse`` in decode_record_columns).
    storage: _Columns | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.offset)

    def _cols(self) -> tuple[np.ndarray, ...]:
        return (self.offset, self.timestamp, self.key_pos, self.key_len, self.value_pos,
                self.value_len, self.headers_pos, self.headers_count, self.batch, self.attributes)

    def records(self, lo: int = 0, hi: int | None = None) -> list[RecordLike]:
        """Record objects for rows [lo, hi) (convenience; allocates per record)."""
        hi = len(self) if hi is None else hi
        return _k.make_records(self.data, self._cols(), lo, hi)

    def __iter__(self) -> Iterator[RecordLike]:
        """Record objects one at a time (convenience; allocates per record)."""
        return _k.iter_records(self.data, self._cols(), 0, len(self))

    def key(self, i: int) -> bytes | None:
        n = int(self.key_len[i])
        if n < 0:
            return None
        p = int(self.key_pos[i])
        return bytes(memoryview(self.data).cast("B")[p:p + n])

    def value(self, i: int) -> bytes | None:
        n = int(self.value_len[i])
        if n < 0:
            return None
        p = int(self.value_pos[i])
        return bytes(memoryview(self.data).cast("B")[p:p + n])

    def values(self) -> list[bytes | None]:
        """Every value as bytes (or None), in record order."""
        mv = memoryview(self.data).cast("B")
        return [None if n < 0 else bytes(mv[p:p + n])
                for p, n in zip(self.value_pos.tolist(), self.value_len.tolist())]

    def headers(self, i: int) -> tuple[tuple[bytes | None, bytes | None], ...]:
        c = int(self.headers_count[i])
        return _k.parse_headers(self.data, int(self.headers_pos[i]), c) if c else ()

    def is_control(self) -> np.ndarray:
        """Boolean mask: which records sit in control batches."""
        mask: np.ndarray = (self.batches["attributes"][self.batch] & 0x20) != 0
        return mask


def _empty_columns(n: int) -> _Columns:
    return (np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64),
            np.empty(n, np.int32), np.empty(n, np.int64), np.empty(n, np.int32),
            np.empty(n, np.int64), np.empty(n, np.int32), np.empty(n, np.int32),
            np.empty(n, np.int8))


def decode_record_columns(buf: Any, headers: np.ndarray, *, source: str | None = None,
                          reuse: RecordColumns | None = None) -> RecordColumns:
    """Decode the records of the batches described by ``headers`` (rows from a scan of ``buf``)
    into :class:`RecordColumns`, numpy columns with no Python object per record.  (The Raft
    adapter's ``decode_raft_batches`` is another thing: bytes into the core's batches.)

    ``reuse``: a RecordColumns from an earlier call whose arrays may be
    overwritten.  When they are big enough the records are decoded into them
    (the result's columns are views of the same memory, and ``reuse`` must
    not be read afterwards); replaying a log segment after segment this way
    touches no fresh memory, which costs more than decoding on small VMs.
    """
    nb = len(headers)
    comp = headers["attributes"] & COMPRESSION_MASK
    if nb and comp.any():
        data, rs, re_ = _decompress_all(buf, headers, comp, source)
    else:
        data = buf
        rs = headers["position"] + HEADER_SIZE
        re_ = headers["position"] + headers["size"]
    rs = np.ascontiguousarray(rs, dtype=np.int64)
    re_ = np.ascontiguousarray(re_, dtype=np.int64)
    hdr = np.ascontiguousarray(headers)
    if not hdr.flags.writeable:
        hdr = hdr.copy()
    total = int(hdr["records_count"].sum(dtype=np.int64))
    # A corrupt count cannot make us allocate more than the bytes can hold.
    limit = int((re_ - rs).sum()) // 7 + 1
    need = min(total, limit)
    if reuse is not None and reuse.storage is not None and len(reuse.storage[0]) >= need:
        storage = reuse.storage
    else:
        storage = _empty_columns(need)
    cols = storage if len(storage[0]) == need else cast("_Columns", tuple(c[:need] for c in storage))
    rows = np.arange(nb, dtype=np.int32)
    status, n, msg, epos, ebo = _k.decode_records(data, hdr, rs, re_, rows, cols, 0)
    if status != _OK:
        msg = cast(str, msg)
        if data is not buf:
            msg += " (in the decompressed records)"
        raise CorruptRecordError(msg, epos, None if ebo == _NO_OFFSET else ebo, source)
    if n != len(cols[0]):
        cols = cast("_Columns", tuple(c[:n] for c in cols))
    return RecordColumns(data, headers, *cols, storage=storage)


def _decompress_all(buf: Any, headers: np.ndarray, comp: np.ndarray,
                    source: str | None) -> tuple[bytes, np.ndarray, np.ndarray]:
    mv = memoryview(buf).cast("B")
    pos_col = headers["position"].tolist()
    size_col = headers["size"].tolist()
    comp_l = comp.tolist()
    bodies = [mv[p + HEADER_SIZE:p + s] for p, s in zip(pos_col, size_col)]
    jobs = [(c, b) for c, b in zip(comp_l, bodies) if c]
    results = iter(_compression.decompress_many(jobs))
    parts: list[bytes | memoryview] = []
    rs = np.empty(len(headers), np.int64)
    re_ = np.empty(len(headers), np.int64)
    pos = 0
    body: memoryview | bytes | Exception
    for i, body in enumerate(bodies):
        if comp_l[i]:
            body = next(results)
            if isinstance(body, Exception):
                p, bo = pos_col[i], int(headers[i]["base_offset"])
                if isinstance(body, UnsupportedCompression):
                    raise UnsupportedCompression(f"{body} (batch base offset {bo}, position {p})") from None
                raise CorruptRecordError(str(body), p, bo, source) from None
        parts.append(body)
        rs[i] = pos
        pos += len(body)
        re_[i] = pos
    return b"".join(parts), rs, re_


def decode_records(buf: Any, start: int = 0, end: int | None = None, *, verify_crc: bool = True,
                   allow_partial_tail: bool = False, source: str | None = None,
                   reuse: RecordColumns | None = None) -> RecordColumns:
    """Scan ``buf[start:end]`` (CRC-checked by default) and decode every record into columns.

    ``reuse`` recycles the arrays of an earlier result (see :func:`decode_record_columns`).
    """
    scan: BatchScan = scan_batches(buf, start, end, verify_crc=verify_crc,
                                   allow_partial_tail=allow_partial_tail, source=source)
    return decode_record_columns(buf, scan.headers, source=source, reuse=reuse)
