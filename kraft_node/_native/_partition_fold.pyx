# cython: language_level=3
"""The partition fold in C (twin: ``kraft_node._pure._partition_fold``; read that for the
contract -- what an entry, an incarnation, a pending check and an error are.  The two export
equal arrays and return equal errors; the tests compare them).

Why native: a 10M-record controller log holds about 5M PartitionChangeRecords, and issue 23
asks for the whole log replayed into the image at 2M records/s or more on one core.  Here
each record is one pass over its columns: a topic lookup and a partition lookup in two
open-addressing hash tables, then the change merged in place into a fixed-size entry whose
lists live in an append-only arena (a list that fits its slot is overwritten in place, a
longer one gets a new slot at the arena's end; :meth:`PartitionFold.export` compacts).  The
loop runs without the GIL; Python objects are made only for errors and for the exported
arrays.

Layout: an entry is a 44-byte C struct (``Entry``: what a change reads and writes, so a
10M-record log's 160k partitions stay in the CPU's last-level cache); list ``i`` of an entry is
an ``LRef`` (``len`` values at ``off`` in the int32 arena, or, for the directories, 16-byte Uuids
in the Uuid arena).  The replicas' and the ISR's refs are in the entry; the five others (rarely
non-empty) in a ``Cold`` record made on the first non-empty one.  A list is at most 65,535
entries long (a partition's replica set is far shorter; longer is an OverflowError).  What a
composition must still check (``Pending``) is in a third array, touched only by the changes
that set replicas or directories.  Incarnations are ``Inc`` structs, their names in a
byte arena.  The topic table maps a topic id to its current incarnation; the entry table maps
(incarnation, partition id) to an entry.  Both tables hold indexes (-1: empty slot) and keep
at most half their slots used.
"""
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset

import numpy as np

__all__ = ["PartitionFold", "LIST_FIELDS", "NO_LEADER_CHANGE", "F_ABSOLUTE", "F_LEADER", "INC_BASE", "INC_CREATED",
           "LIVE", "REMOVED", "SUPERSEDED", "K_PARTITION", "K_CHANGE", "K_REMOVE", "E_UNKNOWN_TOPIC",
           "E_UNKNOWN_PARTITION", "E_REMOVE_UNKNOWN_TOPIC", "E_RECORD_DIRECTORIES", "E_RECOVERY_STATE",
           "E_DIRECTORIES", "E_UNDECODABLE", "EXPORT_FIELDS"]

LIST_FIELDS = ("replicas", "directories", "isr", "removing", "adding", "elr", "last_known_elr")
NO_LEADER_CHANGE = -2
F_ABSOLUTE = 1
F_LEADER = 2
INC_BASE = 0
INC_CREATED = 1
LIVE = 0
REMOVED = 1
SUPERSEDED = 2
K_PARTITION = 1
K_CHANGE = 2
K_REMOVE = 3
E_UNKNOWN_TOPIC = 1
E_UNKNOWN_PARTITION = 2
E_REMOVE_UNKNOWN_TOPIC = 3
E_RECORD_DIRECTORIES = 4
E_RECOVERY_STATE = 5
E_DIRECTORIES = 6
E_UNDECODABLE = 7

EXPORT_FIELDS = {
    "inc_topic_id": "uint8", "inc_kind": "int8", "inc_state": "int8", "inc_first_offset": "int64",
    "inc_first_kind": "int8", "inc_first_partition": "int32", "inc_remove_offset": "int64",
    "inc_name_offsets": "int32", "inc_name_data": "uint8",
    "inc": "int32", "partition_id": "int32", "flags": "uint8", "list_set": "uint8", "leader": "int32",
    "leader_epoch": "int32", "partition_epoch": "int32", "leader_recovery_state": "int8",
    "need_offset": "int64", "a_len": "int32", "a_off": "int64", "a2_off": "int64",
    "b_len": "int32", "b_off": "int64", "b2_off": "int64",
    **{f"{name}_offsets": "int32" for name in LIST_FIELDS},
    **{name: ("uint8" if name == "directories" else "int32") for name in LIST_FIELDS},
}

DEF NLISTS = 7
DEF C_NLEADER = -2
DEF C_ABSOLUTE = 1
DEF C_LEADER = 2
DEF C_BASE = 0
DEF C_CREATED = 1
DEF C_LIVE = 0
DEF C_REMOVED = 1
DEF C_SUPERSEDED = 2
DEF C_KPART = 1
DEF C_KCHANGE = 2
DEF C_KREMOVE = 3
DEF ALL_LISTS = 127
DEF MAX_LIST = 65535

cdef struct Steps:
    int32_t len
    int64_t off      # < 0: no steps
    int64_t off2

# one list of an entry: ``len`` values at ``off`` in its arena, room for ``cap`` there
cdef struct LRef:
    int32_t off
    uint16_t len
    uint16_t cap

# the fields a change reads or writes
cdef struct Entry:
    int32_t inc
    int32_t pid
    int32_t leader
    int32_t le
    int32_t pe
    int8_t lrs
    uint8_t flags
    uint8_t list_set
    uint8_t _pad
    LRef hot[2]           # replicas, isr
    int32_t cold          # index of its Cold record, -1: none (those lists are empty)

# directories, removing, adding, elr, last_known_elr
cdef struct Cold:
    LRef c[5]

# what a composition with the state below must still check (rarely set: a separate array)
cdef struct Pending:
    int64_t need
    Steps a
    Steps b

# a slot of the entry table: the key beside the index, so a probe reads one cache line
cdef struct Slot:
    int32_t inc
    int32_t pid
    int32_t idx

# a slot of the topic table: the topic id (two words) beside its current incarnation and that
# incarnation's kind and state (copies of the Inc's: a change reads only the slot)
cdef struct TSlot:
    uint64_t k0
    uint64_t k1
    int64_t inc
    int32_t kind
    int32_t state

# a record or an exported entry, read in place: the lists point into the caller's arrays
cdef struct View:
    uint8_t flags
    uint8_t list_set
    int32_t leader
    int32_t le
    int32_t pe
    int8_t lrs
    int64_t need
    Steps a
    Steps b
    const int32_t* lp[NLISTS]
    const uint8_t* dp
    int32_t ln[NLISTS]
    uint8_t be            # the int lists are big-endian (read in place from a record body)

cdef struct Inc:
    uint8_t tid[16]
    int8_t kind
    int8_t state
    int8_t first_kind
    int32_t first_pid
    int64_t first
    int64_t remove
    int64_t name_off
    int32_t name_len

# an error found (code 0: none)
cdef struct Err:
    int code
    int64_t offset
    int64_t row
    int64_t inc
    int32_t pid
    int64_t detail
    uint8_t tid[16]


# list field -> its place in a Cold record (replicas and isr are in the entry)
cdef int _COLD[7]
_COLD[0] = -1
_COLD[1] = 0
_COLD[2] = -1
_COLD[3] = 1
_COLD[4] = 2
_COLD[5] = 3
_COLD[6] = 4


cdef inline uint64_t _mix(uint64_t z) noexcept nogil:
    z = (z ^ (z >> 30)) * <uint64_t>0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * <uint64_t>0x94D049BB133111EB
    return z ^ (z >> 31)


cdef inline uint64_t _tid_hash(const uint8_t* t) noexcept nogil:
    cdef uint64_t a, b
    memcpy(&a, t, 8)
    memcpy(&b, t + 8, 8)
    return _mix(a ^ _mix(b))


cdef inline uint64_t _entry_key(int32_t inc, int32_t pid) noexcept nogil:
    return (<uint64_t><uint32_t>inc << 32) | <uint32_t>pid


cdef extern from *:
    """
    #if defined(__GNUC__)
    #define kpf_prefetch(p) __builtin_prefetch((const void*)(p), 1, 3)
    #else
    #define kpf_prefetch(p) ((void)0)
    #endif
    """
    void kpf_prefetch(const void* p) noexcept nogil

#: fetching ahead, for raw changes: the topic slot 2 * LOOKAHEAD changes ahead, the incarnation
#: (kept in a ring) and the entry slot LOOKAHEAD ahead, the entry (kept too) LOOKAHEAD / 2 ahead,
#: its ISR in the arena LOOKAHEAD / 4 ahead; a change then finds its incarnation and entry in the
#: ring when no topic changed in between (``tgen``) -- one lookup per change, not one per stage
DEF LOOKAHEAD = 8
DEF RING = 64


cdef inline void _steps_none(Steps* s) noexcept nogil:
    s.len = -1
    s.off = -1
    s.off2 = -1


cdef inline Steps _concat(Steps x, Steps y) noexcept nogil:
    """Step runs ``x`` then ``y`` as one run."""
    if x.off < 0:
        return y
    if y.off < 0 or x.off2 >= 0:
        return x
    if y.len != x.len:
        x.off2 = y.off
    else:
        x.off2 = y.off2
    return x


cdef inline int64_t _first_failure(Steps s, int32_t length) noexcept nogil:
    if s.off < 0:
        return -1
    return s.off if s.len != length else s.off2


cdef inline bint _all_zero(const uint8_t* p, int64_t nbytes) noexcept nogil:
    cdef int64_t k
    for k in range(nbytes):
        if p[k]:
            return False
    return True


cdef inline uint32_t _be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int64_t _uvarint(const uint8_t* p, int64_t* pos, int64_t end) noexcept nogil:
    """Kafka's unsigned varint (at most 5 bytes, at most 32 bits); -1 when it does not read."""
    cdef int64_t q = pos[0]
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if q >= end:
            return -1
        b = p[q]
        q += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            return -1
    if result > <uint64_t>0xFFFFFFFFU:
        return -1
    pos[0] = q
    return <int64_t>result


cdef inline int _parse_list(const uint8_t* p, int64_t* pos, int64_t end, int unit, View* v, int k) noexcept nogil:
    """A compact nullable array of ``unit``-byte entries into list ``k`` of ``v`` (null: left unset)."""
    cdef int64_t n = _uvarint(p, pos, end)
    if n < 0:
        return -1
    n -= 1
    if n < 0:
        return 0          # null: as absent
    if n > end - pos[0] or unit * n > end - pos[0]:
        return -1
    v.list_set |= <uint8_t>(1 << k)
    v.ln[k] = <int32_t>n
    if k == 1:
        v.dp = p + pos[0] if n else NULL
    else:
        v.lp[k] = <const int32_t*>(p + pos[0]) if n else NULL
    pos[0] += unit * n
    return 0


cdef int _parse_change(const uint8_t* p, int64_t pos, int64_t end, int version, View* v, int32_t* pid,
                       int32_t* leader, int8_t* lrs) noexcept nogil:
    """A PartitionChangeRecord body (versions 0-2) read in place into ``v`` (lists big-endian),
    accepting exactly what the generated columnar decoder accepts (-1 for anything else: the
    caller lets that decoder raise its error)."""
    cdef int64_t nt, t, tag, last = -1, size, tend
    if version < 0 or version > 2 or end - pos < 20:
        return -1
    pid[0] = <int32_t>_be32(p + pos)
    pos += 20
    leader[0] = C_NLEADER
    lrs[0] = -1
    nt = _uvarint(p, &pos, end)
    if nt < 0:
        return -1
    for t in range(nt):
        tag = _uvarint(p, &pos, end)
        if tag < 0 or tag <= last:
            return -1
        last = tag
        size = _uvarint(p, &pos, end)
        if size < 0 or size > end - pos:
            return -1
        tend = pos + size
        if tag == 0:
            if _parse_list(p, &pos, end, 4, v, 2):
                return -1
        elif tag == 1:
            if end - pos < 4:
                return -1
            leader[0] = <int32_t>_be32(p + pos)
            pos += 4
        elif tag == 2:
            if _parse_list(p, &pos, end, 4, v, 0):
                return -1
        elif tag == 3:
            if _parse_list(p, &pos, end, 4, v, 3):
                return -1
        elif tag == 4:
            if _parse_list(p, &pos, end, 4, v, 4):
                return -1
        elif tag == 5:
            if end - pos < 1:
                return -1
            lrs[0] = <int8_t>p[pos]
            pos += 1
        elif tag == 6 and version >= 2:
            if _parse_list(p, &pos, end, 4, v, 5):
                return -1
        elif tag == 7 and version >= 2:
            if _parse_list(p, &pos, end, 4, v, 6):
                return -1
        elif tag == 8 and version >= 1:
            if _parse_list(p, &pos, end, 16, v, 1):
                return -1
        else:
            pos = tend
        if pos != tend:
            return -1
    if pos != end:
        return -1
    return 0


cdef class PartitionFold:
    """The mutable fold state (see the twin's module doc)."""

    cdef Entry* ents
    cdef Cold* cold
    cdef int64_t ncold, cap_cold
    cdef Pending* pend
    cdef int64_t nent, cap_ent, cap_pend
    cdef Slot* etab
    cdef int64_t etab_cap
    cdef Inc* incs
    cdef int64_t ninc, cap_inc
    cdef TSlot* ttab
    cdef int64_t ttab_cap
    cdef int32_t* ia          # int32 arena
    cdef int64_t nia, cap_ia
    cdef uint8_t* ua          # Uuid arena (16 bytes a unit)
    cdef int64_t nua, cap_ua
    cdef uint8_t* na          # name arena
    cdef int64_t nna, cap_na
    cdef int64_t tgen         # bumped when a topic id's current incarnation or its state changes

    def __cinit__(self):
        self.ents = NULL
        self.cold = NULL
        self.ncold = self.cap_cold = 0
        self.pend = NULL
        self.cap_pend = 0
        self.etab = NULL
        self.incs = NULL
        self.ttab = NULL
        self.ia = NULL
        self.ua = NULL
        self.na = NULL
        self.nent = self.cap_ent = self.ninc = self.cap_inc = 0
        self.nia = self.cap_ia = self.nua = self.cap_ua = self.nna = self.cap_na = 0
        self.etab_cap = 0
        self.ttab_cap = 0
        self.tgen = 0
        self._rehash_entries(1024)
        self._rehash_topics(256)

    def __init__(self):
        pass

    def __dealloc__(self):
        free(self.ents)
        free(self.cold)
        free(self.pend)
        free(self.etab)
        free(self.incs)
        free(self.ttab)
        free(self.ia)
        free(self.ua)
        free(self.na)

    @property
    def entries(self):
        """Partitions held (of every incarnation)."""
        return self.nent

    @property
    def incarnations(self):
        return self.ninc

    # -- memory ---------------------------------------------------------------------------
    cdef int _grow(self, void** p, int64_t* cap, int64_t need, int64_t unit) except -1:
        cdef int64_t c = cap[0]
        cdef void* q
        if need <= c:
            return 0
        if c < 64:
            c = 64
        while c < need:
            c *= 2
        q = realloc(p[0], <size_t>(c * unit))
        if q == NULL:
            raise MemoryError()
        p[0] = q
        cap[0] = c
        return 0

    cdef int _rehash_entries(self, int64_t cap) except -1:
        cdef Slot* t = <Slot*>malloc(<size_t>(cap * sizeof(Slot)))
        cdef int64_t i, h, mask = cap - 1
        cdef uint64_t key
        if t == NULL:
            raise MemoryError()
        memset(t, 0xFF, <size_t>(cap * sizeof(Slot)))
        for i in range(self.nent):
            key = _entry_key(self.ents[i].inc, self.ents[i].pid)
            h = <int64_t>(_mix(key) & <uint64_t>mask)
            while t[h].idx >= 0:
                h = (h + 1) & mask
            t[h].inc = self.ents[i].inc
            t[h].pid = self.ents[i].pid
            t[h].idx = <int32_t>i
        free(self.etab)
        self.etab = t
        self.etab_cap = cap
        return 0

    cdef int _rehash_topics(self, int64_t cap) except -1:
        cdef TSlot* t = <TSlot*>malloc(<size_t>(cap * sizeof(TSlot)))
        cdef int64_t i, h, mask = cap - 1
        cdef uint64_t k0, k1
        if t == NULL:
            raise MemoryError()
        memset(t, 0xFF, <size_t>(cap * sizeof(TSlot)))
        # the current incarnation of each topic id: the last one made (scan backwards, first wins)
        for i in range(self.ninc - 1, -1, -1):
            memcpy(&k0, self.incs[i].tid, 8)
            memcpy(&k1, self.incs[i].tid + 8, 8)
            h = <int64_t>(_tid_hash(self.incs[i].tid) & <uint64_t>mask)
            while True:
                if t[h].inc < 0:
                    t[h].k0 = k0
                    t[h].k1 = k1
                    t[h].inc = i
                    t[h].kind = self.incs[i].kind
                    t[h].state = self.incs[i].state
                    break
                if t[h].k0 == k0 and t[h].k1 == k1:
                    break
                h = (h + 1) & mask
        free(self.ttab)
        self.ttab = t
        self.ttab_cap = cap
        return 0

    # -- lookups --------------------------------------------------------------------------
    cdef inline TSlot* _topic_slot(self, const uint8_t* tid) noexcept nogil:
        """The slot of ``tid``'s current incarnation, or NULL."""
        cdef int64_t mask = self.ttab_cap - 1
        cdef int64_t h = <int64_t>(_tid_hash(tid) & <uint64_t>mask)
        cdef uint64_t k0, k1
        memcpy(&k0, tid, 8)
        memcpy(&k1, tid + 8, 8)
        while True:
            if self.ttab[h].inc < 0:
                return NULL
            if self.ttab[h].k0 == k0 and self.ttab[h].k1 == k1:
                return &self.ttab[h]
            h = (h + 1) & mask

    cdef void _set_state(self, int64_t i, int8_t state) noexcept nogil:
        """Incarnation ``i``'s state (and its slot's copy, when it is the current one)."""
        cdef TSlot* slot = self._topic_slot(self.incs[i].tid)
        self.incs[i].state = state
        self.tgen += 1
        if slot != NULL and slot.inc == i:
            slot.state = state

    cdef inline int64_t _find_topic(self, const uint8_t* tid) noexcept nogil:
        cdef int64_t mask = self.ttab_cap - 1
        cdef int64_t h = <int64_t>(_tid_hash(tid) & <uint64_t>mask)
        cdef uint64_t k0, k1
        memcpy(&k0, tid, 8)
        memcpy(&k1, tid + 8, 8)
        while True:
            if self.ttab[h].inc < 0:
                return -1
            if self.ttab[h].k0 == k0 and self.ttab[h].k1 == k1:
                return self.ttab[h].inc
            h = (h + 1) & mask

    cdef inline int64_t _find_entry(self, int32_t inc, int32_t pid) noexcept nogil:
        cdef int64_t mask = self.etab_cap - 1
        cdef uint64_t key = _entry_key(inc, pid)
        cdef int64_t h = <int64_t>(_mix(key) & <uint64_t>mask)
        while True:
            if self.etab[h].idx < 0:
                return -1
            if self.etab[h].pid == pid and self.etab[h].inc == inc:
                return self.etab[h].idx
            h = (h + 1) & mask

    cdef inline void _prefetch_topic(self, const uint8_t* tid) noexcept nogil:
        kpf_prefetch(&self.ttab[_tid_hash(tid) & <uint64_t>(self.ttab_cap - 1)])

    cdef inline void _prefetch_entry(self, const uint8_t* tid, int32_t pid, int stage) noexcept nogil:
        """Fetch ahead what a change of (tid's current incarnation, pid) will read: stage 0 its
        entry slot, 1 its entry (the slot is in cache by then), 2 its ISR in the arena (the
        entry is).  A TopicRecord in between makes a prefetch useless, never wrong."""
        cdef int64_t inc = self._find_topic(tid), ei
        cdef uint64_t key
        cdef Entry* e
        if inc < 0:
            return
        key = _entry_key(<int32_t>inc, pid)
        if stage == 0:
            kpf_prefetch(&self.etab[_mix(key) & <uint64_t>(self.etab_cap - 1)])
            return
        ei = self._find_entry(<int32_t>inc, pid)
        if ei < 0:
            return
        e = &self.ents[ei]
        if stage == 1:
            kpf_prefetch(e)
            kpf_prefetch(<char*>e + 64)
        else:
            kpf_prefetch(&self.ia[e.hot[1].off])

    cdef int64_t _new_inc(self, const uint8_t* tid, int8_t kind, int8_t state, int64_t first, int8_t first_kind,
                          int32_t first_pid, int64_t remove, const uint8_t* name, int64_t name_len) except -1:
        cdef int64_t i = self.ninc, mask, h
        cdef uint64_t k0, k1
        cdef Inc* inc
        if i >= 2147483647:
            raise OverflowError("PartitionFold: too many topic incarnations")
        self._grow(<void**>&self.incs, &self.cap_inc, i + 1, sizeof(Inc))
        self._grow(<void**>&self.na, &self.cap_na, self.nna + name_len, 1)
        inc = &self.incs[i]
        memcpy(inc.tid, tid, 16)
        inc.kind = kind
        inc.state = state
        inc.first = first
        inc.first_kind = first_kind
        inc.first_pid = first_pid
        inc.remove = remove
        inc.name_off = self.nna
        inc.name_len = <int32_t>name_len
        self.tgen += 1
        if name_len:
            memcpy(self.na + self.nna, name, <size_t>name_len)
        self.nna += name_len
        self.ninc = i + 1
        if 2 * self.ninc > self.ttab_cap:
            self._rehash_topics(2 * self.ttab_cap)   # rebuilds from the incarnations, this one included
            return i
        mask = self.ttab_cap - 1
        h = <int64_t>(_tid_hash(tid) & <uint64_t>mask)
        memcpy(&k0, tid, 8)
        memcpy(&k1, tid + 8, 8)
        while True:
            if self.ttab[h].inc < 0 or (self.ttab[h].k0 == k0 and self.ttab[h].k1 == k1):
                self.ttab[h].k0 = k0
                self.ttab[h].k1 = k1
                self.ttab[h].inc = i
                self.ttab[h].kind = kind
                self.ttab[h].state = state
                return i
            h = (h + 1) & mask

    cdef int64_t _new_entry(self, int32_t inc, int32_t pid, int64_t need) except -1:
        cdef int64_t i = self.nent, mask, h
        cdef uint64_t key
        cdef Entry* e
        cdef Pending* p
        cdef int k
        if i >= 2147483647:
            raise OverflowError("PartitionFold: too many partitions")
        self._grow(<void**>&self.ents, &self.cap_ent, i + 1, sizeof(Entry))
        self._grow(<void**>&self.pend, &self.cap_pend, i + 1, sizeof(Pending))
        e = &self.ents[i]
        e.inc = inc
        e.pid = pid
        e.leader = C_NLEADER
        e.le = 0
        e.pe = 0
        e.lrs = -1
        e.flags = 0
        e.list_set = 0
        p = &self.pend[i]
        p.need = need
        _steps_none(&p.a)
        _steps_none(&p.b)
        memset(e.hot, 0, sizeof(e.hot))
        e.cold = -1
        self.nent = i + 1
        if 10 * self.nent > 7 * self.etab_cap:   # at most 70% of the slots used
            self._rehash_entries(2 * self.etab_cap)
            return i
        mask = self.etab_cap - 1
        key = _entry_key(inc, pid)
        h = <int64_t>(_mix(key) & <uint64_t>mask)
        while self.etab[h].idx >= 0:
            h = (h + 1) & mask
        self.etab[h].inc = inc
        self.etab[h].pid = pid
        self.etab[h].idx = <int32_t>i
        return i

    cdef int64_t _base_inc(self, const uint8_t* tid, int64_t offset, int8_t kind, int32_t pid) except -2:
        """The current incarnation of ``tid`` (made BASE, required at ``offset``, when there is
        none); -1 when the current one is not live."""
        cdef TSlot* slot = self._topic_slot(tid)
        if slot == NULL:
            return self._new_inc(tid, C_BASE, C_LIVE, offset, kind, pid, -1, NULL, 0)
        return slot.inc if slot.state == C_LIVE else -1

    # -- lists ----------------------------------------------------------------------------
    cdef int _set_list(self, int64_t ei, int k, const int32_t* src, const uint8_t* dsrc, int32_t n,
                       uint8_t be) except -1:
        """List ``k`` of entry ``ei`` := the ``n`` values at ``src`` (``dsrc`` for directories;
        ``be``: ``src`` holds big-endian values)."""
        cdef Entry* e = &self.ents[ei]
        cdef int64_t at, q
        cdef int32_t* w
        cdef LRef* r
        if k == 0 or k == 2:
            r = &e.hot[k >> 1]
        elif e.cold >= 0:
            r = &self.cold[e.cold].c[_COLD[k]]
        elif n == 0:
            return 0          # an empty list where every cold list is empty already
        else:
            if self.ncold >= 2147483647:
                raise OverflowError("PartitionFold: too many partitions with cold lists")
            self._grow(<void**>&self.cold, &self.cap_cold, self.ncold + 1, sizeof(Cold))
            memset(&self.cold[self.ncold], 0, sizeof(Cold))
            e.cold = <int32_t>self.ncold
            self.ncold += 1
            r = &self.cold[e.cold].c[_COLD[k]]
        if n > MAX_LIST:
            raise OverflowError(f"PartitionFold: a {LIST_FIELDS[k]} list of {n} entries (at most {MAX_LIST})")
        if n > r.cap:
            if (self.nua if k == 1 else self.nia) + n > 2147483647:
                raise OverflowError("PartitionFold: the list arena is full (2**31 values)")
            if k == 1:
                self._grow(<void**>&self.ua, &self.cap_ua, self.nua + n, 16)
                at = self.nua
                self.nua += n
            else:
                self._grow(<void**>&self.ia, &self.cap_ia, self.nia + n, 4)
                at = self.nia
                self.nia += n
            r.off = <int32_t>at
            r.cap = <uint16_t>n
        if n:
            if k == 1:
                memcpy(self.ua + 16 * <int64_t>r.off, dsrc, <size_t>(16 * n))
            elif be:
                w = self.ia + r.off
                for q in range(n):
                    w[q] = <int32_t>_be32(<const uint8_t*>src + 4 * q)
            else:
                memcpy(self.ia + r.off, src, <size_t>(4 * n))
        r.len = <uint16_t>n
        return 0

    cdef inline LRef _lref(self, int64_t ei, int k) noexcept nogil:
        """List ``k`` of entry ``ei`` (a copy: empty when it has no cold record)."""
        cdef Entry* e = &self.ents[ei]
        cdef LRef r
        if k == 0 or k == 2:
            return e.hot[k >> 1]
        if e.cold >= 0:
            return self.cold[e.cold].c[_COLD[k]]
        r.off = 0
        r.len = 0
        r.cap = 0
        return r

    # -- composing ------------------------------------------------------------------------
    cdef inline int64_t _check(self, int64_t ei, View* b, Steps* run_a, Steps* run_b) noexcept nogil:
        """Decide ``b``'s pending pairing checks against entry ``ei`` (the twin's ``_compose_check``)."""
        cdef Entry* a = &self.ents[ei]
        cdef int64_t fail = -1, f
        if b.a.off < 0 and b.b.off < 0:  # the common case: nothing to decide, the pending runs stay as they are
            _steps_none(run_a)
            _steps_none(run_b)
            return -1
        run_a[0] = self.pend[ei].a
        run_b[0] = self.pend[ei].b
        if b.a.off >= 0:
            if a.list_set & 2:
                if self._lref(ei, 1).len:
                    fail = _first_failure(b.a, self._lref(ei, 1).len)
            else:
                run_a[0] = _concat(run_a[0], b.a)
        if b.b.off >= 0:
            if a.list_set & 1:
                f = _first_failure(b.b, a.hot[0].len)
                if f >= 0 and (fail < 0 or f < fail):
                    fail = f
            else:
                run_b[0] = _concat(run_b[0], b.b)
        return fail

    cdef int _compose(self, int64_t ei, View* b, Steps run_a, Steps run_b) except -1:
        """Entry ``ei`` becomes itself then ``b`` (checks decided; runs without steps leave the
        entry's pending runs as they are)."""
        cdef Entry* a = &self.ents[ei]
        cdef int k
        if run_a.off >= 0 or run_b.off >= 0:
            self.pend[ei].a = run_a
            self.pend[ei].b = run_b
        if b.flags & C_ABSOLUTE:
            a.flags = b.flags
            a.leader = b.leader
            a.le = b.le
            a.pe = b.pe
            a.lrs = b.lrs
            a.list_set = b.list_set
            for k in range(NLISTS):
                self._set_list(ei, k, b.lp[k], b.dp, b.ln[k], b.be)
            return 0
        if b.flags & C_LEADER:
            a.leader = b.leader
            a.flags |= C_LEADER
        a.le += b.le
        a.pe += b.pe
        if b.lrs != -1:
            a.lrs = b.lrs
        a.list_set |= b.list_set
        if b.list_set:
            for k in range(NLISTS):
                if b.list_set & (1 << k):
                    self._set_list(ei, k, b.lp[k], b.dp, b.ln[k], b.be)
        return 0

    cdef int64_t _insert(self, int32_t inc, int32_t pid, View* b) except -1:
        """A new entry equal to ``b``."""
        cdef int64_t ei = self._new_entry(inc, pid, b.need)
        cdef Entry* e = &self.ents[ei]
        cdef int k
        e.flags = b.flags
        e.leader = b.leader
        e.le = b.le
        e.pe = b.pe
        e.lrs = b.lrs
        e.list_set = b.list_set
        self.pend[ei].a = b.a
        self.pend[ei].b = b.b
        for k in range(NLISTS):
            if b.ln[k]:
                self._set_list(ei, k, b.lp[k], b.dp, b.ln[k], b.be)
        return ei

    # -- folding records ------------------------------------------------------------------
    def fold(self, offsets, topics, removes, partitions, changes, raw_changes=None):
        """Fold four record tables merged in row order (see the twin); None or the first error."""
        cdef const int64_t[::1] offs = np.ascontiguousarray(offsets, dtype=np.int64)
        cdef int64_t n = offs.shape[0]
        # topics
        cdef const int64_t[::1] t_rows
        cdef const uint8_t[::1] t_ids
        cdef const int32_t[::1] t_noff
        cdef const uint8_t[::1] t_data
        cdef int64_t nt = 0
        # removes
        cdef const int64_t[::1] r_rows
        cdef const uint8_t[::1] r_ids
        cdef int64_t nr = 0
        # partitions
        cdef const int64_t[::1] p_rows
        cdef const int32_t[::1] p_pid, p_leader, p_le, p_pe
        cdef const int8_t[::1] p_lrs
        cdef const uint8_t[::1] p_ids
        cdef int64_t np_ = 0
        # changes
        cdef const int64_t[::1] c_rows
        # raw changes: bodies read in place
        cdef const uint8_t[::1] rc_data
        cdef const int64_t[::1] rc_pos, rc_end
        cdef const int16_t[::1] rc_ver
        cdef const uint8_t* rcp = NULL
        cdef bint raw = False
        cdef int32_t r_leader
        cdef int8_t r_lrs
        cdef int64_t ring_ci[RING]
        cdef int64_t ring_gen[RING]
        cdef int64_t ring_inc[RING]
        cdef int64_t ring_ei[RING]
        cdef int64_t j, q
        cdef TSlot* slot
        for q in range(RING):
            ring_ci[q] = -1
        cdef const int32_t[::1] c_pid, c_leader
        cdef const int8_t[::1] c_lrs
        cdef const uint8_t[::1] c_ids
        cdef int64_t nc = 0
        cdef const int32_t* p_loffs[NLISTS]
        cdef const int32_t* p_lvals[NLISTS]
        cdef const int32_t* c_loffs[NLISTS]
        cdef const int32_t* c_lvals[NLISTS]
        cdef const uint8_t* c_valid[NLISTS]
        cdef const uint8_t* p_dvals = NULL
        cdef const uint8_t* c_dvals = NULL
        cdef int64_t p_lvn[NLISTS]
        cdef int64_t c_lvn[NLISTS]
        keep = []   # the arrays the pointers point into
        cdef int k
        cdef const int32_t[::1] tmp32
        cdef const uint8_t[::1] tmp8
        if topics is not None and len(topics[0]):
            t_rows = np.ascontiguousarray(topics[0], dtype=np.int64)
            nt = t_rows.shape[0]
            t_ids = _uuids(topics[1], nt, "topics")
            t_noff = np.ascontiguousarray(topics[2], dtype=np.int32)
            t_data = np.ascontiguousarray(topics[3], dtype=np.uint8).reshape(-1)
            if t_noff.shape[0] != nt + 1:
                raise ValueError("topics: name offsets must have one more entry than rows")
            _check_offsets(t_noff, t_data.shape[0], "topics names")
        if removes is not None and len(removes[0]):
            r_rows = np.ascontiguousarray(removes[0], dtype=np.int64)
            nr = r_rows.shape[0]
            r_ids = _uuids(removes[1], nr, "removes")
        if partitions is not None and len(partitions[0]):
            p_rows = np.ascontiguousarray(partitions[0], dtype=np.int64)
            np_ = p_rows.shape[0]
            p_pid = _col32(partitions[1], np_, "partitions.partition_id")
            p_ids = _uuids(partitions[2], np_, "partitions")
            p_leader = _col32(partitions[3], np_, "partitions.leader")
            p_le = _col32(partitions[4], np_, "partitions.leader_epoch")
            p_pe = _col32(partitions[5], np_, "partitions.partition_epoch")
            p_lrs = _col8(partitions[6], np_, "partitions.leader_recovery_state")
            for k in range(NLISTS):
                offs_arr = np.ascontiguousarray(partitions[7 + 2 * k], dtype=np.int32)
                keep.append(offs_arr)
                tmp32 = offs_arr
                if tmp32.shape[0] != np_ + 1:
                    raise ValueError(f"partitions.{LIST_FIELDS[k]}: offsets must have one more entry than rows")
                p_loffs[k] = &tmp32[0]
                if k == 1:
                    tmp8 = _uuid_values(partitions[8 + 2 * k])
                    keep.append(tmp8)
                    p_dvals = &tmp8[0] if tmp8.shape[0] else NULL
                    p_lvn[k] = tmp8.shape[0] // 16
                    p_lvals[k] = NULL
                else:
                    tmp32 = np.ascontiguousarray(partitions[8 + 2 * k], dtype=np.int32)
                    keep.append(tmp32)
                    p_lvals[k] = &tmp32[0] if tmp32.shape[0] else NULL
                    p_lvn[k] = tmp32.shape[0]
                _check_offsets(offs_arr, p_lvn[k], f"partitions.{LIST_FIELDS[k]}")
        if raw_changes is not None:
            if changes is not None:
                raise ValueError("fold: changes and raw_changes are exclusive")
            if len(raw_changes[1]):
                raw = True
                rc_data = _bytes_view(raw_changes[0])
                c_rows = np.ascontiguousarray(raw_changes[1], dtype=np.int64)
                nc = c_rows.shape[0]
                rc_pos = np.ascontiguousarray(raw_changes[2], dtype=np.int64)
                rc_end = np.ascontiguousarray(raw_changes[3], dtype=np.int64)
                rc_ver = np.ascontiguousarray(raw_changes[4], dtype=np.int16)
                if rc_pos.shape[0] != nc or rc_end.shape[0] != nc or rc_ver.shape[0] != nc:
                    raise ValueError("raw_changes: rows, body positions, ends and versions differ in length")
                if nc and (np.min(raw_changes[2]) < 0 or np.max(raw_changes[3]) > rc_data.shape[0]
                           or np.any(np.asarray(raw_changes[3]) < np.asarray(raw_changes[2]))):
                    raise ValueError(f"raw_changes: a body lies outside the {rc_data.shape[0]}-byte buffer")
                rcp = &rc_data[0] if rc_data.shape[0] else NULL
        if changes is not None and len(changes[0]):
            c_rows = np.ascontiguousarray(changes[0], dtype=np.int64)
            nc = c_rows.shape[0]
            c_pid = _col32(changes[1], nc, "changes.partition_id")
            c_ids = _uuids(changes[2], nc, "changes")
            c_leader = _col32(changes[3], nc, "changes.leader")
            c_lrs = _col8(changes[4], nc, "changes.leader_recovery_state")
            for k in range(NLISTS):
                offs_arr = np.ascontiguousarray(changes[5 + 3 * k], dtype=np.int32)
                keep.append(offs_arr)
                tmp32 = offs_arr
                if tmp32.shape[0] != nc + 1:
                    raise ValueError(f"changes.{LIST_FIELDS[k]}: offsets must have one more entry than rows")
                c_loffs[k] = &tmp32[0]
                if k == 1:
                    tmp8 = _uuid_values(changes[6 + 3 * k])
                    keep.append(tmp8)
                    c_dvals = &tmp8[0] if tmp8.shape[0] else NULL
                    c_lvn[k] = tmp8.shape[0] // 16
                    c_lvals[k] = NULL
                else:
                    tmp32 = np.ascontiguousarray(changes[6 + 3 * k], dtype=np.int32)
                    keep.append(tmp32)
                    c_lvals[k] = &tmp32[0] if tmp32.shape[0] else NULL
                    c_lvn[k] = tmp32.shape[0]
                _check_offsets(offs_arr, c_lvn[k], f"changes.{LIST_FIELDS[k]}")
                valid = changes[7 + 3 * k]
                if valid is None:
                    c_valid[k] = NULL
                else:
                    tmp8 = np.ascontiguousarray(valid, dtype=np.bool_).view(np.uint8)
                    keep.append(tmp8)
                    if tmp8.shape[0] != nc:
                        raise ValueError(f"changes.{LIST_FIELDS[k]}: the valid mask must have one entry per row")
                    c_valid[k] = &tmp8[0] if nc else NULL
        # every row must index offsets
        for rows_, cnt in ((t_rows if nt else None, nt), (r_rows if nr else None, nr),
                           (p_rows if np_ else None, np_), (c_rows if nc else None, nc)):
            if cnt and (np.min(rows_) < 0 or np.max(rows_) >= n):
                raise ValueError(f"a table row lies outside the {n} offsets")
        cdef int64_t ti = 0, ri = 0, pi = 0, ci = 0
        cdef int64_t rt, rr, rp, rc, row, offset, inc, ei
        cdef int kind
        cdef Err err
        cdef View v
        cdef Steps run_a, run_b
        cdef int64_t fail, lo, hi, nrep
        cdef int32_t pid, lrs
        cdef const uint8_t* tid
        cdef int64_t BIG = 0x7FFFFFFFFFFFFFFF
        err.code = 0
        while True:
            rt = t_rows[ti] if ti < nt else BIG
            rr = r_rows[ri] if ri < nr else BIG
            rp = p_rows[pi] if pi < np_ else BIG
            rc = c_rows[ci] if ci < nc else BIG
            # the smallest row goes next (changes first: they are the common case)
            kind = 3
            row = rc
            if rp < row:
                kind = 2
                row = rp
            if rr < row:
                kind = 1
                row = rr
            if rt < row:
                kind = 0
                row = rt
            if row == BIG:
                break
            offset = offs[row]
            if kind == 3 and raw:
                j = ci + 2 * LOOKAHEAD
                if j < nc and rc_end[j] - rc_pos[j] >= 20:
                    self._prefetch_topic(rcp + rc_pos[j] + 4)
                j = ci + LOOKAHEAD
                if j < nc and rc_end[j] - rc_pos[j] >= 20:
                    q = j & (RING - 1)
                    ring_ci[q] = j
                    ring_gen[q] = self.tgen
                    ring_ei[q] = -1
                    slot = self._topic_slot(rcp + rc_pos[j] + 4)
                    if slot == NULL or slot.state != C_LIVE:
                        ring_inc[q] = -1
                    else:
                        ring_inc[q] = slot.inc
                        kpf_prefetch(&self.etab[_mix(_entry_key(<int32_t>slot.inc, <int32_t>_be32(rcp + rc_pos[j])))
                                                & <uint64_t>(self.etab_cap - 1)])
                j = ci + LOOKAHEAD // 2
                q = j & (RING - 1)
                if j < nc and ring_ci[q] == j and ring_inc[q] >= 0:
                    ring_ei[q] = self._find_entry(<int32_t>ring_inc[q], <int32_t>_be32(rcp + rc_pos[j]))
                    if ring_ei[q] >= 0:
                        kpf_prefetch(&self.ents[ring_ei[q]])
                        kpf_prefetch(<char*>&self.ents[ring_ei[q]] + 63)
                j = ci + LOOKAHEAD // 4
                q = j & (RING - 1)
                if j < nc and ring_ci[q] == j and ring_ei[q] >= 0:
                    kpf_prefetch(&self.ia[self.ents[ring_ei[q]].hot[1].off])
                v.flags = 0
                v.list_set = 0
                v.need = -1
                v.be = 1
                _steps_none(&v.a)
                _steps_none(&v.b)
                v.dp = NULL
                for k in range(NLISTS):
                    v.ln[k] = 0
                    v.lp[k] = NULL
                if _parse_change(rcp, rc_pos[ci], rc_end[ci], rc_ver[ci], &v, &pid, &r_leader, &r_lrs):
                    _set_err(&err, 7, offset, row, -1, 0, _ZERO16)
                    break
                tid = rcp + rc_pos[ci] + 4
                q = ci & (RING - 1)
                ei = -1
                if ring_ci[q] == ci and ring_gen[q] == self.tgen and ring_inc[q] >= 0:
                    inc = ring_inc[q]       # looked up ahead, and no topic changed since
                    ei = ring_ei[q]
                    if ei >= 0 and (self.ents[ei].inc != inc or self.ents[ei].pid != pid):
                        ei = -1
                else:
                    inc = self._base_inc(tid, offset, C_KCHANGE, pid)
                    if inc < 0:
                        _set_err(&err, 1, offset, row, pid, C_KCHANGE, tid)
                        break
                if ei < 0:
                    ei = self._find_entry(<int32_t>inc, pid)
                if ei < 0:
                    if self.incs[inc].kind == C_CREATED:
                        _set_err(&err, 2, offset, row, pid, 0, tid)
                        break
                    ei = self._new_entry(<int32_t>inc, pid, offset)
                if (v.list_set & 3) == 3 and v.ln[1] and v.ln[1] != v.ln[0]:
                    _set_err(&err, 4, offset, row, pid, v.ln[0], tid)
                    break
                if r_lrs < -1 or r_lrs > 1:
                    _set_err(&err, 5, offset, row, pid, r_lrs, tid)
                    break
                if r_leader != C_NLEADER:
                    v.flags = C_LEADER
                    v.leader = r_leader
                    v.le = 1
                else:
                    v.leader = C_NLEADER
                    v.le = 0
                v.pe = 1
                v.lrs = r_lrs
                if (v.list_set & 2) and v.ln[1] and _all_zero(v.dp, 16 * <int64_t>v.ln[1]):
                    v.ln[1] = 0
                if (v.list_set & 3) == 1:
                    v.a.len = v.ln[0]
                    v.a.off = offset
                elif (v.list_set & 3) == 2 and v.ln[1]:
                    v.b.len = v.ln[1]
                    v.b.off = offset
                fail = self._check(ei, &v, &run_a, &run_b)
                if fail >= 0:
                    _set_err(&err, 6, fail, row, pid, 0, tid)
                    break
                self._compose(ei, &v, run_a, run_b)
                ci += 1
            elif kind == 3:
                if ci + 4 * LOOKAHEAD < nc:
                    self._prefetch_topic(&c_ids[16 * (ci + 4 * LOOKAHEAD)])
                if ci + 3 * LOOKAHEAD < nc:
                    self._prefetch_entry(&c_ids[16 * (ci + 3 * LOOKAHEAD)], c_pid[ci + 3 * LOOKAHEAD], 0)
                if ci + 2 * LOOKAHEAD < nc:
                    self._prefetch_entry(&c_ids[16 * (ci + 2 * LOOKAHEAD)], c_pid[ci + 2 * LOOKAHEAD], 1)
                if ci + LOOKAHEAD < nc:
                    self._prefetch_entry(&c_ids[16 * (ci + LOOKAHEAD)], c_pid[ci + LOOKAHEAD], 2)
                tid = &c_ids[16 * ci]
                pid = c_pid[ci]
                inc = self._base_inc(tid, offset, C_KCHANGE, pid)
                if inc < 0:
                    _set_err(&err, 1, offset, row, pid, C_KCHANGE, tid)
                    break
                ei = self._find_entry(<int32_t>inc, pid)
                if ei < 0:
                    if self.incs[inc].kind == C_CREATED:
                        _set_err(&err, 2, offset, row, pid, 0, tid)
                        break
                    ei = self._new_entry(<int32_t>inc, pid, offset)
                v.flags = 0
                v.list_set = 0
                v.need = -1
                v.be = 0
                _steps_none(&v.a)
                _steps_none(&v.b)
                v.dp = NULL
                for k in range(NLISTS):
                    v.ln[k] = 0
                    v.lp[k] = NULL
                    if c_valid[k] == NULL or c_valid[k][ci]:
                        lo = c_loffs[k][ci]
                        hi = c_loffs[k][ci + 1]
                        v.list_set |= <uint8_t>(1 << k)
                        v.ln[k] = <int32_t>(hi - lo)
                        if k == 1:
                            v.dp = c_dvals + 16 * lo if hi > lo else NULL
                        else:
                            v.lp[k] = c_lvals[k] + lo if hi > lo else NULL
                if (v.list_set & 3) == 3 and v.ln[1] and v.ln[1] != v.ln[0]:
                    _set_err(&err, 4, offset, row, pid, v.ln[0], tid)
                    break
                lrs = c_lrs[ci]
                if lrs < -1 or lrs > 1:
                    _set_err(&err, 5, offset, row, pid, lrs, tid)
                    break
                if c_leader[ci] != C_NLEADER:
                    v.flags = C_LEADER
                    v.leader = c_leader[ci]
                    v.le = 1
                else:
                    v.leader = C_NLEADER
                    v.le = 0
                v.pe = 1
                v.lrs = <int8_t>lrs
                if (v.list_set & 2) and v.ln[1] and _all_zero(v.dp, 16 * <int64_t>v.ln[1]):
                    v.ln[1] = 0
                if (v.list_set & 3) == 1:
                    v.a.len = v.ln[0]
                    v.a.off = offset
                elif (v.list_set & 3) == 2 and v.ln[1]:
                    v.b.len = v.ln[1]
                    v.b.off = offset
                fail = self._check(ei, &v, &run_a, &run_b)
                if fail >= 0:
                    _set_err(&err, 6, fail, row, pid, 0, tid)
                    break
                self._compose(ei, &v, run_a, run_b)
                ci += 1
            elif kind == 2:
                tid = &p_ids[16 * pi]
                pid = p_pid[pi]
                inc = self._base_inc(tid, offset, C_KPART, pid)
                if inc < 0:
                    _set_err(&err, 1, offset, row, pid, C_KPART, tid)
                    break
                v.dp = NULL
                for k in range(NLISTS):
                    lo = p_loffs[k][pi]
                    hi = p_loffs[k][pi + 1]
                    v.ln[k] = <int32_t>(hi - lo)
                    v.lp[k] = NULL
                    if k == 1:
                        v.dp = p_dvals + 16 * lo if hi > lo else NULL
                    elif hi > lo:
                        v.lp[k] = p_lvals[k] + lo
                if v.ln[1] and v.ln[1] != v.ln[0]:
                    _set_err(&err, 4, offset, row, pid, v.ln[0], tid)
                    break
                lrs = p_lrs[pi]
                if lrs < 0 or lrs > 1:
                    _set_err(&err, 5, offset, row, pid, lrs, tid)
                    break
                if v.ln[1] and _all_zero(v.dp, 16 * <int64_t>v.ln[1]):
                    v.ln[1] = 0
                v.flags = C_ABSOLUTE | C_LEADER
                v.be = 0
                v.list_set = ALL_LISTS
                v.leader = p_leader[pi]
                v.le = p_le[pi]
                v.pe = p_pe[pi]
                v.lrs = <int8_t>lrs
                v.need = -1
                _steps_none(&v.a)
                _steps_none(&v.b)
                ei = self._find_entry(<int32_t>inc, pid)
                if ei < 0:
                    self._insert(<int32_t>inc, pid, &v)
                else:
                    self._compose(ei, &v, self.pend[ei].a, self.pend[ei].b)
                pi += 1
            elif kind == 1:
                tid = &r_ids[16 * ri]
                inc = self._find_topic(tid)
                if inc < 0:
                    self._new_inc(tid, C_BASE, C_REMOVED, offset, C_KREMOVE, -1, offset, NULL, 0)
                elif self.incs[inc].state != C_LIVE:
                    _set_err(&err, 3, offset, row, -1, C_KREMOVE, tid)
                    break
                else:
                    self._set_state(inc, C_REMOVED)
                    self.incs[inc].remove = offset
                ri += 1
            else:
                tid = &t_ids[16 * ti]
                inc = self._find_topic(tid)
                if inc >= 0 and self.incs[inc].state == C_LIVE:
                    self._set_state(inc, C_SUPERSEDED)
                lo = t_noff[ti]
                hi = t_noff[ti + 1]
                self._new_inc(tid, C_CREATED, C_LIVE, offset, 0, -1, -1, &t_data[lo] if hi > lo else NULL, hi - lo)
                ti += 1
        del keep
        return _err_tuple(&err)

    # -- composing pieces -----------------------------------------------------------------
    def absorb(self, other):
        """Fold an exported piece on top of this state (see the twin); the lowest-offset error or None."""
        x = {name: np.ascontiguousarray(other[name], dtype=dt) for name, dt in EXPORT_FIELDS.items()}
        cdef int64_t ninc = len(x["inc_kind"]), nent = len(x["inc"]), k2, j, lo, hi
        cdef const uint8_t[::1] tids = x["inc_topic_id"].reshape(-1)
        cdef const int8_t[::1] kinds = x["inc_kind"]
        cdef const int8_t[::1] states = x["inc_state"]
        cdef const int64_t[::1] firsts = x["inc_first_offset"]
        cdef const int8_t[::1] fkinds = x["inc_first_kind"]
        cdef const int32_t[::1] fpids = x["inc_first_partition"]
        cdef const int64_t[::1] removes = x["inc_remove_offset"]
        cdef const int32_t[::1] noffs = x["inc_name_offsets"]
        cdef const uint8_t[::1] ndata = x["inc_name_data"]
        cdef const int32_t[::1] e_inc = x["inc"]
        cdef const int32_t[::1] e_pid = x["partition_id"]
        cdef const uint8_t[::1] e_flags = x["flags"]
        cdef const uint8_t[::1] e_set = x["list_set"]
        cdef const int32_t[::1] e_leader = x["leader"]
        cdef const int32_t[::1] e_le = x["leader_epoch"]
        cdef const int32_t[::1] e_pe = x["partition_epoch"]
        cdef const int8_t[::1] e_lrs = x["leader_recovery_state"]
        cdef const int64_t[::1] e_need = x["need_offset"]
        cdef const int32_t[::1] e_alen = x["a_len"]
        cdef const int64_t[::1] e_aoff = x["a_off"]
        cdef const int64_t[::1] e_a2 = x["a2_off"]
        cdef const int32_t[::1] e_blen = x["b_len"]
        cdef const int64_t[::1] e_boff = x["b_off"]
        cdef const int64_t[::1] e_b2 = x["b2_off"]
        if tids.shape[0] != 16 * ninc or noffs.shape[0] != ninc + 1:
            raise ValueError("absorb: incarnation arrays of different lengths")
        _check_offsets(x["inc_name_offsets"], ndata.shape[0], "inc_name")
        if ninc:
            for name in ("inc_state", "inc_first_offset", "inc_first_kind", "inc_first_partition", "inc_remove_offset"):
                if len(x[name]) != ninc:
                    raise ValueError(f"absorb: {name} has {len(x[name])} entries for {ninc} incarnations")
        for name in ("partition_id", "flags", "list_set", "leader", "leader_epoch", "partition_epoch",
                     "leader_recovery_state", "need_offset", "a_len", "a_off", "a2_off", "b_len", "b_off", "b2_off"):
            if len(x[name]) != nent:
                raise ValueError(f"absorb: {name} has {len(x[name])} entries for {nent} partitions")
        if nent and (np.min(x["inc"]) < 0 or np.max(x["inc"]) >= ninc or np.any(np.diff(x["inc"]) < 0)):
            raise ValueError("absorb: entries must be sorted by incarnation, each one of the incarnations")
        cdef const int32_t* loffs[NLISTS]
        cdef const int32_t* lvals[NLISTS]
        cdef const uint8_t* dvals = NULL
        cdef int k
        cdef const int32_t[::1] tmp32
        cdef const uint8_t[::1] tmp8
        for k in range(NLISTS):
            name = LIST_FIELDS[k]
            tmp32 = x[name + "_offsets"]
            if tmp32.shape[0] != nent + 1:
                raise ValueError(f"absorb: {name}_offsets must have one more entry than partitions")
            loffs[k] = &tmp32[0]
            if k == 1:
                tmp8 = x[name].reshape(-1)
                dvals = &tmp8[0] if tmp8.shape[0] else NULL
                lvals[k] = NULL
                _check_offsets(x[name + "_offsets"], tmp8.shape[0] // 16, name)
            else:
                tmp32 = x[name]
                lvals[k] = &tmp32[0] if tmp32.shape[0] else NULL
                _check_offsets(x[name + "_offsets"], tmp32.shape[0], name)
        starts_arr = np.searchsorted(x["inc"], np.arange(ninc + 1)).astype(np.int64)
        cdef const int64_t[::1] starts = starts_arr
        cdef Cols cols
        memset(&cols, 0, sizeof(Cols))
        if nent:
            cols.flags = &e_flags[0]
            cols.list_set = &e_set[0]
            cols.leader = &e_leader[0]
            cols.le = &e_le[0]
            cols.pe = &e_pe[0]
            cols.lrs = &e_lrs[0]
            cols.need = &e_need[0]
            cols.alen = &e_alen[0]
            cols.aoff = &e_aoff[0]
            cols.a2 = &e_a2[0]
            cols.blen = &e_blen[0]
            cols.boff = &e_boff[0]
            cols.b2 = &e_b2[0]
        for k in range(NLISTS):
            cols.loffs[k] = loffs[k]
            cols.lvals[k] = lvals[k]
        cols.dvals = dvals
        cdef Err err, e2
        cdef View v
        cdef Steps run_a, run_b
        cdef int64_t cur, inc, ei, fail
        cdef const uint8_t* tid
        err.code = 0
        for k2 in range(ninc):
            tid = &tids[16 * k2]
            if kinds[k2] == C_CREATED:
                cur = self._find_topic(tid)
                if cur >= 0 and self.incs[cur].state == C_LIVE:
                    self._set_state(cur, C_SUPERSEDED)
                lo = noffs[k2]
                hi = noffs[k2 + 1]
                inc = self._new_inc(tid, C_CREATED, states[k2], firsts[k2], fkinds[k2], fpids[k2], removes[k2],
                                    &ndata[lo] if hi > lo else NULL, hi - lo)
                for j in range(starts[k2], starts[k2 + 1]):
                    _view(&v, j, &cols)
                    ei = self._find_entry(<int32_t>inc, e_pid[j])
                    if ei < 0:
                        self._insert(<int32_t>inc, e_pid[j], &v)
                    else:
                        fail = self._check(ei, &v, &run_a, &run_b)
                        self._compose(ei, &v, run_a, run_b)
                continue
            cur = self._find_topic(tid)
            if cur < 0:
                cur = self._new_inc(tid, C_BASE, C_LIVE, firsts[k2], fkinds[k2], fpids[k2], -1, NULL, 0)
            elif self.incs[cur].state != C_LIVE:
                _set_err(&e2, 3 if fkinds[k2] == C_KREMOVE else 1, firsts[k2], -1, fpids[k2], fkinds[k2], tid)
                _keep_min(&err, &e2)
                continue
            for j in range(starts[k2], starts[k2 + 1]):
                _view(&v, j, &cols)
                ei = self._find_entry(<int32_t>cur, e_pid[j])
                if ei < 0:
                    if self.incs[cur].kind == C_CREATED and v.need >= 0:
                        _set_err(&e2, 2, v.need, -1, e_pid[j], 0, tid)
                        _keep_min(&err, &e2)
                        continue
                    self._insert(<int32_t>cur, e_pid[j], &v)
                    continue
                fail = self._check(ei, &v, &run_a, &run_b)
                if fail >= 0:
                    _set_err(&e2, 6, fail, -1, e_pid[j], 0, tid)
                    _keep_min(&err, &e2)
                self._compose(ei, &v, run_a, run_b)
            if states[k2] == C_REMOVED:
                self._set_state(cur, C_REMOVED)
                self.incs[cur].remove = removes[k2]
        return _err_tuple(&err)

    # -- exporting ------------------------------------------------------------------------
    def export(self, bint live_only=False):
        """The state as numpy arrays (see the twin); ``live_only``: the entries of live
        incarnations only."""
        cdef int64_t ninc = self.ninc, i, j, m, k, total, pos
        cdef Inc* inc
        out = {}
        tid_a = np.empty((ninc, 16), np.uint8)
        kind_a = np.empty(ninc, np.int8)
        state_a = np.empty(ninc, np.int8)
        first_a = np.empty(ninc, np.int64)
        fkind_a = np.empty(ninc, np.int8)
        fpid_a = np.empty(ninc, np.int32)
        remove_a = np.empty(ninc, np.int64)
        noff_a = np.empty(ninc + 1, np.int64)
        cdef uint8_t[:, ::1] tid_v = tid_a
        cdef int8_t[::1] kind_v = kind_a, state_v = state_a, fkind_v = fkind_a
        cdef int64_t[::1] first_v = first_a, remove_v = remove_a, noff_v = noff_a
        cdef int32_t[::1] fpid_v = fpid_a
        total = 0
        noff_v[0] = 0
        for i in range(ninc):
            inc = &self.incs[i]
            memcpy(&tid_v[i, 0], inc.tid, 16)
            kind_v[i] = inc.kind
            state_v[i] = inc.state
            first_v[i] = inc.first
            fkind_v[i] = inc.first_kind
            fpid_v[i] = inc.first_pid
            remove_v[i] = inc.remove
            total += inc.name_len
            noff_v[i + 1] = total
        if total > 2147483647:
            raise ValueError("PartitionFold.export: names longer than int32 offsets address")
        name_a = np.empty(total, np.uint8)
        cdef uint8_t[::1] name_v = name_a
        for i in range(ninc):
            inc = &self.incs[i]
            if inc.name_len:
                memcpy(&name_v[noff_v[i]], self.na + inc.name_off, inc.name_len)
        out["inc_topic_id"] = tid_a
        out["inc_kind"] = kind_a
        out["inc_state"] = state_a
        out["inc_first_offset"] = first_a
        out["inc_first_kind"] = fkind_a
        out["inc_first_partition"] = fpid_a
        out["inc_remove_offset"] = remove_a
        out["inc_name_offsets"] = noff_a.astype(np.int32)
        out["inc_name_data"] = name_a
        # the entries kept, sorted by (incarnation, partition id)
        keys_a = np.empty(self.nent, np.int64)
        idx_a = np.empty(self.nent, np.int64)
        cdef int64_t[::1] keys_v = keys_a, idx_v = idx_a
        cdef Entry* e
        m = 0
        for i in range(self.nent):
            e = &self.ents[i]
            if live_only:
                if self.incs[e.inc].state != C_LIVE:
                    continue
            elif self.incs[e.inc].kind != C_BASE and self.incs[e.inc].state != C_LIVE:
                continue
            keys_v[m] = (<int64_t>e.inc << 32) | <uint32_t>e.pid
            idx_v[m] = i
            m += 1
        order = np.argsort(keys_a[:m], kind="stable")
        sel_a = idx_a[:m][order]
        cdef const int64_t[::1] sel = sel_a
        cols = {}
        for name in ("inc", "partition_id", "leader", "leader_epoch", "partition_epoch", "a_len", "b_len"):
            cols[name] = np.empty(m, np.int32)
        for name in ("flags", "list_set"):
            cols[name] = np.empty(m, np.uint8)
        cols["leader_recovery_state"] = np.empty(m, np.int8)
        for name in ("need_offset", "a_off", "a2_off", "b_off", "b2_off"):
            cols[name] = np.empty(m, np.int64)
        cdef int32_t[::1] c_inc = cols["inc"], c_pid = cols["partition_id"], c_leader = cols["leader"]
        cdef int32_t[::1] c_le = cols["leader_epoch"], c_pe = cols["partition_epoch"]
        cdef int32_t[::1] c_alen = cols["a_len"], c_blen = cols["b_len"]
        cdef uint8_t[::1] c_flags = cols["flags"], c_set = cols["list_set"]
        cdef int8_t[::1] c_lrs = cols["leader_recovery_state"]
        cdef int64_t[::1] c_need = cols["need_offset"], c_aoff = cols["a_off"], c_a2 = cols["a2_off"]
        cdef int64_t[::1] c_boff = cols["b_off"], c_b2 = cols["b2_off"]
        cdef int64_t lens[NLISTS]
        cdef LRef lr
        for k in range(NLISTS):
            lens[k] = 0
        for j in range(m):
            e = &self.ents[sel[j]]
            c_inc[j] = e.inc
            c_pid[j] = e.pid
            c_leader[j] = e.leader
            c_le[j] = e.le
            c_pe[j] = e.pe
            c_flags[j] = e.flags
            c_set[j] = e.list_set
            c_lrs[j] = e.lrs
            c_need[j] = self.pend[sel[j]].need
            c_alen[j] = self.pend[sel[j]].a.len
            c_aoff[j] = self.pend[sel[j]].a.off
            c_a2[j] = self.pend[sel[j]].a.off2
            c_blen[j] = self.pend[sel[j]].b.len
            c_boff[j] = self.pend[sel[j]].b.off
            c_b2[j] = self.pend[sel[j]].b.off2
            for k in range(NLISTS):
                lens[k] += self._lref(sel[j], k).len
        out.update(cols)
        cdef int32_t[::1] lo_v
        cdef int32_t[::1] lv_v
        cdef uint8_t[:, ::1] dv_v
        for k in range(NLISTS):
            name = LIST_FIELDS[k]
            if lens[k] > 2147483647:
                raise ValueError(f"PartitionFold.export: {name} has more entries than int32 offsets address")
            loffs_a = np.empty(m + 1, np.int32)
            lo_v = loffs_a
            if k == 1:
                vals_a = np.empty((lens[k], 16), np.uint8)
                dv_v = vals_a
            else:
                vals_a = np.empty(lens[k], np.int32)
                lv_v = vals_a
            pos = 0
            lo_v[0] = 0
            for j in range(m):
                lr = self._lref(sel[j], k)
                if lr.len:
                    if k == 1:
                        memcpy(&dv_v[pos, 0], self.ua + 16 * <int64_t>lr.off, 16 * lr.len)
                    else:
                        memcpy(&lv_v[pos], self.ia + lr.off, 4 * lr.len)
                pos += lr.len
                lo_v[j + 1] = <int32_t>pos
            out[name + "_offsets"] = loffs_a
            out[name] = vals_a
        return out


# the columns of an exported piece, as pointers (what absorb reads per entry)
cdef struct Cols:
    const uint8_t* flags
    const uint8_t* list_set
    const int32_t* leader
    const int32_t* le
    const int32_t* pe
    const int8_t* lrs
    const int64_t* need
    const int32_t* alen
    const int64_t* aoff
    const int64_t* a2
    const int32_t* blen
    const int64_t* boff
    const int64_t* b2
    const int32_t* loffs[NLISTS]
    const int32_t* lvals[NLISTS]
    const uint8_t* dvals


cdef inline void _view(View* v, int64_t j, Cols* c) noexcept nogil:
    cdef int k
    cdef int64_t lo, hi
    v.flags = c.flags[j]
    v.list_set = c.list_set[j]
    v.leader = c.leader[j]
    v.le = c.le[j]
    v.pe = c.pe[j]
    v.lrs = c.lrs[j]
    v.need = c.need[j]
    v.a.len = c.alen[j]
    v.a.off = c.aoff[j]
    v.a.off2 = c.a2[j]
    v.b.len = c.blen[j]
    v.b.off = c.boff[j]
    v.b.off2 = c.b2[j]
    v.dp = NULL
    v.be = 0
    for k in range(NLISTS):
        lo = c.loffs[k][j]
        hi = c.loffs[k][j + 1]
        v.ln[k] = <int32_t>(hi - lo)
        v.lp[k] = NULL
        if hi > lo:
            if k == 1:
                v.dp = c.dvals + 16 * lo
            else:
                v.lp[k] = c.lvals[k] + lo


cdef uint8_t _ZERO16[16]
memset(_ZERO16, 0, 16)


def _bytes_view(data):
    """A read-only uint8 view of a buffer (bytes, mmap, memoryview, numpy array)."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


cdef inline void _set_err(Err* err, int code, int64_t offset, int64_t row, int32_t pid, int64_t detail,
                          const uint8_t* tid) noexcept:
    err.code = code
    err.offset = offset
    err.row = row
    err.pid = pid
    err.detail = detail
    memcpy(err.tid, tid, 16)


cdef inline void _keep_min(Err* err, Err* e2) noexcept:
    if err.code == 0 or e2.offset < err.offset:
        err[0] = e2[0]


cdef object _err_tuple(Err* err):
    if err.code == 0:
        return None
    return (err.offset, err.row, err.code, bytes(err.tid[:16]), err.pid, err.detail)


def _uuids(values, int64_t n, str what):
    a = np.ascontiguousarray(values, dtype=np.uint8)
    if a.ndim != 2 or a.shape[1] != 16 or a.shape[0] != n:
        raise ValueError(f"{what}: topic ids must be uint8[{n}, 16], got {a.dtype}{list(a.shape)}")
    return a.reshape(-1)


def _uuid_values(values):
    a = np.ascontiguousarray(values, dtype=np.uint8)
    if a.ndim != 2 or a.shape[1] != 16:
        raise ValueError(f"directories must be uint8[k, 16], got {a.dtype}{list(a.shape)}")
    return a.reshape(-1)


def _col32(values, int64_t n, str what):
    a = np.ascontiguousarray(values, dtype=np.int32)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{what}: expected {n} values, got shape {list(a.shape)}")
    return a


def _col8(values, int64_t n, str what):
    a = np.ascontiguousarray(values, dtype=np.int8)
    if a.ndim != 1 or a.shape[0] != n:
        raise ValueError(f"{what}: expected {n} values, got shape {list(a.shape)}")
    return a


def _check_offsets(offsets, int64_t nvalues, str what):
    o = np.asarray(offsets)
    cdef Py_ssize_t n = len(o)
    if n and (o[0] < 0 or o[n - 1] > nvalues or np.any(np.diff(o.astype(np.int64)) < 0)):
        raise ValueError(f"{what}: offsets must be non-decreasing positions within the {nvalues} values")
