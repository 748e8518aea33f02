# cython: language_level=3
"""The topics image's persistent maps and its delta's bulk apply, in C (twin:
``kraft_node._pure._topics_map``; read that for the contract -- the two give equal values, tests
compare them and a dict model).

Why native: at 100,000 topics a zonal outage delta replaces 6,667 topics and must apply in
under 10 ms, and adding one topic must cost a few microseconds.  ``immutables.Map`` costs about
a microsecond per write from Python (the call, ``Uuid.__hash__`` in Python, a GC-tracked node
copied per level), and making each changed topic's objects in a Python loop as much again.
Here the map is a C hash trie (``csrc/pmap.h``: the layout, the copy-on-write rule and the
invariants are there) whose keys hash in C, and ``apply_topics_delta`` walks the deltas, makes
the new objects (allocated with the class's ``tp_alloc``, slots stored at the member
descriptors' offsets, as the ``_bulk_objects`` kernel does) and writes the id map (and the name
map for created and deleted topics), one transient tree each, in one C loop.  At that size the
loop is bound by cache misses (a dozen cold objects a topic, a few trie nodes), so a software
pipeline (``tm_pipe``) prefetches the objects and the trie path of the topics a few iterations
ahead, one pointer level per iteration.

Neither ``TopicMap`` nor ``TopicMapMutation`` is tracked by the cyclic collector: their nodes are
shared between maps (structural sharing), so a map cannot report its values to the collector
without counting a shared value twice; and an image of 100,000 topics is then never walked by a
collection.  The values must therefore not reference the map that holds them (a cycle through a
map would never be collected); the image's values (topics, partitions, registrations) hold no
reference to any map.  The GIL is held throughout.
"""
cimport cython
from cpython.dict cimport PyDict_Copy, PyDict_Keys, PyDict_Size, PyDict_Update
from cpython.set cimport PySet_GET_SIZE
from cpython.tuple cimport PyTuple_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport uint32_t, uint64_t

from collections.abc import Mapping

from kraft_storage.messages.runtime import Uuid

cdef extern from "pmap.h":
    ctypedef struct pm_rec:
        uint64_t hash
        PyObject* key
        PyObject* value
    ctypedef struct pm_garbage:
        pass
    ctypedef struct pm_iter:
        int depth
    ctypedef struct pm_item:
        uint64_t hash
        PyObject* key
        PyObject* value
        Py_ssize_t order
    int pm_build(pm_item* items, size_t n, uint32_t* root, Py_ssize_t* count) except -1
    void pm_setup(PyObject* uuid_type, Py_ssize_t offset)
    int pm_hash(PyObject* key, uint64_t* out) except? -1
    pm_rec* pm_find(uint32_t root, uint64_t hash, PyObject* key)
    void pm_garbage_init(pm_garbage* g)
    void pm_garbage_flush(pm_garbage* g)
    int pm_root_assoc(uint32_t* root, uint64_t hash, PyObject* key, PyObject* value, pm_garbage* g,
                      int* added) except -1
    int pm_dissoc(uint32_t* slot, int shift, uint64_t hash, PyObject* key, pm_garbage* g) except -1
    void pm_node_release(uint32_t id, pm_garbage* g)
    void pm_iter_init(pm_iter* it, uint32_t root)
    pm_rec* pm_iter_next(pm_iter* it)
    int pm_equal(uint32_t a, uint32_t b, int shift) except -1
    void pm_stats(Py_ssize_t* nodes, Py_ssize_t* recs, Py_ssize_t* node_bytes)
    uint32_t pm_root_incref(uint32_t id)
    void pm_root_drop(uint32_t id)

cdef extern from *:
    """
    #include "structmember.h"
    /* the offset of a writable object slot, or -1 when descr is not one */
    static Py_ssize_t tm_member_offset(PyObject* descr) {
        PyMemberDef* d;
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        d = ((PyMemberDescrObject*)descr)->d_member;
        if (d->type != T_OBJECT_EX || (d->flags & READONLY)) return -1;
        return d->offset;
    }
    static inline PyObject* tm_get_slot(PyObject* obj, Py_ssize_t off) {
        return *(PyObject**)((char*)obj + off);   /* borrowed; NULL when unset */
    }
    static inline void tm_set_slot(PyObject* obj, Py_ssize_t off, PyObject* v) {
        PyObject** p = (PyObject**)((char*)obj + off);
        PyObject* old = *p;
        Py_INCREF(v);
        *p = v;
        Py_XDECREF(old);
    }
    static PyObject* tm_alloc(PyObject* cls) {
        PyTypeObject* t = (PyTypeObject*)cls;
        return t->tp_alloc(t, 0);
    }
    static inline void tm_untrack(PyObject* obj) {
        if (PyObject_GC_IsTracked(obj)) PyObject_GC_UnTrack(obj);
    }
    static inline int tm_type_is(PyObject* o, PyObject* t) { return o != NULL && (PyObject*)Py_TYPE(o) == t; }
    static inline void tm_prefetch(const void* p) { if (p != NULL) __builtin_prefetch(p, 0, 3); }
    static inline void tm_prefetch_at(PyObject* o, Py_ssize_t off) {
        if (o != NULL) __builtin_prefetch((const char*)o + off, 0, 3);
    }
    static inline PyObject** tm_list_items(PyObject* list) { return ((PyListObject*)list)->ob_item; }
    static inline void tm_prefetch_dict_keys(PyObject* o) {
        if (o != NULL && PyDict_CheckExact(o)) {
            const char* k = (const char*)((PyDictObject*)o)->ma_keys;
            __builtin_prefetch(k, 0, 3);
            __builtin_prefetch(k + 64, 0, 3);
        }
    }
    static inline void tm_prefetch_uuid_bytes(PyObject* key) {
        if (key != NULL && pm_uuid_type != NULL && Py_TYPE(key) == pm_uuid_type) {
            PyObject* b = *(PyObject**)((char*)key + pm_uuid_offset);
            if (b != NULL) {  /* header and data: a pool block need not sit on one cache line */
                __builtin_prefetch(b, 0, 3);
                __builtin_prefetch(PyBytes_AS_STRING(b) + 15, 0, 3);
            }
        }
    }
    /* pm_hash without an exception: 0 and *out set, else nonzero */
    static inline int pm_hash_quiet(PyObject* key, uint64_t* out) {
        int r = pm_hash(key, out);
        if (r < 0) PyErr_Clear();
        return r;
    }
    /* A software pipeline of prefetches over the deltas: delta j goes one pointer level
     * deeper per step, TM_AHEAD steps apart, so that by the time delta j is applied its
     * objects and its path in the id map are in the cache, and no step waits for a load
     * issued in the same step.  Reads only; everything read is held by the deltas list (which
     * must not change during the call); a node id read may be stale by the time its step
     * comes (freed ids read as NULL and end the walk). */
    #define TM_STAGES 13
    #define TM_AHEAD 2
    #define TM_RING 32
    typedef struct {
        PyObject **items;
        Py_ssize_t n;
        PyObject *delta_cls, *topic_cls, *parts_cls;
        Py_ssize_t o_image, o_changes, o_added, o_parts, o_tid, o_name, o_start, o_stop;
        PyObject *img[TM_RING], *chg[TM_RING], *prt[TM_RING], *tid[TM_RING];
        uint64_t hash[TM_RING];
        uint32_t at[TM_RING];
        int shift[TM_RING];
        int phase[TM_RING];
    } tm_pipe;

    static void tm_stage(tm_pipe *p, int stage, Py_ssize_t j, uint32_t root) {
        int r = (int)(j & (TM_RING - 1));
        PyObject *d, *k, *v;
        Py_ssize_t pos;
        switch (stage) {
        case 0:
            d = p->items[j];
            __builtin_prefetch(d, 0, 3);
            __builtin_prefetch((char *)d + p->o_image, 0, 3);
            break;
        case 1:
            d = p->items[j];
            p->img[r] = NULL;
            p->chg[r] = NULL;
            if ((PyObject *)Py_TYPE(d) != p->delta_cls) break;
            p->img[r] = *(PyObject **)((char *)d + p->o_image);
            p->chg[r] = *(PyObject **)((char *)d + p->o_changes);
            tm_prefetch(p->img[r]);
            tm_prefetch_at(p->img[r], p->o_parts);
            tm_prefetch(p->chg[r]);
            tm_prefetch(*(PyObject **)((char *)d + p->o_added));
            break;
        case 2:
            p->prt[r] = NULL;
            p->tid[r] = NULL;
            if (!tm_type_is(p->img[r], p->topic_cls)) break;
            p->prt[r] = tm_get_slot(p->img[r], p->o_parts);
            p->tid[r] = tm_get_slot(p->img[r], p->o_tid);
            tm_prefetch(p->prt[r]);
            tm_prefetch_at(p->prt[r], p->o_stop);
            tm_prefetch(p->tid[r]);
            tm_prefetch(tm_get_slot(p->img[r], p->o_name));
            tm_prefetch_dict_keys(p->chg[r]);
            break;
        case 3:
            if (tm_type_is(p->prt[r], p->parts_cls)) {
                tm_prefetch(tm_get_slot(p->prt[r], p->o_start));
                tm_prefetch(tm_get_slot(p->prt[r], p->o_stop));
            }
            tm_prefetch_uuid_bytes(p->tid[r]);
            if (p->chg[r] != NULL && PyDict_CheckExact(p->chg[r])) {
                pos = 0;
                while (PyDict_Next(p->chg[r], &pos, &k, &v)) __builtin_prefetch(v, 1, 3);
            }
            break;
        case 4:
            p->at[r] = 0;
            p->shift[r] = 0;
            p->phase[r] = 1;  /* the root is in the cache */
            if (p->tid[r] != NULL && root != 0 && pm_hash_quiet(p->tid[r], &p->hash[r]) == 0) p->at[r] = root;
            /* fall through */
        default:
            if (p->at[r] != 0) p->at[r] = pm_walk_step(p->at[r], &p->phase[r], &p->shift[r], p->hash[r]);
            break;
        }
    }

    /* The steps due before delta i is applied (for i from -TM_STAGES * TM_AHEAD). */
    static void tm_pipe_steps(tm_pipe *p, Py_ssize_t i, uint32_t root) {
        int s;
        for (s = 0; s < TM_STAGES; s++) {
            Py_ssize_t j = i + (Py_ssize_t)(TM_STAGES - s) * TM_AHEAD;
            if (j >= 0 && j < p->n) tm_stage(p, s, j, root);
        }
    }

    """
    Py_ssize_t tm_member_offset(PyObject* descr)
    PyObject* tm_get_slot(PyObject* obj, Py_ssize_t off)
    void tm_set_slot(PyObject* obj, Py_ssize_t off, PyObject* v)
    object tm_alloc(PyObject* cls)
    void tm_untrack(PyObject* obj)
    int tm_type_is(PyObject* o, PyObject* t)
    void tm_prefetch(const void* p)
    void tm_prefetch_at(PyObject* o, Py_ssize_t off)
    PyObject** tm_list_items(PyObject* lst)
    void tm_prefetch_dict_keys(PyObject* o)
    void tm_prefetch_uuid_bytes(PyObject* key)
    int pm_hash_quiet(PyObject* key, uint64_t* out)
    enum: TM_STAGES
    enum: TM_AHEAD
    ctypedef struct tm_pipe:
        PyObject** items
        Py_ssize_t n
        PyObject* delta_cls
        PyObject* topic_cls
        PyObject* parts_cls
        Py_ssize_t o_image, o_changes, o_added, o_parts, o_tid, o_name, o_start, o_stop
    void tm_pipe_steps(tm_pipe* p, Py_ssize_t i, uint32_t root)

__all__ = ["DELTA_SLOTS", "PARTITIONS_SLOTS", "TOPIC_SLOTS", "TopicMap", "TopicMapMutation", "TopicPlan",
           "apply_topics_delta"]

#: The slots of a topic delta that ``apply_topics_delta`` reads (it may have more).
DELTA_SLOTS = ("image", "_changes", "_added")
#: Every slot of a topic image, in the order the kernel sets them.
TOPIC_SLOTS = ("_name", "_topic_id", "_partitions")
#: Every slot of a topic's partitions, in the order the kernel sets them.
PARTITIONS_SLOTS = ("_block", "_start", "_stop", "_overrides", "_extra", "_dense")

_FINISHED = "this TopicMapMutation has been finished"


cdef Py_ssize_t _slot_offset(cls, str name) except -1:
    for klass in cls.__mro__:
        d = klass.__dict__.get(name)
        if d is not None:
            break
    else:
        d = None
    cdef Py_ssize_t off = -1 if d is None else tm_member_offset(<PyObject*>d)
    if off < 0:
        raise ValueError(f"{cls.__name__}.{name} is not a plain object slot")
    return off


pm_setup(<PyObject*>Uuid, _slot_offset(Uuid, "_b"))


def _key_hash(key):
    """The trie's 64-bit hash of a key (tests use it to make keys that collide); None for a non-key."""
    cdef uint64_t h = 0
    if pm_hash(<PyObject*>key, &h) != 0:
        return None
    return h


def _stats():
    """(live nodes, live entry records, bytes of node memory) in the process-wide tables: tests
    check that freed maps give everything back; memory figures read it."""
    cdef Py_ssize_t nodes = 0, recs = 0, node_bytes = 0
    pm_stats(&nodes, &recs, &node_bytes)
    return nodes, recs, node_bytes


cdef inline int _hash_for_write(object key, uint64_t* h) except -1:
    cdef uint64_t ignored = 0
    if h == NULL:
        h = &ignored
    if pm_hash(<PyObject*>key, h) == 1:
        raise TypeError(f"a TopicMap key is a str or a Uuid, not {type(key).__name__}")
    return 0


cdef int _put(uint32_t* root, Py_ssize_t* count, object key, object value, pm_garbage* g) except -1:
    cdef uint64_t h = 0
    cdef int added = 0
    _hash_for_write(key, &h)
    pm_root_assoc(root, h, <PyObject*>key, <PyObject*>value, g, &added)
    count[0] += added
    return 0


cdef int _put_all(uint32_t* root, Py_ssize_t* count, object items, pm_garbage* g) except -1:
    source = items.items() if isinstance(items, Mapping) or hasattr(items, "items") else items
    for pair in source:
        key, value = pair
        _put(root, count, key, value, g)
    return 0


cdef int _build(uint32_t* root, Py_ssize_t* count, object items) except -1:
    """A new tree of ``items`` (a mapping or pairs) built bottom-up from the pairs sorted by hash
    (siblings side by side in the tables: cheaper to copy later).  ``root`` and ``count`` are
    set on success (they must be an empty map's)."""
    source = items.items() if isinstance(items, Mapping) or hasattr(items, "items") else items
    cdef list pairs = []
    for pair in source:
        key, value = pair
        _hash_for_write(key, NULL)
        pairs.append((key, value))  # holds both while the C array borrows them
    cdef Py_ssize_t n = len(pairs), i
    if n == 0:
        return 0
    cdef pm_item* arr = <pm_item*>PyMem_Malloc(n * sizeof(pm_item))
    if arr == NULL:
        raise MemoryError()
    try:
        for i in range(n):
            pair = pairs[i]
            arr[i].key = <PyObject*>pair[0]
            arr[i].value = <PyObject*>pair[1]
            arr[i].order = i
            _hash_for_write(pair[0], &arr[i].hash)
        pm_build(arr, n, root, count)
    finally:
        PyMem_Free(arr)
    return 0


cdef int _remove(uint32_t* root, Py_ssize_t* count, object key, pm_garbage* g) except -1:
    cdef uint64_t h = 0
    if pm_hash(<PyObject*>key, &h) != 0 or pm_find(root[0], h, <PyObject*>key) == NULL:
        raise KeyError(key)
    pm_dissoc(root, 0, h, <PyObject*>key, g)
    count[0] -= 1
    return 0


cdef inline pm_rec* _lookup(uint32_t root, object key) except? NULL:
    """The entry of ``key``, NULL when absent (a key of another type is absent)."""
    cdef uint64_t h = 0
    if pm_hash(<PyObject*>key, &h) != 0:
        return NULL
    return pm_find(root, h, <PyObject*>key)


cdef TopicMap _new_map(uint32_t root, Py_ssize_t count):
    """A TopicMap taking over one reference to ``root``."""
    cdef TopicMap m = TopicMap.__new__(TopicMap)
    m.root = root
    m.count = count
    return m


# ---------------------------------------------------------------------------------------------
# TopicMap
# ---------------------------------------------------------------------------------------------

@cython.final
cdef class TopicMap:
    """An immutable map of topics by name or by id (see the twin)."""

    cdef uint32_t root
    cdef Py_ssize_t count

    def __cinit__(self, items=None):
        self.root = 0
        self.count = 0
        if items is not None:
            _build(&self.root, &self.count, items)

    def __dealloc__(self):
        pm_root_drop(self.root)
        self.root = 0

    # -- reading -------------------------------------------------------------------------
    def __getitem__(self, key):
        cdef pm_rec* e = _lookup(self.root, key)
        if e == NULL:
            raise KeyError(key)
        return <object>e.value

    def get(self, key, default=None):
        cdef pm_rec* e = _lookup(self.root, key)
        return default if e == NULL else <object>e.value

    def __contains__(self, key):
        return _lookup(self.root, key) != NULL

    def __len__(self):
        return self.count

    def __iter__(self):
        return _Iterator(self, 0)

    def keys(self):
        return _View(self, 0)

    def values(self):
        return _View(self, 1)

    def items(self):
        return _View(self, 2)

    # -- new maps ------------------------------------------------------------------------
    def set(self, key, value):
        cdef uint64_t h = 0
        cdef pm_rec* e
        cdef pm_garbage g
        cdef uint32_t root
        cdef Py_ssize_t count = self.count
        _hash_for_write(key, &h)
        e = pm_find(self.root, h, <PyObject*>key)
        if e != NULL and e.value == <PyObject*>value:
            return self
        root = pm_root_incref(self.root)
        pm_garbage_init(&g)
        try:
            _put(&root, &count, key, value, &g)
        except BaseException:
            pm_root_drop(root)
            raise
        finally:
            pm_garbage_flush(&g)
        return _new_map(root, count)

    def delete(self, key):
        cdef pm_garbage g
        cdef uint32_t root = pm_root_incref(self.root)
        cdef Py_ssize_t count = self.count
        pm_garbage_init(&g)
        try:
            _remove(&root, &count, key, &g)
        except BaseException:
            pm_root_drop(root)
            raise
        finally:
            pm_garbage_flush(&g)
        return _new_map(root, count)

    def update(self, items):
        cdef pm_garbage g
        cdef uint32_t root
        cdef Py_ssize_t count = 0
        if self.root == 0:
            root = 0
            _build(&root, &count, items)
            return self if root == 0 else _new_map(root, count)
        root = pm_root_incref(self.root)
        count = self.count
        pm_garbage_init(&g)
        try:
            _put_all(&root, &count, items, &g)
        except BaseException:
            pm_root_drop(root)
            raise
        finally:
            pm_garbage_flush(&g)
        if root == self.root:
            pm_root_drop(root)
            return self
        return _new_map(root, count)

    def mutate(self):
        return TopicMapMutation(self)

    # -- value ---------------------------------------------------------------------------
    def __eq__(self, other):
        if type(other) is not TopicMap:
            return NotImplemented
        cdef TopicMap o = <TopicMap>other
        if o.count != self.count:
            return False
        return pm_equal(self.root, o.root, 0) == 1

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    __hash__ = None

    def __repr__(self):
        inner = ", ".join(f"{k!r}: {v!r}" for k, v in self.items())
        return f"TopicMap({{{inner}}})"

    def __reduce__(self):
        return (TopicMap, (dict(self.items()),))


Mapping.register(TopicMap)


@cython.final
cdef class _Iterator:
    """Keys (0), values (1) or (key, value) pairs (2) of a map; it holds the map, whose tree
    never changes."""

    cdef TopicMap m
    cdef pm_iter it
    cdef int kind

    def __cinit__(self, TopicMap m, int kind):
        self.m = m
        self.kind = kind
        pm_iter_init(&self.it, m.root)

    def __iter__(self):
        return self

    def __next__(self):
        cdef pm_rec* e = pm_iter_next(&self.it)
        if e == NULL:
            raise StopIteration
        # both read before anything is allocated (an allocation may grow the record table)
        cdef object key = <object>e.key
        cdef object value = <object>e.value
        if self.kind == 0:
            return key
        if self.kind == 1:
            return value
        return (key, value)


@cython.final
cdef class _View:
    """A map's keys, values or items: iterable again and again, with a length."""

    cdef TopicMap m
    cdef int kind

    def __cinit__(self, TopicMap m, int kind):
        self.m = m
        self.kind = kind

    def __iter__(self):
        return _Iterator(self.m, self.kind)

    def __len__(self):
        return self.m.count

    def __contains__(self, item):
        cdef pm_rec* e
        if self.kind == 0:
            return _lookup(self.m.root, item) != NULL
        if self.kind == 1:
            return any(v is item or v == item for v in self)
        if type(item) is not tuple or len(item) != 2:
            return False
        e = _lookup(self.m.root, item[0])
        if e == NULL:
            return False
        value = <object>e.value
        return value is item[1] or value == item[1]

    def __repr__(self):
        kind = ("keys", "values", "items")[self.kind]
        return f"TopicMap.{kind}({list(self)!r})"


# ---------------------------------------------------------------------------------------------
# TopicMapMutation
# ---------------------------------------------------------------------------------------------

@cython.final
cdef class TopicMapMutation:
    """A TopicMap being changed in place (see the twin).  Its tree's nodes that only it points
    at are changed in place; every other node is copied first."""

    cdef uint32_t root
    cdef Py_ssize_t count
    cdef bint done

    def __cinit__(self, base=None):
        if base is not None and type(base) is not TopicMap:
            raise TypeError(f"a TopicMapMutation starts from a TopicMap, not {type(base).__name__}")
        self.root = 0 if base is None else pm_root_incref((<TopicMap>base).root)
        self.count = 0 if base is None else (<TopicMap>base).count
        self.done = False

    def __dealloc__(self):
        pm_root_drop(self.root)
        self.root = 0

    cdef int _check(self) except -1:
        if self.done:
            raise ValueError(_FINISHED)
        return 0

    def get(self, key, default=None):
        cdef pm_rec* e = _lookup(self.root, key)
        return default if e == NULL else <object>e.value

    def __getitem__(self, key):
        cdef pm_rec* e = _lookup(self.root, key)
        if e == NULL:
            raise KeyError(key)
        return <object>e.value

    def __contains__(self, key):
        return _lookup(self.root, key) != NULL

    def __len__(self):
        return self.count

    def set(self, key, value):
        cdef pm_garbage g
        self._check()
        pm_garbage_init(&g)
        try:
            _put(&self.root, &self.count, key, value, &g)
        finally:
            pm_garbage_flush(&g)

    def __setitem__(self, key, value):
        self.set(key, value)

    def __delitem__(self, key):
        cdef pm_garbage g
        self._check()
        pm_garbage_init(&g)
        try:
            _remove(&self.root, &self.count, key, &g)
        finally:
            pm_garbage_flush(&g)

    def update(self, items):
        cdef pm_garbage g
        self._check()
        pm_garbage_init(&g)
        try:
            _put_all(&self.root, &self.count, items, &g)
        finally:
            pm_garbage_flush(&g)

    def finish(self):
        self.done = True
        return _new_map(pm_root_incref(self.root), self.count)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.finish()

    def __repr__(self):
        return f"TopicMapMutation({self.count} entries{', finished' if self.done else ''})"


# ---------------------------------------------------------------------------------------------
# The topics delta's apply
# ---------------------------------------------------------------------------------------------

def _slots(cls):
    out = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        if "__slots__" not in klass.__dict__:
            raise ValueError(f"{klass.__name__} has no __slots__: its instances have a __dict__")
        raw = klass.__dict__["__slots__"]
        out += [n for n in ([raw] if isinstance(raw, str) else list(raw)) if n != "__weakref__"]
    return out


def _check_class(cls, names, bint exact):
    if not isinstance(cls, type):
        raise ValueError(f"TopicPlan needs classes, not {type(cls).__name__}")
    slots = _slots(cls)
    missing = [n for n in names if n not in slots]
    extra = [n for n in slots if n not in names] if exact else []
    if missing or extra:
        raise ValueError(f"TopicPlan: {cls.__name__} slots not found {missing}, not expected {extra}")
    if cls.__new__ is not object.__new__:
        raise ValueError(f"{cls.__name__} has its own __new__: the kernel would skip it")


@cython.final
cdef class TopicPlan:
    """What ``apply_topics_delta`` reads and makes, and the slot offsets (see the twin)."""

    cdef readonly object delta_cls, topic_cls, partitions_cls, empty_partitions, compact, error_cls
    cdef readonly Py_ssize_t compact_min
    cdef Py_ssize_t o_image, o_changes, o_added
    cdef Py_ssize_t o_name, o_tid, o_parts
    cdef Py_ssize_t o_block, o_start, o_stop, o_ov, o_extra, o_dense

    def __cinit__(self, delta_cls, topic_cls, partitions_cls, empty_partitions, compact_min, compact, error_cls):
        _check_class(delta_cls, DELTA_SLOTS, False)
        _check_class(topic_cls, TOPIC_SLOTS, True)
        _check_class(partitions_cls, PARTITIONS_SLOTS, True)
        if type(empty_partitions) is not partitions_cls:
            raise ValueError(f"TopicPlan: the empty partitions are a {type(empty_partitions).__name__}, "
                             f"not a {partitions_cls.__name__}")
        if type(compact_min) is not int or compact_min < 0:
            raise ValueError(f"TopicPlan: compact_min {compact_min!r} is not a non-negative int")
        if not callable(compact) or not callable(error_cls):
            raise ValueError("TopicPlan: compact and error_cls must be callable")
        self.delta_cls = delta_cls
        self.topic_cls = topic_cls
        self.partitions_cls = partitions_cls
        self.empty_partitions = empty_partitions
        self.compact_min = compact_min
        self.compact = compact
        self.error_cls = error_cls
        self.o_image, self.o_changes, self.o_added = [_slot_offset(delta_cls, n) for n in DELTA_SLOTS]
        self.o_name, self.o_tid, self.o_parts = [_slot_offset(topic_cls, n) for n in TOPIC_SLOTS]
        (self.o_block, self.o_start, self.o_stop, self.o_ov, self.o_extra,
         self.o_dense) = [_slot_offset(partitions_cls, n) for n in PARTITIONS_SLOTS]


cdef object _slot(object obj, Py_ssize_t off, str what):
    """The object in a slot (TypeError when the slot is unset)."""
    cdef PyObject* v = tm_get_slot(<PyObject*>obj, off)
    if v == NULL:
        raise TypeError(f"apply_topics_delta: {what} is not set")
    return <object>v


cdef inline int _copy_slot(PyObject* dst, object src, Py_ssize_t off, str what) except -1:
    """Slot ``off`` of ``src`` stored in ``dst`` (TypeError when it is unset in ``src``)."""
    cdef PyObject* v = tm_get_slot(<PyObject*>src, off)
    if v == NULL:
        raise TypeError(f"apply_topics_delta: {what} is not set")
    tm_set_slot(dst, off, v)
    return 0


cdef object _typed(str what, object value, object cls):
    """``value`` when it is exactly a ``cls`` (TypeError otherwise)."""
    if not tm_type_is(<PyObject*>value, <PyObject*>cls):
        raise TypeError(f"apply_topics_delta: {what} is a {type(value).__name__}, not a {cls.__name__}")
    return value


cdef int _remove_topic(object tid, uint32_t* ids, Py_ssize_t* nids, uint32_t* names, Py_ssize_t* nnames,
                       TopicPlan plan, pm_garbage* g) except -1:
    cdef pm_rec* e = _lookup(ids[0], tid)
    if e == NULL:
        raise ValueError(f"apply_topics_delta: deleted topic id {tid} is not in by_id")
    gone = _typed("a deleted topic", <object>e.value, plan.topic_cls)
    name = _slot(gone, plan.o_name, "a deleted topic's name")
    if _lookup(names[0], name) == NULL:
        raise ValueError(f"apply_topics_delta: deleted topic {name} is not in ids_by_name")
    _remove(ids, nids, tid, g)
    _remove(names, nnames, name, g)
    return 0


cdef inline bint _member(object tid, object created) except -1:
    """``tid in created``, by identity first when the set is small (a created topic's id in the
    delta is the very object in its created set: no ``Uuid.__hash__`` call in Python)."""
    if type(created) is set and PySet_GET_SIZE(created) <= 8:
        for x in <set>created:
            if x is tid:
                return True
    return tid in created


cdef int _apply_one(object delta, object created, uint32_t* ids, Py_ssize_t* nids, uint32_t* names,
                    Py_ssize_t* nnames, TopicPlan plan, pm_garbage* g) except -1:
    """One delta (see the twin's step 2); 1 when it put a topic, 0 when it was skipped."""
    cdef Py_ssize_t n, start, stop
    cdef pm_rec* e
    cdef PyObject* raw
    _typed("a delta", delta, plan.delta_cls)
    old = _typed("a delta's image", _slot(delta, plan.o_image, "a delta's image"), plan.topic_cls)
    parts = _typed("a topic's partitions", _slot(old, plan.o_parts, "a topic's partitions"), plan.partitions_cls)
    changes = _typed("a delta's changes", _slot(delta, plan.o_changes, "a delta's changes"), dict)
    added = _typed("a delta's added partitions", _slot(delta, plan.o_added, "a delta's added partitions"), dict)
    name = _slot(old, plan.o_name, "a topic's name")
    tid = _slot(old, plan.o_tid, "a topic's id")
    cdef bint is_created = parts is plan.empty_partitions and _member(tid, created)
    if PyDict_Size(changes) == 0:
        if not is_created:
            return 0
        topic = old
    else:
        ov = _typed("a topic's overrides", _slot(parts, plan.o_ov, "a topic's overrides"), dict)
        if PyDict_Size(ov):
            merged = PyDict_Copy(ov)
            PyDict_Update(merged, changes)
        else:
            merged = PyDict_Copy(changes)
        extra = _slot(parts, plan.o_extra, "a topic's extra ids")
        if PyDict_Size(added):
            if PyTuple_GET_SIZE(extra) == 0:
                listed = PyDict_Keys(added)
                listed.sort()
                extra = tuple(listed)
            else:
                extra = tuple(sorted(extra + tuple(added)))
        new_parts = tm_alloc(<PyObject*>plan.partitions_cls)
        raw = <PyObject*>new_parts
        _copy_slot(raw, parts, plan.o_block, "a topic's block")
        _copy_slot(raw, parts, plan.o_start, "a topic's first row")
        _copy_slot(raw, parts, plan.o_stop, "a topic's row stop")
        tm_set_slot(raw, plan.o_ov, <PyObject*>merged)
        tm_set_slot(raw, plan.o_extra, <PyObject*>extra)
        _copy_slot(raw, parts, plan.o_dense, "a topic's density")
        tm_untrack(<PyObject*>merged)
        tm_untrack(raw)
        n = PyDict_Size(merged)
        if n >= plan.compact_min:
            start = _slot(parts, plan.o_start, "a topic's first row")
            stop = _slot(parts, plan.o_stop, "a topic's row stop")
            if 2 * n > stop - start:
                new_parts = _typed("a compacted topic's partitions", plan.compact(new_parts), plan.partitions_cls)
        topic = tm_alloc(<PyObject*>plan.topic_cls)
        raw = <PyObject*>topic
        tm_set_slot(raw, plan.o_name, <PyObject*>name)
        tm_set_slot(raw, plan.o_tid, <PyObject*>tid)
        tm_set_slot(raw, plan.o_parts, <PyObject*>new_parts)
        tm_untrack(raw)
    if is_created:
        e = _lookup(names[0], name)
        if e != NULL:
            holder = <object>e.value
            if holder != tid:
                raise plan.error_cls(f"Topic name {name} is taken by topic id {holder}: it cannot also "
                                     f"name topic id {tid}")
        e = _lookup(ids[0], tid)
        if e != NULL:
            prev = <object>e.value
            other = _slot(prev, plan.o_name, "a topic's name")
            if other != name:
                raise plan.error_cls(f"Topic id {tid} is topic {other}: a TopicRecord cannot rename it to {name}")
        _put(names, nnames, name, tid, g)
    _put(ids, nids, tid, topic, g)
    return 1


def apply_topics_delta(changed, deleted, created, TopicMap by_id not None, TopicMap ids_by_name not None,
                       TopicPlan plan not None):
    """(by_id', ids_by_name') -- see the twin."""
    if type(changed) is not dict:
        raise TypeError(f"apply_topics_delta: changed is a {type(changed).__name__}, not a dict")
    cdef list deltas = list((<dict>changed).values())
    cdef pm_garbage g
    cdef uint32_t ids = pm_root_incref(by_id.root)
    cdef uint32_t names = pm_root_incref(ids_by_name.root)
    cdef Py_ssize_t nids = by_id.count, nnames = ids_by_name.count, n = len(deltas), i
    cdef tm_pipe pipe
    pipe.items = tm_list_items(<PyObject*>deltas)
    pipe.n = n
    pipe.delta_cls = <PyObject*>plan.delta_cls
    pipe.topic_cls = <PyObject*>plan.topic_cls
    pipe.parts_cls = <PyObject*>plan.partitions_cls
    pipe.o_image, pipe.o_changes, pipe.o_added = plan.o_image, plan.o_changes, plan.o_added
    pipe.o_parts, pipe.o_tid, pipe.o_name = plan.o_parts, plan.o_tid, plan.o_name
    pipe.o_start, pipe.o_stop = plan.o_start, plan.o_stop
    pm_garbage_init(&g)
    try:
        if deleted:
            for tid in deleted:
                _remove_topic(tid, &ids, &nids, &names, &nnames, plan, &g)
        if n > 1:
            for i in range(-TM_STAGES * TM_AHEAD, 0):
                tm_pipe_steps(&pipe, i, ids)
        for i in range(n):
            if n > 1:
                tm_pipe_steps(&pipe, i, ids)
            _apply_one(<object>pipe.items[i], created, &ids, &nids, &names, &nnames, plan, &g)
    except BaseException:
        pm_root_drop(ids)
        pm_root_drop(names)
        raise
    finally:
        pm_garbage_flush(&g)
    # a map whose root did not change is returned itself (a delta that creates and deletes no
    # topic leaves the name map as it was, by identity)
    if ids == by_id.root:
        pm_root_drop(ids)
        new_ids = by_id
    else:
        new_ids = _new_map(ids, nids)
    if names == ids_by_name.root:
        pm_root_drop(names)
        new_names = ids_by_name
    else:
        new_names = _new_map(names, nnames)
    return new_ids, new_names
