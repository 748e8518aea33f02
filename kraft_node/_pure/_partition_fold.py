"""The partition fold: topic and partition records folded in log order into a partial delta
(the pure-Python twin of ``kraft_node._native._partition_fold``, and its oracle in the tests).

Why: replaying a long metadata log into the image record by record (decode an object, then
``MetadataDelta.replay``) runs at about 0.3M records/s; issue 23 asks for 2M/s on one core.
Half of a controller's log is PartitionChangeRecords, so the hot path takes them from the
generated columnar decoder's columns and folds them over a mutable table of partitions,
with no Python object per record.  The twin does the same, the slow way, and the tests hold
the two equal (same exported arrays, same errors).

What is folded: TopicRecord, RemoveTopicRecord, PartitionRecord and PartitionChangeRecord,
in log order (the four tables' ``rows`` merged), with ``PartitionRegistration.merge``'s rules:
a null field keeps its value; a leader of NO_LEADER_CHANGE (-2) keeps leader and leader epoch,
any other leader replaces it and bumps the leader epoch by one; the partition epoch always
grows by one; a leader recovery state of -1 keeps the state; directories that are empty or
all MIGRATING (the zero Uuid) read as one MIGRATING per replica (stored here as none).

A fold does not know the state before it (a Spark task folds its own segments), so each
partition it touches is an *entry* that is either

* absolute (``F_ABSOLUTE``): a PartitionRecord was folded; every field is known; or
* relative: only changes were folded; the entry keeps, per list field, the last value set
  (bit ``1 << i`` of ``list_set`` for ``LIST_FIELDS[i]``), the last leader set (``F_LEADER``),
  the number of leader changes in ``leader_epoch`` and of changes in ``partition_epoch``, and
  the last recovery state set (-1: none).

Composing two entries ``a`` then ``b`` (:meth:`PartitionFold.absorb`) takes ``b``'s fields where
``b`` set them and ``a``'s otherwise, and *adds* the epochs (an absolute ``a`` holds epochs, a
relative one counts: the sum is right either way).  So a log folded in one piece, or in pieces
absorbed in order, gives the same entries; absorbing the base image's partitions first and the
fold second is ``apply``.

Checks that need the state before the fold are kept as *pending* on the entry and decided when
it is composed over an entry that knows (the base, or an earlier piece):

* ``need_offset``: the first change's offset; the partition must exist below (Kafka: "Unable to
  find partition ...");
* the replicas/directories pairing (``PartitionRegistration`` refuses real directories whose
  count differs from the replicas'): while a fold has set the replicas but not the directories
  (*A steps*: the directories come from below), or real directories but not the replicas (*B
  steps*), each change is a check against the state below.  A run of steps is kept as
  (length of its first step, that step's offset, offset of the first step of another length):
  the first failing step against a known length ``L`` is the first step if its length is not
  ``L``, else the first step of another length -- exact, in O(1) space.

Topics: every topic id the fold touches has *incarnations* (``inc_*`` arrays), in log order: a
``BASE`` one stands for the topic as it was before the fold (its first record requiring it is at
``inc_first_offset``, of kind ``inc_first_kind``); a TopicRecord makes a ``CREATED`` one (name,
no partitions; an incarnation it replaces is ``SUPERSEDED``); a RemoveTopicRecord makes the
current one ``REMOVED`` (``inc_remove_offset``: the caller deletes the topic's configs there).

Errors: ``fold`` stops at the first record it can tell is wrong (a change for a partition its own
TopicRecord did not create, a record for a topic it removed, directories that do not pair with
the replicas, an unknown leader recovery state) and returns ``(offset, row, code, topic id,
partition id, detail)``; the state is then the one before that record, except that the
record's own requirements on the state below are registered first (so the caller, who decides
which error came first once the base is known, sees them).  ``absorb`` does not stop: it
returns the error of the lowest offset it found (the state after it is not meaningful).
"""
from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["PartitionFold", "LIST_FIELDS", "NO_LEADER_CHANGE", "F_ABSOLUTE", "F_LEADER", "INC_BASE", "INC_CREATED",
           "LIVE", "REMOVED", "SUPERSEDED", "K_PARTITION", "K_CHANGE", "K_REMOVE", "E_UNKNOWN_TOPIC",
           "E_UNKNOWN_PARTITION", "E_REMOVE_UNKNOWN_TOPIC", "E_RECORD_DIRECTORIES", "E_RECOVERY_STATE",
           "E_DIRECTORIES", "E_UNDECODABLE", "EXPORT_FIELDS"]

#: List fields of an entry, in the order of their ``list_set`` bits (PartitionBlock's list columns).
LIST_FIELDS = ("replicas", "directories", "isr", "removing", "adding", "elr", "last_known_elr")
NO_LEADER_CHANGE = -2
#: ``flags`` bits of an entry.
F_ABSOLUTE = 1
F_LEADER = 2
#: ``inc_kind``.
INC_BASE = 0
INC_CREATED = 1
#: ``inc_state``.
LIVE = 0
REMOVED = 1
SUPERSEDED = 2
#: ``inc_first_kind``: the record that first required a BASE incarnation.
K_PARTITION = 1
K_CHANGE = 2
K_REMOVE = 3
#: Error codes.
E_UNKNOWN_TOPIC = 1          # a PartitionRecord/PartitionChangeRecord for a topic that is not there
E_UNKNOWN_PARTITION = 2      # a PartitionChangeRecord for a partition that is not there
E_REMOVE_UNKNOWN_TOPIC = 3   # a RemoveTopicRecord for a topic that is not there
E_RECORD_DIRECTORIES = 4     # a record's own directories and replicas differ in count (detail: its replicas)
E_RECOVERY_STATE = 5         # a leader recovery state other than 0, 1 (or -1 in a change); detail: the value
E_DIRECTORIES = 6            # the merged registration's directories and replicas differ in count
E_UNDECODABLE = 7            # a raw PartitionChangeRecord body the generated decoder would refuse

_REPLICAS_BIT = 1
_DIRS_BIT = 2
_ALL_LISTS = (1 << len(LIST_FIELDS)) - 1
_ZERO16 = bytes(16)

#: The arrays of :meth:`PartitionFold.export` (and what :meth:`PartitionFold.absorb` takes), with
#: their dtypes; list columns ``X`` come with ``X_offsets`` (int32, one more than the entries).
EXPORT_FIELDS: dict[str, str] = {
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

Steps = tuple[int, int, int] | None   # (length of the first step, its offset, offset of the first other length)
Error = tuple[int, int, int, bytes, int, int]


class _Entry:
    """One partition's folded state (see the module doc)."""

    __slots__ = ("flags", "leader", "le", "pe", "lrs", "lists", "list_set", "need", "a", "b")

    def __init__(self, need: int) -> None:
        self.flags = 0
        self.leader = NO_LEADER_CHANGE
        self.le = 0
        self.pe = 0
        self.lrs = -1
        self.lists: list[tuple[Any, ...]] = [()] * len(LIST_FIELDS)
        self.list_set = 0
        self.need = need
        self.a: Steps = None
        self.b: Steps = None

    def copy(self) -> _Entry:
        new = _Entry(self.need)
        new.flags, new.leader, new.le, new.pe, new.lrs = self.flags, self.leader, self.le, self.pe, self.lrs
        new.lists = list(self.lists)
        new.list_set, new.a, new.b = self.list_set, self.a, self.b
        return new


def _concat(x: Steps, y: Steps) -> Steps:
    """Step runs ``x`` then ``y`` as one run."""
    if x is None:
        return y
    if y is None or x[2] >= 0:
        return x
    if y[0] != x[0]:
        return (x[0], x[1], y[1])
    return (x[0], x[1], y[2])


def _first_failure(steps: Steps, length: int) -> int:
    """Offset of the first step whose length is not ``length`` (-1: none)."""
    if steps is None:
        return -1
    return steps[1] if steps[0] != length else steps[2]


def _compose_check(a: _Entry, b: _Entry) -> tuple[int, Steps, Steps]:
    """Decide ``b``'s pending pairing checks against ``a``: (offset of the first failure or -1,
    the A and B runs the composition keeps pending)."""
    fail = -1
    run_a, run_b = a.a, a.b
    if b.a is not None:
        if a.list_set & _DIRS_BIT:
            if a.lists[1]:
                fail = _first_failure(b.a, len(a.lists[1]))
        else:
            run_a = _concat(run_a, b.a)
    if b.b is not None:
        if a.list_set & _REPLICAS_BIT:
            f = _first_failure(b.b, len(a.lists[0]))
            if f >= 0 and (fail < 0 or f < fail):
                fail = f
        else:
            run_b = _concat(run_b, b.b)
    return fail, run_a, run_b


def _compose_into(a: _Entry, b: _Entry, run_a: Steps, run_b: Steps) -> None:
    """``a`` becomes ``a`` then ``b`` (checks already decided)."""
    if b.flags & F_ABSOLUTE:
        a.flags = b.flags
        a.leader, a.le, a.pe, a.lrs = b.leader, b.le, b.pe, b.lrs
        a.lists = list(b.lists)
        a.list_set = b.list_set
    else:
        if b.flags & F_LEADER:
            a.leader = b.leader
            a.flags |= F_LEADER
        a.le += b.le
        a.pe += b.pe
        if b.lrs != -1:
            a.lrs = b.lrs
        if b.list_set:
            lists = a.lists
            for i in range(len(LIST_FIELDS)):
                if b.list_set & (1 << i):
                    lists[i] = b.lists[i]
            a.list_set |= b.list_set
    a.a, a.b = run_a, run_b


def _dirs(raw: bytes) -> tuple[bytes, ...]:
    """16-byte Uuids of ``raw``; all zero (all MIGRATING) or none: the empty tuple."""
    if not raw or raw.count(0) == len(raw):
        return ()
    return tuple(raw[k:k + 16] for k in range(0, len(raw), 16))


class PartitionFold:
    """The mutable fold state (see the module doc); one per piece of log, or per composition."""

    def __init__(self) -> None:
        self._inc_tid: list[bytes] = []
        self._inc_kind: list[int] = []
        self._inc_state: list[int] = []
        self._inc_first: list[int] = []
        self._inc_first_kind: list[int] = []
        self._inc_first_pid: list[int] = []
        self._inc_remove: list[int] = []
        self._inc_name: list[bytes] = []
        self._current: dict[bytes, int] = {}
        self._entries: dict[tuple[int, int], _Entry] = {}

    @property
    def entries(self) -> int:
        """Partitions held (of every incarnation)."""
        return len(self._entries)

    @property
    def incarnations(self) -> int:
        return len(self._inc_tid)

    # -- incarnations -------------------------------------------------------------------
    def _new_inc(self, tid: bytes, kind: int, state: int, first: int, first_kind: int, first_pid: int, remove: int,
                 name: bytes) -> int:
        i = len(self._inc_tid)
        self._inc_tid.append(tid)
        self._inc_kind.append(kind)
        self._inc_state.append(state)
        self._inc_first.append(first)
        self._inc_first_kind.append(first_kind)
        self._inc_first_pid.append(first_pid)
        self._inc_remove.append(remove)
        self._inc_name.append(name)
        self._current[tid] = i
        return i

    def _base_inc(self, tid: bytes, offset: int, kind: int, pid: int) -> int:
        """The current incarnation of ``tid``, made (BASE, required at ``offset``) if there is none;
        -1 when the current one is removed."""
        i = self._current.get(tid, -1)
        if i < 0:
            return self._new_inc(tid, INC_BASE, LIVE, offset, kind, pid, -1, b"")
        return i if self._inc_state[i] == LIVE else -1

    # -- folding records ----------------------------------------------------------------
    def fold(self, offsets: Any, topics: Any, removes: Any, partitions: Any, changes: Any,
             raw_changes: Any = None) -> Error | None:
        """Fold the rows of four record tables, merged in row order (rows index ``offsets``, each
        row's log offset).  Tables (None when absent): ``topics`` = (rows, topic_id uint8[m, 16],
        name_offsets, name_data); ``removes`` = (rows, topic_id); ``partitions`` = (rows,
        partition_id, topic_id, leader, leader_epoch, partition_epoch, leader_recovery_state,
        then offsets and values of each of LIST_FIELDS); ``changes`` = (rows, partition_id,
        topic_id, leader, leader_recovery_state, then offsets, values and valid mask (None: all
        valid) of each of LIST_FIELDS).  Or, instead of ``changes``, ``raw_changes`` = (data,
        rows, body_pos, body_end, version): the PartitionChangeRecord bodies, read in place
        (a body the generated columnar decoder would refuse stops the fold with
        E_UNDECODABLE: the caller lets that decoder raise its error).  Returns None, or the
        first error (module doc)."""
        if raw_changes is not None:
            if changes is not None:
                raise ValueError("fold: changes and raw_changes are exclusive")
            if len(raw_changes[1]):
                changes = raw_changes[1:]
        offs = np.asarray(offsets, np.int64)
        parts: list[np.ndarray] = []
        kinds: list[np.ndarray] = []
        for k, table in enumerate((topics, removes, partitions, changes)):
            if table is not None and len(table[0]):
                rows = np.asarray(table[0], np.int64)
                parts.append(rows)
                kinds.append(np.full(len(rows), k, np.int8))
        if not parts:
            return None
        rows_all = np.concatenate(parts)
        kind_all = np.concatenate(kinds)
        index_all = np.concatenate([np.arange(len(p)) for p in parts])
        order = np.argsort(rows_all, kind="stable")
        n = len(offs)
        if len(rows_all) and (rows_all.min() < 0 or rows_all.max() >= n):
            raise ValueError(f"a table row lies outside the {n} offsets")
        t_ids = None if topics is None else np.asarray(topics[1], np.uint8)
        t_noff = None if topics is None else np.asarray(topics[2]).tolist()
        t_data = None if topics is None else np.asarray(topics[3], np.uint8).tobytes()
        r_ids = None if removes is None else np.asarray(removes[1], np.uint8)
        p_cols = None if partitions is None else _partition_columns(partitions)
        c_cols = None
        raw: tuple[bytes, list[int], list[int], list[int]] | None = None
        if changes is not None and raw_changes is not None:
            data = raw_changes[0]
            buf = np.asarray(data).reshape(-1).view(np.uint8).tobytes() if isinstance(data, np.ndarray) else bytes(data)
            pos_l = np.asarray(raw_changes[2], np.int64).tolist()
            end_l = np.asarray(raw_changes[3], np.int64).tolist()
            if any(a < 0 or b < a or b > len(buf) for a, b in zip(pos_l, end_l)):
                raise ValueError(f"raw_changes: a body lies outside the {len(buf)}-byte buffer")
            raw = (buf, pos_l, end_l, np.asarray(raw_changes[4]).tolist())
        elif changes is not None:
            c_cols = _change_columns(changes)
        for j in order.tolist():
            kind = int(kind_all[j])
            i = int(index_all[j])
            row = int(rows_all[j])
            offset = int(offs[row])
            if kind == 0:
                assert t_ids is not None and t_noff is not None and t_data is not None
                self._topic(t_ids[i].tobytes(), t_data[t_noff[i]:t_noff[i + 1]], offset)
                err = None
            elif kind == 1:
                assert r_ids is not None
                err = self._remove(r_ids[i].tobytes(), offset, row)
            elif kind == 2:
                assert p_cols is not None
                err = self._partition(p_cols, i, offset, row)
            elif raw is not None:
                parsed = _parse_change(raw[0], raw[1][i], raw[2][i], raw[3][i])
                if parsed is None:
                    return (offset, row, E_UNDECODABLE, _ZERO16, -1, 0)
                err = self._change_record(*parsed, offset, row)
            else:
                assert c_cols is not None
                err = self._change(c_cols, i, offset, row)
            if err is not None:
                return err
        return None

    def _topic(self, tid: bytes, name: bytes, offset: int) -> None:
        i = self._current.get(tid, -1)
        if i >= 0 and self._inc_state[i] == LIVE:
            self._inc_state[i] = SUPERSEDED
        self._new_inc(tid, INC_CREATED, LIVE, offset, 0, -1, -1, name)

    def _remove(self, tid: bytes, offset: int, row: int) -> Error | None:
        i = self._current.get(tid, -1)
        if i < 0:
            self._new_inc(tid, INC_BASE, REMOVED, offset, K_REMOVE, -1, offset, b"")
            return None
        if self._inc_state[i] != LIVE:
            return (offset, row, E_REMOVE_UNKNOWN_TOPIC, tid, -1, K_REMOVE)
        self._inc_state[i] = REMOVED
        self._inc_remove[i] = offset
        return None

    def _partition(self, c: dict[str, Any], i: int, offset: int, row: int) -> Error | None:
        tid = c["topic_id"][i].tobytes()
        pid = c["partition_id"][i]
        inc = self._base_inc(tid, offset, K_PARTITION, pid)
        if inc < 0:
            return (offset, row, E_UNKNOWN_TOPIC, tid, pid, K_PARTITION)
        lists: list[tuple[Any, ...]] = []
        for f, name in enumerate(LIST_FIELDS):
            lo, hi = c[name + "_offsets"][i], c[name + "_offsets"][i + 1]
            lists.append(c[name][lo:hi] if f != 1 else c[name][16 * lo:16 * hi])
        raw_dirs = lists[1]
        if raw_dirs and len(raw_dirs) != 16 * len(lists[0]):
            return (offset, row, E_RECORD_DIRECTORIES, tid, pid, len(lists[0]))
        lrs = c["leader_recovery_state"][i]
        if lrs not in (0, 1):
            return (offset, row, E_RECOVERY_STATE, tid, pid, lrs)
        e = _Entry(-1)
        e.flags = F_ABSOLUTE | F_LEADER
        e.leader = c["leader"][i]
        e.le = c["leader_epoch"][i]
        e.pe = c["partition_epoch"][i]
        e.lrs = lrs
        lists[1] = _dirs(raw_dirs)
        e.lists = [tuple(x) for x in lists]
        e.list_set = _ALL_LISTS
        old = self._entries.get((inc, pid))
        if old is None:
            self._entries[(inc, pid)] = e
        else:
            _compose_into(old, e, old.a, old.b)
        return None

    def _change(self, c: dict[str, Any], i: int, offset: int, row: int) -> Error | None:
        raw: list[Any] = [None] * len(LIST_FIELDS)
        for f, name in enumerate(LIST_FIELDS):
            valid = c[name + "_valid"]
            if valid is None or valid[i]:
                lo, hi = c[name + "_offsets"][i], c[name + "_offsets"][i + 1]
                raw[f] = c[name][lo:hi] if f != 1 else c[name][16 * lo:16 * hi]
        return self._change_record(c["topic_id"][i].tobytes(), c["partition_id"][i], c["leader"][i],
                                   c["leader_recovery_state"][i], raw, offset, row)

    def _change_record(self, tid: bytes, pid: int, leader: int, lrs: int, raw: list[Any], offset: int,
                       row: int) -> Error | None:
        """One change: ``raw[f]`` is list ``f``'s values (directories: 16 bytes each, joined), or
        None when the record leaves it unset."""
        inc = self._base_inc(tid, offset, K_CHANGE, pid)
        if inc < 0:
            return (offset, row, E_UNKNOWN_TOPIC, tid, pid, K_CHANGE)
        old = self._entries.get((inc, pid))
        if old is None:
            if self._inc_kind[inc] == INC_CREATED:
                return (offset, row, E_UNKNOWN_PARTITION, tid, pid, 0)
            old = self._entries[(inc, pid)] = _Entry(offset)
        b = _Entry(-1)
        for f in range(len(LIST_FIELDS)):
            if raw[f] is not None:
                b.list_set |= 1 << f
        if raw[0] is not None and raw[1] and len(raw[1]) != 16 * len(raw[0]):
            return (offset, row, E_RECORD_DIRECTORIES, tid, pid, len(raw[0]))
        if lrs not in (-1, 0, 1):
            return (offset, row, E_RECOVERY_STATE, tid, pid, lrs)
        if leader != NO_LEADER_CHANGE:
            b.flags = F_LEADER
            b.leader = leader
            b.le = 1
        b.pe = 1
        b.lrs = lrs
        for f in range(len(LIST_FIELDS)):
            if raw[f] is not None:
                b.lists[f] = _dirs(raw[f]) if f == 1 else tuple(raw[f])
        if raw[0] is not None and raw[1] is None:
            b.a = (len(raw[0]), offset, -1)
        elif raw[1] is not None and raw[0] is None and b.lists[1]:
            b.b = (len(b.lists[1]), offset, -1)
        fail, run_a, run_b = _compose_check(old, b)
        if fail >= 0:
            return (fail, row, E_DIRECTORIES, tid, pid, 0)
        _compose_into(old, b, run_a, run_b)
        return None

    # -- composing ----------------------------------------------------------------------
    def absorb(self, other: dict[str, Any]) -> Error | None:
        """Fold an exported piece (:meth:`export` of a later fold) on top of this state; the
        error of the lowest offset found, or None (it goes on past errors)."""
        found: list[Error] = []
        tids = np.asarray(other["inc_topic_id"], np.uint8)
        kinds = np.asarray(other["inc_kind"]).tolist()
        states = np.asarray(other["inc_state"]).tolist()
        firsts = np.asarray(other["inc_first_offset"]).tolist()
        first_kinds = np.asarray(other["inc_first_kind"]).tolist()
        first_pids = np.asarray(other["inc_first_partition"]).tolist()
        removes = np.asarray(other["inc_remove_offset"]).tolist()
        noffs = np.asarray(other["inc_name_offsets"]).tolist()
        ndata = np.asarray(other["inc_name_data"], np.uint8).tobytes()
        entries = _exported_entries(other)
        e_inc = np.asarray(other["inc"]).tolist()
        starts = np.searchsorted(np.asarray(other["inc"]), np.arange(len(kinds) + 1)).tolist()
        for k in range(len(kinds)):
            tid = tids[k].tobytes()
            mine = range(starts[k], starts[k + 1])
            if kinds[k] == INC_CREATED:
                cur = self._current.get(tid, -1)
                if cur >= 0 and self._inc_state[cur] == LIVE:
                    self._inc_state[cur] = SUPERSEDED
                inc = self._new_inc(tid, INC_CREATED, states[k], firsts[k], first_kinds[k], first_pids[k], removes[k],
                                    ndata[noffs[k]:noffs[k + 1]])
                for j in mine:
                    pid, e = entries[j]
                    self._entries[(inc, pid)] = e
                continue
            cur = self._current.get(tid, -1)
            if cur < 0:
                cur = self._new_inc(tid, INC_BASE, LIVE, firsts[k], first_kinds[k], first_pids[k], -1, b"")
            elif self._inc_state[cur] != LIVE:
                code = E_REMOVE_UNKNOWN_TOPIC if first_kinds[k] == K_REMOVE else E_UNKNOWN_TOPIC
                found.append((firsts[k], -1, code, tid, first_pids[k], first_kinds[k]))
                continue
            for j in mine:
                assert e_inc[j] == k
                pid, e = entries[j]
                old = self._entries.get((cur, pid))
                if old is None:
                    if self._inc_kind[cur] == INC_CREATED and e.need >= 0:
                        found.append((e.need, -1, E_UNKNOWN_PARTITION, tid, pid, 0))
                        continue
                    self._entries[(cur, pid)] = e
                    continue
                fail, run_a, run_b = _compose_check(old, e)
                if fail >= 0:
                    found.append((fail, -1, E_DIRECTORIES, tid, pid, 0))
                _compose_into(old, e, run_a, run_b)
            if states[k] == REMOVED:
                self._inc_state[cur] = REMOVED
                self._inc_remove[cur] = removes[k]
        return min(found, key=lambda err: err[0]) if found else None

    # -- exporting ----------------------------------------------------------------------
    def export(self, live_only: bool = False) -> dict[str, np.ndarray]:
        """The state as numpy arrays (EXPORT_FIELDS): every incarnation, and the entries of the
        BASE ones and of the live CREATED ones (``live_only``: of the live ones only), sorted by
        (incarnation, partition id)."""
        ninc = len(self._inc_tid)
        out: dict[str, np.ndarray] = {
            "inc_topic_id": np.frombuffer(b"".join(self._inc_tid), np.uint8).reshape(ninc, 16).copy(),
            "inc_kind": np.array(self._inc_kind, np.int8),
            "inc_state": np.array(self._inc_state, np.int8),
            "inc_first_offset": np.array(self._inc_first, np.int64),
            "inc_first_kind": np.array(self._inc_first_kind, np.int8),
            "inc_first_partition": np.array(self._inc_first_pid, np.int32),
            "inc_remove_offset": np.array(self._inc_remove, np.int64),
        }
        names = self._inc_name
        noffs = np.zeros(ninc + 1, np.int64)
        np.cumsum([len(x) for x in names], out=noffs[1:])
        out["inc_name_offsets"] = noffs.astype(np.int32)
        out["inc_name_data"] = np.frombuffer(b"".join(names), np.uint8).copy()
        keep = [(inc, pid) for (inc, pid) in self._entries
                if self._inc_state[inc] == LIVE or (not live_only and self._inc_kind[inc] == INC_BASE)]
        keep.sort()
        es = [self._entries[k] for k in keep]
        out["inc"] = np.array([k[0] for k in keep], np.int32)
        out["partition_id"] = np.array([k[1] for k in keep], np.int32)
        out["flags"] = np.array([e.flags for e in es], np.uint8)
        out["list_set"] = np.array([e.list_set for e in es], np.uint8)
        out["leader"] = np.array([e.leader for e in es], np.int32)
        out["leader_epoch"] = np.array([e.le for e in es], np.int32)
        out["partition_epoch"] = np.array([e.pe for e in es], np.int32)
        out["leader_recovery_state"] = np.array([e.lrs for e in es], np.int8)
        out["need_offset"] = np.array([e.need for e in es], np.int64)
        for run, prefix in (("a", "a"), ("b", "b")):
            steps = [getattr(e, run) for e in es]
            out[f"{prefix}_len"] = np.array([-1 if s is None else s[0] for s in steps], np.int32)
            out[f"{prefix}_off"] = np.array([-1 if s is None else s[1] for s in steps], np.int64)
            out[f"{prefix}2_off"] = np.array([-1 if s is None else s[2] for s in steps], np.int64)
        for f, name in enumerate(LIST_FIELDS):
            lists = [e.lists[f] for e in es]
            offs = np.zeros(len(lists) + 1, np.int64)
            np.cumsum([len(x) for x in lists], out=offs[1:])
            if offs[-1] > np.iinfo(np.int32).max:
                raise ValueError(f"PartitionFold.export: {name} has more entries than int32 offsets address")
            out[name + "_offsets"] = offs.astype(np.int32)
            if f == 1:
                raw = b"".join(d for x in lists for d in x)
                out[name] = np.frombuffer(raw, np.uint8).reshape(len(raw) // 16, 16).copy()
            else:
                out[name] = np.array([v for x in lists for v in x], np.int32)
        return out


def _uvarint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Kafka's unsigned varint at ``pos`` (at most 5 bytes, 32 bits): (value, next position), or (-1, pos)."""
    result = shift = 0
    q = pos
    while True:
        if q >= end:
            return -1, pos
        b = data[q]
        q += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            return -1, pos
    if result > 0xFFFFFFFF:
        return -1, pos
    return result, q


#: tag -> (list field, entry bytes, lowest version) of a PartitionChangeRecord's tagged lists
_CHANGE_LISTS = {0: (2, 4, 0), 2: (0, 4, 0), 3: (3, 4, 0), 4: (4, 4, 0), 6: (5, 4, 2), 7: (6, 4, 2), 8: (1, 16, 1)}


def _parse_change(data: bytes, pos: int, end: int, version: int) -> tuple[bytes, int, int, int, list[Any]] | None:
    """A PartitionChangeRecord body: (topic id, partition id, leader, leader recovery state, raw
    lists), or None where the generated columnar decoder would refuse it (the native kernel's
    rules, the same ones)."""
    if not 0 <= version <= 2 or end - pos < 20:
        return None
    pid = int.from_bytes(data[pos:pos + 4], "big", signed=True)
    tid = data[pos + 4:pos + 20]
    pos += 20
    leader, lrs = NO_LEADER_CHANGE, -1
    raw: list[Any] = [None] * len(LIST_FIELDS)
    nt, pos = _uvarint(data, pos, end)
    if nt < 0:
        return None
    last = -1
    for _ in range(nt):
        tag, pos = _uvarint(data, pos, end)
        if tag < 0 or tag <= last:
            return None
        last = tag
        size, pos = _uvarint(data, pos, end)
        if size < 0 or size > end - pos:
            return None
        tend = pos + size
        spec = _CHANGE_LISTS.get(tag)
        if spec is not None and version >= spec[2]:
            f, unit, _v = spec
            n, pos = _uvarint(data, pos, end)
            if n < 0:
                return None
            n -= 1
            if n >= 0:
                if n > end - pos or unit * n > end - pos:
                    return None
                chunk = data[pos:pos + unit * n]
                raw[f] = chunk if f == 1 else tuple(
                    int.from_bytes(chunk[k:k + 4], "big", signed=True) for k in range(0, len(chunk), 4))
                pos += unit * n
        elif tag == 1:
            if end - pos < 4:
                return None
            leader = int.from_bytes(data[pos:pos + 4], "big", signed=True)
            pos += 4
        elif tag == 5:
            if end - pos < 1:
                return None
            lrs = int.from_bytes(data[pos:pos + 1], "big", signed=True)
            pos += 1
        else:
            pos = tend
        if pos != tend:
            return None
    if pos != end:
        return None
    return tid, pid, leader, lrs, raw


def _partition_columns(t: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "partition_id": np.asarray(t[1]).tolist(), "topic_id": np.asarray(t[2], np.uint8),
        "leader": np.asarray(t[3]).tolist(), "leader_epoch": np.asarray(t[4]).tolist(),
        "partition_epoch": np.asarray(t[5]).tolist(), "leader_recovery_state": np.asarray(t[6]).tolist(),
    }
    for f, name in enumerate(LIST_FIELDS):
        c[name + "_offsets"] = np.asarray(t[7 + 2 * f]).tolist()
        values = t[8 + 2 * f]
        c[name] = np.asarray(values, np.uint8).tobytes() if f == 1 else np.asarray(values).tolist()
    return c


def _change_columns(t: Any) -> dict[str, Any]:
    c: dict[str, Any] = {
        "partition_id": np.asarray(t[1]).tolist(), "topic_id": np.asarray(t[2], np.uint8),
        "leader": np.asarray(t[3]).tolist(), "leader_recovery_state": np.asarray(t[4]).tolist(),
    }
    for f, name in enumerate(LIST_FIELDS):
        c[name + "_offsets"] = np.asarray(t[5 + 3 * f]).tolist()
        values = t[6 + 3 * f]
        c[name] = np.asarray(values, np.uint8).tobytes() if f == 1 else np.asarray(values).tolist()
        valid = t[7 + 3 * f]
        c[name + "_valid"] = None if valid is None else np.asarray(valid, bool).tolist()
    return c


def _exported_entries(x: dict[str, Any]) -> list[tuple[int, _Entry]]:
    """(partition id, entry) of each exported entry."""
    pids = np.asarray(x["partition_id"]).tolist()
    cols = {k: np.asarray(x[k]).tolist() for k in ("flags", "list_set", "leader", "leader_epoch", "partition_epoch",
                                                   "leader_recovery_state", "need_offset", "a_len", "a_off",
                                                   "a2_off", "b_len", "b_off", "b2_off")}
    lists = []
    for f, name in enumerate(LIST_FIELDS):
        offs = np.asarray(x[name + "_offsets"]).tolist()
        if f == 1:
            raw = np.asarray(x[name], np.uint8).tobytes()
            lists.append([tuple(raw[16 * k:16 * k + 16] for k in range(a, b)) for a, b in zip(offs, offs[1:])])
        else:
            vals = np.asarray(x[name]).tolist()
            lists.append([tuple(vals[a:b]) for a, b in zip(offs, offs[1:])])
    out = []
    for j, pid in enumerate(pids):
        e = _Entry(cols["need_offset"][j])
        e.flags = cols["flags"][j]
        e.list_set = cols["list_set"][j]
        e.leader = cols["leader"][j]
        e.le = cols["leader_epoch"][j]
        e.pe = cols["partition_epoch"][j]
        e.lrs = cols["leader_recovery_state"][j]
        e.lists = [lists[f][j] for f in range(len(LIST_FIELDS))]
        e.a = None if cols["a_off"][j] < 0 else (cols["a_len"][j], cols["a_off"][j], cols["a2_off"][j])
        e.b = None if cols["b_off"][j] < 0 else (cols["b_len"][j], cols["b_off"][j], cols["b2_off"][j])
        out.append((pid, e))
    return out
