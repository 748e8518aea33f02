# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Timeline collections, native (Cython) implementation.

Same API and semantics as the pure-Python twin ``kraft_storage._pure._timeline``
(read its docstring first: it is the specification, with the invariants).
This module only changes *how* the data is stored, to make single-op calls
cheap and memory close to a ``dict``:

Hash table layout (``Table``), a compact open-addressing table like CPython's
dict::

    index[capacity]   int32 per slot: -1 empty, -2 deleted, else entry number
    entries[usable]   dense array, in insertion order, of 24-byte Entry:
        PyObject* key      (NULL once deleted: a hole until the next resize)
        PyObject* value    (NULL for sets)
        int64     start    (start epoch: registry.latest_epoch + 1 at write time)
    hashes[usable]    uint32 per entry: the key's hash folded to 32 bits
                      (cached apart from ``entries`` so an element costs
                      28 + 6 bytes: <= 2x even a str-keyed dict, whose
                      entries are 16 bytes; compares and resizes never call
                      ``__hash__`` again)

    capacity is a power of two, usable = capacity * 2 / 3; probing follows
    i = 5*i + 1 + perturb, perturb >>= 5 (all hash bits take part).

A table owns one reference to every non-NULL key and value in ``entries``.
Every structural change (insert, delete, resize, clear) bumps ``version``;
code that may have run arbitrary Python (``__eq__``, ``__hash__``, list
appends that trigger GC) re-checks ``version`` before trusting an entry index.
References are dropped only once the table is consistent again, because a
``__del__`` may re-enter the table.

The same ``Table`` stores the ``saved`` part of each snapshot tier.

Bulk calls (``put_many``, ``get_many``, ``contains_many`` at LATEST) run one
tight C loop for keys that are exact ``int``/``str`` (hashing and comparing
those runs no Python code, so the loop needs no per-key reference or version
check) or a 1-d int64 numpy array (hashed from the C value, as
``hash(int(v))``); a key of any other type, or a hash match against a stored
key of another type (``True`` vs ``1``), is handed alone to the single-op
path.  See "Bulk probes" and the bulk paths of ``_SnapshottableHashTable``.
"""
from cpython.ref cimport PyObject
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.list cimport PyList_New
cimport cython
from libc.stdint cimport int64_t, int32_t, uint32_t, uint64_t, INT64_MAX, INT64_MIN, INT32_MAX, INT32_MIN
from libc.string cimport memset

import weakref

from kraft_storage._common import LATEST_EPOCH, NO_SNAPSHOT_EPOCH
from kraft_storage.errors import SnapshotEpochError, SnapshotNotFoundError

cdef extern from "Python.h":
    ctypedef Py_ssize_t Py_hash_t
    void Py_INCREF_p "Py_INCREF"(PyObject* o)
    void Py_DECREF_p "Py_DECREF"(PyObject* o)
    void Py_XINCREF_p "Py_XINCREF"(PyObject* o)
    void Py_XDECREF_p "Py_XDECREF"(PyObject* o)
    Py_hash_t PyObject_Hash_p "PyObject_Hash"(PyObject* o)
    int PyObject_RichCompareBool_p "PyObject_RichCompareBool"(PyObject* a, PyObject* b, int op)
    int Py_EQ
    PyObject** PySequence_Fast_ITEMS(object o)
    Py_ssize_t PySequence_Fast_GET_SIZE(object o)
    object PySequence_Fast(object o, const char* m)
    PyObject* Py_True
    void PyList_SET_ITEM_p "PyList_SET_ITEM"(object lst, Py_ssize_t i, PyObject* o)
    PyObject* Py_False
    PyObject* Py_None
    int PyLong_CheckExact_p "PyLong_CheckExact"(PyObject* o)
    int PyUnicode_CheckExact_p "PyUnicode_CheckExact"(PyObject* o)
    void* Py_TYPE_p "Py_TYPE"(PyObject* o)
    long long PyLong_AsLongLongAndOverflow_p "PyLong_AsLongLongAndOverflow"(PyObject* o, int* overflow)
    object PyLong_FromLongLong_o "PyLong_FromLongLong"(long long v)
    int PyList_Append_p "PyList_Append"(object lst, PyObject* o) except -1
    void PyErr_Clear_p "PyErr_Clear"()
    Py_ssize_t Py_REFCNT_p "Py_REFCNT"(PyObject* o) noexcept

cdef extern from *:
    """
    /* 1 and *h32 = the folded hash when o is an exact int or str (whose hash
       runs no Python code), else 0.  Compact ints and strs with a cached
       hash are read directly, as CPython's own long_hash/unicode_hash would
       answer; anything else goes through PyObject_Hash. */
    static inline int kraft_exact_hash(PyObject* o, uint32_t* h32) {
        Py_hash_t h;
        if (PyLong_CheckExact(o)) {
    #if PY_VERSION_HEX >= 0x030C0000
            if (PyUnstable_Long_IsCompact((PyLongObject*)o)) {
                h = (Py_hash_t)PyUnstable_Long_CompactValue((PyLongObject*)o);
                if (h == -1) h = -2;
            } else {
                h = PyObject_Hash(o);
            }
    #else
            Py_ssize_t size = Py_SIZE(o);
            if (size >= -1 && size <= 1) {   /* every int has >= 1 digit */
                h = (Py_hash_t)(size * (Py_ssize_t)((PyLongObject*)o)->ob_digit[0]);
                if (h == -1) h = -2;
            } else {
                h = PyObject_Hash(o);
            }
    #endif
        } else if (PyUnicode_CheckExact(o)) {
            h = ((PyASCIIObject*)o)->hash;
            if (h == -1) h = PyObject_Hash(o);
        } else {
            return 0;
        }
        {
            uint64_t u = (uint64_t)h;
            *h32 = (uint32_t)(u ^ (u >> 32));
        }
        return 1;
    }
    /* 1 when the exact int k equals v (compact ints read directly) */
    static inline int kraft_long_eq_i64(PyObject* k, int64_t v) {
        int overflow = 0;
        long long kv;
    #if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject*)k))
            return (int64_t)PyUnstable_Long_CompactValue((PyLongObject*)k) == v;
    #else
        Py_ssize_t size = Py_SIZE(k);
        if (size >= -1 && size <= 1)
            return (int64_t)(size * (Py_ssize_t)((PyLongObject*)k)->ob_digit[0]) == v;
    #endif
        kv = PyLong_AsLongLongAndOverflow(k, &overflow);
        return overflow == 0 && kv == v;
    }
    /* Ask for transparent huge pages on the 2 MiB-aligned part of a big
       block (Linux, THP in "madvise" mode): a million-entry table is ~40 MB,
       i.e. ~10,000 page faults to fill and a TLB miss on most random probes
       with 4 KiB pages, ~20 and few with 2 MiB ones.  Only a hint. */
    #if defined(__linux__)
    #include <sys/mman.h>
    #endif
    static void kraft_hugepage_hint(void* p, size_t n) {
    #if defined(__linux__) && defined(MADV_HUGEPAGE)
        const uintptr_t huge = (uintptr_t)2 << 20;
        uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1);
        uintptr_t e = ((uintptr_t)p + n) & ~(huge - 1);
        if (e > a) (void)madvise((void*)a, (size_t)(e - a), MADV_HUGEPAGE);
    #else
        (void)p; (void)n;
    #endif
    }
    /* the item array of a list (to fill a new list without bounds checks) */
    #define kraft_list_items(o) (((PyListObject*)(o))->ob_item)
    """
    int _exact_hash "kraft_exact_hash"(PyObject* o, uint32_t* h32) noexcept
    PyObject** _list_items "kraft_list_items"(object lst) noexcept
    int _long_eq_i64 "kraft_long_eq_i64"(PyObject* k, int64_t v) noexcept
    void _hugepage_hint "kraft_hugepage_hint"(void* p, size_t n) noexcept

DEF EMPTY = -1
DEF DUMMY = -2
DEF MIN_CAPACITY = 8
# Replaced values a bulk write releases together (see the bulk paths).
DEF OLDS = 64
DEF HUGE_TABLE = 1 << 18   # capacity from which tables ask for huge pages
DEF GROUP = 4    # keys a bulk get resolves together (8 measured no better)
# _probe_* result: the key cannot be decided without running Python code.
DEF NEED_GENERAL = -3

cdef int64_t C_LATEST = INT64_MAX
cdef int64_t C_NONE = INT64_MIN
# The default ``epoch`` argument object: ``epoch is _LATEST`` is a pointer
# compare, cheaper than converting it to int64 on every single-op read.
cdef object _LATEST = LATEST_EPOCH
# "no such entry" where None is a legitimate value.
cdef object _MISSING = object()


ctypedef struct Entry:
    PyObject* key
    PyObject* value
    int64_t start


ctypedef struct Table:
    int32_t* index
    Entry* entries
    uint32_t* hashes
    size_t mask
    Py_ssize_t usable
    Py_ssize_t nentries
    Py_ssize_t used
    size_t version


# ---------------------------------------------------------------------------
# Table primitives (no Python-visible state; callers own the protocol)

cdef int tbl_alloc(Table* t, Py_ssize_t capacity) except -1:
    """Give ``t`` empty arrays for ``capacity`` slots (a power of two)."""
    cdef Py_ssize_t usable = (capacity << 1) // 3
    cdef int32_t* index = <int32_t*>PyMem_Malloc(capacity * sizeof(int32_t))
    cdef Entry* entries = <Entry*>PyMem_Malloc(usable * sizeof(Entry))
    cdef uint32_t* hashes = <uint32_t*>PyMem_Malloc(usable * sizeof(uint32_t))
    if index == NULL or entries == NULL or hashes == NULL:
        PyMem_Free(index)
        PyMem_Free(entries)
        PyMem_Free(hashes)
        raise MemoryError()
    if capacity >= HUGE_TABLE:
        _hugepage_hint(index, capacity * sizeof(int32_t))
        _hugepage_hint(entries, usable * sizeof(Entry))
        _hugepage_hint(hashes, usable * sizeof(uint32_t))
    memset(index, 0xff, capacity * sizeof(int32_t))   # all EMPTY (-1)
    t.index = index
    t.entries = entries
    t.hashes = hashes
    t.mask = <size_t>(capacity - 1)
    t.usable = usable
    t.nentries = 0
    t.used = 0
    t.version += 1
    return 0


cdef inline Py_ssize_t capacity_for(Py_ssize_t n):
    """Smallest power of two >= ``n`` (and >= MIN_CAPACITY)."""
    cdef Py_ssize_t c = MIN_CAPACITY
    while c < n:
        c <<= 1
    return c


cdef int tbl_init(Table* t, Py_ssize_t expected) except -1:
    t.version = 0
    return tbl_alloc(t, capacity_for((expected * 3 + 1) // 2 + 1))


cdef inline uint32_t fold(Py_hash_t h) noexcept:
    """Fold a hash to the 32 bits the table keeps (idempotent on 32-bit values,
    so a stored hash can be passed back wherever a Py_hash_t is expected)."""
    cdef uint64_t u = <uint64_t>h
    return <uint32_t>(u ^ (u >> 32))


cdef inline size_t tbl_empty_slot(Table* t, uint32_t h) noexcept:
    cdef size_t mask = t.mask
    cdef size_t perturb = <size_t>h
    cdef size_t i = perturb & mask
    while t.index[i] != EMPTY:
        perturb >>= 5
        i = (i * 5 + perturb + 1) & mask
    return i


cdef int tbl_resize(Table* t, Py_ssize_t capacity) except -1:
    """Move the live entries into fresh arrays (drops holes)."""
    cdef int32_t* old_index = t.index
    cdef Entry* old_entries = t.entries
    cdef uint32_t* old_hashes = t.hashes
    cdef Py_ssize_t old_n = t.nentries, used = t.used, k, j = 0
    cdef size_t slot
    if capacity < MIN_CAPACITY:
        capacity = MIN_CAPACITY
    while (capacity << 1) // 3 < used:
        capacity <<= 1
    tbl_alloc(t, capacity)          # t.index/t.entries now new; old ones kept
    for k in range(old_n):
        if old_entries[k].key != NULL:
            t.entries[j] = old_entries[k]
            t.hashes[j] = old_hashes[k]
            slot = tbl_empty_slot(t, old_hashes[k])
            t.index[slot] = <int32_t>j
            j += 1
    t.nentries = j
    t.used = j
    PyMem_Free(old_index)
    PyMem_Free(old_entries)
    PyMem_Free(old_hashes)
    return 0


cdef inline Py_ssize_t tbl_lookup(Table* t, PyObject* key, Py_hash_t h,
                           size_t* slot_out) except -2:
    """Entry number of ``key`` (and its index slot in ``slot_out``), or -1."""
    cdef size_t mask, perturb, i
    cdef uint32_t h32 = fold(h)
    cdef int32_t ix
    cdef Entry* e
    cdef PyObject* k
    cdef size_t version
    cdef int cmp
    while True:   # restarted if a user __eq__ changed the table under us
        mask = t.mask
        perturb = h32
        i = perturb & mask
        while True:
            ix = t.index[i]
            if ix == EMPTY:
                return -1
            if ix >= 0:
                e = &t.entries[ix]
                k = e.key
                if k == key:
                    slot_out[0] = i
                    return ix
                if t.hashes[ix] == h32:
                    version = t.version
                    Py_INCREF_p(k)
                    cmp = PyObject_RichCompareBool_p(k, key, Py_EQ)
                    Py_DECREF_p(k)
                    if cmp < 0:
                        return -2
                    if version != t.version or t.entries[ix].key != k:
                        break   # restart the probe
                    if cmp:
                        slot_out[0] = i
                        return ix
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask


cdef int tbl_insert_new(Table* t, PyObject* key, PyObject* value, Py_hash_t h,
                        int64_t start) except -1:
    """Add an element known to be absent; takes new references to key/value."""
    cdef size_t slot
    cdef Py_ssize_t ix
    cdef uint32_t h32 = fold(h)
    if t.nentries >= t.usable:
        tbl_resize(t, capacity_for(t.used * 3))
    slot = tbl_empty_slot(t, h32)
    ix = t.nentries
    Py_INCREF_p(key)
    Py_XINCREF_p(value)
    t.entries[ix].key = key
    t.entries[ix].value = value
    t.hashes[ix] = h32
    t.entries[ix].start = start
    t.index[slot] = <int32_t>ix
    t.nentries = ix + 1
    t.used += 1
    t.version += 1
    return 0


cdef inline void tbl_unlink(Table* t, Py_ssize_t ix, size_t slot) noexcept:
    """Remove entry ``ix``; the caller now owns its key and value references."""
    t.index[slot] = DUMMY
    t.entries[ix].key = NULL
    t.entries[ix].value = NULL
    t.used -= 1
    t.version += 1


cdef int tbl_put_entry(Table* t, PyObject* key, PyObject* value, Py_hash_t h,
                       int64_t start) except -1:
    """Add or replace ``key`` with (value, start) (used for saved copies and reverts)."""
    cdef size_t slot = 0
    cdef Py_ssize_t ix = tbl_lookup(t, key, h, &slot)
    cdef PyObject* old
    if ix < 0:
        return tbl_insert_new(t, key, value, h, start)
    old = t.entries[ix].value
    Py_XINCREF_p(value)
    t.entries[ix].value = value
    t.entries[ix].start = start
    Py_XDECREF_p(old)
    return 0


cdef int tbl_reserve(Table* t, Py_ssize_t extra) except -1:
    """Make room for ``extra`` more inserts without resizing in between
    (bulk inserts: one resize instead of log2(n))."""
    if t.nentries + extra > t.usable:
        tbl_resize(t, capacity_for(((t.used + extra) * 3 + 1) // 2 + 1))
    return 0


cdef void tbl_free(Table* t) noexcept:
    """Release everything ``t`` owns; ``t`` is left without arrays."""
    cdef Entry* entries = t.entries
    cdef Py_ssize_t n = t.nentries, k
    PyMem_Free(t.index)
    PyMem_Free(t.hashes)
    t.index = NULL
    t.hashes = NULL
    t.entries = NULL
    t.nentries = 0
    t.used = 0
    t.usable = 0
    t.version += 1
    if entries != NULL:
        for k in range(n):
            Py_XDECREF_p(entries[k].key)
            Py_XDECREF_p(entries[k].value)
        PyMem_Free(entries)


cdef int tbl_clear(Table* t) except -1:
    """Empty ``t``: new arrays first, then drop the old references."""
    cdef Table old = t[0]
    tbl_alloc(t, MIN_CAPACITY)
    tbl_free(&old)
    return 0


cdef inline Py_ssize_t tbl_bytes(Table* t) noexcept:
    if t.index == NULL:
        return 0
    return <Py_ssize_t>((t.mask + 1) * sizeof(int32_t)
                        + t.usable * (sizeof(Entry) + sizeof(uint32_t)))


cdef inline Py_hash_t hash_of(PyObject* key) except? -1:
    # PyObject_Hash returns -1 only with an exception set (a real hash of -1
    # is reported as -2), which ``except? -1`` propagates.
    return PyObject_Hash_p(key)


cdef int64_t _as_epoch(object epoch) except? -1:
    """Python int -> int64 epoch, with a clear error."""
    try:
        return <int64_t>epoch
    except OverflowError:
        raise SnapshotEpochError(f"epoch {epoch} does not fit in a signed 64-bit integer") from None


# ---------------------------------------------------------------------------
# Bulk probes.  The general ``tbl_lookup`` must assume that comparing two keys
# runs Python code (a user ``__eq__``) that may change the table, the caller's
# key list, anything; so it holds references and re-checks versions per key.
# Exact ``int`` and ``str`` keys cannot run Python code when hashed or compared
# with keys of their own type, which is what almost every bulk call holds.
# The probes below handle exactly those cases and answer NEED_GENERAL for any
# other (a hash match against a key of another type: ``True`` vs ``1``,
# ``1.0`` vs ``1``, a user class), which the caller then hands, for that key
# alone, to the general path.  So semantics are the general path's, always.

# Python's hash of an int is its value modulo 2**61 - 1 (keeping the sign),
# with -1 mapped to -2, on every 64-bit CPython (``sys.hash_info``).  The
# int64 probes compute it from the raw value, without making an int object.
cdef uint64_t _HASH_MODULUS = (<uint64_t>1 << 61) - 1
cdef bint _INT_HASH_IS_MOD61 = False


cdef inline Py_hash_t _int64_hash(int64_t v) noexcept:
    """``hash(int(v))``, computed without the int object."""
    cdef uint64_t a = <uint64_t>v if v >= 0 else (<uint64_t>0) - <uint64_t>v
    cdef Py_hash_t h
    if a >= _HASH_MODULUS:
        a %= _HASH_MODULUS
    h = <Py_hash_t>a
    if v < 0:
        h = -h
    if h == -1:
        h = -2
    return h


cdef inline Py_ssize_t _probe_exact(const int32_t* index, const Entry* entries,
                                    const uint32_t* hashes, size_t mask,
                                    PyObject* key, uint32_t h32, size_t* slot_out) noexcept:
    """Entry number of ``key`` (an exact int or str), or -1 with ``slot_out``
    set to the EMPTY slot an insert would use (``tbl_empty_slot`` walks the
    same sequence and stops at the same first EMPTY), or NEED_GENERAL."""
    cdef size_t perturb = h32
    cdef size_t i = perturb & mask
    cdef int32_t ix
    cdef PyObject* k
    cdef int cmp
    while True:
        ix = index[i]
        if ix == EMPTY:
            slot_out[0] = i
            return -1
        if ix >= 0:
            k = entries[ix].key
            if k == key:
                slot_out[0] = i
                return ix
            if hashes[ix] == h32:
                if Py_TYPE_p(k) != Py_TYPE_p(key):
                    return NEED_GENERAL
                # int == int, str == str: C code only, cannot fail
                cmp = PyObject_RichCompareBool_p(k, key, Py_EQ)
                if cmp < 0:
                    PyErr_Clear_p()
                    return NEED_GENERAL
                if cmp:
                    slot_out[0] = i
                    return ix
        perturb >>= 5
        i = (i * 5 + perturb + 1) & mask


cdef inline Py_ssize_t _probe_int64(const int32_t* index, const Entry* entries,
                                    const uint32_t* hashes, size_t mask,
                                    int64_t v, uint32_t h32, size_t* slot_out) noexcept:
    """``_probe_exact`` for the int ``v`` given as a C value."""
    cdef size_t perturb = h32
    cdef size_t i = perturb & mask
    cdef int32_t ix
    cdef PyObject* k
    while True:
        ix = index[i]
        if ix == EMPTY:
            slot_out[0] = i
            return -1
        if ix >= 0 and hashes[ix] == h32:
            k = entries[ix].key
            if not PyLong_CheckExact_p(k):
                return NEED_GENERAL
            if _long_eq_i64(k, v):
                slot_out[0] = i
                return ix
        perturb >>= 5
        i = (i * 5 + perturb + 1) & mask


cdef inline void _insert_at(Table* t, size_t slot, PyObject* key, PyObject* value,
                            uint32_t h32, int64_t start) noexcept:
    """Add an absent element at ``slot`` (from a probe done since the last
    change), with room known to be there; takes new references."""
    cdef Py_ssize_t ix = t.nentries
    Py_INCREF_p(key)
    Py_XINCREF_p(value)
    t.entries[ix].key = key
    t.entries[ix].value = value
    t.entries[ix].start = start
    t.hashes[ix] = h32
    t.index[slot] = <int32_t>ix
    t.nentries = ix + 1
    t.used += 1
    t.version += 1


cdef bint _is_int64_array(object keys):
    """True for a 1-d numpy-like int64 array: bulk calls then read the keys
    as C int64 values (exactly what ``keys.tolist()`` would give as ints)."""
    if not _INT_HASH_IS_MOD61:
        return False
    dt = getattr(keys, "dtype", None)
    if dt is None:
        return False
    return getattr(dt, "kind", None) == "i" and getattr(dt, "itemsize", 0) == 8 \
        and getattr(keys, "ndim", 0) == 1


# ---------------------------------------------------------------------------
# registry


@cython.no_gc_clear
cdef class Snapshot:
    """One in-memory snapshot: an epoch and the deltas of the collections that
    changed while it was the newest snapshot."""

    cdef readonly int64_t epoch
    cdef readonly dict deltas
    cdef object __weakref__

    def __cinit__(self, int64_t epoch):
        self.epoch = epoch
        self.deltas = {}

    def __repr__(self):
        return f"Snapshot(epoch={self.epoch}, deltas={len(self.deltas)})"


cdef int64_t _check_new_epoch(object epoch) except? -1:
    cdef int64_t e
    try:
        e = <int64_t>epoch
    except OverflowError:
        e = C_NONE
    if e == C_NONE or e == C_LATEST:
        raise SnapshotEpochError(
            f"snapshot epoch {epoch} out of range: must be > {NO_SNAPSHOT_EPOCH} "
            f"and < LATEST_EPOCH ({LATEST_EPOCH})")
    return e


@cython.no_gc_clear
cdef class _Revertable:
    """Base of every timeline collection: knows its registry and how to merge,
    apply and reset its deltas.  Held weakly by the registry."""

    cdef SnapshotRegistry _registry
    cdef object __weakref__

    cdef int _merge_delta(self, int64_t epoch, object mine, object other) except -1:
        return 0

    cdef int _revert(self, int64_t epoch, object delta) except -1:
        return 0

    cdef int _reset(self) except -1:
        return 0

    cdef int _forget_snapshot(self, Snapshot snap) except -1:
        """``snap`` is being deleted: drop any cached reference to its delta."""
        return 0

    cdef int _attach(self, object registry) except -1:
        if not isinstance(registry, SnapshotRegistry):
            raise TypeError(f"registry must be a {__name__}.SnapshotRegistry, "
                            f"not {type(registry).__name__}")
        self._registry = <SnapshotRegistry>registry
        self._registry._revertables.add(self)
        return 0

    @property
    def registry(self):
        return self._registry


@cython.no_gc_clear
cdef class SnapshotRegistry:
    """Ordered in-memory snapshots plus the collections registered with them.

    See the twin's docstring: snapshots in a list ordered by epoch and a dict by
    epoch; collections held weakly; ``_high_water`` enforces that epochs never
    decrease (since the last reset or revert).
    """

    cdef list _snapshots
    cdef dict _by_epoch
    cdef object _revertables
    cdef Snapshot _latest
    cdef int64_t _latest_epoch
    cdef int64_t _high_water
    cdef object __weakref__

    def __cinit__(self):
        self._snapshots = []
        self._by_epoch = {}
        self._revertables = weakref.WeakSet()
        self._latest = None
        self._latest_epoch = C_NONE
        self._high_water = C_NONE

    @property
    def latest_epoch(self):
        """Epoch of the newest snapshot, or ``NO_SNAPSHOT_EPOCH``."""
        return self._latest_epoch

    def epochs(self):
        """Epochs of the live snapshots, oldest first."""
        return [(<Snapshot>s).epoch for s in self._snapshots]

    def has_snapshot(self, epoch):
        return epoch in self._by_epoch

    def get_snapshot(self, epoch):
        snap = self._by_epoch.get(epoch)
        if snap is None:
            raise SnapshotNotFoundError(
                f"no in-memory snapshot at epoch {epoch}; snapshot epochs are {self.epochs()}")
        return snap

    def __len__(self):
        return len(self._snapshots)

    def __repr__(self):
        return f"SnapshotRegistry(epochs={self.epochs()})"

    cdef Py_ssize_t _position(self, int64_t epoch) except -1:
        """Index in ``_snapshots`` of the snapshot at ``epoch``."""
        cdef Py_ssize_t i
        cdef list snaps = self._snapshots
        for i in range(len(snaps) - 1, -1, -1):
            if (<Snapshot>snaps[i]).epoch == epoch:
                return i
        raise SnapshotNotFoundError(
            f"no in-memory snapshot at epoch {epoch}; snapshot epochs are {self.epochs()}")

    def get_or_create_snapshot(self, epoch):
        """Return the snapshot at ``epoch``, creating it if needed.  O(1)."""
        cdef int64_t e = _check_new_epoch(epoch)
        if self._latest is not None and self._latest_epoch == e:
            return self._latest
        if e <= self._high_water or e < self._latest_epoch:
            raise SnapshotEpochError(
                f"cannot create an in-memory snapshot at epoch {e}: epoch "
                f"{max(self._high_water, self._latest_epoch)} was already snapshotted; "
                f"snapshot epochs are {self.epochs()}")
        snap = Snapshot(e)
        self._snapshots.append(snap)
        self._by_epoch[e] = snap
        self._latest = snap
        self._latest_epoch = e
        self._high_water = e
        return snap

    def idempotent_create_snapshot(self, epoch):
        return self.get_or_create_snapshot(epoch)

    cdef void _refresh_latest(self):
        if self._snapshots:
            self._latest = <Snapshot>self._snapshots[len(self._snapshots) - 1]
            self._latest_epoch = self._latest.epoch
        else:
            self._latest = None
            self._latest_epoch = C_NONE

    cdef int _delete_at(self, Py_ssize_t index) except -1:
        cdef Snapshot snap = <Snapshot>self._snapshots[index]
        cdef Snapshot prev
        if index > 0:
            prev = <Snapshot>self._snapshots[index - 1]
            for owner, delta in snap.deltas.items():
                mine = prev.deltas.get(owner, _MISSING)
                if mine is _MISSING:   # (a TimelineObject may have saved None)
                    prev.deltas[owner] = delta
                else:
                    (<_Revertable>owner)._merge_delta(prev.epoch, mine, delta)
        for owner in snap.deltas:
            (<_Revertable>owner)._forget_snapshot(snap)
        snap.deltas = {}
        del self._snapshots[index]
        del self._by_epoch[snap.epoch]
        return 0

    def delete_snapshot(self, epoch):
        """Delete one snapshot; reads at the other epochs are unaffected."""
        self._delete_at(self._position(_as_epoch(epoch)))
        self._refresh_latest()

    def delete_snapshots_up_to(self, epoch):
        """Delete every snapshot with an epoch lower than ``epoch``."""
        cdef Py_ssize_t n = 0
        cdef Snapshot snap
        for s in self._snapshots:
            snap = <Snapshot>s
            if snap.epoch >= epoch:
                break
            for owner in snap.deltas:
                (<_Revertable>owner)._forget_snapshot(snap)
            snap.deltas = {}
            del self._by_epoch[snap.epoch]
            n += 1
        if n:
            del self._snapshots[:n]
            self._refresh_latest()

    def revert_to_snapshot(self, epoch):
        """Restore every collection to its state at snapshot ``epoch``.

        Later snapshots are merged into the target and deleted, then each
        collection that changed since the target undoes its changes, in
        O(changes).  The target stays (with no deltas: nothing changed since).
        """
        cdef int64_t e = _as_epoch(epoch)
        cdef Py_ssize_t index = self._position(e)
        cdef Snapshot target = <Snapshot>self._snapshots[index]
        while len(self._snapshots) > index + 1:
            self._delete_at(index + 1)
        self._refresh_latest()
        self._high_water = e
        deltas = target.deltas
        target.deltas = {}
        for owner, delta in deltas.items():
            (<_Revertable>owner)._revert(e, delta)

    def reset(self):
        """Delete every snapshot and reset every registered collection."""
        self.delete_snapshots_up_to(LATEST_EPOCH)
        self._high_water = C_NONE
        for revertable in list(self._revertables):
            (<_Revertable>revertable)._reset()


# ---------------------------------------------------------------------------
# hash tables


@cython.no_gc_clear
cdef class _HashTier:
    """Delta of one hash table in one snapshot: size then, saved copies of the
    elements overwritten/removed since, keys inserted since."""

    cdef Py_ssize_t size
    cdef Table* saved
    cdef list added

    def __cinit__(self, Py_ssize_t size):
        self.size = size
        self.saved = NULL
        self.added = []

    def __dealloc__(self):
        if self.saved != NULL:
            tbl_free(self.saved)
            PyMem_Free(self.saved)
            self.saved = NULL

    cdef int save(self, Table* src, Py_ssize_t ix) except -1:
        """Keep a copy of element ``ix`` of ``src`` (new references)."""
        cdef Table* t = self.saved
        cdef Entry* e
        if t == NULL:
            t = <Table*>PyMem_Malloc(sizeof(Table))
            if t == NULL:
                raise MemoryError()
            t.index = NULL
            t.entries = NULL
            t.hashes = NULL
            try:
                tbl_init(t, 1)
            except MemoryError:
                PyMem_Free(t)
                raise
            self.saved = t
        e = &src.entries[ix]
        return tbl_put_entry(t, e.key, e.value, src.hashes[ix], e.start)

    cdef Py_ssize_t nbytes(self):
        cdef Py_ssize_t n = sizeof(Table) if self.saved != NULL else 0
        if self.saved != NULL:
            n += tbl_bytes(self.saved)
        return n


@cython.no_gc_clear
cdef class _SnapshottableHashTable(_Revertable):
    """Engine under TimelineHashMap and TimelineHashSet (current tier + tier logic)."""

    cdef Table t
    cdef Snapshot _tier_snap     # newest snapshot whose tier we already hold
    cdef _HashTier _tier

    def __cinit__(self, registry, Py_ssize_t expected_size=0, *args, **kwargs):
        # Everything happens here (not in __init__) so that no instance can
        # exist without a table and a registry: the C code never checks.
        self.t.index = NULL
        self.t.entries = NULL
        self.t.hashes = NULL
        self.t.version = 0
        if expected_size < 0:
            raise ValueError("expected_size must be >= 0")
        self._attach(registry)
        tbl_init(&self.t, expected_size)

    def __dealloc__(self):
        tbl_free(&self.t)

    # -- write path -------------------------------------------------------
    cdef _HashTier _current_tier(self):
        """Tier of this table in the newest snapshot (created on demand)."""
        cdef Snapshot snap = self._registry._latest
        cdef _HashTier tier
        if snap is self._tier_snap:
            return self._tier
        tier = snap.deltas.get(self)
        if tier is None:
            tier = _HashTier(self.t.used)
            snap.deltas[self] = tier
        self._tier_snap = snap
        self._tier = tier
        return tier

    cdef int _write(self, PyObject* key, PyObject* value, Py_hash_t h,
                    PyObject** old) except -1:
        """Set key -> value; ``old`` receives a new reference to the previous
        value (NULL if none) when not NULL, else that reference is dropped."""
        cdef size_t slot = 0
        cdef Py_ssize_t ix
        cdef SnapshotRegistry reg = self._registry
        cdef _HashTier tier
        cdef Entry* e
        cdef PyObject* prev
        cdef size_t version
        ix = tbl_lookup(&self.t, key, h, &slot)
        if reg._latest is not None:
            version = self.t.version
            tier = self._current_tier()
            if ix < 0:
                tier.added.append(<object>key)
            elif self.t.entries[ix].start <= reg._latest_epoch:
                tier.save(&self.t, ix)
            if version != self.t.version:   # GC / __eq__ re-entered us
                ix = tbl_lookup(&self.t, key, h, &slot)
        if ix < 0:
            tbl_insert_new(&self.t, key, value, h, reg._latest_epoch + 1)
            if old != NULL:
                old[0] = NULL
            return 0
        e = &self.t.entries[ix]
        prev = e.value
        Py_XINCREF_p(value)
        e.value = value
        e.start = reg._latest_epoch + 1
        if old != NULL:
            old[0] = prev
        else:
            Py_XDECREF_p(prev)
        return 0

    cdef int _delete(self, PyObject* key, PyObject** old) except -1:
        """Remove ``key``.  Returns 1 if it was present (``old`` then gets a new
        reference to its value if not NULL), 0 otherwise."""
        cdef size_t slot = 0
        cdef Py_hash_t h = hash_of(key)
        cdef Py_ssize_t ix = tbl_lookup(&self.t, key, h, &slot)
        cdef SnapshotRegistry reg = self._registry
        cdef _HashTier tier
        cdef PyObject* k
        cdef PyObject* v
        cdef size_t version
        if ix < 0:
            return 0
        if reg._latest is not None:
            version = self.t.version
            tier = self._current_tier()
            if self.t.entries[ix].start <= reg._latest_epoch:
                tier.save(&self.t, ix)
            if version != self.t.version:
                ix = tbl_lookup(&self.t, key, h, &slot)
                if ix < 0:
                    return 0
        k = self.t.entries[ix].key
        v = self.t.entries[ix].value
        tbl_unlink(&self.t, ix, slot)
        if old != NULL:
            old[0] = v
        else:
            Py_XDECREF_p(v)
        Py_DECREF_p(k)
        return 1

    cdef int _clear_all(self) except -1:
        cdef Py_ssize_t k
        cdef PyObject* key
        if self._registry._latest is None:
            return tbl_clear(&self.t)
        keys = [<object>self.t.entries[k].key
                for k in range(self.t.nentries) if self.t.entries[k].key != NULL]
        for key_obj in keys:
            self._delete(<PyObject*>key_obj, NULL)
        return 0

    # -- read path --------------------------------------------------------
    cdef Entry* _lookup_at(self, PyObject* key, int64_t epoch) except? NULL:
        """Element of ``key`` live at ``epoch`` (borrowed), or NULL."""
        cdef size_t slot = 0
        cdef Py_hash_t h = hash_of(key)
        cdef Py_ssize_t ix, pos, n
        cdef Entry* e
        cdef _HashTier tier
        cdef list snaps
        if epoch == C_LATEST:
            ix = tbl_lookup(&self.t, key, h, &slot)
            return &self.t.entries[ix] if ix >= 0 else NULL
        pos = self._registry._position(epoch)
        ix = tbl_lookup(&self.t, key, h, &slot)
        if ix >= 0 and self.t.entries[ix].start <= epoch:
            return &self.t.entries[ix]
        snaps = self._registry._snapshots
        n = len(snaps)
        while pos < n:
            tier = (<Snapshot>snaps[pos]).deltas.get(self)
            if tier is not None and tier.saved != NULL:
                ix = tbl_lookup(tier.saved, key, h, &slot)
                if ix >= 0:
                    e = &tier.saved.entries[ix]
                    return e if e.start <= epoch else NULL
            pos += 1
        return NULL

    def size(self, epoch=LATEST_EPOCH):
        """Number of elements at ``epoch``."""
        cdef int64_t e = _as_epoch(epoch)
        cdef Py_ssize_t pos, n
        cdef list snaps
        if e == C_LATEST:
            return self.t.used
        pos = self._registry._position(e)
        snaps = self._registry._snapshots
        n = len(snaps)
        while pos < n:
            tier = (<Snapshot>snaps[pos]).deltas.get(self)
            if tier is not None:
                return (<_HashTier>tier).size
            pos += 1
        return self.t.used

    def __len__(self):
        return self.t.used

    def __bool__(self):
        return self.t.used != 0

    def is_empty(self, epoch=LATEST_EPOCH):
        return self.size(epoch) == 0

    def contains(self, key, epoch=LATEST_EPOCH):
        """``key in self`` at ``epoch``."""
        return self._lookup_at(<PyObject*>key, _as_epoch(epoch)) != NULL

    def __contains__(self, key):
        cdef size_t slot = 0
        return tbl_lookup(&self.t, <PyObject*>key, hash_of(<PyObject*>key), &slot) >= 0

    def contains_many(self, keys, epoch=LATEST_EPOCH):
        """``[contains(k, epoch) for k in keys]``."""
        cdef int64_t e = _as_epoch(epoch)
        cdef Py_ssize_t i, n
        cdef PyObject* k
        cdef PyObject* r
        cdef const int64_t[::1] karr
        if e == C_LATEST:
            return self._bulk_latest(keys, NULL, 1)
        seq = _seq(keys)
        n = PySequence_Fast_GET_SIZE(seq)
        out = PyList_New(n)
        for i in range(n):
            k = _item(seq, i)
            Py_INCREF_p(k)
            try:
                r = Py_True if self._lookup_at(k, e) != NULL else Py_False
            finally:
                Py_DECREF_p(k)
            Py_INCREF_p(r)
            PyList_SET_ITEM_p(out, i, r)   # steals the reference
        return out

    # -- bulk paths (see "Bulk probes" above) ------------------------------
    #
    # One tight C loop per call.  Each key is hashed and probed without a
    # reference of its own, which is safe because for exact int/str keys no
    # Python code runs between reading the key from the caller's list and
    # finishing it (a replaced value whose last reference we hold is released
    # later, in a batch).  A key that needs the general path (any other type,
    # or a hash match with a key of another type) stops the loop: it runs
    # alone, then the loop resumes after it and re-reads the lists, the
    # table's arrays and room, and the snapshot state, since that path may
    # have run arbitrary Python.  So results are the general path's, key by
    # key.  (A version that hashed 16 keys ahead and prefetched their slots
    # and entries measured slower on this machine for keys in insertion order
    # and no faster for shuffled keys: the out-of-order core already overlaps
    # the independent probes of consecutive keys.)

    cdef int _get_one(self, object seq, Py_ssize_t i, list out, PyObject* dflt,
                      int what) except -1:
        """General path for key ``i`` of ``seq`` at LATEST: result into ``out[i]``."""
        cdef size_t slot = 0
        cdef Py_ssize_t ix
        cdef PyObject* k = _item(seq, i)
        cdef PyObject* r
        Py_INCREF_p(k)
        try:
            ix = tbl_lookup(&self.t, k, hash_of(k), &slot)
            r = _result(&self.t, ix, dflt, what)
            Py_INCREF_p(r)      # before DECREF(k): that may run a __del__
        finally:
            Py_DECREF_p(k)
        PyList_SET_ITEM_p(out, i, r)   # steals the reference
        return 0

    cdef int _get_one_int(self, int64_t v, Py_ssize_t i, list out, PyObject* dflt,
                          int what) except -1:
        cdef size_t slot = 0
        cdef Py_ssize_t ix
        cdef PyObject* r
        key = PyLong_FromLongLong_o(v)
        ix = tbl_lookup(&self.t, <PyObject*>key, hash_of(<PyObject*>key), &slot)
        r = _result(&self.t, ix, dflt, what)
        Py_INCREF_p(r)
        PyList_SET_ITEM_p(out, i, r)
        return 0

    cdef list _bulk_latest(self, object keys, PyObject* dflt, int what):
        """get_many (what=0) / contains_many (what=1) at LATEST: the int64 kernel when
        ``keys`` is a 1-d int64 array it can view, else the list/tuple kernel."""
        cdef const int64_t[::1] karr
        if _is_int64_array(keys):
            try:
                karr = keys
            except (ValueError, TypeError, BufferError):
                pass
            else:
                return self._bulk_get_int64(karr, dflt, what)
        return self._bulk_get_seq(_seq(keys), dflt, what)

    cdef list _bulk_get_seq(self, object seq, PyObject* dflt, int what):
        """get_many (what=0) / contains_many (what=1) at LATEST over a list/tuple."""
        cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(seq), i = 0, ix
        cdef PyObject** items
        cdef PyObject** outitems
        cdef Table* t = &self.t
        cdef int32_t* index
        cdef Entry* entries
        cdef uint32_t* hashes
        cdef size_t mask
        cdef size_t slot = 0
        cdef PyObject* k
        cdef PyObject* r
        cdef uint32_t h32
        cdef PyObject* k4[GROUP]
        cdef PyObject* r4[GROUP]
        cdef uint32_t h4[GROUP]
        cdef Py_ssize_t ix4[GROUP]
        cdef int u, ok
        cdef list out = PyList_New(n)
        while i < n:
            if PySequence_Fast_GET_SIZE(seq) != n:
                raise RuntimeError("sequence changed size during a bulk call")
            items = PySequence_Fast_ITEMS(seq)
            # locals: the compiler cannot keep struct fields in registers
            # across the refcount stores
            index, entries, hashes, mask = t.index, t.entries, t.hashes, t.mask
            outitems = _list_items(out)
            # four keys at a time: their loads are issued together, before
            # any of their refcount stores; a group with any key for the
            # general path goes one by one below
            while i + GROUP <= n:
                ok = 1
                for u in range(GROUP):
                    k4[u] = items[i + u]
                    ok &= _exact_hash(k4[u], &h4[u])
                if not ok:
                    break
                for u in range(GROUP):
                    ix4[u] = _probe_exact(index, entries, hashes, mask, k4[u], h4[u], &slot)
                    ok &= ix4[u] != NEED_GENERAL
                if not ok:
                    break
                for u in range(GROUP):
                    if what == 0:
                        r4[u] = entries[ix4[u]].value if ix4[u] >= 0 else dflt
                    else:
                        r4[u] = Py_True if ix4[u] >= 0 else Py_False
                for u in range(GROUP):
                    Py_INCREF_p(r4[u])
                    outitems[i + u] = r4[u]
                i += GROUP
            while i < n:
                k = items[i]
                if not _exact_hash(k, &h32):
                    break
                ix = _probe_exact(index, entries, hashes, mask, k, h32, &slot)
                if ix == NEED_GENERAL:
                    break
                if what == 0:
                    r = entries[ix].value if ix >= 0 else dflt
                else:
                    r = Py_True if ix >= 0 else Py_False
                Py_INCREF_p(r)
                outitems[i] = r       # a new list's empty slot: takes the reference
                i += 1
            if i < n:
                self._get_one(seq, i, out, dflt, what)
                i += 1
        return out

    cdef list _bulk_get_int64(self, const int64_t[::1] keys, PyObject* dflt, int what):
        """``_bulk_get_seq`` over C int64 keys: no int object per key."""
        cdef Py_ssize_t n = keys.shape[0], i = 0, ix
        cdef PyObject** outitems
        cdef Table* t = &self.t
        cdef int32_t* index
        cdef Entry* entries
        cdef uint32_t* hashes
        cdef size_t mask
        cdef size_t slot = 0
        cdef PyObject* r
        cdef PyObject* r4[4]
        cdef Py_ssize_t ix4[4]
        cdef int u
        cdef list out = PyList_New(n)
        while i < n:
            index, entries, hashes, mask = t.index, t.entries, t.hashes, t.mask
            outitems = _list_items(out)
            while i + 4 <= n:            # four at a time, as in _bulk_get_seq
                for u in range(4):
                    ix4[u] = _probe_int64(index, entries, hashes, mask, keys[i + u],
                                          fold(_int64_hash(keys[i + u])), &slot)
                if (ix4[0] == NEED_GENERAL or ix4[1] == NEED_GENERAL
                        or ix4[2] == NEED_GENERAL or ix4[3] == NEED_GENERAL):
                    break
                for u in range(4):
                    if what == 0:
                        r4[u] = entries[ix4[u]].value if ix4[u] >= 0 else dflt
                    else:
                        r4[u] = Py_True if ix4[u] >= 0 else Py_False
                for u in range(4):
                    Py_INCREF_p(r4[u])
                    outitems[i + u] = r4[u]
                i += 4
            while i < n:
                ix = _probe_int64(index, entries, hashes, mask, keys[i],
                                  fold(_int64_hash(keys[i])), &slot)
                if ix == NEED_GENERAL:
                    break
                if what == 0:
                    r = entries[ix].value if ix >= 0 else dflt
                else:
                    r = Py_True if ix >= 0 else Py_False
                Py_INCREF_p(r)
                outitems[i] = r
                i += 1
            if i < n:
                self._get_one_int(keys[i], i, out, dflt, what)
                i += 1
        return out

    cdef int _put_one(self, object kseq, object vseq, Py_ssize_t i) except -1:
        """General path: ``put(kseq[i], vseq[i])``."""
        cdef PyObject* k = _item(kseq, i)
        cdef PyObject* v = _item(vseq, i)
        Py_INCREF_p(k)
        Py_INCREF_p(v)
        try:
            self._write(k, v, hash_of(k), NULL)
        finally:
            Py_DECREF_p(k)
            Py_DECREF_p(v)
        return 0

    cdef int _put_one_int(self, int64_t kv, object vseq, Py_ssize_t i) except -1:
        cdef PyObject* v = _item(vseq, i)
        key = PyLong_FromLongLong_o(kv)
        Py_INCREF_p(v)
        try:
            self._write(<PyObject*>key, v, hash_of(<PyObject*>key), NULL)
        finally:
            Py_DECREF_p(v)
        return 0

    cdef object _bulk_restart(self, Py_ssize_t remaining, int64_t* latest):
        """(Re)start of a bulk write loop: room for ``remaining`` inserts (so
        the arrays do not move inside the loop), the newest snapshot's epoch
        in ``latest`` and the list of keys added since it (this table's tier
        there, created on demand, as ``_write`` does), or None when there is
        no snapshot."""
        cdef SnapshotRegistry reg = self._registry
        cdef _HashTier tier
        tbl_reserve(&self.t, remaining)
        if reg._latest is not None:
            tier = self._current_tier()
            latest[0] = reg._latest_epoch
            return tier.added
        latest[0] = C_NONE
        return None

    cdef int _bulk_put_seq(self, object kseq, object vseq) except -1:
        """put_many over lists/tuples of equal length."""
        cdef Py_ssize_t n = PySequence_Fast_GET_SIZE(kseq), i = 0, ix, nold = 0, q
        cdef PyObject** kitems
        cdef PyObject** vitems
        cdef PyObject* olds[OLDS]
        cdef Table* t = &self.t
        cdef int32_t* index
        cdef Entry* entries
        cdef uint32_t* hashes
        cdef size_t mask
        cdef int64_t latest = C_NONE, start
        cdef Entry* e
        cdef PyObject* k
        cdef PyObject* v
        cdef PyObject* old
        cdef size_t slot = 0
        cdef uint32_t h32
        cdef bint general
        cdef object added = None
        while i < n:
            added = self._bulk_restart(n - i, &latest)
            start = latest + 1
            if PySequence_Fast_GET_SIZE(kseq) != n or PySequence_Fast_GET_SIZE(vseq) != n:
                raise RuntimeError("sequence changed size during a bulk call")
            kitems = PySequence_Fast_ITEMS(kseq)
            vitems = PySequence_Fast_ITEMS(vseq)
            index, entries, hashes, mask = t.index, t.entries, t.hashes, t.mask
            general = False
            try:
                while i < n and nold < OLDS:
                    k = kitems[i]
                    if not _exact_hash(k, &h32):
                        general = True
                        break
                    ix = _probe_exact(index, entries, hashes, mask, k, h32, &slot)
                    if ix == -1:
                        if added is not None:
                            PyList_Append_p(added, k)
                        _insert_at(t, slot, k, vitems[i], h32, start)
                        i += 1
                        continue
                    if ix < 0:
                        general = True
                        break
                    e = &entries[ix]
                    if added is not None and e.start <= latest:
                        general = True      # its old value must be saved first
                        break
                    v = vitems[i]
                    Py_INCREF_p(v)
                    old = e.value
                    e.value = v
                    e.start = start
                    if Py_REFCNT_p(old) > 1:
                        Py_DECREF_p(old)    # not the last reference: no finalizer
                    else:
                        olds[nold] = old
                        nold += 1
                    i += 1
            finally:
                for q in range(nold):       # may run finalizers: table consistent
                    Py_DECREF_p(olds[q])
                nold = 0
            if general:
                self._put_one(kseq, vseq, i)
                i += 1
        return 0

    cdef int _bulk_put_int64(self, const int64_t[::1] keys, object vseq) except -1:
        """put_many with C int64 keys: an int object is made only for a new key."""
        cdef Py_ssize_t n = keys.shape[0], i = 0, ix, nold = 0, q
        cdef PyObject** vitems
        cdef PyObject* olds[OLDS]
        cdef Table* t = &self.t
        cdef int32_t* index
        cdef Entry* entries
        cdef uint32_t* hashes
        cdef size_t mask
        cdef int64_t latest = C_NONE, start
        cdef Entry* e
        cdef PyObject* v
        cdef PyObject* old
        cdef size_t slot = 0
        cdef uint32_t h32
        cdef bint general
        cdef object added = None
        cdef object key
        while i < n:
            added = self._bulk_restart(n - i, &latest)
            start = latest + 1
            if PySequence_Fast_GET_SIZE(vseq) != n:
                raise RuntimeError("sequence changed size during a bulk call")
            vitems = PySequence_Fast_ITEMS(vseq)
            index, entries, hashes, mask = t.index, t.entries, t.hashes, t.mask
            general = False
            try:
                while i < n and nold < OLDS:
                    h32 = fold(_int64_hash(keys[i]))
                    ix = _probe_int64(index, entries, hashes, mask, keys[i], h32, &slot)
                    if ix == -1:
                        key = PyLong_FromLongLong_o(keys[i])   # not GC-tracked
                        if added is not None:
                            PyList_Append_p(added, <PyObject*>key)
                        _insert_at(t, slot, <PyObject*>key, vitems[i], h32, start)
                        i += 1
                        continue
                    if ix < 0:
                        general = True
                        break
                    e = &entries[ix]
                    if added is not None and e.start <= latest:
                        general = True
                        break
                    v = vitems[i]
                    Py_INCREF_p(v)
                    old = e.value
                    e.value = v
                    e.start = start
                    if Py_REFCNT_p(old) > 1:
                        Py_DECREF_p(old)
                    else:
                        olds[nold] = old
                        nold += 1
                    i += 1
            finally:
                for q in range(nold):
                    Py_DECREF_p(olds[q])
                nold = 0
            if general:
                self._put_one_int(keys[i], vseq, i)
                i += 1
        return 0

    cdef list _elements(self, int64_t epoch, int what):
        """Materialised elements live at ``epoch``: what=0 keys, 1 values,
        2 (key, value) pairs.  Safe to iterate while the table changes."""
        cdef Py_ssize_t pos, n, k
        cdef Entry* e
        cdef _HashTier tier
        cdef list out = []
        cdef size_t slot = 0
        cdef Py_ssize_t ix
        cdef size_t version = self.t.version
        pos = self._registry._position(epoch)
        for k in range(self.t.nentries):
            if version != self.t.version:   # a finalizer run by out.append() changed us
                raise RuntimeError("timeline collection changed during a snapshot read")
            e = &self.t.entries[k]
            if e.key != NULL and e.start <= epoch:
                out.append(_emit(e, what))
        snaps = self._registry._snapshots
        n = len(snaps)
        seen = set()
        while pos < n:
            tier = (<Snapshot>snaps[pos]).deltas.get(self)
            pos += 1
            if tier is None or tier.saved == NULL:
                continue
            saved = []
            for k in range(tier.saved.nentries):
                e = &tier.saved.entries[k]
                if e.key != NULL:
                    saved.append((<object>e.key, e.start, _emit(e, what)))
            for key, start, item in saved:
                if key in seen:
                    continue
                seen.add(key)
                ix = tbl_lookup(&self.t, <PyObject*>key, hash_of(<PyObject*>key), &slot)
                if ix >= 0 and self.t.entries[ix].start <= epoch:
                    continue
                if start <= epoch:
                    out.append(item)
        return out

    # -- Revertable -------------------------------------------------------
    cdef int _merge_delta(self, int64_t epoch, object mine_obj, object other_obj) except -1:
        cdef _HashTier mine = <_HashTier>mine_obj
        cdef _HashTier other = <_HashTier>other_obj
        cdef Py_ssize_t k
        cdef Entry* e
        if other.saved != NULL:
            for k in range(other.saved.nentries):
                e = &other.saved.entries[k]
                if e.key != NULL and e.start <= epoch:
                    mine.save(other.saved, k)
        mine.added.extend(other.added)
        return 0

    cdef int _revert(self, int64_t epoch, object delta) except -1:
        cdef _HashTier tier = <_HashTier>delta
        cdef Py_ssize_t k, ix
        cdef size_t slot = 0
        cdef Entry* e
        cdef Table* saved
        self._tier_snap = None
        self._tier = None
        for key in tier.added:
            ix = tbl_lookup(&self.t, <PyObject*>key, hash_of(<PyObject*>key), &slot)
            if ix >= 0 and self.t.entries[ix].start > epoch:
                self._unlink_drop(ix, slot)
        saved = tier.saved
        if saved != NULL:
            for k in range(saved.nentries):
                e = &saved.entries[k]
                if e.key != NULL:
                    tbl_put_entry(&self.t, e.key, e.value, saved.hashes[k], e.start)
        return 0

    cdef void _unlink_drop(self, Py_ssize_t ix, size_t slot):
        cdef PyObject* k = self.t.entries[ix].key
        cdef PyObject* v = self.t.entries[ix].value
        tbl_unlink(&self.t, ix, slot)
        Py_XDECREF_p(v)
        Py_DECREF_p(k)

    cdef int _reset(self) except -1:
        self._tier_snap = None
        self._tier = None
        return self._clear_all()

    cdef int _forget_snapshot(self, Snapshot snap) except -1:
        # else the cached tier would keep a deleted snapshot's saved copies
        # alive until the next write under a snapshot
        if self._tier_snap is snap:
            self._tier_snap = None
            self._tier = None
        return 0

    def _memory_bytes(self):
        """Bytes of the current tier's arrays (not the keys/values themselves)."""
        return tbl_bytes(&self.t)

    def __sizeof__(self):
        return object.__sizeof__(self) + tbl_bytes(&self.t)

    def _check_integrity(self):
        """Debug aid for tests: verify the table's internal invariants."""
        cdef Py_ssize_t k, live = 0, ix
        cdef size_t slot = 0
        for k in range(self.t.nentries):
            if self.t.entries[k].key != NULL:
                live += 1
                ix = tbl_lookup(&self.t, self.t.entries[k].key, self.t.hashes[k], &slot)
                assert ix == k, (k, ix)
        assert live == self.t.used, (live, self.t.used)
        assert self.t.nentries <= self.t.usable
        return True


cdef inline PyObject* _result(Table* t, Py_ssize_t ix, PyObject* dflt, int what) noexcept:
    """Borrowed answer of a LATEST lookup: the value (what=0; ``dflt`` if
    absent) or True/False (what=1, for contains_many)."""
    if what == 0:
        return t.entries[ix].value if ix >= 0 else dflt
    return Py_True if ix >= 0 else Py_False


cdef inline object _emit(Entry* e, int what):
    if what == 0:
        return <object>e.key
    if what == 1:
        return <object>e.value if e.value != NULL else None
    return (<object>e.key, <object>e.value if e.value != NULL else None)


@cython.no_gc_clear
cdef class _LatestIterator:
    """Live iterator over the current tier; a structural change to the table
    while iterating raises RuntimeError (like a dict)."""

    cdef _SnapshottableHashTable owner
    cdef Py_ssize_t pos
    cdef size_t version
    cdef int what

    def __iter__(self):
        return self

    def __next__(self):
        cdef Table* t = &self.owner.t
        cdef Entry* e
        if t.version != self.version:
            raise RuntimeError("timeline collection changed size during iteration")
        while self.pos < t.nentries:
            e = &t.entries[self.pos]
            self.pos += 1
            if e.key != NULL:
                return _emit(e, self.what)
        raise StopIteration


cdef _LatestIterator _latest_iter(_SnapshottableHashTable owner, int what):
    cdef _LatestIterator it = _LatestIterator.__new__(_LatestIterator)
    it.owner = owner
    it.pos = 0
    it.version = owner.t.version
    it.what = what
    return it



cdef inline object _seq(object items):
    """A list or tuple to walk with ``_item``: lists and tuples as they are,
    numpy arrays via ``tolist()`` (fast C boxing), other iterables copied."""
    if isinstance(items, (list, tuple)):
        return items
    if hasattr(items, "tolist"):
        return items.tolist()
    return list(items)


cdef inline PyObject* _item(object seq, Py_ssize_t i) except NULL:
    """Borrowed item ``i`` of a list/tuple, re-read on every call: a key's
    ``__eq__``/``__hash__`` may run Python that mutates the caller's list, so
    bulk loops re-check the size and hold their own reference while working."""
    if i >= PySequence_Fast_GET_SIZE(seq):
        raise RuntimeError("sequence changed size during a bulk call")
    return PySequence_Fast_ITEMS(seq)[i]


@cython.no_gc_clear
cdef class TimelineHashMap(_SnapshottableHashTable):
    """A hash map that can be read at any live snapshot epoch and reverted.

    Keys are any hashable objects, values any objects (``None`` included).
    """

    def __getitem__(self, key):
        cdef size_t slot = 0
        cdef Py_ssize_t ix = tbl_lookup(&self.t, <PyObject*>key, hash_of(<PyObject*>key), &slot)
        if ix < 0:
            raise KeyError(key)
        return <object>self.t.entries[ix].value

    def __setitem__(self, key, value):
        self._write(<PyObject*>key, <PyObject*>value, hash_of(<PyObject*>key), NULL)

    def __delitem__(self, key):
        if not self._delete(<PyObject*>key, NULL):
            raise KeyError(key)

    def __iter__(self):
        return _latest_iter(self, 0)

    def __repr__(self):
        return f"TimelineHashMap({self.to_dict()!r})"

    def get(self, key, default=None, *, epoch=LATEST_EPOCH):
        """Value of ``key`` at ``epoch``, or ``default``."""
        cdef size_t slot = 0
        cdef Py_ssize_t ix
        cdef Entry* e
        if epoch is _LATEST:
            ix = tbl_lookup(&self.t, <PyObject*>key, hash_of(<PyObject*>key), &slot)
            if ix < 0:
                return default
            return <object>self.t.entries[ix].value
        e = self._lookup_at(<PyObject*>key, _as_epoch(epoch))
        if e == NULL:
            return default
        return <object>e.value

    def put(self, key, value):
        """Set ``key`` to ``value``; return the previous value or ``None``."""
        cdef PyObject* old = NULL
        self._write(<PyObject*>key, <PyObject*>value, hash_of(<PyObject*>key), &old)
        if old == NULL:
            return None
        result = <object>old
        Py_DECREF_p(old)
        return result

    def remove(self, key):
        """Remove ``key``; return its value, or ``None`` if it was absent."""
        cdef PyObject* old = NULL
        if not self._delete(<PyObject*>key, &old):
            return None
        result = <object>old
        Py_DECREF_p(old)
        return result

    def pop(self, key, default=_MISSING):
        cdef PyObject* old = NULL
        if not self._delete(<PyObject*>key, &old):
            if default is _MISSING:
                raise KeyError(key)
            return default
        result = <object>old
        Py_DECREF_p(old)
        return result

    def clear(self):
        """Remove everything (recorded in the newest snapshot like any write)."""
        self._clear_all()

    def update(self, other=(), **kwargs):
        items = other.items() if hasattr(other, "items") else other
        for k, v in items:
            self._write(<PyObject*>k, <PyObject*>v, hash_of(<PyObject*>k), NULL)
        for k, v in kwargs.items():
            self._write(<PyObject*>k, <PyObject*>v, hash_of(<PyObject*>k), NULL)

    def put_many(self, keys, values):
        """``put(k, v)`` for each pair (sequences or numpy arrays of equal length).

        Fast when the keys are exact ints or strs, fastest when they are a
        1-d int64 numpy array (no int object is made for a key already in
        the map); any other key takes the single-op path, same semantics."""
        cdef Py_ssize_t n
        cdef const int64_t[::1] karr
        if _is_int64_array(keys):
            try:
                karr = keys
            except (ValueError, TypeError, BufferError):
                pass
            else:
                vseq = _seq(values)
                n = karr.shape[0]
                if PySequence_Fast_GET_SIZE(vseq) != n:
                    raise ValueError(f"put_many: {n} keys but "
                                     f"{PySequence_Fast_GET_SIZE(vseq)} values")
                self._bulk_put_int64(karr, vseq)
                return
        kseq = _seq(keys)
        vseq = _seq(values)
        n = PySequence_Fast_GET_SIZE(kseq)
        if PySequence_Fast_GET_SIZE(vseq) != n:
            raise ValueError(f"put_many: {n} keys but "
                             f"{PySequence_Fast_GET_SIZE(vseq)} values")
        self._bulk_put_seq(kseq, vseq)

    def get_many(self, keys, default=None, *, epoch=LATEST_EPOCH):
        """``[get(k, default, epoch=epoch) for k in keys]`` (a list; keys as
        for ``put_many``)."""
        cdef int64_t e = _as_epoch(epoch)
        cdef Py_ssize_t i, n
        cdef PyObject* k
        cdef PyObject* v
        cdef Entry* ent
        cdef PyObject* dflt = <PyObject*>default
        if e == C_LATEST:
            return self._bulk_latest(keys, dflt, 0)
        kseq = _seq(keys)
        n = PySequence_Fast_GET_SIZE(kseq)
        out = PyList_New(n)
        for i in range(n):
            k = _item(kseq, i)
            Py_INCREF_p(k)
            try:
                ent = self._lookup_at(k, e)
                v = ent.value if ent != NULL else dflt
                Py_INCREF_p(v)
            finally:
                Py_DECREF_p(k)
            PyList_SET_ITEM_p(out, i, v)   # steals the reference
        return out

    def keys(self, epoch=LATEST_EPOCH):
        """Keys at ``epoch`` (a live iterator at LATEST, a list otherwise)."""
        cdef int64_t e = _as_epoch(epoch)
        if e == C_LATEST:
            return _latest_iter(self, 0)
        return self._elements(e, 0)

    def values(self, epoch=LATEST_EPOCH):
        cdef int64_t e = _as_epoch(epoch)
        if e == C_LATEST:
            return _latest_iter(self, 1)
        return self._elements(e, 1)

    def items(self, epoch=LATEST_EPOCH):
        cdef int64_t e = _as_epoch(epoch)
        if e == C_LATEST:
            return _latest_iter(self, 2)
        return self._elements(e, 2)

    def to_dict(self, epoch=LATEST_EPOCH):
        """A plain ``dict`` copy of the map at ``epoch``."""
        return dict(self.items(epoch))


@cython.no_gc_clear
cdef class TimelineHashSet(_SnapshottableHashTable):
    """A hash set that can be read at any live snapshot epoch and reverted."""

    cdef int _add(self, PyObject* key) except -1:
        cdef size_t slot = 0
        cdef Py_hash_t h = hash_of(key)
        if tbl_lookup(&self.t, key, h, &slot) >= 0:
            return 0
        self._write(key, NULL, h, NULL)
        return 1

    def add(self, key):
        """Add ``key``; True if it was absent (re-adding keeps its start epoch)."""
        return self._add(<PyObject*>key) == 1

    def add_many(self, keys):
        """Add every key; return how many were new."""
        cdef Py_ssize_t i, n, added = 0
        cdef PyObject* k
        kseq = _seq(keys)
        n = PySequence_Fast_GET_SIZE(kseq)
        tbl_reserve(&self.t, n)
        for i in range(n):
            k = _item(kseq, i)
            Py_INCREF_p(k)
            try:
                added += self._add(k)
            finally:
                Py_DECREF_p(k)
        return added

    def remove(self, key):
        """Remove ``key``; True if it was present (Kafka's ``remove``)."""
        return self._delete(<PyObject*>key, NULL) == 1

    def discard(self, key):
        self._delete(<PyObject*>key, NULL)

    def clear(self):
        self._clear_all()

    def __iter__(self):
        return _latest_iter(self, 0)

    def __repr__(self):
        return f"TimelineHashSet({list(self)!r})"

    def keys(self, epoch=LATEST_EPOCH):
        """Members at ``epoch`` (a live iterator at LATEST, a list otherwise)."""
        cdef int64_t e = _as_epoch(epoch)
        if e == C_LATEST:
            return _latest_iter(self, 0)
        return self._elements(e, 0)

    def to_set(self, epoch=LATEST_EPOCH):
        return set(self.keys(epoch))


# ---------------------------------------------------------------------------
# scalars


@cython.no_gc_clear
cdef class _TimelineScalar(_Revertable):
    cdef Snapshot _saved_snap    # newest snapshot known to hold our old value

    cdef object _boxed(self):
        raise NotImplementedError

    cdef int _save(self) except -1:
        cdef Snapshot snap = self._registry._latest
        if snap is None or snap is self._saved_snap:
            return 0
        if self not in snap.deltas:
            snap.deltas[self] = self._boxed()
        self._saved_snap = snap
        return 0

    cdef object _get_at(self, object epoch):
        cdef int64_t e = _as_epoch(epoch)
        cdef Py_ssize_t pos, n
        if e == C_LATEST:
            return self._boxed()
        pos = self._registry._position(e)
        snaps = self._registry._snapshots
        n = len(snaps)
        while pos < n:
            saved = (<Snapshot>snaps[pos]).deltas.get(self, _MISSING)
            if saved is not _MISSING:
                return saved
            pos += 1
        return self._boxed()

    def __repr__(self):
        return f"{type(self).__name__}({self._boxed()!r})"


@cython.no_gc_clear
cdef class TimelineLong(_TimelineScalar):
    """A 64-bit signed integer that can be snapshotted (initially 0).
    Leaving the int64 range raises ``OverflowError`` (Java would wrap)."""

    cdef int64_t _value

    def __cinit__(self, registry, value=0):
        self._value = _index_int64(value, "TimelineLong")
        self._attach(registry)

    cdef object _boxed(self):
        return self._value

    def get(self, epoch=LATEST_EPOCH):
        if epoch is _LATEST:
            return self._value
        return self._get_at(epoch)

    def set(self, value):
        cdef int64_t v = _index_int64(value, "TimelineLong")
        self._save()
        self._value = v

    def increment(self):
        if self._value == INT64_MAX:
            raise OverflowError("TimelineLong value would exceed the int64 range")
        self._save()
        self._value += 1

    def decrement(self):
        if self._value == INT64_MIN:
            raise OverflowError("TimelineLong value would exceed the int64 range")
        self._save()
        self._value -= 1

    @property
    def value(self):
        return self._value

    cdef int _revert(self, int64_t epoch, object delta) except -1:
        self._saved_snap = None
        self._value = <int64_t>delta
        return 0

    cdef int _reset(self) except -1:
        self._saved_snap = None
        self._save()
        self._value = 0
        return 0


@cython.no_gc_clear
cdef class TimelineInteger(_TimelineScalar):
    """A 32-bit signed integer that can be snapshotted (initially 0).
    Leaving the int32 range raises ``OverflowError`` (Java would wrap)."""

    cdef int32_t _value

    def __cinit__(self, registry, value=0):
        self._value = _index_int32(value)
        self._attach(registry)

    cdef object _boxed(self):
        return self._value

    def get(self, epoch=LATEST_EPOCH):
        if epoch is _LATEST:
            return self._value
        return self._get_at(epoch)

    def set(self, value):
        cdef int32_t v = _index_int32(value)
        self._save()
        self._value = v

    def increment(self):
        if self._value == INT32_MAX:
            raise OverflowError("TimelineInteger value would exceed the int32 range")
        self._save()
        self._value += 1

    def decrement(self):
        if self._value == INT32_MIN:
            raise OverflowError("TimelineInteger value would exceed the int32 range")
        self._save()
        self._value -= 1

    @property
    def value(self):
        return self._value

    cdef int _revert(self, int64_t epoch, object delta) except -1:
        self._saved_snap = None
        self._value = <int32_t>delta
        return 0

    cdef int _reset(self) except -1:
        self._saved_snap = None
        self._save()
        self._value = 0
        return 0


@cython.no_gc_clear
cdef class TimelineObject(_TimelineScalar):
    """A reference to an (immutable) object that can be snapshotted;
    ``SnapshotRegistry.reset`` sets it back to its initial value."""

    cdef object _value
    cdef object _initial

    def __cinit__(self, registry, initial):
        self._initial = initial
        self._value = initial
        self._attach(registry)

    cdef object _boxed(self):
        return self._value

    def get(self, epoch=LATEST_EPOCH):
        if epoch is _LATEST:
            return self._value
        return self._get_at(epoch)

    def set(self, value):
        self._save()
        self._value = value

    @property
    def value(self):
        return self._value

    cdef int _revert(self, int64_t epoch, object delta) except -1:
        self._saved_snap = None
        self._value = delta
        return 0

    cdef int _reset(self) except -1:
        self._saved_snap = None
        self._save()
        self._value = self._initial
        return 0


cdef int64_t _index_int64(object value, str what) except? -1:
    v = value.__index__()
    if not (INT64_MIN <= v <= INT64_MAX):
        raise OverflowError(f"{what} value {v} out of range [{INT64_MIN}, {INT64_MAX}]")
    return <int64_t>v


cdef int32_t _index_int32(object value) except? -1:
    v = value.__index__()
    if not (INT32_MIN <= v <= INT32_MAX):
        raise OverflowError(f"TimelineInteger value {v} out of range [{INT32_MIN}, {INT32_MAX}]")
    return <int32_t>v


__all__ = [
    "LATEST_EPOCH", "NO_SNAPSHOT_EPOCH", "Snapshot", "SnapshotRegistry",
    "SnapshotNotFoundError", "SnapshotEpochError", "TimelineHashMap",
    "TimelineHashSet", "TimelineLong", "TimelineInteger", "TimelineObject",
]


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
    if t == NULL or t.entries == NULL:
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


def _check_int_hash():
    import sys
    global _INT_HASH_IS_MOD61
    _INT_HASH_IS_MOD61 = (sys.hash_info.width == 64
                          and sys.hash_info.modulus == (1 << 61) - 1
                          and sizeof(Py_hash_t) == 8)


_check_int_hash()
