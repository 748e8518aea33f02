"""Issue 25 in process, without sockets: the LogManager's layout, checkpoints and recovery, the
leader's Partition (Kafka's PartitionTest), the ReplicaManager driven by image deltas (Kafka's
ReplicaManagerTest) and the Produce/Fetch/ListOffsets handlers' per-partition answers."""
from __future__ import annotations

import asyncio
import errno
import logging
import os
import uuid

import pytest

from kraft_node.broker.log_manager import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    LogManager,
    LogManagerSettings,
    topic_log_config,
)
from kraft_node.broker.metadata_cache import KRaftMetadataCache
from kraft_node.broker.partition import PartitionError
from kraft_node.broker.partition_apis import PartitionApis, offset_for_timestamp
from kraft_node.broker.replica_manager import ReplicaManager, diff_local_changes
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicPartition, TopicsImage
from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.fetch import FetchRequest
from kraft_node.protocol.generated.list_offsets import ListOffsetsRequest
from kraft_node.protocol.generated.produce import ProduceRequest
from kraft_storage.log.partition_metadata import read_partition_metadata
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record.batch import iter_batches
from kraft_storage.record.builder import build_batch

BROKER = 1
TOPIC_ID = Uuid(uuid.UUID("7f8e3b2a-1c4d-4e5f-8a9b-0c1d2e3f4a5b").bytes)


def _batch(n: int, start: int = 0, ts: int | None = None) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i) for i in range(start, start + n)], timestamp=ts)


def _partition_record(pid: int, replicas: list[int], isr: list[int], leader: int, leader_epoch: int = 0,
                      partition_epoch: int = 0, topic_id: Uuid = TOPIC_ID) -> m.PartitionRecord:
    return m.PartitionRecord(partition_id=pid, topic_id=topic_id, replicas=replicas, isr=isr, removing_replicas=[],
                             adding_replicas=[], leader=leader, leader_epoch=leader_epoch,
                             partition_epoch=partition_epoch)


class Ctx:
    """A ReplicaManager over a LogManager in ``tmp_path``, fed deltas like the loader does."""

    def __init__(self, tmp_path, props: dict[str, str] | None = None) -> None:
        self.dir = str(tmp_path / "logs")
        self.props = {"log.segment.delete.delay.ms": "0", **(props or {})}
        self.now = 1_000_000
        self.open()

    def open(self) -> None:
        self.logs = LogManager([self.dir], broker_props=self.props, clock=lambda: self.now)
        self.logs.startup()
        self.rm = ReplicaManager(BROKER, self.logs, props=self.props, clock_ms=lambda: self.now)
        self.image = MetadataImage.EMPTY
        self.apis = PartitionApis(BROKER, KRaftMetadataCache(lambda: self.image), self.rm, props=self.props,
                                  clock_ms=lambda: self.now)

    def publish(self, *records) -> MetadataDelta:
        delta = MetadataDelta(self.image)
        for r in records:
            delta.replay(r)
        self.image = delta.apply(MetadataProvenance(len(records), 1, 0, True))
        self.rm.apply_delta(delta, self.image)
        return delta

    def create(self, name: str, *parts: m.PartitionRecord, topic_id: Uuid = TOPIC_ID) -> None:
        self.publish(m.TopicRecord(name=name, topic_id=topic_id), *parts)

    async def close(self) -> None:
        await self.rm.shutdown()
        await self.logs.shutdown()


class Answer(RequestContext):
    """A RequestContext that keeps what the handler answered (``respond`` or ``respond_frame``)."""

    def __init__(self, version: int) -> None:
        super().__init__(header=None, api_version=version, peer=("127.0.0.1", 1), listener="PLAINTEXT")
        self.response = None
        self.frames: list = []

    def respond(self, response) -> None:
        self.response = response

    def respond_frame(self, out) -> None:
        self.frames.append(out)


def _produce(ctx: Ctx, topic: str, partition: int, records, *, acks: int = 1, version: int = 9,
             timeout_ms: int = 1000) -> tuple[object, Answer]:
    R = ProduceRequest
    body = R(acks=acks, timeout_ms=timeout_ms, topic_data=[R.TopicProduceData(
        name=topic, partition_data=[R.PartitionProduceData(index=partition, records=records)])])
    answer = Answer(version)
    return ctx.apis.handle_produce(answer, body), answer


def _fetch_body(topic: str, partition: int, offset: int, *, replica_id: int = -1, last_fetched_epoch: int = -1,
                max_wait_ms: int = 0, min_bytes: int = 1, current_leader_epoch: int = -1):
    R = FetchRequest
    return R(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=1 << 20,
             session_epoch=-1, topics=[R.FetchTopic(topic=topic, partitions=[R.FetchPartition(
                 partition=partition, fetch_offset=offset, partition_max_bytes=1 << 20,
                 last_fetched_epoch=last_fetched_epoch, current_leader_epoch=current_leader_epoch)])])


def _one(resp):
    (topic,) = resp.responses
    (part,) = topic.partitions
    return part


# ---------------------------------------------------------------------------------------------
# LogManager: layout, checkpoints, recovery, deletion
# ---------------------------------------------------------------------------------------------

def test_leader_log_layout_and_checkpoints_survive_a_clean_restart(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("orders", _partition_record(0, [1], [1], 1, leader_epoch=3),
                   _partition_record(1, [1], [1], 1, leader_epoch=3))
        p0 = ctx.rm.get_partition(TopicPartition("orders", 0))
        assert p0 is not None and p0.is_leader and p0.leader_epoch == 3
        for _ in range(5):
            resp, _a = _produce(ctx, "orders", 0, _batch(10))
            assert _one_produce(resp).error_code == 0
        assert p0.high_watermark == 50  # RF 1: the HWM is the leader's LEO at once
        d = os.path.join(ctx.dir, "orders-0")
        assert read_partition_metadata(os.path.join(d, "partition.metadata")) == TOPIC_ID.bytes
        assert os.path.exists(os.path.join(d, "00000000000000000000.log"))
        # every appended batch carries the leader epoch
        with open(os.path.join(d, "00000000000000000000.log"), "rb") as f:
            epochs = {b.partition_leader_epoch for b in iter_batches(f.read())}
        assert epochs == {3}
        await ctx.close()
        with open(os.path.join(ctx.dir, RECOVERY_POINT_CHECKPOINT)) as f:
            assert f.read() == "0\n2\norders 0 50\norders 1 0\n"
        with open(os.path.join(ctx.dir, REPLICATION_OFFSET_CHECKPOINT)) as f:
            assert f.read() == "0\n2\norders 0 50\norders 1 0\n"
        with open(os.path.join(ctx.dir, LOG_START_OFFSET_CHECKPOINT)) as f:
            assert f.read() == "0\n2\norders 0 0\norders 1 0\n"
        # Kafka's layout: the log dir's marker, none in the partition directory
        assert os.path.exists(os.path.join(ctx.dir, ".kafka_cleanshutdown"))
        assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
        # restart: the log is found, trusted (clean marker), and the HWM comes from the checkpoint
        ctx.open()
        assert ctx.logs.checkpointed_high_watermarks[TopicPartition("orders", 0)] == 50
        kl = ctx.logs.get_log(TopicPartition("orders", 0))
        assert kl is not None and kl.load_report.clean_shutdown and kl.log_end_offset == 50
        ctx.create("orders", _partition_record(0, [1], [1], 1, leader_epoch=4),
                   _partition_record(1, [1], [1], 1, leader_epoch=4))
        resp, _a = _produce(ctx, "orders", 0, _batch(1))
        assert _one_produce(resp).base_offset == 50
        await ctx.close()
    asyncio.run(main())


def _one_produce(resp):
    (topic,) = resp.responses
    (part,) = topic.partition_responses
    return part


def test_unclean_shutdown_recovers_from_the_recovery_point(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1))
        for i in range(3):
            _produce(ctx, "t", 0, _batch(10, 10 * i))
        part = ctx.rm.get_partition(TopicPartition("t", 0))
        part.log.flush()
        ctx.logs.checkpoint_recovery_points()
        _produce(ctx, "t", 0, _batch(10, 30))
        # a crash: no flush, no marker; a torn tail is written after the last batch
        kl = part.log
        seg = kl.active_segment.log_path
        kl.close_uncleanly()
        with open(seg, "ab") as f:
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x28torn")
        ctx.open()
        kl2 = ctx.logs.get_log(TopicPartition("t", 0))
        assert kl2 is not None and not kl2.load_report.clean_shutdown
        assert kl2.log_end_offset == 40  # the torn tail is cut, every whole batch kept
        with open(os.path.join(ctx.dir, RECOVERY_POINT_CHECKPOINT)) as f:
            assert f.read() == "0\n1\nt 0 30\n"
        await ctx.logs.shutdown()
    asyncio.run(main())


def test_deleted_topic_directory_is_renamed_then_removed(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("gone", _partition_record(0, [1], [1], 1))
        _produce(ctx, "gone", 0, _batch(3))
        ctx.publish(m.RemoveTopicRecord(topic_id=TOPIC_ID))
        assert ctx.rm.get_partition(TopicPartition("gone", 0)) is None
        names = os.listdir(ctx.dir)
        assert "gone-0" not in names
        assert any(n.startswith("gone-0.") and n.endswith("-delete") for n in names), names
        for _ in range(100):
            if not any(n.endswith("-delete") for n in os.listdir(ctx.dir)):
                break
            await asyncio.sleep(0.02)
        assert not any(n.startswith("gone-0") for n in os.listdir(ctx.dir))
        await ctx.close()
    asyncio.run(main())


def test_stray_log_found_at_start_is_renamed_stray_and_kept(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("old", _partition_record(0, [1], [1], 1))
        _produce(ctx, "old", 0, _batch(3))
        await ctx.close()
        ctx.open()
        other = Uuid(uuid.uuid4().bytes)
        # the topic was re-created under another id while this broker was down
        ctx.create("old", _partition_record(0, [1], [1], 1, topic_id=other), topic_id=other)
        names = os.listdir(ctx.dir)
        assert any(n.startswith("old-0.") and n.endswith("-stray") for n in names), names
        p = ctx.rm.get_partition(TopicPartition("old", 0))
        assert p is not None and p.log.log_end_offset == 0 and p.topic_id == other
        await ctx.close()
    asyncio.run(main())


def test_topic_configs_map_to_log_config_and_unknown_ones_are_named(caplog):
    cfg = topic_log_config("t", {"segment.bytes": "2048", "retention.ms": "-1", "cleanup.policy": "compact"},
                           {"segment.bytes": 1 << 30, "retention.ms": 1000})
    assert cfg.segment_bytes == 2048 and cfg.retention_ms == -1
    assert "cleanup.policy=compact is not implemented" in caplog.text
    settings = LogManagerSettings.from_properties({"log.segment.delete.delay.ms": "5"})
    assert settings.file_delete_delay_ms == 5
    with pytest.raises(ValueError, match="log.flush.offset.checkpoint.interval.ms"):
        LogManagerSettings.from_properties({"log.flush.offset.checkpoint.interval.ms": "x"})


# ---------------------------------------------------------------------------------------------
# Partition (Kafka's PartitionTest, re-stated)
# ---------------------------------------------------------------------------------------------

def _register(broker_id: int, epoch: int) -> m.RegisterBrokerRecord:
    return m.RegisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch, incarnation_id=Uuid(broker_id + 100),
                                  end_points=[], features=[], rack=None, fenced=False, log_dirs=[])


def test_high_watermark_is_the_minimum_end_offset_over_the_isr(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        proposals = []
        ctx.rm.alter_partition = lambda p, isr: proposals.append(list(isr))
        ctx.publish(_register(1, 10), _register(2, 11), _register(3, 12))
        ctx.create("t", _partition_record(0, [1, 2, 3], [1, 2], 1, leader_epoch=5))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        p.append_records_to_leader(_batch(10), 1, 1)
        assert p.high_watermark == 0  # follower 2 (in the ISR) has not fetched
        p.update_follower_fetch_state(2, 6, ctx.now)
        assert p.high_watermark == 6
        p.update_follower_fetch_state(3, 10, ctx.now)  # not in the ISR: no effect on the HWM ...
        assert p.high_watermark == 6
        assert proposals == [[1, 2, 3]]  # ... but it caught up: the ISR expansion is proposed
        # PartitionTest.testIsrNotExpandedIfUpdateIsPending: nothing more while pending
        p.update_follower_fetch_state(3, 10, ctx.now)
        assert proposals == [[1, 2, 3]]
        p.update_follower_fetch_state(2, 10, ctx.now)
        assert p.high_watermark == 10
        with pytest.raises(PartitionError) as exc:
            p.update_follower_fetch_state(9, 0, ctx.now)
        assert exc.value.error == Errors.NOT_LEADER_OR_FOLLOWER
        await ctx.close()
    asyncio.run(main())


def test_acks_all_below_min_insync_is_not_enough_replicas(tmp_path):
    async def main():
        ctx = Ctx(tmp_path, {"min.insync.replicas": "2"})
        ctx.create("t", _partition_record(0, [1, 2], [1], 1))
        resp, _a = _produce(ctx, "t", 0, _batch(1), acks=-1)
        assert _one_produce(resp).error_code == Errors.NOT_ENOUGH_REPLICAS
        resp, _a = _produce(ctx, "t", 0, _batch(1), acks=1)  # acks=1 is not held to min.insync
        assert _one_produce(resp).error_code == 0
        await ctx.close()
    asyncio.run(main())


def test_isr_shrinks_after_replica_lag_time_max(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        proposals = []
        ctx.rm.alter_partition = lambda p, isr: proposals.append(list(isr))
        ctx.create("t", _partition_record(0, [1, 2, 3], [1, 2, 3], 1))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        p.append_records_to_leader(_batch(5), 1, 1)
        ctx.now += 15_000
        p.update_follower_fetch_state(2, 5, ctx.now)  # 2 is caught up now; 3 was last at become-leader
        ctx.now += 5_000
        p.maybe_shrink_isr(ctx.now, 10_000)
        assert proposals == [[1, 2]]
        await ctx.close()
    asyncio.run(main())


def test_isr_not_expanded_to_a_follower_fenced_or_in_controlled_shutdown(tmp_path):
    """Kafka's PartitionTest testIsrNotExpandedIfReplicaIsFencedOrShutdown (KIP-841): a caught-up
    follower joins the ISR only while the metadata says it is neither fenced nor in controlled
    shutdown; once it is active again (a new registration, unfenced) the next fetch adds it."""
    register = _register

    async def main():
        ctx = Ctx(tmp_path)
        proposals = []
        ctx.rm.alter_partition = lambda p, isr: proposals.append(list(isr))
        ctx.publish(register(1, 10), register(2, 11), register(3, 12))
        ctx.create("t", _partition_record(0, [1, 2, 3], [1, 2], 1))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        p.append_records_to_leader(_batch(5), 1, 1)
        p.update_follower_fetch_state(2, 5, ctx.now)  # the high watermark reaches 5

        ctx.publish(m.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=12, in_controlled_shutdown=1))
        p.update_follower_fetch_state(3, 5, ctx.now)
        assert proposals == [] and p.pending_isr is None and not ctx.rm.isr_eligible(3)

        ctx.publish(m.BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=12, fenced=1))
        p.update_follower_fetch_state(3, 5, ctx.now)
        assert proposals == [] and not ctx.rm.isr_eligible(3)

        ctx.publish(register(3, 13))  # a new incarnation, registered unfenced
        assert ctx.rm.isr_eligible(3) and not ctx.rm.isr_eligible(4)  # 4: not registered (no alive epoch)
        p.update_follower_fetch_state(3, 5, ctx.now)
        assert proposals == [[1, 2, 3]]
        await ctx.close()
    asyncio.run(main())


def test_isr_expanded_only_with_the_metadatas_broker_epoch_and_the_epochs_go_with_the_change(tmp_path):
    """Kafka's PartitionTest testIsrCanExpandedIfBrokerEpochsMatchWithKraftMetadataCache (KIP-903):
    a caught-up follower whose fetch carried a broker epoch other than the metadata's does not join
    the ISR; its next fetch with the registered epoch adds it, and the change carries each ISR
    member's epoch as its fetches did (-1 for one that has not fetched)."""
    async def main():
        ctx = Ctx(tmp_path)
        sent = []
        ctx.rm.alter_partition = lambda p, isr: sent.append([(b, p.replica_broker_epoch(b)) for b in isr])
        ctx.publish(_register(1, 10), _register(2, 11), _register(3, 12))
        ctx.create("t", _partition_record(0, [1, 2, 3], [1, 3], 1))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        p.append_records_to_leader(_batch(5), 1, 1)
        # a newer epoch than the metadata's (the broker re-registered; this leader has not seen it)
        p.update_follower_fetch_state(2, 5, ctx.now, broker_epoch=13)
        assert p.remote_replicas[2].log_end_offset == 5 and p.remote_replicas[2].broker_epoch == 13
        assert sent == [] and p.pending_isr is None and not ctx.rm.isr_eligible(2, 13)
        p.update_follower_fetch_state(2, 5, ctx.now, broker_epoch=11)
        assert sent == [[(1, -1), (3, -1), (2, 11)]] and p.pending_isr == (1, 3, 2)
        # a fetch without an epoch (a version before v15) is not held to one
        assert ctx.rm.isr_eligible(2, -1) and not ctx.rm.isr_eligible(2, None)
        await ctx.close()
    asyncio.run(main())


def test_a_follower_fetch_with_a_stale_broker_epoch_is_refused(tmp_path):
    """Kafka's PartitionTest testFenceFollowerFetchWithStaleBrokerEpoch: a fetch carrying an epoch
    older than the metadata's for that broker (its previous incarnation) is NOT_LEADER_OR_FOLLOWER
    and leaves the follower's state as the last good fetch set it."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.rm.alter_partition = lambda p, isr: None
        ctx.publish(_register(1, 10), _register(2, 11))
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 1))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        p.append_records_to_leader(_batch(5), 1, 1)
        p.update_follower_fetch_state(2, 3, ctx.now, broker_epoch=11)
        ctx.now += 100
        with pytest.raises(PartitionError) as exc:
            p.update_follower_fetch_state(2, 5, ctx.now, broker_epoch=10)
        assert exc.value.error == Errors.NOT_LEADER_OR_FOLLOWER
        assert str(exc.value).endswith("Received stale fetch state update. broker epoch=10 vs expected=11")
        state = p.remote_replicas[2]
        assert (state.log_end_offset, state.broker_epoch, state.last_fetch_time_ms) == (3, 11, ctx.now - 100)
        assert p.high_watermark == 3
        await ctx.close()
    asyncio.run(main())


def test_older_partition_epoch_is_ignored_and_follower_hwm_is_capped(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 2, leader_epoch=4, partition_epoch=7))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        assert p is not None and not p.is_leader and p.leader_id == 2
        from kraft_node.metadata.controller.replication_control import PartitionRegistration
        stale = PartitionRegistration.from_record(_partition_record(0, [1, 2], [1, 2], 1, 3, 6))
        assert not p.make_leader(stale, ctx.now) and p.leader_id == 2
        p.log.append_as_follower(build_batch([(None, b"x")] * 4, partition_leader_epoch=4))
        assert p.maybe_update_high_watermark_from_leader(100) and p.high_watermark == 4
        await ctx.close()
    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# ReplicaManager (Kafka's ReplicaManagerTest, re-stated)
# ---------------------------------------------------------------------------------------------

def test_local_changes_make_leaders_followers_and_deletes(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        became_leader, became_follower = [], []
        ctx.rm.on_become_leader.append(lambda ps: became_leader.extend(str(p.topic_partition) for p in ps))
        ctx.rm.on_become_follower.append(lambda ps: became_follower.extend(str(p.topic_partition) for p in ps))
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 1), _partition_record(1, [2, 1], [2, 1], 2),
                   _partition_record(2, [2, 3], [2, 3], 2))
        assert became_leader == ["t-0"] and became_follower == ["t-1"]
        assert sorted(os.listdir(ctx.dir))[-2:] == ["t-0", "t-1"] and "t-2" not in os.listdir(ctx.dir)
        # leadership moves: t-0 to 2 (we follow), t-1 to us
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=2),
                    m.PartitionChangeRecord(partition_id=1, topic_id=TOPIC_ID, leader=1))
        assert became_leader == ["t-0", "t-1"] and became_follower == ["t-1", "t-0"]
        # reassigned away: deleted
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, replicas=[2, 3], isr=[2, 3]))
        assert ctx.rm.get_partition(TopicPartition("t", 0)) is None
        await ctx.close()
    asyncio.run(main())


def test_diff_of_a_replaced_topics_image_matches_the_delta(tmp_path):
    delta = MetadataDelta(MetadataImage.EMPTY)
    for r in (m.TopicRecord(name="t", topic_id=TOPIC_ID), _partition_record(0, [1, 2], [1, 2], 1),
              _partition_record(1, [2, 1], [2, 1], 2), _partition_record(2, [2, 3], [2, 3], 2)):
        delta.replay(r)
    expected = delta.topics_delta.local_changes(1)
    image = delta.apply(MetadataProvenance(4, 1, 0, True))
    got = diff_local_changes(TopicsImage.of([]), image.topics, 1)
    assert got == expected
    gone = diff_local_changes(image.topics, TopicsImage.of([]), 1)
    assert gone.deletes == {TopicPartition("t", 0), TopicPartition("t", 1)}


def test_acks_all_completes_when_the_follower_fetch_moves_the_high_watermark(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 1, leader_epoch=2))
        result, answer = _produce(ctx, "t", 0, _batch(5), acks=-1, timeout_ms=5000)
        assert result is DEFERRED and answer.response is None
        # the follower fetches from 0 (nothing acknowledged yet), then from 5
        fetch = ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 0, replica_id=2))
        assert len(_one(fetch).records) > 0 and answer.response is None
        ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 5, replica_id=2, last_fetched_epoch=2))
        assert answer.response is not None
        part = _one_produce(answer.response)
        assert part.error_code == 0 and part.base_offset == 0
        # nobody fetches: REQUEST_TIMED_OUT after timeout_ms
        result, answer = _produce(ctx, "t", 0, _batch(1), acks=-1, timeout_ms=50)
        assert result is DEFERRED
        await asyncio.sleep(0.2)
        assert _one_produce(answer.response).error_code == Errors.REQUEST_TIMED_OUT
        await ctx.close()
    asyncio.run(main())


def test_fetch_waits_for_data_until_an_append(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1))
        answer = Answer(12)
        assert ctx.apis.handle_fetch(answer, _fetch_body("t", 0, 0, max_wait_ms=5000)) is DEFERRED
        await asyncio.sleep(0.05)
        assert answer.response is None
        _produce(ctx, "t", 0, _batch(2))
        assert answer.response is None  # woken fetches are retried at the end of the loop iteration
        await asyncio.sleep(0)
        assert answer.response is not None and len(_one(answer.response).records) > 0
        # and one that never gets data answers empty after max_wait_ms
        answer = Answer(12)
        ctx.apis.handle_fetch(answer, _fetch_body("t", 0, 2, max_wait_ms=50))
        await asyncio.sleep(0.2)
        assert answer.response is not None and _one(answer.response).records == b""
        await ctx.close()
    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# Handlers: per-partition errors
# ---------------------------------------------------------------------------------------------

def test_produce_errors(tmp_path):
    async def main():
        ctx = Ctx(tmp_path, {"message.max.bytes": "200"})
        ctx.create("t", _partition_record(0, [1], [1], 1), _partition_record(1, [2], [2], 2))
        assert _one_produce(_produce(ctx, "nope", 0, _batch(1))[0]).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert _one_produce(_produce(ctx, "t", 5, _batch(1))[0]).error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert _one_produce(_produce(ctx, "t", 1, _batch(1))[0]).error_code == Errors.NOT_LEADER_OR_FOLLOWER
        bad = bytearray(_batch(2))
        bad[-1] ^= 0xFF
        assert _one_produce(_produce(ctx, "t", 0, bytes(bad))[0]).error_code == Errors.CORRUPT_MESSAGE
        assert _one_produce(_produce(ctx, "t", 0, _batch(40))[0]).error_code == Errors.MESSAGE_TOO_LARGE
        assert _one_produce(_produce(ctx, "t", 0, _batch(1) + _batch(1))[0]).error_code == Errors.INVALID_RECORD
        assert _one_produce(_produce(ctx, "t", 0, _batch(1), acks=2)[0]).error_code == Errors.INVALID_REQUIRED_ACKS
        for garbage in (None, b"", b"xyz", _batch(2)[:-5]):  # null, empty, short, torn: refused, never a crash
            assert _one_produce(_produce(ctx, "t", 0, garbage)[0]).error_code == Errors.INVALID_RECORD, garbage
        txn = build_batch([(None, b"x")], is_transactional=True, producer_id=7, producer_epoch=0, base_sequence=0)
        assert _one_produce(_produce(ctx, "t", 0, txn)[0]).error_code == Errors.INVALID_TXN_STATE
        # nothing was appended by any of them
        assert ctx.rm.get_partition(TopicPartition("t", 0)).log.log_end_offset == 0
        # acks=0: no answer on success, the connection closed (None) on failure
        result, answer = _produce(ctx, "t", 0, _batch(1), acks=0)
        assert result is DEFERRED and answer.frames == [b""]
        result, answer = _produce(ctx, "t", 1, _batch(1), acks=0)
        assert answer.frames == [None]
        await ctx.close()
    asyncio.run(main())


def test_fetch_errors_and_diverging_epoch(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2], [1], 1, leader_epoch=3), _partition_record(1, [2], [2], 2))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        p.append_records_to_leader(_batch(4), 1, 1)
        assert _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 1, 0))).error_code == \
            Errors.NOT_LEADER_OR_FOLLOWER
        assert _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("x", 0, 0))).error_code == \
            Errors.UNKNOWN_TOPIC_OR_PARTITION
        assert _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 99))).error_code == \
            Errors.OFFSET_OUT_OF_RANGE
        assert _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 0, current_leader_epoch=2))).error_code \
            == Errors.FENCED_LEADER_EPOCH
        assert _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 0, current_leader_epoch=4))).error_code \
            == Errors.UNKNOWN_LEADER_EPOCH
        # epochs 3 (offsets 0-3) then 5 (4-7): a follower whose last fetched epoch is 4 (a tail the
        # leader never had) gets the diverging epoch (3, 4) and no records
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1),
                    m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))
        assert p.leader_epoch == 5
        p.append_records_to_leader(_batch(4), 1, 1)
        part = _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 6, replica_id=2, last_fetched_epoch=4)))
        assert part.error_code == 0 and part.records == b""
        assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (3, 4)
        # a follower on the leader's history is not diverging and gets the records
        part = _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 4, replica_id=2, last_fetched_epoch=3)))
        assert part.diverging_epoch.epoch == -1 and [b.base_offset for b in iter_batches(part.records)] == [4]
        # a consumer reads only up to the high watermark: 8 here (ISR = leader only)
        consumer = _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 0)))
        assert consumer.high_watermark == 8 and consumer.last_stable_offset == 8
        assert [b.base_offset for b in iter_batches(consumer.records)] == [0, 4]
        await ctx.close()
    asyncio.run(main())


def test_list_offsets_earliest_latest_max_and_by_timestamp(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1, leader_epoch=2))
        base = 1_700_000_000_000
        for i in range(5):
            _produce(ctx, "t", 0, build_batch([(None, b"a", base + 100 * i), (None, b"b", base + 100 * i + 50)]))
        kl = ctx.rm.get_partition(TopicPartition("t", 0)).log
        assert offset_for_timestamp(kl, base + 120) == (base + 150, 3)
        assert offset_for_timestamp(kl, base + 999_999) is None
        R = ListOffsetsRequest

        def ask(ts: int):
            body = R(replica_id=-1, topics=[R.ListOffsetsTopic(name="t", partitions=[
                R.ListOffsetsPartition(partition_index=0, timestamp=ts, current_leader_epoch=-1)])])
            resp = ctx.apis.handle_list_offsets(Answer(7), body)
            (topic,) = resp.topics
            (p,) = topic.partitions
            return p.error_code, p.offset, p.timestamp, p.leader_epoch

        assert ask(-2) == (0, 0, -1, 2)
        assert ask(-1) == (0, 10, -1, 2)
        assert ask(-3) == (0, 9, base + 450, 2)
        assert ask(base + 200) == (0, 4, base + 200, 2)
        assert ask(base + 10_000) == (0, -1, -1, -1)
        await ctx.close()
    asyncio.run(main())


def test_find_coordinator_is_coordinator_not_available(tmp_path):
    from kraft_node.protocol.generated.find_coordinator import FindCoordinatorRequest as F

    async def main():
        ctx = Ctx(tmp_path)
        old = ctx.apis.handle_find_coordinator(Answer(3), F(key="group-a", key_type=0))
        assert old.error_code == Errors.COORDINATOR_NOT_AVAILABLE and old.node_id == -1
        new = ctx.apis.handle_find_coordinator(Answer(4), F(key_type=0, coordinator_keys=["a", "b"]))
        assert [(c.key, c.error_code) for c in new.coordinators] == [("a", 15), ("b", 15)]
        await ctx.close()
    asyncio.run(main())


def test_every_version_answers_and_encodes(tmp_path):
    """Produce v3-13, Fetch v4-18 and ListOffsets v1-11: the answer encodes at the request's version
    (a field a version cannot carry would close the client's connection), topics by id from Produce
    v13 and Fetch v13."""
    from kraft_node.protocol.framing import encode_response

    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1, leader_epoch=1))
        P, F, L = ProduceRequest, FetchRequest, ListOffsetsRequest
        for v in range(P.LOWEST_VERSION, P.HIGHEST_VERSION + 1):
            topic = P.TopicProduceData(name="t", topic_id=TOPIC_ID) if v >= 13 else P.TopicProduceData(name="t")
            topic.partition_data = [P.PartitionProduceData(index=0, records=_batch(1))]
            resp = ctx.apis.handle_produce(Answer(v), P(acks=1, timeout_ms=1000, topic_data=[topic]))
            assert _one_produce(resp).error_code == 0, v
            assert encode_response(resp, v, 7)
        unknown = P.TopicProduceData(topic_id=Uuid(uuid.uuid4().bytes),
                                     partition_data=[P.PartitionProduceData(index=0, records=_batch(1))])
        resp = ctx.apis.handle_produce(Answer(13), P(acks=1, timeout_ms=1000, topic_data=[unknown]))
        assert _one_produce(resp).error_code == Errors.UNKNOWN_TOPIC_ID
        produced = P.HIGHEST_VERSION - P.LOWEST_VERSION + 1
        for v in range(F.LOWEST_VERSION, F.HIGHEST_VERSION + 1):
            body = _fetch_body("t", 0, 0)
            if v >= 13:
                body.topics[0].topic_id = TOPIC_ID
            if v >= 15:
                body.replica_state = F.ReplicaState(replica_id=-1)
            resp = ctx.apis.handle_fetch(Answer(v), body)
            part = _one(resp)
            assert part.error_code == 0 and part.high_watermark == produced, v
            assert sum(b.records_count for b in iter_batches(part.records)) == produced
            assert encode_response(resp, v, 7)
        for v in range(L.LOWEST_VERSION, L.HIGHEST_VERSION + 1):
            body = L(replica_id=-1, topics=[L.ListOffsetsTopic(name="t", partitions=[
                L.ListOffsetsPartition(partition_index=0, timestamp=-1)])])
            resp = ctx.apis.handle_list_offsets(Answer(v), body)
            assert resp.topics[0].partitions[0].offset == produced, v
            assert encode_response(resp, v, 7)
        await ctx.close()
    asyncio.run(main())


def _fetch_all(topic: str, n: int, replica: int, offset: int, max_wait_ms: int):
    """A fetch of partitions 0..n-1 of ``topic`` from ``offset`` by ``replica`` (min_bytes 1)."""
    R = FetchRequest
    return R(replica_id=replica, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_epoch=-1,
             topics=[R.FetchTopic(topic=topic, partitions=[
                 R.FetchPartition(partition=i, fetch_offset=offset, partition_max_bytes=1 << 20, last_fetched_epoch=-1,
                                  current_leader_epoch=-1) for i in range(n)])])


def _rf3_one_record_each(tmp_path, n: int) -> tuple[Ctx, int]:
    """Partitions 0..n-1 of "t" led here (RF 3), one record appended to each, and follower 3's
    fetch from offset 0 read (it has the records)."""
    ctx = Ctx(tmp_path)
    ctx.create("t", *[_partition_record(i, [1, 2, 3], [1, 2, 3], 1) for i in range(n)])
    for i in range(n):
        _produce(ctx, "t", i, _batch(1))
    ctx.apis.handle_fetch(Answer(12), _fetch_all("t", n, 3, 0, 0))
    return ctx, n


def _count_reads(ctx: Ctx, monkeypatch) -> list[int]:
    """A list that grows by one at each of the partition APIs' fetch reads from now on."""
    reads: list[int] = []
    real = ctx.apis._read_fetch

    def counted(*args, **kwargs):
        reads.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(ctx.apis, "_read_fetch", counted)
    return reads


def test_a_delta_changing_many_partitions_tries_each_parked_fetch_once(tmp_path, monkeypatch):
    """A parked fetch watches every partition it asked for and its retry reads them all: a delta
    that changes all of them (new leader epochs here: the follower's fetch has nothing new and
    stays parked) tries it once, not once per partition (new leaders of 1,000 partitions made that
    a million reads on the loop: a controlled shutdown took 20-24 s, session 17)."""
    async def main():
        ctx = Ctx(tmp_path)
        n = 40
        ctx.create("t", *[_partition_record(i, [1, 2], [1, 2], 1) for i in range(n)])
        fetch = Answer(12)  # the follower is caught up on every partition: its fetch waits for data
        assert ctx.apis.handle_fetch(fetch, _fetch_all("t", n, 2, 0, 10_000)) is DEFERRED
        reads = _count_reads(ctx, monkeypatch)
        ctx.publish(*[m.PartitionChangeRecord(partition_id=i, topic_id=TOPIC_ID, leader=1) for i in range(n)])
        await asyncio.sleep(0)  # woken fetches are retried at the end of the loop iteration
        assert all(ctx.rm.get_partition(TopicPartition("t", i)).leader_epoch == 1 for i in range(n))
        assert len(reads) == 1 and fetch.response is None
        _produce(ctx, "t", 3, _batch(2))  # data: the fetch answers
        await asyncio.sleep(0)
        assert len(reads) == 2 and fetch.response is not None
        await ctx.close()
    asyncio.run(main())


def test_one_follower_fetch_moving_many_high_watermarks_retries_the_others_parked_fetch_once(tmp_path,
                                                                                                 monkeypatch):
    """RF 3: follower 2's fetch of 40 partitions moves 40 high watermarks; follower 3's parked
    fetch of the same partitions is not re-read at all: what it waits for (records past its fetch
    offsets) did not change (it was retried once per partition, each retry reading all 40:
    O(partitions^2) log reads per fetch round, what livelocked brokers leading 3,000 partitions;
    then once per round, which still read 40 logs for nothing).  New records wake it once."""
    async def main():
        ctx, n = _rf3_one_record_each(tmp_path, 40)  # follower 3 has the records...
        ctx.apis.handle_fetch(Answer(12), _fetch_all("t", n, 3, 1, 0))   # ...and says so
        parked = Answer(12)
        assert ctx.apis.handle_fetch(parked, _fetch_all("t", n, 3, 1, 10_000)) is DEFERRED  # caught up: it waits
        reads = _count_reads(ctx, monkeypatch)
        ctx.apis.handle_fetch(Answer(12), _fetch_all("t", n, 2, 1, 0))   # follower 2 catches up: 40 HWs move
        await asyncio.sleep(0)
        assert all(ctx.rm.get_partition(TopicPartition("t", i)).high_watermark == 1 for i in range(n))
        assert len(reads) == 1  # follower 2's fetch only: follower 3's log end offsets did not move
        assert parked.response is None  # no new records for it: it waits on (Kafka's DelayedFetch)
        for i in range(n):
            _produce(ctx, "t", i, _batch(1))
        await asyncio.sleep(0)
        assert len(reads) == 2 and parked.response is not None  # one retry for the 40 appends, which answers
        assert all(p.records for t in parked.response.responses for p in t.partitions)
        await ctx.close()
    asyncio.run(main())


def test_an_acks_all_round_on_rf3_reads_each_follower_fetch_once(tmp_path, monkeypatch):
    """One acks=all round with two caught-up followers parked: the append wakes both parked
    fetches (one read each, they answer with the records); each follower's next fetch is read
    once and parks; the second moves the high watermark and completes the produce -- and the
    first follower's parked fetch is not re-read for that (4 reads a round, not 5: a follower
    fetch waits for records, which a high watermark move does not bring; Kafka's
    DelayedFetch.tryComplete compares offsets before it reads).  A consumer's parked fetch, by
    contrast, waits for the high watermark: the append alone does not re-read it, the high
    watermark's move answers it."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2, 3], [1, 2, 3], 1))
        f2, f3, consumer = Answer(12), Answer(12), Answer(12)
        assert ctx.apis.handle_fetch(f2, _fetch_body("t", 0, 0, replica_id=2, max_wait_ms=10_000)) is DEFERRED
        assert ctx.apis.handle_fetch(f3, _fetch_body("t", 0, 0, replica_id=3, max_wait_ms=10_000)) is DEFERRED
        assert ctx.apis.handle_fetch(consumer, _fetch_body("t", 0, 0, max_wait_ms=10_000)) is DEFERRED
        reads = _count_reads(ctx, monkeypatch)
        result, produce = _produce(ctx, "t", 0, _batch(3), acks=-1, timeout_ms=10_000)
        assert result is DEFERRED
        await asyncio.sleep(0)
        assert len(reads) == 2 and f2.response is not None and f3.response is not None
        assert _one(f2.response).records and consumer.response is None  # the consumer waits for the HW
        g2, g3 = Answer(12), Answer(12)
        assert ctx.apis.handle_fetch(g2, _fetch_body("t", 0, 3, replica_id=2, max_wait_ms=10_000)) is DEFERRED
        await asyncio.sleep(0)
        assert len(reads) == 3 and produce.response is None  # follower 3 has not confirmed yet
        assert ctx.apis.handle_fetch(g3, _fetch_body("t", 0, 3, replica_id=3, max_wait_ms=10_000)) is DEFERRED
        assert _one_produce(produce.response).error_code == 0
        await asyncio.sleep(0)
        # follower 3's read, and the consumer's retry (the HW moved: it answers); g2 is not re-read
        assert len(reads) == 5 and g2.response is None
        assert sum(b.records_count for b in iter_batches(_one(consumer.response).records)) == 3
        await ctx.close()
    asyncio.run(main())


def test_an_idle_follower_fetch_expires_without_reading_its_logs_again(tmp_path, monkeypatch):
    """A caught-up follower's fetch of many partitions waits max_wait_ms and answers empty.  When
    nothing it depends on changed meanwhile, the answer is the first read's, with the high
    watermarks of now (the other follower moved them): no second read of every log (an idle
    10,000-partition follower fetch cost the leader's loop ~0.2-0.3 s a read, twice a max wait).
    An append in between makes the expiry read again, and its records are answered."""
    async def main():
        ctx, n = _rf3_one_record_each(tmp_path, 30)  # follower 3 has the records
        reads = _count_reads(ctx, monkeypatch)
        parked = Answer(12)
        assert ctx.apis.handle_fetch(parked, _fetch_all("t", n, 3, 1, 80)) is DEFERRED
        ctx.apis.handle_fetch(Answer(12), _fetch_all("t", n, 2, 1, 0))  # follower 2 too: every HW moves to 1
        assert len(reads) == 2
        await asyncio.sleep(0.25)
        assert parked.response is not None and len(reads) == 2  # expired: answered from its first read
        parts = [p for t in parked.response.responses for p in t.partitions]
        assert {(p.high_watermark, p.last_stable_offset, p.records) for p in parts} == {(1, 1, b"")}
        assert len(parts) == n and all(p.error_code == 0 for p in parts)
        # an append while it waits: the expiry reads (here the append already wakes and answers it)
        again = Answer(12)
        assert ctx.apis.handle_fetch(again, _fetch_all("t", n, 3, 1, 80)) is DEFERRED
        _produce(ctx, "t", 5, _batch(1))
        await asyncio.sleep(0.25)
        assert len(reads) == 4 and again.response is not None
        assert [p.partition_index for t in again.response.responses for p in t.partitions if p.records] == [5]
        await ctx.close()
    asyncio.run(main())


def test_produce_validation_settings_are_made_once_for_a_topic_without_overrides(tmp_path, monkeypatch):
    """The validator's settings of a topic are cached until the image's configs of the topic
    change.  A topic with no overrides gets a new empty map at every lookup, which missed the
    cache (identity): the settings were parsed again on every Produce."""
    from kraft_node.broker.log import validator

    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("plain", _partition_record(0, [1], [1], 1))
        made: list[int] = []
        real = validator.ValidationConfig.from_topic_configs.__func__

        def counted(cls, *args, **kwargs):
            made.append(1)
            return real(cls, *args, **kwargs)
        monkeypatch.setattr(validator.ValidationConfig, "from_topic_configs", classmethod(counted))
        for i in range(5):
            resp, _a = _produce(ctx, "plain", 0, _batch(2, 2 * i))
            assert _one_produce(resp).error_code == 0
        assert len(made) == 1
        # an override in a later image: made again, once
        ctx.publish(m.ConfigRecord(resource_type=2, resource_name="plain", name="max.message.bytes", value="10"))
        for i in range(3):
            resp, _a = _produce(ctx, "plain", 0, _batch(2, 20 + 2 * i))
            assert _one_produce(resp).error_code == Errors.MESSAGE_TOO_LARGE
        assert len(made) == 2
        await ctx.close()
    asyncio.run(main())


def test_becoming_follower_completes_parked_produce_and_follower_fetch(tmp_path):
    """ReplicaManagerTest.testDeltaToFollowerCompletesProduce / ...CompletesFetch: a leadership
    lost while an acks=all produce or a follower's fetch waits answers them at once."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 1), _partition_record(1, [1, 2], [1, 2], 1))
        result, produce = _produce(ctx, "t", 0, _batch(3), acks=-1, timeout_ms=10_000)
        assert result is DEFERRED
        fetch = Answer(12)  # the follower is caught up on partition 1: its fetch waits for data
        assert ctx.apis.handle_fetch(fetch, _fetch_body("t", 1, 0, replica_id=2, max_wait_ms=10_000)) is DEFERRED
        assert produce.response is None and fetch.response is None
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=2),
                    m.PartitionChangeRecord(partition_id=1, topic_id=TOPIC_ID, leader=2))
        await asyncio.sleep(0)  # the parked fetch's retry runs at the end of the loop iteration
        assert _one_produce(produce.response).error_code == Errors.NOT_LEADER_OR_FOLLOWER
        assert _one(fetch.response).error_code == Errors.NOT_LEADER_OR_FOLLOWER
        await ctx.close()
    asyncio.run(main())


def test_topic_configs_from_the_image_drive_segment_roll_and_retention(tmp_path):
    """segment.bytes and retention.bytes set on the topic (ConfigRecords in the image) reach the
    log; retention deletes whole old segments, never at or past the high watermark."""
    topic_config = 2  # ConfigResource.Type.TOPIC

    async def main():
        ctx = Ctx(tmp_path)
        ctx.publish(m.TopicRecord(name="r", topic_id=TOPIC_ID),
                    m.ConfigRecord(resource_type=topic_config, resource_name="r", name="segment.bytes", value="1024"),
                    m.ConfigRecord(resource_type=topic_config, resource_name="r", name="retention.bytes",
                                   value="2048"),
                    _partition_record(0, [1, 2], [1, 2], 1))
        p = ctx.rm.get_partition(TopicPartition("r", 0))
        assert p.log.config.segment_bytes == 1024 and p.log.config.retention_bytes == 2048
        for i in range(60):
            p.append_records_to_leader(_batch(5, 5 * i), 1, 1)
        assert len(p.log.segments) > 4
        assert p.high_watermark == 0  # follower 2 has not fetched: nothing may be deleted
        ctx.logs.cleanup_logs()
        assert p.log.log_start_offset == 0
        p.update_follower_fetch_state(2, 300, ctx.now)
        ctx.logs.cleanup_logs()
        assert p.log.log_start_offset > 0 and p.log.size_in_bytes() <= 2048 + 1024
        # a config change in a later image reaches the log too
        ctx.publish(m.ConfigRecord(resource_type=topic_config, resource_name="r", name="segment.bytes",
                                   value="4096"))
        assert p.log.config.segment_bytes == 4096
        await ctx.close()
        with open(os.path.join(ctx.dir, LOG_START_OFFSET_CHECKPOINT)) as f:
            assert f.read() == f"0\n1\nr 0 {p.log.log_start_offset}\n"
    asyncio.run(main())


def test_a_log_that_cannot_be_loaded_stays_offline_and_the_others_are_served(tmp_path, caplog):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1), _partition_record(1, [1], [1], 1))
        _produce(ctx, "t", 0, _batch(5))
        _produce(ctx, "t", 1, _batch(5))
        await ctx.close()
        seg = os.path.join(ctx.dir, "t-0", "00000000000000000000.log")
        with open(seg, "r+b") as f:  # corrupt a batch of a cleanly shut down log
            f.seek(30)
            f.write(b"\xff\xff\xff\xff")
        ctx.open()
        assert TopicPartition("t", 0) in ctx.logs.failed and "could not load the log of t-0" in caplog.text
        ctx.create("t", _partition_record(0, [1], [1], 1), _partition_record(1, [1], [1], 1))
        assert ctx.rm.get_partition(TopicPartition("t", 0)) is None
        assert "could not open or create the log of t-0" in caplog.text
        resp, _a = _produce(ctx, "t", 1, _batch(1))
        assert _one_produce(resp).base_offset == 5
        with open(seg, "rb") as f:
            assert f.read()[30:34] == b"\xff\xff\xff\xff"  # left as it was for the operator
        await ctx.close()
    asyncio.run(main())


def test_fetch_max_bytes_bounds_the_answer_but_gives_at_least_one_batch(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1), _partition_record(1, [1], [1], 1))
        for p in (0, 1):
            for i in range(3):
                _produce(ctx, "t", p, _batch(10, 10 * i))
        R = FetchRequest
        body = R(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=10, session_epoch=-1, topics=[R.FetchTopic(
            topic="t", partitions=[R.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=1 << 20)
                                   for p in (0, 1)])])
        parts = ctx.apis.handle_fetch(Answer(12), body).responses[0].partitions
        assert [len(list(iter_batches(p.records))) for p in parts] == [1, 0]  # minOneMessage: the first only
        body.max_bytes = 1 << 20
        for fp in body.topics[0].partitions:
            fp.partition_max_bytes = 400  # two 171-byte batches
        parts = ctx.apis.handle_fetch(Answer(12), body).responses[0].partitions
        assert [len(list(iter_batches(p.records))) for p in parts] == [2, 2]
        await ctx.close()
    asyncio.run(main())


def test_idempotent_producer_retry_is_not_written_twice_and_survives_restart(tmp_path):
    """H4's producer state behind the Produce path: a retried batch (same producer id, epoch and
    sequence) answers its first offset and is not appended again, an out-of-order sequence is
    refused, and after a clean restart (the producer snapshot) a retry is still recognised."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1))

        def batch(seq: int, n: int = 3) -> bytes:
            return build_batch([(None, b"x%d" % i) for i in range(n)], producer_id=42, producer_epoch=0,
                               base_sequence=seq)
        _produce(ctx, "t", 0, _batch(2))  # a non-idempotent batch first: offsets 0-1
        first = _one_produce(_produce(ctx, "t", 0, batch(0))[0])
        again = _one_produce(_produce(ctx, "t", 0, batch(0))[0])
        assert (first.error_code, first.base_offset) == (0, 2) and (again.error_code, again.base_offset) == (0, 2)
        log_ = ctx.rm.get_partition(TopicPartition("t", 0)).log
        assert log_.log_end_offset == 5
        gap = _one_produce(_produce(ctx, "t", 0, batch(7))[0])
        assert gap.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER and log_.log_end_offset == 5
        await ctx.close()
        assert any(n.endswith(".snapshot") for n in os.listdir(os.path.join(ctx.dir, "t-0")))
        ctx.open()
        ctx.create("t", _partition_record(0, [1], [1], 1, leader_epoch=1))
        retry = _one_produce(_produce(ctx, "t", 0, batch(0))[0])
        assert (retry.error_code, retry.base_offset) == (0, 2)
        nxt = _one_produce(_produce(ctx, "t", 0, batch(3))[0])
        assert (nxt.error_code, nxt.base_offset) == (0, 5)
        await ctx.close()
    asyncio.run(main())


def test_a_failed_producer_snapshot_at_shutdown_leaves_the_log_to_recovery(tmp_path, monkeypatch, caplog):
    """A log closed cleanly with no producer snapshot is taken to have no idempotent producers
    (the next start skips the scan, as Kafka's does).  So when the shutdown's snapshot fails (a
    full disk), that log is closed without its clean-shutdown marker: the next start scans it and
    a retried batch is still answered with its first offset, not appended twice."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1))
        batch = build_batch([(None, b"x%d" % i) for i in range(3)], producer_id=42, producer_epoch=0,
                            base_sequence=0)
        assert _one_produce(_produce(ctx, "t", 0, batch)[0]).base_offset == 0
        d = os.path.join(ctx.dir, "t-0")
        assert not any(n.endswith(".snapshot") for n in os.listdir(d))

        def full_disk(*_a, **_k):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr("kraft_node.broker.log.producer_state.write_snapshot", full_disk)
        with caplog.at_level(logging.ERROR):
            await ctx.close()
        assert "producer state snapshot of t-0 failed" in caplog.text
        assert not os.path.exists(os.path.join(d, ".kafka_cleanshutdown"))
        monkeypatch.undo()
        ctx.open()
        ctx.create("t", _partition_record(0, [1], [1], 1, leader_epoch=1))
        retry = _one_produce(_produce(ctx, "t", 0, batch)[0])
        assert (retry.error_code, retry.base_offset) == (0, 0)
        assert ctx.rm.get_partition(TopicPartition("t", 0)).log.log_end_offset == 3
        await ctx.close()
    asyncio.run(main())


def test_offset_for_leader_epoch_delete_records_and_describe_log_dirs(tmp_path):
    from kraft_node.protocol.framing import encode_response
    from kraft_node.protocol.generated.delete_records import DeleteRecordsRequest as D
    from kraft_node.protocol.generated.describe_log_dirs import DescribeLogDirsRequest as DL
    from kraft_node.protocol.generated.offset_for_leader_epoch import OffsetForLeaderEpochRequest as O

    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1, leader_epoch=1), _partition_record(1, [1, 2], [1, 2], 1))
        p0 = ctx.rm.get_partition(TopicPartition("t", 0))
        p0.append_records_to_leader(_batch(4), 1, 1)  # epoch 1: offsets 0-3
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))
        p0.append_records_to_leader(_batch(4), 1, 1)  # epoch 2: offsets 4-7

        def epoch_end(epoch: int, version: int = 4, current: int = -1):
            body = O(replica_id=-1, topics=[O.OffsetForLeaderTopic(topic="t", partitions=[
                O.OffsetForLeaderPartition(partition=0, current_leader_epoch=current, leader_epoch=epoch)])])
            resp = ctx.apis.handle_offset_for_leader_epoch(Answer(version), body)
            assert encode_response(resp, version, 1)
            r = resp.topics[0].partitions[0]
            return r.error_code, r.leader_epoch, r.end_offset
        assert epoch_end(1) == (0, 1, 4)
        assert epoch_end(2) == (0, 2, 8)
        assert epoch_end(0) == (0, 0, 0)  # an epoch older than the log's first: its end is where epoch 1 starts
        assert epoch_end(2, current=1)[0] == Errors.FENCED_LEADER_EPOCH

        # DeleteRecords: RF 1 answers at once; past the HWM is OFFSET_OUT_OF_RANGE
        def delete(partition: int, offset: int, timeout_ms: int = 5000):
            answer = Answer(2)
            body = D(timeout_ms=timeout_ms, topics=[D.DeleteRecordsTopic(name="t", partitions=[
                D.DeleteRecordsPartition(partition_index=partition, offset=offset)])])
            out = ctx.apis.handle_delete_records(answer, body)
            if out is not DEFERRED:
                return out
            return answer.response if answer.response is not None else answer  # still parked: the context
        resp = delete(0, 5)
        assert (resp.topics[0].partitions[0].error_code, resp.topics[0].partitions[0].low_watermark) == (0, 5)
        assert p0.log.log_start_offset == 5
        assert delete(0, 99).topics[0].partitions[0].error_code == Errors.OFFSET_OUT_OF_RANGE
        # RF 2: the answer waits until the follower reports its log start offset in a fetch
        p1 = ctx.rm.get_partition(TopicPartition("t", 1))
        p1.append_records_to_leader(_batch(6), 1, 1)
        first = _fetch_body("t", 1, 6, replica_id=2)
        first.topics[0].partitions[0].log_start_offset = 0  # the follower's log starts at 0: HWM 6
        ctx.apis.handle_fetch(Answer(12), first)
        parked = delete(1, -1)
        assert isinstance(parked, Answer) and parked.response is None and p1.log.log_start_offset == 6
        body = _fetch_body("t", 1, 6, replica_id=2)
        body.topics[0].partitions[0].log_start_offset = 6
        ctx.apis.handle_fetch(Answer(12), body)
        r = parked.response.topics[0].partitions[0]
        assert (r.error_code, r.low_watermark) == (0, 6)

        resp = ctx.apis.handle_describe_log_dirs(Answer(4), DL(topics=None))
        (result,) = resp.results
        assert result.log_dir == ctx.dir and result.total_bytes > 0
        sizes = {(t.name, p.partition_index): p.partition_size for t in result.topics for p in t.partitions}
        assert sizes == {("t", 0): p0.log.size_in_bytes(), ("t", 1): p1.log.size_in_bytes()}
        only = ctx.apis.handle_describe_log_dirs(Answer(1), DL(topics=[DL.DescribableLogDirTopic(topic="t",
                                                                                                  partitions=[1])]))
        assert [p.partition_index for t in only.results[0].topics for p in t.partitions] == [1]
        assert encode_response(only, 1, 1)
        await ctx.close()
    asyncio.run(main())


def test_parked_follower_fetch_answers_on_append(tmp_path, caplog):
    """A follower's long poll (replica.fetch.wait.max.ms) parked at the leader's end is answered
    by the next append, with the records, exactly once (its re-run updates the follower's state
    and must not wake itself)."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 1))
        answer = Answer(12)
        body = _fetch_body("t", 0, 0, replica_id=2, max_wait_ms=5000)
        body.topics[0].partitions[0].log_start_offset = 0
        assert ctx.apis.handle_fetch(answer, body) is DEFERRED
        result, produce = _produce(ctx, "t", 0, _batch(3), acks=-1)
        assert result is DEFERRED and produce.response is None  # the follower has not fetched past 0
        await asyncio.sleep(0)  # the woken fetch's retry
        part = _one(answer.response)
        assert part.error_code == 0 and [b.base_offset for b in iter_batches(part.records)] == [0]
        ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, 3, replica_id=2))
        assert _one_produce(produce.response).error_code == 0
        assert "a delayed fetch failed" not in caplog.text
        await ctx.close()
    asyncio.run(main())


def test_a_log_that_cannot_be_created_is_named_and_retried_by_a_later_delta(tmp_path, monkeypatch, caplog):
    """A full device when a new log is created: the partition is not made (named, logged), no
    directory is left, and the next delta touching the partition tries again."""
    import kraft_node.broker.log_manager as lm
    from kraft_storage.errors import DiskFullError

    real_open = lm.KafkaLog.open

    def full(path, *a, **kw):
        raise DiskFullError(os.path.dirname(str(path)), f"creating {path}", errno.ENOSPC)

    async def main():
        ctx = Ctx(tmp_path)
        monkeypatch.setattr(lm.KafkaLog, "open", full)
        ctx.create("t", _partition_record(0, [1], [1], 1))
        assert ctx.rm.get_partition(TopicPartition("t", 0)) is None
        assert "could not open or create the log of t-0" in caplog.text and "No space left" in caplog.text
        assert "t-0" not in os.listdir(ctx.dir)
        monkeypatch.setattr(lm.KafkaLog, "open", real_open)
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))  # a later delta retries
        assert ctx.rm.get_partition(TopicPartition("t", 0)) is not None
        await ctx.close()
    asyncio.run(main())


def test_many_partitions_are_created_and_closed_in_parallel(tmp_path):
    """300 new partitions in one delta: every log is created (in worker threads, in the background:
    more than OPEN_LOG_INLINE), registered and led; a restart loads them all back."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("many", *[_partition_record(i, [1], [1], 1) for i in range(300)])
        assert ctx.rm.opening_logs == 300 and not ctx.rm.partitions
        for _ in range(2000):
            if not ctx.rm.opening_logs:
                break
            await asyncio.sleep(0.005)
        assert len(ctx.rm.partitions) == 300 and ctx.rm.leader_count() == 300
        assert len([n for n in os.listdir(ctx.dir) if n.startswith("many-")]) == 300
        await ctx.close()
        ctx.open()
        assert len(ctx.logs.logs) == 300 and all(kl.load_report.clean_shutdown for kl in ctx.logs.logs.values())
        await ctx.logs.shutdown()
    asyncio.run(main())


def test_committed_isr_changes_are_counted_and_under_replication_reported(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2, 3], [1, 2, 3], 1))
        assert ctx.rm.under_replicated_partitions() == 0
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=[1, 2]))
        assert (ctx.rm.isr_shrinks, ctx.rm.isr_expands, ctx.rm.under_replicated_partitions()) == (1, 0, 1)
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, isr=[1, 2, 3]))
        assert (ctx.rm.isr_shrinks, ctx.rm.isr_expands, ctx.rm.under_replicated_partitions()) == (1, 1, 0)
        await ctx.close()
    asyncio.run(main())


def test_odd_fetch_and_list_offsets_inputs_get_answers(tmp_path):
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1], [1], 1))
        _produce(ctx, "t", 0, _batch(3))
        body = _fetch_body("t", 0, 0)
        body.topics[0].partitions[0].partition_max_bytes = -5
        part = _one(ctx.apis.handle_fetch(Answer(12), body))
        assert part.error_code == 0 and len(list(iter_batches(part.records))) == 1  # at least one batch
        assert _one(ctx.apis.handle_fetch(Answer(12), _fetch_body("t", 0, -1))).error_code == \
            Errors.OFFSET_OUT_OF_RANGE
        R = ListOffsetsRequest
        def codes(*asks: tuple[int, int]) -> list[int]:
            body = R(replica_id=-1, topics=[R.ListOffsetsTopic(name="t", partitions=[
                R.ListOffsetsPartition(partition_index=p, timestamp=ts) for p, ts in asks])])
            return [p.error_code for p in ctx.apis.handle_list_offsets(Answer(7), body).topics[0].partitions]
        assert codes((0, -9)) == [Errors.INVALID_REQUEST]  # not a timestamp nor a special value
        assert codes((0, -1), (0, -2)) == [Errors.INVALID_REQUEST] * 2  # a partition asked twice: both refused
        await ctx.close()
    asyncio.run(main())


def test_a_follower_becoming_leader_knows_the_producers_it_replicated(tmp_path):
    """The follower appended an idempotent producer's batches (as a fetcher does, straight into
    the log); once it leads, a retry of the last batch is recognised and the next sequence
    accepted: the producer state is rebuilt from the log when it lags behind it."""
    async def main():
        ctx = Ctx(tmp_path)
        ctx.create("t", _partition_record(0, [1, 2], [1, 2], 2, leader_epoch=1))
        p = ctx.rm.get_partition(TopicPartition("t", 0))
        replicated = build_batch([(None, b"a"), (None, b"b")], producer_id=9, producer_epoch=0, base_sequence=0,
                                 partition_leader_epoch=1)
        p.log.append_as_follower(replicated)
        ctx.publish(m.PartitionChangeRecord(partition_id=0, topic_id=TOPIC_ID, leader=1))
        assert p.is_leader
        retry = build_batch([(None, b"a"), (None, b"b")], producer_id=9, producer_epoch=0, base_sequence=0)
        r = _one_produce(_produce(ctx, "t", 0, retry)[0])
        assert (r.error_code, r.base_offset) == (0, 0) and p.log.log_end_offset == 2
        nxt = build_batch([(None, b"c")], producer_id=9, producer_epoch=0, base_sequence=2)
        assert _one_produce(_produce(ctx, "t", 0, nxt)[0]).base_offset == 2
        await ctx.close()
    asyncio.run(main())
