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

Registration (KIP-919, Kafka's ``ControllerRegistrationManager``): once the committed
metadata.version supports it (3.7-IV0+), each controller registers itself -- its controller
listeners and the feature ranges it supports -- with the active controller, over the wire like
any other client, and again after every restart (a new incarnation id).  Feature upgrades need
it: from 3.7-IV0 the active controller refuses to raise a level some voter has not said it
supports.  Kafka reacts to metadata images; here :class:`ControllerRegistrationManager` reads
this controller's state in a queue event every :data:`REGISTRATION_POLL_S` instead.

Faults: a fault the controller must not survive (a record it cannot replay) is reported
through :meth:`ControllerServer._fatal`, which logs one CRITICAL line and hands the error to
``on_fatal`` -- the node stops the Raft driver with it, so this node stops leading and the
process exits (``kraft-server-start`` exits 2) instead of serving from a broken state.
"""
from __future__ import annotations

import asyncio
import gc
import logging
import random
import time
from typing import Any, Callable, Mapping, Sequence

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import ControllerFuture, FatalFaultError, QuorumController
from kraft_node.metadata.versions import supported_features
from kraft_node.network import KafkaConnection
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.controller_registration import ControllerRegistrationRequest
from kraft_node.server.controller_apis import ControllerApis
from kraft_node.server.topic_apis import TopicApis
from kraft_storage.messages.runtime import Uuid

log = logging.getLogger("kraft.controller")

__all__ = ["RUN_BUDGET_NS", "REGISTRATION_POLL_S", "ControllerRegistrationManager", "ControllerRunner",
           "ControllerServer", "NodeControllerSettings", "to_asyncio"]

#: Longest slice of controller events between two yields to the loop (Kafka's controller
#: thread has its own core; here it shares the loop with the network and Raft).
RUN_BUDGET_NS = 2_000_000

#: How often the registration manager looks at the committed state (it stands in for Kafka's
#: metadata publisher callback).
REGISTRATION_POLL_S = 0.5

#: After an acknowledged registration, how long to wait for this node to replay it before
#: sending it again.
_ACK_GRACE_S = 5.0

#: Kafka's SecurityProtocol ids, as ControllerRegistration carries them.
_SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}


def to_asyncio(future: ControllerFuture[Any]) -> "asyncio.Future[Any]":
    """An asyncio future that completes like the controller future.  Both live on the running
    loop's thread (the controller completes its futures from events the runner runs there),
    so a plain done callback is enough; nothing is thread-safe or needs to be."""
    out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def done(f: ControllerFuture[Any]) -> None:
        if out.done():
            return  # the asyncio side was cancelled
        exc = f.exception()
        if exc is None:
            out.set_result(f.result())
        else:
            out.set_exception(exc)

    future.add_done_callback(done)
    return out


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
        #: called after each slice (the controller server's heap policy)
        self.after_slice: Callable[[], None] | None = None

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
        if self.after_slice is not None:
            self.after_slice()
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


class ControllerRegistrationManager:
    """Registers this controller with the active controller (KIP-919; see the module doc).

    ``listeners()``: this node's controller listeners as ``(name, host, port, security
    protocol name)`` (a callable: a listener on port 0 is known once bound).
    ``active_address()``: ``(node id, host, port)`` of the active controller (the Raft
    leader), or None while there is none.  ``incarnation_id``: new for every process start,
    so a restarted controller registers again.

    Invariants: one registration RPC at a time; after a failure the next one waits Kafka's
    exponential backoff (100 ms doubling to 120 s, 2% jitter), reset by a success; nothing is
    sent while the committed metadata.version predates controller registration or while the
    committed registration already carries this incarnation."""

    def __init__(self, *, node_id: int, controller: QuorumController,
                 listeners: Callable[[], Sequence[tuple[str, str, int, str]]],
                 active_address: Callable[[], tuple[int, str, int] | None], ssl_context: Any = None,
                 features: dict[str, tuple[int, int]] | None = None, incarnation_id: Uuid | None = None,
                 poll_s: float = REGISTRATION_POLL_S, rng: random.Random | None = None) -> None:
        self.node_id = node_id
        self.controller = controller
        self.listeners = listeners
        self.active_address = active_address
        self.ssl_context = ssl_context
        self.features = dict(features if features is not None else supported_features())
        self.incarnation_id = incarnation_id if incarnation_id is not None else Uuid.random()
        self.poll_s = poll_s
        self._rng = rng or random.Random()
        #: RPCs answered without error, and failures since the last success (Kafka's counters)
        self.successful_rpcs = 0
        self.failed_rpcs = 0
        #: True once the committed state holds this incarnation's registration
        self.registered_in_log = False
        #: loop time of the last acknowledged RPC: the registration is committed, but this
        #: node (a standby) may not have replayed it yet -- do not send it again meanwhile
        self._acked_at: float | None = None
        self._said: str | None = None
        self._conn: KafkaConnection | None = None
        self._conn_to: tuple[str, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def _log_once(self, state: str, message: str, *args: Any) -> None:
        if self._said != state:
            self._said = state
            log.info("[ControllerRegistrationManager id=%d incarnation=%s] " + message, self.node_id,
                     self.incarnation_id, *args)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def wait_closed(self) -> None:
        """Until the task has stopped and its connection is closed (after :meth:`close`)."""
        if self._task is not None:
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping: already logged
                pass

    def request(self) -> ControllerRegistrationRequest:
        R = ControllerRegistrationRequest
        return R(controller_id=self.node_id, incarnation_id=self.incarnation_id, zk_migration_ready=False,
                 listeners=[R.Listener(name=name, host=host, port=port,
                                       security_protocol=_SECURITY_PROTOCOL_IDS.get(proto.upper(), 0))
                            for name, host, port, proto in self.listeners()],
                 features=[R.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                           for n, (lo, hi) in sorted(self.features.items())])

    async def _state(self) -> tuple[bool, bool] | None:
        """(metadata.version supports registration, our incarnation is registered), or None
        once the controller's queue is shutting down.

        Read in an event, from this controller's latest state rather than at the stable
        offset: on a standby the two are the same, and on the active controller the only thing
        the latest state may add is this very registration while its RPC waits for the
        commit -- which changes no decision (nothing is sent while an RPC is pending, and a
        registration lost in a failover is simply not found at the next look).  A read that
        fails otherwise is retried at the next poll."""
        ctl, nid, inc = self.controller, self.node_id, self.incarnation_id

        def read(_committed: int) -> tuple[bool, bool]:
            mv = ctl.feature_control.metadata_version_or_none()
            if mv is None or not mv.is_controller_registration_supported():
                return False, False
            reg = ctl.cluster_control.controller_registration(nid)
            return True, reg is not None and reg.incarnation_id == inc

        while True:
            try:
                result: tuple[bool, bool] = await to_asyncio(ctl.append_read("controllerRegistrationState", read))
                return result
            except Exception as exc:  # noqa: BLE001 - logged; the queue closing ends the manager
                if ctl.queue.shutting_down:
                    return None
                self._log_once("read-failed", "cannot read the registration state (%s); retrying", exc)
                await asyncio.sleep(self.poll_s)

    async def _run(self) -> None:
        try:
            while True:
                state = await self._state()
                if state is None:
                    return
                supported, registered = state
                self.registered_in_log = registered
                if registered:
                    self._log_once("registered", "Our registration has been persisted to the metadata log.")
                elif not supported:
                    self._log_once("unsupported", "cannot register yet because the metadata.version does not "
                                                  "support KIP-919 controller registration.")
                elif self._acked_at is not None and time.monotonic() - self._acked_at < _ACK_GRACE_S:
                    pass  # acknowledged: wait for this node to replay it
                else:
                    target = self.active_address()
                    if target is not None:
                        if await self._send(target):
                            continue  # answered after the commit: the next read shows it
                        await asyncio.sleep(self._backoff_s())
                        continue
                await asyncio.sleep(self.poll_s)
        finally:
            if self._conn is not None:
                await self._conn.close()

    def _backoff_s(self) -> float:
        """Kafka's ExponentialBackoff(100 ms, x2, 120 s, 2% jitter) for the failures so far."""
        ms = min(100.0 * (2 ** max(0, self.failed_rpcs - 1)), 120_000.0)
        return ms * self._rng.uniform(0.98, 1.02) / 1000

    async def _send(self, target: tuple[int, str, int]) -> bool:
        nid, host, port = target
        req = self.request()
        self._log_once(f"send-{nid}", "sending ControllerRegistration to the active controller %d at %s:%d",
                       nid, host, port)
        try:
            if self._conn is None or self._conn_to != (host, port) or not self._conn.connected:
                if self._conn is not None:
                    await self._conn.close()
                self._conn = None
                self._conn = await KafkaConnection.open(host, port, timeout=5, ssl_context=self.ssl_context)
                self._conn_to = (host, port)
            resp = await self._conn.request(req, 0, timeout=30)
        except (OSError, ConnectionError, TimeoutError) as exc:
            self.failed_rpcs += 1
            self._log_once(f"error-{nid}", "ControllerRegistration to node %d failed: %s; retrying", nid, exc)
            return False
        if resp.error_code != 0:
            self.failed_rpcs += 1
            self._log_once(f"refused-{nid}-{resp.error_code}", "controller %d returned error %s (%s)", nid,
                           Errors(resp.error_code).name, resp.error_message)
            return False
        self.successful_rpcs += 1
        self.failed_rpcs = 0
        self._acked_at = time.monotonic()
        self._log_once(f"acked-{nid}", "controller %d acknowledged ControllerRegistrationRequest.", nid)
        return True


class NodeControllerSettings:
    """What the node gives its controller as ``settings``: the ControllerSettings (Kafka's
    controller keys, read as attributes) plus ``voter_ids``, the static voters of
    ``controller.quorum.voters`` (empty for a dynamic quorum, as Kafka's
    ``QuorumConfig.parseVoterIds``), and ``static_config``, the node's properties.  The
    feature manager refuses a feature level some voter has not registered support for
    (KIP-919), so it must know the voters."""

    def __init__(self, settings: Any, voter_ids: Sequence[int] = (),
                 static_config: Mapping[str, str] | None = None) -> None:
        self._settings = settings
        self.voter_ids = tuple(voter_ids)
        #: server.properties as read: the STATIC_BROKER_CONFIG level of effective config values
        self.static_config = dict(static_config or {})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._settings, name)

    def __repr__(self) -> str:
        return f"NodeControllerSettings({self._settings!r}, voter_ids={self.voter_ids})"


class HeapFreezer:
    """Keeps the controller's committed state out of the garbage collector's full passes.

    Why: the state is millions of long-lived objects (a PartitionRegistration and its tuples
    per partition, timeline entries, index sets).  CPython 3.11's collector walks all of them
    in each full (generation 2) collection -- 0.4 s with a million partitions, measured on
    this machine during a creation of 100k partitions -- and that pause lands on the event
    loop, stalling the controller, the Raft I/O and the network at once.  So after every
    ``records_between_freezes`` records replayed (creations, a snapshot load, a standby's
    catch-up), the young generations are collected and everything alive is moved to the
    permanent generation (``gc.freeze()``, O(1)), as ``kraft-server-start`` does once at start.

    The price: an object frozen and later part of unreachable *cyclic* garbage is never
    reclaimed.  Controller state is freed by reference counting (registry snapshots are
    dropped from a list, timeline values replaced), so what leaks is rare; a node that runs
    for months with heavy churn is the case to watch (``gc.get_freeze_count()``)."""

    def __init__(self, records_replayed: Callable[[], int], records_between_freezes: int = 10_000) -> None:
        self._records_replayed = records_replayed
        self.records_between_freezes = records_between_freezes
        self._last = 0
        #: freezes so far
        self.freezes = 0

    def maybe_freeze(self) -> None:
        n = self._records_replayed()
        if n - self._last < self.records_between_freezes:
            return
        self._last = n
        gc.collect(1)
        gc.freeze()
        self.freezes += 1


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
    once, after a fatal controller fault was logged.  :attr:`registration`: the
    :class:`ControllerRegistrationManager` the node sets (it knows its listeners and the
    leader's address).
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
        # Kafka 3.5+: the QuorumController writes no snapshots; the node's metadata loader does, from
        # its published image (server/metadata.py).  The controller's own generator stays for the
        # simulator, whose controllers have no loader (metadata/controller/snapshot_generator.py).
        self.controller.snapshot_generator = None
        # Broker lifecycle results (a controlled shutdown, a fencing) end after a budget of this
        # thread's CPU time (partition_changes.py).  CPU, not the queue's clock: on a shared
        # machine the wall clock also counts the time others hold the CPU, and a wall-clock
        # budget made results of ~240 changes at load 3, slower than a fixed 200 (session 20).
        # The simulator wires no clock: there the count alone sizes a result.
        ops = getattr(self.controller, "partition_ops", None)
        if ops is not None:
            ops.context.clock_ns = time.thread_time_ns
        self.apis = ControllerApis(self.controller, node_id=node_id, settings=settings,
                                   clock_ns=clock_ns)
        self.topic_apis = TopicApis(self.controller, node_id=node_id, clock_ns=clock_ns)
        self.heap = HeapFreezer(lambda: self.controller.records_replayed)
        self.runner.after_slice = self.heap.maybe_freeze
        #: KIP-919 self-registration, set by the node before start (None: not registering)
        self.registration: ControllerRegistrationManager | None = None
        self._closed = False

    def handlers(self) -> dict[int, Callable]:
        """API key -> handler for the node's routing table (the controller RPCs)."""
        return {**self.apis.handlers(), **self.topic_apis.handlers()}

    def start(self) -> None:
        """Run the queue on the running loop (call before the driver's first poll), and the
        registration manager."""
        self.runner.start()
        if self.registration is not None:
            self.registration.start()

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
        if self.registration is not None:
            self.registration.close()
        self.runner.close()

    async def wait_closed(self) -> None:
        """After :meth:`close`: until the registration manager's connection is closed."""
        if self.registration is not None:
            await self.registration.wait_closed()
