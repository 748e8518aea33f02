"""Building record batches: one batch from Python objects, or many in bulk.

* :func:`build_batch` -- convenience: a list of records (objects with
  ``key``/``value``/``headers``/``timestamp`` and optionally ``offset``, or
  ``(key, value)`` / ``(key, value, timestamp)`` / ``(key, value, timestamp,
  headers)`` tuples) into one batch.  Every header field can be set, so a
  decoded batch re-encodes to identical bytes.
* :func:`build_batches` -- bulk: N records given Arrow-style (one contiguous
  buffer + N+1 offsets for values, the same for keys, an int64 timestamps
  array) cut into batches of ``records_per_batch`` in one native call
  (uncompressed), or one native call per batch plus the codec (compressed).
"""
from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast, overload

import numpy as np

from kraft_storage._common import zigzag_varint
from kraft_storage.accel import load
from kraft_storage.record import compression as _compression
from kraft_storage.record.constants import (
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    Compression,
    TimestampType,
    make_attributes,
)

if TYPE_CHECKING:
    import mmap
    from typing import TypeAlias, TypedDict, Unpack

    from typing_extensions import Buffer

    from kraft_storage._contracts import BatchKernel

    #: What ``build_batches(out=...)`` writes into.
    _Writable: TypeAlias = bytearray | memoryview | mmap.mmap | np.ndarray

    class _BatchOptions(TypedDict, total=False):
        """The keyword arguments of :func:`build_batches` besides ``return_positions`` and
        ``out`` (which pick its return type): typed once for its overloads."""
        keys: Any
        timestamps: Any
        records_per_batch: int
        base_offset: int
        partition_leader_epoch: int
        compression: Compression | str | int
        timestamp: int | None
        is_transactional: bool
        is_control: bool
        producer_id: int
        producer_epoch: int
        base_sequence: int

_k = cast("BatchKernel", load("_batch"))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _fields(r: Any, i: int, base_offset: int,
            default_ts: int) -> tuple[int, int, Any, Any, tuple[tuple[bytes | None, bytes | None], ...]]:
    """(offset_delta, timestamp, key, value, headers) of one convenience record."""
    if isinstance(r, tuple):
        key, value = r[0], r[1]
        ts = r[2] if len(r) > 2 and r[2] is not None else default_ts
        headers = r[3] if len(r) > 3 else ()
        od = i
    else:
        key, value = r.key, r.value
        ts = getattr(r, "timestamp", None)
        ts = default_ts if ts is None else ts
        headers = getattr(r, "headers", ()) or ()
        off = getattr(r, "offset", None)
        od = i if off is None else off - base_offset
    return od, int(ts), key, value, tuple(headers)


def _encode_records(records: Iterable[tuple[int, int, bytes | None, bytes | None, Any]]) -> bytes:
    """Record bodies from (offset_delta, timestamp_delta, key, value, headers) tuples: the
    general form, with headers, of the convenience builder (not a kernel: the bulk paths
    below are the native ``_batch.encode_records``/``encode_batches``; this one builds a
    few records from Python objects, so it stays Python in both worlds)."""
    out = bytearray()
    for od, tsd, k, v, headers in records:
        body = bytearray(b"\x00")
        body += zigzag_varint(tsd, 64)
        body += zigzag_varint(od, 32)
        body += zigzag_varint(-1 if k is None else len(k), 32)
        if k:
            body += k
        body += zigzag_varint(-1 if v is None else len(v), 32)
        if v:
            body += v
        body += zigzag_varint(len(headers), 32)
        for hk, hv in headers:
            hkb = hk.encode() if isinstance(hk, str) else bytes(hk)
            body += zigzag_varint(len(hkb), 32)
            body += hkb
            body += zigzag_varint(-1 if hv is None else len(hv), 32)
            if hv:
                body += hv
        out += zigzag_varint(len(body), 32)
        out += body
    return bytes(out)


def build_batch(records: Sequence[Any], *, base_offset: int = 0, partition_leader_epoch: int = 0,
                compression: Compression | str | int = Compression.NONE,
                timestamp_type: TimestampType = TimestampType.CREATE_TIME,
                is_transactional: bool = False, is_control: bool = False,
                has_delete_horizon: bool = False,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, timestamp: int | None = None,
                base_timestamp: int | None = None, max_timestamp: int | None = None,
                last_offset_delta: int | None = None) -> bytes:
    """One v2 batch from ``records``; returns its bytes (header, CRC and all).

    Defaults follow Kafka's MemoryRecordsBuilder: the base timestamp is the
    first record's, the max timestamp the largest, the last offset delta is
    the last record's offset delta.  ``timestamp`` is used for records that
    carry none (default: now).
    """
    records = list(records)
    if not records:
        raise ValueError("a record batch needs at least one record")
    default_ts = _now_ms() if timestamp is None else timestamp
    fields = [_fields(r, i, base_offset, default_ts) for i, r in enumerate(records)]
    for od, _, key, value, _h in fields:
        if not 0 <= od <= 0x7FFFFFFF:
            raise ValueError(f"record offset delta {od} out of range for base offset {base_offset}")
        for what, v in (("key", key), ("value", value)):
            if v is not None and not isinstance(v, (bytes, bytearray, memoryview)):
                raise TypeError(f"record {what} must be bytes or None, not {type(v).__name__}")
    bts = fields[0][1] if base_timestamp is None else base_timestamp
    mts = max(f[1] for f in fields) if max_timestamp is None else max_timestamp
    lod = fields[-1][0] if last_offset_delta is None else last_offset_delta
    body = _encode_records(
        (od, ts - bts, None if k is None else bytes(k), None if v is None else bytes(v), h)
        for od, ts, k, v, h in fields)
    comp = Compression.parse(compression)
    if comp:
        body = _compression.compress(comp, body)
    attrs = make_attributes(comp, int(timestamp_type), is_transactional, is_control, has_delete_horizon)
    return _k.write_batch(body, base_offset, partition_leader_epoch, attrs, lod, bts, mts,
                          producer_id, producer_epoch, base_sequence, len(fields))


def pack_buffers(items: Iterable[Any]) -> tuple[bytes, np.ndarray, np.ndarray | None]:
    """Sequence of bytes-or-None -> (data, offsets[n+1], null mask or None)."""
    items = cast("Sequence[Any]", items if type(items) in (list, tuple) else list(items))
    packed = _k.pack_bytes(items)  # the common case: all bytes, no None (one native pass)
    if packed is not None:
        return packed[0], packed[1], None
    lens = np.fromiter((0 if x is None else len(x) for x in items), dtype=np.int64, count=len(items))
    off = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum(lens, out=off[1:])
    nulls = np.fromiter((x is None for x in items), dtype=np.uint8, count=len(items))
    data = b"".join(b"" if x is None else bytes(x) for x in items)
    return data, off, (nulls if nulls.any() else None)


def _arrow(arg: Any, n_expected: int | None = None) -> tuple[Any, np.ndarray | None, np.ndarray | None]:
    """Accept a sequence of bytes/None, or (data, offsets) / (data, offsets, nulls)."""
    if arg is None:
        return None, None, None
    if isinstance(arg, tuple) and len(arg) in (2, 3) and not isinstance(arg[1], (bytes, type(None))):
        data, off = arg[0], np.ascontiguousarray(arg[1], dtype=np.int64)
        nulls = np.ascontiguousarray(arg[2], dtype=np.uint8) if len(arg) == 3 and arg[2] is not None else None
        return data, off, nulls
    return pack_buffers(arg)


@overload
def build_batches(values: Any, *, return_positions: Literal[False] = ..., out: None = ...,
                  **options: Unpack[_BatchOptions]) -> bytes: ...
@overload
def build_batches(values: Any, *, return_positions: Literal[False] = ..., out: _Writable,
                  **options: Unpack[_BatchOptions]) -> int: ...
@overload
def build_batches(values: Any, *, return_positions: Literal[True], out: None = ...,
                  **options: Unpack[_BatchOptions]) -> tuple[bytes, np.ndarray]: ...
@overload
def build_batches(values: Any, *, return_positions: Literal[True], out: _Writable,
                  **options: Unpack[_BatchOptions]) -> tuple[int, np.ndarray]: ...
def build_batches(values: Any, *, keys: Any = None, timestamps: Any = None, records_per_batch: int = 1000,
                  base_offset: int = 0, partition_leader_epoch: int = 0,
                  compression: Compression | str | int = Compression.NONE,
                  timestamp: int | None = None, is_transactional: bool = False,
                  is_control: bool = False, producer_id: int = NO_PRODUCER_ID,
                  producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                  return_positions: bool = False,
                  out: _Writable | None = None) -> bytes | int | tuple[bytes | int, np.ndarray]:
    """Encode N records into consecutive batches of ``records_per_batch``.

    Args:
        values: a sequence of bytes/None, or Arrow-style ``(data, offsets)``
            or ``(data, offsets, null_mask)`` with ``len(offsets) == N + 1``.
        keys: same forms, or None for all-null keys (metadata records).
        timestamps: int64 array of N timestamps, or None for ``timestamp``
            (default now) on every record.
        out: optional writable buffer (bytearray, mmap, numpy uint8 array...)
            to write the batches into, from its start; then the number of
            bytes written is returned instead of a new bytes object.  Reusing
            one buffer avoids faulting in fresh memory on every call.
    Returns the bytes of all batches (or their size when ``out`` is given),
    plus the batch start positions if asked.
    """
    vals, voff, vnull = _arrow(values)
    ks, koff, knull = _arrow(keys)
    if voff is None:
        raise ValueError("values are required")
    n = len(voff) - 1
    if koff is not None and len(koff) - 1 != n:
        raise ValueError(f"{len(koff) - 1} keys for {n} values")
    ts = None if timestamps is None else np.ascontiguousarray(timestamps, dtype=np.int64)
    if ts is not None and len(ts) != n:
        raise ValueError(f"{len(ts)} timestamps for {n} values")
    if records_per_batch <= 0:
        raise ValueError("records_per_batch must be positive")
    default_ts = _now_ms() if timestamp is None else timestamp
    comp = Compression.parse(compression)
    attrs = make_attributes(comp, 0, is_transactional, is_control)
    if comp == Compression.NONE:
        res, positions = _k.encode_batches(ks, koff, knull, vals, voff, vnull, ts, default_ts,
                                           records_per_batch, base_offset, partition_leader_epoch,
                                           attrs, producer_id, producer_epoch, base_sequence, out)
        return (res, positions) if return_positions else res
    spans = [(lo, min(lo + records_per_batch, n)) for lo in range(0, n, records_per_batch)]
    bodies: list[bytes] = []
    stamps: list[tuple[int, int]] = []
    for lo, hi in spans:
        bts = int(ts[lo]) if ts is not None else default_ts
        mts = int(ts[lo:hi].max()) if ts is not None else bts
        stamps.append((bts, mts))
        bodies.append(_k.encode_records(lo, hi, ks, koff, knull, vals, voff, vnull, ts, bts))
    compressed = _compression.compress_many(comp, bodies)
    parts: list[bytes] = []
    starts: list[int] = []
    pos = 0
    for (lo, hi), (bts, mts), body in zip(spans, stamps, compressed):
        seq = -1 if base_sequence < 0 else (base_sequence + lo) & 0x7FFFFFFF
        b = _k.write_batch(body, base_offset + lo, partition_leader_epoch, attrs, hi - lo - 1, bts,
                           mts, producer_id, producer_epoch, seq, hi - lo)
        parts.append(b)
        starts.append(pos)
        pos += len(b)
    joined = b"".join(parts)
    written: bytes | int = joined
    if out is not None:
        target = memoryview(cast("Buffer", out)).cast("B")  # an ndarray is a Buffer (typeshed says so from 3.12)
        if len(target) < len(joined):
            raise ValueError(f"output buffer of {len(target)} bytes is too small: {len(joined)} needed")
        target[:len(joined)] = joined
        written = len(joined)
    return (written, np.asarray(starts, np.int64)) if return_positions else written


__all__ = ["build_batch", "build_batches", "pack_buffers", "NO_PARTITION_LEADER_EPOCH"]
