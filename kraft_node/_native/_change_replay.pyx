# cython: language_level=3
"""A run of ISR/leader-only PartitionChangeRecords of one topic, merged and indexed without
changing anything, in C (twin: ``kraft_node._pure._change_replay``; read that for the contract
-- what a run is, what ``scan`` gives back.  The two give equal results, the tests compare
them, and ``ReplicationControlManager`` state replayed through either is identical).

Why native: this is the hot part of every controller's replay of a broker's controlled
shutdown or fencing (~35% of the active controller's CPU and ~55% of a standby's for the
10k-partition shutdown, benchmarks/results/s20/controller_shutdown.md).  Per record the twin
reads a dozen attributes, makes a registration with eleven ``object.__setattr__`` calls, and
two dicts of index entries over two sets; here the registration is allocated with the class's
``tp_alloc`` and its slots written at their member-descriptor offsets (checked once, at
construction: the class's ``__slots__`` must be exactly the eleven fields), the previous
registration's fields are read the same way, and the index entries are worked out in small C
arrays.

How the order of the index is kept: each broker's operations (remove entry / add entry) keep
the records' order; only the order in which brokers are first touched depends on Python's set
iteration order (the one-by-one replay walks ``set(isr)``), and it matters only when a broker
is touched for the first time.  So a record whose brokers were all touched before takes the C
path, and a record that touches a new broker replays the twin's two set walks for its brokers'
order (a run touches a handful of brokers: a few records per run).

Per broker, once the run is scanned: its current entries for the topic go into an
open-addressing table (entry -> first position; an entry is ``pid | 1 << 31`` or ``pid``, so it
fits 32 bits), each removal is looked up there (a removal that finds nothing ends the bulk
path: ``finals`` None), each addition is kept in order, and the final tuple is the current
items not removed (the same int objects) followed by the added entries.  A removal never finds
its entry among the run's additions: the records of a run have distinct partition ids, an
entry names its partition, and a record removes a broker's entry before adding the new one.

Topic ids and directory ids are compared without a Python call when both are of
``migrating``'s class and it keeps its 16 bytes in a ``_b`` slot (``kraft_storage``'s Uuid,
whose ``__eq__`` compares exactly those bytes); a standby decodes a new Uuid object for every
record, so ``==`` was two Python calls a record.
"""
from cpython.object cimport Py_EQ, PyObject
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

cdef extern from *:
    """
    #include "structmember.h"
    static PyObject* kc_alloc(PyObject* cls) {
        PyTypeObject* t = (PyTypeObject*)cls;
        return t->tp_alloc(t, 0);
    }
    /* the offset of a writable object slot, or -1 when descr is not one */
    static Py_ssize_t kc_member_offset(PyObject* descr) {
        PyMemberDef* d;
        if (Py_TYPE(descr) != &PyMemberDescr_Type) return -1;
        d = ((PyMemberDescrObject*)descr)->d_member;
        if (d->type != T_OBJECT_EX || (d->flags & READONLY)) return -1;
        return d->offset;
    }
    /* a slot's value (borrowed; NULL when unset) */
    static inline PyObject* kc_get_slot(PyObject* obj, Py_ssize_t off) {
        return *(PyObject**)((char*)obj + off);
    }
    /* store v (a new reference is taken) into a slot of a freshly allocated object */
    static inline void kc_init_slot(PyObject* obj, Py_ssize_t off, PyObject* v) {
        Py_INCREF(v);
        *(PyObject**)((char*)obj + off) = v;
    }
    /* store v, stealing the reference */
    static inline void kc_init_slot_steal(PyObject* obj, Py_ssize_t off, PyObject* v) {
        *(PyObject**)((char*)obj + off) = v;
    }
    static inline int kc_is_exact_int(PyObject* o) { return PyLong_CheckExact(o); }
    static inline PyObject* kc_type(PyObject* o) { return (PyObject*)Py_TYPE(o); }
    /* two 16-byte bytes objects' contents equal: 1, unequal: 0, not both 16 bytes: -1 */
    static inline int kc_bytes16_eq(PyObject* a, PyObject* b) {
        if (a == NULL || b == NULL || !PyBytes_CheckExact(a) || !PyBytes_CheckExact(b)
                || PyBytes_GET_SIZE(a) != 16 || PyBytes_GET_SIZE(b) != 16) return -1;
        return memcmp(PyBytes_AS_STRING(a), PyBytes_AS_STRING(b), 16) == 0;
    }
    static inline int kc_is_exact_tuple(PyObject* o) { return PyTuple_CheckExact(o); }
    static inline int kc_is_exact_list(PyObject* o) { return PyList_CheckExact(o); }
    static inline Py_ssize_t kc_tuple_size(PyObject* o) { return PyTuple_GET_SIZE(o); }
    static inline PyObject* kc_tuple_item(PyObject* o, Py_ssize_t i) { return PyTuple_GET_ITEM(o, i); }
    static inline Py_ssize_t kc_list_size(PyObject* o) { return PyList_GET_SIZE(o); }
    static inline PyObject* kc_list_item(PyObject* o, Py_ssize_t i) { return PyList_GET_ITEM(o, i); }
    static inline void kc_tuple_set_incref(PyObject* t, Py_ssize_t i, PyObject* v) {
        Py_INCREF(v);
        PyTuple_SET_ITEM(t, i, v);
    }
    static inline void kc_decref(PyObject* o) { Py_DECREF(o); }
    /* an exact int's value in [lo, hi] into *out: 1, else 0 (a huge int included, no error) */
    static inline int kc_int_in(PyObject* o, long long lo, long long hi, long long* out) {
        int overflow = 0;
        long long v;
        if (!PyLong_CheckExact(o)) return 0;
        v = PyLong_AsLongLongAndOverflow(o, &overflow);
        if (overflow || v < lo || v > hi) return 0;
        *out = v;
        return 1;
    }
    """
    PyObject* kc_alloc(PyObject* cls) except NULL
    Py_ssize_t kc_member_offset(PyObject* descr)
    PyObject* kc_get_slot(PyObject* obj, Py_ssize_t off)
    void kc_init_slot(PyObject* obj, Py_ssize_t off, PyObject* v)
    void kc_init_slot_steal(PyObject* obj, Py_ssize_t off, PyObject* v)
    int kc_is_exact_int(PyObject* o)
    PyObject* kc_type(PyObject* o)
    int kc_bytes16_eq(PyObject* a, PyObject* b)
    int kc_is_exact_tuple(PyObject* o)
    int kc_is_exact_list(PyObject* o)
    Py_ssize_t kc_tuple_size(PyObject* o)
    PyObject* kc_tuple_item(PyObject* o, Py_ssize_t i)
    Py_ssize_t kc_list_size(PyObject* o)
    PyObject* kc_list_item(PyObject* o, Py_ssize_t i)
    void kc_tuple_set_incref(PyObject* t, Py_ssize_t i, PyObject* v)
    void kc_decref(PyObject* o)
    int kc_int_in(PyObject* o, long long lo, long long hi, long long* out)
    object PyTuple_New(Py_ssize_t n)
    object PyBytes_FromStringAndSize(const char* v, Py_ssize_t n)
    char* PyBytes_AS_STRING(object o)
    Py_ssize_t PyBytes_GET_SIZE(object o)
    object PySequence_Tuple(object o)
    object PyLong_FromLongLong(long long v)
    int PyObject_RichCompareBool(PyObject* a, PyObject* b, int op) except -1
    int PySet_Contains(object s, object key) except -1
    int PySet_Add(object s, object key) except -1
    object PyObject_GetAttr(object o, object name)

__all__ = ["ATTN_ELR", "ATTN_FROM_ELR", "ATTN_LEADER", "ATTN_PREFERRED", "ATTN_UNCLEAN", "ENCODE_MAX_ISR",
           "LEADER_FLAG", "MAX_ISR", "RunScanner", "encode_changes", "encode_records"]

ATTN_LEADER = 1
ATTN_PREFERRED = 2
ATTN_UNCLEAN = 4
ATTN_FROM_ELR = 8
ATTN_ELR = 16
DEF C_ATTN_LEADER = 1
DEF C_ATTN_PREFERRED = 2
DEF C_ATTN_UNCLEAN = 4
DEF C_ATTN_FROM_ELR = 8
DEF C_ATTN_ELR = 16

LEADER_FLAG = 1 << 31
MAX_ISR = 256
ENCODE_MAX_ISR = 4096

DEF C_MAX_ISR = 256
DEF C_ENCODE_MAX_ISR = 4096
DEF C_FLAG = 0x80000000
DEF C_NO_LEADER = -1
DEF C_NO_LEADER_CHANGE = -2
DEF C_INT_MIN = -2147483648
DEF C_INT_MAX = 2147483647
DEF NFIELDS = 11
DEF DIR_CACHE = 8

_FIELDS = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "leader",
           "leader_recovery_state", "leader_epoch", "partition_epoch", "elr", "last_known_elr")
# slot index of each field in the offsets array
DEF F_REPLICAS = 0
DEF F_DIRECTORIES = 1
DEF F_ISR = 2
DEF F_REMOVING = 3
DEF F_ADDING = 4
DEF F_LEADER = 5
DEF F_LRS = 6
DEF F_LEADER_EPOCH = 7
DEF F_PARTITION_EPOCH = 8
DEF F_ELR = 9
DEF F_LAST_KNOWN_ELR = 10

_NULL_FIELDS = ("replicas", "directories", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
                "last_known_elr")
cdef object _A_API_KEY = "API_KEY"
cdef object _A_TOPIC_ID = "topic_id"
cdef object _A_PARTITION_ID = "partition_id"
cdef object _A_ISR = "isr"
cdef object _A_LEADER = "leader"
cdef object _A_LRS = "leader_recovery_state"
cdef object _NO_LEADER_OBJ = -1
cdef object _ONE = 1

# One broker operation of a run: (broker slot, entry, add?).
cdef struct Op:
    int slot
    int add
    uint32_t entry


cdef inline bint _broker_id(PyObject* o, long long* out):
    """An exact int in Java's int range (the twin's ``_broker_id``), its value in ``out``."""
    return kc_int_in(o, C_INT_MIN, C_INT_MAX, out)


cdef Py_ssize_t _read_isr(PyObject* seq, long long* vals, PyObject** objs) except -2:
    """The members of an ISR tuple or list (at most MAX_ISR broker ids) into ``vals``/``objs``
    (borrowed), duplicates dropped (the one-by-one replay indexes ``set(isr)``); -1 when it is
    not one the kernel takes."""
    cdef Py_ssize_t n, i, k, m = 0
    cdef PyObject* o
    cdef long long v
    cdef bint is_tuple = kc_is_exact_tuple(seq)
    if is_tuple:
        n = kc_tuple_size(seq)
    elif kc_is_exact_list(seq):
        n = kc_list_size(seq)
    else:
        return -1
    if n > C_MAX_ISR:
        return -1
    for i in range(n):
        o = kc_tuple_item(seq, i) if is_tuple else kc_list_item(seq, i)
        if not _broker_id(o, &v):
            return -1
        for k in range(m):
            if vals[k] == v:
                break
        else:
            vals[m] = v
            objs[m] = o
            m += 1
    return m


cdef class RunScanner:
    """Scans runs for one registration class (see the twin's module doc)."""

    cdef readonly object registration_cls
    cdef readonly object migrating
    cdef readonly object change_api_key
    cdef Py_ssize_t off[NFIELDS]
    # the Uuid class (``type(migrating)``) and its ``_b`` slot (16 bytes), when it has one
    cdef object uuid_cls
    cdef Py_ssize_t uuid_off

    def __init__(self, registration_cls, migrating, change_api_key):
        slots = registration_cls.__dict__.get("__slots__") if isinstance(registration_cls, type) else None
        if slots is None or sorted(slots) != sorted(_FIELDS):
            raise ValueError(f"RunScanner needs a class whose __slots__ are exactly {_FIELDS}, "
                             f"not {registration_cls!r}")
        if registration_cls.__new__ is not object.__new__:
            raise ValueError(f"{registration_cls.__name__} has its own __new__: RunScanner would skip it")
        cdef Py_ssize_t i, off
        for i, name in enumerate(_FIELDS):
            descr = registration_cls.__dict__[name]
            off = kc_member_offset(<PyObject*>descr)
            if off < 0:
                raise ValueError(f"{registration_cls.__name__}.{name} is not a plain object slot")
            self.off[i] = off
        self.registration_cls = registration_cls
        self.migrating = migrating
        self.change_api_key = change_api_key
        self.uuid_cls = type(migrating)
        self.uuid_off = -1
        descr = self.uuid_cls.__dict__.get("_b")
        if descr is not None:
            self.uuid_off = kc_member_offset(<PyObject*>descr)

    cdef inline int _eq(self, PyObject* a, PyObject* b) except -1:
        """``a == b`` (``PyObject_RichCompareBool``), without a Python call for two Uuids of
        ``migrating``'s class: their 16 bytes (the ``_b`` slot) compared, which is what
        ``kraft_storage.messages.runtime.Uuid.__eq__`` does."""
        cdef int r
        if a == b:
            return 1
        if self.uuid_off >= 0 and kc_type(a) == <PyObject*>self.uuid_cls and kc_type(b) == <PyObject*>self.uuid_cls:
            r = kc_bytes16_eq(kc_get_slot(a, self.uuid_off), kc_get_slot(b, self.uuid_off))
            if r >= 0:
                return r
        return PyObject_RichCompareBool(a, b, Py_EQ)

    cdef object _directories(self, PyObject* dirs, Py_ssize_t n, PyObject** cache, int* ncache):
        """The twin's ``_directories`` (``_directories_or_migrating``) of a tuple: known
        non-MIGRATING first entries are remembered by identity for the call (the registrations
        holding them stay alive through it), and an all-MIGRATING tuple of the right length is
        kept as it is (equal to the new one the twin makes)."""
        cdef Py_ssize_t size = kc_tuple_size(dirs), i
        cdef PyObject* first
        cdef PyObject* mig = <PyObject*>self.migrating
        cdef int r, c
        cdef bint same
        if size:
            first = kc_tuple_item(dirs, 0)
            if first != mig:
                for c in range(ncache[0]):
                    if cache[c] == first:
                        return <object>dirs
                r = self._eq(first, mig)
                if not r:
                    if ncache[0] < DIR_CACHE:
                        cache[ncache[0]] = first
                        ncache[0] += 1
                    return <object>dirs
        same = size == n
        for i in range(size):
            first = kc_tuple_item(dirs, i)
            if first != mig:
                same = False
                if not self._eq(first, mig):
                    return <object>dirs
        if same:
            return <object>dirs
        out = PyTuple_New(n)
        for i in range(n):
            kc_tuple_set_incref(<PyObject*>out, i, mig)
        return out

    def scan(self, records, Py_ssize_t start, topic_id, parts, members, key):
        """The run from ``records[start]`` (see the twin's module doc)."""
        cdef Py_ssize_t n = len(records), j, i, k, np_ = 0, nn = 0, nslots = 0, nops = 0, cap_ops = 0
        cdef Py_ssize_t slot_cap = 0
        cdef long long pid = 0, prev_leader = 0, new_leader = 0, v = 0
        cdef long long pv[C_MAX_ISR + 1]
        cdef long long nv[C_MAX_ISR + 1]
        cdef PyObject* po[C_MAX_ISR + 1]
        cdef PyObject* no[C_MAX_ISR + 1]
        cdef uint32_t pe[C_MAX_ISR + 1]
        cdef uint32_t ne[C_MAX_ISR + 1]
        cdef long long* slot_ids = NULL
        cdef Op* ops = NULL
        cdef PyObject* dcache[DIR_CACHE]
        cdef int ndcache = 0
        cdef PyObject* prev
        cdef PyObject* o
        cdef PyObject* cls = <PyObject*>self.registration_cls
        cdef PyObject* new_obj
        cdef bint fresh, found, in_isr
        cdef int flags
        cdef int side
        cdef object rec_isr, record, pid_obj, leader_obj, prev_obj, new_isr, new_leader_obj, prev_isr_obj
        cdef object api_key = self.change_api_key
        pids = []
        prevs = []
        news = []
        attention = []
        seen = set()
        slot_objs = []
        get = parts.get
        try:
            j = start
            while j < n:
                record = records[j]
                rec_key = PyObject_GetAttr(record, _A_API_KEY)
                if not PyObject_RichCompareBool(<PyObject*>rec_key, <PyObject*>api_key, Py_EQ):
                    break
                rec_topic = PyObject_GetAttr(record, _A_TOPIC_ID)
                if not self._eq(<PyObject*>rec_topic, <PyObject*>topic_id):
                    break
                pid_obj = PyObject_GetAttr(record, _A_PARTITION_ID)
                if not kc_int_in(<PyObject*>pid_obj, 0, C_INT_MAX, &pid) or PySet_Contains(seen, pid_obj):
                    break
                # simple: recovery state -1, the leader a broker id, the list fields null, the ISR ids
                lrs = PyObject_GetAttr(record, _A_LRS)
                if not kc_int_in(<PyObject*>lrs, -1, -1, &v):
                    break
                leader_obj = PyObject_GetAttr(record, _A_LEADER)
                if not _broker_id(<PyObject*>leader_obj, &new_leader):
                    break
                for name in _NULL_FIELDS:
                    if PyObject_GetAttr(record, name) is not None:
                        break
                else:
                    name = None
                if name is not None:
                    break
                rec_isr = PyObject_GetAttr(record, _A_ISR)
                if rec_isr is not None:
                    nn = _read_isr(<PyObject*>rec_isr, nv, no)
                    if nn < 0:
                        break
                prev_obj = get(pid_obj)
                if prev_obj is None or type(prev_obj) is not self.registration_cls:
                    break
                prev = <PyObject*>prev_obj
                for i in range(NFIELDS):
                    if kc_get_slot(prev, self.off[i]) == NULL:
                        break
                else:
                    i = -1
                if i >= 0:
                    break  # a registration with an unset field: the one-by-one replay says so
                prev_isr_obj = <object>kc_get_slot(prev, self.off[F_ISR])
                if (not kc_is_exact_tuple(<PyObject*>prev_isr_obj)
                        or not kc_is_exact_tuple(kc_get_slot(prev, self.off[F_DIRECTORIES]))
                        or not _broker_id(kc_get_slot(prev, self.off[F_LEADER]), &prev_leader)):
                    break
                np_ = _read_isr(<PyObject*>prev_isr_obj, pv, po)
                if np_ < 0:
                    break
                # -- merge: the twin's _merge ----------------------------------------------
                if rec_isr is None:
                    new_isr = prev_isr_obj
                    nn = np_
                    for i in range(np_):
                        nv[i] = pv[i]
                        no[i] = po[i]
                else:
                    new_isr = PySequence_Tuple(rec_isr)
                new_obj = kc_alloc(cls)
                new = <object>new_obj  # owns the reference kc_alloc returned
                kc_decref(new_obj)
                kc_init_slot(new_obj, self.off[F_REPLICAS], kc_get_slot(prev, self.off[F_REPLICAS]))
                dirs = self._directories(kc_get_slot(prev, self.off[F_DIRECTORIES]),
                                         len(<object>kc_get_slot(prev, self.off[F_REPLICAS])), dcache, &ndcache)
                kc_init_slot(new_obj, self.off[F_DIRECTORIES], <PyObject*>dirs)
                kc_init_slot(new_obj, self.off[F_ISR], <PyObject*>new_isr)
                kc_init_slot(new_obj, self.off[F_REMOVING], kc_get_slot(prev, self.off[F_REMOVING]))
                kc_init_slot(new_obj, self.off[F_ADDING], kc_get_slot(prev, self.off[F_ADDING]))
                if new_leader == C_NO_LEADER_CHANGE:
                    new_leader = prev_leader
                    kc_init_slot(new_obj, self.off[F_LEADER], kc_get_slot(prev, self.off[F_LEADER]))
                    kc_init_slot(new_obj, self.off[F_LEADER_EPOCH], kc_get_slot(prev, self.off[F_LEADER_EPOCH]))
                else:
                    kc_init_slot(new_obj, self.off[F_LEADER], <PyObject*>leader_obj)
                    epoch = <object>kc_get_slot(prev, self.off[F_LEADER_EPOCH]) + _ONE
                    kc_init_slot(new_obj, self.off[F_LEADER_EPOCH], <PyObject*>epoch)
                kc_init_slot(new_obj, self.off[F_LRS], kc_get_slot(prev, self.off[F_LRS]))
                epoch = <object>kc_get_slot(prev, self.off[F_PARTITION_EPOCH]) + _ONE
                kc_init_slot(new_obj, self.off[F_PARTITION_EPOCH], <PyObject*>epoch)
                kc_init_slot(new_obj, self.off[F_ELR], kc_get_slot(prev, self.off[F_ELR]))
                kc_init_slot(new_obj, self.off[F_LAST_KNOWN_ELR], kc_get_slot(prev, self.off[F_LAST_KNOWN_ELR]))
                # -- index entries: BrokersToIsrs._entries of both sides -----------------------
                if prev_leader == C_NO_LEADER:
                    for i in range(np_):
                        if pv[i] == C_NO_LEADER:
                            break
                    else:
                        pv[np_] = C_NO_LEADER
                        po[np_] = <PyObject*>_NO_LEADER_OBJ
                        np_ += 1
                if new_leader == C_NO_LEADER:
                    for i in range(nn):
                        if nv[i] == C_NO_LEADER:
                            break
                    else:
                        nv[nn] = C_NO_LEADER
                        no[nn] = <PyObject*>_NO_LEADER_OBJ
                        nn += 1
                for i in range(np_):
                    pe[i] = <uint32_t>pid | (C_FLAG if pv[i] == prev_leader else 0)
                for i in range(nn):
                    ne[i] = <uint32_t>pid | (C_FLAG if nv[i] == new_leader else 0)
                # brokers touched for the first time: their order is Python's set order
                fresh = False
                for i in range(np_):
                    if _changed(pv[i], pe[i], nv, ne, nn) and _slot_of(slot_ids, nslots, pv[i]) < 0:
                        fresh = True
                for i in range(nn):
                    if _changed(nv[i], ne[i], pv, pe, np_) and _slot_of(slot_ids, nslots, nv[i]) < 0:
                        fresh = True
                if fresh:
                    for side in range(2):  # 0: the previous set's walk (removals), 1: the new one's
                        s = set(prev_isr_obj if side == 0 else new_isr)
                        if (prev_leader if side == 0 else new_leader) == C_NO_LEADER:
                            s.add(_NO_LEADER_OBJ)
                        for b in s:
                            kc_int_in(<PyObject*>b, C_INT_MIN, C_INT_MAX, &v)  # a member read above
                            if side == 0:
                                found = _changed(v, _entry_of(v, pv, pe, np_), nv, ne, nn)
                            else:
                                found = _changed(v, _entry_of(v, nv, ne, nn), pv, pe, np_)
                            if found and _slot_of(slot_ids, nslots, v) < 0:
                                if nslots == slot_cap:
                                    slot_cap = 8 if slot_cap == 0 else 2 * slot_cap
                                    slot_ids = <long long*>_grow(slot_ids, slot_cap * sizeof(long long))
                                slot_ids[nslots] = v
                                nslots += 1
                                slot_objs.append(b)
                # the operations: removals, then additions (each broker's in record order)
                if nops + np_ + nn > cap_ops:
                    cap_ops = 2 * (nops + np_ + nn) + 64
                    ops = <Op*>_grow(ops, cap_ops * sizeof(Op))
                for i in range(np_):
                    if _changed(pv[i], pe[i], nv, ne, nn):
                        ops[nops].slot = _slot_of(slot_ids, nslots, pv[i])
                        ops[nops].add = 0
                        ops[nops].entry = pe[i]
                        nops += 1
                for i in range(nn):
                    if _changed(nv[i], ne[i], pv, pe, np_):
                        ops[nops].slot = _slot_of(slot_ids, nslots, nv[i])
                        ops[nops].add = 1
                        ops[nops].entry = ne[i]
                        nops += 1
                # leader changed, an ELR, or an unclean election: the caller looks at it
                flags = 0
                if new_leader != prev_leader:
                    flags |= C_ATTN_LEADER
                if kc_tuple_size(kc_get_slot(prev, self.off[F_ELR])) if kc_is_exact_tuple(
                        kc_get_slot(prev, self.off[F_ELR])) else bool(<object>kc_get_slot(prev, self.off[F_ELR])):
                    flags |= C_ATTN_ELR
                in_isr = False
                for i in range(np_):
                    if pv[i] == new_leader and pv[i] != C_NO_LEADER:
                        in_isr = True
                        break
                if new_leader != C_NO_LEADER and not in_isr:
                    flags |= C_ATTN_UNCLEAN
                if flags:
                    replicas = <object>kc_get_slot(prev, self.off[F_REPLICAS])
                    if (new_leader == C_NO_LEADER) if not replicas else PyObject_RichCompareBool(
                            <PyObject*>new.leader, <PyObject*>replicas[0], Py_EQ):
                        flags |= C_ATTN_PREFERRED
                    if new_leader >= 0 and not in_isr and new.leader in <object>kc_get_slot(prev, self.off[F_ELR]):
                        flags |= C_ATTN_FROM_ELR
                    attention.append((len(pids), flags))
                pids.append(pid_obj)
                prevs.append(prev_obj)
                news.append(new)
                PySet_Add(seen, pid_obj)
                j += 1
            if len(pids) < 2:
                return None
            computed = _run_entries(members, key, ops, nops, slot_objs, nslots)
            if computed is None:
                return j, pids, prevs, news, None, set(), attention
            return j, pids, prevs, news, computed[0], computed[1], attention
        finally:
            free(slot_ids)
            free(ops)


cdef void* _grow(void* p, size_t size) except NULL:
    """``realloc``, MemoryError when it fails (``p`` is then still the caller's to free)."""
    cdef void* q = realloc(p, size)
    if q == NULL:
        raise MemoryError()
    return q


cdef inline Py_ssize_t _slot_of(long long* ids, Py_ssize_t n, long long b):
    cdef Py_ssize_t i
    for i in range(n):
        if ids[i] == b:
            return i
    return -1


cdef inline uint64_t _entry_of(long long b, long long* vals, uint32_t* entries, Py_ssize_t n):
    """broker ``b``'s entry on one side, or 1 << 40 (no entry) -- compared as ``dict.get``."""
    cdef Py_ssize_t i
    for i in range(n):
        if vals[i] == b:
            return entries[i]
    return <uint64_t>1 << 40


cdef inline bint _changed(long long b, uint64_t entry, long long* vals, uint32_t* entries, Py_ssize_t n):
    """Whether ``other.get(b) != entry``: b's entry differs (or is absent) on the other side."""
    return _entry_of(b, vals, entries, n) != entry


cdef object _run_entries(members, key, Op* ops, Py_ssize_t nops, list slot_objs, Py_ssize_t nslots):
    """The twin's ``_run_entries`` over the run's operations, broker by broker in slot order."""
    cdef Py_ssize_t s, k, i, ncur, mask, h, nrem, nadd, last, cap, kept, pos
    cdef Py_ssize_t other_topics
    cdef uint32_t e
    cdef uint32_t* cur = NULL
    cdef Py_ssize_t* table = NULL
    cdef char* removed = NULL
    cdef uint32_t* added = NULL
    cdef Py_ssize_t* count = NULL
    cdef Py_ssize_t* begin = NULL
    cdef Py_ssize_t* order = NULL
    cdef long long v
    out = {}
    moved = set()
    try:
        # group the operations by broker, keeping their order (a counting sort)
        count = <Py_ssize_t*>malloc((nslots + 1) * sizeof(Py_ssize_t))
        begin = <Py_ssize_t*>malloc((nslots + 1) * sizeof(Py_ssize_t))
        order = <Py_ssize_t*>malloc((nops + 1) * sizeof(Py_ssize_t))
        if count == NULL or begin == NULL or order == NULL:
            raise MemoryError()
        memset(count, 0, (nslots + 1) * sizeof(Py_ssize_t))
        for k in range(nops):
            count[ops[k].slot] += 1
        h = 0
        for s in range(nslots):
            begin[s] = h
            h += count[s]
        for k in range(nops):
            s = ops[k].slot
            order[begin[s]] = k
            begin[s] += 1
        h = 0
        for s in range(nslots):
            begin[s] = h
            h += count[s]
        for s in range(nslots):
            broker = slot_objs[s]
            topic_map = members.get(broker)
            current = () if topic_map is None else topic_map.get(key, ())
            if type(current) is not tuple:
                current = tuple(current)
            ncur = len(current)
            other_topics = 0 if topic_map is None else len(topic_map) - (1 if ncur else 0)
            cap = 16
            while cap < 2 * ncur:
                cap *= 2
            mask = cap - 1
            free(cur)
            free(table)
            free(removed)
            free(added)
            cur = <uint32_t*>malloc((ncur + 1) * sizeof(uint32_t))
            table = <Py_ssize_t*>malloc(cap * sizeof(Py_ssize_t))
            removed = <char*>malloc(ncur + 1)
            added = <uint32_t*>malloc((count[s] + 1) * sizeof(uint32_t))
            if cur == NULL or table == NULL or removed == NULL or added == NULL:
                raise MemoryError()
            memset(table, 0xff, cap * sizeof(Py_ssize_t))  # -1: empty
            memset(removed, 0, ncur + 1)
            for i in range(ncur):
                if not kc_int_in(kc_tuple_item(<PyObject*>current, i), 0, 0xffffffff, &v):
                    return None  # not an index entry: the one-by-one replay says what is wrong
                cur[i] = <uint32_t>v
                h = _hash(cur[i]) & mask
                while table[h] >= 0 and cur[table[h]] != cur[i]:
                    h = (h + 1) & mask
                if table[h] < 0:
                    table[h] = i
            nrem = 0
            nadd = 0
            last = count[s] - 1
            for k in range(count[s]):
                e = ops[order[begin[s] + k]].entry
                if ops[order[begin[s] + k]].add:
                    added[nadd] = e
                    nadd += 1
                    continue
                pos = _find(table, cur, mask, e)
                if pos < 0 or removed[pos]:
                    return None
                removed[pos] = 1
                nrem += 1
                if k < last and ncur - nrem + nadd == 0:
                    if not other_topics:
                        return None
                    moved.add(broker)
            kept = 0
            for i in range(ncur):
                if not removed[_find(table, cur, mask, cur[i])]:
                    kept += 1
            final = PyTuple_New(kept + nadd)
            h = 0
            for i in range(ncur):
                if not removed[_find(table, cur, mask, cur[i])]:
                    kc_tuple_set_incref(<PyObject*>final, h, kc_tuple_item(<PyObject*>current, i))
                    h += 1
            for i in range(nadd):
                item = PyLong_FromLongLong(added[i])
                kc_tuple_set_incref(<PyObject*>final, h, <PyObject*>item)
                h += 1
            out[broker] = final
        return out, moved
    finally:
        free(cur)
        free(table)
        free(removed)
        free(added)
        free(count)
        free(begin)
        free(order)


cdef inline uint32_t _hash(uint32_t x):
    return (x * <uint32_t>2654435761u) >> 7 ^ x


cdef inline Py_ssize_t _find(Py_ssize_t* table, uint32_t* cur, Py_ssize_t mask, uint32_t e):
    """The first position of entry ``e`` in the current tuple, or -1."""
    cdef Py_ssize_t h = _hash(e) & mask
    while table[h] >= 0:
        if cur[table[h]] == e:
            return table[h]
        h = (h + 1) & mask
    return -1


# -- encoding ------------------------------------------------------------------------------------

cdef inline Py_ssize_t _uvarint_len(uint64_t v):
    cdef Py_ssize_t n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n


cdef inline char* _put_uvarint(char* p, uint64_t v):
    while v >= 0x80:
        p[0] = <char>((v & 0x7F) | 0x80)
        p += 1
        v >>= 7
    p[0] = <char>v
    return p + 1


cdef inline char* _put_int32(char* p, long long v):
    cdef uint32_t u = <uint32_t>v
    p[0] = <char>(u >> 24)
    p[1] = <char>(u >> 16)
    p[2] = <char>(u >> 8)
    p[3] = <char>u
    return p + 4


cdef object _encode_one(object msg, object change_cls, bytes header, long long* buf, Py_ssize_t cap):
    """One message's framed value, or None (see the twin's ``encode_changes``)."""
    cdef long long pid, leader, v
    cdef Py_ssize_t n = 0, i, size, isr_body = 0, ntags = 0
    cdef bint is_tuple
    cdef char* p
    cdef PyObject* o
    if type(msg) is not change_cls:
        return None
    topic = getattr(msg.topic_id, "bytes", None)
    if type(topic) is not bytes or PyBytes_GET_SIZE(topic) != 16:
        return None
    if not kc_int_in(<PyObject*>msg.partition_id, C_INT_MIN, C_INT_MAX, &pid):
        return None
    if not kc_int_in(<PyObject*>msg.leader, C_INT_MIN, C_INT_MAX, &leader):
        return None
    if not kc_int_in(<PyObject*>msg.leader_recovery_state, -1, -1, &v) or msg.unknown_tagged_fields:
        return None
    for name in _NULL_FIELDS:
        if getattr(msg, name) is not None:
            return None
    isr = msg.isr
    if isr is not None:
        is_tuple = kc_is_exact_tuple(<PyObject*>isr)
        if not is_tuple and not kc_is_exact_list(<PyObject*>isr):
            return None
        n = len(isr)
        if n > cap:
            return None  # the caller's buffer: the generated writer takes it
        for i in range(n):
            o = kc_tuple_item(<PyObject*>isr, i) if is_tuple else kc_list_item(<PyObject*>isr, i)
            if not kc_int_in(o, C_INT_MIN, C_INT_MAX, &buf[i]):
                return None
        isr_body = _uvarint_len(n + 1) + 4 * n
        ntags += 1
    if leader != C_NO_LEADER_CHANGE:
        ntags += 1
    size = PyBytes_GET_SIZE(header) + 4 + 16 + 1
    if isr is not None:
        size += 1 + _uvarint_len(isr_body) + isr_body
    if leader != C_NO_LEADER_CHANGE:
        size += 6
    out = PyBytes_FromStringAndSize(NULL, size)
    p = PyBytes_AS_STRING(out)
    memcpy(p, PyBytes_AS_STRING(header), PyBytes_GET_SIZE(header))
    p += PyBytes_GET_SIZE(header)
    p = _put_int32(p, pid)
    memcpy(p, PyBytes_AS_STRING(topic), 16)
    p += 16
    p = _put_uvarint(p, ntags)
    if isr is not None:
        p = _put_uvarint(p, 0)
        p = _put_uvarint(p, isr_body)
        p = _put_uvarint(p, n + 1)
        for i in range(n):
            p = _put_int32(p, buf[i])
    if leader != C_NO_LEADER_CHANGE:
        p[0] = 1
        p[1] = 4
        p = _put_int32(p + 2, leader)
    return out


def encode_changes(messages, change_cls, bytes header not None):
    """Each ISR/leader-only PartitionChangeRecord's framed value, None for any other message
    (see the twin)."""
    cdef long long buf[C_ENCODE_MAX_ISR]
    return [_encode_one(msg, change_cls, header, buf, C_ENCODE_MAX_ISR) for msg in messages]


cdef Py_ssize_t _slot_offset(cls, str name) except -1:
    """The offset of ``cls``'s plain object slot ``name`` (declared by it or a base)."""
    cdef Py_ssize_t off
    for klass in cls.__mro__:
        descr = klass.__dict__.get(name)
        if descr is not None:
            off = kc_member_offset(<PyObject*>descr)
            if off >= 0:
                return off
            break
    raise ValueError(f"{cls.__name__}.{name} is not a plain object slot")


def encode_records(list records, Py_ssize_t start, record_cls, encoded_cls, change_cls, tuple headers):
    """Replace, in place, each record of ``records[start:]`` of exactly ``record_cls`` whose
    message ``encode_changes`` writes by an ``encoded_cls`` of the same message and version
    and the value (see the twin); the number replaced."""
    cdef long long buf[C_ENCODE_MAX_ISR]
    cdef long long version
    cdef Py_ssize_t k, n = len(records), replaced = 0
    cdef Py_ssize_t off_message, off_version, off_value
    cdef PyObject* new_obj
    cdef PyObject* r
    if encoded_cls.__new__ is not object.__new__ or not issubclass(encoded_cls, record_cls):
        raise ValueError(f"{encoded_cls!r} must be a slotted subclass of {record_cls!r} without its own __new__")
    off_message = _slot_offset(encoded_cls, "message")
    off_version = _slot_offset(encoded_cls, "version")
    off_value = _slot_offset(encoded_cls, "_value")
    for k in range(start, n):
        r = kc_list_item(<PyObject*>records, k)
        if kc_type(r) != <PyObject*>record_cls:
            continue
        rec = <object>r
        version_obj = rec.version
        if not kc_int_in(<PyObject*>version_obj, 0, len(headers) - 1, &version):
            continue
        header = headers[version]
        if header is None:
            continue
        message = rec.message
        value = _encode_one(message, change_cls, header, buf, C_ENCODE_MAX_ISR)
        if value is None:
            continue
        new_obj = kc_alloc(<PyObject*>encoded_cls)
        new = <object>new_obj
        kc_decref(new_obj)
        kc_init_slot(new_obj, off_message, <PyObject*>message)
        kc_init_slot(new_obj, off_version, <PyObject*>version_obj)
        kc_init_slot(new_obj, off_value, <PyObject*>value)
        records[k] = new
        replaced += 1
    return replaced
