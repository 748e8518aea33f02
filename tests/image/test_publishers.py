"""The loader's publishers: SnapshotGenerator, SnapshotEmitter, features, dynamic configs, the cache hook.

Re-states Kafka's ``SnapshotGeneratorTest`` and ``SnapshotEmitterTest``
(metadata/src/test/java/org/apache/kafka/image/publisher/).  Kafka's generator emits on a thread of
its own; here it emits at once, or as an event on an EventQueue given to it, which is what Kafka's
"one emission queued at a time" scenarios use.  Then end to end on a real single-voter RaftCore: a
Kafka snapshot's records committed through Raft, the loader publishing, the generator writing a
snapshot through ``create_snapshot``, and a second loader reading that snapshot back to the same image.
"""
from __future__ import annotations

import random
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage, image_records
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.loader import (
    UNKNOWN_LEADER,
    ControllerRegistrationsPublisher,
    DynamicConfigPublisher,
    FeaturesPublisher,
    FinalizedFeatures,
    LogDeltaManifest,
    MetadataCachePublisher,
    MetadataLoader,
    RaftSnapshotWriter,
    RecordingFaultHandler,
    SnapshotEmitter,
    SnapshotEmitterMetrics,
    SnapshotGenerator,
    SnapshotManifest,
)
from kraft_node.metadata.loader.publishers import DEFAULT_CONFIG_NAME
from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME, MetadataVersion
from kraft_node.metrics import MetricsRegistry
from kraft_node.raft.client import RaftCore
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.log import MemoryRaftLog
from kraft_node.raft.messages import ReplicaKey, SnapshotId
from kraft_node.raft.quorum_state import MemoryQuorumStateStore
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.messages.runtime import Uuid

MV = MetadataVersion.LATEST_PRODUCTION


def rec(message: Any, version: int = 0) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, version)


def build_image(records: list[ApiMessageAndVersion], provenance: MetadataProvenance) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay_all(records)
    return delta.apply(provenance)


TOPIC_ID = Uuid.from_string("ZzzTc4XqQjqU5pHwN2i0tw")
IMAGE_RECORDS = [
    rec(m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE_NAME, feature_level=MV.feature_level)),
    rec(m.FeatureLevelRecord(name="transaction.version", feature_level=2)),
    rec(m.RegisterBrokerRecord(
        broker_id=0, incarnation_id=Uuid.from_string("vZKYST0pSA2HO5x_6hoO2Q"), broker_epoch=1000,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092,
                                                          security_protocol=0)],
        rack="r1", fenced=False), 3),
    rec(m.RegisterControllerRecord(
        controller_id=3000, incarnation_id=Uuid.from_string("FdEHF-IqScKfYyjZ1CjfNQ"),
        end_points=[m.RegisterControllerRecord.ControllerEndpoint(name="CONTROLLER", host="localhost", port=9093,
                                                                  security_protocol=0)])),
    rec(m.TopicRecord(name="foo", topic_id=TOPIC_ID)),
    rec(m.PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=[0], isr=[0], leader=0,
                          leader_epoch=1, partition_epoch=1)),
    rec(m.PartitionRecord(partition_id=1, topic_id=TOPIC_ID, replicas=[0], isr=[0], leader=0,
                          leader_epoch=1, partition_epoch=1)),
    rec(m.ConfigRecord(resource_type=2, resource_name="foo", name="retention.ms", value="1000")),
    rec(m.ProducerIdsRecord(broker_id=0, broker_epoch=1000, next_producer_id=5000)),
]
IMAGE1 = build_image(IMAGE_RECORDS, MetadataProvenance(100, 4, 2000, True))

TEST_DELTA = MetadataDelta(MetadataImage.EMPTY)
TEST_DELTA.replay(m.TopicRecord(name="foo", topic_id=TOPIC_ID))
TEST_IMAGE = TEST_DELTA.apply(MetadataProvenance.EMPTY)


class MockTime:
    def __init__(self, ms: int = 0) -> None:
        self.ns = ms * 1_000_000

    def __call__(self) -> int:
        return self.ns

    def ms(self) -> int:
        return self.ns // 1_000_000

    def sleep_ms(self, ms: int) -> None:
        self.ns += ms * 1_000_000


class MockEmitter:
    def __init__(self) -> None:
        self.images: list[MetadataImage] = []
        self.problem: Exception | None = None

    def maybe_emit(self, image: MetadataImage) -> None:
        if self.problem is not None:
            raise self.problem
        self.images.append(image)


def manifest(num_bytes: int = 100, aligned: bool = True, elapsed_ns: int = 100) -> LogDeltaManifest:
    provenance = MetadataProvenance(-1, -1, -1, True) if aligned else MetadataProvenance.EMPTY
    return LogDeltaManifest(provenance, UNKNOWN_LEADER, num_batches=1, elapsed_ns=elapsed_ns, num_bytes=num_bytes)


def generator(emitter: MockEmitter, **kwargs: Any) -> tuple[SnapshotGenerator, RecordingFaultHandler]:
    faults = RecordingFaultHandler("SnapshotGenerator")
    return SnapshotGenerator(emitter, fault_handler=faults, **kwargs), faults


# ---------------------------------------------------------------- SnapshotGeneratorTest

def test_create_snapshot():
    """Bytes past the threshold queue one emission; while it is queued, no other is."""
    time = MockTime()
    queue = EventQueue(time)
    emitter = MockEmitter()
    gen, faults = generator(emitter, clock_ns=time, max_bytes_since_last_snapshot=200,
                            max_time_since_last_snapshot_ns=10 * 24 * 3600 * 10**9, queue=queue)
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest())  # 100 bytes: not yet
    assert queue.is_empty()
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest())  # 200 bytes: queued
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=2000))  # ignored: one is queued
    assert emitter.images == []
    gen.close()
    queue.run_ready()
    assert emitter.images == [TEST_IMAGE]
    assert gen.bytes_since_last_snapshot == 0
    faults.maybe_rethrow_first()


def test_no_snapshot_created_when_last_offset_is_not_batch_aligned():
    emitter = MockEmitter()
    gen, faults = generator(emitter, max_bytes_since_last_snapshot=200,
                            max_time_since_last_snapshot_ns=10 * 24 * 3600 * 10**9)
    for _ in range(3):
        gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(aligned=False))
    assert emitter.images == []
    assert gen.bytes_since_last_snapshot == 300
    faults.maybe_rethrow_first()


def test_snapshots_created_again_when_last_offset_is_aligned():
    emitter = MockEmitter()
    aligned_image = TEST_DELTA.apply(MetadataProvenance(-1, -1, -1, True))
    gen, faults = generator(emitter, max_bytes_since_last_snapshot=100,
                            max_time_since_last_snapshot_ns=10 * 24 * 3600 * 10**9)
    # past the threshold, but not batch aligned: not emitted
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(aligned=False))
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(aligned=False))
    gen.publish_log_delta(TEST_DELTA, aligned_image, manifest())
    assert emitter.images == [aligned_image]
    faults.maybe_rethrow_first()


def test_snapshots_disabled(caplog):
    emitter = MockEmitter()
    gen, faults = generator(emitter, max_bytes_since_last_snapshot=1, max_time_since_last_snapshot_ns=0)
    gen.disable("we are testing disable()")
    gen.disable("a second reason does not replace the first")
    with caplog.at_level("ERROR"):
        gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest())
    assert emitter.images == []
    assert gen.disabled_reason == "we are testing disable()"
    assert "because snapshots are disabled; we are testing disable()" in caplog.text
    gen2, _ = generator(MockEmitter(), disabled_reason="the node is a broker that does not write snapshots")
    gen2.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=10**9))
    assert gen2.disabled_reason.startswith("the node is a broker")
    faults.maybe_rethrow_first()


def test_time_based_snapshots():
    time = MockTime()
    emitter = MockEmitter()
    gen, faults = generator(emitter, clock_ns=time, max_bytes_since_last_snapshot=200,
                            max_time_since_last_snapshot_ns=30 * 60 * 10**9)
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=50))
    assert emitter.images == []
    time.sleep_ms(40 * 60 * 1000)
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=50))  # the time has come
    assert emitter.images == [TEST_IMAGE]
    # the bytes were reset by that snapshot: 150 more do not reach 200
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=150))
    assert emitter.images == [TEST_IMAGE]
    faults.maybe_rethrow_first()


def test_emitter_problem():
    emitter = MockEmitter()
    emitter.problem = RuntimeError("oops")
    gen, faults = generator(emitter, max_bytes_since_last_snapshot=200)
    for _ in range(2):
        gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(elapsed_ns=10000, num_bytes=50000))
    assert emitter.images == []
    assert faults.first is not None
    assert str(faults.first) == "SnapshotGenerator: KRaft snapshot file generation error: oops"


def test_a_loaded_snapshot_resets_the_counters():
    time = MockTime()
    emitter = MockEmitter()
    gen, _ = generator(emitter, clock_ns=time, max_bytes_since_last_snapshot=200,
                       max_time_since_last_snapshot_ns=60 * 10**9)
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=150))
    time.sleep_ms(59_000)
    gen.on_metadata_update(TEST_DELTA, TEST_IMAGE, SnapshotManifest(TEST_IMAGE.provenance, 0))
    assert gen.bytes_since_last_snapshot == 0 and gen.last_snapshot_time_ns == time()
    time.sleep_ms(2_000)
    gen.publish_log_delta(TEST_DELTA, TEST_IMAGE, manifest(num_bytes=150))
    assert emitter.images == []


def test_generator_rejects_bad_settings():
    with pytest.raises(ValueError, match="max_bytes_since_last_snapshot must be >= 1"):
        SnapshotGenerator(MockEmitter(), max_bytes_since_last_snapshot=0)
    with pytest.raises(ValueError, match="max_time_since_last_snapshot_ns must be >= 0"):
        SnapshotGenerator(MockEmitter(), max_time_since_last_snapshot_ns=-1)


# ---------------------------------------------------------------- SnapshotEmitterTest

class FakeSnapshotWriter:
    def __init__(self, snapshot_id: SnapshotId, last_contained_log_time_ms: int) -> None:
        self.snapshot_id = snapshot_id
        self.last_contained_log_time_ms = last_contained_log_time_ms
        self.batches: list[list[bytes]] = []
        self.frozen = False
        self.closed = False

    def append(self, records) -> None:
        assert not self.frozen and not self.closed
        self.batches.append(list(records))

    def freeze(self) -> None:
        self.frozen = True

    def close(self) -> None:
        self.closed = True


class MockRaftClient:
    """create_snapshot: a writer, or None when that snapshot exists (Kafka's empty Optional)."""

    def __init__(self) -> None:
        self.writers: dict[SnapshotId, FakeSnapshotWriter] = {}

    def create_snapshot(self, snapshot_id, data=None, *, last_contained_log_time_ms=0):
        if snapshot_id in self.writers:
            return None
        writer = FakeSnapshotWriter(snapshot_id, last_contained_log_time_ms)
        self.writers[snapshot_id] = writer
        return writer


def test_emit():
    raft = MockRaftClient()
    time = MockTime(10_000)
    registry = MetricsRegistry()
    metrics = SnapshotEmitterMetrics(registry, clock_ms=time.ms)
    emitter = SnapshotEmitter(raft, batch_size=2, metrics=metrics, clock_ms=time.ms)
    assert metrics.latest_snapshot_generated_age_ms == 0
    assert metrics.latest_snapshot_generated_bytes == 0
    time.sleep_ms(30_000)
    assert metrics.latest_snapshot_generated_age_ms == 30_000
    assert registry.value("kafka_server_SnapshotEmitter_LatestSnapshotGeneratedAgeMs") == 30_000
    emitter.maybe_emit(IMAGE1)
    assert metrics.latest_snapshot_generated_age_ms == 0
    writer = raft.writers[SnapshotId(101, 4)]  # IMAGE1's provenance: offset 100, epoch 4
    values = [v for b in writer.batches for v in b]
    assert metrics.latest_snapshot_generated_bytes == sum(map(len, values)) > 0
    assert registry.value("kafka_server_SnapshotEmitter_LatestSnapshotGeneratedBytes") == sum(map(len, values))
    assert writer.last_contained_log_time_ms == 2000
    assert writer.frozen and writer.closed
    assert all(len(b) <= 2 for b in writer.batches) and len(writer.batches) == (len(values) + 1) // 2
    # the records are the image's, framed
    assert values == [r.encode() for r in image_records(IMAGE1)]
    assert emitter.emitted == [SnapshotId(101, 4)]
    # a second emission of that snapshot does nothing: it exists
    emitter.maybe_emit(IMAGE1)
    assert len(raft.writers) == 1 and emitter.emitted == [SnapshotId(101, 4)]
    metrics.close()
    assert not any("SnapshotEmitter" in n for n in registry.names())


def test_a_failed_emission_aborts_the_snapshot():
    raft = MockRaftClient()

    class Exploding(FakeSnapshotWriter):
        def append(self, records) -> None:
            raise OSError("disk full")

    raft.create_snapshot = lambda sid, data=None, *, last_contained_log_time_ms=0: raft.writers.setdefault(
        sid, Exploding(sid, last_contained_log_time_ms))
    emitter = SnapshotEmitter(raft, batch_size=1)
    with pytest.raises(OSError, match="disk full"):
        emitter.maybe_emit(IMAGE1)
    writer = raft.writers[SnapshotId(101, 4)]
    assert writer.closed and not writer.frozen
    assert emitter.emitted == [] and emitter.metrics.latest_snapshot_generated_bytes == 0


def test_raft_snapshot_writer_batches_and_close():
    inner = FakeSnapshotWriter(SnapshotId(1, 1), 0)
    writer = RaftSnapshotWriter(inner, batch_size=3)
    records = IMAGE_RECORDS[:7]
    for r in records:
        writer.write(r)
    assert [len(b) for b in inner.batches] == [3, 3]
    writer.close(True)
    writer.close(True)  # idempotent
    assert [len(b) for b in inner.batches] == [3, 3, 1] and inner.frozen and inner.closed
    assert writer.records_written == 7 and writer.frozen_size == writer.bytes_written
    with pytest.raises(RuntimeError, match="closed"):
        writer.write(records[0])
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        RaftSnapshotWriter(inner, 0)
    aborted = FakeSnapshotWriter(SnapshotId(1, 1), 0)
    writer = RaftSnapshotWriter(aborted, batch_size=3)
    writer.write(records[0])
    writer.close(False)
    assert aborted.closed and not aborted.frozen and aborted.batches == [] and writer.frozen_size is None


# ---------------------------------------------------------------- features, configs, cache, controllers

def publish(publisher: Any, records: list[ApiMessageAndVersion], image: MetadataImage,
            provenance: MetadataProvenance) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    new = delta.apply(provenance)
    publisher.on_metadata_update(delta, new, LogDeltaManifest(provenance, UNKNOWN_LEADER, 1, 0, 10))
    return new


def test_features_publisher():
    pub = FeaturesPublisher()
    assert pub.features() == FinalizedFeatures(None, {}, -1)
    image = publish(pub, IMAGE_RECORDS, MetadataImage.EMPTY, MetadataProvenance(10, 1, 0, True))
    assert pub.features() == FinalizedFeatures(MV, {"metadata.version": MV.feature_level, "transaction.version": 2},
                                               10)
    before = pub.features()
    image = publish(pub, [rec(m.NoOpRecord())], image, MetadataProvenance(11, 1, 0, True))
    assert pub.features() is before  # no features delta: untouched
    publish(pub, [rec(m.FeatureLevelRecord(name="transaction.version", feature_level=0))], image,
            MetadataProvenance(12, 1, 0, True))
    assert pub.features() == FinalizedFeatures(MV, {"metadata.version": MV.feature_level}, 12)


def test_dynamic_config_publisher():
    calls: list[tuple[str, str, dict[str, str]]] = []

    def handler(kind: str):
        def handle(name: str, props: dict[str, str]) -> None:
            if name == "bad":
                raise ValueError("cannot apply")
            calls.append((kind, name, props))
        return handle

    faults = RecordingFaultHandler("configs")
    pub = DynamicConfigPublisher(1, {ConfigResourceType.TOPIC: handler("topic"),
                                     ConfigResourceType.BROKER: handler("broker"),
                                     ConfigResourceType.GROUP: handler("group")}, fault_handler=faults)
    assert pub.name == "DynamicConfigPublisher broker id=1"

    def config(rtype: int, name: str, key: str, value: str | None) -> ApiMessageAndVersion:
        return rec(m.ConfigRecord(resource_type=rtype, resource_name=name, name=key, value=value))

    image = publish(pub, [
        config(2, "foo", "retention.ms", "1000"),
        config(4, "", "log.cleaner.threads", "2"),
        config(4, "1", "ssl.keystore.password", "secret"),
        config(4, "2", "log.cleaner.threads", "4"),  # another broker's: not this node's business
        config(32, "g1", "consumer.session.timeout.ms", "45000"),
        config(16, "metrics", "interval.ms", "100"),  # no handler for client metrics: skipped
    ], MetadataImage.EMPTY, MetadataProvenance(5, 1, 0, True))
    assert sorted(calls) == [("broker", "1", {"ssl.keystore.password": "secret"}),
                             ("broker", DEFAULT_CONFIG_NAME, {"log.cleaner.threads": "2"}),
                             ("group", "g1", {"consumer.session.timeout.ms": "45000"}),
                             ("topic", "foo", {"retention.ms": "1000"})]
    assert pub.loggable(ConfigResource.broker("1"), {"ssl.keystore.password": "secret"}) == \
        "ssl.keystore.password -> [hidden]"
    calls.clear()
    # a deletion hands over the whole remaining config (empty when none is left); a handler failure is reported
    publish(pub, [config(2, "foo", "retention.ms", None), config(2, "bad", "retention.ms", "5")], image,
            MetadataProvenance(6, 1, 0, True))
    assert calls == [("topic", "foo", {})]
    assert str(faults.first) == ("configs: Error updating topic bad with new configuration: retention.ms -> 5 in "
                                 "MetadataDelta up to 6: cannot apply")
    calls.clear()
    publish(pub, [rec(m.NoOpRecord())], image, MetadataProvenance(7, 1, 0, True))
    assert calls == []


def test_metadata_cache_publisher_hands_the_image_to_other_threads():
    seen: list[MetadataImage] = []
    pub = MetadataCachePublisher(set_image=seen.append)
    assert pub.current_image() is MetadataImage.EMPTY and not pub.has_image
    got: list[MetadataImage | None] = []
    waiter = threading.Thread(target=lambda: got.append(pub.wait_for_first_image(30)))
    waiter.start()
    image = publish(pub, IMAGE_RECORDS, MetadataImage.EMPTY, MetadataProvenance(3, 1, 0, True))
    waiter.join(30)
    assert got == [image] and seen == [image] and pub.current_image() is image
    closed = MetadataCachePublisher()
    closed.close()
    assert closed.wait_for_first_image(5) is None


def test_controller_registrations_publisher():
    pub = ControllerRegistrationsPublisher()
    assert dict(pub.controllers()) == {}
    image = publish(pub, IMAGE_RECORDS, MetadataImage.EMPTY, MetadataProvenance(3, 1, 0, True))
    assert set(pub.controllers()) == {3000}
    assert pub.controllers()[3000].listeners["CONTROLLER"].port == 9093
    assert pub.controllers() is image.cluster.controllers


# ---------------------------------------------------------------- end to end on a real Raft core

def key(i: int) -> ReplicaKey:
    return ReplicaKey(i, uuid.UUID(int=i))


class ImagesByOffset(MetadataCachePublisher):
    """Every published image, by offset."""

    def __init__(self) -> None:
        super().__init__(name="ImagesByOffset")
        self.by_offset: dict[int, MetadataImage] = {}

    def on_metadata_update(self, delta, new_image, manifest) -> None:
        super().on_metadata_update(delta, new_image, manifest)
        self.by_offset[new_image.offset] = new_image


@pytest.mark.usefixtures("fixtures_dir")
def test_loader_generator_and_emitter_on_a_raft_core(fixtures_dir: Path):
    """A Kafka snapshot's records committed through a single-voter RaftCore, 50 a batch; the loader
    publishes, the SnapshotGenerator writes a snapshot through create_snapshot each time enough bytes
    were replayed (freezing it drops the log prefix), and a second loader reading each snapshot from the
    log gets the image that was published at its offset."""
    snapshot = fixtures_dir / "kafka-3.6.0-cp7.6.0-snapshot/__cluster_metadata-0" \
                              "/00000000000000014926-0000000001.checkpoint"
    from test_metadata_loader import file_batches  # the fixture reader of the loader's tests

    values = [v for b in file_batches(snapshot) if not b.is_control for v in b.records]
    assert len(values) > 500
    log = MemoryRaftLog()
    core = RaftCore(QuorumConfig(), key(1), [key(1)], log, MemoryQuorumStateStore(None), random.Random(1),
                    cluster_id="cluster-A")
    faults = RecordingFaultHandler("e2e")
    loader = MetadataLoader(high_watermark=lambda: core.high_watermark, fault_handler=faults)
    images = ImagesByOffset()
    emitter = SnapshotEmitter(core, batch_size=100)
    gen = SnapshotGenerator(emitter, fault_handler=faults, max_bytes_since_last_snapshot=sum(map(len, values)) // 3)
    loader.install_publishers([images, gen])
    core.register_listener(loader)
    now = 0
    core.initialize(now)
    core.poll(now)
    assert loader.leader_and_epoch.leader_id == 1
    for i in range(0, len(values), 50):
        last = core.append(values[i:i + 50], core.epoch, now)
        while core.high_watermark is None or core.high_watermark <= last:  # (the append lingers, then commits)
            now += 10
            core.poll(now)
    faults.maybe_rethrow_first()
    image = images.current_image()
    assert image.offset == core.high_watermark - 1 == loader.last_applied_offset()
    assert len(image.topics.topics_by_name) > 0
    # snapshots were written through the core, each of an image that was published
    assert len(emitter.emitted) >= 2
    assert log.latest_snapshot_id() == emitter.emitted[-1] and log.start_offset == emitter.emitted[-1].offset
    sid = emitter.emitted[-1]  # (freezing a snapshot drops the older ones)
    published = images.by_offset[sid.offset - 1]
    reader = log.open_snapshot(sid)
    assert reader is not None
    second_images = MetadataCachePublisher()
    second = MetadataLoader(high_watermark=lambda: sid.offset, fault_handler=faults)
    second.install_publishers([second_images])
    second.handle_load_snapshot(reader)
    faults.maybe_rethrow_first()
    reloaded = second_images.current_image()
    assert reloaded.offset == sid.offset - 1
    assert reloaded == published
    # the snapshot holds exactly what the image writes, at most 100 records a batch
    written = [decode_metadata_record(v)[2] for b in log.open_snapshot(sid) for v in b.records]
    assert written == [r.message for r in image_records(published)]
    assert all(len(b.records) <= 100 for b in log.open_snapshot(sid))
