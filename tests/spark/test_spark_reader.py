"""The Spark reader's core without a JVM: file discovery, splits, Arrow batches, filters."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import FIXTURES, batch_params

import kraft_storage._native._frame as native_frame
import kraft_storage._pure._frame as pure_frame
from kraft_storage.messages.dump import metadata_json
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.record import decode_records, scan_batches
from kraft_storage.spark import files as kf
from kraft_storage.spark import reader as kr
from kraft_storage.tools.gen_metadata_log import write_log


@pytest.fixture(params=[native_frame, pure_frame], ids=["native", "pure"])
def frame_impl(request, monkeypatch):
    monkeypatch.setattr(kr, "_f", request.param)
    return request.param


@pytest.fixture(scope="module")
def gen_log(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen")
    write_log(str(d), 50_000, seed=4, segment_bytes=400_000, records_per_batch=37)
    return d


def test_arrow_schema_is_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema
    assert to_arrow_schema(kr.spark_schema(), timezone="UTC").equals(kr.ARROW_SCHEMA)
    assert kr.spark_schema().fieldNames() == kr.ARROW_SCHEMA.names


@pytest.mark.parametrize("path", batch_params(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fixture_rows_match_the_codec(path, frame_impl):
    table = kr.read_table(str(path))
    buf = path.read_bytes()
    cols = decode_records(buf)
    assert table.num_rows == len(cols)
    t = table.to_pydict()
    assert t["offset"] == cols.offset.tolist()
    assert t["timestamp"] == cols.timestamp.tolist()
    assert t["value"] == cols.values()
    assert t["key"] == [cols.key(i) for i in range(len(cols))]
    assert set(t["file"]) == {str(path)}
    h = cols.batches[cols.batch]
    assert t["batch_position"] == h["position"].tolist()
    assert t["partition_leader_epoch"] == h["partition_leader_epoch"].tolist()
    ctl = cols.is_control()
    assert t["is_control"] == ctl.tolist()
    for i in range(len(cols)):
        if ctl[i]:
            assert t["record_type"][i] is None and t["control_type"][i] == int.from_bytes(cols.key(i)[2:4], "big")
        else:
            k, v, msg = decode_metadata_record(cols.value(i))
            assert (t["record_type"][i], t["record_version"][i], t["record_type_name"][i]) == (k, v, msg.NAME)
            assert t["control_type"][i] is None


@pytest.mark.parametrize("fixture,least", [("kafka-3.6.0-cp7.6.0-snapshot", 500),
                                           ("kafka-3.7.0-combined-single-node", 4800)])
def test_fields_json_matches_dump(frame_impl, fixture, least):
    import json
    t = kr.read_table(str(FIXTURES / fixture), kr.ReadOptions(fields="json")).to_pydict()
    n = 0
    for value, f, ctl in zip(t["value"], t["fields"], t["is_control"]):
        if ctl:
            assert f is None
        else:
            assert json.loads(f) == metadata_json(value)["data"]  # NoOps take a shortcut: same answer
            n += 1
    assert n > least


def test_splits_cover_the_file_at_batch_boundaries(gen_log):
    files = kf.find_files(str(gen_log))
    assert len(files) > 1 and all(f.kind == "log" for f in files)
    for f in files:
        splits = kf.split_file(f, 100_000)
        assert len(splits) >= max(f.size // 100_000, 1)
        assert all(s.size <= 100_000 + 5_000 for s in splits)  # a cut is at most one batch late
        buf = open(f.path, "rb").read()
        positions = set(scan_batches(buf).headers["position"].tolist())
        assert splits[0].start == 0 and splits[-1].end == f.size
        for a, b in zip(splits, splits[1:]):
            assert a.end == b.start and b.start in positions
            assert a.max_offset < b.min_offset
    whole = kr.read_table(str(gen_log))
    pieces = kr.read_table(str(gen_log), max_split_bytes=100_000)
    assert whole.equals(pieces)
    assert whole.column("offset").to_pylist() == list(range(50_000))


def test_offset_filters_are_exact(gen_log, frame_impl):
    base = kr.read_table(str(gen_log)).to_pydict()
    cases = [kr.ReadOptions(min_offset=12_345, max_offset=30_001),
             kr.ReadOptions(max_offset=0), kr.ReadOptions(min_offset=49_990),
             kr.ReadOptions(offset_in=(5, 7, 40_000, 10**9)), kr.ReadOptions(offset_in=()),
             kr.ReadOptions(min_offset=100, max_offset=99),
             kr.ReadOptions(record_types=(2, 3), min_offset=1000, batch_rows=1000)]
    for o in cases:
        got = kr.read_table(str(gen_log), o, max_split_bytes=200_000).to_pydict()
        lo, hi = o.bounds()
        keep = [i for i, off in enumerate(base["offset"])
                if lo <= off <= hi and (o.offset_in is None or off in o.offset_in)
                and (o.record_types is None or base["record_type"][i] in o.record_types)]
        assert got["offset"] == [base["offset"][i] for i in keep], o
        assert got["value"] == [base["value"][i] for i in keep]
        assert got["record_type_name"] == [base["record_type_name"][i] for i in keep]


def test_planning_prunes_files_by_offset(gen_log):
    files = kf.find_files(str(gen_log))
    target = files[2].min_offset + 3
    splits = kf.plan_splits(str(gen_log), min_offset=target, max_offset=target)
    assert [s.path for s in splits] == [files[2].path]


def test_batch_rows_bounds_arrow_batches(gen_log):
    sizes = [b.num_rows for b in kr.read_arrow(str(gen_log), kr.ReadOptions(batch_rows=5000))]
    assert sum(sizes) == 50_000 and max(sizes) <= 5000 + 37


def test_errors_name_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope"):
        kf.find_files(str(tmp_path / "nope"))
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(kf.NotKafkaFileError, match="notes.txt is not a Kafka log segment"):
        kf.find_files(str(tmp_path / "notes.txt"))
    with pytest.raises(kf.NotKafkaFileError, match="holds no Kafka"):
        kf.find_files(str(tmp_path))
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(b"this is not a record batch, just text")
    with pytest.raises(kf.NotKafkaFileError, match="does not start with a v2 record batch"):
        kf.find_files(str(tmp_path))


def test_corrupt_batch_is_a_clear_error(tmp_path, gen_log):
    src = kf.find_files(str(gen_log))[0].path
    buf = bytearray(open(src, "rb").read())
    buf[5000] ^= 0xFF
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(bytes(buf))
    from kraft_storage.errors import CorruptRecordError
    with pytest.raises(CorruptRecordError, match=str(p)):
        kr.read_table(str(p))
    # without CRC checks the damage is still caught or decoded, never a crash
    try:
        kr.read_table(str(p), kr.ReadOptions(verify_crc=False))
    except CorruptRecordError:
        pass


def test_empty_segment_reads_nothing(tmp_path):
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    t = kr.read_table(str(tmp_path))
    assert t.num_rows == 0 and t.schema.equals(kr.ARROW_SCHEMA)


def test_column_subsets_match_the_full_rows(gen_log):
    full = kr.read_table(str(gen_log))
    for cols in [("value", "offset"), ("record_type_name",), ("fields", "file", "is_control", "key")]:
        part = kr.read_table(str(gen_log), kr.ReadOptions(columns=cols))
        assert part.schema.names == list(cols)
        assert part.equals(full.select(list(cols)))
    with pytest.raises(ValueError, match="unknown column"):
        kr.ReadOptions(columns=("offset", "nope"))


# ------------------------------------------------------------------ fields="columns"

def _check_columns_table(table, cols, result_tables):
    """Every row of a fields="columns" table: its type column equals the native columnar decoder's row."""
    names = {k: n for n, k, _t in kr.TYPE_COLUMNS}
    order = np.argsort(np.asarray(table.column("offset")), kind="stable")
    t = table.take(pa.array(order)).to_pydict()
    by_offset = {}
    for rt in result_tables:
        for i, r in enumerate(rt.rows.tolist()):
            by_offset[int(cols.offset[r])] = (rt.api_key, rt.row(i))
    present = [n for n in t if n in set(names.values())]
    n_checked = 0
    for i, off in enumerate(t["offset"]):
        hit = by_offset.get(off)
        for name in present:
            if hit is not None and names[hit[0]] == name:
                assert t[name][i] == hit[1], (off, name)
                n_checked += 1
            else:
                assert t[name][i] is None, (off, name)
    return n_checked


@pytest.mark.parametrize("path", batch_params(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fields_columns_match_the_columnar_decoder(path):
    from kraft_storage.messages import columns as mc
    table = kr.read_table(str(path), kr.ReadOptions(fields="columns"))
    cols = decode_records(path.read_bytes())
    expect = mc.decode_record_columns(cols)
    assert table.schema.names[:len(kr.SCHEMA_FIELDS)] == kr.ARROW_SCHEMA.names
    assert len(table.schema) == len(kr.SCHEMA_FIELDS) + 26
    assert _check_columns_table(table, cols, expect) == len(expect)
    # the other columns are the fields="none" rows, only grouped by type
    plain = kr.read_table(str(path))
    got = table.select(plain.schema.names)
    idx = pa.array(np.argsort(np.asarray(got.column("offset")), kind="stable"))
    assert got.take(idx).equals(plain)


def test_fields_columns_schema_is_what_spark_expects():
    from pyspark.sql.pandas.types import to_arrow_schema
    o = kr.ReadOptions(fields="columns")
    assert to_arrow_schema(kr.spark_schema("columns"), timezone="UTC").equals(o.arrow_schema())
    o = kr.ReadOptions(fields="columns", column_types="PartitionChangeRecord,topic_record,0")
    assert [n for n, _k in o.type_columns()] == ["register_broker_record", "topic_record",
                                                   "partition_change_record"]
    assert to_arrow_schema(kr.spark_schema("columns", o.column_types), timezone="UTC").equals(o.arrow_schema())
    with pytest.raises(ValueError, match="unknown metadata record type 'Nope'"):
        kr.ReadOptions(fields="columns", column_types="Nope")
    with pytest.raises(ValueError, match="need fields='columns'"):
        kr.ReadOptions(columns=("offset", "topic_record"))
    with pytest.raises(ValueError, match="fields must be"):
        kr.ReadOptions(fields="struct")


def test_fields_columns_with_filters_and_subsets(gen_log):
    from kraft_storage.messages import columns as mc
    o = kr.ReadOptions(fields="columns", min_offset=1000, max_offset=20_000, record_types=(2, 3, 5),
                       columns=("offset", "partition_change_record", "topic_record"), batch_rows=3000)
    table = kr.read_table(str(gen_log), o, max_split_bytes=150_000)
    assert table.schema.names == ["offset", "partition_change_record", "topic_record"]
    full = kr.read_table(str(gen_log), kr.ReadOptions(min_offset=1000, max_offset=20_000, record_types=(2, 3, 5)))
    assert sorted(table.column("offset").to_pylist()) == full.column("offset").to_pylist()
    n = 0
    for f in kf.find_files(str(gen_log)):
        cols = decode_records(open(f.path, "rb").read())
        keep = (cols.offset >= 1000) & (cols.offset <= 20_000)
        expect = mc.decode_record_columns(cols, types={2, 5})
        sub = table.filter(pa.compute.is_in(table.column("offset"), pa.array(cols.offset[keep])))
        n += _check_columns_table(sub, cols, expect)  # rows outside the range are simply absent
    assert n > 1000
    # PartitionRecords (type 3) are kept as rows, with no column of their own here
    t3 = table.filter(pa.compute.is_null(table.column("partition_change_record")))
    assert t3.num_rows > 0 and t3.column("topic_record").null_count < t3.num_rows


def test_fields_columns_corrupt_body_is_a_clear_error(tmp_path):
    from kraft_storage.errors import CorruptRecordError
    from kraft_storage.record.builder import build_batch
    good = bytes([1, 2, 0, 2]) + b"t" + bytes(16) + b"\x00"  # TopicRecord "t"
    bad = bytes([1, 2, 0, 9]) + b"t" + bytes(3)               # name length past the end
    p = tmp_path / "00000000000000000000.log"
    p.write_bytes(build_batch([(None, good), (None, good), (None, bad)], base_offset=40))
    assert kr.read_table(str(p), kr.ReadOptions(fields="columns", max_offset=41)).num_rows == 2
    with pytest.raises(CorruptRecordError, match=r"TopicRecord.Name.*offset 42.*position 0"):
        kr.read_table(str(p), kr.ReadOptions(fields="columns"))
