"""Partitions of many topics as one immutable columnar table (the storage under ``TopicsImage``).

Why columns: issue 23's targets are a 1M-partition image in at most 400 B a partition, loaded
in at most a second.  One :class:`PartitionRegistration` per partition costs about 1 kB (the
object, five tuples, a tuple of Uuids) and a second or more to build, so the image keeps a
snapshot's partitions here, in numpy arrays, and makes a registration only when one is asked
for (:meth:`PartitionBlock.registration`).  A delta never writes into a block: changed and new
partitions live beside it, in the topic's overrides (:mod:`kraft_node.metadata.image.topics`).

Layout (exactly the generated columnar decoder's, :mod:`kraft_storage.messages.columns`, so a
block is built from decoded PartitionRecord columns with no work per row,
:meth:`PartitionBlock.from_columns`): ``n`` rows, grouped by topic and sorted by partition id
inside a topic (the block does not know the topics: the caller keeps each topic's
``(start, stop)`` row range).

* scalars, one entry per row: ``partition_id``, ``leader``, ``leader_epoch``,
  ``partition_epoch`` (int32), ``leader_recovery_state`` (int8);
* lists, as Arrow lists: ``X_offsets`` int32[n + 1] and the values ``X``; row ``i``'s list is
  ``X[X_offsets[i]:X_offsets[i + 1]]``.  The lists are ``replicas``, ``isr``, ``removing``,
  ``adding``, ``elr``, ``last_known_elr`` (int32 values) and ``directories`` (uint8[k, 16], a
  Kafka Uuid's 16 bytes per entry);
* a row with no directories stands for one MIGRATING directory per replica (a v0
  PartitionRecord, or :meth:`from_registrations` of a registration whose directories are all
  MIGRATING): what ``PartitionRegistration.from_record`` makes of either.

Offsets need not start at 0: a block built from rows ``lo .. hi`` of a bigger decode keeps
that decode's value arrays and offsets as they are (no copy, no rebasing); only
``offsets[0] <= offsets[i] <= offsets[i + 1] <= len(values)`` is required.  Such a block
keeps the whole value arrays alive, and :attr:`nbytes` counts them whole.

The constructor checks only what costs O(1) (dtypes, shapes, lengths); :meth:`check` walks
the rows and raises ``ValueError`` naming the first bad row and column.  The bulk loader and
the tests call it; the record-at-a-time path builds blocks only from registrations that were
already checked.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kraft_node.metadata.controller.replication_control import (
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_storage.accel import load
from kraft_storage.messages.runtime import Uuid

__all__ = ["PartitionBlock", "LIST_COLUMNS", "SCALAR_COLUMNS"]

Int32s = npt.NDArray[np.int32]

#: Scalar columns and their dtypes.
SCALAR_COLUMNS: dict[str, type[np.generic]] = {
    "partition_id": np.int32, "leader": np.int32, "leader_epoch": np.int32, "partition_epoch": np.int32,
    "leader_recovery_state": np.int8,
}
#: List columns: name -> (the PartitionRegistration slot it fills, the PartitionRecord field it comes from).
LIST_COLUMNS: dict[str, tuple[str, str]] = {
    "replicas": ("replicas", "replicas"),
    "directories": ("directories", "directories"),
    "isr": ("isr", "isr"),
    "removing": ("removing_replicas", "removing_replicas"),
    "adding": ("adding_replicas", "adding_replicas"),
    "elr": ("elr", "eligible_leader_replicas"),
    "last_known_elr": ("last_known_elr", "last_known_elr"),
}
_RECOVERY = (LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING)
_MIGRATING = DirectoryId.MIGRATING
_RESERVED = {d.bytes: d for d in (DirectoryId.MIGRATING, DirectoryId.UNASSIGNED, DirectoryId.LOST)}
#: 16 bytes -> one Uuid object: a cluster has a few directories per broker, so materialized
#: registrations share them (bounded; cleared when full)
_DIRECTORIES: dict[bytes, Uuid] = dict(_RESERVED)
_MAX_CACHED_DIRECTORIES = 65_536
#: MIGRATING per replica, by replica count (one shared tuple each)
_MIGRATING_TUPLES: dict[int, tuple[Uuid, ...]] = {}
_RECOVERY_OBJECTS = np.array(_RECOVERY, dtype=object)
#: PartitionRegistration's slots in the order ``_registrations`` hands the kernel its columns
_REG_SLOTS = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "leader",
              "leader_recovery_state", "leader_epoch", "partition_epoch", "elr", "last_known_elr")
_objects = load("_bulk_objects", "kraft_node")
_new_object = object.__new__
_set = object.__setattr__


def _directory(raw: bytes) -> Uuid:
    found = _DIRECTORIES.get(raw)
    if found is None:
        if len(_DIRECTORIES) >= _MAX_CACHED_DIRECTORIES:
            _DIRECTORIES.clear()
            _DIRECTORIES.update(_RESERVED)
        found = _DIRECTORIES[raw] = Uuid(raw)
    return found


def _migrating(n: int) -> tuple[Uuid, ...]:
    found = _MIGRATING_TUPLES.get(n)
    if found is None:
        found = _MIGRATING_TUPLES[n] = DirectoryId.migrating_tuple(n)
    return found


def _one(offsets: Int32s, values: Int32s, row: int) -> tuple[int, ...]:
    """Row ``row`` of a list column as a tuple."""
    a, b = offsets.item(row), offsets.item(row + 1)
    if a == b:
        return ()
    return tuple(values[a:b].tolist())


def _int32s(values: Iterable[int]) -> Int32s:
    return np.fromiter(values, dtype=np.int32)


class PartitionBlock:
    """An immutable columnar table of partitions (layout in the module docstring).

    Immutability is by convention and by the arrays' ``writeable`` flag, which the
    constructor clears on every array it is given (the arrays are not copied; a caller that
    keeps another writable view of the same memory must not write through it).
    """

    __slots__ = ("partition_id", "leader", "leader_epoch", "partition_epoch", "leader_recovery_state",
                 "replicas_offsets", "replicas", "directories_offsets", "directories",
                 "isr_offsets", "isr", "removing_offsets", "removing", "adding_offsets", "adding",
                 "elr_offsets", "elr", "last_known_elr_offsets", "last_known_elr", "_n")

    partition_id: Int32s
    leader: Int32s
    leader_epoch: Int32s
    partition_epoch: Int32s
    leader_recovery_state: npt.NDArray[np.int8]
    replicas_offsets: Int32s
    replicas: Int32s
    directories_offsets: Int32s
    directories: npt.NDArray[np.uint8]
    isr_offsets: Int32s
    isr: Int32s
    removing_offsets: Int32s
    removing: Int32s
    adding_offsets: Int32s
    adding: Int32s
    elr_offsets: Int32s
    elr: Int32s
    last_known_elr_offsets: Int32s
    last_known_elr: Int32s
    _n: int

    def __init__(self, *, partition_id: Int32s, leader: Int32s, leader_epoch: Int32s, partition_epoch: Int32s,
                 leader_recovery_state: npt.NDArray[np.int8],
                 replicas_offsets: Int32s, replicas: Int32s,
                 directories_offsets: Int32s, directories: npt.NDArray[np.uint8],
                 isr_offsets: Int32s, isr: Int32s, removing_offsets: Int32s, removing: Int32s,
                 adding_offsets: Int32s, adding: Int32s, elr_offsets: Int32s, elr: Int32s,
                 last_known_elr_offsets: Int32s, last_known_elr: Int32s) -> None:
        given: dict[str, np.ndarray[Any, Any]] = dict(
            partition_id=partition_id, leader=leader, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
            leader_recovery_state=leader_recovery_state,
            replicas_offsets=replicas_offsets, replicas=replicas,
            directories_offsets=directories_offsets, directories=directories,
            isr_offsets=isr_offsets, isr=isr, removing_offsets=removing_offsets, removing=removing,
            adding_offsets=adding_offsets, adding=adding, elr_offsets=elr_offsets, elr=elr,
            last_known_elr_offsets=last_known_elr_offsets, last_known_elr=last_known_elr)
        n = _length(partition_id, "partition_id")
        for name, dtype in SCALAR_COLUMNS.items():
            _expect(given[name], name, dtype, (n,))
        for name in LIST_COLUMNS:
            _expect(given[name + "_offsets"], name + "_offsets", np.int32, (n + 1,))
            values = given[name]
            if name == "directories":
                if not isinstance(values, np.ndarray) or values.ndim != 2 or values.shape[1:] != (16,):
                    raise ValueError(f"PartitionBlock column directories: expected uint8[k, 16], got "
                                     f"{_describe(values)}")
                _expect(values, name, np.uint8, values.shape)
            else:
                _expect(values, name, np.int32, None)
        for name, array in given.items():
            if array.flags.writeable:
                array.flags.writeable = False
            _set(self, name, array)
        _set(self, "_n", n)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("PartitionBlock is immutable")

    # -- building ------------------------------------------------------------------------
    @classmethod
    def from_columns(cls, table: Any, lo: int = 0, hi: int | None = None) -> "PartitionBlock":
        """Rows ``lo .. hi - 1`` of a decoded PartitionRecord table
        (:class:`kraft_storage.messages.columns.RecordTypeColumns`), as they are: numpy views of
        its columns (no copy; offsets keep their place in the whole decode).  The caller
        orders and groups the rows (by topic, then partition id) and calls :meth:`check` on
        input it has not validated."""
        c = table.columns
        hi = len(table) if hi is None else hi
        if not 0 <= lo <= hi <= len(table):
            raise ValueError(f"PartitionBlock.from_columns: rows {lo}..{hi} outside a table of {len(table)}")
        lists: dict[str, np.ndarray] = {}
        for name, (_slot, field) in LIST_COLUMNS.items():
            column = c[field]
            lists[name + "_offsets"] = column.offsets[lo:hi + 1]
            lists[name] = column.child.values
        return cls(partition_id=c["partition_id"].values[lo:hi], leader=c["leader"].values[lo:hi],
                   leader_epoch=c["leader_epoch"].values[lo:hi], partition_epoch=c["partition_epoch"].values[lo:hi],
                   leader_recovery_state=c["leader_recovery_state"].values[lo:hi], **lists)

    @classmethod
    def from_registrations(cls, partition_ids: Sequence[int],
                           registrations: Sequence[PartitionRegistration]) -> "PartitionBlock":
        """A block of the given partitions, row ``i`` = ``registrations[i]`` under
        ``partition_ids[i]`` (the caller gives them grouped and sorted).  Directories that are
        all MIGRATING are stored as none (the row reads back as MIGRATING per replica).  For
        tests, small blocks and compaction: it walks the registrations in Python."""
        if len(partition_ids) != len(registrations):
            raise ValueError(f"PartitionBlock.from_registrations: {len(partition_ids)} partition ids for "
                             f"{len(registrations)} registrations")
        columns: dict[str, Any] = {
            "partition_id": _int32s(partition_ids),
            "leader": _int32s(r.leader for r in registrations),
            "leader_epoch": _int32s(r.leader_epoch for r in registrations),
            "partition_epoch": _int32s(r.partition_epoch for r in registrations),
            "leader_recovery_state": np.fromiter((int(r.leader_recovery_state) for r in registrations), np.int8),
        }
        for name, (slot, _field) in LIST_COLUMNS.items():
            lists: list[Sequence[Any]] = [getattr(r, slot) for r in registrations]
            if name == "directories":
                lists = [() if all(d == _MIGRATING for d in ds) else ds for ds in lists]
            lengths = np.fromiter((len(x) for x in lists), np.int64, len(lists))
            offsets = np.zeros(len(lists) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            if offsets[-1] > np.iinfo(np.int32).max:
                raise ValueError(f"PartitionBlock.from_registrations: column {name} has {offsets[-1]} entries, "
                                 "more than int32 offsets address")
            columns[name + "_offsets"] = offsets.astype(np.int32)
            flat = [v for x in lists for v in x]
            if name == "directories":
                raw = b"".join(d.bytes for d in flat)
                columns[name] = np.frombuffer(raw, np.uint8).reshape(len(flat), 16).copy()
            else:
                columns[name] = _int32s(flat)
        return cls(**columns)

    # -- reading -------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays this block holds, each distinct buffer once (a block sliced
        from a bigger decode counts that decode's value arrays whole: it keeps them alive)."""
        seen: set[int] = set()
        total = 0
        for name in self.__slots__[:-1]:
            array: np.ndarray = getattr(self, name)
            base = array
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) in seen:
                continue
            seen.add(id(base))
            total += base.nbytes
        return total

    def row_of(self, partition_id: int, start: int = 0, stop: int | None = None) -> int:
        """The row of ``partition_id`` among rows ``start .. stop - 1`` (one topic's, sorted by
        partition id), or -1.  O(1) when the topic's partition ids are dense from 0 (the usual
        case), else a binary search."""
        stop = self._n if stop is None else stop
        row = start + partition_id
        pids = self.partition_id
        if 0 <= partition_id and row < stop and pids[row] == partition_id:
            return row
        i = start + int(np.searchsorted(pids[start:stop], partition_id))
        return i if i < stop and pids[i] == partition_id else -1

    def registration(self, row: int) -> PartitionRegistration:
        """Row ``row`` as the PartitionRegistration ``from_record`` makes of its PartitionRecord
        (directories included: none reads as one MIGRATING per replica).  The row must be
        valid (:meth:`check`): this does not re-check it."""
        if not 0 <= row < self._n:
            raise IndexError(f"PartitionBlock row {row} out of range (0..{self._n - 1})")
        # one row: ``item`` reads of the offsets, a slice only for a non-empty list (most are
        # empty), about half the cost of the bulk path's slicing for a single row
        replicas = _one(self.replicas_offsets, self.replicas, row)
        a, b = self.directories_offsets.item(row), self.directories_offsets.item(row + 1)
        if a == b:
            directories: tuple[Uuid, ...] = DirectoryId.migrating_tuple(len(replicas))
        else:
            raw = self.directories[a:b].tobytes()
            directories = tuple(_directory(raw[k:k + 16]) for k in range(0, len(raw), 16))
        reg = _new_object(PartitionRegistration)
        _set(reg, "replicas", replicas)
        _set(reg, "directories", directories)
        _set(reg, "isr", _one(self.isr_offsets, self.isr, row))
        _set(reg, "removing_replicas", _one(self.removing_offsets, self.removing, row))
        _set(reg, "adding_replicas", _one(self.adding_offsets, self.adding, row))
        _set(reg, "leader", self.leader.item(row))
        _set(reg, "leader_recovery_state", _RECOVERY[self.leader_recovery_state.item(row)])
        _set(reg, "leader_epoch", self.leader_epoch.item(row))
        _set(reg, "partition_epoch", self.partition_epoch.item(row))
        _set(reg, "elr", _one(self.elr_offsets, self.elr, row))
        _set(reg, "last_known_elr", _one(self.last_known_elr_offsets, self.last_known_elr, row))
        return reg

    def registrations(self, start: int = 0, stop: int | None = None) -> list[PartitionRegistration]:
        """Rows ``start .. stop - 1`` as registrations (see :meth:`registration`), made in bulk
        (:meth:`registrations_at`)."""
        stop = self._n if stop is None else stop
        if not 0 <= start <= stop <= self._n:
            raise IndexError(f"PartitionBlock rows {start}..{stop} out of range (0..{self._n})")
        return self._registrations(None, start, stop)

    def registrations_at(self, rows: npt.NDArray[np.integer[Any]]) -> list[PartitionRegistration]:
        """The given rows (any order, repeats allowed) as registrations: a few numpy calls per
        column for all of them, the tuples and the objects made by the ``_bulk_objects`` kernel
        (about a microsecond a registration, whatever the number of topics the rows belong to).
        The registrations are untracked by the cyclic collector (immutable ints and Uuids)."""
        rows = np.asarray(rows, dtype=np.int64)
        if rows.ndim != 1:
            raise ValueError(f"PartitionBlock.registrations_at: rows must be 1-d, got shape {rows.shape}")
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self._n):
            raise IndexError(f"PartitionBlock rows out of range (0..{self._n - 1})")
        return self._registrations(rows, 0, 0)

    def merged_isr_leader(self, rows: npt.NDArray[np.int64], isr: Sequence[tuple[int, ...] | None],
                          leader: Sequence[int | None], leader_epoch_add: Sequence[int],
                          partition_epoch_add: Sequence[int]) -> list[PartitionRegistration]:
        """The given rows (valid, any order) as registrations with ISR/leader-only changes merged
        in: ``isr[i]`` replaces row ``i``'s ISR unless None, ``leader[i]`` its leader unless
        None, and the epochs grow by the counts given -- what ``registration(row).merge(...)``
        of each change in turn gives, made in bulk with no registration of the old row (the
        loader's replay of a broker's shutdown, :mod:`~kraft_node.metadata.image.change_runs`).
        Epochs are added in Python ints (no int32 wrap)."""
        m = len(rows)
        if not (len(isr) == len(leader) == len(leader_epoch_add) == len(partition_epoch_add) == m):
            raise ValueError(f"PartitionBlock.merged_isr_leader: {m} rows but columns of other lengths")
        regs = self._registrations(np.asarray(rows, np.int64), 0, 0, merged=(isr, leader, leader_epoch_add,
                                                                              partition_epoch_add))
        return regs

    def _gather(self, name: str, rows: Any, start: int, stop: int) -> tuple[np.ndarray, Any]:
        """(offsets from 0 of the selected rows' lists, the positions of their values): a slice
        for a contiguous range, an index array otherwise."""
        offsets = getattr(self, name + "_offsets")
        if rows is None:
            o = offsets[start:stop + 1].astype(np.int64)
            return o - o[0], slice(int(o[0]), int(o[-1]))
        lo = offsets[rows].astype(np.int64)
        lens = offsets[rows + 1].astype(np.int64) - lo
        new = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lens, out=new[1:])
        return new, np.arange(int(new[-1]), dtype=np.int64) - np.repeat(new[:-1] - lo, lens)

    def _tuples(self, name: str, rows: Any, start: int, stop: int, m: int) -> list[tuple[Any, ...]]:
        if not len(getattr(self, name)):  # no row of the block has one (usual for reassignment and ELR)
            return [()] * m
        new, where = self._gather(name, rows, start, stop)
        if new[-1] == 0:
            return [()] * m
        values: list[Any] = getattr(self, name)[where].tolist()
        result: list[tuple[Any, ...]] = _objects.tuples(new, values, True)
        return result

    def _registrations(self, rows: Any, start: int, stop: int,
                       merged: tuple[Any, Any, Any, Any] | None = None) -> list[PartitionRegistration]:
        m = stop - start if rows is None else len(rows)
        if m == 0:
            return []
        pick: Any = slice(start, stop) if rows is None else rows
        replicas = self._tuples("replicas", rows, start, stop, m)
        new, where = self._gather("directories", rows, start, stop) if len(self.directories) else (None, None)
        if new is None or new[-1] == 0:
            directories: list[tuple[Uuid, ...]] = [_migrating(len(r)) for r in replicas]
        else:
            raw = np.ascontiguousarray(self.directories[where])
            keys = raw.view(np.dtype((np.void, 16))).ravel()
            uniq, inverse = np.unique(keys, return_inverse=True)
            objs = np.array([_directory(u.tobytes()) for u in uniq] + [None], dtype=object)[:-1]
            directories = _objects.tuples(new, objs[inverse.ravel()].tolist(), True)
            lens = np.diff(new)
            for i in np.flatnonzero(lens == 0).tolist():
                directories[i] = _migrating(len(replicas[i]))
        states = self.leader_recovery_state[pick]
        if int(states.min()) < 0 or int(states.max()) > 1:
            raise ValueError("PartitionBlock: a leader_recovery_state other than 0 or 1 among the rows read "
                             "(check() names it)")
        if merged is None:
            isr = self._tuples("isr", rows, start, stop, m)
            leader: list[int] = self.leader[pick].tolist()
            leader_epoch: list[int] = self.leader_epoch[pick].tolist()
            partition_epoch: list[int] = self.partition_epoch[pick].tolist()
        else:  # merged_isr_leader's changes over the rows
            new_isr, new_leader, leader_add, epoch_add = merged
            isr = [i for i in new_isr] if None not in new_isr else \
                [o if i is None else i for i, o in zip(new_isr, self._tuples("isr", rows, start, stop, m))]
            leader = [o if x is None else x for x, o in zip(new_leader, self.leader[pick].tolist())]
            leader_epoch = [e + a for e, a in zip(self.leader_epoch[pick].tolist(), leader_add)]
            partition_epoch = [e + a for e, a in zip(self.partition_epoch[pick].tolist(), epoch_add)]
        columns = (replicas, directories, isr,
                   self._tuples("removing", rows, start, stop, m), self._tuples("adding", rows, start, stop, m),
                   leader, _RECOVERY_OBJECTS[states].tolist(), leader_epoch, partition_epoch,
                   self._tuples("elr", rows, start, stop, m), self._tuples("last_known_elr", rows, start, stop, m))
        result: list[PartitionRegistration] = _objects.new_objects(PartitionRegistration, _REG_SLOTS, columns, True)
        return result

    def iter_rows(self, start: int = 0, stop: int | None = None,
                  chunk: int = 4096) -> Iterator[tuple[int, PartitionRegistration]]:
        """(partition id, registration) of rows ``start .. stop - 1``, materialized ``chunk``
        rows at a time (a snapshot writer's walk over a million rows in bounded memory)."""
        stop = self._n if stop is None else stop
        for a in range(start, stop, chunk):
            b = min(stop, a + chunk)
            yield from zip(self.partition_id[a:b].tolist(), self._registrations(None, a, b))

    # -- validation ----------------------------------------------------------------------
    def check(self, ranges: Iterable[tuple[int, int]] | None = None) -> None:
        """Raise ValueError naming the first bad row and column: offsets that go backwards or
        past their values, a negative partition id, a leader recovery state other than 0 or
        1, directories that do not pair up with the replicas (neither none nor one per
        replica).  ``ranges``: ``(start, stop)`` row ranges (one per topic) whose partition ids
        must be strictly increasing."""
        n = self._n
        if n and int(self.partition_id.min()) < 0:
            row = int(np.argmax(self.partition_id < 0))
            raise ValueError(f"PartitionBlock row {row}: partition_id {int(self.partition_id[row])} is negative")
        bad = (self.leader_recovery_state != 0) & (self.leader_recovery_state != 1)
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"PartitionBlock row {row}: leader_recovery_state "
                             f"{int(self.leader_recovery_state[row])} is not a valid leader recovery state")
        lengths: dict[str, np.ndarray] = {}
        for name in LIST_COLUMNS:
            offsets = getattr(self, name + "_offsets")
            values = getattr(self, name)
            if offsets[0] < 0:
                raise ValueError(f"PartitionBlock column {name}_offsets: first offset {int(offsets[0])} is negative")
            steps = np.diff(offsets.astype(np.int64))
            if n and steps.min() < 0:
                row = int(np.argmax(steps < 0))
                raise ValueError(f"PartitionBlock row {row}: {name}_offsets go backwards "
                                 f"({int(offsets[row])} -> {int(offsets[row + 1])})")
            if int(offsets[-1]) > len(values):
                raise ValueError(f"PartitionBlock column {name}: offsets end at {int(offsets[-1])}, past its "
                                 f"{len(values)} values")
            lengths[name] = steps
        dl, rl = lengths["directories"], lengths["replicas"]
        bad = (dl != 0) & (dl != rl)
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(f"PartitionBlock row {row}: {int(dl[row])} directories for {int(rl[row])} replicas "
                             "(The lengths for replicas and directories do not match.)")
        for start, stop in ranges or ():
            if not 0 <= start <= stop <= n:
                raise ValueError(f"PartitionBlock range {start}..{stop} outside 0..{n}")
            pids = self.partition_id[start:stop]
            if len(pids) > 1:
                down = np.diff(pids.astype(np.int64)) <= 0
                if down.any():
                    row = start + int(np.argmax(down)) + 1
                    raise ValueError(f"PartitionBlock row {row}: partition_id {int(self.partition_id[row])} "
                                     f"does not follow {int(self.partition_id[row - 1])} in rows {start}..{stop}")

    def __repr__(self) -> str:
        return f"PartitionBlock({self._n} rows, {self.nbytes} bytes)"


def _length(array: object, name: str) -> int:
    if not isinstance(array, np.ndarray) or array.ndim != 1:
        raise ValueError(f"PartitionBlock column {name}: expected a 1-d numpy array, got {_describe(array)}")
    return len(array)


def _expect(array: object, name: str, dtype: type[np.generic], shape: tuple[int, ...] | None) -> None:
    if not isinstance(array, np.ndarray):
        raise ValueError(f"PartitionBlock column {name}: expected a numpy array, got {_describe(array)}")
    if array.dtype != np.dtype(dtype):
        raise ValueError(f"PartitionBlock column {name}: expected dtype {np.dtype(dtype)}, got {array.dtype}")
    if shape is None:
        if array.ndim != 1:
            raise ValueError(f"PartitionBlock column {name}: expected a 1-d array, got shape {array.shape}")
    elif array.shape != shape:
        raise ValueError(f"PartitionBlock column {name}: expected shape {shape}, got {array.shape}")


def _describe(value: object) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype}{list(value.shape)}"
    return type(value).__name__
