"""The active controller's background tasks (Kafka 4.x's ``PeriodicTask``,
``PeriodicTaskFlag``, ``PeriodicTaskControlManager``).

Why: work nobody asks for (fencing brokers whose sessions expired, rebalancing leaders,
writing a NoOpRecord so the log keeps moving, expiring delegation tokens) must still pass
through the event queue and the write path like a request, so it sees committed state and
its records are replicated.  Each task is a deferred event on the queue under its own name;
only the active controller runs them (``activate`` on claim, ``deactivate`` on renounce).

Scheduling rules, per task (Kafka's):

* registered or activated: first run one ``period_ns`` from now;
* after a run that answered False: again in ``period_ns``;
* after a run that answered True ("more to do"): again in ``immediate_period_ns`` (10 ms by
  default; not 0, because a due deferred event goes before every queued request and a task
  that always has more would starve them), or in ``throttled_reschedule_delay_ns`` if the task
  sets one;
* after a run that raised: again in 5 minutes (:data:`ERROR_BACKOFF_NS`), so a broken task
  neither spins nor dies; the exception goes on as :class:`PeriodicControlTaskError`, which
  the controller counts as a metadata error without failing over;
* inactive, or unregistered: its deferred event is cancelled, and a run already under way
  does not reschedule it.

The queue is reached through a ``queue_accessor`` (Kafka's QueueAccessor), so this module
needs neither the event queue nor the controller: ``schedule_deferred(tag, deadline_ns, op)``
must arrange for ``op()`` to run at ``deadline_ns`` as a controller write (its
``ControllerResult[None]`` records appended like a request's), replacing any event already
under ``tag``; ``cancel_deferred(tag)`` drops it.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field
from typing import Callable, Protocol

from kraft_node.metadata.controller.result import ControllerResult

__all__ = [
    "DEFAULT_IMMEDIATE_PERIOD_NS", "ERROR_BACKOFF_NS", "PeriodicControlTaskError", "PeriodicTask",
    "PeriodicTaskFlag", "PeriodicTaskControlManager", "QueueAccessor",
]

log = logging.getLogger(__name__)

#: The wait before re-running a task that answered True (Kafka's 10 ms).
DEFAULT_IMMEDIATE_PERIOD_NS = 10 * 1_000_000

#: The wait before re-running a task that raised (Kafka's 5 minutes).
ERROR_BACKOFF_NS = 5 * 60 * 1_000_000_000


class PeriodicTaskFlag(enum.Enum):
    """Options of a periodic task."""

    #: Log the task's name, record count and duration at INFO on every run (else DEBUG).
    VERBOSE = "VERBOSE"


class PeriodicControlTaskError(Exception):
    """A periodic task's operation raised.  The task is already rescheduled (after
    :data:`ERROR_BACKOFF_NS`); the controller's event error handler should count this as a
    metadata error but, unlike other unexpected errors, not renounce leadership.  The
    original exception is ``__cause__``."""


@dataclass(frozen=True)
class PeriodicTask:
    """A named background operation.  ``op`` returns the records to write, and as its
    response True if it wants to run again soon (it did only part of its work)."""

    name: str
    op: Callable[[], ControllerResult[bool]]
    period_ns: int
    flags: frozenset[PeriodicTaskFlag] = field(default_factory=frozenset)
    immediate_period_ns: int = DEFAULT_IMMEDIATE_PERIOD_NS
    #: If set, a True answer waits this long instead of ``immediate_period_ns`` (for tasks
    #: whose follow-up runs should be spaced out).
    throttled_reschedule_delay_ns: int | None = None


class QueueAccessor(Protocol):
    """How the manager reaches the controller's event queue."""

    def schedule_deferred(self, tag: str, deadline_ns: int, op: Callable[[], ControllerResult[None]]) -> None: ...

    def cancel_deferred(self, tag: str) -> None: ...


class PeriodicTaskControlManager:
    """Keeps the registered tasks and, while active, one deferred event per task.

    Invariant: while active, every registered task has exactly one deferred event under its
    name (or is running); while inactive, none has.  Not timeline state: tasks belong to
    this process, not to the metadata log.
    """

    def __init__(self, clock_ns: Callable[[], int], queue_accessor: QueueAccessor) -> None:
        self._clock_ns = clock_ns
        self._queue_accessor = queue_accessor
        self._active = False
        self._tasks: dict[str, PeriodicTask] = {}

    @property
    def active(self) -> bool:
        return self._active

    def task_names(self) -> list[str]:
        """The registered tasks' names, sorted."""
        return sorted(self._tasks)

    def register_task(self, task: PeriodicTask) -> None:
        """Add ``task`` (scheduled at once if active).  A second task with a registered name
        is ignored, as in Kafka."""
        if task.name in self._tasks:
            log.debug("Periodic task %s is already registered.", task.name)
            return
        self._tasks[task.name] = task
        log.info("Registering periodic task %s to run every %d ms", task.name, task.period_ns // 1_000_000)
        self._reschedule(task, immediate=False, error=False)

    def unregister_task(self, name: str) -> None:
        """Remove the task named ``name`` and cancel its deferred event (no-op if unknown)."""
        task = self._tasks.pop(name, None)
        if task is None:
            log.debug("Periodic task %s is already unregistered.", name)
            return
        log.info("Unregistering periodic task %s", name)
        self._reschedule(task, immediate=False, error=False)

    def activate(self) -> None:
        """Schedule every task (the controller calls this once its activation records are
        applied, so tasks see the right metadata.version)."""
        if self._active:
            raise RuntimeError("Can't activate already active PeriodicTaskControlManager.")
        self._active = True
        for task in list(self._tasks.values()):
            self._reschedule(task, immediate=False, error=False)
        log.info("Activated periodic tasks: %s", ", ".join(self.task_names()))

    def deactivate(self) -> None:
        """Cancel every task's deferred event (no-op if inactive)."""
        if not self._active:
            return
        self._active = False
        for task in list(self._tasks.values()):
            self._reschedule(task, immediate=False, error=False)
        log.info("Deactivated periodic tasks: %s", ", ".join(self.task_names()))

    def _next_delay_ns(self, task: PeriodicTask, immediate: bool, error: bool) -> int:
        if immediate:
            if task.throttled_reschedule_delay_ns is not None:
                return task.throttled_reschedule_delay_ns
            return task.immediate_period_ns
        if error:
            return ERROR_BACKOFF_NS
        return task.period_ns

    def _reschedule(self, task: PeriodicTask, immediate: bool, error: bool) -> None:
        current = self._tasks.get(task.name)
        if not self._active:
            log.debug("cancelling %s because we are inactive.", task.name)
            self._queue_accessor.cancel_deferred(task.name)
        elif current is task:
            delay_ns = self._next_delay_ns(task, immediate, error)
            log.debug("rescheduling %s in %d ns (immediate = %s, error = %s)", task.name, delay_ns, immediate, error)
            self._queue_accessor.schedule_deferred(task.name, self._clock_ns() + delay_ns,
                                                   lambda: self._run_task(task))
        elif current is None:
            log.debug("cancelling %s because it does not appear in the task map.", task.name)
            self._queue_accessor.cancel_deferred(task.name)
        else:
            # A run of a task that was replaced (unregistered, then another registered under
            # its name, from inside its own op): the newer task's event stays as it is.
            log.debug("not rescheduling %s: a newer task has its name.", task.name)

    def _run_task(self, task: PeriodicTask) -> ControllerResult[None]:
        """Run ``task.op`` once, reschedule the task, and hand back its records."""
        verbose = PeriodicTaskFlag.VERBOSE in task.flags
        timed = verbose or log.isEnabledFor(logging.DEBUG)
        start_ns = self._clock_ns() if timed else 0
        try:
            result = task.op()
        except Exception as exc:
            self._reschedule(task, immediate=False, error=True)
            raise PeriodicControlTaskError(f"{task.name}: periodic task failed: {exc}") from exc
        if timed:
            duration_us = (self._clock_ns() - start_ns) // 1_000
            log.log(logging.INFO if verbose else logging.DEBUG,
                    "Periodic task %s generated %d records in %d microseconds.",
                    task.name, len(result.records), duration_us)
        self._reschedule(task, immediate=bool(result.response), error=False)
        return ControllerResult(list(result.records), None, result.atomic)
