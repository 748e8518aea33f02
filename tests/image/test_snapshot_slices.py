"""Snapshots written in slices from the loader's image (issue 23 item 5: the node's snapshots come
from the image writer; Kafka 3.5+ writes them from the loader on controllers too).

The SnapshotEmitter given an event queue writes an image as a Raft snapshot one slice per event
(at most ``records_per_slice`` records or ``slice_budget_ns`` of clock time), the freeze an event
of its own, with the image writer running on a helper thread in strict alternation with the
queue's thread.  What is pinned down here:

* the records are exactly the image writer's (``image_records``), whatever the slicing;
* each slice is one event and one Raft batch; nothing is frozen until the last event;
* the image written is the one chosen: the loader publishes newer images meanwhile, and only one
  emission is in flight at a time;
* a metadata transaction open when the snapshot is due is not in it (the loader publishes only
  committed, whole transactions), and the snapshot loads back into equal state through the
  loader and through a standby QuorumController;
* failures and closes abandon the partial snapshot (nothing frozen), report through the fault
  handler (not on close), and leave no helper thread behind.
"""
from __future__ import annotations

import random
import threading
import uuid
from typing import Any

import pytest

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataImage, image_records
from kraft_node.metadata.loader import (
    MetadataCachePublisher,
    MetadataLoader,
    RecordingFaultHandler,
    SnapshotEmitter,
    SnapshotGenerator,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.raft.client import RaftCore
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.log import MemoryRaftLog
from kraft_node.raft.messages import LeaderAndEpoch, ReplicaKey, SnapshotId
from kraft_node.raft.quorum_state import MemoryQuorumStateStore
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import Uuid

MV = MetadataVersion.latest_production()


def _key(i: int) -> ReplicaKey:
    return ReplicaKey(i, uuid.UUID(int=i))


def _state_values(topics: int = 20, partitions: int = 5, brokers: int = 6) -> list[bytes]:
    """Framed records of a cluster with something in most sub-images."""
    recs: list[tuple[Any, int]] = [(m.FeatureLevelRecord(name="metadata.version", feature_level=MV.feature_level), 0)]
    dirs = [Uuid(bytes([9, b + 1]) + bytes(14)) for b in range(brokers)]
    for b in range(brokers):
        recs.append((m.RegisterBrokerRecord(
            broker_id=b, broker_epoch=10 + b, incarnation_id=Uuid(bytes([b + 1]) * 16), rack=f"r{b % 3}",
            log_dirs=[dirs[b]], fenced=False,
            end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092 + b,
                                                              security_protocol=0)]), 3))
    for t in range(topics):
        topic_id = Uuid(bytes([7, t + 1]) + bytes(14))
        recs.append((m.TopicRecord(name=f"topic-{t:03d}", topic_id=topic_id), 0))
        for p in range(partitions):
            reps = [(t + p + k) % brokers for k in range(3)]
            recs.append((m.PartitionRecord(partition_id=p, topic_id=topic_id, replicas=reps, isr=reps,
                                           leader=reps[0], leader_epoch=1, partition_epoch=1,
                                           directories=[dirs[b] for b in reps]), MV.partition_record_version()))
        if t % 4 == 0:
            recs.append((m.ConfigRecord(resource_type=2, resource_name=f"topic-{t:03d}", name="retention.ms",
                                        value=str(1000 * (t + 1))), 0))
    recs.append((m.ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value="99"), 0))
    recs.append((m.ProducerIdsRecord(broker_id=1, broker_epoch=11, next_producer_id=7000), 0))
    return [encode_metadata_record(r, v) for r, v in recs]


class _Images(MetadataCachePublisher):
    def __init__(self) -> None:
        super().__init__(name="Images")
        self.by_offset: dict[int, MetadataImage] = {}

    def on_metadata_update(self, delta: Any, new_image: MetadataImage, manifest: Any) -> None:
        super().on_metadata_update(delta, new_image, manifest)
        self.by_offset[new_image.offset] = new_image


class _Clock:
    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


class _Node:
    """A single-voter RaftCore, a loader on it, and a sliced SnapshotGenerator/Emitter on an EventQueue."""

    def __init__(self, *, max_bytes: int, records_per_slice: int = 16, slice_budget_ns: int = 10**12,
                 clock: Any = None) -> None:
        self.log = MemoryRaftLog()
        self.core = RaftCore(QuorumConfig(), _key(1), [_key(1)], self.log, MemoryQuorumStateStore(None),
                             random.Random(1), cluster_id="cluster-A")
        self.faults = RecordingFaultHandler("slices")
        self.clock = clock if clock is not None else _Clock()
        self.queue = EventQueue(self.clock)
        self.loader = MetadataLoader(high_watermark=lambda: self.core.high_watermark, fault_handler=self.faults)
        self.images = _Images()
        self.emitter = SnapshotEmitter(self.core, queue=self.queue, records_per_slice=records_per_slice,
                                       slice_budget_ns=slice_budget_ns, clock_ns=self.clock)
        self.generator = SnapshotGenerator(self.emitter, fault_handler=self.faults, queue=self.queue,
                                           max_bytes_since_last_snapshot=max_bytes)
        self.loader.install_publishers([self.images, self.generator])
        self.core.register_listener(self.loader)
        self.now = 0
        self.core.initialize(self.now)
        self.core.poll(self.now)
        # the first image a publisher gets is a full one (a snapshot manifest: no bytes counted)
        self.commit([encode_metadata_record(m.FeatureLevelRecord(name="metadata.version",
                                                                 feature_level=MV.feature_level), 0)])

    def commit(self, values: list[bytes]) -> int:
        last = self.core.append(values, self.core.epoch, self.now)
        while self.core.high_watermark is None or self.core.high_watermark <= last:
            self.now += 10
            self.core.poll(self.now)
        return int(last)

    def snapshot_values(self, sid: SnapshotId) -> list[list[bytes]]:
        reader = self.log.open_snapshot(sid)
        assert reader is not None
        return [list(b.records) for b in reader]


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("snapshot-writer-")]


def test_a_sliced_snapshot_holds_the_image_writers_records_one_batch_per_event():
    values = _state_values()
    node = _Node(max_bytes=sum(map(len, values)) // 2, records_per_slice=16)
    node.commit(values)
    assert node.generator.emitting and not node.emitter.in_flight  # the start event is queued
    assert node.queue.run_ready(max_events=1) == 1
    assert node.emitter.in_flight
    events = 0
    while node.emitter.in_flight:
        assert node.log.latest_snapshot_id() is None or node.log.latest_snapshot_id().offset == 0  # not frozen yet
        assert node.queue.run_ready(max_events=1) == 1
        events += 1
    node.faults.maybe_rethrow_first()
    (record,) = node.emitter.history
    sid = record.snapshot_id
    image = node.images.by_offset[sid.offset - 1]
    expected = [r.encode() for r in image_records(image)]
    batches = node.snapshot_values(sid)
    assert [v for b in batches for v in b] == expected
    assert record.records == len(expected) and record.bytes == sum(map(len, expected))
    # one batch per slice, each at most records_per_slice records, the freeze an event of its own
    assert record.slices == len(batches) == -(-len(expected) // 16) and all(len(b) <= 16 for b in batches)
    assert events == record.slices + 1
    assert node.log.latest_snapshot_id() == sid and node.log.start_offset == sid.offset
    assert not node.generator.emitting and not _helpers()


def test_slices_end_on_the_clock_budget():
    """A clock that moves 1 ms a read and a 5 ms budget: slices end by time (checked every 16
    records), well before the record limit."""
    class Ticking(_Clock):
        def __call__(self) -> int:
            self.ns += 1_000_000
            return self.ns

    values = _state_values(topics=30)
    node = _Node(max_bytes=1, records_per_slice=10_000, slice_budget_ns=5_000_000, clock=Ticking())
    node.commit(values)
    node.queue.run_ready()
    node.faults.maybe_rethrow_first()
    record = node.emitter.history[0]
    batches = node.snapshot_values(record.snapshot_id)
    assert record.slices == len(batches) > 1
    assert all(len(b) % 16 == 0 for b in batches[:-1])  # each cut at a 16-record check
    assert max(len(b) for b in batches) <= 16 * 5


def test_the_loader_publishes_newer_images_while_a_snapshot_is_written_and_one_is_in_flight_at_a_time():
    values = _state_values()
    node = _Node(max_bytes=sum(map(len, values)) // 2, records_per_slice=8)
    node.commit(values)
    node.queue.run_ready(max_events=3)  # the start event and two slices
    assert node.emitter.in_flight
    first_sid = node.emitter._in_flight.snapshot_id  # type: ignore[union-attr]
    # more than enough bytes for another snapshot, committed and published while this one is written
    more = [encode_metadata_record(m.ConfigRecord(resource_type=4, resource_name="", name=f"k{i}", value="v" * 100), 0)
            for i in range(80)]
    last = node.commit(more)
    assert node.images.current_image().offset == last  # published meanwhile
    assert node.emitter.in_flight and node.emitter._in_flight.snapshot_id == first_sid  # type: ignore[union-attr]
    node.queue.run_ready()
    node.faults.maybe_rethrow_first()
    # the snapshot is of the image chosen, not of the newer one; no second emission was started
    assert [r.snapshot_id for r in node.emitter.history] == [first_sid]
    written = [v for b in node.snapshot_values(first_sid) for v in b]
    assert written == [r.encode() for r in image_records(node.images.by_offset[first_sid.offset - 1])]
    # the next one is considered on a later publish
    node.commit(more[:1] * 1)
    node.queue.run_ready()
    node.faults.maybe_rethrow_first()
    assert [r.snapshot_id.offset for r in node.emitter.history] == [first_sid.offset, last + 2]


class _StandbyRaft:
    """A Raft client for a QuorumController that never leads (it only loads snapshots here)."""

    def __init__(self) -> None:
        self.listener: Any = None

    def register_listener(self, listener: Any) -> None:
        self.listener = listener

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(-1, 1)

    def resign(self, epoch: int) -> None:
        pass

    def create_snapshot(self, snapshot_id: Any) -> Any:
        raise AssertionError("the standby writes no snapshot")


def _standby_controller() -> tuple[QuorumController, EventQueue, list[Any]]:
    queue = EventQueue(lambda: 0)
    faults: list[Any] = []

    def fatal(message: str, exc: Any) -> BaseException:
        faults.append((message, exc))
        return RuntimeError(message)
    boot = BootstrapMetadata.from_records([ApiMessageAndVersion(m.FeatureLevelRecord(
        name="metadata.version", feature_level=MV.feature_level), 0)], "test")
    ctl = QuorumController(node_id=1, cluster_id="cluster-A", raft=_StandbyRaft(), queue=queue, clock_ms=lambda: 0,
                           bootstrap=boot, fatal_fault_handler=fatal)
    return ctl, queue, faults


def _comparable(values: list[bytes]) -> list[tuple[int, str]]:
    """Records as (api key, repr), sorted; a ProducerIdsRecord by its next id only (the image writes
    broker -1 epoch -1, as Kafka's ProducerIdsImage does; the controller keeps the grant's broker)."""
    out = []
    for v in values:
        key, _version, msg = decode_metadata_record(v)[:3]
        if key == m.ProducerIdsRecord.API_KEY:
            out.append((key, f"next={msg.next_producer_id}"))
        else:
            out.append((key, repr(msg)))
    return sorted(out)


def test_an_open_transaction_is_not_in_the_snapshot_and_it_loads_back_to_equal_state():
    """A metadata transaction begins and is committed in part when a snapshot is due: the snapshot
    is of the last image before it (the loader publishes no half transaction), and it loads back --
    through a second loader and through a standby QuorumController -- into the same state."""
    values = _state_values()
    node = _Node(max_bytes=10**9, records_per_slice=32)
    base = node.commit(values)
    gen = node.generator
    gen.max_bytes_since_last_snapshot = gen.bytes_since_last_snapshot + 1  # the next batch makes one due
    assert not gen.emitting
    txn_topic = Uuid(bytes([8, 8]) + bytes(14))
    begin = node.commit([encode_metadata_record(m.BeginTransactionRecord(name="big"), 0),
                         encode_metadata_record(m.TopicRecord(name="in-txn", topic_id=txn_topic), 0)])
    node.commit([encode_metadata_record(m.PartitionRecord(
        partition_id=0, topic_id=txn_topic, replicas=[0, 1, 2], isr=[0, 1, 2], leader=0, leader_epoch=0,
        partition_epoch=0), MV.partition_record_version())])
    node.queue.run_ready()
    assert node.emitter.history == []  # nothing published inside the transaction, so nothing is due
    end = node.commit([encode_metadata_record(m.EndTransactionRecord(), 0)])
    node.queue.run_ready()
    node.faults.maybe_rethrow_first()
    # due at the transaction's end, with the transaction whole in the image
    (record,) = node.emitter.history
    assert record.snapshot_id.offset == end + 1 and begin > base
    image = node.images.by_offset[end]
    assert image.topics.get_topic_by_name("in-txn") is not None
    assert sorted(node.images.by_offset)[-2:] == [base, end]  # nothing in between was published

    # loaded back by a second loader: the same image
    sid = record.snapshot_id
    reloaded_images = MetadataCachePublisher()
    second = MetadataLoader(high_watermark=lambda: sid.offset, fault_handler=node.faults)
    second.install_publishers([reloaded_images])
    second.handle_load_snapshot(node.log.open_snapshot(sid))
    node.faults.maybe_rethrow_first()
    assert reloaded_images.current_image() == image
    # and by a standby controller: its state's records are the snapshot's
    ctl, queue, faults = _standby_controller()
    ctl._listener.handle_load_snapshot(node.log.open_snapshot(sid))
    queue.run_ready()
    assert faults == [] and ctl.snapshots_loaded == [sid]
    written = [v for b in node.snapshot_values(sid) for v in b]
    assert _comparable(ctl.snapshot_values(ctl.last_stable_offset)) == _comparable(written)


def test_an_open_transaction_at_the_time_a_snapshot_is_due_waits_for_its_end():
    """Bytes enough inside the transaction: still no snapshot until the transaction ends (the
    image the loader holds back is not published, so never written)."""
    values = _state_values()
    node = _Node(max_bytes=200, records_per_slice=32)
    node.commit(values)
    node.queue.run_ready()
    first = len(node.emitter.history)
    big = [encode_metadata_record(m.ConfigRecord(resource_type=4, resource_name="", name=f"t{i}", value="x" * 40), 0)
           for i in range(40)]
    node.commit([encode_metadata_record(m.BeginTransactionRecord(name="t"), 0)] + big[:20])
    node.commit(big[20:])
    node.queue.run_ready()
    assert len(node.emitter.history) == first
    node.commit([encode_metadata_record(m.AbortTransactionRecord(reason="test"), 0)])
    node.queue.run_ready()
    node.faults.maybe_rethrow_first()
    assert len(node.emitter.history) == first + 1
    sid = node.emitter.history[-1].snapshot_id
    names = [decode_metadata_record(v)[2].name for b in node.snapshot_values(sid) for v in b
             if decode_metadata_record(v)[0] == m.ConfigRecord.API_KEY]
    assert not any(n.startswith("t") and n[1:].isdigit() for n in names)  # the aborted records are not in it


def test_a_failed_image_write_abandons_the_snapshot_and_is_reported(monkeypatch):
    values = _state_values()
    node = _Node(max_bytes=sum(map(len, values)) // 2, records_per_slice=8)
    from kraft_node.metadata.image import configs as configs_module

    def broken(self: Any, writer: Any, options: Any) -> None:
        raise ValueError("cannot write configs")
    monkeypatch.setattr(configs_module.ConfigurationsImage, "write", broken)
    node.commit(values)
    node.queue.run_ready()
    assert node.faults.first is not None
    assert str(node.faults.first) == "slices: KRaft snapshot file generation error: cannot write configs"
    assert node.emitter.history == [] and not node.emitter.in_flight and not node.generator.emitting
    assert node.log.latest_snapshot_id() is None or node.log.latest_snapshot_id().offset == 0
    assert not _helpers()
    # the next one works
    monkeypatch.undo()
    node.faults = RecordingFaultHandler("again")
    node.generator._fault_handler = node.faults
    node.commit(values[-1:] * 200)
    node.queue.run_ready()
    node.faults.maybe_rethrow_first()
    assert len(node.emitter.history) == 1


@pytest.mark.parametrize("how", ["close", "queue-shutdown"])
def test_closing_mid_snapshot_abandons_it_quietly(how: str):
    values = _state_values()
    node = _Node(max_bytes=sum(map(len, values)) // 2, records_per_slice=8)
    node.commit(values)
    node.queue.run_ready(max_events=3)
    assert node.emitter.in_flight and len(_helpers()) == 1
    if how == "close":
        node.loader.close()  # closes its publishers: the generator abandons the emission
    else:
        node.queue.begin_shutdown()
        node.queue.close()
    node.queue.run_ready()
    assert not node.emitter.in_flight and node.emitter.history == [] and not node.generator.emitting
    assert node.log.latest_snapshot_id() is None or node.log.latest_snapshot_id().offset == 0
    if how == "close":
        assert node.faults.first is None  # a close is no fault
    assert not _helpers()


def test_the_emitter_refuses_bad_slice_settings():
    with pytest.raises(ValueError, match="records_per_slice must be >= 1, not 0"):
        SnapshotEmitter(object(), records_per_slice=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="slice_budget_ns must be >= 0, not -1"):
        SnapshotEmitter(object(), slice_budget_ns=-1)  # type: ignore[arg-type]
