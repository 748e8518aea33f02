"""The log-append kernel (``_logappend``): native against its twin, and the log's fast path.

Both implementations append the same random batch sequences into their own
file and index buffers; the file bytes, index bytes, returned planner state
and described attributes must be identical, and equal to what a plain
reference (Kafka's rule written out in Python) expects.
"""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kraft_storage._pure._logappend as pure
from kraft_storage.errors import CorruptRecordError
from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import OutOfOrderAppend
from kraft_storage.log.log import KafkaLog
from kraft_storage.log.segment import LogSegment
from kraft_storage.record import build_batches
from kraft_storage.record.batch import CRC_SKIP, CRC_VERIFY, scan_batches

try:
    import kraft_storage._native._logappend as native
    IMPLS = [pure, native]
except ImportError:  # not built: CI builds it; the twin is still tested
    native = None
    IMPLS = [pure]
IDS = [m.__name__.split(".")[1] for m in IMPLS]
LEADER, FOLLOWER = pure.MODE_LEADER, pure.MODE_FOLLOWER


def make(counts, ts0=1_000, base_offset=0, epoch=0, value=b"x" * 50):
    """Batches with ``counts[i]`` records each, increasing timestamps; returns bytes."""
    out = []
    off = base_offset
    for i, c in enumerate(counts):
        ts = np.arange(c, dtype=np.int64) * 3 + ts0 + 100 * i
        out.append(build_batches([value] * c, timestamps=ts, records_per_batch=c, base_offset=off,
                                 partition_leader_epoch=epoch))
        off += c
    return b"".join(out)


class Target:
    """A file plus two index buffers, like a segment's."""

    def __init__(self, tmp_path, name, o_entries=64, t_entries=64):
        self.fd = os.open(str(tmp_path / name), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.obuf = bytearray(8 * o_entries)
        self.tbuf = bytearray(12 * t_entries)
        self.size = 0
        self.state = (0, -1, 0)  # bytes_since, max_ts, offset_of_max_ts
        self.o_n = self.t_n = 0

    def append(self, ap, base=0, interval=200, o_max=10**9, t_max=10**9):
        res = ap.write(self.fd, self.size, base, interval, *self.state, self.obuf, self.o_n, o_max,
                       self.tbuf, self.t_n, t_max)
        self.o_n, self.t_n = res[0], res[1]
        self.state = tuple(res[2:])
        self.size += ap.nbytes
        return res

    def data(self):
        return os.pread(self.fd, self.size + 100, 0)

    def close(self):
        os.close(self.fd)


def attrs(ap):
    return (ap.batches, ap.nbytes, ap.records, ap.first_offset, ap.last_offset, ap.max_timestamp,
            ap.first_max_timestamp, tuple(ap.epochs))


def reference_index(data, base, interval):
    """Kafka 4's per-batch rule over a whole file (what recovery rebuilds)."""
    h = scan_batches(data, crc_mode=CRC_VERIFY).headers
    oe, te = [], []
    since, max_ts, off_max, last_ts = 0, -1, base, -1
    for row in h:
        last = int(row["base_offset"]) + int(row["last_offset_delta"])
        if int(row["max_timestamp"]) > max_ts:
            max_ts, off_max = int(row["max_timestamp"]), last
        if since > interval:
            oe.append(struct.pack(">ii", last - base, int(row["position"])))
            if max_ts > last_ts:
                te.append(struct.pack(">qi", max_ts, off_max - base))
                last_ts = max_ts
            since = 0
        since += int(row["size"])
    return b"".join(oe), b"".join(te)


appends = st.lists(st.lists(st.integers(1, 6), min_size=1, max_size=5), min_size=1, max_size=12)


@pytest.mark.parametrize("k", IMPLS, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(groups=appends, epochs=st.lists(st.integers(0, 4), min_size=12, max_size=12),
       interval=st.integers(0, 1500), start=st.integers(0, 10**6))
def test_leader_appends_match_reference(k, tmp_path_factory, groups, epochs, interval, start):
    tmp = tmp_path_factory.mktemp("la")
    t = Target(tmp, "seg.log")
    ap = k.Appender()
    end, latest, epoch, want_epochs = start, -1, 0, []
    for g, e in zip(groups, epochs):
        epoch = max(epoch, e)  # a leader's epoch never goes down
        buf = make(g, base_offset=7777, epoch=99)  # offsets/epochs in the input are overwritten
        ap.scan(buf, LEADER, end, epoch, latest, CRC_VERIFY)
        assert ap.first_offset == end and ap.last_offset == end + sum(g) - 1
        assert ap.batches == len(g) and ap.records == sum(g) and ap.nbytes == len(buf)
        assert tuple(ap.epochs) == (((epoch, end),) if epoch > latest else ())
        want_epochs += list(ap.epochs)
        t.append(ap, base=start, interval=interval)
        ap.release()
        latest = max(latest, epoch)
        end += sum(g)
    data = t.data()
    h = scan_batches(data, crc_mode=CRC_VERIFY).headers  # CRCs still valid after restamping
    last = h["base_offset"] + h["last_offset_delta"]
    assert h["base_offset"][0] == start and np.all(h["base_offset"][1:] == last[:-1] + 1)
    assert int(last[-1]) == end - 1
    oe, te = reference_index(data, start, interval)
    assert bytes(t.obuf[:8 * t.o_n]) == oe and bytes(t.tbuf[:12 * t.t_n]) == te
    t.close()


@pytest.mark.skipif(native is None, reason="native _logappend not built")
@settings(max_examples=40, deadline=None)
@given(groups=appends, interval=st.integers(0, 1500), follower=st.booleans(),
       crc=st.sampled_from([CRC_SKIP, CRC_VERIFY]))
def test_native_matches_twin_byte_for_byte(tmp_path_factory, groups, interval, follower, crc):
    tmp = tmp_path_factory.mktemp("nt")
    tn, tp = Target(tmp, "n.log"), Target(tmp, "p.log")
    an, apu = native.Appender(), pure.Appender()
    end = 100
    for i, g in enumerate(groups):
        buf = make(g, base_offset=end, epoch=i // 3, ts0=10_000 - 500 * (i % 4))  # timestamps go back too
        args = (buf, FOLLOWER if follower else LEADER, end, 5, (i - 1) // 3 if i else -1, crc)
        an.scan(*args)
        apu.scan(*args)
        assert attrs(an) == attrs(apu)
        assert tn.append(an, base=100, interval=interval) == tp.append(apu, base=100, interval=interval)
        an.release()
        apu.release()
        end += sum(g)
    assert tn.data() == tp.data()
    assert tn.obuf == tp.obuf and tn.tbuf == tp.tbuf
    tn.close()
    tp.close()


@pytest.mark.parametrize("k", IMPLS, ids=IDS)
def test_follower_checks(k):
    ap = k.Appender()
    two = make([2, 3], base_offset=10, epoch=4)
    ap.scan(two, FOLLOWER, 10, -1, 3, CRC_VERIFY)
    assert (ap.first_offset, ap.last_offset, tuple(ap.epochs)) == (10, 14, ((4, 10),))
    ap.scan(two, FOLLOWER, 10, -1, 4, CRC_VERIFY)
    assert tuple(ap.epochs) == ()  # epoch already known
    with pytest.raises(OutOfOrderAppend) as ei:
        ap.scan(two, FOLLOWER, 11, -1, 4, CRC_VERIFY)  # gap / overlap
    assert (ei.value.expected, ei.value.got) == (11, 10)
    gap = make([2], base_offset=10) + make([2], base_offset=13)
    with pytest.raises(OutOfOrderAppend) as ei:
        ap.scan(gap, FOLLOWER, 10, -1, -1, CRC_VERIFY)
    assert (ei.value.expected, ei.value.got) == (12, 13)
    with pytest.raises(OutOfOrderAppend, match="older than epoch 5"):
        ap.scan(two, FOLLOWER, 10, -1, 5, CRC_VERIFY)  # epoch going backwards
    rising = make([1], base_offset=0, epoch=2) + make([1], base_offset=1, epoch=2) + \
        make([1], base_offset=2, epoch=7)
    ap.scan(rising, FOLLOWER, 0, -1, -1, CRC_VERIFY)
    assert tuple(ap.epochs) == ((2, 0), (7, 2))
    ap.release()


@pytest.mark.parametrize("k", IMPLS, ids=IDS)
def test_bad_input_is_refused_before_anything_is_written(k, tmp_path):
    ap = k.Appender()
    good = make([3, 2])
    with pytest.raises(ValueError, match="empty"):
        ap.scan(b"", LEADER, 0, 0, -1, CRC_VERIFY)
    bad_crc = bytearray(good)
    bad_crc[70] ^= 1
    with pytest.raises(CorruptRecordError):
        ap.scan(bad_crc, LEADER, 0, 0, -1, CRC_VERIFY)
    ap.scan(bad_crc, LEADER, 0, 0, -1, CRC_SKIP)  # not checked when asked not to
    with pytest.raises(CorruptRecordError):
        ap.scan(good[:-1], LEADER, 0, 0, -1, CRC_VERIFY)  # torn
    neg = bytearray(make([1]))
    struct.pack_into(">i", neg, 23, -1)  # lastOffsetDelta is under the CRC: scan with CRC_SKIP
    with pytest.raises(CorruptRecordError, match="negative last offset delta"):
        ap.scan(neg, LEADER, 0, 0, -1, CRC_SKIP)
    with pytest.raises(ValueError):
        ap.scan(good, 7, 0, 0, -1, CRC_VERIFY)
    with pytest.raises(RuntimeError):
        k.Appender().write(0, 0, 0, 0, 0, -1, 0, None, 0, 0, None, 0, 0)
    # index full: refused before the write, the file stays empty
    t = Target(tmp_path, "full.log", o_entries=1, t_entries=1)
    ap.scan(make([1] * 5), LEADER, 0, 0, -1, CRC_VERIFY)
    with pytest.raises(ValueError, match="index is full"):
        t.append(ap, interval=0)
    assert os.fstat(t.fd).st_size == 0 and t.obuf == bytearray(8)
    ap.scan(make([1] * 5), LEADER, 0, 0, -1, CRC_VERIFY)
    with pytest.raises(ValueError, match="index is full"):
        t.append(ap, interval=0, o_max=0)  # the configured maximum counts too
    ap.release()
    t.close()


@pytest.mark.parametrize("k", IMPLS, ids=IDS)
def test_failed_write_cuts_the_file_back(k, tmp_path):
    p = tmp_path / "ro.log"
    p.write_bytes(b"")
    fd = os.open(str(p), os.O_RDONLY)
    ap = k.Appender()
    ap.scan(make([2]), LEADER, 0, 0, -1, CRC_VERIFY)
    with pytest.raises(OSError):
        ap.write(fd, 0, 0, 0, 0, -1, 0, bytearray(80), 0, 10, bytearray(120), 0, 10)
    os.close(fd)
    assert p.stat().st_size == 0


@pytest.mark.parametrize("k", IMPLS, ids=IDS)
def test_the_scanned_buffer_is_pinned_until_release(k, tmp_path):
    buf = bytearray(make([2, 2]))
    ap = k.Appender()
    ap.scan(buf, LEADER, 0, 0, -1, CRC_VERIFY)
    with pytest.raises(BufferError):
        buf.extend(b"x")  # cannot be resized under the kernel
    t = Target(tmp_path, "pin.log")
    t.append(ap)
    ap.release()
    ap.release()  # idempotent
    buf.extend(b"x")
    with pytest.raises(RuntimeError):
        t.append(ap)  # write needs a new scan
    t.close()


@pytest.mark.parametrize("k", IMPLS, ids=IDS)
def test_many_batches_in_one_append(k, tmp_path):
    """More batches than one pwritev takes (1024 iovecs = 512 batches)."""
    buf = make([1] * 1500, value=b"")
    t = Target(tmp_path, "many.log", o_entries=2000, t_entries=2000)
    ap = k.Appender()
    ap.scan(buf, LEADER, 5, 1, -1, CRC_VERIFY)
    t.append(ap, base=5, interval=100)
    ap.release()
    data = t.data()
    h = scan_batches(data, crc_mode=CRC_VERIFY).headers
    assert len(h) == 1500 and h["base_offset"].tolist() == list(range(5, 1505))
    assert set(h["partition_leader_epoch"].tolist()) == {1}
    oe, te = reference_index(data, 5, 100)
    assert bytes(t.obuf[:8 * t.o_n]) == oe and bytes(t.tbuf[:12 * t.t_n]) == te
    t.close()


# ---- the log's fast path end to end ----

@pytest.mark.parametrize("interval", [0, 4096])
def test_log_small_appends_index_equals_recovered_index(tmp_path, interval):
    """Indexes written by the append kernel equal the ones recovery rebuilds."""
    cfg = LogConfig(index_interval_bytes=interval, segment_bytes=64 << 10)
    log = KafkaLog.open(tmp_path / "s-0", cfg)
    rng = np.random.default_rng(5)
    for i in range(300):
        log.append_as_leader(make(rng.integers(1, 4, rng.integers(1, 4)).tolist(), ts0=int(rng.integers(0, 10**6))),
                             i // 100)
    assert len(log.segments) > 1
    live = [(s.offset_index.array().tobytes(), s.time_index.array().tobytes()) for s in log.segments]
    sizes = [s.size for s in log.segments]
    end = log.log_end_offset
    log.close_uncleanly()
    segs = [LogSegment(str(tmp_path / "s-0"), int(n[:20]), index_interval_bytes=interval,
                       max_index_size=cfg.segment_index_bytes, preallocate=False)
            for n in sorted(os.listdir(tmp_path / "s-0")) if n.endswith(".log")]
    for seg, (oi, ti), size in zip(segs, live, sizes):
        rep = seg.recover()
        assert rep.truncated_bytes == 0 and rep.valid_bytes == size
        assert seg.offset_index.array().tobytes() == oi
        # a rolled segment got one more time entry on roll (on_become_inactive), recover() alone not
        rec = seg.time_index.array().tobytes()
        assert ti[:len(rec)] == rec and len(ti) - len(rec) in (0, 12)
        seg.close(trim=False)
    log = KafkaLog.open(tmp_path / "s-0", cfg)
    assert log.log_end_offset == end
    assert log.epoch_cache.entries() and log.epoch_cache.latest_epoch == 2
    log.close()


def test_log_rolls_between_scan_and_write(tmp_path):
    """A roll decided after the scan puts the whole append in the new segment."""
    log = KafkaLog.open(tmp_path / "r-0", LogConfig(segment_bytes=1000))
    first = log.append_as_leader(make([5]), 0)
    info = log.append_as_leader(make([5, 5]), 0)
    assert first.segment_base_offset == 0 and info.segment_base_offset == 5 and info.position == 0
    assert (info.first_offset, info.last_offset, info.batches, info.records) == (5, 14, 2, 10)
    data = log.read_bytes(5, 1 << 20)
    h = scan_batches(data).headers
    assert h["base_offset"].tolist() == [5, 10]
    log.close()


def test_log_follower_fast_path_and_errors(tmp_path):
    log = KafkaLog.open(tmp_path / "f-0")
    log.append_as_follower(make([2, 2], base_offset=0, epoch=3))
    with pytest.raises(OutOfOrderAppend):
        log.append_as_follower(make([2], base_offset=5, epoch=3))
    with pytest.raises(OutOfOrderAppend):
        log.append_as_follower(make([2], base_offset=4, epoch=2))
    assert log.log_end_offset == 4 and log.segments[-1].size == len(make([2, 2]))
    info = log.append_as_follower(make([1], base_offset=4, epoch=6))
    assert info.first_offset == 4 and log.epoch_cache.latest_epoch == 6
    assert log.end_offset_for_epoch(3) == (3, 4)
    log.close()


def test_log_append_releases_the_buffer_even_on_error(tmp_path):
    log = KafkaLog.open(tmp_path / "e-0")
    buf = bytearray(make([2], base_offset=3))
    with pytest.raises(OutOfOrderAppend):
        log.append_as_follower(buf)
    buf += b"x"  # resizable again: the export was released
    ok = bytearray(make([2]))
    log.append_as_leader(ok, 0)
    ok += b"x"
    log.close()
