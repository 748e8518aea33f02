# cython: language_level=3
"""Native record-frame kernels: metadata frame headers and Arrow binary gathers.

Same API and answers as the pure-Python twin ``kraft_storage._pure._frame``
(read it for the frame layout, the "not a frame" rule and the Arrow layout).

Why Cython and not Numba: these run inside Spark's Python workers, which
are fresh processes; a Numba kernel would JIT-compile (about a second) in
every worker, or need an on-disk cache shared between workers, while a
compiled extension costs nothing at start.  The loops are one pass over the
columns with the GIL released; every read is checked against the buffer
length, and every (pos, len) pair against the buffer before the loop.
"""
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

import numpy as np
cimport numpy as cnp

cnp.import_array()

MAX_FRAME_INT = 32767
cdef int64_t _INT32_MAX = 0x7FFFFFFF
cdef uint8_t _EMPTY[1]


cdef inline int _uvarint(const uint8_t *p, int64_t *at, int64_t end, uint64_t *out) noexcept nogil:
    """Read one uvarint of at most 5 bytes at ``*at`` (< end); 0 when truncated/over-long."""
    cdef uint64_t value = 0
    cdef int shift = 0, k
    cdef uint8_t b
    cdef int64_t i = at[0]
    for k in range(5):
        if i >= end:
            return 0
        b = p[i]
        i += 1
        value |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            at[0] = i
            out[0] = value
            return 1
        shift += 7
    return 0


cdef int64_t _check(int64_t data_len, const int64_t[::1] pos, const int32_t[::1] length) except -2:
    """-1 when every present slice lies inside the buffer, else raise ValueError."""
    cdef int64_t n = pos.shape[0], i, bad = -1
    if length.shape[0] != n:
        raise ValueError(f"{n} positions for {length.shape[0]} lengths")
    with nogil:
        for i in range(n):
            if length[i] >= 0 and (pos[i] < 0 or pos[i] > data_len - length[i]):
                bad = i
                break
    if bad >= 0:
        raise ValueError(f"slice {bad} (position {pos[bad]}, length {length[bad]}) "
                         f"is outside the {data_len}-byte buffer")
    return -1


def read_frames(const uint8_t[::1] data, const int64_t[::1] value_pos, const int32_t[::1] value_len,
                int16_t[::1] api_key, int16_t[::1] version, int64_t[::1] body_pos):
    """Fill ``api_key``/``version`` (int16) and ``body_pos`` (int64) for every value.

    Returns how many values are metadata frames.
    """
    cdef int64_t n = value_pos.shape[0], i, at, end, good = 0
    cdef uint64_t fv, ak, ver
    cdef const uint8_t *p = &data[0] if data.shape[0] else _EMPTY
    if api_key.shape[0] < n or version.shape[0] < n or body_pos.shape[0] < n:
        raise ValueError("output arrays are shorter than the input columns")
    _check(data.shape[0], value_pos, value_len)
    with nogil:
        for i in range(n):
            api_key[i] = -1
            version[i] = -1
            body_pos[i] = -1
            if value_len[i] <= 0:
                continue
            at = value_pos[i]
            end = at + value_len[i]
            if not _uvarint(p, &at, end, &fv) or fv != 1:
                continue
            if not _uvarint(p, &at, end, &ak) or ak > 32767:
                continue
            if not _uvarint(p, &at, end, &ver) or ver > 32767:
                continue
            api_key[i] = <int16_t>ak
            version[i] = <int16_t>ver
            body_pos[i] = at
            good += 1
    return good


def gather(const uint8_t[::1] data, const int64_t[::1] pos, const int32_t[::1] length):
    """(out uint8 array, offsets int32[N+1], validity bitmap uint8 or None, null count)."""
    cdef int64_t n = pos.shape[0], i, total = 0, nulls = 0
    cdef const uint8_t *src = &data[0] if data.shape[0] else _EMPTY
    _check(data.shape[0], pos, length)
    with nogil:
        for i in range(n):
            if length[i] > 0:
                total += length[i]
            elif length[i] < 0:
                nulls += 1
    if total > _INT32_MAX:
        raise ValueError(f"{total} bytes do not fit an Arrow binary column (max {_INT32_MAX}); "
                         "gather fewer rows at a time")
    out_a = np.empty(total, dtype=np.uint8)
    off_a = np.empty(n + 1, dtype=np.int32)
    cdef uint8_t[::1] out = out_a
    cdef int32_t[::1] off = off_a
    cdef uint8_t *dst = &out[0] if total else _EMPTY
    cdef int32_t o = 0
    cdef uint8_t[::1] valid
    with nogil:
        off[0] = 0
        for i in range(n):
            if length[i] > 0:
                memcpy(dst + o, src + pos[i], length[i])
                o += length[i]
            off[i + 1] = o
    if not nulls:
        return out_a, off_a, None, 0
    valid_a = np.zeros((n + 7) // 8, dtype=np.uint8)
    valid = valid_a
    with nogil:
        for i in range(n):
            if length[i] >= 0:
                valid[i >> 3] |= <uint8_t>(1 << (i & 7))
    return out_a, off_a, valid_a, nulls
