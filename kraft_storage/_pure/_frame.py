"""Pure-Python twin of the record-frame kernels (``kraft_storage._native._frame``).

The executable specification of the native module (same functions, same
arguments, same answers).  Two jobs, both over the columns produced by
:func:`kraft_storage.record.decode_records` (``data`` + per-record
``value_pos``/``value_len``), with no Python object per record:

``read_frames`` -- the metadata record frame of every value.  Kafka frames a
metadata record value as::

    uvarint frameVersion   must be 1
    uvarint apiKey         record type (0..32767 accepted here)
    uvarint version        record version (0..32767 accepted here)
    body ...               the record's fields (starts at ``body_pos``)

A value that is null, empty, truncated inside a varint, uses an over-long
varint (more than 5 bytes), has a frame version other than 1, or an apiKey /
version above 32767 is *not a frame*: its row gets ``api_key = version =
-1`` and ``body_pos = -1``.  That is not an error, because a log may hold
control records or be a plain (non-metadata) topic; the caller decides.
A (pos, len) pair that points outside ``data`` *is* an error (ValueError):
the columns do not belong to this buffer.

``gather`` -- copy N byte slices of ``data`` into one contiguous buffer with
Arrow's binary layout: ``offsets`` int32[N+1] (``offsets[0] = 0``, slice i is
``out[offsets[i]:offsets[i+1]]``) and a validity bitmap (bit i of byte i//8,
least significant bit first, 1 = present) where ``len < 0`` means null.  The
bitmap is None when nothing is null.  Total size must stay below 2**31 (an
Arrow ``binary`` column); callers chunk.
"""
from __future__ import annotations

import numpy as np

MAX_FRAME_INT = 32767
_MAX_VARINT_BYTES = 5
_INT32_MAX = 0x7FFFFFFF


def _check(data_len: int, pos: np.ndarray, length: np.ndarray) -> None:
    if len(pos) != len(length):
        raise ValueError(f"{len(pos)} positions for {len(length)} lengths")
    present = length >= 0
    bad = present & ((pos < 0) | (pos + np.where(present, length, 0) > data_len))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"slice {i} (position {int(pos[i])}, length {int(length[i])}) "
                         f"is outside the {data_len}-byte buffer")


def _uvarint(mv, p: int, end: int):
    """(value, next position) or None when truncated or longer than 5 bytes."""
    value = shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        if p >= end:
            return None
        b = mv[p]
        p += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, p
        shift += 7
    return None


def read_frames(data, value_pos, value_len, api_key, version, body_pos) -> int:
    """Fill ``api_key``/``version`` (int16) and ``body_pos`` (int64) for every value.

    Returns how many values are metadata frames.
    """
    mv = memoryview(data).cast("B")
    pos = np.asarray(value_pos, dtype=np.int64)
    length = np.asarray(value_len, dtype=np.int32)
    n = len(pos)
    if not (len(api_key) >= n and len(version) >= n and len(body_pos) >= n):
        raise ValueError("output arrays are shorter than the input columns")
    _check(len(mv), pos, length)
    good = 0
    for i in range(n):
        p, ln = int(pos[i]), int(length[i])
        k = v = b = -1
        if ln > 0:
            end = p + ln
            fv = _uvarint(mv, p, end)
            if fv is not None and fv[0] == 1:
                ak = _uvarint(mv, fv[1], end)
                if ak is not None and ak[0] <= MAX_FRAME_INT:
                    ver = _uvarint(mv, ak[1], end)
                    if ver is not None and ver[0] <= MAX_FRAME_INT:
                        k, v, b = ak[0], ver[0], ver[1]
                        good += 1
        api_key[i] = k
        version[i] = v
        body_pos[i] = b
    return good


def gather(data, pos, length):
    """(out uint8 array, offsets int32[N+1], validity bitmap uint8 or None, null count)."""
    mv = memoryview(data).cast("B")
    pos = np.asarray(pos, dtype=np.int64)
    length = np.asarray(length, dtype=np.int32)
    _check(len(mv), pos, length)
    n = len(pos)
    sizes = np.maximum(length, 0).astype(np.int64)
    ends = np.cumsum(sizes)
    total = int(ends[-1]) if n else 0
    if total > _INT32_MAX:
        raise ValueError(f"{total} bytes do not fit an Arrow binary column (max {_INT32_MAX}); "
                         "gather fewer rows at a time")
    offsets = np.zeros(n + 1, dtype=np.int32)
    offsets[1:] = ends
    src = np.frombuffer(mv, dtype=np.uint8) if len(mv) else np.zeros(0, np.uint8)
    out = np.empty(total, dtype=np.uint8)
    for i in np.flatnonzero(sizes).tolist():
        o = int(offsets[i])
        out[o:o + sizes[i]] = src[pos[i]:pos[i] + sizes[i]]
    nulls = length < 0
    null_count = int(nulls.sum())
    validity = np.packbits(~nulls, bitorder="little") if null_count else None
    return out, offsets, validity, null_count
