# Part of kraft_storage._native._timeline, included by _timeline.pyx after
# _timeline_registry.pxi.  The engine shared by TimelineHashMap and
# TimelineHashSet: _HashTier (one snapshot's delta of one table) and
# _SnapshottableHashTable (single-op and bulk reads and writes at any epoch,
# snapshot tiers, revert), with the helpers of its iterators and bulk paths.

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
        tbl_note(&self.t, value)
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
                    tbl_note(t, v)
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
                    tbl_note(t, v)
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
