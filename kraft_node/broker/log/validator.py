"""Kafka's LogValidator for the leader's Produce path: is this partition's record data fit to append?

Why a module of its own: every Produce request hands the partition leader a client's bytes, and
the log (``kraft_storage.log.KafkaLog.append_as_leader``) trusts what it is given apart from the
batch framing and the CRC.  Kafka decides here, before anything is written, whether the data is a
well-formed v2 batch a client may write (no control batch, a sequence when there is a producer id,
offsets and count that agree), whether it fits ``max.message.bytes``, and whether its timestamps
suit the topic's ``message.timestamp.type``.  Each refusal is one of Kafka's error codes with
Kafka's message, so clients react as they do against Kafka (retry, split the batch, give up).

What Kafka checks, and in which order (``KafkaApis``/``ProduceRequest.validateRecords``, then
``UnifiedLog.analyzeAndValidateRecords``, then ``LogValidator``); the first failure answers:

1. framing: a batch needs 12 bytes of log overhead (else there is none); a size field below 14
   is CORRUPT_MESSAGE; a magic outside 0..2 is CORRUPT_MESSAGE; a batch cut short by the end of
   the data does not count (no batch at all: INVALID_RECORD); magic 0 or 1 is INVALID_RECORD
   (Produce v3+ carries v2 batches only); ZStandard below Produce v7 is
   UNSUPPORTED_COMPRESSION_TYPE; a second whole batch is INVALID_RECORD (exactly one batch per
   partition).  Bytes after the batch that do not make a whole batch are dropped, as Kafka's
   ``trimInvalidBytes`` does (``ValidationResult.trimmed_bytes`` says how many);
2. the base offset must be 0 (INVALID_RECORD); the batch size at most ``max.message.bytes``
   (MESSAGE_TOO_LARGE); the CRC-32C over bytes [21, size) must match (CORRUPT_MESSAGE);
3. ``lastOffsetDelta + 1`` and the records count must be positive and equal, no control batch,
   a producer id needs a base sequence >= 0 (all INVALID_RECORD);
4. the records themselves (decoded natively, ``kraft_storage.record.columns``): a malformed record
   or a count that does not match the records section is INVALID_RECORD; then per record, Kafka's
   ``RecordError(batchIndex, message)``: a compacted topic needs keys (INVALID_RECORD), and
   timestamps (INVALID_TIMESTAMP, see below).  All the record errors of the batch are reported;
5. a transactional batch is INVALID_TXN_STATE ("Record was not part of an ongoing transaction":
   Kafka's answer when no transaction was started with the coordinator, which kraft does not
   have: transactions are out of scope).

Timestamps, by the topic's ``message.timestamp.type``:

* CreateTime: a record timestamp other than -1 must lie within
  ``[now - message.timestamp.before.max.ms, now + message.timestamp.after.max.ms]``; a batch whose
  LogAppendTime bit is set is refused for records whose timestamp is -1 (the producer may not
  choose LogAppendTime).  The batch's maxTimestamp becomes the largest record timestamp;
* LogAppendTime: the batch may not claim LogAppendTime itself; the broker sets the type bit and
  maxTimestamp to ``now``.

Zero copy: the result's ``records`` is the caller's buffer itself (or a view of its whole-batch
prefix) unless the header has to change -- a LogAppendTime topic, or a CreateTime batch whose
maxTimestamp or type bit is not what its records say -- and then it is a new ``bytearray`` with
attributes (bytes 21-22) and maxTimestamp (bytes 35-42) rewritten and the CRC (bytes 17-20)
recomputed.  Compression is kept as produced (``compression.type=producer``): a compressed batch is
decompressed to be checked, never recompressed.  Offsets and the partition leader epoch (bytes
0-7 and 12-15, outside the CRC) are the log's to stamp (``append_as_leader``).

v2 header layout (big-endian; offsets in bytes)::

    0 baseOffset i64 | 8 batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8 | 17 crc u32
    21 attributes i16 | 23 lastOffsetDelta i32 | 27 baseTimestamp i64 | 35 maxTimestamp i64
    43 producerId i64 | 51 producerEpoch i16 | 53 baseSequence i32 | 57 recordsCount i32 | 61 records
"""
from __future__ import annotations

import logging
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.produce import ProduceResponse
from kraft_storage.crc32c import crc32c
from kraft_storage.errors import CorruptRecordError, UnsupportedCompression
from kraft_storage.record.batch import CRC_SKIP, scan_batches
from kraft_storage.record.columns import RecordColumns, decode_record_columns
from kraft_storage.record.constants import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    Compression,
    TimestampType,
)

__all__ = ["ProduceValidationError", "RecordError", "ValidationConfig", "ValidationResult",
           "validate_produce_records", "last_sequence", "LONG_MAX", "DEFAULT_MAX_MESSAGE_BYTES",
           "fill_partition_response"]

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
_LONG_MIN = -(2**63)
#: Kafka's ``max.message.bytes`` default: 1 MiB plus the 12-byte log overhead
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + 12
#: the latest Produce version kraft's codec knows; the ZStandard rule needs v7+
_PRODUCE_ZSTD_MIN_VERSION = 7

_LOG_OVERHEAD = 12
_V0_RECORD_OVERHEAD = 14          # Kafka's LegacyRecord.RECORD_OVERHEAD_V0: the smallest size field
_HEADER_UP_TO_MAGIC = 17
_V2_HEADER = 61
_NO_PRODUCER_ID = -1
_NO_TIMESTAMP = -1
_INT32_MAX = 2**31 - 1

#: bytes 0..60 of a v2 batch
_HEADER = struct.Struct(">qiibIhiqqqhii")
_ATTRS_AND_MAX_TS_AT_21 = struct.Struct(">h")
_MAX_TS = struct.Struct(">q")
_CRC = struct.Struct(">I")
_I32 = struct.Struct(">i")


#: topic config -> the broker config that gives its default (Kafka's ServerTopicConfigSynonyms)
_BROKER_SYNONYMS = {
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "message.timestamp.before.max.ms": "log.message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms": "log.message.timestamp.after.max.ms",
    "message.timestamp.difference.max.ms": "log.message.timestamp.difference.max.ms",
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
}


class RecordError(NamedTuple):
    """Kafka's ``ProduceResponse.RecordError``: the index of the record in its batch and why."""
    batch_index: int
    message: str | None

    def __str__(self) -> str:  # Kafka's toString, used inside the partition's error message
        msg = "null" if self.message is None else f"'{self.message}'"
        return f"RecordError(batchIndex={self.batch_index}, message={msg})"


class ProduceValidationError(Exception):
    """The partition's data is refused: ``error`` is the code for the partition's response,
    ``message`` Kafka's error message (the response's ``error_message``), ``record_errors`` the
    per-record details (the response's ``record_errors``; empty for batch-level errors).

    ``position`` is the byte offset in the produced data where the problem is (-1 when it is the
    data as a whole); ``detail`` says more than Kafka's text (what kraft found there).  ``str()``
    gives all of it, for logs."""

    def __init__(self, error: Errors, message: str, *, record_errors: tuple[RecordError, ...] = (),
                 position: int = -1, detail: str | None = None) -> None:
        self.error = error
        self.message = message
        self.record_errors = record_errors
        self.position = position
        self.detail = detail
        where = [] if position < 0 else [f"at byte {position} of the partition's records"]
        if detail:
            where.append(detail)
        super().__init__(f"{error.name}: {message}" + (f" ({'; '.join(where)})" if where else ""))


@dataclass(frozen=True, slots=True)
class ValidationConfig:
    """The topic settings the validator applies, under Kafka's names (``from_topic_configs``).

    ``max_message_bytes``: ``max.message.bytes``; ``timestamp_type``: ``message.timestamp.type``;
    ``timestamp_before_max_ms`` / ``timestamp_after_max_ms``: ``message.timestamp.before.max.ms`` /
    ``message.timestamp.after.max.ms`` (Kafka's defaults: no bound); ``compacted``:
    ``cleanup.policy`` contains ``compact`` (records need keys)."""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    timestamp_type: TimestampType = TimestampType.CREATE_TIME
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX
    compacted: bool = False

    def __post_init__(self) -> None:
        if self.max_message_bytes < 0:
            raise ValueError(f"max.message.bytes must be >= 0, not {self.max_message_bytes}")
        for name, v in (("message.timestamp.before.max.ms", self.timestamp_before_max_ms),
                        ("message.timestamp.after.max.ms", self.timestamp_after_max_ms)):
            if not 0 <= v <= LONG_MAX:
                raise ValueError(f"{name} must be in [0, {LONG_MAX}], not {v}")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str],
                           broker_props: Mapping[str, str] | None = None) -> ValidationConfig:
        """The validator's settings from a topic's configs (Kafka's names and string values) over
        the broker's defaults (``broker_props``, under the broker's names: ``message.max.bytes``,
        ``log.message.timestamp.type``, ``log.message.timestamp.before.max.ms``,
        ``log.message.timestamp.after.max.ms``, ``log.cleanup.policy``, ``compression.type``);
        a key set in neither keeps Kafka's default.  A bad value raises ValueError naming the
        key.  ``compression.type`` other than ``producer`` is not implemented (the produced codec
        is kept): it is warned about by name; so is the deprecated
        ``message.timestamp.difference.max.ms``, which kraft does not apply."""
        if broker_props:
            merged = {topic_key: broker_props[broker_key] for topic_key, broker_key in _BROKER_SYNONYMS.items()
                      if broker_props.get(broker_key) is not None}
            merged.update(configs)
            configs = merged
        def number(key: str, default: int) -> int:
            raw = configs.get(key)
            if raw is None:
                return default
            try:
                return int(raw)
            except (TypeError, ValueError):
                raise ValueError(f"topic config {key}={raw!r} is not a number") from None

        ts_raw = configs.get("message.timestamp.type", "CreateTime")
        types = {"CreateTime": TimestampType.CREATE_TIME, "LogAppendTime": TimestampType.LOG_APPEND_TIME}
        if ts_raw not in types:
            raise ValueError(f"topic config message.timestamp.type={ts_raw!r} is neither CreateTime nor LogAppendTime")
        comp = configs.get("compression.type", "producer")
        if comp not in ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd"):
            raise ValueError(f"topic config compression.type={comp!r} is not one of producer, uncompressed, "
                             "gzip, snappy, lz4, zstd")
        if comp != "producer":
            log.warning("topic config compression.type=%s is not applied: kraft keeps the codec each producer "
                        "used (compression.type=producer)", comp)
        if configs.get("message.timestamp.difference.max.ms") is not None:
            log.warning("topic config message.timestamp.difference.max.ms is deprecated and not applied by kraft; "
                        "use message.timestamp.before.max.ms and message.timestamp.after.max.ms")
        policy = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
        return cls(max_message_bytes=number("max.message.bytes", DEFAULT_MAX_MESSAGE_BYTES),
                   timestamp_type=types[ts_raw],
                   timestamp_before_max_ms=number("message.timestamp.before.max.ms", LONG_MAX),
                   timestamp_after_max_ms=number("message.timestamp.after.max.ms", LONG_MAX),
                   compacted="compact" in policy)


class ValidationResult(NamedTuple):
    """What the append needs (one batch: Kafka's Produce v3+ carries exactly one per partition).

    ``records``: the bytes to give ``append_as_leader`` -- the caller's own buffer (or a view of
    its first ``size_in_bytes`` bytes) when ``rewritten`` is False, else a new bytearray.
    Offsets after the append: the batch gets ``[first, first + last_offset_delta]``; Kafka's
    ``shallowOffsetOfMaxTimestamp`` is the last of them.  ``max_timestamp``: the batch's
    maxTimestamp as appended.  ``log_append_time_ms``: ``now`` for a LogAppendTime topic, else
    -1 (the Produce response's ``log_append_time_ms``).  Producer fields as in the batch header;
    ``last_sequence`` is Kafka's ``lastSequence()`` (wraps past 2^31-1 to 0)."""
    records: Any
    rewritten: bool
    size_in_bytes: int
    trimmed_bytes: int
    records_count: int
    last_offset_delta: int
    max_timestamp: int
    log_append_time_ms: int
    compression: Compression
    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    is_transactional: bool

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > _NO_PRODUCER_ID


def fill_partition_response(exc: ProduceValidationError, resp: Any) -> None:
    """Put a refusal into a ``ProduceResponse.PartitionProduceResponse`` as Kafka does: the error
    code, base offset -1, the message (``error_message``, v8+) and the record errors
    (``record_errors``: batch index and message, v8+; older versions drop them when encoding)."""
    resp.error_code = int(exc.error)
    resp.base_offset = -1
    resp.log_append_time_ms = -1
    resp.error_message = exc.message
    resp.record_errors = [ProduceResponse.BatchIndexAndErrorMessage(batch_index=e.batch_index,
                                                                    batch_index_error_message=e.message)
                          for e in exc.record_errors]


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """Kafka's ``DefaultRecordBatch.lastSequence``: sequences wrap from 2^31-1 to 0."""
    if base_sequence < 0:
        return -1
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _wrap64(v: int) -> int:
    """``v`` as a Java long would hold it (the bounds in Kafka's timestamp message overflow)."""
    return ((v + 2**63) % 2**64) - 2**63


def _clamp64(v: int) -> int:
    return min(max(v, _LONG_MIN), LONG_MAX)


def _describe_record(cols: RecordColumns, i: int) -> str:
    """Kafka's ``DefaultRecord.toString`` (a null key or value counts as 0 bytes)."""
    return (f"DefaultRecord(offset={int(cols.offset[i])}, timestamp={int(cols.timestamp[i])}, "
            f"key={max(int(cols.key_len[i]), 0)} bytes, value={max(int(cols.value_len[i]), 0)} bytes)")


def validate_produce_records(records: Any, *, topic_partition: str, config: ValidationConfig, now_ms: int,
                             produce_version: int = 11) -> ValidationResult:
    """Validate one partition's records from a Produce request (see the module doc for the rules
    and their order).  ``records``: any buffer (bytes, bytearray, memoryview); not modified.
    ``topic_partition``: ``"<topic>-<partition>"`` as Kafka prints it in messages.  ``now_ms``:
    the broker's wall clock.  ``produce_version``: the request's version (ZStandard needs v7+).

    Returns a :class:`ValidationResult`; raises :class:`ProduceValidationError` (never anything
    else for bad bytes)."""
    mv = memoryview(records).cast("B") if not isinstance(records, memoryview) or records.format != "B" \
        else records
    total = mv.nbytes
    tp = topic_partition
    size, _magic = _first_batch_frame(mv, total, produce_version)
    (_bo, _blen, _ple, _magic, crc, attrs, lod, base_ts, max_ts, pid, pepoch, base_seq,
     count) = _HEADER.unpack_from(mv, 0) if size >= _V2_HEADER else _short_header(mv, size)
    codec = attrs & COMPRESSION_MASK
    if codec > Compression.ZSTD:
        raise ProduceValidationError(Errors.CORRUPT_MESSAGE, f"Unknown compression type id: {codec}", position=0,
                                     detail="attribute bits 0-2 name no codec")
    if codec == Compression.ZSTD and produce_version < _PRODUCE_ZSTD_MIN_VERSION:
        raise ProduceValidationError(
            Errors.UNSUPPORTED_COMPRESSION_TYPE,
            f"Produce requests with version {produce_version} are not allowed to use ZStandard compression")
    trimmed = _check_single_batch(mv, size, total, produce_version)

    # -- UnifiedLog.analyzeAndValidateRecords
    if _bo != 0:
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"The baseOffset of the record batch in the append to {tp} should be 0, but it is {_bo}", position=0)
    if size > config.max_message_bytes:
        raise ProduceValidationError(
            Errors.MESSAGE_TOO_LARGE,
            f"The record batch size in the append to {tp} is {size} bytes which exceeds the maximum configured "
            f"value of {config.max_message_bytes}.", position=0)
    if size < _V2_HEADER or crc32c(mv[21:size]) != crc:
        raise ProduceValidationError(
            Errors.CORRUPT_MESSAGE, f"Record is corrupt (stored crc = {crc}) in topic partition {tp}.", position=0,
            detail=(f"batch length {size - _LOG_OVERHEAD} is below the v2 header's {_V2_HEADER - _LOG_OVERHEAD}"
                    if size < _V2_HEADER else f"computed crc = {crc32c(mv[21:size])}"))

    # -- LogValidator.validateBatch (origin CLIENT)
    if lod + 1 <= 0:
        raise ProduceValidationError(
            Errors.INVALID_RECORD, f"Batch has an invalid offset range: [0, {lod}] in topic partition {tp}",
            position=0)
    if count <= 0:
        raise ProduceValidationError(
            Errors.INVALID_RECORD, f"Invalid reported count for record batch: {count} in topic partition {tp}",
            position=0)
    if lod + 1 != count:
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"Inconsistent batch offset range [0, {lod}] and count of records {count} in topic partition {tp}",
            position=0)
    if attrs & CONTROL_MASK:
        raise ProduceValidationError(
            Errors.INVALID_RECORD, f"Clients are not allowed to write control records in topic partition {tp}",
            position=0)
    if pid > _NO_PRODUCER_ID and base_seq < 0:
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"Invalid sequence number {base_seq} in record batch with producerId {pid} in topic partition {tp}",
            position=0)

    # -- the records
    cols = _decode(mv, size, tp)
    new_max_ts = _check_records(cols, attrs, config, now_ms, tp, count)

    if attrs & TRANSACTIONAL_MASK:
        raise ProduceValidationError(Errors.INVALID_TXN_STATE, "Record was not part of an ongoing transaction",
                                     position=0, detail="transactions are not supported by kraft")

    # -- the header as it must be appended
    lat = config.timestamp_type == TimestampType.LOG_APPEND_TIME
    if lat:
        new_max_ts = now_ms
    new_attrs = (attrs | TIMESTAMP_TYPE_MASK) if lat else (attrs & ~TIMESTAMP_TYPE_MASK)
    out: Any
    if new_attrs != attrs or new_max_ts != max_ts:
        buf = bytearray(mv[:size])
        _ATTRS_AND_MAX_TS_AT_21.pack_into(buf, 21, new_attrs)
        _MAX_TS.pack_into(buf, 35, new_max_ts)
        _CRC.pack_into(buf, 17, crc32c(memoryview(buf)[21:]))
        out, rewritten = buf, True
    else:
        out = records if trimmed == 0 else mv[:size]
        rewritten = False
    return ValidationResult(out, rewritten, size, trimmed, count, lod, new_max_ts, now_ms if lat else -1,
                            Compression(codec), pid, pepoch, base_seq, last_sequence(base_seq, lod),
                            bool(attrs & TRANSACTIONAL_MASK))


def _short_header(mv: memoryview, size: int) -> tuple[int, ...]:
    """The header fields of a batch too short for a v2 header: what is there, zeros after.
    (Such a batch fails the CRC check; the fields only have to exist until then.)"""
    head = bytes(mv[:size]) + bytes(_V2_HEADER - size)
    return _HEADER.unpack_from(head, 0)


def _frame_at(mv: memoryview, pos: int, total: int) -> tuple[int, int] | None:
    """Kafka's ``ByteBufferLogInputStream.nextBatchSize`` at ``pos``: (batch size, magic), or None
    when the bytes left cannot hold a batch header up to the magic; raises for a size below 14
    or a magic outside 0..2 (CORRUPT_MESSAGE)."""
    remaining = total - pos
    if remaining < _LOG_OVERHEAD:
        return None
    record_size = _I32.unpack_from(mv, pos + 8)[0]
    if record_size < _V0_RECORD_OVERHEAD:
        raise ProduceValidationError(
            Errors.CORRUPT_MESSAGE,
            f"Record size {record_size} is less than the minimum record overhead ({_V0_RECORD_OVERHEAD})",
            position=pos)
    if remaining < _HEADER_UP_TO_MAGIC:
        return None
    magic = mv[pos + 16]
    magic = magic - 256 if magic >= 128 else magic
    if magic < 0 or magic > 2:
        raise ProduceValidationError(Errors.CORRUPT_MESSAGE, f"Invalid magic found in record: {magic}",
                                     position=pos)
    return record_size + _LOG_OVERHEAD, magic


def _first_batch_frame(mv: memoryview, total: int, version: int) -> tuple[int, int]:
    frame = _frame_at(mv, 0, total)
    if frame is None or frame[0] > total:
        got = "no bytes" if total == 0 else (
            f"{total} bytes, a batch needs at least {_HEADER_UP_TO_MAGIC}" if frame is None
            else f"the first batch declares {frame[0]} bytes but {total} are present")
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"Produce requests with version {version} must have at least one record batch per partition",
            detail=got)
    size, magic = frame
    if magic != 2:
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain record batches with magic "
            "version 2", position=0, detail=f"magic {magic}")
    return size, magic


def _check_single_batch(mv: memoryview, size: int, total: int, version: int) -> int:
    """A second whole batch is refused; a partial one is trimmed.  Returns the bytes trimmed."""
    if size == total:
        return 0
    frame = _frame_at(mv, size, total)
    if frame is not None and size + frame[0] <= total:
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"Produce requests with version {version} are only allowed to contain exactly one record batch per "
            "partition", position=size, detail="a second batch starts here")
    return total - size


def _decode(mv: memoryview, size: int, tp: str) -> RecordColumns:
    try:
        scan = scan_batches(mv, 0, size, crc_mode=CRC_SKIP)
        return decode_record_columns(mv, scan.headers)
    except UnsupportedCompression as exc:
        raise ProduceValidationError(Errors.UNSUPPORTED_COMPRESSION_TYPE, str(exc), position=0) from None
    except CorruptRecordError as exc:
        raise ProduceValidationError(
            Errors.INVALID_RECORD, f"Invalid record batch in topic partition {tp}: {exc.reason}",
            position=0, detail=f"at byte {exc.position}" if exc.position >= 0 else None) from None


def _check_records(cols: RecordColumns, attrs: int, config: ValidationConfig, now_ms: int, tp: str,
                   count: int) -> int:
    """Kafka's per-record checks (keys, timestamps) and the offset deltas; returns the batch's
    max record timestamp (-1 when none).  Raises with every record error of the batch."""
    n = len(cols)
    if n != count:  # the decoder enforces the count; kept as a guard on that contract
        raise ProduceValidationError(Errors.INVALID_RECORD,
                                     f"Batch declares {count} records but {n} were read in topic partition {tp}",
                                     position=0)
    offsets = cols.offset
    if not np.array_equal(offsets, np.arange(n, dtype=np.int64)):
        bad = int(np.flatnonzero(offsets != np.arange(n, dtype=np.int64))[0])
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"Record {bad} of the batch has offset delta {int(offsets[bad])}, expected {bad} in topic partition {tp}",
            record_errors=(RecordError(bad, f"offset delta {int(offsets[bad])} is not {bad}"),), position=0,
            detail="kraft does not rebuild batches with non-consecutive offset deltas")
    ts = cols.timestamp
    errors: dict[int, tuple[Errors, RecordError]] = {}
    if config.compacted:
        for i in np.flatnonzero(cols.key_len < 0).tolist():
            errors[i] = (Errors.INVALID_RECORD, RecordError(
                i, f"Compacted topic cannot accept message without key in topic partition {tp}"))
    create_time = config.timestamp_type == TimestampType.CREATE_TIME
    if create_time:
        lo = _clamp64(now_ms - config.timestamp_before_max_ms)
        hi = _clamp64(now_ms + config.timestamp_after_max_ms)
        has_ts = ts != _NO_TIMESTAMP
        bad_ts = np.flatnonzero(has_ts & ((ts < lo) | (ts > hi))).tolist()
        shown_lo = _wrap64(now_ms - config.timestamp_before_max_ms)
        shown_hi = _wrap64(now_ms + config.timestamp_after_max_ms)
        for i in bad_ts:
            if i not in errors:
                errors[i] = (Errors.INVALID_TIMESTAMP, RecordError(
                    i, f"Timestamp {int(ts[i])} of message with offset {int(offsets[i])} is out of range. "
                       f"The timestamp should be within [{shown_lo}, {shown_hi}]"))
        lat_candidates = np.flatnonzero(~has_ts).tolist() if attrs & TIMESTAMP_TYPE_MASK else []
    else:
        lat_candidates = list(range(n)) if attrs & TIMESTAMP_TYPE_MASK else []
    for i in lat_candidates:
        if i not in errors:
            errors[i] = (Errors.INVALID_TIMESTAMP, RecordError(
                i, f"Invalid timestamp type in message {_describe_record(cols, i)}. Producer should not set "
                   "timestamp type to LogAppendTime."))
    if errors:
        ordered = [errors[i] for i in sorted(errors)]
        record_errors = tuple(e for _, e in ordered)
        if any(code == Errors.INVALID_TIMESTAMP for code, _ in ordered):
            raise ProduceValidationError(Errors.INVALID_TIMESTAMP,
                                         "One or more records have been rejected due to invalid timestamp",
                                         record_errors=record_errors, position=0)
        shown = ", ".join(str(e) for e in record_errors[:3])
        raise ProduceValidationError(
            Errors.INVALID_RECORD,
            f"One or more records have been rejected due to {len(record_errors)} record errors in total, and only "
            f"showing the first three errors at most: [{shown}]", record_errors=record_errors, position=0)
    return max(int(ts.max()), _NO_TIMESTAMP) if n else _NO_TIMESTAMP
