# cython: language_level=3
"""Native log-append kernel: validation, offset/epoch stamping, index planning,
the write and the index entries of one append, in two calls.

Same API and semantics as the pure twin ``kraft_storage._pure._logappend``
(read its module doc for the contract).  Validation is ``kr_scan_batches``
from ``csrc/recordbatch.c`` (the same C the record-batch scanner uses), so
both paths accept and reject exactly the same bytes.

Why one object with scratch space: a 4 KiB append has a budget of a few
microseconds, so nothing may be allocated per call on the common path; the
batch headers, rewritten 16-byte prefixes, iovecs and planned index entries
live in buffers owned by the :class:`Appender` that only ever grow.

Memory safety: every read of the caller's buffer stays inside the extent
``kr_scan_batches`` accepted; index entries are written only at slots whose
end is checked against the index buffer's length; the scanned buffer is
held (a buffer export) from ``scan`` until ``write``/``release``, so it
cannot be resized or freed in between.  The GIL is released only around
large writes, while the export is held.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, INT64_MIN
from libc.stdlib cimport malloc, realloc, free
from libc.errno cimport errno, EINTR, EIO
from posix.uio cimport iovec, pwritev
from posix.unistd cimport ftruncate

from kraft_storage.errors import CorruptRecordError, OutOfOrderAppend

from kraft_storage._native.recordbatch cimport kr_batch_header, kr_error, kr_scan_batches

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline int64_t kla_be64(const uint8_t *p) {
        uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v);
    }
    static inline void kla_put_be32(uint8_t *p, int32_t x) {
        uint32_t v = __builtin_bswap32((uint32_t)x); memcpy(p, &v, 4);
    }
    static inline void kla_put_be64(uint8_t *p, int64_t x) {
        uint64_t v = __builtin_bswap64((uint64_t)x); memcpy(p, &v, 8);
    }
    """
    int64_t kla_be64(const uint8_t *p) nogil
    void kla_put_be32(uint8_t *p, int32_t x) nogil
    void kla_put_be64(uint8_t *p, int64_t x) nogil

MODE_LEADER = 0
MODE_FOLLOWER = 1
cdef enum:
    KR_OK = 0
    KR_E_CAPACITY = 3
    I32_MAX = 0x7FFFFFFF
    IOV_CHUNK = 1024        # iovecs per pwritev call (Linux IOV_MAX)
    NOGIL_BYTES = 262144    # scan/write this much or more without the GIL
SOURCE = "appended records"


cdef int _pwritev_all(int fd, iovec *iov, int64_t cnt, int64_t pos) noexcept nogil:
    """Write every iovec at ``pos`` (IOV_CHUNK at a time), finishing short
    writes and retrying EINTR.  The iovecs are consumed (modified).  Returns
    0 or an errno."""
    cdef int64_t i = 0, c
    cdef Py_ssize_t w
    while i < cnt:
        c = cnt - i if cnt - i < IOV_CHUNK else IOV_CHUNK
        w = pwritev(fd, iov + i, <int>c, pos)
        if w < 0:
            if errno == EINTR:
                continue
            return errno
        if w == 0:
            return EIO
        pos += w
        while i < cnt and <size_t>w >= iov[i].iov_len:  # drop the fully written iovecs
            w -= iov[i].iov_len
            i += 1
        if i < cnt and w > 0:
            iov[i].iov_base = <void *>(<char *>iov[i].iov_base + w)
            iov[i].iov_len -= w
        while i < cnt and iov[i].iov_len == 0:
            i += 1
    return 0


cdef class Appender:
    """See ``kraft_storage._pure._logappend``."""
    cdef kr_batch_header *h
    cdef uint8_t *hdr16
    cdef iovec *iov
    cdef int64_t *o_rel
    cdef int64_t *o_pos
    cdef int64_t *t_ts
    cdef int64_t *t_rel
    cdef int64_t cap
    cdef Py_buffer view
    cdef bint held
    cdef readonly int mode
    cdef readonly int32_t leader_epoch
    cdef readonly int64_t batches, nbytes, records, first_offset, last_offset
    cdef readonly int64_t max_timestamp, first_max_timestamp
    cdef readonly tuple epochs

    def __cinit__(self):
        self.h = NULL
        self.hdr16 = NULL
        self.iov = NULL
        self.o_rel = self.o_pos = self.t_ts = self.t_rel = NULL
        self.cap = 0
        self.held = False
        self.epochs = ()
        self.batches = self.nbytes = self.records = 0
        self.first_offset = self.last_offset = -1
        self.max_timestamp = self.first_max_timestamp = -1
        self._grow(16)

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False
        free(self.h); free(self.hdr16); free(self.iov)
        free(self.o_rel); free(self.o_pos); free(self.t_ts); free(self.t_rel)

    cdef int _grow(self, int64_t cap) except -1:
        """Room for ``cap`` batches in every scratch buffer (never shrinks)."""
        cdef void *p
        if cap <= self.cap:
            return 0
        p = realloc(self.h, cap * sizeof(kr_batch_header))
        if p == NULL: raise MemoryError()
        self.h = <kr_batch_header *>p
        p = realloc(self.hdr16, cap * 16)
        if p == NULL: raise MemoryError()
        self.hdr16 = <uint8_t *>p
        p = realloc(self.iov, 2 * cap * sizeof(iovec))
        if p == NULL: raise MemoryError()
        self.iov = <iovec *>p
        p = realloc(self.o_rel, cap * 8)
        if p == NULL: raise MemoryError()
        self.o_rel = <int64_t *>p
        p = realloc(self.o_pos, cap * 8)
        if p == NULL: raise MemoryError()
        self.o_pos = <int64_t *>p
        p = realloc(self.t_ts, cap * 8)
        if p == NULL: raise MemoryError()
        self.t_ts = <int64_t *>p
        p = realloc(self.t_rel, cap * 8)
        if p == NULL: raise MemoryError()
        self.t_rel = <int64_t *>p
        self.cap = cap
        return 0

    def release(self):
        """Drop the export of the scanned buffer (idempotent)."""
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False

    def scan(self, buf, int mode, int64_t next_offset, int32_t leader_epoch, int64_t latest_epoch,
             int crc_mode):
        cdef kr_error err
        cdef int st
        cdef int64_t n = 0, got = 0, pos = 0, nxt = 0, length, i, b, expected, floor, ep
        cdef const uint8_t *p
        cdef kr_batch_header *hh
        self.release()
        if mode != MODE_LEADER and mode != MODE_FOLLOWER:
            raise ValueError(f"unknown append mode {mode}")
        PyObject_GetBuffer(buf, &self.view, PyBUF_SIMPLE)
        self.held = True
        length = self.view.len
        p = <const uint8_t *>self.view.buf
        if length == 0:
            self.release()
            raise ValueError("nothing to append: the buffer is empty")
        err.code = 0
        err.position = -1
        err.base_offset = INT64_MIN
        err.message[0] = 0
        while True:
            if length - pos >= NOGIL_BYTES:
                with nogil:
                    st = kr_scan_batches(p, pos, length, crc_mode, 0, self.h + n, self.cap - n,
                                         &got, &nxt, &err)
            else:
                st = kr_scan_batches(p, pos, length, crc_mode, 0, self.h + n, self.cap - n,
                                     &got, &nxt, &err)
            n += got
            pos = nxt
            if st != KR_E_CAPACITY:
                break
            self._grow(self.cap * 2)
        if st != KR_OK:
            self.release()
            raise CorruptRecordError(err.message.decode("utf-8", "replace"), err.position,
                                     None if err.base_offset == INT64_MIN else err.base_offset, SOURCE)
        hh = self.h
        for i in range(n):
            if hh[i].last_offset_delta < 0:
                self.release()
                raise CorruptRecordError(f"negative last offset delta {hh[i].last_offset_delta}",
                                         hh[i].position, hh[i].base_offset, SOURCE)
        epochs = None
        floor = latest_epoch
        if mode == MODE_LEADER:
            b = next_offset
            for i in range(n):
                hh[i].base_offset = b
                hh[i].partition_leader_epoch = leader_epoch
                b += <int64_t>hh[i].last_offset_delta + 1
            if leader_epoch > floor:
                epochs = [(leader_epoch, next_offset)]
        else:
            expected = next_offset
            for i in range(n):
                if hh[i].base_offset != expected:
                    self.release()
                    raise OutOfOrderAppend(expected, hh[i].base_offset, hh[i].position)
                expected = hh[i].base_offset + hh[i].last_offset_delta + 1
            for i in range(n):
                ep = hh[i].partition_leader_epoch
                if ep < floor:
                    self.release()
                    b = hh[i].base_offset
                    raise OutOfOrderAppend(b, b, hh[i].position,
                                           reason=f"the batch at offset {b} has leader epoch {ep}, "
                                                  f"older than epoch {floor} already in the log")
                if ep > floor:
                    if ep >= 0:
                        if epochs is None:
                            epochs = []
                        epochs.append((ep, hh[i].base_offset))
                    floor = ep
        self.mode = mode
        self.leader_epoch = leader_epoch
        self.batches = n
        self.nbytes = length
        self.records = 0
        self.max_timestamp = hh[0].max_timestamp
        for i in range(n):
            self.records += hh[i].records_count
            if hh[i].max_timestamp > self.max_timestamp:
                self.max_timestamp = hh[i].max_timestamp
        self.first_offset = hh[0].base_offset
        self.last_offset = hh[n - 1].base_offset + hh[n - 1].last_offset_delta
        self.first_max_timestamp = hh[0].max_timestamp
        self.epochs = () if epochs is None else tuple(epochs)

    def write(self, int fd, int64_t start, int64_t segment_base, int64_t interval, int64_t bytes_since,
              int64_t max_ts, int64_t offset_of_max_ts, offset_buf, int64_t offset_n, int64_t offset_max,
              time_buf, int64_t time_n, int64_t time_max):
        cdef Py_buffer ob, tb
        cdef bint o_held = False, t_held = False
        cdef uint8_t *op = NULL
        cdef uint8_t *tp = NULL
        cdef int64_t o_cap = 0, t_cap = 0, last_time_ts = -1, no = 0, nt = 0, i, last, n = self.batches
        cdef int64_t cnt, rc
        cdef kr_batch_header *hh = self.h
        cdef const uint8_t *src
        cdef uint8_t *e
        if not self.held or n == 0:
            raise RuntimeError("write() needs a successful scan() first")
        try:
            if offset_buf is not None:
                PyObject_GetBuffer(offset_buf, &ob, PyBUF_WRITABLE)
                o_held = True
                op = <uint8_t *>ob.buf
                o_cap = ob.len // 8
            if time_buf is not None:
                PyObject_GetBuffer(time_buf, &tb, PyBUF_WRITABLE)
                t_held = True
                tp = <uint8_t *>tb.buf
                t_cap = tb.len // 12
            if offset_n < 0 or time_n < 0 or offset_n > o_cap or time_n > t_cap:
                raise ValueError("index entry counts exceed the index buffers")
            if time_n > 0:
                last_time_ts = kla_be64(tp + (time_n - 1) * 12)
            # plan: Kafka 4's LogSegment.append rule, batch by batch
            for i in range(n):
                last = hh[i].base_offset + hh[i].last_offset_delta
                if hh[i].max_timestamp > max_ts:
                    max_ts = hh[i].max_timestamp
                    offset_of_max_ts = last
                if bytes_since > interval:
                    self.o_rel[no] = last - segment_base
                    self.o_pos[no] = start + hh[i].position
                    if not (0 <= self.o_rel[no] <= I32_MAX and 0 <= self.o_pos[no] <= I32_MAX):
                        raise ValueError(f"index entry ({self.o_rel[no]}, {self.o_pos[no]}) "
                                         "does not fit in int32")
                    no += 1
                    if max_ts > last_time_ts:
                        self.t_ts[nt] = max_ts
                        self.t_rel[nt] = offset_of_max_ts - segment_base
                        if not 0 <= self.t_rel[nt] <= I32_MAX:
                            raise ValueError(f"time index offset {self.t_rel[nt]} does not fit in int32")
                        nt += 1
                        last_time_ts = max_ts
                    bytes_since = 0
                bytes_since += hh[i].size
            if no and offset_n + no > (offset_max if offset_max < o_cap else o_cap):
                raise ValueError(f"offset index is full ({offset_n} entries, {no} more needed)")
            if nt and time_n + nt > (time_max if time_max < t_cap else t_cap):
                raise ValueError(f"time index is full ({time_n} entries, {nt} more needed)")
            # the batches
            src = <const uint8_t *>self.view.buf
            if self.mode == MODE_LEADER:
                for i in range(n):
                    e = self.hdr16 + 16 * i
                    kla_put_be64(e, hh[i].base_offset)
                    kla_put_be32(e + 8, hh[i].size - 12)
                    kla_put_be32(e + 12, self.leader_epoch)
                    self.iov[2 * i].iov_base = e
                    self.iov[2 * i].iov_len = 16
                    self.iov[2 * i + 1].iov_base = <void *>(src + hh[i].position + 16)
                    self.iov[2 * i + 1].iov_len = hh[i].size - 16
                cnt = 2 * n
            else:
                self.iov[0].iov_base = <void *>src
                self.iov[0].iov_len = self.nbytes
                cnt = 1
            if self.nbytes >= NOGIL_BYTES:
                with nogil:
                    rc = _pwritev_all(fd, self.iov, cnt, start)
            else:
                rc = _pwritev_all(fd, self.iov, cnt, start)
            if rc != 0:
                ftruncate(fd, start)  # no partial batch is ever left behind
                raise OSError(rc, f"append of {self.nbytes} bytes at position {start} failed")
            # then the index entries; the caller publishes the counts
            for i in range(no):
                e = op + (offset_n + i) * 8
                kla_put_be32(e, <int32_t>self.o_rel[i])
                kla_put_be32(e + 4, <int32_t>self.o_pos[i])
            for i in range(nt):
                e = tp + (time_n + i) * 12
                kla_put_be64(e, self.t_ts[i])
                kla_put_be32(e + 8, <int32_t>self.t_rel[i])
            return offset_n + no, time_n + nt, bytes_since, max_ts, offset_of_max_ts
        finally:
            if o_held:
                PyBuffer_Release(&ob)
            if t_held:
                PyBuffer_Release(&tb)
