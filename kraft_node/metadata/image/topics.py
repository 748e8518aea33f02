"""The topics of the metadata image (Kafka's ``TopicsImage``, ``TopicImage``, ``TopicsDelta``, ``TopicDelta``).

Why this shape: the image must hold a million partitions in at most 400 B each, load them in a
second, add a topic in microseconds at 100k topics and apply a zonal outage (10,000 partitions
of 6,667 topics) in milliseconds.  So:

* :class:`TopicsImage` keeps two persistent maps
  (:class:`~kraft_node.metadata.image.topic_map.TopicMap`: a C hash trie keyed by topic id or
  name, from the ``_topics_map`` kernel; its pure twin wraps ``immutables.Map``): topic id ->
  :class:`TopicImage`, and name -> topic id.  Kafka's second map is name -> TopicImage; holding
  the id instead means a delta that only changes partitions writes one map, not two (only a
  created, deleted or restated topic touches the name map); ``topics_by_name`` is Kafka's view
  (:class:`TopicsByName`).  ``apply`` is the kernel's
  (:func:`~kraft_node.metadata.image.topic_map.apply_topics_delta`): every changed topic's new
  objects are made and written into one transient tree in a C loop that prefetches the next
  topics' objects and trie paths (at 100k topics the loop is bound by cache misses, a dozen
  cold objects a topic); every unchanged :class:`TopicImage` is the previous image's object
  (shared by identity), and a map node is copied once per delta, never the map.
* a topic's partitions are a :class:`TopicPartitions`: an immutable ``Mapping[int,
  PartitionRegistration]`` over rows ``start .. stop - 1`` of a columnar
  :class:`~kraft_node.metadata.image.partition_block.PartitionBlock` (what a snapshot load
  builds, no object per partition) plus ``overrides``, a dict of the partitions changed or added
  since (looked up first).  A delta that changes k partitions of a topic makes a new
  TopicPartitions that shares the block and copies only the overrides: O(k + overrides), never
  O(partitions).  Kafka never deletes a single partition, so there is no tombstone.  When a
  topic's overrides grow past half its block rows (and past :data:`COMPACT_MIN_OVERRIDES`) the
  delta folds them into a new small block (:meth:`TopicPartitions.compacted`); below that size
  a dict of registrations is cheaper than a block rebuild on the apply path.

Invariants (kept by the constructors here; the bulk loader builds blocks and calls the same
constructors):

* ``topics_by_id[t].topic_id == t``, and ``topic_ids_by_name`` is exactly ``{t.name:
  t.topic_id}`` over ``topics_by_id`` (checked by :meth:`TopicsDelta.apply` for every topic a
  delta creates: a TopicRecord whose name or id is taken by another live topic is refused,
  where Kafka would leave the two maps disagreeing);
* a TopicPartitions' block rows are sorted by partition id, ``extra`` holds exactly the
  override ids that are not rows of the block, sorted, so ``len`` and iteration in partition-id
  order need no lookup;
* ``dense`` is true only when the block rows' partition ids are ``0 .. rows - 1`` (then a
  partition's row is ``start + id``: no search).

Replay semantics follow Kafka 4.x (``TopicsDelta.java``/``TopicDelta.java``):

* TopicRecord starts the topic over (an empty TopicImage), as a snapshot restating a topic
  does; PartitionRecord replaces a partition; PartitionChangeRecord is merged at replay time
  with :meth:`PartitionRegistration.merge` ("Unable to find partition <topic id>:<partition>"
  when neither the delta nor the image has it);
* RemoveTopicRecord returns the removed topic's name (the configs delta drops its configs); a
  topic created and removed in the same delta leaves no trace ("Unable to delete topic with id
  <id>: no such topic found." for one nobody knows);
* ClearElrRecord with a name clears that topic's ELR and last known ELR -- the topic created in
  this delta under that name if any, else the image's (skipped when this delta deleted it),
  "Unable to clear elr for topic with name <name>: no such topic found." when there is none --
  and with an empty name every live topic's.  Clearing is a merge of a change setting both to
  [] (so the partition epoch bumps, as in the controller) and only for partitions that have one;
* the election counters of Kafka 4.1 (unclean elections, elections from the ELR) per partition.

``local_changes(broker_id)`` is Kafka's ``localChanges``: the partitions this broker stops
hosting, leads (newly or with a new partition epoch), follows, and the directory each changed
local replica is in.

Where this differs from Kafka, on purpose (each on input Kafka's controller never writes, or
where Kafka's behaviour is an accident):

* a PartitionRecord or PartitionChangeRecord for a topic nobody has, or that this delta deleted,
  is a :class:`ReplayError` naming the record's topic id and partition (Kafka fails with a
  NullPointerException, or brings the deleted topic back);
* a TopicRecord taking a live topic's name, or renaming a live id, fails at ``apply`` (above);
* a directory counts as changed in ``local_changes`` when its value changes (Kafka compares the
  Uuid objects by reference, so it also reports a restated equal id);
* ELR written below 4.0-IV1 is a loss (below), not dropped silently.

Writing (``TopicsImage.write``): topics sorted by name, each its TopicRecord (v0) then its
PartitionRecords sorted by partition id, at ``metadata_version.partition_record_version()``:
exactly what the controller's snapshot writer
(:mod:`kraft_node.metadata.controller.replication_snapshot`) writes, so an image and the
controller write the same snapshot bytes.  Losses go to ``options.handle_loss``, once per
partition as Kafka's ``PartitionRegistration.toRecord``: real directories below 3.7-IV2 ("the
directory assignment state of one or more replicas"), and ELR below 4.0-IV1 ("the eligible
leader replicas of one or more partitions" -- Kafka drops those silently; a loss is never
silent here).

How (issue 22's target: a 1M-partition snapshot written in <= 2 s, through the loader's
sliced emitter): topics go in chunks of about :data:`WRITE_CHUNK` partitions, each chunk made
into a list of :class:`~kraft_node.metadata.controller.replication_snapshot.FramedRecord`
(an ApiMessageAndVersion whose ``encode()`` is its value and whose ``message`` is decoded on
demand; made by the ``_bulk_objects`` kernel, untracked by the cyclic collector) and then
handed to ``writer.write`` one record at a time, so the emitter can cut a slice after any
record.  A topic whose partitions are all rows of a block (no overrides: what a snapshot load
leaves) has its PartitionRecord values encoded straight from the block's columns by the
kernel's ``encode_partition_rows`` (no registration object; when a whole chunk is rows of one
block, one call gives the chunk's values in record order, each TopicRecord value -- framed
here by hand, :func:`_topic_record_value` -- before its rows).  The rest goes the
per-partition way: topics with overrides, and the rows the kernel leaves out (a tagged field:
a RECOVERING leader, an ELR at v2; a loss; a list of 127 or more) are made into registrations,
their losses reported in topic and partition order before any record of the chunk is written,
and encoded by :func:`~kraft_node.metadata.controller.replication_snapshot.encode_partition_records`.
Both ways give the typed encoder's bytes (``tests/image/test_topics_image_write.py``).
"""
from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER_CHANGE,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_node.metadata.controller.replication_snapshot import FramedRecord, encode_partition_records, paused_gc
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.topic_map import TopicMap, TopicPlan, apply_topics_delta
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid, uvarint_bytes

__all__ = ["COMPACT_MIN_OVERRIDES", "DIRECTORY_LOSS", "ELR_LOSS", "LocalReplicaChanges", "PartitionInfo",
           "TopicDelta", "TopicIdPartition", "TopicImage", "TopicPartition", "TopicPartitions", "TopicsByName",
           "TopicsByNameMutation", "TopicsDelta", "TopicsImage"]

#: Kafka's loss text for real directories written below 3.7-IV2.
DIRECTORY_LOSS = "the directory assignment state of one or more replicas"
#: The loss for a non-empty ELR or last known ELR written below 4.0-IV1.
ELR_LOSS = "the eligible leader replicas of one or more partitions"
#: A topic's overrides are folded into a new block only from this many (and more than half the rows).
COMPACT_MIN_OVERRIDES = 256
#: Up to this many topics changed or deleted, ``apply`` uses ``Map.set``/``delete`` rather than a mutation.
_SMALL_APPLY = 4
#: Partitions encoded per bulk call of the writer.
WRITE_CHUNK = 2048

_TOPIC = m.TopicRecord.API_KEY
_PARTITION = m.PartitionRecord.API_KEY
_PARTITION_CHANGE = m.PartitionChangeRecord.API_KEY
_REMOVE_TOPIC = m.RemoveTopicRecord.API_KEY
_CLEAR_ELR = m.ClearElrRecord.API_KEY
_MIGRATING = DirectoryId.MIGRATING
_new_object = object.__new__
_objects = load("_bulk_objects", "kraft_node")
#: FramedRecord's slots (ApiMessageAndVersion's, and its encoded value), as the controller's writer makes them
_FRAMED_SLOTS = ("version", "_value", "message")
_NO_OVERRIDES: dict[int, PartitionRegistration] = {}
#: a topic not encoded yet (never written into)
_NO_VALUES: list[bytes | None] = []
#: a TopicRecord v0's frame header (frame version 1, apiKey 2, version 0)
_TOPIC_HEADER = bytes((1, int(_TOPIC), 0))
_EMPTY_BLOCK_ROWS = (None, 0, 0)


# ---------------------------------------------------------------------------------------------
# Partitions of one topic
# ---------------------------------------------------------------------------------------------

class TopicPartitions(Mapping[int, PartitionRegistration]):
    """One topic's partitions: partition id -> PartitionRegistration, immutable.

    Rows ``start .. stop - 1`` of ``block`` (None: no block) and ``overrides`` on top.  Reads
    look in the overrides first; a block row is made into a registration on each read (nothing
    is cached: the image's memory is the arrays).  Iteration is in partition-id order.
    """

    __slots__ = ("_block", "_start", "_stop", "_overrides", "_extra", "_dense")

    _block: PartitionBlock | None
    _start: int
    _stop: int
    _overrides: dict[int, PartitionRegistration]
    _extra: tuple[int, ...]
    _dense: bool

    EMPTY: ClassVar[TopicPartitions]

    def __init__(self, partitions: Mapping[int, PartitionRegistration] | None = None, *,
                 block: PartitionBlock | None = None, start: int = 0, stop: int | None = None) -> None:
        """``TopicPartitions(mapping)``: a dict-backed topic; ``TopicPartitions(block=b, start=s,
        stop=e)``: rows ``s .. e - 1`` of ``b`` (sorted by partition id, unchecked here: the
        block's ``check(ranges)`` does it), optionally with ``partitions`` as overrides."""
        if block is None:
            if start or stop:
                raise ValueError("TopicPartitions: start/stop given without a block")
            rows: tuple[PartitionBlock | None, int, int] = _EMPTY_BLOCK_ROWS
        else:
            stop = len(block) if stop is None else stop
            if not 0 <= start <= stop <= len(block):
                raise ValueError(f"TopicPartitions: rows {start}..{stop} outside a block of {len(block)}")
            rows = (block, start, stop)
        overrides = dict(partitions) if partitions else _NO_OVERRIDES
        for pid, reg in overrides.items():
            if type(pid) is not int or pid < 0:
                raise ValueError(f"TopicPartitions: partition id {pid!r} is not a non-negative int")
            if not isinstance(reg, PartitionRegistration):
                raise ValueError(f"TopicPartitions: partition {pid} is a {type(reg).__name__}, "
                                 "not a PartitionRegistration")
        _init(self, rows[0], rows[1], rows[2], overrides, (), _is_dense(rows[0], rows[1], rows[2]))
        if overrides:
            self._extra = tuple(sorted(p for p in overrides if self._row(p) < 0))

    # -- building ------------------------------------------------------------------------
    def with_changes(self, changes: Mapping[int, PartitionRegistration],
                     added: Iterable[int] = ()) -> TopicPartitions:
        """These partitions with ``changes`` on top; ``added``: the ids among them that are not
        partitions here yet (the caller knows it from replay: nothing is looked up here).
        O(len(changes) + len(overrides)); the block is shared."""
        if not changes:
            return self
        old = self._overrides
        overrides = {**old, **changes} if old else dict(changes)
        out: TopicPartitions = _new_object(TopicPartitions)
        out._block = self._block
        out._start = self._start
        out._stop = self._stop
        out._overrides = overrides
        out._dense = self._dense
        if added:
            new = tuple(added)
            out._extra = tuple(sorted(self._extra + new)) if self._extra else tuple(sorted(new))
        else:
            out._extra = self._extra
        if len(overrides) >= COMPACT_MIN_OVERRIDES and 2 * len(overrides) > self._stop - self._start:
            return out.compacted()
        return out

    def compacted(self) -> TopicPartitions:
        """The same partitions in a new block of their own, with no overrides (O(partitions))."""
        pids = list(self)
        if not pids:
            return TopicPartitions.EMPTY
        block = PartitionBlock.from_registrations(pids, list(self.values()))
        return _make(block, 0, len(block), _NO_OVERRIDES, (), _is_dense(block, 0, len(block)))

    # -- Mapping -------------------------------------------------------------------------
    @property
    def block(self) -> PartitionBlock | None:
        return self._block

    @property
    def start(self) -> int:
        return self._start

    @property
    def stop(self) -> int:
        return self._stop

    @property
    def overrides(self) -> Mapping[int, PartitionRegistration]:
        """The partitions stated outside the block (do not change the dict: it is shared)."""
        return self._overrides

    def block_span(self) -> tuple[PartitionBlock, int, int] | None:
        """``(block, start, stop)`` when every partition is a block row (no overrides), else None:
        one call for an encoder that walks every topic (the broker's all-topics Metadata)."""
        block = self._block
        if block is None or self._overrides:
            return None
        return block, self._start, self._stop

    def _row(self, pid: int) -> int:
        """The block row of ``pid`` (-1: not a row)."""
        block = self._block
        if block is None:
            return -1
        if self._dense:
            return self._start + pid if 0 <= pid < self._stop - self._start else -1
        return block.row_of(pid, self._start, self._stop)

    def __getitem__(self, pid: int) -> PartitionRegistration:
        reg = self._overrides.get(pid)
        if reg is not None:
            return reg
        row = self._row(pid)
        if row < 0:
            raise KeyError(pid)
        assert self._block is not None
        return self._block.registration(row)

    def get(self, pid: int, default: Any = None) -> Any:
        reg = self._overrides.get(pid)
        if reg is not None:
            return reg
        if type(pid) is not int:
            return default
        row = self._row(pid)
        if row < 0:
            return default
        assert self._block is not None
        return self._block.registration(row)

    def get_many(self, pids: Sequence[int]) -> list[PartitionRegistration | None]:
        """``get`` of each of ``pids`` (None where there is none), the block rows' registrations
        made in one bulk call: the loader asks for every changed partition's previous state
        (``TopicDelta.local_changes``), 30,000 of them when a broker in 30,000 ISRs shuts down."""
        out: list[PartitionRegistration | None] = [None] * len(pids)
        overrides = self._overrides
        rows: list[int] = []
        where: list[int] = []
        for i, pid in enumerate(pids):
            reg = overrides.get(pid)
            if reg is not None:
                out[i] = reg
            elif type(pid) is int:
                row = self._row(pid)
                if row >= 0:
                    rows.append(row)
                    where.append(i)
        if rows:
            assert self._block is not None
            for i, reg in zip(where, self._block.registrations_at(np.asarray(rows, np.int64))):
                out[i] = reg
        return out

    def __contains__(self, pid: object) -> bool:
        if pid in self._overrides:
            return True
        return type(pid) is int and self._row(pid) >= 0

    def __len__(self) -> int:
        return self._stop - self._start + len(self._extra)

    def _block_pids(self) -> list[int]:
        if self._block is None:
            return []
        if self._dense:
            return list(range(self._stop - self._start))
        pids: list[int] = self._block.partition_id[self._start:self._stop].tolist()
        return pids

    def __iter__(self) -> Iterator[int]:
        pids = self._block_pids()
        if not self._extra:
            return iter(pids)
        return heapq.merge(pids, self._extra)

    def items(self) -> Iterator[tuple[int, PartitionRegistration]]:  # type: ignore[override]
        """(partition id, registration) in partition-id order; block rows made in bulk."""
        regs = [] if self._block is None else self._block.registrations(self._start, self._stop)
        return self._items_over(regs)

    def _items_over(self, block_regs: list[PartitionRegistration]) -> Iterator[tuple[int, PartitionRegistration]]:
        """``items()`` given the block rows' registrations (made by the caller, maybe in bulk
        with other topics')."""
        overrides = self._overrides
        block_items: Iterable[tuple[int, PartitionRegistration]] = zip(self._block_pids(), block_regs)
        if overrides:
            block_items = ((p, overrides.get(p) or r) for p, r in block_items)
        if not self._extra:
            return iter(block_items)
        return heapq.merge(block_items, ((p, overrides[p]) for p in self._extra), key=_first)

    def values(self) -> Iterator[PartitionRegistration]:  # type: ignore[override]
        return (reg for _pid, reg in self.items())

    def partitions_with_replica(self, broker_id: int) -> list[int]:
        """The partition ids whose replicas include ``broker_id`` (block rows found by numpy, not
        made into registrations)."""
        found: set[int] = {p for p, r in self._overrides.items() if broker_id in r.replicas}
        block = self._block
        if block is not None and self._stop > self._start:
            offsets = block.replicas_offsets[self._start:self._stop + 1]
            lo, hi = int(offsets[0]), int(offsets[-1])
            hits = np.flatnonzero(block.replicas[lo:hi] == broker_id) + lo
            if len(hits):
                rows = np.searchsorted(offsets, hits, side="right") - 1 + self._start
                for p in block.partition_id[np.unique(rows)].tolist():
                    if p not in self._overrides:
                        found.add(p)
        return sorted(found)

    def with_elr(self, cache: dict[int, Any] | None = None) -> list[tuple[int, PartitionRegistration]]:
        """(pid, registration) of the partitions with a non-empty ELR or last known ELR (block rows
        found by their offsets, only those made into registrations).  ``cache``: a dict kept by a
        caller that asks for many topics of the same blocks (the rows with an ELR are then found
        once per block)."""
        out = [(p, r) for p, r in self._overrides.items() if r.elr or r.last_known_elr]
        block = self._block
        if block is None or self._stop == self._start:
            return out
        s, e = self._start, self._stop
        if cache is None:
            rows = np.flatnonzero(_has_elr(block, s, e)) + s
        else:
            everywhere = cache.get(id(block))
            if everywhere is None:
                everywhere = cache[id(block)] = (block, np.flatnonzero(_has_elr(block, 0, len(block))))
            found = everywhere[1]
            rows = found[np.searchsorted(found, s):np.searchsorted(found, e)]
        for row in rows.tolist():
            pid = int(block.partition_id[row])
            if pid not in self._overrides:
                out.append((pid, block.registration(row)))
        return out

    # -- value ---------------------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Mapping):
            return NotImplemented
        if len(self) != len(other):
            return False
        if isinstance(other, TopicPartitions) and other._block is self._block and \
                (other._start, other._stop, other._extra) == (self._start, self._stop, self._extra):
            if other._overrides is self._overrides:
                return True
            keys = self._overrides.keys() | other._overrides.keys()
            return all(self[p] == other[p] for p in keys)
        if isinstance(other, TopicPartitions):
            return all(a == b for a, b in zip(self.items(), other.items()))
        return all(other.get(p) == r for p, r in self.items())

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if len(self) <= 8:
            inner = ", ".join(f"{p}: {r}" for p, r in self.items())
            return f"TopicPartitions({{{inner}}})"
        return (f"TopicPartitions({len(self)} partitions: block rows {self._start}..{self._stop}, "
                f"{len(self._overrides)} overrides)")


def _has_elr(block: PartitionBlock, s: int, e: int) -> Any:
    return (np.diff(block.elr_offsets[s:e + 1]) != 0) | (np.diff(block.last_known_elr_offsets[s:e + 1]) != 0)


def _first(item: tuple[int, PartitionRegistration]) -> int:
    return item[0]


def _is_dense(block: PartitionBlock | None, start: int, stop: int) -> bool:
    if block is None or stop == start:
        return True
    pids = block.partition_id
    return int(pids[start]) == 0 and int(pids[stop - 1]) == stop - start - 1


def _init(obj: TopicPartitions, block: PartitionBlock | None, start: int, stop: int,
          overrides: dict[int, PartitionRegistration], extra: tuple[int, ...], dense: bool) -> None:
    obj._block = block
    obj._start = start
    obj._stop = stop
    obj._overrides = overrides
    obj._extra = extra
    obj._dense = dense


def _make(block: PartitionBlock | None, start: int, stop: int, overrides: dict[int, PartitionRegistration],
          extra: tuple[int, ...], dense: bool) -> TopicPartitions:
    obj: TopicPartitions = _new_object(TopicPartitions)
    _init(obj, block, start, stop, overrides, extra, dense)
    return obj


TopicPartitions.EMPTY = _make(None, 0, 0, _NO_OVERRIDES, (), True)


# ---------------------------------------------------------------------------------------------
# Images
# ---------------------------------------------------------------------------------------------

class TopicImage:
    """One topic: ``name``, ``topic_id`` and its ``partitions`` (a :class:`TopicPartitions`;
    any other mapping given is copied into a dict-backed one).  Immutable (read-only
    properties over private slots: a delta's apply makes thousands of these, and a plain slot
    store is several times cheaper than a frozen class's ``object.__setattr__``); equal by
    content."""

    __slots__ = ("_name", "_topic_id", "_partitions")

    _name: str
    _topic_id: Uuid
    _partitions: TopicPartitions

    def __init__(self, name: str, topic_id: Uuid, partitions: Mapping[int, PartitionRegistration] | None = None):
        if not isinstance(name, str):
            raise ValueError(f"TopicImage: name {name!r} is not a str")
        if not isinstance(topic_id, Uuid):
            raise ValueError(f"TopicImage {name}: topic id {topic_id!r} is not a Uuid")
        if not isinstance(partitions, TopicPartitions):
            partitions = TopicPartitions(partitions) if partitions else TopicPartitions.EMPTY
        self._name = name
        self._topic_id = topic_id
        self._partitions = partitions

    @property
    def name(self) -> str:
        return self._name

    @property
    def topic_id(self) -> Uuid:
        return self._topic_id

    @property
    def partitions(self) -> TopicPartitions:
        return self._partitions

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """Its TopicRecord, then its PartitionRecords by partition id (see the module doc)."""
        _write_topics([self], writer, options)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, TopicImage):
            return NotImplemented
        return self.name == other.name and self.topic_id == other.topic_id and self.partitions == other.partitions

    def __hash__(self) -> int:
        return hash((self.name, self.topic_id))

    def __repr__(self) -> str:
        return f"TopicImage(name={self.name!r}, topic_id={self.topic_id}, partitions={self.partitions!r})"


def _topic(name: str, topic_id: Uuid, partitions: TopicPartitions) -> TopicImage:
    """A TopicImage without the constructor's checks (the delta's apply path)."""
    obj: TopicImage = _new_object(TopicImage)
    obj._name = name
    obj._topic_id = topic_id
    obj._partitions = partitions
    return obj


class TopicsImage:
    """Every topic: topic id -> TopicImage, and topic name -> topic id (two
    :class:`~kraft_node.metadata.image.topic_map.TopicMap`, persistent maps).

    Kafka maps a name to the TopicImage itself; here the name map holds the id, so that a delta
    changing a topic's partitions writes one map, not two (only a created, deleted or restated
    topic touches the name map).  ``topics_by_name`` is the view Kafka has, name -> TopicImage
    (:class:`TopicsByName`), resolved through both maps.

    Invariant: ``topic_ids_by_name[t.name] == t.topic_id`` for every topic ``t`` of
    ``topics_by_id``, and the name map has no other entry (kept by the delta's apply; the
    constructor takes the two maps as given)."""

    __slots__ = ("_by_id", "_ids_by_name")

    _by_id: TopicMap[Uuid, TopicImage]
    _ids_by_name: TopicMap[str, Uuid]

    EMPTY: ClassVar[TopicsImage]

    def __init__(self, topics_by_id: Mapping[Uuid, TopicImage],
                 topic_ids_by_name: Mapping[str, Uuid] | Mapping[str, TopicImage]) -> None:
        """``topic_ids_by_name``: name -> topic id -- what ``topics_by_name.update(...)`` and
        ``topics_by_name.mutate()...finish()`` give -- or a :class:`TopicsByName`, or name ->
        TopicImage (Kafka's layout: converted, O(n); told apart by its first value).  TopicMaps
        are taken as they are; any other mapping is copied into one (O(n))."""
        self._by_id = _as_topic_map(topics_by_id, "topics_by_id")
        if isinstance(topic_ids_by_name, TopicsByName):
            self._ids_by_name = topic_ids_by_name._ids
            return
        names: TopicMap[str, Any] = _as_topic_map(topic_ids_by_name, "topic_ids_by_name")
        first = next(iter(names.values()), None)
        if isinstance(first, TopicImage):
            names = TopicMap((n, t.topic_id) for n, t in names.items())
        elif first is not None and not isinstance(first, Uuid):
            raise ValueError(f"TopicsImage: the name map's values are topic ids, not {type(first).__name__}")
        self._ids_by_name = names

    @property
    def topics_by_id(self) -> TopicMap[Uuid, TopicImage]:
        return self._by_id

    @property
    def topics_by_name(self) -> TopicsByName:
        """name -> TopicImage (a view of both maps; see :class:`TopicsByName`)."""
        return TopicsByName(self._ids_by_name, self._by_id)

    @property
    def topic_ids_by_name(self) -> TopicMap[str, Uuid]:
        return self._ids_by_name

    @classmethod
    def of(cls, topics: Iterable[TopicImage]) -> TopicsImage:
        """An image of ``topics`` (ValueError when two share a name or an id).  Both maps are
        built in bulk (sorted by key hash, bottom-up: the layout later deltas copy cheapest)."""
        listed = list(topics)
        by_id: TopicMap[Uuid, TopicImage] = TopicMap((t.topic_id, t) for t in listed)
        names: TopicMap[str, Uuid] = TopicMap((t.name, t.topic_id) for t in listed)
        if len(by_id) != len(listed) or len(names) != len(listed):
            ids_seen: set[Uuid] = set()
            names_seen: set[str] = set()
            for t in listed:
                if t.topic_id in ids_seen:
                    raise ValueError(f"TopicsImage: topic id {t.topic_id} is given twice")
                if t.name in names_seen:
                    raise ValueError(f"TopicsImage: topic name {t.name} is given twice")
                ids_seen.add(t.topic_id)
                names_seen.add(t.name)
        return _topics_image(by_id, names)

    def including(self, topic: TopicImage) -> TopicsImage:
        """This image with ``topic`` put in (Kafka's ``including``; replaces a topic of that id and name)."""
        return _topics_image(self._by_id.set(topic.topic_id, topic),
                             self._ids_by_name.set(topic.name, topic.topic_id))

    def is_empty(self) -> bool:
        return len(self._by_id) == 0 and len(self._ids_by_name) == 0

    def get_topic(self, topic_id: Uuid) -> TopicImage | None:
        return self._by_id.get(topic_id)

    def get_topic_by_name(self, name: str) -> TopicImage | None:
        tid = self._ids_by_name.get(name)
        return None if tid is None else self._by_id.get(tid)

    def get_partition(self, topic_id: Uuid, partition_id: int) -> PartitionRegistration | None:
        topic = self._by_id.get(topic_id)
        if topic is None:
            return None
        reg: PartitionRegistration | None = topic.partitions.get(partition_id)
        return reg

    def partition_replicas(self, topic_id: Uuid, partition_id: int) -> list[int]:
        """The partition's replicas, [] for an unknown topic or partition (Kafka's ``partitionReplicas``)."""
        reg = self.get_partition(topic_id, partition_id)
        return [] if reg is None else list(reg.replicas)

    def topic_name_to_id_view(self) -> Mapping[str, Uuid]:
        """name -> topic id, read-only (Kafka's ``topicNameToIdView``): the name map itself."""
        return self._ids_by_name

    def topic_id_to_name_view(self) -> Mapping[Uuid, str]:
        """topic id -> name, a read-only view (Kafka's ``topicIdToNameView``)."""
        return _TranslatedView(self._by_id, _topic_name)

    def num_partitions(self) -> int:
        return sum(len(t.partitions) for t in self._by_id.values())

    def _by_sorted_name(self) -> Iterator[TopicImage]:
        by_id, ids = self._by_id, self._ids_by_name
        return (by_id[ids[n]] for n in sorted(ids.keys()))

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """Every topic, sorted by name (see the module doc)."""
        _write_topics(self._by_sorted_name(), writer, options)

    def compacted(self) -> TopicsImage:
        """An equal image whose partitions are all rows of one new block, with no overrides
        (O(partitions); the topic order of the block is by name)."""
        pids: list[int] = []
        regs: list[PartitionRegistration] = []
        bounds: list[tuple[TopicImage, int, int]] = []
        for topic in self._by_sorted_name():
            start = len(pids)
            for p, r in topic.partitions.items():
                pids.append(p)
                regs.append(r)
            bounds.append((topic, start, len(pids)))
        block = PartitionBlock.from_registrations(pids, regs)
        topics = [_topic(t.name, t.topic_id, TopicPartitions(block=block, start=a, stop=b))
                  for t, a, b in bounds]
        return TopicsImage.of(topics)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, TopicsImage):
            return NotImplemented
        return self._by_id == other._by_id and self._ids_by_name == other._ids_by_name

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if len(self._by_id) <= 8:
            inner = ", ".join(repr(t) for t in self._by_sorted_name())
            return f"TopicsImage([{inner}])"
        return f"TopicsImage({len(self._by_id)} topics)"


class TopicsByName(Mapping[str, TopicImage]):
    """name -> TopicImage: a read-only view of an image's two maps (name -> id -> topic; Kafka's
    ``topicsByName``).  O(1) to make; each read is two map lookups.

    For the callers that built an image's name map as Kafka lays it out, ``update`` and
    ``mutate`` take (name, TopicImage) and give what :class:`TopicsImage` takes: a name -> topic
    id :class:`~kraft_node.metadata.image.topic_map.TopicMap`."""

    __slots__ = ("_ids", "_by_id")

    def __init__(self, ids: TopicMap[str, Uuid], by_id: TopicMap[Uuid, TopicImage]) -> None:
        self._ids = ids
        self._by_id = by_id

    def __getitem__(self, name: str) -> TopicImage:
        return self._by_id[self._ids[name]]

    def get(self, name: str, default: Any = None) -> Any:
        tid = self._ids.get(name)
        return default if tid is None else self._by_id.get(tid, default)

    def __contains__(self, name: object) -> bool:
        return name in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def update(self, items: Iterable[tuple[str, TopicImage]]) -> TopicMap[str, Uuid]:
        """The name map with each (name, topic) put in (as name -> topic id)."""
        return self._ids.update((name, topic.topic_id) for name, topic in items)

    def mutate(self) -> TopicsByNameMutation:
        return TopicsByNameMutation(self._ids, self._by_id)

    def __repr__(self) -> str:
        return f"TopicsByName({len(self._ids)} topics)"


class TopicsByNameMutation:
    """:meth:`TopicsByName.mutate`: name -> TopicImage being changed (the topics put here are
    read back from here, the others through the image's id map); ``finish()`` gives the name ->
    topic id map."""

    __slots__ = ("_names", "_by_id", "_put")

    def __init__(self, ids: TopicMap[str, Uuid], by_id: TopicMap[Uuid, TopicImage]) -> None:
        self._names = ids.mutate()
        self._by_id = by_id
        self._put: dict[str, TopicImage] = {}

    def get(self, name: str, default: Any = None) -> Any:
        topic = self._put.get(name)
        if topic is not None:
            return topic
        tid = self._names.get(name)
        return default if tid is None else self._by_id.get(tid, default)

    def __getitem__(self, name: str) -> TopicImage:
        topic = self.get(name)
        if topic is None:
            raise KeyError(name)
        result: TopicImage = topic
        return result

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __len__(self) -> int:
        return len(self._names)

    def __setitem__(self, name: str, topic: TopicImage) -> None:
        self._names[name] = topic.topic_id
        self._put[name] = topic

    def set(self, name: str, topic: TopicImage) -> None:
        self[name] = topic

    def __delitem__(self, name: str) -> None:
        del self._names[name]
        self._put.pop(name, None)

    def finish(self) -> TopicMap[str, Uuid]:
        return self._names.finish()

    def __enter__(self) -> TopicsByNameMutation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def _topics_image(by_id: TopicMap[Uuid, TopicImage], ids_by_name: TopicMap[str, Uuid]) -> TopicsImage:
    """A TopicsImage of two TopicMaps, without the constructor's checks (the apply path)."""
    out: TopicsImage = _new_object(TopicsImage)
    out._by_id = by_id
    out._ids_by_name = ids_by_name
    return out


def _as_topic_map(m: Mapping[Any, Any], what: str) -> TopicMap[Any, Any]:
    if type(m) is TopicMap:
        return m
    if not isinstance(m, Mapping):
        raise ValueError(f"TopicsImage: {what} must be a mapping, not a {type(m).__name__}")
    return TopicMap(m)


TopicsImage.EMPTY = _topics_image(TopicMap(), TopicMap())



def _topic_name(t: TopicImage) -> str:
    return t.name


class _TranslatedView(Mapping[Any, Any]):
    """A read-only mapping whose values are ``fn(value)`` of an underlying map's."""

    __slots__ = ("_base", "_fn")

    def __init__(self, base: Mapping[Any, TopicImage], fn: Any) -> None:
        self._base = base
        self._fn = fn

    def __getitem__(self, key: Any) -> Any:
        return self._fn(self._base[key])

    def __iter__(self) -> Iterator[Any]:
        return iter(self._base)

    def __len__(self) -> int:
        return len(self._base)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

def _write_topics(topics: Iterable[TopicImage], writer: ImageWriter, options: ImageWriterOptions) -> None:
    version = options.metadata_version.partition_record_version()
    header = bytes((1, _PARTITION, version))
    chunk: list[TopicImage] = []
    size = 0
    for topic in topics:
        chunk.append(topic)
        size += len(topic._partitions) + 1
        if size >= WRITE_CHUNK:
            _write_records(_chunk_records(chunk, options, version, header), writer)
            chunk, size = [], 0
    if chunk:
        _write_records(_chunk_records(chunk, options, version, header), writer)


def _write_records(records: list[ApiMessageAndVersion], writer: ImageWriter) -> None:
    write = writer.write
    for record in records:
        write(record)


def _topic_record_value(name: str, topic_id: bytes) -> bytes:
    """A TopicRecord v0's framed value: frame header ``01 02 00``, Name (a compact string: uvarint
    length + 1, the UTF-8 bytes), TopicId (16 bytes), no tagged fields (``00``) -- what the
    generated encoder writes (tested), at a fraction of its cost per topic."""
    raw = name.encode()
    n = len(raw) + 1
    if n < 0x80:
        length = bytes((n,))
    else:
        length = uvarint_bytes(n)
    return _TOPIC_HEADER + length + raw + topic_id + b"\x00"


def _block_columns(block: PartitionBlock) -> tuple[Any, ...]:
    return tuple(getattr(block, name) for name in _objects.PARTITION_ROW_COLUMNS)


def _chunk_records(chunk: list[TopicImage], options: ImageWriterOptions, version: int,
                   header: bytes) -> list[ApiMessageAndVersion]:
    """The records of a chunk of topics, in order: each topic's TopicRecord, then its
    PartitionRecords by partition id.

    Two ways to a PartitionRecord value, same bytes (tested):

    * a topic whose partitions are all block rows (no overrides: what a snapshot load or a
      compaction leaves) is encoded straight from the block's columns by the ``_bulk_objects``
      kernel (``encode_partition_rows``: one call per block per chunk, no object per
      partition); the kernel leaves out (None) the rows whose record has a tagged field or
      whose writing is a loss;
    * those rows, and the topics with overrides, go the per-partition way: registrations made
      in bulk, each loss reported (``options.handle_loss``), then ``encode_partition_records``.

    Losses are reported in topic and partition-id order before any record of the chunk is
    written, exactly as a per-partition walk reports them (only the second way has any).
    """
    records = _one_block_records(chunk, version, header)
    if records is not None:
        return records
    n = len(chunk)
    values: list[list[bytes | None]] = [_NO_VALUES] * n
    fast: dict[int, tuple[PartitionBlock, list[int]]] = {}
    for i, topic in enumerate(chunk):
        parts = topic._partitions
        block = parts._block
        if block is not None and not parts._overrides and parts._stop > parts._start:
            fast.setdefault(id(block), (block, []))[1].append(i)
    special_rows: dict[int, list[int]] = {}
    for block, members in fast.values():
        spans = [(chunk[i]._partitions._start, chunk[i]._partitions._stop) for i in members]
        encoded: list[bytes | None] = _objects.encode_partition_rows(
            header, _block_columns(block), [s for s, _ in spans], [e for _, e in spans],
            [chunk[i]._topic_id.bytes for i in members], version)
        at = 0
        for i, (s, e) in zip(members, spans):
            values[i] = encoded[at:at + e - s]
            at += e - s
        if None in encoded:
            special_rows[id(block)] = [r for r, v in zip(_span_rows(spans), encoded) if v is None]
    slow = [i for i in range(n) if values[i] is _NO_VALUES and len(chunk[i]._partitions)]
    if not slow and not special_rows:
        return _framed(chunk, values, version)
    # the per-partition way, in topic and partition-id order
    slow_regs = dict(zip(slow, _block_registrations([chunk[i] for i in slow])))
    special_regs = {key: iter(fast[key][0].registrations_at(np.array(rows, np.int64)))
                    for key, rows in special_rows.items()}
    tids: list[Uuid] = []
    pids: list[int] = []
    regs: list[PartitionRegistration] = []
    places: list[tuple[list[bytes | None], int]] = []
    for i, topic in enumerate(chunk):
        parts = topic._partitions
        if i in slow_regs:
            items: Iterable[tuple[int, PartitionRegistration]] = parts._items_over(slow_regs[i])
            out: list[bytes | None] = [None] * len(parts)
            values[i] = out
            spots: Iterable[int] = range(len(out))
        elif parts._block is not None and id(parts._block) in special_regs and None in values[i]:
            out = values[i]
            spots = [k for k, v in enumerate(out) if v is None]
            regs_of = special_regs[id(parts._block)]
            first = parts._start
            pid_column = parts._block.partition_id
            items = ((pid_column.item(first + k), next(regs_of)) for k in spots)
        else:
            continue
        for k, (pid, reg) in zip(spots, items):
            tids.append(topic._topic_id)
            pids.append(pid)
            regs.append(_writable(reg, version, options))
            places.append((out, k))
    encoded_slow = encode_partition_records(tids, pids, regs, options.metadata_version)
    for (out, k), value in zip(places, encoded_slow):
        out[k] = value
    return _framed(chunk, values, version)


def _one_block_records(chunk: list[TopicImage], version: int, header: bytes) -> list[ApiMessageAndVersion] | None:
    """The chunk's records when every topic of it is rows of one block with no overrides and
    no row needs the per-partition way (a snapshot load's image: the usual case), else None.
    One kernel call gives every value in record order (each topic's TopicRecord value as the
    prefix of its rows); the versions are 0 at the TopicRecords' places."""
    first = chunk[0]._partitions._block
    if first is None:
        return None
    starts: list[int] = []
    stops: list[int] = []
    for topic in chunk:
        parts = topic._partitions
        if parts._block is not first or parts._overrides or parts._stop == parts._start:
            return None
        starts.append(parts._start)
        stops.append(parts._stop)
    prefixes = [_topic_record_value(t._name, t._topic_id.bytes) for t in chunk]
    values: list[bytes | None] = _objects.encode_partition_rows(
        header, _block_columns(first), starts, stops, [t._topic_id.bytes for t in chunk], version, prefixes)
    if None in values:
        return None
    counts = np.asarray(stops, np.int64) - np.asarray(starts, np.int64) + 1
    versions = np.full(len(values), version, np.int64)
    versions[np.cumsum(counts) - counts] = 0
    total = len(values)
    records: list[ApiMessageAndVersion] = _objects.new_objects(FramedRecord, _FRAMED_SLOTS,
                                                               (versions.tolist(), values, [None] * total), True)
    return records


def _writable(reg: PartitionRegistration, version: int, options: ImageWriterOptions) -> PartitionRegistration:
    """``reg`` as it can be written at PartitionRecord ``version``, its losses reported."""
    if version == 0 and reg.directories[0:1] and any(d != _MIGRATING for d in reg.directories):
        options.handle_loss(DIRECTORY_LOSS)
        reg = dataclasses.replace(reg, directories=DirectoryId.migrating_tuple(len(reg.replicas)))
    if version < 2 and (reg.elr or reg.last_known_elr):
        options.handle_loss(ELR_LOSS)
    return reg


def _span_rows(spans: list[tuple[int, int]]) -> Iterator[int]:
    for s, e in spans:
        yield from range(s, e)


def _framed(chunk: list[TopicImage], values: list[list[bytes | None]], version: int) -> list[ApiMessageAndVersion]:
    """Each topic's TopicRecord then its PartitionRecords, as FramedRecords (untracked by the
    cyclic collector: a bytes value and two ints, no cycle)."""
    flat: list[Any] = []
    for topic, vals in zip(chunk, values):
        flat.append(_topic_record_value(topic._name, topic._topic_id.bytes))
        flat += vals
    total = len(flat)
    versions = [version] * total
    at = 0
    for vals in values:  # the TopicRecords are v0
        versions[at] = 0
        at += len(vals) + 1
    records: list[ApiMessageAndVersion] = _objects.new_objects(FramedRecord, _FRAMED_SLOTS,
                                                               (versions, flat, [None] * total), True)
    return records


def _block_registrations(chunk: list[TopicImage]) -> list[list[PartitionRegistration]]:
    """Each topic's block rows as registrations, made with one ``registrations_at`` call per block
    for the whole chunk (a call per topic costs more than its ten rows)."""
    out: list[list[PartitionRegistration]] = [[] for _ in chunk]
    by_block: dict[int, tuple[PartitionBlock, list[int]]] = {}
    for i, topic in enumerate(chunk):
        parts = topic._partitions
        if parts._block is not None and parts._stop > parts._start:
            by_block.setdefault(id(parts._block), (parts._block, []))[1].append(i)
    for block, members in by_block.values():
        spans = [(chunk[i]._partitions._start, chunk[i]._partitions._stop) for i in members]
        lens = np.array([e - s for s, e in spans], np.int64)
        firsts = np.array([s for s, _ in spans], np.int64)
        ends = np.cumsum(lens)
        rows = np.arange(int(ends[-1]), dtype=np.int64) + np.repeat(firsts - (ends - lens), lens)
        regs = block.registrations_at(rows)
        at = 0
        for i, n in zip(members, lens.tolist()):
            out[i] = regs[at:at + n]
            at += n
    return out


# ---------------------------------------------------------------------------------------------
# Deltas
# ---------------------------------------------------------------------------------------------

class TopicPartition(NamedTuple):
    """A partition named by its topic's name (Kafka's ``TopicPartition``)."""
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class TopicIdPartition(NamedTuple):
    """A partition by topic id and name (Kafka's ``TopicIdPartition``: id + TopicPartition)."""
    topic_id: Uuid
    topic_partition: TopicPartition

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.topic_partition}"


class PartitionInfo(NamedTuple):
    """A changed partition handed to the broker's replica manager (Kafka's ``PartitionInfo``)."""
    topic_id: Uuid
    partition: PartitionRegistration


@dataclasses.dataclass(frozen=True)
class LocalReplicaChanges:
    """What a delta changes for one broker's replicas (Kafka's ``LocalReplicaChanges``).

    ``deletes``: partitions the broker no longer hosts; ``elected_leaders``: it leads them with
    a new leader epoch (a subset of ``leaders``); ``leaders``: it leads them and their partition
    epoch changed; ``followers``: it follows them and their partition epoch changed;
    ``topic_ids``: name -> id of the topics in ``leaders`` and ``followers``;
    ``directory_ids``: the directory of each changed or new local replica.
    """
    deletes: set[TopicPartition]
    elected_leaders: dict[TopicPartition, PartitionInfo]
    leaders: dict[TopicPartition, PartitionInfo]
    followers: dict[TopicPartition, PartitionInfo]
    topic_ids: dict[str, Uuid]
    directory_ids: dict[TopicIdPartition, Uuid]

    def __str__(self) -> str:
        return (f"LocalReplicaChanges(deletes = {self.deletes}, newly elected leaders = {self.elected_leaders}, "
                f"leaders = {self.leaders}, followers = {self.followers}, topicIds = {self.topic_ids}, "
                f"directoryIds = {self.directory_ids})")


def _clear_elr_change(topic_id: Uuid, pid: int) -> Any:
    return m.PartitionChangeRecord(partition_id=pid, topic_id=topic_id, leader=NO_LEADER_CHANGE,
                                   eligible_leader_replicas=[], last_known_elr=[])


class TopicDelta:
    """Changes to one topic: partition id -> its new registration (merged at replay time)."""

    __slots__ = ("image", "_changes", "_added", "_unclean_elections", "_elr_elections")

    def __init__(self, image: TopicImage) -> None:
        self.image = image
        self._changes: dict[int, PartitionRegistration] = {}
        #: ids of partitions the image does not have (in the order first replayed)
        self._added: dict[int, None] = {}
        self._unclean_elections: dict[int, int] = {}
        self._elr_elections: dict[int, int] = {}

    @property
    def name(self) -> str:
        return self.image.name

    @property
    def topic_id(self) -> Uuid:
        return self.image.topic_id

    def partition_changes(self) -> Mapping[int, PartitionRegistration]:
        return self._changes

    def new_partitions(self) -> dict[int, PartitionRegistration]:
        """The changed partitions the image does not have."""
        return {p: self._changes[p] for p in self._added}

    def partition_to_unclean_leader_election_count(self) -> Mapping[int, int]:
        return self._unclean_elections

    def partition_to_elr_election_count(self) -> Mapping[int, int]:
        return self._elr_elections

    def _previous(self, pid: int) -> PartitionRegistration | None:
        prev = self._changes.get(pid)
        if prev is None:
            prev = self.image.partitions.get(pid)
        return prev

    def _count_election(self, pid: int, prev: PartitionRegistration, leader: int, recovery_state: int) -> None:
        if recovery_state == LeaderRecoveryState.RECOVERING:
            self._unclean_elections[pid] = self._unclean_elections.get(pid, 0) + 1
        if leader in prev.elr:
            self._elr_elections[pid] = self._elr_elections.get(pid, 0) + 1

    def replay(self, record: Any) -> None:
        """A PartitionRecord, a PartitionChangeRecord, or a ClearElrRecord (for this topic)."""
        key = record.API_KEY
        if key == _PARTITION:
            self._replay_partition(record)
        elif key == _PARTITION_CHANGE:
            self._replay_change(record)
        elif key == _CLEAR_ELR:
            self.clear_elr()
        else:
            raise ReplayError(f"TopicDelta cannot replay {type(record).__name__}")

    def _replay_partition(self, record: Any) -> None:
        pid = record.partition_id
        prev = self._previous(pid)
        if prev is None:
            self._added[pid] = None
        else:
            self._count_election(pid, prev, record.leader, record.leader_recovery_state)
        try:
            self._changes[pid] = PartitionRegistration.from_record(record)
        except ValueError as exc:
            raise ReplayError(f"Unable to replay PartitionRecord for {self.name}-{pid} "
                              f"(topic id {record.topic_id}): {exc}") from None

    def _replay_change(self, record: Any) -> None:
        pid = record.partition_id
        prev = self._previous(pid)
        if prev is None:
            raise ReplayError(f"Unable to find partition {record.topic_id}:{pid}")
        self._count_election(pid, prev, record.leader, record.leader_recovery_state)
        try:
            self._changes[pid] = prev.merge(record)
        except ValueError as exc:
            raise ReplayError(f"Unable to replay PartitionChangeRecord for {self.name}-{pid} "
                              f"(topic id {record.topic_id}): {exc}") from None

    def clear_elr(self, cache: dict[int, Any] | None = None) -> None:
        """Empty the ELR and last known ELR of every partition that has one (a merge: the
        partition epoch bumps).  ``cache``: see :meth:`TopicPartitions.with_elr`."""
        changes = self._changes
        for pid, reg in list(changes.items()):
            if reg.elr or reg.last_known_elr:
                changes[pid] = reg.merge(_clear_elr_change(self.image.topic_id, pid))
        self._clear_image_elr(self.image.partitions.with_elr(cache))

    def _clear_image_elr(self, found: list[tuple[int, PartitionRegistration]]) -> None:
        changes = self._changes
        for pid, reg in found:
            if pid not in changes:
                changes[pid] = reg.merge(_clear_elr_change(self.image.topic_id, pid))

    def apply(self) -> TopicImage:
        """The topic with the changes: the image itself when there are none."""
        if not self._changes:
            return self.image
        img = self.image
        return _topic(img.name, img.topic_id, img.partitions.with_changes(self._changes, self._added))

    def has_partitions_with_assignment_changes(self) -> bool:
        partitions = self.image.partitions
        for pid, reg in self._changes.items():
            if pid in self._added:
                return True
            prev = partitions.get(pid)
            if prev is None or not prev.has_same_assignment(reg):
                return True
        return False

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Kafka's ``TopicDelta.localChanges`` (see :class:`LocalReplicaChanges`)."""
        out = LocalReplicaChanges(set(), {}, {}, {}, {}, {})
        self._local_changes_into(broker_id, out)
        return out

    def _local_changes_into(self, broker_id: int, out: LocalReplicaChanges) -> None:
        name, tid = self.image.name, self.image.topic_id
        changes = self._changes
        added = self._added
        prevs = self.image.partitions.get_many([pid for pid in changes if pid not in added])
        prev_of = iter(prevs)
        for pid, reg in changes.items():
            prev = None if pid in added else next(prev_of)
            tp = TopicPartition(name, pid)
            local = broker_id in reg.replicas
            if not local:
                if prev is not None and broker_id in prev.replicas:
                    out.deletes.add(tp)
            elif prev is None or prev.partition_epoch != reg.partition_epoch:
                info = PartitionInfo(tid, reg)
                if reg.leader == broker_id:
                    out.leaders[tp] = info
                    if prev is None or prev.leader_epoch != reg.leader_epoch:
                        out.elected_leaders[tp] = info
                else:
                    out.followers[tp] = info
                out.topic_ids.setdefault(name, tid)
            # Kafka looks the broker's directory up in the previous registration first: a broker
            # that was not a replica before (a reassignment adding it) gets no entry
            if local and (prev is None or (broker_id in prev.replicas
                                           and prev.directory(broker_id) != reg.directory(broker_id))):
                out.directory_ids[TopicIdPartition(tid, tp)] = reg.directory(broker_id)

    def __repr__(self) -> str:
        return f"TopicDelta({self.image.name!r}, partitionChanges={self._changes!r})"


class TopicsDelta:
    """Changes to the topics image (Kafka's ``TopicsDelta``; replay semantics in the module doc)."""

    __slots__ = ("image", "_changed", "_deleted", "_created", "_created_ids")

    def __init__(self, image: TopicsImage) -> None:
        self.image = image
        #: topic id -> its delta; never holds a deleted topic
        self._changed: dict[Uuid, TopicDelta] = {}
        #: ids of topics of ``image`` that this delta deletes
        self._deleted: set[Uuid] = set()
        #: name -> id of the topics this delta creates (a later TopicRecord of the name wins;
        #: a removed one is forgotten)
        self._created: dict[str, Uuid] = {}
        #: ids of the topics this delta creates and does not remove
        self._created_ids: set[Uuid] = set()

    # -- questions -----------------------------------------------------------------------
    def changed_topics(self) -> Mapping[Uuid, TopicDelta]:
        return self._changed

    def changed_topic(self, topic_id: Uuid) -> TopicDelta | None:
        return self._changed.get(topic_id)

    def deleted_topic_ids(self) -> set[Uuid]:
        return set(self._deleted)

    def created_topic_ids(self) -> set[Uuid]:
        return set(self._created_ids)

    def topic_was_deleted(self, name: str) -> bool:
        """Whether the image's topic of that name is deleted (even if a new one took the name)."""
        tid = self.image._ids_by_name.get(name)
        return tid is not None and tid in self._deleted

    # -- replay --------------------------------------------------------------------------
    def replay(self, record: Any) -> str | None:
        """Fold one topic record in; a RemoveTopicRecord returns the removed topic's name."""
        key = record.API_KEY
        if key == _PARTITION_CHANGE or key == _PARTITION:
            self._topic_delta(record.topic_id, record).replay(record)
        elif key == _TOPIC:
            self._replay_topic(record)
        elif key == _REMOVE_TOPIC:
            return self._replay_remove(record)
        elif key == _CLEAR_ELR:
            self._replay_clear_elr(record)
        else:
            raise ReplayError(f"TopicsDelta cannot replay {type(record).__name__}")
        return None

    def _topic_delta(self, topic_id: Uuid, record: Any = None) -> TopicDelta:
        delta = self._changed.get(topic_id)
        if delta is None:
            topic = self.image.topics_by_id.get(topic_id)
            if topic is None or topic_id in self._deleted:
                if record is not None and record.API_KEY == _PARTITION_CHANGE:
                    raise ReplayError(f"Unable to find partition {topic_id}:{record.partition_id}")
                what = "" if record is None else f" for {type(record).__name__} of partition {record.partition_id}"
                raise ReplayError(f"Unable to find topic with id {topic_id}{what}")
            delta = self._changed[topic_id] = TopicDelta(topic)
        return delta

    def _replay_topic(self, record: Any) -> None:
        if not isinstance(record.topic_id, Uuid):
            raise ReplayError(f"TopicRecord {record.name!r} has no topic id")
        self._changed[record.topic_id] = TopicDelta(
            _topic(record.name, record.topic_id, TopicPartitions.EMPTY))
        self._created[record.name] = record.topic_id
        self._created_ids.add(record.topic_id)

    def _replay_remove(self, record: Any) -> str:
        tid = record.topic_id
        delta = self._changed.pop(tid, None)
        if delta is not None:
            name = delta.image.name
            if self._created.get(name) == tid:
                del self._created[name]
            self._created_ids.discard(tid)
            if tid in self.image.topics_by_id:
                self._deleted.add(tid)
            return name
        topic = self.image.topics_by_id.get(tid)
        if topic is None or tid in self._deleted:
            raise ReplayError(f"Unable to delete topic with id {tid}: no such topic found.")
        self._deleted.add(tid)
        return topic.name

    def _replay_clear_elr(self, record: Any) -> None:
        name = record.topic_name
        if name:
            tid = self._created.get(name)
            if tid is None:
                tid = self.image._ids_by_name.get(name)
                if tid is None:
                    raise ReplayError(f"Unable to clear elr for topic with name {name}: no such topic found.")
            if tid not in self._deleted:
                self._topic_delta(tid).clear_elr()
            return
        # every live topic; a topic of the image gets a delta only when it has an ELR to clear
        cache: dict[int, Any] = {}
        for tid, topic in self.image.topics_by_id.items():
            if tid in self._deleted:
                continue
            delta = self._changed.get(tid)
            if delta is not None:
                delta.clear_elr(cache)
                continue
            found = topic.partitions.with_elr(cache)
            if found:
                delta = self._changed[tid] = TopicDelta(topic)
                delta._clear_image_elr(found)
        for tid in self._created_ids:
            self._changed[tid].clear_elr(cache)

    def finish_snapshot(self) -> None:
        """Every topic of the image that the snapshot did not restate is deleted."""
        changed = self._changed
        for tid in self.image.topics_by_id.keys():
            if tid not in changed:
                self._deleted.add(tid)

    # -- result --------------------------------------------------------------------------
    def apply(self) -> TopicsImage:
        """The next image: O(changed topics); unchanged TopicImage objects are shared, and the
        image itself is returned when nothing changes.  The delta is not changed (it can be
        applied again, or replayed further and applied again).

        The work is the ``_topics_map`` kernel's
        (:func:`~kraft_node.metadata.image.topic_map.apply_topics_delta`: deletions, then each
        changed topic's new TopicPartitions and TopicImage, the created topics' name and id
        checks, both maps written in one transient tree each).  A big delta runs with the
        cyclic collector paused, and the kernel makes its new objects untracked (they hold no
        reference cycle): with 100k topics in the heap, the collections that an apply's
        allocations trigger would walk the whole image and cost more than the apply itself.
        The maps' nodes are C memory that no collection walks."""
        changed, deleted, image = self._changed, self._deleted, self.image
        if not changed and not deleted:
            return image
        if len(changed) + len(deleted) <= _SMALL_APPLY:  # (inline: adding one topic costs a few us)
            by_id, ids_by_name = apply_topics_delta(changed, deleted, self._created_ids, image._by_id,
                                                    image._ids_by_name, _PLAN)
        else:
            with paused_gc():
                by_id, ids_by_name = apply_topics_delta(changed, deleted, self._created_ids, image._by_id,
                                                        image._ids_by_name, _PLAN)
        if by_id is image._by_id and ids_by_name is image._ids_by_name:
            return image
        out: TopicsImage = _new_object(TopicsImage)
        out._by_id = by_id
        out._ids_by_name = ids_by_name
        return out

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Kafka's ``TopicsDelta.localChanges``: every changed topic's, plus the partitions of
        deleted topics that the broker hosted."""
        out = LocalReplicaChanges(set(), {}, {}, {}, {}, {})
        for delta in self._changed.values():
            delta._local_changes_into(broker_id, out)
        for tid in self._deleted:
            topic = self.image.topics_by_id[tid]
            for pid in topic.partitions.partitions_with_replica(broker_id):
                out.deletes.add(TopicPartition(topic.name, pid))
        return out

    def __repr__(self) -> str:
        return (f"TopicsDelta(changedTopics={self._changed!r}, deletedTopicIds={self._deleted!r}, "
                f"createdTopics={self._created!r})")


#: What the ``_topics_map`` kernel reads and makes.  A created topic may replace a topic of the
#: same id and name (a snapshot restating it) but not take a live topic's name or id under
#: another id or name: the kernel raises a ReplayError then.
_PLAN = TopicPlan(TopicDelta, TopicImage, TopicPartitions, TopicPartitions.EMPTY, COMPACT_MIN_OVERRIDES,
                  TopicPartitions.compacted, ReplayError)
