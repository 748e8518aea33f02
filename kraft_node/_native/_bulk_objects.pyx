# cython: language_level=3
"""Python objects made in bulk from columns, in C (twin: ``kraft_node._pure._bulk_objects``;
read that for the contract -- the two give equal objects, tests compare them).

Why native: a snapshot load makes a million ``PartitionRegistration`` values (frozen, slotted
dataclasses) and millions of small tuples; Python makes each in about a microsecond, this
kernel in tens of nanoseconds.  ``new_objects`` allocates with the class's ``tp_alloc`` (what
``object.__new__`` does) and stores each value straight into its slot: the offset comes from
the slot's member descriptor (``PyMemberDescrObject.d_member->offset``), checked once per call
to be a writable object slot (T_OBJECT_EX) of that class, so the loop itself runs unchecked.
The GIL is held throughout (it makes Python objects).
"""
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy, memset

import numpy as np

cdef extern from *:
    """
    #include "structmember.h"
    static PyObject* kb_alloc(PyObject* cls) {
        PyTypeObject* t = (PyTypeObject*)cls;
        return t->tp_alloc(t, 0);
    }
    /* the offset of a writable object slot, or -1 when descr is not one */
    static Py_ssize_t kb_member_offset(PyObject* descr) {
        PyMemberDef* d;
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        d = ((PyMemberDescrObject*)descr)->d_member;
        if (d->type != T_OBJECT_EX || (d->flags & READONLY)) return -1;
        return d->offset;
    }
    static inline void kb_set_slot(PyObject* obj, Py_ssize_t off, PyObject* v) {
        PyObject** p = (PyObject**)((char*)obj + off);
        PyObject* old = *p;
        Py_INCREF(v);
        *p = v;
        Py_XDECREF(old);
    }
    static inline void kb_list_set(PyObject* list, Py_ssize_t i, PyObject* v) {
        PyList_SET_ITEM(list, i, v);  /* steals v */
    }
    static inline void kb_list_set_incref(PyObject* list, Py_ssize_t i, PyObject* v) {
        Py_INCREF(v);
        PyList_SET_ITEM(list, i, v);
    }
    static inline void kb_tuple_set(PyObject* t, Py_ssize_t i, PyObject* v) {
        Py_INCREF(v);
        PyTuple_SET_ITEM(t, i, v);
    }
    static inline PyObject** kb_items(PyObject* seq) {
        return PySequence_Fast_ITEMS(seq);
    }
    static inline void kb_untrack(PyObject* obj) {
        if (PyObject_GC_IsTracked(obj)) PyObject_GC_UnTrack(obj);
    }
    """
    PyObject* kb_alloc(PyObject* cls) except NULL
    Py_ssize_t kb_member_offset(PyObject* descr)
    void kb_set_slot(PyObject* obj, Py_ssize_t off, PyObject* v)
    void kb_list_set(PyObject* lst, Py_ssize_t i, PyObject* v)
    void kb_list_set_incref(PyObject* lst, Py_ssize_t i, PyObject* v)
    void kb_tuple_set(PyObject* t, Py_ssize_t i, PyObject* v)
    PyObject** kb_items(PyObject* seq)
    void kb_untrack(PyObject* obj)
    PyObject* PyTuple_New(Py_ssize_t n) except NULL
    object PyList_New(Py_ssize_t n)

DEF MAX_SLOTS = 64

__all__ = ["encode_partition_rows", "new_objects", "slot_names", "tuples"]

_EMPTY = ()


def slot_names(cls):
    """The instance slots of ``cls`` and its bases (see the twin)."""
    if not isinstance(cls, type):
        raise ValueError(f"new_objects needs a class, not {type(cls).__name__}")
    names = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        if "__slots__" not in klass.__dict__:
            raise ValueError(f"{klass.__name__} has no __slots__: its instances have a __dict__")
        raw = klass.__dict__["__slots__"]
        for name in ([raw] if isinstance(raw, str) else list(raw)):
            if name == "__weakref__":
                continue
            if name == "__dict__":
                raise ValueError(f"{klass.__name__} has a __dict__ slot")
            names.append(name)
    return names


def _slot_owners(cls):
    """slot name -> the class whose ``__slots__`` declares it (its member descriptor lives in
    that class's ``__dict__``, even where a subclass shadows the name with a property)."""
    owner = {}
    for klass in reversed(cls.__mro__):
        raw = klass.__dict__.get("__slots__", ())
        for name in ([raw] if isinstance(raw, str) else list(raw)):
            owner[name] = klass
    return owner


def _offsets(cls, names):
    slots = slot_names(cls)
    if len(set(names)) != len(names):
        raise ValueError(f"a slot of {cls.__name__} is named twice: {list(names)}")
    missing = [s for s in slots if s not in names]
    unknown = [s for s in names if s not in slots]
    if missing or unknown:
        raise ValueError(f"new_objects({cls.__name__}): slots not given {missing}, not slots {unknown}")
    if cls.__new__ is not object.__new__:
        raise ValueError(f"{cls.__name__} has its own __new__: new_objects would skip it")
    out = []
    cdef Py_ssize_t off
    owner = _slot_owners(cls)
    for name in names:
        descr = owner[name].__dict__[name]
        off = kb_member_offset(<PyObject*>descr)
        if off < 0:
            raise ValueError(f"{cls.__name__}.{name} is not a plain object slot")
        out.append(off)
    return out


def new_objects(cls, names, columns, bint untrack=False):
    """``m`` instances of ``cls`` with slot ``names[j]`` = ``columns[j][i]`` (see the twin;
    ``untrack``: taken out of the cyclic collector's lists, which the twin cannot do)."""
    if len(names) != len(columns):
        raise ValueError(f"{len(names)} slot names but {len(columns)} columns")
    offs = _offsets(cls, list(names))
    cdef Py_ssize_t k = len(offs), m, i, j
    if k > MAX_SLOTS:
        raise ValueError(f"{cls.__name__} has more than {MAX_SLOTS} slots")
    cols = [c if isinstance(c, (list, tuple)) else list(c) for c in columns]
    m = len(cols[0]) if k else 0
    for name, col in zip(names, cols):
        if len(col) != m:
            raise ValueError(f"column {name!r} has {len(col)} values, the first one {m}")
    cdef Py_ssize_t off[MAX_SLOTS]
    cdef PyObject** items[MAX_SLOTS]
    for j in range(k):
        off[j] = offs[j]
        items[j] = kb_items(<PyObject*>cols[j])
    result = PyList_New(m)
    cdef PyObject* raw = <PyObject*>result
    cdef PyObject* obj
    for i in range(m):
        obj = kb_alloc(<PyObject*>cls)
        for j in range(k):
            kb_set_slot(obj, off[j], items[j][i])
        if untrack:
            kb_untrack(obj)
        kb_list_set(raw, i, obj)
    return result


def tuples(offsets, list values, bint untrack=False):
    """``tuple(values[offsets[i]:offsets[i + 1]])`` for each ``i`` (see the twin;
    ``untrack`` as for ``new_objects``)."""
    offs = np.asarray(offsets)
    if offs.ndim != 1 or len(offs) < 1 or offs.dtype.kind not in "iu":
        raise ValueError("offsets must be a 1-d integer array of m + 1 positions")
    cdef const int64_t[::1] o = np.ascontiguousarray(offs, dtype=np.int64)
    cdef Py_ssize_t m = o.shape[0] - 1, n = len(values), i, a, b, q
    if o[0] < 0 or o[m] > n:
        raise ValueError(f"offsets must be non-decreasing positions within the {n} values")
    for i in range(m):
        if o[i + 1] < o[i]:
            raise ValueError(f"offsets must be non-decreasing positions within the {n} values")
    cdef PyObject** items = kb_items(<PyObject*>values)
    result = PyList_New(m)
    cdef PyObject* raw = <PyObject*>result
    cdef PyObject* t
    cdef PyObject* empty = <PyObject*>_EMPTY
    for i in range(m):
        a = o[i]
        b = o[i + 1]
        if b == a:
            kb_list_set_incref(raw, i, empty)
            continue
        t = PyTuple_New(b - a)
        for q in range(b - a):
            kb_tuple_set(t, q, items[a + q])
        if untrack:
            kb_untrack(t)
        kb_list_set(raw, i, t)
    return result



# ---------------------------------------------------------------------------
# PartitionRecord values straight from registration objects
# ---------------------------------------------------------------------------

cdef extern from *:
    """
    static inline PyObject* kb_get_slot(PyObject* obj, Py_ssize_t off) {
        return *(PyObject**)((char*)obj + off);   /* borrowed; NULL when unset */
    }
    /* an int that fits int32 into *out: 1, else 0 (no exception left set) */
    static int kb_int32(PyObject* v, int32_t* out) {
        int overflow = 0;
        long x;
        if (!PyLong_Check(v)) return 0;
        x = PyLong_AsLongAndOverflow(v, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) { PyErr_Clear(); return 0; }
        if (x < INT32_MIN || x > INT32_MAX) return 0;
        *out = (int32_t)x;
        return 1;
    }
    static inline void kb_be32(unsigned char* p, int32_t v) {
        uint32_t u = (uint32_t)v;
        p[0] = (unsigned char)(u >> 24); p[1] = (unsigned char)(u >> 16);
        p[2] = (unsigned char)(u >> 8); p[3] = (unsigned char)u;
    }
    /* a tuple of int32s shorter than 127 entries: its length, else -1 */
    static Py_ssize_t kb_int_list(PyObject* t) {
        Py_ssize_t n, i;
        int32_t x;
        if (t == NULL || !PyTuple_CheckExact(t)) return -1;
        n = PyTuple_GET_SIZE(t);
        if (n > 126) return -1;
        for (i = 0; i < n; i++) if (!kb_int32(PyTuple_GET_ITEM(t, i), &x)) return -1;
        return n;
    }
    static unsigned char* kb_put_list(unsigned char* p, PyObject* t, Py_ssize_t n) {
        Py_ssize_t i;
        int32_t x = 0;
        *p++ = (unsigned char)(n + 1);
        for (i = 0; i < n; i++) { kb_int32(PyTuple_GET_ITEM(t, i), &x); kb_be32(p, x); p += 4; }
        return p;
    }
    static inline char* kb_bytes_data(PyObject* b) { return PyBytes_AS_STRING(b); }
    static inline PyObject* kb_bytes_new(Py_ssize_t n) { return PyBytes_FromStringAndSize(NULL, n); }
    static inline int kb_is_bytes16(PyObject* b) { return b != NULL && PyBytes_CheckExact(b) && PyBytes_GET_SIZE(b) == 16; }
    static inline int kb_type_is(PyObject* o, PyObject* t) { return o != NULL && (PyObject*)Py_TYPE(o) == t; }
    static inline Py_ssize_t kb_tuple_len(PyObject* t) { return (t != NULL && PyTuple_CheckExact(t)) ? PyTuple_GET_SIZE(t) : -1; }
    static inline PyObject* kb_tuple_item(PyObject* t, Py_ssize_t i) { return PyTuple_GET_ITEM(t, i); }
    """
    PyObject* kb_get_slot(PyObject* obj, Py_ssize_t off)
    int kb_int32(PyObject* v, int32_t* out)
    void kb_be32(unsigned char* p, int32_t v)
    Py_ssize_t kb_int_list(PyObject* t)
    unsigned char* kb_put_list(unsigned char* p, PyObject* t, Py_ssize_t n)
    char* kb_bytes_data(PyObject* b)
    PyObject* kb_bytes_new(Py_ssize_t n) except NULL
    int kb_is_bytes16(PyObject* b)
    int kb_type_is(PyObject* o, PyObject* t)
    Py_ssize_t kb_tuple_len(PyObject* t)
    PyObject* kb_tuple_item(PyObject* t, Py_ssize_t i)

#: The slots ``encode_partition_records`` reads, in this order.
PARTITION_SLOTS = ("replicas", "isr", "removing_replicas", "adding_replicas", "leader", "leader_recovery_state",
                   "leader_epoch", "partition_epoch", "directories", "elr", "last_known_elr")


def _read_offsets(cls, names):
    owner = _slot_owners(cls)
    out = []
    cdef Py_ssize_t off
    for name in names:
        if name not in owner:
            raise ValueError(f"{cls.__name__} has no slot {name!r}")
        off = kb_member_offset(<PyObject*>owner[name].__dict__[name])
        if off < 0:
            raise ValueError(f"{cls.__name__}.{name} is not a plain object slot")
        out.append(off)
    return out


def encode_partition_records(cls, bytes header, pids, topic_ids, regs, uuid_cls, int version):
    """Each registration's PartitionRecord value, or None where the caller's typed encoder
    must write it (see the twin for when)."""
    if not (len(pids) == len(topic_ids) == len(regs)):
        raise ValueError("pids, topic_ids and regs must have the same length")
    if len(header) != 3:
        raise ValueError("header must be the 3 frame bytes")
    slot_names(cls)
    offs = _read_offsets(cls, PARTITION_SLOTS)
    cdef Py_ssize_t uuid_off = _read_offsets(uuid_cls, ("_b",))[0]
    cdef Py_ssize_t o_rep = offs[0], o_isr = offs[1], o_rem = offs[2], o_add = offs[3], o_leader = offs[4]
    cdef Py_ssize_t o_lrs = offs[5], o_le = offs[6], o_pe = offs[7], o_dirs = offs[8], o_elr = offs[9]
    cdef Py_ssize_t o_lk = offs[10]
    pl, tl, rl = list(pids), list(topic_ids), list(regs)
    cdef Py_ssize_t n = len(rl), i, j, nr, ni, nrm, nad, nd, ne, nk, size
    cdef PyObject** pid_items = kb_items(<PyObject*>pl)
    cdef PyObject** tid_items = kb_items(<PyObject*>tl)
    cdef PyObject** reg_items = kb_items(<PyObject*>rl)
    cdef PyObject* reg
    cdef PyObject* rep
    cdef PyObject* isr
    cdef PyObject* rem
    cdef PyObject* add
    cdef PyObject* dirs
    cdef PyObject* d
    cdef PyObject* b
    cdef PyObject* value
    cdef int32_t pid, leader, le, pe, lrs
    cdef unsigned char* p
    cdef const unsigned char* h = header
    cdef bint zero
    cdef PyObject* none = <PyObject*>None
    result = PyList_New(n)
    cdef PyObject* raw = <PyObject*>result
    for i in range(n):
        reg = reg_items[i]
        value = NULL
        if (kb_type_is(reg, <PyObject*>cls) and kb_is_bytes16(tid_items[i]) and kb_int32(pid_items[i], &pid)
                and kb_int32(kb_get_slot(reg, o_leader), &leader) and kb_int32(kb_get_slot(reg, o_le), &le)
                and kb_int32(kb_get_slot(reg, o_pe), &pe) and kb_int32(kb_get_slot(reg, o_lrs), &lrs) and lrs == 0):
            rep, isr = kb_get_slot(reg, o_rep), kb_get_slot(reg, o_isr)
            rem, add = kb_get_slot(reg, o_rem), kb_get_slot(reg, o_add)
            dirs = kb_get_slot(reg, o_dirs)
            nr, ni, nrm, nad = kb_int_list(rep), kb_int_list(isr), kb_int_list(rem), kb_int_list(add)
            nd = kb_tuple_len(dirs)
            ne, nk = kb_tuple_len(kb_get_slot(reg, o_elr)), kb_tuple_len(kb_get_slot(reg, o_lk))
            zero = True
            if nr >= 0 and ni >= 0 and nrm >= 0 and nad >= 0 and 0 <= nd <= 126 and ne >= 0 and nk >= 0 \
                    and not (version >= 2 and (ne > 0 or nk > 0)):
                for j in range(nd):
                    d = kb_tuple_item(dirs, j)
                    if not kb_type_is(d, <PyObject*>uuid_cls) or not kb_is_bytes16(kb_get_slot(d, uuid_off)):
                        nd = -1
                        break
                    if zero:
                        zero = _all_zero(<const unsigned char*>kb_bytes_data(kb_get_slot(d, uuid_off)))
                if nd >= 0 and (version >= 1 or zero):
                    size = 3 + 4 + 16 + (1 + 4 * nr) + (1 + 4 * ni) + (1 + 4 * nrm) + (1 + 4 * nad) + 12 + 1
                    if version >= 1:
                        size += 1 + 16 * nd
                    value = kb_bytes_new(size)
                    p = <unsigned char*>kb_bytes_data(value)
                    memcpy(p, h, 3)
                    kb_be32(p + 3, pid)
                    memcpy(p + 7, kb_bytes_data(tid_items[i]), 16)
                    p += 23
                    p = kb_put_list(p, rep, nr)
                    p = kb_put_list(p, isr, ni)
                    p = kb_put_list(p, rem, nrm)
                    p = kb_put_list(p, add, nad)
                    kb_be32(p, leader)
                    kb_be32(p + 4, le)
                    kb_be32(p + 8, pe)
                    p += 12
                    if version >= 1:
                        p[0] = <unsigned char>(nd + 1)
                        p += 1
                        for j in range(nd):
                            memcpy(p, kb_bytes_data(kb_get_slot(kb_tuple_item(dirs, j), uuid_off)), 16)
                            p += 16
                    p[0] = 0
        if value == NULL:
            kb_list_set_incref(raw, i, none)
        else:
            kb_list_set(raw, i, value)
    return result


cdef inline bint _all_zero(const unsigned char* p) noexcept:
    cdef int k
    for k in range(16):
        if p[k]:
            return False
    return True


# ---------------------------------------------------------------------------
# Index entries grouped by (key, topic)
# ---------------------------------------------------------------------------

cdef extern from *:
    """
    static inline PyObject* kb_long(long long v) { return PyLong_FromLongLong(v); }
    static inline void kb_tuple_steal(PyObject* t, Py_ssize_t i, PyObject* v) { PyTuple_SET_ITEM(t, i, v); }
    """
    PyObject* kb_long(long long v) except NULL
    void kb_tuple_steal(PyObject* t, Py_ssize_t i, PyObject* v)
    object kb_tuple_new "PyTuple_New"(Py_ssize_t n)


def group_by_key(keys, topics, entries, Py_ssize_t nkeys, list topic_objs, bint untrack=False):
    """Entries grouped by key, then by topic (see the twin): a counting sort by key (stable),
    then each key's run split where the topic changes."""
    cdef const int64_t[::1] k = np.ascontiguousarray(keys, dtype=np.int64)
    cdef const int64_t[::1] t = np.ascontiguousarray(topics, dtype=np.int64)
    cdef const int64_t[::1] e = np.ascontiguousarray(entries, dtype=np.int64)
    cdef Py_ssize_t n = k.shape[0], i, j, q, a, b, g, nt = len(topic_objs), last
    if t.shape[0] != n or e.shape[0] != n:
        raise ValueError("keys, topics and entries must have the same length")
    for i in range(n):
        if k[i] < 0 or k[i] >= nkeys or t[i] < 0 or t[i] >= nt:
            raise ValueError("a key or topic index is out of range")
    cdef int64_t[::1] start = np.zeros(nkeys + 1, dtype=np.int64)
    cdef int64_t[::1] fill = np.empty(nkeys, dtype=np.int64)
    cdef int64_t[::1] perm = np.empty(n, dtype=np.int64)
    for i in range(n):
        start[k[i] + 1] += 1
    for j in range(nkeys):
        start[j + 1] += start[j]
        fill[j] = start[j]
    for i in range(n):
        perm[fill[k[i]]] = i
        fill[k[i]] += 1
    # each key's topics must not go back
    for j in range(nkeys):
        for q in range(start[j] + 1, start[j + 1]):
            if t[perm[q]] < t[perm[q - 1]]:
                return None
    cdef PyObject** objs = kb_items(<PyObject*>topic_objs)
    out = [None] * nkeys
    for j in range(nkeys):
        a, b = start[j], start[j + 1]
        if a == b:
            continue
        names = []
        tuples = []
        q = a
        while q < b:
            last = t[perm[q]]
            g = q
            while g < b and t[perm[g]] == last:
                g += 1
            tup = kb_tuple_new(g - q)
            for i in range(q, g):
                kb_tuple_steal(<PyObject*>tup, i - q, kb_long(e[perm[i]]))
            if untrack:
                kb_untrack(<PyObject*>tup)
            tuples.append(tup)
            names.append(<object>objs[last])
            q = g
        out[j] = (names, tuples)
    return out



# ---------------------------------------------------------------------------
# PartitionRecord values straight from columns (a PartitionBlock's rows)
# ---------------------------------------------------------------------------

#: The arrays ``encode_partition_rows`` takes, in this order (see the twin).
PARTITION_ROW_COLUMNS = ("partition_id", "leader", "leader_epoch", "partition_epoch", "leader_recovery_state",
                         "replicas_offsets", "replicas", "isr_offsets", "isr", "removing_offsets", "removing",
                         "adding_offsets", "adding", "directories_offsets", "directories", "elr_offsets",
                         "last_known_elr_offsets")


cdef inline Py_ssize_t _span(const int32_t* offsets, Py_ssize_t row, Py_ssize_t nvalues, str name) except -2:
    """Row ``row``'s list length in ``offsets`` (positions into ``nvalues`` values)."""
    cdef int32_t a = offsets[row], b = offsets[row + 1]
    if a < 0 or b < a or b > nvalues:
        raise ValueError(f"encode_partition_rows: row {row}: {name} offsets {a}..{b} outside 0..{nvalues}")
    return b - a


cdef inline unsigned char* _put_values(unsigned char* p, const int32_t* offsets, const int32_t* values,
                                       Py_ssize_t row, Py_ssize_t n) noexcept:
    cdef Py_ssize_t j, a = offsets[row]
    p[0] = <unsigned char>(n + 1)
    p += 1
    for j in range(n):
        kb_be32(p, values[a + j])
        p += 4
    return p


cdef inline const int32_t* _ints(const int32_t[::1] a) noexcept:
    return &a[0] if a.shape[0] else NULL


def encode_partition_rows(bytes header, columns, starts, stops, list topic_ids, int version, list prefixes=None):
    """The PartitionRecord value of each row of each span, or None where the caller must
    write that row another way, each span after its prefix when given (see the twin)."""
    if len(header) != 3:
        raise ValueError("header must be the 3 frame bytes")
    if len(columns) != len(PARTITION_ROW_COLUMNS):
        raise ValueError(f"columns must be the {len(PARTITION_ROW_COLUMNS)} arrays {PARTITION_ROW_COLUMNS}")
    cdef const int32_t[::1] pid = np.ascontiguousarray(columns[0], dtype=np.int32)
    cdef const int32_t[::1] leader = np.ascontiguousarray(columns[1], dtype=np.int32)
    cdef const int32_t[::1] le = np.ascontiguousarray(columns[2], dtype=np.int32)
    cdef const int32_t[::1] pe = np.ascontiguousarray(columns[3], dtype=np.int32)
    cdef const signed char[::1] lrs = np.ascontiguousarray(columns[4], dtype=np.int8)
    cdef const int32_t[::1] rep_o = np.ascontiguousarray(columns[5], dtype=np.int32)
    cdef const int32_t[::1] rep = np.ascontiguousarray(columns[6], dtype=np.int32)
    cdef const int32_t[::1] isr_o = np.ascontiguousarray(columns[7], dtype=np.int32)
    cdef const int32_t[::1] isr = np.ascontiguousarray(columns[8], dtype=np.int32)
    cdef const int32_t[::1] rem_o = np.ascontiguousarray(columns[9], dtype=np.int32)
    cdef const int32_t[::1] rem = np.ascontiguousarray(columns[10], dtype=np.int32)
    cdef const int32_t[::1] add_o = np.ascontiguousarray(columns[11], dtype=np.int32)
    cdef const int32_t[::1] add = np.ascontiguousarray(columns[12], dtype=np.int32)
    cdef const int32_t[::1] dir_o = np.ascontiguousarray(columns[13], dtype=np.int32)
    dirs_array = np.ascontiguousarray(columns[14], dtype=np.uint8)
    if dirs_array.ndim != 2 or dirs_array.shape[1] != 16:
        raise ValueError(f"encode_partition_rows: directories must be uint8[k, 16], not shape {dirs_array.shape}")
    cdef const unsigned char[::1] dirs = dirs_array.reshape(-1)
    cdef const int32_t[::1] elr_o = np.ascontiguousarray(columns[15], dtype=np.int32)
    cdef const int32_t[::1] lk_o = np.ascontiguousarray(columns[16], dtype=np.int32)
    cdef const int64_t[::1] s = np.ascontiguousarray(starts, dtype=np.int64)
    cdef const int64_t[::1] e = np.ascontiguousarray(stops, dtype=np.int64)
    cdef Py_ssize_t nrows = pid.shape[0], nspans = s.shape[0], k, row, total = 0, at = 0, j
    cdef Py_ssize_t ndirs = dirs_array.shape[0]
    if e.shape[0] != nspans or len(topic_ids) != nspans or (prefixes is not None and len(prefixes) != nspans):
        raise ValueError("starts, stops, topic_ids (and prefixes) must have the same length")
    for name, col in zip(PARTITION_ROW_COLUMNS[1:5], (leader, le, pe, lrs)):
        if col.shape[0] != nrows:
            raise ValueError(f"encode_partition_rows: {name} has {col.shape[0]} rows, partition_id {nrows}")
    for name, col in zip(("replicas", "isr", "removing", "adding", "directories", "elr", "last_known_elr"),
                         (rep_o, isr_o, rem_o, add_o, dir_o, elr_o, lk_o)):
        if col.shape[0] != nrows + 1:
            raise ValueError(f"encode_partition_rows: {name}_offsets has {col.shape[0]} entries for {nrows} rows")
    for k in range(nspans):
        if s[k] < 0 or e[k] < s[k] or e[k] > nrows:
            raise ValueError(f"encode_partition_rows: span {k} is rows {s[k]}..{e[k]}, outside 0..{nrows}")
        if not kb_is_bytes16(<PyObject*>topic_ids[k]):
            raise ValueError(f"encode_partition_rows: topic id {k} is not 16 bytes")
        total += e[k] - s[k]
    if prefixes is not None:
        total += nspans
    cdef PyObject** pre = kb_items(<PyObject*>prefixes) if prefixes is not None else NULL
    cdef const int32_t* rep_op = _ints(rep_o)
    cdef const int32_t* isr_op = _ints(isr_o)
    cdef const int32_t* rem_op = _ints(rem_o)
    cdef const int32_t* add_op = _ints(add_o)
    cdef const int32_t* dir_op = _ints(dir_o)
    cdef const int32_t* repp = _ints(rep)
    cdef const int32_t* isrp = _ints(isr)
    cdef const int32_t* remp = _ints(rem)
    cdef const int32_t* addp = _ints(add)
    cdef const unsigned char* dirp = &dirs[0] if dirs.shape[0] else NULL
    cdef Py_ssize_t n_rep = rep.shape[0], n_isr = isr.shape[0], n_rem = rem.shape[0], n_add = add.shape[0]
    cdef PyObject** tids = kb_items(<PyObject*>topic_ids)
    cdef const unsigned char* h = header
    cdef const unsigned char* tid
    cdef Py_ssize_t nr, ni, nrm, nad, nd, size
    cdef unsigned char* p
    cdef PyObject* value
    cdef PyObject* none = <PyObject*>None
    cdef bint zero
    result = PyList_New(total)
    cdef PyObject* raw = <PyObject*>result
    for k in range(nspans):
        tid = <const unsigned char*>kb_bytes_data(tids[k])
        if pre != NULL:
            kb_list_set_incref(raw, at, pre[k])
            at += 1
        for row in range(s[k], e[k]):
            value = NULL
            nr = _span(rep_op, row, n_rep, "replicas")
            ni = _span(isr_op, row, n_isr, "isr")
            nrm = _span(rem_op, row, n_rem, "removing")
            nad = _span(add_op, row, n_add, "adding")
            nd = _span(dir_op, row, ndirs, "directories")
            # ELR: a tagged field at v2, a loss below it -- the caller's way either way
            if (lrs[row] == 0 and elr_o[row] == elr_o[row + 1] and lk_o[row] == lk_o[row + 1]
                    and nr <= 126 and ni <= 126 and nrm <= 126 and nad <= 126 and (nd == 0 or nd == nr)):
                zero = True
                if version == 0:
                    for j in range(dir_op[row] * 16, dir_op[row + 1] * 16):
                        if dirp[j]:
                            zero = False
                            break
                if zero:
                    size = 3 + 4 + 16 + (1 + 4 * nr) + (1 + 4 * ni) + (1 + 4 * nrm) + (1 + 4 * nad) + 12 + 1
                    if version >= 1:
                        size += 1 + 16 * nr
                    value = kb_bytes_new(size)
                    p = <unsigned char*>kb_bytes_data(value)
                    memcpy(p, h, 3)
                    kb_be32(p + 3, pid[row])
                    memcpy(p + 7, tid, 16)
                    p += 23
                    p = _put_values(p, rep_op, repp, row, nr)
                    p = _put_values(p, isr_op, isrp, row, ni)
                    p = _put_values(p, rem_op, remp, row, nrm)
                    p = _put_values(p, add_op, addp, row, nad)
                    kb_be32(p, leader[row])
                    kb_be32(p + 4, le[row])
                    kb_be32(p + 8, pe[row])
                    p += 12
                    if version >= 1:
                        p[0] = <unsigned char>(nr + 1)
                        p += 1
                        if nd == 0:  # none stored: MIGRATING (all zero) per replica
                            memset(p, 0, 16 * nr)
                        else:
                            memcpy(p, dirp + dir_op[row] * 16, 16 * nr)
                        p += 16 * nr
                    p[0] = 0
            if value == NULL:
                kb_list_set_incref(raw, at, none)
            else:
                kb_list_set(raw, at, value)
            at += 1
    return result
