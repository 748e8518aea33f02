# cython: language_level=3
"""The striped placer's per-partition loop in C (twin: ``kraft_node._pure._placement``; read
that for the array layout and the semantics -- the two give the same answers and leave the
same state, tests compare them).

Why native: ``StripedReplicaPlacer.place_columns`` must place well over a million replicas a
second (issue 22), and the loop is branchy integer code on small arrays -- a few ns per replica
in C, about a microsecond in Python.  The arrays are validated once per call (sizes, list bounds,
rack ids), so the loop itself runs unchecked.  The GIL is kept: a call is short and mutates
arrays its caller owns.
"""
from libc.stdint cimport int32_t, int64_t, uint64_t

import numpy as np

cdef struct Lcg:
    uint64_t state
    uint64_t mult
    uint64_t add
    uint64_t mask
    int shift


cdef inline int32_t next31(Lcg *g) noexcept nogil:
    g.state = (g.state * g.mult + g.add) & g.mask
    return <int32_t>((g.state >> g.shift) & 0x7FFFFFFF)


cdef inline int32_t next_int(Lcg *g, int32_t bound) noexcept nogil:
    """java.util.Random.nextInt(bound) for bound >= 1."""
    cdef int32_t r = next31(g)
    cdef int32_t m = bound - 1
    cdef int32_t u
    if (bound & m) == 0:
        return <int32_t>((<int64_t>bound * r) >> 31)
    u = r
    r = u % bound
    while <int64_t>u - r + m > 0x7FFFFFFF:
        u = next31(g)
        r = u % bound
    return r


cdef inline void shuffle(Lcg *g, int32_t *items, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef int32_t j, t
    i = n
    while i > 1:
        j = next_int(g, <int32_t>i)
        t = items[i - 1]
        items[i - 1] = items[j]
        items[j] = t
        i -= 1


cdef inline int32_t next_of(int32_t *brokers, const int32_t *starts, int64_t *cur,
                            int64_t lst, int64_t epoch) noexcept nogil:
    cdef int64_t lo = starts[lst]
    cdef int64_t size = starts[lst + 1] - lo
    cdef int64_t *c = cur + 3 * lst
    cdef int64_t index
    if size == 0:
        return -1
    if c[2] != epoch:
        c[2] = epoch
        c[0] = 0
        c[1] = (c[1] + 1) % size
    index = c[0]
    if index >= size:
        return -1
    c[0] = index + 1
    return brokers[lo + (index + c[1]) % size]


def place_partitions(out, brokers, starts, cursors, rack_names, map_order, rack_state, rng):
    """Place ``out.shape[0]`` partitions of ``out.shape[1]`` replicas; update the state arrays."""
    cdef int32_t[:, ::1] o = out
    cdef int32_t[::1] b = brokers
    cdef const int32_t[::1] s = starts
    cdef int64_t[::1] cu = cursors
    cdef int32_t[::1] names = rack_names
    cdef const int32_t[::1] order = map_order
    cdef int64_t[::1] rs = rack_state
    cdef uint64_t[::1] g_arr = rng
    cdef int64_t num_partitions = o.shape[0]
    cdef int64_t rf = o.shape[1]
    cdef int64_t num_racks = names.shape[0]
    cdef int64_t num_lists = 2 * num_racks
    cdef int64_t i, p, replica, first, index, misses, epoch, offset, num_unfenced
    cdef int32_t leader, result, r
    cdef Lcg g
    cdef int width
    if s.shape[0] != num_lists + 1 or cu.shape[0] != 3 * num_lists or order.shape[0] != num_racks:
        raise ValueError(f"placement state sizes disagree: {num_racks} racks, {s.shape[0]} list starts, "
                         f"{cu.shape[0]} cursor slots, {order.shape[0]} map-order entries")
    if rs.shape[0] < 3 or g_arr.shape[0] < 4:
        raise ValueError("rack_state needs 3 entries and rng 4")
    if num_racks == 0 or rf < 1:
        raise ValueError(f"nothing to place on: {num_racks} racks, replication factor {rf}")
    if s[0] != 0 or s[num_lists] != b.shape[0]:
        raise ValueError(f"list starts must run from 0 to {b.shape[0]}")
    for i in range(num_lists):
        if s[i + 1] < s[i]:
            raise ValueError(f"list starts must not decrease (list {i})")
    for i in range(num_racks):
        if not (0 <= names[i] < num_racks and 0 <= order[i] < num_racks):
            raise ValueError(f"rack id out of range at {i}")
    width = <int>g_arr[3]
    if width < 31 or width > 64:
        raise ValueError(f"LCG width must be 31..64 bits, got {width}")
    g.state = g_arr[0]
    g.mult = g_arr[1]
    g.add = g_arr[2]
    g.mask = 0xFFFFFFFFFFFFFFFF if width == 64 else ((<uint64_t>1 << width) - 1)
    g.shift = width - 31
    epoch = rs[0]
    offset = rs[1]
    num_unfenced = rs[2]
    cdef int32_t *bp = &b[0] if b.shape[0] else NULL
    cdef const int32_t *sp = &s[0]
    cdef int64_t *cp = &cu[0]
    cdef int32_t *np_ = &names[0]
    cdef str stuck = None
    for p in range(num_partitions):
        if epoch == num_unfenced and num_unfenced > 1:
            shuffle(&g, np_, num_racks)
            for i in range(num_racks):
                r = order[i]
                shuffle(&g, bp + sp[2 * r + 1], sp[2 * r + 2] - sp[2 * r + 1])
                shuffle(&g, bp + sp[2 * r], sp[2 * r + 1] - sp[2 * r])
            epoch = 0
        if offset == num_racks:
            offset = 0
        first = offset
        misses = 0
        while True:
            leader = next_of(bp, sp, cp, 2 * np_[first], epoch)
            if leader >= 0:
                break
            misses += 1
            if misses > num_racks:
                stuck = f"no rack has an unfenced broker left in iteration epoch {epoch}"
                break
            first += 1
            if first == num_racks:
                first = 0
        if stuck is not None:
            break
        o[p, 0] = leader
        index = offset
        for replica in range(1, rf):
            misses = 0
            while True:
                result = -1
                if index == first:
                    first = -1
                else:
                    r = np_[index]
                    result = next_of(bp, sp, cp, 2 * r, epoch)
                    if result < 0:
                        result = next_of(bp, sp, cp, 2 * r + 1, epoch)
                index += 1
                if index == num_racks:
                    index = 0
                if result >= 0:
                    break
                misses += 1
                if misses > num_racks + 1:
                    stuck = f"no rack has a broker left for replica {replica} in iteration epoch {epoch}"
                    break
            if stuck is not None:
                break
            o[p, replica] = result
        if stuck is not None:
            break
        epoch += 1
        offset += 1
    rs[0] = epoch
    rs[1] = offset
    g_arr[0] = g.state
    if stuck is not None:
        raise RuntimeError(stuck)
