"""Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, DeleteRecords, DescribeLogDirs and
FindCoordinator on a broker listener (Kafka's ``KafkaApis``
data paths over the :class:`ReplicaManager`).

Produce (v3-13, whatever the generated codec gives):

* ``acks`` other than 0, 1, -1: INVALID_REQUIRED_ACKS on every partition;
* a ``transactional_id``, or a transactional or control batch: refused (transactions are out of
  scope): INVALID_TXN_STATE for transactional data, INVALID_RECORD for a control batch sent by a
  client (Kafka: "Invalid attempt to append a control batch");
* per partition: UNKNOWN_TOPIC_OR_PARTITION (v13+: UNKNOWN_TOPIC_ID) when the image has no
  such partition, NOT_LEADER_OR_FOLLOWER when this broker does not lead it;
* the records are validated before the append (minimal, until H4's LogValidator lands:
  ``kraft_node/broker/log/validator.py``): exactly one batch of magic 2 (Kafka's
  ``ProduceRequest.validateRecords``: INVALID_RECORD), its CRC-32C (CORRUPT_MESSAGE), its size
  against ``max.message.bytes`` (MESSAGE_TOO_LARGE) and ``segment.bytes``
  (RECORD_LIST_TOO_LARGE), no empty batch (INVALID_RECORD), and a CreateTime timestamp not
  more than ``message.timestamp.after.max.ms`` in the future nor ``...before.max.ms`` in the
  past (INVALID_TIMESTAMP).  Compression is kept as produced (the bytes are appended as they
  came, with the offsets and leader epoch rewritten);
* acks=0: no answer at all (Kafka sends none); when a partition failed, the connection is
  closed instead, so that the client refreshes its metadata (Kafka does the same);
* acks=1: answered after the append; acks=-1: parked until the high watermarks pass the
  appended offsets (ReplicaManager's purgatory, bounded by ``timeout_ms``).

KIP-392 (v11+): with ``replica.selector.class`` set, a leader answers a consumer whose rack has
a closer in-sync replica with that replica's id in ``preferred_read_replica`` and no records
(at once, no wait); followers serve consumers up to their own high watermark (the rules are in
replica_selector.py).

Fetch (v4-18): consumers (replica id -1) read up to the high watermark (``read_uncommitted``
and ``read_committed`` read the same: no transactions, so the last stable offset is the high
watermark); followers (replica id >= 0, or ``replica_state`` from v15) read up to the log end
offset, update their fetch state on the leader (which may move the high watermark), and get a
``diverging_epoch`` when their last fetched epoch's end offset on the leader is below their
fetch offset (v12+).  Topics by name before v13 and by id from v13.  ``max_bytes`` bounds the
whole answer and ``partition_max_bytes`` each partition; the first partition with data gets at
least one whole batch (Kafka's ``minOneMessage``).  With less than ``min_bytes`` the fetch waits
up to ``max_wait_ms`` in the purgatory, re-run on appends.  Fetch sessions (KIP-227, v7+): Kafka's
FetchSessionCache (fetch_session.py): a full fetch of epoch 0 opens a session when the cache
has room, incremental fetches name only changed partitions and get only changed ones back.
The records of a partition (at least ``SPILL_MIN_BYTES``) go out as a file region of the segment:
the network layer sends them with ``sendfile`` (zero copy) and aborts the connection if the
segment is truncated before they are all sent; over TLS (``ctx.zero_copy`` False) they are one
``pread`` spilled into the frame without another copy (``encode_response(chunks=True)``).

ListOffsets (v1-11): earliest (-2), latest (-1: the high watermark for clients, the log end
offset for replica id -2 debugging), max timestamp (-3), earliest local (-4: the log start
offset), latest tiered (-5: offset -1, nothing is tiered) and by timestamp through the time
index (the first record whose timestamp is >= the target).

OffsetForLeaderEpoch (v2-4), DeleteRecords (v0-2, answered once the low watermark -- the minimum
log start offset over the replicas -- reached the new start) and DescribeLogDirs (v1-4).

FindCoordinator: COORDINATOR_NOT_AVAILABLE for every key (consumer groups and transactions are
out of scope), so group-based clients fail clearly and manual assignment works.
"""
from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from kraft_node.broker.fetch_session import (
    CachedPartition,
    FetchContext,
    FetchSessionCache,
    max_session_slots_from_properties,
)
from kraft_node.broker.log.producer_state import ProducerStateError
from kraft_node.broker.log.validator import (
    ProduceValidationError,
    ValidationConfig,
    fill_partition_response,
    validate_produce_records,
)
from kraft_node.broker.metadata_cache import KRaftMetadataCache
from kraft_node.broker.partition import Partition, PartitionError
from kraft_node.broker.replica_manager import ReplicaManager
from kraft_node.broker.replica_selector import ReplicaView
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.network.frames import FileRegion
from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.delete_records import DeleteRecordsResponse
from kraft_node.protocol.generated.describe_log_dirs import DescribeLogDirsResponse
from kraft_node.protocol.generated.fetch import FetchResponse
from kraft_node.protocol.generated.find_coordinator import FindCoordinatorResponse
from kraft_node.protocol.generated.list_offsets import ListOffsetsResponse
from kraft_node.protocol.generated.offset_for_leader_epoch import OffsetForLeaderEpochResponse
from kraft_node.protocol.generated.produce import ProduceResponse
from kraft_storage.errors import CorruptRecordError, KraftStorageError
from kraft_storage.log.errors import OffsetOutOfRange, RecordBatchTooLargeError
from kraft_storage.log.log import FetchData, KafkaLog, LogTruncatedDuringRead
from kraft_storage.messages.runtime import SPILL_MIN_BYTES
from kraft_storage.record.batch import RecordBatch, scan_batches

log = logging.getLogger("kraft.broker.data")

__all__ = ["PartitionApis", "offset_for_timestamp"]

_KEYS: Any = ApiKeys
_PR: Any = ProduceResponse
_FR: Any = FetchResponse
_LR: Any = ListOffsetsResponse

EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
CONSUMER_REPLICA_ID = -1
DEBUGGING_REPLICA_ID = -2
_SCAN_CHUNK = 1 << 20


def offset_for_timestamp(kl: KafkaLog, target: int) -> tuple[int, int] | None:
    """(timestamp, offset) of the first record whose timestamp is >= ``target`` (Kafka's
    ``fetchOffsetByTimestamp`` through the time index), or None when there is none."""
    for seg in kl.segments:
        if seg.largest_timestamp < target or seg.size == 0:
            continue
        _ts, floor_offset = seg.time_index.lookup(target)
        _off, pos = seg.offset_index.lookup(floor_offset)
        fd = seg.handle.fd
        while pos < seg.size:
            chunk = os.pread(fd, min(seg.size - pos, _SCAN_CHUNK), pos)
            scan = scan_batches(chunk, crc_mode=0, allow_partial_tail=True, raise_on_error=False)
            h = scan.headers
            if len(h) == 0:
                size = int.from_bytes(chunk[8:12], "big") + 12 if len(chunk) >= 12 else 0
                if size <= len(chunk) or size <= 12:
                    break
                chunk = os.pread(fd, size, pos)  # one batch larger than the chunk
                scan = scan_batches(chunk, crc_mode=0, allow_partial_tail=True, raise_on_error=False)
                h = scan.headers
                if len(h) == 0:
                    break
            hits = np.flatnonzero(h["max_timestamp"] >= target)
            if len(hits):
                batch = RecordBatch(chunk, h, int(hits[0]))
                for rec in batch.records():
                    if rec.timestamp >= target and rec.offset >= kl.log_start_offset:
                        return rec.timestamp, rec.offset
            pos += scan.end
    return None


class PartitionApis:
    """The data-plane handlers of one broker (see the module doc)."""

    def __init__(self, node_id: int, cache: KRaftMetadataCache, replica_manager: ReplicaManager, *,
                 props: dict[str, str] | None = None, clock_ms: Callable[[], int] | None = None) -> None:
        self.node_id = node_id
        self.cache = cache
        self.replicas = replica_manager
        self._props = dict(props or {})
        self._validation_configs: dict[str, tuple[Any, ValidationConfig]] = {}
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        #: KIP-227 incremental fetch sessions (``max.incremental.fetch.session.cache.slots``)
        self.fetch_sessions = FetchSessionCache(max_session_slots_from_properties(self._props),
                                                clock_ms=self._clock_ms)
        #: serve a follower session's idle partitions without a read (``_read_fetch``); False reads
        #: every partition (the tests' oracle)
        self.skip_idle_reads = True
        #: counters for the broker's metrics (Kafka's BrokerTopicMetrics totals)
        self.produce_requests = 0
        self.fetch_requests = 0
        self.bytes_in = 0
        self.bytes_out = 0
        self.messages_in = 0

    def handlers(self) -> dict[int, Callable[[RequestContext, Any], Any]]:
        return {int(_KEYS.PRODUCE): self.handle_produce, int(_KEYS.FETCH): self.handle_fetch,
                int(_KEYS.LIST_OFFSETS): self.handle_list_offsets,
                int(_KEYS.FIND_COORDINATOR): self.handle_find_coordinator,
                int(_KEYS.OFFSET_FOR_LEADER_EPOCH): self.handle_offset_for_leader_epoch,
                int(_KEYS.DELETE_RECORDS): self.handle_delete_records,
                int(_KEYS.DESCRIBE_LOG_DIRS): self.handle_describe_log_dirs}

    # ------------------------------------------------------------------ helpers
    def _partition_error(self, tp: TopicPartition) -> Errors:
        """The error for a partition this broker has no local replica of: unknown to the image,
        or hosted elsewhere."""
        image = self.cache.image()
        topic = image.topics.get_topic_by_name(tp.topic)
        if topic is None or tp.partition not in topic.partitions:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        return Errors.NOT_LEADER_OR_FOLLOWER

    def _topic_name(self, name: str | None, topic_id: Any, by_id: bool) -> tuple[str | None, Errors]:
        if not by_id:
            return name, Errors.NONE
        topic = self.cache.image().topics.get_topic(topic_id)
        if topic is None:
            return None, Errors.UNKNOWN_TOPIC_ID
        return topic.name, Errors.NONE

    # ------------------------------------------------------------------ Produce
    def handle_produce(self, ctx: RequestContext, body: Any) -> Any:
        version = ctx.api_version
        self.produce_requests += 1
        acks = int(body.acks)
        by_id = version >= 13
        now = self._clock_ms()
        results: dict[tuple[int, int], Any] = {}  # (topic index, partition index) -> PartitionProduceResponse
        required: dict[TopicPartition, tuple[int, int]] = {}
        keys: dict[TopicPartition, tuple[int, int]] = {}
        any_error = False
        for ti, t in enumerate(body.topic_data):
            name, topic_error = self._topic_name(t.name, t.topic_id, by_id)
            for pi, p in enumerate(t.partition_data):
                resp = _PR.PartitionProduceResponse(index=p.index, error_code=0, base_offset=-1,
                                                    log_append_time_ms=-1, log_start_offset=-1, record_errors=[],
                                                    error_message=None)
                results[(ti, pi)] = resp
                try:
                    error, message = self._produce_one(name, topic_error, p, acks, version, body, now, resp,
                                                       required, keys, (ti, pi))
                except Exception as exc:  # noqa: BLE001 - one partition's failure is its answer, not the connection's
                    log.exception("produce to %s-%s failed", name, p.index)
                    error, message = Errors.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}"
                if error != Errors.NONE:
                    any_error = True
                    resp.error_code = int(error)
                    resp.error_message = message if version >= 8 else None
        if acks == 0:
            # Kafka sends nothing for acks=0; a failure closes the connection so that the client
            # refreshes its metadata
            ctx.respond_frame(None if any_error else b"")
            return DEFERRED

        def answer() -> Any:
            topics = []
            for ti, t in enumerate(body.topic_data):
                parts = [results[(ti, pi)] for pi in range(len(t.partition_data))]
                topics.append(_PR.TopicProduceResponse(name=t.name, topic_id=t.topic_id, partition_responses=parts))
            return _PR(responses=topics, throttle_time_ms=0, node_endpoints=[])

        if acks != -1 or not required:
            return answer()

        def done(errors: dict[TopicPartition, Errors]) -> None:
            for tp, err in errors.items():
                if err != Errors.NONE:
                    r = results[keys[tp]]
                    r.error_code = int(err)
                    r.base_offset = -1
            ctx.respond(answer())

        self.replicas.wait_for_high_watermarks(required, int(body.timeout_ms), done)
        return DEFERRED

    def _produce_one(self, name: str | None, topic_error: Errors, p: Any, acks: int, version: int, body: Any,
                     now: int, resp: Any, required: dict[TopicPartition, tuple[int, int]],
                     keys: dict[TopicPartition, tuple[int, int]], key: tuple[int, int]) -> tuple[Errors, str | None]:
        if acks not in (0, 1, -1):
            return Errors.INVALID_REQUIRED_ACKS, f"Invalid required acks {acks}"
        if topic_error != Errors.NONE or name is None:
            return topic_error, None
        if body.transactional_id is not None:
            return Errors.INVALID_TXN_STATE, "transactions are not supported by kraft's broker"
        tp = TopicPartition(name, int(p.index))
        part = self.replicas.get_partition(tp)
        if part is None or not part.is_leader:
            err = self._partition_error(tp)
            if err == Errors.UNKNOWN_TOPIC_OR_PARTITION and version >= 13:
                err = Errors.UNKNOWN_TOPIC_ID
            return err, None
        try:
            # null records (the field is nullable) are an empty set: refused by the validator
            records = p.records if p.records is not None else b""
            validated = validate_produce_records(records, topic_partition=str(tp),
                                                 config=self._validation_config(name), now_ms=now,
                                                 produce_version=version)
        except ProduceValidationError as exc:
            log.debug("produce to %s refused: %s", tp, exc)
            fill_partition_response(exc, resp)
            return exc.error, exc.message
        except ValueError as exc:  # a topic config the validator cannot read (named in the message)
            return Errors.UNKNOWN_SERVER_ERROR, str(exc)
        if validated.is_transactional:
            return Errors.INVALID_TXN_STATE, "transactional records are not supported by kraft's broker"
        min_isr = self.replicas.min_insync_replicas(name)
        try:
            out = part.append_records_to_leader(validated, acks, min_isr)
        except PartitionError as exc:
            return exc.error, str(exc)
        except ProducerStateError as exc:
            # rare with a well-behaved producer, and what makes one bump its epoch: worth a line
            log.info("produce to %s refused: %s", tp, exc)
            return exc.error, str(exc)
        except RecordBatchTooLargeError as exc:
            return Errors.RECORD_LIST_TOO_LARGE, str(exc)
        except CorruptRecordError as exc:
            return Errors.CORRUPT_MESSAGE, str(exc)
        except KraftStorageError as exc:
            log.exception("append to %s failed", tp)
            return Errors.KAFKA_STORAGE_ERROR, str(exc)
        info = out.info
        if info is not None:
            self.bytes_in += info.bytes
            self.messages_in += info.records
        resp.base_offset = out.first_offset
        resp.log_append_time_ms = validated.log_append_time_ms
        resp.log_start_offset = part.log.log_start_offset
        self.replicas.on_high_watermark_or_append(tp)
        if acks == -1:
            required[tp] = (out.last_offset + 1, min_isr)
            keys[tp] = key
        return Errors.NONE, None

    def _validation_config(self, topic: str) -> ValidationConfig:
        """The validator's settings of ``topic``, made again only when the image's configs of the
        topic changed (the config map is the same object until then; an empty one is new each time)."""
        configs = self.replicas.topic_config(topic)
        hit = self._validation_configs.get(topic)
        # (a topic without overrides gets a new empty map at each call: equal, not identical)
        if hit is not None and (hit[0] is configs or not configs and not hit[0]):
            return hit[1]
        cfg = ValidationConfig.from_topic_configs(configs, self._props)
        self._validation_configs[topic] = (configs, cfg)
        return cfg

    # ------------------------------------------------------------------ Fetch
    def handle_fetch(self, ctx: RequestContext, body: Any) -> Any:
        version = ctx.api_version
        self.fetch_requests += 1
        replica_id = int(body.replica_state.replica_id) if version >= 15 else int(body.replica_id)
        # KIP-903: a follower's broker epoch from v15 (-1: not sent)
        replica_epoch = int(body.replica_state.replica_epoch) if version >= 15 else -1
        items = [(t.topic, t.topic_id, fp) for t in body.topics for fp in t.partitions]
        if version >= 7:
            forgotten = [(f.topic, f.topic_id, int(p)) for f in body.forgotten_topics_data or () for p in f.partitions]
            fctx = self.fetch_sessions.new_context(version, int(body.session_id), int(body.session_epoch),
                                                   replica_id >= 0, items, forgotten)
        else:
            fctx = FetchContext("sessionless", items)
        if fctx.kind == "error":
            return _FR(throttle_time_ms=0, error_code=int(fctx.error), session_id=0, responses=[], node_endpoints=[])
        zero_copy = bool(getattr(ctx, "zero_copy", False))  # (a context made by hand: bytes)
        # KIP-392: from v11 a consumer says its rack; the leader may point it at a closer replica
        client = (body.rack_id or None, ctx.listener) if version >= 11 and replica_id < 0 else None
        max_bytes = int(body.max_bytes)
        parts: list[Partition | None] = []
        tps: list[TopicPartition] = []
        # an incremental session of a follower: partitions with nothing new are not built (None)
        idle = fctx.cached if fctx.kind == "incremental" and replica_id >= 0 and self.skip_idle_reads else None
        first = self._read_fetch(fctx.items, max_bytes, version, replica_id, zero_copy, client, parts,
                                 replica_epoch=replica_epoch, idle=idle, tps=tps)
        total = sum(len(pd.records) for _n, _t, pd in first if pd is not None)
        # Kafka answers at once without a wait, with enough bytes (min_bytes 0 included), an error,
        # a diverging epoch or a preferred read replica
        if int(body.max_wait_ms) <= 0 or total >= int(body.min_bytes) or _must_answer(first):
            return self._fetch_answer(fctx, first)
        from_follower = replica_id >= 0
        # a consumer that a leader may send to a closer replica: that answer depends on the
        # followers' states too, so every wake-up re-reads (no cheap check)
        redirectable = client is not None and self.replicas.replica_selector is not None
        watched = [None if redirectable else self._fetch_positions(tps, from_follower)]

        def may_complete() -> bool:
            return watched[0] is None or self._fetch_positions(tps, from_follower) != watched[0]

        # the latest read's answers and partitions, while they hold no records (reusable, below)
        last: list[tuple[list[tuple[Any, Any, Any]], list[Partition | None]] | None] = \
            [(first, parts) if total == 0 else None]

        def retry(force: bool) -> bool:
            prev = last[0]
            if force and prev is not None and not may_complete():
                # The wait is over and nothing a read depends on changed since the last one
                # (_fetch_positions): it would find no records again.  Answer that read with
                # the high watermarks of now instead of reading every watched log again (Kafka's
                # DelayedFetch re-reads on expiry; here an idle follower fetch of 10,000
                # partitions costs the leader's loop ~0.2-0.3 s a read, twice per max wait).
                answers, read_parts = prev
                for i, ((_n, _t, pd), part) in enumerate(zip(answers, read_parts)):
                    if part is None:
                        continue
                    if pd is None:  # not built (idle): it is if the high watermark moved meanwhile
                        assert idle is not None
                        c = idle[i]
                        if part.high_watermark != c.high_watermark:
                            pd = _idle_answer(c.request, part.high_watermark, c.log_start_offset)
                            answers[i] = (_n, _t, pd)
                    elif pd.error_code == 0:
                        pd.high_watermark = pd.last_stable_offset = part.high_watermark
                ctx.respond(self._fetch_answer(fctx, answers))
                return True
            read_parts = []
            answers = self._read_fetch(fctx.items, max_bytes, version, replica_id, zero_copy, client, read_parts,
                                       replica_epoch=replica_epoch, idle=idle)
            size = sum(len(pd.records) for _n, _t, pd in answers if pd is not None)
            if force or size >= int(body.min_bytes) or _must_answer(answers):
                ctx.respond(self._fetch_answer(fctx, answers))
                return True
            last[0] = (answers, read_parts) if size == 0 else None
            if not redirectable:
                watched[0] = self._fetch_positions(tps, from_follower)
            return False

        self.replicas.park_fetch(tps, int(body.max_wait_ms), retry, may_complete)
        return DEFERRED

    def _fetch_positions(self, tps: list[TopicPartition], from_follower: bool) -> list[Any]:
        """What a parked fetch's answer depends on, per watched partition (Kafka's
        ``DelayedFetch.tryComplete`` looks at the same before it reads): the local replica (a
        new one after a re-creation), its leader and leader epoch (errors, diverging epochs), its
        log start offset (out of range) and the end the fetch reads up to -- the log end offset
        for a follower, the high watermark for a consumer.  While none of these changed, a retry
        would read what the fetch already found (less than ``min_bytes``), so it is skipped: a
        follower's parked fetch is not re-read when only the high watermark moved (the other
        follower's fetch in an RF 3 acks=all round), nor a consumer's when only the log end moved.

        Layout: one flat list, five slots a partition (the Partition or None, then its leader
        id, leader epoch, log start offset and end; four Nones without a local replica), so
        that two snapshots compare equal exactly when every partition's five values do.  Flat:
        no tuple a partition -- a parked fetch keeps its snapshot alive past the young
        generations, and 10,000 tuples a snapshot, two snapshots a fetch, cost the idle leader
        both the building and the collector's walks (session 21)."""
        out: list[Any] = []
        add = out.append
        get = self.replicas.partitions.get
        for tp in tps:
            part = get(tp)
            add(part)
            if part is None:
                add(None)
                add(None)
                add(None)
                add(None)
                continue
            kl = part.log
            add(part.leader_id)
            add(part.leader_epoch)
            add(kl.log_start_offset)
            add(kl.log_end_offset if from_follower else part.high_watermark)
        return out

    def _fetch_answer(self, fctx: FetchContext, answers: list[tuple[Any, Any, Any]]) -> Any:
        """The FetchResponse of ``answers`` shaped by the session (see fetch_session.py):
        consecutive partitions of a topic share a topic entry."""
        error, session_id, keep = self.fetch_sessions.finish(fctx, answers)
        topics: list[Any] = []
        for i in keep:
            name, topic_id, pd = answers[i]
            if topics and topics[-1].topic == name and topics[-1].topic_id == topic_id:
                topics[-1].partitions.append(pd)
            else:
                topics.append(_FR.FetchableTopicResponse(topic=name, topic_id=topic_id, partitions=[pd]))
        return _FR(throttle_time_ms=0, error_code=int(error), session_id=session_id, responses=topics,
                   node_endpoints=[])

    def _read_fetch(self, items: list[tuple[Any, Any, Any]], max_bytes: int, version: int, replica_id: int,
                    zero_copy: bool = False, client: tuple[str | None, str] | None = None,
                    parts: list[Partition | None] | None = None, *, replica_epoch: int = -1,
                    idle: list[CachedPartition] | None = None,
                    tps: list[TopicPartition] | None = None) -> list[tuple[Any, Any, Any]]:
        """Read ``items`` ((topic name, topic id, request partition) in order) within
        ``max_bytes``; one (topic name, topic id, PartitionData) each.  ``parts``, when given,
        gets the local Partition each answer was read from (None: none was).  ``replica_epoch``:
        a follower's broker epoch (Fetch v15+; -1 when not sent).  ``tps``, when given, gets the
        TopicPartition of every item whose topic is known (what a parked fetch watches).

        ``idle`` (a follower's incremental session: the CachedPartition of each item): a
        partition whose fetch offset is the log end offset has nothing to read, and when the
        session already has its high watermark and log start offset (and there is no error nor
        diverging epoch) the session drops its answer: the follower's fetch state is updated
        exactly as a read does (:meth:`_update_follower`: caught-up time, ISR expansion, high
        watermark) but no PartitionData is built and no log read: its entry is None
        (``FetchSessionCache.finish`` skips it).  An idle 10,000-partition follower session cost
        the leader's loop a log read and a PartitionData per partition per fetch (session 21)."""
        by_id = version >= 13
        remaining = max(max_bytes, 0)
        got_data = False
        now = self._clock_ms()
        out: list[tuple[Any, Any, Any]] = []
        names: dict[Any, tuple[str | None, Errors]] = {}
        get_partition = self.replicas.get_partition
        for k, (topic, topic_id, fp) in enumerate(items):
            key = topic_id if by_id else topic
            resolved = names.get(key)
            if resolved is None:
                resolved = names[key] = self._topic_name(topic, topic_id, by_id)
            name, topic_error = resolved
            if parts is not None:
                parts.append(None)
            if topic_error != Errors.NONE or name is None:
                out.append((topic, topic_id, _idle_answer(fp, -1, -1, int(topic_error))))
                continue
            tp = TopicPartition(name, int(fp.partition))
            if tps is not None:
                tps.append(tp)
            part = get_partition(tp)
            if parts is not None:
                parts[-1] = part
            if part is None:
                err = self._partition_error(tp)
                if err == Errors.UNKNOWN_TOPIC_OR_PARTITION and by_id:
                    err = Errors.UNKNOWN_TOPIC_ID
                out.append((topic, topic_id, _idle_answer(fp, -1, -1, int(err))))
                continue
            pd: Any = None
            try:
                if idle is not None:
                    kl = part.log
                    c = idle[k]
                    # (a closed log: the read's error, below; -1: the session must send it again)
                    if int(fp.fetch_offset) == kl.log_end_offset and c.high_watermark >= 0 and not kl._closed:
                        pd = self._idle_partition(part, fp, version, replica_id, now, replica_epoch, c)
                        out.append((topic, topic_id, pd))
                        continue
                pd = _idle_answer(fp, -1, -1)
                out.append((topic, topic_id, pd))
                limit = max(min(int(fp.partition_max_bytes), remaining), 0)
                n = self._read_partition(part, fp, pd, version, replica_id, limit, not got_data, now, zero_copy,
                                         client, replica_epoch)
            except PartitionError as exc:
                if pd is None:  # (the idle path fails before it fills anything)
                    pd = _idle_answer(fp, -1, -1)
                    out.append((topic, topic_id, pd))
                pd.error_code = int(exc.error)
                continue
            except Exception:  # noqa: BLE001 - this partition's answer, not the connection's
                log.exception("fetch of %s failed", tp)
                if pd is None:
                    pd = _idle_answer(fp, -1, -1)
                    out.append((topic, topic_id, pd))
                pd.error_code = int(Errors.UNKNOWN_SERVER_ERROR)
                pd.records = b""
                continue
            if n:
                got_data = True
                remaining = max(remaining - n, 0)
        return out

    def _idle_partition(self, part: Partition, fp: Any, version: int, replica_id: int, now: int,
                        replica_epoch: int, cached: CachedPartition) -> Any:
        """A follower's fetch of ``part`` at its log end offset (the idle path of
        :meth:`_read_fetch`): the same checks and fetch state update as :meth:`_read_partition`,
        then None when the answer would hold only what the session has (``cached``), else the
        PartitionData a read gives (no records: nothing is past the log end)."""
        part.check_leader_epoch(int(fp.current_leader_epoch) if version >= 9 else -1, require_leader=True)
        kl = part.log
        end = self._update_follower(part, kl, fp, version, replica_id, now, replica_epoch)
        if end is not None:
            pd = _idle_answer(fp, part.high_watermark, kl.log_start_offset)
            pd.diverging_epoch = _FR.EpochEndOffset(epoch=end.epoch, end_offset=end.end_offset)
            return pd
        hw = part.high_watermark
        start = kl.log_start_offset
        if hw == cached.high_watermark and start == cached.log_start_offset:
            return None
        return _idle_answer(fp, hw, start)

    def _update_follower(self, part: Partition, kl: KafkaLog, fp: Any, version: int, replica_id: int, now: int,
                         replica_epoch: int) -> Any:
        """A follower's fetch on the leader: the diverging epoch's end (an EpochEnd) when the
        follower's last fetched epoch ends below its fetch offset here (v12+: then nothing is
        updated), else None after its fetch state is updated (which may move the high
        watermark and propose an ISR expansion)."""
        fetch_offset = int(fp.fetch_offset)
        last_fetched = int(fp.last_fetched_epoch) if version >= 12 else -1
        if last_fetched >= 0:
            end = kl.end_offset_for_epoch(last_fetched)
            if end.epoch < last_fetched or end.end_offset < fetch_offset:
                return end
        follower_start = int(fp.log_start_offset) if version >= 5 else -1
        state = part.remote_replicas.get(replica_id)
        start_moved = state is not None and 0 <= follower_start != state.log_start_offset
        # a moved high watermark completes produces (and wakes consumers); a moved follower
        # start, DeleteRecords.  Only on a change: a parked follower fetch re-run must not wake itself
        if part.update_follower_fetch_state(replica_id, fetch_offset, now, follower_start,
                                            broker_epoch=replica_epoch) or start_moved:
            self.replicas.on_high_watermark_or_append(part.topic_partition)
        return None

    def _read_partition(self, part: Partition, fp: Any, pd: Any, version: int, replica_id: int, limit: int,
                        min_one: bool, now: int, zero_copy: bool = False,
                        client: tuple[str | None, str] | None = None, replica_epoch: int = -1) -> int:
        from_follower = replica_id >= 0
        epoch = int(fp.current_leader_epoch) if version >= 9 else -1
        # KIP-392: a consumer of v11+ may read from a follower (up to its high watermark)
        part.check_leader_epoch(epoch, require_leader=from_follower or version < 11)
        kl = part.log
        fetch_offset = int(fp.fetch_offset)
        if client is not None and part.is_leader and self.replicas.replica_selector is not None:
            preferred = self._preferred_read_replica(part, client, fetch_offset, now)
            if preferred is not None:  # no read: the offsets and where to read from
                hw = part.high_watermark
                pd.high_watermark, pd.last_stable_offset, pd.log_start_offset = hw, hw, kl.log_start_offset
                pd.preferred_read_replica = preferred
                return 0
        if from_follower:
            end = self._update_follower(part, kl, fp, version, replica_id, now, replica_epoch)
            if end is not None:
                pd.diverging_epoch = _FR.EpochEndOffset(epoch=end.epoch, end_offset=end.end_offset)
                pd.high_watermark = part.high_watermark
                pd.last_stable_offset = part.high_watermark
                pd.log_start_offset = kl.log_start_offset
                return 0
            max_offset = None
        else:
            max_offset = part.high_watermark
        hw = part.high_watermark
        pd.high_watermark = hw
        pd.last_stable_offset = hw
        pd.log_start_offset = kl.log_start_offset
        try:
            data = kl.read(fetch_offset, limit, max_offset=max_offset, min_one_batch=min_one)
            records: Any = _file_region(data) if zero_copy and data.length >= SPILL_MIN_BYTES else data.tobytes()
        except OffsetOutOfRange:
            raise PartitionError(Errors.OFFSET_OUT_OF_RANGE,
                                 f"fetch offset {fetch_offset} of {part.topic_partition} is outside "
                                 f"[{kl.log_start_offset}, {kl.log_end_offset}]") from None
        except LogTruncatedDuringRead:
            records = b""
        pd.records = records
        self.bytes_out += len(records)
        return len(records)

    def _preferred_read_replica(self, part: Partition, client: tuple[str | None, str], fetch_offset: int,
                                now: int) -> int | None:
        """Kafka's ``findPreferredReadReplica`` on the leader (rules in replica_selector.py): the
        id of the replica a consumer in rack ``client[0]`` on listener ``client[1]`` should read
        ``fetch_offset`` from, or None for this leader itself."""
        selector = self.replicas.replica_selector
        if selector is None:
            return None
        rack, listener = client
        brokers = self.cache.image().cluster.brokers

        def reachable(broker_id: int) -> tuple[bool, str | None]:
            b = brokers.get(broker_id)
            if b is None or b.fenced or listener not in b.listeners:
                return False, None
            return True, b.rack
        isr = set(part.isr)
        views = []
        for broker_id, state in part.remote_replicas.items():
            # not in the ISR: it may lag, and the consumer would fall behind with it
            if broker_id not in isr or state.log_end_offset < fetch_offset or state.log_start_offset > fetch_offset:
                continue
            ok, replica_rack = reachable(broker_id)
            if ok:  # (Kafka keeps endpoint-less ones as "no node", never chosen)
                views.append(ReplicaView(broker_id, replica_rack, state.log_end_offset,
                                         now - state.last_caught_up_time_ms))
        ok, leader_rack = reachable(part.local_broker_id)
        leader = ReplicaView(part.local_broker_id, leader_rack, part.log.log_end_offset, 0)
        chosen = selector.select(rack, [*views, leader], leader)
        if chosen.broker_id == part.local_broker_id:
            return None
        log.debug("preferred read replica of %s for a client in rack %s: %d", part.topic_partition, rack,
                  chosen.broker_id)
        return chosen.broker_id

    # ------------------------------------------------------------------ ListOffsets
    def handle_list_offsets(self, ctx: RequestContext, body: Any) -> Any:
        version = ctx.api_version
        replica_id = int(body.replica_id)
        topics = []
        for t in body.topics:
            parts = []
            # Kafka: every occurrence of a partition asked twice is INVALID_REQUEST
            counts: dict[int, int] = {}
            for p in t.partitions:
                counts[int(p.partition_index)] = counts.get(int(p.partition_index), 0) + 1
            for p in t.partitions:
                r = _LR.ListOffsetsPartitionResponse(partition_index=p.partition_index, error_code=0, timestamp=-1,
                                                     offset=-1, leader_epoch=-1)
                parts.append(r)
                if counts[int(p.partition_index)] > 1:
                    r.error_code = int(Errors.INVALID_REQUEST)
                    continue
                try:
                    self._list_offset(TopicPartition(t.name, int(p.partition_index)), p, r, version, replica_id)
                except PartitionError as exc:
                    r.error_code = int(exc.error)
            topics.append(_LR.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return _LR(throttle_time_ms=0, topics=topics)

    def _list_offset(self, tp: TopicPartition, p: Any, r: Any, version: int, replica_id: int) -> None:
        part = self.replicas.get_partition(tp)
        if part is None:
            raise PartitionError(self._partition_error(tp), f"no local replica of {tp}")
        epoch = int(p.current_leader_epoch) if version >= 4 else -1
        part.check_leader_epoch(epoch, require_leader=replica_id != DEBUGGING_REPLICA_ID)
        kl = part.log
        ts = int(p.timestamp)
        if ts == EARLIEST_TIMESTAMP or ts == EARLIEST_LOCAL_TIMESTAMP:
            offset = kl.log_start_offset
            r.offset, r.timestamp = offset, -1
        elif ts == LATEST_TIMESTAMP:
            offset = kl.log_end_offset if replica_id == DEBUGGING_REPLICA_ID else part.high_watermark
            r.offset, r.timestamp = offset, -1
        elif ts == LATEST_TIERED_TIMESTAMP:
            r.offset, r.timestamp = -1, -1
            return
        elif ts == MAX_TIMESTAMP:
            best: tuple[int, int] | None = None
            for seg in kl.segments:
                if seg.size and (best is None or seg.largest_timestamp > best[0]):
                    best = (seg.largest_timestamp, seg.base_offset)
            found = offset_for_timestamp(kl, best[0]) if best is not None and best[0] >= 0 else None
            if found is None or found[1] >= part.high_watermark:
                return
            r.timestamp, r.offset = found
            offset = found[1]
        elif ts < 0:
            raise PartitionError(Errors.INVALID_REQUEST, f"invalid timestamp {ts}")
        else:
            found = offset_for_timestamp(kl, ts)
            if found is None or found[1] >= part.high_watermark:
                return  # Kafka: offset -1, timestamp -1, no error
            r.timestamp, r.offset = found
            offset = found[1]
        if version >= 4:
            e = kl.epoch_cache.epoch_for_offset(offset) if offset < kl.log_end_offset else kl.latest_epoch
            r.leader_epoch = -1 if e is None else e

    # ------------------------------------------------------------------ OffsetForLeaderEpoch
    def handle_offset_for_leader_epoch(self, ctx: RequestContext, body: Any) -> Any:
        """Kafka's ``lastOffsetForLeaderEpoch`` on the leader (a debugging replica id -2 may ask a
        follower): the end offset of the requested epoch (the largest epoch <= it and its end),
        or -1/-1 when the log knows none."""
        R: Any = OffsetForLeaderEpochResponse
        replica_id = int(body.replica_id) if ctx.api_version >= 3 else -1
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                r = R.EpochEndOffset(error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1)
                parts.append(r)
                tp = TopicPartition(t.topic, int(p.partition))
                part = self.replicas.get_partition(tp)
                if part is None:
                    r.error_code = int(self._partition_error(tp))
                    continue
                try:
                    part.check_leader_epoch(int(p.current_leader_epoch),
                                            require_leader=replica_id != DEBUGGING_REPLICA_ID)
                except PartitionError as exc:
                    r.error_code = int(exc.error)
                    continue
                end = part.log.end_offset_for_epoch(int(p.leader_epoch))
                r.leader_epoch, r.end_offset = end.epoch, end.end_offset
            topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return R(throttle_time_ms=0, topics=topics)

    # ------------------------------------------------------------------ DeleteRecords
    def handle_delete_records(self, ctx: RequestContext, body: Any) -> Any:
        """Kafka's ``deleteRecords``: each partition's log start offset moves to the requested
        offset (-1: the high watermark) on the leader; the answer waits (up to ``timeout_ms``)
        until the low watermark -- the minimum log start offset over the replicas, which the
        followers report in their fetches -- reached it."""
        R: Any = DeleteRecordsResponse
        results: dict[TopicPartition, Any] = {}
        required: dict[TopicPartition, int] = {}
        topics = []
        for t in body.topics:
            parts = []
            for p in t.partitions:
                r = R.DeleteRecordsPartitionResult(partition_index=p.partition_index, low_watermark=-1, error_code=0)
                parts.append(r)
                tp = TopicPartition(t.name, int(p.partition_index))
                part = self.replicas.get_partition(tp)
                if part is None:
                    r.error_code = int(self._partition_error(tp))
                    continue
                try:
                    required[tp] = part.delete_records_on_leader(int(p.offset))
                except PartitionError as exc:
                    r.error_code = int(exc.error)
                    continue
                except KraftStorageError as exc:
                    log.error("DeleteRecords on %s failed: %s", tp, exc)
                    r.error_code = int(Errors.KAFKA_STORAGE_ERROR)
                    continue
                results[tp] = r
                self.replicas.on_high_watermark_or_append(tp)
            topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
        resp = R(throttle_time_ms=0, topics=topics)
        if not required:
            return resp

        def done(errors: dict[TopicPartition, Errors]) -> None:
            for tp, err in errors.items():
                r = results[tp]
                r.error_code = int(err)
                part = self.replicas.get_partition(tp)
                r.low_watermark = part.low_watermark() if err == Errors.NONE and part is not None else -1
            ctx.respond(resp)

        self.replicas.wait_for_low_watermarks(required, int(body.timeout_ms), done)
        return DEFERRED

    # ------------------------------------------------------------------ DescribeLogDirs
    def handle_describe_log_dirs(self, ctx: RequestContext, body: Any) -> Any:
        """Kafka's ``describeLogDirs``: every log dir with the asked partitions (all when
        ``topics`` is null), their sizes and offset lag (the high watermark minus the log end,
        at least 0), and (v4) the dir's total and usable bytes."""
        R: Any = DescribeLogDirsResponse
        wanted: dict[str, set[int]] | None = None
        if body.topics is not None:
            wanted = {}
            for t in body.topics:
                wanted.setdefault(t.topic, set()).update(int(x) for x in t.partitions)
        lm = self.replicas.log_manager
        results = []
        for d in lm.log_dirs:
            by_topic: dict[str, list[Any]] = {}
            for tp, kl in sorted(lm.logs_in_dir(d)):
                if wanted is not None and tp.partition not in wanted.get(tp.topic, ()):
                    continue
                part = self.replicas.get_partition(tp)
                hw = part.high_watermark if part is not None else kl.log_end_offset
                by_topic.setdefault(tp.topic, []).append(R.DescribeLogDirsPartition(
                    partition_index=tp.partition, partition_size=kl.size_in_bytes(),
                    offset_lag=max(hw - kl.log_end_offset, 0), is_future_key=False))
            try:
                st = os.statvfs(d)
                total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
            except OSError:
                total = usable = -1
            results.append(R.DescribeLogDirsResult(
                error_code=0, log_dir=d, total_bytes=total, usable_bytes=usable,
                topics=[R.DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in sorted(by_topic.items())]))
        return R(throttle_time_ms=0, error_code=0, results=results)

    # ------------------------------------------------------------------ FindCoordinator
    def handle_find_coordinator(self, ctx: RequestContext, body: Any) -> Any:
        """COORDINATOR_NOT_AVAILABLE for every key (see the module doc)."""
        R: Any = FindCoordinatorResponse
        version = ctx.api_version
        code = int(Errors.COORDINATOR_NOT_AVAILABLE)
        message = "kraft's broker has no group or transaction coordinator (consumer groups are not supported)"
        if version >= 4:
            coords = [R.Coordinator(key=k, node_id=-1, host="", port=-1, error_code=code, error_message=message)
                      for k in body.coordinator_keys]
            return R(throttle_time_ms=0, coordinators=coords)
        return R(throttle_time_ms=0, error_code=code, error_message=message, node_id=-1, host="", port=-1)


def _file_region(data: FetchData) -> FileRegion:
    """The records of ``data`` as a region the network layer sends with sendfile.  It stays
    sendable while the segment's generation is the one ``data`` was read at (every truncation of
    the segment, and its deletion by a truncation, moves it): Kafka's FileRecords checks only
    that the file did not shrink, which misses a truncation followed by new appends."""
    segment = data._segment
    generation = data._generation
    return FileRegion(data.fd, data.position, data.length, data, lambda: segment.generation == generation)


def _idle_answer(fp: Any, high_watermark: int, log_start_offset: int, error_code: int = 0) -> Any:
    """A PartitionData with no records for request partition ``fp`` (the last stable offset is
    the high watermark: no transactions)."""
    return _FR.PartitionData(partition_index=fp.partition, error_code=error_code, high_watermark=high_watermark,
                             last_stable_offset=high_watermark, log_start_offset=log_start_offset,
                             aborted_transactions=None, preferred_read_replica=-1, records=b"")


def _must_answer(answers: list[tuple[Any, Any, Any]]) -> bool:
    """An error, a diverging epoch or a preferred read replica: answered without waiting (None:
    an idle partition not built, see ``PartitionApis._read_fetch``)."""
    return any(p is not None and (p.error_code != 0 or p.preferred_read_replica >= 0
                                  or p.diverging_epoch is not None and p.diverging_epoch.epoch >= 0)
               for _n, _t, p in answers)

