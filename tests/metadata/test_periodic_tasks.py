"""PeriodicTaskControlManager: PeriodicTaskControlManagerTest's scenarios on a fake clock and
a fake queue accessor, plus what the controller relies on (records and atomicity passed
through, the wrapped error, VERBOSE logging, a task replaced from inside its own run).

The fake accessor keeps deferred ops by deadline (ties in insertion order) and, like Kafka's
test env, refuses more than 10,000 schedule calls so a rescheduling loop fails the test
instead of hanging it; ``advance_ms`` moves the clock and runs every op that came due.
"""
from __future__ import annotations

import logging

import pytest

from kraft_node.metadata.controller.periodic import (
    DEFAULT_IMMEDIATE_PERIOD_NS,
    ERROR_BACKOFF_NS,
    PeriodicControlTaskError,
    PeriodicTask,
    PeriodicTaskControlManager,
    PeriodicTaskFlag,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_storage.messages.metadata import NoOpRecord

MS = 1_000_000


class FakeClock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


class FakeQueue:
    """The QueueAccessor a QuorumController would give, minus the controller."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.deferred: list[tuple[int, int, str, object]] = []
        self.seq = 0
        self.calls_left = 10_000
        self.results: list[ControllerResult[None]] = []
        self.errors: list[BaseException] = []

    def schedule_deferred(self, tag, deadline_ns, op) -> None:
        if self.calls_left <= 0:
            raise RuntimeError("too many deferred calls.")
        self.calls_left -= 1
        self.cancel_deferred(tag)
        self.seq += 1
        self.deferred.append((deadline_ns, self.seq, tag, op))
        self.deferred.sort(key=lambda item: (item[0], item[1]))

    def cancel_deferred(self, tag) -> None:
        self.deferred = [item for item in self.deferred if item[2] != tag]

    def num_deferred(self) -> int:
        return len(self.deferred)

    def deadline_of(self, tag: str) -> int:
        (deadline,) = [item[0] for item in self.deferred if item[2] == tag]
        return deadline

    def advance_ms(self, ms: int) -> None:
        self.clock.now += ms * MS
        while self.deferred and self.deferred[0][0] <= self.clock.now:
            _, _, _, op = self.deferred.pop(0)
            try:
                self.results.append(op())
            except Exception as exc:
                self.errors.append(exc)


class FakeTask:
    """Counts its runs; ``continuation`` answers True once; ``should_fail`` raises once."""

    def __init__(self, name: str, period_ms: int, **kwargs) -> None:
        self.num_calls = 0
        self.continuation = False
        self.should_fail = False
        self.records: list[ApiMessageAndVersion] = []
        self.atomic = False
        self.task = PeriodicTask(name, self._op, period_ms * MS, **kwargs)

    def _op(self) -> ControllerResult[bool]:
        self.num_calls += 1
        if self.should_fail:
            self.should_fail = False
            raise ValueError("uh oh")
        again, self.continuation = self.continuation, False
        return ControllerResult(list(self.records), again, self.atomic)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def queue(clock) -> FakeQueue:
    return FakeQueue(clock)


@pytest.fixture
def manager(clock, queue) -> PeriodicTaskControlManager:
    return PeriodicTaskControlManager(clock, queue)


def test_activate(manager, queue):
    assert not manager.active
    manager.activate()
    assert manager.active
    assert queue.num_deferred() == 0
    with pytest.raises(RuntimeError, match="^Can't activate already active PeriodicTaskControlManager.$"):
        manager.activate()


def test_deactivate(manager, queue):
    manager.deactivate()  # inactive: nothing to do
    manager.activate()
    manager.deactivate()
    assert not manager.active
    assert queue.num_deferred() == 0


def test_register_task_when_deactivated(manager, queue):
    manager.register_task(FakeTask("foo", 100).task)
    assert queue.num_deferred() == 0
    assert manager.task_names() == ["foo"]


def test_register_task_when_activated(manager, queue, clock):
    clock.now = 7 * MS
    manager.activate()
    manager.register_task(FakeTask("foo", 100).task)
    assert queue.num_deferred() == 1
    assert queue.deadline_of("foo") == 107 * MS


def test_register_task_when_activated_then_deactivate(manager, queue):
    manager.activate()
    manager.register_task(FakeTask("foo", 100).task)
    manager.deactivate()
    assert queue.num_deferred() == 0


def test_activate_schedules_tasks_registered_while_inactive(manager, queue):
    foo, bar = FakeTask("foo", 100), FakeTask("bar", 50)
    manager.register_task(foo.task)
    manager.register_task(bar.task)
    manager.activate()
    assert queue.num_deferred() == 2
    queue.advance_ms(50)
    queue.advance_ms(50)
    assert (foo.num_calls, bar.num_calls) == (1, 2)
    manager.deactivate()
    queue.advance_ms(1000)
    assert (foo.num_calls, bar.num_calls) == (1, 2)
    manager.activate()
    queue.advance_ms(50)
    queue.advance_ms(50)
    assert (foo.num_calls, bar.num_calls) == (2, 4)


def test_register_duplicate_name_is_ignored(manager, queue):
    first, second = FakeTask("foo", 100), FakeTask("foo", 10)
    manager.activate()
    manager.register_task(first.task)
    manager.register_task(second.task)
    assert queue.num_deferred() == 1
    queue.advance_ms(100)
    assert (first.num_calls, second.num_calls) == (1, 0)


def test_register_task_and_advance_time(manager, queue):
    foo, bar = FakeTask("foo", 100), FakeTask("bar", 50)
    manager.activate()
    manager.register_task(foo.task)
    manager.register_task(bar.task)
    assert queue.num_deferred() == 2
    queue.advance_ms(50)
    assert (foo.num_calls, bar.num_calls) == (0, 1)
    assert queue.num_deferred() == 2
    queue.advance_ms(50)
    assert (foo.num_calls, bar.num_calls) == (1, 2)
    assert queue.num_deferred() == 2
    manager.deactivate()
    assert queue.num_deferred() == 0


def test_continuation(manager, queue):
    """A run answering True comes back after the immediate period (10 ms), not the period."""
    foo, bar = FakeTask("foo", 100), FakeTask("bar", 50)
    bar.continuation = True
    manager.activate()
    manager.register_task(foo.task)
    manager.register_task(bar.task)
    queue.advance_ms(50)
    assert (foo.num_calls, bar.num_calls) == (0, 1)
    assert queue.num_deferred() == 2
    queue.advance_ms(10)
    assert bar.num_calls == 2
    queue.advance_ms(40)
    assert (foo.num_calls, bar.num_calls) == (1, 2)
    assert queue.num_deferred() == 2
    queue.advance_ms(10)
    assert bar.num_calls == 3
    manager.deactivate()


def test_immediate_period_when_no_throttled_delay(manager, queue):
    foo = FakeTask("foo", 100)
    foo.continuation = True
    manager.activate()
    manager.register_task(foo.task)
    queue.advance_ms(100)
    assert foo.num_calls == 1
    queue.advance_ms(5)
    assert foo.num_calls == 1, "not before the immediate period"
    queue.advance_ms(5)
    assert foo.num_calls == 2
    assert DEFAULT_IMMEDIATE_PERIOD_NS == 10 * MS


def test_throttled_reschedule_delay_replaces_immediate_period(manager, queue):
    throttled = FakeTask("throttled", 100, throttled_reschedule_delay_ns=200 * MS)
    manager.activate()
    manager.register_task(throttled.task)
    throttled.continuation = True
    queue.advance_ms(100)
    assert throttled.num_calls == 1
    queue.advance_ms(150)
    assert throttled.num_calls == 1, "must not run before the throttled delay"
    queue.advance_ms(50)
    assert throttled.num_calls == 2
    queue.advance_ms(99)
    assert throttled.num_calls == 2, "a False answer goes back to the period"
    queue.advance_ms(1)
    assert throttled.num_calls == 3


def test_register_task_and_unregister(manager, queue):
    foo, bar = FakeTask("foo", 100), FakeTask("bar", 50)
    manager.activate()
    manager.register_task(foo.task)
    manager.register_task(bar.task)
    queue.advance_ms(50)
    assert (foo.num_calls, bar.num_calls) == (0, 1)
    manager.unregister_task("foo")
    assert queue.num_deferred() == 1
    manager.unregister_task("bar")
    assert queue.num_deferred() == 0
    manager.unregister_task("bar")  # already gone: no-op
    queue.advance_ms(200)
    assert (foo.num_calls, bar.num_calls) == (0, 1)
    assert manager.task_names() == []


def test_rescheduling_after_failure(manager, queue):
    """A run that raises comes back after 5 minutes; the error reaches the controller wrapped."""
    foo = FakeTask("foo", 100)
    foo.should_fail = True
    manager.activate()
    manager.register_task(foo.task)
    queue.advance_ms(100)
    assert foo.num_calls == 1
    (error,) = queue.errors
    assert isinstance(error, PeriodicControlTaskError)
    assert str(error) == "foo: periodic task failed: uh oh"
    assert isinstance(error.__cause__, ValueError)
    assert queue.deadline_of("foo") == 100 * MS + ERROR_BACKOFF_NS
    queue.advance_ms(300_000 - 1)
    assert foo.num_calls == 1
    queue.advance_ms(1)
    assert foo.num_calls == 2
    manager.deactivate()


def test_run_passes_records_and_atomicity_and_drops_the_flag(manager, queue):
    foo = FakeTask("foo", 100)
    foo.records = [ApiMessageAndVersion(NoOpRecord(), 0)]
    foo.atomic = True
    foo.continuation = True
    manager.activate()
    manager.register_task(foo.task)
    queue.advance_ms(100)
    (result,) = queue.results
    assert result.records == foo.records and result.atomic is True
    assert result.response is None, "the 'run again' answer is the manager's, not the caller's"


def test_deactivate_during_a_run_does_not_reschedule(manager, queue):
    holder: list[PeriodicTaskControlManager] = [manager]

    def op() -> ControllerResult[bool]:
        holder[0].deactivate()
        return ControllerResult([], True)

    manager.activate()
    manager.register_task(PeriodicTask("stopper", op, 100 * MS))
    queue.advance_ms(100)
    assert queue.num_deferred() == 0
    assert not manager.active


def test_task_replaced_from_its_own_run_keeps_the_new_schedule(manager, queue):
    """A run whose task was unregistered and replaced under the same name leaves the new
    task's deferred event alone (neither re-scheduling the old op nor cancelling the new)."""
    new = FakeTask("t", 30)

    def op() -> ControllerResult[bool]:
        manager.unregister_task("t")
        manager.register_task(new.task)
        return ControllerResult([], False)

    manager.activate()
    manager.register_task(PeriodicTask("t", op, 100 * MS))
    queue.advance_ms(100)
    assert queue.num_deferred() == 1 and queue.deadline_of("t") == 130 * MS
    queue.advance_ms(30)
    assert new.num_calls == 1


def test_verbose_logs_every_run_at_info(manager, queue, caplog):
    loud = FakeTask("loud", 100, flags=frozenset({PeriodicTaskFlag.VERBOSE}))
    quiet = FakeTask("quiet", 100)
    manager.activate()
    manager.register_task(loud.task)
    manager.register_task(quiet.task)
    with caplog.at_level(logging.INFO, logger="kraft_node.metadata.controller.periodic"):
        queue.advance_ms(100)
    assert "Periodic task loud generated 0 records in 0 microseconds." in caplog.text
    assert "Periodic task quiet" not in caplog.text


def test_activation_logs_task_names_sorted(manager, caplog):
    manager.register_task(FakeTask("zeta", 100).task)
    manager.register_task(FakeTask("alpha", 100).task)
    with caplog.at_level(logging.INFO, logger="kraft_node.metadata.controller.periodic"):
        manager.activate()
        manager.deactivate()
    assert "Activated periodic tasks: alpha, zeta" in caplog.text
    assert "Deactivated periodic tasks: alpha, zeta" in caplog.text


def test_with_the_real_event_queue(clock):
    """The accessor the controller builds over EventQueue: the op runs as a deferred event,
    re-schedules itself under its own tag while running, and the queue keeps one event per
    task; deactivate leaves the queue empty."""
    from kraft_node.metadata.controller.events import EventQueue

    results: list[ControllerResult[None]] = []
    errors: list[BaseException] = []

    class OpEvent:
        def __init__(self, op) -> None:
            self.op = op

        def run(self) -> None:
            results.append(self.op())

        def handle_exception(self, exc: BaseException) -> None:
            errors.append(exc)

    event_queue = EventQueue(clock)

    class Accessor:
        def schedule_deferred(self, tag, deadline_ns, op) -> None:
            event_queue.schedule_deferred(tag, deadline_ns, OpEvent(op), keep_earlier=True)

        def cancel_deferred(self, tag) -> None:
            event_queue.cancel_deferred(tag)

    manager = PeriodicTaskControlManager(clock, Accessor())
    foo, bar = FakeTask("foo", 100), FakeTask("bar", 30)
    bar.should_fail = True
    manager.register_task(foo.task)
    manager.register_task(bar.task)
    manager.activate()
    assert event_queue.size() == 2
    for _ in range(10):
        clock.now += 10 * MS
        event_queue.run_ready()
    assert (foo.num_calls, bar.num_calls) == (1, 1)
    assert len(results) == 1 and [type(e) for e in errors] == [PeriodicControlTaskError]
    assert event_queue.size() == 2
    assert event_queue.next_deadline_ns() == 200 * MS, "foo's next run; bar backs off 5 minutes"
    manager.deactivate()
    assert event_queue.is_empty()
