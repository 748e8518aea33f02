"""Record batch v2 codec: Kafka's files, kafka-python, both implementations, bad input."""
from __future__ import annotations

import struct

import numpy as np
import pytest
from conftest import batch_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kraft_storage._native._batch as native
import kraft_storage._pure._batch as pure
from kraft_storage.errors import CorruptRecordError, UnsupportedCompression
from kraft_storage.record import (
    BATCH_DTYPE,
    CRC_REPORT,
    Compression,
    RecordBatch,
    build_batch,
    build_batches,
    decode_records,
    iter_batches,
    scan_batches,
)
from kraft_storage.record.columns import _empty_columns

IMPLS = [pytest.param(native, id="native"), pytest.param(pure, id="pure")]

# ---------------------------------------------------------------- strategies

blob = st.one_of(st.none(), st.binary(max_size=64))
header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=16)))
record = st.tuples(blob, blob, st.integers(0, 2**41), st.lists(header, max_size=3))
records_st = st.lists(record, min_size=1, max_size=30)


def _rebuild(b: RecordBatch) -> bytes:
    return build_batch(
        b.records(), base_offset=b.base_offset, partition_leader_epoch=b.partition_leader_epoch,
        is_control=b.is_control, is_transactional=b.is_transactional, producer_id=b.producer_id,
        producer_epoch=b.producer_epoch, base_sequence=b.base_sequence,
        base_timestamp=b.base_timestamp, max_timestamp=b.max_timestamp,
        last_offset_delta=b.last_offset_delta, compression=b.compression,
        timestamp_type=b.timestamp_type)


# ------------------------------------------------------------- Kafka's files

@pytest.mark.parametrize("path", batch_params(), ids=lambda p: "/".join(p.parts[-3:]))
def test_fixture_decodes_and_reencodes_identically(path):
    data = path.read_bytes()
    scan = scan_batches(data, source=str(path))
    assert scan.end == len(data) and scan.error is None and len(scan) > 0
    assert (scan.headers["crc_valid"] == 1).all()
    cols = decode_records(data)
    assert len(cols) == scan.records_total
    # Offsets inside each batch are base + 0..n-1 in these files.
    assert (np.diff(cols.offset) > 0).all()
    rebuilt = b"".join(_rebuild(b) for b in iter_batches(data))
    assert rebuilt == data


@pytest.mark.parametrize("path", batch_params(), ids=lambda p: "/".join(p.parts[-3:]))
def test_fixture_both_implementations_agree(path):
    data = path.read_bytes()
    outs = {}
    for impl in (native, pure):
        hdr = np.empty(len(data) // 61 + 1, BATCH_DTYPE)
        st_, n, end, *_ = impl.scan(data, 0, len(data), 1, 0, hdr)
        assert st_ == 0 and end == len(data)
        hdr = hdr[:n]
        cols = _empty_columns(int(hdr["records_count"].sum()))
        rs = np.ascontiguousarray(hdr["position"] + 61)
        re_ = np.ascontiguousarray(hdr["position"] + hdr["size"])
        st2, m, *_ = impl.decode_records(data, hdr, rs, re_, None, cols, 0)
        assert st2 == 0 and m == len(cols[0])
        outs[impl] = (hdr, cols)
    assert outs[native][0].tobytes() == outs[pure][0].tobytes()
    for a, b in zip(outs[native][1], outs[pure][1]):
        assert np.array_equal(a, b)


def test_fixture_batch_fields(fixtures_dir):
    # bootstrap.checkpoint of Kafka 4.2: header (control type 3), 6 feature levels, footer.
    data = (fixtures_dir / "kafka-4.2-mv29-combined-single-node" / "bootstrap.checkpoint").read_bytes()
    batches = list(iter_batches(data))
    assert [b.records_count for b in batches] == [1, 6, 1]
    assert [b.is_control for b in batches] == [True, False, True]
    assert batches[1].base_offset == 1 and batches[1].last_offset == 6
    assert batches[0].records()[0].key == struct.pack(">hh", 0, 3)  # SNAPSHOT_HEADER key
    assert batches[2].records()[0].key == struct.pack(">hh", 0, 4)  # SNAPSHOT_FOOTER key
    assert all(r.key is None for r in batches[1].records())


# --------------------------------------------------------- round trips

@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records_st, st.integers(0, 2**40), st.integers(-1, 2**31 - 1),
       st.sampled_from([Compression.NONE, Compression.GZIP, Compression.ZSTD]),
       st.booleans(), st.booleans())
def test_build_then_decode_round_trip(recs, base_offset, epoch, comp, control, txn):
    data = build_batch(recs, base_offset=base_offset, partition_leader_epoch=epoch,
                       compression=comp, is_control=control, is_transactional=txn,
                       producer_id=7 if txn else -1, producer_epoch=1 if txn else -1)
    (b,) = list(iter_batches(data))
    assert b.is_valid() and b.compression == comp and b.is_control == control
    assert b.base_offset == base_offset and b.partition_leader_epoch == epoch
    assert b.records_count == len(recs) and b.last_offset == base_offset + len(recs) - 1
    got = b.records()
    for i, ((k, v, ts, hs), r) in enumerate(zip(recs, got)):
        assert (r.offset, r.timestamp, r.key, r.value) == (base_offset + i, ts, k, v)
        assert tuple(r.headers) == tuple(hs)
    assert b.max_timestamp == max(r[2] for r in recs)
    rebuilt = _rebuild(b)
    if comp == Compression.NONE:
        assert rebuilt == data
    else:  # a compressor may pick other bytes; the batch it makes holds the same records
        (b2,) = list(iter_batches(rebuilt))
        assert b2.is_valid() and [(r.offset, r.timestamp, r.key, r.value) for r in b2.records()] == \
            [(r.offset, r.timestamp, r.key, r.value) for r in got]


@pytest.mark.parametrize("comp", ["lz4", "snappy"])
def test_optional_codecs_round_trip(comp):
    recs = [(b"k%d" % i, b"v" * i, 1000 + i) for i in range(50)]
    data = build_batch(recs, compression=comp)
    got = list(iter_batches(data))[0].records()
    assert [(r.key, r.value, r.timestamp) for r in got] == recs


def test_unknown_codec_is_a_clear_error():
    data = bytearray(build_batch([(None, b"x", 1)]))
    struct.pack_into(">h", data, 21, 5)  # codec id 5 does not exist
    from kraft_storage.crc32c import crc32c
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(UnsupportedCompression, match="codec id 5"):
        decode_records(bytes(data))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(blob, blob), min_size=1, max_size=200), st.integers(1, 17),
       st.integers(0, 2**40), st.booleans())
def test_bulk_encode_native_equals_pure_and_decodes(kv, per_batch, base_offset, with_ts):
    keys = [k for k, _ in kv]
    vals = [v for _, v in kv]
    ts = np.arange(len(kv), dtype=np.int64) * 3 + 10**12 if with_ts else None
    from kraft_storage.record.builder import pack_buffers
    kd, ko, kn = pack_buffers(keys)
    vd, vo, vn = pack_buffers(vals)
    a, pa = native.encode_batches(kd, ko, kn, vd, vo, vn, ts, 5, per_batch, base_offset, 3, 0, -1, -1, -1)
    b, pb = pure.encode_batches(kd, ko, kn, vd, vo, vn, ts, 5, per_batch, base_offset, 3, 0, -1, -1, -1)
    assert a == b and np.array_equal(pa, pb)
    cols = decode_records(a)
    assert cols.offset.tolist() == list(range(base_offset, base_offset + len(kv)))
    assert [cols.key(i) for i in range(len(kv))] == keys
    assert cols.values() == vals
    expect_ts = ts.tolist() if with_ts else [5] * len(kv)
    assert cols.timestamp.tolist() == expect_ts
    assert len(scan_batches(a)) == -(-len(kv) // per_batch)


@pytest.mark.parametrize("comp", ["none", "gzip", "zstd"])
def test_build_batches_compressed(comp):
    vals = [bytes([i % 256]) * (i % 40) for i in range(2500)]
    data, pos = build_batches(vals, keys=[b"key"] * 2500, timestamps=np.arange(2500), compression=comp,
                              records_per_batch=1000, base_offset=100, return_positions=True)
    scan = scan_batches(data)
    assert scan.headers["position"].tolist() == pos.tolist()
    assert scan.headers["records_count"].tolist() == [1000, 1000, 500]
    cols = decode_records(data)
    assert cols.values() == vals and cols.offset[0] == 100 and cols.offset[-1] == 2599


def test_log_append_time_uses_max_timestamp():
    from kraft_storage.record import TimestampType
    data = build_batch([(None, b"a", 5), (None, b"b", 9)], timestamp_type=TimestampType.LOG_APPEND_TIME,
                       max_timestamp=1234)
    assert decode_records(data).timestamp.tolist() == [1234, 1234]


# ------------------------------------------------------ kafka-python interop

def test_kafka_python_decodes_ours():
    from kafka.record.default_records import DefaultRecordBatch
    recs = [(None if i % 5 == 0 else b"k%d" % i, None if i % 7 == 0 else b"v" * i, 10**12 + i,
             [("h", b"x"), ("n", None)] if i % 3 == 0 else []) for i in range(100)]
    for comp in ("none", "gzip", "zstd"):
        data = build_batch(recs, base_offset=42, compression=comp)
        kb = DefaultRecordBatch(bytearray(data))
        assert kb.validate_crc()
        got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in kb]
        assert got == [(42 + i, k, v, ts, list(hs)) for i, (k, v, ts, hs) in enumerate(recs)]


@settings(max_examples=80, deadline=None)
@given(records_st, st.sampled_from([0, 1, 4]))
def test_we_decode_kafka_python(recs, codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (k, v, ts, hs) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v, headers=[(hk, hv) for hk, hv in hs])
    data = bytes(builder.build())
    got = decode_records(data).records()
    assert [(r.offset, r.key, r.value, r.timestamp, tuple(r.headers)) for r in got] == [
        (i, k, v, ts, tuple(hs)) for i, (k, v, ts, hs) in enumerate(recs)]


@settings(max_examples=40, deadline=None)
@given(records_st)
def test_kafka_python_uncompressed_bytes_equal_ours(recs):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    for i, (k, v, ts, hs) in enumerate(recs):
        builder.append(i, timestamp=ts, key=k, value=v, headers=list(hs))
    theirs = bytes(builder.build())
    # kafka-python uses the first record's timestamp as the base timestamp, as Kafka does.
    ours = build_batch(recs, base_offset=0, partition_leader_epoch=theirs and struct.unpack_from(">i", theirs, 12)[0])
    assert ours == theirs


# ------------------------------------------------------------ bad input

def _good(n=3, per=4):
    return build_batches([b"value-%d" % i for i in range(n * per)], keys=None,
                         timestamps=np.arange(n * per), records_per_batch=per)


def test_truncated_buffer_names_position_and_offset():
    data = _good()
    cut = data[:-5]
    with pytest.raises(CorruptRecordError) as ei:
        list(iter_batches(cut))
    e = ei.value
    assert "truncated batch" in e.reason
    second_last_end = scan_batches(data).headers["position"][-1]
    assert e.position == second_last_end and e.base_offset == 8
    # the good batches come first
    assert [b.base_offset for b in iter_batches(cut, allow_partial_tail=True)] == [0, 4]
    scan = scan_batches(cut, raise_on_error=False)
    assert scan.truncated and len(scan) == 2 and scan.end == second_last_end


def test_wrong_magic():
    data = bytearray(_good(1))
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="unsupported magic 1") as ei:
        scan_batches(bytes(data))
    assert ei.value.position == 0 and ei.value.base_offset == 0


def test_bad_crc_and_report_mode():
    data = bytearray(_good(2))
    data[70] ^= 0xFF  # inside the first batch's records
    with pytest.raises(CorruptRecordError, match="CRC mismatch"):
        scan_batches(bytes(data))
    scan = scan_batches(bytes(data), crc_mode=CRC_REPORT)
    assert scan.headers["crc_valid"].tolist() == [0, 1]


@pytest.mark.parametrize("length,reason", [
    (-1, "batch length -1 is smaller than the minimum 49"),
    (0, "smaller than the minimum"),
    (48, "smaller than the minimum"),
    (2**31 - 1, "exceeds the maximum 2147483647"),
    (5000, "truncated batch: 12 of 5012 bytes present"),
])
def test_bad_batch_lengths(length, reason):
    data = bytearray(_good(1))[:12]
    data += bytes(_good(1)[12:])
    struct.pack_into(">i", data, 8, length)
    with pytest.raises(CorruptRecordError) as ei:
        scan_batches(bytes(data[:12]) if length == 5000 else bytes(data))
    assert reason in ei.value.reason
    assert ei.value.position == 0


def test_max_batch_size_is_enforced():
    data = _good(1)
    with pytest.raises(CorruptRecordError, match="exceeds the maximum 100"):
        scan_batches(data, max_batch_size=100)


def _recrc(data: bytearray) -> bytes:
    from kraft_storage.crc32c import crc32c
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_records_count_mismatch():
    data = bytearray(build_batch([(None, b"a", 1), (None, b"b", 1)]))
    struct.pack_into(">i", data, 57, 1)
    with pytest.raises(CorruptRecordError, match="left over after the 1 records"):
        decode_records(_recrc(data))
    struct.pack_into(">i", data, 57, 3)
    with pytest.raises(CorruptRecordError, match="cannot fit|record 2"):
        decode_records(_recrc(data))
    struct.pack_into(">i", data, 57, -4)
    with pytest.raises(CorruptRecordError, match="negative records count"):
        decode_records(_recrc(data))


def test_varint_overflow():
    data = bytearray(build_batch([(None, b"abcdefghijklmnop", 1)]))
    data[61:66] = b"\xff\xff\xff\xff\xff"  # record length varint longer than 5 bytes
    with pytest.raises(CorruptRecordError, match="varint is too long") as ei:
        decode_records(_recrc(data))
    assert ei.value.position == 61


def test_huge_count_does_not_allocate():
    data = bytearray(build_batch([(None, b"a", 1)]))
    struct.pack_into(">i", data, 57, 2**31 - 1)
    with pytest.raises(CorruptRecordError, match="cannot fit"):
        decode_records(_recrc(data))


def _kernel_outcome(impl, data, crc_mode):
    hdr = np.empty(len(data) // 61 + 2, BATCH_DTYPE)
    s = impl.scan(data, 0, len(data), crc_mode, 0, hdr)
    n = s[1]
    hdr = hdr[:n]
    nonz = hdr[(hdr["attributes"] & 7) == 0]
    cols = _empty_columns(min(int(nonz["records_count"].sum()), len(data) // 7 + 1))
    rs = np.ascontiguousarray(nonz["position"] + 61)
    re_ = np.ascontiguousarray(nonz["position"] + nonz["size"])
    d = impl.decode_records(data, nonz, rs, re_, None, cols, 0)
    nrec = d[1]
    return s, hdr.tobytes(), d, [c[:nrec].tolist() for c in cols]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_corrupt_input_same_outcome_in_both_impls(data):
    base = _good(2, 3) if data.draw(st.booleans()) else build_batch(
        [(b"k", b"v", 1, [("h", b"1")]), (None, None, 2)])
    buf = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "truncate", "set"]))
        if kind == "truncate" and len(buf) > 1:
            del buf[data.draw(st.integers(0, len(buf) - 1)):]
        elif len(buf):
            i = data.draw(st.integers(0, len(buf) - 1))
            buf[i] = data.draw(st.integers(0, 255)) if kind == "set" else buf[i] ^ 0xFF
    crc_mode = data.draw(st.sampled_from([0, 1, 2]))
    b = bytes(buf)
    assert _kernel_outcome(native, b, crc_mode) == _kernel_outcome(pure, b, crc_mode)
    # The public API only ever raises CorruptRecordError / UnsupportedCompression.
    try:
        decode_records(b, verify_crc=crc_mode == 1)
    except (CorruptRecordError, UnsupportedCompression):
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_never_crash(b):
    try:
        scan = scan_batches(b, verify_crc=False, raise_on_error=False)
        decode_records(b[:scan.end], verify_crc=False)
    except (CorruptRecordError, UnsupportedCompression):
        pass


def test_buffer_types_are_zero_copy(tmp_path):
    import mmap
    data = _good()
    p = tmp_path / "x.log"
    p.write_bytes(data)
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for buf in (data, bytearray(data), memoryview(data), m, np.frombuffer(data, np.uint8)):
            cols = decode_records(buf)
            assert cols.data is buf
            assert cols.values() == [b"value-%d" % i for i in range(12)]


@pytest.mark.parametrize("codec,module", [("lz4", "lz4"), ("snappy", "cramjam")])
def test_missing_optional_codec_raises_unsupported(monkeypatch, codec, module):
    data = build_batch([(None, b"x" * 100, 1)], compression=codec)
    # Pretend the optional package is not installed.
    monkeypatch.setitem(__import__("sys").modules, module, None)
    if module == "lz4":
        monkeypatch.setitem(__import__("sys").modules, "lz4.frame", None)
    with pytest.raises(UnsupportedCompression, match=f"{codec} batches need") as ei:
        decode_records(data)
    assert "batch base offset 0, position 0" in str(ei.value)


@pytest.mark.parametrize("comp", ["gzip", "zstd"])
def test_parallel_codec_path_keeps_order_and_names_bad_batch(comp):
    from kraft_storage.record import compression
    rng = np.random.default_rng(3)
    vals = [rng.integers(0, 4, 2000, dtype=np.uint8).tobytes() for _ in range(1600)]
    data = build_batches(vals, records_per_batch=100, compression=comp, timestamp=7)
    assert len(data) >= 1 << 18 and sum(map(len, vals)) > compression._PARALLEL_MIN_BYTES
    cols = decode_records(data)
    assert cols.values() == vals
    # Break the compressed stream of the 10th batch (and fix its CRC): the error names it.
    scan = scan_batches(data)
    h = scan.headers[9]
    buf = bytearray(data)
    p = int(h["position"])
    buf[p + 61:p + 71] = b"\x00" * 10
    from kraft_storage.crc32c import crc32c
    struct.pack_into(">I", buf, p + 17, crc32c(bytes(buf[p + 21:p + int(h["size"])])))
    with pytest.raises(CorruptRecordError, match="malformed|truncated") as ei:
        decode_records(bytes(buf))
    assert ei.value.position == p and ei.value.base_offset == 900


@pytest.mark.parametrize("comp", ["none", "zstd"])
def test_build_batches_into_a_reused_buffer(comp):
    vals = [b"v%d" % i for i in range(2500)]
    expect = build_batches(vals, timestamp=5, compression=comp, records_per_batch=1000)
    buf = bytearray(len(expect) + 100)
    for _ in range(2):
        n, pos = build_batches(vals, timestamp=5, compression=comp, records_per_batch=1000, out=buf,
                               return_positions=True)
        if comp == "none":  # zstd's output size may differ between runs of the same input
            assert n == len(expect)
        assert decode_records(bytes(buf[:n])).values() == vals
    if comp == "none":
        assert bytes(buf[:n]) == expect
        for impl in (native, pure):
            from kraft_storage.record.builder import pack_buffers
            vd, vo, vn = pack_buffers(vals)
            with pytest.raises(ValueError, match="too small"):
                impl.encode_batches(None, None, None, vd, vo, vn, None, 5, 1000, 0, 0, 0, -1, -1, -1,
                                    bytearray(10))


def test_decode_reusing_columns():
    a = build_batches([b"a%d" % i for i in range(3000)], timestamp=1, records_per_batch=500)
    b = build_batches([b"b%d" % i for i in range(1000)], timestamp=2, base_offset=7)
    first = decode_records(a)
    store = first.storage
    second = decode_records(b, reuse=first)
    assert second.storage is store  # same memory, no fresh allocation
    assert second.values() == [b"b%d" % i for i in range(1000)] and second.offset[0] == 7
    assert len(second) == 1000
    third = decode_records(a + a, reuse=second)  # bigger: new storage
    assert third.storage is not store and len(third) == 6000
    assert third.values()[:2] == [b"a0", b"a1"]


@pytest.mark.parametrize("impl", ["native", "pure"])
def test_pack_bytes_twins_agree(impl):
    import importlib
    m = importlib.import_module(f"kraft_storage._{impl}._batch")
    data, off = m.pack_bytes([b"ab", b"", b"cde"])
    assert data == b"abcde" and list(off) == [0, 2, 2, 5]
    data, off = m.pack_bytes(())
    assert data == b"" and list(off) == [0]
    assert m.pack_bytes([b"a", None]) is None
    assert m.pack_bytes([bytearray(b"a")]) is None  # only exact bytes take the fast path
