"""Columnar decoding of metadata record bodies (``kraft_storage.messages.columns``).

Both implementations (``_native`` and ``_pure`` ``_metadata_columns``) are run
explicitly and checked against the typed decoder field by field: on every
record of every Kafka fixture, on hypothesis-generated records of every type
and version (with unknown tagged fields, in the body and in struct elements),
and on corrupt bodies, where both must raise the same clear MessageError.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import batch_files, batch_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.messages import cases, is_flexible, message_strategy

import kraft_storage._native._metadata_columns as native_cols
import kraft_storage._pure._frame as pure_frame
import kraft_storage._pure._messages_metadata as pure_md
import kraft_storage._pure._metadata_columns as pure_cols
from kraft_storage.messages import columns as mc
from kraft_storage.messages.framing import encode_metadata_record
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.messages.runtime import Message, MessageError, Uuid, uvarint_bytes
from kraft_storage.record import decode_records

IMPLS = [pytest.param(native_cols, id="native"), pytest.param(pure_cols, id="pure")]


def typed_value(v):
    """A typed decoder value in the columnar ``row()`` form (Uuid -> 16 bytes, struct -> dict)."""
    if isinstance(v, Uuid):
        return bytes(v._b)
    if isinstance(v, Message):
        return {attr: typed_value(getattr(v, attr)) for attr, *_ in v._JSON}
    if isinstance(v, list):
        return [typed_value(x) for x in v]
    return v


def frame_columns(values: list[bytes]):
    """(data, body_pos, body_end, api_key, version) for a list of framed record values."""
    data = b"".join(values)
    lens = np.array([len(v) for v in values], np.int32)
    pos = np.zeros(len(values), np.int64)
    pos[1:] = np.cumsum(lens[:-1])
    k = np.empty(len(values), np.int16)
    ver = np.empty(len(values), np.int16)
    body = np.empty(len(values), np.int64)
    pure_frame.read_frames(data, pos, lens, k, ver, body)
    return data, body, pos + lens, k, ver


def check_against_typed(result: mc.MetadataColumns, values: list[bytes | None]):
    """Every decoded row equals the typed decode of its value; every frame row is decoded exactly once."""
    seen = []
    for table in result:
        assert table.rows.dtype == np.int64 and np.all(np.diff(table.rows) > 0)
        arrow = table.to_arrow()
        assert arrow.type == mc.arrow_type(table.api_key) and len(arrow) == len(table)
        assert table.to_arrow(spark=True).type == mc.arrow_type(table.api_key, spark=True)
        pylist = arrow.to_pylist()
        for i, row in enumerate(table.rows.tolist()):
            k, ver, msg = decode_metadata_record(values[row])
            assert (k, ver) == (table.api_key, int(table.versions[i]))
            want = typed_value(msg)
            assert table.row(i) == want, (table.name, row)
            assert pylist[i] == want, (table.name, row)
        seen += table.rows.tolist()
    return sorted(seen)


# ------------------------------------------------------------------ Kafka's own files

@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("path", batch_params(), ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}/{p.name}")
def test_fixture_records_match_the_typed_decoder(path, impl):
    cols = decode_records(path.read_bytes())
    result = mc.decode_record_columns(cols, impl=impl)
    values = cols.values()
    seen = check_against_typed(result, values)
    ctl = cols.is_control()
    frames = [i for i in range(len(cols)) if not ctl[i] and values[i] and values[i][0] == 1]
    assert seen == frames and len(result) == len(frames)
    assert not len(result.unknown_rows)


def test_fixtures_hold_the_interesting_types():
    """The fixture test above is only as good as the types the fixtures contain."""
    names = set()
    for path in batch_files():
        names |= {t.name for t in mc.decode_record_columns(decode_records(path.read_bytes()))}
    assert {"RegisterBrokerRecord", "PartitionRecord", "PartitionChangeRecord", "ConfigRecord",
            "TopicRecord", "FeatureLevelRecord", "RegisterControllerRecord", "NoOpRecord"} <= names


# ------------------------------------------------------------------ hypothesis round trips

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("cls,v", cases(pure_md.METADATA_RECORD_TYPES.values()))
@SETTINGS
@given(data=st.data())
def test_generated_records_roundtrip(cls, v, data):
    msgs = data.draw(st.lists(message_strategy(cls, v, is_flexible(cls, v)), min_size=1, max_size=4))
    values = [bytes([1]) + uvarint_bytes(cls.API_KEY) + uvarint_bytes(v) + m.write(v) for m in msgs]
    cols = frame_columns(values)
    for impl in (native_cols, pure_cols):
        result = mc.decode_bodies(*cols, impl=impl)
        assert [t.api_key for t in result] == [cls.API_KEY]
        table = result[cls.API_KEY]
        assert table.rows.tolist() == list(range(len(msgs)))
        for i, m in enumerate(msgs):
            # the typed decoder reads back what was written; the columns must hold the same
            assert table.row(i) == typed_value(cls.read(m.write(v), v)), (impl.__name__, i)
        check_against_typed(result, values)


MIXED = [(cls, v) for cls in pure_md.METADATA_RECORD_TYPES.values()
         for v in range(cls.LOWEST_VERSION, cls.HIGHEST_VERSION + 1)]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mixed_types_and_non_frames_are_grouped_by_type(data):
    picks = data.draw(st.lists(st.sampled_from(MIXED), min_size=1, max_size=12))
    values = []
    for cls, v in picks:
        if data.draw(st.booleans(), label="non-frame") and data.draw(st.booleans()):
            values.append(b"\x00\x01\x02")  # not a metadata frame (frame version 0): skipped
            continue
        m = data.draw(message_strategy(cls, v, is_flexible(cls, v)))
        values.append(bytes([1]) + uvarint_bytes(cls.API_KEY) + uvarint_bytes(v) + m.write(v))
    cols = frame_columns(values)
    rows = sorted(data.draw(st.sets(st.integers(0, len(values) - 1))))
    offsets = np.arange(len(values), dtype=np.int64) + 1000
    for impl in (native_cols, pure_cols):
        full = mc.decode_bodies(*cols, impl=impl, offsets=offsets)
        seen = check_against_typed(full, values)
        assert seen == [i for i, x in enumerate(values) if x[0] == 1]
        part = mc.decode_bodies(*cols, impl=impl, rows=rows)
        assert sorted(r for t in part for r in t.rows.tolist()) == [r for r in rows if values[r][0] == 1]
        for t in part:
            for i, r in enumerate(t.rows.tolist()):
                j = int(np.searchsorted(full[t.api_key].rows, r))
                assert t.row(i) == full[t.api_key].row(j)


def test_types_filter_and_unknown_api_keys():
    topic = pure_md.TopicRecord(name="t", topic_id=Uuid(bytes(range(16))))
    values = [encode_metadata_record(decode_metadata_record(bytes([1, 2, 0]) + topic.write(0))[2], 0),
              bytes([1, 29, 0, 0]),  # an apiKey this process has no schema for (newer Kafka)
              bytes([1, 12, 0]) + pure_md.FeatureLevelRecord(name="metadata.version", feature_level=7).write(0)]
    cols = frame_columns(values)
    for impl in (native_cols, pure_cols):
        r = mc.decode_bodies(*cols, impl=impl)
        assert sorted(t.name for t in r) == ["FeatureLevelRecord", "TopicRecord"]
        assert r.unknown_rows.tolist() == [1]
        assert r.by_name("TopicRecord").row(0) == {"name": "t", "topic_id": bytes(range(16))}
        assert r[12]["feature_level"].values.tolist() == [7]
        only = mc.decode_bodies(*cols, impl=impl, types={12})
        assert [t.name for t in only] == ["FeatureLevelRecord"]


def test_layout_of_a_partition_change():
    """The documented layout, on one PartitionChangeRecord with tagged fields (and one without)."""
    P = pure_md.PartitionChangeRecord
    a = P(partition_id=3, topic_id=Uuid(bytes(15) + b"\x07"), isr=[1, 2], leader=2,
          directories=[Uuid(bytes(16))], eligible_leader_replicas=[])
    b = P(partition_id=4)
    values = [bytes([1, 5, 2]) + a.write(2), bytes([1, 5, 0]) + b.write(0)]
    for impl in (native_cols, pure_cols):
        t = mc.decode_bodies(*frame_columns(values), impl=impl)[5]
        assert t["partition_id"].values.dtype == np.int32 and t["partition_id"].values.tolist() == [3, 4]
        assert t["topic_id"].values.shape == (2, 16) and t["topic_id"].values[0, 15] == 7
        isr = t["isr"]
        assert isr.offsets.tolist() == [0, 2, 2] and isr.valid.tolist() == [True, False]
        assert isr.child.values.tolist() == [1, 2]
        assert t["leader"].values.tolist() == [2, -2]  # absent tag: the schema default
        assert t["eligible_leader_replicas"].valid.tolist() == [True, False]
        assert t["directories"].child.values.shape == (1, 16)
        arrow = t.to_arrow(spark=True)
        assert arrow.field("topic_id").type == pa.binary()
        assert arrow.to_pylist()[1]["isr"] is None and arrow.to_pylist()[0]["isr"] == [1, 2]


def test_register_broker_struct_arrays():
    RB = pure_md.RegisterBrokerRecord
    rec = RB(broker_id=1, incarnation_id=Uuid(bytes(16)), broker_epoch=5,
             end_points=[RB.BrokerEndpoint(name="PLAIN", host="h1", port=65535, security_protocol=0),
                         RB.BrokerEndpoint(name="SSL", host="h2", port=9093, security_protocol=1)],
             features=[RB.BrokerFeature(name="metadata.version", min_supported_version=1, max_supported_version=20)],
             rack=None, log_dirs=[Uuid(bytes(16))])
    values = [bytes([1, 0, 3]) + rec.write(3), bytes([1, 0, 0]) + RB(broker_id=2).write(0)]
    for impl in (native_cols, pure_cols):
        t = mc.decode_bodies(*frame_columns(values), impl=impl)[0]
        ep = t["end_points"]
        assert ep.offsets.tolist() == [0, 2, 2]
        assert ep.child.fields["port"].values.dtype == np.uint16
        assert ep.child.fields["port"].values.tolist() == [65535, 9093]
        assert ep.child.fields["host"].offsets.tolist() == [0, 2, 4]
        assert t["rack"].valid.tolist() == [False, True]
        assert t.row(1)["is_migrating_zk_broker"] is False and t.row(1)["fenced"] is True  # v0 defaults
        sp = t.to_arrow(spark=True)
        assert sp.type.field("end_points").type.value_type.field("port").type == pa.int32()
        assert sp.to_pylist()[0]["end_points"][0]["port"] == 65535


# ------------------------------------------------------------------ corrupt bodies

def _decode_both(values, offsets=None):
    """Run both implementations; return their MessageErrors (None where it decoded)."""
    cols = frame_columns(values)
    errs = []
    for impl in (native_cols, pure_cols):
        try:
            mc.decode_bodies(*cols, impl=impl, offsets=offsets)
            errs.append(None)
        except MessageError as e:
            errs.append(e)
    assert (errs[0] is None) == (errs[1] is None)
    if errs[0] is not None:
        assert str(errs[0]) == str(errs[1])
    return errs[0]


def _register_broker() -> bytes:
    RB = pure_md.RegisterBrokerRecord
    return bytes([1, 0, 3]) + RB(broker_id=1, end_points=[RB.BrokerEndpoint(name="PLAIN", host="h", port=9092)],
                                 rack="r1", log_dirs=[Uuid(bytes(16))]).write(3)


def test_every_truncation_is_a_clear_error():
    whole = _register_broker()
    for cut in range(3, len(whole)):
        e = _decode_both([whole[:cut]], offsets=np.array([77], np.int64))
        assert e is not None, cut
        assert "offset 77" in str(e) and "RegisterBrokerRecord" in str(e)
        assert "truncated" in str(e) or "length exceeds" in str(e) or "tagged field size" in str(e)


def test_specific_corruptions():
    off = np.array([5], np.int64)
    topic = bytes([1, 2, 0]) + pure_md.TopicRecord(name="abc", topic_id=Uuid(bytes(16))).write(0)
    e = _decode_both([topic + b"\x00"], off)
    assert "trailing bytes" in str(e) and "offset 5" in str(e)
    bad_utf8 = bytes([1, 2, 0, 3, 0xC3, 0x28]) + bytes(16) + b"\x00"
    e = _decode_both([bad_utf8], off)
    assert "invalid UTF-8" in str(e) and "TopicRecord.Name" in str(e)
    e = _decode_both([bytes([1, 2, 0]) + b"\xff\xff\xff\xff\xff\xff"], off)
    assert "malformed varint" in str(e)
    e = _decode_both([bytes([1, 2, 0, 0x7F]) + bytes(20)], off)  # name length 126 > bytes left
    assert "length exceeds" in str(e) and "TopicRecord.Name" in str(e)
    e = _decode_both([bytes([1, 2, 0, 0]) + bytes(16) + b"\x00"], off)  # null non-nullable name
    assert "null in a non-nullable field" in str(e)
    # tagged fields: out of order, size past the end, value not filling its size
    pcr = bytes([1, 5, 0]) + (7).to_bytes(4, "big") + bytes(16)
    e = _decode_both([pcr + bytes([2, 1, 4, 0, 0, 0, 1, 1, 4, 0, 0, 0, 2])], off)
    assert "out of order" in str(e)
    e = _decode_both([pcr + bytes([1, 1, 9, 0, 0, 0, 1])], off)
    assert "size exceeds" in str(e)
    e = _decode_both([pcr + bytes([1, 1, 5, 0, 0, 0, 1, 0])], off)
    assert "does not fill" in str(e) and "PartitionChangeRecord.Leader" in str(e)
    # an unknown tag is skipped
    assert _decode_both([pcr + bytes([1, 30, 2, 9, 9])], off) is None
    # a version the schema does not have
    e = _decode_both([bytes([1, 3, 9]) + bytes(40)], off)
    assert "unsupported PartitionRecord (apiKey 3) version 9" in str(e) and "offset 5" in str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_mutated_bodies_agree_with_the_typed_decoder(data):
    cls, v = data.draw(st.sampled_from(MIXED))
    m = data.draw(message_strategy(cls, v, is_flexible(cls, v)))
    raw = bytearray(bytes([1]) + uvarint_bytes(cls.API_KEY) + uvarint_bytes(v) + m.write(v))
    head = 3
    for _ in range(data.draw(st.integers(1, 3))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if op == "flip" and len(raw) > head:
            i = data.draw(st.integers(head, len(raw) - 1))
            raw[i] = data.draw(st.integers(0, 255))
        elif op == "cut" and len(raw) > head:
            del raw[data.draw(st.integers(head, len(raw) - 1)):]
        else:
            raw[data.draw(st.integers(head, len(raw))):0] = data.draw(st.binary(min_size=1, max_size=3))
    value = bytes(raw)
    e = _decode_both([value], np.array([9], np.int64))
    try:
        _k, _v, typed = decode_metadata_record(value)
    except MessageError:
        typed = None
    assert (e is None) == (typed is not None), (value, e)
    if e is None:
        for impl in (native_cols, pure_cols):
            t = mc.decode_bodies(*frame_columns([value]), impl=impl)[cls.API_KEY]
            assert t.row(0) == typed_value(typed)
    else:
        assert "offset 9" in str(e)


@pytest.mark.parametrize("impl", IMPLS)
def test_body_ranges_outside_the_buffer_are_refused(impl):
    data = bytes([1, 20, 0, 0])
    with pytest.raises(ValueError, match="outside"):
        impl.decode_type(20, memoryview(data), np.array([3], np.int64), np.array([9], np.int64),
                         np.array([0], np.int16), np.array([0], np.int64))
    with pytest.raises(ValueError, match="row index"):
        impl.decode_type(20, memoryview(data), np.array([3], np.int64), np.array([4], np.int64),
                         np.array([0], np.int16), np.array([1], np.int64))


def test_version_errors_come_first_and_name_their_row():
    good = bytes([1, 12, 0]) + pure_md.FeatureLevelRecord(name="f", feature_level=1).write(0)
    broken = bytes([1, 2, 0, 9])                    # TopicRecord, truncated
    wrong = bytes([1, 5, 7]) + bytes(21)            # PartitionChangeRecord v7 does not exist
    offs = np.array([10, 11, 12, 13], np.int64)
    e = _decode_both([good, broken, good, wrong], offs)
    assert "unsupported PartitionChangeRecord (apiKey 5) version 7, valid versions are 0-2" in str(e)
    assert "offset 13" in str(e)
    e = _decode_both([good, broken, good], offs[:3])
    assert "TopicRecord.Name" in str(e) and "offset 11" in str(e)
    # a type left out with ``types`` is not checked at all
    for impl in (native_cols, pure_cols):
        r = mc.decode_bodies(*frame_columns([good, wrong]), impl=impl, types={12})
        assert [t.name for t in r] == ["FeatureLevelRecord"]
