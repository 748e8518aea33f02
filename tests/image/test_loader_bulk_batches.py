"""Big committed batches go through the bulk path and publish the same images.

The loader folds a batch of at least ``BULK_MIN_RECORDS`` records, met with nothing pending
and no transaction record in it, by ``bulk_delta`` (topics in columns) and publishes it at
once.  What must hold: the images are those of record-at-a-time replay; the publishers see
every image in offset order; a batch with a transaction marker or a bad record takes the
record path (and the fault names its offset).
"""
from __future__ import annotations

import pytest

from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.loader import MetadataLoader, RecordingFaultHandler
from kraft_node.metadata.loader import batch_loader as bl
from kraft_node.metadata.loader import loader as loader_mod
from kraft_node.raft.messages import Batch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_records
from kraft_storage.tools import gen_metadata_log as gen


class Recorder:
    name = "recorder"

    def __init__(self):
        self.images = []

    def on_metadata_update(self, delta, image, manifest):
        self.images.append((delta, image, manifest))

    def on_controller_change(self, leader):
        pass

    def close(self):
        pass


def _generated_values(tmp_path, n: int) -> list[bytes]:
    (path,) = gen.write_log(str(tmp_path / "g.log"), n, seed=9, single_file=True, brokers=6, initial_topics=40)
    cols = decode_records(open(path, "rb").read())
    control = cols.is_control()
    return [cols.value(i) for i in range(len(cols)) if not control[i]]


def _reference(values: list[bytes]) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for v in values:
        delta.replay(decode_metadata_record(v)[2])
    return delta.apply(MetadataProvenance(len(values) - 1, 1, 0, True))


@pytest.mark.parametrize("batch_size", [bl.BULK_MIN_RECORDS, 1777, 5000])
def test_generated_log_in_big_batches_gives_the_record_at_a_time_image(tmp_path, monkeypatch, batch_size):
    values = _generated_values(tmp_path, 12_000)
    calls = []
    real = bl.bulk_delta
    monkeypatch.setattr(bl, "bulk_delta", lambda *a, **k: calls.append(1) or real(*a, **k))
    loader = MetadataLoader(high_watermark=lambda: len(values))
    rec = Recorder()
    loader.install_publishers([rec])
    for base in range(0, len(values), batch_size):
        loader.handle_commit((Batch(base, 1, tuple(values[base:base + batch_size])),))
    assert loader.failure is None
    assert calls, "no batch took the bulk path"
    ref = _reference(values)
    for part in ("features", "cluster", "topics", "configs", "client_quotas", "producer_ids", "acls", "scram",
                 "delegation_tokens"):
        assert getattr(loader.image, part) == getattr(ref, part), part
    offsets = [img.offset for _d, img, _m in rec.images]
    assert offsets == sorted(offsets) and offsets[-1] == len(values) - 1


def _topic_batch(base: int, n: int, *, begin: bool = False, bad_at: int | None = None) -> Batch:
    tid = Uuid.random()
    out = []
    if begin:
        out.append(encode_metadata_record(m.BeginTransactionRecord(name="t"), 0))
    out.append(encode_metadata_record(m.TopicRecord(name=f"t{base}", topic_id=tid), 0))
    for p in range(n):
        owner = Uuid.random() if bad_at == p else tid
        out.append(encode_metadata_record(m.PartitionRecord(partition_id=p, topic_id=owner, replicas=[1, 2],
                                                            isr=[1, 2], leader=1), 0))
    return Batch(base, 1, tuple(out))


def test_a_big_batch_with_a_transaction_marker_goes_record_at_a_time(monkeypatch):
    calls = []
    monkeypatch.setattr(bl, "bulk_delta", lambda *a, **k: calls.append(1))
    loader = MetadataLoader(high_watermark=lambda: 10_000)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    loader.handle_commit((mv,))
    b = _topic_batch(1, bl.BULK_MIN_RECORDS, begin=True)
    loader.handle_commit((b,))
    assert not calls
    # the transaction is open: its topic is not visible yet
    assert loader.image.topics.get_topic_by_name("t1") is None


def test_a_bad_record_in_a_bulk_batch_is_a_fault_naming_its_offset():
    faults = RecordingFaultHandler("loader")
    loader = MetadataLoader(high_watermark=lambda: 10_000, fault_handler=faults)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    loader.handle_commit((mv,))
    loader.handle_commit((_topic_batch(1, bl.BULK_MIN_RECORDS, bad_at=300),))
    assert loader.failure is not None
    offset, message = loader.failure
    assert offset == 1 + 1 + 300 and message == f"Error loading metadata log record from offset {offset}"
    assert loader.image.topics.get_topic_by_name("t1") is None


# -- a node catching up folds a run of small batches at once (MetadataBatchLoader.load_run_bulk)

def _in_batches(values: list[bytes], size: int, base: int = 0) -> tuple[Batch, ...]:
    return tuple(Batch(base + i, 1, tuple(values[i:i + size])) for i in range(0, len(values), size))


def test_catching_up_a_run_of_small_batches_folds_them_at_once_into_the_same_image(tmp_path, monkeypatch):
    values = _generated_values(tmp_path, 6_000)
    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda vs, *a, **k: calls.append(len(vs)) or real(vs, *a, **k))
    loader = MetadataLoader(high_watermark=lambda: len(values))
    rec = Recorder()
    loader.install_publishers([rec])
    batches = _in_batches(values, 37)  # every batch under BULK_MIN_RECORDS
    half = len(batches) // 2
    loader.handle_commit(batches[:half])  # still catching up: held, neither folded nor published
    assert calls == [] and rec.images == [] and loader.image.offset == -1
    loader.handle_commit(batches[half:])  # reaches the high watermark: both folded at once, published
    assert loader.failure is None and calls == [len(values)]
    ref = _reference(values)
    for part in ("features", "cluster", "topics", "configs", "client_quotas", "producer_ids", "acls", "scram",
                 "delegation_tokens"):
        assert getattr(loader.image, part) == getattr(ref, part), part
    (_delta, image, _manifest), = rec.images  # one publication, at the high watermark
    assert image.offset == len(values) - 1
    # caught up: later runs go batch by batch (each commit published as it comes)
    calls.clear()
    more = _in_batches([encode_metadata_record(m.NoOpRecord(), 0)] * 40, 20, base=len(values))
    loader.handle_commit(more)
    assert calls == [] and rec.images[-1][1].offset == len(values) + 39


def test_catching_up_a_run_with_a_transaction_marker_goes_batch_by_batch(monkeypatch):
    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda *a, **k: calls.append(1) or real(*a, **k))
    loader = MetadataLoader(high_watermark=lambda: 100_000)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    run = (mv, _topic_batch(1, 300), _topic_batch(302, 300, begin=True))
    loader.handle_commit(run)
    assert calls == [] and loader.failure is None
    assert loader.image.topics.get_topic_by_name("t302") is None  # inside the open transaction


def test_a_bad_record_in_a_caught_up_run_is_a_fault_naming_its_offset():
    faults = RecordingFaultHandler("loader")
    loader = MetadataLoader(high_watermark=lambda: 603, fault_handler=faults)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    run = (mv, _topic_batch(1, 300), _topic_batch(302, 300, bad_at=17))
    loader.handle_commit(run)
    assert loader.failure is not None
    offset, message = loader.failure
    assert offset == 302 + 1 + 17 and message == f"Error loading metadata log record from offset {offset}"
    assert loader.image.topics.get_topic_by_name("t1") is None  # nothing of the run was published


def test_catching_up_the_batches_after_the_last_transaction_marker_are_folded_at_once(monkeypatch):
    """The bootstrap transaction at the head of a log does not send the whole chunk record at a
    time: batches up to the one that ends the transaction go one by one, the rest in one fold."""
    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda vs, *a, **k: calls.append(len(vs)) or real(vs, *a, **k))
    loader = MetadataLoader(high_watermark=lambda: 605)
    mv = encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0)
    begin = encode_metadata_record(m.BeginTransactionRecord(name="bootstrap"), 0)
    end = encode_metadata_record(m.EndTransactionRecord(), 0)
    run = (Batch(0, 1, (begin, mv)), Batch(2, 1, (end,)), _topic_batch(3, 300), _topic_batch(304, 300))
    assert bl.MetadataBatchLoader.after_last_transaction_marker(run) == 2
    loader.handle_commit(run)
    assert loader.failure is None and calls == [602]
    assert loader.image.topics.get_topic_by_name("t3") is not None and loader.image.offset == 604
    assert len(loader.image.topics.get_topic_by_name("t304").partitions) == 300


# -- while catching up, runs short of the high watermark are held and folded together (_hold)

def test_catching_up_chunks_are_held_until_the_high_watermark_then_folded_once(tmp_path, monkeypatch):
    """A restarted broker gets its log tail in chunks of ~fetch.max.bytes; the log fold re-exports
    every touched topic whole at each apply, so the chunks are folded together, once."""
    values = _generated_values(tmp_path, 6_000)
    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda vs, *a, **k: calls.append(len(vs)) or real(vs, *a, **k))
    loader = MetadataLoader(high_watermark=lambda: len(values))
    rec = Recorder()
    loader.install_publishers([rec])
    batches = _in_batches(values, 37)
    for i in range(0, len(batches) - 10, 10):
        loader.handle_commit(batches[i:i + 10])
        assert calls == [] and loader.image.offset == -1 and loader.catching_up
    loader.handle_commit(batches[i + 10:])
    assert calls == [len(values)] and not loader.catching_up
    ref = _reference(values)
    assert loader.image.topics == ref.topics and loader.image.cluster == ref.cluster
    (_delta, image, _manifest), = rec.images
    assert image.offset == len(values) - 1


def test_held_records_are_bounded(tmp_path, monkeypatch):
    values = _generated_values(tmp_path, 6_000)
    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda vs, *a, **k: calls.append(len(vs)) or real(vs, *a, **k))
    monkeypatch.setattr(loader_mod, "HOLD_MAX_RECORDS", 1_000)
    loader = MetadataLoader(high_watermark=lambda: len(values))
    batches = _in_batches(values, 37)
    for i in range(0, len(batches), 10):
        loader.handle_commit(batches[i:i + 10])
    # each fold holds at most 1,000 records plus the chunk that would have crossed the bound (the
    # last chunk, under BULK_MIN_RECORDS, goes batch by batch)
    assert len(calls) >= 4 and max(calls) <= 1_000 + 370 and sum(calls) > len(values) - bl.BULK_MIN_RECORDS
    assert loader.failure is None and loader.image.topics == _reference(values).topics


def test_held_chunks_go_first_before_a_transaction_marker(monkeypatch):
    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda vs, *a, **k: calls.append(len(vs)) or real(vs, *a, **k))
    loader = MetadataLoader(high_watermark=lambda: 100_000)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    loader.handle_commit((mv, _topic_batch(1, 600)))
    assert calls == [] and loader.image.topics.get_topic_by_name("t1") is None  # held
    # a chunk with a transaction: the held run is folded first, then the chunk batch by batch
    loader.handle_commit((_topic_batch(602, 300, begin=True),))
    assert calls == [602] and loader.image.topics.get_topic_by_name("t1") is not None
    assert loader.image.topics.get_topic_by_name("t602") is None  # inside the open transaction


def test_a_bad_record_in_a_held_run_is_a_fault_naming_its_offset_when_folded():
    faults = RecordingFaultHandler("loader")
    loader = MetadataLoader(high_watermark=lambda: 903, fault_handler=faults)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    loader.handle_commit((mv, _topic_batch(1, 300), _topic_batch(302, 300, bad_at=17)))
    assert loader.failure is None  # held: short of the high watermark
    loader.handle_commit((_topic_batch(603, 299),))
    assert loader.failure is not None
    offset, message = loader.failure
    assert offset == 302 + 1 + 17 and message == f"Error loading metadata log record from offset {offset}"
    assert loader.image.topics.get_topic_by_name("t1") is None and loader.image.offset == -1


def test_held_chunks_are_folded_before_a_snapshot_loads(monkeypatch):
    from kraft_node.raft.messages import SnapshotId

    class Reader:
        snapshot_id = SnapshotId(2_000, 1)
        last_contained_log_time_ms = 0

        def __iter__(self):
            yield Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version",
                                                                              feature_level=22), 0),))

    calls = []
    real = bl.fold_values
    monkeypatch.setattr(bl, "fold_values", lambda vs, *a, **k: calls.append(len(vs)) or real(vs, *a, **k))
    loader = MetadataLoader(high_watermark=lambda: 100_000)
    mv = Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))
    loader.handle_commit((mv, _topic_batch(1, 600)))
    assert calls == []
    loader.handle_load_snapshot(Reader())
    # the held run went first (its image, then the snapshot's, which does not have its topic)
    assert calls == [602] and loader.failure is None
    assert loader.image.offset == 1_999 and loader.image.topics.get_topic_by_name("t1") is None
