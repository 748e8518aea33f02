"""MemoryRaftLog against a naive model: appends, truncation, snapshots, crash semantics."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.raft.log import MemoryRaftLog
from kraft_node.raft.messages import Batch, OffsetAndEpoch


def naive_end_offset_for_epoch(entries, start, start_epoch, epoch):
    """entries: list of epochs for offsets start.. ; Kafka's definition, spelled out."""
    found = None
    for e in entries:
        if e <= epoch:
            found = e if found is None else max(found, e)
    if found is None:
        return OffsetAndEpoch(start, start_epoch)
    end = start + len(entries)
    for i, e in enumerate(entries):
        if e > found:
            end = start + i
            break
    return OffsetAndEpoch(end, found)


def test_crash_drops_unflushed_tail():
    log = MemoryRaftLog()
    log.append_as_leader(Batch(0, 1, (b"a", b"b")))
    log.flush()
    log.append_as_leader(Batch(2, 1, (b"c",)))
    assert (log.end_offset, log.flushed_end_offset) == (3, 2)
    after = log.after_crash()
    assert after.end_offset == 2 and [b.records for b in after.batches()] == [(b"a", b"b")]


def test_truncation_is_durable():
    log = MemoryRaftLog()
    log.append_as_leader(Batch(0, 1, (b"a", b"b", b"c")))
    log.flush()
    log.truncate_to(1)
    log.append_as_follower([Batch(1, 2, (b"x",))])  # unflushed
    after = log.after_crash()
    assert after.end_offset == 1 and after.entry_at(0) == (1, b"a")


def test_append_must_be_contiguous_and_epochs_non_decreasing():
    log = MemoryRaftLog()
    log.append_as_leader(Batch(0, 2, (b"a",)))
    with pytest.raises(ValueError):
        log.append_as_leader(Batch(5, 2, (b"b",)))
    with pytest.raises(ValueError):
        log.append_as_leader(Batch(1, 1, (b"b",)))


def test_snapshot_then_delete_before_moves_log_start():
    log = MemoryRaftLog()
    log.append_as_leader(Batch(0, 1, (b"a", b"b", b"c")))
    log.append_as_leader(Batch(3, 2, (b"d",)))
    log.flush()
    sid = OffsetAndEpoch(2, 1)
    log.create_snapshot(sid, b"s")
    log.delete_before(sid)
    assert log.start_offset == 2 and log.entry_at(2) == (1, b"c")
    assert log.end_offset_for_epoch(0) == OffsetAndEpoch(2, 1)
    assert log.read(2, 1 << 20)[0].base_offset == 2
    with pytest.raises(ValueError):
        log.read(1, 10)
    log.truncate_fully_and_start_at(sid)
    assert (log.start_offset, log.end_offset, log.last_fetched_epoch) == (2, 2, 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "append", "flush", "truncate", "crash", "snapshot"]),
                          st.integers(0, 3), st.integers(1, 4), st.integers(0, 100)), max_size=30))
def test_memory_log_matches_naive_model(ops):
    log = MemoryRaftLog()
    start, start_epoch = 0, 0
    entries: list[int] = []     # epoch of each offset from `start`
    flushed = 0
    for kind, de, n, pick in ops:
        end = start + len(entries)
        if kind == "append":
            epoch = (entries[-1] if entries else start_epoch) + de
            log.append_as_follower([Batch(end, epoch, tuple(b"r%d" % (end + i) for i in range(n)))])
            entries.extend([epoch] * n)
        elif kind == "flush":
            log.flush()
            flushed = start + len(entries)
        elif kind == "truncate":
            to = start + (pick % (len(entries) + 1))
            log.truncate_to(to)
            entries = entries[:to - start]
            flushed = min(flushed, to)
        elif kind == "crash":
            log = log.after_crash()
            entries = entries[:max(flushed, start) - start]
        elif kind == "snapshot" and entries:
            off = start + 1 + pick % len(entries)
            sid = OffsetAndEpoch(off, entries[off - start - 1])
            log.create_snapshot(sid, b"s")
            log.delete_before(sid)
            entries = entries[off - start:]
            start, start_epoch = off, sid.epoch
            flushed = max(flushed, start)
        assert (log.start_offset, log.end_offset) == (start, start + len(entries))
        assert log.last_fetched_epoch == (entries[-1] if entries else start_epoch)
        for q in range(0, 9):
            assert log.end_offset_for_epoch(q) == naive_end_offset_for_epoch(entries, start, start_epoch, q), q
        got = [(b.epoch, r) for b in log.read(start, 1 << 30) for r in b.records] if entries else []
        assert [e for e, _ in got] == entries
        assert [r for _, r in got] == [b"r%d" % o for o in range(start, start + len(entries))]


def test_snapshot_range_reads_what_fetch_snapshot_serves():
    """``read_snapshot_range``: the size and a chunk of a stored snapshot (empty outside it),
    None for a snapshot not stored -- the leader's FetchSnapshot answers read only that."""
    log = MemoryRaftLog()
    sid = OffsetAndEpoch(0, 0)
    log.create_snapshot(sid, b"0123456789")
    assert log.read_snapshot_range(sid, 2, 3) == (10, b"234")
    assert log.read_snapshot_range(sid, 8, 10) == (10, b"89")
    assert log.read_snapshot_range(sid, 10, 1) == (10, b"") and log.read_snapshot_range(sid, -1, 1) == (10, b"")
    assert log.read_snapshot_range(OffsetAndEpoch(5, 1), 0, 1) is None
