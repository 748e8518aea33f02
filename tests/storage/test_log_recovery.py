"""KafkaLog.open at the edges (issue 19, items 2, 3 and 6): contiguity, failed opens that
change nothing, loud recovery, corruption in a cleanly shut down log."""
from __future__ import annotations

import logging
import os

import pytest

from kraft_storage.log.checkpoint import CheckpointFileError
from kraft_storage.log.config import LogConfig
from kraft_storage.log.epoch_cache import LEADER_EPOCH_CHECKPOINT
from kraft_storage.log.errors import CorruptCleanLogError, SegmentContiguityError
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE, RECOVERY_COUNTERS, KafkaLog
from kraft_storage.record import build_batch

CFG = LogConfig(segment_bytes=1200, index_interval_bytes=200)


def batch(n=3, ts=1_700_000_000_000, value=b"value-"):
    return build_batch([(None, value + b"%d" % i) for i in range(n)], timestamp=ts)


def files(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}


def make_log(d, batches=40, cfg=CFG, clean=True):
    log = KafkaLog.open(d, cfg)
    for i in range(batches):
        log.append_as_leader(batch(ts=1_700_000_000_000 + i), 1 + i // 15)
    bases = [s.base_offset for s in log.segments]
    if clean:
        log.close()
    else:
        log.close_uncleanly()
    return bases


def seg(d, base, suffix=".log"):
    return d / f"{base:020d}{suffix}"


# ------------------------------------------------------------ contiguity
def test_gap_between_segments_is_refused_with_both_names_and_changes_nothing(tmp_path):
    d = tmp_path / "t-0"
    bases = make_log(d)
    assert len(bases) >= 4
    for suf in (".log", ".index", ".timeindex"):
        seg(d, bases[2], suf).unlink()
    before = files(d)
    with pytest.raises(SegmentContiguityError) as ei:
        KafkaLog.open(d, CFG)
    msg = str(ei.value)
    assert f"{bases[1]:020d}.log" in msg and f"{bases[3]:020d}.log" in msg and "gap" in msg
    assert f"[{bases[2]}, {bases[3]})" in msg
    assert files(d) == before  # marker kept, indexes not grown


def test_overlapping_segments_are_refused(tmp_path):
    d = tmp_path / "t-0"
    bases = make_log(d)
    for suf in (".log", ".index", ".timeindex"):
        seg(d, bases[2], suf).rename(seg(d, bases[2] - 1, suf))
    before = files(d)
    with pytest.raises(SegmentContiguityError, match="overlap"):
        KafkaLog.open(d, CFG)
    assert files(d) == before


@pytest.mark.parametrize("clean", [True, False])
def test_empty_non_final_segment_is_refused(tmp_path, clean):
    d = tmp_path / "t-0"
    bases = make_log(d, clean=clean)
    seg(d, bases[1] + 1).write_bytes(b"")  # an empty segment between two others
    with pytest.raises(SegmentContiguityError):
        KafkaLog.open(d, CFG)


def test_recover_clean_cuts_the_log_at_a_gap_loudly(tmp_path, caplog):
    d = tmp_path / "t-0"
    bases = make_log(d)
    for suf in (".log", ".index", ".timeindex"):
        seg(d, bases[2], suf).unlink()
    n0 = RECOVERY_COUNTERS["deleted_segments"]
    with caplog.at_level(logging.WARNING, logger="kraft.storage.log"):
        log = KafkaLog.open(d, CFG, recover_clean=True)
    assert [s.base_offset for s in log.segments] == bases[:2] and log.log_end_offset == bases[2]
    assert sorted(log.load_report.deleted_segments) == bases[3:]
    assert RECOVERY_COUNTERS["deleted_segments"] - n0 == len(bases) - 3
    assert any(f"{bases[3]:020d}.log" in r.getMessage() for r in caplog.records)
    log.close()


# ------------------------------------------------------- failed opens
def test_open_close_of_a_clean_log_is_byte_identical(tmp_path):
    d = tmp_path / "t-0"
    make_log(d)
    before = files(d)
    for _ in range(2):
        log = KafkaLog.open(d, CFG)
        assert log.load_report.clean_shutdown and log.load_report.describe() == []
        # the active indexes grow to segment.index.bytes only when first written (an idle log's
        # open and close cost no ftruncate): an open changes no byte but for the marker it removes
        assert files(d) == {k: v for k, v in before.items() if k != CLEAN_SHUTDOWN_FILE}
        log.close()
        assert files(d) == before
    log = KafkaLog.open(d, CFG)
    log.append_as_leader(batch(), leader_epoch=3)
    assert os.path.getsize(log.active_segment.offset_index.path) == CFG.segment_index_bytes
    assert os.path.getsize(log.active_segment.time_index.path) == CFG.segment_index_bytes // 12 * 12
    entries = log.active_segment.offset_index.entries
    log.close()
    assert os.path.getsize(log.active_segment.offset_index.path) == 8 * entries  # trimmed at close


def test_open_close_keeps_a_kafka_broker_epoch_in_the_marker(tmp_path):
    d = tmp_path / "t-0"
    make_log(d)
    (d / CLEAN_SHUTDOWN_FILE).write_bytes(b'{"version":0,"brokerEpoch":42}')
    before = files(d)
    KafkaLog.open(d, CFG).close()
    assert files(d) == before


def test_bad_leader_epoch_checkpoint_changes_nothing(tmp_path):
    d = tmp_path / "t-0"
    make_log(d)
    (d / LEADER_EPOCH_CHECKPOINT).write_bytes(b"0\n2\n1 0\n")
    before = files(d)
    for _ in range(2):
        with pytest.raises(CheckpointFileError):
            KafkaLog.open(d, CFG)
        assert files(d) == before


def test_failure_late_in_the_load_closes_segments_trimmed_and_keeps_the_marker(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    make_log(d)
    (d / "00000000000000000000.log.deleted").write_bytes(b"x")  # removal waits for success
    before = files(d)
    from kraft_storage.log import epoch_cache

    def boom(self, offset):
        raise RuntimeError("injected")
    monkeypatch.setattr(epoch_cache.LeaderEpochCache, "truncate_from_end", boom)
    with pytest.raises(RuntimeError, match="injected"):
        KafkaLog.open(d, CFG)  # the active indexes were already grown to segment.index.bytes
    assert files(d) == before


def test_failed_open_of_an_empty_directory_leaves_no_segment(tmp_path, monkeypatch):
    d = tmp_path / "t-0"
    from kraft_storage.log import epoch_cache

    def boom(self, offset):
        raise RuntimeError("injected")
    monkeypatch.setattr(epoch_cache.LeaderEpochCache, "truncate_from_end", boom)
    with pytest.raises(RuntimeError):
        KafkaLog.open(d, CFG)
    assert os.listdir(d) == []


# ------------------------------------------------------- loud recovery
def test_unclean_truncation_is_logged_counted_and_reported(tmp_path, caplog):
    d = tmp_path / "t-0"
    bases = make_log(d, clean=False)
    last = seg(d, bases[-1])
    size = last.stat().st_size
    with open(last, "ab") as f:
        f.write(b"\x00" * 5 + b"garbage" * 3)
    c0 = dict(RECOVERY_COUNTERS)
    with caplog.at_level(logging.WARNING, logger="kraft.storage.log"):
        log = KafkaLog.open(d, CFG)
    rep = log.load_report
    assert not rep.clean_shutdown and rep.truncated_bytes == 26
    lines = rep.describe()
    assert len(lines) == 1
    assert f"{bases[-1]:020d}.log" in lines[0] and f"at byte {size}" in lines[0] and "26 bytes" in lines[0]
    assert str(d) in lines[0]
    assert RECOVERY_COUNTERS["truncations"] - c0.get("truncations", 0) == 1
    assert RECOVERY_COUNTERS["truncated_bytes"] - c0.get("truncated_bytes", 0) == 26
    assert lines[0] in [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    s = rep.summary()
    assert "unclean" in s and "DROPPED 26 bytes" in s and f"[0, {log.log_end_offset})" in s
    log.close()
    log = KafkaLog.open(d, CFG)
    assert log.load_report.describe() == [] and "nothing dropped" in log.load_report.summary()
    log.close()


def test_corruption_in_a_middle_segment_deletes_the_rest_loudly(tmp_path, caplog):
    d = tmp_path / "t-0"
    bases = make_log(d, clean=False)
    p = seg(d, bases[1])
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kraft.storage.log"):
        log = KafkaLog.open(d, CFG)
    rep = log.load_report
    assert sorted(rep.deleted_segments) == bases[2:]
    text = "\n".join(rep.describe())
    assert "truncated" in text and all(f"{b:020d}.log" in text for b in bases[2:])
    log.close()


def test_missing_index_of_a_clean_log_is_rebuilt_loudly(tmp_path):
    d = tmp_path / "t-0"
    bases = make_log(d)
    want = seg(d, bases[1], ".index").read_bytes()
    seg(d, bases[1], ".index").unlink()
    n0 = RECOVERY_COUNTERS["rebuilt_indexes"]
    log = KafkaLog.open(d, CFG)
    assert log.load_report.rebuilt_indexes == [bases[1]]
    assert RECOVERY_COUNTERS["rebuilt_indexes"] == n0 + 1
    assert any("rebuilding the indexes" in x and f"{bases[1]:020d}.log" in x for x in log.load_report.describe())
    log.close()
    assert seg(d, bases[1], ".index").read_bytes() == want


@pytest.mark.parametrize("where", ["tail", "indexed"])
def test_corrupt_batch_in_a_clean_log_is_refused_and_changes_nothing(tmp_path, where):
    d = tmp_path / "t-0"
    bases = make_log(d)
    b = bases[-1] if where == "tail" else bases[1]
    p = seg(d, b)
    data = bytearray(p.read_bytes())
    pos = len(data) - 10
    data[pos] ^= 0x55
    p.write_bytes(bytes(data))
    if where == "indexed":  # a corrupt index makes the clean open look at the batches
        seg(d, b, ".index").write_bytes(b"\x00" * 7)
    before = files(d)
    for _ in range(2):  # a second start does not "recover" what the first refused
        with pytest.raises(CorruptCleanLogError) as ei:
            KafkaLog.open(d, CFG)
        msg = str(ei.value)
        assert f"{b:020d}.log" in msg and "byte position" in msg and "shut down cleanly" in msg
        assert "kraft-storage recover" in msg
        assert files(d) == before
    log = KafkaLog.open(d, CFG, recover_clean=True)
    assert log.load_report.truncated_bytes > 0 and log.load_report.describe()
    log.close()


def test_mid_segment_damage_in_a_clean_log_survives_a_failed_start(tmp_path):
    """Issue 19's repro: the first start fails on the CRC; the node closes the log; the
    second start is still a clean open that drops nothing."""
    d = tmp_path / "t-0"
    cfg = LogConfig(index_interval_bytes=200)  # the damage is before the last index entry:
    bases = make_log(d, batches=40, cfg=cfg)    # a clean open does not read that far
    p = seg(d, bases[0])
    data = bytearray(p.read_bytes())
    data[len(data) // 2 + 40] ^= 0x01  # inside a record, under the CRC
    p.write_bytes(bytes(data))
    before = files(d)
    log = KafkaLog.open(d, cfg)
    from kraft_storage.errors import CorruptRecordError
    from kraft_storage.record.batch import CRC_VERIFY, scan_batches
    with pytest.raises(CorruptRecordError):
        scan_batches(log.read_bytes(0, 1 << 20), crc_mode=CRC_VERIFY)
    log.close()
    assert files(d) == before
    log = KafkaLog.open(d, cfg)
    assert log.load_report.clean_shutdown and log.load_report.truncated_bytes == 0
    log.close()


@pytest.mark.parametrize("target", ["segment-0", "segment-2", "segment-last", "resize", "read_next_offset"])
def test_a_failure_anywhere_in_a_clean_open_changes_nothing(tmp_path, monkeypatch, target):
    d = tmp_path / "t-0"
    bases = make_log(d)
    before = files(d)
    from kraft_storage.log import index, segment
    from kraft_storage.log import log as logmod
    calls = [0]
    if target.startswith("segment"):
        k = {"segment-0": 0, "segment-2": 2, "segment-last": len(bases) - 1}[target]
        real = segment.LogSegment.__init__

        def init(self, *a, **kw):
            if calls[0] == k:
                raise OSError(5, "injected I/O error")
            calls[0] += 1
            real(self, *a, **kw)
        monkeypatch.setattr(logmod.LogSegment, "__init__", init)
    elif target == "resize":
        def resize(self, size):
            raise OSError(5, "injected I/O error")
        monkeypatch.setattr(index.TimeIndex, "resize", resize)
    else:
        real_rno = segment.LogSegment.read_next_offset

        def rno(self):
            calls[0] += 1
            if calls[0] == 3:
                raise OSError(5, "injected I/O error")
            return real_rno(self)
        monkeypatch.setattr(segment.LogSegment, "read_next_offset", rno)
    with pytest.raises(OSError, match="injected"):
        KafkaLog.open(d, CFG)
    assert files(d) == before
    monkeypatch.undo()
    log = KafkaLog.open(d, CFG)
    assert log.load_report.clean_shutdown and log.load_report.describe() == []
    log.close()
    assert files(d) == before


def test_removed_leftovers_are_logged_and_counted(tmp_path, caplog):
    d = tmp_path / "t-0"
    make_log(d)
    (d / "00000000000000000007.log.deleted").write_bytes(b"abc")
    (d / "00000000000000099999.index").write_bytes(b"\0" * 16)  # an index without its .log
    n0 = RECOVERY_COUNTERS["removed_files"]
    with caplog.at_level(logging.WARNING, logger="kraft.storage.log"):
        log = KafkaLog.open(d, CFG)
    lines = log.load_report.describe()
    assert sorted(log.load_report.removed_files) == ["00000000000000000007.log.deleted",
                                                     "00000000000000099999.index"]
    assert any("removed 00000000000000000007.log.deleted, 3 bytes" in x for x in lines)
    assert any("removed 00000000000000099999.index, 16 bytes" in x and "without its .log" in x for x in lines)
    assert RECOVERY_COUNTERS["removed_files"] == n0 + 2
    assert len([r for r in caplog.records if "removed" in r.getMessage()]) >= 2
    assert "removed 2 file(s)" in log.load_report.summary()
    log.close()
    assert not (d / "00000000000000099999.index").exists()


@pytest.mark.parametrize("clean", [True, False])
def test_renamed_segment_is_refused_not_truncated(tmp_path, clean):
    """Issue 19, Why 5: a segment whose name breaks offset contiguity was loaded (and an
    unclean open would have cut it whole as "offsets do not increase")."""
    d = tmp_path / "t-0"
    bases = make_log(d, clean=clean)
    last = bases[-1]
    for suf in (".log", ".index", ".timeindex"):
        seg(d, last, suf).rename(seg(d, last + 1000, suf))
    for b in bases[:-1]:
        for suf in (".log", ".index", ".timeindex"):
            seg(d, b, suf).unlink()  # alone, the renamed segment has no neighbour to disagree with
    before = files(d)
    with pytest.raises(SegmentContiguityError) as ei:
        KafkaLog.open(d, CFG)
    assert f"{last + 1000:020d}.log" in str(ei.value) and f"starts at offset {last}" in str(ei.value)
    assert files(d) == before


# -- the recovery point after an open, and flushes with nothing past it (Kafka's LogLoader/flush)

def test_an_unclean_open_keeps_the_checkpointed_recovery_point_until_a_flush(tmp_path):
    """The scanned tail is not known durable (a process crash leaves it in the page cache, where
    the scan finds it intact): the recovery point moves only with a flush, so a recovery-point
    checkpoint written before it cannot skip that tail's recovery after an OS crash."""
    d = str(tmp_path / "t-0")
    make_log(d, batches=10, clean=False)
    lg = KafkaLog.open(d, CFG, recovery_point=6)
    try:
        assert not lg.load_report.clean_shutdown and lg.log_end_offset == 30
        assert lg.recovery_point == 6
        lg.flush()
        assert lg.recovery_point == 30
    finally:
        lg.close_uncleanly()
    lg = KafkaLog.open(d, CFG, recovery_point=10**9)  # a checkpoint past the end is capped
    assert lg.recovery_point == 30
    lg.close()
    lg = KafkaLog.open(d, CFG, recovery_point=0)  # clean: the whole log was flushed at close
    assert lg.load_report.clean_shutdown and lg.recovery_point == 30
    lg.close()


def test_a_flush_with_nothing_past_the_recovery_point_syncs_nothing(tmp_path, monkeypatch):
    d = str(tmp_path / "t-0")
    make_log(d, batches=5)
    syncs = []
    real = os.fdatasync
    monkeypatch.setattr(os, "fdatasync", lambda fd: syncs.append(fd) or real(fd))
    lg = KafkaLog.open(d, CFG)
    lg.flush()
    assert syncs == []  # an idle log: its close costs no fdatasync either
    lg.append_as_leader(batch(), leader_epoch=1)
    lg.flush()
    assert len(syncs) == 1 and lg.recovery_point == lg.log_end_offset
    lg.close()


def test_a_created_log_is_not_reported_as_an_unclean_shutdown(tmp_path, caplog):
    """A log created by this open has nothing to recover: no "after an unclean shutdown" line
    (a broker creating 10,000 partitions logged 10,000 of them); the same directory reopened
    without its marker still says it."""
    d = tmp_path / "t-0"
    with caplog.at_level(logging.INFO, logger="kraft.storage.log"):
        log = KafkaLog.open(d)
        assert log.load_report.created
        log.append_as_leader(build_batch([(None, b"v")]), leader_epoch=0)
        log.flush()
        log.close_uncleanly()
    assert not [r for r in caplog.records if "unclean shutdown" in r.getMessage()]
    with caplog.at_level(logging.INFO, logger="kraft.storage.log"):
        again = KafkaLog.open(d)
        assert not again.load_report.created
        again.close()
    assert [r for r in caplog.records if "after an unclean shutdown" in r.getMessage()]
