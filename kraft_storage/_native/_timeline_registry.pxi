# Part of kraft_storage._native._timeline, included by _timeline.pyx after
# _timeline_table.pxi.  The snapshot registry: Snapshot, the _Revertable base of
# every timeline collection, and SnapshotRegistry, which creates, reverts to and
# deletes snapshots and resets the collections registered with it.

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
