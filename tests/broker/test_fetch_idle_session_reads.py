"""The leader's idle path for follower fetch sessions (``PartitionApis._read_fetch`` with
``idle``): a session partition at the log end whose watermarks the session already has is not
read and gets no PartitionData.  Oracle: a second leader with the shortcut off
(``skip_idle_reads = False``: every partition read as before), driven by the same random
sequence of appends, follower fetches (immediate and parked), fetch offsets, epochs, ISR
changes and log start moves: every answer must encode to the same bytes, and the followers'
fetch states, high watermarks, ISR proposals and session caches must stay equal."""
from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import asdict
from typing import Any

import pytest

from kraft_node.broker.fetch_session import FetchSessionCache
from kraft_node.broker.log_manager import LogManager
from kraft_node.broker.metadata_cache import KRaftMetadataCache
from kraft_node.broker.partition_apis import PartitionApis
from kraft_node.broker.replica_manager import ReplicaManager
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.framing import encode_response
from kraft_node.protocol.generated.fetch import FetchRequest
from kraft_node.protocol.generated.produce import ProduceRequest
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record.builder import build_batch

LEADER = 1
FOLLOWERS = (2, 3)
TOPIC_ID = Uuid(uuid.UUID("0b7a3c1e-2d4f-4a6b-9c8d-1e2f3a4b5c6d").bytes)
VERSION = 15  # topic ids, broker epochs (v15 replica_state), diverging epochs, log start offsets


class Leader:
    """Broker 1 leading topic "t" over a LogManager in ``path``, fed deltas like the loader."""

    def __init__(self, path: str, clock: list[int], skip_idle_reads: bool) -> None:
        self.clock = clock
        props = {"log.segment.delete.delay.ms": "0"}
        self.logs = LogManager([path], broker_props=props, clock=lambda: clock[0])
        self.logs.startup()
        self.rm = ReplicaManager(LEADER, self.logs, props=props, clock_ms=lambda: clock[0])
        self.proposals: list[tuple[int, list[int]]] = []
        self.rm.alter_partition = lambda p, isr: self.proposals.append((p.topic_partition.partition, list(isr)))
        self.image = MetadataImage.EMPTY
        self.apis = PartitionApis(LEADER, KRaftMetadataCache(lambda: self.image), self.rm, props=props,
                                  clock_ms=lambda: clock[0])
        # the same session ids on both leaders
        self.apis.fetch_sessions = FetchSessionCache(10, clock_ms=lambda: clock[0], rng=random.Random(5))
        self.apis.skip_idle_reads = skip_idle_reads

    def publish(self, *records: Any) -> None:
        delta = MetadataDelta(self.image)
        for r in records:
            delta.replay(r)
        self.image = delta.apply(MetadataProvenance(len(records), 1, 0, True))
        self.rm.apply_delta(delta, self.image)

    def part(self, i: int) -> Any:
        return self.rm.get_partition(TopicPartition("t", i))

    async def close(self) -> None:
        await self.rm.shutdown()
        await self.logs.shutdown()


class Answer(RequestContext):
    def __init__(self, version: int = VERSION) -> None:
        super().__init__(header=None, api_version=version, peer=("127.0.0.1", 1), listener="PLAINTEXT")
        self.response: Any = None

    def respond(self, response: Any) -> None:
        self.response = response


class Follower:
    """A follower's view of its session (what FetchSessionHandler keeps): its fetch position per
    partition, the request data last sent, the session id and epoch."""

    def __init__(self, broker_id: int, n: int) -> None:
        self.id = broker_id
        # per partition: fetch offset, last fetched epoch, current leader epoch, log start offset, 0
        self.pos = {i: (0, -1, -1, 0, 0) for i in range(n)}
        self.sent: dict[int, tuple[int, ...]] = {}
        self.session_id = 0
        self.epoch = 0

    def request(self, max_wait_ms: int) -> Any:
        R = FetchRequest
        changed = [i for i, p in self.pos.items() if self.epoch == 0 or self.sent.get(i) != p]
        parts = [R.FetchPartition(partition=i, fetch_offset=self.pos[i][0], last_fetched_epoch=self.pos[i][1],
                                  current_leader_epoch=self.pos[i][2], log_start_offset=self.pos[i][3],
                                  partition_max_bytes=1 << 20) for i in changed]
        for i in changed:
            self.sent[i] = self.pos[i]
        return R(replica_id=-1, replica_state=R.ReplicaState(replica_id=self.id, replica_epoch=100 + self.id),
                 max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=self.session_id,
                 session_epoch=self.epoch, topics=[R.FetchTopic(topic_id=TOPIC_ID, partitions=parts)] if parts else [],
                 forgotten_topics_data=[])

    def took(self, resp: Any) -> None:
        if resp.error_code != 0:
            self.session_id, self.epoch, self.sent = 0, 0, {}
            return
        self.session_id = resp.session_id
        self.epoch = self.epoch + 1 if resp.session_id else 0


def _register(broker_id: int) -> m.RegisterBrokerRecord:
    return m.RegisterBrokerRecord(broker_id=broker_id, broker_epoch=100 + broker_id,
                                  incarnation_id=Uuid(broker_id + 100), end_points=[], features=[], rack=None,
                                  fenced=False, log_dirs=[])


def _state(leader: Leader, n: int) -> Any:
    """Everything the shortcut must leave as the full read does."""
    parts = []
    for i in range(n):
        p = leader.part(i)
        parts.append((p.high_watermark, p.leader_epoch, tuple(p.isr), p.pending_isr, p.log.log_start_offset,
                      p.log.log_end_offset, sorted((r, asdict(s)) for r, s in p.remote_replicas.items())))
    sessions = sorted((sid, s.epoch, [(k, c.high_watermark, c.log_start_offset) for k, c in s.partitions.items()])
                      for sid, s in leader.apis.fetch_sessions.sessions.items())
    return parts, sessions, list(leader.proposals), leader.apis.bytes_out


@pytest.mark.parametrize("seed", range(10))
def test_idle_session_partitions_answer_as_a_full_read(tmp_path, seed):
    async def main() -> None:
        rng = random.Random(seed)
        n = 8
        clock = [1_000_000]
        fast = Leader(str(tmp_path / "fast"), clock, True)
        slow = Leader(str(tmp_path / "slow"), clock, False)
        both = (fast, slow)
        epochs = [0] * n
        isr = [[1, 2] for _ in range(n)]  # follower 3 starts out of the ISR: its catching up proposes it
        for ld in both:
            ld.publish(_register(1), _register(2), _register(3), m.TopicRecord(name="t", topic_id=TOPIC_ID),
                       *[m.PartitionRecord(partition_id=i, topic_id=TOPIC_ID, replicas=[1, 2, 3], isr=isr[i],
                                           removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0,
                                           partition_epoch=0) for i in range(n)])
        followers = {f: Follower(f, n) for f in FOLLOWERS}
        idle_served = [0]
        real_idle = fast.apis._idle_partition

        def counted(*args: Any, **kwargs: Any) -> Any:
            pd = real_idle(*args, **kwargs)
            idle_served[0] += pd is None
            return pd
        fast.apis._idle_partition = counted  # type: ignore[method-assign]

        for step in range(250):
            op = rng.random()
            if op < 0.25:  # an append (records of the current leader epoch)
                i = rng.randrange(n)
                batch = build_batch([(b"k", b"v" * rng.randrange(1, 50))] * rng.randrange(1, 4))
                R = ProduceRequest
                body = R(acks=1, timeout_ms=1000, topic_data=[R.TopicProduceData(
                    name="t", partition_data=[R.PartitionProduceData(index=i, records=batch)])])
                answers = [ld.apis.handle_produce(Answer(9), body) for ld in both]
                assert answers[0].responses[0].partition_responses[0].error_code == 0
                assert encode_response(answers[0], 9, 1) == encode_response(answers[1], 9, 1), step
            elif op < 0.3:  # a new leader epoch (a follower's old current epoch is then fenced)
                i = rng.randrange(n)
                epochs[i] += 1
                for ld in both:
                    ld.publish(m.PartitionChangeRecord(partition_id=i, topic_id=TOPIC_ID, leader=1))
            elif op < 0.35 and fast.proposals:  # the controller commits a proposed ISR
                i, new_isr = fast.proposals[-1]
                isr[i] = new_isr
                for ld in both:
                    ld.publish(m.PartitionChangeRecord(partition_id=i, topic_id=TOPIC_ID, isr=new_isr))
            elif op < 0.4:  # DeleteRecords up to the high watermark: the log start moves
                i = rng.randrange(n)
                offsets = {ld.part(i).delete_records_on_leader(-1) for ld in both}
                assert len(offsets) == 1
            elif op < 0.45:
                clock[0] += rng.randrange(1, 20_000)
            else:  # a follower moves some positions, then fetches
                f = followers[rng.choice(FOLLOWERS)]
                for i in rng.sample(range(n), rng.randrange(0, 3)):
                    p = fast.part(i)
                    leo, latest = p.log.log_end_offset, p.log.latest_epoch
                    choice = rng.random()
                    if choice < 0.6:  # caught up (the usual idle state)
                        f.pos[i] = (leo, -1 if latest is None else latest, p.leader_epoch, p.log.log_start_offset, 0)
                    elif choice < 0.75:  # behind
                        f.pos[i] = (rng.randrange(p.log.log_start_offset, leo + 1), f.pos[i][1], f.pos[i][2],
                                    f.pos[i][3], 0)
                    elif choice < 0.85:  # at the end, but claiming an older epoch (diverging when it ended before)
                        f.pos[i] = (leo, rng.randrange(0, p.leader_epoch + 1), p.leader_epoch, f.pos[i][3], 0)
                    elif choice < 0.92:  # a stale current leader epoch: FENCED_LEADER_EPOCH
                        f.pos[i] = (f.pos[i][0], f.pos[i][1], max(p.leader_epoch - 1, -1), f.pos[i][3], 0)
                    else:  # out of range
                        f.pos[i] = (leo + 5, f.pos[i][1], p.leader_epoch, f.pos[i][3], 0)
                parked = rng.random() < 0.3
                a_fast, a_slow = Answer(), Answer()
                req = f.request(30 if parked else 0)  # the same request to both
                r_fast = fast.apis.handle_fetch(a_fast, req)
                r_slow = slow.apis.handle_fetch(a_slow, req)
                assert (r_fast is DEFERRED) == (r_slow is DEFERRED), step
                if r_fast is DEFERRED:
                    # the other follower's fetch may move high watermarks while it waits
                    other = followers[FOLLOWERS[0] if f.id == FOLLOWERS[1] else FOLLOWERS[1]]
                    if other.epoch > 0 and rng.random() < 0.7:
                        for i in rng.sample(range(n), rng.randrange(1, 4)):  # it catches up there
                            p = fast.part(i)
                            latest = p.log.latest_epoch
                            other.pos[i] = (p.log.log_end_offset, -1 if latest is None else latest, p.leader_epoch,
                                            p.log.log_start_offset, 0)
                        o_fast, o_slow = Answer(), Answer()
                        oreq = other.request(0)
                        o_results = [fast.apis.handle_fetch(o_fast, oreq), slow.apis.handle_fetch(o_slow, oreq)]
                        assert all(r is not DEFERRED for r in o_results), step
                        assert encode_response(o_results[0], VERSION, 1) == encode_response(o_results[1], VERSION, 1)
                        other.took(o_results[0])
                    await asyncio.sleep(0.06)
                    r_fast, r_slow = a_fast.response, a_slow.response
                    assert r_fast is not None and r_slow is not None, step
                assert encode_response(r_fast, VERSION, 1) == encode_response(r_slow, VERSION, 1), step
                f.took(r_fast)
                for t in r_fast.responses:  # records: the follower takes them (its offset moves on)
                    for pd in t.partitions:
                        if pd.records:
                            p = fast.part(pd.partition_index)
                            f.pos[pd.partition_index] = (p.log.log_end_offset, p.log.latest_epoch, p.leader_epoch,
                                                         f.pos[pd.partition_index][3], 0)
            assert _state(fast, n) == _state(slow, n), step
        # the random walk went through the idle path, ISR expansions and moved high watermarks
        assert idle_served[0] > 50
        assert fast.proposals
        assert any(fast.part(i).high_watermark > 0 for i in range(n))
        for ld in both:
            await ld.close()
    asyncio.run(main())


def test_an_idle_follower_session_reads_no_log_but_keeps_its_fetch_state(tmp_path, monkeypatch):
    """Caught-up followers' incremental fetches: no log read and an empty answer, but each one
    still records the follower as caught up now (the ISR shrink check reads it), proposes an ISR
    expansion again after a refused one, and a high watermark move is answered."""
    from kraft_storage.log.log import KafkaLog

    async def main() -> None:
        n = 20
        clock = [1_000_000]
        ld = Leader(str(tmp_path / "l"), clock, True)
        ld.publish(_register(1), _register(2), _register(3), m.TopicRecord(name="t", topic_id=TOPIC_ID),
                   *[m.PartitionRecord(partition_id=i, topic_id=TOPIC_ID, replicas=[1, 2, 3], isr=[1, 2],
                                       removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0,
                                       partition_epoch=0) for i in range(n)])
        R = ProduceRequest
        for i in range(n):
            ld.apis.handle_produce(Answer(9), R(acks=1, timeout_ms=1000, topic_data=[R.TopicProduceData(
                name="t", partition_data=[R.PartitionProduceData(index=i, records=build_batch([(b"k", b"v")]))])]))
        f2, f3 = Follower(2, n), Follower(3, n)
        for f in (f2, f3):  # sessions at offset 0: the records
            resp = ld.apis.handle_fetch(Answer(), f.request(0))
            assert sum(1 for t in resp.responses for p in t.partitions if p.records) == n
            f.took(resp)
            f.pos = {i: (1, 0, 0, 0, 0) for i in range(n)}
        resp = ld.apis.handle_fetch(Answer(), f3.request(0))  # at the log end: ISR expansions proposed
        f3.took(resp)
        assert sorted(ld.proposals) == [(i, [1, 2, 3]) for i in range(n)]
        for i in range(n):  # the controller refused them
            ld.part(i).on_alter_partition_failed()
        ld.proposals.clear()
        reads: list[int] = []
        real = KafkaLog.read

        def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
            reads.append(1)
            return real(self, *args, **kwargs)
        monkeypatch.setattr(KafkaLog, "read", counted)
        clock[0] += 5_000
        resp = ld.apis.handle_fetch(Answer(), f3.request(0))  # idle: nothing read, nothing answered
        f3.took(resp)
        assert resp.error_code == 0 and resp.responses == [] and reads == []
        assert all(ld.part(i).remote_replicas[3].last_caught_up_time_ms == clock[0] for i in range(n))
        assert all(ld.part(i).remote_replicas[3].broker_epoch == 103 for i in range(n))
        assert sorted(ld.proposals) == [(i, [1, 2, 3]) for i in range(n)]  # proposed again
        assert all(ld.part(i).high_watermark == 0 for i in range(n))
        # follower 2 (in the ISR) tells its new position: the high watermarks move to 1
        resp = ld.apis.handle_fetch(Answer(), f2.request(0))
        f2.took(resp)
        assert all(ld.part(i).high_watermark == 1 for i in range(n))
        assert [p.high_watermark for t in resp.responses for p in t.partitions] == [1] * n
        assert len(reads) == n  # (it named them again, with new positions: they are read and answered)
        reads.clear()
        # follower 3's next idle fetch is answered once with the moved high watermarks, then nothing
        resp = ld.apis.handle_fetch(Answer(), f3.request(0))
        f3.took(resp)
        assert [(p.high_watermark, p.records) for t in resp.responses for p in t.partitions] == [(1, b"")] * n
        resp = ld.apis.handle_fetch(Answer(), f3.request(0))
        assert resp.responses == [] and reads == []
        await ld.close()
    asyncio.run(main())
