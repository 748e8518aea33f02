# Part of kraft_storage._native._timeline, included by _timeline.pyx after every
# class is defined (it patches their type slots at import).  Cycle-collector
# support for the types that own a Table.

# ---------------------------------------------------------------------------
# garbage collector support
#
# Cython's generated tp_traverse only visits declared object attributes, not
# the PyObject* kept in Table arrays, so a cycle through a table's contents
# (``m[1] = m``, or a value that refers back to its map's registry) would be
# invisible to the cycle collector and leak.  We wrap each table-owning type's
# tp_traverse to also visit the arrays, and give it a tp_clear that swaps in an
# empty table (the object stays usable: the C code never sees a NULL array).

cdef extern from "Python.h":
    ctypedef int (*visitproc)(PyObject*, void*) noexcept
    ctypedef int (*traverseproc)(PyObject*, visitproc, void*) noexcept
    ctypedef int (*inquiry)(PyObject*) noexcept
    ctypedef struct GCTypeSlots "PyTypeObject":
        traverseproc tp_traverse
        inquiry tp_clear
    void PyErr_Clear()

cdef traverseproc _orig_traverse_map = NULL
cdef traverseproc _orig_traverse_set = NULL
cdef traverseproc _orig_traverse_tier = NULL


cdef int _visit_table(Table* t, visitproc visit, void* arg) noexcept:
    cdef Py_ssize_t k
    cdef int r
    if t == NULL or t.entries == NULL or t.visit == 0:   # see tbl_note
        return 0
    for k in range(t.nentries):
        if t.entries[k].key != NULL:
            r = visit(t.entries[k].key, arg)
            if r:
                return r
        if t.entries[k].value != NULL:
            r = visit(t.entries[k].value, arg)
            if r:
                return r
    return 0


cdef inline Table* _table_of(PyObject* o) noexcept:
    return &(<_SnapshottableHashTable><void*>o).t


cdef int _traverse_map(PyObject* o, visitproc visit, void* arg) noexcept:
    cdef int r = _orig_traverse_map(o, visit, arg) if _orig_traverse_map != NULL else 0
    return r if r else _visit_table(_table_of(o), visit, arg)


cdef int _traverse_set(PyObject* o, visitproc visit, void* arg) noexcept:
    cdef int r = _orig_traverse_set(o, visit, arg) if _orig_traverse_set != NULL else 0
    return r if r else _visit_table(_table_of(o), visit, arg)


cdef int _traverse_tier(PyObject* o, visitproc visit, void* arg) noexcept:
    cdef int r = _orig_traverse_tier(o, visit, arg) if _orig_traverse_tier != NULL else 0
    return r if r else _visit_table((<_HashTier><void*>o).saved, visit, arg)


cdef int _clear_table_obj(PyObject* o) noexcept:
    cdef Table* t = _table_of(o)
    cdef Table old = t[0]
    try:
        tbl_alloc(t, MIN_CAPACITY)
    except MemoryError:
        t[0] = old          # cannot clear now; the collector will retry later
        PyErr_Clear()
        return 0
    tbl_free(&old)
    return 0


cdef int _clear_tier(PyObject* o) noexcept:
    cdef _HashTier tier = <_HashTier><void*>o
    cdef Table* saved = tier.saved
    tier.saved = NULL
    if saved != NULL:
        tbl_free(saved)
        PyMem_Free(saved)
    return 0


cdef void _install_gc_hooks():
    global _orig_traverse_map, _orig_traverse_set, _orig_traverse_tier
    cdef GCTypeSlots* tp
    tp = <GCTypeSlots*><PyObject*>TimelineHashMap
    _orig_traverse_map = tp.tp_traverse
    tp.tp_traverse = _traverse_map
    tp.tp_clear = _clear_table_obj
    tp = <GCTypeSlots*><PyObject*>TimelineHashSet
    _orig_traverse_set = tp.tp_traverse
    tp.tp_traverse = _traverse_set
    tp.tp_clear = _clear_table_obj
    tp = <GCTypeSlots*><PyObject*>_HashTier
    _orig_traverse_tier = tp.tp_traverse
    tp.tp_traverse = _traverse_tier
    tp.tp_clear = _clear_tier


_install_gc_hooks()
