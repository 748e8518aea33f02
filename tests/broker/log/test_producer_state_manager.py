"""ProducerStateManager: Kafka's ProducerStateManagerTest scenarios that apply without
transactions, the leader's duplicate detection (UnifiedLogTest's duplicate appends), snapshot
files (round trips, byte compatibility with Kafka's layout and a file Kafka wrote, corruption),
and rebuilding the state from a real KafkaLog after a restart."""
from __future__ import annotations

import logging
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.broker.log.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CorruptSnapshotError,
    ProducerAppendInfo,
    ProducerStateEntry,
    ProducerStateError,
    ProducerStateManager,
    ProducerStateManagerConfig,
    append_replicated_as_follower,
    append_validated_as_leader,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from kraft_node.broker.log.validator import ValidationConfig, validate_produce_records
from kraft_node.protocol.errors import Errors
from kraft_storage.log.config import LogConfig
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch, scan_batches

PID = 1
EPOCH = 0
TP = "topic-0"
INT_MAX = 2**31 - 1


class Clock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def psm(tmp_path: Path, clock: Clock) -> ProducerStateManager:
    return ProducerStateManager(str(tmp_path), TP, ProducerStateManagerConfig(), clock)


def append(m: ProducerStateManager, pid: int, epoch: int, seq: int, offset: int, ts: int | None = None,
           origin: AppendOrigin = AppendOrigin.CLIENT) -> None:
    """Kafka's test helper appendEntry: a one-record batch at ``offset``."""
    info = m.prepare_update(pid, origin)
    info.append_data_batch(epoch, seq, seq, m._clock() if ts is None else ts, offset, offset, False)
    m.update(info)
    m.update_map_end_offset(offset + 1)


def snapshot_offsets(d: Path) -> set[int]:
    return {int(p.name.split(".")[0]) for p in d.iterdir() if p.name.endswith(".snapshot")}


# ----------------------------------------------------------------- sequence and epoch rules
def test_basic_id_mapping(psm: ProducerStateManager) -> None:
    append(psm, PID, EPOCH, 0, 0)
    append(psm, PID, EPOCH, 1, 1)
    with pytest.raises(ProducerStateError) as e:  # a duplicate appended as such is out of order
        append(psm, PID, EPOCH, 1, 2)
    assert e.value.error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert e.value.message == ("Out of order sequence number for producer 1 at offset 2 in partition topic-0: "
                               "1 (incoming seq. number), 1 (current end sequence number)")
    with pytest.raises(ProducerStateError) as e:
        append(psm, PID, EPOCH, 5, 2)
    assert e.value.error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    append(psm, PID, EPOCH + 1, 0, 3)  # a new epoch starts at 0
    with pytest.raises(ProducerStateError) as e:
        append(psm, PID, EPOCH, 0, 4)
    assert e.value.error == Errors.INVALID_PRODUCER_EPOCH
    assert e.value.message == ("Epoch of producer 1 at offset 4 in topic-0 is 0, which is smaller than the last "
                               "seen epoch 1")


def test_new_epoch_must_start_at_sequence_zero(psm: ProducerStateManager) -> None:
    append(psm, PID, 3, 0, 0)
    with pytest.raises(ProducerStateError) as e:
        append(psm, PID, 4, 7, 1)
    assert e.value.error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert e.value.message == ("Invalid sequence number for new epoch of producer 1at offset 1 in partition "
                               "topic-0: 4 (request epoch), 7 (seq. number), 3 (current producer epoch)")


def test_unknown_producer_starts_at_any_sequence(psm: ProducerStateManager) -> None:
    append(psm, PID, 5, 42, 0)
    entry = psm.last_entry(PID)
    assert entry is not None and (entry.first_seq, entry.last_seq) == (42, 42)


def test_producer_sequence_wrap_around(psm: ProducerStateManager) -> None:
    append(psm, PID, 15, INT_MAX, 735, origin=AppendOrigin.REPLICATION)
    append(psm, PID, 15, 0, 1235)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq) == (15, INT_MAX, 0)


def test_producer_sequence_with_wrap_around_batch(psm: ProducerStateManager) -> None:
    info = psm.prepare_update(PID, AppendOrigin.REPLICATION)
    info.append_data_batch(15, INT_MAX - 10, 9, 0, 2000, 2020, False)
    assert psm.last_entry(PID) is None
    psm.update(info)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert (entry.first_seq, entry.last_seq, entry.first_data_offset, entry.last_data_offset) == (
        INT_MAX - 10, 9, 2000, 2020)


def test_producer_sequence_invalid_wrap_around(psm: ProducerStateManager) -> None:
    append(psm, PID, 15, INT_MAX, 735, origin=AppendOrigin.REPLICATION)
    with pytest.raises(ProducerStateError):
        append(psm, PID, 15, 1, 1235)


def test_no_validation_on_first_entry_when_loading_log(psm: ProducerStateManager) -> None:
    append(psm, PID, 5, 16, 735, origin=AppendOrigin.REPLICATION)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert (entry.producer_epoch, entry.first_seq, entry.last_seq, entry.last_data_offset,
            entry.first_data_offset) == (5, 16, 16, 735, 735)


def test_accept_append_with_sequence_gaps_on_replica(psm: ProducerStateManager) -> None:
    append(psm, PID, EPOCH, 0, 0)
    with pytest.raises(ProducerStateError):
        append(psm, PID, EPOCH, 3, 1)
    assert psm.active_producers()[PID].last_seq == 0
    append(psm, PID, EPOCH, 3, 1, origin=AppendOrigin.REPLICATION)
    assert psm.active_producers()[PID].last_seq == 3


def test_older_epoch_on_replication_is_only_logged(psm: ProducerStateManager,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    append(psm, PID, 2, 0, 0)
    with caplog.at_level(logging.WARNING):
        append(psm, PID, 1, 0, 1, origin=AppendOrigin.REPLICATION)
    assert "smaller than the last seen epoch 2" in caplog.text


def test_prepare_update_does_not_mutate(psm: ProducerStateManager) -> None:
    append(psm, PID, EPOCH, 0, 0)
    info = psm.prepare_update(PID, AppendOrigin.CLIENT)
    info.append_data_batch(EPOCH, 1, 5, 0, 1, 5, False)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 0
    psm.update(info)
    assert entry.last_seq == 5 and len(entry.batch_metadata) == 2


def test_only_five_batches_are_cached(psm: ProducerStateManager) -> None:
    for i in range(7):
        append(psm, PID, EPOCH, i, i)
    entry = psm.last_entry(PID)
    assert entry is not None
    assert [b.last_seq for b in entry.batch_metadata] == [2, 3, 4, 5, 6]
    assert entry.find_duplicate_batch(EPOCH, 2, 2) == BatchMetadata(2, 2, 0, entry.batch_metadata[0].timestamp)
    assert entry.find_duplicate_batch(EPOCH, 1, 1) is None
    assert entry.find_duplicate_batch(EPOCH + 1, 2, 2) is None


def test_pid_expiration_timeout(psm: ProducerStateManager, clock: Clock) -> None:
    append(psm, PID, 5, 0, 1)
    clock.now += psm.config.producer_id_expiration_ms - 1
    assert psm.remove_expired_producers() == 0
    clock.now += 2
    assert psm.remove_expired_producers() == 1
    append(psm, PID, 5, 1, 2)  # forgotten: any sequence is accepted again
    assert len(psm.active_producers()) == 1 and psm.active_producers()[PID].last_seq == 1
    assert psm.map_end_offset() == 3


def test_ongoing_transaction_does_not_expire(psm: ProducerStateManager, clock: Clock) -> None:
    psm.load_producer_entry(ProducerStateEntry(PID, 0, 0, clock.now, current_txn_first_offset=5))
    clock.now += 10 * psm.config.producer_id_expiration_ms
    assert psm.remove_expired_producers() == 0


def test_non_transactional_append_with_ongoing_transaction(psm: ProducerStateManager) -> None:
    psm.load_producer_entry(ProducerStateEntry(PID, 0, 0, 0, current_txn_first_offset=5))
    with pytest.raises(ProducerStateError) as e:
        append(psm, PID, 0, 0, 10)
    assert e.value.error == Errors.INVALID_TXN_STATE


def test_config_refuses_bad_expiration() -> None:
    with pytest.raises(ValueError, match=r"producer\.id\.expiration\.ms"):
        ProducerStateManagerConfig(producer_id_expiration_ms=0)


# ----------------------------------------------------------------- the leader's produce path
NOW = 1_700_000_000_000


def produce(m: ProducerStateManager, leo: int, seq: int, n: int = 3, epoch: int = 0,
            pid: int = 7) -> BatchMetadata | ProducerAppendInfo | None:
    data = build_batch([(None, b"v")] * n, timestamp=NOW, producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    result = validate_produce_records(data, topic_partition=TP, config=ValidationConfig(), now_ms=NOW)
    return m.check_leader_append(result, leo)


def test_retried_batch_gets_its_original_offsets(psm: ProducerStateManager) -> None:
    leo = 0
    for seq in range(0, 15, 3):
        check = produce(psm, leo, seq)
        assert isinstance(check, ProducerAppendInfo)
        psm.complete_append(check, leo + 3)
        leo += 3
    for seq in range(0, 15, 3):  # every one of the last five batches is recognised
        dup = produce(psm, leo, seq)
        assert isinstance(dup, BatchMetadata)
        assert (dup.first_offset, dup.last_offset) == (seq, seq + 2)
    check = produce(psm, leo, 15)
    assert isinstance(check, ProducerAppendInfo)
    psm.complete_append(check, leo + 3)
    with pytest.raises(ProducerStateError) as e:  # fell out of the five cached batches
        produce(psm, leo + 3, 0)
    assert e.value.error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert isinstance(produce(psm, leo + 3, 3), BatchMetadata)


def test_retry_with_another_range_is_not_a_duplicate(psm: ProducerStateManager) -> None:
    check = produce(psm, 0, 0, n=3)
    psm.complete_append(check if isinstance(check, ProducerAppendInfo) else None, 3)
    with pytest.raises(ProducerStateError):
        produce(psm, 3, 0, n=2)


def test_batch_without_producer_id(psm: ProducerStateManager) -> None:
    data = build_batch([(None, b"v")], timestamp=NOW)
    result = validate_produce_records(data, topic_partition=TP, config=ValidationConfig(), now_ms=NOW)
    assert psm.check_leader_append(result, 0) is None
    psm.complete_append(None, 1)
    assert psm.map_end_offset() == 1 and psm.is_empty()


def test_apply_replicated_skips_checks(psm: ProducerStateManager) -> None:
    data = b"".join(build_batch([(None, b"v")] * 2, base_offset=o, timestamp=NOW, producer_id=9,
                                producer_epoch=1, base_sequence=s) for o, s in ((10, 4), (12, 40)))
    assert psm.apply_replicated(data) == 2
    entry = psm.last_entry(9)
    assert entry is not None and entry.last_seq == 41 and entry.last_data_offset == 13
    assert psm.map_end_offset() == 14


# ----------------------------------------------------------------- snapshot files
def test_take_snapshot_and_skip_if_unchanged(psm: ProducerStateManager, tmp_path: Path) -> None:
    append(psm, PID, EPOCH, 0, 0)
    path = psm.take_snapshot()
    assert path == snapshot_path(str(tmp_path), 1) and os.path.basename(path) == "00000000000000000001.snapshot"
    assert psm.take_snapshot() is None
    assert snapshot_offsets(tmp_path) == {1}


def test_delete_snapshots_before(psm: ProducerStateManager, tmp_path: Path) -> None:
    append(psm, PID, EPOCH, 0, 0)
    append(psm, PID, EPOCH, 1, 1)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 2, 2)
    psm.take_snapshot()
    assert snapshot_offsets(tmp_path) == {2, 3}
    psm.delete_snapshots_before(3)
    assert snapshot_offsets(tmp_path) == {3}
    psm.delete_snapshots_before(4)
    assert snapshot_offsets(tmp_path) == set()


def test_truncate_fully_and_start_at(psm: ProducerStateManager, tmp_path: Path) -> None:
    append(psm, PID, EPOCH, 0, 0)
    append(psm, PID, EPOCH, 1, 1)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 2, 2)
    psm.take_snapshot()
    psm.truncate_fully_and_start_at(0)
    assert snapshot_offsets(tmp_path) == set() and psm.is_empty()
    append(psm, PID, EPOCH, 0, 0)
    psm.take_snapshot()
    assert snapshot_offsets(tmp_path) == {1}


def test_truncate_and_reload_removes_out_of_range_snapshots(psm: ProducerStateManager) -> None:
    for i in range(5):
        append(psm, PID, EPOCH, i, i)
        psm.take_snapshot()
    psm.truncate_and_reload(1, 3)
    assert (psm.oldest_snapshot_offset(), psm.latest_snapshot_offset()) == (2, 3)
    entry = psm.last_entry(PID)
    assert entry is not None and entry.last_seq == 2 and psm.map_end_offset() == 3


def test_reload_snapshots(psm: ProducerStateManager, tmp_path: Path) -> None:
    append(psm, PID, EPOCH, 1, 1)
    append(psm, PID, EPOCH, 2, 2)
    psm.take_snapshot()
    saved = {p: p.read_bytes() for p in tmp_path.iterdir()}
    append(psm, PID, EPOCH, 3, 3)
    append(psm, PID, EPOCH, 4, 4)
    psm.take_snapshot()
    assert snapshot_offsets(tmp_path) == {3, 5}
    psm.truncate_and_reload(3, 5)
    assert snapshot_offsets(tmp_path) == {5}
    for p, data in saved.items():
        p.write_bytes(data)
    psm.truncate_fully_and_reload_snapshots()
    assert psm.latest_snapshot_offset() == 3 and snapshot_offsets(tmp_path) == {3}


def test_load_from_snapshot_retains_non_expired_producers(psm: ProducerStateManager) -> None:
    append(psm, 1, EPOCH, 0, 0)
    append(psm, 2, EPOCH, 0, 1)
    psm.take_snapshot()
    psm.truncate_and_reload(1, 2)
    assert len(psm.active_producers()) == 2
    e1, e2 = psm.last_entry(1), psm.last_entry(2)
    assert e1 is not None and e2 is not None
    assert (e1.last_seq, e1.last_data_offset, e2.last_seq, e2.last_data_offset) == (0, 0, 0, 1)


def test_remove_expired_pids_on_reload(tmp_path: Path, clock: Clock) -> None:
    cfg = ProducerStateManagerConfig(producer_id_expiration_ms=60_000)
    m = ProducerStateManager(str(tmp_path), TP, cfg, clock)
    append(m, PID, EPOCH, 0, 0, ts=0)
    append(m, PID, EPOCH, 1, 1, ts=1)
    m.take_snapshot()
    recovered = ProducerStateManager(str(tmp_path), TP, cfg, clock)
    recovered.truncate_and_reload(0, 1, 70_000)
    assert recovered.is_empty()
    append(recovered, PID, EPOCH, 2, 2, ts=70_001)
    assert recovered.active_producers()[PID].last_seq == 2 and recovered.map_end_offset() == 3


@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage", "version"])
def test_load_from_corrupt_snapshot_falls_back_to_the_previous_one(
        psm: ProducerStateManager, tmp_path: Path, clock: Clock, damage: str,
        caplog: pytest.LogCaptureFixture) -> None:
    append(psm, PID, EPOCH, 0, 0)
    psm.take_snapshot()
    append(psm, PID, EPOCH, 1, 1)
    psm.take_snapshot()
    latest = Path(snapshot_path(str(tmp_path), 2))
    data = bytearray(latest.read_bytes())
    if damage == "empty":
        data = bytearray()
    elif damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "garbage":
        data[:37] = bytes(37)  # Kafka's test writes 37 zero bytes at the start
    else:
        data[0:2] = b"\x00\x07"
    latest.write_bytes(bytes(data))
    reloaded = ProducerStateManager(str(tmp_path), TP, psm.config, clock)
    with caplog.at_level(logging.WARNING):
        reloaded.truncate_and_reload(0, 20)
    assert not latest.exists()
    assert str(latest) in caplog.text
    entry = reloaded.active_producers()[PID]
    assert entry.last_data_offset == 0


def test_remove_stray_snapshots_keeps_clean_shutdown_snapshot(psm: ProducerStateManager, tmp_path: Path) -> None:
    for off in (5, 2, 42):
        Path(snapshot_path(str(tmp_path), off)).touch()
    psm.remove_stray_snapshots([5])
    assert (psm.latest_snapshot_offset(), psm.oldest_snapshot_offset()) == (42, 5)
    assert snapshot_offsets(tmp_path) == {5, 42}


def test_remove_all_stray_snapshots(psm: ProducerStateManager, tmp_path: Path) -> None:
    for off in (5, 2, 42):
        Path(snapshot_path(str(tmp_path), off)).touch()
    psm.remove_stray_snapshots([42])
    assert snapshot_offsets(tmp_path) == {42}


def test_unfinished_tmp_snapshot_is_removed(tmp_path: Path, clock: Clock) -> None:
    tmp = Path(snapshot_path(str(tmp_path), 9) + ".tmp")
    tmp.write_bytes(b"partial")
    m = ProducerStateManager(str(tmp_path), TP, clock=clock)
    assert not tmp.exists() and m.latest_snapshot_offset() is None


def test_read_write_snapshot(tmp_path: Path) -> None:
    """Kafka's testReadWriteSnapshot."""
    entries = [ProducerStateEntry(1, 2, 3, -1, 100, BatchMetadata(1, 2, 3, -1)),
               ProducerStateEntry(11, 12, 13, 123456, None, None)]
    path = str(tmp_path / "testReadWriteSnapshot")
    write_snapshot(path, entries, True)
    assert read_snapshot(path) == entries


# -- byte compatibility: a reference decoder written from ProducerSnapshot.json (v1), independent of ours
def _crc32c_reference(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def _reference_decode(data: bytes) -> list[dict[str, int]]:
    version, crc = struct.unpack(">hI", data[:6])
    assert version == 1
    assert crc == _crc32c_reference(data[6:])
    (count,) = struct.unpack(">i", data[6:10])
    names = ["ProducerId", "Epoch", "LastSequence", "LastOffset", "OffsetDelta", "Timestamp", "CoordinatorEpoch",
             "CurrentTxnFirstOffset"]
    fmts = [">q", ">h", ">i", ">q", ">i", ">q", ">i", ">q"]
    out, pos = [], 10
    for _ in range(count):
        row = {}
        for name, fmt in zip(names, fmts):
            (row[name],) = struct.unpack_from(fmt, data, pos)
            pos += struct.calcsize(fmt)
        out.append(row)
    assert pos == len(data)
    return out


_entry_args = st.tuples(st.integers(0, 2**63 - 1), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1),
                        st.integers(-1, 2**40), st.integers(0, 1000), st.integers(-1, 2**45),
                        st.integers(-1, 100), st.one_of(st.none(), st.integers(0, 2**40)))


@settings(max_examples=100, deadline=None)
@given(st.lists(_entry_args, max_size=8, unique_by=lambda t: t[0]))
def test_snapshot_bytes_match_kafka_layout(rows: list[tuple[int, int, int, int, int, int, int, int | None]]) -> None:
    entries = []
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn in rows:
        batch = BatchMetadata(last_seq, last_offset, delta, ts) if last_offset >= 0 else None
        entries.append(ProducerStateEntry(pid, epoch, coord, ts, txn, batch))
    data = encode_snapshot(entries)
    ref = _reference_decode(data)
    assert [r["ProducerId"] for r in ref] == sorted(r[0] for r in rows)
    by_pid = {e.producer_id: e for e in entries}
    for r in ref:
        e = by_pid[r["ProducerId"]]
        assert (r["Epoch"], r["LastSequence"], r["LastOffset"], r["OffsetDelta"], r["Timestamp"],
                r["CoordinatorEpoch"], r["CurrentTxnFirstOffset"]) == (
            e.producer_epoch, e.last_seq, e.last_data_offset, e.last_offset_delta, e.last_timestamp,
            e.coordinator_epoch, -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
    assert decode_snapshot(data) == sorted(entries, key=lambda e: e.producer_id)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=120))
def test_random_snapshot_bytes_never_crash(data: bytes) -> None:
    try:
        decode_snapshot(data, "x.snapshot")
    except CorruptSnapshotError as e:
        assert "x.snapshot" in str(e)


def test_snapshot_written_by_kafka(fixtures_dir: Path) -> None:
    """Kafka 3.6 wrote this empty producer snapshot next to its metadata log."""
    path = fixtures_dir / "kafka-3.6.0-combined-single-node" / "__cluster_metadata-0" / "00000000000000000712.snapshot"
    assert read_snapshot(str(path)) == []
    assert encode_snapshot([]) == path.read_bytes()


# ----------------------------------------------------------------- with a real log: roll, restart, rebuild
def _leader_append(log_: KafkaLog, m: ProducerStateManager, seq: int, n: int = 4, pid: int = 7) -> tuple[int, int]:
    data = build_batch([(None, b"x" * 100)] * n, timestamp=NOW, producer_id=pid, producer_epoch=0,
                       base_sequence=seq)
    result = validate_produce_records(data, topic_partition=TP, config=ValidationConfig(), now_ms=NOW)
    end = log_.log_end_offset
    out = append_validated_as_leader(log_, m, result, 0)
    assert out.duplicate == (out.info is None) == (log_.log_end_offset == end)
    return out.first_offset, out.last_offset


def _fill(tmp_path: Path, clock: Clock) -> tuple[Path, list[tuple[int, int]], dict[int, ProducerStateEntry]]:
    d = tmp_path / "topic-0"
    log_ = KafkaLog.open(d, LogConfig(segment_bytes=2048))
    m = ProducerStateManager(str(d), TP, clock=clock)
    m.rebuild(log_)
    offsets = [_leader_append(log_, m, seq, pid=pid) for seq in range(0, 40, 4) for pid in (7, 8)]
    state = {pid: e for pid, e in m.producers.items()}
    assert len(log_.segments) > 2 and len(m.snapshot_offsets) >= 2
    assert m.snapshot_offsets == [s.base_offset for s in log_.segments[1:]]  # one per roll
    log_.close()
    return d, offsets, state


def _same(a: dict[int, ProducerStateEntry], b: dict[int, ProducerStateEntry]) -> None:
    """A snapshot keeps the last batch of each producer (as Kafka's does): compare that."""
    assert a.keys() == b.keys()
    for pid in a:
        assert (a[pid].producer_epoch, a[pid].batch_metadata[-1]) == (b[pid].producer_epoch, b[pid].batch_metadata[-1])


def test_restart_keeps_deduplicating(tmp_path: Path, clock: Clock) -> None:
    d, offsets, state = _fill(tmp_path, clock)
    log_ = KafkaLog.open(d, LogConfig(segment_bytes=2048))
    m = ProducerStateManager(str(d), TP, clock=clock)
    m.rebuild(log_)
    _same(m.producers, state)
    assert m.map_end_offset() == log_.log_end_offset
    end = log_.log_end_offset
    assert _leader_append(log_, m, 36, pid=8) == offsets[-1]  # the last batch retried after the restart
    assert log_.log_end_offset == end
    assert _leader_append(log_, m, 40, pid=8) == (end, end + 3)
    log_.close()


@pytest.mark.parametrize("which", ["none", "all", "latest-corrupt"])
def test_rebuild_from_the_log(tmp_path: Path, clock: Clock, which: str, caplog: pytest.LogCaptureFixture) -> None:
    d, _offsets, state = _fill(tmp_path, clock)
    snaps = sorted(p for p in d.iterdir() if p.name.endswith(".snapshot"))
    if which == "all":
        for p in snaps:
            p.unlink()
    elif which == "latest-corrupt":
        data = bytearray(snaps[-1].read_bytes())
        data[-3] ^= 0x55  # inside an entry: only the CRC tells
        snaps[-1].write_bytes(bytes(data))
    log_ = KafkaLog.open(d, LogConfig(segment_bytes=2048))
    m = ProducerStateManager(str(d), TP, clock=clock)
    with caplog.at_level(logging.WARNING):
        m.rebuild(log_)
    _same(m.producers, state)
    if which == "latest-corrupt":
        assert str(snaps[-1]) in caplog.text and "CRC" in caplog.text
    assert m.latest_snapshot_offset() == log_.log_end_offset
    log_.close()


def test_rebuild_after_truncation(tmp_path: Path, clock: Clock) -> None:
    d, offsets, _state = _fill(tmp_path, clock)
    log_ = KafkaLog.open(d, LogConfig(segment_bytes=2048))
    m = ProducerStateManager(str(d), TP, clock=clock)
    m.rebuild(log_)
    cut = offsets[9][1] + 1  # after pid 8's batch at seq 16
    log_.truncate_to(cut)
    m.truncate_and_reload(log_.log_start_offset, log_.log_end_offset)
    m.rebuild(log_)
    assert all(off <= cut for off in m.snapshot_offsets)
    e7, e8 = m.last_entry(7), m.last_entry(8)
    assert e7 is not None and e8 is not None and (e7.last_seq, e8.last_seq) == (19, 19)
    assert _leader_append(log_, m, 20, pid=7) == (cut, cut + 3)
    log_.close()


def test_clean_shutdown_without_snapshots_skips_the_scan(tmp_path: Path, clock: Clock) -> None:
    d, _offsets, _state = _fill(tmp_path, clock)
    for p in d.iterdir():
        if p.name.endswith(".snapshot"):
            p.unlink()
    log_ = KafkaLog.open(d, LogConfig(segment_bytes=2048))
    m = ProducerStateManager(str(d), TP, clock=clock)
    m.rebuild(log_, reload_from_clean_shutdown=True)
    assert m.is_empty() and m.latest_snapshot_offset() == log_.log_end_offset
    log_.close()


# ----------------------------------------------------------------- exactly once under retries and restarts
@settings(max_examples=25, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("send"), st.integers(1, 4)),
                          st.tuples(st.just("retry"), st.integers(1, 6)),
                          st.tuples(st.just("restart"), st.just(0))), min_size=1, max_size=30))
def test_retries_and_restarts_append_each_batch_once(tmp_path_factory: pytest.TempPathFactory,
                                                     ops: list[tuple[str, int]]) -> None:
    """An idempotent producer that retries any of its last batches, across broker restarts: every
    batch is in the log exactly once, in sequence order; a retry of one of the last 5 batches (the
    last one after a restart: snapshots keep one) is answered with its original offsets, an older
    one is refused OUT_OF_ORDER_SEQUENCE_NUMBER and appends nothing."""
    d = tmp_path_factory.mktemp("p") / "topic-0"
    clock = Clock()
    cfg = LogConfig(segment_bytes=1024)
    log_ = KafkaLog.open(d, cfg)
    m = ProducerStateManager(str(d), TP, clock=clock)
    m.rebuild(log_)
    sent: list[tuple[int, int, tuple[int, int]]] = []  # (base seq, count, offsets)
    cached = 0  # how many of the last batches the producer state is sure to know
    seq = 0
    try:
        for op, arg in ops:
            if op == "send":
                offsets = _leader_append(log_, m, seq, n=arg)
                sent.append((seq, arg, offsets))
                seq += arg
                cached = min(cached + 1, 5)
            elif op == "retry" and sent:
                k = min(arg, len(sent))
                base, n, offsets = sent[-k]
                end = log_.log_end_offset
                if k <= cached:
                    assert _leader_append(log_, m, base, n=n) == offsets
                else:
                    with pytest.raises(ProducerStateError) as e:
                        _leader_append(log_, m, base, n=n)
                    assert e.value.error == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
                assert log_.log_end_offset == end
            elif op == "restart":
                m.take_snapshot()
                log_.close()
                log_ = KafkaLog.open(d, cfg)
                m = ProducerStateManager(str(d), TP, clock=clock)
                m.rebuild(log_)
                cached = min(cached, 1)
        seqs: list[int] = []
        offset = 0
        while offset < log_.log_end_offset:  # a read returns one segment's batches at most
            for h in scan_batches(log_.read_bytes(offset, 1 << 30)).headers:
                seqs.extend(range(int(h["base_sequence"]), int(h["base_sequence"]) + int(h["records_count"])))
                offset = int(h["base_offset"]) + int(h["last_offset_delta"]) + 1
        assert seqs == list(range(seq))
    finally:
        log_.close()


def test_follower_keeps_the_leaders_producer_state(tmp_path: Path, clock: Clock) -> None:
    """A follower fed the leader's log batch by batch ends with the same producers and the same
    snapshot offsets (one per roll), and after a restart deduplicates as the leader would."""
    d, offsets, state = _fill(tmp_path, clock)
    leader = KafkaLog.open(d, LogConfig(segment_bytes=2048))
    fd = tmp_path / "follower" / "topic-0"
    follower = KafkaLog.open(fd, LogConfig(segment_bytes=2048))
    fm = ProducerStateManager(str(fd), TP, clock=clock)
    fm.rebuild(follower)
    offset = 0
    while offset < leader.log_end_offset:
        chunk = leader.read_bytes(offset, 300)
        append_replicated_as_follower(follower, fm, chunk)
        offset = follower.log_end_offset
    _same(fm.producers, state)
    assert fm.snapshot_offsets == [s.base_offset for s in follower.segments[1:]]
    fm.take_snapshot()
    follower.close()
    follower = KafkaLog.open(fd, LogConfig(segment_bytes=2048))
    fm = ProducerStateManager(str(fd), TP, clock=clock)
    fm.rebuild(follower)
    assert _leader_append(follower, fm, 36, pid=8) == offsets[-1]
    follower.close()
    leader.close()


# ----------------------------------------------------------------- the state always equals a replay of the log
def _replayed(log_: KafkaLog, scratch: Path) -> dict[int, ProducerStateEntry]:
    """The oracle: a fresh manager (no snapshots) fed the whole log from its start."""
    scratch.mkdir(parents=True, exist_ok=True)
    fresh = ProducerStateManager(str(scratch), TP, clock=Clock())
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        chunk = log_.read_bytes(offset, 1 << 30)
        fresh.apply_replicated(chunk)
        offset = fresh.map_end_offset()
    return fresh.producers


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("leader"), st.integers(1, 3), st.integers(1, 5)),
                          st.tuples(st.just("follower"), st.integers(1, 3), st.integers(1, 5)),
                          st.tuples(st.just("truncate"), st.integers(0, 8), st.just(0)),
                          st.tuples(st.just("restart"), st.booleans(), st.booleans())),
                min_size=1, max_size=40))
def test_state_equals_a_replay_of_the_log_after_any_history(tmp_path_factory: pytest.TempPathFactory,
                                                            ops: list[tuple[str, int, int]]) -> None:
    """Whatever happened to a replica -- appends as leader and as follower, truncations (a
    follower's diverging epoch), clean restarts and kill -9 restarts, segment rolls with their
    snapshots -- its producer state equals a replay of its log from the start: the same producers,
    epochs and last batches.  A state that lags the log would take a retried batch for a new one
    (a producer with no entry starts anywhere) and append it twice."""
    base = tmp_path_factory.mktemp("h")
    d = base / "topic-0"
    cfg = LogConfig(segment_bytes=700)
    log_ = KafkaLog.open(d, cfg)
    m = ProducerStateManager(str(d), TP, clock=Clock())
    m.rebuild(log_)
    checks = 0
    try:
        for op, a, b in ops:
            if op in ("leader", "follower"):
                prior = _replayed(log_, base / f"o{checks}")
                checks += 1
                entry = prior.get(a)
                seq = entry.last_seq + 1 if entry is not None else 0
                if op == "leader":
                    data = build_batch([(None, b"y" * 40)] * b, timestamp=NOW, producer_id=a, producer_epoch=0,
                                       base_sequence=seq)
                    result = validate_produce_records(data, topic_partition=TP, config=ValidationConfig(),
                                                      now_ms=NOW)
                    out = append_validated_as_leader(log_, m, result, 0)
                    assert not out.duplicate
                else:
                    data = build_batch([(None, b"z" * 40)] * b, base_offset=log_.log_end_offset, timestamp=NOW,
                                       producer_id=a, producer_epoch=0, base_sequence=seq)
                    append_replicated_as_follower(log_, m, data)
            elif op == "truncate":
                bases = [int(h["base_offset"]) for h in scan_batches(_all_bytes(log_)).headers]
                if bases:
                    log_.truncate_to(bases[-1 - min(a, len(bases) - 1)])
                    # the fetcher's reload after a truncation (replica_fetcher._reload_producer_state)
                    m.truncate_and_reload(log_.log_start_offset, log_.log_end_offset)
                    m.rebuild(log_)
            else:
                clean, snapshot_first = a, b
                if clean or snapshot_first:  # a clean close always snapshots (ReplicaManager.shutdown)
                    m.take_snapshot()
                log_.close()
                if not clean:  # kill -9: no clean-shutdown marker (the page cache keeps the bytes)
                    os.unlink(d / ".kafka_cleanshutdown")
                log_ = KafkaLog.open(d, cfg)
                m = ProducerStateManager(str(d), TP, clock=Clock())
                m.rebuild(log_, reload_from_clean_shutdown=log_.load_report.clean_shutdown)
            want = _replayed(log_, base / f"o{checks}")
            checks += 1
            assert m.map_end_offset() == log_.log_end_offset
            _same(m.producers, want)
    finally:
        log_.close()


def _all_bytes(log_: KafkaLog) -> bytes:
    out = bytearray()
    offset = log_.log_start_offset
    while offset < log_.log_end_offset:
        chunk = log_.read_bytes(offset, 1 << 30)
        out += chunk
        offset = int(scan_batches(chunk).headers["base_offset"][-1]) + \
            int(scan_batches(chunk).headers["last_offset_delta"][-1]) + 1
    return bytes(out)
