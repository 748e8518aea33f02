"""Walking record batches in a buffer: the columnar batch index and lazy batch views.

``scan_batches`` is the hot path: one native call walks a whole segment (or
any bytes/mmap/memoryview), validates each batch's size, magic and CRC-32C,
and fills a numpy array of batch headers (``BATCH_DTYPE``) -- one row per
batch, no Python object per batch.  The segmented log uses it for recovery
and index rebuilds, Fetch uses it to find batch boundaries, the Spark reader
uses it to split files.

``iter_batches`` / :class:`RecordBatch` are the convenience view on top.

Invariant kept here: a scan never reports a batch that is not entirely inside
``[start, end)``; everything before ``BatchScan.end`` is whole, valid batches
(CRC-checked unless the caller said otherwise).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from kraft_storage._common import BATCH_DTYPE as BATCH_DTYPE  # in the leaf (shared with the kernels); exported here
from kraft_storage.accel import load
from kraft_storage.errors import CorruptRecordError
from kraft_storage.record.constants import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Compression,
    TimestampType,
)

if TYPE_CHECKING:
    from kraft_storage._contracts import BatchKernel, RecordLike
    from kraft_storage.record.columns import RecordColumns

_k = cast("BatchKernel", load("_batch"))


CRC_SKIP, CRC_VERIFY, CRC_REPORT = 0, 1, 2
_OK, _TRUNCATED, _CORRUPT, _CAPACITY = 0, 1, 2, 3
_NO_OFFSET = -(2**63)


def _buffer_len(buf: Any) -> int:
    return memoryview(buf).nbytes


@dataclass
class BatchScan:
    """Result of :func:`scan_batches`.

    Attributes:
        headers: BATCH_DTYPE array, one row per whole batch found, in order.
        start, end: byte range scanned; ``end`` is the position after the
            last whole batch (where a writer would append, or a reader stop).
        error: the problem that stopped the scan early, or None.  A torn
            tail is reported as an error whose ``truncated`` flag is set.
        truncated: True when the scan stopped at a partial batch.
    """
    headers: np.ndarray
    start: int
    end: int
    error: CorruptRecordError | None = None
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.headers)

    @property
    def base_offsets(self) -> np.ndarray:
        return self.headers["base_offset"]

    @property
    def last_offsets(self) -> np.ndarray:
        last: np.ndarray = self.headers["base_offset"] + self.headers["last_offset_delta"]
        return last

    @property
    def records_total(self) -> int:
        return int(self.headers["records_count"].sum(dtype=np.int64))


def scan_batches(buf: Any, start: int = 0, end: int | None = None, *, verify_crc: bool = True,
                 crc_mode: int | None = None, allow_partial_tail: bool = False,
                 raise_on_error: bool = True, max_batch_size: int = 0,
                 source: str | None = None) -> BatchScan:
    """Walk the batches in ``buf[start:end]`` into a columnar :class:`BatchScan`.

    Args:
        buf: anything exposing the buffer protocol (bytes, bytearray, mmap,
            memoryview, numpy uint8 array).  Not copied.
        verify_crc: compute and check each batch's CRC-32C (stops at a bad one).
        crc_mode: overrides verify_crc: CRC_SKIP, CRC_VERIFY or CRC_REPORT
            (compute, record ``crc_valid`` per row, keep going).
        allow_partial_tail: a batch cut off by ``end`` ends the scan quietly
            (normal for a Fetch response cut at max_bytes); otherwise it is
            an error.
        raise_on_error: raise the CorruptRecordError; if False it is returned
            in ``BatchScan.error`` with every good batch before it.
        max_batch_size: reject batches larger than this (0 = 2 GiB).
        source: file name for error messages.
    """
    total = _buffer_len(buf)
    if end is None:
        end = total
    if not (0 <= start <= end <= total):
        raise ValueError(f"scan range [{start}, {end}) outside buffer of {total} bytes")
    if crc_mode is None:
        crc_mode = CRC_VERIFY if verify_crc else CRC_SKIP
    cap = min(max((end - start) // 61 + 1, 1), 4096)
    chunks: list[np.ndarray] = []
    pos = start
    while True:
        out = np.empty(cap, dtype=BATCH_DTYPE)
        status, n, pos, msg, epos, ebo = _k.scan(buf, pos, end, crc_mode, max_batch_size, out)
        chunks.append(out[:n])
        if status != _CAPACITY:
            break
        cap = min(cap * 2, 1 << 20)
    headers = chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    scan = BatchScan(headers, start, pos)
    if status in (_TRUNCATED, _CORRUPT):
        scan.truncated = status == _TRUNCATED
        if scan.truncated and allow_partial_tail:
            return scan
        scan.error = CorruptRecordError(cast(str, msg), epos, None if ebo == _NO_OFFSET else ebo, source)
        if raise_on_error:
            raise scan.error
    return scan


class RecordBatch:
    """A lazy view of one batch inside a buffer.

    Header fields are read from the scan's row on access; records are decoded
    only when asked for (:meth:`records`, :meth:`decode`).  The view keeps a
    reference to the buffer: with an mmap, keep the mmap open while using it.
    """

    __slots__ = ("_buf", "_headers", "_i", "source")

    def __init__(self, buf: Any, headers: np.ndarray, index: int, source: str | None = None) -> None:
        self._buf = buf
        self._headers = headers
        self._i = index
        self.source = source

    @classmethod
    def parse(cls, buf: Any, position: int = 0, *, verify_crc: bool = True) -> "RecordBatch":
        """The single batch starting at ``position``."""
        out = np.empty(1, dtype=BATCH_DTYPE)
        end = _buffer_len(buf)
        status, n, _pos, msg, epos, ebo = _k.scan(buf, position, end,
                                                  CRC_VERIFY if verify_crc else CRC_SKIP, 0, out)
        if n == 0:
            if status == _OK:
                raise CorruptRecordError("no batch: the buffer is empty", position)
            raise CorruptRecordError(cast(str, msg), epos, None if ebo == _NO_OFFSET else ebo)
        return cls(buf, out, 0)

    def _f(self, name: str) -> int:
        return int(self._headers[self._i][name])

    # -- header fields (Kafka names, Python style) --
    @property
    def position(self) -> int:
        return self._f("position")

    @property
    def base_offset(self) -> int:
        return self._f("base_offset")

    @property
    def size_in_bytes(self) -> int:
        return self._f("size")

    @property
    def partition_leader_epoch(self) -> int:
        return self._f("partition_leader_epoch")

    @property
    def magic(self) -> int:
        return self._f("magic")

    @property
    def crc(self) -> int:
        return self._f("crc")

    @property
    def attributes(self) -> int:
        return self._f("attributes")

    @property
    def last_offset_delta(self) -> int:
        return self._f("last_offset_delta")

    @property
    def base_timestamp(self) -> int:
        return self._f("base_timestamp")

    @property
    def max_timestamp(self) -> int:
        return self._f("max_timestamp")

    @property
    def producer_id(self) -> int:
        return self._f("producer_id")

    @property
    def producer_epoch(self) -> int:
        return self._f("producer_epoch")

    @property
    def base_sequence(self) -> int:
        return self._f("base_sequence")

    @property
    def records_count(self) -> int:
        return self._f("records_count")

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType.LOG_APPEND_TIME if self.attributes & TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)

    @property
    def crc_valid(self) -> bool | None:
        v = self._f("crc_valid")
        return None if v < 0 else bool(v)

    def is_valid(self) -> bool:
        """Recompute the CRC-32C over the batch bytes."""
        from kraft_storage.crc32c import crc32c
        p = self.position
        mv = memoryview(self._buf).cast("B")
        return crc32c(mv[p + 21:p + self.size_in_bytes]) == self.crc

    def raw(self) -> memoryview:
        """The batch's bytes (a zero-copy view)."""
        p = self.position
        return memoryview(self._buf).cast("B")[p:p + self.size_in_bytes]

    def header_row(self) -> np.ndarray:
        return self._headers[self._i:self._i + 1]

    def decode(self) -> RecordColumns:
        """This batch's records as columns (see :func:`decode_records`)."""
        from kraft_storage.record.columns import decode_record_columns
        return decode_record_columns(self._buf, self.header_row(), source=self.source)

    def records(self) -> list[RecordLike]:
        """This batch's records as Record objects (convenience)."""
        return self.decode().records()

    def __iter__(self) -> Iterator[RecordLike]:
        return iter(self.records())

    def __repr__(self) -> str:
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
                f"count={self.records_count}, position={self.position}, size={self.size_in_bytes}, "
                f"epoch={self.partition_leader_epoch}, compression={self.compression.name.lower()}, "
                f"control={self.is_control})")


def iter_batches(buf: Any, position: int = 0, end: int | None = None, *, verify_crc: bool = True,
                 allow_partial_tail: bool = False, source: str | None = None) -> Iterator[RecordBatch]:
    """Yield every whole batch in ``buf[position:end]``, then raise on any damage.

    Batches are scanned natively in chunks; each yielded :class:`RecordBatch`
    is a lazy view.  If the data is corrupt, every good batch before the bad
    point is yielded first, then :class:`CorruptRecordError` is raised.
    """
    total = _buffer_len(buf)
    if end is None:
        end = total
    if not (0 <= position <= end <= total):
        raise ValueError(f"range [{position}, {end}) outside buffer of {total} bytes")
    crc_mode = CRC_VERIFY if verify_crc else CRC_SKIP
    cap = 64
    pos = position
    while True:
        out = np.empty(cap, dtype=BATCH_DTYPE)
        status, n, pos, msg, epos, ebo = _k.scan(buf, pos, end, crc_mode, 0, out)
        for i in range(n):
            yield RecordBatch(buf, out, i, source)
        if status == _CAPACITY:
            cap = min(cap * 4, 8192)
            continue
        if status == _OK or (status == _TRUNCATED and allow_partial_tail):
            return
        raise CorruptRecordError(cast(str, msg), epos, None if ebo == _NO_OFFSET else ebo, source)
