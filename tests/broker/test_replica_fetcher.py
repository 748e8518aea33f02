"""Replica fetchers (kraft_node/broker/replica_fetcher.py) against a fake leader over TCP.

The fake leader is an in-process KafkaServer whose Fetch handler serves real KafkaLogs the way
Kafka's leader does for a follower (Partition.fetchRecords): FENCED_LEADER_EPOCH /
UNKNOWN_LEADER_EPOCH by the request's current leader epoch, the diverging epoch from
``end_offset_for_epoch(last_fetched_epoch)``, OFFSET_OUT_OF_RANGE outside the log, otherwise whole
batches up to the partition's byte limit with the high watermark and log start offset.  Followers
are small fakes of the agreed Partition members over a real KafkaLog in tmp_path.

Kafka scenarios re-stated (AbstractFetcherThreadTest, ReplicaFetcherThreadTest):

* testSimpleFetch / shouldSendLatestRequestVersionsByDefault: records are appended, the high
  watermark follows the leader's; all partitions of one leader go in one Fetch, with topic ids.
* testTruncateOnFetchDoesNotProcessPartitionData / testTruncationOnFetch: a diverging epoch
  truncates the divergent tail (unclean leader change) and the next fetch continues from there;
  logs end byte-identical.  (kraft: never below the high watermark -- refused, partition failed.)
* testFencedTruncation / testFencedFetch: FENCED_LEADER_EPOCH for our current epoch marks the
  partition failed ("has an older epoch (E) than the current leader").
* testFollowerFetchOutOfRangeLow / testFetchOutOfRangeHigh: out of range asks ListOffsets; a
  leader start above our end empties the log and starts there; a leader end below ours truncates.
* testRetryAfterUnknownLeaderEpochInLatestOffsetFetch-like: errors delay the partition by
  replica.fetch.backoff.ms while others go on.
* AbstractFetcherManagerTest testAddAndRemovePartition: a partition moving to a new leader
  moves between fetchers; a fetcher left empty is closed.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from kraft_node.broker.fetch_session import FetchSessionCache
from kraft_node.broker.replica_fetcher import (
    FetchPhase,
    ReplicaFetcherConfig,
    ReplicaFetcherConfigError,
    ReplicaFetcherManager,
    fetcher_id_for,
    java_string_hash,
)
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.metrics import MetricsRegistry
from kraft_node.network.server import KafkaServer
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.fetch import FetchResponse
from kraft_node.protocol.generated.list_offsets import ListOffsetsResponse
from kraft_storage.log.log import KafkaLog
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record.builder import build_batch

FAST = ReplicaFetcherConfig(replica_fetch_backoff_ms=200, replica_fetch_wait_max_ms=50,
                            replica_socket_timeout_ms=2000)


def run(coro_fn: Callable[[], Any], timeout: float = 30.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro_fn(), timeout)
    asyncio.run(main())


async def until(cond: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def batch(n: int, epoch: int, tag: bytes = b"v") -> bytes:
    return build_batch([(None, tag + b"%d" % i) for i in range(n)], partition_leader_epoch=epoch, timestamp=1000)


def append(log_: KafkaLog, n: int, epoch: int, tag: bytes = b"v") -> None:
    log_.append_as_leader(batch(n, epoch, tag), epoch)


def whole(log_: KafkaLog) -> bytes:
    return log_.read_bytes(log_.log_start_offset, 1 << 30, min_one_batch=True) if log_.log_end_offset else b""


def epochs(log_: KafkaLog) -> list[tuple[int, int]]:
    return [(e, log_.end_offset_for_epoch(e).end_offset) for e in range(0, 6)
            if log_.end_offset_for_epoch(e).epoch == e]


# ------------------------------------------------------------------------------- fakes
@dataclass
class FakeFollower:
    """The agreed follower Partition members over a real KafkaLog."""
    log: KafkaLog
    leader_id: int
    leader_epoch: int
    topic_id: Uuid
    topic_partition: TopicPartition
    high_watermark: int = 0
    hw_updates: list[int] = field(default_factory=list)

    def maybe_update_high_watermark_from_leader(self, hw: int) -> bool:
        self.hw_updates.append(hw)
        if hw > self.high_watermark:
            self.high_watermark = hw
            return True
        return False


@dataclass
class LeaderPartition:
    log: KafkaLog
    epoch: int
    topic_id: Uuid
    high_watermark: int = -1          # -1: the log end offset
    error: int = 0                    # forced partition error, if any
    diverging: bool = True            # answer diverging epochs (v12+ leader behaviour)

    @property
    def hw(self) -> int:
        return self.log.log_end_offset if self.high_watermark < 0 else self.high_watermark


class FakeLeader:
    """A Kafka leader's Fetch and ListOffsets for followers, on real logs.  Fetch sessions go
    through the broker's real FetchSessionCache (``session_slots`` 0: sessions off, every answer
    sessionless)."""

    def __init__(self, broker_id: int, session_slots: int = 10) -> None:
        self.broker_id = broker_id
        self.parts: dict[TopicPartition, LeaderPartition] = {}
        self.fetches: list[tuple[int, Any, float]] = []   # (version, request, loop time)
        self.answers: dict[int, Any] = {}                 # index in ``fetches`` -> its FetchResponse
        self.lose_sessions = False                        # the next Fetch finds no session (a restart)
        self.list_offsets: list[Any] = []
        self.sessions = FetchSessionCache(session_slots, clock_ms=lambda: int(time.monotonic() * 1000))
        self.server = KafkaServer("127.0.0.1", 0, {int(ApiKeys.FETCH): self.fetch,
                                                   int(ApiKeys.LIST_OFFSETS): self.list_offsets_handler})
        self.port = 0

    async def start(self) -> "FakeLeader":
        self.port = await self.server.start()
        return self

    def endpoint(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def _by_id(self, topic_id: Uuid) -> str | None:
        for tp, p in self.parts.items():
            if p.topic_id == topic_id:
                return tp.topic
        return None

    async def fetch(self, ctx: Any, req: Any) -> Any:
        index = len(self.fetches)
        self.fetches.append((ctx.api_version, req, asyncio.get_running_loop().time()))
        if self.lose_sessions:
            self.lose_sessions = False
            self.sessions.sessions.clear()
        by_id = ctx.api_version >= 13
        items = [(t.topic, t.topic_id, fp) for t in req.topics for fp in t.partitions]
        forgotten = [(f.topic, f.topic_id, int(p)) for f in req.forgotten_topics_data or () for p in f.partitions]
        fctx = self.sessions.new_context(ctx.api_version, req.session_id, req.session_epoch, True, items, forgotten)
        if fctx.kind == "error":
            resp = FetchResponse(error_code=int(fctx.error))
            self.answers[index] = resp
            return resp
        answers = []
        any_data = False
        for topic, topic_id, fp in fctx.items:
            name = self._by_id(topic_id) if by_id else topic
            pd = self._partition(TopicPartition(name or "?", fp.partition), fp)
            any_data |= bool(pd.records)
            answers.append((topic, topic_id, pd))
        if not any_data and req.max_wait_ms > 0:
            await asyncio.sleep(req.max_wait_ms / 1000)   # the long poll, simplified
        error, session_id, keep = self.sessions.finish(fctx, answers)
        out: list[Any] = []
        for i in keep:
            topic, topic_id, pd = answers[i]
            if out and out[-1].topic == topic and out[-1].topic_id == topic_id:
                out[-1].partitions.append(pd)
            else:
                out.append(FetchResponse.FetchableTopicResponse(topic=topic, topic_id=topic_id, partitions=[pd]))
        resp = FetchResponse(error_code=int(error), session_id=session_id, responses=out)
        self.answers[index] = resp
        return resp

    def _partition(self, tp: TopicPartition, fp: Any) -> Any:
        p = self.parts.get(tp)
        R = FetchResponse.PartitionData
        if p is None:
            return R(partition_index=fp.partition, error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION), high_watermark=-1)
        if p.error:
            return R(partition_index=fp.partition, error_code=p.error, high_watermark=-1)
        if fp.current_leader_epoch < p.epoch:
            return R(partition_index=fp.partition, error_code=int(Errors.FENCED_LEADER_EPOCH), high_watermark=-1)
        if fp.current_leader_epoch > p.epoch:
            return R(partition_index=fp.partition, error_code=int(Errors.UNKNOWN_LEADER_EPOCH), high_watermark=-1)
        log_ = p.log
        if p.diverging and fp.last_fetched_epoch >= 0:
            e = log_.end_offset_for_epoch(fp.last_fetched_epoch)
            if e.epoch < fp.last_fetched_epoch or e.end_offset < fp.fetch_offset:
                return R(partition_index=fp.partition, high_watermark=p.hw, log_start_offset=log_.log_start_offset,
                         diverging_epoch=FetchResponse.EpochEndOffset(epoch=e.epoch, end_offset=e.end_offset))
        if not log_.log_start_offset <= fp.fetch_offset <= log_.log_end_offset:
            return R(partition_index=fp.partition, error_code=int(Errors.OFFSET_OUT_OF_RANGE), high_watermark=-1)
        data = log_.read_bytes(fp.fetch_offset, fp.partition_max_bytes)
        return R(partition_index=fp.partition, high_watermark=p.hw, log_start_offset=log_.log_start_offset,
                 last_stable_offset=p.hw, records=data)

    async def list_offsets_handler(self, ctx: Any, req: Any) -> Any:
        self.list_offsets.append(req)
        topics = []
        for t in req.topics:
            parts = []
            for lp in t.partitions:
                p = self.parts[TopicPartition(t.name, lp.partition_index)]
                off = p.log.log_end_offset if lp.timestamp == -1 else p.log.log_start_offset
                parts.append(ListOffsetsResponse.ListOffsetsPartitionResponse(
                    partition_index=lp.partition_index, offset=off, timestamp=-1, leader_epoch=p.epoch))
            topics.append(ListOffsetsResponse.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return ListOffsetsResponse(topics=topics)

    async def close(self) -> None:
        await self.server.close()


def open_log(tmp_path: Any, name: str) -> KafkaLog:
    return KafkaLog.open(tmp_path / name)


def manager(leaders: dict[int, FakeLeader], config: ReplicaFetcherConfig = FAST,
            metrics: MetricsRegistry | None = None) -> ReplicaFetcherManager:
    def endpoint(broker_id: int) -> tuple[str, int] | None:
        leader = leaders.get(broker_id)
        return leader.endpoint() if leader is not None else None
    return ReplicaFetcherManager(broker_id=3, broker_epoch=lambda: 42, leader_endpoint=endpoint, config=config,
                                 metrics=metrics)


# ------------------------------------------------------------------------------- tests
def test_follower_replicates_every_partition_of_a_leader_in_one_fetch(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(1).start()
        tid_a, tid_b = Uuid.random(), Uuid.random()
        la, lb = open_log(tmp_path, "leader-a-0"), open_log(tmp_path, "leader-b-0")
        append(la, 5, 0)
        append(la, 3, 1)
        append(lb, 4, 1)
        leader.parts[TopicPartition("a", 0)] = LeaderPartition(la, 1, tid_a)
        leader.parts[TopicPartition("b", 0)] = LeaderPartition(lb, 1, tid_b, high_watermark=2)
        fa = FakeFollower(open_log(tmp_path, "a-0"), 1, 1, tid_a, TopicPartition("a", 0))
        fb = FakeFollower(open_log(tmp_path, "b-0"), 1, 1, tid_b, TopicPartition("b", 0))
        registry = MetricsRegistry()
        mgr = manager({1: leader}, metrics=registry)
        updated: list[TopicPartition] = []
        mgr.on_updated = updated.append
        try:
            mgr.on_become_follower([fa, fb])
            assert list(mgr.fetchers) == [(1, 0)]
            await until(lambda: fa.log.log_end_offset == 8 and fb.log.log_end_offset == 4, what="replication")
            await until(lambda: fa.high_watermark == 8 and fb.high_watermark == 2, what="high watermarks")
            assert whole(fa.log) == whole(la) and whole(fb.log) == whole(lb)
            assert epochs(fa.log) == epochs(la) == [(0, 5), (1, 8)]
            assert {TopicPartition("a", 0), TopicPartition("b", 0)} <= set(updated)   # parked fetches re-run
            version, first, _t = leader.fetches[0]
            assert version >= 15
            assert {t.topic_id for t in first.topics} == {tid_a, tid_b}        # one Fetch, both partitions
            assert first.replica_state.replica_id == 3 and first.replica_state.replica_epoch == 42
            assert first.session_id == 0 and first.session_epoch == 0   # a full fetch asking for a session
            assert first.max_wait_ms == 50 and first.min_bytes == 1 and first.max_bytes == 10 * 1024 * 1024
            assert all(p.partition_max_bytes == 1024 * 1024 for t in first.topics for p in t.partitions)
            # the lag of b: leader hw 2 - next offset 4 -> 0 (never negative); MaxLag reads 0 when caught up
            await until(lambda: registry.value("kafka_server_ReplicaFetcherManager_MaxLag") == 0, what="MaxLag 0")
            assert (registry.value("kafka_server_FetcherStats_RequestsPerSec_total") or 0) >= 1
            assert registry.value("kafka_server_FetcherStats_BytesPerSec_total") == len(whole(la)) + len(whole(lb))
            # new records at the leader arrive with the next fetch
            append(la, 2, 1)
            await until(lambda: fa.log.log_end_offset == 10 and fa.high_watermark == 10, what="more records")
            assert whole(fa.log) == whole(la)
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_divergent_tail_is_truncated_by_the_diverging_epoch(tmp_path):
    """Unclean leader change: the follower wrote offsets 5-9 in epoch 1 that the new leader (epoch 2)
    never had; the leader's diverging epoch (0, end 5) truncates them and the follower takes epoch 2."""
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "leader")
        append(ll, 5, 0, b"common")
        append(ll, 3, 2, b"new-leader")
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 2, tid)
        fl = open_log(tmp_path, "t-0")
        append(fl, 5, 0, b"common")
        append(fl, 5, 1, b"divergent")
        follower = FakeFollower(fl, 2, 2, tid, TopicPartition("t", 0), high_watermark=5)
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: fl.log_end_offset == 8 and follower.high_watermark == 8, what="catch-up")
            assert whole(fl) == whole(ll)
            assert epochs(fl) == [(0, 5), (2, 8)]
            # the first fetch asked from 10 with last fetched epoch 1; the answer truncated, no append
            first = leader.fetches[0][1].topics[0].partitions[0]
            assert (first.fetch_offset, first.last_fetched_epoch) == (10, 1)
            second = leader.fetches[1][1].topics[0].partitions[0]
            assert (second.fetch_offset, second.last_fetched_epoch) == (5, 0)
            assert follower.hw_updates[0] == 8         # no watermark from the diverging answer, only after it
            assert not mgr.failed_partitions
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_truncation_below_the_high_watermark_is_refused_and_fails_the_partition(tmp_path, caplog):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "leader")
        append(ll, 5, 0)
        append(ll, 3, 2)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 2, tid)
        fl = open_log(tmp_path, "t-0")
        append(fl, 5, 0)
        append(fl, 5, 1)
        before = whole(fl)
        follower = FakeFollower(fl, 2, 2, tid, TopicPartition("t", 0), high_watermark=8)   # 5-7 "committed"
        registry = MetricsRegistry()
        mgr = manager({2: leader}, metrics=registry)
        try:
            with caplog.at_level(logging.ERROR, logger="kraft_node.broker.replica_fetcher"):
                mgr.on_become_follower([follower])
                await until(lambda: bool(mgr.failed_partitions), what="the partition to fail")
            reason = mgr.failed_partitions[TopicPartition("t", 0)]
            assert "refusing to truncate t-0 to offset 5 (asked: 5), below its high watermark 8" in reason
            assert "diverging epoch 0 ending at offset 5" in reason
            assert whole(fl) == before and fl.log_end_offset == 10            # nothing was cut
            assert mgr.get_fetcher(TopicPartition("t", 0)) is None
            assert registry.value("kafka_server_ReplicaFetcherManager_FailedPartitionsCount") == 1
            assert any("marked as failed" in r.getMessage() for r in caplog.records)
            # new metadata (a new epoch) re-adds it and clears the failure
            leader.parts[TopicPartition("t", 0)].epoch = 3
            follower.leader_epoch = 3
            follower.high_watermark = 5
            mgr.on_become_follower([follower])
            assert not mgr.failed_partitions
            await until(lambda: whole(fl) == whole(ll), what="recovery after new metadata")
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_straddling_batch_counts_for_the_high_watermark_rule(tmp_path):
    """The log drops a batch that straddles the truncation offset whole: the refusal looks at the
    batch start, not the asked offset."""
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "leader")
        append(ll, 6, 0)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 2, tid, diverging=False)
        fl = open_log(tmp_path, "t-0")
        append(fl, 4, 0)
        append(fl, 4, 1)                    # offsets 4..7 in one batch
        follower = FakeFollower(fl, 2, 2, tid, TopicPartition("t", 0), high_watermark=5)
        mgr = manager({2: leader})
        try:
            # out of range high (fetch 8 > leader end 6): truncate to 6 would cut batch 4..7 whole -> 4 < hw 5
            mgr.on_become_follower([follower])
            await until(lambda: bool(mgr.failed_partitions), what="the refusal")
            reason = mgr.failed_partitions[TopicPartition("t", 0)]
            assert "to offset 4 (asked: 6), below its high watermark 5" in reason
            assert "the leader's latest offset 6 (out of range)" in reason
            assert fl.log_end_offset == 8
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_out_of_range_high_truncates_to_the_leader_end(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "leader")
        append(ll, 4, 0)
        append(ll, 2, 0)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 2, tid, diverging=False)
        fl = open_log(tmp_path, "t-0")
        append(fl, 4, 0)
        append(fl, 2, 0)
        append(fl, 3, 1)
        follower = FakeFollower(fl, 2, 2, tid, TopicPartition("t", 0), high_watermark=4)
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: fl.log_end_offset == 6 and leader.list_offsets, what="truncation to 6")
            assert leader.list_offsets[0].replica_id == 3
            assert leader.list_offsets[0].topics[0].partitions[0].timestamp == -1          # LATEST
            assert leader.list_offsets[0].topics[0].partitions[0].current_leader_epoch == 2
            append(ll, 1, 2)
            await until(lambda: fl.log_end_offset == 7, what="fetching again")
            assert whole(fl) == whole(ll)
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_out_of_range_low_restarts_the_log_at_the_leader_start(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "leader")
        ll.truncate_fully_and_start_at(100)
        append(ll, 5, 1)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 1, tid)
        fl = open_log(tmp_path, "t-0")
        append(fl, 3, 0)
        follower = FakeFollower(fl, 2, 1, tid, TopicPartition("t", 0), high_watermark=3)
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: fl.log_end_offset == 105, what="catch-up from the leader's start")
            assert fl.log_start_offset == 100 and whole(fl) == whole(ll)
            assert [p.partitions[0].timestamp for r in leader.list_offsets for p in r.topics] == [-1, -2]
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_leader_log_start_offset_follows_but_never_past_the_high_watermark(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "leader")
        for _ in range(4):
            append(ll, 2, 0)
        ll.roll()
        append(ll, 2, 0)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 0, tid, high_watermark=4)
        fl = open_log(tmp_path, "t-0")
        follower = FakeFollower(fl, 2, 0, tid, TopicPartition("t", 0))
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: fl.log_end_offset == 10 and follower.high_watermark == 4, what="catch-up")
            ll.advance_log_start_offset(8)
            await until(lambda: fl.log_start_offset == 4, what="log start capped at the high watermark 4")
            leader.parts[TopicPartition("t", 0)].high_watermark = 10
            await until(lambda: fl.log_start_offset == 8, what="log start 8")
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_partition_errors_back_off_while_other_partitions_go_on(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        ta, tb = Uuid.random(), Uuid.random()
        la, lb = open_log(tmp_path, "la"), open_log(tmp_path, "lb")
        append(la, 1, 0)
        append(lb, 1, 0)
        leader.parts[TopicPartition("a", 0)] = LeaderPartition(la, 0, ta, error=int(Errors.NOT_LEADER_OR_FOLLOWER))
        leader.parts[TopicPartition("b", 0)] = LeaderPartition(lb, 0, tb)
        fa = FakeFollower(open_log(tmp_path, "a"), 2, 0, ta, TopicPartition("a", 0))
        fb = FakeFollower(open_log(tmp_path, "b"), 2, 0, tb, TopicPartition("b", 0))
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([fa, fb])
            await until(lambda: fb.log.log_end_offset == 1, what="b replicated")
            await asyncio.sleep(0.5)
            asked_a = [t for _v, r, t in leader.fetches for topic in r.topics if topic.topic_id == ta]
            assert 2 <= len(asked_a) <= 4, asked_a               # ~every 200 ms, not every round
            gaps = [b - a for a, b in zip(asked_a, asked_a[1:])]
            assert all(g >= 0.19 for g in gaps), gaps
            assert len(leader.fetches) > len(asked_a)            # b kept long-polling meanwhile
            state = mgr.get_fetcher(TopicPartition("a", 0)).fetch_state(TopicPartition("a", 0))
            assert state.phase is FetchPhase.FETCHING and state.fetch_offset == 0
            leader.parts[TopicPartition("a", 0)].error = 0
            await until(lambda: fa.log.log_end_offset == 1, what="a after the error clears")
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_fenced_leader_epoch_fails_the_partition(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "l")
        append(ll, 1, 4)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 5, tid)
        follower = FakeFollower(open_log(tmp_path, "t"), 2, 4, tid, TopicPartition("t", 0))
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: bool(mgr.failed_partitions), what="fenced")
            assert mgr.failed_partitions[TopicPartition("t", 0)] == (
                "Partition t-0 has an older epoch (4) than the current leader. Will await the new LeaderAndIsr "
                "state before resuming fetching.")
            mgr.shutdown_idle_fetchers()
            assert not mgr.fetchers
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_a_lost_leader_backs_every_partition_off_and_is_retried(tmp_path, caplog):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "l")
        append(ll, 2, 0)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 0, tid)
        follower = FakeFollower(open_log(tmp_path, "t"), 2, 0, tid, TopicPartition("t", 0))
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: follower.log.log_end_offset == 2, what="first records")
            fetcher = mgr.fetchers[(2, 0)]
            port = leader.port
            with caplog.at_level(logging.WARNING, logger="kraft_node.broker.replica_fetcher"):
                await leader.close()
                await until(lambda: fetcher.stats.failed_requests >= 2, what="failed fetches")
            assert any("backing off 1 partitions" in r.getMessage() for r in caplog.records)
            # same port again: the fetcher reconnects and goes on
            leader2 = FakeLeader(2)
            leader2.server.port = port
            leader2.parts = leader.parts
            await leader2.start()
            append(ll, 3, 0)
            await until(lambda: follower.log.log_end_offset == 5, what="records after reconnecting")
            assert fetcher.leader.connections_opened == 2
            assert fetcher.running
            await leader2.close()
        finally:
            await mgr.close()
    run(go)


def test_partitions_move_between_fetchers_with_their_leader(tmp_path):
    async def go() -> None:
        l1, l2 = await FakeLeader(1).start(), await FakeLeader(2).start()
        tid = Uuid.random()
        log1, log2 = open_log(tmp_path, "l1"), open_log(tmp_path, "l2")
        append(log1, 3, 0)
        l1.parts[TopicPartition("t", 0)] = LeaderPartition(log1, 0, tid)
        follower = FakeFollower(open_log(tmp_path, "t"), 1, 0, tid, TopicPartition("t", 0))
        mgr = manager({1: l1, 2: l2})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: follower.log.log_end_offset == 3, what="from leader 1")
            # leader 2 takes over at epoch 1 with leader 1's history plus more
            log2.append_as_follower(log1.read_bytes(0, 1 << 20))
            log2.append_as_leader(batch(2, 1), 1)
            l2.parts[TopicPartition("t", 0)] = LeaderPartition(log2, 1, tid)
            follower.leader_id, follower.leader_epoch = 2, 1
            mgr.on_become_follower([follower])
            assert list(mgr.fetchers) == [(2, 0)]                   # leader 1's fetcher closed when idle
            await until(lambda: follower.log.log_end_offset == 5, what="from leader 2")
            assert whole(follower.log) == whole(log2)
            n = len(l2.fetches)
            mgr.on_become_follower([follower])                 # same leader and epoch: untouched
            assert mgr.get_fetcher(TopicPartition("t", 0)) is mgr.fetchers[(2, 0)]
            mgr.on_become_leader([follower])
            assert not mgr.fetchers and mgr.get_fetcher(TopicPartition("t", 0)) is None
            await asyncio.sleep(0.1)
            assert len(l2.fetches) <= n + 2                          # no more fetching once removed
        finally:
            await mgr.close()
            await l1.close()
            await l2.close()
    run(go)


def test_num_replica_fetchers_spreads_partitions_by_kafkas_fetcher_id(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(1).start()
        followers = []
        for i in range(6):
            tid = Uuid.random()
            ll = open_log(tmp_path, f"l{i}")
            append(ll, 2, 0)
            leader.parts[TopicPartition(f"t{i}", i)] = LeaderPartition(ll, 0, tid)
            followers.append(FakeFollower(open_log(tmp_path, f"f{i}"), 1, 0, tid, TopicPartition(f"t{i}", i)))
        mgr = manager({1: leader}, config=ReplicaFetcherConfig(num_replica_fetchers=3, replica_fetch_wait_max_ms=50,
                                                               replica_fetch_backoff_ms=200))
        try:
            mgr.on_become_follower(followers)
            expected = {(1, fetcher_id_for(f.topic_partition, 3)) for f in followers}
            assert set(mgr.fetchers) == expected and len(expected) > 1
            for f in followers:
                assert mgr.get_fetcher(f.topic_partition) is mgr.fetchers[(1, fetcher_id_for(f.topic_partition, 3))]
            await until(lambda: all(f.log.log_end_offset == 2 for f in followers), what="all partitions")
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_a_leader_that_is_not_alive_is_not_fetched(tmp_path, caplog):
    async def go() -> None:
        follower = FakeFollower(open_log(tmp_path, "t"), 9, 0, Uuid.random(), TopicPartition("t", 0))
        mgr = manager({})
        with caplog.at_level(logging.INFO, logger="kraft_node.broker.replica_fetcher"):
            mgr.on_become_follower([follower])
        assert not mgr.fetchers
        assert any("from leader 9 because it is not alive" in r.getMessage() for r in caplog.records)
        await mgr.close()
    run(go)


def test_a_partial_trailing_batch_is_left_for_the_next_fetch(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(2).start()
        tid = Uuid.random()
        ll = open_log(tmp_path, "l")
        for _ in range(3):
            append(ll, 10, 0, b"x" * 50)
        leader.parts[TopicPartition("t", 0)] = LeaderPartition(ll, 0, tid)
        orig = leader._partition

        def cut(tp: TopicPartition, fp: Any) -> Any:
            pd = orig(tp, fp)
            if pd.records:
                pd.records = bytes(pd.records)[:-7]      # the last batch torn, as at a byte limit
            return pd
        leader._partition = cut  # type: ignore[method-assign]
        follower = FakeFollower(open_log(tmp_path, "t"), 2, 0, tid, TopicPartition("t", 0))
        mgr = manager({2: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: follower.log.log_end_offset == 20, what="two whole batches")
            await asyncio.sleep(0.1)
            assert follower.log.log_end_offset == 20 and not mgr.failed_partitions
            leader._partition = orig  # type: ignore[method-assign]
            await until(lambda: follower.log.log_end_offset == 30, what="the last batch")
            assert whole(follower.log) == whole(ll)
        finally:
            await mgr.close()
            await leader.close()
    run(go)


# ------------------------------------------------------------------------------- fetch sessions (KIP-227)
def _named(req: Any, leader: FakeLeader) -> set[TopicPartition]:
    """The partitions a Fetch names (by id from v13)."""
    return {TopicPartition(leader._by_id(t.topic_id) or t.topic, p.partition) for t in req.topics
            for p in t.partitions}


def _session_partitions(leader: FakeLeader) -> dict[Any, int]:
    """The leader's one session: (topic id, partition) -> the fetch offset it will read."""
    (session,) = leader.sessions.sessions.values()
    return {key: int(c.request.fetch_offset) for key, c in session.partitions.items()}


def test_incremental_fetches_name_only_changed_partitions_and_forget_removed_ones(tmp_path):
    async def go() -> None:
        leader = await FakeLeader(1).start()
        ta, tb, tc = Uuid.random(), Uuid.random(), Uuid.random()
        tps = {TopicPartition("a", 0): ta, TopicPartition("a", 1): ta, TopicPartition("b", 0): tb}
        followers = {}
        for tp, tid in tps.items():
            ll = open_log(tmp_path, f"leader-{tp}")
            append(ll, 3, 0, tag=str(tp).encode())
            leader.parts[tp] = LeaderPartition(ll, 0, tid)
            followers[tp] = FakeFollower(open_log(tmp_path, str(tp)), 1, 0, tid, tp)
        mgr = manager({1: leader})
        try:
            mgr.on_become_follower(followers.values())
            await until(lambda: all(f.log.log_end_offset == 3 and f.high_watermark == 3 for f in followers.values()),
                        what="replication")
            await asyncio.sleep(0.2)  # idle rounds
            first = leader.fetches[0][1]
            assert (first.session_id, first.session_epoch) == (0, 0) and _named(first, leader) == set(tps)
            sid = leader.answers[0].session_id
            assert sid != 0
            idle = leader.fetches[-2][1]
            # an idle fetch names nothing, and nothing is answered; the leader still reads all three
            assert idle.session_id == sid and idle.session_epoch > 1 and idle.topics == []
            assert leader.answers[len(leader.fetches) - 2].responses == []
            assert _session_partitions(leader) == {(ta, 0): 3, (ta, 1): 3, (tb, 0): 3}
            fetcher = mgr.fetchers[(1, 0)]
            assert fetcher.stats.full_fetches == 1

            # new records on a-1 only: the fetches after name a-1 alone, and only a-1 is answered
            k = len(leader.fetches)
            a1 = TopicPartition("a", 1)
            append(leader.parts[a1].log, 2, 0, tag=b"more")
            await until(lambda: followers[a1].log.log_end_offset == 5 and followers[a1].high_watermark == 5,
                        what="a-1's new records")
            await asyncio.sleep(0.15)
            later = [r for _v, r, _t in leader.fetches[k:]]
            assert all(r.session_id == sid and r.session_epoch > 0 for r in later)
            assert set().union(*(_named(r, leader) for r in later)) == {a1}
            answered = [TopicPartition(leader._by_id(t.topic_id) or "?", p.partition_index)
                        for i, resp in leader.answers.items() if i >= k for t in resp.responses
                        for p in t.partitions]
            assert set(answered) == {a1}
            assert whole(followers[a1].log) == whole(leader.parts[a1].log)

            # a partition added (c-0) goes into the next incremental fetch; one removed (b-0) is forgotten
            lc = open_log(tmp_path, "leader-c")
            append(lc, 4, 0)
            c0, b0 = TopicPartition("c", 0), TopicPartition("b", 0)
            leader.parts[c0] = LeaderPartition(lc, 0, tc)
            followers[c0] = FakeFollower(open_log(tmp_path, "c-0"), 1, 0, tc, c0)
            k = len(leader.fetches)
            mgr.on_become_follower([followers[c0]])
            mgr.on_become_leader([followers[b0]])
            await until(lambda: followers[c0].log.log_end_offset == 4 and followers[c0].high_watermark == 4,
                        what="c-0 replicated")
            await until(lambda: (tb, 0) not in _session_partitions(leader), what="b-0 forgotten")
            later = [r for _v, r, _t in leader.fetches[k:]]
            assert all(r.session_epoch > 0 for r in later), "no full fetch needed"
            forgot = [(f.topic_id, p) for r in later for f in r.forgotten_topics_data for p in f.partitions]
            assert forgot == [(tb, 0)]
            assert _session_partitions(leader) == {(ta, 0): 3, (ta, 1): 5, (tc, 0): 4}
            assert fetcher.stats.full_fetches == 1
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_a_lost_session_makes_the_next_fetch_full_without_a_backoff(tmp_path):
    """The leader forgets the session (restarted, or evicted it): FETCH_SESSION_ID_NOT_FOUND;
    the follower's next fetch is full at once (no replica.fetch.backoff.ms) and opens a new session."""
    async def go() -> None:
        leader = await FakeLeader(1).start()
        tid = Uuid.random()
        tps = [TopicPartition("t", p) for p in range(3)]
        followers = []
        for tp in tps:
            ll = open_log(tmp_path, f"leader-{tp}")
            append(ll, 2, 0)
            leader.parts[tp] = LeaderPartition(ll, 0, tid)
            followers.append(FakeFollower(open_log(tmp_path, str(tp)), 1, 0, tid, tp))
        config = replace(FAST, replica_fetch_backoff_ms=5000)
        mgr = manager({1: leader}, config=config)
        try:
            mgr.on_become_follower(followers)
            await until(lambda: all(f.log.log_end_offset == 2 for f in followers), what="replication")
            await asyncio.sleep(0.15)
            old = next(iter(leader.sessions.sessions))
            k = len(leader.fetches)   # the fetch in flight, if any, is answered before the next comes
            leader.lose_sessions = True
            t0 = asyncio.get_running_loop().time()
            append(leader.parts[tps[2]].log, 3, 0)
            await until(lambda: followers[2].log.log_end_offset == 5, what="records after the session was lost")
            assert asyncio.get_running_loop().time() - t0 < 2.0   # not after the 5 s backoff
            lost = next(i for i in range(k, len(leader.fetches)) if leader.answers[i].error_code != 0)
            assert leader.answers[lost].error_code == Errors.FETCH_SESSION_ID_NOT_FOUND
            assert leader.fetches[lost][1].session_id == old
            full = leader.fetches[lost + 1][1]
            assert (full.session_id, full.session_epoch) == (0, 0) and _named(full, leader) == set(tps)
            new = leader.answers[lost + 1].session_id
            assert new not in (0, old)
            assert all(r.session_id == new and r.session_epoch > 0 for _v, r, _t in leader.fetches[lost + 2:])
            fetcher = mgr.fetchers[(1, 0)]
            assert fetcher.stats.failed_requests == 0
            assert all(fetcher.fetch_state(tp).delay_until is None for tp in tps)
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_a_leader_with_sessions_off_gets_full_fetches(tmp_path):
    """max.incremental.fetch.session.cache.slots=0 on the leader: session id 0 answered, the
    follower stays sessionless (every fetch full, every partition answered)."""
    async def go() -> None:
        leader = await FakeLeader(1, session_slots=0).start()
        tid = Uuid.random()
        tps = [TopicPartition("t", p) for p in range(2)]
        followers = []
        for tp in tps:
            ll = open_log(tmp_path, f"leader-{tp}")
            append(ll, 2, 0)
            leader.parts[tp] = LeaderPartition(ll, 0, tid)
            followers.append(FakeFollower(open_log(tmp_path, str(tp)), 1, 0, tid, tp))
        mgr = manager({1: leader})
        try:
            mgr.on_become_follower(followers)
            await until(lambda: all(f.log.log_end_offset == 2 and f.high_watermark == 2 for f in followers))
            append(leader.parts[tps[0]].log, 1, 0)
            await until(lambda: followers[0].log.log_end_offset == 3 and followers[0].high_watermark == 3)
            await asyncio.sleep(0.1)
            assert len(leader.fetches) >= 3
            assert all((r.session_id, r.session_epoch) == (0, 0) and _named(r, leader) == set(tps)
                       for _v, r, _t in leader.fetches)
            assert all(a.session_id == 0 and sum(len(t.partitions) for t in a.responses) == 2
                       for a in leader.answers.values())
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_after_a_diverging_epoch_the_high_watermark_still_arrives(tmp_path):
    """The follower truncates on a diverging epoch and does not take that answer's high watermark;
    its next fetch (at the truncated end, no new records at the leader) must still bring it: the
    leader answers a follower's partition again when the follower names it with a new position."""
    async def go() -> None:
        leader = await FakeLeader(1).start()
        tid = Uuid.random()
        tp = TopicPartition("t", 0)
        ll = open_log(tmp_path, "leader")
        append(ll, 5, 0, tag=b"same")
        # the leader's epoch 2 began at 5 with nothing written since (a log keeps no epoch without records,
        # so its epoch cache is stood in for): epoch 1, which it never had, ends where epoch 0 does
        known = ll.end_offset_for_epoch
        ll.end_offset_for_epoch = lambda e: known(0) if e == 1 else known(e)  # type: ignore[method-assign]
        leader.parts[tp] = LeaderPartition(ll, 2, tid)
        fl = open_log(tmp_path, "follower")
        append(fl, 5, 0, tag=b"same")
        append(fl, 3, 1, tag=b"lost")                              # an epoch-1 tail the leader never had
        follower = FakeFollower(fl, 1, 2, tid, tp, high_watermark=2)
        mgr = manager({1: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: follower.log.log_end_offset == 5, what="the truncation")
            await until(lambda: follower.high_watermark == 5, 2.0, what="the leader's high watermark after it")
            assert whole(follower.log) == whole(ll)
            assert all(r.session_epoch != 0 for _v, r, _t in leader.fetches[1:])   # through the session
        finally:
            await mgr.close()
            await leader.close()
    run(go)


def test_a_reconnect_starts_a_new_session(tmp_path):
    """The connection to the leader is lost: the next fetch on the new connection is full
    (closing the old session) and a new session carries on."""
    async def go() -> None:
        leader = await FakeLeader(1).start()
        tid = Uuid.random()
        tp = TopicPartition("t", 0)
        ll = open_log(tmp_path, "leader")
        append(ll, 2, 0)
        leader.parts[tp] = LeaderPartition(ll, 0, tid)
        follower = FakeFollower(open_log(tmp_path, "f"), 1, 0, tid, tp)
        mgr = manager({1: leader})
        try:
            mgr.on_become_follower([follower])
            await until(lambda: follower.log.log_end_offset == 2, what="replication")
            await asyncio.sleep(0.1)
            fetcher = mgr.fetchers[(1, 0)]
            old = next(iter(leader.sessions.sessions))
            k = len(leader.fetches)
            await fetcher.leader.close()   # the connection drops between two fetches
            append(ll, 1, 0)
            await until(lambda: follower.log.log_end_offset == 3, what="records on the new connection")
            assert fetcher.leader.connections_opened == 2
            first = leader.fetches[k][1]
            assert (first.session_id, first.session_epoch) == (old, 0)   # full, closing the old session
            assert old not in leader.sessions.sessions and len(leader.sessions.sessions) == 1
        finally:
            await mgr.close()
            await leader.close()
    run(go)


# ------------------------------------------------------------------------------- pure parts
def test_java_string_hash_and_fetcher_ids_follow_kafka():
    assert java_string_hash("test") == 3556498
    assert java_string_hash("Hello") == 69609650
    assert java_string_hash("hello world") == 1794106052
    assert java_string_hash("polygenelubricants") == -(1 << 31)
    assert java_string_hash("") == 0
    # Utils.abs(31 * hash + p) % n
    h = (31 * 3556498 + 7) % 5
    assert fetcher_id_for(TopicPartition("test", 7), 5) == h
    assert all(fetcher_id_for(TopicPartition(f"t{i}", i), 3) in (0, 1, 2) for i in range(50))
    assert {fetcher_id_for(TopicPartition("x", i), 1) for i in range(10)} == {0}


def test_config_keys_defaults_and_errors():
    c = ReplicaFetcherConfig()
    assert (c.num_replica_fetchers, c.replica_fetch_backoff_ms, c.replica_fetch_max_bytes,
            c.replica_fetch_response_max_bytes, c.replica_fetch_wait_max_ms, c.replica_fetch_min_bytes,
            c.replica_socket_timeout_ms, c.replica_lag_time_max_ms) == (1, 1000, 1048576, 10485760, 500, 1, 30000,
                                                                          30000)
    c = ReplicaFetcherConfig.from_properties({"num.replica.fetchers": "4", "replica.fetch.wait.max.ms": "100"})
    assert c.num_replica_fetchers == 4 and c.replica_fetch_wait_max_ms == 100
    with pytest.raises(ReplicaFetcherConfigError, match=r"server.properties: replica.fetch.max.bytes='1MB' is not"):
        ReplicaFetcherConfig.from_properties({"replica.fetch.max.bytes": "1MB"}, source="server.properties")
    with pytest.raises(ReplicaFetcherConfigError, match="num.replica.fetchers must be at least 1, not 0"):
        ReplicaFetcherConfig.from_properties({"num.replica.fetchers": "0"})
    with pytest.raises(ReplicaFetcherConfigError, match="replica.socket.timeout.ms should always be at least "
                                                        "replica.fetch.wait.max.ms"):
        ReplicaFetcherConfig(replica_fetch_wait_max_ms=600, replica_socket_timeout_ms=500)
    with pytest.raises(ReplicaFetcherConfigError, match="replica.fetch.wait.max.ms should always be less than or "
                                                        "equal to replica.lag.time.max.ms"):
        ReplicaFetcherConfig(replica_fetch_wait_max_ms=600, replica_lag_time_max_ms=500)
    with pytest.raises(ReplicaFetcherConfigError, match="leader.replication.throttled.rate is not supported"):
        ReplicaFetcherConfig.from_properties({"leader.replication.throttled.rate": "100"})


# ------------------------------------------------------------------------------- end to end
def test_rf3_on_three_in_process_brokers_replicates_shrinks_and_expands_the_isr(tmp_path):
    """A controller and brokers 101-103 in one process, each broker's replication wired by
    BrokerServer itself (fetchers on the ReplicaManager's hooks, AlterPartition through its own
    controller channel, replica.* settings from its config).  An RF 3 topic: acks=all produce to
    the leader completes because the followers fetch (the high watermark is the ISR's minimum);
    the replicas end byte-identical.  A follower whose fetching stops leaves the ISR after
    replica.lag.time.max.ms (AlterPartition committed by the controller: the image shows ISR 2);
    fetching again brings it back (ISR 3)."""
    from support.brokers import broker_port, cluster_with_brokers

    from kraft_node.broker.alter_partition_manager import AlterPartitionManager
    from kraft_node.network import KafkaConnection
    from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
    from kraft_node.protocol.generated.produce import ProduceRequest
    from kraft_node.server.config import NodeConfig
    from kraft_node.server.node import KraftNode

    paths = cluster_with_brokers(str(tmp_path), controllers=1, brokers=3,
                                 broker_extra={"replica.lag.time.max.ms": "1500", "replica.fetch.wait.max.ms": "100",
                                               "replica.fetch.backoff.ms": "200"})
    tp = TopicPartition("r", 0)

    async def go() -> None:
        nodes: dict[int, KraftNode] = {}
        fetchers: dict[int, ReplicaFetcherManager] = {}
        alters: list[AlterPartitionManager] = []
        try:
            for nid, path in sorted(paths.items()):
                node = KraftNode.from_config(NodeConfig.from_file(path), controller=True)
                await asyncio.wait_for(node.start(), 30)
                nodes[nid] = node
                if node.broker is None:
                    continue
                # BrokerServer wired them: fetchers on the ReplicaManager's hooks, AlterPartition
                # through its own controller channel
                b = node.broker
                assert b.fetchers is not None and b.alter_partitions is not None
                assert b.fetchers.config.replica_fetch_wait_max_ms == 100
                fetchers[nid], alters = b.fetchers, [*alters, b.alter_partitions]
            ports = {nid: broker_port(paths[nid]) for nid in fetchers}
            conn = await KafkaConnection.open("127.0.0.1", ports[101], timeout=5)
            CT = CreateTopicsRequest
            r = await conn.request(CT(topics=[CT.CreatableTopic(name="r", num_partitions=1, replication_factor=3)],
                                      timeout_ms=10_000), 7, timeout=15)
            assert r.topics[0].error_code == 0, r
            await conn.close()

            def part(nid: int) -> Any:
                return nodes[nid].broker.replica_manager.get_partition(tp)
            await until(lambda: all(part(n) is not None and part(n).leader_id > 0 for n in fetchers), 15,
                        "the partition on every broker")
            leader = part(101).leader_id
            followers = [n for n in fetchers if n != leader]
            lconn = await KafkaConnection.open("127.0.0.1", ports[leader], timeout=5)
            P = ProduceRequest

            async def produce(n: int, tag: bytes) -> Any:
                body = P(acks=-1, timeout_ms=10_000, topic_data=[P.TopicProduceData(name="r", partition_data=[
                    P.PartitionProduceData(index=0, records=batch(n, 0, tag))])])
                resp = await lconn.request(body, 9, timeout=15)
                return resp.responses[0].partition_responses[0]
            for i in range(3):
                pr = await produce(10, b"batch%d-" % i)
                assert pr.error_code == 0 and pr.base_offset == 10 * i, pr     # acks=all: the followers fetched
            lead = part(leader)
            await until(lambda: all(part(f).log.log_end_offset == 30 and part(f).high_watermark == 30
                                    for f in followers), 10, "followers at 30 with the high watermark")
            for f in followers:
                assert whole(part(f).log) == whole(lead.log)
                assert epochs(part(f).log) == epochs(lead.log)
            assert lead.high_watermark == 30

            def image_isr() -> set[int]:
                reg = nodes[1].metadata.cache.current_image().topics.get_topic_by_name("r").partitions.get(0)
                return set(reg.isr)
            assert image_isr() == {101, 102, 103}
            # the follower stops fetching (as if paused): the leader shrinks the ISR through AlterPartition
            paused = followers[0]
            fetchers[paused].remove_fetcher_for_partitions([tp])
            fetchers[paused].shutdown_idle_fetchers()
            await until(lambda: image_isr() == set(fetchers) - {paused}, 15, "the ISR shrink")
            pr = await produce(5, b"after-shrink-")
            assert pr.error_code == 0 and pr.base_offset == 30
            # fetching again: it catches up and the leader adds it back
            fetchers[paused].on_become_follower([part(paused)])
            await until(lambda: image_isr() == {101, 102, 103}, 15, "the ISR expansion")
            await until(lambda: part(paused).log.log_end_offset == 35, 10, "the paused follower caught up")
            assert whole(part(paused).log) == whole(lead.log)
            assert sum(a.requests_sent for a in alters) >= 2
            await lconn.close()
        finally:
            for nid in sorted(nodes, reverse=True):
                await asyncio.wait_for(nodes[nid].shutdown(5), 30)
    run(go, timeout=120)
