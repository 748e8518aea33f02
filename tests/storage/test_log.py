"""KafkaLog: Kafka fixtures, appends, reads, rolls, truncation, retention, recovery, errors, crashes."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from conftest import FIXTURES, REPO

from kraft_storage.errors import CorruptRecordError
from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import NotALogDirectory, OffsetOutOfRange, OutOfOrderAppend
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE, KafkaLog
from kraft_storage.record import build_batch, iter_batches, scan_batches

FIXTURE_LOGS = sorted(p.parent for p in FIXTURES.glob("*/__cluster_metadata-0/00000000000000000000.log"))
EXPECTED_END = {"kafka-3.6.0-combined-single-node": 3072, "kafka-3.7.0-combined-single-node": 4929}


def batch(n=3, value=b"v", ts=1_700_000_000_000, **kw):
    return build_batch([(None, value + b"%d" % i) for i in range(n)], timestamp=ts, **kw)


def read_all(log, max_bytes=1 << 20, start=None):
    """Every byte of the log by repeated reads (what a follower fetching from 0 would get)."""
    off = log.log_start_offset if start is None else start
    out = []
    while off < log.log_end_offset:
        fd = log.read(off, max_bytes)
        data = fd.tobytes()
        assert len(data) > 0
        h = scan_batches(data).headers  # whole batches, valid CRCs
        assert int(h["base_offset"][0]) <= off <= int(h["base_offset"][0] + h["last_offset_delta"][0])
        out.append(data)
        off = int(h["base_offset"][-1] + h["last_offset_delta"][-1]) + 1
    return b"".join(out)


def copy_fixture(src, tmp_path):
    dst = tmp_path / src.parent.name / src.name
    shutil.copytree(src, dst)
    for p in dst.iterdir():
        p.chmod(0o644)
    return dst


# ---------------------------------------------------------------- fixtures
def test_fixture_logs_found():
    assert {p.parent.name for p in FIXTURE_LOGS} == set(EXPECTED_END)


@pytest.mark.parametrize("src", FIXTURE_LOGS, ids=lambda p: p.parent.name)
def test_fixture_log_reads_completely_and_indexes_are_rebuilt(src, tmp_path):
    d = copy_fixture(src, tmp_path)
    seg_bytes = (src / "00000000000000000000.log").read_bytes()
    epoch_bytes = (src / "leader-epoch-checkpoint").read_bytes()
    log = KafkaLog.open(d)
    rep = log.load_report
    assert not rep.clean_shutdown and rep.truncated_bytes == 0 and len(rep.recovered) == 1
    assert log.log_end_offset == EXPECTED_END[src.parent.name]
    assert read_all(log) == seg_bytes
    assert read_all(log, max_bytes=1) == seg_bytes  # min one batch: a batch per read
    seg = log.active_segment
    assert seg.offset_index.entries > 10
    for slot in range(seg.offset_index.entries):  # every entry names a batch start and its last offset
        off, pos = seg.offset_index.entry(slot)
        h = scan_batches(seg_bytes[pos:pos + 4096], allow_partial_tail=True).headers
        assert int(h["base_offset"][0] + h["last_offset_delta"][0]) == off
    entries = log.epoch_cache.entries()
    log.close()
    assert (d / "leader-epoch-checkpoint").read_bytes() == epoch_bytes  # untouched
    assert (d / "00000000000000000000.log").read_bytes() == seg_bytes
    assert os.path.getsize(d / "00000000000000000000.index") == 8 * len(
        np.frombuffer((d / "00000000000000000000.index").read_bytes(), ">i4")) // 2
    assert (d / CLEAN_SHUTDOWN_FILE).exists()
    log = KafkaLog.open(d)  # clean: nothing recovered, nothing rebuilt
    assert log.load_report.clean_shutdown and not log.load_report.recovered
    assert not log.load_report.rebuilt_indexes and log.epoch_cache.entries() == entries
    assert read_all(log) == seg_bytes
    for e, _ in entries:
        assert log.end_offset_for_epoch(e).epoch == e
    log.close()


def test_fixture_epochs_and_end_offsets(tmp_path):
    src = [p for p in FIXTURE_LOGS if "3.6.0" in p.parent.name][0]
    log = KafkaLog.open(copy_fixture(src, tmp_path))
    assert log.last_fetched_epoch == 6
    assert log.end_offset_for_epoch(2) == (2, 354)
    assert log.end_offset_for_epoch(4) == (3, 711)
    assert log.end_offset_for_epoch(6) == (6, 3072)
    # the epochs stamped in the batches agree with the checkpoint file
    h = scan_batches(log.read(0, 1 << 30).tobytes()).headers
    starts = {}
    for e, b in zip(h["partition_leader_epoch"].tolist(), h["base_offset"].tolist()):
        starts.setdefault(e, b)
    assert sorted(starts.items()) == log.epoch_cache.entries()
    log.close()


def test_fixture_epoch_cache_rebuilt_when_checkpoint_missing(tmp_path):
    src = [p for p in FIXTURE_LOGS if "3.6.0" in p.parent.name][0]
    d = copy_fixture(src, tmp_path)
    want = (d / "leader-epoch-checkpoint").read_bytes()
    (d / "leader-epoch-checkpoint").unlink()
    log = KafkaLog.open(d)
    log.close()
    assert (d / "leader-epoch-checkpoint").read_bytes() == want


# ------------------------------------------------------------ append/read
@pytest.fixture
def log(tmp_path):
    lg = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=150))
    yield lg
    lg.close()


def test_leader_append_stamps_offsets_and_epoch(log):
    src = batch(4, base_offset=999, partition_leader_epoch=77)
    original = bytes(src)
    info = log.append_as_leader(src, leader_epoch=3)
    assert src == original  # the caller's buffer is not modified
    assert (info.first_offset, info.last_offset, info.records) == (0, 3, 4)
    info = log.append_as_leader(src + batch(2), leader_epoch=3)
    assert (info.first_offset, info.last_offset, info.batches) == (4, 9, 2)
    got = list(iter_batches(log.read(0, 1 << 20).tobytes()))  # CRCs still verify
    assert [(b.base_offset, b.partition_leader_epoch) for b in got] == [(0, 3), (4, 3), (8, 3)]
    assert got[1].raw()[16:] == memoryview(original)[16:]
    assert log.end_offset_for_epoch(3) == (3, 10)


def test_follower_append_checks_contiguity(log):
    log.append_as_follower(batch(3, base_offset=0, partition_leader_epoch=1))
    with pytest.raises(OutOfOrderAppend) as ei:
        log.append_as_follower(batch(3, base_offset=5, partition_leader_epoch=1))
    assert (ei.value.expected, ei.value.got) == (3, 5)
    with pytest.raises(OutOfOrderAppend):
        log.append_as_follower(batch(1, base_offset=3, partition_leader_epoch=1) +
                               batch(1, base_offset=7, partition_leader_epoch=1))
    with pytest.raises(OutOfOrderAppend, match="epoch"):
        log.append_as_follower(batch(1, base_offset=3, partition_leader_epoch=0))
    assert log.log_end_offset == 3
    log.append_as_follower(batch(2, base_offset=3, partition_leader_epoch=2))
    assert log.epoch_cache.entries() == [(1, 0), (2, 3)]
    with pytest.raises(ValueError, match="older"):
        log.append_as_leader(batch(1), leader_epoch=1)


def test_bad_appends_are_rejected_whole(log):
    b = bytearray(batch(3))
    b[-1] ^= 1  # CRC mismatch
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(b, 1)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch(3)[:-5], 1)  # torn
    with pytest.raises(ValueError):
        log.append_as_leader(b"", 1)
    assert log.log_end_offset == 0 and log.active_segment.size == 0


def test_read_ranges_and_errors(log):
    for _ in range(10):
        log.append_as_leader(batch(5), 1)
    with pytest.raises(OffsetOutOfRange) as ei:
        log.read(51, 100)
    assert (ei.value.offset, ei.value.start_offset, ei.value.end_offset) == (51, 0, 50)
    assert "[0, 50)" in str(ei.value)
    assert log.read(50, 100).length == 0
    fd = log.read(12, 1)  # inside a batch: that whole batch
    h = scan_batches(fd.tobytes()).headers
    assert h["base_offset"].tolist() == [10]
    fd = log.read(12, 1, min_one_batch=False)
    assert fd.length == 0
    fd = log.read(0, 10**6, max_offset=22)  # stops before the batch starting at >= 22... keeps [20, 24]
    assert scan_batches(fd.tobytes()).headers["base_offset"].tolist() == [0, 5, 10, 15, 20]
    r, w = os.pipe()
    fd = log.read(0, 300)
    assert fd.sendfile(w) == fd.length
    assert os.read(r, 1 << 16) == fd.tobytes()
    os.close(r)
    os.close(w)


def test_roll_on_size_and_time_and_trimmed_indexes(tmp_path):
    now = [1_000_000]
    cfg = LogConfig(segment_bytes=1000, segment_ms=60_000, index_interval_bytes=100,
                    segment_index_bytes=800)
    log = KafkaLog.open(tmp_path / "t-0", cfg, clock=lambda: now[0])
    while len(log.segments) < 3:
        log.append_as_leader(batch(2, ts=now[0]), 1)
    for s in log.segments[:-1]:
        assert 0 < s.size <= 1000
        assert os.path.getsize(s.offset_index.path) == 8 * s.offset_index.entries  # trimmed on roll
        assert os.path.getsize(s.time_index.path) == 12 * s.time_index.entries
    assert os.path.getsize(log.active_segment.offset_index.path) == 800  # preallocated
    n = len(log.segments)
    log.append_as_leader(batch(1, ts=now[0] + 61_000), 1)  # the batch is > segment.ms after the first
    assert len(log.segments) == n + 1
    names = sorted(os.listdir(tmp_path / "t-0"))
    bases = [s.base_offset for s in log.segments]
    for b in bases:
        assert f"{b:020d}.log" in names and f"{b:020d}.index" in names and f"{b:020d}.timeindex" in names
    data = read_all(log)
    log.close()
    log = KafkaLog.open(tmp_path / "t-0", cfg)
    assert [s.base_offset for s in log.segments] == bases and read_all(log) == data
    log.close()


def test_truncate_to(log):
    for e in (1, 1, 2, 2, 3):
        for _ in range(8):
            log.append_as_leader(batch(4), e)
    assert log.log_end_offset == 160 and len(log.segments) >= 2
    data = read_all(log)
    assert log.truncate_to(100)
    assert log.log_end_offset == 100
    assert log.epoch_cache.entries() == [(1, 0), (2, 64)]
    assert read_all(log) == data[:len(read_all(log))]
    assert not log.truncate_to(100)
    log.truncate_to(98)  # inside the batch [96, 99]: the whole batch goes
    assert log.log_end_offset == 96
    log.truncate_to(63)
    assert log.log_end_offset == 60 and log.epoch_cache.entries() == [(1, 0)]
    log.append_as_leader(batch(4), 5)
    assert log.end_offset_for_epoch(1) == (1, 60) and log.end_offset_for_epoch(4) == (1, 60)
    seg = log.active_segment
    for slot in range(seg.offset_index.entries):
        assert seg.offset_index.entry(slot)[0] < log.log_end_offset


def test_truncate_fully_and_start_at(log):
    for _ in range(30):
        log.append_as_leader(batch(4), 2)
    log.truncate_fully_and_start_at(5000)
    assert (log.log_start_offset, log.log_end_offset) == (5000, 5000)
    assert log.epoch_cache.entries() == [] and len(log.segments) == 1
    assert sorted(n for n in os.listdir(log.directory) if n.endswith(".log")) == ["00000000000000005000.log"]
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    log.append_as_leader(batch(1), 3)
    assert log.read(5000, 100).first_batch_offset == 5000
    assert log.end_offset_for_epoch(3) == (3, 5001)


def test_retention_and_log_start(tmp_path):
    now = [10_000_000]
    log = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_bytes=1000, retention_ms=-1),
                        clock=lambda: now[0])
    for i in range(60):
        log.append_as_leader(batch(3, ts=now[0] + i), 1 + i // 20)
    segs = log.segments
    assert len(segs) >= 5
    # never past max_offset: only segments whose every offset is below it
    got = log.delete_old_segments(max_offset=segs[2].base_offset, retention_bytes=0)
    assert got == [segs[0].base_offset, segs[1].base_offset]
    assert log.log_start_offset == segs[2].base_offset
    assert log.epoch_cache.entries()[0][1] == log.log_start_offset
    with pytest.raises(OffsetOutOfRange):
        log.read(0, 100)
    # by time
    assert log.delete_old_segments(now_ms=now[0] + 10**6, retention_ms=10**7) == []
    got = log.delete_old_segments(now_ms=now[0] + 10**8, retention_ms=10**7)
    assert got and log.log_start_offset == log.segments[0].base_offset
    assert len(log.segments) == 1  # the active segment is never deleted
    # advancing the start offset
    end = log.log_end_offset
    with pytest.raises(OffsetOutOfRange):
        log.advance_log_start_offset(end + 1)
    assert log.advance_log_start_offset(end - 2)
    assert log.log_start_offset == end - 2
    assert log.read(end - 2, 100).first_batch_offset == end - 3  # the batch holding it
    log.close()
    log = KafkaLog.open(tmp_path / "t-0", log_start_offset=end - 2)
    assert log.log_start_offset == end - 2
    log.close()


# --------------------------------------------------------------- recovery
def _make_log(d, n=20, cfg=None):
    lg = KafkaLog.open(d, cfg or LogConfig(index_interval_bytes=100))
    for i in range(n):
        lg.append_as_leader(batch(1 + i % 4, value=b"x" * (i % 7)), 1 + i // 10)
    return lg


def test_torn_write_at_every_byte_of_the_last_batch(tmp_path):
    d = tmp_path / "t-0"
    lg = _make_log(d)
    prev_end = lg.log_end_offset
    info = lg.append_as_leader(batch(3, value=b"last"), 2)
    lg.close_uncleanly()
    seg = d / "00000000000000000000.log"
    full = seg.read_bytes()
    start = info.position
    assert start + info.bytes == len(full)
    for cut in range(start, len(full) + 1):
        work = tmp_path / f"w{cut}"
        shutil.copytree(d, work)
        with open(work / seg.name, "r+b") as f:
            f.truncate(cut)
        lg = KafkaLog.open(work)
        rep = lg.load_report
        if cut == len(full):
            assert lg.log_end_offset == info.last_offset + 1 and rep.truncated_bytes == 0
        else:
            assert lg.log_end_offset == prev_end
            assert rep.truncated_bytes == cut - start
            if cut > start:
                assert rep.dropped[0].first_dropped_offset == prev_end
            assert os.path.getsize(work / seg.name) == start
        assert read_all(lg) == (full if cut == len(full) else full[:start])
        lg.append_as_leader(batch(2), 3)  # the log is writable at the right offset
        assert lg.read(prev_end, 1 << 20).first_batch_offset in (prev_end, info.last_offset + 1)
        lg.close()
        shutil.rmtree(work)


def test_corrupt_byte_in_last_batch_is_dropped(tmp_path):
    d = tmp_path / "t-0"
    lg = _make_log(d)
    prev_end = lg.log_end_offset
    info = lg.append_as_leader(batch(3, value=b"last"), 2)
    lg.close_uncleanly()
    seg = d / "00000000000000000000.log"
    full = seg.read_bytes()
    # every byte the CRC or the framing covers (baseOffset and the leader epoch are not covered)
    for rel in list(range(8, 12)) + list(range(16, info.bytes)):
        work = tmp_path / "w"
        shutil.copytree(d, work)
        b = bytearray(full)
        b[info.position + rel] ^= 0x5A
        (work / seg.name).write_bytes(bytes(b))
        lg = KafkaLog.open(work)
        assert lg.log_end_offset == prev_end, rel
        assert lg.load_report.truncated_bytes == info.bytes
        lg.close_uncleanly()
        shutil.rmtree(work)


def test_corruption_in_an_old_segment_drops_everything_after(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=1500, index_interval_bytes=100)
    lg = _make_log(d, 60, cfg)
    segs = [(s.base_offset, s.size) for s in lg.segments]
    assert len(segs) >= 3
    lg.close_uncleanly()
    victim = d / f"{segs[1][0]:020d}.log"
    b = bytearray(victim.read_bytes())
    first = scan_batches(bytes(b)).headers
    pos = int(first["position"][3])
    b[pos + 40] ^= 1
    victim.write_bytes(bytes(b))
    lg = KafkaLog.open(d, cfg)
    rep = lg.load_report
    assert [s.base_offset for s in lg.segments] == [segs[0][0], segs[1][0]]
    assert rep.deleted_segments == [s for s, _ in segs[2:]]
    assert lg.log_end_offset == int(first["base_offset"][3])
    assert "CRC" in rep.dropped[0].reason
    assert not any(n.startswith(f"{segs[2][0]:020d}") for n in os.listdir(d))
    lg.close()


def test_missing_and_corrupt_indexes_are_rebuilt(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=100)
    lg = _make_log(d, 80, cfg)
    lg.close()
    files = sorted(p for p in d.iterdir() if p.suffix in (".index", ".timeindex"))
    want = {p.name: p.read_bytes() for p in files}
    files[0].unlink()
    files[1].write_bytes(b"\x00" * 24)  # zeros: not increasing
    with open(files[2], "r+b") as f:
        f.truncate(f.seek(0, 2) - 3)  # not a whole number of entries
    lg = KafkaLog.open(d, cfg)
    assert lg.load_report.clean_shutdown and lg.load_report.rebuilt_indexes
    lg.close()
    assert {p.name: p.read_bytes() for p in files} == want


def test_recovery_point_limits_the_scan(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=1500)
    lg = _make_log(d, 60, cfg)
    bases = [s.base_offset for s in lg.segments]
    lg.close_uncleanly()
    lg = KafkaLog.open(d, cfg, recovery_point=bases[-2] + 1)
    assert [r.segment[-24:-4] for r in lg.load_report.recovered] == [f"{b:020d}" for b in bases[-2:]]
    lg.close()


def test_not_a_log_directory(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(NotALogDirectory, match="is a file"):
        KafkaLog.open(f)
    with pytest.raises(NotALogDirectory, match="does not exist"):
        KafkaLog.open(tmp_path / "nope", create=False)
    (tmp_path / "logs" / "__cluster_metadata-0").mkdir(parents=True)
    with pytest.raises(NotALogDirectory, match="parent log dir"):
        KafkaLog.open(tmp_path / "logs")
    bad = tmp_path / "bad-0"
    bad.mkdir()
    (bad / "12.log").write_bytes(b"")
    with pytest.raises(NotALogDirectory, match="20-digit"):
        KafkaLog.open(bad)


def test_closed_log_refuses(log):
    log.close()
    from kraft_storage.log.errors import LogClosed
    with pytest.raises(LogClosed):
        log.append_as_leader(batch(1), 1)
    with pytest.raises(LogClosed):
        log.read(0, 10)


# -------------------------------------------------------- concurrency/crash
def test_concurrent_readers_see_whole_batches(tmp_path):
    lg = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_bytes=20_000, index_interval_bytes=500))
    stop = threading.Event()
    errors = []
    seen = [0]

    def reader():
        try:
            while not stop.is_set():
                end = lg.log_end_offset
                off = lg.log_start_offset
                while off < end:
                    data = lg.read(off, 3000).tobytes()
                    h = scan_batches(data).headers  # raises on a partial/corrupt batch
                    base = h["base_offset"]
                    last = base + h["last_offset_delta"]
                    assert np.all(base[1:] == last[:-1] + 1)
                    off = int(last[-1]) + 1
                    seen[0] += len(h)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(3000):
        lg.append_as_leader(batch(1 + i % 5, value=b"y" * (i % 50)), 1 + i // 1000)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert seen[0] > 0 and len(lg.segments) > 3
    lg.close()


_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[2])
from kraft_storage.log.config import LogConfig
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch
log = KafkaLog.open(sys.argv[1], LogConfig(flush_messages=1, segment_bytes=4096))
i = 0
while True:
    info = log.append_as_leader(build_batch([(None, b"payload-%d" % i)]), 1)
    assert info.flushed
    sys.stdout.write(f"{info.last_offset}\n")
    sys.stdout.flush()
    i += 1
"""


def test_kill_9_loses_no_acknowledged_append(tmp_path):
    d = tmp_path / "t-0"
    p = subprocess.Popen([sys.executable, "-c", _CHILD, str(d), str(REPO)], stdout=subprocess.PIPE,
                         text=True)
    acked = -1
    deadline = time.time() + 60
    while acked < 300 and time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        acked = int(line)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert acked >= 300
    lg = KafkaLog.open(d)
    assert not lg.load_report.clean_shutdown
    assert lg.log_end_offset >= acked + 1
    values = [r.value for b in iter_batches(read_all(lg)) for r in b.records()]
    assert values[:acked + 1] == [b"payload-%d" % i for i in range(acked + 1)]
    lg.close()


def test_reopen_of_a_log_emptied_at_its_start_keeps_no_epoch(tmp_path):
    """Found by the stateful test: start == end after truncation; an unclean reopen
    re-reads the batches below the start and must not resurrect their epoch."""
    d = tmp_path / "e-0"
    lg = KafkaLog.open(d)
    for _ in range(3):
        lg.append_as_leader(batch(1), 0)
    lg.advance_log_start_offset(2)
    lg.truncate_to(2)
    assert (lg.log_start_offset, lg.log_end_offset, lg.epoch_cache.entries()) == (2, 2, [])
    lg.close_uncleanly()
    lg = KafkaLog.open(d)
    assert (lg.log_start_offset, lg.log_end_offset) == (0, 2)  # no checkpointed start: the segment's
    lg.close()
    lg = KafkaLog.open(d, log_start_offset=2)
    assert (lg.log_start_offset, lg.log_end_offset, lg.epoch_cache.entries()) == (2, 2, [])
    lg.close()


# ---- split flush (begin_flush on the loop, run on a thread, complete_flush on the loop)
def test_split_flush_moves_the_recovery_point_only_when_completed(log):
    log.append_as_leader(batch(3), 1)
    assert log.recovery_point == 0
    job = log.begin_flush()
    assert job.end_offset == 3
    log.append_as_leader(batch(2), 1)  # appended after the job began: not covered by it
    with pytest.raises(ValueError):
        log.complete_flush(job)  # not run yet
    t = threading.Thread(target=job.run)
    t.start()
    t.join()
    assert log.complete_flush(job) is True
    assert log.recovery_point == 3
    log.flush()
    assert log.recovery_point == 5


def test_split_flush_is_void_after_a_truncation(log):
    log.append_as_leader(batch(3), 1)
    log.flush()
    log.append_as_leader(batch(3), 1)
    job = log.begin_flush()
    log.truncate_to(3)
    log.append_as_follower(build_batch([(None, b"x")] * 3, base_offset=3, partition_leader_epoch=2))
    job.run()
    assert log.complete_flush(job) is False  # the bytes it covered were replaced
    assert log.recovery_point == 3


def test_split_flush_error_is_raised_on_completion(log, monkeypatch):
    log.append_as_leader(batch(3), 1)
    job = log.begin_flush()

    def broken(fd):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", broken)
    job.run()
    monkeypatch.undo()
    with pytest.raises(OSError):
        log.complete_flush(job)
    assert log.recovery_point == 0


# ---- page cache dropped behind the writer (LogConfig.page_cache_retain_bytes)
class _FadviseSpy:
    """Records posix_fadvise calls per file (by inode), and still makes them."""

    def __init__(self, monkeypatch):
        import kraft_storage.log.log as logmod
        self.calls = []  # (inode, offset, length)
        real = os.posix_fadvise

        def spy(fd, offset, length, advice):
            assert advice == os.POSIX_FADV_DONTNEED
            self.calls.append((os.fstat(fd).st_ino, offset, length))
            return real(fd, offset, length, advice)
        monkeypatch.setattr(logmod.os, "posix_fadvise", spy)

    def dropped_to(self, ino):
        """End of the advised prefix of one file; fails unless the ranges are contiguous
        from 0, page-aligned, each byte named once."""
        end = 0
        for i, off, n in self.calls:
            if i == ino:
                assert off == end and n > 0 and off % 4096 == 0 and (off + n) % 4096 == 0
                end = off + n
        return end


def _ino(seg):
    return os.fstat(seg.handle.fd).st_ino


def test_page_cache_is_kept_by_default(tmp_path, monkeypatch):
    spy = _FadviseSpy(monkeypatch)
    lg = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_bytes=50_000))
    try:
        for _ in range(100):
            lg.append_as_leader(batch(5, b"v" * 300), 1)
            lg.flush()
        assert spy.calls == []
    finally:
        lg.close()


def test_flushed_data_older_than_the_retained_tail_leaves_the_page_cache(tmp_path, monkeypatch):
    spy = _FadviseSpy(monkeypatch)
    keep = 10_000
    lg = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_bytes=60_000, page_cache_retain_bytes=keep))
    try:
        written = []
        for i in range(120):
            b = batch(4, b"w%d-" % i + b"v" * 300)
            lg.append_as_leader(b, 1)
            if i % 7 == 6:
                lg.flush()
                segs = lg._segments
                # the newest segment keeps (at least) its last `keep` flushed bytes cached
                last = segs[-1]
                assert spy.dropped_to(_ino(last)) == max(0, last.size - keep) // 4096 * 4096
                # a segment the window has passed entirely is dropped to its last whole page
                behind = 0
                for seg in reversed(segs[:-1]):
                    behind += segs[segs.index(seg) + 1].size
                    if behind >= keep:
                        assert spy.dropped_to(_ino(seg)) == seg.size // 4096 * 4096
            written.append(b)
        assert len(lg._segments) >= 3
        # what is stored is unchanged: a full read gives what a log that kept its cache gives
        ref = KafkaLog.open(tmp_path / "ref-0", LogConfig(segment_bytes=60_000))
        for b in written:
            ref.append_as_leader(b, 1)
        assert read_all(lg) == read_all(ref)
        ref.close()
    finally:
        lg.close()


def test_a_flush_job_drops_pages_when_it_completes_not_when_it_begins(tmp_path, monkeypatch):
    spy = _FadviseSpy(monkeypatch)
    lg = KafkaLog.open(tmp_path / "t-0", LogConfig(page_cache_retain_bytes=0))
    try:
        for _ in range(40):
            lg.append_as_leader(batch(5, b"v" * 300), 1)
        size = lg._segments[-1].size
        job = lg.begin_flush()
        lg.append_as_leader(batch(5, b"v" * 300), 1)  # not covered by the job
        job.run()
        assert spy.calls == []
        assert lg.complete_flush(job)
        assert spy.dropped_to(_ino(lg._segments[-1])) == size // 4096 * 4096  # not past what it flushed
        # a job made void by a truncation drops nothing
        for _ in range(40):
            lg.append_as_leader(batch(5, b"v" * 300), 1)
        before = list(spy.calls)
        job = lg.begin_flush()
        lg.truncate_to(lg.log_end_offset - 5)
        job.run()
        assert not lg.complete_flush(job)
        assert spy.calls == before
    finally:
        lg.close()


def test_page_cache_retain_bytes_is_validated():
    with pytest.raises(ValueError, match="page_cache_retain_bytes"):
        LogConfig(page_cache_retain_bytes=-2)
