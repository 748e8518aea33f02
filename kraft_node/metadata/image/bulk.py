"""The bulk path: a snapshot (or a long log prefix) folded into the topics image in columns.

Why: a 1M-partition snapshot replayed record at a time makes a PartitionRecord object, then a
``PartitionRegistration`` (five tuples and a tuple of Uuids), per partition -- seconds of work
and about a kilobyte a partition.  Issue 23 asks for the load in at most a second and the
image in at most 400 B a partition.  Here the records' bodies are decoded by the generated
columnar decoder (:func:`kraft_storage.messages.columns.decode_bodies`, native when built) into
one numpy column per field, the PartitionRecord columns *are* the image's
:class:`~kraft_node.metadata.image.partition_block.PartitionBlock` (no copy when the snapshot
is in order, one gather when it is not), and Python objects are made per topic only (a name, a
Uuid, a ``TopicImage``), never per partition.

What is folded in columns, and what is not (:func:`fold_topics`):

* The *prefix*: the records before the first *relative* topic record (PartitionChangeRecord,
  RemoveTopicRecord, ClearElrRecord: each needs the state before it), or before the first
  PartitionRecord the columns cannot hold as ``TopicsDelta`` would: one whose topic no
  earlier TopicRecord of the prefix created, one ``PartitionRegistration.from_record``
  refuses (directories that do not pair up with the replicas, an unknown leader recovery
  state), one with a negative partition id.  In it, TopicRecords and PartitionRecords are
  folded in columns; records of other types are skipped (:func:`load_image_bulk` replays them
  into their own sub-deltas).
* The *suffix*, every topic record from there on, is decoded the typed way and replayed one
  at a time by ``TopicsDelta.replay`` over the prefix's image: the hand-off.  Errors there are
  ``TopicsDelta``'s own, for the same record (wrapped in :class:`BulkLoadError`, naming its
  index and offset).  A snapshot has no relative records: it folds whole.  A generated log
  folds its bootstrap topics and hands the rest over.

Exactness (tests: every Kafka fixture, generated logs, random record sequences): the result
equals ``TopicsDelta(image)`` with every topic record replayed, then (``snapshot=True``)
``finish_snapshot()``, then ``apply()`` -- or both raise the same error.  Applying the prefix
first and replaying the suffix over it gives what one delta gives as long as the prefix only
*creates* topics, each once, under ids and names nobody else has: one delta would meet the
same creations, and ``TopicsDelta`` treats a topic it created and one of its image alike for
every later record but three, which are detected.  The whole input takes the
record-at-a-time path instead (:attr:`TopicsLoad.fell_back` says why) when

* two TopicRecords of the prefix share an id or a name, or one has the id or name of a topic
  of the base image (``TopicsDelta`` restarts the topic, or refuses it at ``apply``);
* a suffix TopicRecord re-uses the id or name of a live prefix topic (one delta replaces a
  topic it has not applied yet; over the applied prefix, ``apply`` would refuse the rename);
* a suffix ClearElrRecord names a prefix topic the suffix removed (one delta no longer knows
  the name and raises; over the applied prefix the name is found, deleted, and skipped).

In the prefix, a later PartitionRecord for a partition replaces an earlier one, as in
``TopicDelta``; partitions need not follow their TopicRecord (they are grouped by topic and
sorted by partition id, stably: the last record of a partition wins).

A snapshot over a non-empty image (``snapshot=True``) is folded as from the empty image (a
snapshot re-states everything, ``finish_snapshot`` drops the rest) when it folds whole and
re-states no topic differently (an id of the image under another name, a name of the image
under another id the snapshot also re-states); else it takes the record-at-a-time path.

What the bulk path gives is an image, not a delta: a publisher that wants the
``TopicsDelta`` of a snapshot load (Kafka's ``localChanges`` on the first image) needs the
record-at-a-time path, or to compare the two images.

Input (:func:`framed_records`): a sequence of framed record values (what a Raft batch's
records are), or :class:`kraft_storage.record.RecordColumns` (a ``.checkpoint`` or a ``.log``
segment decoded columnar: no bytes object per record; control records are skipped), or
:class:`FramedRecords` already built.

The cyclic collector is paused while the image is built (the objects made have no cycles).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kraft_node.metadata.controller.replication_snapshot import paused_gc
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicImage, TopicPartitions, TopicsDelta, TopicsImage
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.columns import RecordTypeColumns, decode_bodies
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import MessageError, Uuid
from kraft_storage.record.columns import RecordColumns
from kraft_storage.snapshot import BOOTSTRAP_SNAPSHOT_ID, RecordsSnapshotReader, SnapshotId

__all__ = ["BulkLoadError", "FramedRecords", "IMPLEMENTATION", "TopicsLoad", "bulk_delta", "fold_topics",
           "framed_records", "load_image_bulk", "load_snapshot_file", "load_topics_bulk"]

_frame = load("_frame")
_objects = load("_bulk_objects", "kraft_node")
_join = load("_image_bulk", "kraft_node")
#: The kernels in use (native or the twins).
IMPLEMENTATION: str = _join.__name__

TOPIC_RECORD = int(m.TopicRecord.API_KEY)
PARTITION_RECORD = int(m.PartitionRecord.API_KEY)
PARTITION_CHANGE_RECORD = int(m.PartitionChangeRecord.API_KEY)
REMOVE_TOPIC_RECORD = int(m.RemoveTopicRecord.API_KEY)
CLEAR_ELR_RECORD = int(m.ClearElrRecord.API_KEY)
#: Topic records that need the state before them: the prefix ends at the first one.
RELATIVE_TYPES = frozenset((PARTITION_CHANGE_RECORD, REMOVE_TOPIC_RECORD, CLEAR_ELR_RECORD))
#: Every record type TopicsDelta takes.
TOPIC_TYPES = frozenset((TOPIC_RECORD, PARTITION_RECORD)) | RELATIVE_TYPES
#: ``api_key`` of a control record in :class:`FramedRecords` (skipped, never decoded).
CONTROL = -2
#: ``api_key`` of a value that is not a metadata record frame.
NOT_A_FRAME = -1

Int64s = npt.NDArray[np.int64]


class BulkLoadError(ValueError):
    """Record ``index`` (log offset ``offset`` when known) could not be folded: ``cause`` says
    why (a decoding error, or the error ``TopicsDelta.replay`` raised for it).  ``index`` is
    None for an error of ``TopicsDelta.apply``, which belongs to no one record."""

    def __init__(self, index: int | None, offset: int | None, cause: BaseException):
        if index is None:
            where = "applying the topics delta"
        else:
            where = f"record {index}" + ("" if offset is None else f" (offset {offset})")
        super().__init__(f"{where}: {type(cause).__name__}: {cause}")
        self.index = index
        self.offset = offset
        self.cause = cause


# ---------------------------------------------------------------------------------------------
# Input: record values and their frame headers
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FramedRecords:
    """``n`` record values in one buffer with their metadata frame headers read.

    ``api_key``/``version``: each record's type and version (``NOT_A_FRAME`` where a value is
    not a metadata frame, ``CONTROL`` for a control record); ``body_pos``/``body_end``: where
    its body lies in ``data``; ``value_pos``/``value_len``: the whole value (for the typed
    decoder); ``offsets``: each record's log offset when known (named in errors)."""
    data: Any
    value_pos: Int64s
    value_len: npt.NDArray[np.int32]
    api_key: npt.NDArray[np.int16]
    version: npt.NDArray[np.int16]
    body_pos: Int64s
    body_end: Int64s
    offsets: Int64s | None = None

    def __len__(self) -> int:
        return len(self.api_key)

    def value(self, i: int) -> bytes:
        """Record ``i``'s framed value."""
        p, n = int(self.value_pos[i]), int(self.value_len[i])
        return bytes(memoryview(self.data).cast("B")[p:p + n])

    def offset(self, i: int) -> int | None:
        return None if self.offsets is None else int(self.offsets[i])

    def decode(self, i: int) -> Any:
        """Record ``i`` decoded the typed way (BulkLoadError naming it when it does not decode)."""
        try:
            return decode_metadata_record(self.value(i), self.offset(i))[2]
        except Exception as exc:
            raise BulkLoadError(i, self.offset(i), exc) from exc


def framed_records(source: Sequence[bytes] | RecordColumns | FramedRecords) -> FramedRecords:
    """The records of ``source`` with their frame headers read (see the module doc)."""
    if isinstance(source, FramedRecords):
        return source
    if isinstance(source, RecordColumns):
        n = len(source)
        value_len = np.ascontiguousarray(source.value_len, dtype=np.int32)
        value_pos = np.ascontiguousarray(source.value_pos, dtype=np.int64)
        data = source.data
        control = source.is_control()
        offsets: Int64s | None = np.ascontiguousarray(source.offset, dtype=np.int64)
    else:
        n = len(source)
        data, value_pos, value_len = _join.join_values(source if isinstance(source, (list, tuple)) else list(source))
        control = None
        offsets = None
    api_key = np.empty(n, np.int16)
    version = np.empty(n, np.int16)
    body_pos = np.empty(n, np.int64)
    _frame.read_frames(data, value_pos, value_len, api_key, version, body_pos)
    if control is not None and control.any():
        api_key[control] = CONTROL
    body_end = value_pos + np.maximum(value_len, 0).astype(np.int64)
    return FramedRecords(data, value_pos, value_len, api_key, version, body_pos, body_end, offsets)


# ---------------------------------------------------------------------------------------------
# The prefix: TopicRecords and PartitionRecords as columns
# ---------------------------------------------------------------------------------------------

@dataclass
class _Prefix:
    """The columns of the prefix, once grouped: topic ``t`` (TopicRecord order) has rows
    ``starts[t] .. starts[t + 1] - 1`` of ``block``."""
    cut: int                       # index of the first record not folded here (n: none)
    names: list[str]
    id_bytes: list[bytes]
    starts: Int64s                 # int64[T + 1]
    columns: dict[str, np.ndarray]  # PartitionBlock keyword arguments
    partition_records: int          # PartitionRecords folded (duplicates included)
    fallback: str | None            # why the input must take the record-at-a-time path


def _names(table: RecordTypeColumns, fr: FramedRecords) -> list[str]:
    """Every TopicRecord's name as a str (one decode of the whole buffer when it is ASCII)."""
    col = table["name"]
    offs: list[int] = col.offsets.tolist()
    data = col.data
    if len(data) and int(data.max()) >= 0x80:
        out = []
        raw = data.tobytes()
        for k, (a, b) in enumerate(zip(offs, offs[1:])):
            try:
                out.append(raw[a:b].decode("utf-8"))
            except UnicodeDecodeError as exc:
                row = int(table.rows[k])
                raise BulkLoadError(row, fr.offset(row), exc) from exc
        return out
    text = data.tobytes().decode("ascii")
    return [text[a:b] for a, b in zip(offs, offs[1:])]


def _ids_bytes(ids: npt.NDArray[np.uint8]) -> list[bytes]:
    raw = np.ascontiguousarray(ids).tobytes()
    return [raw[k:k + 16] for k in range(0, len(raw), 16)]


def _decode_prefix(fr: FramedRecords, end: int) -> dict[int, RecordTypeColumns]:
    """The TopicRecord and PartitionRecord tables of records ``0 .. end - 1``.  A body that
    does not decode raises BulkLoadError naming its record (the decoder is told each row's
    index as its "offset" to find it, then the real offset, if any, is put back)."""
    rows = np.flatnonzero((fr.api_key[:end] == TOPIC_RECORD) | (fr.api_key[:end] == PARTITION_RECORD))
    if not len(rows):
        return {}
    try:
        tables: dict[int, RecordTypeColumns] = decode_bodies(
            fr.data, fr.body_pos, fr.body_end, fr.api_key, fr.version, rows=rows,
            offsets=np.arange(len(fr), dtype=np.int64), types=(TOPIC_RECORD, PARTITION_RECORD)).tables
    except MessageError as exc:
        row = exc.offset if isinstance(exc.offset, int) and 0 <= exc.offset < len(fr) else int(rows[0])
        fr.decode(row)  # the typed decoder's error, when it refuses the record too
        exc.offset = fr.offset(row)
        raise BulkLoadError(row, fr.offset(row), exc) from exc
    return tables


def _bad_partition_rows(c: dict[str, Any], k: int) -> npt.NDArray[np.bool_]:
    """PartitionRecords (entries 0 .. k-1 of the table) that the block cannot hold as
    ``from_record`` would make them: an unknown leader recovery state, directories that do not
    pair up with the replicas, a negative partition id."""
    lrs = c["leader_recovery_state"].values[:k]
    dl = np.diff(c["directories"].offsets[:k + 1].astype(np.int64))
    rl = np.diff(c["replicas"].offsets[:k + 1].astype(np.int64))
    bad: npt.NDArray[np.bool_] = ((lrs != 0) & (lrs != 1)) | ((dl != 0) & (dl != rl)) | (
        c["partition_id"].values[:k] < 0)
    return bad


def _topic_of(t_rows: Int64s, t_ids: npt.NDArray[np.uint8], p_rows: Int64s,
              p_ids: npt.NDArray[np.uint8]) -> Int64s:
    """For each PartitionRecord, the index of the TopicRecord (of ``t_rows``, ids distinct) that
    created its topic before it, or -1.  In a snapshot a topic's partitions follow its
    TopicRecord: the last TopicRecord before each partition is checked first."""
    if not len(p_rows):
        return np.zeros(0, np.int64)
    if not len(t_rows):
        return np.full(len(p_rows), -1, np.int64)
    guess = np.searchsorted(t_rows, p_rows) - 1
    if guess[0] >= 0:  # guess is non-decreasing: all >= 0
        t64 = np.ascontiguousarray(t_ids).view(np.uint64)  # (T, 2): the 16 bytes as two words
        p64 = np.ascontiguousarray(p_ids).view(np.uint64)
        if bool((t64[guess, 0] == p64[:, 0]).all()) and bool((t64[guess, 1] == p64[:, 1]).all()):
            return guess
    # general case: look each id up among the TopicRecords' (sorted 16-byte keys)
    void = np.dtype((np.void, 16))
    t_keys = np.ascontiguousarray(t_ids).view(void).ravel()
    p_keys = np.ascontiguousarray(p_ids).view(void).ravel()
    order = np.argsort(t_keys, kind="stable")
    sorted_keys = t_keys[order]
    at = np.minimum(np.searchsorted(sorted_keys, p_keys), len(order) - 1)
    found = sorted_keys[at] == p_keys
    topic = np.where(found, order[at], -1)
    # created before the partition?
    topic[found & (t_rows[np.maximum(topic, 0)] > p_rows)] = -1
    out: Int64s = topic.astype(np.int64)
    return out


def _gather_list(offsets: npt.NDArray[np.int32], values: np.ndarray, sel: Int64s) -> tuple[np.ndarray, np.ndarray]:
    """List column rows ``sel`` (in that order), as new offsets from 0 and their values."""
    o = offsets.astype(np.int64)
    first = o[sel]
    lens = o[sel + 1] - first
    new_off = np.zeros(len(sel) + 1, np.int64)
    np.cumsum(lens, out=new_off[1:])
    total = int(new_off[-1])
    if total == 0:
        return new_off.astype(np.int32), values[:0].copy()
    idx = np.repeat(first - new_off[:-1], lens) + np.arange(total, dtype=np.int64)
    return new_off.astype(np.int32), values[idx]


#: PartitionBlock list column -> the PartitionRecord field it is decoded from.
_LIST_FIELDS = {"replicas": "replicas", "directories": "directories", "isr": "isr", "removing": "removing_replicas",
                "adding": "adding_replicas", "elr": "eligible_leader_replicas", "last_known_elr": "last_known_elr"}
_SCALAR_FIELDS = ("partition_id", "leader", "leader_epoch", "partition_epoch", "leader_recovery_state")


def _prefix(fr: FramedRecords, base: TopicsImage) -> _Prefix:
    """Decode and group the prefix (see the module doc for where it ends)."""
    n = len(fr)
    keys = fr.api_key
    relative = np.flatnonzero(np.isin(keys, list(RELATIVE_TYPES)))
    cut = int(relative[0]) if len(relative) else n
    tables = _decode_prefix(fr, cut)
    ttab, ptab = tables.get(TOPIC_RECORD), tables.get(PARTITION_RECORD)
    names: list[str] = []
    id_bytes: list[bytes] = []
    t_rows: Int64s = np.zeros(0, np.int64)
    t_ids = np.zeros((0, 16), np.uint8)
    if ttab is not None:
        t_rows = ttab.rows
        t_ids = ttab["topic_id"].values
        names = _names(ttab, fr)
        id_bytes = _ids_bytes(t_ids)
    # PartitionRecords: their topic created before them, and foldable
    p_rows: Int64s = np.zeros(0, np.int64) if ptab is None else ptab.rows
    p_count = len(p_rows)
    topic_of: Int64s = np.zeros(0, np.int64)
    if p_count:
        assert ptab is not None
        c = ptab.columns
        topic_of = _topic_of(t_rows, t_ids, p_rows, c["topic_id"].values)
        bad = (topic_of < 0) | _bad_partition_rows(c, p_count)
        if bad.any():
            first = int(np.argmax(bad))
            cut = int(p_rows[first])
            p_count = first
            topic_of = topic_of[:p_count]
    t_count = int(np.searchsorted(t_rows, cut))
    names, id_bytes = names[:t_count], id_bytes[:t_count]
    fallback = _prefix_fallback(names, id_bytes, base)
    starts, columns = _group(ptab, p_count, topic_of, t_count)
    return _Prefix(cut, names, id_bytes, starts, columns, p_count, fallback)


def _prefix_fallback(names: list[str], id_bytes: list[bytes], base: TopicsImage) -> str | None:
    """Why the prefix's TopicRecords cannot be folded in columns (None: they can): two of them
    share an id or a name, or one has the id or name of a topic of ``base``.  ``TopicsDelta``
    gives such records meanings that depend on their order (a restart of the topic, a check at
    ``apply``), so the whole input takes the record-at-a-time path."""
    if len(set(id_bytes)) != len(id_bytes):
        return "two TopicRecords of the prefix have one topic id"
    if len(set(names)) != len(names):
        return "two TopicRecords of the prefix have one topic name"
    if base.is_empty():
        return None
    by_id, by_name = base.topics_by_id, base.topics_by_name
    for name, raw in zip(names, id_bytes):
        if name in by_name or Uuid(raw) in by_id:
            return f"a TopicRecord of the prefix ({name}) names a topic the image has"
    return None


def _group(ptab: RecordTypeColumns | None, p_count: int, topic_of: Int64s,
           t_count: int) -> tuple[Int64s, dict[str, np.ndarray]]:
    """The block's columns: PartitionRecords ``0 .. p_count - 1`` grouped by topic (in
    TopicRecord order) and sorted by partition id, the last record of a partition kept;
    and each topic's first row."""
    if ptab is None or not p_count:
        empty32 = np.zeros(0, np.int32)
        cols: dict[str, np.ndarray] = {name: empty32 for name in _SCALAR_FIELDS}
        cols["leader_recovery_state"] = np.zeros(0, np.int8)
        for name in _LIST_FIELDS:
            cols[name + "_offsets"] = np.zeros(1, np.int32)
            cols[name] = np.zeros((0, 16), np.uint8) if name == "directories" else empty32
        return np.zeros(t_count + 1, np.int64), cols
    c = ptab.columns
    pid = c["partition_id"].values[:p_count]
    dt = np.diff(topic_of)
    in_order = bool(((dt > 0) | ((dt == 0) & (np.diff(pid.astype(np.int64)) > 0))).all())
    if in_order:
        sel = None
        kept_topic = topic_of
    else:
        order = np.lexsort((np.arange(p_count), pid, topic_of))
        t_sorted, p_sorted = topic_of[order], pid[order]
        last = np.ones(p_count, bool)
        last[:-1] = (t_sorted[1:] != t_sorted[:-1]) | (p_sorted[1:] != p_sorted[:-1])
        sel = order[last].astype(np.int64)
        kept_topic = t_sorted[last]
    starts = np.zeros(t_count + 1, np.int64)
    np.cumsum(np.bincount(kept_topic, minlength=t_count), out=starts[1:])
    cols = {}
    for name in _SCALAR_FIELDS:
        values = c[name].values[:p_count]
        cols[name] = values if sel is None else values[sel]
    for name, fld in _LIST_FIELDS.items():
        column = c[fld]
        if sel is None:
            cols[name + "_offsets"] = column.offsets[:p_count + 1]
            cols[name] = column.child.values
        else:
            cols[name + "_offsets"], cols[name] = _gather_list(column.offsets, column.child.values, sel)
    return starts, cols




# ---------------------------------------------------------------------------------------------
# The prefix's image
# ---------------------------------------------------------------------------------------------

#: The fields of a TopicPartitions / TopicImage, in the order the columns are given.
_PARTITIONS_FIELDS = ("block", "start", "stop", "overrides", "extra", "dense")
_TOPIC_FIELDS = ("name", "topic_id", "partitions")


def _slot_plan(cls: type, fields: tuple[str, ...]) -> tuple[str, ...] | None:
    """The slots of ``cls`` that hold ``fields`` (a slot is the field's name, or it with one
    leading underscore), in that order; None when the slots are not exactly those (the class
    changed: the caller then uses its constructor)."""
    try:
        slots = _objects.slot_names(cls)
    except ValueError:
        return None
    by_field = {name.lstrip("_"): name for name in slots}
    if len(by_field) != len(slots) or set(by_field) != set(fields):
        return None
    return tuple(by_field[f] for f in fields)


def _prefix_image(prefix: _Prefix, base: TopicsImage) -> TopicsImage:
    """``base`` with the prefix's topics put in (their ids and names are new to it: see
    ``_prefix_fallback``).  One PartitionBlock for every partition; per topic a Uuid, a
    TopicPartitions (its rows of the block, no overrides) and a TopicImage, made in bulk by the
    ``_bulk_objects`` kernel -- the objects ``TopicPartitions(block=, start=, stop=)`` and
    ``TopicImage(name, id, partitions)`` construct, without their per-object checks (the
    decoding and the grouping made them)."""
    t = len(prefix.names)
    if not t:
        return base
    # no block.check(): what it checks holds by construction -- offsets from the decoder (or
    # the gather) never go back, _bad_partition_rows cut the prefix before any negative id,
    # unknown recovery state or unpaired directories, and _group sorted each topic's rows by
    # partition id with no repeat (the tests call check() on what this builds)
    block = PartitionBlock(**prefix.columns)
    starts = prefix.starts
    s, e = starts[:-1], starts[1:]
    # a topic's rows are dense when its partition ids are 0 .. rows - 1 (TopicPartitions' invariant)
    pid = block.partition_id.astype(np.int64)
    rows = e - s
    filled = rows > 0
    dense = ~filled
    if len(pid):
        first = pid[np.minimum(s, len(pid) - 1)]
        last = pid[np.maximum(e - 1, 0)]
        dense |= filled & (first == 0) & (last == rows - 1)
    ids: list[Uuid] = _objects.new_objects(Uuid, ("_b",), (prefix.id_bytes,), True)
    s_list, e_list = s.tolist(), e.tolist()
    plan = _slot_plan(TopicPartitions, _PARTITIONS_FIELDS)
    parts: list[Any]
    if plan is None:
        parts = [TopicPartitions(block=block, start=a, stop=b) for a, b in zip(s_list, e_list)]
    else:
        no_overrides = TopicPartitions.EMPTY.overrides
        parts = _objects.new_objects(TopicPartitions, plan,
                                     ([block] * t, s_list, e_list, [no_overrides] * t, [()] * t, dense.tolist()),
                                     True)
    for k in np.flatnonzero(~filled).tolist():  # a topic with no partitions shares the empty one
        parts[k] = TopicPartitions.EMPTY
    plan = _slot_plan(TopicImage, _TOPIC_FIELDS)
    topics: list[TopicImage]
    if plan is None:
        topics = [TopicImage(name, u, p) for name, u, p in zip(prefix.names, ids, parts)]
    else:
        topics = _objects.new_objects(TopicImage, plan, (prefix.names, ids, parts), True)
    by_id = base.topics_by_id.update(zip(ids, topics))
    by_name = base.topics_by_name.update(zip(prefix.names, topics))
    return TopicsImage(by_id, by_name)


# ---------------------------------------------------------------------------------------------
# Folding
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TopicsLoad:
    """What :func:`fold_topics` did.

    ``image``: the result; ``cut``: index of the first record handed to ``TopicsDelta``
    (``len(records)`` when none was); ``bulk_topics`` / ``bulk_partitions``: TopicRecords and
    PartitionRecords folded in columns; ``replayed``: topic records replayed one at a time;
    ``removed``: ``(index, topic name)`` of each RemoveTopicRecord replayed (the caller drops
    the topic's configs there, as ``MetadataDelta`` does); ``fell_back``: why the whole input
    took the record-at-a-time path, or None."""
    image: TopicsImage
    cut: int
    bulk_topics: int
    bulk_partitions: int
    replayed: int
    removed: tuple[tuple[int, str], ...] = ()
    fell_back: str | None = None


class _FallBack(Exception):
    """The suffix met a record whose meaning would differ once the prefix is applied."""


def fold_topics(source: Sequence[bytes] | RecordColumns | FramedRecords,
                image: TopicsImage = TopicsImage.EMPTY, *, snapshot: bool = False) -> TopicsLoad:
    """Fold every topic record of ``source`` (in order) into ``image``: the result equals
    ``TopicsDelta(image)`` with each topic record replayed, then (``snapshot``)
    ``finish_snapshot()``, then ``apply()`` -- the prefix in columns, the rest one record at a
    time (see the module doc).  Records of other types are skipped.  A record that does not
    decode, or that ``TopicsDelta`` refuses, raises :class:`BulkLoadError` naming it."""
    fr = framed_records(source)
    with paused_gc():
        bad = np.flatnonzero(fr.api_key == NOT_A_FRAME)
        if len(bad):
            fr.decode(int(bad[0]))  # raises, naming the record
        if snapshot and not image.is_empty():
            return _fold_snapshot(fr, image)
        return _fold(fr, image)


def load_topics_bulk(source: Sequence[bytes] | RecordColumns | FramedRecords,
                     image: TopicsImage = TopicsImage.EMPTY, *, snapshot: bool = False) -> TopicsImage:
    """The TopicsImage of :func:`fold_topics`."""
    return fold_topics(source, image, snapshot=snapshot).image


def _fold_snapshot(fr: FramedRecords, base: TopicsImage) -> TopicsLoad:
    """A snapshot over a non-empty ``base``: folded as from the empty image when it folds whole
    in columns and re-states no topic of ``base`` differently -- a topic id of ``base`` under
    another name, or a name of ``base`` under another id that the snapshot also re-states (then
    ``TopicsDelta.apply`` refuses it); else the record-at-a-time path over ``base``."""
    prefix = _prefix(fr, TopicsImage.EMPTY)
    why = prefix.fallback
    if why is None and _topic_rows(fr, prefix.cut):
        why = "the snapshot has topic records that do not fold in columns"
    if why is None:
        image = _prefix_image(prefix, TopicsImage.EMPTY)
        new_ids = image.topics_by_id
        base_ids, base_names = base.topics_by_id, base.topics_by_name
        for topic in new_ids.values():
            old = base_ids.get(topic.topic_id)
            if old is not None and old.name != topic.name:
                why = f"the snapshot renames topic {topic.topic_id} ({old.name} -> {topic.name})"
                break
            holder = base_names.get(topic.name)
            if holder is not None and holder.topic_id != topic.topic_id and holder.topic_id in new_ids:
                why = f"the snapshot gives topic name {topic.name} to another topic id"
                break
        else:
            return TopicsLoad(image, prefix.cut, len(prefix.names), prefix.partition_records, 0)
    return _record_at_a_time(fr, base, True, why)


def _topic_rows(fr: FramedRecords, lo: int) -> list[int]:
    keys = fr.api_key[lo:]
    rows: list[int] = (np.flatnonzero(np.isin(keys, list(TOPIC_TYPES))) + lo).tolist()
    return rows


def _fold(fr: FramedRecords, base: TopicsImage) -> TopicsLoad:
    prefix = _prefix(fr, base)
    if prefix.fallback is not None:
        return _record_at_a_time(fr, base, False, prefix.fallback)
    image = _prefix_image(prefix, base)
    rows = _topic_rows(fr, prefix.cut)
    t, p = len(prefix.names), prefix.partition_records
    if not rows:
        return TopicsLoad(image, prefix.cut, t, p, 0)
    try:
        after, removed = _replay_suffix(fr, image, rows, dict(zip(prefix.id_bytes, prefix.names)))
    except _FallBack as why:
        return _record_at_a_time(fr, base, False, str(why))
    return TopicsLoad(after, prefix.cut, t, p, len(rows), removed)


def _replay_suffix(fr: FramedRecords, image: TopicsImage, rows: list[int],
                   live: dict[bytes, str]) -> tuple[TopicsImage, tuple[tuple[int, str], ...]]:
    """Replay ``rows`` one at a time into a TopicsDelta over the prefix's ``image``.

    ``live``: id -> name of the prefix's topics not removed yet.  A TopicRecord re-using a live
    prefix topic's id or name, or a ClearElrRecord naming a prefix topic the suffix removed, is
    where one delta over the whole input and this two-step fold would differ (one delta never
    applied the prefix topic: it is replaced, or its name is unknown; here it is in ``image``):
    :class:`_FallBack`."""
    delta = TopicsDelta(image)
    live_names = set(live.values())
    removed_prefix: set[str] = set()
    removed: list[tuple[int, str]] = []
    for r in rows:
        record = fr.decode(r)
        key = record.API_KEY
        if key == TOPIC_RECORD:
            tid = record.topic_id
            if (isinstance(tid, Uuid) and tid.bytes in live) or record.name in live_names:
                raise _FallBack(f"record {r} re-creates topic {record.name} of the prefix")
        elif key == CLEAR_ELR_RECORD and record.topic_name in removed_prefix:
            raise _FallBack(f"record {r} clears the ELR of topic {record.topic_name}, removed")
        try:
            name = delta.replay(record)
        except Exception as exc:
            raise BulkLoadError(r, fr.offset(r), exc) from exc
        if key == REMOVE_TOPIC_RECORD:
            removed.append((r, str(name)))
            gone = live.pop(record.topic_id.bytes, None)
            if gone is not None:
                live_names.discard(gone)
                removed_prefix.add(gone)
    try:
        return delta.apply(), tuple(removed)
    except Exception as exc:
        raise BulkLoadError(None, None, exc) from exc


def _record_at_a_time(fr: FramedRecords, image: TopicsImage, snapshot: bool, why: str) -> TopicsLoad:
    """Every topic record through one ``TopicsDelta(image)`` (the path the bulk one must equal)."""
    delta = TopicsDelta(image)
    removed: list[tuple[int, str]] = []
    rows = _topic_rows(fr, 0)
    for r in rows:
        record = fr.decode(r)
        try:
            name = delta.replay(record)
        except Exception as exc:
            raise BulkLoadError(r, fr.offset(r), exc) from exc
        if record.API_KEY == REMOVE_TOPIC_RECORD:
            removed.append((r, str(name)))
    if snapshot:
        delta.finish_snapshot()
    try:
        out = delta.apply()
    except Exception as exc:
        raise BulkLoadError(None, None, exc) from exc
    return TopicsLoad(out, 0, 0, 0, len(rows), tuple(removed), why)


# ---------------------------------------------------------------------------------------------
# A whole MetadataImage
# ---------------------------------------------------------------------------------------------

def load_image_bulk(source: Sequence[bytes] | RecordColumns | FramedRecords,
                    image: MetadataImage = MetadataImage.EMPTY, *, provenance: MetadataProvenance,
                    snapshot: bool = False) -> MetadataImage:
    """The image after every record of ``source``: equal to ``MetadataDelta(image)`` with each
    record replayed in order, then (``snapshot``) ``finish_snapshot()``, then
    ``apply(provenance)`` (tests: every Kafka fixture, generated logs).  See :func:`bulk_delta`."""
    return bulk_delta(source, image, snapshot=snapshot).apply(provenance)


def bulk_delta(source: Sequence[bytes] | RecordColumns | FramedRecords,
               image: MetadataImage = MetadataImage.EMPTY, *, snapshot: bool = False) -> MetadataDelta:
    """The MetadataDelta of every record of ``source`` over ``image`` (finished as a snapshot when
    ``snapshot``), ready to ``apply``: what the loader hands its publishers.  The topics come from
    :func:`fold_topics`, taken by :meth:`MetadataDelta.replace_topics`; every other record is
    decoded the typed way and replayed into the delta (a snapshot's thousands of configs and
    brokers cost little next to its partitions), and where a RemoveTopicRecord was, the topic's
    configs are dropped, as ``MetadataDelta`` routes it.  The caller gives whole transactions
    (the loader's business, as for ``MetadataDelta.replay``).  Errors: :class:`BulkLoadError`
    naming the record's index (and offset when known)."""
    fr = framed_records(source)
    load = fold_topics(fr, image.topics, snapshot=snapshot)
    delta = MetadataDelta(image)
    delta.replace_topics(load.image)
    removed = dict(load.removed)
    keys = fr.api_key
    others = (keys != CONTROL) & ~np.isin(keys, list(TOPIC_TYPES - {REMOVE_TOPIC_RECORD}))
    with paused_gc():
        for r in np.flatnonzero(others).tolist():
            if keys[r] == REMOVE_TOPIC_RECORD:
                name = removed.get(r)
                if name is not None:
                    delta.get_or_create_configs_delta().delete_topic(name)
                continue
            record = fr.decode(r)
            try:
                delta.replay(record)
            except Exception as exc:
                raise BulkLoadError(r, fr.offset(r), exc) from exc
        if snapshot:
            delta.finish_snapshot()
    return delta


def load_snapshot_file(path: str | os.PathLike[str], image: MetadataImage = MetadataImage.EMPTY, *,
                       snapshot_id: SnapshotId | None = None) -> MetadataImage:
    """The image a ``.checkpoint`` file holds, loaded over ``image`` as a snapshot (what
    ``handle_load_snapshot`` does with its records): the file's batches scanned and CRC-checked,
    its records read as columns over the file's mmap (no bytes object per record), folded by
    :func:`load_image_bulk`.  The provenance is the snapshot's: its end offset - 1, its epoch
    (``snapshot_id``, else the file name's; a ``bootstrap.checkpoint`` is (0, 0)), the
    header's last contained log timestamp, batch-aligned.  The image keeps nothing of the file
    (the columns are decoded copies), so the file is closed on return."""
    with RecordsSnapshotReader(path, snapshot_id=snapshot_id) as reader:
        sid = reader.snapshot_id if reader.snapshot_id is not None else BOOTSTRAP_SNAPSHOT_ID
        provenance = MetadataProvenance(sid.end_offset - 1, sid.epoch, reader.last_contained_log_timestamp, True)
        return load_image_bulk(reader.records(), image, provenance=provenance, snapshot=True)
