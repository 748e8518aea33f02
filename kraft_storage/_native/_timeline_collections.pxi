# Part of kraft_storage._native._timeline, included by _timeline.pyx after
# _timeline_hashtable.pxi.  The public collections: TimelineHashMap and
# TimelineHashSet over _SnapshottableHashTable, and the scalars TimelineLong,
# TimelineInteger and TimelineObject over _TimelineScalar.

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
