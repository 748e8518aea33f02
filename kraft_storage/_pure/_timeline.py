"""Timeline collections, pure-Python twin of ``kraft_storage._native._timeline``.

Why this exists
---------------
The KRaft controller keeps its whole state in memory and must (a) read a
committed view while uncommitted writes pile up on top of it and (b) throw
the uncommitted writes away when it loses leadership or a metadata
transaction aborts.  Kafka's answer is the ``org.apache.kafka.timeline``
package: a :class:`SnapshotRegistry` of in-memory snapshots, each named by an
*epoch* (the controller uses log offsets), and collections that remember just
enough history to be read "as of" any live snapshot and to be reverted to it.

This module is the semantic reference: the native module must behave exactly
like it (the model-based test checks both against a naive oracle).  It is
written for clarity first; it is still reasonably fast because the current
tier is a plain ``dict``.

Data layout (shared with the native module)
-------------------------------------------
*Current tier* of a hash table: ``key -> (value, start_epoch)``.  An element's
``start_epoch`` is ``registry.latest_epoch + 1`` at the moment it was written,
i.e. the first epoch at which a *future* snapshot could see it.

*Snapshot tiers*: every :class:`Snapshot` owns ``deltas: {collection: delta}``,
holding data only for collections that changed while it was the newest
snapshot.  For a hash table the delta is a :class:`_HashTier`:

``size``   the collection's size when the snapshot was taken;
``saved``  ``key -> (value, start_epoch)`` of elements that were live when the
           snapshot was taken and were overwritten/removed afterwards (copy on
           first write: each key is saved at most once per tier);
``added``  keys inserted (no previous element) after the snapshot; it lets a
           revert find the elements to drop in O(changes) instead of scanning
           the whole table as Kafka does.

Invariants
----------
1. An element with ``start_epoch <= E`` in the current tier has the same value
   it had at snapshot ``E`` (any write after ``E`` gives it a newer start).
2. Reading at ``E`` = current element if its start is ``<= E``; otherwise the
   first saved copy found walking tiers from ``E`` towards the newest; a saved
   copy with ``start_epoch > E`` proves the key was absent at ``E``.
3. Snapshot epochs never decrease: a new snapshot's epoch must be ``>`` every
   epoch snapshotted since the last :meth:`SnapshotRegistry.reset` (a revert to
   ``E`` lowers that mark to ``E``); asking again for the newest live snapshot
   just returns it.  Re-creating a deleted snapshot at its old epoch would
   hide the writes made after it (their start epoch is ``E + 1``).

Costs: creating a snapshot is O(1); a write costs O(1) plus at most one saved
copy per key per snapshot; reverting costs O(changes since the snapshot);
deleting old snapshots costs O(size of their deltas).
"""
from __future__ import annotations

import weakref
from typing import Any, Iterable, Iterator

# Shared with the native twin and the ``kraft_storage.timeline`` facade: defined in the
# leaves (both twins import them from there; the contract names them in both).
from kraft_storage._common import LATEST_EPOCH, NO_SNAPSHOT_EPOCH
from kraft_storage.errors import SnapshotEpochError, SnapshotNotFoundError

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_MISSING = object()


def _check_epoch(epoch: int) -> int:
    epoch = int(epoch)
    if not NO_SNAPSHOT_EPOCH < epoch < LATEST_EPOCH:
        raise SnapshotEpochError(
            f"snapshot epoch {epoch} out of range: must be > {NO_SNAPSHOT_EPOCH} "
            f"and < LATEST_EPOCH ({LATEST_EPOCH})")
    return epoch


class Snapshot:
    """One in-memory snapshot: an epoch and the deltas of the collections that
    changed while it was the newest snapshot."""

    __slots__ = ("epoch", "deltas", "__weakref__")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.deltas: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"Snapshot(epoch={self.epoch}, deltas={len(self.deltas)})"


class SnapshotRegistry:
    """Ordered in-memory snapshots plus the collections registered with them.

    Snapshots live in a list ordered by epoch (there are usually one or two, so
    a list beats a linked structure) and in a dict by epoch.  Collections are
    held weakly: a collection that is no longer used does not stay alive for
    :meth:`reset`'s sake (deltas hold their collection strongly while they exist).
    """

    def __init__(self) -> None:
        self._snapshots: list[Snapshot] = []
        self._by_epoch: dict[int, Snapshot] = {}
        self._revertables: "weakref.WeakSet[Any]" = weakref.WeakSet()
        self._latest: Snapshot | None = None
        self._latest_epoch = NO_SNAPSHOT_EPOCH
        self._high_water = NO_SNAPSHOT_EPOCH

    # -- queries ---------------------------------------------------------
    @property
    def latest_epoch(self) -> int:
        """Epoch of the newest snapshot, or ``NO_SNAPSHOT_EPOCH``."""
        return self._latest_epoch

    def epochs(self) -> list[int]:
        """Epochs of the live snapshots, oldest first."""
        return [s.epoch for s in self._snapshots]

    def has_snapshot(self, epoch: int) -> bool:
        return epoch in self._by_epoch

    def get_snapshot(self, epoch: int) -> Snapshot:
        snap = self._by_epoch.get(epoch)
        if snap is None:
            raise SnapshotNotFoundError(
                f"no in-memory snapshot at epoch {epoch}; snapshot epochs are {self.epochs()}")
        return snap

    def __len__(self) -> int:
        return len(self._snapshots)

    def __repr__(self) -> str:
        return f"SnapshotRegistry(epochs={self.epochs()})"

    # -- snapshot lifecycle ---------------------------------------------
    def get_or_create_snapshot(self, epoch: int) -> Snapshot:
        """Return the snapshot at ``epoch``, creating it if needed.  O(1).

        Reuses the newest snapshot when it has this epoch.  Otherwise raises
        :class:`SnapshotEpochError` unless ``epoch`` is greater than every epoch
        snapshotted since the last reset (or since a revert to a lower epoch),
        even if those snapshots were deleted since.
        """
        epoch = _check_epoch(epoch)
        if self._latest is not None and self._latest_epoch == epoch:
            return self._latest
        if epoch <= self._high_water or epoch < self._latest_epoch:
            raise SnapshotEpochError(
                f"cannot create an in-memory snapshot at epoch {epoch}: epoch "
                f"{max(self._high_water, self._latest_epoch)} was already snapshotted; "
                f"snapshot epochs are {self.epochs()}")
        snap = Snapshot(epoch)
        self._snapshots.append(snap)
        self._by_epoch[epoch] = snap
        self._latest = snap
        self._latest_epoch = epoch
        self._high_water = epoch
        return snap

    idempotent_create_snapshot = get_or_create_snapshot

    def _refresh_latest(self) -> None:
        if self._snapshots:
            self._latest = self._snapshots[-1]
            self._latest_epoch = self._latest.epoch
        else:
            self._latest = None
            self._latest_epoch = NO_SNAPSHOT_EPOCH

    def _delete_at(self, index: int) -> None:
        """Delete ``self._snapshots[index]``, folding its deltas into the
        previous snapshot (which must keep describing its own epoch)."""
        snap = self._snapshots[index]
        if index > 0:
            prev = self._snapshots[index - 1]
            for owner, delta in snap.deltas.items():
                mine = prev.deltas.get(owner, _MISSING)
                if mine is _MISSING:   # (a TimelineObject may have saved None)
                    # owner did not change between prev and snap: snap's delta
                    # describes prev's epoch just as well.
                    prev.deltas[owner] = delta
                else:
                    owner._merge_delta(prev.epoch, mine, delta)
        snap.deltas = {}
        del self._snapshots[index]
        del self._by_epoch[snap.epoch]

    def delete_snapshot(self, epoch: int) -> None:
        """Delete one snapshot; later reads at other epochs are unaffected."""
        snap = self.get_snapshot(epoch)
        self._delete_at(self._snapshots.index(snap))
        self._refresh_latest()

    def delete_snapshots_up_to(self, epoch: int) -> None:
        """Delete every snapshot with an epoch lower than ``epoch``."""
        n = 0
        for snap in self._snapshots:
            if snap.epoch >= epoch:
                break
            snap.deltas = {}
            del self._by_epoch[snap.epoch]
            n += 1
        if n:
            del self._snapshots[:n]
            self._refresh_latest()

    def revert_to_snapshot(self, epoch: int) -> None:
        """Restore every collection to its state at snapshot ``epoch``.

        Later snapshots are deleted (their deltas merged into the target), then
        each collection that changed since the target undoes its changes.  The
        target snapshot stays, so one can revert to it again.
        """
        target = self.get_snapshot(epoch)
        index = self._snapshots.index(target)
        while len(self._snapshots) > index + 1:
            self._delete_at(index + 1)
        self._refresh_latest()
        self._high_water = epoch
        # After the revert nothing has changed since the target: it keeps no deltas.
        deltas, target.deltas = target.deltas, {}
        for owner, delta in deltas.items():
            owner._revert(epoch, delta)

    def reset(self) -> None:
        """Delete every snapshot and reset every registered collection to its
        initial state (used before loading a Raft snapshot)."""
        self.delete_snapshots_up_to(LATEST_EPOCH)
        self._high_water = NO_SNAPSHOT_EPOCH
        for revertable in list(self._revertables):
            revertable._reset()

    # -- used by collections --------------------------------------------
    def _register(self, revertable: Any) -> None:
        self._revertables.add(revertable)

    def _snapshots_from(self, epoch: int) -> list[Snapshot]:
        snap = self.get_snapshot(epoch)
        return self._snapshots[self._snapshots.index(snap):]


# ---------------------------------------------------------------------------
# hash tables


class _HashTier:
    """Delta of one hash table in one snapshot (see module docstring)."""

    __slots__ = ("size", "saved", "added")

    def __init__(self, size: int):
        self.size = size
        self.saved: dict[Any, tuple[Any, int]] | None = None
        self.added: list[Any] = []


class _SnapshottableHashTable:
    """Engine under :class:`TimelineHashMap` and :class:`TimelineHashSet`."""

    __slots__ = ("_registry", "_data", "_mods", "__weakref__")

    def __init__(self, registry: SnapshotRegistry, expected_size: int = 0):
        if not isinstance(registry, SnapshotRegistry):
            raise TypeError(f"registry must be a {__name__}.SnapshotRegistry, "
                            f"not {type(registry).__name__}")
        self._registry = registry
        self._data: dict[Any, tuple[Any, int]] = {}
        registry._register(self)

    @property
    def registry(self) -> SnapshotRegistry:
        return self._registry

    # -- write path: record history in the newest snapshot ---------------
    def _tier(self) -> _HashTier | None:
        snap = self._registry._latest
        if snap is None:
            return None
        tier = snap.deltas.get(self)
        if tier is None:
            tier = snap.deltas[self] = _HashTier(len(self._data))
        return tier

    def _write(self, key: Any, value: Any) -> tuple[Any, int] | None:
        reg = self._registry
        data = self._data
        prev = data.get(key)
        if reg._latest is not None:
            tier = self._tier()
            if prev is None:
                tier.added.append(key)
            elif prev[1] <= reg._latest_epoch:
                if tier.saved is None:
                    tier.saved = {}
                tier.saved[key] = prev
        data[key] = (value, reg._latest_epoch + 1)
        return prev

    def _delete(self, key: Any) -> tuple[Any, int] | None:
        data = self._data
        prev = data.pop(key, None)
        if prev is not None:
            reg = self._registry
            if reg._latest is not None:
                tier = reg._latest.deltas.get(self)
                if tier is None:
                    tier = reg._latest.deltas[self] = _HashTier(len(data) + 1)
                if prev[1] <= reg._latest_epoch:
                    if tier.saved is None:
                        tier.saved = {}
                    tier.saved[key] = prev
        return prev

    def _clear(self) -> None:
        if self._registry._latest is None:
            self._data.clear()
        else:
            for key in list(self._data):
                self._delete(key)

    # -- read path ------------------------------------------------------
    def _lookup(self, key: Any, epoch: int) -> tuple[Any, int] | None:
        elem = self._data.get(key)
        if epoch == LATEST_EPOCH:
            return elem
        snaps = self._registry._snapshots_from(epoch)
        if elem is not None and elem[1] <= epoch:
            return elem
        for snap in snaps:
            tier = snap.deltas.get(self)
            if tier is not None and tier.saved is not None:
                elem = tier.saved.get(key)
                if elem is not None:
                    return elem if elem[1] <= epoch else None
        return None

    def size(self, epoch: int = LATEST_EPOCH) -> int:
        """Number of elements at ``epoch``."""
        if epoch == LATEST_EPOCH:
            return len(self._data)
        for snap in self._registry._snapshots_from(epoch):
            tier = snap.deltas.get(self)
            if tier is not None:
                return tier.size
        return len(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __bool__(self) -> bool:
        return bool(self._data)

    def is_empty(self, epoch: int = LATEST_EPOCH) -> bool:
        return self.size(epoch) == 0

    def contains(self, key: Any, epoch: int = LATEST_EPOCH) -> bool:
        """``key in self`` at ``epoch``."""
        return self._lookup(key, epoch) is not None

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def contains_many(self, keys: Iterable[Any], epoch: int = LATEST_EPOCH) -> list[bool]:
        """``[contains(k, epoch) for k in keys]``."""
        if epoch == LATEST_EPOCH:
            data = self._data
            return [k in data for k in keys]
        return [self._lookup(k, epoch) is not None for k in keys]

    def _elements(self, epoch: int) -> list[tuple[Any, tuple[Any, int]]]:
        """(key, element) pairs live at ``epoch`` (a materialised list, so it is
        safe to keep iterating while the current state changes)."""
        snaps = self._registry._snapshots_from(epoch)
        out = [(k, e) for k, e in self._data.items() if e[1] <= epoch]
        seen: set[Any] = set()
        for snap in snaps:
            tier = snap.deltas.get(self)
            if tier is None or tier.saved is None:
                continue
            for k, e in tier.saved.items():
                if k in seen:
                    continue
                seen.add(k)
                cur = self._data.get(k)
                if cur is not None and cur[1] <= epoch:
                    continue  # already reported from the current tier
                if e[1] <= epoch:
                    out.append((k, e))
        return out

    # -- Revertable -----------------------------------------------------
    def _merge_delta(self, epoch: int, mine: _HashTier, other: _HashTier) -> None:
        """Fold the delta of a deleted snapshot into ``mine`` (snapshot ``epoch``)."""
        if other.saved is not None:
            for k, e in other.saved.items():
                # Only elements live at our epoch matter; keys written between
                # our epoch and the deleted one are already recorded by us.
                if e[1] <= epoch:
                    if mine.saved is None:
                        mine.saved = {}
                    mine.saved[k] = e
        mine.added.extend(other.added)

    def _revert(self, epoch: int, tier: _HashTier) -> None:
        data = self._data
        for k in tier.added:
            e = data.get(k)
            if e is not None and e[1] > epoch:
                del data[k]
        if tier.saved is not None:
            for k, e in tier.saved.items():
                cur = data.get(k)
                if cur is not None and cur[1] > epoch:
                    del data[k]
                data[k] = e

    def _reset(self) -> None:
        self._clear()


class TimelineHashMap(_SnapshottableHashTable):
    """A hash map that can be read at any live snapshot epoch and reverted.

    Keys are any hashable objects, values any objects (``None`` included).
    Mutation only ever changes the current state.
    """

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        return self._data[key][0]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._write(key, value)

    def __delitem__(self, key: Any) -> None:
        if self._delete(key) is None:
            raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __repr__(self) -> str:
        return f"TimelineHashMap({ {k: e[0] for k, e in self._data.items()} !r})"

    def get(self, key: Any, default: Any = None, *, epoch: int = LATEST_EPOCH) -> Any:
        """Value of ``key`` at ``epoch``, or ``default``."""
        if epoch == LATEST_EPOCH:
            e = self._data.get(key)
        else:
            e = self._lookup(key, epoch)
        return default if e is None else e[0]

    def put(self, key: Any, value: Any) -> Any:
        """Set ``key`` to ``value``; return the previous value or ``None``."""
        prev = self._write(key, value)
        return None if prev is None else prev[0]

    def remove(self, key: Any) -> Any:
        """Remove ``key``; return its value, or ``None`` if it was absent."""
        prev = self._delete(key)
        return None if prev is None else prev[0]

    def pop(self, key: Any, default: Any = _MISSING) -> Any:
        prev = self._delete(key)
        if prev is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        return prev[0]

    def clear(self) -> None:
        """Remove everything (recorded in the newest snapshot like any write)."""
        self._clear()

    def update(self, other: Any = (), **kwargs: Any) -> None:
        items = other.items() if hasattr(other, "items") else other
        for k, v in items:
            self._write(k, v)
        for k, v in kwargs.items():
            self._write(k, v)

    def put_many(self, keys: Iterable[Any], values: Iterable[Any]) -> None:
        """``put(k, v)`` for each pair; ``keys`` and ``values`` must have the
        same length (sequences or numpy arrays)."""
        keys = list(keys.tolist() if hasattr(keys, "tolist") else keys)
        values = list(values.tolist() if hasattr(values, "tolist") else values)
        if len(keys) != len(values):
            raise ValueError(f"put_many: {len(keys)} keys but {len(values)} values")
        write = self._write
        for k, v in zip(keys, values):
            write(k, v)

    def get_many(self, keys: Iterable[Any], default: Any = None, *,
                 epoch: int = LATEST_EPOCH) -> list[Any]:
        """``[get(k, default, epoch=epoch) for k in keys]``."""
        if hasattr(keys, "tolist"):
            keys = keys.tolist()
        if epoch == LATEST_EPOCH:
            data = self._data
            out = []
            for k in keys:
                e = data.get(k)
                out.append(default if e is None else e[0])
            return out
        return [self.get(k, default, epoch=epoch) for k in keys]

    def keys(self, epoch: int = LATEST_EPOCH) -> list[Any] | Iterator[Any]:
        """Keys at ``epoch`` (a live iterator at LATEST, a list otherwise)."""
        if epoch == LATEST_EPOCH:
            return iter(self._data)
        return [k for k, _ in self._elements(epoch)]

    def values(self, epoch: int = LATEST_EPOCH) -> list[Any] | Iterator[Any]:
        if epoch == LATEST_EPOCH:
            return (e[0] for e in self._data.values())
        return [e[0] for _, e in self._elements(epoch)]

    def items(self, epoch: int = LATEST_EPOCH) -> list[tuple[Any, Any]] | Iterator[tuple[Any, Any]]:
        if epoch == LATEST_EPOCH:
            return ((k, e[0]) for k, e in self._data.items())
        return [(k, e[0]) for k, e in self._elements(epoch)]

    def to_dict(self, epoch: int = LATEST_EPOCH) -> dict[Any, Any]:
        """A plain ``dict`` copy of the map at ``epoch``."""
        if epoch == LATEST_EPOCH:
            return {k: e[0] for k, e in self._data.items()}
        return {k: e[0] for k, e in self._elements(epoch)}


class TimelineHashSet(_SnapshottableHashTable):
    """A hash set that can be read at any live snapshot epoch and reverted."""

    __slots__ = ()

    def add(self, key: Any) -> bool:
        """Add ``key``; True if it was absent.  Re-adding changes nothing (the
        element keeps its start epoch), as in Kafka."""
        if key in self._data:
            return False
        self._write(key, None)
        return True

    def add_many(self, keys: Iterable[Any]) -> int:
        """Add every key; return how many were new."""
        if hasattr(keys, "tolist"):
            keys = keys.tolist()
        n = 0
        data = self._data
        for k in keys:
            if k not in data:
                self._write(k, None)
                n += 1
        return n

    def remove(self, key: Any) -> bool:
        """Remove ``key``; True if it was present (Kafka's ``remove``)."""
        return self._delete(key) is not None

    def discard(self, key: Any) -> None:
        self._delete(key)

    def clear(self) -> None:
        self._clear()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._data)

    def __repr__(self) -> str:
        return f"TimelineHashSet({list(self._data)!r})"

    def keys(self, epoch: int = LATEST_EPOCH) -> list[Any] | Iterator[Any]:
        """Members at ``epoch`` (a live iterator at LATEST, a list otherwise)."""
        if epoch == LATEST_EPOCH:
            return iter(self._data)
        return [k for k, _ in self._elements(epoch)]

    def to_set(self, epoch: int = LATEST_EPOCH) -> set[Any]:
        if epoch == LATEST_EPOCH:
            return set(self._data)
        return {k for k, _ in self._elements(epoch)}


# ---------------------------------------------------------------------------
# scalars: the delta is the value before the first write after the snapshot


class _TimelineScalar:
    __slots__ = ("_registry", "_value", "__weakref__")

    def _save(self) -> None:
        snap = self._registry._latest
        if snap is not None and self not in snap.deltas:
            snap.deltas[self] = self._value

    def _get(self, epoch: int) -> Any:
        if epoch == LATEST_EPOCH:
            return self._value
        for snap in self._registry._snapshots_from(epoch):
            saved = snap.deltas.get(self, _MISSING)
            if saved is not _MISSING:
                return saved
        return self._value

    def _merge_delta(self, epoch: int, mine: Any, other: Any) -> None:
        pass  # the older snapshot's saved value is the one that counts

    def _revert(self, epoch: int, saved: Any) -> None:
        self._value = saved

    @property
    def registry(self) -> SnapshotRegistry:
        return self._registry

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._value!r})"


class _TimelineInt(_TimelineScalar):
    __slots__ = ()
    _MIN = -(1 << 63)
    _MAX = (1 << 63) - 1

    def __init__(self, registry: SnapshotRegistry, value: int = 0):
        if not isinstance(registry, SnapshotRegistry):
            raise TypeError(f"registry must be a {__name__}.SnapshotRegistry")
        self._registry = registry
        self._value = self._check(value)
        registry._register(self)

    def _check(self, value: Any) -> int:
        value = int(value.__index__())
        if not self._MIN <= value <= self._MAX:
            raise OverflowError(f"{type(self).__name__} value {value} out of range "
                                f"[{self._MIN}, {self._MAX}]")
        return value

    def get(self, epoch: int = LATEST_EPOCH) -> int:
        return self._get(epoch)

    def set(self, value: int) -> None:
        value = self._check(value)
        self._save()
        self._value = value

    def increment(self) -> None:
        self.set(self._value + 1)

    def decrement(self) -> None:
        self.set(self._value - 1)

    def _reset(self) -> None:
        self.set(0)

    @property
    def value(self) -> int:
        return self._value


class TimelineLong(_TimelineInt):
    """A 64-bit signed integer that can be snapshotted (initially 0).
    Leaving the int64 range raises ``OverflowError`` (Java would wrap)."""
    __slots__ = ()


class TimelineInteger(_TimelineInt):
    """A 32-bit signed integer that can be snapshotted (initially 0).
    Leaving the int32 range raises ``OverflowError`` (Java would wrap)."""
    __slots__ = ()
    _MIN = _INT32_MIN
    _MAX = _INT32_MAX


class TimelineObject(_TimelineScalar):
    """A reference to an (immutable) object that can be snapshotted.
    :meth:`SnapshotRegistry.reset` sets it back to its initial value."""

    __slots__ = ("_initial",)

    def __init__(self, registry: SnapshotRegistry, initial: Any):
        if not isinstance(registry, SnapshotRegistry):
            raise TypeError(f"registry must be a {__name__}.SnapshotRegistry")
        self._registry = registry
        self._initial = initial
        self._value = initial
        registry._register(self)

    def get(self, epoch: int = LATEST_EPOCH) -> Any:
        return self._get(epoch)

    def set(self, value: Any) -> None:
        self._save()
        self._value = value

    def _reset(self) -> None:
        self.set(self._initial)

    @property
    def value(self) -> Any:
        return self._value


def put_grouped(maps: Any, key_of: Any, topic_of: Any, codes: Any, ints: Any, ones: Any, topic_keys: Any,
                stale: Any, distinct: Any) -> None:
    """Group entries by (key, topic) and put each group's tuple into its key's map (the
    specification of the native ``put_grouped``; see its docstring for why it exists).

    Entry ``i`` is ``ints[codes[i]]`` under map ``maps[key_of[i]]`` and topic
    ``topic_keys[topic_of[i]]``.  For each map in order, the topics it has entries of are put
    (one ``put_many``) in ascending topic index, each with the tuple of its entries in entry
    order; a one-entry group's tuple is ``ones[c]`` itself.  ``stale[t]``: the map may already
    hold topic ``t``; its value is then read and the new entries appended (``distinct``: those
    it already holds left out).  Other topics are put without a read."""
    maps, ints, ones, topic_keys = tuple(maps), tuple(ints), tuple(ones), tuple(topic_keys)
    key_of, topic_of, codes, stale = list(key_of), list(topic_of), list(codes), list(stale)
    n, nk, nt, nc = len(key_of), len(maps), len(topic_keys), len(ints)
    if len(topic_of) != n or len(codes) != n:
        raise ValueError(f"put_grouped: key_of has {n} entries, topic_of {len(topic_of)}, codes {len(codes)}")
    if len(ones) != nc:
        raise ValueError(f"put_grouped: {nc} ints but {len(ones)} one-entry tuples")
    if len(stale) != nt:
        raise ValueError(f"put_grouped: {nt} topic keys but {len(stale)} stale flags")
    for k, m in enumerate(maps):
        if not isinstance(m, TimelineHashMap):
            raise TypeError(f"put_grouped: maps[{k}] is {type(m).__name__}, not this module's TimelineHashMap")
    for i in range(n):
        if not 0 <= key_of[i] < nk:
            raise ValueError(f"put_grouped: key_of[{i}] = {key_of[i]} is not a map index (0..{nk - 1})")
        if not 0 <= topic_of[i] < nt:
            raise ValueError(f"put_grouped: topic_of[{i}] = {topic_of[i]} is not a topic index (0..{nt - 1})")
        if not 0 <= codes[i] < nc:
            raise ValueError(f"put_grouped: codes[{i}] = {codes[i]} is not an index of ints (0..{nc - 1})")
    groups: list[dict[int, list[int]]] = [{} for _ in range(nk)]
    for i in range(n):
        groups[key_of[i]].setdefault(topic_of[i], []).append(codes[i])
    for k in range(nk):
        if not groups[k]:
            continue
        m = maps[k]
        keys, values = [], []
        for t in sorted(groups[k]):
            members = groups[k][t]
            value = ones[members[0]] if len(members) == 1 else tuple(ints[c] for c in members)
            key = topic_keys[t]
            if stale[t]:
                existing = m.get(key)
                if existing is not None:
                    if distinct:
                        present = set(existing)
                        value = existing + tuple(p for p in value if p not in present)
                    else:
                        value = existing + value
            keys.append(key)
            values.append(value)
        m.put_many(keys, values)


__all__ = [
    "LATEST_EPOCH", "NO_SNAPSHOT_EPOCH", "Snapshot", "SnapshotRegistry",
    "SnapshotNotFoundError", "SnapshotEpochError", "TimelineHashMap",
    "TimelineHashSet", "TimelineLong", "TimelineInteger", "TimelineObject",
    "put_grouped",
]
