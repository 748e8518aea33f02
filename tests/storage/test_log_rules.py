"""Kafka's log rules for time and size (issue 19, item 8): the repros, one test each.

* the largest timestamp survives close/reopen and truncation (Kafka's
  ``LogSegment.close`` writes the final time-index entry; ``truncateTo``
  recomputes the maximum from the remaining batches);
* a time-based roll measures from the segment's first batch after a restart
  (``loadFirstBatchTimestamp``);
* an append larger than ``segment.bytes`` is refused (``RecordBatchTooLargeException``)
  and changes nothing.
"""
from __future__ import annotations

import os
import time

import pytest

from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import RecordBatchTooLargeError
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch


def batch(n=1, ts=1_700_000_000_000, value=b"v"):
    return build_batch([(None, value + b"%d" % i) for i in range(n)], timestamp=ts)


def files(d):
    return {n: (d / n).read_bytes() for n in sorted(os.listdir(d))}


@pytest.mark.parametrize("restart", ["close", "truncate", "close_uncleanly"])
def test_largest_timestamp_survives_and_fresh_data_is_kept(tmp_path, restart):
    d = tmp_path / "t-0"
    now = int(time.time() * 1000)
    log = KafkaLog.open(d)
    for ts in (now - 2000, now, now - 1000):
        log.append_as_leader(batch(ts=ts), 1)
    if restart == "truncate":
        log.append_as_leader(batch(ts=now - 5000), 1)
        log.truncate_to(3)
    else:
        if restart == "close":
            log.close()
            assert os.path.getsize(d / "00000000000000000000.timeindex") == 12  # the final entry
        else:
            log.close_uncleanly()
        log = KafkaLog.open(d)
    assert log.active_segment.largest_timestamp == now
    log.roll()
    assert log.segments[0].largest_timestamp == now
    assert log.delete_old_segments(retention_ms=3_600_000) == []
    assert log.log_start_offset == 0
    log.close()


def test_truncate_recomputes_max_from_batches_past_the_last_index_entry(tmp_path):
    cfg = LogConfig(index_interval_bytes=150)
    log = KafkaLog.open(tmp_path / "t-0", cfg)
    tss = [1000, 5000, 2000, 9000, 3000, 8000, 4000, 7000, 12000, 1]
    for ts in tss:
        log.append_as_leader(batch(2, ts=ts, value=b"x" * 60), 1)
    assert log.active_segment.offset_index.entries >= 2
    for cut in range(len(tss) - 1, 0, -1):
        log.truncate_to(2 * cut)
        seg = log.active_segment
        want = max(tss[:cut])
        assert seg.largest_timestamp == want
        assert seg.offset_of_max_timestamp == 2 * tss.index(want) + 1
    log.close()


@pytest.mark.parametrize("how", ["close", "close_uncleanly"])
def test_time_roll_uses_first_batch_timestamp_after_restart(tmp_path, how):
    d = tmp_path / "t-0"
    t = 1_700_000_000_000
    clock = [t]
    cfg = LogConfig(segment_ms=60_000)
    log = KafkaLog.open(d, cfg, clock=lambda: clock[0])
    log.append_as_leader(batch(ts=t), 1)
    getattr(log, how)()
    log = KafkaLog.open(d, cfg, clock=lambda: clock[0])  # the wall clock did not move
    log.append_as_leader(batch(ts=t + 120_000), 1)
    assert [s.base_offset for s in log.segments] == [0, 1]
    log.close()


def test_time_roll_after_truncation_to_empty_restarts_the_clock(tmp_path):
    t = 1_700_000_000_000
    clock = [t]
    log = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_ms=60_000), clock=lambda: clock[0])
    log.append_as_leader(batch(ts=t), 1)
    log.truncate_to(0)
    clock[0] = t + 10_000
    log.append_as_leader(batch(ts=t + 65_000), 1)  # 65 s after the dropped batch, 55 s after "created"
    log.append_as_leader(batch(ts=t + 100_000), 1)  # 35 s after the first kept batch: no roll
    assert len(log.segments) == 1
    log.close()


@pytest.mark.parametrize("follower", [False, True])
def test_append_larger_than_segment_bytes_is_refused_and_changes_nothing(tmp_path, follower):
    d = tmp_path / "t-0"
    log = KafkaLog.open(d, LogConfig(segment_bytes=1024))
    log.append_as_leader(batch(), 1)
    big = batch(20, value=b"x" * 90)
    assert len(big) > 1024
    before = files(d)
    with pytest.raises(RecordBatchTooLargeError) as ei:
        if follower:
            big = bytearray(big)
            big[0:8] = (1).to_bytes(8, "big")
            big[12:16] = (1).to_bytes(4, "big")  # partitionLeaderEpoch: not under the CRC
            log.append_as_follower(bytes(big))
        else:
            log.append_as_leader(big, 1)
    assert str(ei.value) == (f"Message batch size is {len(big)} bytes in append to partition {d} which "
                             f"exceeds the maximum configured segment size of 1024.")
    assert files(d) == before and log.log_end_offset == 1 and len(log.segments) == 1
    log.append_as_leader(batch(), 1)  # the log still works
    assert log.log_end_offset == 2
    log.close()


def test_batch_exactly_segment_bytes_is_accepted(tmp_path):
    b = batch(3)
    log = KafkaLog.open(tmp_path / "t-0", LogConfig(segment_bytes=len(b)))
    log.append_as_leader(b, 1)
    log.append_as_leader(batch(3), 1)
    assert [s.size for s in log.segments] == [len(b), len(b)]
    log.close()


def test_recovery_keeps_the_index_entries_that_fit(tmp_path):
    """The live segment restarts its index interval at every load (as Kafka's does), so a
    rebuild after a crash finds more entries than were written; the open used to fail
    with "index is full".  It keeps the first ones, and the next append rolls."""
    d = tmp_path / "t-0"
    cfg = LogConfig(index_interval_bytes=0, segment_index_bytes=32)  # 4 offset entries
    ts = 1_700_000_000_000
    for k in range(4):
        log = KafkaLog.open(d, cfg)
        for _ in range(2):
            log.append_as_leader(batch(ts=ts), 1)  # one timestamp: one time-index entry
        if k < 3:
            log.close()
    assert len(log.segments) == 1 and log.active_segment.offset_index.entries == 4
    log.close_uncleanly()
    log = KafkaLog.open(d, cfg)  # the rebuild would make 7 entries
    seg = log.active_segment
    assert log.log_end_offset == 8 and seg.offset_index.entries == 4 and seg.largest_timestamp == ts
    assert [log.read_bytes(o, 100)[:8] == o.to_bytes(8, "big") for o in range(8)] == [True] * 8
    log.append_as_leader(batch(ts=ts), 1)
    assert [s.base_offset for s in log.segments] == [0, 8]
    log.close()
