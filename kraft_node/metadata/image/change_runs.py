"""Runs of ISR/leader-only PartitionChangeRecords replayed into a ``TopicsDelta`` in columns.

Why: when a broker is fenced or shuts down, the controller writes tens of thousands of
PartitionChangeRecords that change only a partition's ISR and leader, in batches of at most
200.  Every node's loader replays them while caught up; record at a time each one costs a
typed decode, four dispatches, a :class:`PartitionRegistration` materialised from the block
(directories included) and a merge -- the largest single cost of a controlled shutdown on every
node (``benchmarks/results/s16/controller_bulk.md``).  Here a batch's change records are decoded
by the generated columnar decoder (one call), and a run of them is folded per partition with
numpy: the final ISR is the last one given, the leader the last one named, the leader epoch
grows by the number of records naming a leader and the partition epoch by the number of
records.  One registration is made per changed partition (not per record), in bulk.

Semantics: exactly ``TopicsDelta.replay`` of each record in order (the property tests in
``tests/image/test_change_runs.py`` compare images, deltas and ``local_changes`` of every
broker).  That holds because a *simple* change (:func:`simple_mask`: replicas, directories,
adding/removing replicas, ELR, last known ELR all null and no leader recovery state change)
leaves every other field of the registration as it was, so the records of one partition in a
run compose as above whatever their order among other partitions' records, and:

* a partition enters its topic delta's ``partition_changes`` at its first record (dict
  insertion order: the order of first records), a topic enters ``changed_topics`` likewise;
* the ELR election count of a partition grows by the records whose leader is in the ELR (the
  ELR is the one before the run: simple changes keep it); no simple change counts as an
  unclean election (its recovery state is "no change");
* anything that would fail (a topic nobody has or this delta deleted, a partition nobody has)
  is found before anything is changed: :func:`replay_change_run` then returns False and the
  caller replays the run record at a time, which fails at the right record with Kafka's
  message.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from kraft_node.metadata.controller.replication_control import (
    NO_LEADER_CHANGE,
    PartitionRegistration,
    _directories_or_migrating,
)
from kraft_node.metadata.image.bulk import framed_records
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.topics import TopicDelta, TopicsDelta
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.columns import decode_bodies
from kraft_storage.messages.runtime import Uuid

__all__ = ["ChangeColumns", "change_runs", "replay_change_run", "simple_mask"]

_CHANGE = m.PartitionChangeRecord.API_KEY
#: list fields a simple change leaves null
_NULL_FIELDS = ("replicas", "removing_replicas", "adding_replicas", "directories", "eligible_leader_replicas",
                "last_known_elr")
_REG_SLOTS = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "leader",
              "leader_recovery_state", "leader_epoch", "partition_epoch", "elr", "last_known_elr")
_objects = load("_bulk_objects", "kraft_node")
Int64s = npt.NDArray[np.int64]


class ChangeColumns:
    """The simple PartitionChangeRecords of a batch as columns (row ``j`` is record
    ``index[j]`` of the batch): topic ids as 16-byte keys, partition id, leader, and the ISR
    (``isr_valid`` false: null, the ISR is kept)."""

    __slots__ = ("index", "topic_key", "topic_raw", "partition_id", "leader", "isr_offsets", "isr_values",
                 "isr_valid")

    def __init__(self, table: Any, simple: npt.NDArray[np.bool_]) -> None:
        c = table.columns
        rows = np.flatnonzero(simple)
        self.index: Int64s = np.asarray(table.rows, np.int64)[rows]
        raw = np.ascontiguousarray(c["topic_id"].values[rows])
        self.topic_raw = raw
        self.topic_key = raw.view(np.dtype((np.void, 16))).ravel()
        self.partition_id = c["partition_id"].values[rows].astype(np.int64)
        self.leader = c["leader"].values[rows].astype(np.int64)
        isr = c["isr"]
        starts = isr.offsets.astype(np.int64)[rows]
        ends = isr.offsets.astype(np.int64)[rows + 1]
        self.isr_offsets = np.stack((starts, ends))
        self.isr_values = isr.child.values
        valid = isr.valid
        self.isr_valid = np.ones(len(rows), bool) if valid is None else np.asarray(valid, bool)[rows]

    def isr_tuples(self, rows: Int64s) -> list[tuple[int, ...]]:
        """The ISR of each of ``rows`` (all non-null) as tuples."""
        starts, ends = self.isr_offsets[0][rows], self.isr_offsets[1][rows]
        lens = ends - starts
        new = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lens, out=new[1:])
        where = np.arange(int(new[-1]), dtype=np.int64) - np.repeat(new[:-1] - starts, lens)
        result: list[tuple[int, ...]] = _objects.tuples(new, self.isr_values[where].tolist(), True)
        return result


def simple_mask(table: Any) -> npt.NDArray[np.bool_]:
    """Which rows of a decoded PartitionChangeRecord table change only the ISR and the leader."""
    c = table.columns
    simple = np.asarray(c["leader_recovery_state"].values == -1, bool)
    for name in _NULL_FIELDS:
        valid = c[name].valid
        if valid is not None:
            simple &= ~np.asarray(valid, bool)
        else:  # no validity mask: every entry is present (not null)
            simple &= False
    return simple


def change_runs(values: Sequence[bytes], min_run: int) -> tuple[ChangeColumns, list[tuple[int, int, int, int]]] | None:
    """The runs of at least ``min_run`` consecutive simple PartitionChangeRecords among a batch's
    record ``values``: (columns, [(first record, end record, first column row, end column
    row)]), or None when there is none (or the records do not decode: the record-at-a-time
    path then reports the bad one)."""
    if len(values) < min_run:
        return None
    fr = framed_records(values)
    is_change = fr.api_key == _CHANGE
    if int(np.count_nonzero(is_change)) < min_run:
        return None
    try:
        decoded = decode_bodies(fr.data, fr.body_pos, fr.body_end, fr.api_key, fr.version,
                                rows=np.flatnonzero(is_change), types=(_CHANGE,))
    except Exception:  # noqa: BLE001 -- the typed decode names the record and offset
        return None
    table = decoded.tables.get(_CHANGE)
    if table is None:
        return None
    cols = ChangeColumns(table, simple_mask(table))
    marks = np.zeros(len(values) + 2, np.int8)
    marks[cols.index + 1] = 1
    edges = np.flatnonzero(np.diff(marks))
    runs: list[tuple[int, int, int, int]] = []
    for a, b in zip(edges[0::2].tolist(), edges[1::2].tolist()):
        if b - a >= min_run:
            lo = int(np.searchsorted(cols.index, a))
            runs.append((a, b, lo, lo + b - a))
    return (cols, runs) if runs else None


def replay_change_run(delta: TopicsDelta, cols: ChangeColumns, lo: int, hi: int) -> bool:
    """Replay column rows ``lo .. hi - 1`` (consecutive simple changes) into ``delta``, as
    ``delta.replay`` of each in order would.  False, and ``delta`` untouched, when one of them
    would fail (see the module doc)."""
    n = hi - lo
    pids = cols.partition_id[lo:hi]
    leaders = cols.leader[lo:hi]
    tfirst, tinv = _topics(cols.topic_raw[lo:hi])
    n_topics = len(tfirst)
    composite = (tinv << 32) | (pids & 0xFFFFFFFF)
    ukeys, first, inv = np.unique(composite, return_index=True, return_inverse=True)
    inv = inv.ravel()
    k = len(ukeys)
    count = np.bincount(inv, minlength=k)
    named = leaders != NO_LEADER_CHANGE
    leader_count = np.bincount(inv[named], minlength=k)
    positions = np.arange(n, dtype=np.int64)
    last_leader = np.full(k, -1, np.int64)
    np.maximum.at(last_leader, inv[named], positions[named])
    valid = cols.isr_valid[lo:hi]
    last_isr = np.full(k, -1, np.int64)
    np.maximum.at(last_isr, inv[valid], positions[valid])

    # -- phase 1: resolve every topic and previous registration (nothing changed yet) --------
    changed, image = delta._changed, delta.image
    by_id = image.topics_by_id
    topic_ids: list[Uuid] = []
    topic_deltas: list[TopicDelta | None] = []
    for t in range(n_topics):
        tid = Uuid(cols.topic_raw[lo + tfirst[t]].tobytes())
        td = changed.get(tid)
        if td is None:
            topic = by_id.get(tid)
            if topic is None or tid in delta._deleted:
                return False
        topic_ids.append(tid)
        topic_deltas.append(td)
    # keys are sorted by (topic, partition): topic t's keys are ukeys[bounds[t]:bounds[t + 1]].
    # Per topic in plain Python: a run has a few keys per topic (a broker is in ~10 partitions
    # of a 100-partition topic), where a numpy call's fixed cost would dominate.
    bounds = np.searchsorted(ukeys >> 32, np.arange(n_topics + 1)).tolist()
    key_pid: list[int] = pids[first].tolist()
    prev_regs: list[PartitionRegistration | None] = [None] * k
    block_rows: dict[int, tuple[PartitionBlock, list[int], list[int]]] = {}
    for t in range(n_topics):
        a, b = bounds[t], bounds[t + 1]
        td = topic_deltas[t]
        parts = (by_id[topic_ids[t]] if td is None else td.image).partitions
        changes = None if td is None else td._changes
        overrides = parts._overrides
        block = parts._block
        start, stop, dense = parts._start, parts._stop, parts._dense
        entry = None
        for j in range(a, b):
            q = key_pid[j]
            reg = changes.get(q) if changes else None
            if reg is None and overrides:
                reg = overrides.get(q)
            if reg is not None:
                prev_regs[j] = reg
                continue
            if block is None:
                return False
            if dense:
                row = start + q if 0 <= q < stop - start else -1
            else:
                row = block.row_of(q, start, stop) if q >= 0 else -1
            if row < 0:
                return False
            if entry is None:
                entry = block_rows.get(id(block))
                if entry is None:
                    entry = block_rows[id(block)] = (block, [], [])
            entry[1].append(j)
            entry[2].append(row)

    # -- the new registrations ---------------------------------------------------------------
    isr_keys = np.flatnonzero(last_isr >= 0)
    new_isr: list[tuple[int, ...] | None] = [None] * k
    if len(isr_keys):
        for j, isr in zip(isr_keys.tolist(), cols.isr_tuples(lo + last_isr[isr_keys])):
            new_isr[j] = isr
    has_leader = last_leader >= 0
    new_leader = np.where(has_leader, leaders[np.maximum(last_leader, 0)], 0).tolist()
    has_leader_list = has_leader.tolist()
    counts = count.tolist()
    leader_counts = leader_count.tolist()
    new_regs: list[Any] = [None] * k
    from_dict = [j for j in range(k) if prev_regs[j] is not None]
    if from_dict:
        prevs: list[Any] = [prev_regs[j] for j in from_dict]
        columns = (
            [p.replicas for p in prevs],
            _directories(prevs),
            [p.isr if new_isr[j] is None else new_isr[j] for j, p in zip(from_dict, prevs)],
            [p.removing_replicas for p in prevs],
            [p.adding_replicas for p in prevs],
            [new_leader[j] if has_leader_list[j] else p.leader for j, p in zip(from_dict, prevs)],
            [p.leader_recovery_state for p in prevs],
            [p.leader_epoch + leader_counts[j] for j, p in zip(from_dict, prevs)],
            [p.partition_epoch + counts[j] for j, p in zip(from_dict, prevs)],
            [p.elr for p in prevs],
            [p.last_known_elr for p in prevs],
        )
        made: list[PartitionRegistration] = _objects.new_objects(PartitionRegistration, _REG_SLOTS, columns, True)
        for j, reg in zip(from_dict, made):
            new_regs[j] = reg
    for block, block_keys, rows in block_rows.values():
        made = block.merged_isr_leader(np.array(rows, np.int64), [new_isr[j] for j in block_keys],
                                       [new_leader[j] if has_leader_list[j] else None for j in block_keys],
                                       [leader_counts[j] for j in block_keys], [counts[j] for j in block_keys])
        for j, reg in zip(block_keys, made):
            new_regs[j] = reg

    # ELR elections: records whose leader is in the partition's ELR (rare: most have none), in
    # the order of each partition's first such record (the order record-at-a-time counts them in)
    elr_hits: list[tuple[int, int, int]] = []  # (first hit, key, hits)
    for j in [j for j in range(k) if new_regs[j].elr]:
        elr = new_regs[j].elr
        positions = np.flatnonzero(inv == j)
        hit = [q for q, x in zip(positions.tolist(), leaders[positions].tolist()) if x in elr]
        if hit:
            elr_hits.append((hit[0], j, len(hit)))
    elr_hits.sort()

    # -- phase 2: into the delta, in record order ---------------------------------------------
    key_topic: list[int] = (ukeys >> 32).tolist()
    first_list: list[int] = first.tolist()
    for t in range(n_topics):  # topics are numbered in order of their first record
        td = topic_deltas[t]
        if td is None:
            tid = topic_ids[t]
            td = topic_deltas[t] = changed[tid] = TopicDelta(by_id[tid])
        a, b = bounds[t], bounds[t + 1]
        in_order = sorted(range(a, b), key=first_list.__getitem__)  # by first record
        td._changes.update(zip([key_pid[j] for j in in_order], [new_regs[j] for j in in_order]))
    for _first_hit, j, hits in elr_hits:
        td = topic_deltas[key_topic[j]]
        assert td is not None
        pid = key_pid[j]
        td._elr_elections[pid] = td._elr_elections.get(pid, 0) + hits
    return True


def _topics(raw: npt.NDArray[np.uint8]) -> tuple[list[int], Int64s]:
    """Each row's topic (16-byte ids, ``uint8[n, 16]``) as a number, topics numbered in order of
    their first row: (first row of each topic, the number of each row).  The controller writes a
    topic's changes together, so the work is per stretch of equal ids, not per row."""
    n = len(raw)
    starts = [0]
    if n > 1:
        starts += (np.flatnonzero((raw[1:] != raw[:-1]).any(axis=1)) + 1).tolist()
    numbers: dict[bytes, int] = {}
    first: list[int] = []
    stretch: list[int] = []
    for s in starts:
        key = raw[s].tobytes()
        t = numbers.get(key)
        if t is None:
            t = numbers[key] = len(first)
            first.append(s)
        stretch.append(t)
    lengths = [b - a for a, b in zip(starts, starts[1:] + [n])]
    return first, np.repeat(np.array(stretch, np.int64), lengths)


def _directories(prevs: list[Any]) -> list[tuple[Uuid, ...]]:
    """What ``merge`` keeps as each one's directories (Kafka's defaultToMigrating of the previous
    ones).  A registration's directories pair up with its replicas (its invariant), and then
    defaultToMigrating gives a tuple equal to them: they are kept as they are, with no walk over
    the Uuids; any other goes through the controller's function."""
    out: list[tuple[Uuid, ...]] = []
    for p in prevs:
        d = p.directories
        n = len(p.replicas)
        out.append(d if len(d) == n else _directories_or_migrating(d, n))
    return out
