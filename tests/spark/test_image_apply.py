"""The metadata log folded into an image on Spark (kraft_node.metadata.image.spark_apply).

Every image is checked against the one-process fold (``log_fold.replay_log``) and against the
reference path, every record decoded and replayed one at a time into one ``MetadataDelta``.
One SparkSession (local[2]) for the module; the logs are a few hundred thousand records at most.
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, fixture_params
from support.metadata_history import random_history
from support.metadata_history import write_log as write_history

from kraft_node.metadata.image import log_fold
from kraft_node.metadata.image import spark_apply as sa
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.writer import ImageWriterOptions, RecordListWriter
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_records, scan_batches
from kraft_storage.snapshot.files import SnapshotId
from kraft_storage.snapshot.records import RecordsSnapshotWriter
from kraft_storage.tools.gen_metadata_log import write_log

N_GEN = 200_000


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    """A local[2] session; an already running session (another module's) is reused as it is."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession
    paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    running = SparkContext._active_spark_context is not None
    session = (SparkSession.builder.master("local[2]").appName("kraft-image-apply-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if not running:
        session.stop()


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("image_apply_gen")
    write_log(str(d), N_GEN, seed=5, segment_bytes=2_500_000, brokers=8, initial_topics=60)
    return d


def one_at_a_time(path: str | Path, base: MetadataImage = MetadataImage.EMPTY, start_offset: int = 0,
                  provenance: Any = None) -> MetadataImage:
    """The reference: every record of every segment decoded and replayed into one MetadataDelta."""
    delta = MetadataDelta(base)
    for name in log_fold._segment_files(path):
        cols = decode_records(Path(name).read_bytes())
        control = cols.is_control()
        for i in range(len(cols)):
            if not control[i] and int(cols.offset[i]) >= start_offset:
                delta.replay(decode_metadata_record(cols.value(i))[2])
    return delta.apply(provenance)


# ---------------------------------------------------------------------------------------------
# The fold on Spark = the one-process fold = one record at a time
# ---------------------------------------------------------------------------------------------

def test_a_generated_log_folded_on_spark_in_many_splits(spark: Any, gen_dir: Path) -> None:
    plan = sa.plan_fold(gen_dir, splits=9)
    segments = os.listdir(gen_dir / "__cluster_metadata-0")
    assert len(segments) > 1 and len(plan.splits) > len(segments)  # segments cut into byte ranges
    assert [s.min_offset for s in plan.splits] == sorted(s.min_offset for s in plan.splits)
    result = sa.spark_fold(spark, plan)
    assert result.records == N_GEN and result.splits == len(plan.splits)
    assert len(result.task_seconds) == result.splits and result.delta_bytes > 0
    whole = log_fold.replay_log(gen_dir)
    assert result.image == whole
    assert result.image.provenance.last_contained_offset == N_GEN - 1
    assert result.image == one_at_a_time(gen_dir, provenance=whole.provenance)
    assert result.image.topics.num_partitions() > 1000 and len(result.image.cluster.brokers) == 8


def test_the_default_plan_gives_each_core_two_tasks(spark: Any, gen_dir: Path) -> None:
    result = sa.spark_fold(spark, gen_dir)
    assert result.splits >= 2 * spark.sparkContext.defaultParallelism - 1
    assert result.image == log_fold.replay_log(gen_dir)


@pytest.mark.parametrize("splits", [1, 2, 5, 16])
def test_every_split_count_composes_exactly_without_spark(gen_dir: Path, splits: int) -> None:
    assert sa.fold_splits(sa.plan_fold(gen_dir, splits=splits)) == log_fold.replay_log(gen_dir)


@pytest.mark.parametrize("seed", range(4))
def test_random_controller_histories_cut_into_many_splits(spark: Any, tmp_path: Path, seed: int) -> None:
    """Histories with every kind of operation (topic deletions, reassignments, ELR, fencing,
    transactions, leader changes), in several segments cut into small byte ranges."""
    batches = random_history(seed, events=300)
    write_history(tmp_path, batches, records_per_segment=400)
    plan = sa.plan_fold(tmp_path, splits=12)
    assert len(plan.splits) >= 6
    result = sa.spark_fold(spark, plan)
    whole = log_fold.replay_log(tmp_path)
    assert result.image == whole
    assert result.image == one_at_a_time(tmp_path, provenance=whole.provenance)


@pytest.mark.parametrize("path", fixture_params("*.log"))
def test_every_kafka_fixture_log(spark: Any, path: Path) -> None:
    plan = sa.plan_fold(path, splits=4)
    assert len(plan.splits) >= 2
    result = sa.spark_fold(spark, plan)
    whole = log_fold.replay_log(path)
    assert result.image == whole and not whole.is_empty()
    assert result.image == one_at_a_time(path, provenance=whole.provenance)


# ---------------------------------------------------------------------------------------------
# A log that starts after a snapshot
# ---------------------------------------------------------------------------------------------

def _after_snapshot(src: Path, out: Path, batch: int, into: int) -> int:
    """``out``/__cluster_metadata-0: a snapshot of the first records of ``src`` up to ``into``
    records into batch number ``batch`` (its end offset), written from the image of those
    records, and the log from that batch on (the segment named by that batch's base offset).
    Returns the snapshot's end offset."""
    (segment,) = log_fold._segment_files(src)
    data = Path(segment).read_bytes()
    h = scan_batches(data).headers
    base, pos = int(h["base_offset"][batch]), int(h["position"][batch])
    end = base + into
    d = out / "__cluster_metadata-0"
    d.mkdir(parents=True)
    (d / f"{base:020d}.log").write_bytes(data[pos:])
    prefix = out / "prefix.log"
    prefix.write_bytes(data[:pos] + data[pos:int(h["position"][batch + 1])])
    image = _prefix_image(prefix, end)
    version = image.metadata_version()
    assert version is not None
    writer = RecordListWriter()
    image.write(writer, ImageWriterOptions(version))
    with RecordsSnapshotWriter.create(d, SnapshotId(end, int(h["partition_leader_epoch"][batch]))) as snap:
        snap.append_framed([(r.message, r.version) for r in writer.records])
        snap.freeze()
    prefix.unlink()
    return end


def _prefix_image(path: Path, end: int) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    cols = decode_records(path.read_bytes())
    control = cols.is_control()
    for i in range(len(cols)):
        if not control[i] and int(cols.offset[i]) < end:
            delta.replay(decode_metadata_record(cols.value(i))[2])
    return delta.apply(None)


@pytest.mark.parametrize("into", [0, 3])
def test_a_log_that_starts_after_a_snapshot(spark: Any, tmp_path: Path, into: int) -> None:
    src = tmp_path / "src"
    write_log(str(src), 60_000, seed=11, brokers=5, initial_topics=30)
    end = _after_snapshot(src, tmp_path / "cut", batch=120, into=into)
    plan = sa.plan_fold(tmp_path / "cut", splits=3)
    assert plan.start_offset == end and plan.snapshot is not None and plan.snapshot.endswith(".checkpoint")
    result = sa.spark_fold(spark, plan)
    whole = log_fold.replay_log(src)
    assert result.records == 60_000 - end
    assert result.image == whole
    assert sa.fold_splits(plan) == whole


def test_a_log_starting_past_every_snapshot_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_log(str(src), 20_000, seed=2)
    (segment,) = log_fold._segment_files(src)
    data = Path(segment).read_bytes()
    h = scan_batches(data).headers
    d = tmp_path / "cut" / "__cluster_metadata-0"
    d.mkdir(parents=True)
    (d / f"{int(h['base_offset'][10]):020d}.log").write_bytes(data[int(h["position"][10]):])
    with pytest.raises(sa.SparkFoldError, match=r"starts at offset \d+ and no snapshot ends at or after it"):
        sa.plan_fold(tmp_path / "cut")


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

def test_a_damaged_batch_names_its_split(spark: Any, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_log(str(src), 30_000, seed=4)
    (segment,) = log_fold._segment_files(src)
    data = bytearray(Path(segment).read_bytes())
    h = scan_batches(bytes(data)).headers
    data[int(h["position"][200]) + 70] ^= 0xFF  # a byte of a record body: the batch's CRC fails
    Path(segment).write_bytes(bytes(data))
    plan = sa.plan_fold(src, splits=4)
    with pytest.raises(sa.SparkFoldError, match=r"split \d+ \(.*00000000000000000000\.log bytes \[\d+, \d+\)\).*"
                                                r"(?i:crc)"):
        sa.spark_fold(spark, plan)
    with pytest.raises(sa.SparkFoldError, match="00000000000000000000.log bytes"):
        sa.fold_splits(plan)


def test_a_refused_record_is_reported_at_its_offset(spark: Any, tmp_path: Path) -> None:
    from kraft_storage.messages import metadata as m
    from kraft_storage.messages.framing import encode_metadata_record
    from kraft_storage.record import build_batch
    src = tmp_path / "src"
    write_log(str(src), 20_000, seed=6)
    (segment,) = log_fold._segment_files(src)
    data = Path(segment).read_bytes()
    h = scan_batches(data).headers
    nxt = int(h["base_offset"][-1] + h["last_offset_delta"][-1]) + 1
    bad = m.PartitionChangeRecord(topic_id=Uuid.random(), partition_id=0, leader=1)
    value = encode_metadata_record(bad, 0)
    Path(segment).write_bytes(data + build_batch([(None, value)], base_offset=nxt, partition_leader_epoch=1))
    with pytest.raises(log_fold.LogFoldError) as info:
        sa.spark_fold(spark, sa.plan_fold(src, splits=3))
    assert info.value.offset == nxt and "Unable to find partition" in str(info.value)


def test_nothing_to_fold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        sa.plan_fold(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(sa.SparkFoldError, match="no log segment"):
        sa.plan_fold(tmp_path / "empty")
    with pytest.raises(ValueError, match="splits must be at least 1"):
        sa.plan_fold(_one_segment(tmp_path), splits=0)


def test_a_brokers_log_dir_folds_its_metadata_partition(tmp_path: Path) -> None:
    src = _one_segment(tmp_path)
    (segment,) = log_fold._segment_files(src)
    logdir = tmp_path / "logdir"
    for part in ("__cluster_metadata-0", "orders-0"):
        (logdir / part).mkdir(parents=True)
        (logdir / part / "00000000000000000000.log").write_bytes(Path(segment).read_bytes())
    plan = sa.plan_fold(logdir, splits=2)
    assert plan.splits and all("__cluster_metadata-0" in s.path for s in plan.splits)
    assert sa.fold_splits(plan) == log_fold.replay_log(src)
    (logdir / "__cluster_metadata-0" / "00000000000000000000.log").rename(logdir / "orders-0" / "x.txt")
    (logdir / "payments-0").mkdir()
    (logdir / "payments-0" / "00000000000000000000.log").write_bytes(Path(segment).read_bytes())
    with pytest.raises(sa.SparkFoldError, match="segments of 2 logs"):
        sa.plan_fold(logdir)


def _one_segment(tmp_path: Path) -> Path:
    d = tmp_path / "one"
    write_log(str(d), 2_000, seed=1)
    return d


# ---------------------------------------------------------------------------------------------
# The image as DataFrames
# ---------------------------------------------------------------------------------------------

def test_the_image_as_dataframes(spark: Any, gen_dir: Path) -> None:
    image = log_fold.replay_log(gen_dir)
    dfs = sa.image_dataframes(spark, image, views=True)
    topics = image.topics
    assert dfs["topics"].count() == len(topics.topics_by_id)
    assert dfs["partitions"].count() == topics.num_partitions()
    assert dfs["brokers"].count() == len(image.cluster.brokers)
    n_configs = sum(len(c.data) for c in image.configs.resource_data.values())
    assert dfs["configs"].count() == n_configs > 0
    # a few partitions, every column, against the image's registrations
    rng = np.random.default_rng(3)
    names = sorted(topics.topics_by_name)
    for name in [names[int(i)] for i in rng.choice(len(names), 5, replace=False)]:
        topic = topics.get_topic_by_name(name)
        assert topic is not None
        rows = dfs["partitions"].where(f"topic = '{name}'").orderBy("partition").collect()
        assert [r.partition for r in rows] == sorted(topic.partitions)
        for r in rows:
            reg = topic.partitions[r.partition]
            assert r.topic_id == str(topic.topic_id)
            assert (r.leader, r.leader_epoch, r.partition_epoch, r.leader_recovery_state) == (
                reg.leader, reg.leader_epoch, reg.partition_epoch, int(reg.leader_recovery_state))
            assert (tuple(r.replicas), tuple(r.isr), tuple(r.elr), tuple(r.last_known_elr)) == (
                tuple(reg.replicas), tuple(reg.isr), tuple(reg.elr), tuple(reg.last_known_elr))
            assert (tuple(r.removing_replicas), tuple(r.adding_replicas)) == (
                tuple(reg.removing_replicas), tuple(reg.adding_replicas))
            assert tuple(r.directories) == tuple(str(d) for d in reg.directories)
        t = dfs["topics"].where(f"name = '{name}'").first()
        assert (t.topic_id, t.partitions) == (str(topic.topic_id), len(topic.partitions))
    b = image.cluster.brokers[3]
    row = dfs["brokers"].where("id = 3").first()
    assert (row.epoch, row.fenced, row.in_controlled_shutdown, row.rack) == (
        b.epoch, b.fenced, b.in_controlled_shutdown, b.rack)
    assert [(e.name, e.host, e.port) for e in row.listeners] == [(e.name, e.host, e.port) for e in b.listeners.values()]
    # Spark SQL over the views: partitions led per broker = the image's count
    led = {r.leader: r.n for r in spark.sql("SELECT leader, count(*) AS n FROM partitions GROUP BY leader").collect()}
    want: dict[int, int] = {}
    for topic in topics.topics_by_id.values():
        for reg in topic.partitions.values():
            want[reg.leader] = want.get(reg.leader, 0) + 1
    assert led == want
    joined = spark.sql("SELECT c.value FROM configs c JOIN topics t ON c.resource_name = t.name "
                       "WHERE c.resource_type = 'TOPIC' AND c.name = 'retention.ms' LIMIT 1").collect()
    assert joined and joined[0].value.isdigit()


def test_the_tables_show_overrides_and_migrating_directories(gen_dir: Path, tmp_path: Path) -> None:
    """A delta's changed partitions (held as overrides beside the block) replace their block rows."""
    from kraft_storage.messages import metadata as m
    image = log_fold.replay_log(gen_dir)
    topic = next(iter(image.topics.topics_by_id.values()))
    pid = next(iter(topic.partitions))
    old = topic.partitions[pid]
    delta = MetadataDelta(image)
    new_leader = old.replicas[-1]
    delta.replay(m.PartitionChangeRecord(topic_id=topic.topic_id, partition_id=pid, leader=new_leader))
    changed = delta.apply(image.provenance)
    assert changed.topics.get_topic(topic.topic_id).partitions.overrides  # type: ignore[union-attr]
    parts = sa.image_tables(changed)["partitions"]
    assert parts.num_rows == image.topics.num_partitions()
    mask = [t == topic.name and p == pid for t, p in zip(parts.column("topic").to_pylist(),
                                                          parts.column("partition").to_pylist())]
    (row,) = [r for r, keep in zip(parts.to_pylist(), mask) if keep]
    reg = changed.topics.get_partition(topic.topic_id, pid)
    assert reg is not None and row["leader"] == new_leader == reg.leader
    assert row["leader_epoch"] == reg.leader_epoch == old.leader_epoch + 1


def test_uuid_text_is_kafkas() -> None:
    ids = [Uuid.random() for _ in range(50)] + [Uuid(bytes(16)), Uuid(b"\xff" * 16)]
    raw = np.frombuffer(b"".join(u.bytes for u in ids), np.uint8).reshape(len(ids), 16)
    assert sa.uuid_strings(raw).to_pylist() == [str(u) for u in ids]


def test_an_empty_image_has_empty_tables() -> None:
    tables = sa.image_tables(MetadataImage.EMPTY)
    assert {k: t.num_rows for k, t in tables.items()} == {"topics": 0, "partitions": 0, "brokers": 0, "configs": 0}
