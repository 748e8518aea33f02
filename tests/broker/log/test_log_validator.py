"""The Produce path's LogValidator: Kafka's LogValidatorTest / UnifiedLogTest / ProduceRequestTest
scenarios that apply to v2 batches, with Kafka's error codes and messages, and hypothesis runs
over corrupt and truncated data (a clear ProduceValidationError, never another exception)."""
from __future__ import annotations

import logging
import struct
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_node.broker.log.validator import (
    DEFAULT_MAX_MESSAGE_BYTES,
    LONG_MAX,
    ProduceValidationError,
    RecordError,
    ValidationConfig,
    fill_partition_response,
    last_sequence,
    validate_produce_records,
)
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.produce import ProduceResponse
from kraft_storage.crc32c import crc32c
from kraft_storage.record import Compression, TimestampType, build_batch, decode_records, scan_batches

NOW = 1_700_000_000_000
TP = "topic-0"
CREATE = ValidationConfig()
LAT = ValidationConfig(timestamp_type=TimestampType.LOG_APPEND_TIME)


def batch(n: int = 3, *, ts: int = NOW, **kw: object) -> bytes:
    return build_batch([(b"k%d" % i, b"value-%d" % i) for i in range(n)], timestamp=ts, **kw)  # type: ignore[arg-type]


def patch(data: bytes, offset: int, fmt: str, value: int, *, fix_crc: bool = True) -> bytes:
    """``data`` with one header field replaced (and the CRC recomputed, so only that field is wrong)."""
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    if fix_crc:
        struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def validate(data: object, config: ValidationConfig = CREATE, **kw: object) -> object:
    return validate_produce_records(data, topic_partition=TP, config=config, now_ms=NOW, **kw)  # type: ignore[arg-type]


def refused(data: object, config: ValidationConfig = CREATE, **kw: object) -> ProduceValidationError:
    with pytest.raises(ProduceValidationError) as info:
        validate(data, config, **kw)
    return info.value


# ----------------------------------------------------------------- accepted data
@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP, Compression.ZSTD])
def test_valid_batch_is_passed_through_without_copy(codec: Compression) -> None:
    data = batch(5, compression=codec, producer_id=42, producer_epoch=3, base_sequence=10)
    r = validate(data)
    assert r.records is data and not r.rewritten and r.trimmed_bytes == 0
    assert (r.records_count, r.last_offset_delta, r.size_in_bytes) == (5, 4, len(data))
    assert (r.producer_id, r.producer_epoch, r.base_sequence, r.last_sequence) == (42, 3, 10, 14)
    assert r.max_timestamp == NOW and r.log_append_time_ms == -1
    assert r.compression == codec and not r.is_transactional and r.has_producer_id


def test_memoryview_and_bytearray_inputs() -> None:
    data = batch()
    for buf in (bytearray(data), memoryview(data)):
        assert validate(buf).records is buf


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD])
def test_log_append_time_rewrites_type_and_max_timestamp_and_crc(codec: Compression) -> None:
    data = batch(4, ts=NOW - 50_000, compression=codec)
    original = bytes(data)
    r = validate(data, LAT)
    assert r.rewritten and isinstance(r.records, bytearray)
    assert r.max_timestamp == NOW and r.log_append_time_ms == NOW
    h = scan_batches(bytes(r.records)).headers[0]  # CRC verified by the scan
    assert h["attributes"] & 0x08 and h["max_timestamp"] == NOW
    assert h["attributes"] & 0x07 == codec  # compression kept, not recompressed
    assert bytes(r.records[61:]) == data[61:]  # the records section is untouched
    assert [rec.timestamp for rec in decode_records(bytes(r.records)).records()] == [NOW] * 4
    assert data == original  # the caller's bytes are not modified


def test_create_time_fixes_a_wrong_max_timestamp() -> None:
    """Kafka's assignOffsetsNonCompressed sets maxTimestamp from the records."""
    data = batch(3, max_timestamp=NOW - 5)
    r = validate(data)
    assert r.rewritten and r.max_timestamp == NOW
    assert scan_batches(bytes(r.records)).headers[0]["max_timestamp"] == NOW


def test_create_time_topic_accepts_log_append_time_batch_with_timestamp_and_resets_type() -> None:
    """A LogAppendTime batch's records carry its maxTimestamp; in range, Kafka keeps them as CreateTime."""
    data = batch(2, timestamp_type=TimestampType.LOG_APPEND_TIME)
    r = validate(data)
    assert r.rewritten and not scan_batches(bytes(r.records)).headers[0]["attributes"] & 0x08


def test_trailing_partial_batch_is_trimmed() -> None:
    data = batch()
    second = batch()
    r = validate(data + second[:30])
    assert not r.rewritten and r.trimmed_bytes == 30 and bytes(r.records) == data


def test_sequence_wraps_past_int32_max() -> None:
    assert last_sequence(2**31 - 2, 3) == 1
    assert last_sequence(2**31 - 1, 0) == 2**31 - 1
    r = validate(batch(4, producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert r.last_sequence == 1


# ----------------------------------------------------------------- framing (ProduceRequest.validateRecords)
def test_no_batch_at_all() -> None:
    for data in (b"", b"\x00" * 11, batch()[:16], batch()[:-1]):
        e = refused(data, produce_version=9)
        assert e.error == Errors.INVALID_RECORD
        assert e.message == "Produce requests with version 9 must have at least one record batch per partition"


def test_two_batches_are_refused() -> None:
    """Kafka's checkOnlyOneBatch and ProduceRequest's 'exactly one record batch per partition'."""
    for codec in (Compression.NONE, Compression.GZIP):
        e = refused(batch(compression=codec) + batch(compression=codec), produce_version=11)
        assert e.error == Errors.INVALID_RECORD and e.position == len(batch(compression=codec))
        assert e.message == ("Produce requests with version 11 are only allowed to contain exactly one record batch "
                             "per partition")


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_refused(magic: int) -> None:
    e = refused(patch(batch(), 16, ">b", magic, fix_crc=False), produce_version=8)
    assert e.error == Errors.INVALID_RECORD
    assert e.message == ("Produce requests with version 8 are only allowed to contain record batches with magic "
                         "version 2")


@pytest.mark.parametrize("magic", [3, -1, 127])
def test_unknown_magic_is_corrupt(magic: int) -> None:
    e = refused(patch(batch(), 16, ">b", magic, fix_crc=False))
    assert (e.error, e.message) == (Errors.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}")


def test_size_below_minimum_record_overhead() -> None:
    e = refused(patch(batch(), 8, ">i", 13, fix_crc=False))
    assert (e.error, e.message) == (Errors.CORRUPT_MESSAGE,
                                    "Record size 13 is less than the minimum record overhead (14)")


def test_zstd_needs_produce_v7() -> None:
    data = batch(compression=Compression.ZSTD)
    e = refused(data, produce_version=6)
    assert (e.error, e.message) == (Errors.UNSUPPORTED_COMPRESSION_TYPE,
                                    "Produce requests with version 6 are not allowed to use ZStandard compression")
    assert validate(data, produce_version=7).records is data


def test_unknown_codec_id() -> None:
    e = refused(patch(batch(), 21, ">h", 5))
    assert (e.error, e.message) == (Errors.CORRUPT_MESSAGE, "Unknown compression type id: 5")


# ----------------------------------------------------------------- UnifiedLog.analyzeAndValidateRecords
def test_base_offset_must_be_zero() -> None:
    e = refused(batch(base_offset=7))
    assert (e.error, e.message) == (Errors.INVALID_RECORD, "The baseOffset of the record batch in the append to "
                                                           "topic-0 should be 0, but it is 7")


def test_batch_larger_than_max_message_bytes() -> None:
    data = batch(10)
    cfg = ValidationConfig(max_message_bytes=len(data) - 1)
    e = refused(data, cfg)
    assert (e.error, e.message) == (Errors.MESSAGE_TOO_LARGE,
                                    f"The record batch size in the append to topic-0 is {len(data)} bytes which "
                                    f"exceeds the maximum configured value of {len(data) - 1}.")
    assert validate(data, ValidationConfig(max_message_bytes=len(data))).records is data


def test_crc_mismatch_is_corrupt_message() -> None:
    data = bytearray(batch())
    data[-1] ^= 0xFF
    stored = struct.unpack_from(">I", data, 17)[0]
    e = refused(bytes(data))
    assert (e.error, e.message) == (Errors.CORRUPT_MESSAGE,
                                    f"Record is corrupt (stored crc = {stored}) in topic partition topic-0.")
    assert "computed crc" in str(e)


def test_batch_shorter_than_v2_header_is_corrupt() -> None:
    data = patch(batch(), 8, ">i", 30, fix_crc=False)[:42]
    e = refused(data)
    assert e.error == Errors.CORRUPT_MESSAGE and e.message.startswith("Record is corrupt (stored crc = ")
    assert "below the v2 header" in str(e)


# ----------------------------------------------------------------- LogValidator.validateBatch
def test_inconsistent_offset_range_and_count() -> None:
    e = refused(patch(batch(3), 23, ">i", 5))
    assert (e.error, e.message) == (Errors.INVALID_RECORD, "Inconsistent batch offset range [0, 5] and count of "
                                                           "records 3 in topic partition topic-0")


def test_invalid_offset_range() -> None:
    e = refused(patch(batch(3), 23, ">i", -1))
    assert (e.error, e.message) == (Errors.INVALID_RECORD,
                                    "Batch has an invalid offset range: [0, -1] in topic partition topic-0")


def test_batch_without_records_not_allowed() -> None:
    """Kafka's testBatchWithoutRecordsNotAllowed: an empty header claiming offsets 0-5."""
    data = patch(patch(batch(1)[:61], 8, ">i", 49, fix_crc=False), 23, ">i", 5)
    data = patch(data, 57, ">i", 0)
    e = refused(data)
    assert (e.error, e.message) == (Errors.INVALID_RECORD,
                                    "Invalid reported count for record batch: 0 in topic partition topic-0")


def test_control_records_not_allowed_from_clients() -> None:
    e = refused(batch(1, is_control=True))
    assert (e.error, e.message) == (Errors.INVALID_RECORD,
                                    "Clients are not allowed to write control records in topic partition topic-0")


def test_producer_id_needs_a_sequence() -> None:
    e = refused(batch(producer_id=1324, producer_epoch=0, base_sequence=-1))
    assert (e.error, e.message) == (Errors.INVALID_RECORD, "Invalid sequence number -1 in record batch with "
                                                           "producerId 1324 in topic partition topic-0")


def test_transactional_batches_are_refused() -> None:
    e = refused(batch(is_transactional=True, producer_id=5, producer_epoch=0, base_sequence=0))
    assert (e.error, e.message) == (Errors.INVALID_TXN_STATE, "Record was not part of an ongoing transaction")


def test_records_count_larger_than_records() -> None:
    e = refused(patch(patch(batch(3), 57, ">i", 4), 23, ">i", 3))
    assert e.error == Errors.INVALID_RECORD and e.message.startswith("Invalid record batch in topic partition topic-0")


def test_records_section_with_leftover_bytes() -> None:
    data = batch(3)
    grown = patch(data + b"\x00\x00", 8, ">i", len(data) + 2 - 12)
    e = refused(grown)
    assert e.error == Errors.INVALID_RECORD and "left over" in e.message


def test_non_sequential_offset_deltas_are_refused() -> None:
    """Kafka rebuilds such a batch; kraft refuses it (see the module doc)."""
    recs = [SimpleNamespace(key=b"k", value=b"v", offset=o, timestamp=NOW) for o in (0, 2, 1)]
    e = refused(build_batch(recs, last_offset_delta=2))
    assert e.error == Errors.INVALID_RECORD and e.record_errors[0].batch_index == 1


# ----------------------------------------------------------------- records: keys and timestamps
def test_compacted_topic_needs_keys() -> None:
    data = build_batch([(None, b"a"), (b"k", b"b"), (None, b"c")], timestamp=NOW)
    e = refused(data, ValidationConfig(compacted=True))
    msg = "Compacted topic cannot accept message without key in topic partition topic-0"
    assert e.error == Errors.INVALID_RECORD
    assert e.record_errors == (RecordError(0, msg), RecordError(2, msg))
    assert e.message == ("One or more records have been rejected due to 2 record errors in total, and only showing "
                         f"the first three errors at most: [RecordError(batchIndex=0, message='{msg}'), "
                         f"RecordError(batchIndex=2, message='{msg}')]")


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.GZIP])
def test_record_with_past_timestamp_is_rejected(codec: Compression) -> None:
    before, after = 24 * 3600_000, 3600_000
    ts = NOW - before - 5 * 60_000
    cfg = ValidationConfig(timestamp_before_max_ms=before, timestamp_after_max_ms=after)
    e = refused(batch(3, ts=ts, compression=codec), cfg)
    assert e.error == Errors.INVALID_TIMESTAMP
    assert e.message == "One or more records have been rejected due to invalid timestamp"
    assert [r.batch_index for r in e.record_errors] == [0, 1, 2]
    assert e.record_errors[1].message == (f"Timestamp {ts} of message with offset 1 is out of range. The timestamp "
                                          f"should be within [{NOW - before}, {NOW + after}]")


def test_record_with_future_timestamp_is_rejected() -> None:
    cfg = ValidationConfig(timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    e = refused(batch(3, ts=NOW + 1001), cfg)
    assert e.error == Errors.INVALID_TIMESTAMP and len(e.record_errors) == 3
    assert validate(batch(3, ts=NOW + 1000), cfg).max_timestamp == NOW + 1000


def test_timestamp_bounds_in_message_overflow_as_in_java() -> None:
    cfg = ValidationConfig(timestamp_before_max_ms=1000, timestamp_after_max_ms=LONG_MAX)
    e = refused(batch(1, ts=NOW - 2000), cfg)
    assert e.record_errors[0].message.endswith(f"[{NOW - 1000}, {NOW + LONG_MAX - 2**64}]")


def test_no_timestamp_is_accepted_under_create_time() -> None:
    r = validate(batch(2, ts=-1), ValidationConfig(timestamp_before_max_ms=0, timestamp_after_max_ms=0))
    assert r.max_timestamp == -1


def test_producer_may_not_set_log_append_time() -> None:
    data = batch(2, timestamp_type=TimestampType.LOG_APPEND_TIME, max_timestamp=-1)
    e = refused(data)
    assert e.error == Errors.INVALID_TIMESTAMP
    assert e.record_errors[0].message == ("Invalid timestamp type in message DefaultRecord(offset=0, timestamp=-1, "
                                          "key=2 bytes, value=7 bytes). Producer should not set timestamp type to "
                                          "LogAppendTime.")
    e = refused(batch(2, timestamp_type=TimestampType.LOG_APPEND_TIME), LAT)
    assert e.error == Errors.INVALID_TIMESTAMP and len(e.record_errors) == 2


def test_invalid_timestamp_takes_precedence_over_invalid_record() -> None:
    data = build_batch([(None, b"a"), (b"k", b"b")], timestamp=NOW - 10_000)
    cfg = ValidationConfig(compacted=True, timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    e = refused(data, cfg)
    assert e.error == Errors.INVALID_TIMESTAMP
    assert [r.batch_index for r in e.record_errors] == [0, 1]
    assert e.record_errors[0].message.startswith("Compacted topic cannot accept")


# ----------------------------------------------------------------- topic configs
def test_config_from_topic_configs(caplog: pytest.LogCaptureFixture) -> None:
    cfg = ValidationConfig.from_topic_configs({
        "max.message.bytes": "2000", "message.timestamp.type": "LogAppendTime",
        "message.timestamp.before.max.ms": "10", "message.timestamp.after.max.ms": "20",
        "cleanup.policy": "compact,delete"})
    assert cfg == ValidationConfig(2000, TimestampType.LOG_APPEND_TIME, 10, 20, True)
    assert ValidationConfig.from_topic_configs({}) == ValidationConfig(DEFAULT_MAX_MESSAGE_BYTES)
    broker = {"message.max.bytes": "5000", "log.message.timestamp.type": "LogAppendTime",
              "log.cleanup.policy": "compact", "log.message.timestamp.after.max.ms": "7"}
    assert ValidationConfig.from_topic_configs({"message.timestamp.type": "CreateTime"}, broker) == ValidationConfig(
        5000, TimestampType.CREATE_TIME, LONG_MAX, 7, True)
    with caplog.at_level(logging.WARNING):
        ValidationConfig.from_topic_configs({"compression.type": "gzip"})
    assert "compression.type=gzip" in caplog.text
    for bad, key in (({"max.message.bytes": "x"}, "max.message.bytes"),
                     ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
                     ({"compression.type": "brotli"}, "compression.type"),
                     ({"message.timestamp.after.max.ms": "-1"}, "message.timestamp.after.max.ms")):
        with pytest.raises(ValueError, match=key.replace(".", r"\.")):
            ValidationConfig.from_topic_configs(bad)


# ----------------------------------------------------------------- hypothesis: never crash
_VALID = [batch(3), batch(5, compression=Compression.GZIP, producer_id=9, producer_epoch=1, base_sequence=0),
          batch(2, compression=Compression.ZSTD)]


def _check(data: bytes, cfg: ValidationConfig) -> None:
    try:
        r = validate(data, cfg)
    except ProduceValidationError as e:
        assert isinstance(e.error, Errors) and e.message and str(e)
        return
    out = bytes(r.records)
    scan = scan_batches(out)  # whole, CRC-valid, one batch
    assert len(scan) == 1 and scan.end == len(out) == r.size_in_bytes
    assert len(decode_records(out)) == r.records_count


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(_VALID), st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=4),
       st.booleans(), st.integers(0, 400), st.booleans())
def test_mutated_batches_never_crash(base: bytes, flips: list[tuple[int, int]], fix_crc: bool, cut: int,
                                     lat: bool) -> None:
    buf = bytearray(base)
    for pos, val in flips:
        if pos < len(buf):
            buf[pos] = val
    if fix_crc and len(buf) > 21:
        struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    data = bytes(buf[:len(buf) - min(cut, len(buf))]) if cut % 3 == 0 else bytes(buf)
    _check(data, LAT if lat else CREATE)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_never_crash(data: bytes) -> None:
    _check(data, CREATE)


# ----------------------------------------------------------------- a real client's bytes
@pytest.mark.parametrize("codec", [0, 1, 4])  # kafka-python's ids: none, gzip, zstd
def test_kafka_python_idempotent_batch_is_accepted(codec: int) -> None:
    """The batch kafka-python's producer builds (DefaultRecordBatchBuilder, idempotence on)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=4000,
                                  producer_epoch=0, base_sequence=17, batch_size=1 << 20)
    for i in range(50):
        b.append(i, timestamp=NOW - i, key=b"k%d" % i, value=b"v" * i, headers=[("h", b"x")])
    data = bytes(b.build())
    r = validate(data)
    assert r.records is data and not r.rewritten
    assert (r.records_count, r.producer_id, r.base_sequence, r.last_sequence, int(r.compression)) == (
        50, 4000, 17, 66, codec)
    assert r.max_timestamp == NOW


def test_refusal_in_a_produce_response_round_trips() -> None:
    cfg = ValidationConfig(timestamp_before_max_ms=1000, timestamp_after_max_ms=1000)
    e = refused(batch(2, ts=NOW - 5000), cfg)
    resp = ProduceResponse.PartitionProduceResponse(index=3, base_offset=99)
    fill_partition_response(e, resp)
    top = ProduceResponse(responses=[ProduceResponse.TopicProduceResponse(name="topic", partition_responses=[resp])])
    for version, with_details in ((11, True), (7, False)):
        back = ProduceResponse.read(top.write(version), version).responses[0].partition_responses[0]
        assert (back.error_code, back.base_offset) == (int(Errors.INVALID_TIMESTAMP), -1)
        if with_details:
            assert back.error_message == "One or more records have been rejected due to invalid timestamp"
            assert [(r.batch_index, r.batch_index_error_message) for r in back.record_errors] == [
                (0, e.record_errors[0].message), (1, e.record_errors[1].message)]
