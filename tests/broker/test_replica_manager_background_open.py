"""A large batch of new partition logs is opened off the broker's loop (ReplicaManager._materialize):
the loop keeps running (its heartbeats with it), later deltas wait and apply in order, the end
state equals the inline path's, and a shutdown in the middle closes what was opened."""
from __future__ import annotations

import asyncio
import threading
import uuid

import pytest

import kraft_node.broker.replica_manager as rm_mod
from kraft_node.broker.log_manager import LogManager
from kraft_node.broker.replica_manager import ReplicaManager
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicPartition
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

BROKER = 1
TOPIC_A = Uuid(uuid.UUID("11111111-1c4d-4e5f-8a9b-0c1d2e3f4a5b").bytes)
TOPIC_B = Uuid(uuid.UUID("22222222-1c4d-4e5f-8a9b-0c1d2e3f4a5b").bytes)
PARTITIONS = 40


def _records(topic: str, topic_id: Uuid, n: int, leader_of: int = 2) -> list[object]:
    """``n`` partitions on brokers 1 and 2; broker 1 leads every ``leader_of``-th one."""
    out: list[object] = [m.TopicRecord(name=topic, topic_id=topic_id)]
    for pid in range(n):
        leader = BROKER if pid % leader_of == 0 else 2
        out.append(m.PartitionRecord(partition_id=pid, topic_id=topic_id, replicas=[1, 2], isr=[1, 2],
                                     removing_replicas=[], adding_replicas=[], leader=leader, leader_epoch=0,
                                     partition_epoch=0))
    return out


class Feed:
    """Images published to a ReplicaManager the way the loader does."""

    def __init__(self, rm: ReplicaManager) -> None:
        self.rm = rm
        self.image = MetadataImage.EMPTY

    def publish(self, *records: object) -> None:
        delta = MetadataDelta(self.image)
        for r in records:
            delta.replay(r)
        self.image = delta.apply(MetadataProvenance(len(records), 1, 0, True))
        self.rm.apply_delta(delta, self.image)


def _state(rm: ReplicaManager) -> dict[str, tuple[bool, int, int]]:
    return {str(tp): (p.is_leader, p.leader_epoch, len(p.isr)) for tp, p in sorted(rm.partitions.items())}


async def _settle(rm: ReplicaManager, timeout: float = 20.0) -> None:
    async def wait() -> None:
        while rm.opening_logs or rm._backlog:
            await asyncio.sleep(0.005)
    await asyncio.wait_for(wait(), timeout)


async def _stop(rm: ReplicaManager, logs: LogManager) -> tuple[dict[str, tuple[bool, int, int]], list[str]]:
    """The partitions' states and the logs held, then both managers shut down."""
    state = _state(rm)
    dirs = sorted(str(tp) for tp in logs.logs)
    await rm.shutdown()
    await logs.shutdown()
    return state, dirs


def _scenario(feed: Feed) -> None:
    feed.publish(*_records("a", TOPIC_A, PARTITIONS))
    # published while topic a's logs may still be opening: applied after them, in order
    feed.publish(m.PartitionChangeRecord(partition_id=1, topic_id=TOPIC_A, leader=BROKER, isr=[1]))
    feed.publish(*_records("b", TOPIC_B, 3))
    feed.publish(m.RemoveTopicRecord(topic_id=TOPIC_B))


def test_background_batch_keeps_the_loop_running_and_applies_deltas_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(rm_mod, "OPEN_LOG_INLINE", 4)
    monkeypatch.setattr(rm_mod, "OPEN_LOG_CHUNK", 5)
    gate = threading.Event()

    async def main() -> tuple[dict[str, tuple[bool, int, int]], list[str]]:
        logs = LogManager([str(tmp_path / "bg")])
        logs.startup()
        real_open = logs.open_prepared

        def slow_open(plan):  # type: ignore[no-untyped-def]
            assert gate.wait(10), "the test never released the log opening"
            return real_open(plan)
        monkeypatch.setattr(logs, "open_prepared", slow_open)
        rm = ReplicaManager(BROKER, logs)
        feed = Feed(rm)
        _scenario(feed)
        # apply_delta returned with nothing opened: the opening waits on the gate, off the loop
        assert rm.opening_logs == PARTITIONS
        assert not rm.partitions
        assert not rm.first_image_applied
        assert len(rm._backlog) == 3
        ticks = 0
        for _ in range(5):  # the loop runs while the logs wait (a heartbeat would go out here)
            await asyncio.sleep(0.001)
            ticks += 1
        assert ticks == 5 and rm.opening_logs == PARTITIONS
        gate.set()
        await _settle(rm)
        assert rm.first_image_applied
        return await _stop(rm, logs)

    background, background_logs = asyncio.run(main())

    async def inline() -> tuple[dict[str, tuple[bool, int, int]], list[str]]:
        monkeypatch.setattr(rm_mod, "OPEN_LOG_INLINE", 1_000_000)
        logs = LogManager([str(tmp_path / "inline")])
        logs.startup()
        rm = ReplicaManager(BROKER, logs)
        _scenario(Feed(rm))
        assert rm.opening_logs == 0 and rm.first_image_applied
        return await _stop(rm, logs)

    expected, expected_logs = asyncio.run(inline())
    assert background == expected
    assert background_logs == expected_logs
    assert len(expected) == PARTITIONS  # topic b came and went
    assert expected[str(TopicPartition("a", 1))] == (True, 1, 1)  # the later change applied after the open
    assert expected[str(TopicPartition("a", 0))][0] and not expected[str(TopicPartition("a", 3))][0]


def test_shutdown_during_a_background_batch_closes_what_was_opened(tmp_path, monkeypatch):
    monkeypatch.setattr(rm_mod, "OPEN_LOG_INLINE", 4)
    monkeypatch.setattr(rm_mod, "OPEN_LOG_CHUNK", 2)
    monkeypatch.setattr(rm_mod, "OPEN_LOG_THREADS", 2)
    started = threading.Semaphore(0)
    gate = threading.Event()

    async def main() -> None:
        logs = LogManager([str(tmp_path)])
        logs.startup()
        real_open = logs.open_prepared

        def slow_open(plan):  # type: ignore[no-untyped-def]
            started.release()
            assert gate.wait(10)
            return real_open(plan)
        monkeypatch.setattr(logs, "open_prepared", slow_open)
        rm = ReplicaManager(BROKER, logs)
        Feed(rm).publish(*_records("a", TOPIC_A, 20))
        assert rm.opening_logs == 20
        # two threads are inside their first chunk; the other chunks wait in the pool's queue
        for _ in range(2):
            assert await asyncio.to_thread(started.acquire, True, 10)
        stopping = asyncio.ensure_future(rm.shutdown())
        await asyncio.sleep(0.05)
        assert not stopping.done()  # it waits for the running chunks
        gate.set()
        await asyncio.wait_for(stopping, 10)
        # the two running chunks finished (2 logs each); the 16 not started were dropped
        assert rm.opening_logs == 0
        assert not rm.partitions
        assert len(logs.logs) == 4
        Feed(rm).publish(*_records("late", TOPIC_B, 8))  # ignored after shutdown
        assert len(logs.logs) == 4
        await logs.shutdown()

    asyncio.run(main())
    # every log that was created was closed cleanly: one marker for the log dir, no log left open
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    created = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert len(created) == 4, created


@pytest.mark.parametrize("inline", [False, True])
def test_a_failed_log_in_a_batch_is_named_and_the_others_go_on(tmp_path, monkeypatch, caplog, inline):
    monkeypatch.setattr(rm_mod, "OPEN_LOG_INLINE", 1_000 if inline else 2)
    monkeypatch.setattr(rm_mod, "OPEN_LOG_CHUNK", 3)

    async def main() -> ReplicaManager:
        logs = LogManager([str(tmp_path)])
        logs.startup()
        real_open = logs.open_prepared

        def failing_open(plan):  # type: ignore[no-untyped-def]
            if plan.tp.partition == 5:
                raise OSError(28, "No space left on device", plan.path)
            return real_open(plan)
        monkeypatch.setattr(logs, "open_prepared", failing_open)
        rm = ReplicaManager(BROKER, logs)
        Feed(rm).publish(*_records("a", TOPIC_A, 10))
        await _settle(rm)
        assert rm.first_image_applied
        await rm.shutdown()
        await logs.shutdown()
        return rm

    with caplog.at_level("ERROR", logger="kraft.broker.replicas"):
        rm = asyncio.run(main())
    assert sorted(tp.partition for tp in rm.partitions) == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    assert any("could not open or create the log of a-5" in r.getMessage() for r in caplog.records)
