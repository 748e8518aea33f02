# Part of kraft_storage._native._timeline, included by _timeline.pyx after
# _timeline_collections.pxi.  ``put_grouped``: a reverse index (broker ->
# topic -> partitions, directory -> topic -> partitions) filled from flat
# columns in one C pass, straight into the maps' tables.  The pure twin in
# kraft_storage/_pure/_timeline.py is the specification (and the oracle of the
# property test in tests/storage/test_timeline_grouped.py).

from libc.stdint cimport uint8_t

cdef extern from "Python.h":
    object PyTuple_New_o "PyTuple_New"(Py_ssize_t n)
    void PyTuple_SET_ITEM_p "PyTuple_SET_ITEM"(object t, Py_ssize_t i, PyObject* o)
    PyObject* PyTuple_GET_ITEM_p "PyTuple_GET_ITEM"(object t, Py_ssize_t i)
    void PyObject_GC_UnTrack_p "PyObject_GC_UnTrack"(PyObject* o)


cdef void _untrack_int_tuple(PyObject* o) noexcept:
    """Untrack a tuple that holds only exact ints (what the collector itself does to such a
    tuple at its first pass): a map holding only such values needs no walk (``tbl_note``)."""
    cdef Py_ssize_t i, n
    if type(<object>o) is not tuple or not PyObject_GC_IsTracked_p(o):
        return
    n = len(<tuple>o)
    for i in range(n):
        if not PyLong_CheckExact_p(PyTuple_GET_ITEM_p(<object>o, i)):
            return
    PyObject_GC_UnTrack_p(o)


cdef object _merge_grouped(object existing, object new, bint distinct):
    """An entry already in the map goes first; ``distinct``: the new entries it
    already holds are not added again (the directory index's ``add_many``)."""
    if not distinct:
        return existing + new
    present = set(existing)
    return existing + tuple([p for p in new if p not in present])


cdef object _group_value(const int32_t* sc, Py_ssize_t j, Py_ssize_t e, tuple ints_t, tuple ones_t):
    """The tuple of entries j..e-1 (their codes ``sc[j:e]``): the shared ``ones`` tuple for a
    one-entry group, else a new tuple, untracked when it holds only exact ints."""
    cdef Py_ssize_t i, size = e - j
    cdef PyObject* item
    cdef bint atomic = True
    if size == 1:
        return <object>PyTuple_GET_ITEM_p(ones_t, sc[j])
    tup = PyTuple_New_o(size)
    for i in range(size):
        item = PyTuple_GET_ITEM_p(ints_t, sc[j + i])
        atomic = atomic and PyLong_CheckExact_p(item)
        Py_INCREF_p(item)
        PyTuple_SET_ITEM_p(tup, i, item)
    if atomic:      # ints cannot be part of a cycle
        PyObject_GC_UnTrack_p(<PyObject*>tup)
    return tup


cdef Py_ssize_t _grouped_insert(_SnapshottableHashTable m, Py_ssize_t g, const int32_t* st_, const int32_t* sc,
                                Py_ssize_t a, Py_ssize_t b, tuple ints_t, tuple ones_t, tuple keys_t,
                                const uint32_t* th) except -1:
    """The fast path of one map's groups (entries a..b-1, ``g`` groups): no snapshot of the
    registry (so no tier to record the added keys in: what ``_bulk_put_seq`` does with no
    snapshot) and no stale topic (no value to read back), with exact keys whose folded hashes
    are ``th``.  Each group is inserted straight into the table, sized once for ``g``, without
    the key and value lists ``_bulk_put_seq`` takes (two lists, and two reference count round
    trips, per group).  Returns where it stopped: ``b``, or the first group whose key the
    table holds already (the caller said it does not; the list path then puts that group and
    the rest, replacing values as ``put`` does)."""
    cdef Table* t = &m.t
    cdef Py_ssize_t j = a, e, ix
    cdef int32_t topic
    cdef size_t slot = 0
    cdef PyObject* key
    cdef object val
    cdef int64_t start = C_NONE + 1      # _bulk_put_seq's start with no snapshot
    tbl_reserve(t, g)
    while j < b:
        topic = st_[j]
        e = j + 1
        while e < b and st_[e] == topic:
            e += 1
        key = PyTuple_GET_ITEM_p(keys_t, topic)
        ix = _probe_exact(t.index, t.entries, t.hashes, t.mask, key, th[topic], &slot)
        if ix != -1:
            return j
        val = _group_value(sc, j, e, ints_t, ones_t)
        _insert_at(t, slot, key, <PyObject*>val, th[topic], start)
        j = e
    return b


cdef int _grouped_put_seq(object m, const int32_t* st_, const int32_t* sc, Py_ssize_t a, Py_ssize_t b,
                          tuple ints_t, tuple ones_t, tuple keys_t, const uint8_t[::1] sv,
                          bint merge_distinct) except -1:
    """The general path of one map's groups (entries a..b-1): each group's tuple (merged with
    the map's value for a stale topic), then one ``_bulk_put_seq`` of the key and value lists."""
    cdef Py_ssize_t g = 1, j, e, gi = 0
    cdef int32_t topic
    cdef object val, key, existing
    cdef list klist, vlist
    for j in range(a + 1, b):
        if st_[j] != st_[j - 1]:
            g += 1
    # new lists of NULL items, each set once below (PyList_SET_ITEM); nothing else holds them
    # until they are full (a NULL item is safe for their dealloc and for the collector, should
    # m.get below run it)
    klist = PyList_New(g)
    vlist = PyList_New(g)
    j = a
    while j < b:
        topic = st_[j]
        e = j + 1
        while e < b and st_[e] == topic:
            e += 1
        val = _group_value(sc, j, e, ints_t, ones_t)
        key = <object>PyTuple_GET_ITEM_p(keys_t, topic)
        if sv[topic]:
            existing = m.get(key)
            if existing is not None:
                val = _merge_grouped(existing, val, merge_distinct)
        Py_INCREF_p(<PyObject*>key)
        PyList_SET_ITEM_p(klist, gi, <PyObject*>key)
        Py_INCREF_p(<PyObject*>val)
        PyList_SET_ITEM_p(vlist, gi, <PyObject*>val)
        gi += 1
        j = e
    (<_SnapshottableHashTable>m)._bulk_put_seq(klist, vlist)
    return 0


def put_grouped(maps, key_of, topic_of, codes, ints, ones, topic_keys, stale, distinct):
    """Group entries by (key, topic) and put each group's tuple into its key's map.

    Entry ``i`` is ``ints[codes[i]]`` under map ``maps[key_of[i]]`` and topic
    ``topic_keys[topic_of[i]]`` (``key_of``, ``topic_of``, ``codes``: int32
    arrays of one length).  For each map in order, the topics it has entries
    of are put in ascending topic index, each with the tuple of its entries in
    entry order -- ``ones[c]`` itself (a shared 1-tuple, equal to
    ``(ints[c],)``) for a one-entry group.  ``stale[t]`` (a uint8 array, one
    per topic) says the map may already hold topic ``t``: its value is then
    read and the new entries appended to it (``distinct``: those it already
    holds are left out).  Every other topic is put without a read (the caller
    knows the map does not hold it).  The same puts as ``put_many`` per map,
    so snapshots and reverts see ordinary writes.

    Why in C: a million-partition snapshot makes three million (broker, topic)
    groups for each index; grouping them in numpy and handing ``put_many``
    Python lists of names and tuples cost more than the puts themselves.
    Here two counting sorts (by topic when the entries are not already in
    topic order, then by key: stable, so (key, topic, entry order)) and one
    walk per map fill the map's table directly; a group of several entries
    gets one new tuple, untracked by the cyclic collector (ints only), and
    the ``ones`` tuples are untracked too when they hold only ints (as the
    collector would at its first pass), so that an index map holding only
    such tuples needs no walk by the collector (``tbl_note``).
    """
    cdef const int32_t[::1] kv = key_of
    cdef const int32_t[::1] tv = topic_of
    cdef const int32_t[::1] cv = codes
    cdef const uint8_t[::1] sv = stale
    cdef tuple maps_t = tuple(maps)
    cdef tuple ints_t = tuple(ints)
    cdef tuple ones_t = tuple(ones)
    cdef tuple keys_t = tuple(topic_keys)
    cdef bint merge_distinct = bool(distinct)
    cdef Py_ssize_t n = kv.shape[0], nk = len(maps_t), nt = len(keys_t), nc = len(ints_t)
    cdef Py_ssize_t i, j, e, a, b, g, gi, k, t, size, pos, c
    cdef int32_t* st_ = NULL     # topic of each entry, sorted by (key, topic, entry order)
    cdef int32_t* sc = NULL      # code of each entry, in the same order
    cdef int32_t* by_topic = NULL
    cdef Py_ssize_t* kstart = NULL
    cdef Py_ssize_t* tstart = NULL
    cdef bint in_topic_order = True
    cdef bint any_stale, keys_exact = True
    cdef uint32_t* th = NULL     # each topic key's folded hash (keys_exact: all exact str/int)
    cdef object m
    if tv.shape[0] != n or cv.shape[0] != n:
        raise ValueError(f"put_grouped: key_of has {n} entries, topic_of {tv.shape[0]}, codes {cv.shape[0]}")
    if len(ones_t) != nc:
        raise ValueError(f"put_grouped: {nc} ints but {len(ones_t)} one-entry tuples")
    if sv.shape[0] != nt:
        raise ValueError(f"put_grouped: {nt} topic keys but {sv.shape[0]} stale flags")
    for k in range(nk):
        if not isinstance(maps_t[k], TimelineHashMap):
            raise TypeError(f"put_grouped: maps[{k}] is {type(maps_t[k]).__name__}, not this module's TimelineHashMap")
    for i in range(n):
        if kv[i] < 0 or kv[i] >= nk:
            raise ValueError(f"put_grouped: key_of[{i}] = {kv[i]} is not a map index (0..{nk - 1})")
        if tv[i] < 0 or tv[i] >= nt:
            raise ValueError(f"put_grouped: topic_of[{i}] = {tv[i]} is not a topic index (0..{nt - 1})")
        if cv[i] < 0 or cv[i] >= nc:
            raise ValueError(f"put_grouped: codes[{i}] = {cv[i]} is not an index of ints (0..{nc - 1})")
        if i and tv[i] < tv[i - 1]:
            in_topic_order = False
    for c in range(nc):        # see tbl_note: tuples of ints need no collector walk
        _untrack_int_tuple(PyTuple_GET_ITEM_p(ones_t, c))
    if n == 0:
        return
    try:
        th = <uint32_t*>PyMem_Malloc((nt + 1) * sizeof(uint32_t))
        if th == NULL:
            raise MemoryError()
        for t in range(nt):
            if not _exact_hash(PyTuple_GET_ITEM_p(keys_t, t), &th[t]):
                keys_exact = False
                break
        st_ = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
        sc = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
        kstart = <Py_ssize_t*>PyMem_Malloc((nk + 1) * sizeof(Py_ssize_t))
        if st_ == NULL or sc == NULL or kstart == NULL:
            raise MemoryError()
        if not in_topic_order:      # stable counting sort by topic
            by_topic = <int32_t*>PyMem_Malloc(n * sizeof(int32_t))
            tstart = <Py_ssize_t*>PyMem_Malloc((nt + 1) * sizeof(Py_ssize_t))
            if by_topic == NULL or tstart == NULL:
                raise MemoryError()
            memset(tstart, 0, (nt + 1) * sizeof(Py_ssize_t))
            for i in range(n):
                tstart[tv[i] + 1] += 1
            for t in range(nt):
                tstart[t + 1] += tstart[t]
            for i in range(n):
                by_topic[tstart[tv[i]]] = <int32_t>i
                tstart[tv[i]] += 1
        # stable counting sort by key, over the entries in topic order; each entry's
        # (topic, code) is moved with it, so that the walk below reads memory in order
        memset(kstart, 0, (nk + 1) * sizeof(Py_ssize_t))
        for i in range(n):
            kstart[kv[i] + 1] += 1
        for k in range(nk):
            kstart[k + 1] += kstart[k]
        for j in range(n):
            i = j if in_topic_order else by_topic[j]
            pos = kstart[kv[i]]
            kstart[kv[i]] = pos + 1
            st_[pos] = tv[i]
            sc[pos] = cv[i]
        # kstart[k] is now the end of key k's entries (the start of k + 1's)
        a = 0
        for k in range(nk):
            b = kstart[k]
            if a == b:
                continue
            m = maps_t[k]
            g = 1
            any_stale = sv[st_[a]] != 0
            for j in range(a + 1, b):
                if st_[j] != st_[j - 1]:
                    g += 1
                    any_stale = any_stale or sv[st_[j]] != 0
            j = a
            if keys_exact and not any_stale and (<_SnapshottableHashTable>m)._registry._latest is None:
                j = _grouped_insert(<_SnapshottableHashTable>m, g, st_, sc, a, b, ints_t, ones_t, keys_t, th)
            if j < b:
                _grouped_put_seq(m, st_, sc, j, b, ints_t, ones_t, keys_t, sv, merge_distinct)
            a = b
    finally:
        PyMem_Free(th)
        PyMem_Free(st_)
        PyMem_Free(sc)
        PyMem_Free(kstart)
        PyMem_Free(by_topic)
        PyMem_Free(tstart)
