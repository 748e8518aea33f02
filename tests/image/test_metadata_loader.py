"""MetadataLoader: snapshots and commits into published images.

Re-states Kafka's ``MetadataLoaderTest`` (metadata/src/test/java/org/apache/kafka/image/loader/) scenario
by scenario.  kraft's loader works inside the Raft listener calls (no thread of its own), so Kafka's
``waitForAllEventsToBeHandled`` has no counterpart: a call has done its work when it returns.  Kafka 4
has no metadata.version below 3.3-IV3, so Kafka's 3.3-IV1/IV2 become 3.3-IV3/3.4-IV0 here, and an image
without a FeatureLevelRecord has no metadata.version (Kafka 3.x defaulted it to 3.0-IV1).

Then the Kafka fixtures: every log segment fed through the loader in commits of several sizes, every
snapshot loaded, must give the image a direct replay gives; and the metrics under Kafka's names.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import MISSING_FIXTURES, fixture_params

from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.loader import (
    UNKNOWN_LEADER,
    FaultHandlerError,
    LoaderManifestType,
    LogDeltaManifest,
    MetadataLoader,
    MetadataLoaderMetrics,
    MetadataPublisher,
    RecordingFaultHandler,
    SnapshotManifest,
)
from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME, MetadataVersion
from kraft_node.metrics import MetricsRegistry
from kraft_node.raft.messages import Batch, KRaftVersionControl, LeaderAndEpoch, SnapshotId
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.record.constants import CONTROL_MASK

MV_A = MetadataVersion.IBP_3_3_IV3  # Kafka's tests: 3.3-IV1
MV_B = MetadataVersion.IBP_3_4_IV0  # Kafka's tests: 3.3-IV2
MV_C = MetadataVersion.IBP_3_5_IV0
FOO_ID = Uuid.from_string("Uum7sfhHQP-obSvfywmNUA")


def rec(message: Any) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, 0)


def mv_record(mv: MetadataVersion) -> ApiMessageAndVersion:
    return rec(m.FeatureLevelRecord(name=METADATA_VERSION_FEATURE_NAME, feature_level=mv.feature_level))


def batch(base_offset: int, epoch: int, records: list[ApiMessageAndVersion], append_time_ms: int = 0) -> Batch:
    return Batch(base_offset, epoch, tuple(r.encode() for r in records), append_time_ms=append_time_ms)


class MockTime:
    """A clock that moves only when told (Kafka's MockTime); ``__call__`` reads nanoseconds."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def sleep_ms(self, ms: int) -> None:
        self.ns += ms * 1_000_000


class HighWatermark:
    def __init__(self, value: int | None) -> None:
        self.value = value

    def __call__(self) -> int | None:
        return self.value


class MockPublisher(MetadataPublisher):
    """Kafka's MockPublisher: remembers the latest of everything it was given."""

    def __init__(self, name: str = "MockPublisher") -> None:
        self._name = name
        self.latest_delta: MetadataDelta | None = None
        self.latest_image: MetadataImage | None = None
        self.latest_log_delta_manifest: LogDeltaManifest | None = None
        self.latest_snapshot_manifest: SnapshotManifest | None = None
        self.images: list[MetadataImage] = []
        self.controller_changes: list[LeaderAndEpoch] = []
        self.closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def first_publish(self) -> bool:
        return bool(self.images)

    def on_metadata_update(self, delta, new_image, manifest) -> None:
        self.latest_delta, self.latest_image = delta, new_image
        self.images.append(new_image)
        if manifest.type is LoaderManifestType.LOG_DELTA:
            self.latest_log_delta_manifest = manifest
        elif manifest.type is LoaderManifestType.SNAPSHOT:
            self.latest_snapshot_manifest = manifest
        else:
            raise RuntimeError(f"Invalid manifest type {manifest.type}")

    def on_controller_change(self, new_leader_and_epoch) -> None:
        self.controller_changes.append(new_leader_and_epoch)

    def close(self) -> None:
        self.closed = True


class MockSnapshotReader:
    """A SnapshotReader of ``batches`` for the snapshot whose last offset is ``provenance``'s; with
    ``time``, each batch read and the end of the data take 1 ms (Kafka's reader ticks per call)."""

    def __init__(self, provenance: MetadataProvenance, batches: list[Batch], time: MockTime | None = None) -> None:
        offset, epoch = provenance.snapshot_id()
        self.snapshot_id = SnapshotId(offset, epoch)
        self.last_contained_log_time_ms: int | None = provenance.last_contained_log_time_ms
        self._batches = batches
        self._time = time
        self.reads = 0

    @classmethod
    def from_record_lists(cls, provenance: MetadataProvenance,
                          lists: list[list[ApiMessageAndVersion]]) -> MockSnapshotReader:
        return cls(provenance, [batch(0, 0, records) for records in lists])

    def __iter__(self):
        for b in self._batches:
            self._tick()
            self.reads += 1
            yield b
        self._tick()

    def _tick(self) -> None:
        if self._time is not None:
            self._time.sleep_ms(1)

    def close(self) -> None:
        pass


def header_only_snapshot(offset: int, time: MockTime | None = None) -> MockSnapshotReader:
    """A snapshot holding only its header (a control batch): no metadata record."""
    header = Batch(200, 100, (b"snapshot-header",), is_control=True, append_time_ms=4000)
    return MockSnapshotReader(MetadataProvenance(offset, 100, 4000, True), [header], time)


def test_snapshot(offset: int, mv: MetadataVersion = MV_A, topic: str = "foo",
                  topic_id: Uuid = FOO_ID) -> MockSnapshotReader:
    return MockSnapshotReader.from_record_lists(
        MetadataProvenance(offset, 100, 4000, True),
        [[mv_record(mv)], [rec(m.TopicRecord(name=topic, topic_id=topic_id))]])


test_snapshot.__test__ = False  # type: ignore[attr-defined]  # a builder, not a test


def new_loader(name: str, hwm: HighWatermark | int | None,
               **kwargs: Any) -> tuple[MetadataLoader, RecordingFaultHandler]:
    faults = RecordingFaultHandler(name)
    accessor = hwm if isinstance(hwm, HighWatermark) else HighWatermark(hwm)
    return MetadataLoader(high_watermark=accessor, fault_handler=faults, **kwargs), faults


# ---------------------------------------------------------------- Kafka's MetadataLoaderTest

def test_create_and_close():
    loader, faults = new_loader("testCreateAndClose", None)
    with loader:
        assert loader.last_applied_offset() == -1
    faults.maybe_rethrow_first()


def test_install_publishers():
    """Installed publishers are closed with the loader, and never published to if nothing was loaded."""
    publishers = [MockPublisher("a"), MockPublisher("b"), MockPublisher("c")]
    loader, faults = new_loader("testInstallPublishers", None)
    with loader:
        loader.install_publishers(publishers[:2])
        assert loader.publisher_names() == ["a", "b"]
    assert publishers[0].closed and publishers[0].latest_image is None
    assert publishers[1].closed and publishers[1].latest_image is None
    assert not publishers[2].closed and publishers[2].latest_image is None
    faults.maybe_rethrow_first()


@pytest.mark.parametrize("load_snapshot", [False, True])
@pytest.mark.parametrize("same_object", [False, True])
def test_publisher_cannot_be_installed_more_than_once(load_snapshot, same_object):
    publisher = MockPublisher()
    loader, faults = new_loader("testPublisherCannotBeInstalledMoreThanOnce", 0)
    with loader:
        loader.install_publishers([publisher])
        if load_snapshot:
            loader.handle_load_snapshot(header_only_snapshot(200))
        assert loader.metrics.handle_load_snapshot_count == (1 if load_snapshot else 0)
        if same_object:
            with pytest.raises(FaultHandlerError) as info:
                loader.install_publishers([publisher])
            assert str(info.value) == ("testPublisherCannotBeInstalledMoreThanOnce: Attempted to install "
                                       "publisher MockPublisher, which is already installed.")
        else:
            with pytest.raises(FaultHandlerError) as info:
                loader.install_publishers([MockPublisher()])
            assert str(info.value) == ("testPublisherCannotBeInstalledMoreThanOnce: Attempted to install a new "
                                       "publisher named MockPublisher, but there is already a publisher with that "
                                       "name.")
        assert loader.publisher_names() == ["MockPublisher"]
    assert publisher.closed


def test_two_publishers_of_one_name_in_one_call_install_neither():
    loader, faults = new_loader("twice", 0)
    with pytest.raises(FaultHandlerError, match="already a publisher with that name"):
        loader.install_publishers([MockPublisher("x"), MockPublisher("x")])
    assert loader.publisher_names() == []


def test_remove_publisher():
    publishers = [MockPublisher("a"), MockPublisher("b"), MockPublisher("c")]
    loader, faults = new_loader("testRemovePublisher", 1)
    with loader:
        loader.install_publishers(publishers[:2])
        loader.remove_and_close_publisher(publishers[1])
        reader = MockSnapshotReader.from_record_lists(MetadataProvenance(100, 50, 2000, True), [[mv_record(MV_B)]])
        loader.handle_load_snapshot(reader)
        assert reader.reads == 1
        assert publishers[0].first_publish
        loader.remove_and_close_publisher(publishers[0])
        with pytest.raises(FaultHandlerError, match="Attempted to remove publisher a, which is not installed."):
            loader.remove_and_close_publisher(publishers[0])
    assert publishers[0].closed and publishers[0].latest_image.metadata_version() is MV_B
    assert publishers[1].closed and publishers[1].latest_image is None
    assert not publishers[2].closed and publishers[2].latest_image is None


def test_load_empty_snapshot():
    time = MockTime()
    publisher = MockPublisher()
    loader, faults = new_loader("testLoadEmptySnapshot", 0, clock_ns=time)
    with loader:
        loader.install_publishers([publisher])
        loader.handle_load_snapshot(header_only_snapshot(200, time))
        assert publisher.first_publish
        assert loader.last_applied_offset() == 200
        loader.handle_load_snapshot(header_only_snapshot(300, time))
        assert loader.last_applied_offset() == 300
        # Kafka: 3 ms (its reader ticks on hasNext, next, hasNext); this reader ticks per batch and at the end
        assert publisher.latest_snapshot_manifest == SnapshotManifest(
            MetadataProvenance(300, 100, 4000, True), 2_000_000, num_records=0, num_batches=0)
        assert loader.metrics.current_metadata_version is MetadataVersion.MINIMUM_VERSION
    assert publisher.closed
    # an empty snapshot is a whole state: its (empty) image is published, with no metadata.version (Kafka 4)
    assert publisher.latest_image.metadata_version() is None
    assert publisher.latest_image.is_empty()
    faults.maybe_rethrow_first()


def test_load_empty_batch():
    """A control batch has no metadata record but moves the offset and is counted."""
    time = MockTime()
    publisher = MockPublisher()
    loader, faults = new_loader("testLoadEmptyBatch", 1, clock_ns=time)
    with loader:
        loader.install_publishers([publisher])
        loader.handle_load_snapshot(test_snapshot(200))
        assert publisher.first_publish
        control = Batch(300, 100, (b"snapshot-header",), is_control=True, append_time_ms=4000)
        loader.handle_commit((control,))
        assert loader.last_applied_offset() == 300
    assert publisher.closed
    assert publisher.latest_log_delta_manifest == LogDeltaManifest(
        MetadataProvenance(300, 100, 4000, True), UNKNOWN_LEADER, num_batches=1, elapsed_ns=0,
        num_bytes=control.size_in_bytes, num_records=0)
    assert publisher.latest_image.metadata_version() is MV_A
    faults.maybe_rethrow_first()


def test_last_applied_offset():
    publishers = [MockPublisher("a"), MockPublisher("b")]
    loader, faults = new_loader("testLastAppliedOffset", 1)
    with loader:
        loader.install_publishers(publishers)
        loader.handle_load_snapshot(test_snapshot(200))
        assert all(p.first_publish for p in publishers)
        assert loader.last_applied_offset() == 200
        loader.handle_commit((batch(201, 100, [rec(m.RemoveTopicRecord(topic_id=FOO_ID))]),))
        assert loader.last_applied_offset() == 201
    for p in publishers:
        assert p.closed
        assert p.latest_image.metadata_version() is MV_A
        assert p.latest_image.topics.get_topic_by_name("foo") is None
    faults.maybe_rethrow_first()


def test_catching_up_state():
    """Nothing is published, and lastAppliedOffset stays -1, until the loader reaches HWM - 1."""
    publishers = [MockPublisher("a"), MockPublisher("b")]
    hwm = HighWatermark(None)
    loader, faults = new_loader("testLastAppliedOffset", hwm)
    with loader:
        loader.install_publishers(publishers)
        loader.handle_load_snapshot(test_snapshot(200))
        # the high watermark is unknown
        assert loader.last_applied_offset() == -1
        assert not publishers[0].first_publish
        assert loader.catching_up and loader.image.offset == 200  # built, not published
        # the high watermark at 221 is past the snapshot at 210
        hwm.value = 221
        loader.handle_load_snapshot(test_snapshot(210))
        assert loader.last_applied_offset() == -1
        # a snapshot at 220 (= HWM - 1) ends the catching up
        loader.handle_load_snapshot(test_snapshot(220))
        assert loader.last_applied_offset() == 220
        assert publishers[0].first_publish and publishers[1].first_publish
        assert not loader.catching_up
        # never catching up again, whatever the high watermark says
        hwm.value = 10_000
        loader.handle_commit((batch(221, 100, [rec(m.NoOpRecord())]),))
        assert loader.last_applied_offset() == 221
    faults.maybe_rethrow_first()


def test_reload_snapshot():
    """A snapshot replaces the state: what it does not re-state is gone."""
    publisher = MockPublisher("a")
    loader, faults = new_loader("testLastAppliedOffset", 0)
    with loader:
        loader.handle_load_snapshot(test_snapshot(100))
        loader.install_publishers([publisher])
        assert publisher.first_publish
        assert publisher.latest_delta.image.is_empty()  # a new publisher's delta is from the empty image
        assert publisher.latest_image.provenance.last_contained_offset == 100
        assert publisher.latest_snapshot_manifest.provenance.last_contained_offset == 100

        loader.handle_load_snapshot(test_snapshot(200))
        assert loader.last_applied_offset() == 200
        assert loader.metrics.current_metadata_version is MV_A
        assert not publisher.latest_delta.image.is_empty()

        loader.handle_load_snapshot(test_snapshot(400, MV_B, "bar", Uuid.from_string("VcL2Mw-cT4aL6XV9VujzoQ")))
        assert loader.last_applied_offset() == 400
        assert loader.metrics.current_metadata_version is MV_B
        assert "foo" not in publisher.latest_image.topics.topics_by_name
        assert "bar" in publisher.latest_image.topics.topics_by_name

        loader.handle_commit((batch(500, 100, [mv_record(MV_C)]),))
        assert loader.metrics.current_metadata_version is MV_C
    faults.maybe_rethrow_first()


@pytest.mark.parametrize("abort", [True, False], ids=["abort", "end"])
def test_publish_transaction(abort):
    """A transaction's records are visible only once it ends.  (Kafka's loader publishes the empty
    image under the open transaction first; kraft publishes nothing before it has an applied record.)"""
    publisher = MockPublisher("testTransactions")
    loader, faults = new_loader("testTransactions", 0)
    topic_id = Uuid.from_string("dMCqhcK4T5miGH5wEX7NsQ")
    with loader:
        loader.install_publishers([publisher])
        loader.handle_commit((batch(500, 100, [rec(m.BeginTransactionRecord(name="testTransactions")),
                                               rec(m.TopicRecord(name="foo", topic_id=topic_id))]),))
        assert loader.image.topics.get_topic_by_name("foo") is None
        assert not publisher.first_publish
        loader.handle_commit((batch(502, 100, [rec(m.PartitionRecord(topic_id=topic_id, partition_id=0)),
                                               rec(m.PartitionRecord(topic_id=topic_id, partition_id=1))]),))
        assert loader.image.topics.get_topic_by_name("foo") is None
        assert not publisher.first_publish
        if abort:
            loader.handle_commit((batch(504, 100, [rec(m.AbortTransactionRecord())]),))
            assert loader.image.topics.get_topic_by_name("foo") is None
            assert loader.image.offset == 504
            assert not publisher.first_publish  # nothing committed yet: no image to publish
        else:
            loader.handle_commit((batch(504, 100, [rec(m.EndTransactionRecord())]),))
            assert publisher.first_publish
            assert publisher.latest_image.topics.get_topic_by_name("foo") is not None
            assert len(publisher.latest_image.topics.get_topic_by_name("foo").partitions) == 2
    faults.maybe_rethrow_first()


def test_publish_transaction_within_batch():
    publisher = MockPublisher("testPublishTransactionWithinBatch")
    loader, faults = new_loader("testPublishTransactionWithinBatch", 0)
    with loader:
        loader.install_publishers([publisher])
        loader.handle_commit((batch(500, 100, [
            rec(m.BeginTransactionRecord(name="txn-1")),
            rec(m.TopicRecord(name="foo", topic_id=Uuid.from_string("HQSM3ccPQISrHqYK_C8GpA"))),
            rec(m.EndTransactionRecord())]),))
        assert publisher.first_publish
        assert publisher.latest_image.topics.get_topic_by_name("foo") is not None
    faults.maybe_rethrow_first()


def test_snapshot_during_transaction():
    """Loading a snapshot discards the transaction in progress."""
    publisher = MockPublisher("testSnapshotDuringTransaction")
    loader, faults = new_loader("testSnapshotDuringTransaction", 0)
    with loader:
        loader.install_publishers([publisher])
        loader.handle_commit((batch(500, 100, [
            rec(m.BeginTransactionRecord(name="txn-1")),
            rec(m.TopicRecord(name="foo", topic_id=Uuid.from_string("HQSM3ccPQISrHqYK_C8GpA")))]),))
        assert loader.image.topics.get_topic_by_name("foo") is None
        loader.handle_load_snapshot(MockSnapshotReader.from_record_lists(
            MetadataProvenance(600, 101, 4000, True), [[rec(m.TopicRecord(name="foo", topic_id=FOO_ID))]]))
        assert str(publisher.latest_image.topics.get_topic_by_name("foo").topic_id) == "Uum7sfhHQP-obSvfywmNUA"
        # the transaction is gone: its End would now be a fault, and later records apply at once
        loader.handle_commit((batch(601, 101, [rec(m.TopicRecord(name="bar", topic_id=Uuid.random()))]),))
        assert publisher.latest_image.topics.get_topic_by_name("bar") is not None
    faults.maybe_rethrow_first()


def test_no_publish_empty_image():
    images: list[MetadataImage] = []

    class Capturing(MetadataPublisher):
        name = "testNoPublishEmptyImage"

        def on_metadata_update(self, delta, new_image, manifest) -> None:
            images.append(new_image)

    loader, faults = new_loader("testNoPublishEmptyImage", 1)
    with loader:
        loader.install_publishers([Capturing()])
        loader.handle_commit((batch(0, 1, [rec(m.ConfigRecord(resource_type=4, resource_name="3000", name="foo",
                                                               value="bar"))]),))
        assert images
        assert not any(image.is_empty() for image in images)
    faults.maybe_rethrow_first()


def test_catching_up_logs_each_reason_once_at_info(caplog):
    """Kafka logs the catching-up reason on every image and retry (an endless stream at startup);
    here each reason is logged at INFO when it becomes the reason, then at DEBUG."""
    hwm = HighWatermark(None)
    loader, faults = new_loader("logs", hwm)
    with caplog.at_level("INFO", logger="kraft.metadata.loader"):
        loader.install_publishers([MockPublisher()])
        for offset in range(0, 5):
            loader.handle_commit((batch(offset, 1, [rec(m.NoOpRecord())]),))
        hwm.value = 100
        for offset in range(5, 10):
            loader.handle_commit((batch(offset, 1, [rec(m.NoOpRecord())]),))
        hwm.value = 11
        loader.handle_commit((batch(10, 1, [rec(m.NoOpRecord())]),))
    infos = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
    assert sum("don't know the high water mark" in t for t in infos) == 1
    assert sum("we have loaded up to offset 5, but the high water mark is 100" in t for t in infos) == 1
    assert sum("still catching up" in t for t in infos) == 2
    assert any("finished catching up to the current high water mark of 11" in t for t in infos)
    faults.maybe_rethrow_first()


def test_control_batches_alone_publish_nothing():
    """A log that starts with LeaderChange batches: no image before the first metadata record."""
    publisher = MockPublisher()
    loader, faults = new_loader("controls", 2)
    loader.install_publishers([publisher])
    loader.handle_commit((Batch(0, 1, (b"leader-change",), is_control=True),))
    loader.handle_commit((Batch(1, 1, (b"leader-change",), is_control=True),))
    assert not publisher.first_publish and loader.last_applied_offset() == -1
    loader.handle_commit((batch(2, 1, [mv_record(MV_A)]),))
    assert publisher.first_publish and loader.last_applied_offset() == 2
    faults.maybe_rethrow_first()


# ---------------------------------------------------------------- kraft's loader: ordering, leaders, faults

def test_new_publisher_gets_everything_then_the_leader_then_deltas_in_install_order():
    calls: list[tuple[str, str]] = []

    class Recorder(MockPublisher):
        def on_metadata_update(self, delta, new_image, manifest) -> None:
            super().on_metadata_update(delta, new_image, manifest)
            calls.append((self.name, str(manifest.type)))

        def on_controller_change(self, new_leader_and_epoch) -> None:
            super().on_controller_change(new_leader_and_epoch)
            calls.append((self.name, f"leader {new_leader_and_epoch.leader_id}"))

    a, b = Recorder("a"), Recorder("b")
    loader, faults = new_loader("order", 0)
    loader.handle_leader_change(LeaderAndEpoch(3, 7))
    loader.handle_load_snapshot(test_snapshot(10))
    loader.install_publishers([a, b])
    assert calls == [("a", "SNAPSHOT"), ("a", "leader 3"), ("b", "SNAPSHOT"), ("b", "leader 3")]
    # the new publishers' delta states the whole image: metadata.version written out, the topics
    # handed over whole (replaced_topics: the image's own topics, not rewritten record by record)
    delta = a.latest_delta
    assert delta.features_delta is not None and delta.topics_delta is None
    assert delta.replaced_topics is loader.image.topics and len(delta.replaced_topics.topics_by_id) == 1
    assert a.latest_snapshot_manifest.num_records == 1
    calls.clear()
    loader.handle_commit((batch(11, 7, [rec(m.NoOpRecord())]),))
    loader.handle_leader_change(LeaderAndEpoch(-1, 8))
    assert calls == [("a", "LOG_DELTA"), ("b", "LOG_DELTA"), ("a", "leader -1"), ("b", "leader -1")]
    assert a.latest_log_delta_manifest.leader_and_epoch == LeaderAndEpoch(3, 7)
    assert loader.metrics.current_controller_id == -1
    faults.maybe_rethrow_first()


def test_a_publisher_that_fails_is_reported_and_the_others_still_get_the_image():
    class Broken(MockPublisher):
        def on_metadata_update(self, delta, new_image, manifest) -> None:
            if manifest.type is LoaderManifestType.LOG_DELTA:
                raise ValueError("boom")
            super().on_metadata_update(delta, new_image, manifest)

    broken, fine = Broken("broken"), MockPublisher("fine")
    loader, faults = new_loader("pub", 0)
    loader.handle_load_snapshot(test_snapshot(10))
    loader.install_publishers([broken, fine])
    loader.handle_commit((batch(11, 1, [rec(m.NoOpRecord())]),))
    assert fine.latest_image.offset == 11
    assert str(faults.first) == ("pub: Unhandled error publishing the new metadata image ending at 11 with "
                                 "publisher broken: boom")
    assert loader.last_applied_offset() == 11 and loader.failure is None
    assert loader.metrics.load_errors == 1


def test_a_bad_record_stops_the_loader_at_the_last_published_image():
    publisher = MockPublisher()
    loader, faults = new_loader("stop", 0)
    loader.install_publishers([publisher])
    loader.handle_commit((batch(0, 1, [mv_record(MV_A)]),))
    assert loader.last_applied_offset() == 0
    loader.handle_commit((batch(1, 1, [rec(m.NoOpRecord()), rec(m.PartitionRecord(topic_id=FOO_ID))]),))
    assert str(faults.first).startswith("stop: Error loading metadata log record from offset 2: ")
    assert loader.failure == (2, "Error loading metadata log record from offset 2")
    assert loader.last_applied_offset() == 0 and loader.image.offset == 0
    # stopped: neither commits nor snapshots are applied any more
    loader.handle_commit((batch(3, 1, [rec(m.NoOpRecord())]),))
    loader.handle_load_snapshot(test_snapshot(50))
    assert loader.last_applied_offset() == 0 and len(publisher.images) == 1
    assert len(faults.faults) == 1
    # a publisher installed now still gets the last good image
    late = MockPublisher("late")
    loader.install_publishers([late])
    assert late.latest_image.offset == 0


def test_a_bad_snapshot_record_is_a_fault_naming_its_index():
    loader, faults = new_loader("snap", 0)
    reader = MockSnapshotReader(MetadataProvenance(99, 3, 0, True), [
        batch(0, 3, [mv_record(MV_A), rec(m.NoOpRecord())]),
        Batch(2, 3, (b"\x01\x63\x00",))])
    loader.handle_load_snapshot(reader)
    assert str(faults.first).startswith("snap: Error loading metadata log record 2 in snapshot at offset 99: ")
    assert loader.failure[0] == 99
    assert loader.image is MetadataImage.EMPTY and loader.last_applied_offset() == -1


def test_a_snapshot_reader_that_fails_stops_the_loader():
    """A damaged snapshot (the reader raises while iterating) is Kafka's "unhandled fault"."""
    class Damaged(MockSnapshotReader):
        def __iter__(self):
            yield batch(0, 3, [mv_record(MV_A)])
            raise OSError("corrupt snapshot 00000000000000000100-0000000003: truncated frame at position 90")

    loader, faults = new_loader("damaged", 0)
    loader.handle_load_snapshot(Damaged(MetadataProvenance(99, 3, 0, True), []))
    assert str(faults.first) == ("damaged: Unhandled fault in MetadataLoader#handleLoadSnapshot. Snapshot offset "
                                 "was 99: corrupt snapshot 00000000000000000100-0000000003: truncated frame at "
                                 "position 90")
    assert loader.failure[0] == 99 and loader.image is MetadataImage.EMPTY


def test_retry_of_initialization_on_an_event_queue():
    """Kafka retries initializing new publishers every 100 ms while catching up; with a queue the loader
    schedules the retry there, so a publisher is initialized when the high watermark becomes known even
    if no other data comes."""
    time = MockTime()
    queue = EventQueue(time)
    hwm = HighWatermark(None)
    publisher = MockPublisher()
    loader, faults = new_loader("retry", hwm, clock_ns=time, queue=queue)
    loader.handle_load_snapshot(test_snapshot(10))
    loader.install_publishers([publisher])
    assert not publisher.first_publish
    assert queue.next_deadline_ns() == 100_000_000
    hwm.value = 11
    time.sleep_ms(99)
    queue.run_ready()
    assert not publisher.first_publish
    time.sleep_ms(1)
    queue.run_ready()
    assert publisher.first_publish and publisher.latest_image.offset == 10
    assert queue.next_deadline_ns() is None
    loader.close()
    faults.maybe_rethrow_first()


def test_without_a_queue_the_next_call_initializes():
    hwm = HighWatermark(None)
    publisher = MockPublisher()
    loader, _ = new_loader("noqueue", hwm)
    loader.handle_load_snapshot(test_snapshot(10))
    loader.install_publishers([publisher])
    hwm.value = 11
    assert not publisher.first_publish
    loader.handle_leader_change(LeaderAndEpoch(1, 2))
    assert publisher.first_publish and publisher.controller_changes == [LeaderAndEpoch(1, 2)]


def test_closed_loader_ignores_calls():
    loader, _ = new_loader("closed", 0)
    loader.close()
    loader.close()
    loader.handle_commit((batch(0, 1, [mv_record(MV_A)]),))
    assert loader.image is MetadataImage.EMPTY
    with pytest.raises(RuntimeError, match="closed"):
        loader.install_publishers([MockPublisher()])


# ---------------------------------------------------------------- metrics

def test_metrics_under_kafkas_names():
    registry = MetricsRegistry()
    metrics = MetadataLoaderMetrics(registry, wall_clock=lambda: 10_000)
    loader, faults = new_loader("metrics", 0, metrics=metrics)
    loader.install_publishers([MockPublisher()])
    v = registry.value
    assert v("kafka_server_MetadataLoader_CurrentMetadataVersion") == MetadataVersion.MINIMUM_VERSION.feature_level
    assert v("kafka_server_MetadataLoader_CurrentControllerId") == -1
    assert v("kafka_server_broker_metadata_metrics_last_applied_record_offset") == -1
    loader.handle_leader_change(LeaderAndEpoch(3000, 5))
    loader.handle_load_snapshot(test_snapshot(10, MV_C))
    loader.handle_commit((
        Batch(11, 5, (b"kraft-version",), is_control=True, control=KRaftVersionControl(0, 1)),
        batch(12, 5, [rec(m.FeatureLevelRecord(name="transaction.version", feature_level=2)),
                      rec(m.NoOpRecord())], append_time_ms=9_000),
    ))
    assert v("kafka_server_MetadataLoader_HandleLoadSnapshotCount") == 1
    assert v("kafka_server_MetadataLoader_CurrentMetadataVersion") == MV_C.feature_level
    assert v("kafka_server_MetadataLoader_CurrentControllerId") == 3000
    level = "kafka_server_MetadataLoader_FinalizedLevel"
    assert v(level, {"featureName": "metadataVersion"}) == MV_C.feature_level
    assert v(level, {"featureName": "transactionVersion"}) == 2
    assert v(level, {"featureName": "kraftVersion"}) == 1
    assert v(level, {"featureName": "groupVersion"}) == 0
    assert v("kafka_server_BrokerMetadataListener_MetadataBatchSizes_count") == 2
    assert v("kafka_server_BrokerMetadataListener_MetadataBatchSizes_sum") == 2  # 0 (control) + 2
    assert v("kafka_server_BrokerMetadataListener_MetadataBatchProcessingTimeUs_count") == 2
    assert v("kraft_MetadataLoader_SnapshotLoadTimeMs_count") == 1
    assert v("kafka_server_broker_metadata_metrics_last_applied_record_offset") == 13
    assert v("kafka_server_broker_metadata_metrics_last_applied_record_timestamp") == 9_000
    assert v("kafka_server_broker_metadata_metrics_last_applied_record_lag_ms") == 1_000
    assert v("kafka_server_broker_metadata_metrics_metadata_load_error_count") == 0
    # a feature removed reads 0 again
    loader.handle_commit((batch(14, 5, [rec(m.FeatureLevelRecord(name="transaction.version", feature_level=0))]),))
    assert v(level, {"featureName": "transactionVersion"}) == 0
    metrics.close()
    assert not any(n.startswith(("kafka_server_MetadataLoader", "kafka_server_broker", "kraft_MetadataLoader",
                                 "kafka_server_BrokerMetadataListener")) for n in registry.names())
    faults.maybe_rethrow_first()


def test_controller_metrics_have_no_broker_listener_metrics():
    registry = MetricsRegistry()
    MetadataLoaderMetrics(registry, broker=False)
    names = registry.names()
    assert "kafka_server_MetadataLoader_HandleLoadSnapshotCount" in names
    assert not any("BrokerMetadataListener" in n or "broker_metadata_metrics" in n for n in names)


# ---------------------------------------------------------------- the Kafka fixtures

def file_batches(path: Path) -> list[Batch]:
    """Every batch of a segment or checkpoint as the Raft layer hands it over (control batches included)."""
    data = path.read_bytes()
    headers = scan_batches(data, source=str(path)).headers
    cols = decode_record_columns(data, headers, source=str(path))
    values: list[list[bytes]] = [[] for _ in range(len(headers))]
    for i in range(len(cols)):
        values[int(cols.batch[i])].append(bytes(cols.value(i)))
    out = []
    for k, h in enumerate(headers):
        is_control = bool(int(h["attributes"]) & CONTROL_MASK)
        out.append(Batch(int(h["base_offset"]), int(h["partition_leader_epoch"]), tuple(values[k]), is_control,
                         None, int(h["max_timestamp"])))
    return out


def direct_image(batches: list[Batch], provenance: MetadataProvenance, snapshot: bool) -> MetadataImage:
    """The image a plain replay of every metadata record gives (no loader)."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    for b in batches:
        if not b.is_control:
            for value in b.records:
                delta.replay(decode_metadata_record(value)[2])
    if snapshot:
        delta.finish_snapshot()
    return delta.apply(provenance)


def fixture_id(p: Any) -> str:
    return p if p == MISSING_FIXTURES else "/".join(Path(p).parts[-3:])


LOGS = fixture_params("__cluster_metadata-0/*.log")
CHECKPOINTS = fixture_params("__cluster_metadata-0/*.checkpoint")


@pytest.mark.parametrize("path", LOGS, ids=fixture_id)
@pytest.mark.parametrize("commit_size", [1, 7, 1_000_000])
def test_kafka_log_through_the_loader(path, commit_size):
    batches = file_batches(Path(path))
    last = batches[-1]
    publisher = MockPublisher()
    loader, faults = new_loader("log", last.next_offset)
    loader.install_publishers([publisher])
    for i in range(0, len(batches), commit_size):
        loader.handle_commit(tuple(batches[i:i + commit_size]))
    faults.maybe_rethrow_first()
    assert loader.failure is None
    assert loader.last_applied_offset() == last.last_offset
    expected = direct_image(batches, MetadataProvenance(last.last_offset, last.epoch, last.append_time_ms, True),
                            snapshot=False)
    assert publisher.latest_image == expected
    offsets = [image.offset for image in publisher.images]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    assert not any(image.is_empty() for image in publisher.images)


@pytest.mark.parametrize("path", CHECKPOINTS, ids=fixture_id)
def test_kafka_snapshot_through_the_loader(path):
    path = Path(path)
    offset, epoch = map(int, re.fullmatch(r"(\d{20})-(\d{10})\.checkpoint", path.name).groups())
    batches = file_batches(path)
    provenance = MetadataProvenance(offset - 1, epoch, 1234, True)
    publisher = MockPublisher()
    hwm = HighWatermark(0)
    loader, faults = new_loader("snapshot", hwm)
    loader.install_publishers([publisher])
    loader.handle_load_snapshot(header_only_snapshot(0))  # caught up: the publisher is initialized
    assert publisher.latest_image.is_empty()
    hwm.value = offset
    reader = MockSnapshotReader(provenance, batches)
    loader.handle_load_snapshot(reader)
    faults.maybe_rethrow_first()
    assert loader.last_applied_offset() == offset - 1
    image = publisher.latest_image
    assert image == direct_image(batches, provenance, snapshot=True)
    assert not image.is_empty()
    data_batches = [b for b in batches if not b.is_control]
    assert publisher.latest_snapshot_manifest.num_batches == len(data_batches)
    assert publisher.latest_snapshot_manifest.num_records == sum(len(b.records) for b in data_batches)
    # a publisher installed afterwards gets the same image, and a delta stating all of it
    late = MockPublisher("late")
    loader.install_publishers([late])
    assert late.latest_image is image
    assert late.latest_delta.apply(provenance) == image
