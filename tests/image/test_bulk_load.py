"""The bulk path (``kraft_node.metadata.image.bulk``): a snapshot or a log prefix folded into the
topics image in columns must give exactly what replaying every record one at a time gives.

The reference is always the record-at-a-time path: ``TopicsDelta(image)`` (or
``MetadataDelta(image)``) with each record replayed, ``finish_snapshot()`` for a snapshot, then
``apply()``.  Equality is by value (``TopicsImage.__eq__`` compares every topic's partitions
registration by registration); errors must be the same error (type and message) for the same
input.  Inputs: Kafka's fixtures (every checkpoint and log segment), generated logs
(``kraft_storage.tools.gen_metadata_log``), Kafka's JMH layout, hand-written edge cases, and
random record sequences (hypothesis).
"""
from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fixture_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kraft_node._pure._image_bulk as pure_join
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_control import DirectoryId
from kraft_node.metadata.image import bulk
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicsDelta, TopicsImage
from kraft_storage import accel
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import MessageError, Uuid
from kraft_storage.record import decode_records
from kraft_storage.snapshot import BOOTSTRAP_SNAPSHOT_ID, RecordsSnapshotReader
from kraft_storage.tools.gen_metadata_log import write_log

FIXTURE_FILES = fixture_params("*.log", "*.checkpoint")
PROVENANCE = MetadataProvenance(100, 4, 2000, True)
TOPIC_CONFIG = 2  # ConfigResource.Type.TOPIC


def uid(n: int) -> Uuid:
    return Uuid(bytes([0xA0, n]) + bytes(13) + bytes([n & 0xFF]))


DIR = [Uuid(bytes([0xD0, b]) + bytes(14)) for b in range(8)]


def encode(record: Any, version: int | None = None) -> bytes:
    """The framed value of ``record``: at ``version``, else the lowest version that carries it."""
    if version is not None:
        return encode_metadata_record(record, version)
    for v in (0, 1, 2):
        try:
            value = encode_metadata_record(record, v)
        except MessageError:
            continue
        if decode_metadata_record(value)[2] == record:
            return value
    raise AssertionError(f"no version carries {record!r}")


def topic(n: int, name: str | None = None) -> Any:
    return m.TopicRecord(name=name or f"t{n}", topic_id=uid(n))


def partition(n: int, pid: int, replicas: tuple[int, ...] = (1, 2, 3), **kw: Any) -> Any:
    fields: dict[str, Any] = dict(partition_id=pid, topic_id=uid(n), replicas=list(replicas), isr=list(replicas),
                                  removing_replicas=[], adding_replicas=[], leader=replicas[0], leader_epoch=pid,
                                  partition_epoch=pid + 1)
    fields.update(kw)
    return m.PartitionRecord(**fields)


# ---------------------------------------------------------------------------------------------
# The reference and the comparison
# ---------------------------------------------------------------------------------------------

def reference_topics(values: list[bytes], image: TopicsImage = TopicsImage.EMPTY,
                     snapshot: bool = False) -> tuple[Any, list[tuple[int, str]]]:
    """(image or the exception raised, removed (index, name)) of the record-at-a-time path."""
    delta = TopicsDelta(image)
    removed: list[tuple[int, str]] = []
    try:
        for i, value in enumerate(values):
            record = decode_metadata_record(value)[2]
            if record.API_KEY in bulk.TOPIC_TYPES:
                name = delta.replay(record)
                if record.API_KEY == bulk.REMOVE_TOPIC_RECORD:
                    removed.append((i, name))
        if snapshot:
            delta.finish_snapshot()
        return delta.apply(), removed
    except Exception as exc:  # the bulk path must raise the same
        return exc, removed


def assert_same_topics(values: list[bytes], image: TopicsImage = TopicsImage.EMPTY,
                       snapshot: bool = False) -> bulk.TopicsLoad | None:
    expected, removed = reference_topics(values, image, snapshot)
    if isinstance(expected, Exception):
        with pytest.raises(bulk.BulkLoadError) as info:
            bulk.fold_topics(values, image, snapshot=snapshot)
        assert type(info.value.cause) is type(expected)
        assert str(info.value.cause) == str(expected)
        return None
    load = bulk.fold_topics(values, image, snapshot=snapshot)
    assert load.image == expected
    assert list(load.removed) == removed
    check_blocks(load.image)
    return load


def check_blocks(image: TopicsImage) -> None:
    """Every block the bulk path built passes PartitionBlock.check with its topics' row ranges
    (the bulk path builds blocks without calling it: the invariants hold by construction)."""
    ranges: dict[int, tuple[Any, list[tuple[int, int]]]] = {}
    for t in image.topics_by_id.values():
        block = t.partitions.block
        if block is not None:
            ranges.setdefault(id(block), (block, []))[1].append((t.partitions.start, t.partitions.stop))
    for block, spans in ranges.values():
        block.check(spans)


def reference_image(values: list[bytes], image: MetadataImage = MetadataImage.EMPTY,
                    snapshot: bool = False) -> MetadataImage:
    delta = MetadataDelta(image)
    for value in values:
        delta.replay(decode_metadata_record(value)[2])
    if snapshot:
        delta.finish_snapshot()
    return delta.apply(PROVENANCE)


def assert_same_image(source: Any, values: list[bytes], image: MetadataImage = MetadataImage.EMPTY,
                      snapshot: bool = False) -> None:
    """``load_image_bulk(source)`` equals the MetadataDelta path over ``values`` (the same
    records), or both raise the same error."""
    try:
        expected: Any = reference_image(values, image, snapshot)
    except Exception as exc:
        expected = exc
    if isinstance(expected, Exception):
        with pytest.raises(bulk.BulkLoadError) as info:
            bulk.load_image_bulk(source, image, provenance=PROVENANCE, snapshot=snapshot)
        assert type(info.value.cause) is type(expected)
        assert str(info.value.cause) == str(expected)
    else:
        assert bulk.load_image_bulk(source, image, provenance=PROVENANCE, snapshot=snapshot) == expected


def fixture_values(path: Path) -> tuple[list[bytes], bool]:
    """The data records' values of a checkpoint (a snapshot) or a log segment (control records left out)."""
    if path.suffix == ".checkpoint":
        with RecordsSnapshotReader(path) as reader:
            cols = reader.records()
            return [v for v in cols.values() if v is not None], True
    cols = decode_records(path.read_bytes(), source=str(path))
    control = cols.is_control()
    return [cols.value(i) or b"" for i in range(len(cols)) if not control[i]], False


def fixture_id(p: Any) -> str:
    return "/".join(Path(p).parts[-3:]) if isinstance(p, Path) else str(p)


def jmh_values(topics: int, partitions: int = 10, rf: int = 3, version: int = 0) -> list[bytes]:
    """Kafka's TopicsImage JMH layout (leader round-robin, replicas leader..leader+2 mod brokers)."""
    brokers = max(3, topics * partitions * rf // 10000 // 3 * 3)
    out: list[bytes] = []
    leader = 0
    for t in range(topics):
        out.append(encode(topic(t), 0))
        for p in range(partitions):
            replicas = tuple((leader + j) % brokers for j in range(rf))
            out.append(encode(partition(t, p, replicas, leader_epoch=0, partition_epoch=0), version))
            leader = (leader + 1) % brokers
    return out


# ---------------------------------------------------------------------------------------------
# The join kernel and its twin
# ---------------------------------------------------------------------------------------------

def test_join_values_native_and_twin_agree() -> None:
    rng = random.Random(7)
    values: list[Any] = [bytes(rng.randrange(256) for _ in range(rng.randrange(40))) for _ in range(300)]
    values[5] = bytearray(b"abc")
    values[9] = memoryview(b"defgh")
    impls = [pure_join]
    if accel.native_available("_image_bulk", "kraft_node"):
        import kraft_node._native._image_bulk as native_join
        impls.append(native_join)
    expected = b"".join(bytes(v) for v in values)
    lens = [len(bytes(v)) for v in values]
    for impl in impls:
        data, pos, lengths = impl.join_values(values)
        assert data == expected
        assert pos.dtype == np.int64 and lengths.dtype == np.int32
        assert lengths.tolist() == lens
        assert pos.tolist() == np.concatenate(([0], np.cumsum(lens)[:-1])).tolist()
        assert impl.join_values(tuple(values))[0] == expected
        empty = impl.join_values([])
        assert empty[0] == b"" and len(empty[1]) == 0 and len(empty[2]) == 0
        with pytest.raises(TypeError, match="value 1 is a int"):
            impl.join_values([b"x", 5])
        with pytest.raises(TypeError, match="list or tuple"):
            impl.join_values(iter([b"x"]))


def test_the_kernel_in_use_is_the_process_choice() -> None:
    native = accel.WANT_NATIVE and accel.native_available("_image_bulk", "kraft_node")
    assert bulk.IMPLEMENTATION == ("kraft_node._native._image_bulk" if native else "kraft_node._pure._image_bulk")


# ---------------------------------------------------------------------------------------------
# Snapshots and logs: Kafka's fixtures, generated logs, the JMH layout
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_id)
def test_kafka_fixtures_bulk_equals_record_at_a_time(path: Path) -> None:
    values, snapshot = fixture_values(Path(path))
    load = assert_same_topics(values, snapshot=snapshot)
    assert load is not None and load.fell_back is None
    expected = reference_image(values, snapshot=snapshot)
    assert bulk.load_image_bulk(values, provenance=PROVENANCE, snapshot=snapshot) == expected
    # the columnar input of the same file: no bytes object per record
    if Path(path).suffix == ".checkpoint":
        with RecordsSnapshotReader(Path(path)) as reader:
            cols = reader.records()
            assert bulk.load_image_bulk(cols, provenance=PROVENANCE, snapshot=True) == expected
    else:
        cols = decode_records(Path(path).read_bytes())
        assert bulk.load_image_bulk(cols, provenance=PROVENANCE) == expected


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_id)
def test_kafka_fixture_image_written_back_loads_the_same(path: Path) -> None:
    """A fixture's image written as snapshot records and bulk-loaded again is the same image
    (every topic folds in columns: a written snapshot has no relative record)."""
    values, snapshot = fixture_values(Path(path))
    image = bulk.load_image_bulk(values, provenance=PROVENANCE, snapshot=snapshot)
    written = [r.encode() for r in _image_records(image)]
    load = bulk.fold_topics(written, snapshot=True)
    assert load.replayed == 0 and load.cut == len(written)
    assert load.image == image.topics
    assert bulk.load_image_bulk(written, provenance=PROVENANCE, snapshot=True) == image


@pytest.mark.parametrize("path", fixture_params("*.checkpoint"), ids=fixture_id)
def test_a_checkpoint_file_loads_with_its_provenance(path: Path) -> None:
    with RecordsSnapshotReader(Path(path)) as reader:
        sid, ts = reader.snapshot_id or BOOTSTRAP_SNAPSHOT_ID, reader.last_contained_log_timestamp
    values, _ = fixture_values(Path(path))
    delta = MetadataDelta(MetadataImage.EMPTY)
    for value in values:
        delta.replay(decode_metadata_record(value)[2])
    delta.finish_snapshot()
    expected = delta.apply(MetadataProvenance(sid.end_offset - 1, sid.epoch, ts, True))
    image = bulk.load_snapshot_file(path)
    assert image == expected and image.provenance == expected.provenance


def _image_records(image: MetadataImage) -> list[Any]:
    from kraft_node.metadata.image.metadata_image import image_records
    return image_records(image)


def test_fixture_snapshot_over_a_log_image_drops_what_it_does_not_restate(fixtures_dir: Path) -> None:
    """A checkpoint loaded over the image of another cluster's log (snapshot=True): the same as
    MetadataDelta(image) + records + finish_snapshot."""
    snap = next(iter(sorted(fixtures_dir.glob("kafka-4.2*/__cluster_metadata-0/*.checkpoint"))))
    log = next(iter(sorted(fixtures_dir.glob("kafka-3.7*/__cluster_metadata-0/*.log"))))
    base_values, _ = fixture_values(log)
    base = reference_image(base_values)
    values, _ = fixture_values(snap)
    assert_same_topics(values, base.topics, snapshot=True)
    assert bulk.load_image_bulk(values, base, provenance=PROVENANCE, snapshot=True) == \
        reference_image(values, base, snapshot=True)


@pytest.mark.parametrize("seed", [1, 2])
def test_generated_log_bulk_equals_record_at_a_time(tmp_path: Path, seed: int) -> None:
    """A generated log: its bootstrap topics fold in columns, everything from the first
    PartitionChangeRecord on is handed to TopicsDelta."""
    files = write_log(str(tmp_path), 6000, seed=seed, brokers=9, initial_topics=40)
    cols = decode_records(Path(files[0]).read_bytes())
    control = cols.is_control()
    values = [cols.value(i) or b"" for i in range(len(cols)) if not control[i]]
    load = assert_same_topics(values)
    assert load is not None
    assert load.bulk_topics == 40 and load.bulk_partitions > 40
    assert 0 < load.cut < len(values) and load.replayed > 0 and load.fell_back is None
    assert_same_image(cols, values)


def test_jmh_layout_folds_whole_into_one_block() -> None:
    values = jmh_values(120, partitions=10)
    load = assert_same_topics(values)
    assert load is not None
    assert (load.cut, load.bulk_topics, load.bulk_partitions, load.replayed) == (len(values), 120, 1200, 0)
    topics = list(load.image.topics_by_id.values())
    blocks = {id(t.partitions.block) for t in topics}
    assert len(blocks) == 1  # no object per partition: one block, rows per topic
    assert all(not t.partitions.overrides for t in topics)
    block = topics[0].partitions.block
    assert block is not None and len(block) == 1200
    assert block.nbytes / len(block) < 80  # v0, RF 3: 4 int32 + int8 + 7 offsets + 6 replica/ISR ints
    assert load.image.get_partition(uid(7), 3) is not None
    assert load.image.get_partition(uid(7), 3).replicas == tuple(load.image.partition_replicas(uid(7), 3))


@pytest.mark.parametrize("version", [0, 1, 2])
def test_every_partition_record_version(version: int) -> None:
    records = [topic(1), topic(2, "b")]
    for p in range(5):
        kw: dict[str, Any] = {}
        if version >= 1:
            kw["directories"] = [DIR[(p + j) % 8] for j in range(3)] if p % 2 else [DirectoryId.MIGRATING] * 3
        if version >= 2 and p == 3:
            kw["eligible_leader_replicas"] = [2]
            kw["last_known_elr"] = [3]
        records.append(partition(1 + p % 2, p, leader_recovery_state=p % 2, **kw))
    values = [encode(r, 0) for r in records[:2]] + [encode(r, version) for r in records[2:]]
    load = assert_same_topics(values)
    assert load is not None and load.replayed == 0


# ---------------------------------------------------------------------------------------------
# Order, duplicates, relative records
# ---------------------------------------------------------------------------------------------

def test_partitions_out_of_order_are_grouped_and_the_last_record_wins() -> None:
    records = [topic(1), topic(2), topic(3)]
    rng = random.Random(3)
    parts = [partition(t, p, (t, t + 1, t + 2), leader_epoch=k) for k, (t, p) in
             enumerate((t, p) for t in (1, 2) for p in (0, 1, 2, 5, 9))]
    rng.shuffle(parts)
    parts.append(partition(2, 5, (7, 8, 9), leader_epoch=99))  # replaces the earlier record of 2:5
    values = [encode(r) for r in records + parts]
    load = assert_same_topics(values)
    assert load is not None and load.replayed == 0
    check_blocks(load.image)
    assert load.image.get_partition(uid(2), 5).replicas == (7, 8, 9)
    assert len(load.image.get_topic(uid(3)).partitions) == 0
    assert list(load.image.get_topic(uid(1)).partitions) == [0, 1, 2, 5, 9]


def test_other_records_between_topic_records_are_skipped() -> None:
    records = [m.FeatureLevelRecord(name="metadata.version", feature_level=21), topic(1),
               m.ConfigRecord(resource_type=TOPIC_CONFIG, resource_name="t1", name="x", value="1"),
               partition(1, 0), m.NoOpRecord(), partition(1, 1)]
    values = [encode(r) for r in records]
    load = assert_same_topics(values)
    assert load is not None and (load.bulk_topics, load.bulk_partitions, load.replayed) == (1, 2, 0)
    assert bulk.load_image_bulk(values, provenance=PROVENANCE) == reference_image(values)


def test_relative_records_are_handed_to_the_topics_delta() -> None:
    records = [topic(1), partition(1, 0), partition(1, 1), topic(2), partition(2, 0),
               m.PartitionChangeRecord(topic_id=uid(1), partition_id=1, isr=[1, 2], leader=2),
               topic(3), partition(3, 0),
               m.RemoveTopicRecord(topic_id=uid(2)),
               m.ClearElrRecord(topic_name="t3")]
    values = [encode(r) for r in records]
    load = assert_same_topics(values)
    assert load is not None
    assert (load.cut, load.bulk_topics, load.bulk_partitions, load.replayed) == (5, 2, 3, 5)
    assert load.removed == ((8, "t2"),)
    reg = load.image.get_partition(uid(1), 1)
    assert (reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch) == ((1, 2), 2, 2, 3)


def test_remove_topic_drops_its_configs_where_it_stands() -> None:
    """The configs of a removed topic go at the RemoveTopicRecord: a config set after a topic of
    the same name was created again stays."""
    cfg = lambda v: m.ConfigRecord(resource_type=TOPIC_CONFIG, resource_name="t1", name="retention.ms",  # noqa: E731
                                   value=v)
    records = [topic(1), partition(1, 0), cfg("1"), m.RemoveTopicRecord(topic_id=uid(1)),
               topic(5, "t1"), partition(5, 0), cfg("2")]
    values = [encode(r) for r in records]
    expected = reference_image(values)
    assert bulk.load_image_bulk(values, provenance=PROVENANCE) == expected
    assert bulk.load_image_bulk(values[:4], provenance=PROVENANCE) == reference_image(values[:4])


def test_topics_created_again_after_removal_fold_without_falling_back() -> None:
    records = [topic(1, "a"), partition(1, 0), partition(1, 1),
               m.RemoveTopicRecord(topic_id=uid(1)), topic(2, "a"), partition(2, 0),
               m.RemoveTopicRecord(topic_id=uid(2)), topic(1, "b"), partition(1, 4)]
    load = assert_same_topics([encode(r) for r in records])
    assert load is not None and load.fell_back is None and load.bulk_topics == 1


def test_a_log_over_an_image_shares_its_untouched_topics() -> None:
    base = bulk.load_topics_bulk([encode(r) for r in (topic(1), partition(1, 0), topic(2), partition(2, 0))])
    values = [encode(r) for r in (topic(3), partition(3, 0), partition(3, 1),
                                  m.PartitionChangeRecord(topic_id=uid(1), partition_id=0, leader=2))]
    load = assert_same_topics(values, base)
    assert load is not None and load.fell_back is None and load.bulk_topics == 1
    assert load.image.get_topic(uid(2)) is base.get_topic(uid(2))


# ---------------------------------------------------------------------------------------------
# Where the bulk path cannot fold: errors, and the record-at-a-time fall-back
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["partition before its topic", "unknown topic", "directories do not pair up",
                                  "unknown leader recovery state", "remove an unknown topic"])
def test_errors_are_the_record_at_a_time_errors(case: str) -> None:
    records = [topic(1), partition(1, 0)]
    if case == "partition before its topic":
        records += [partition(2, 0), topic(2)]
    elif case == "unknown topic":
        records += [partition(9, 0)]
    elif case == "directories do not pair up":
        records += [partition(1, 1, directories=[DIR[1]])]
    elif case == "unknown leader recovery state":
        records += [partition(1, 1, leader_recovery_state=5)]
    else:
        records += [m.RemoveTopicRecord(topic_id=uid(4))]
    values = [encode(r) for r in records]
    assert isinstance(reference_topics(values)[0], ReplayError)
    assert_same_topics(values)
    with pytest.raises(bulk.BulkLoadError, match=r"^record 2: ReplayError: "):
        bulk.fold_topics(values)


def test_a_record_that_does_not_decode_is_named() -> None:
    values = [encode(topic(1)), encode(partition(1, 0))]
    values.append(values[1][:20])  # a truncated PartitionRecord
    with pytest.raises(bulk.BulkLoadError, match=r"^record 2: MessageError"):
        bulk.fold_topics(values)
    with pytest.raises(bulk.BulkLoadError, match=r"^record 1: MessageError"):
        bulk.fold_topics([values[0], b"\x07\x00"])  # not a metadata record frame
    cols_error = pytest.raises(bulk.BulkLoadError, match=r"offset")
    with cols_error:
        bulk.fold_topics(bulk.FramedRecords(*_framed_with_offsets(values)))


def _framed_with_offsets(values: list[bytes]) -> tuple[Any, ...]:
    fr = bulk.framed_records(values)
    return (fr.data, fr.value_pos, fr.value_len, fr.api_key, fr.version, fr.body_pos, fr.body_end,
            np.arange(1000, 1000 + len(values), dtype=np.int64))


@pytest.mark.parametrize("case", ["same id twice", "same name twice", "suffix renames a prefix topic",
                                  "suffix reuses a prefix name", "clear elr of a removed prefix topic",
                                  "prefix names a topic of the image"])
def test_orders_that_fall_back_give_the_record_at_a_time_result(case: str) -> None:
    base = TopicsImage.EMPTY
    records: list[Any] = [topic(1, "a"), partition(1, 0)]
    if case == "same id twice":
        records += [topic(2), topic(1, "a"), partition(1, 3)]
    elif case == "same name twice":
        records += [topic(2, "a")]
    elif case == "suffix renames a prefix topic":
        records += [m.PartitionChangeRecord(topic_id=uid(1), partition_id=0, leader=2), topic(1, "b")]
    elif case == "suffix reuses a prefix name":
        records += [m.PartitionChangeRecord(topic_id=uid(1), partition_id=0, leader=2), topic(2, "a")]
    elif case == "clear elr of a removed prefix topic":
        records += [m.RemoveTopicRecord(topic_id=uid(1)), m.ClearElrRecord(topic_name="a")]
    else:
        base = bulk.load_topics_bulk([encode(topic(1, "a")), encode(partition(1, 7))])
    values = [encode(r) for r in records]
    assert_same_topics(values, base)
    expected = reference_topics(values, base)[0]
    if not isinstance(expected, Exception):
        assert bulk.fold_topics(values, base).fell_back is not None


def test_snapshot_over_an_image_that_renames_a_topic_falls_back() -> None:
    base = bulk.load_topics_bulk([encode(r) for r in (topic(1, "a"), partition(1, 0), topic(2, "c"))])
    values = [encode(r) for r in (topic(1, "b"), partition(1, 0))]
    assert_same_topics(values, base, snapshot=True)
    same = [encode(r) for r in (topic(1, "a"), partition(1, 1), topic(3, "c"))]
    load = assert_same_topics(same, base, snapshot=True)
    assert load is not None and load.fell_back is None


# ---------------------------------------------------------------------------------------------
# Random record sequences
# ---------------------------------------------------------------------------------------------

_NAMES = ["a", "b", "c", "d"]


@st.composite
def topic_records(draw: Any) -> list[Any]:
    """A random run of topic records over a few ids, names and partitions: mostly valid (the
    controller's kind), sometimes not (an unknown topic, a rename, directories that do not pair up)."""
    out: list[Any] = []
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["topic"] * 2 + ["partition"] * 6 + ["change"] * 2 + ["remove", "clear", "other"]))
        t = draw(st.integers(1, 4))
        pid = draw(st.integers(0, 4))
        if kind == "topic":
            out.append(topic(t, draw(st.sampled_from(_NAMES + [f"t{t}"] * 4))))
        elif kind == "partition":
            replicas = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
            kw: dict[str, Any] = dict(leader_recovery_state=draw(st.sampled_from([0, 0, 0, 1])))
            dirs = draw(st.sampled_from(["none", "none", "real", "bad"]))
            if dirs == "real":
                kw["directories"] = [DIR[b % 8] for b in replicas]
            elif dirs == "bad":
                kw["directories"] = [DIR[0]] * (len(replicas) + 1)
            if draw(st.booleans()):
                kw["eligible_leader_replicas"] = [replicas[-1]]
            out.append(partition(t, pid, replicas, **kw))
        elif kind == "change":
            out.append(m.PartitionChangeRecord(topic_id=uid(t), partition_id=pid,
                                               isr=draw(st.sampled_from([None, [1], [1, 2]])),
                                               leader=draw(st.sampled_from([-2, -1, 1, 2]))))
        elif kind == "remove":
            out.append(m.RemoveTopicRecord(topic_id=uid(t)))
        elif kind == "clear":
            out.append(m.ClearElrRecord(topic_name=draw(st.sampled_from(["", "a", f"t{t}"]))))
        else:
            out.append(m.ConfigRecord(resource_type=TOPIC_CONFIG, resource_name=draw(st.sampled_from(_NAMES)),
                                      name="x", value="1"))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topic_records(), st.integers(0, 3))
def test_random_topic_records_bulk_equals_record_at_a_time(records: list[Any], base_records: int) -> None:
    values = [encode(r) for r in records]
    assert_same_topics(values)
    # over a non-empty image: as a log and as a snapshot
    base = bulk.load_topics_bulk([encode(r) for r in (topic(1, "a"), partition(1, 0), topic(3), partition(3, 2),
                                                      topic(9, "z"))][:base_records + 2])
    assert_same_topics(values, base)
    assert_same_topics(values, base, snapshot=True)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topic_records())
def test_random_records_whole_image_bulk_equals_record_at_a_time(records: list[Any]) -> None:
    values = [encode(r) for r in records]
    assert_same_image(values, values)
