"""The leader's batch accumulator: linger, batch size, backpressure, atomic appends."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.raft.accumulator import BatchAccumulator
from kraft_node.raft.errors import BufferFullError, NotLeaderError, RecordBatchTooLargeError
from kraft_node.raft.messages import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, LeaderChangeMessage


def acc(max_size=1000, max_batches=10, linger=25, base=0, epoch=3):
    return BatchAccumulator(epoch, base, linger, max_size, max_batches)


def test_append_honours_linger():
    a = acc()
    assert a.append(3, [b"x"], now_ms=100) == 0
    assert a.time_until_drain(100) == 25
    assert a.drain(124) == []
    assert a.time_until_drain(124) == 1
    out = a.drain(125)
    assert [b.records for b in out] == [(b"x",)] and out[0].base_offset == 0 and out[0].epoch == 3


def test_full_batches_are_drained_without_waiting_for_linger():
    a = acc(max_size=BATCH_OVERHEAD_BYTES + 2 * (10 + RECORD_OVERHEAD_BYTES))
    a.append(3, [b"0123456789"] * 3, now_ms=0, atomic=False)
    assert a.time_until_drain(0) == 0
    out = a.drain(0)
    assert [len(b.records) for b in out] == [2]  # the open third record still lingers
    assert [len(b.records) for b in a.drain(25)] == [1]


def test_atomic_append_lands_in_one_batch():
    size = BATCH_OVERHEAD_BYTES + 3 * (1 + RECORD_OVERHEAD_BYTES)
    a = acc(max_size=size)
    a.append(3, [b"a", b"b"], 0)
    a.append(3, [b"c", b"d"], 0)  # does not fit next to a, b: starts a new batch
    out = a.drain(25)
    assert [b.records for b in out] == [(b"a", b"b"), (b"c", b"d")]
    assert [b.base_offset for b in out] == [0, 2]


def test_atomic_append_larger_than_a_batch_is_refused():
    a = acc(max_size=BATCH_OVERHEAD_BYTES + 20)
    with pytest.raises(RecordBatchTooLargeError):
        a.append(3, [b"0123456789"] * 3, 0)
    assert a.next_offset == 0 and a.num_batches() == 0


def test_backpressure_refuses_without_side_effects():
    a = acc(max_size=BATCH_OVERHEAD_BYTES + 1 + RECORD_OVERHEAD_BYTES, max_batches=2)
    a.append(3, [b"a"], 0)
    a.append(3, [b"b"], 0)
    with pytest.raises(BufferFullError):
        a.append(3, [b"c"], 0)
    assert a.next_offset == 2
    assert [b.records for b in a.drain(25)] == [(b"a",), (b"b",)]
    assert a.append(3, [b"c"], 30) == 2  # accepted again once drained


def test_append_for_another_epoch_is_not_leader():
    with pytest.raises(NotLeaderError):
        acc(epoch=3).append(4, [b"x"], 0)


def test_control_batch_is_its_own_batch_and_drained_at_once():
    a = acc(base=7)
    a.append(3, [b"a"], 0)
    off = a.append_control(LeaderChangeMessage(0, 1, (1, 2, 3), (1, 2)), b"lc", 0)
    assert off == 8
    out = a.drain(0)
    assert [(b.base_offset, b.is_control) for b in out] == [(7, False), (8, True)]
    assert a.append(3, [b"z"], 0) == 9


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["append", "drain"]),
                          st.lists(st.binary(max_size=40), min_size=1, max_size=6),
                          st.booleans(), st.integers(0, 40)), max_size=40),
       st.integers(BATCH_OVERHEAD_BYTES + 50, BATCH_OVERHEAD_BYTES + 200), st.integers(1, 4))
def test_accumulator_properties(ops, max_size, max_batches):
    a = acc(max_size=max_size, max_batches=max_batches)
    now = 0
    expected: list[bytes] = []   # records accepted, in offset order
    atomic_groups: list[tuple[int, int]] = []
    drained = []
    for kind, recs, atomic, dt in ops:
        now += dt
        if kind == "append":
            before = a.next_offset
            try:
                last = a.append(3, recs, now, atomic=atomic)
            except (BufferFullError, RecordBatchTooLargeError):
                assert a.next_offset == before
                continue
            assert last == before + len(recs) - 1
            expected.extend(recs)
            if atomic:
                atomic_groups.append((before, last))
        else:
            drained.extend(a.drain(now))
        assert a.num_batches() <= max_batches
    drained.extend(a.drain(now + 1000))
    offset = 0
    got = []
    for b in drained:
        assert b.base_offset == offset and b.size_in_bytes <= max_size
        offset = b.next_offset
        got.extend(b.records)
    assert got == expected
    for first, last in atomic_groups:
        assert any(b.base_offset <= first and last <= b.last_offset for b in drained)
