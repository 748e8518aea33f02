# cython: language_level=3
"""Metadata response partitions from a partition block's columns, in C (twin:
``kraft_node._pure._metadata_encode``; read that for the contract and the byte layout -- the two
give equal bytes, the tests compare them).

Why native: the numpy twin spends ~18 ms on 50,000 partitions (broker lookups, filters, one
structured array per row shape, fancy-index stores); this is one pass to flag each replica
(usable, offline) -- broker flags from a table indexed by broker id when the ids are below
2**16 (a binary search over the sorted ids otherwise) -- and one pass writing each row straight
into the answer's bytes object, allocated at an upper bound and shrunk in place at the end (no
second copy).  No Python object is made per row.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE, _PyBytes_Resize
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF
from libc.string cimport memcpy
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t
from libc.stdlib cimport calloc, free, malloc

cdef extern from "Python.h":
    # the same function, returning a reference this code owns (for _PyBytes_Resize)
    PyObject* _new_bytes "PyBytes_FromStringAndSize"(const char* v, Py_ssize_t n)

import numpy as np

__all__ = ["LEADER_NOT_AVAILABLE", "LISTENER_NOT_FOUND", "REPLICA_NOT_AVAILABLE", "assemble_topics",
           "encode_metadata_partitions", "join_slices"]

cdef enum:
    _LEADER_NOT_AVAILABLE = 5
    _REPLICA_NOT_AVAILABLE = 9
    _LISTENER_NOT_FOUND = 72

LEADER_NOT_AVAILABLE = _LEADER_NOT_AVAILABLE
REPLICA_NOT_AVAILABLE = _REPLICA_NOT_AVAILABLE
LISTENER_NOT_FOUND = _LISTENER_NOT_FOUND


# a broker's flags in the lookup (``_Brokers``): registered, usable (unfenced, with the
# listener), with the listener
cdef enum:
    _REGISTERED = 1
    _USABLE = 2
    _HAS_LISTENER = 4
    # broker ids below this are looked up in a table indexed by id, others by binary search
    _DENSE_IDS = 1 << 16


cdef struct _Brokers:
    const int32_t* ids
    const uint8_t* usable
    const uint8_t* listener
    Py_ssize_t n
    uint8_t* dense  # flags by broker id (NULL: binary search only)
    int32_t dense_max


cdef inline uint8_t _flags(const _Brokers* b, int32_t v) noexcept nogil:
    """The flags of broker ``v`` (0: not registered)."""
    if b.dense != NULL:
        if 0 <= v <= b.dense_max:
            return b.dense[v]
        return 0
    cdef Py_ssize_t lo = 0, hi = b.n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if b.ids[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    if lo < b.n and b.ids[lo] == v:
        return _REGISTERED | (_USABLE if b.usable[lo] else 0) | (_HAS_LISTENER if b.listener[lo] else 0)
    return 0


cdef inline uint8_t* _be32(uint8_t* p, int32_t v) noexcept nogil:
    cdef unsigned int u = <unsigned int>v
    p[0] = (u >> 24) & 0xFF
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF
    return p + 4


cdef inline uint8_t* _count(uint8_t* p, int64_t c, bint flexible) noexcept nogil:
    if flexible:
        p[0] = <uint8_t>(c + 1)
        return p + 1
    return _be32(p, <int32_t>c)


def encode_metadata_partitions(int version, const int32_t[::1] partition_id, const int32_t[::1] leader,
                               const int32_t[::1] leader_epoch, const int32_t[::1] replicas,
                               const int32_t[::1] replicas_offsets, const int32_t[::1] isr,
                               const int32_t[::1] isr_offsets, const int32_t[::1] broker_ids,
                               const uint8_t[::1] broker_usable, const uint8_t[::1] broker_has_listener,
                               offline_extra=None):
    cdef Py_ssize_t n = partition_id.shape[0]
    if n == 0:
        return b"", np.zeros(1, dtype=np.int64)
    if leader.shape[0] != n or leader_epoch.shape[0] != n or replicas_offsets.shape[0] != n + 1 \
            or isr_offsets.shape[0] != n + 1:
        raise ValueError("the block's columns have different lengths")
    if broker_usable.shape[0] != broker_ids.shape[0] or broker_has_listener.shape[0] != broker_ids.shape[0]:
        raise ValueError("the broker flags and ids have different lengths")
    cdef int64_t r_base = replicas_offsets[0], r_end = replicas_offsets[n]
    cdef int64_t i_base = isr_offsets[0], i_end = isr_offsets[n]
    if r_base < 0 or r_end > replicas.shape[0] or r_end < r_base or i_base < 0 or i_end > isr.shape[0] \
            or i_end < i_base:
        raise ValueError("the list offsets point outside their arrays")
    cdef const uint8_t[::1] extra
    cdef bint has_extra = offline_extra is not None
    if has_extra:
        extra = offline_extra
        if extra.shape[0] != r_end - r_base:
            raise ValueError("offline_extra needs one flag per replica element")
    cdef bint flexible = version >= 9
    cdef bint with_epoch = version >= 7
    cdef bint with_offline = version >= 5
    cdef int16_t no_listener = _LISTENER_NOT_FOUND if version >= 6 else _LEADER_NOT_AVAILABLE
    cdef int64_t head = 10 + (4 if with_epoch else 0) + (1 if flexible else 0)
    cdef int64_t plen = 1 if flexible else 4
    # upper bound: every list at its full length (v0 and the offline list only drop elements);
    # the answer is written in place into a bytes object of that size, then shrunk
    cdef int64_t cap = n * (head + 3 * plen) + 4 * (2 * (r_end - r_base) + (i_end - i_base))
    cdef _Brokers brokers
    brokers.ids = &broker_ids[0] if broker_ids.shape[0] else NULL
    brokers.usable = &broker_usable[0] if broker_ids.shape[0] else NULL
    brokers.listener = &broker_has_listener[0] if broker_ids.shape[0] else NULL
    brokers.n = broker_ids.shape[0]
    brokers.dense = NULL
    brokers.dense_max = -1
    cdef Py_ssize_t k
    if brokers.n == 0 or (broker_ids[0] >= 0 and broker_ids[brokers.n - 1] < _DENSE_IDS):
        brokers.dense_max = broker_ids[brokers.n - 1] if brokers.n else -1
        brokers.dense = <uint8_t*>calloc(<size_t>(brokers.dense_max + 2), 1)
        if brokers.dense == NULL:
            raise MemoryError()
        for k in range(brokers.n):
            brokers.dense[broker_ids[k]] = (_REGISTERED | (_USABLE if broker_usable[k] else 0)
                                            | (_HAS_LISTENER if broker_has_listener[k] else 0))
    cdef uint8_t* flags = <uint8_t*>malloc(<size_t>(r_end - r_base + 1))
    cdef PyObject* out = _new_bytes(NULL, cap)
    if flags == NULL or out == NULL:
        free(flags)
        free(brokers.dense)
        if out != NULL:
            Py_DECREF(<object>out)
        raise MemoryError()
    cdef uint8_t* buf = <uint8_t*>PyBytes_AS_STRING(<object>out)
    row_offsets = np.empty(n + 1, dtype=np.int64)
    cdef int64_t[::1] ro_out = row_offsets
    cdef Py_ssize_t i
    cdef int64_t e, r0, r1, i0, i1, c_rep, c_isr, c_off
    cdef int32_t leader_id
    cdef int16_t error
    cdef uint8_t lf
    cdef bint too_long = False
    cdef uint8_t* p = buf
    try:
        with nogil:
            # flags per replica element: bit 0 usable, bit 1 offline
            for e in range(r_base, r_end):
                lf = _flags(&brokers, replicas[e])
                flags[e - r_base] = 1 if lf & _USABLE else 2
                if has_extra and extra[e - r_base]:
                    flags[e - r_base] |= 2
            for i in range(n):
                ro_out[i] = p - buf
                r0, r1 = replicas_offsets[i], replicas_offsets[i + 1]
                i0, i1 = isr_offsets[i], isr_offsets[i + 1]
                c_off = 0
                c_rep = 0
                for e in range(r0, r1):
                    if flags[e - r_base] & 2:
                        c_off += 1
                    if flags[e - r_base] & 1:
                        c_rep += 1
                if version == 0:
                    c_isr = 0
                    for e in range(i0, i1):
                        if _flags(&brokers, isr[e]) & _USABLE:
                            c_isr += 1
                else:
                    c_rep = r1 - r0
                    c_isr = i1 - i0
                if flexible and (c_rep >= 127 or c_isr >= 127 or (with_offline and c_off >= 127)):
                    too_long = True
                    break
                error = 0
                if version == 0 and (c_rep < r1 - r0 or c_isr < i1 - i0):
                    error = _REPLICA_NOT_AVAILABLE
                lf = _flags(&brokers, leader[i])
                if lf & _REGISTERED and not lf & _HAS_LISTENER:
                    error = no_listener
                if not lf & _REGISTERED:
                    error = _LEADER_NOT_AVAILABLE
                leader_id = leader[i] if lf & _HAS_LISTENER else -1
                p[0] = (<unsigned int>error >> 8) & 0xFF
                p[1] = <unsigned int>error & 0xFF
                p = _be32(p + 2, partition_id[i])
                p = _be32(p, leader_id)
                if with_epoch:
                    p = _be32(p, leader_epoch[i])
                p = _count(p, c_rep, flexible)
                for e in range(r0, r1):
                    if version != 0 or flags[e - r_base] & 1:
                        p = _be32(p, replicas[e])
                p = _count(p, c_isr, flexible)
                for e in range(i0, i1):
                    if version != 0 or _flags(&brokers, isr[e]) & _USABLE:
                        p = _be32(p, isr[e])
                if with_offline:
                    p = _count(p, c_off, flexible)
                    for e in range(r0, r1):
                        if flags[e - r_base] & 2:
                            p = _be32(p, replicas[e])
                if flexible:
                    p[0] = 0
                    p += 1
            ro_out[n] = p - buf
    finally:
        free(flags)
        free(brokers.dense)
    if too_long:
        Py_DECREF(<object>out)
        raise ValueError("a replica list of 127 or more brokers needs a multi-byte varint")
    # shrinks in place (realloc); on failure ``out`` is freed and set to NULL, and it raises
    _PyBytes_Resize(&out, p - buf)
    data = <object>out  # a new reference ...
    Py_DECREF(data)  # ... and the one _new_bytes gave is dropped: ``data`` owns the object
    return data, row_offsets


def assemble_topics(list prefixes, list buffers, const int32_t[::1] which, const int64_t[::1] starts,
                    const int64_t[::1] stops, bytes suffix):
    """Each topic's bytes in one allocation and three copies (the twin joins them)."""
    cdef Py_ssize_t n = len(prefixes), i, nbuf = len(buffers)
    if which.shape[0] != n or starts.shape[0] != n or stops.shape[0] != n:
        raise ValueError("prefixes, which, starts and stops have different lengths")
    for i in range(nbuf):
        if type(buffers[i]) is not bytes:
            raise TypeError(f"buffer {i} is a {type(buffers[i]).__name__}, not bytes")
    cdef list out = [None] * n
    cdef object prefix, buf, item
    cdef Py_ssize_t plen, slen = PyBytes_GET_SIZE(suffix), w
    cdef int64_t a, b
    cdef char* dst
    for i in range(n):
        prefix = prefixes[i]
        if type(prefix) is not bytes:
            raise TypeError(f"prefix {i} is a {type(prefix).__name__}, not bytes")
        w, a, b = which[i], starts[i], stops[i]
        if w < 0 or w >= nbuf:
            raise IndexError(f"topic {i}: slice [{a}, {b}) of buffer {w} is outside the buffers")
        buf = buffers[w]
        if a < 0 or b < a or b > PyBytes_GET_SIZE(buf):
            raise IndexError(f"topic {i}: slice [{a}, {b}) of buffer {w} is outside the buffers")
        plen = PyBytes_GET_SIZE(prefix)
        item = PyBytes_FromStringAndSize(NULL, plen + (b - a) + slen)
        dst = PyBytes_AS_STRING(item)
        memcpy(dst, PyBytes_AS_STRING(prefix), plen)
        memcpy(dst + plen, PyBytes_AS_STRING(buf) + a, b - a)
        memcpy(dst + plen + (b - a), PyBytes_AS_STRING(suffix), slen)
        out[i] = item
    return out


def join_slices(list buffers, const int32_t[::1] which, const int64_t[::1] starts, const int64_t[::1] stops):
    """The slices ``buffers[which[i]][starts[i]:stops[i]]`` one after another, in one allocation
    (the twin joins memoryviews).  Bounds are checked before anything is copied."""
    cdef Py_ssize_t m = which.shape[0], i, nbuf = len(buffers)
    if starts.shape[0] != m or stops.shape[0] != m:
        raise ValueError("which, starts and stops have different lengths")
    for i in range(nbuf):
        if type(buffers[i]) is not bytes:
            raise TypeError(f"buffer {i} is a {type(buffers[i]).__name__}, not bytes")
    cdef int64_t total = 0, a, b
    cdef int32_t w
    for i in range(m):
        w, a, b = which[i], starts[i], stops[i]
        if w < 0 or w >= nbuf or a < 0 or b < a or b > PyBytes_GET_SIZE(buffers[w]):
            raise IndexError(f"slice {i}: [{a}, {b}) of buffer {w} is outside the buffers")
        total += b - a
    out = PyBytes_FromStringAndSize(NULL, total)
    cdef char* dst = PyBytes_AS_STRING(out)
    cdef object buf
    for i in range(m):
        a, b = starts[i], stops[i]
        if b > a:
            buf = buffers[which[i]]
            memcpy(dst, PyBytes_AS_STRING(buf) + a, b - a)
            dst += b - a
    return out
