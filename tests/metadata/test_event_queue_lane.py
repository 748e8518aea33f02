"""The EventQueue's deadline lane: appended events with non-decreasing deadlines skip the
heap (events.py module doc).  The order rules must be exactly the heap's: expired entries
before ready ones, earliest deadline first, equal deadlines in the order queued -- whether
the entries sit in the lane, the heap, or both -- and the lane must not hold dead entries
once nothing in it is live."""
from __future__ import annotations

import random

from kraft_node.metadata.controller.errors import ControllerTimeoutError
from kraft_node.metadata.controller.events import EventQueue

MS = 1_000_000


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class _Ev:
    def __init__(self, log: list, name: str) -> None:
        self.log, self.name = log, name

    def run(self) -> None:
        self.log.append(("run", self.name))

    def handle_exception(self, exc: BaseException) -> None:
        assert isinstance(exc, ControllerTimeoutError)
        self.log.append(("timeout", self.name))


def test_monotone_deadlines_use_the_lane_and_others_the_heap():
    clock = _Clock()
    q = EventQueue(clock)
    log: list = []
    for i, d in enumerate([10, 20, 20, 30]):
        q.append_with_deadline(d * MS, _Ev(log, f"l{i}"))
    q.append_with_deadline(5 * MS, _Ev(log, "h"))  # earlier than the lane's tail: the heap
    q.prepend(_Ev(log, "p"))
    assert len(q._lane) == 4 and len(q._heap) == 1
    assert q.next_deadline_ns() == 0  # ready events: due now
    clock.now = 20 * MS  # h, l0, l1, l2 expire: earliest first, l1 before l2 (queued first)
    q.run_ready()
    assert log == [("timeout", "h"), ("timeout", "l0"), ("timeout", "l1"), ("timeout", "l2"), ("run", "p"),
                   ("run", "l3")]
    assert q.is_empty() and not q._lane and q._lane_live == 0


def test_equal_deadlines_in_lane_and_heap_expire_in_the_order_queued():
    clock = _Clock()
    q = EventQueue(clock)
    log: list = []
    q.append_with_deadline(50 * MS, _Ev(log, "a"))   # lane
    q.append_with_deadline(40 * MS, _Ev(log, "b"))   # heap (decreasing)
    q.append_with_deadline(50 * MS, _Ev(log, "c"))   # lane
    q.schedule_deferred("t", 50 * MS, _Ev(log, "d"))  # heap (deferred)
    q.append_with_deadline(40 * MS, _Ev(log, "e"))   # heap
    clock.now = 60 * MS
    q.run_ready()
    assert log == [("timeout", "b"), ("timeout", "e"), ("timeout", "a"), ("timeout", "c"), ("run", "d")]


def test_events_run_before_their_deadline_leave_nothing_behind():
    clock = _Clock()
    q = EventQueue(clock)
    log: list = []
    for i in range(5000):
        q.append_with_deadline((1000 + i) * MS, _Ev(log, str(i)))
        if i % 7 == 0:
            q.run_ready()
    q.run_ready()
    assert len(log) == 5000 and all(kind == "run" for kind, _ in log)
    assert q._lane_live == 0 and not q._lane and q.next_deadline_ns() is None


def test_random_mixes_agree_with_a_model_of_the_order_rules():
    """Against a model: at each run, expired entries by (deadline, queue order), then ready
    events FIFO (prepends first), each handled once."""
    for seed in range(30):
        rng = random.Random(seed)
        clock = _Clock()
        q = EventQueue(clock)
        log: list = []
        model: list[tuple[str, int | None, int, bool]] = []  # (name, deadline, order, prepended)
        for n in range(200):
            name = str(n)
            kind = rng.random()
            if kind < 0.5:
                d = clock.now + rng.choice([5, 5, 5, 10, 1, 20]) * MS
                q.append_with_deadline(d, _Ev(log, name))
                model.append((name, d, n, False))
            elif kind < 0.6:
                q.prepend(_Ev(log, name))
                model.append((name, None, n, True))
            else:
                q.append(_Ev(log, name))
                model.append((name, None, n, False))
            if rng.random() < 0.2:
                clock.now += rng.randint(0, 8) * MS
                before = len(log)
                budget = rng.randint(1, 6)
                q.run_ready(max_events=budget)
                expected = _model_run(model, clock.now, budget)
                assert log[before:] == expected, seed
        clock.now += 100 * MS
        before = len(log)
        q.run_ready()
        assert log[before:] == _model_run(model, clock.now, None)
        assert q.is_empty() and q._lane_live == 0


def _model_run(model: list, now: int, budget: int | None) -> list:
    out = []
    while model and (budget is None or len(out) < budget):
        expired = [e for e in model if e[1] is not None and e[1] <= now]
        if expired:
            e = min(expired, key=lambda e: (e[1], e[2]))
            out.append(("timeout", e[0]))
        else:
            pre = [e for e in model if e[3]]
            e = max(pre, key=lambda e: e[2]) if pre else min(model, key=lambda e: e[2])
            out.append(("run", e[0]))
        model.remove(e)
    return out


def test_on_ready_is_signalled_exactly_when_the_earliest_deadline_may_move_earlier():
    """A driver sleeps until ``next_deadline_ns``; an append must wake it (``on_ready``) when
    the ready list was empty or the new deadline is at or before every live one (ties too),
    and need not otherwise.  The lane's shortcut (no scan when its live tail is earlier) must
    not change which appends signal: checked against the rule, on random mixes."""
    for seed in range(40):
        rng = random.Random(1000 + seed)
        clock = _Clock()
        signals = [0]

        def ready(signals: list = signals) -> None:
            signals[0] += 1
        q = EventQueue(clock, on_ready=ready)
        log: list = []
        for n in range(300):
            kind = rng.random()
            ready_was_empty = q._ready_live == 0
            first = q._first_live_deadline()
            before = signals[0]
            if kind < 0.6:
                d = clock.now + rng.choice([0, 1, 1, 2, 5, 5, 10]) * MS
                q.append_with_deadline(d, _Ev(log, str(n)))
                expected = ready_was_empty or first is None or d <= first
                assert (signals[0] - before == 1) == expected, (seed, n, d, first)
                assert signals[0] - before <= 1
            elif kind < 0.7:
                q.schedule_deferred(f"t{rng.randint(0, 3)}", clock.now + rng.randint(0, 10) * MS, _Ev(log, str(n)))
            elif kind < 0.8:
                q.append(_Ev(log, str(n)))
                assert (signals[0] - before == 1) == ready_was_empty
            else:
                clock.now += rng.randint(0, 6) * MS
                q.run_ready(max_events=rng.randint(1, 8))
        clock.now += 100 * MS
        q.run_ready()
        assert q.is_empty() and q._lane_live == 0 and not q._lane
