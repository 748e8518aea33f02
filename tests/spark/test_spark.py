"""Small Spark jobs (local[1]) reading Kafka fixtures and a generated log through the ``kraft`` source.

One SparkSession for the whole module (JVM start is the expensive part).
Results are checked against the single-process native reader / codec.
"""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from conftest import FIXTURES, REPO, batch_files

from kraft_storage.record import decode_records
from kraft_storage.spark import reader as kr
from kraft_storage.tools.gen_metadata_log import write_log

N_GEN = 120_000


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession
    # Spark's Python workers are separate processes: they must import this tree too.
    paths = [str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.master("local[1]").appName("kraft-tests")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1").config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    from kraft_storage.spark import register
    register(session, pushdown=True)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def gen_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("spark_gen")
    write_log(str(d), N_GEN, seed=9, segment_bytes=2_000_000)
    return d


def test_fixture_counts_per_file_match_the_codec(spark):
    df = spark.read.format("kraft").load(str(FIXTURES))
    got = {r["file"]: r["count"] for r in df.groupBy("file").count().collect()}
    expect = {str(p): len(decode_records(p.read_bytes())) for p in batch_files()}
    assert got == {k: v for k, v in expect.items() if v}


def test_fixture_rows_match_the_native_reader(spark):
    path = FIXTURES / "kafka-3.7.0-combined-single-node" / "__cluster_metadata-0"
    rows = spark.read.format("kraft").load(str(path)).orderBy("offset").collect()
    native = kr.read_table(str(path)).to_pylist()
    assert len(rows) == len(native) == 4929
    for r, n in zip(rows, native):
        d = r.asDict()
        d["key"] = None if d["key"] is None else bytes(d["key"])
        d["value"] = None if d["value"] is None else bytes(d["value"])
        assert d == n


def test_generated_log_with_split_segments(spark, gen_dir):
    df = (spark.read.format("kraft").option("maxPartitionBytes", 500_000).load(str(gen_dir)))
    plan_parts = df.rdd.getNumPartitions()
    files = os.listdir(gen_dir / "__cluster_metadata-0")
    assert plan_parts > len(files) > 1  # segments are cut into byte ranges
    agg = df.selectExpr("count(*) c", "sum(offset) s", "min(offset) lo", "max(offset) hi").first()
    assert (agg.c, agg.s, agg.lo, agg.hi) == (N_GEN, N_GEN * (N_GEN - 1) // 2, 0, N_GEN - 1)
    by_type = {r["record_type_name"]: r["count"] for r in df.groupBy("record_type_name").count().collect()}
    native = kr.read_table(str(gen_dir)).column("record_type_name").value_counts().to_pylist()
    assert by_type == {d["values"]: d["counts"] for d in native}


def test_offset_options_prune_and_are_exact(spark, gen_dir):
    def read(**opts):
        r = spark.read.format("kraft").option("maxPartitionBytes", 500_000)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load(str(gen_dir))
    full = read()
    sel = read(minOffset=50_000, maxOffset=50_009)
    assert [r.offset for r in sel.orderBy("offset").select("offset").collect()] == list(range(50000, 50010))
    assert sel.rdd.getNumPartitions() < full.rdd.getNumPartitions()  # whole splits were skipped
    assert full.count() == N_GEN  # the options belong to one DataFrame, nothing leaks
    assert read(minOffset=N_GEN - 3).count() == 3
    with pytest.raises(Exception, match="minOffset must be an integer"):
        read(minOffset="ten").count()


def _fresh(spark, gen_dir, pushdown="true"):
    return (spark.read.format("kraft").option("pushdown", pushdown).option("maxPartitionBytes", 500_000)
            .load(str(gen_dir)))


def test_offset_filters_are_pushed_and_exact(spark, gen_dir):
    sel = _fresh(spark, gen_dir).filter("offset >= 50000 AND offset < 50010")
    assert [r.offset for r in sel.orderBy("offset").select("offset").collect()] == list(range(50000, 50010))
    sel = _fresh(spark, gen_dir).filter("offset >= 50000 AND offset < 50010")
    assert sel.rdd.getNumPartitions() < _fresh(spark, gen_dir).rdd.getNumPartitions()
    plan = sel._jdf.queryExecution().executedPlan().toString()
    assert not re.search(r"\bFilter\b", plan)  # Spark left the offset filter to the source
    assert _fresh(spark, gen_dir).filter("offset IN (3, 99999, 777777)").count() == 2
    topics = _fresh(spark, gen_dir).filter("record_type = 2").count()
    assert topics == _fresh(spark, gen_dir, "false").filter("record_type_name = 'TopicRecord'").count() > 0
    both = _fresh(spark, gen_dir).filter("record_type IN (2, 3) AND offset > 100000").count()
    native = kr.read_table(str(gen_dir), kr.ReadOptions(min_offset=100_001, record_types=(2, 3))).num_rows
    assert both == native


def test_without_pushdown_spark_filters_and_dataframes_are_reusable(spark, gen_dir):
    df = _fresh(spark, gen_dir, "false")
    assert df.filter("offset < 5").count() == 5
    assert df.count() == N_GEN
    assert re.search(r"\bFilter\b", df.filter("offset < 5")._jdf.queryExecution().executedPlan().toString())


def test_fields_json(spark):
    path = FIXTURES / "kafka-4.2-mv29-combined-single-node"
    rows = (spark.read.format("kraft").option("fields", "json").option("files", "checkpoint").load(str(path))
            .filter("record_type_name = 'PartitionRecord'").collect())
    import json
    assert len(rows) == 1
    f = json.loads(rows[0]["fields"])
    assert f["PartitionId"] == 0 and f["Replicas"] == [1] and rows[0]["record_version"] == 2


def test_user_schema_selects_columns(spark, gen_dir):
    df = spark.read.format("kraft").schema("value BINARY, offset LONG, record_type SHORT").load(str(gen_dir))
    assert df.columns == ["value", "offset", "record_type"]
    got = df.filter("offset < 1000").orderBy("offset").collect()
    native = kr.read_table(str(gen_dir), kr.ReadOptions(max_offset=999)).to_pydict()
    assert [bytes(r.value) for r in got] == native["value"]
    assert [r.record_type for r in got] == native["record_type"]
    with pytest.raises(Exception, match="column offset is bigint in the kraft source"):
        spark.read.format("kraft").schema("offset INT").load(str(gen_dir)).count()
    with pytest.raises(Exception, match="has no column 'colour'"):
        spark.read.format("kraft").schema("colour STRING").load(str(gen_dir)).count()


def test_empty_plan_reads_nothing(spark, gen_dir):
    assert spark.read.format("kraft").option("minOffset", 10**12).load(str(gen_dir)).count() == 0


def test_not_kafka_paths_are_clear_errors(spark, tmp_path):
    (tmp_path / "readme.txt").write_text("hi")
    with pytest.raises(Exception, match="is not a Kafka log segment"):
        spark.read.format("kraft").load(str(tmp_path / "readme.txt")).count()
    with pytest.raises(Exception, match="holds no Kafka"):
        spark.read.format("kraft").load(str(tmp_path)).count()
    with pytest.raises(Exception, match="no such file"):
        spark.read.format("kraft").load(str(tmp_path / "missing")).count()


def _as_py(v):
    """A Spark Row value in the native decoder's form (Row -> dict, bytearray -> bytes)."""
    from pyspark.sql import Row
    if isinstance(v, Row):
        return {k: _as_py(x) for k, x in v.asDict().items()}
    if isinstance(v, list):
        return [_as_py(x) for x in v]
    if isinstance(v, bytearray):
        return bytes(v)
    return v


def test_fields_columns_match_the_native_columnar_decoder(spark):
    from kraft_storage.messages import columns as mc
    path = FIXTURES / "kafka-3.7.0-combined-single-node" / "__cluster_metadata-0"
    df = spark.read.format("kraft").option("fields", "columns").load(str(path))
    assert "partition_change_record" in df.columns and len(df.columns) == len(kr.SCHEMA_FIELDS) + 26
    rows = df.orderBy("offset").collect()
    names = {k: n for n, k, _t in kr.TYPE_COLUMNS}
    expect = {}
    for f in sorted(path.glob("*.log")):
        cols = decode_records(f.read_bytes())
        for t in mc.decode_record_columns(cols):
            for i, r in enumerate(t.rows.tolist()):
                expect[int(cols.offset[r])] = (names[t.api_key], t.row(i))
    checked = 0
    for r in rows:
        hit = expect.get(r["offset"])
        for name in names.values():
            if hit is not None and hit[0] == name:
                assert _as_py(r[name]) == hit[1], (r["offset"], name)
                checked += 1
            else:
                assert r[name] is None
    assert checked == len(expect) > 4800


def test_fields_columns_on_a_generated_log(spark, gen_dir):
    from kraft_storage.messages import columns as mc
    df = (spark.read.format("kraft").option("fields", "columns").option("maxPartitionBytes", 500_000)
          .option("columnTypes", "PartitionChangeRecord,RegisterBrokerRecord").load(str(gen_dir)))
    assert [c for c in df.columns if c.endswith("_record")] == ["register_broker_record", "partition_change_record"]
    assert df.count() == N_GEN
    agg = df.selectExpr("count(partition_change_record) pc",
                        "sum(if(partition_change_record.isr IS NULL, 0, size(partition_change_record.isr))) isr",
                        "sum(partition_change_record.leader) leader",
                        "count(register_broker_record) rb").first()
    n_pc = n_isr = leader = n_rb = 0
    for f in sorted((gen_dir / "__cluster_metadata-0").glob("*.log")):
        r = mc.decode_record_columns(decode_records(f.read_bytes()), types={0, 5})
        if 5 in r:
            t = r[5]
            n_pc += len(t)
            isr = t["isr"]
            ok = isr.valid if isr.valid is not None else np.ones(len(t), bool)
            n_isr += int(np.diff(isr.offsets)[ok].sum())
            leader += int(t["leader"].values.sum())
        if 0 in r:
            n_rb += len(r[0])
    assert (agg.pc, agg.isr, agg.leader, agg.rb) == (n_pc, n_isr, leader, n_rb)
    assert n_pc > 10_000 and n_rb > 0
    one = df.filter("partition_change_record IS NOT NULL").orderBy("offset").select(
        "offset", "partition_change_record").first()
    assert _as_py(one["partition_change_record"])["topic_id"] is not None
    with pytest.raises(Exception, match="record type columns need option fields=columns"):
        spark.read.format("kraft").schema("offset LONG, topic_record STRUCT<name: STRING>").load(
            str(gen_dir)).count()
    with pytest.raises(Exception, match="unknown metadata record type 'Topic'"):
        spark.read.format("kraft").option("fields", "columns").option("columnTypes", "Topic").load(
            str(gen_dir)).count()
