# cython: language_level=3
"""Native record-batch kernels: thin Cython glue over ``csrc/recordbatch.c``.

Same API as the pure-Python twin ``kraft_storage._pure._batch`` (read that
for the semantics); this file only moves buffers and arrays across and
releases the GIL around the C loops so other threads (e.g. fetch readers) can
run while a segment is scanned or decoded.
"""
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, INT64_MIN
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8

cimport cython
import numpy as np
cimport numpy as cnp

cnp.import_array()

from kraft_storage._native.recordbatch cimport kr_batch_header, kr_error, kr_scan_batches

cdef extern from "recordbatch.h":
    ctypedef struct kr_record_columns:
        int64_t *offset
        int64_t *timestamp
        int64_t *key_pos
        int32_t *key_len
        int64_t *value_pos
        int32_t *value_len
        int64_t *headers_pos
        int32_t *headers_count
        int32_t *batch
        int8_t *attributes

    int kr_decode_records(const uint8_t *buf, int64_t buflen, const kr_batch_header *hdr,
                          const int64_t *region_start, const int64_t *region_end,
                          const int32_t *batch_row, int64_t nbatches,
                          kr_record_columns *cols, int64_t first_row, int64_t cap,
                          int64_t *n_out, kr_error *err) nogil
    int64_t kr_encode_records(uint8_t *out, int64_t cap, int64_t lo, int64_t hi,
                              const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                              const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                              const int64_t *ts, int64_t base_ts) nogil
    int64_t kr_write_batch_header(uint8_t *out, int64_t base_offset, int64_t records_len,
                                  int32_t partition_leader_epoch, int16_t attributes,
                                  int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                                  int64_t producer_id, int16_t producer_epoch,
                                  int32_t base_sequence, int32_t records_count) nogil
    int64_t kr_encode_batches(uint8_t *out, int64_t cap, int64_t n, int64_t per_batch,
                              const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                              const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                              const int64_t *ts, int64_t default_ts, int64_t base_offset,
                              int32_t partition_leader_epoch, int16_t attributes,
                              int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                              int64_t *batch_positions) nogil
    int64_t kr_encode_bound(int64_t n, int64_t payload, int64_t nb) nogil
    int64_t kr_encode_batches_size(int64_t n, int64_t per_batch,
                                   const uint8_t *keys, const int64_t *key_off, const uint8_t *key_null,
                                   const uint8_t *vals, const int64_t *val_off, const uint8_t *val_null,
                                   const int64_t *ts) nogil
    int KR_HEADER_SIZE

OK, TRUNCATED, CORRUPT, CAPACITY = 0, 1, 2, 3
CRC_SKIP, CRC_VERIFY, CRC_REPORT = 0, 1, 2
HEADER_SIZE = 61
NO_OFFSET = -(2**63)

cdef uint8_t _EMPTY[1]

# Releasing the GIL costs ~100 ns; only worth it for real work.
DEF NOGIL_BYTES = 65536


cdef inline kr_batch_header* _headers_ptr(cnp.ndarray headers) except NULL:
    if headers.dtype.itemsize != sizeof(kr_batch_header) or not headers.flags.c_contiguous:
        raise TypeError("headers must be a C-contiguous BATCH_DTYPE array")
    if not headers.flags.writeable:
        raise TypeError("headers array must be writeable")
    return <kr_batch_header*> cnp.PyArray_DATA(headers)


cdef str _msg(kr_error *err):
    return err.message.decode("utf-8", "replace")


def scan(const uint8_t[::1] buf, int64_t start, int64_t end, int crc_mode,
         int64_t max_batch_size, cnp.ndarray out):
    """See ``kraft_storage._pure._batch.scan``."""
    cdef kr_batch_header *hp = _headers_ptr(out)
    cdef int64_t cap = out.shape[0], n = 0, nxt = start
    cdef kr_error err
    cdef int st
    if start < 0 or end > buf.shape[0] or start > end:
        raise ValueError(f"scan range [{start}, {end}) outside buffer of {buf.shape[0]} bytes")
    err.code = 0
    err.position = -1
    err.base_offset = INT64_MIN
    err.message[0] = 0
    cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
    if end - start >= NOGIL_BYTES:
        with nogil:
            st = kr_scan_batches(p, start, end, crc_mode, max_batch_size, hp, cap, &n, &nxt, &err)
    else:
        st = kr_scan_batches(p, start, end, crc_mode, max_batch_size, hp, cap, &n, &nxt, &err)
    if st == OK or st == CAPACITY:
        return st, n, nxt, "", -1, NO_OFFSET
    return st, n, nxt, _msg(&err), err.position, err.base_offset


def decode_records(const uint8_t[::1] buf, cnp.ndarray headers, const int64_t[::1] region_start,
                   const int64_t[::1] region_end, batch_row, tuple cols, int64_t first_row):
    """See ``kraft_storage._pure._batch.decode_records``."""
    cdef kr_batch_header *hp = _headers_ptr(headers)
    cdef int64_t nb = headers.shape[0]
    if region_start.shape[0] < nb or region_end.shape[0] < nb:
        raise ValueError("region arrays shorter than headers")
    cdef int64_t[::1] c_off = cols[0]
    cdef int64_t[::1] c_ts = cols[1]
    cdef int64_t[::1] c_kp = cols[2]
    cdef int32_t[::1] c_kl = cols[3]
    cdef int64_t[::1] c_vp = cols[4]
    cdef int32_t[::1] c_vl = cols[5]
    cdef int64_t[::1] c_hp = cols[6]
    cdef int32_t[::1] c_hc = cols[7]
    cdef int32_t[::1] c_b = cols[8]
    cdef int8_t[::1] c_a = cols[9]
    cdef int64_t cap = c_off.shape[0]
    if (c_ts.shape[0] < cap or c_kp.shape[0] < cap or c_kl.shape[0] < cap or c_vp.shape[0] < cap
            or c_vl.shape[0] < cap or c_hp.shape[0] < cap or c_hc.shape[0] < cap
            or c_b.shape[0] < cap or c_a.shape[0] < cap):
        raise ValueError("record columns have different lengths")
    cdef const int32_t[::1] rows
    cdef const int32_t *rowp = NULL
    if batch_row is not None:
        rows = batch_row
        if rows.shape[0] < nb:
            raise ValueError("batch_row shorter than headers")
        rowp = &rows[0] if nb else NULL
    cdef kr_record_columns c
    if cap == 0:
        # Nothing can be written; still validate (e.g. batches with 0 records).
        c_off = np.empty(1, np.int64); c_ts = c_off; c_kp = c_off; c_vp = c_off; c_hp = c_off
        c_kl = np.empty(1, np.int32); c_vl = c_kl; c_hc = c_kl; c_b = c_kl
        c_a = np.empty(1, np.int8)
    c.offset = &c_off[0]; c.timestamp = &c_ts[0]; c.key_pos = &c_kp[0]; c.key_len = &c_kl[0]
    c.value_pos = &c_vp[0]; c.value_len = &c_vl[0]; c.headers_pos = &c_hp[0]
    c.headers_count = &c_hc[0]; c.batch = &c_b[0]; c.attributes = &c_a[0]
    cdef kr_error err
    err.code = 0
    err.message[0] = 0
    cdef int64_t n = 0
    cdef int st
    cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
    cdef const int64_t *rsp = &region_start[0] if nb else NULL
    cdef const int64_t *rep = &region_end[0] if nb else NULL
    with nogil:
        st = kr_decode_records(p, buf.shape[0], hp, rsp, rep, rowp, nb, &c, first_row, cap, &n, &err)
    if st == OK:
        return st, n, "", -1, NO_OFFSET
    return st, n, _msg(&err), err.position, err.base_offset


def encode_records(int64_t lo, int64_t hi, keys, key_off, key_null, vals, val_off, val_null,
                   ts, int64_t base_ts):
    """See ``kraft_storage._pure._batch.encode_records``."""
    cdef _Inputs inp = _Inputs(keys, key_off, key_null, vals, val_off, val_null, ts, hi)
    cdef int64_t cap = kr_encode_bound(hi - lo, inp.payload(lo, hi), 0)
    out = PyBytes_FromStringAndSize(NULL, cap)
    cdef uint8_t *op = <uint8_t*> PyBytes_AS_STRING(out)
    cdef int64_t w
    with nogil:
        w = kr_encode_records(op, cap, lo, hi, inp.kp, inp.kop, inp.knp, inp.vp, inp.vop,
                              inp.vnp, inp.tsp, base_ts)
    if w < 0:
        raise OverflowError("record too large to encode")
    return out[:w]


cdef class _Inputs:
    """Validated raw pointers to the Arrow-style key/value/timestamp inputs."""
    cdef const uint8_t[::1] k, v, kn, vn
    cdef const int64_t[::1] ko, vo, t
    cdef const uint8_t *kp
    cdef const uint8_t *vp
    cdef const uint8_t *knp
    cdef const uint8_t *vnp
    cdef const int64_t *kop
    cdef const int64_t *vop
    cdef const int64_t *tsp
    cdef int64_t n

    def __init__(self, keys, key_off, key_null, vals, val_off, val_null, ts, int64_t n):
        self.n = n
        self.kp = self.vp = self.knp = self.vnp = NULL
        self.kop = self.vop = self.tsp = NULL
        if keys is not None:
            self.k = keys
            self.ko = key_off
            _check_offsets(self.ko, n, self.k.shape[0], "key")
            self.kp = &self.k[0] if self.k.shape[0] else &_EMPTY[0]
            self.kop = &self.ko[0]
            if key_null is not None:
                self.kn = key_null
                if self.kn.shape[0] < n:
                    raise ValueError("key_null shorter than the records")
                self.knp = &self.kn[0] if n else NULL
        if vals is not None:
            self.v = vals
            self.vo = val_off
            _check_offsets(self.vo, n, self.v.shape[0], "value")
            self.vp = &self.v[0] if self.v.shape[0] else &_EMPTY[0]
            self.vop = &self.vo[0]
            if val_null is not None:
                self.vn = val_null
                if self.vn.shape[0] < n:
                    raise ValueError("val_null shorter than the records")
                self.vnp = &self.vn[0] if n else NULL
        if ts is not None:
            self.t = ts
            if self.t.shape[0] < n:
                raise ValueError("timestamps shorter than the records")
            self.tsp = &self.t[0] if n else NULL

    cdef int64_t payload(self, int64_t lo, int64_t hi):
        cdef int64_t total = 0
        if self.kop != NULL:
            total += self.kop[hi] - self.kop[lo]
        if self.vop != NULL:
            total += self.vop[hi] - self.vop[lo]
        return total


cdef _check_offsets(const int64_t[::1] off, int64_t n, int64_t datalen, str what):
    """Offsets must be n+1 long, start >= 0, non-decreasing, and end within the data."""
    if off.shape[0] < n + 1:
        raise ValueError(f"{what} offsets must have n+1 = {n + 1} entries, got {off.shape[0]}")
    cdef int64_t i
    if off[0] < 0:
        raise ValueError(f"{what} offsets must start at >= 0")
    for i in range(n):
        if off[i + 1] < off[i] or off[i + 1] - off[i] > 0x7fffffff:
            raise ValueError(f"{what} offsets must be non-decreasing (entry {i})")
    if off[n] > datalen:
        raise ValueError(f"{what} offsets run past the {datalen}-byte data buffer")


def write_batch(const uint8_t[::1] records, int64_t base_offset, int32_t partition_leader_epoch,
                int16_t attributes, int32_t last_offset_delta, int64_t base_ts, int64_t max_ts,
                int64_t producer_id, int16_t producer_epoch, int32_t base_sequence,
                int32_t records_count):
    """See ``kraft_storage._pure._batch.write_batch``."""
    cdef int64_t rl = records.shape[0]
    if rl + 61 - 12 > 0x7fffffff:
        raise OverflowError("batch larger than 2 GiB")
    out = PyBytes_FromStringAndSize(NULL, 61 + rl)
    cdef uint8_t *op = <uint8_t*> PyBytes_AS_STRING(out)
    if rl:
        memcpy(op + 61, &records[0], rl)
    with nogil:
        kr_write_batch_header(op, base_offset, rl, partition_leader_epoch, attributes,
                              last_offset_delta, base_ts, max_ts, producer_id, producer_epoch,
                              base_sequence, records_count)
    return out


def encode_batches(keys, key_off, key_null, vals, val_off, val_null, ts, int64_t default_ts,
                   int64_t per_batch, int64_t base_offset, int32_t partition_leader_epoch,
                   int16_t attributes, int64_t producer_id, int16_t producer_epoch,
                   int32_t base_sequence, out=None):
    """See ``kraft_storage._pure._batch.encode_batches``.

    With ``out`` (a writable buffer) the batches are written at its start and
    ``(nbytes, positions)`` is returned instead of ``(bytes, positions)``: a
    caller that reuses its buffer avoids faulting in fresh pages for every
    call, which on this class of machine costs more than the encoding.
    """
    cdef int64_t n
    if key_off is not None:
        n = len(key_off) - 1
    elif val_off is not None:
        n = len(val_off) - 1
    else:
        raise ValueError("need key or value offsets to know the number of records")
    if per_batch <= 0:
        raise ValueError("per_batch must be positive")
    cdef _Inputs inp = _Inputs(keys, key_off, key_null, vals, val_off, val_null, ts, n)
    cdef int64_t nb = (n + per_batch - 1) // per_batch
    cdef int64_t cap
    with nogil:
        cap = kr_encode_batches_size(n, per_batch, inp.kp, inp.kop, inp.knp, inp.vp, inp.vop, inp.vnp,
                                     inp.tsp)
    if cap < 0:
        raise OverflowError("record too large to encode")
    positions = np.empty(nb, dtype=np.int64)
    cdef int64_t[::1] pv = positions
    cdef uint8_t[::1] target
    cdef uint8_t *op
    if out is None:
        result = PyBytes_FromStringAndSize(NULL, cap)
        op = <uint8_t*> PyBytes_AS_STRING(result)
    else:
        target = out
        if target.shape[0] < cap:
            raise ValueError(f"output buffer of {target.shape[0]} bytes is too small: {cap} needed")
        op = &target[0] if cap else &_EMPTY[0]
        result = cap
    cdef int64_t w
    cdef int64_t *pp = &pv[0] if nb else NULL
    with nogil:
        w = kr_encode_batches(op, cap, n, per_batch, inp.kp, inp.kop, inp.knp, inp.vp, inp.vop,
                              inp.vnp, inp.tsp, default_ts, base_offset, partition_leader_epoch,
                              attributes, producer_id, producer_epoch, base_sequence, pp)
    if w != cap:  # the size pass and the encoder disagree: a bug, never silently truncate
        raise AssertionError(f"encoded {w} bytes, expected exactly {cap}")
    return result, positions


cdef inline int _rd_varint(const uint8_t *p, int64_t *pos, int64_t end, int32_t *out):
    cdef uint32_t v = 0
    cdef int shift = 0, i
    cdef uint8_t b
    for i in range(5):
        if pos[0] >= end:
            return -1
        b = p[pos[0]]
        pos[0] += 1
        v |= <uint32_t>(b & 0x7f) << shift
        if not (b & 0x80):
            out[0] = <int32_t>((v >> 1) ^ (~(v & 1) + 1))
            return 0
        shift += 7
    return -2


cdef tuple _parse_headers(const uint8_t *p, int64_t pos, int64_t end, int32_t count):
    cdef list out = []
    cdef int32_t hk, hv
    for _ in range(count):
        if _rd_varint(p, &pos, end, &hk) or hk < 0 or hk > end - pos:
            raise ValueError("malformed header")
        key = PyUnicode_DecodeUTF8(<const char*>(p + pos), hk, "replace")
        pos += hk
        if _rd_varint(p, &pos, end, &hv) or hv > end - pos:
            raise ValueError("malformed header")
        if hv < 0:
            val = None
        else:
            val = PyBytes_FromStringAndSize(<const char*>(p + pos), hv)
            pos += hv
        out.append((key, val))
    return tuple(out)


def parse_headers(const uint8_t[::1] buf, int64_t pos, int32_t count):
    """See ``kraft_storage._pure._batch.parse_headers``."""
    if pos < 0 or pos > buf.shape[0]:
        raise ValueError("header position outside the buffer")
    if buf.shape[0] == 0:
        return ()
    return _parse_headers(&buf[0], pos, buf.shape[0], count)


@cython.no_gc
@cython.freelist(64)
cdef class Record:
    """One record, for convenience APIs (never used on replay hot paths).

    Not tracked by the cyclic GC: it holds only ints, bytes, None and a tuple
    of (str, bytes) pairs, which cannot form cycles, and tracking made
    building a million of them 5x slower (GC passes over the growing list).
    """
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly tuple headers
    cdef readonly int attributes

    def __init__(self, offset, timestamp, key, value, headers, attributes=0):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = tuple(headers)
        self.attributes = attributes

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not hasattr(other, "offset"):
            return NotImplemented
        return (self.offset, self.timestamp, self.key, self.value, self.headers) == (
            other.offset, other.timestamp, other.key, other.value, tuple(other.headers))

    __hash__ = None


def make_records(const uint8_t[::1] buf, tuple cols, int64_t lo, int64_t hi):
    """See ``kraft_storage._pure._batch.make_records``."""
    cdef const int64_t[::1] c_off = cols[0]
    cdef const int64_t[::1] c_ts = cols[1]
    cdef const int64_t[::1] c_kp = cols[2]
    cdef const int32_t[::1] c_kl = cols[3]
    cdef const int64_t[::1] c_vp = cols[4]
    cdef const int32_t[::1] c_vl = cols[5]
    cdef const int64_t[::1] c_hp = cols[6]
    cdef const int32_t[::1] c_hc = cols[7]
    cdef const int8_t[::1] c_a = cols[9]
    if lo < 0 or hi > c_off.shape[0] or lo > hi:
        raise IndexError("row range outside the columns")
    cdef int64_t blen = buf.shape[0], r, kp, vp
    cdef int32_t kl, vl
    cdef const uint8_t *p = &buf[0] if blen else NULL
    cdef list out = []
    cdef Record rec
    cdef tuple no_headers = ()
    for r in range(lo, hi):
        kl = c_kl[r]; vl = c_vl[r]; kp = c_kp[r]; vp = c_vp[r]
        if (kl > 0 and (kp < 0 or kp + kl > blen)) or (vl > 0 and (vp < 0 or vp + vl > blen)):
            raise IndexError(f"row {r} points outside the buffer")
        rec = Record.__new__(Record)
        rec.offset = c_off[r]
        rec.timestamp = c_ts[r]
        rec.key = None if kl < 0 else PyBytes_FromStringAndSize(<const char*>(p + kp), kl)
        rec.value = None if vl < 0 else PyBytes_FromStringAndSize(<const char*>(p + vp), vl)
        rec.headers = no_headers if c_hc[r] == 0 else _parse_headers(p, c_hp[r], blen, c_hc[r])
        rec.attributes = c_a[r]
        out.append(rec)
    return out


cdef class RecordIterator:
    """Yields Record objects one at a time from decoded columns.

    Each record is built on demand, so a consumer that drops it right away
    keeps memory hot instead of materialising a list of millions.
    """
    cdef object buf_ref
    cdef const uint8_t[::1] buf
    cdef const int64_t[::1] c_off, c_ts, c_kp, c_vp, c_hp
    cdef const int32_t[::1] c_kl, c_vl, c_hc
    cdef const int8_t[::1] c_a
    cdef int64_t r, hi

    def __cinit__(self, buf, tuple cols, int64_t lo, int64_t hi):
        self.buf_ref = buf
        self.buf = buf
        self.c_off = cols[0]; self.c_ts = cols[1]; self.c_kp = cols[2]; self.c_kl = cols[3]
        self.c_vp = cols[4]; self.c_vl = cols[5]; self.c_hp = cols[6]; self.c_hc = cols[7]
        self.c_a = cols[9]
        if lo < 0 or hi > self.c_off.shape[0] or lo > hi:
            raise IndexError("row range outside the columns")
        self.r = lo
        self.hi = hi

    def __iter__(self):
        return self

    def __next__(self):
        cdef int64_t r = self.r, kp, vp, blen = self.buf.shape[0]
        cdef int32_t kl, vl
        if r >= self.hi:
            raise StopIteration
        self.r = r + 1
        cdef const uint8_t *p = &self.buf[0] if blen else NULL
        kl = self.c_kl[r]; vl = self.c_vl[r]; kp = self.c_kp[r]; vp = self.c_vp[r]
        if (kl > 0 and (kp < 0 or kp + kl > blen)) or (vl > 0 and (vp < 0 or vp + vl > blen)):
            raise IndexError(f"row {r} points outside the buffer")
        cdef Record rec = Record.__new__(Record)
        rec.offset = self.c_off[r]
        rec.timestamp = self.c_ts[r]
        rec.key = None if kl < 0 else PyBytes_FromStringAndSize(<const char*>(p + kp), kl)
        rec.value = None if vl < 0 else PyBytes_FromStringAndSize(<const char*>(p + vp), vl)
        rec.headers = () if self.c_hc[r] == 0 else _parse_headers(p, self.c_hp[r], blen, self.c_hc[r])
        rec.attributes = self.c_a[r]
        return rec


def iter_records(buf, tuple cols, int64_t lo, int64_t hi):
    """See ``kraft_storage._pure._batch.iter_records``."""
    return RecordIterator(buf, cols, lo, hi)


def pack_bytes(items):
    """A list/tuple of ``bytes`` -> (one joined bytes, int64 offsets[n + 1]), or None when an
    item is not exactly ``bytes`` (the caller then takes the general path).  Why: the Raft
    leader packs every append's records for the encoder; this is one C pass instead of
    a join plus a per-item ``len`` through numpy."""
    cdef Py_ssize_t n = len(items), i, total = 0, ln
    cdef object seq = items if type(items) is list or type(items) is tuple else list(items)
    cdef cnp.ndarray[cnp.int64_t, ndim=1] off = np.empty(n + 1, dtype=np.int64)
    cdef object x
    off[0] = 0
    for i in range(n):
        x = seq[i]
        if type(x) is not bytes:
            return None
        total += len(<bytes>x)
        off[i + 1] = total
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char *dst = PyBytes_AS_STRING(out)
    cdef Py_ssize_t pos = 0
    for i in range(n):
        x = seq[i]
        ln = len(<bytes>x)
        memcpy(dst + pos, PyBytes_AS_STRING(x), ln)
        pos += ln
    return out, off
