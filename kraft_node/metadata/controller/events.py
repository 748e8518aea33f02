"""The controller's event queue (Kafka's ``KafkaEventQueue``), without a thread.

Why: every change to controller state happens in one event at a time, in one order, so
the control managers need no locks and a replay on any controller sees the same
sequence.  Kafka runs the queue on its own thread and sleeps on a condition variable;
here the queue only *decides* what runs next, and a driver calls :meth:`EventQueue.run_ready`
(an asyncio task in the server, the simulator's virtual-time loop in tests).  The queue
reads time only through the ``clock_ns`` it is given, so its order is a pure function of
the calls made on it and the clock's readings.

How a driver uses it::

    queue = EventQueue(clock_ns, on_ready=driver.wake)
    ...                       # on_ready(): something may be runnable sooner than before
    queue.run_ready()         # run everything due now
    deadline = queue.next_deadline_ns()   # None: idle; <= now: call run_ready again
    ...                       # else sleep until deadline (or until on_ready)

Three ways in, as in Kafka:

* :meth:`~EventQueue.append` / :meth:`~EventQueue.prepend`: the ready list's tail or head.
* :meth:`~EventQueue.append_with_deadline`: the tail, and also a deadline; if the event has
  not started when the deadline passes it gets ``handle_exception(ControllerTimeoutError())``
  at that moment instead of running (and before any event queued after it runs).
* :meth:`~EventQueue.schedule_deferred`: runs at (or after) its deadline; a tag names it, so
  a second event with the same tag replaces the first and :meth:`~EventQueue.cancel_deferred`
  can drop it.

Order invariants (what tests pin down):

* An entry whose deadline has come is handled before any ready-list event, deadlines in
  ascending order, equal deadlines in insertion order (Kafka bumps a clashing deadline by
  a nanosecond; a sequence number gives the same order without moving deadlines).  So a
  deferred event due now overtakes appended events; this is Kafka's order too, and the reason
  periodic tasks that want to "run again at once" wait a few milliseconds instead.
* The ready list is FIFO, except that :meth:`~EventQueue.prepend` goes first.
* ``size()`` counts queued events plus the one running (Kafka's definition), so a driver's
  ``is_empty()`` means "nothing queued and nothing in progress".

Shutdown follows Kafka: after :meth:`~EventQueue.begin_shutdown` new events are rejected at
once (``handle_exception(EventQueueClosedError("The event queue is shutting down"))``);
events still waiting on a deadline (deferred, or appended with a deadline) are rejected the
same way on the next :meth:`~EventQueue.run_ready`; plain appended and prepended events still
run; then the cleanup event runs once and the queue is closed.

Errors: an exception from ``run`` goes to the event's own ``handle_exception``; an exception
from ``handle_exception`` (or from the timing hook, or the cleanup event) is logged and never
reaches the driver, so one bad event cannot stop the loop.  Only ``BaseException``s that are
not ``Exception`` (KeyboardInterrupt, SystemExit) propagate.

Cost: ``heapq`` for deadlines, a ``deque`` for the ready list; removal is lazy (an entry is
marked dead and skipped when reached), and the heap is rebuilt when dead entries outnumber
live ones, so events that run long before their deadline do not pile up in it.  Appended
events whose deadlines do not decrease (the usual case: one timeout per request type, e.g.
every BrokerHeartbeat gets half the heartbeat interval) go to a FIFO "lane" instead of the
heap: no heap push or tuple per event, and since they run in the order they were queued,
their dead entries are always at the lane's head and are dropped as soon as they are reached.
The earliest deadline is the smaller of the heap's and the lane's heads; an equal deadline
goes to the entry queued first (a sequence number per entry), as before.
"""
from __future__ import annotations

import heapq
import logging
from collections import deque
from typing import Callable, Protocol

from kraft_node.metadata.controller.errors import ControllerTimeoutError, EventQueueClosedError

__all__ = ["Event", "EventQueue", "SHUTTING_DOWN_MESSAGE"]

log = logging.getLogger(__name__)

#: Kafka's RejectedExecutionException text for an event the closing queue will not run.
SHUTTING_DOWN_MESSAGE = "The event queue is shutting down"

#: Rebuild the deadline heap only past this many dead entries (and when they are the majority).
_HEAP_COMPACT_MIN_DEAD = 1024


class Event(Protocol):
    """Work for the queue.  ``handle_exception`` receives the exception ``run`` raised, or
    ``ControllerTimeoutError`` (deadline passed before it started), or
    ``EventQueueClosedError`` (the queue is shutting down); it is called at most once and
    never after a successful ``run``."""

    def run(self) -> None: ...

    def handle_exception(self, exc: BaseException) -> None: ...


class _Entry:
    """One queued event and where it sits.  ``live`` goes False exactly once: when the event
    is taken to run, times out, is rejected, cancelled or replaced; dead entries left in the
    heap or the deque are skipped."""

    __slots__ = ("event", "deferred", "tag", "deadline_ns", "enqueued_ns", "live", "seq", "in_lane")

    def __init__(self, event: Event, deferred: bool, tag: str | None, deadline_ns: int | None,
                 enqueued_ns: int) -> None:
        self.event = event
        self.deferred = deferred
        self.tag = tag
        self.deadline_ns = deadline_ns
        self.enqueued_ns = enqueued_ns
        self.live = True
        #: order among equal deadlines (set when the deadline is registered)
        self.seq = 0
        #: the deadline is in the FIFO lane, not the heap
        self.in_lane = False


def _noop() -> None:
    return None


class EventQueue:
    """A single-consumer event queue with deadlines and deferred events (Kafka's
    ``KafkaEventQueue``), driven by :meth:`run_ready`.

    ``clock_ns``: monotonic nanoseconds (deadlines are in the same clock).  ``on_ready``:
    called when :meth:`next_deadline_ns` may have moved earlier (an event was queued on an
    empty ready list, a deadline earlier than every other was added, shutdown began), so a
    sleeping driver wakes up; it is Kafka's condition signal, and may be called while
    :meth:`run_ready` is running.  ``on_event_timing(queue_time_ns, processing_time_ns)``:
    called after each event that ran, for the EventQueueTimeMs and
    EventQueueProcessingTimeMs histograms; queue time is counted from the enqueue, or for a
    deferred event from its deadline (Kafka leaves deferral out of queue time), and
    processing time includes ``handle_exception`` when ``run`` raised.
    """

    def __init__(self, clock_ns: Callable[[], int], on_ready: Callable[[], None] = _noop, name: str = "",
                 *, on_event_timing: Callable[[int, int], None] | None = None) -> None:
        self._clock_ns = clock_ns
        self._on_ready = on_ready
        self.name = name
        self.on_event_timing = on_event_timing
        self._ready: deque[_Entry] = deque()
        self._ready_live = 0
        self._heap: list[tuple[int, int, _Entry]] = []
        self._heap_live = 0
        #: appended events' deadlines in non-decreasing order (see the module doc)
        self._lane: deque[_Entry] = deque()
        self._lane_live = 0
        self._seq = 0
        self._tags: dict[str, _Entry] = {}
        self._size = 0
        self._running = False
        self._shutting_down = False
        self._cleanup_event: Event | None = None
        self._closed = False

    # ------------------------------------------------------------------ enqueue

    def append(self, event: Event) -> None:
        """Queue ``event`` at the tail of the ready list."""
        self._enqueue_ready(event, None, prepend=False)

    def prepend(self, event: Event) -> None:
        """Queue ``event`` at the head of the ready list (Kafka uses it for activation)."""
        self._enqueue_ready(event, None, prepend=True)

    def append_with_deadline(self, deadline_ns: int, event: Event) -> None:
        """Queue ``event`` at the tail; if it has not started by ``deadline_ns`` it gets
        ``handle_exception(ControllerTimeoutError())`` then (REQUEST_TIMED_OUT, no message,
        as Kafka's TimeoutException) and never runs."""
        self._enqueue_ready(event, deadline_ns if type(deadline_ns) is int else int(deadline_ns), False)

    def schedule_deferred(self, tag: str | None, deadline_ns: int, event: Event, *,
                          keep_earlier: bool = False) -> None:
        """Run ``event`` once the clock reaches ``deadline_ns``.  An event already queued under
        ``tag`` is dropped without being told (Kafka's replacement).  ``keep_earlier``: keep
        the replaced event's deadline if it was earlier (Kafka's EarliestDeadlineFunction,
        which QuorumController uses for its periodic tasks)."""
        if self._reject_if_shutting_down(event):
            return
        deadline = int(deadline_ns)
        if tag is not None:
            old = self._tags.get(tag)
            if old is not None:
                if keep_earlier and old.deadline_ns is not None and old.deadline_ns < deadline:
                    deadline = old.deadline_ns
                self._kill(old)
                self._size -= 1
        entry = _Entry(event, True, tag, deadline, self._clock_ns())
        if tag is not None:
            self._tags[tag] = entry
        signal = self._push_deadline(entry)
        self._size += 1
        if signal:
            self._on_ready()

    def cancel_deferred(self, tag: str) -> bool:
        """Drop the event queued under ``tag`` (it is not told).  True if there was one."""
        entry = self._tags.get(tag)
        if entry is None:
            return False
        self._kill(entry)
        self._size -= 1
        return True

    def _enqueue_ready(self, event: Event, deadline_ns: int | None, prepend: bool) -> None:
        if self._shutting_down:
            self._reject_if_shutting_down(event)
            return
        entry = _Entry(event, False, None, deadline_ns, self._clock_ns())
        signal = self._ready_live == 0
        if prepend:
            self._ready.appendleft(entry)
        else:
            self._ready.append(entry)
        self._ready_live += 1
        if deadline_ns is not None:
            lane = self._lane
            if not prepend and (not lane or lane[-1].deadline_ns <= deadline_ns):  # type: ignore[operator]
                # Is the new deadline the earliest (ties included)?  Only asked when nothing else
                # signals, and not when the lane's tail is live with an earlier deadline: lane
                # entries die in lane order, so a live lane has a live tail, and the earliest
                # live deadline is at most the tail's (the common case of a busy queue: no scan).
                if not signal and not (self._lane_live and lane[-1].deadline_ns < deadline_ns):  # type: ignore
                    first = self._first_live_deadline()
                    if first is None or deadline_ns <= first:
                        signal = True
                self._seq += 1
                entry.seq = self._seq
                entry.in_lane = True
                lane.append(entry)
                self._lane_live += 1
            elif self._push_deadline(entry):
                signal = True
        self._size += 1
        if signal:
            self._on_ready()

    def _push_deadline(self, entry: _Entry) -> bool:
        """Put ``entry`` in the deadline heap; True if it is now the earliest live deadline
        (ties included, as Kafka signals on ``<=``)."""
        assert entry.deadline_ns is not None
        first = self._first_live_deadline()
        self._seq += 1
        entry.seq = self._seq
        heapq.heappush(self._heap, (entry.deadline_ns, self._seq, entry))
        self._heap_live += 1
        return first is None or entry.deadline_ns <= first

    def _reject_if_shutting_down(self, event: Event) -> bool:
        if not self._shutting_down:
            return False
        self._deliver(event, EventQueueClosedError(SHUTTING_DOWN_MESSAGE))
        return True

    # ------------------------------------------------------------------ removal

    def _kill(self, entry: _Entry) -> None:
        """Mark ``entry`` dead and keep the live counts and the tag map right.  The caller
        accounts for ``_size``."""
        if not entry.live:
            return
        entry.live = False
        if not entry.deferred:
            self._ready_live -= 1
            if self._ready_live == 0:
                self._ready.clear()
        if entry.deadline_ns is not None:
            if entry.in_lane:
                self._lane_live -= 1
                if self._lane_live == 0:
                    self._lane.clear()
            else:
                self._heap_live -= 1
                dead = len(self._heap) - self._heap_live
                if dead > _HEAP_COMPACT_MIN_DEAD and dead > self._heap_live:
                    self._heap = [item for item in self._heap if item[2].live]
                    heapq.heapify(self._heap)
        if entry.tag is not None and self._tags.get(entry.tag) is entry:
            del self._tags[entry.tag]

    def _first_live_deadline(self) -> int | None:
        heap = self._heap
        while heap and not heap[0][2].live:
            heapq.heappop(heap)
        lane = self._lane
        while lane and not lane[0].live:
            lane.popleft()
        if lane:
            if heap and heap[0][0] < lane[0].deadline_ns:  # type: ignore[operator]
                return heap[0][0]
            return lane[0].deadline_ns
        return heap[0][0] if heap else None

    def _pop_first_deadline(self) -> _Entry:
        """Take the entry with the earliest live deadline (after ``_first_live_deadline``
        found one): the lane's head or the heap's, the one queued first on a tie."""
        heap, lane = self._heap, self._lane
        if lane:
            head = lane[0]
            if not heap or (head.deadline_ns, head.seq) < heap[0][:2]:
                return lane.popleft()
        return heapq.heappop(heap)[2]

    # ------------------------------------------------------------------ running

    def run_ready(self, max_events: int | None = None, budget_ns: int | None = None) -> int:
        """Handle what is due now and return how many events were handled (run, timed out
        or rejected).  Stops when nothing is due, after ``max_events``, or once ``budget_ns``
        of clock time has passed (checked between events, so at least one is handled).
        Not re-entrant: an event must not call it (RuntimeError)."""
        if self._running:
            raise RuntimeError("EventQueue.run_ready is not re-entrant")
        self._running = True
        try:
            return self._run_ready(max_events, budget_ns)
        finally:
            self._running = False

    def _run_ready(self, max_events: int | None, budget_ns: int | None) -> int:
        clock_ns = self._clock_ns
        start_ns = clock_ns()
        now = start_ns
        handled = 0
        lane, ready = self._lane, self._ready
        while max_events is None or handled < max_events:
            if handled and budget_ns is not None and now - start_ns >= budget_ns:
                break
            # _first_live_deadline, inlined (once per event): drop the dead heads, then the
            # earlier of the heap's and the lane's
            heap = self._heap
            while heap and not heap[0][2].live:
                heapq.heappop(heap)
            while lane and not lane[0].live:
                lane.popleft()
            if lane:
                first: int | None = lane[0].deadline_ns
                if heap and heap[0][0] < first:  # type: ignore[operator]
                    first = heap[0][0]
            else:
                first = heap[0][0] if heap else None
            if first is not None and (first <= now or self._shutting_down):
                entry = self._pop_first_deadline()
                self._kill(entry)
                if first <= now:
                    if entry.deferred:
                        self._run_entry(entry, now, max(entry.enqueued_ns, first))
                    else:
                        self._finish(entry, ControllerTimeoutError())
                else:
                    self._finish(entry, EventQueueClosedError(SHUTTING_DOWN_MESSAGE))
            elif self._ready_live:
                entry = ready.popleft()
                while not entry.live:
                    entry = ready.popleft()
                if entry.in_lane:  # _kill, inlined for the common entry (untagged, in the lane)
                    entry.live = False
                    self._ready_live -= 1
                    if self._ready_live == 0:
                        ready.clear()
                    self._lane_live -= 1
                    if self._lane_live == 0:
                        lane.clear()
                else:
                    self._kill(entry)
                # _run_entry, inlined for ready events (the per-request path)
                event = entry.event
                try:
                    try:
                        event.run()
                    except Exception as exc:
                        log.debug("%sgot exception while running %r; invoking handle_exception",
                                  self._prefix(), event, exc_info=True)
                        self._deliver(event, exc)
                    end_ns = clock_ns()
                    hook = self.on_event_timing
                    if hook is not None:
                        waited = now - entry.enqueued_ns
                        try:
                            hook(waited if waited > 0 else 0, end_ns - now)
                        except Exception:
                            log.exception("%son_event_timing failed", self._prefix())
                finally:
                    self._size -= 1
                now = end_ns  # the event's end is the next one's start
                handled += 1
                continue
            else:
                if self._shutting_down and not self._closed:
                    self._close_now()
                break
            handled += 1
            now = clock_ns()
        return handled

    def _run_entry(self, entry: _Entry, start_ns: int, runnable_since_ns: int) -> int:
        """Run a dead (dequeued) entry's event; ``_size`` still counts it until it is done.
        Returns the clock reading taken when it ended (the next event's start)."""
        try:
            try:
                entry.event.run()
            except Exception as exc:
                log.debug("%sgot exception while running %r; invoking handle_exception",
                          self._prefix(), entry.event, exc_info=True)
                self._deliver(entry.event, exc)
            end_ns = self._clock_ns()
            hook = self.on_event_timing
            if hook is not None:
                try:
                    hook(max(0, start_ns - runnable_since_ns), end_ns - start_ns)
                except Exception:
                    log.exception("%son_event_timing failed", self._prefix())
            return end_ns
        finally:
            self._size -= 1

    def _finish(self, entry: _Entry, exc: BaseException) -> None:
        try:
            self._deliver(entry.event, exc)
        finally:
            self._size -= 1

    def _deliver(self, event: Event, exc: BaseException) -> None:
        try:
            event.handle_exception(exc)
        except Exception:
            log.exception("%sunexpected exception in handle_exception of %r", self._prefix(), event)

    def _prefix(self) -> str:
        return f"[{self.name}] " if self.name else ""

    # ------------------------------------------------------------------ state

    def next_deadline_ns(self) -> int | None:
        """When :meth:`run_ready` will next have something to do: the current clock reading
        if something is due now (a ready event, an expired deadline, shutdown work), else
        the earliest deadline, else None (idle, or closed)."""
        if self._closed:
            return None
        if self._ready_live or self._shutting_down:
            return self._clock_ns()
        first = self._first_live_deadline()
        if first is None:
            return None
        now = self._clock_ns()
        return now if first <= now else first

    def now_ns(self) -> int:
        """The queue's clock (monotonic ns, or the simulator's virtual time)."""
        return self._clock_ns()

    @property
    def clock(self) -> Callable[[], int]:
        """The clock itself (for a caller that reads it per event: one call less than
        :meth:`now_ns`)."""
        return self._clock_ns

    def size(self) -> int:
        """Queued events plus the one running, if any (Kafka's ``size``)."""
        return self._size

    def is_empty(self) -> bool:
        """True if nothing is queued and nothing is running."""
        return self._size == 0

    @property
    def shutting_down(self) -> bool:
        """True once :meth:`begin_shutdown` was called."""
        return self._shutting_down

    @property
    def closed(self) -> bool:
        """True once the queue drained after shutdown and ran its cleanup event."""
        return self._closed

    # ------------------------------------------------------------------ shutdown

    def begin_shutdown(self, cleanup_event: Event | None = None) -> None:
        """Stop accepting events; the next :meth:`run_ready` call rejects those waiting on a
        deadline, runs the rest of the ready list, then runs ``cleanup_event`` (once; only the
        first call's is kept) and closes the queue."""
        if self._shutting_down:
            log.debug("%sevent queue is already shutting down", self._prefix())
            return
        log.info("%sshutting down event queue", self._prefix())
        self._shutting_down = True
        self._cleanup_event = cleanup_event
        self._on_ready()

    def close(self) -> None:
        """Begin shutdown and drain the queue now (Kafka's ``close`` joins its thread, which
        drains it).  Called from inside an event, it only begins shutdown: the running
        :meth:`run_ready` finishes the drain."""
        self.begin_shutdown()
        if self._running:
            return
        while not self._closed:
            self.run_ready()

    def _close_now(self) -> None:
        self._closed = True
        cleanup = self._cleanup_event
        self._cleanup_event = None
        if cleanup is not None:
            try:
                cleanup.run()
            except Exception:
                log.warning("%scleanup event threw an exception", self._prefix(), exc_info=True)
        log.info("%sclosed event queue", self._prefix())
