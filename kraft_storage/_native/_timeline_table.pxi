# Part of kraft_storage._native._timeline, included by _timeline.pyx (first of
# its includes; not a module of its own).  The hash-table core: the C helpers
# and declarations it needs, the compile-time constants, the Entry/Table layout
# described in the module docstring, the Table primitives and the bulk probes
# for exact int/str and int64-array keys.  No Python-visible class lives here.

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
    int PyObject_IS_GC_p "PyObject_IS_GC"(PyObject* o) noexcept
    int PyObject_GC_IsTracked_p "PyObject_GC_IsTracked"(PyObject* o) noexcept
    int PyDict_Check_p "PyDict_Check"(PyObject* o) noexcept

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
    int visit



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
    t.visit = 0
    return tbl_alloc(t, capacity_for((expected * 3 + 1) // 2 + 1))


# ``Table.visit``: whether the cycle collector must walk the table's elements
# (``_visit_table``).  0 while every key and value stored so far is an object
# the collector ignores now and forever: not a GC type (int, str, bytes), or a
# GC object that is untracked and can never be tracked again (a tuple the
# collector or a kernel untracked, a kernel-made object untracked at birth:
# CPython re-tracks only dicts, which therefore always count).  Visiting such
# an object is a no-op for the collector (it only looks at objects of the
# generation being collected), but reading its header is a cache miss: a
# million-partition controller holds a million untracked registrations in its
# partition maps, and each collection of those maps walked them all.  Set to 1
# at the first other object stored, and kept (removing it does not clear the
# flag: conservative).  Only ``gc.get_referents`` sees the difference: it does
# not list the elements of a table that needs no walk.
cdef inline void tbl_note(Table* t, PyObject* o) noexcept:
    if t.visit == 0 and o != NULL and PyObject_IS_GC_p(o) and (
            PyObject_GC_IsTracked_p(o) or PyDict_Check_p(o)):
        t.visit = 1


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
    tbl_note(t, key)
    tbl_note(t, value)
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
    tbl_note(t, value)
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
        # the hash first: a probe that passes an occupied slot (most inserts
        # into a table 1/3 to 2/3 full) then reads the dense 4-byte hashes,
        # not the 24-byte entry (a cache miss on a cold table); the same key
        # object always has the same stored hash, so identity is checked after
        if ix >= 0 and hashes[ix] == h32:
            k = entries[ix].key
            if k == key:
                slot_out[0] = i
                return ix
            if True:
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
    tbl_note(t, key)
    tbl_note(t, value)
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
