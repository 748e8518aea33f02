# cython: language_level=3
"""Native kernels of the segment indexes (``.index`` / ``.timeindex``).

Same API as the pure-Python twin ``kraft_storage._pure._index`` (read that
for the semantics and the byte layouts).  Why Cython and not Numba: the
single lookup must cost a few hundred nanoseconds *including* the call from
Python, so the searcher is an object that acquires the mmap's buffer once and
keeps the raw pointer (a Numba call re-boxes its array arguments on every
call, which alone costs more than the whole budget).  The index planner is a
plain C loop.  The batched lookup (``kr_offset_lookup_many`` in the C block
below) has three tiers: small batches run 16 branch-free binary searches in
lockstep over the mmap; batches of >= 4096 targets and >= n/4 copy the keys
to native int32 once and search that copy through radix buckets, or in
lockstep when the keys are too unevenly spread for buckets.  All tiers give
the twin's answers (tests compare them).

Memory safety: the :class:`IndexSearcher` holds a buffer export of the mmap,
so the mmap cannot be closed or resized under it (``mmap.close`` raises
``BufferError``).  ``release()`` drops the export and turns every later
lookup into "no entry" (slot -1), which is a correct, slower answer: a
caller then scans from the segment start.  Lookups never release the GIL,
so ``release()`` from another thread can never interleave with one.  Every
slot read is checked against the buffer length.
"""
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

import numpy as np
cimport numpy as cnp

cnp.import_array()

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #include <stdlib.h>
    static inline int32_t kr_be32(const uint8_t *p) {
        uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v);
    }
    static inline int64_t kr_be64(const uint8_t *p) {
        uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v);
    }
    static inline void kr_put_be32(uint8_t *p, int32_t x) {
        uint32_t v = __builtin_bswap32((uint32_t)x); memcpy(p, &v, 4);
    }
    static inline void kr_put_be64(uint8_t *p, int64_t x) {
        uint64_t v = __builtin_bswap64((uint64_t)x); memcpy(p, &v, 8);
    }

    /* Batched floor search over an offset index (8-byte big-endian entries,
     * int32 relative offset first), KR_LANES searches in lockstep.
     *
     * Why lockstep: one binary search is a chain of dependent loads (each
     * probe decides the next address), so a lone search waits a full memory
     * latency per level.  KR_LANES independent searches advanced one level at
     * a time issue KR_LANES independent loads per level, which the core
     * overlaps; the probes are branch-free (cmov), so the lanes never
     * mispredict.  All lanes share the same remaining length ``len``, which
     * is what keeps the loop uniform.
     *
     * For each target t (absolute offset): rel = min(t - base, INT32_MAX);
     * slot = largest s < n with key[s] <= rel, or -1; outputs (base + key,
     * position) for a slot, (base, 0) for -1 (Kafka's OffsetIndex.lookup).
     * Reads only entries [0, n) of p; n must fit in the buffer (checked by
     * the caller). */
    #define KR_LANES 16
    static inline int64_t kr_rel_target(int64_t t, int64_t base) {
        int64_t rel;
        if (__builtin_sub_overflow(t, base, &rel)) rel = t < 0 ? INT64_MIN : INT64_MAX;
        return rel > 0x7FFFFFFF ? 0x7FFFFFFF : rel;
    }
    static inline void kr_emit(const uint8_t *p, int64_t base, int64_t lo, int64_t rel,
                               int64_t *out_o, int64_t *out_p) {
        int32_t key = kr_be32(p + lo * 8);
        if (key <= rel) { *out_o = base + key; *out_p = kr_be32(p + lo * 8 + 4); }
        else { *out_o = base; *out_p = 0; }
    }
    /* The same lockstep search over ``key``, a native-endian copy of the
     * relative offsets: half the bytes of the entries (more keys per cache
     * line in the deep, random levels) and no byte swaps.  ~10% faster on a
     * 100k-entry index; the copy (n loads) is made only when the batch is big
     * enough to repay it. */
    static void kr_lookup_native_keys(const uint8_t *p, const int32_t *key, int64_t n, int64_t base,
                                      const int64_t *targets, int64_t m,
                                      int64_t *out_o, int64_t *out_p) {
        int64_t i = 0;
        for (; i + KR_LANES <= m; i += KR_LANES) {
            int64_t lo[KR_LANES], rel[KR_LANES];
            for (int k = 0; k < KR_LANES; k++) { lo[k] = 0; rel[k] = kr_rel_target(targets[i + k], base); }
            int64_t len = n;
            while (len > 1) {
                int64_t half = len >> 1;
                for (int k = 0; k < KR_LANES; k++)
                    lo[k] += half & -(int64_t)(key[lo[k] + half] <= rel[k]);
                len -= half;
            }
            for (int k = 0; k < KR_LANES; k++)
                kr_emit(p, base, lo[k], rel[k], out_o + i + k, out_p + i + k);
        }
        for (; i < m; i++) {
            int64_t lo = 0, len = n, rel = kr_rel_target(targets[i], base);
            while (len > 1) {
                int64_t half = len >> 1;
                lo += half & -(int64_t)(key[lo + half] <= rel);
                len -= half;
            }
            kr_emit(p, base, lo, rel, out_o + i, out_p + i);
        }
    }
    /* Radix buckets over the native keys, for batches large enough to pay
     * for building them.  The key range [key[0], key[n-1]] is cut into nbk
     * buckets of 2^shift values (nbk about n/2); start[b] is the first slot
     * whose key falls in bucket b or later (start[nbk] = n).  For a target in
     * bucket b every slot before start[b] has a smaller key and every slot
     * from start[b+1] a larger one, so the answer is in
     * [start[b] - 1, start[b+1] - 1]: a search over a few entries instead of
     * log2(n) levels.  Offset-index keys are close to evenly spread (one entry
     * per index.interval.bytes of log), so buckets hold ~2 entries; when some
     * bucket holds more than KR_RADIX_MAX_BUCKET the caller uses the plain
     * lockstep search instead, so skewed keys never cost more than that.
     *
     * Memory safety on arbitrary bytes: bucket numbers are clamped to
     * [0, nbk), start[] is non-decreasing by construction, so every probe is
     * inside [0, n).  (Answers, as for any binary search, are defined only for
     * non-decreasing keys -- the index invariant.) */
    #define KR_RADIX_MAX_BUCKET 32
    static int64_t kr_radix_build(const int32_t *key, int64_t n, int32_t *start, int *shift_out) {
        int64_t span = (int64_t)key[n - 1] - key[0], nbk, b = 0, maxfill = 0;
        int shift = 0;
        if (span < 0) return -1;  /* not sorted: no radix */
        while ((span >> shift) >= n / 2 + 1) shift++;
        nbk = (span >> shift) + 1;
        for (int64_t j = 0; j < n; j++) {
            int64_t kb = ((int64_t)key[j] - key[0]) >> shift;
            kb = kb < 0 ? 0 : (kb >= nbk ? nbk - 1 : kb);
            while (b <= kb) start[b++] = (int32_t)j;
        }
        while (b <= nbk) start[b++] = (int32_t)n;
        for (b = 0; b < nbk; b++)
            if (start[b + 1] - start[b] > maxfill) maxfill = start[b + 1] - start[b];
        *shift_out = shift;
        return maxfill > KR_RADIX_MAX_BUCKET ? -1 : nbk;
    }
    static void kr_lookup_radix(const uint8_t *p, const int32_t *key, int64_t n, int64_t base,
                                const int32_t *start, int64_t nbk, int shift,
                                const int64_t *targets, int64_t m, int64_t *out_o, int64_t *out_p) {
        int64_t k0 = key[0], kl = key[n - 1];
        for (int64_t i = 0; i < m; i += KR_LANES) {
            int64_t lanes = m - i < KR_LANES ? m - i : KR_LANES;
            int64_t lo[KR_LANES], len[KR_LANES], rel[KR_LANES], maxlen = 1;
            for (int k = 0; k < KR_LANES; k++) {
                int64_t r = kr_rel_target(targets[i + (k < lanes ? k : 0)], base);
                int64_t c = r < k0 ? k0 : (r > kl ? kl : r);
                int64_t b = (c - k0) >> shift;
                if (b >= nbk) b = nbk - 1;
                int64_t l = start[b] > 0 ? start[b] - 1 : 0;
                rel[k] = r;
                lo[k] = l;
                len[k] = start[b + 1] - l;
                maxlen = len[k] > maxlen ? len[k] : maxlen;
            }
            while (maxlen > 1) {  /* every lane's len <= maxlen; len 1 lanes do no-ops */
                for (int k = 0; k < KR_LANES; k++) {
                    int64_t half = len[k] >> 1;
                    lo[k] += half & -(int64_t)(key[lo[k] + half] <= rel[k]);
                    len[k] -= half;
                }
                maxlen -= maxlen >> 1;
            }
            for (int k = 0; k < lanes; k++)
                kr_emit(p, base, lo[k], rel[k], out_o + i + k, out_p + i + k);
        }
    }
    static void kr_offset_lookup_many(const uint8_t *p, int64_t n, int64_t base,
                                      const int64_t *targets, int64_t m,
                                      int64_t *out_o, int64_t *out_p) {
        int64_t i = 0;
        if (n <= 0) {
            for (; i < m; i++) { out_o[i] = base; out_p[i] = 0; }
            return;
        }
        if (m >= 4096 && m >= n / 4) {
            int32_t *key = (int32_t *)malloc((size_t)n * sizeof(int32_t));
            int32_t *start = (int32_t *)malloc((size_t)(n / 2 + 3) * sizeof(int32_t));
            if (key != NULL && start != NULL) {  /* else: the plain path below, no copy */
                int shift = 0;
                for (int64_t j = 0; j < n; j++) key[j] = kr_be32(p + j * 8);
                int64_t nbk = kr_radix_build(key, n, start, &shift);
                if (nbk > 0)
                    kr_lookup_radix(p, key, n, base, start, nbk, shift, targets, m, out_o, out_p);
                else
                    kr_lookup_native_keys(p, key, n, base, targets, m, out_o, out_p);
                free(key);
                free(start);
                return;
            }
            free(key);
            free(start);
        }
        for (; i + KR_LANES <= m; i += KR_LANES) {
            int64_t lo[KR_LANES], rel[KR_LANES];
            for (int k = 0; k < KR_LANES; k++) { lo[k] = 0; rel[k] = kr_rel_target(targets[i + k], base); }
            int64_t len = n;
            while (len > 1) {
                int64_t half = len >> 1;
                for (int k = 0; k < KR_LANES; k++) {
                    /* mask arithmetic, not ?: -- some compilers emit a branch for the
                     * ternary at some lane counts, which costs 5x on random targets */
                    lo[k] += half & -(int64_t)(kr_be32(p + (lo[k] + half) * 8) <= rel[k]);
                }
                len -= half;
            }
            for (int k = 0; k < KR_LANES; k++)
                kr_emit(p, base, lo[k], rel[k], out_o + i + k, out_p + i + k);
        }
        for (; i < m; i++) {  /* the tail, one at a time */
            int64_t lo = 0, len = n, rel = kr_rel_target(targets[i], base);
            while (len > 1) {
                int64_t half = len >> 1;
                lo += half & -(int64_t)(kr_be32(p + (lo + half) * 8) <= rel);
                len -= half;
            }
            kr_emit(p, base, lo, rel, out_o + i, out_p + i);
        }
    }
    """
    int32_t kr_be32(const uint8_t *p) nogil
    int64_t kr_be64(const uint8_t *p) nogil
    int64_t kr_rel_target(int64_t t, int64_t base) nogil
    void kr_put_be32(uint8_t *p, int32_t x) nogil
    void kr_put_be64(uint8_t *p, int64_t x) nogil
    void kr_offset_lookup_many(const uint8_t *p, int64_t n, int64_t base, const int64_t *targets,
                               int64_t m, int64_t *out_o, int64_t *out_p) nogil

OFFSET_ENTRY_SIZE = 8
TIME_ENTRY_SIZE = 12


cdef inline int64_t _floor32(const uint8_t *p, int64_t n, int64_t esize, int64_t koff,
                             int64_t target) noexcept nogil:
    """Largest slot whose int32 key (at byte koff of the entry) is <= target, or -1.

    Branch-free binary search: ``lo`` is the answer candidate, the loop
    halves ``n`` without data-dependent branches (the compiler emits cmov)."""
    cdef int64_t lo = 0, half
    if n <= 0 or kr_be32(p + koff) > target:
        return -1
    while n > 1:
        half = n >> 1
        if kr_be32(p + (lo + half) * esize + koff) <= target:
            lo += half
        n -= half
    return lo


cdef inline int64_t _floor64(const uint8_t *p, int64_t n, int64_t esize,
                             int64_t target) noexcept nogil:
    cdef int64_t lo = 0, half
    if n <= 0 or kr_be64(p) > target:
        return -1
    while n > 1:
        half = n >> 1
        if kr_be64(p + (lo + half) * esize) <= target:
            lo += half
        n -= half
    return lo


cdef class IndexSearcher:
    """Binary search over a memory-mapped Kafka index.

    ``kind`` is ``"offset"`` (entries: int32 relative offset, int32 position,
    big-endian, 8 bytes) or ``"time"`` (int64 timestamp, int32 relative
    offset, 12 bytes).  ``n`` (the number of valid entries) is set by the
    index writer after it has written an entry's bytes, so a concurrent
    reader never sees a half-written entry.
    """
    cdef Py_buffer view
    cdef bint held
    cdef const uint8_t *p
    cdef int64_t cap
    cdef int64_t esize
    cdef public int64_t n
    cdef public int64_t base_offset

    def __cinit__(self, buf, int64_t base_offset, str kind, int64_t n=0):
        self.held = False
        self.p = NULL
        self.cap = 0
        self.esize = 8 if kind == "offset" else 12
        if kind not in ("offset", "time"):
            raise ValueError(f"unknown index kind {kind!r}")
        self.base_offset = base_offset
        if buf is not None:
            PyObject_GetBuffer(buf, &self.view, PyBUF_SIMPLE)
            self.held = True
            self.p = <const uint8_t *>self.view.buf
            self.cap = self.view.len // self.esize
        if n < 0 or n > self.cap:
            self.release()
            raise ValueError(f"{n} entries do not fit in a buffer of {self.cap} entries")
        self.n = n

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False

    def release(self):
        """Drop the buffer export; later lookups answer "no entry"."""
        self.n = 0
        self.cap = 0
        self.p = NULL
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False

    cdef inline int64_t _valid(self):
        return self.n if self.n <= self.cap else self.cap

    @property
    def capacity(self):
        return self.cap

    def entry(self, int64_t slot):
        """Slot ``slot`` decoded: (offset, position) or (timestamp, offset), absolute offsets."""
        cdef int64_t n = self._valid()
        if slot < 0 or slot >= n:
            raise IndexError(f"index slot {slot} out of range [0, {n})")
        cdef const uint8_t *e = self.p + slot * self.esize
        if self.esize == 8:
            return (self.base_offset + kr_be32(e), kr_be32(e + 4))
        return (kr_be64(e), self.base_offset + kr_be32(e + 8))

    # ---- offset index ----
    def offset_slot(self, int64_t offset):
        """Slot of the largest entry whose offset is <= ``offset``, or -1."""
        cdef int64_t rel = kr_rel_target(offset, self.base_offset)  # saturating, clamped
        if self.esize != 8:
            raise TypeError("offset_slot on a time index")
        return _floor32(self.p, self._valid(), 8, 0, rel)

    def lookup(self, int64_t offset):
        """Kafka's ``OffsetIndex.lookup``: (offset, position) of the largest entry
        with offset <= ``offset``; (base_offset, 0) when there is none."""
        cdef int64_t rel = kr_rel_target(offset, self.base_offset)  # saturating, clamped
        cdef int64_t s
        if self.esize != 8:
            raise TypeError("lookup on a time index")
        s = _floor32(self.p, self._valid(), 8, 0, rel)
        if s < 0:
            return (self.base_offset, 0)
        return (self.base_offset + kr_be32(self.p + s * 8), kr_be32(self.p + s * 8 + 4))

    def position_slot(self, int64_t position):
        """Slot of the largest entry whose file position is <= ``position``, or -1."""
        if self.esize != 8:
            raise TypeError("position_slot on a time index")
        if position > 0x7FFFFFFF:
            position = 0x7FFFFFFF
        return _floor32(self.p, self._valid(), 8, 4, position)

    def lookup_many(self, const int64_t[::1] offsets, int64_t[::1] out_offsets,
                    int64_t[::1] out_positions):
        """Batched :meth:`lookup`: fills ``out_offsets``/``out_positions``.

        Runs ``kr_offset_lookup_many`` (lockstep searches, see the C block at
        the top).  The GIL is kept: ``release()`` from another thread must not
        unmap the buffer under the loop (see the module doc)."""
        cdef Py_ssize_t m = offsets.shape[0]
        if self.esize != 8:
            raise TypeError("lookup_many on a time index")
        if out_offsets.shape[0] < m or out_positions.shape[0] < m:
            raise ValueError("output arrays are shorter than the input")
        if m == 0:
            return
        kr_offset_lookup_many(self.p, self._valid(), self.base_offset, &offsets[0], m,
                              &out_offsets[0], &out_positions[0])

    # ---- time index ----
    def time_slot(self, int64_t timestamp):
        """Slot of the largest entry whose timestamp is <= ``timestamp``, or -1."""
        if self.esize != 12:
            raise TypeError("time_slot on an offset index")
        return _floor64(self.p, self._valid(), 12, timestamp)

    def time_lookup(self, int64_t timestamp):
        """Kafka's ``TimeIndex.lookup``: (timestamp, offset) of the largest entry with
        timestamp <= ``timestamp``; (-1, base_offset) when there is none."""
        cdef int64_t s
        if self.esize != 12:
            raise TypeError("time_lookup on an offset index")
        s = _floor64(self.p, self._valid(), 12, timestamp)
        if s < 0:
            return (-1, self.base_offset)
        return (kr_be64(self.p + s * 12), self.base_offset + kr_be32(self.p + s * 12 + 8))


def plan_entries(const int64_t[::1] positions, const int32_t[::1] sizes,
                 const int64_t[::1] last_offsets, const int64_t[::1] max_timestamps,
                 int64_t base_offset, int64_t interval, int64_t bytes_since,
                 int64_t max_ts, int64_t offset_of_max_ts, int64_t last_time_ts,
                 int64_t[::1] out_off_rel, int64_t[::1] out_off_pos,
                 int64_t[::1] out_ts, int64_t[::1] out_ts_rel):
    """Index entries for a run of appended batches (see the pure twin for the rule).

    Returns (n_offset_entries, n_time_entries, bytes_since, max_ts,
    offset_of_max_ts, last_time_ts)."""
    cdef Py_ssize_t i, m = positions.shape[0]
    cdef Py_ssize_t no = 0, nt = 0
    if sizes.shape[0] < m or last_offsets.shape[0] < m or max_timestamps.shape[0] < m:
        raise ValueError("input columns differ in length")
    if out_off_rel.shape[0] < m or out_off_pos.shape[0] < m or out_ts.shape[0] < m \
            or out_ts_rel.shape[0] < m:
        raise ValueError("output arrays are shorter than the input")
    with nogil:
        for i in range(m):
            if max_timestamps[i] > max_ts:
                max_ts = max_timestamps[i]
                offset_of_max_ts = last_offsets[i]
            if bytes_since > interval:
                out_off_rel[no] = last_offsets[i] - base_offset
                out_off_pos[no] = positions[i]
                no += 1
                if max_ts > last_time_ts:
                    out_ts[nt] = max_ts
                    out_ts_rel[nt] = offset_of_max_ts - base_offset
                    nt += 1
                    last_time_ts = max_ts
                bytes_since = 0
            bytes_since += sizes[i]
    return no, nt, bytes_since, max_ts, offset_of_max_ts, last_time_ts


# ---------------------------------------------------------------- FileMap

from cpython.buffer cimport PyBuffer_FillInfo, PyBUF_WRITABLE
from libc.errno cimport errno
from libc.string cimport memcpy
from posix.mman cimport mmap, munmap, msync, PROT_READ, PROT_WRITE, MAP_SHARED, MAP_FAILED, MS_SYNC


cdef class FileMap:
    """A shared mapping of ``length`` bytes of the file open on ``fd`` that keeps no descriptor.

    Why: CPython's ``mmap.mmap`` duplicates the descriptor and holds it for the life of the map
    (``trackfd=False`` only came in 3.13), so an index cost two descriptors (its own and the
    map's) and a partition log five.  A broker hosting 10k partition logs then needed 50k
    descriptors against the 20k that a default hard limit gives.  Kafka maps its indexes and
    closes the file: one descriptor per segment, the ``.log``.  ``mmap(2)`` keeps the mapping
    valid after ``close(2)``, so the index maps, closes its descriptor, and opens the path again
    only for the rare calls that need one (resize, reserve blocks, trim).

    The buffer protocol gives the searcher and the appender the raw bytes (writable if the map
    is).  ``close()`` refuses while a buffer is exported, as ``mmap.mmap.close`` does
    (``BufferError``), so a pointer into the map can never outlive it.  ``flush()`` is
    ``msync(MS_SYNC)``.  Slices read and assign like ``mmap.mmap``'s (bounds checked)."""
    cdef uint8_t *p
    cdef Py_ssize_t length
    cdef bint writable
    cdef Py_ssize_t exports
    cdef bint is_closed

    def __cinit__(self, int fd, Py_ssize_t length, bint writable):
        self.p = NULL
        self.is_closed = True
        self.exports = 0
        if length <= 0:
            raise ValueError(f"cannot map {length} bytes")
        cdef void *m = mmap(NULL, <size_t>length, PROT_READ | (PROT_WRITE if writable else 0), MAP_SHARED, fd, 0)
        if m == MAP_FAILED:
            raise OSError(errno, f"mmap of {length} bytes failed")
        self.p = <uint8_t *>m
        self.length = length
        self.writable = writable
        self.is_closed = False

    def __dealloc__(self):
        if not self.is_closed and self.p != NULL:
            munmap(self.p, <size_t>self.length)
            self.p = NULL
            self.is_closed = True

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        if self.is_closed:
            raise ValueError("mmap closed or invalid")
        if (flags & PyBUF_WRITABLE) and not self.writable:
            raise BufferError("the mapping is read-only")
        PyBuffer_FillInfo(buffer, self, self.p, self.length, not self.writable, flags)
        self.exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        self.exports -= 1

    def __len__(self):
        self._check_open()
        return self.length

    cdef int _check_open(self) except -1:
        if self.is_closed:
            raise ValueError("mmap closed or invalid")
        return 0

    cdef tuple _span(self, key):
        cdef Py_ssize_t start, stop, step
        if not isinstance(key, slice):
            raise TypeError("FileMap indices must be slices")
        start, stop, step = key.indices(self.length)
        if step != 1:
            raise ValueError("FileMap slices must be contiguous")
        if stop < start:
            stop = start
        return start, stop

    def __getitem__(self, key):
        self._check_open()
        start, stop = self._span(key)
        return (<char *>self.p)[start:stop]

    def __setitem__(self, key, value):
        cdef Py_buffer vb
        cdef Py_ssize_t start, stop
        self._check_open()
        if not self.writable:
            raise TypeError("the mapping is read-only")
        start, stop = self._span(key)
        PyObject_GetBuffer(value, &vb, PyBUF_SIMPLE)
        try:
            if vb.len != stop - start:
                raise IndexError(f"slice assignment of {vb.len} bytes to a slice of {stop - start}")
            memcpy(self.p + start, vb.buf, <size_t>vb.len)
        finally:
            PyBuffer_Release(&vb)

    def flush(self):
        self._check_open()
        if self.writable and msync(self.p, <size_t>self.length, MS_SYNC) != 0:
            raise OSError(errno, "msync failed")

    @property
    def closed(self):
        return self.is_closed

    def close(self):
        if self.is_closed:
            return
        if self.exports > 0:
            raise BufferError("cannot close exported pointers exist")
        munmap(self.p, <size_t>self.length)
        self.p = NULL
        self.is_closed = True
