"""Small Spark jobs (local[1]) reading Kafka fixtures and a generated log through the ``kraft`` source.

One SparkSession for the whole module (JVM start is the expensive part).
Results are checked against the single-process native reader / codec.
"""
from __future__ import annotations

import os
import re
import sys

import pytest

from kraft_storage.record import decode_records
from kraft_storage.spark import reader as kr
from kraft_storage.tools.gen_metadata_log import write_log

from conftest import FIXTURES, REPO, batch_files

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
