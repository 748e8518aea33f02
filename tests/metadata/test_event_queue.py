"""EventQueue: KafkaEventQueueTest's scenarios on a fake clock, plus the pure queue's own
contract (on_ready, next_deadline_ns, run_ready limits, timing hook, shutdown order).

Kafka's tests wait on futures filled by a thread; here the test drives ``run_ready`` itself,
so each scenario states exactly which events ran, in what order, at what clock reading.
Kafka's two interrupt scenarios have no counterpart: there is no thread to interrupt.
"""
from __future__ import annotations

import logging

import pytest

from kraft_node.metadata.controller.errors import ControllerTimeoutError, EventQueueClosedError
from kraft_node.metadata.controller.events import SHUTTING_DOWN_MESSAGE, EventQueue
from kraft_node.protocol.errors import Errors

MS = 1_000_000
HOUR = 3600 * 1_000_000_000


class FakeClock:
    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ns: int) -> None:
        self.now += ns


class Recorder:
    """Events that record what happened to them in one shared log."""

    def __init__(self) -> None:
        self.log: list[tuple[str, object]] = []

    def event(self, name: str, action=None) -> "RecordedEvent":
        return RecordedEvent(self, name, action)


class RecordedEvent:
    def __init__(self, recorder: Recorder, name: str, action) -> None:
        self.recorder = recorder
        self.name = name
        self.action = action
        self.exceptions: list[BaseException] = []

    def run(self) -> None:
        self.recorder.log.append(("run", self.name))
        if self.action is not None:
            self.action()

    def handle_exception(self, exc: BaseException) -> None:
        self.exceptions.append(exc)
        self.recorder.log.append(("exc", self.name))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


def test_create_and_close(clock):
    queue = EventQueue(clock, name="test")
    assert not queue.closed
    queue.close()
    assert queue.closed and queue.shutting_down
    assert queue.next_deadline_ns() is None


def test_handle_events_prepend_first_then_fifo(clock, rec):
    """Kafka's testHandleEvents: a prepended event runs first, then appended events in order,
    with or without a deadline; an event added after the queue drained runs next."""
    queue = EventQueue(clock)
    queue.prepend(rec.event("1"))
    queue.append_with_deadline(clock.now + 60_000 * MS, rec.event("2"))
    queue.append(rec.event("3"))
    assert queue.run_ready() == 3
    assert rec.log == [("run", "1"), ("run", "2"), ("run", "3")]
    e4 = rec.event("4")
    queue.append_with_deadline(clock.now + 60_000 * MS, e4)
    assert queue.run_ready() == 1
    assert rec.log[-1] == ("run", "4") and e4.exceptions == []
    clock.advance(120_000 * MS)
    assert queue.run_ready() == 0, "an event that ran is not timed out later"
    assert queue.is_empty()


def test_timeouts(clock, rec):
    """Kafka's testTimeouts: an event whose deadline passes while an earlier event runs gets
    a timeout (REQUEST_TIMED_OUT, no message, like Kafka's TimeoutException) before the event
    queued after it runs, and never runs itself."""
    queue = EventQueue(clock)
    queue.append(rec.event("1"))
    queue.append(rec.event("2", lambda: clock.advance(1 * MS)))
    e3 = rec.event("3")
    queue.append_with_deadline(clock.now + 1, e3)
    queue.append(rec.event("4"))
    assert queue.run_ready() == 4
    assert rec.log == [("run", "1"), ("run", "2"), ("exc", "3"), ("run", "4")]
    assert len(e3.exceptions) == 1
    exc = e3.exceptions[0]
    assert isinstance(exc, ControllerTimeoutError)
    assert exc.error is Errors.REQUEST_TIMED_OUT and exc.message is None
    assert queue.is_empty()


def test_timeout_fires_at_deadline_even_with_nothing_ahead(clock, rec):
    queue = EventQueue(clock)
    late = rec.event("late")
    queue.append_with_deadline(clock.now - 1, late)
    queue.append(rec.event("after"))
    queue.run_ready()
    assert rec.log == [("exc", "late"), ("run", "after")]


def test_schedule_deferred_runs_after_ready_events_and_at_its_deadline(clock, rec):
    """Kafka's testScheduleDeferred: the appended event runs first; the deferred one waits
    for the clock."""
    queue = EventQueue(clock)
    queue.schedule_deferred(None, clock.now + 1 * MS, rec.event("deferred"))
    queue.append(rec.event("appended"))
    assert queue.run_ready() == 1
    assert rec.log == [("run", "appended")]
    assert queue.next_deadline_ns() == clock.now + 1 * MS
    clock.advance(1 * MS - 1)
    assert queue.run_ready() == 0
    clock.advance(1)
    assert queue.next_deadline_ns() == clock.now
    assert queue.run_ready() == 1
    assert rec.log[-1] == ("run", "deferred")
    assert queue.next_deadline_ns() is None


def test_schedule_deferred_with_tag_replacement(clock, rec):
    """Kafka's testScheduleDeferredWithTagReplacement: the second event under a tag replaces
    the first, which never runs and is not told."""
    queue = EventQueue(clock)
    first = rec.event("first")
    queue.schedule_deferred("foo", clock.now + HOUR, first)
    queue.schedule_deferred("foo", clock.now, rec.event("second"))
    assert queue.size() == 1
    clock.advance(2 * HOUR)
    assert queue.run_ready() == 1
    assert rec.log == [("run", "second")]
    assert first.exceptions == []


def test_schedule_deferred_keep_earlier(clock, rec):
    """keep_earlier (Kafka's EarliestDeadlineFunction): a replacement keeps the earlier
    deadline of the two."""
    queue = EventQueue(clock)
    queue.schedule_deferred("t", clock.now + 10 * MS, rec.event("a"))
    queue.schedule_deferred("t", clock.now + 50 * MS, rec.event("b"), keep_earlier=True)
    assert queue.next_deadline_ns() == clock.now + 10 * MS
    queue.schedule_deferred("t", clock.now + 5 * MS, rec.event("c"), keep_earlier=True)
    assert queue.next_deadline_ns() == clock.now + 5 * MS
    queue.schedule_deferred("t", clock.now + 50 * MS, rec.event("d"))
    assert queue.next_deadline_ns() == clock.now + 50 * MS
    clock.advance(50 * MS)
    queue.run_ready()
    assert rec.log == [("run", "d")]


def test_deferred_is_queued_after_triggering(clock, rec):
    """Kafka's testDeferredIsQueuedAfterTriggering: once due, a deferred event runs before
    events appended after it came due."""
    queue = EventQueue(clock)
    count = []
    queue.schedule_deferred("foo", clock.now + 2, rec.event("deferred", lambda: count.append("deferred")))
    queue.append(rec.event("a", lambda: count.append("a")))
    queue.run_ready()
    assert count == ["a"]
    clock.advance(2)
    queue.append(rec.event("c", lambda: count.append("c")))
    queue.run_ready()
    assert count == ["a", "deferred", "c"]


def test_equal_deadlines_run_in_insertion_order(clock, rec):
    queue = EventQueue(clock)
    for name in "abcde":
        queue.schedule_deferred(name, clock.now + 5, rec.event(name))
    queue.schedule_deferred(None, clock.now + 4, rec.event("early"))
    clock.advance(5)
    queue.run_ready()
    assert [name for _, name in rec.log] == ["early", "a", "b", "c", "d", "e"]


def test_shutdown_before_deferred(clock, rec):
    """Kafka's testShutdownBeforeDeferred: a deferred event not yet due is rejected with
    "The event queue is shutting down" and never runs."""
    queue = EventQueue(clock)
    deferred = rec.event("deferred")
    queue.schedule_deferred("myDeferred", clock.now + HOUR, deferred)
    queue.begin_shutdown()
    assert queue.next_deadline_ns() == clock.now
    queue.run_ready()
    assert rec.log == [("exc", "deferred")]
    (exc,) = deferred.exceptions
    assert isinstance(exc, EventQueueClosedError) and str(exc) == SHUTTING_DOWN_MESSAGE
    assert queue.closed and queue.is_empty()


def test_rejected_after_close(clock, rec):
    """Kafka's testRejectedExecutionException: an event added after close is rejected at once."""
    queue = EventQueue(clock)
    queue.close()
    for add in (queue.append, queue.prepend, lambda e: queue.append_with_deadline(clock.now + HOUR, e),
                lambda e: queue.schedule_deferred("x", clock.now, e)):
        event = rec.event("late")
        add(event)
        (exc,) = event.exceptions
        assert isinstance(exc, EventQueueClosedError) and str(exc) == "The event queue is shutting down"
    assert ("run", "late") not in rec.log
    assert queue.is_empty()


def test_shutdown_runs_plain_events_rejects_deadlined_ones_then_cleans_up(clock, rec):
    """Kafka's handler, while shutting down, still runs the ready list but rejects every entry
    waiting on a deadline (deferred ones, and appended ones with a deadline) first; then the
    cleanup event runs, once."""
    queue = EventQueue(clock)
    queue.append(rec.event("plain1"))
    with_deadline = rec.event("with_deadline")
    queue.append_with_deadline(clock.now + HOUR, with_deadline)
    queue.append(rec.event("plain2", lambda: queue.append(rec.event("added_while_closing"))))
    queue.schedule_deferred("d", clock.now + HOUR, rec.event("deferred"))
    cleanups = []
    queue.begin_shutdown(rec.event("cleanup", lambda: cleanups.append(1)))
    queue.begin_shutdown(rec.event("second_cleanup"))
    assert not queue.closed
    queue.run_ready()
    assert rec.log == [("exc", "with_deadline"), ("exc", "deferred"), ("run", "plain1"),
                       ("run", "plain2"), ("exc", "added_while_closing"), ("run", "cleanup")]
    assert isinstance(with_deadline.exceptions[0], EventQueueClosedError)
    assert queue.closed and cleanups == [1]
    assert queue.run_ready() == 0 and cleanups == [1]


def test_close_from_inside_an_event_finishes_in_the_running_drain(clock, rec):
    queue = EventQueue(clock)
    queue.append(rec.event("closer", queue.close))
    queue.append(rec.event("after"))
    queue.run_ready()
    assert rec.log == [("run", "closer"), ("run", "after")]
    assert queue.closed


def test_cleanup_event_exception_is_logged(clock, caplog):
    class Boom:
        def run(self) -> None:
            raise ValueError("cleanup failed")

        def handle_exception(self, exc: BaseException) -> None:
            raise AssertionError("cleanup exceptions are logged, not delivered")

    queue = EventQueue(clock)
    with caplog.at_level(logging.WARNING, logger="kraft_node.metadata.controller.events"):
        queue.begin_shutdown(Boom())
        queue.run_ready()
    assert queue.closed
    assert "cleanup event threw an exception" in caplog.text


def test_size(clock, rec):
    """Kafka's testSize: size counts queued events and the running one; cancelled deferred
    events leave it."""
    queue = EventQueue(clock)
    assert queue.is_empty() and queue.size() == 0
    seen = []
    queue.append(rec.event("a", lambda: seen.append(queue.size())))
    assert not queue.is_empty() and queue.size() == 1
    queue.append(rec.event("b", lambda: seen.append(queue.size())))
    assert queue.size() == 2
    queue.run_ready()
    assert seen == [2, 1], "the running event counts"
    assert queue.is_empty()
    queue.schedule_deferred("later", clock.now + HOUR, rec.event("later"))
    assert not queue.is_empty()
    queue.schedule_deferred("soon", clock.now + 1 * MS, rec.event("soon"))
    assert queue.size() == 2
    assert queue.cancel_deferred("later") is True
    assert queue.cancel_deferred("soon") is True
    assert queue.cancel_deferred("soon") is False
    assert queue.cancel_deferred("never") is False
    assert queue.is_empty()
    clock.advance(2 * HOUR)
    assert queue.run_ready() == 0
    assert ("run", "later") not in rec.log and ("run", "soon") not in rec.log


def test_handle_exception_throwing_an_exception(clock, caplog):
    """Kafka's testHandleExceptionThrowingAnException: run raises, handle_exception raises
    too; that is logged and the next event still runs."""
    counter = []

    class Bad:
        def run(self) -> None:
            counter.append("run")
            raise RuntimeError("First exception")

        def handle_exception(self, exc: BaseException) -> None:
            assert isinstance(exc, RuntimeError) and str(exc) == "First exception"
            counter.append("handle")
            raise RuntimeError("Second exception")

    class Good:
        def run(self) -> None:
            counter.append("next")

        def handle_exception(self, exc: BaseException) -> None:
            raise AssertionError(exc)

    queue = EventQueue(clock, name="q1")
    queue.append(Bad())
    queue.append(Good())
    assert queue.size() == 2
    with caplog.at_level(logging.ERROR, logger="kraft_node.metadata.controller.events"):
        assert queue.run_ready() == 2
    assert counter == ["run", "handle", "next"]
    assert "[q1] unexpected exception in handle_exception" in caplog.text
    assert "Second exception" in caplog.text
    assert queue.is_empty()


def test_exception_from_run_is_handed_to_the_event(clock, rec):
    err = ValueError("boom")

    def fail() -> None:
        raise err

    queue = EventQueue(clock)
    event = rec.event("fails", fail)
    queue.append(event)
    queue.run_ready()
    assert event.exceptions == [err]


def test_base_exceptions_propagate_and_leave_the_queue_consistent(clock, rec):
    def interrupt() -> None:
        raise KeyboardInterrupt

    queue = EventQueue(clock)
    queue.append(rec.event("interrupt", interrupt))
    queue.append(rec.event("next"))
    with pytest.raises(KeyboardInterrupt):
        queue.run_ready()
    assert queue.size() == 1
    assert queue.run_ready() == 1
    assert rec.log[-1] == ("run", "next")


def test_run_ready_is_not_reentrant(clock, rec):
    queue = EventQueue(clock)
    event = rec.event("nested", queue.run_ready)
    queue.append(event)
    queue.run_ready()
    (exc,) = event.exceptions
    assert isinstance(exc, RuntimeError) and "re-entrant" in str(exc)


def test_events_added_while_running_run_in_the_same_call(clock, rec):
    queue = EventQueue(clock)
    queue.append(rec.event("a", lambda: (queue.append(rec.event("c")), queue.prepend(rec.event("b")))))
    assert queue.run_ready() == 3
    assert [name for _, name in rec.log] == ["a", "b", "c"]


def test_on_ready_signals_when_the_next_deadline_moves_earlier(clock, rec):
    calls = []
    queue = EventQueue(clock, on_ready=lambda: calls.append(1))
    queue.append(rec.event("a"))
    assert len(calls) == 1
    queue.append(rec.event("b"))
    assert len(calls) == 1, "the ready list was not empty"
    queue.run_ready()
    queue.schedule_deferred("x", clock.now + 100, rec.event("x"))
    assert len(calls) == 2
    queue.schedule_deferred("y", clock.now + 200, rec.event("y"))
    assert len(calls) == 2, "a later deadline does not move the next wake-up"
    queue.schedule_deferred("z", clock.now + 50, rec.event("z"))
    assert len(calls) == 3
    queue.append_with_deadline(clock.now + 10, rec.event("w"))
    assert len(calls) == 4
    queue.begin_shutdown()
    assert len(calls) == 5


def test_next_deadline(clock, rec):
    queue = EventQueue(clock)
    assert queue.next_deadline_ns() is None
    queue.schedule_deferred("x", clock.now + 100, rec.event("x"))
    assert queue.next_deadline_ns() == clock.now + 100
    queue.append_with_deadline(clock.now + 50, rec.event("y"))
    assert queue.next_deadline_ns() == clock.now, "a ready event is due now"
    queue.run_ready()
    assert queue.next_deadline_ns() == clock.now + 100, "y ran; its deadline no longer counts"
    queue.cancel_deferred("x")
    assert queue.next_deadline_ns() is None


def test_run_ready_max_events_and_budget(clock, rec):
    queue = EventQueue(clock)
    for i in range(5):
        queue.append(rec.event(str(i), lambda: clock.advance(10)))
    assert queue.run_ready(max_events=2) == 2
    assert queue.size() == 3
    assert queue.run_ready(budget_ns=15) == 2, "stops once 15 ns of clock time passed"
    assert queue.run_ready(budget_ns=0) == 1, "at least one event is handled"
    assert [name for _, name in rec.log] == ["0", "1", "2", "3", "4"]


def test_event_timing_hook(clock, rec):
    timings = []
    queue = EventQueue(clock, on_event_timing=lambda q, p: timings.append((q, p)))
    queue.append(rec.event("a", lambda: clock.advance(7)))
    clock.advance(100)
    queue.append(rec.event("b", lambda: clock.advance(3)))
    queue.run_ready()
    assert timings == [(100, 7), (7, 3)]
    timings.clear()
    queue.schedule_deferred("d", clock.now + 1_000, rec.event("d", lambda: clock.advance(2)))
    clock.advance(1_050)
    queue.run_ready()
    assert timings == [(50, 2)], "a deferred event's queue time starts at its deadline"
    timings.clear()
    queue.append_with_deadline(clock.now, rec.event("timed_out"))
    clock.advance(1)
    queue.run_ready()
    assert timings == [], "only events that ran are timed"


def test_timing_hook_exception_is_logged(clock, rec, caplog):
    def hook(q: int, p: int) -> None:
        raise ValueError("metrics broke")

    queue = EventQueue(clock, on_event_timing=hook)
    queue.append(rec.event("a"))
    queue.append(rec.event("b"))
    with caplog.at_level(logging.ERROR, logger="kraft_node.metadata.controller.events"):
        assert queue.run_ready() == 2
    assert "on_event_timing failed" in caplog.text


def test_deadline_heap_does_not_keep_events_that_already_ran(clock, rec):
    """Requests appended with a far deadline usually run long before it; their heap entries
    are dead and must not pile up, even behind a live deferred event at the heap's top."""
    queue = EventQueue(clock)
    queue.schedule_deferred("periodic", clock.now + HOUR // 2, rec.event("periodic"))
    for i in range(20_000):
        queue.append_with_deadline(clock.now + HOUR, rec.event(str(i)))
        queue.run_ready()
    assert len(queue._heap) <= 2 * 1024 + 2
    assert queue.size() == 1 and queue.next_deadline_ns() == clock.now + HOUR // 2
    clock.advance(HOUR // 2)
    assert queue.run_ready() == 1 and rec.log[-1] == ("run", "periodic")
    assert queue.is_empty() and queue.next_deadline_ns() is None
