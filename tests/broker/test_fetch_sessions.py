"""Incremental fetch sessions (KIP-227): the FetchSessionCache's rules (Kafka's
``FetchSessionTest``) and a broker answering full and incremental fetches; kafka-python (which
uses sessions) reads every record through them.
"""
from __future__ import annotations

import asyncio
import importlib
import time
from types import SimpleNamespace
from typing import Any

import pytest
from support.brokers import broker_port, cluster_with_brokers

from kraft_node.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    max_session_slots_from_properties,
    next_epoch,
)
from kraft_node.network import KafkaConnection
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.fetch import FetchRequest
from kraft_node.protocol.generated.produce import ProduceRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.record.batch import scan_batches
from kraft_storage.record.builder import build_batch

kafka = importlib.import_module("kafka")
kafka_admin = importlib.import_module("kafka.admin")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def _req(partition: int, offset: int = 0) -> Any:
    return SimpleNamespace(partition=partition, fetch_offset=offset)


def _pd(partition: int, hw: int = 10, records: bytes = b"", error: int = 0) -> Any:
    return SimpleNamespace(partition_index=partition, high_watermark=hw, log_start_offset=0, records=records,
                           error_code=error, preferred_read_replica=-1, diverging_epoch=None)


def _full(cache: FetchSessionCache, parts: list[int], *, follower: bool = False, version: int = 12,
          session_id: int = 0) -> int:
    ctx = cache.new_context(version, session_id, INITIAL_EPOCH, follower, [("t", None, _req(p)) for p in parts], [])
    assert ctx.kind == "full"
    err, sid, keep = cache.finish(ctx, [("t", None, _pd(p)) for p in parts])
    assert err == Errors.NONE and keep == list(range(len(parts)))
    return sid


def test_next_epoch_and_config():
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH and next_epoch(0) == 1 and next_epoch(2**31 - 1) == 1
    assert max_session_slots_from_properties({}) == 1000
    assert max_session_slots_from_properties({"max.incremental.fetch.session.cache.slots": "0"}) == 0
    with pytest.raises(ValueError, match="max.incremental.fetch.session.cache.slots='x' is not an integer"):
        max_session_slots_from_properties({"max.incremental.fetch.session.cache.slots": "x"})
    with pytest.raises(ValueError, match="must be at least 0"):
        max_session_slots_from_properties({"max.incremental.fetch.session.cache.slots": "-1"})


def test_incremental_fetches_send_only_changes_and_check_epochs():
    clock = Clock()
    cache = FetchSessionCache(10, clock_ms=clock)
    sid = _full(cache, [0, 1, 2])
    assert sid != 0 and cache.sessions[sid].epoch == 1

    # epoch 1, nothing changed in the request: the session's three partitions are read
    ctx = cache.new_context(12, sid, 1, False, [], [])
    assert ctx.kind == "incremental" and [i[2].partition for i in ctx.items] == [0, 1, 2]
    # only partition 1 has records, partition 2 a new high watermark
    err, got_sid, keep = cache.finish(ctx, [("t", None, _pd(0)), ("t", None, _pd(1, records=b"x" * 10)),
                                            ("t", None, _pd(2, hw=11))])
    assert (err, got_sid, keep) == (Errors.NONE, sid, [1, 2])
    # partition 1 had records: it moved to the end of the order
    assert [c.partition for c in cache.sessions[sid].partitions.values()] == [0, 2, 1]

    # the same epoch again (a duplicate): refused; an unknown id; topic ids on a session without them
    assert cache.new_context(12, sid, 1, False, [], []).error == Errors.INVALID_FETCH_SESSION_EPOCH
    assert cache.new_context(12, sid + 1, 1, False, [], []).error == Errors.FETCH_SESSION_ID_NOT_FOUND
    assert cache.new_context(13, sid, 2, False, [], []).error == Errors.FETCH_SESSION_TOPIC_ID_ERROR

    # an error resets the cached high watermark, so the partition is sent again once it is gone
    ctx = cache.new_context(12, sid, 2, False, [("t", None, _req(0, 5))], [])
    assert ctx.items[0][2].fetch_offset == 5  # updated request data
    _e, _s, keep = cache.finish(ctx, [("t", None, _pd(0, error=6)), ("t", None, _pd(2, hw=11)),
                                      ("t", None, _pd(1))])
    assert keep == [0]
    ctx = cache.new_context(12, sid, 3, False, [], [])
    _e, _s, keep = cache.finish(ctx, [("t", None, _pd(0)), ("t", None, _pd(2, hw=11)), ("t", None, _pd(1))])
    assert keep == [0]

    # forgetting every partition closes the session: a sessionless answer
    ctx = cache.new_context(12, sid, 4, False, [], [("t", None, 0), ("t", None, 1), ("t", None, 2)])
    assert ctx.kind == "sessionless" and sid not in cache.sessions

    # a full fetch naming a session closes it; FINAL_EPOCH makes none
    sid = _full(cache, [0])
    sid2 = _full(cache, [0], session_id=sid)
    assert sid not in cache.sessions and sid2 in cache.sessions
    ctx = cache.new_context(12, sid2, FINAL_EPOCH, False, [("t", None, _req(0))], [])
    assert ctx.kind == "sessionless" and not cache.sessions
    # before v7 there are no sessions
    assert cache.new_context(6, 0, 0, False, [("t", None, _req(0))], []).kind == "sessionless"


def test_eviction_follows_kafka():
    clock = Clock()
    cache = FetchSessionCache(2, clock_ms=clock)
    a = _full(cache, [0, 1, 2])
    b = _full(cache, [0])
    assert _full(cache, [0, 1, 2, 3]) == 0  # full, nothing evictable by a consumer's new session yet
    # a follower's (privileged) session evicts the smallest unprivileged one
    c = _full(cache, [0], follower=True)
    assert c != 0 and set(cache.sessions) == {a, c} and b not in cache.sessions
    # a session idle for more than 120 s goes first
    clock.now += 60_000
    cache.touch(cache.sessions[c], clock.now)
    clock.now += 61_000
    d = _full(cache, [0])
    assert d != 0 and set(cache.sessions) == {c, d} and cache.evictions == 2
    # no room at all with 0 slots
    assert _full(FetchSessionCache(0, clock_ms=clock), [0]) == 0


# ------------------------------------------------------------------------------- on a broker
def _fetch(session_id: int, epoch: int, parts: dict[int, int]) -> FetchRequest:
    return FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=session_id, session_epoch=epoch, forgotten_topics_data=[], rack_id="",
                        topics=[FetchRequest.FetchTopic(topic="s", partitions=[FetchRequest.FetchPartition(
                            partition=p, current_leader_epoch=-1, fetch_offset=o, last_fetched_epoch=-1,
                            log_start_offset=-1, partition_max_bytes=1 << 20) for p, o in parts.items()])]
                        if parts else [])


def _count(pd: Any) -> int:
    h = scan_batches(bytes(pd.records), crc_mode=0).headers
    return int(h["records_count"].sum()) if len(h) else 0


def test_a_broker_answers_full_and_incremental_fetches_and_kafka_python_reads_through_sessions(tmp_path):
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True, broker_extra={"num.partitions": "1"})
    port = broker_port(paths[1])

    def create() -> None:
        admin = kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10_000)
        try:
            admin.create_topics([kafka_admin.NewTopic("s", 2, 1)], 10_000)
        finally:
            admin.close()

    def consume() -> int:
        consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=None,
                                       enable_auto_commit=False, auto_offset_reset="earliest")
        try:
            tps = [kafka.TopicPartition("s", p) for p in range(2)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            got: list[tuple[int, int]] = []
            deadline = time.monotonic() + 30
            while len(got) < 35 and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=300).values():
                    got += [(r.partition, r.offset) for r in records]
            assert sorted(got) == [(0, i) for i in range(20)] + [(1, i) for i in range(15)]
            return len(got)
        finally:
            consumer.close()

    async def main() -> None:
        node = KraftNode.from_config(NodeConfig.from_file(paths[1]), controller=True)
        await asyncio.wait_for(node.start(), 30)
        conn = None
        try:
            await asyncio.to_thread(create)
            await asyncio.sleep(0.5)
            conn = await KafkaConnection.open("127.0.0.1", port, timeout=5)

            async def produce(p: int, n: int) -> None:
                P = ProduceRequest
                body = P(acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(name="s", partition_data=[
                    P.PartitionProduceData(index=p, records=build_batch([(None, b"v%d" % i) for i in range(n)]))])])
                pr = (await conn.request(body, 9, timeout=10)).responses[0].partition_responses[0]
                assert pr.error_code == 0, pr
            await produce(0, 20)
            await produce(1, 10)
            full = await conn.request(_fetch(0, 0, {0: 0, 1: 0}), 12, timeout=10)
            sid = full.session_id
            assert full.error_code == 0 and sid != 0
            assert [(_count(pd)) for pd in full.responses[0].partitions] == [20, 10]
            # the offsets move on: nothing new to say about either partition
            inc = await conn.request(_fetch(sid, 1, {0: 20, 1: 10}), 12, timeout=10)
            assert inc.error_code == 0 and inc.session_id == sid and inc.responses == []
            await produce(1, 5)
            # an empty incremental fetch: only partition 1 (new records, new high watermark)
            inc = await conn.request(_fetch(sid, 2, {}), 12, timeout=10)
            assert [[pd.partition_index for pd in t.partitions] for t in inc.responses] == [[1]]
            pd = inc.responses[0].partitions[0]
            assert _count(pd) == 5 and pd.high_watermark == 15
            # a repeated epoch is refused
            dup = await conn.request(_fetch(sid, 2, {}), 12, timeout=10)
            assert dup.error_code == Errors.INVALID_FETCH_SESSION_EPOCH and dup.responses == []
            assert sid in node.broker.partition_apis.fetch_sessions.sessions
            await conn.request(_fetch(sid, FINAL_EPOCH, {0: 20}), 12, timeout=10)  # closes it
            assert sid not in node.broker.partition_apis.fetch_sessions.sessions
            assert not node.broker.partition_apis.fetch_sessions.sessions
            # kafka-python fetches through a session (full, then incremental fetches) and reads everything
            assert await asyncio.wait_for(asyncio.to_thread(consume), 60) == 35
            assert len(node.broker.partition_apis.fetch_sessions.sessions) == 1
        finally:
            if conn is not None:
                await conn.close()
            await node.shutdown()

    asyncio.run(asyncio.wait_for(main(), 120))
