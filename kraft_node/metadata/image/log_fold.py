"""A long metadata log replayed into the image in bulk: columns in, a composable partial delta out.

Why: issue 23's headline benchmark replays a 10M-record controller log into a MetadataImage at
2M records/s or more on one core, and on Spark, where each task folds its own segments and the
driver composes the results in offset order.  Record at a time (decode an object, then
``MetadataDelta.replay``) runs at about 0.3M records/s.  Here whole chunks of record values are
decoded by the generated columnar decoder (:func:`kraft_storage.messages.columns.decode_bodies`)
and folded per record type without a Python object per record:

* topics and partitions (TopicRecord, PartitionRecord, PartitionChangeRecord,
  RemoveTopicRecord: about 55% of a controller's log) by the *partition fold*
  (``kraft_node._native._partition_fold``, pure twin in ``kraft_node._pure``): rows of the four
  tables merged in log order over a table of partitions in C; its module doc says how an entry
  folded without knowing the state before it stays exact (relative fields, added epochs,
  pending checks);
* ConfigRecords: last writer wins per (resource, key), found with one ``np.unique`` over the
  piece's keys; a RemoveTopicRecord deletes the topic's configs written before it (and the base
  image's): the deletions are read off the topic incarnations' removal offsets, so configs
  compose by merging the per-resource dicts;
* broker registrations (Register/Unregister, Fence/Unfence, BrokerRegistrationChange): one
  numpy pass per chunk finds, per broker, the last (un)registration and the last value of each
  changed field after it; the epoch checks ``ClusterDelta`` makes ("did not match the current
  broker epoch") are decided in the chunk, or kept as *pending* (first epoch required, first
  other epoch) when the registration is older than the piece -- the same run trick as the
  partition fold;
* RegisterControllerRecord: last one per controller;
* every other record type that changes the image (features, quotas, producer ids, ACLs, SCRAM,
  delegation tokens) is rare: decoded the typed way and replayed in order into its own
  sub-delta at apply (each of those sub-deltas sees only its own records, so the order among
  types does not matter);
* NoOpRecord, ZkMigrationStateRecord and the transaction markers change nothing (as
  ``MetadataDelta``: holding back an aborted transaction is the loader's business); control
  records are skipped.

ClearElrRecord changes every partition with an ELR, whatever the fold knows: it *cuts* the
stream.  The partial delta is a sequence of pieces, folds and cut records; applying it applies
a fold, then replays the cut record through ``MetadataDelta`` on the image so far, then goes
on (ClearElr is written once, when ELR is turned on, so this costs one apply per such record).

The result (:class:`PartialDelta`) holds numpy arrays, dicts keyed by config key and broker, and
typed records -- never a Python object per partition -- so a Spark task can return it pickled,
and the driver calls :meth:`PartialDelta.compose` in offset order and :meth:`PartialDelta.apply`.
Folding a log whole, or in pieces composed in order, gives the image ``MetadataDelta`` gives
when every record is replayed one at a time into one delta over the same base (tests: hypothesis
over generated logs at every split point, and Kafka's fixtures).

Errors: a record the one-at-a-time path refuses makes :meth:`PartialDelta.apply` raise
:class:`LogFoldError` naming that record's offset, with the message ``TopicsDelta`` /
``ClusterDelta`` give for it.  Which error comes first is only known once the state before the
piece is: a fold stops at the first error it can decide alone and keeps what it folded before
it (and the failing record's own requirements on the state below), and ``apply`` raises the
lowest offset among that and the pending checks that fail against the base.  Known differences
from one ``TopicsDelta`` over the whole log, all on logs a controller does not write: a
TopicRecord taking a live topic's name or id under another id or name is reported at its
TopicRecord's offset (``TopicsDelta.apply`` has none to give); a ClearElrRecord naming a topic
deleted earlier in the log is replayed over the image as it is just before it ("no such topic
found"), where one delta skips it when that topic was in the delta's base image (Kafka's
ClearElr depends on where the loader cut its deltas, too); and when one record breaks two rules
at once the message may name the other rule.
"""
from __future__ import annotations

import mmap
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.cluster_control import (
    SECURITY_PROTOCOLS,
    BrokerRegistration,
    ControllerRegistration,
)
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_snapshot import paused_gc
from kraft_node.metadata.image._changes import apply_changes
from kraft_node.metadata.image.bulk import framed_records
from kraft_node.metadata.image.cluster import ClusterDelta, ClusterImage
from kraft_node.metadata.image.configs import ConfigurationDelta, ConfigurationImage, ConfigurationsImage
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage, UnknownRecordTypeError
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicImage, TopicPartitions, TopicsImage
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.columns import MetadataColumns, RecordTypeColumns, decode_bodies
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import MessageError, Uuid

__all__ = ["DEFAULT_CHUNK_RECORDS", "ArrowApplier", "CutPiece", "FoldPiece", "LogFoldError", "LogFolder",
           "PartialDelta", "compose_all", "fold_log", "fold_range", "fold_values", "iter_chunks", "make_applier",
           "replay_log"]

_k = load("_partition_fold", package="kraft_node")
_frame = load("_frame")

#: Records decoded per chunk (the Spark reader's default batch: columns of this size stay in cache-friendly MBs).
DEFAULT_CHUNK_RECORDS = 131_072

_TOPIC = m.TopicRecord.API_KEY
_PARTITION = m.PartitionRecord.API_KEY
_CHANGE = m.PartitionChangeRecord.API_KEY
_REMOVE = m.RemoveTopicRecord.API_KEY
_CLEAR_ELR = m.ClearElrRecord.API_KEY
_CONFIG = m.ConfigRecord.API_KEY
_REGISTER = m.RegisterBrokerRecord.API_KEY
_UNREGISTER = m.UnregisterBrokerRecord.API_KEY
_FENCE = m.FenceBrokerRecord.API_KEY
_UNFENCE = m.UnfenceBrokerRecord.API_KEY
_BROKER_CHANGE = m.BrokerRegistrationChangeRecord.API_KEY
_CONTROLLER = m.RegisterControllerRecord.API_KEY
#: Types that change nothing in the image.
_NOTHING = frozenset({m.NoOpRecord.API_KEY, m.ZkMigrationStateRecord.API_KEY, m.BeginTransactionRecord.API_KEY,
                      m.EndTransactionRecord.API_KEY, m.AbortTransactionRecord.API_KEY})
#: Types replayed the typed way, in order, into their own sub-delta at apply.
_TYPED = frozenset({m.FeatureLevelRecord.API_KEY, m.ClientQuotaRecord.API_KEY, m.ProducerIdsRecord.API_KEY,
                    m.AccessControlEntryRecord.API_KEY, m.RemoveAccessControlEntryRecord.API_KEY,
                    m.UserScramCredentialRecord.API_KEY, m.RemoveUserScramCredentialRecord.API_KEY,
                    m.DelegationTokenRecord.API_KEY, m.RemoveDelegationTokenRecord.API_KEY})
_FOLDED = frozenset({_TOPIC, _PARTITION, _CHANGE, _REMOVE, _CONFIG, _REGISTER, _UNREGISTER, _FENCE, _UNFENCE,
                     _BROKER_CHANGE, _CONTROLLER})
_KNOWN = _FOLDED | _NOTHING | _TYPED | {_CLEAR_ELR}
#: The tables the columnar decoder is asked for (PartitionChangeRecord bodies are read in place by the kernel).
_DECODED = sorted((_FOLDED | {_CLEAR_ELR}) - {_CHANGE})
#: apiKey + 1 -> known to this fold / replayed the typed way (-1, not a frame, is index 0)
_IS_KNOWN = np.zeros(1 << 16, bool)
_IS_KNOWN[[k + 1 for k in _KNOWN]] = True
_IS_TYPED = np.zeros(1 << 16, bool)
_IS_TYPED[[k + 1 for k in _TYPED]] = True
_IS_DECODED = np.zeros(1 << 16, bool)
_IS_DECODED[[k + 1 for k in _DECODED]] = True
_BIG = np.iinfo(np.int64).max
#: PartitionRecord/PartitionChangeRecord list fields in the kernel's LIST_FIELDS order.
_LIST_SOURCES = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
                 "last_known_elr")
_RECORD_NAMES = {_PARTITION: "PartitionRecord", _CHANGE: "PartitionChangeRecord"}


class LogFoldError(ReplayError):
    """A record of the folded log that the image cannot take: ``offset`` is its log offset,
    the message the one-at-a-time path's (``TopicsDelta``, ``ClusterDelta``, ...)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(f"Record at offset {offset}: {message}")
        self.offset = offset
        self.reason = message


# ---------------------------------------------------------------------------------------------
# Failures: found while folding, worded once the names are known
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Failure:
    """An error at ``offset``; ``rank`` orders errors of one record (a check the one-at-a-time
    path makes earlier has the lower rank)."""
    offset: int
    rank: int
    message: str | None = None
    #: a partition fold error: (code, topic id bytes, partition id, detail, record type, record repr)
    topic: tuple[int, bytes, int, int, int, str | None] | None = None

    def key(self) -> tuple[int, int]:
        return (self.offset, self.rank)

    def error(self, names: dict[bytes, str]) -> LogFoldError:
        if self.topic is None:
            assert self.message is not None
            return LogFoldError(self.offset, self.message)
        code, tid_raw, pid, detail, api_key, text = self.topic
        tid = Uuid(tid_raw)
        name = names.get(tid_raw, "<unknown>")
        record = _RECORD_NAMES.get(api_key, "PartitionChangeRecord")
        if code == _k.E_UNKNOWN_TOPIC:
            if api_key == _PARTITION:
                return LogFoldError(self.offset, f"Unable to find topic with id {tid} for PartitionRecord of partition "
                                                 f"{pid}")
            return LogFoldError(self.offset, f"Unable to find partition {tid}:{pid}")
        if code == _k.E_UNKNOWN_PARTITION:
            return LogFoldError(self.offset, f"Unable to find partition {tid}:{pid}")
        if code == _k.E_REMOVE_UNKNOWN_TOPIC:
            return LogFoldError(self.offset, f"Unable to delete topic with id {tid}: no such topic found.")
        if code == _k.E_RECORD_DIRECTORIES:
            why = f"The lengths for replicas and directories do not match: {text}"
        elif code == _k.E_RECOVERY_STATE:
            why = f"Value {detail} is not a valid leader recovery state"
        else:
            why = "The lengths for replicas and directories do not match."
        return LogFoldError(self.offset, f"Unable to replay {record} for {name}-{pid} (topic id {tid}): {why}")


def _kernel_failure(err: tuple[int, int, int, bytes, int, int], api_key: int, text: str | None = None) -> _Failure:
    offset, _row, code, tid, pid, detail = err
    if code == _k.E_UNKNOWN_TOPIC and api_key < 0:  # found composing: the kind is the incarnation's first record's
        api_key = _PARTITION if detail == _k.K_PARTITION else _CHANGE
    return _Failure(offset, 1 if code in (_k.E_UNKNOWN_TOPIC, _k.E_UNKNOWN_PARTITION, _k.E_REMOVE_UNKNOWN_TOPIC) else 2,
                    topic=(code, tid, pid, detail, api_key, text))


def _first(*failures: _Failure | None) -> _Failure | None:
    found = [f for f in failures if f is not None]
    return min(found, key=_Failure.key) if found else None


# ---------------------------------------------------------------------------------------------
# Brokers
# ---------------------------------------------------------------------------------------------

#: (offset, epoch the record names, action) of a change that needs the registration before the piece.
_Check = tuple[int, int, str]


@dataclass
class _Broker:
    """One broker's registrations folded over a piece (see the module doc).

    ``first``/``other``: the checks on the registration as it was before the piece (the first
    change before any (un)registration in the piece, and the first such change naming another
    epoch); ``state``: 0 changed only, 1 registered in the piece (``record``), 2 unregistered;
    ``fenced``/``in_controlled_shutdown``/``directories``: the last value set by changes after
    the last (un)registration (None: none).
    """
    broker_id: int
    first: _Check | None = None
    other: _Check | None = None
    state: int = 0
    record: Any = None
    record_offset: int = -1
    fenced: bool | None = None
    in_controlled_shutdown: bool | None = None
    directories: tuple[Uuid, ...] | None = None

    @property
    def epoch(self) -> int:
        return int(self.record.broker_epoch)


def _concat_checks(a: _Broker, b: _Broker) -> tuple[_Check | None, _Check | None]:
    if a.first is None:
        return b.first, b.other
    if a.other is not None or b.first is None:
        return a.first, a.other
    if b.first[1] != a.first[1]:
        return a.first, b.first
    return a.first, b.other


def _epoch_failure(broker_id: int, check: _Check, current: int) -> _Failure:
    offset, epoch, action = check
    return _Failure(offset, 1, f"Tried to {action} broker {broker_id}, but the given epoch, {epoch}, did not match the "
                               f"current broker epoch, {current}")


def _absent_failure(broker_id: int, check: _Check) -> _Failure:
    return _Failure(check[0], 1, f"Tried to {check[2]} broker {broker_id}, but that broker was not registered.")


def _check_against(b: _Broker, state: int, epoch: int) -> _Failure | None:
    """``b``'s pending checks against a registration known to be ``state`` (1: registered at
    ``epoch``, 2 or absent: not registered)."""
    if b.first is None:
        return None
    if state != 1:
        return _absent_failure(b.broker_id, b.first)
    if b.first[1] != epoch:
        return _epoch_failure(b.broker_id, b.first, epoch)
    if b.other is not None:
        return _epoch_failure(b.broker_id, b.other, epoch)
    return None


def _compose_broker(a: _Broker | None, b: _Broker) -> tuple[_Broker, _Failure | None]:
    """``a`` then ``b`` (``a`` None: the broker was not touched before ``b``)."""
    if a is None:
        return b, None
    fail = None
    first, other = a.first, a.other
    if a.state == 0:
        first, other = _concat_checks(a, b)
    else:
        fail = _check_against(b, a.state, a.epoch if a.state == 1 else -1)
    if b.state != 0:
        return _Broker(b.broker_id, first, other, b.state, b.record, b.record_offset, b.fenced,
                       b.in_controlled_shutdown, b.directories), fail
    return _Broker(a.broker_id, first, other, a.state, a.record, a.record_offset,
                   a.fenced if b.fenced is None else b.fenced,
                   a.in_controlled_shutdown if b.in_controlled_shutdown is None else b.in_controlled_shutdown,
                   a.directories if b.directories is None else b.directories), fail


# ---------------------------------------------------------------------------------------------
# The partial delta
# ---------------------------------------------------------------------------------------------

@dataclass
class FoldPiece:
    """Records folded without a cut: the partition fold's arrays and the folded other types."""
    topics: dict[str, np.ndarray]
    #: (resource type id, resource name) -> key -> (value or None, offset of the key's last write)
    configs: dict[tuple[int, str], dict[str, tuple[str | None, int]]] = field(default_factory=dict)
    brokers: dict[int, _Broker] = field(default_factory=dict)
    #: controller id -> (offset, its last RegisterControllerRecord)
    controllers: dict[int, tuple[int, Any]] = field(default_factory=dict)
    #: (offset, record) of the types replayed the typed way, in log order
    records: list[tuple[int, Any]] = field(default_factory=list)
    first_offset: int = -1
    last_offset: int = -1


@dataclass
class CutPiece:
    """A record replayed on its own through ``MetadataDelta`` (ClearElrRecord)."""
    offset: int
    record: Any


Piece = FoldPiece | CutPiece


@dataclass
class PartialDelta:
    """A piece of log folded (module doc): compose pieces in offset order, apply onto an image.

    ``error``: the first error the fold could decide alone (the pieces hold what came before
    it); ``records``: the records folded (control records and NoOps included); ``provenance``:
    of the last batch read (None when not known, e.g. values folded without batches).
    """
    pieces: list[Piece]
    records: int = 0
    provenance: MetadataProvenance | None = None
    error: _Failure | None = None

    def compose(self, later: PartialDelta) -> PartialDelta:
        """This delta then ``later`` (``later`` folds the records after this one's)."""
        return compose_all([self, later])

    def apply(self, image: MetadataImage = MetadataImage.EMPTY,
              provenance: MetadataProvenance | None = None) -> MetadataImage:
        """The image after this delta's records, starting from ``image`` (LogFoldError for a
        record the image cannot take).  The cyclic collector is paused meanwhile: the topic and
        config images made hold no reference cycle, and with a big image in the heap the
        collections their allocations would trigger cost more than the apply."""
        with paused_gc():
            return self._apply(image, provenance)

    def _apply(self, image: MetadataImage, provenance: MetadataProvenance | None) -> MetadataImage:
        prov = provenance or self.provenance or image.provenance
        last = len(self.pieces) - 1
        for i, piece in enumerate(self.pieces):
            error = self.error if i == last else None  # the error is after every piece but the last
            if isinstance(piece, CutPiece):
                image = _apply_cut(image, piece, prov, error)
            else:
                image = _apply_fold(image, piece, prov, error)
        if self.error is not None:
            raise self.error.error(_names(image.topics, None))
        return image if image.provenance == prov else _with_provenance(image, prov)

    @property
    def entries(self) -> int:
        """Partitions held by the folds."""
        return sum(len(p.topics["inc"]) for p in self.pieces if isinstance(p, FoldPiece))


def _with_provenance(image: MetadataImage, prov: MetadataProvenance) -> MetadataImage:
    return MetadataImage(prov, image.features, image.cluster, image.topics, image.configs, image.client_quotas,
                         image.producer_ids, image.acls, image.scram, image.delegation_tokens)


def _compose_run(pieces: list[FoldPiece]) -> tuple[FoldPiece, _Failure | None]:
    """Consecutive fold pieces as one: each absorbed in order into one PartitionFold (O(entries)
    for the run, not per pair).  A refusal found composing ends the run there: the pieces after
    the one it is in are not composed (what follows a refused record is not replayed)."""
    fold = _k.PartitionFold()
    configs: dict[tuple[int, str], dict[str, tuple[str | None, int]]] = {}
    brokers: dict[int, _Broker] = {}
    controllers: dict[int, tuple[int, Any]] = {}
    records: list[tuple[int, Any]] = []
    fail: _Failure | None = None
    first = last = -1
    for piece in pieces:
        err = fold.absorb(piece.topics)
        if err is not None:
            fail = _first(fail, _kernel_failure(err, -1))
        for resource, keys in piece.configs.items():
            mine = configs.get(resource)
            configs[resource] = keys if mine is None else {**mine, **keys}
        for bid, state in piece.brokers.items():
            brokers[bid], f = _compose_broker(brokers.get(bid), state)
            fail = _first(fail, f)
        controllers.update(piece.controllers)
        records.extend(piece.records)
        if first < 0:
            first = piece.first_offset
        if piece.last_offset >= 0:
            last = piece.last_offset
        if fail is not None:
            break
    return FoldPiece(fold.export(), configs, brokers, controllers, records, first, last), fail


# ---------------------------------------------------------------------------------------------
# Applying
# ---------------------------------------------------------------------------------------------

def _apply_cut(image: MetadataImage, piece: CutPiece, prov: MetadataProvenance,
               error: _Failure | None) -> MetadataImage:
    if error is not None and error.offset < piece.offset:
        raise error.error(_names(image.topics, None))
    delta = MetadataDelta(image)
    try:
        delta.replay(piece.record)
    except (ReplayError, ValueError) as exc:
        raise LogFoldError(piece.offset, str(exc)) from None
    return delta.apply(prov)


def _names(topics: TopicsImage, fold: dict[str, np.ndarray] | None) -> dict[bytes, str]:
    """Topic id bytes -> name: the fold's created topics over the image's."""
    out = {tid.bytes: t.name for tid, t in topics.topics_by_id.items()}
    if fold is not None:
        noffs = fold["inc_name_offsets"].tolist()
        data = fold["inc_name_data"].tobytes()
        for i, (kind, raw) in enumerate(zip(fold["inc_kind"].tolist(), fold["inc_topic_id"])):
            if kind == _k.INC_CREATED:
                out[raw.tobytes()] = data[noffs[i]:noffs[i + 1]].decode("utf-8", "replace")
    return out


def _apply_fold(image: MetadataImage, piece: FoldPiece, prov: MetadataProvenance,
                error: _Failure | None) -> MetadataImage:
    failures: list[_Failure | None] = [error]
    topics, final, fail = _apply_topics(image.topics, piece.topics)
    failures.append(fail)
    cluster, fail = _apply_cluster(image.cluster, piece)
    failures.append(fail)
    delta = MetadataDelta(image)
    for offset, record in piece.records:
        try:
            delta.replay(record)
        except (ReplayError, ValueError) as exc:
            failures.append(_Failure(offset, 1, str(exc)))
            break
    first = _first(*failures)
    if first is not None:
        raise first.error(_names(image.topics, piece.topics))
    configs = _apply_configs(image.configs, piece.configs, _deletions(image.topics, piece.topics))
    rest = delta.apply(prov)
    return MetadataImage(prov, rest.features, cluster, topics, configs, rest.client_quotas, rest.producer_ids,
                         rest.acls, rest.scram, rest.delegation_tokens)


def _take(block: PartitionBlock, rows: np.ndarray) -> dict[str, np.ndarray]:
    """Rows of ``block`` as export-layout columns (lists compacted)."""
    out: dict[str, np.ndarray] = {
        "partition_id": block.partition_id[rows], "leader": block.leader[rows],
        "leader_epoch": block.leader_epoch[rows], "partition_epoch": block.partition_epoch[rows],
        "leader_recovery_state": block.leader_recovery_state[rows],
    }
    for name in _k.LIST_FIELDS:
        # only the rows' offsets are widened: the whole column's astype per topic made a
        # snapshot-loaded image (one block of ~1M rows) cost O(rows x topics) -- a broker's
        # metadata tail replay at 1M partitions took 18.5 s instead of 5 (session 17, H11)
        offsets = getattr(block, name + "_offsets")
        values = getattr(block, name)
        lo = offsets[rows].astype(np.int64)
        lengths = offsets[rows + 1].astype(np.int64) - lo
        new = np.zeros(len(rows) + 1, np.int64)
        np.cumsum(lengths, out=new[1:])
        idx = np.repeat(lo - new[:-1], lengths) + np.arange(new[-1], dtype=np.int64)
        out[name + "_offsets"] = new.astype(np.int32)
        out[name] = values[idx]
    return out


def _base_export(topics: TopicsImage, fold: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[TopicImage]]:
    """The image's topics that the fold's BASE incarnations name, as an exported piece of
    CREATED incarnations with absolute entries (what :meth:`PartitionFold.absorb` takes)."""
    wanted: list[TopicImage] = []
    seen: set[bytes] = set()
    by_id = topics.topics_by_id
    for kind, raw in zip(fold["inc_kind"].tolist(), fold["inc_topic_id"]):
        if kind != _k.INC_BASE:
            continue
        key = raw.tobytes()
        if key in seen:
            continue
        seen.add(key)
        topic = by_id.get(Uuid(key))
        if topic is not None:
            wanted.append(topic)
    parts: list[dict[str, np.ndarray]] = []
    counts: list[int] = []
    for topic in wanted:
        tp = topic.partitions
        block = tp.block
        if tp.overrides or block is None:
            items = sorted(tp.items())
            block = PartitionBlock.from_registrations([p for p, _ in items], [r for _, r in items])
            rows = np.arange(len(block), dtype=np.int64)
        else:
            rows = np.arange(tp.start, tp.stop, dtype=np.int64)
        parts.append(_take(block, rows))
        counts.append(len(rows))
    n = len(wanted)
    out: dict[str, np.ndarray] = {
        "inc_topic_id": np.frombuffer(b"".join(t.topic_id.bytes for t in wanted), np.uint8).reshape(n, 16).copy(),
        "inc_kind": np.full(n, _k.INC_CREATED, np.int8), "inc_state": np.full(n, _k.LIVE, np.int8),
        "inc_first_offset": np.full(n, -1, np.int64), "inc_first_kind": np.zeros(n, np.int8),
        "inc_first_partition": np.full(n, -1, np.int32), "inc_remove_offset": np.full(n, -1, np.int64),
    }
    names = [t.name.encode("utf-8") for t in wanted]
    noffs = np.zeros(n + 1, np.int64)
    np.cumsum([len(x) for x in names], out=noffs[1:])
    out["inc_name_offsets"] = noffs.astype(np.int32)
    out["inc_name_data"] = np.frombuffer(b"".join(names), np.uint8).copy()
    total = int(sum(counts))
    out["inc"] = np.repeat(np.arange(n, dtype=np.int32), counts)
    for name in ("partition_id", "leader", "leader_epoch", "partition_epoch"):
        out[name] = np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, np.int32)
    out["leader_recovery_state"] = (np.concatenate([p["leader_recovery_state"] for p in parts]) if parts
                                    else np.zeros(0, np.int8))
    out["flags"] = np.full(total, _k.F_ABSOLUTE | _k.F_LEADER, np.uint8)
    out["list_set"] = np.full(total, (1 << len(_k.LIST_FIELDS)) - 1, np.uint8)
    for name in ("need_offset", "a_off", "a2_off", "b_off", "b2_off"):
        out[name] = np.full(total, -1, np.int64)
    out["a_len"] = np.full(total, -1, np.int32)
    out["b_len"] = np.full(total, -1, np.int32)
    for name in _k.LIST_FIELDS:
        offs = [p[name + "_offsets"].astype(np.int64) for p in parts]
        lens = np.concatenate([np.diff(o) for o in offs]) if offs else np.zeros(0, np.int64)
        new = np.zeros(total + 1, np.int64)
        np.cumsum(lens, out=new[1:])
        out[name + "_offsets"] = new.astype(np.int32)
        if name == "directories":
            out[name] = (np.concatenate([p[name] for p in parts]) if parts else np.zeros((0, 16), np.uint8))
        else:
            out[name] = np.concatenate([p[name] for p in parts]) if parts else np.zeros(0, np.int32)
    return out, wanted


def _apply_topics(topics: TopicsImage, fold: dict[str, np.ndarray]) -> tuple[TopicsImage, dict[str, np.ndarray],
                                                                              _Failure | None]:
    """The topics image with the fold applied, the final arrays, and the first failure."""
    if not len(fold["inc_kind"]):
        return topics, fold, None
    base, base_topics = _base_export(topics, fold)
    state = _k.PartitionFold()
    state.absorb(base)
    err = state.absorb(fold)
    fail = None if err is None else _kernel_failure(err, -1)
    final = state.export(live_only=True)
    # a BASE incarnation left over names a topic the image does not have
    kinds = final["inc_kind"]
    missing = np.flatnonzero(kinds == _k.INC_BASE)
    if len(missing):
        i = int(missing[np.argmin(final["inc_first_offset"][missing])])
        fk = int(final["inc_first_kind"][i])
        code = _k.E_REMOVE_UNKNOWN_TOPIC if fk == _k.K_REMOVE else _k.E_UNKNOWN_TOPIC
        fail = _first(fail, _kernel_failure((int(final["inc_first_offset"][i]), -1, code,
                                             final["inc_topic_id"][i].tobytes(),
                                             int(final["inc_first_partition"][i]), fk), -1))
    if fail is not None:
        return topics, final, fail
    if np.any(final["flags"] & _k.F_ABSOLUTE == 0):
        raise AssertionError("a live partition is still relative after the base was absorbed")
    block = PartitionBlock(
        partition_id=final["partition_id"], leader=final["leader"], leader_epoch=final["leader_epoch"],
        partition_epoch=final["partition_epoch"], leader_recovery_state=final["leader_recovery_state"],
        **{f"{name}_offsets": final[name + "_offsets"] for name in _k.LIST_FIELDS},
        **{name: final[name] for name in _k.LIST_FIELDS})
    ninc = len(kinds)
    starts = np.searchsorted(final["inc"], np.arange(ninc + 1)).tolist()
    states = final["inc_state"].tolist()
    firsts = final["inc_first_offset"].tolist()
    noffs = final["inc_name_offsets"].tolist()
    ndata = final["inc_name_data"].tobytes()
    nbase = len(base_topics)
    with topics.topics_by_id.mutate() as ids, topics.topics_by_name.mutate() as names:
        # the image's topics the fold touched: the first incarnations (absorbed first)
        for i, topic in enumerate(base_topics):
            if states[i] != _k.LIVE:
                del ids[topic.topic_id]
                del names[topic.name]
        for i in range(ninc):
            if states[i] != _k.LIVE:
                continue
            name = ndata[noffs[i]:noffs[i + 1]].decode("utf-8")
            tid = Uuid(final["inc_topic_id"][i].tobytes())
            if i >= nbase:
                holder = names.get(name)
                if holder is not None and holder.topic_id != tid:
                    return topics, final, _Failure(firsts[i], 1, f"Topic name {name} is taken by topic id "
                                                   f"{holder.topic_id}: it cannot also name topic id {tid}")
                prev = ids.get(tid)
                if prev is not None and prev.name != name:
                    return topics, final, _Failure(firsts[i], 1, f"Topic id {tid} is topic {prev.name}: a "
                                                   f"TopicRecord cannot rename it to {name}")
            a, b = starts[i], starts[i + 1]
            parts = TopicPartitions(block=block, start=a, stop=b) if b > a else TopicPartitions.EMPTY
            new = TopicImage(name, tid, parts)
            ids[tid] = new
            names[name] = new
        new_ids, new_names = ids.finish(), names.finish()
    return TopicsImage(new_ids, new_names), final, None


def _deletions(topics: TopicsImage, fold: dict[str, np.ndarray]) -> dict[str, int]:
    """Topic name -> offset of its last removal in the fold."""
    out: dict[str, int] = {}
    removes = fold["inc_remove_offset"]
    hit = np.flatnonzero(removes >= 0)
    if not len(hit):
        return out
    noffs = fold["inc_name_offsets"]
    data = fold["inc_name_data"].tobytes()
    for i in hit.tolist():
        if fold["inc_kind"][i] == _k.INC_CREATED:
            name = data[int(noffs[i]):int(noffs[i + 1])].decode("utf-8")
        else:
            topic = topics.topics_by_id.get(Uuid(fold["inc_topic_id"][i].tobytes()))
            if topic is None:
                continue
            name = topic.name
        off = int(removes[i])
        if out.get(name, -1) < off:
            out[name] = off
    return out


def _apply_configs(image: ConfigurationsImage, configs: dict[tuple[int, str], dict[str, tuple[str | None, int]]],
                   deleted: dict[str, int]) -> ConfigurationsImage:
    """``image`` with the configs written (and the deleted topics' configs removed).  Exactly what
    ``ConfigurationsDelta`` gives (``delete_topic`` at each removal, then the later writes), built
    per resource: a resource the image does not have, or whose topic was deleted, is made from
    its writes directly."""
    if not configs and not deleted:
        return image
    types: dict[int, ConfigResourceType] = {}
    topic_type = ConfigResourceType.TOPIC
    per: dict[ConfigResource, dict[str, tuple[str | None, int]]] = {}
    for (rtype, rname), keys in configs.items():
        ctype = types.get(rtype)
        if ctype is None:
            ctype = types[rtype] = ConfigResourceType.for_id(rtype)
        if ctype is topic_type:
            gone = deleted.get(rname, -1)
            if gone >= 0:   # written before the topic's removal: gone with it
                keys = {k: w for k, w in keys.items() if w[1] > gone}
        resource = ConfigResource(ctype, rname)
        mine = per.get(resource)
        if mine is None:
            per[resource] = keys
        else:   # type ids Kafka does not define all read as UNKNOWN: the later write of a key wins
            merged = dict(mine)
            for k, w in keys.items():
                if k not in merged or merged[k][1] < w[1]:
                    merged[k] = w
            per[resource] = merged
    data = image.resource_data
    updates: dict[ConfigResource, ConfigurationImage | None] = {}
    for name in deleted:
        resource = ConfigResource.topic(name)
        if resource in data:
            updates[resource] = None
    for resource, keys in per.items():
        base = data.get(resource)
        if base is None or resource in updates:
            new = {k: w[0] for k, w in keys.items() if w[0] is not None}
            updates[resource] = ConfigurationImage(resource, new) if new else None
        elif keys:
            delta = ConfigurationDelta(base)
            delta.changes = {k: w[0] for k, w in keys.items()}
            img = delta.apply()
            updates[resource] = None if img.is_empty() else img
    new_data = apply_changes(data, updates)
    return image if new_data is data else ConfigurationsImage(new_data)


def _apply_cluster(image: ClusterImage, piece: FoldPiece) -> tuple[ClusterImage, _Failure | None]:
    if not piece.brokers and not piece.controllers:
        return image, None
    delta = ClusterDelta(image)
    fail: _Failure | None = None
    for bid, state in piece.brokers.items():
        current = image.broker(bid)
        f = _check_against(state, 1 if current is not None else 2, -1 if current is None else current.epoch)
        if f is not None:
            fail = _first(fail, f)
            continue
        if state.state == 2:
            delta.changed_brokers[bid] = None
            continue
        if state.state == 1:
            try:
                reg = BrokerRegistration.from_record(state.record)
            except (ReplayError, ValueError) as exc:
                fail = _first(fail, _Failure(state.record_offset, 2, str(exc)))
                continue
        else:
            assert current is not None
            reg = current
        new = reg.clone_with(state.fenced, state.in_controlled_shutdown, state.directories)
        if state.state == 1 or new is not current:
            delta.changed_brokers[bid] = new
    for cid, (offset, record) in piece.controllers.items():
        try:
            delta.changed_controllers[cid] = ControllerRegistration.from_record(record)
        except (ReplayError, ValueError) as exc:
            fail = _first(fail, _Failure(offset, 2, str(exc)))
    return delta.apply(), fail


# ---------------------------------------------------------------------------------------------
# Folding chunks of decoded columns
# ---------------------------------------------------------------------------------------------

@dataclass
class _Chunk:
    """Decoded record values: ``data`` holds them; per row: its offset, value position and length,
    frame (api key -1: not a metadata frame), body position and end, and whether it is a
    control record."""
    data: Any
    offsets: np.ndarray
    value_pos: np.ndarray
    value_len: np.ndarray
    api_key: np.ndarray
    version: np.ndarray
    body_pos: np.ndarray
    body_end: np.ndarray
    control: np.ndarray
    tables: MetadataColumns
    #: the PartitionChangeRecords' rows (their bodies are read by the kernel)
    change_rows: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets)

    def value(self, row: int) -> bytes:
        pos, n = int(self.value_pos[row]), int(self.value_len[row])
        return bytes(memoryview(self.data).cast("B")[pos:pos + n])

    def record(self, row: int) -> Any:
        return decode_metadata_record(self.value(row))[2]


def _span(table: RecordTypeColumns | None, lo: int, hi: int) -> tuple[int, int]:
    """The positions of ``table``'s rows in [lo, hi)."""
    if table is None:
        return 0, 0
    rows = table.rows
    return int(np.searchsorted(rows, lo)), int(np.searchsorted(rows, hi))


def _lists(t: RecordTypeColumns, a: int, b: int, valid: bool) -> list[Any]:
    out: list[Any] = []
    for name in _LIST_SOURCES:
        col = t[name]
        out.append(col.offsets[a:b + 1])
        out.append(col.child.values)
        if valid:
            out.append(None if col.valid is None else col.valid[a:b])
    return out


def _kernel_tables(chunk: _Chunk, lo: int, hi: int) -> tuple[Any, Any, Any, Any, Any]:
    """The kernel's tables for rows [lo, hi): topics, removes, partitions, None, raw changes."""
    tables = chunk.tables
    topics = removes = partitions = raw = None
    t = tables.tables.get(_TOPIC)
    a, b = _span(t, lo, hi)
    if t is not None and b > a:
        topics = (t.rows[a:b], t["topic_id"].values[a:b], t["name"].offsets[a:b + 1], t["name"].data)
    t = tables.tables.get(_REMOVE)
    a, b = _span(t, lo, hi)
    if t is not None and b > a:
        removes = (t.rows[a:b], t["topic_id"].values[a:b])
    t = tables.tables.get(_PARTITION)
    a, b = _span(t, lo, hi)
    if t is not None and b > a:
        partitions = (t.rows[a:b], t["partition_id"].values[a:b], t["topic_id"].values[a:b], t["leader"].values[a:b],
                      t["leader_epoch"].values[a:b], t["partition_epoch"].values[a:b],
                      t["leader_recovery_state"].values[a:b], *_lists(t, a, b, False))
    rows = chunk.change_rows
    a, b = int(np.searchsorted(rows, lo)), int(np.searchsorted(rows, hi))
    if b > a:
        r = rows[a:b]
        raw = (chunk.data, r, chunk.body_pos[r], chunk.body_end[r], chunk.version[r])
    return topics, removes, partitions, None, raw


def _strings(col: Any, a: int, b: int) -> list[bytes | None]:
    offs = col.offsets[a:b + 1].astype(np.int64)
    base = int(offs[0]) if len(offs) else 0
    raw = np.asarray(col.data[base:int(offs[-1])] if len(offs) else col.data[:0]).tobytes()
    o = (offs - base).tolist()
    out: list[bytes | None] = [raw[x:y] for x, y in zip(o, o[1:])]
    if col.valid is not None:
        valid = col.valid[a:b]
        if not valid.all():
            for i in np.flatnonzero(~valid).tolist():
                out[i] = None
    return out


def _excl_cumsum(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=out[1:])
    return out


#: Key matrices wider than this (a config key or resource name of kilobytes) take the dict path.
_MAX_KEY_BYTES = 512


class _ConfigBuffer:
    """A piece's ConfigRecords, kept as columns until the piece closes: then the last write of
    each (resource type, resource name, key) is found with one ``np.unique`` over fixed-width
    key rows (type byte, 4-byte length, name bytes, 4-byte length, key bytes: injective), and
    only those become Python objects -- 60k keys for the 260k ConfigRecords of a 10M log."""

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]] = []
        self.slow: dict[tuple[int, str], dict[str, tuple[str | None, int]]] = {}

    def add(self, t: RecordTypeColumns, a: int, b: int, offsets: np.ndarray) -> None:
        m = b - a
        types = t["resource_type"].values[a:b].astype(np.uint8)
        rn, nm, val = t["resource_name"], t["name"], t["value"]
        rn_off = rn.offsets[a:b + 1].astype(np.int64)
        nm_off = nm.offsets[a:b + 1].astype(np.int64)
        lr = np.diff(rn_off)
        ln = np.diff(nm_off)
        width = int((lr + ln).max()) + 9 if m else 9
        if width > _MAX_KEY_BYTES or self.slow:
            # rare: one dict for the rest of the piece, so the two paths never interleave
            names = cast("list[bytes]", _strings(rn, a, b))   # neither is nullable
            config_keys = cast("list[bytes]", _strings(nm, a, b))
            for rtype, rname, key, value, offset in zip(t["resource_type"].values[a:b].tolist(), names, config_keys,
                                                        _strings(val, a, b), offsets.tolist()):
                keys = self.slow.setdefault((rtype, rname.decode("utf-8")), {})
                keys[key.decode("utf-8")] = (None if value is None else value.decode("utf-8"), offset)
            return
        mat = np.zeros((m, width), np.uint8)
        idx = np.arange(m)
        mat[:, 0] = types
        for k in range(4):
            mat[:, 1 + k] = (lr >> (8 * (3 - k))) & 0xFF
        if lr.sum():
            rows = np.repeat(idx, lr)
            cols = 5 + np.arange(int(lr.sum())) - np.repeat(_excl_cumsum(lr), lr)
            mat[rows, cols] = rn.data[int(rn_off[0]):int(rn_off[-1])]
        for k in range(4):
            mat[idx, 5 + lr + k] = (ln >> (8 * (3 - k))) & 0xFF
        if ln.sum():
            rows = np.repeat(idx, ln)
            cols = 9 + np.repeat(lr, ln) + np.arange(int(ln.sum())) - np.repeat(_excl_cumsum(ln), ln)
            mat[rows, cols] = nm.data[int(nm_off[0]):int(nm_off[-1])]
        v_off = val.offsets[a:b + 1].astype(np.int64)
        v_data = np.asarray(val.data[int(v_off[0]):int(v_off[-1])]).copy()
        valid = None if val.valid is None else val.valid[a:b].copy()
        self.parts.append((mat, np.asarray(offsets, np.int64), v_off - v_off[0], v_data, valid))

    def result(self) -> dict[tuple[int, str], dict[str, tuple[str | None, int]]]:
        out: dict[tuple[int, str], dict[str, tuple[str | None, int]]] = {}
        if self.parts:
            width = max(p[0].shape[1] for p in self.parts)
            mats = [np.pad(p[0], ((0, 0), (0, width - p[0].shape[1]))) for p in self.parts]
            mat = np.ascontiguousarray(np.concatenate(mats))
            n = len(mat)
            keys = mat.view(np.dtype((np.void, width))).reshape(n)
            _u, first = np.unique(keys[::-1], return_index=True)
            last = np.sort(n - 1 - first)            # each key's last write, in log order
            offsets = np.concatenate([p[1] for p in self.parts])
            # the values, as one buffer with global offsets (each part's relative to its data)
            v_lens = np.concatenate([np.diff(p[2]) for p in self.parts])
            v_data = np.concatenate([p[3] for p in self.parts])
            v_start = np.zeros(n, np.int64)
            np.cumsum(v_lens[:-1], out=v_start[1:])
            v_valid = np.concatenate([np.ones(len(p[0]), bool) if p[4] is None else p[4] for p in self.parts])
            sel = mat[last]
            lr = (sel[:, 1:5].astype(np.int64) << np.array([24, 16, 8, 0])).sum(axis=1)
            rows = np.arange(len(last))
            ln = np.zeros(len(last), np.int64)
            for k in range(4):
                ln = (ln << 8) | sel[rows, 5 + lr + k]
            raw = sel.tobytes()
            vraw = v_data.tobytes()
            types = sel[:, 0].astype(np.int8).tolist()
            for j, (t, a, b, va, vl, ok, off) in enumerate(zip(
                    types, lr.tolist(), ln.tolist(), v_start[last].tolist(), v_lens[last].tolist(),
                    v_valid[last].tolist(), offsets[last].tolist())):
                base = j * width
                resource = (t, raw[base + 5:base + 5 + a].decode("utf-8"))
                written = out.get(resource)
                if written is None:
                    written = out[resource] = {}
                written[raw[base + 9 + a:base + 9 + a + b].decode("utf-8")] = (
                    vraw[va:va + vl].decode("utf-8") if ok else None, off)
        for resource, later in self.slow.items():   # the dict path took the piece's later records
            mine = out.get(resource)
            out[resource] = later if mine is None else {**mine, **later}
        return out


class _BrokerEvents:
    """One chunk's broker records in row order, as arrays (the numpy pass of the module doc)."""

    def __init__(self, chunk: _Chunk, lo: int, hi: int) -> None:
        rows, brokers, kinds, epochs, fenced, ics, dirs = [], [], [], [], [], [], []
        tables = chunk.tables.tables
        # kind: 0 register, 1 unregister, 2 change; action: 0 fence, 1 unfence, 2 change
        for key, kind, id_col, epoch_col in ((_REGISTER, 0, "broker_id", "broker_epoch"),
                                             (_UNREGISTER, 1, "broker_id", "broker_epoch"),
                                             (_FENCE, 2, "id", "epoch"), (_UNFENCE, 3, "id", "epoch"),
                                             (_BROKER_CHANGE, 4, "broker_id", "broker_epoch")):
            t = tables.get(key)
            a, b = _span(t, lo, hi)
            if t is None or b <= a:
                continue
            n = b - a
            rows.append(t.rows[a:b])
            brokers.append(t[id_col].values[a:b].astype(np.int64))
            kinds.append(np.full(n, kind, np.int8))
            epochs.append(t[epoch_col].values[a:b].astype(np.int64))
            if kind == 4:
                fenced.append(t["fenced"].values[a:b].astype(np.int8))
                ics.append(t["in_controlled_shutdown"].values[a:b].astype(np.int8))
                ld = t["log_dirs"].offsets
                has = (ld[a + 1:b + 1] - ld[a:b]) > 0
                dirs.append(np.where(has, np.arange(a, b), -1))
            else:
                fenced.append(np.full(n, 1 if kind == 2 else (-1 if kind == 3 else 0), np.int8))
                ics.append(np.zeros(n, np.int8))
                dirs.append(np.full(n, -1, np.int64))
        self.n = sum(len(r) for r in rows)
        if not self.n:
            return
        row = np.concatenate(rows)
        broker = np.concatenate(brokers)
        order = np.lexsort((row, broker))
        self.row = row[order]
        self.broker = broker[order]
        self.kind = np.concatenate(kinds)[order]
        self.epoch = np.concatenate(epochs)[order]
        self.fenced = np.concatenate(fenced)[order]
        self.ics = np.concatenate(ics)[order]
        self.dirs = np.concatenate(dirs)[order]
        self.offset = chunk.offsets[self.row]

    @staticmethod
    def action(kind: int) -> str:
        return ("fence", "unfence", "change")[kind - 2]


def _broker_chunk(chunk: _Chunk, lo: int, hi: int, acc: dict[int, _Broker]) -> tuple[dict[int, _Broker],
                                                                                        _Failure | None]:
    """Per broker, the chunk's rows [lo, hi) folded (_Broker), composed with ``acc`` where the
    check can be decided; the first failure (in the chunk or against ``acc``)."""
    ev = _BrokerEvents(chunk, lo, hi)
    out: dict[int, _Broker] = {}
    if not ev.n:
        return out, None
    n = ev.n
    kind = ev.kind
    is_abs = kind <= 1
    idx = np.arange(n)
    starts = np.flatnonzero(np.r_[True, ev.broker[1:] != ev.broker[:-1]])
    group = np.cumsum(np.r_[False, ev.broker[1:] != ev.broker[:-1]])   # each event's broker group
    last_abs = np.maximum.accumulate(np.where(is_abs, idx, -1))
    last_abs = np.where(last_abs >= starts[group], last_abs, -1)
    change = ~is_abs
    failures: list[_Failure | None] = []
    # changes after an (un)registration of the chunk: decided here
    after = change & (last_abs >= 0)
    if after.any():
        ref = last_abs[after]
        unreg = kind[ref] == 1
        bad_epoch = (ev.epoch[after] != ev.epoch[ref]) & ~unreg
        pos = np.flatnonzero(after)
        for mask, absent in ((unreg, True), (bad_epoch, False)):
            if mask.any():
                j = int(pos[np.argmax(mask)])
                check = (int(ev.offset[j]), int(ev.epoch[j]), _BrokerEvents.action(int(kind[j])))
                failures.append(_absent_failure(int(ev.broker[j]), check) if absent
                                else _epoch_failure(int(ev.broker[j]), check, int(ev.epoch[last_abs[j]])))
    # unknown fenced / inControlledShutdown values of BrokerRegistrationChangeRecords
    bad_value = (kind == 4) & (((ev.fenced < -1) | (ev.fenced > 1)) | ((ev.ics < 0) | (ev.ics > 1)))
    if bad_value.any():
        j = int(np.flatnonzero(bad_value)[np.argmin(ev.offset[bad_value])])
        record = chunk.record(int(ev.row[j]))
        if not -1 <= int(ev.fenced[j]) <= 1:
            text = f"Unable to replay {record!r}: unknown value for fenced field: {record.fenced}"
        else:
            text = (f"Unable to replay {record!r}: unknown value for inControlledShutdown field: "
                    f"{record.in_controlled_shutdown}")
        failures.append(_Failure(int(ev.offset[j]), 2, text))
    # registrations naming an unknown security protocol (BrokerRegistration.from_record refuses them)
    t = chunk.tables.tables.get(_REGISTER)
    a, b = _span(t, lo, hi)
    if t is not None and b > a:
        eps = t["end_points"]
        e0, e1 = int(eps.offsets[a]), int(eps.offsets[b])
        protocols = eps.child.fields["security_protocol"].values[e0:e1]
        bad = ~np.isin(protocols, np.fromiter(SECURITY_PROTOCOLS, np.int64))
        if bad.any():
            rec = a + int(np.searchsorted(eps.offsets[a:b + 1], e0 + int(np.argmax(bad)), side="right")) - 1
            row = int(t.rows[rec])
            try:
                BrokerRegistration.from_record(chunk.record(row))
                text = "unreadable broker registration"
            except (ReplayError, ValueError) as exc:
                text = str(exc)
            failures.append(_Failure(int(chunk.offsets[row]), 2, text))
    log_dirs = chunk.tables.tables[_BROKER_CHANGE]["log_dirs"] if _BROKER_CHANGE in chunk.tables else None
    ends = np.r_[starts[1:], n]
    for s, e in zip(starts.tolist(), ends.tolist()):
        bid = int(ev.broker[s])
        state = _Broker(bid)
        grp_abs = np.flatnonzero(is_abs[s:e])
        prefix_end = s + (int(grp_abs[0]) if len(grp_abs) else e - s)
        if prefix_end > s:  # changes before any (un)registration: checks on the registration before the chunk
            ep = ev.epoch[s:prefix_end]
            state.first = (int(ev.offset[s]), int(ep[0]), _BrokerEvents.action(int(kind[s])))
            other = np.flatnonzero(ep != ep[0])
            if len(other):
                j = s + int(other[0])
                state.other = (int(ev.offset[j]), int(ev.epoch[j]), _BrokerEvents.action(int(kind[j])))
        tail = s
        if len(grp_abs):
            j = s + int(grp_abs[-1])
            tail = j + 1
            if kind[j] == 1:
                state.state = 2
            else:
                state.state = 1
                state.record = chunk.record(int(ev.row[j]))
                state.record_offset = int(ev.offset[j])
        if tail < e:
            f = ev.fenced[tail:e]
            set_f = np.flatnonzero(f != 0)
            if len(set_f):
                state.fenced = bool(f[set_f[-1]] == 1)
            c = ev.ics[tail:e]
            set_c = np.flatnonzero(c == 1)
            if len(set_c):
                state.in_controlled_shutdown = True
            d = ev.dirs[tail:e]
            set_d = np.flatnonzero(d >= 0)
            if len(set_d) and log_dirs is not None:
                k = int(d[set_d[-1]])
                vals = log_dirs.child.values[int(log_dirs.offsets[k]):int(log_dirs.offsets[k + 1])]
                state.directories = tuple(Uuid(v.tobytes()) for v in vals)
        prev = acc.get(bid)
        if prev is not None and prev.state != 0:
            failures.append(_check_against(state, prev.state, prev.epoch if prev.state == 1 else -1))
        out[bid] = state
    return out, _first(*failures)


class LogFolder:
    """Folds chunks of a log, in order, into a :class:`PartialDelta` (:meth:`finish`).

    One PartitionFold, config dict and broker states are kept across chunks (no export per
    chunk); a ClearElrRecord closes the current fold piece.  After an error nothing more is
    folded (the partial delta then holds the records before it and the error).
    """

    def __init__(self) -> None:
        self._pieces: list[Piece] = []
        self._records = 0
        self._provenance: MetadataProvenance | None = None
        self._error: _Failure | None = None
        self._new_piece()

    def _new_piece(self) -> None:
        self._fold = _k.PartitionFold()
        self._configs = _ConfigBuffer()
        self._brokers: dict[int, _Broker] = {}
        self._controllers: dict[int, tuple[int, Any]] = {}
        self._typed: list[tuple[int, Any]] = []
        self._first = -1
        self._last = -1

    def _close_piece(self) -> None:
        if self._first < 0 and not self._fold.incarnations:
            return
        self._pieces.append(FoldPiece(self._fold.export(), self._configs.result(), self._brokers, self._controllers,
                                      self._typed, self._first, self._last))
        self._new_piece()

    @property
    def failed(self) -> bool:
        return self._error is not None

    # -- input ------------------------------------------------------------------------------
    def add_record_columns(self, cols: Any) -> None:
        """A chunk of decoded records (:class:`kraft_storage.record.RecordColumns`): control
        records skipped, every metadata record folded; the provenance follows its last batch."""
        n = len(cols)
        if not n:
            return
        k = np.empty(n, np.int16)
        v = np.empty(n, np.int16)
        b = np.empty(n, np.int64)
        _frame.read_frames(cols.data, cols.value_pos, cols.value_len, k, v, b)
        control = cols.is_control()
        end = cols.value_pos + np.maximum(cols.value_len, 0)
        self._add(cols.data, cols.offset, cols.value_pos, cols.value_len, k, v, b, end, control)
        last = cols.batches[-1]
        self._provenance = MetadataProvenance(int(last["base_offset"]) + int(last["last_offset_delta"]),
                                              int(last["partition_leader_epoch"]), int(last["max_timestamp"]), True)

    def add_arrow_batch(self, batch: Any) -> None:
        """A ``pyarrow.RecordBatch`` of the Spark reader's replay columns (at least ``offset``,
        ``partition_leader_epoch``, ``timestamp``, ``record_type`` -- null for a control record --
        and ``value``): the values are read in place from the Arrow buffers."""
        n = batch.num_rows
        if not n:
            return
        values = batch.column("value")
        _validity, voffs, vdata = values.buffers()
        offs = np.frombuffer(voffs, np.int32, n + 1, values.offset * 4).astype(np.int64)
        data = np.frombuffer(vdata, np.uint8) if vdata is not None else np.zeros(0, np.uint8)
        pos = offs[:-1]
        lens = (offs[1:] - pos).astype(np.int32)
        if values.null_count:
            lens[np.asarray(values.is_null())] = -1
        control = np.asarray(batch.column("record_type").is_null())
        k = np.empty(n, np.int16)
        v = np.empty(n, np.int16)
        b = np.empty(n, np.int64)
        _frame.read_frames(data, pos, lens, k, v, b)
        offsets = np.asarray(batch.column("offset"), np.int64)
        self._add(data, offsets, pos, lens, k, v, b, pos + np.maximum(lens, 0), control)
        epoch = int(np.asarray(batch.column("partition_leader_epoch")).max())
        self._provenance = MetadataProvenance(int(offsets[-1]), epoch,
                                              int(np.asarray(batch.column("timestamp")).max()), True)

    def add_values(self, values: Sequence[bytes], offsets: Sequence[int] | np.ndarray) -> None:
        """Framed metadata record values at ``offsets`` (a batch's records, or a test's)."""
        n = len(values)
        if len(offsets) != n:
            raise ValueError(f"{n} values but {len(offsets)} offsets")
        fr = framed_records(values)  # the bulk loader's join kernel and frame headers
        self._add(fr.data, np.asarray(offsets, np.int64), fr.value_pos, fr.value_len, fr.api_key, fr.version,
                  fr.body_pos, fr.body_end, np.zeros(n, bool))

    def _add(self, data: Any, offsets: np.ndarray, value_pos: np.ndarray, value_len: np.ndarray, api_key: np.ndarray,
             version: np.ndarray, body_pos: np.ndarray, body_end: np.ndarray, control: np.ndarray) -> None:
        if self._error is not None:
            return
        n = len(offsets)
        self._records += n
        keys = np.where(control, -1, api_key).astype(np.int16)
        changes = np.flatnonzero(keys == _CHANGE)
        index = keys.astype(np.int32) + 1
        try:
            # only the rows of the decoded types (a tenth of a controller's log): NoOps and changes are not walked
            tables = decode_bodies(data, body_pos, body_end, keys, version, offsets=offsets, types=_DECODED,
                                   rows=np.flatnonzero(_IS_DECODED[index]))
            bad_version = len(changes) and bool(np.any((version[changes] < 0) | (version[changes] > 2)))
        except MessageError:
            bad_version = True
        if bad_version:  # the generic decoder over every type names the first bad record
            decode_bodies(data, body_pos, body_end, keys, version, offsets=offsets, types=_DECODED + [_CHANGE])
            raise AssertionError("the columnar decoder took what the fold refused")
        chunk = _Chunk(data, offsets, value_pos, value_len, keys, version, body_pos, body_end, control, tables,
                       changes)
        # rows that stop the fold: a frame of no type this process knows, a value that is no frame
        stop = _BIG
        bad = ~control & ~_IS_KNOWN[index]
        if bad.any():
            stop = int(np.argmax(bad))
        cuts = tables.tables[_CLEAR_ELR].rows.tolist() if _CLEAR_ELR in tables else []
        lo = 0
        for cut in [c for c in cuts if c < stop] + [min(stop, n)]:
            if not self._fold_range(chunk, lo, cut):
                return
            if cut < n and cut < stop:
                self._close_piece()
                self._pieces.append(CutPiece(int(offsets[cut]), chunk.record(cut)))
            lo = cut + 1
        if stop < n:
            row = stop
            if keys[row] < 0:
                text = "not a metadata record (no frame header)"
            else:
                try:
                    text = f"Unknown metadata record type {type(chunk.record(row)).__name__}"
                except Exception as exc:  # a frame of an apiKey unknown here does not decode either
                    text = str(UnknownRecordTypeError(f"Unknown metadata record type (apiKey {int(keys[row])}): {exc}"))
            self._error = _Failure(int(offsets[row]), 0, text)

    def _fold_range(self, chunk: _Chunk, lo: int, hi: int) -> bool:
        """Rows [lo, hi) of ``chunk``; False after an error."""
        if hi <= lo:
            return True
        brokers, fail = _broker_chunk(chunk, lo, hi, self._brokers)
        stop = hi
        if fail is not None:
            stop = int(np.searchsorted(chunk.offsets, fail.offset))  # the failing record's row
        err = self._fold.fold(chunk.offsets, *_kernel_tables(chunk, lo, stop))
        if err is not None and err[2] == _k.E_UNDECODABLE:
            decode_bodies(chunk.data, chunk.body_pos, chunk.body_end, chunk.api_key, chunk.version,
                          offsets=chunk.offsets, types=[_CHANGE])
            raise AssertionError("the columnar decoder took a PartitionChangeRecord the fold refused")
        if err is not None:
            row = int(err[1])
            key = int(chunk.api_key[row])
            text = None
            if err[2] == _k.E_RECORD_DIRECTORIES:
                text = repr(chunk.record(row))
            kfail = _kernel_failure(err, key, text)
            fail = _first(fail, kfail)
        if fail is not None:
            stop = int(np.searchsorted(chunk.offsets, fail.offset))
            brokers, _ = _broker_chunk(chunk, lo, stop, self._brokers)
        self._fold_configs(chunk, lo, stop)
        for bid, state in brokers.items():
            self._brokers[bid], _ = _compose_broker(self._brokers.get(bid), state)
        self._fold_others(chunk, lo, stop)
        if stop > lo:
            if self._first < 0:
                self._first = int(chunk.offsets[lo])
            self._last = int(chunk.offsets[stop - 1])
        if fail is not None:
            self._error = fail
            return False
        return True

    def _fold_configs(self, chunk: _Chunk, lo: int, hi: int) -> None:
        t = chunk.tables.tables.get(_CONFIG)
        a, b = _span(t, lo, hi)
        if t is None or b <= a:
            return
        self._configs.add(t, a, b, chunk.offsets[t.rows[a:b]])

    def _fold_others(self, chunk: _Chunk, lo: int, hi: int) -> None:
        t = chunk.tables.tables.get(_CONTROLLER)
        a, b = _span(t, lo, hi)
        if t is not None and b > a:
            for row in t.rows[a:b].tolist():
                record = chunk.record(row)
                self._controllers[int(record.controller_id)] = (int(chunk.offsets[row]), record)
        keys = chunk.api_key[lo:hi]
        typed = np.flatnonzero(_IS_TYPED[keys.astype(np.int32) + 1])
        for row in (typed + lo).tolist():
            self._typed.append((int(chunk.offsets[row]), chunk.record(row)))

    def finish(self) -> PartialDelta:
        """The partial delta of everything added (the folder is spent)."""
        self._close_piece()
        return PartialDelta(self._pieces, self._records, self._provenance, self._error)


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

class ArrowApplier:
    """The image-apply stage of ``benchmarks/spark/stages.py`` (``--apply
    kraft_node.metadata.image.log_fold:make_applier``): the replay columns' Arrow batches folded
    as they come, the image made by :meth:`finish` (kept in :attr:`image`)."""

    def __init__(self, image: MetadataImage = MetadataImage.EMPTY) -> None:
        self.base = image
        self.folder = LogFolder()
        self.image: MetadataImage | None = None

    def apply(self, batch: Any) -> None:
        self.folder.add_arrow_batch(batch)

    def finish(self) -> MetadataImage:
        self.image = self.folder.finish().apply(self.base)
        return self.image


def make_applier() -> ArrowApplier:
    return ArrowApplier()


def fold_values(values: Sequence[bytes], offsets: Sequence[int] | np.ndarray | None = None,
                provenance: MetadataProvenance | None = None) -> PartialDelta:
    """Framed record values (offsets 0.. by default) folded into a partial delta."""
    folder = LogFolder()
    folder.add_values(values, np.arange(len(values)) if offsets is None else offsets)
    out = folder.finish()
    if provenance is not None:
        out.provenance = provenance
    return out


def _segment_files(path: str | os.PathLike[str]) -> list[str]:
    """The ``.log`` segments of a metadata log directory (or its parent log dir), or the file
    itself, in offset order."""
    p = os.fspath(path)
    if os.path.isfile(p):
        return [p]
    candidates = [p, os.path.join(p, "__cluster_metadata-0")]
    for d in candidates:
        if os.path.isdir(d):
            logs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
            if logs:
                return [os.path.join(d, f) for f in logs]
    raise FileNotFoundError(f"no .log segment at {p} (nor in {candidates[1]})")


def _batch_ranges(headers: np.ndarray, records: int) -> Iterator[tuple[int, int]]:
    """[a, b) ranges of batch rows holding about ``records`` records each (at least one batch)."""
    counts = np.cumsum(headers["records_count"].astype(np.int64))
    a, nb = 0, len(headers)
    while a < nb:
        before = int(counts[a - 1]) if a else 0
        b = max(int(np.searchsorted(counts, before + records, side="right")), a + 1)
        yield a, min(b, nb)
        a = b


def iter_chunks(path: str | os.PathLike[str], chunk_records: int = DEFAULT_CHUNK_RECORDS) -> Iterator[Any]:
    """RecordColumns of about ``chunk_records`` records at a time, every segment in order (mmap'd;
    a chunk must be used before the next is asked for)."""
    from kraft_storage.record import decode_record_columns, scan_batches
    for name in _segment_files(path):
        with open(name, "rb") as fh:
            if os.fstat(fh.fileno()).st_size == 0:
                continue
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        try:
            headers = scan_batches(mm, source=name).headers
            for a, b in _batch_ranges(headers, chunk_records):
                yield decode_record_columns(mm, headers[a:b], source=name)
        finally:
            try:
                mm.close()
            except BufferError:  # a caller still holds a view: the GC closes it
                pass


def fold_range(path: str | os.PathLike[str], start: int = 0, end: int | None = None,
               chunk_records: int = DEFAULT_CHUNK_RECORDS) -> PartialDelta:
    """The record batches in bytes [start, end) of one segment folded into a partial delta: what
    a Spark task does with its split (``kraft_storage.spark.files.Split``: ``path``, ``start``,
    ``end``); the driver composes the tasks' deltas in offset order (:func:`compose_all`)."""
    from kraft_storage.record import decode_record_columns, scan_batches
    name = os.fspath(path)
    folder = LogFolder()
    with open(name, "rb") as fh:
        if os.fstat(fh.fileno()).st_size == 0:
            return folder.finish()
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        headers = scan_batches(mm, start, end, source=name).headers
        for a, b in _batch_ranges(headers, chunk_records):
            folder.add_record_columns(decode_record_columns(mm, headers[a:b], source=name))
            if folder.failed:
                break
        return folder.finish()
    finally:
        try:
            mm.close()
        except BufferError:  # a caller still holds a view: the GC closes it
            pass


def fold_log(path: str | os.PathLike[str], chunk_records: int = DEFAULT_CHUNK_RECORDS) -> PartialDelta:
    """Every segment of a metadata log (a file, a ``__cluster_metadata-0`` directory or its
    parent) folded into one partial delta, from the log's first record: a log whose start was
    deleted after a snapshot is a delta over that snapshot's image (load it first, e.g. with
    :mod:`kraft_node.metadata.image.bulk`, and apply this on top)."""
    folder = LogFolder()
    for cols in iter_chunks(path, chunk_records):
        folder.add_record_columns(cols)
        if folder.failed:
            break
    return folder.finish()


def replay_log(path: str | os.PathLike[str], image: MetadataImage = MetadataImage.EMPTY,
               chunk_records: int = DEFAULT_CHUNK_RECORDS) -> MetadataImage:
    """``image`` with every record of the log at ``path`` replayed (LogFoldError for a record it
    cannot take)."""
    return fold_log(path, chunk_records).apply(image)


def compose_all(deltas: Iterable[PartialDelta]) -> PartialDelta:
    """Partial deltas of consecutive pieces of log, in offset order, as one (a run of fold pieces
    between cuts is composed in one pass).  After a refused record -- a delta's own error, or one
    found composing -- nothing later is kept: the result ends with the piece that holds it."""
    out: list[Piece] = []
    run: list[FoldPiece] = []
    records = 0
    provenance: MetadataProvenance | None = None
    error: _Failure | None = None

    def flush() -> _Failure | None:
        if not run:
            return None
        merged, fail = _compose_run(run)
        out.append(merged)
        run.clear()
        return fail

    for delta in deltas:
        records += delta.records
        if delta.provenance is not None:
            provenance = delta.provenance
        for piece in delta.pieces:
            if isinstance(piece, FoldPiece):
                run.append(piece)
                continue
            error = flush()
            if error is not None:
                break
            out.append(piece)
        if error is not None:
            break
        if delta.error is not None:
            error = _first(flush(), delta.error)
            break
    else:
        error = flush()
    return PartialDelta(out, records, provenance, error)

