"""The controller inside the node: the QuorumController on the node's asyncio loop (Kafka's
``ControllerServer``, the part that builds and runs the controller).

Why a runner: :class:`~kraft_node.metadata.controller.events.EventQueue` only decides what runs
next; it has no thread and reads no clock of its own, so the controller stays pure and the
simulator can drive it on virtual time.  In the node, :class:`ControllerRunner` drives it on
the same loop as the Raft driver and the listener:

* the queue's ``on_ready`` schedules one ``loop.call_soon(run)`` (never a run inline: the
  queue may signal from inside an event, and ``run_ready`` is not re-entrant);
* ``run`` handles what is due for at most :data:`RUN_BUDGET_NS` of clock time, then gives the
  loop back (another ``call_soon``) while events remain.  Network reads, Raft polls and the
  heartbeat tracker updates that RPC handlers make *before* they queue an event (KAFKA-15019)
  therefore wait at most one slice, however long the queue is;
* otherwise it arms one ``loop.call_later`` for the queue's ``next_deadline_ns`` (deferred
  events: the periodic tasks, timeouts of events queued with a deadline).

Clock: ``time.monotonic_ns`` for the queue, the same clock in milliseconds for the controller
(the driver's clock too, so the Raft and controller timeouts agree).  Everything runs on the
loop's thread, so controller futures complete there and RPC handlers answer from their
callbacks; nothing here uses thread-safe calls.

Faults: a fault the controller must not survive (a record it cannot replay) is reported
through :meth:`ControllerServer._fatal`, which logs one CRITICAL line and hands the error to
``on_fatal`` -- the node stops the Raft driver with it, so this node stops leading and the
process exits (``kraft-server-start`` exits 2) instead of serving from a broken state.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import FatalFaultError, QuorumController
from kraft_node.metadata.versions import supported_features
from kraft_node.server.controller_apis import ControllerApis

log = logging.getLogger("kraft.controller")

__all__ = ["RUN_BUDGET_NS", "ControllerRunner", "ControllerServer", "monotonic_ms"]

#: Longest slice of controller events between two yields to the loop (Kafka's controller
#: thread has its own core; here it shares the loop with the network and Raft).
RUN_BUDGET_NS = 2_000_000


def monotonic_ms() -> int:
    """The controller's clock: monotonic milliseconds (the queue's clock, divided)."""
    return time.monotonic_ns() // 1_000_000


class ControllerRunner:
    """Runs an :class:`EventQueue` on an asyncio loop; see the module doc.

    Invariants: at most one ``call_soon(run)`` is pending (``_soon``); at most one timer is
    armed, and it is for the earliest deadline the queue reported after the last run; after
    :meth:`stop` nothing runs any more.  Before :meth:`start` the queue may already signal
    (events queued while the node is built): the first run then happens at start."""

    def __init__(self, name: str = "controller", *, clock_ns: Callable[[], int] = time.monotonic_ns,
                 budget_ns: int = RUN_BUDGET_NS) -> None:
        self.clock_ns = clock_ns
        self.budget_ns = budget_ns
        self.queue = EventQueue(clock_ns, on_ready=self.wake, name=name)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._soon = False
        self._woken_before_start = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at_ns: int | None = None
        self._stopped = False
        #: run slices so far (tests: a long queue is run in several slices)
        self.slices = 0

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Bind to ``loop`` (default: the running loop) and run whatever is already due."""
        self._loop = loop or asyncio.get_running_loop()
        if self._woken_before_start or self.queue.next_deadline_ns() is not None:
            self.wake()

    def wake(self) -> None:
        """The queue's ``on_ready``: something may be due sooner than the armed timer."""
        if self._stopped:
            return
        loop = self._loop
        if loop is None:
            self._woken_before_start = True
            return
        if not self._soon:
            self._soon = True
            loop.call_soon(self._run)

    def _run(self) -> None:
        self._soon = False
        if self._stopped:
            return
        self.slices += 1
        self.queue.run_ready(budget_ns=self.budget_ns)
        self._rearm()

    def _rearm(self) -> None:
        nxt = self.queue.next_deadline_ns()
        if nxt is None:
            self._cancel_timer()
            return
        now = self.clock_ns()
        if nxt <= now:
            self.wake()  # more is due: yield to the loop once, then go on
            return
        if self._timer is not None and self._timer_at_ns == nxt:
            return
        self._cancel_timer()
        assert self._loop is not None
        self._timer_at_ns = nxt
        self._timer = self._loop.call_later((nxt - now) / 1e9, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at_ns = None
        self.wake()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._timer_at_ns = None

    def stop(self) -> None:
        """Run nothing more (the queue is closed, or the node is going away)."""
        self._stopped = True
        self._cancel_timer()

    def close(self) -> None:
        """Kafka's ``queue.close()``: reject new events, run those already queued, close the
        queue, then stop.  Synchronous: the queue drains here, on the loop's thread."""
        self.queue.begin_shutdown()
        self.queue.close()
        self.stop()


class ControllerServer:
    """The controller of one node: its runner, its QuorumController over the node's Raft
    driver, and its RPC handlers (:class:`ControllerApis`).

    Built before the driver starts, so the controller's Raft listener is registered before the
    first poll (it must see every committed batch and the first leader change).  ``raft``: the
    node's :class:`~kraft_node.raft.io.driver.RaftDriver` (or anything with the
    :class:`~kraft_node.metadata.controller.quorum_controller.ControllerRaft` methods).
    ``bootstrap``: the records the first active controller writes (default: read from
    ``metadata_log_dir``, as ``kraft-storage format`` wrote them).  ``install_managers``: the
    QuorumController's ``managers`` (None: its default managers).  ``on_fatal(exc)``: called
    once, after a fatal controller fault was logged.
    """

    def __init__(self, *, node_id: int, cluster_id: str, raft: Any, metadata_log_dir: str | None = None,
                 bootstrap: BootstrapMetadata | None = None, settings: Any = None, metrics: Any = None,
                 install_managers: Callable[[QuorumController], None] | None = None,
                 on_fatal: Callable[[BaseException], None] | None = None,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        if bootstrap is None:
            if metadata_log_dir is None:
                raise ValueError("ControllerServer needs the bootstrap metadata or the metadata log dir")
            bootstrap = BootstrapMetadata.from_directory(metadata_log_dir)
        self.node_id = node_id
        self.on_fatal = on_fatal
        #: the first fatal fault (later ones are the same failure seen again)
        self.fault: BaseException | None = None
        self.runner = ControllerRunner(f"controller-{node_id}", clock_ns=clock_ns)
        self.queue = self.runner.queue
        self.controller = QuorumController(
            node_id=node_id, cluster_id=cluster_id, raft=raft, queue=self.queue,
            clock_ms=lambda: clock_ns() // 1_000_000, bootstrap=bootstrap, settings=settings, metrics=metrics,
            fatal_fault_handler=self._fatal, managers=install_managers)
        self.apis = ControllerApis(self.controller, node_id=node_id, settings=settings,
                                   clock_ns=clock_ns)
        self._closed = False

    def handlers(self) -> dict[int, Callable]:
        """API key -> handler for the node's routing table (the controller RPCs)."""
        return self.apis.handlers()

    def start(self) -> None:
        """Run the queue on the running loop (call before the driver's first poll)."""
        self.runner.start()

    def supported_features(self) -> dict[str, tuple[int, int]]:
        """``{feature: (min, max)}`` this node supports (what ApiVersions advertises and what
        the controller registers with)."""
        return supported_features()

    def read_finalized_features(self, answer: Callable[[dict[str, int], int], None]) -> None:
        """Call ``answer(levels, epoch)`` with the cluster's finalized feature levels and the
        committed offset they were read at, once the controller has read them (a read event:
        committed state only).  If it cannot (shutting down, not yet bootstrapped), ``answer({},
        -1)``: -1 is Kafka's "unknown" finalized features epoch."""
        future = self.controller.finalized_features()

        def done(f: Any) -> None:
            if f.exception() is not None:
                answer({}, -1)
                return
            levels, epoch = f.result()
            answer(dict(levels), int(epoch))

        future.add_done_callback(done)

    def _fatal(self, message: str, exc: BaseException | None) -> BaseException:
        err = FatalFaultError(f"{message}: {exc}" if exc is not None else message)
        if self.fault is None:
            self.fault = err
            log.critical("node %d: fatal controller fault, stopping: %s", self.node_id, err)
            if self.on_fatal is not None:
                self.on_fatal(err)
        return err

    def close(self) -> None:
        """Stop the controller: queued events run or are rejected, the queue closes, the runner
        stops.  Before the driver closes, so events still see an open Raft client."""
        if self._closed:
            return
        self._closed = True
        try:
            self.runner.close()
        finally:
            self.apis.close()
