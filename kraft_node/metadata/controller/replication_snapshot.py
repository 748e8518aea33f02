"""Topics and partitions in bulk: the columnar load of PartitionRecords and the bulk write of
their snapshot records (issue 22: a 1M-partition snapshot written, and loaded into controller
state, in about 2 s each; figures in benchmarks/results/s13/snapshot.md).

Why a module of its own: a snapshot of a million partitions is a million PartitionRecords.
Replayed the typed way (decode each value into a PartitionRecord object, then
``PartitionRegistration.from_record``, then the indexes) that was 65 µs a record; written the
typed way (``to_record`` builds a PartitionRecord, the generated codec encodes it) about ten.
Here both directions work on columns.

Load (:func:`replay_framed_values`, which the QuorumController's snapshot load and standby
commit call with each batch's record values):

1. the values are joined into one buffer, their frame headers read (``_frame.read_frames``)
   and the PartitionRecord bodies decoded by the generated columnar decoder
   (:func:`kraft_storage.messages.columns.decode_bodies`): one numpy column per field;
2. every other record is decoded the typed way, up front too, so a batch that does not decode
   fails before any of it is applied, as the per-record path does;
3. the records are applied in order, window by window: a window is a run of TopicRecords and
   PartitionRecords (what a snapshot's topic section and a topic creation's batch are).  When
   no record of the window can fail (its TopicRecords' names and ids are new, each partition's
   topic exists before it, ``from_record`` takes every record: ``_Batch._hoistable``), its
   TopicRecords are applied first and all its PartitionRecords in one call of
   :func:`replay_partition_columns`; else run by run, in order.  Other records go through
   ``replay_many``.  A run of fewer than :data:`MIN_COLUMNAR_RECORDS` PartitionRecords is
   replayed the typed way (the columnar call's fixed cost is about one timeline put per
   broker and directory its partitions name).

:func:`replay_partition_columns` builds the registrations without a PartitionRecord object
(tuples and objects made by the ``_bulk_objects`` kernel straight from the columns; rows with
equal replica lists share one replicas tuple and one directories tuple when a batch repeats
them) and the indexes with one bulk timeline put per (broker, call) and (directory, call):
entries grouped by (broker, topic) in numpy (:func:`_entries_by_key`: a radix sort by broker,
one-entry groups sharing one tuple per distinct entry), the (topic -> tuple) pairs put with
``put_many`` into the broker's map (``_BrokerIndex._members``, ``DirectoryPartitions._topics``:
this module writes those structures directly, in the layout their classes keep: keyed by the
topic id as a 16-character str, ``replication_control.topic_key``, an exact str, so that the
timeline's bulk put stays on its C path; a Uuid's ``__hash__`` is a Python call).  Only the
topics that had partitions before the call (a topic a batch boundary cut in two) are read back
to extend their entries; the rest are put without a read.  The kernel untracks what it makes
from the cyclic collector (immutable values of ints and Uuids: no cycles), and the collector
is paused while a batch is applied (:func:`paused_gc`), so a load does not walk its own
millions of new objects.

A snapshot load wraps its loop over the batches in :func:`deferred_indexes`: the ISR and
directory index entries of every batch are then kept as columns and put once, at the end of
the load (each broker's and directory's map sized once and filled while in cache, instead of
a cold visit per batch), or earlier, before any replay that may read those indexes
(:class:`_PendingIndexes`).  A bulk call whose topics are not contiguous (a topic coming back
after another one) is applied in segments (:func:`_apply_new`), so that each map lists its
topics in the order a record-at-a-time replay puts them.

The state is exactly what ``ReplicationControlManager.replay_partitions`` leaves for the typed
records (tests: the same registrations, the same index entries in the same order, the same
snapshot bytes; where ``replay_partitions`` lists a partition twice under a directory one
record names twice, this and the one-by-one replay list it once): a record for an existing
partition, a repeated partition id, or a record ``from_record`` refuses (directories that do
not pair up with the replicas, an unknown leader recovery state) is replayed the typed way at
its place in the order, so its error is Kafka's message and names its index.  A batch whose
values do not frame or decode as columns takes the per-record path whole, so its error is the
per-record path's.

Logging differs from ``replay_partitions`` on purpose: one INFO line per bulk call
("Replayed N PartitionRecord(s) for new partitions of K topic(s)"), the topics at DEBUG (a
million-partition snapshot would otherwise log ten thousand INFO lines).

Write (:func:`snapshot_records`, which ``ReplicationControlManager.snapshot_records``
returns): per topic, sorted by name, its TopicRecord and then its partitions sorted by id, as
before; the PartitionRecord values are encoded in chunks of about :data:`WRITE_CHUNK`
partitions by the kernel (:func:`encode_partition_records`: the registrations' slots read in
C, the layout below) and yielded as :class:`FramedRecord` values (``encode()`` is the bytes;
``message`` decodes them on demand), so the snapshot generator slices them as before.  A
registration with a tagged field to write (a RECOVERING leader, a non-empty ELR at v2), a list
of 127 or more entries, or real directories at v0 (Kafka's loss error) is encoded the typed
way; the bytes are the typed encoder's either way (tested).

PartitionRecord value layout of the kernel's encoder (flexible versions; lists are compact
arrays: a uvarint length + 1, here one byte since every list is shorter than 127)::

    u8 frame version (1) | u8 apiKey (3) | u8 version (0-2)
    int32 PartitionId | 16 bytes TopicId
    u8 n+1 | int32[n] Replicas | u8 n+1 | int32[n] Isr
    u8 n+1 | int32[n] RemovingReplicas | u8 n+1 | int32[n] AddingReplicas
    int32 Leader | int32 LeaderEpoch | int32 PartitionEpoch
    (v1+) u8 n+1 | 16 bytes[n] Directories
    u8 0 (no tagged fields)

(all integers big-endian).
"""
from __future__ import annotations

import gc
import logging
from contextlib import contextmanager
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_control import (
    _REPLICA_MASK,
    LEADER_FLAG,
    NO_LEADER,
    DirectoryId,
    DirectoryPartitions,
    LeaderRecoveryState,
    PartitionRegistration,
    PartitionReplayError,
    TopicControlInfo,
    TopicIdPartition,
    _fmt,
    as_metadata_version,
    remember_topic_uuids,
    topic_key,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, FramedRecord
from kraft_node.metadata.controller.topic_creation import has_collision_chars, unify_collision_chars
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.columns import RecordTypeColumns, decode_bodies
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap, TimelineHashSet, put_grouped

if TYPE_CHECKING:
    from kraft_node.metadata.controller.replication_control import ReplicationControlManager

log = logging.getLogger("kraft.controller.replication")

_objects = load("_bulk_objects", "kraft_node")
_frame = load("_frame")
#: The kernel in use (native or the twin).
IMPLEMENTATION: str = _objects.__name__

__all__ = ["FramedRecord", "IMPLEMENTATION", "MIN_COLUMNAR_RECORDS", "RecordFailure", "WRITE_CHUNK",
           "deferred_indexes", "encode_partition_records", "frame_values", "paused_gc", "replay_framed_values",
           "replay_partition_columns", "snapshot_records"]

PARTITION_RECORD = int(m.PartitionRecord.API_KEY)
TOPIC_RECORD = int(m.TopicRecord.API_KEY)
#: PartitionRecords are replayed as columns only in runs of at least this many (TopicRecords
#: between them are applied first, see ``_Batch.window``); fewer take the per-record path: the
#: columnar call costs a few dozen numpy calls and about one timeline put per broker and
#: directory its partitions name, ``replay_partitions`` about the same per topic.
MIN_COLUMNAR_RECORDS = 1024
#: About this many partitions are encoded per bulk call of the writer (a couple of ms): the
#: snapshot generator's slice that pulls a chunk pays for it.
WRITE_CHUNK = 2048

#: PartitionRegistration's slots in the order new_objects is given them.
_REG_SLOTS = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "leader",
              "leader_recovery_state", "leader_epoch", "partition_epoch", "elr", "last_known_elr")
_RECOVERY = np.array([LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING], dtype=object)
_RESERVED_DIRS = {d.bytes: d for d in (DirectoryId.MIGRATING, DirectoryId.UNASSIGNED, DirectoryId.LOST)}
_EMPTY = np.zeros(0, np.int64)


class RecordFailure(Exception):
    """Record ``index`` of the values given to :func:`replay_framed_values` could not be
    applied, or (``decoding``) decoded; ``cause`` is why.  The records before it were
    applied; none was when a value did not decode."""

    def __init__(self, index: int, cause: BaseException, *, decoding: bool = False):
        super().__init__(f"record {index}: {cause}")
        self.index = index
        self.cause = cause
        self.decoding = decoding


class paused_gc:  # noqa: N801 - used like a function: ``with paused_gc():``
    """The cyclic collector off for the block (restored as it was).  Bulk-built controller
    state has no reference cycles; what the block allocates is freed by reference counting.

    A class, not a ``@contextmanager`` generator: the controller enters it once per write
    event, and the generator's machinery cost ~2 us of a ~20 us no-op write (~10% of node 1's
    CPU in ``controller_tcp_bench.py writes``, session 21)."""

    __slots__ = ("_was",)

    def __enter__(self) -> None:
        self._was = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was:
            gc.enable()


# ---------------------------------------------------------------------------
# Load: values -> frames -> columns
# ---------------------------------------------------------------------------

class Frames:
    """A batch's record values joined into one buffer, with each value's frame header read:
    ``api_key``/``version`` are -1 where a value is not a metadata frame."""

    __slots__ = ("data", "end", "api_key", "version", "body_pos")

    def __init__(self, data: bytes, end: np.ndarray, api_key: np.ndarray, version: np.ndarray,
                 body_pos: np.ndarray):
        self.data, self.end, self.api_key, self.version, self.body_pos = data, end, api_key, version, body_pos


def frame_values(values: Sequence[bytes]) -> Frames:
    n = len(values)
    lens = np.fromiter(map(len, values), dtype=np.int64, count=n)
    end = np.cumsum(lens)
    pos = end - lens
    data = b"".join(values)
    k = np.empty(n, np.int16)
    v = np.empty(n, np.int16)
    b = np.empty(n, np.int64)
    _frame.read_frames(data, pos, lens.astype(np.int32), k, v, b)
    return Frames(data, end, k, v, b)


def _runs(mask: np.ndarray) -> list[tuple[bool, int, int]]:
    """Maximal runs of equal values of a boolean array: (value, start, end)."""
    n = len(mask)
    if n == 0:
        return []
    cuts = np.flatnonzero(mask[1:] != mask[:-1]) + 1
    starts = [0, *cuts.tolist()]
    ends = [*cuts.tolist(), n]
    return [(bool(mask[s]), s, e) for s, e in zip(starts, ends)]


def replay_framed_values(ctl: Any, values: Sequence[bytes], offset_of: Callable[[int], int]) -> None:
    """Replay a batch's record values into ``ctl`` (a QuorumController) in order, its
    PartitionRecords through :func:`replay_partition_columns` when the batch has enough of them
    and ``ctl`` has the ReplicationControlManager's bulk replayer for them; else (or when the
    values do not frame or decode as columns) decode every value and ``replay_many`` them, the
    per-record path.  A record that cannot be decoded or applied raises :class:`RecordFailure`
    with its index (as the per-record path: decoding fails before anything is applied)."""
    rc = _columnar_target(ctl)
    with paused_gc():
        if rc is not None and len(values) >= MIN_COLUMNAR_RECORDS:
            if _replay_columnar(ctl, rc, values, offset_of):
                return
        if rc is not None:
            _flush_indexes(rc)
        _replay_typed(ctl, values, offset_of)


def _columnar_target(ctl: Any) -> "ReplicationControlManager | None":
    """The controller's ReplicationControlManager when PartitionRecords are bulk-replayed by
    its ``replay_partitions`` (a controller with other managers keeps its own path)."""
    rc = getattr(ctl, "replication_control", None)
    if rc is None:
        return None
    fn = getattr(ctl, "_bulk_replayers", {}).get(PARTITION_RECORD)
    return rc if fn is not None and fn == rc.replay_partitions else None


def _replay_typed(ctl: Any, values: Sequence[bytes], offset_of: Callable[[int], int]) -> None:
    i = 0
    try:
        messages = []
        for value in values:
            messages.append(ctl._decode(value, offset_of(i)))
            i += 1
    except BaseException as exc:
        raise RecordFailure(i, exc, decoding=True) from exc
    _replay_messages(ctl, messages, offset_of, 0)


def _replay_messages(ctl: Any, messages: Sequence[Any], offset_of: Callable[[int], int], base: int) -> None:
    """``ctl.replay_many`` of ``messages`` (values ``base ..`` of the batch)."""
    try:
        ctl.replay_many(messages, lambda j: offset_of(base + j))
    except BaseException as exc:
        index = getattr(exc, "index", None)
        cause = getattr(exc, "cause", None)
        if index is None or cause is None:
            raise
        raise RecordFailure(base + int(index), cause) from exc


def _replay_columnar(ctl: Any, rc: "ReplicationControlManager", values: Sequence[bytes],
                     offset_of: Callable[[int], int]) -> bool:
    """The columnar path; False (nothing applied) when the batch should take the typed one."""
    fr = frame_values(values)
    keys = fr.api_key
    is_partition = keys == PARTITION_RECORD
    rows = np.flatnonzero(is_partition)
    if len(rows) < MIN_COLUMNAR_RECORDS:
        return False
    try:
        table = decode_bodies(fr.data, fr.body_pos, fr.end, keys, fr.version, rows=rows,
                              types=(PARTITION_RECORD,)).tables[PARTITION_RECORD]
    except Exception:
        return False  # the per-record path finds the first value that does not decode, and says why
    others: dict[int, Any] = {}
    try:
        for i in np.flatnonzero(~is_partition).tolist():
            others[i] = ctl._decode(values[i], offset_of(i))
    except Exception:
        return False
    batch = _Batch(ctl, rc, values, offset_of, table, rows, others)
    # table entry k is batch row rows[k]; a window is a run of TopicRecords and PartitionRecords
    for windowed, start, end in _runs(is_partition | (keys == TOPIC_RECORD)):
        if windowed:
            batch.window(start, end, is_partition)
        else:
            batch.replay_rows(list(range(start, end)))
    return True


def _topic_changes(tid: np.ndarray) -> np.ndarray:
    """The rows i of a (m, 16) topic id column whose next row has another id (compared as two
    uint64 halves: numpy's ``any(axis=1)`` over 16 bytes a row is several times slower)."""
    if len(tid) < 2:
        return np.zeros(0, np.int64)
    halves = np.ascontiguousarray(tid).view(np.uint64).reshape(len(tid), 2)
    lo, hi = halves[:, 0], halves[:, 1]
    changes: np.ndarray = np.flatnonzero((lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1]))
    return changes


class _Batch:
    """One batch on the columnar path: its decoded records, and how each part is applied."""

    def __init__(self, ctl: Any, rc: "ReplicationControlManager", values: Sequence[bytes],
                 offset_of: Callable[[int], int], table: RecordTypeColumns, rows: np.ndarray, others: dict[int, Any]):
        self.ctl, self.rc, self.values, self.offset_of = ctl, rc, values, offset_of
        self.table, self.rows, self.others = table, rows, others

    def replay_rows(self, rows: list[int], messages: list[Any] | None = None) -> None:
        """``replay_many`` of these rows' records (``messages``: theirs, when not decoded yet)."""
        msgs = [self.others[r] for r in rows] if messages is None else messages
        if not all(type(msg) is m.TopicRecord for msg in msgs):
            _flush_indexes(self.rc)  # a TopicRecord's replay reads no reverse index; others may
        offset_of = self.offset_of
        try:
            self.ctl.replay_many(msgs, lambda j: offset_of(rows[j]))
        except BaseException as exc:
            index, cause = getattr(exc, "index", None), getattr(exc, "cause", None)
            if index is None or cause is None:
                raise
            raise RecordFailure(rows[int(index)], cause) from exc

    def window(self, start: int, end: int, is_partition: np.ndarray) -> None:
        """Rows start..end-1: TopicRecords and PartitionRecords.  When every TopicRecord of
        the window will apply (new names and ids) and no PartitionRecord comes before its
        topic's TopicRecord, the TopicRecords go first and the PartitionRecords in one
        columnar call (the same state, and the same first failure, as in order); else in
        order, run by run."""
        ta, tb = (int(x) for x in np.searchsorted(self.rows, [start, end]))
        topic_rows = (np.flatnonzero(~is_partition[start:end]) + start).tolist()
        if tb - ta >= MIN_COLUMNAR_RECORDS and self._hoistable(ta, tb, topic_rows):
            if topic_rows:
                self.new_topics(topic_rows)
            self.partitions(ta, tb)
            return
        for partitions, s, e in _runs(is_partition[start:end]):
            s, e = s + start, e + start
            if not partitions:
                self.replay_rows(list(range(s, e)))
                continue
            a, b = (int(x) for x in np.searchsorted(self.rows, [s, e]))
            if b - a >= MIN_COLUMNAR_RECORDS:
                self.partitions(a, b)
            else:
                rows = list(range(s, e))
                self.replay_rows(rows, [self._typed_row(r) for r in rows])

    def new_topics(self, rows: list[int]) -> None:
        """The TopicRecords of a hoisted window (``_hoistable``: names and ids new and
        distinct, so none of them fails): what ``ReplicationControlManager._replay_topic``
        does for each, in order, with one ``put_many`` per map -- when that is how the
        controller replays a TopicRecord (through ``rc.replay``); else ``replay_many``."""
        rc, ctl = self.rc, self.ctl
        if ctl._replayers.get(TOPIC_RECORD) != rc.replay or rc._replayers.get(TOPIC_RECORD) != rc._replay_topic:
            self.replay_rows(rows)
            return
        names = [self.others[r].name for r in rows]
        ids = [self.others[r].topic_id for r in rows]
        rc.topics_by_name.put_many(names, ids)
        for name in names:
            if has_collision_chars(name):
                normalized = unify_collision_chars(name)
                same = rc.topics_with_collision_chars.get(normalized)
                if same is None:
                    same = TimelineHashSet(rc.registry)
                    rc.topics_with_collision_chars.put(normalized, same)
                same.add(name)
        registry = rc.registry
        rc.topics_by_id.put_many(ids, [TopicControlInfo(n, t, registry) for n, t in zip(names, ids)])
        if log.isEnabledFor(logging.INFO):
            for name, topic_id in zip(names, ids):
                log.info("Replayed TopicRecord for topic %s with topic ID %s.", name, topic_id)
        ctl.records_replayed += len(rows)

    def _typed_row(self, row: int) -> Any:
        return self.ctl._decode(self.values[row], self.offset_of(row))

    def _hoistable(self, ta: int, tb: int, topic_rows: list[int]) -> bool:
        """Whether applying the window's TopicRecords first changes nothing: none of them can
        fail (names and ids new and distinct), and no PartitionRecord can (its topic exists
        before the window or is created before it, ``from_record`` takes it) -- so no record
        of the window fails either way, and the state is the same."""
        if not topic_rows:
            return True
        rc = self.rc
        names = [self.others[r].name for r in topic_rows]
        ids = [self.others[r].topic_id for r in topic_rows]
        if len(set(names)) != len(names) or len(set(ids)) != len(ids):
            return False
        if any(rc.topics_by_name.contains_many(names)) or any(rc.topics_by_id.contains_many(ids)):
            return False
        c = self.table.columns
        lrs = c["leader_recovery_state"].values[ta:tb]
        dl = np.diff(c["directories"].offsets[ta:tb + 1])
        rl = np.diff(c["replicas"].offsets[ta:tb + 1])
        if ((lrs != 0) & (lrs != 1)).any() or ((dl != 0) & (dl != rl)).any():
            return False
        created_at = {t.bytes: r for r, t in zip(topic_rows, ids)}
        tid = c["topic_id"].values[ta:tb]
        starts = [0, *(_topic_changes(tid) + 1).tolist()]
        rows = self.rows
        for k in starts:
            key = tid[k].tobytes()
            at = created_at.get(key)
            if at is None:
                if not rc.topics_by_id.contains(Uuid(key)):
                    return False
            elif at > rows[ta + k]:
                return False
        return True

    def partitions(self, ta: int, tb: int) -> None:
        rows = self.rows

        def typed(k: int) -> Any:
            return self._typed_row(int(rows[k]))
        try:
            replay_partition_columns(self.rc, self.table, ta, tb, typed)
        except PartitionReplayError as exc:
            raise RecordFailure(int(rows[ta + exc.index]), exc) from exc
        self.ctl.records_replayed += tb - ta


# ---------------------------------------------------------------------------
# Load: PartitionRecord columns -> registrations and indexes
# ---------------------------------------------------------------------------

class _Csr:
    """One list column of rows lo..hi-1: ``off`` int64[m + 1] from 0, ``vals`` its values."""

    __slots__ = ("off", "vals", "lens")

    def __init__(self, col: Any, lo: int, hi: int):
        o = col.offsets[lo:hi + 1].astype(np.int64)
        base = int(o[0])
        self.vals = col.child.values[base:int(o[-1])]
        self.off = o - base
        self.lens = np.diff(self.off)

    def tuples(self) -> list[tuple[Any, ...]]:
        if not len(self.vals):
            return [()] * (len(self.off) - 1)
        result: list[tuple[Any, ...]] = _objects.tuples(self.off, self.vals.tolist(), True)
        return result

    def row(self, i: int) -> list[int]:
        values: list[int] = self.vals[int(self.off[i]):int(self.off[i + 1])].tolist()
        return values


class _PartitionColumns:
    """PartitionRecords lo..hi-1 of a decoded table, as the arrays the load works on."""

    def __init__(self, table: RecordTypeColumns, lo: int, hi: int):
        c = table.columns
        self.m = hi - lo
        self.pid = c["partition_id"].values[lo:hi].astype(np.int64)
        self.tid = c["topic_id"].values[lo:hi]
        self.leader = c["leader"].values[lo:hi]
        self.lrs = c["leader_recovery_state"].values[lo:hi]
        self.leader_epoch = c["leader_epoch"].values[lo:hi]
        self.partition_epoch = c["partition_epoch"].values[lo:hi]
        self.replicas = _Csr(c["replicas"], lo, hi)
        self.isr = _Csr(c["isr"], lo, hi)
        self.removing = _Csr(c["removing_replicas"], lo, hi)
        self.adding = _Csr(c["adding_replicas"], lo, hi)
        self.dirs = _Csr(c["directories"], lo, hi)
        self.elr = _Csr(c["eligible_leader_replicas"], lo, hi)
        self.last_known_elr = _Csr(c["last_known_elr"], lo, hi)
        # what from_record refuses: directories that do not pair up, an unknown recovery state
        dl, rl = self.dirs.lens, self.replicas.lens
        self.bad = ((dl != 0) & (dl != rl)) | ((self.lrs != 0) & (self.lrs != 1))
        self._regs: list[PartitionRegistration] | None = None
        self._dir_ids: np.ndarray | None = None
        self._dir_objs: list[Uuid] = []
        #: (lowest broker id, its directory's index in _dir_objs by broker id - lowest, -1 for
        #: none) when every replica's directory is a function of its broker
        self._dir_of_broker: tuple[int, np.ndarray] | None = None

    # -- topic runs ------------------------------------------------------------------
    def topic_runs(self) -> tuple[list[int], list[int]]:
        """Starts and ends of the runs of consecutive rows with one topic id."""
        cuts = (_topic_changes(self.tid) + 1).tolist() if self.m > 1 else []
        return [0, *cuts], [*cuts, self.m]

    # -- directories -----------------------------------------------------------------
    def directory_ids(self) -> tuple[np.ndarray, list[Uuid]]:
        """Each directory entry's index into a list of distinct Uuid objects (the reserved
        ids are DirectoryId's own objects)."""
        if self._dir_ids is not None:
            return self._dir_ids, self._dir_objs
        raw = self.dirs.vals
        n = len(raw)
        if n == 0:
            self._dir_ids = np.zeros(0, np.int64)
            return self._dir_ids, self._dir_objs
        ids = self._dir_ids_by_broker(raw)
        if ids is None:
            keys = np.ascontiguousarray(raw).view(np.dtype((np.void, 16))).ravel()
            uniq, inverse = np.unique(keys, return_inverse=True)
            self._dir_objs = [_directory(u.tobytes()) for u in uniq]
            ids = inverse.astype(np.int64).ravel()
        self._dir_ids = ids
        return ids, self._dir_objs

    def _dir_ids_by_broker(self, raw: np.ndarray) -> np.ndarray | None:
        """The common case in O(n): every replica's directory is a function of its broker (one
        directory per broker in the batch).  None when it is not, or the ids are too spread."""
        if self.bad.any() or not len(self.replicas.vals):
            return None
        with_dirs = np.repeat(self.dirs.lens > 0, self.replicas.lens)
        brokers = self.replicas.vals[with_dirs].astype(np.int64)
        if len(brokers) != len(raw):
            return None
        lo, hi = int(brokers.min()), int(brokers.max())
        if hi - lo >= 1 << 20:
            return None
        b = brokers - lo
        # each id as two uint64 halves in two 1-d arrays: numpy's 1-d gathers and scatters
        # are about 3x faster than the same on 16-byte rows (0.08 vs 0.24 s over 15 x 200k)
        d = np.ascontiguousarray(raw).view(np.uint64).reshape(-1, 2)
        lo_half, hi_half = np.ascontiguousarray(d[:, 0]), np.ascontiguousarray(d[:, 1])
        t0, t1 = np.zeros(hi - lo + 1, np.uint64), np.zeros(hi - lo + 1, np.uint64)
        t0[b], t1[b] = lo_half, hi_half
        if not (bool((t0[b] == lo_half).all()) and bool((t1[b] == hi_half).all())):
            return None
        table = np.stack((t0, t1), axis=1)
        present = np.flatnonzero(np.bincount(b, minlength=hi - lo + 1))
        by_key: dict[bytes, int] = {}
        dense = np.full(hi - lo + 1, -1, np.int64)
        objs: list[Uuid] = []
        for broker, key in zip(present.tolist(), (table[p].tobytes() for p in present.tolist())):
            idx = by_key.get(key)
            if idx is None:
                idx = by_key[key] = len(objs)
                objs.append(_directory(key))
            dense[broker] = idx
        self._dir_objs = objs
        self._dir_of_broker = (lo, dense)
        ids: np.ndarray = dense[b]
        return ids

    # -- registrations ---------------------------------------------------------------
    def _isr_tuples(self, replicas: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """The ISR tuples, sharing the replicas' tuple object wherever a row's ISR equals its
        replicas (most rows of a snapshot: a registration is immutable, so sharing an equal
        tuple changes nothing but the allocations -- about a million at 1M partitions)."""
        isr, rep = self.isr, self.replicas
        if np.array_equal(isr.lens, rep.lens) and np.array_equal(isr.vals, rep.vals):
            return list(replicas)
        out = isr.tuples()
        if len(isr.vals):
            for i in np.flatnonzero(_rows_equal(isr, rep)).tolist():
                out[i] = replicas[i]
        return out

    def _replica_tuples(self) -> tuple[list[tuple[Any, ...]], np.ndarray | None, np.ndarray | None]:
        """The replicas tuples, equal rows sharing one tuple object, with (each row's group,
        each group's values) -- or the plain tuples and None, None when the rows are not all
        of one short length or few of them repeat.  Why: a snapshot's partitions reuse a few
        thousand replica lists (the placer stripes over the brokers), so making a tuple per
        distinct list, and the directories tuple of each once, replaces a million tuples and
        three million gathered directory references by a gather of the shared ones
        (registrations are immutable: sharing equal tuples changes nothing but the
        allocations)."""
        rep = self.replicas
        m = self.m
        if m < 64 or not len(rep.vals):
            return rep.tuples(), None, None
        width = int(rep.lens[0])
        if width < 1 or width > 6 or not bool((rep.lens == width).all()):
            return rep.tuples(), None, None
        bits = 63 // width
        v = rep.vals.astype(np.int64).reshape(m, width)
        if int(v.min()) < 0 or int(v.max()) >= 1 << bits:
            return rep.tuples(), None, None
        key = v[:, 0].copy()
        for j in range(1, width):
            key = (key << bits) | v[:, j]
        probe = key[:1024]  # a placer's random lists rarely repeat: then do not sort them all
        if len(np.unique(probe)) * 4 > len(probe):
            return rep.tuples(), None, None
        _uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        if len(first) * 4 > m:
            return rep.tuples(), None, None
        groups = v[first]
        shared = np.fromiter(map(tuple, groups.tolist()), dtype=object, count=len(first))
        inverse = inverse.ravel()
        return shared[inverse].tolist(), inverse, groups

    def _shared_directories(self, inverse: np.ndarray, groups: np.ndarray) -> list[tuple[Any, ...]] | None:
        """Each row's directories tuple, shared by the rows of one replica group (see
        :meth:`_replica_tuples`), when every replica's directory is a function of its broker;
        rows without directories get a placeholder (the caller gives them MIGRATING)."""
        ids, objs = self.directory_ids()
        if self._dir_of_broker is None or not len(ids):
            return None
        lo, dense = self._dir_of_broker
        b = groups - lo
        inside = (b >= 0) & (b < len(dense))
        idx = np.where(inside, dense[np.clip(b, 0, len(dense) - 1)], -1)
        have = (idx >= 0).all(axis=1)
        table = np.array(objs, dtype=object)
        per_group = np.empty(len(groups), dtype=object)
        made = [tuple(row) for row in table[np.where(idx >= 0, idx, 0)][have].tolist()]
        per_group[have] = np.fromiter(made, dtype=object, count=len(made))
        for g in np.flatnonzero(~have).tolist():
            per_group[g] = ()
        result: list[tuple[Any, ...]] = per_group[inverse].tolist()
        return result

    def registrations(self) -> list[PartitionRegistration]:
        """One PartitionRegistration per row (rows ``from_record`` refuses get one too, never
        used: they are replayed the typed way)."""
        if self._regs is not None:
            return self._regs
        m = self.m
        replicas, groups_of, groups = self._replica_tuples()
        isr = self._isr_tuples(replicas)
        empty: list[tuple[int, ...]] = [()] * m
        removing = self.removing.tuples() if len(self.removing.vals) else empty
        adding = self.adding.tuples() if len(self.adding.vals) else empty
        elr = self.elr.tuples() if len(self.elr.vals) else empty
        last_known = self.last_known_elr.tuples() if len(self.last_known_elr.vals) else empty
        ids, objs = self.directory_ids()
        shared = None if groups_of is None or groups is None else self._shared_directories(groups_of, groups)
        if shared is not None:
            directories = shared
        elif len(ids):
            directories = _objects.tuples(self.dirs.off, np.array(objs, dtype=object)[ids].tolist(), True)
        else:
            directories = list(empty)
        no_dirs = np.flatnonzero(self.dirs.lens == 0)
        if len(no_dirs):  # a v0 record: every replica's directory is MIGRATING
            rl = self.replicas.lens
            for i in no_dirs.tolist():
                directories[i] = DirectoryId.migrating_tuple(int(rl[i]))
        lrs = _RECOVERY[np.clip(self.lrs, 0, 1)].tolist()
        self._regs = _objects.new_objects(
            PartitionRegistration, _REG_SLOTS,
            (replicas, directories, isr, removing, adding, self.leader.tolist(), lrs,
             self.leader_epoch.tolist(), self.partition_epoch.tolist(), elr, last_known), True)
        return self._regs


def _rows_equal(a: _Csr, b: _Csr) -> np.ndarray:
    """Per row: whether list column ``a``'s row equals ``b``'s (same length, same values)."""
    same: np.ndarray = a.lens == b.lens
    rows = np.flatnonzero(same & (a.lens > 0))
    if not len(rows):
        return same
    # compare the equal-length rows entry by entry: gather both sides' entries of those rows
    lens = a.lens[rows]
    row = np.repeat(rows, lens)
    within = np.arange(len(row)) - np.repeat(np.cumsum(lens) - lens, lens)
    diff = a.vals[a.off[row] + within] != b.vals[b.off[row] + within]
    bad = np.zeros(len(same), bool)
    bad[row[diff]] = True
    result: np.ndarray = same & ~bad
    return result


#: directory ids seen lately (16 bytes -> one Uuid object): a batch's directories are mostly
#: the same few hundred, and one object per directory keeps the index's keys shared
_DIRECTORIES: dict[bytes, Uuid] = dict(_RESERVED_DIRS)
_MAX_CACHED_DIRECTORIES = 65_536


def _directory(key: bytes) -> Uuid:
    found = _DIRECTORIES.get(key)
    if found is None:
        if len(_DIRECTORIES) >= _MAX_CACHED_DIRECTORIES:
            _DIRECTORIES.clear()
            _DIRECTORIES.update(_RESERVED_DIRS)
        found = _DIRECTORIES[key] = Uuid(key)
    return found


def replay_partition_columns(rc: "ReplicationControlManager", table: RecordTypeColumns, lo: int, hi: int,
                             typed: Callable[[int], Any]) -> None:
    """Replay PartitionRecords ``lo .. hi - 1`` of a decoded PartitionRecord ``table`` into
    ``rc`` in order, with the resulting state of ``rc.replay_partitions`` on the typed records.
    ``typed(k)``: table entry ``k``'s PartitionRecord object (decoded only for the records that
    are replayed the typed way).  A record that cannot be applied raises
    :class:`PartitionReplayError` with its index in ``lo .. hi - 1`` (0 for ``lo``), the ones
    before it applied."""
    if hi <= lo:
        return
    cols = _PartitionColumns(table, lo, hi)
    plan = _plan(rc, cols)
    for kind, a, b, topics in plan:
        if kind == "typed":
            _flush_indexes(rc)
            try:
                rc.replay(typed(lo + a), -1)
            except ReplayError as exc:
                raise PartitionReplayError(str(exc), a) from exc
            continue
        _apply_new(rc, cols, a, b, topics)


#: (kind, start, end, pieces): "new" rows start..end-1, each piece (topic, start, end) of one
#: topic; or one "typed" row.
_Step = tuple[str, int, int, list[tuple[TopicControlInfo, int, int]]]


def _plan(rc: "ReplicationControlManager", cols: _PartitionColumns) -> list[_Step]:
    """Which rows create new partitions in bulk and which are replayed the typed way, in
    order.  A row is new when its topic exists, its partition id is neither in the topic nor
    in an earlier row of this call, and ``from_record`` takes it; a row whose topic does not
    exist ends the plan (its typed replay raises)."""
    starts, ends = cols.topic_runs()
    pid = cols.pid.tolist()
    bad = cols.bad
    steps: list[_Step] = []
    pending: list[tuple[TopicControlInfo, int, int]] = []
    planned: dict[int, list[tuple[int, int]]] = {}  # id(topic) -> its runs planned so far

    def flush() -> None:
        if pending:
            steps.append(("new", pending[0][1], pending[-1][2], list(pending)))
            pending.clear()

    # per run, in numpy: does it hold a record from_record refuses, or partition ids not
    # strictly ascending (then a Python pass looks for repeats)
    st = np.array(starts, np.int64)
    bad_run = np.add.reduceat(bad.astype(np.int64), st) > 0
    check_run = np.zeros(len(starts), bool)
    descents = np.flatnonzero(cols.pid[1:] <= cols.pid[:-1]) + 1
    if len(descents):
        run_of = np.searchsorted(st, descents, side="right") - 1
        inside = descents != st[run_of]
        check_run[run_of[inside]] = True
    bad_runs, check_runs = bad_run.tolist(), check_run.tolist()
    tid_bytes = cols.tid[st].tobytes()
    found: list[TopicControlInfo | None] = rc.topics_by_id.get_many(
        [Uuid(tid_bytes[k:k + 16]) for k in range(0, len(tid_bytes), 16)])
    if not (any(bad_runs) or any(check_runs) or None in found) and len({id(t) for t in found}) == len(found) \
            and all(t.parts.is_empty() for t in found if t is not None):
        # the common case (a snapshot's, a creation's): every run a topic of its own, new
        # partitions with ascending ids, none refused -- one "new" step, as the loop below makes
        return [("new", 0, cols.m, [(t, a, b) for t, a, b in zip(found, starts, ends) if t is not None])]
    for r, (a, b) in enumerate(zip(starts, ends)):
        topic = found[r]
        if topic is None:
            flush()
            steps.append(("typed", a, a + 1, []))
            return steps
        earlier = planned.setdefault(id(topic), [])
        taken: set[int] = {p for s, e in earlier for p in pid[s:e]}
        earlier.append((a, b))
        parts = topic.parts
        run = pid[a:b]
        exists = None if parts.is_empty() else parts.contains_many(run)
        unique = not check_runs[r] or len(set(run)) == b - a
        if (exists is None or not any(exists)) and unique and not taken and not bad_runs[r]:
            pending.append((topic, a, b))
            continue
        piece = a
        for i in range(a, b):
            p = pid[i]
            if bad[i] or p in taken or (exists is not None and exists[i - a]):
                if i > piece:
                    pending.append((topic, piece, i))
                flush()
                steps.append(("typed", i, i + 1, []))
                piece = i + 1
            taken.add(p)
        if b > piece:
            pending.append((topic, piece, b))
    flush()
    return steps


def _dense(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values ascending, each value's index among them) in O(n) for compact
    ids, else by sorting."""
    lo, hi = int(values.min()), int(values.max())
    if hi - lo < 1 << 22:
        shifted = values.astype(np.int64) - lo
        present = np.bincount(shifted, minlength=hi - lo + 1) > 0
        rank = np.cumsum(present) - 1
        return np.flatnonzero(present) + lo, rank[shifted]
    uniq, inverse = np.unique(values, return_inverse=True)
    return uniq, inverse.ravel()


def _without_repeats(row: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """Keep-mask of list entries grouped by row (``row`` non-decreasing): False for a value
    an earlier entry of the same row already has (``dict.fromkeys`` per row)."""
    n = len(vals)
    keep = np.ones(n, bool)
    if n < 2:
        return keep
    longest = int(np.bincount(row - row[0]).max())
    if longest <= 16:  # compare each entry with the ones up to longest - 1 before it
        for d in range(1, longest):
            keep[d:] &= ~((vals[d:] == vals[:-d]) & (row[d:] == row[:-d]))
        return keep
    order = np.lexsort((np.arange(n), vals, row))
    r, v = row[order], vals[order]
    keep[order[np.flatnonzero((r[1:] == r[:-1]) & (v[1:] == v[:-1])) + 1]] = False
    return keep


def _apply_new(rc: "ReplicationControlManager", cols: _PartitionColumns, a: int, b: int,
               pieces: list[tuple[TopicControlInfo, int, int]]) -> None:
    """Create partitions for rows a..b-1 (all new, see _plan), in pieces of one topic each:
    what ``_add_new_partitions`` does per run, in bulk over every piece -- in segments in
    which no topic comes back after another one (a new segment at each piece whose topic an
    earlier piece of the segment has).  Why: an index map lists its topics in the order of
    their first put, and the bulk put orders a call's topics by their first piece, while a
    record-at-a-time replay puts a topic into a broker's map at that broker's first entry
    of it; the two orders agree when each topic's rows are contiguous."""
    start = 0
    seen: set[int] = set()
    for k, (topic, _s, _e) in enumerate(pieces):
        if id(topic) in seen:
            _apply_segment(rc, cols, pieces[start][1], pieces[k][1], pieces[start:k])
            start = k
            seen.clear()
        seen.add(id(topic))
    _apply_segment(rc, cols, pieces[start][1], b, pieces[start:])


def _apply_segment(rc: "ReplicationControlManager", cols: _PartitionColumns, a: int, b: int,
                   pieces: list[tuple[TopicControlInfo, int, int]]) -> None:
    """:func:`_apply_new` of one segment: rows a..b-1, each topic's pieces contiguous."""
    regs = cols.registrations()
    pid = cols.pid
    topics: list[TopicControlInfo] = []
    topic_index: dict[int, int] = {}
    piece_topic = []
    for topic, _s, _e in pieces:
        t = topic_index.get(id(topic))
        if t is None:
            t = topic_index[id(topic)] = len(topics)
            topics.append(topic)
        piece_topic.append(t)
    # a topic without partitions has no index entries: its groups are put without reading
    fresh = np.array([t.parts.is_empty() for t in topics], bool)
    for topic, s, e in pieces:
        topic.parts.put_many(pid[s:e], regs[s:e])
    row_topic = np.repeat(np.array(piece_topic, np.int64), [e - s for _t, s, e in pieces])
    # the indexes' keys (replication_control.topic_key): the ids' bytes
    topic_ids = [t.topic_id for t in topics]
    keys = [topic_key(t) for t in topic_ids]
    remember_topic_uuids(keys, topic_ids)
    pending = _PENDING.get(id(rc))
    sink = _put_index if pending is None else pending.sink(rc, keys, fresh)
    _index_isr(rc, cols, a, b, row_topic, keys, fresh, sink)
    if len(cols.elr.vals):
        _index_elr(rc, cols, a, b, row_topic, topics, keys)
    _index_directories(rc, cols, a, b, row_topic, keys, fresh, sink)
    _track(rc, cols, a, b, row_topic, topics)
    log.info("Replayed %d PartitionRecord(s) for new partitions of %d topic(s).", b - a, len(topics))
    if log.isEnabledFor(logging.DEBUG):
        for topic, s, e in pieces:
            log.debug("Replayed %d PartitionRecord(s) for new partitions of %s with topic ID %s.", e - s,
                      topic.name, topic.topic_id)
            for i in range(s, e):
                log.debug("New partition %s-%d: %s", topic.name, int(pid[i]), regs[i])


#: folded entries below this are their own codes in _distinct_entries (no ranking pass)
_DIRECT_CODES = 1 << 16


def _distinct_entries(entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the entry values, each entry's index among them): the distinct entries, in O(n)
    (:func:`_dense`), for index entries (partition id, maybe with LEADER_FLAG: folded into the
    low bit first, so that the flag does not spread the values over 2**31); when every folded
    entry is below :data:`_DIRECT_CODES`, every folded value up to the largest (an entry's index
    is then its folded value: no ranking pass over millions of entries)."""
    if len(entries) and int(entries.min()) >= 0 and int(entries.max()) <= 0xFFFFFFFF:
        folded = ((entries & _REPLICA_MASK) << 1) | (entries >> 31)
        top = int(folded.max())
        if top < _DIRECT_CODES:  # small ids: every value up to the largest is a code (unused ones cost a tuple)
            codes = np.arange(top + 1, dtype=np.int64)
            return (codes >> 1) | ((codes & 1) << 31), folded
        codes, inverse = _dense(folded)
        return (codes >> 1) | ((codes & 1) << 31), inverse
    values, inverse = np.unique(entries, return_inverse=True)
    return values, inverse.ravel()


def _put_index(maps: list[Any], dense: np.ndarray, topic_of: np.ndarray, entries: np.ndarray,
               topic_keys: list[str], stale: np.ndarray, distinct: bool) -> None:
    """One reverse index's entries of a bulk call, put with the timeline kernel's
    ``put_grouped``: entry i under ``maps[dense[i]]`` (a TimelineHashMap keyed by topic key),
    topic ``topic_keys[topic_of[i]]``; per (map, topic) the tuple of its entries in entry order
    (what ``add_entries`` / ``add_many`` append per topic).  ``stale``: per topic, whether it
    had partitions before this call (only those topics can hold entries already, so only
    those are read and extended; ``distinct``: without the entries already present).

    The distinct entries (partition ids, some with LEADER_FLAG) are made once each, as ints
    and as shared 1-tuples: in a snapshot every (broker, topic) group is usually one entry
    (the placer gives a broker one replica of each topic), so the three million groups of a
    million partitions share a few hundred tuples (index tuples are replaced, never changed
    in place).  The grouping (two counting sorts) and the puts run in C."""
    values, codes = _distinct_entries(entries.astype(np.int64, copy=False))
    ints: list[int] = values.tolist()
    i32 = np.int32
    put_grouped(maps, dense.astype(i32, copy=False), topic_of.astype(i32, copy=False), codes.astype(i32, copy=False),
                ints, [(v,) for v in ints], topic_keys, stale.astype(np.uint8, copy=False), distinct)


#: what ``_index_isr`` / ``_index_directories`` hand their entries to: ``_put_index`` (put now)
#: or a load's ``_PendingIndexes`` (put at its end), with ``_put_index``'s arguments
_Sink = Callable[[list[Any], np.ndarray, np.ndarray, np.ndarray, list[str], np.ndarray, bool], None]


class _PendingIndex:
    """One reverse index's entries of a load's bulk calls (ISR or directories), kept as
    columns until :meth:`_PendingIndexes.flush`: per call, each entry's map (an index into
    ``maps``, the maps in first-use order), its topic (an index into the load's topic keys)
    and its entry (a partition id, with LEADER_FLAG for a leader in the ISR index)."""

    __slots__ = ("distinct", "maps", "map_at", "key_of", "topic_of", "entries")

    def __init__(self, distinct: bool):
        self.distinct = distinct
        self.maps: list[Any] = []
        self.map_at: dict[int, int] = {}  # id(map) -> its index in maps (the maps live in the index)
        self.key_of: list[np.ndarray] = []
        self.topic_of: list[np.ndarray] = []
        self.entries: list[np.ndarray] = []

    def add(self, maps: list[Any], dense: np.ndarray, topic_of: np.ndarray, entries: np.ndarray) -> None:
        at = self.map_at
        index = np.empty(len(maps), np.int32)
        for k, topic_map in enumerate(maps):
            j = at.get(id(topic_map))
            if j is None:
                j = at[id(topic_map)] = len(self.maps)
                self.maps.append(topic_map)
            index[k] = j
        self.key_of.append(index[dense])
        self.topic_of.append(topic_of.astype(np.int32, copy=False))
        # (partition ids, with LEADER_FLAG in the ISR index: 32 bits unsigned hold them, half the memory)
        if len(entries) and 0 <= int(entries.min()) and int(entries.max()) <= 0xFFFFFFFF:
            self.entries.append(entries.astype(np.uint32))
        else:
            self.entries.append(entries.astype(np.int64, copy=False))

    def put(self, topic_keys: list[str], stale: np.ndarray) -> None:
        if self.entries:
            _put_index(self.maps, np.concatenate(self.key_of), np.concatenate(self.topic_of),
                       np.concatenate(self.entries), topic_keys, stale, self.distinct)
        self.maps, self.key_of, self.topic_of, self.entries = [], [], [], []
        self.map_at.clear()


class _PendingIndexes:
    """The ISR and directory index entries of a load's bulk calls, put once at the end
    (:func:`deferred_indexes`), or before anything that may read those indexes.

    Why: a snapshot of a million partitions comes in about fifteen batches, and each batch's
    bulk call put about 680 topics into each of 600 broker and directory maps of 10,000
    topics each; every such visit found the map's table cold (600 tables of ~0.4 MB between
    two visits) and grew it again.  Put once, each table is sized once and filled while it
    is in cache: the same entries, one visit.

    The state is the per-call one (hence the record-at-a-time one) because the load's topics
    get their indexes in first-appearance order across the calls (each call's topics in its
    order, after the earlier calls' ones) and each (map, topic) group's entries stay in entry
    order; a map orders its topics by their first put.  That holds while every call's topics
    are new to the pending entries, except that its first topic may be the last one of the
    earlier calls (a topic a batch boundary cut in two: its group is simply longer).  A call
    whose topics break that (a topic coming back after another one) flushes what is pending
    first, so it is applied as the per-call path would.  ``stale[t]``: topic ``t`` had
    partitions when it was first deferred (then its map entries, if any, came from before
    the load's deferral and are extended; else there are none, since nothing pending was
    put in between)."""

    __slots__ = ("topic_keys", "topic_at", "stale", "isr", "dirs")

    def __init__(self) -> None:
        self.topic_keys: list[str] = []
        self.topic_at: dict[str, int] = {}
        self.stale: list[bool] = []
        self.isr = _PendingIndex(False)
        self.dirs = _PendingIndex(True)

    def sink(self, rc: "ReplicationControlManager", keys: list[str], fresh: np.ndarray) -> _Sink:
        """The sink of one bulk call whose topics are ``keys`` (``fresh``: had no partitions
        before the call); flushes first when the call's topics are not in order after the
        pending ones (see the class doc)."""
        at = self.topic_at
        last = self.topic_keys[-1] if self.topic_keys else None
        if any(key in at and not (j == 0 and key == last) for j, key in enumerate(keys)):
            self.flush(rc)
            at = self.topic_at
        mapping = np.empty(len(keys), np.int32)
        for j, key in enumerate(keys):
            t = at.get(key)
            if t is None:
                t = at[key] = len(self.topic_keys)
                self.topic_keys.append(key)
                self.stale.append(not bool(fresh[j]))
            mapping[j] = t

        def sink(maps: list[Any], dense: np.ndarray, topic_of: np.ndarray, entries: np.ndarray,
                 _keys: list[str], _stale: np.ndarray, distinct: bool) -> None:
            (self.dirs if distinct else self.isr).add(maps, dense, mapping[topic_of], entries)
        return sink

    def flush(self, rc: "ReplicationControlManager") -> None:
        if not self.topic_keys:
            return
        stale = np.array(self.stale, bool)
        self.isr.put(self.topic_keys, stale)
        self.dirs.put(self.topic_keys, stale)
        self.topic_keys, self.stale = [], []
        self.topic_at = {}


#: the ReplicationControlManagers inside :func:`deferred_indexes`, by id (with the manager, so
#: that the id stays its own while the entry lives)
_PENDING: dict[int, _PendingIndexes] = {}
_PENDING_OWNERS: dict[int, Any] = {}


def _flush_indexes(rc: "ReplicationControlManager") -> None:
    """Put what a load deferred for ``rc`` (before a replay that may read the indexes)."""
    pending = _PENDING.get(id(rc))
    if pending is not None:
        pending.flush(rc)


@contextmanager
def deferred_indexes(ctl: Any) -> Iterator[None]:
    """Within the block, the ISR and directory index entries of the PartitionRecords that
    :func:`replay_framed_values` applies in bulk into ``ctl``'s ReplicationControlManager are
    kept as columns and put once when the block ends (and before any replay that might read
    those indexes: a record other than a TopicRecord, a PartitionRecord replayed the typed
    way), see :class:`_PendingIndexes`.  For the QuorumController's snapshot load: one block
    around the loop over the snapshot's batches.  Nothing else may read the indexes inside
    the block.  On an exception the pending entries are dropped (the caller's state is
    failed anyway); a block inside another one for the same manager adds to the outer one.
    The cyclic collector is paused for the block (:func:`paused_gc`: a load makes no cycles)."""
    rc = _columnar_target(ctl)
    if rc is None or id(rc) in _PENDING:
        yield
        return
    pending = _PENDING[id(rc)] = _PendingIndexes()
    _PENDING_OWNERS[id(rc)] = rc
    try:
        # the collector stays off for the whole load (each batch's replay_framed_values would
        # otherwise turn it on between batches, and its first allocation run a collection)
        with paused_gc():
            yield
            pending.flush(rc)
    finally:
        del _PENDING[id(rc)], _PENDING_OWNERS[id(rc)]


def _first_appearance(dense: np.ndarray, k: int) -> list[int]:
    """The codes 0..k-1 of ``dense`` (each present) in the order of their first occurrence:
    the order a record-at-a-time replay, adding the entries one by one, meets them (and
    creates the maps of those it has no map for yet)."""
    n = len(dense)
    first = np.full(k, n, np.int64)
    first[dense[::-1]] = np.arange(n - 1, -1, -1)  # repeated indexes: the last write (the first entry) wins
    order: list[int] = np.argsort(first, kind="stable").tolist()
    return order


def _broker_maps(index: Any, brokers: list[int], dense: np.ndarray | None = None) -> list[Any]:
    """Each broker's topic map in a BrokersToIsrs / BrokersToElrs, created when absent (in
    the order of their first entry when ``dense`` gives each entry's position in ``brokers``,
    else in the order given: as ``add_entries`` would create them)."""
    members = index._members
    maps: list[Any] = members.get_many(brokers)
    if None not in maps:
        return maps
    order = range(len(brokers)) if dense is None else _first_appearance(dense, len(brokers))
    for i in order:
        if maps[i] is None:
            topic_map = maps[i] = TimelineHashMap(index._registry)
            members.put(brokers[i], topic_map)
    return maps


def _index_isr(rc: "ReplicationControlManager", cols: _PartitionColumns, a: int, b: int, row_topic: np.ndarray,
               keys: list[str], fresh: np.ndarray, sink: "_Sink") -> None:
    """BrokersToIsrs entries of rows a..b-1: each ISR member once (flagged if it leads), and
    NO_LEADER (flagged) for a leaderless partition after them, in row order per (broker, topic)."""
    isr = cols.isr
    e0, e1 = int(isr.off[a]), int(isr.off[b])
    lens = isr.lens[a:b]
    row = np.repeat(np.arange(b - a), lens)  # relative to a
    members = isr.vals[e0:e1].astype(np.int64)
    keep = _without_repeats(row, members)
    if not keep.all():
        row, members = row[keep], members[keep]
        lens = np.bincount(row, minlength=b - a)
    leader = cols.leader[a:b].astype(np.int64)
    leaderless = leader == NO_LEADER
    if leaderless.any():  # interleave: each row's members, then its NO_LEADER entry
        at = np.concatenate(([0], np.cumsum(lens + leaderless)))
        first_member = np.cumsum(lens) - lens
        pos = at[row] + (np.arange(len(row)) - first_member[row])
        size = int(at[-1])
        out_row, out_member = np.empty(size, np.int64), np.empty(size, np.int64)
        out_row[pos], out_member[pos] = row, members
        nl = np.flatnonzero(leaderless)
        out_row[at[nl] + lens[nl]] = nl
        out_member[at[nl] + lens[nl]] = NO_LEADER
        row, members = out_row, out_member
    if not len(members):
        return
    entries = cols.pid[a:b][row] | np.where(members == leader[row], LEADER_FLAG, 0)
    brokers, dense = _dense(members)
    maps = _broker_maps(rc.brokers_to_isrs, brokers.tolist(), dense)
    sink(maps, dense, row_topic[row], entries, keys, ~fresh, False)


def _index_elr(rc: "ReplicationControlManager", cols: _PartitionColumns, a: int, b: int, row_topic: np.ndarray,
               topics: list[TopicControlInfo], keys: list[str]) -> None:
    """BrokersToElrs entries (each ELR member once per partition), and the overlap error
    ``_add_new_partitions`` logs.  ELRs are rare in a snapshot: a Python pass over their rows,
    and every topic is read (stale) before it is extended."""
    elr, isr = cols.elr, cols.isr
    rows = np.flatnonzero(elr.lens[a:b] > 0) + a
    brokers: list[int] = []
    topic_of: list[int] = []
    pids: list[int] = []
    for i in rows.tolist():
        members = elr.row(i)
        t = int(row_topic[i - a])
        p = int(cols.pid[i])
        for broker in dict.fromkeys(members):
            brokers.append(broker)
            topic_of.append(t)
            pids.append(p)
        in_isr = isr.row(i)
        if set(in_isr) & set(members):
            log.error("%s-%d has overlapping ISR=%s and ELR=%s", topics[t].name, p, _fmt(in_isr), _fmt(members))
    if not brokers:
        return
    # maps created in first-appearance order of the brokers, as add_entries does
    order = list(dict.fromkeys(brokers))
    position = {broker: k for k, broker in enumerate(order)}
    maps = _broker_maps(rc.brokers_to_elrs, order)
    _put_index(maps, np.array([position[x] for x in brokers], np.int64), np.array(topic_of, np.int64),
               np.array(pids, np.int64), keys, np.ones(len(keys), bool), False)


def _index_directories(rc: "ReplicationControlManager", cols: _PartitionColumns, a: int, b: int,
                       row_topic: np.ndarray, keys: list[str], fresh: np.ndarray, sink: "_Sink") -> None:
    """``directories_to_partitions`` entries: each partition under each of its real
    (non-reserved) directories, once."""
    dirs = cols.dirs
    e0, e1 = int(dirs.off[a]), int(dirs.off[b])
    if e1 == e0:
        return
    ids, objs = cols.directory_ids()
    dense = ids[e0:e1]
    row = np.repeat(np.arange(b - a), dirs.lens[a:b])  # relative to a
    real = np.array([not DirectoryId.reserved(d) for d in objs], bool)[dense]
    keep = real & _without_repeats(row, dense)
    if not keep.any():
        return
    row, dense = row[keep], dense[keep]
    present, slot = _dense(dense)
    index = rc.directories_to_partitions
    registry = rc.registry
    directories = [objs[d] for d in present.tolist()]
    found = index.get_many(directories)
    # the missing ones created as the one-by-one replay meets them
    for i in _first_appearance(slot, len(present)) if None in found else ():
        if found[i] is None:
            found[i] = DirectoryPartitions(registry)
            index.put(directories[i], found[i])
    maps = [members._topics for members in found]
    sink(maps, slot, row_topic[row], cols.pid[a:b][row], keys, ~fresh, True)


def _track(rc: "ReplicationControlManager", cols: _PartitionColumns, a: int, b: int, row_topic: np.ndarray,
           topics: list[TopicControlInfo]) -> None:
    """Reassigning topics (adding or removing replicas) and imbalanced partitions (leader not
    the first replica)."""
    pid = cols.pid
    moving = np.flatnonzero((cols.removing.lens[a:b] > 0) | (cols.adding.lens[a:b] > 0))
    if len(moving):
        by_topic: dict[int, list[int]] = {}
        for r in moving.tolist():
            by_topic.setdefault(int(row_topic[r]), []).append(int(pid[a + r]))
        for t, pids in by_topic.items():
            topic_id = topics[t].topic_id
            rc.reassigning_topics.put(topic_id, rc.reassigning_topics.get(topic_id, ()) + tuple(pids))
    rep = cols.replicas
    lens = rep.lens[a:b]
    first_at = np.minimum(rep.off[a:b], max(len(rep.vals) - 1, 0))
    first = np.where(lens > 0, rep.vals[first_at] if len(rep.vals) else NO_LEADER, NO_LEADER)
    off = np.flatnonzero(cols.leader[a:b] != first)
    if len(off):
        rc.imbalanced_partitions.add_many([TopicIdPartition(topics[int(row_topic[r])].topic_id, int(pid[a + r]))
                                           for r in off.tolist()])


# ---------------------------------------------------------------------------
# Write
# ---------------------------------------------------------------------------

def encode_partition_records(topic_ids: Sequence[Uuid], pids: Sequence[int], regs: Sequence[PartitionRegistration],
                             metadata_version: MetadataVersion | None, *,
                             topic_id_bytes: Sequence[bytes] | None = None) -> list[bytes]:
    """The framed PartitionRecord value of each (topic id, partition id, registration), as
    ``reg.to_record(topic_id, pid, metadata_version).encode()`` gives it (and raising what it
    raises: UnwritableMetadataError for real directories below 3.7-IV2), in bulk: the
    ``_bulk_objects`` kernel writes the common shape (layout in the module doc), the typed
    encoder the rest (a tagged field, a list of 127 or more, directories at v0).
    ``topic_id_bytes``: the topic ids' 16 bytes, when the caller has them."""
    version = 2 if metadata_version is None else metadata_version.partition_record_version()
    header = bytes((1, PARTITION_RECORD, version))
    tid = [t.bytes for t in topic_ids] if topic_id_bytes is None else topic_id_bytes
    values: list[bytes | None] = _objects.encode_partition_records(PartitionRegistration, header, pids, tid, regs,
                                                                   Uuid, version)
    if None in values:
        for i, v in enumerate(values):
            if v is None:
                values[i] = regs[i].to_record(topic_ids[i], pids[i], metadata_version).encode()
    return values  # type: ignore[return-value]


def snapshot_records(rc: "ReplicationControlManager", epoch: int = LATEST_EPOCH, *,
                     metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
    """``ReplicationControlManager.snapshot_records``: per topic (by name) its TopicRecord,
    then its PartitionRecords (by partition id) as :class:`FramedRecord` values encoded in
    bulk, about :data:`WRITE_CHUNK` partitions per encoding call.  Lazy: nothing is read
    before the first record is asked for, and each chunk when its first record is."""
    return chain.from_iterable(_chunks(rc, epoch, metadata_version))


def _chunks(rc: "ReplicationControlManager", epoch: int,
            metadata_version: MetadataVersion | None) -> Iterator[list[ApiMessageAndVersion]]:
    if metadata_version is None and rc._metadata_version is not None:
        metadata_version = as_metadata_version(rc._metadata_version(epoch))
    chunk: list[tuple[str, Uuid, list[int], list[PartitionRegistration]]] = []
    size = 0
    for name, topic_id in sorted(rc.topics_by_name.items(epoch)):
        parts = rc.topics_by_id.get(topic_id, epoch=epoch).parts
        pids = sorted(parts.keys(epoch))
        chunk.append((name, topic_id, pids, parts.get_many(pids, epoch=epoch)))
        size += len(pids)
        if size >= WRITE_CHUNK:
            yield _chunk_records(chunk, metadata_version)
            chunk, size = [], 0
    if chunk:
        yield _chunk_records(chunk, metadata_version)


def _chunk_records(chunk: list[tuple[str, Uuid, list[int], list[PartitionRegistration]]],
                   metadata_version: MetadataVersion | None) -> list[ApiMessageAndVersion]:
    topic_ids: list[Uuid] = []
    tid_bytes: list[bytes] = []
    pids: list[int] = []
    regs: list[PartitionRegistration] = []
    for _name, topic_id, p, r in chunk:
        topic_ids += [topic_id] * len(p)
        tid_bytes += [topic_id.bytes] * len(p)
        pids += p
        regs += r
    values = encode_partition_records(topic_ids, pids, regs, metadata_version, topic_id_bytes=tid_bytes)
    n = len(values)
    version = 2 if metadata_version is None else metadata_version.partition_record_version()
    records: list[ApiMessageAndVersion] = _objects.new_objects(FramedRecord, ("version", "_value", "message"),
                                                               ([version] * n, values, [None] * n), True)
    out: list[ApiMessageAndVersion] = []
    at = 0
    for name, topic_id, p, _r in chunk:
        out.append(ApiMessageAndVersion(m.TopicRecord(name=name, topic_id=topic_id), 0))
        out += records[at:at + len(p)]
        at += len(p)
    return out
