"""Kafka's QuorumController: one event loop, write then commit then answer.

The leader of the metadata log is the active controller; every other controller is a
standby that replays what the active one writes.  Everything that touches controller
state runs as an event on one :class:`~kraft_node.metadata.controller.events.EventQueue`,
so nothing here takes a lock.  Raft's callbacks (committed batches, snapshot loads, leader
changes) only enqueue events; they never touch state from inside the Raft poll.

A write (``_WriteEvent``):

1. fails with NOT_CONTROLLER unless this node has claimed an epoch;
2. runs the operation, which returns ``ControllerResult(records, response, atomic)`` and
   changes nothing;
3. replays the records into the timeline state at the offsets Raft will give them
   (``raft.next_offset(epoch)``) -- before they are handed to Raft, so a record this
   controller cannot apply is found before anyone else sees it (fatal: the fault handler);
4. schedules them with Raft under the claimed epoch (one batch if atomic; else batches of at
   most ``MAX_RECORDS_PER_BATCH``), takes a registry snapshot at their last offset;
5. parks the response in the purgatory keyed by that offset.  When the high watermark
   (and the stable offset: no open metadata transaction) passes it, the response is
   delivered.  An operation with no records is answered at once if nothing is pending,
   else after everything already pending (linearizable reads through the write path).

Reads (``_ReadEvent``) run against the committed state: every manager is read at
``epoch=last_stable_offset``.

Claim and renounce: when Raft reports this node as leader of epoch E (after it has
delivered everything committed before E), the controller claims E, activates the offset
and cluster managers, and *prepends* the activation write: on an empty log, the bootstrap
records in a metadata transaction; otherwise it aborts a transaction a crashed predecessor
left open.  Then the periodic tasks start.  When another node leads, or a write fails in a
way that needs failover, it renounces: resigns the epoch, fails the purgatory with
NOT_CONTROLLER, reverts the state to the last stable offset and cancels the tasks.

Replay errors are fatal everywhere (``fatal_fault_handler``): the controller stops; it
never skips a record.
"""
from __future__ import annotations

import logging
import operator
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Generic, Iterable, Mapping, Protocol, Sequence, TypeVar

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.errors import (
    ApiError,
    ControllerTimeoutError,
    EventQueueClosedError,
    NotControllerError,
    ReplayError,
)
from kraft_node.metadata.controller.offset_control import OffsetControlManager, snapshot_name
from kraft_node.metadata.controller.periodic import PeriodicControlTaskError
from kraft_node.metadata.controller.purgatory import Purgatory
from kraft_node.metadata.controller.replication_snapshot import (
    MIN_COLUMNAR_RECORDS,
    RecordFailure,
    deferred_indexes,
    paused_gc,
    replay_framed_values,
)
from kraft_node.metadata.controller.result import (
    MAX_RECORDS_PER_BATCH,
    MAX_RECORDS_PER_USER_OP,
    ApiMessageAndVersion,
    ControllerResult,
    FramedRecord,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.raft.errors import NotLeaderError
from kraft_node.raft.messages import Batch, LeaderAndEpoch, SnapshotId
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.timeline import LATEST_EPOCH, SnapshotRegistry

if TYPE_CHECKING:
    from kraft_node.metadata.controller.cluster_control import ClusterControlManager
    from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager
    from kraft_node.metadata.controller.features import FeatureControlManager
    from kraft_node.metadata.controller.periodic import PeriodicTaskControlManager
    from kraft_node.metadata.controller.producer_ids import ProducerIdControlManager
    from kraft_node.metadata.controller.replication_control import ReplicationControlManager

log = logging.getLogger("kraft.controller")

T = TypeVar("T")


class ControllerRaft(Protocol):
    """What the controller needs of Raft: the core in the simulator, the driver over TCP."""

    def register_listener(self, listener: Any) -> None: ...

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch: ...

    def next_offset(self, epoch: int) -> int:
        """The offset the next append of the leader of ``epoch`` gets (NotLeaderError if
        this node does not lead ``epoch``)."""

    def schedule_append(self, records: Sequence[bytes], epoch: int, atomic: bool) -> int:
        """Queue records as the leader of ``epoch``; returns the last offset given."""

    def resign(self, epoch: int) -> None: ...

    def create_snapshot(self, snapshot_id: SnapshotId) -> Any: ...


class FatalFaultError(Exception):
    """The controller hit a fault it must not survive (a replay error, a broken invariant);
    the node stops.  Raised by the default fatal handler."""


def _default_fatal(message: str, exc: BaseException | None) -> BaseException:
    log.critical("Fatal controller fault: %s", message, exc_info=exc)
    return FatalFaultError(f"{message}: {exc}" if exc is not None else message)


class ControllerFuture(Generic[T]):
    """A single-threaded future: the controller's answer to one call.

    Completed on the controller's thread; ``add_done_callback`` runs at once if done.  The
    node's RPC layer turns it into an asyncio future; tests and the simulator read it."""

    __slots__ = ("_done", "_result", "_exc", "_callbacks")

    def __init__(self) -> None:
        self._done = False
        self._result: Any = None
        self._exc: BaseException | None = None
        self._callbacks: list[Callable[["ControllerFuture[T]"], None]] = []

    @classmethod
    def completed(cls, value: T) -> "ControllerFuture[T]":
        """A future already answered (requests with nothing to do skip the queue)."""
        future: ControllerFuture[T] = cls()
        future.set_result(value)
        return future

    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("the controller has not answered yet")
        if self._exc is not None:
            raise self._exc
        return self._result  # type: ignore[no-any-return]

    def exception(self) -> BaseException | None:
        if not self._done:
            raise RuntimeError("the controller has not answered yet")
        return self._exc

    def set_result(self, value: T) -> None:
        self._finish(value, None)

    def set_exception(self, exc: BaseException) -> None:
        self._finish(None, exc)

    def _finish(self, value: Any, exc: BaseException | None) -> None:
        if self._done:
            return
        self._done, self._result, self._exc = True, value, exc
        cbs, self._callbacks = self._callbacks, []
        for cb in cbs:
            cb(self)

    def add_done_callback(self, cb: Callable[["ControllerFuture[T]"], None]) -> None:
        if self._done:
            cb(self)
        else:
            self._callbacks.append(cb)


def _has_partition_records(records: list[ApiMessageAndVersion], at_least: int) -> bool:
    """Whether ``records`` hold ``at_least`` PartitionRecords (an already encoded one is
    recognized by its frame header, not decoded)."""
    partition_record = m.PartitionRecord
    key = partition_record.API_KEY
    n = 0
    for r in records:
        if type(r) is FramedRecord:
            if r.api_key != key:
                continue
        elif type(r.message) is not partition_record:
            continue
        n += 1
        if n >= at_least:
            return True
    return False


def _constant(value: int, _index: int) -> int:
    return value


class _RecordFailure(Exception):
    """A record of :meth:`QuorumController.replay_many` failed: its index and the error."""

    def __init__(self, index: int, cause: BaseException):
        super().__init__(f"record {index}: {cause}")
        self.index = index
        self.cause = cause


class RecordLimitError(Exception):
    """An operation produced more than MAX_RECORDS_PER_USER_OP records (Kafka's
    BoundedListTooLongException); answered as POLICY_VIOLATION."""


# ------------------------------------------------------------------ events
class _ControlEvent:
    """Internal work (Raft callbacks, activation bookkeeping): no caller to answer."""

    __slots__ = ("ctl", "name", "fn")

    def __init__(self, ctl: "QuorumController", name: str, fn: Callable[[], None]):
        self.ctl, self.name, self.fn = ctl, name, fn

    def run(self) -> None:
        self.ctl.current_event = self.name
        self.fn()

    def handle_exception(self, exc: BaseException) -> None:
        if isinstance(exc, EventQueueClosedError):
            return
        self.ctl._handle_event_exception(self.name, exc)


class _ReadEvent:
    __slots__ = ("ctl", "name", "fn", "future")

    def __init__(self, ctl: "QuorumController", name: str, fn: Callable[[int], Any]):
        self.ctl, self.name, self.fn = ctl, name, fn
        self.future: ControllerFuture[Any] = ControllerFuture()

    def run(self) -> None:
        self.ctl.current_event = self.name
        self.future.set_result(self.fn(self.ctl.offset_control.last_stable_offset))

    def handle_exception(self, exc: BaseException) -> None:
        self.future.set_exception(self.ctl._handle_event_exception(self.name, exc))


class _WriteEvent:
    __slots__ = ("ctl", "name", "op", "future", "response", "after")

    def __init__(self, ctl: "QuorumController", name: str, op: Callable[[], ControllerResult[Any]],
                 after: Callable[[int], None] | None = None):
        self.ctl, self.name, self.op = ctl, name, op
        self.future: ControllerFuture[Any] = ControllerFuture()
        self.response: Any = None
        #: called with the last offset written (or next_write_offset - 1 when nothing was)
        self.after = after

    def run(self) -> None:
        self.ctl.current_event = self.name
        self.ctl._run_write(self)

    def handle_exception(self, exc: BaseException) -> None:
        self.complete(exc)

    def complete(self, exc: BaseException | None) -> None:
        if exc is None:
            self.future.set_result(self.response)
        else:
            self.future.set_exception(self.ctl._handle_event_exception(self.name, exc))


#: ``answer_broker_heartbeat`` without a context: the answer takes (reply, exc) only
_NO_CONTEXT = object()


class _HeartbeatEvent:
    """A BrokerHeartbeat: the write event of ``process_broker_heartbeat`` without the generic
    event's future and closures (see :meth:`QuorumController.answer_broker_heartbeat`).
    Semantics are the write path's: NOT_CONTROLLER unless active, records replayed and
    appended, the answer parked in the purgatory; a deadline that passes in the queue
    still counts as contact (``process_expired_broker_heartbeat``) before the error is
    answered."""

    __slots__ = ("ctl", "request", "answer", "context", "reply")

    def __init__(self, ctl: "QuorumController", request: Any, answer: Callable[..., None], context: Any):
        self.ctl, self.request, self.answer, self.context = ctl, request, answer, context
        self.reply: Any = None

    def run(self) -> None:
        ctl = self.ctl
        ctl.current_event = "processBrokerHeartbeat"
        if ctl.fatal is not None:
            raise ctl.fatal
        epoch = ctl.claim_epoch
        if epoch == -1:
            raise ctl.wrong_controller()
        if self.request.want_shut_down:
            # a controlled shutdown's heartbeat may write a bounded result of partition
            # changes: the collector waits for its end, as for other writes (_run_write)
            with paused_gc():
                self._write(ctl, epoch)
        else:
            self._write(ctl, epoch)

    def _write(self, ctl: "QuorumController", epoch: int) -> None:
        records: list[ApiMessageAndVersion] = []  # process_broker_heartbeat's (non-atomic) result
        self.reply = reply = ctl.cluster_control.broker_heartbeat(self.request, records)
        ctl._write_result("processBrokerHeartbeat", epoch, records, False,
                          self._after if reply.in_controlled_shutdown else None, self.complete)

    def _after(self, last_offset: int) -> None:
        self.ctl.cluster_control.update_controlled_shutdown_offset(self.request.broker_id, last_offset)

    def complete(self, exc: BaseException | None) -> None:
        if exc is None:
            context = self.context  # (_answer, inlined: the steady state's path)
            if context is _NO_CONTEXT:
                self.answer(self.reply, None)
            else:
                self.answer(context, self.reply, None)
        else:
            self.handle_exception(exc)

    def _answer(self, reply: Any, exc: BaseException | None) -> None:
        context = self.context
        if context is _NO_CONTEXT:
            self.answer(reply, exc)
        else:
            self.answer(context, reply, exc)

    def handle_exception(self, exc: BaseException) -> None:
        ctl = self.ctl
        err = ctl._handle_event_exception("processBrokerHeartbeat", exc)
        if isinstance(err, ControllerTimeoutError) and ctl.active:
            try:
                ctl.cluster_control.process_expired_broker_heartbeat(self.request)
                if ctl.metrics is not None:
                    ctl.metrics.inc_timed_out_heartbeats()
            except ApiError:
                pass
        self._answer(None, err)


class _Listener:
    """The Raft listener: each callback becomes an event, ignored once a newer listener
    registration replaced this one (Kafka's QuorumMetaLogListener)."""

    def __init__(self, ctl: "QuorumController"):
        self.ctl = ctl

    def _enqueue(self, name: str, fn: Callable[[], None]) -> None:
        ctl = self.ctl

        def guarded() -> None:
            if ctl._listener is self:
                fn()
        ctl.queue.append(_ControlEvent(ctl, name, guarded))

    def handle_commit(self, batches: tuple[Batch, ...]) -> None:
        self._enqueue(f"handleCommit[baseOffset={batches[0].base_offset}]",
                      lambda: self.ctl._handle_commit(batches))

    def handle_load_snapshot(self, reader: Any) -> None:
        # The reader is valid only during this call: take the records now, apply them in the event.
        sid = reader.snapshot_id
        batches = [b for b in reader if not b.is_control]
        ts = reader.last_contained_log_time_ms or 0
        self._enqueue(f"handleLoadSnapshot[snapshotId={snapshot_name(sid.offset, sid.epoch)}]",
                      lambda: self.ctl._handle_load_snapshot(sid, batches, ts))

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self._enqueue(f"handleLeaderChange[{leader.epoch}]", lambda: self.ctl._handle_leader_change(leader))


# ------------------------------------------------------------------ the controller
class QuorumController:
    """See the module doc.  ``managers`` are built here from the controller's registry; the
    node (or a test) drives ``queue`` (``run_ready``) and the Raft client."""

    # The managers (managers.install_default_managers sets them; a test installer may set fewer).
    feature_control: "FeatureControlManager"
    cluster_control: "ClusterControlManager"
    producer_id_control: "ProducerIdControlManager"
    replication_control: "ReplicationControlManager"
    configuration_control: "ConfigurationControlManager"
    periodic_control: "PeriodicTaskControlManager"
    #: AlterPartition, elections, reassignments and broker-driven partition changes
    partition_ops: Any
    security_managers: list[Any]

    def __init__(self, *, node_id: int, cluster_id: str, raft: ControllerRaft, queue: Any,
                 clock_ms: Callable[[], int], bootstrap: BootstrapMetadata, settings: Any = None,
                 metrics: Any = None,
                 fatal_fault_handler: Callable[[str, BaseException | None], BaseException] | None = None,
                 managers: Callable[["QuorumController"], None] | None = None):
        self.node_id = node_id
        self.cluster_id = cluster_id
        self.raft = raft
        self.queue = queue
        self.clock_ms = clock_ms
        self.bootstrap = bootstrap
        self.settings = settings
        self.metrics = metrics
        self.fatal_fault_handler = fatal_fault_handler or _default_fatal
        self.registry = SnapshotRegistry()
        self.offset_control = OffsetControlManager(self.registry, metrics=metrics, clock_ms=clock_ms)
        self.purgatory = Purgatory()
        #: the Raft epoch this node is active in, or -1 (Kafka's curClaimEpoch)
        self.claim_epoch = -1

        #: set once a fatal fault stopped this controller: every later event fails
        self.fatal: BaseException | None = None
        self.records_replayed = 0
        #: the Raft snapshots this controller loaded, in order
        self.snapshots_loaded: list[SnapshotId] = []
        #: api key -> replay(message, offset); filled by the managers
        self._replayers: dict[int, Callable[[Any, int], None]] = {}
        #: api key -> replay_many(messages): a run of two or more records of that type in one
        #: call (a topic creation's PartitionRecords); same resulting state as one by one
        self._bulk_replayers: dict[int, Callable[[Sequence[Any]], None]] = {}
        #: callbacks for claim / renounce (managers that keep soft state, periodic tasks)
        self._on_activate: list[Callable[[], None]] = []
        self._on_deactivate: list[Callable[[], None]] = []
        #: snapshot writers and their record sources (snapshot.py)
        self.snapshot_generator: Any = None
        #: run after the activation records are replayed (on_activation_complete)
        self._post_activation: list[Callable[[], None]] = []
        self._snapshot_sources: list[Callable[[int], Iterable[ApiMessageAndVersion]]] = []
        #: the name of the event running (or last run): the performance log names it
        self.current_event = ""
        from kraft_node.metadata.controller.performance import EventPerformanceMonitor
        self.performance = EventPerformanceMonitor(
            getattr(queue, "clock", None) or getattr(queue, "now_ns", None) or (lambda: clock_ms() * 1_000_000),
            sample_period_ms=int(getattr(settings, "controller_performance_sample_period_ms", 60_000)),
            always_log_threshold_ms=int(getattr(settings, "controller_performance_always_log_threshold_ms", 2000)),
            metrics=metrics)
        if hasattr(queue, "on_event_timing"):
            queue.on_event_timing = lambda q_ns, p_ns: self.performance.observe(self.current_event, q_ns, p_ns)
        self._register_core_replayers()
        if managers is None:
            from kraft_node.metadata.controller.managers import install_default_managers
            managers = install_default_managers
        managers(self)
        self._listener = _Listener(self)
        raft.register_listener(self._listener)

    # ---------------------------------------------------------- manager wiring
    def register_replayer(self, record_type: Any, fn: Callable[[Any, int], None]) -> None:
        key = int(record_type.API_KEY)
        if key in self._replayers:
            raise ValueError(f"{record_type.__name__} already has a replayer")
        self._replayers[key] = fn

    def register_bulk_replayer(self, record_type: Any, fn: Callable[[Sequence[Any]], None]) -> None:
        """``fn(messages)`` replays a run of consecutive ``record_type`` records at once (it
        must leave the state replaying them one by one would, and name a failing record by
        raising an exception with its ``index`` in the run).  The type needs a replayer too."""
        key = int(record_type.API_KEY)
        if key not in self._replayers:
            raise ValueError(f"{record_type.__name__} has no replayer")
        self._bulk_replayers[key] = fn

    def replay_many(self, messages: Sequence[Any], offset_of: Callable[[int], int]) -> None:
        """Replay ``messages[i]`` at ``offset_of(i)`` in order, runs of a bulk-replayed type
        in one call.  A failure raises :class:`_RecordFailure` naming the record's index
        (the records before it applied)."""
        bulk = self._bulk_replayers
        n = len(messages)
        i = 0
        while i < n:
            message = messages[i]
            if bulk:
                key = int(message.API_KEY)
                fn = bulk.get(key)
                if fn is not None:
                    j = i + 1
                    while j < n and int(messages[j].API_KEY) == key:
                        j += 1
                    if j - i > 1:
                        try:
                            fn(messages[i:j])
                        except BaseException as exc:
                            raise _RecordFailure(i + int(getattr(exc, "index", 0)), exc) from exc
                        self.records_replayed += j - i
                        i = j
                        continue
            try:
                self.replay(message, offset_of(i))
            except BaseException as exc:
                raise _RecordFailure(i, exc) from exc
            i += 1

    def register_snapshot_source(self, fn: Callable[[int], Iterable[ApiMessageAndVersion]]) -> None:
        """A manager's ``snapshot_records(epoch)``: the records rebuilding its state as of a
        registry snapshot (the snapshot writer and the simulator's state digests use them)."""
        self._snapshot_sources.append(fn)

    def snapshot_records(self, epoch: int) -> Iterable[ApiMessageAndVersion]:
        """Every manager's records at registry snapshot ``epoch``, features first (a reader
        needs metadata.version before anything else)."""
        for fn in self._snapshot_sources:
            yield from fn(epoch)

    def snapshot_values(self, epoch: int) -> list[bytes]:
        return [r.encode() for r in self.snapshot_records(epoch)]

    def on_activate(self, fn: Callable[[], None]) -> None:
        self._on_activate.append(fn)

    def on_deactivate(self, fn: Callable[[], None]) -> None:
        self._on_deactivate.append(fn)

    def _register_core_replayers(self) -> None:
        oc = self.offset_control
        self.register_replayer(m.BeginTransactionRecord, lambda _m, off: oc.replay_begin_transaction(off))
        self.register_replayer(m.EndTransactionRecord, lambda _m, off: oc.replay_end_transaction(off))
        self.register_replayer(m.AbortTransactionRecord, lambda _m, off: oc.replay_abort_transaction(off))
        self.register_replayer(m.NoOpRecord, lambda _m, _off: None)
        # Kafka 4 no longer migrates from ZooKeeper; the record survives in logs that did (3.x)
        # and in every 3.4+ bootstrap transaction (state NONE).
        self.register_replayer(m.ZkMigrationStateRecord, _replay_zk_migration_state)

    # ---------------------------------------------------------- state
    @property
    def active(self) -> bool:
        return self.claim_epoch != -1

    @property
    def last_stable_offset(self) -> int:
        return self.offset_control.last_stable_offset

    def latest_controller(self) -> int | None:
        leader = self.raft.leader_and_epoch.leader_id
        return None if leader is None or leader < 0 else leader

    def wrong_controller(self) -> NotControllerError:
        leader = self.latest_controller()
        if leader is not None:
            return NotControllerError(f"The active controller appears to be node {leader}.")
        return NotControllerError("No controller appears to be active.")

    # ---------------------------------------------------------- replay
    def replay(self, message: Any, offset: int) -> None:
        """Apply one record (the only way controller state changes)."""
        fn = self._replayers.get(int(message.API_KEY))
        if fn is None:
            raise ReplayError(f"Unhandled record type {type(message).__name__}")
        fn(message, offset)
        self.records_replayed += 1

    def _decode(self, value: bytes, offset: int) -> Any:
        return decode_metadata_record(value, offset)[2]

    # ---------------------------------------------------------- public API
    def append_write(self, name: str, op: Callable[[], ControllerResult[T]], *,
                     deadline_ns: int | None = None,
                     after: Callable[[int], None] | None = None) -> ControllerFuture[T]:
        """Queue a write; the future completes once its records commit (or fails)."""
        ev = _WriteEvent(self, name, op, after)
        if deadline_ns is None:
            self.queue.append(ev)
        else:
            self.queue.append_with_deadline(deadline_ns, ev)
        return ev.future

    def append_read(self, name: str, fn: Callable[[int], T], *,
                    deadline_ns: int | None = None) -> ControllerFuture[T]:
        """Queue a read of the committed state: ``fn(epoch)`` with the stable offset."""
        ev = _ReadEvent(self, name, fn)
        if deadline_ns is None:
            self.queue.append(ev)
        else:
            self.queue.append_with_deadline(deadline_ns, ev)
        return ev.future

    def schedule_deferred_write(self, tag: str, deadline_ns: int, op: Callable[[], ControllerResult[Any]]) -> None:
        """A write that runs at ``deadline_ns`` (periodic tasks).  Its errors are logged; a
        NOT_CONTROLLER or shutdown just ends it (Kafka's scheduleDeferredWriteEvent)."""
        ev = _WriteEvent(self, tag, op)

        def done(f: ControllerFuture[Any]) -> None:
            exc = f.exception()
            if exc is None or isinstance(exc, (NotControllerError, ControllerTimeoutError)):
                return
            log.error("Unexpected exception while executing deferred write event %s: %s", tag, exc)
        ev.future.add_done_callback(done)
        self.queue.schedule_deferred(tag, deadline_ns, ev, keep_earlier=True)

    def cancel_deferred(self, tag: str) -> None:
        self.queue.cancel_deferred(tag)

    # ---------------------------------------------------------- the write path
    def _run_write(self, ev: _WriteEvent) -> None:
        if self.fatal is not None:
            raise self.fatal
        epoch = self.claim_epoch
        if epoch == -1:
            raise self.wrong_controller()
        # The collector waits for the end of the write: building and replaying a result makes
        # thousands of short-lived records and registrations (a lifecycle result ~1,000 of
        # each) that reference counting frees, and collecting the young generation every 700
        # allocations inside it cost node 1 ~9% of its CPU in a controlled shutdown (session
        # 20).  What survives is looked at by the first collection after the event.
        with paused_gc():
            result = ev.op()
            ev.response = result.response
            self._write_result(ev.name, epoch, result.records, result.atomic, ev.after, ev.complete)

    def _write_result(self, name: str, epoch: int, records: list[ApiMessageAndVersion], atomic: bool,
                      after: Callable[[int], None] | None, complete: Callable[[BaseException | None], None]) -> None:
        """Steps 3-5 of a write (module doc) for an operation's records: replay, schedule with
        Raft, then park ``complete`` in the purgatory -- at the last offset written, or, with no
        records, behind whatever is already pending (answered now if nothing is).  ``after``
        gets the last offset written (next_write_offset - 1 when nothing was)."""
        if not records:
            if after is not None:
                after(self.offset_control.next_write_offset - 1)
            pending = self.purgatory.highest_pending_offset()
            if pending is None:
                complete(None)
            else:
                self.purgatory.add(pending, complete)
            return
        if len(records) > MAX_RECORDS_PER_USER_OP:
            raise RecordLimitError(f"{name} produced {len(records)} records, more than "
                                   f"{MAX_RECORDS_PER_USER_OP}")
        if atomic:
            if len(records) > MAX_RECORDS_PER_BATCH:
                raise RecordLimitError(f"Attempted to atomically commit {len(records)} records, but "
                                       f"maxRecordsPerBatch is {MAX_RECORDS_PER_BATCH}")
            last = self._append_batch(epoch, records, True)
        else:
            last = -1
            for i in range(0, len(records), MAX_RECORDS_PER_BATCH):
                last = self._append_batch(epoch, records[i:i + MAX_RECORDS_PER_BATCH], False)
        if after is not None:
            after(last)
        self.purgatory.add(last, complete)

    def _append_batch(self, epoch: int, records: list[ApiMessageAndVersion], atomic: bool) -> int:
        """Replay ``records`` at the offsets Raft will give them, then schedule them; returns
        the last offset.  (One Raft append per write: group commit -- writes of one queue
        slice sharing an append -- was measured and did not help, benchmarks/results/NOTES.md
        session 12.)"""
        base = self.raft.next_offset(epoch)  # NotLeaderError: the epoch is over (failover)
        values = self._replay_at(base, records)
        last = self.raft.schedule_append(values, epoch, atomic)
        if last != base + len(records) - 1:
            raise self._fatal(f"Raft gave offsets ending at {last} to a batch replayed at {base}.."
                              f"{base + len(records) - 1}", None)
        self.offset_control.handle_schedule_append(last)
        return last

    def _replay_at(self, base: int, records: list[ApiMessageAndVersion]) -> list[bytes]:
        values = [r.encode() for r in records]
        try:
            # A write of many PartitionRecords (a creation) is replayed from the bytes just
            # framed, through the columnar path the standbys take (measured: the leader's CPU
            # per created partition -25..-58%, and its state comes from the committed bytes
            # exactly as theirs does); anything else replays the record objects
            if len(records) >= MIN_COLUMNAR_RECORDS and _has_partition_records(records, MIN_COLUMNAR_RECORDS):
                replay_framed_values(self, values, partial(operator.add, base))
            else:
                self.replay_many([r.message for r in records], lambda i: base + i)
        except (_RecordFailure, RecordFailure) as failure:
            i, exc = failure.index, failure.cause
            raise self._fatal(f"Unable to apply {type(records[i].message).__name__} record at offset {base + i} on "
                              f"active controller, from the batch with baseOffset {base}", exc) from exc
        return values

    # ---------------------------------------------------------- errors
    def _fatal(self, message: str, exc: BaseException | None) -> BaseException:
        err = self.fatal_fault_handler(message, exc)
        if self.fatal is None:
            self.fatal = err
        return err

    def _handle_event_exception(self, name: str, exc: BaseException) -> BaseException:
        """Kafka's EventHandlerExceptionInfo: what the caller sees, and whether to fail over."""
        if isinstance(exc, ApiError):
            return exc
        if isinstance(exc, FatalFaultError) or exc is self.fatal:
            return ApiError(Errors.UNKNOWN_SERVER_ERROR, "The controller hit a fatal error.")
        if isinstance(exc, NotLeaderError):
            log.info("%s: the Raft epoch ended under the write (%s)", name, exc)
            if self.active:
                self._renounce()
            return self.wrong_controller()
        if isinstance(exc, EventQueueClosedError):
            return ControllerTimeoutError("The controller is shutting down.")
        if isinstance(exc, PeriodicControlTaskError):
            # Kafka counts a periodic task's failure and stays active (the task backs off).
            log.error("%s: %s", name, exc)
            return ApiError(Errors.UNKNOWN_SERVER_ERROR, str(exc))
        if isinstance(exc, RecordLimitError):
            return ApiError(Errors.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
        if isinstance(exc, ReplayError):
            return ApiError(Errors.UNKNOWN_SERVER_ERROR, str(self._fatal(f"{name}: replay failed", exc)))
        # Anything else is a bug: answer UNKNOWN_SERVER_ERROR and fail over (Kafka's catch-all).
        log.error("%s: event failed with %s at epoch %d. Renouncing leadership and reverting to the last "
                  "committed offset %d.", name, type(exc).__name__, self.claim_epoch,
                  self.offset_control.last_stable_offset, exc_info=exc)
        if self.active:
            self._renounce()
        return ApiError(Errors.UNKNOWN_SERVER_ERROR, f"{type(exc).__name__}: {exc}")

    # ---------------------------------------------------------- Raft callbacks (as events)
    def _handle_commit(self, batches: Iterable[Batch]) -> None:
        if self.fatal is not None:
            return
        oc = self.offset_control
        for b in batches:
            last = b.next_offset - 1
            if b.is_control:
                # Control batches (LeaderChange, voters) hold no controller records and do not
                # move the controller's offsets (Kafka: handleCommitBatchMetrics only): the
                # registry has snapshots only at offsets of records this controller applied,
                # and the stable offset must always be one of them.
                continue
            gen = self.snapshot_generator
            if self.active:
                oc.handle_commit_batch(last, b.epoch, b.append_time_ms)
                self.purgatory.complete_up_to(oc.last_stable_offset)
                if gen is not None:
                    gen.committed(sum(map(len, b.records)))
                continue
            base = b.base_offset
            try:
                replay_framed_values(self, b.records, partial(operator.add, base))
            except RecordFailure as failure:
                if failure.decoding:
                    self._fatal(f"Unable to apply a record of the batch with baseOffset {base} on standby "
                                "controller", failure.cause)
                else:
                    self._fatal(f"Unable to apply record at offset {base + failure.index} on standby controller, "
                                f"from the batch with baseOffset {base}", failure.cause)
                return
            oc.handle_commit_batch(last, b.epoch, b.append_time_ms)
            if gen is not None:
                gen.committed(sum(map(len, b.records)))

    def _handle_load_snapshot(self, sid: SnapshotId, batches: list[Batch], timestamp_ms: int) -> None:
        if self.fatal is not None:
            return
        name = snapshot_name(sid.offset, sid.epoch)
        if self.active:
            self._fatal(f"Asked to load snapshot {name}, but we are the active controller at epoch "
                        f"{self.claim_epoch}", None)
            return
        oc = self.offset_control
        if self.snapshot_generator is not None:
            self.snapshot_generator.abort(f"snapshot {name} is being loaded")
        oc.begin_load_snapshot(sid.offset, sid.epoch)
        last = sid.offset - 1
        # the reverse indexes of the whole snapshot's PartitionRecords are put once, when the
        # block ends (replication_snapshot.deferred_indexes), before the registry's snapshot of
        # the load is taken by end_load_snapshot
        with deferred_indexes(self):
            for b in batches:
                recs = b.records
                # PartitionRecords as columns (replication_snapshot), the rest decoded and replayed
                try:
                    replay_framed_values(self, recs, partial(_constant, last))
                except RecordFailure as failure:  # the record that does not decode, or the replay's
                    i, exc = failure.index, failure.cause
                else:
                    continue
                self._fatal(f"Unable to apply record from snapshot {name} on standby controller, which was "
                            f"{i + 1} of {len(recs)} record(s) in the batch with baseOffset {b.base_offset}.", exc)
                return
        oc.end_load_snapshot(timestamp_ms)
        self.snapshots_loaded.append(sid)
        if self.snapshot_generator is not None:
            self.snapshot_generator.loaded(sid, timestamp_ms)

    def _handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        if self.fatal is not None:
            return
        if self.metrics is not None and leader.leader_id is not None and leader.leader_id >= 0:
            self.metrics.inc_new_active_controllers()
        if self.active:
            if leader.leader_id == self.node_id:
                if leader.epoch != self.claim_epoch:
                    # Raft never lets a leader carry its epoch over; a new epoch is a new claim.
                    log.warning("We were the leader in epoch %d, and are the leader again in the new epoch %d: "
                                "renouncing and claiming again.", self.claim_epoch, leader.epoch)
                    self._renounce()
                    self._claim(leader.epoch)
                return
            log.warning("Renouncing the leadership due to a metadata log event. We were the leader at epoch %d, "
                        "but in the new epoch %d, the leader is %s. Reverting to last stable offset %d.",
                        self.claim_epoch, leader.epoch,
                        leader.leader_id if leader.leader_id >= 0 else "(none)",
                        self.offset_control.last_stable_offset)
            self._renounce()
        elif leader.leader_id == self.node_id:
            self._claim(leader.epoch)
        else:
            log.info("In the new epoch %d, the leader is %s.", leader.epoch,
                     leader.leader_id if leader.leader_id >= 0 else "(none)")

    # ---------------------------------------------------------- claim / renounce
    def _claim(self, epoch: int) -> None:
        try:
            next_offset = self.raft.next_offset(epoch)
        except NotLeaderError:
            log.info("Not claiming epoch %d: Raft has moved past it.", epoch)
            return
        log.info("Becoming the active controller at epoch %d, next write offset %d.", epoch, next_offset)
        self.claim_epoch = epoch
        self.offset_control.activate(next_offset)
        for fn in self._on_activate:
            fn()
        ev = _WriteEvent(self, f"completeActivation[{epoch}]", self._activation_records,
                         after=lambda _off: self._activation_done())
        self.queue.prepend(ev)

    def _activation_records(self) -> ControllerResult[None]:
        try:
            return self.generate_activation_records()
        except ApiError:
            raise
        except BaseException as exc:
            raise self._fatal("exception while completing controller activation", exc) from exc

    def generate_activation_records(self) -> ControllerResult[None]:
        """Kafka's ActivationRecordsGenerator; overridden by the feature manager's hook
        ``activation_records`` when the managers are installed."""
        return activation_records(self, log.warning)

    def _activation_done(self) -> None:
        for fn in self._post_activation:
            fn()

    def on_activation_complete(self, fn: Callable[[], None]) -> None:
        """Run after the activation records are replayed (periodic tasks start here, so they
        see the bootstrap metadata.version)."""
        self._post_activation.append(fn)

    def _renounce(self) -> None:
        if self.claim_epoch == -1:
            return
        epoch = self.claim_epoch
        self.raft.resign(epoch)
        self.claim_epoch = -1
        self.purgatory.fail_all(NotControllerError("No controller appears to be active."))
        self.offset_control.deactivate()
        for fn in self._on_deactivate:
            fn()
        log.info("Renounced the leadership of epoch %d; reverted to the last stable offset %d.", epoch,
                 self.offset_control.last_stable_offset)

    def renounce(self) -> None:
        """Give up the active role (as an event: runs on the controller's loop)."""
        self.queue.append(_ControlEvent(self, "renounce", self._renounce))

    # ---------------------------------------------------------- the Controller API (Kafka's Controller)
    # Each returns a ControllerFuture completed on the controller's loop; errors are ApiError.
    # ``deadline_ns`` (the queue's clock): the call fails with REQUEST_TIMED_OUT if it has not
    # started by then.

    def register_broker(self, request: Any, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """BrokerRegistration: the broker's epoch is the offset where its registration's atomic
        batch starts -- its RegisterBrokerRecord's, unless an unclean restart's cleanup records
        go first in the batch (as in Kafka)."""
        def op() -> ControllerResult[Any]:
            finalized = dict(self.feature_control.finalized_features())
            finalized.setdefault("kraft.version", self._kraft_version())
            return self.cluster_control.register_broker(request, self.offset_control.next_write_offset, finalized)
        return self.append_write("registerBroker", op, deadline_ns=deadline_ns)

    def track_broker_heartbeat(self, broker_id: int, broker_epoch: int) -> bool:
        """Record a heartbeat's arrival -- called by the RPC layer *before* the heartbeat event
        is queued, so a busy loop never fences a live broker (KAFKA-15019).  False when this
        controller is not active (answer NOT_CONTROLLER)."""
        if self.claim_epoch == -1:  # not active (the property, inlined: this runs per heartbeat)
            return False
        return self.cluster_control.track_broker_heartbeat(broker_id, broker_epoch) is True

    def process_broker_heartbeat(self, request: Any, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """BrokerHeartbeat: the broker's state transition (unfence when caught up, fence,
        controlled shutdown) and its records.  A heartbeat that times out in the queue still
        counts as contact (``process_expired_broker_heartbeat``).  The future form of
        :meth:`answer_broker_heartbeat` (same event)."""
        future: ControllerFuture[Any] = ControllerFuture()

        def answer(reply: Any, exc: BaseException | None) -> None:
            if exc is None:
                future.set_result(reply)
            else:
                future.set_exception(exc)
        self.answer_broker_heartbeat(request, answer, deadline_ns=deadline_ns)
        return future

    def answer_broker_heartbeat(self, request: Any, answer: Callable[..., None], *,
                                deadline_ns: int | None = None, context: Any = _NO_CONTEXT) -> None:
        """Queue the heartbeat event; ``answer(reply, None)`` or ``answer(None, error)`` is
        called once, on the controller's thread, when it would complete a future: after the
        records of its transition commit, or, with none (the steady state), after whatever
        was already pending.  With ``context``, ``answer(context, reply, error)`` instead (so
        the RPC layer passes its request context without a closure per heartbeat).  The RPC
        layer's path: one event object per heartbeat, no future or closures (a heartbeat is
        the controller's most frequent request)."""
        ev = _HeartbeatEvent(self, request, answer, context)
        if deadline_ns is None:
            self.queue.append(ev)
        else:
            self.queue.append_with_deadline(deadline_ns, ev)

    def register_controller(self, request: Any, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        return self.append_write("registerController", lambda: self.cluster_control.register_controller(request),
                                 deadline_ns=deadline_ns)

    def unregister_broker(self, broker_id: int, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        return self.append_write("unregisterBroker", lambda: self.cluster_control.unregister_broker(broker_id),
                                 deadline_ns=deadline_ns)

    def allocate_producer_ids(self, broker_id: int, broker_epoch: int, *,
                              deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """AllocateProducerIds: the next block of 1,000 ids (ProducerIdsBlock)."""
        return self.append_write(
            "allocateProducerIds",
            lambda: self.producer_id_control.generate_next_producer_id(broker_id, broker_epoch),
            deadline_ns=deadline_ns)

    def update_features(self, updates: dict[str, int], upgrade_types: dict[str, Any], validate_only: bool, *,
                        deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """UpdateFeatures: {feature: ApiError or None}; the records (if any) are one atomic batch."""
        def op() -> ControllerResult[Any]:
            # through the config manager (Kafka's path): turning ELR on carries its safety records
            return self.configuration_control.update_features(updates, upgrade_types, validate_only,
                                                              claimed_epoch=self.claim_epoch)
        return self.append_write("updateFeatures", op, deadline_ns=deadline_ns)

    def finalized_features(self, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """(finalized levels, the offset they are read at) of the committed state; ``({}, -1)``
        (Kafka's "unknown" features epoch) before the bootstrap records have committed.  Why
        not an error: ApiVersions asks this of every connection, and brokers connect while the
        new controller is still activating; an error in an event renounces leadership."""
        def read(epoch: int) -> tuple[dict[str, int], int]:
            if self.feature_control.metadata_version_or_none(epoch=epoch) is None:
                return {}, -1
            return self.feature_control.finalized_features(epoch=epoch), epoch
        return self.append_read("finalizedFeatures", read, deadline_ns=deadline_ns)

    # -- topics, partitions and configs (issue 22): Kafka's Controller methods of the same names.
    # An empty request is answered at once, without an event (Kafka's testEarlyControllerResults);
    # ``validate_only`` runs the operation and drops its records (Kafka's withoutRecords).

    def create_topics(self, request: Any, describable: set[str] | None = None, *,
                      deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """CreateTopics: a CreateTopicsResponse data object with one result per topic
        (validate_only is the request's flag, handled by the manager)."""
        if not request.topics:
            from kraft_node.protocol.generated.create_topics import CreateTopicsResponse
            return ControllerFuture.completed(CreateTopicsResponse(throttle_time_ms=0, topics=[]))
        return self.append_write(
            "createTopics", lambda: self.replication_control.create_topics(request, describable),
            deadline_ns=deadline_ns)

    def create_partitions(self, topics: Sequence[Any], validate_only: bool, *,
                          deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """CreatePartitions: a list of CreatePartitionsTopicResult."""
        if not topics:
            return ControllerFuture.completed([])

        def op() -> ControllerResult[Any]:
            result = self.replication_control.create_partitions(list(topics))
            return result.without_records() if validate_only else result
        return self.append_write("createPartitions", op, deadline_ns=deadline_ns)

    def delete_topics(self, ids: Iterable[Any], *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """DeleteTopics by id: {topic id: ApiError or None}; one RemoveTopicRecord a topic."""
        ids = list(ids)
        if not ids:
            return ControllerFuture.completed({})
        return self.append_write("deleteTopics", lambda: self.replication_control.delete_topics(ids),
                                 deadline_ns=deadline_ns)

    def find_topic_ids(self, names: Iterable[str], *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """{name: topic id or ApiError} at the committed offset."""
        names = list(names)
        if not names:
            return ControllerFuture.completed({})
        return self.append_read("findTopicIds", lambda e: self.replication_control.find_topic_ids(e, names),
                                deadline_ns=deadline_ns)

    def find_topic_names(self, ids: Iterable[Any], *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """{topic id: name or ApiError} at the committed offset."""
        ids = list(ids)
        if not ids:
            return ControllerFuture.completed({})
        return self.append_read("findTopicNames", lambda e: self.replication_control.find_topic_names(e, ids),
                                deadline_ns=deadline_ns)

    def find_all_topic_ids(self, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        return self.append_read("findAllTopicIds", lambda e: self.replication_control.find_all_topic_ids(e),
                                deadline_ns=deadline_ns)

    def alter_partition(self, request: Any, version: int, *,
                        deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """AlterPartition from a partition leader: an AlterPartitionResponse data object."""
        if not request.topics:
            from kraft_node.protocol.generated.alter_partition import AlterPartitionResponse
            return ControllerFuture.completed(AlterPartitionResponse(throttle_time_ms=0, error_code=0, topics=[]))
        # in write events of bounded cost (1,000 units or 8 ms of building each, queued behind
        # whatever else waits), answered once every slice is committed (alter_partition.py):
        # a leader re-admitting a follower to 10k ISRs was one event of 0.6-2 s (session 20)
        future: ControllerFuture[Any] = self.partition_ops.alter_partitions.submit(
            self, request, version, deadline_ns=deadline_ns)
        return future

    def elect_leaders(self, request: Any, *, deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """ElectLeaders (preferred or unclean); ``topic_partitions`` None means every partition."""
        if request.topic_partitions is not None and not request.topic_partitions:
            from kraft_node.protocol.generated.elect_leaders import ElectLeadersResponse
            return ControllerFuture.completed(ElectLeadersResponse(throttle_time_ms=0, error_code=0,
                                                                   replica_election_results=[]))
        return self.append_write("electLeaders", lambda: self.partition_ops.elect_leaders(request),
                                 deadline_ns=deadline_ns)

    def alter_partition_reassignments(self, request: Any, *,
                                      deadline_ns: int | None = None) -> ControllerFuture[Any]:
        if not request.topics:
            from kraft_node.protocol.generated.alter_partition_reassignments import (
                AlterPartitionReassignmentsResponse,
            )
            return ControllerFuture.completed(AlterPartitionReassignmentsResponse(
                throttle_time_ms=0, error_code=0, error_message=None, responses=[]))
        return self.append_write(
            "alterPartitionReassignments", lambda: self.partition_ops.alter_partition_reassignments(request),
            deadline_ns=deadline_ns)

    def list_partition_reassignments(self, topics: Sequence[Any] | None, *,
                                     deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """ListPartitionReassignments at the committed offset (``topics`` None: all)."""
        return self.append_read(
            "listPartitionReassignments",
            lambda e: self.partition_ops.list_partition_reassignments(topics, epoch=e),
            deadline_ns=deadline_ns)

    def incremental_alter_configs(self, changes: Mapping[Any, Mapping[str, Any]], validate_only: bool, *,
                                  deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """IncrementalAlterConfigs: {ConfigResource: ApiError}."""
        if not changes:
            return ControllerFuture.completed({})

        def op() -> ControllerResult[Any]:
            result = self.configuration_control.incremental_alter_configs(changes, False)
            return result.without_records() if validate_only else result
        return self.append_write("incrementalAlterConfigs", op, deadline_ns=deadline_ns)

    def legacy_alter_configs(self, changes: Mapping[Any, Mapping[str, str | None]], validate_only: bool, *,
                             deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """AlterConfigs (the legacy API, which replaces a resource's whole config set)."""
        if not changes:
            return ControllerFuture.completed({})

        def op() -> ControllerResult[Any]:
            result = self.configuration_control.legacy_alter_configs(changes, False)
            return result.without_records() if validate_only else result
        return self.append_write("legacyAlterConfigs", op, deadline_ns=deadline_ns)

    def describe_configs(self, resources: Mapping[Any, Any], *, include_synonyms: bool = False,
                         include_documentation: bool = False,
                         deadline_ns: int | None = None) -> ControllerFuture[Any]:
        """DescribeConfigs at the committed offset: {ConfigResource: (ApiError or None, [ConfigEntry])}.
        ``resources`` maps each resource to the keys asked for (None or empty: all).  A topic or
        broker resource gets every key with its effective value and source (topic override,
        dynamic broker / cluster default, this node's static config, Kafka's default); other
        types their stored overrides.  A resource that does not exist, or may not be described,
        gets its error."""
        cc = self.configuration_control

        def read(epoch: int) -> dict[Any, tuple[ApiError | None, list[Any]]]:
            from kraft_node.metadata.configs.resources import ConfigResourceType
            from kraft_node.metadata.configs.schema import ConfigEntry, ConfigSource
            out: dict[Any, tuple[ApiError | None, list[Any]]] = {}
            for resource, keys in resources.items():
                wanted = list(keys) if keys else None
                try:
                    cc.validator.validate_resource(resource)
                    if resource.type == ConfigResourceType.TOPIC:
                        if self.replication_control.topic_id(resource.name, epoch=epoch) is None:
                            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                                           f"The topic '{resource.name}' does not exist.")
                        entries = cc.describe_topic_config_entries(
                            resource.name, wanted, epoch=epoch, include_synonyms=include_synonyms,
                            include_documentation=include_documentation)
                    elif resource.type == ConfigResourceType.BROKER:
                        cc.existence_checker(resource)
                        entries = cc.describe_broker_config_entries(
                            resource.name, wanted, epoch=epoch, include_synonyms=include_synonyms,
                            include_documentation=include_documentation)
                    else:
                        stored = cc.configs(resource, epoch=epoch)
                        source = (ConfigSource.GROUP_CONFIG if resource.type == ConfigResourceType.GROUP
                                  else ConfigSource.CLIENT_METRICS_CONFIG)
                        entries = [ConfigEntry(k, v, source) for k, v in sorted(stored.items())
                                   if wanted is None or k in wanted]
                except ApiError as exc:
                    out[resource] = (exc, [])
                    continue
                out[resource] = (None, entries)
            return out
        return self.append_read("describeConfigs", read, deadline_ns=deadline_ns)

    def _kraft_version(self) -> int:
        return int(self.feature_control.kraft_version_accessor.kraft_version())

    # ---------------------------------------------------------- committed-state reads (synchronous)
    def committed_epoch(self) -> int:
        """The registry epoch committed reads use (the stable offset)."""
        return self.offset_control.last_stable_offset


def _replay_zk_migration_state(message: Any, _offset: int) -> None:
    state = int(message.zk_migration_state)
    if state not in (0, 3):  # NONE, POST_MIGRATION
        raise ReplayError(f"Cannot load ZkMigrationState {state} because ZK migration is no longer supported.")


def activation_records(ctl: QuorumController, warn: Callable[[str], None]) -> ControllerResult[None]:
    """Kafka's ActivationRecordsGenerator.

    The log is "empty" when its stable state has no metadata.version (nothing, or only an
    aborted / unfinished bootstrap transaction, was committed): write the bootstrap records,
    in a metadata transaction when that metadata.version has them (3.6-IV1+), else as one
    atomic batch.  Otherwise abort a transaction a crashed predecessor left open.
    """
    oc = ctl.offset_control
    features = getattr(ctl, "feature_control", None)
    stable_mv = features.metadata_version_or_none(epoch=oc.last_stable_offset) if features is not None else None
    txn_start = oc.transaction_start_offset
    records: list[ApiMessageAndVersion] = []
    msg = ["Performing controller activation."]
    if stable_mv is None:
        b = ctl.bootstrap
        level = b.metadata_version_level
        txns = MetadataVersion.from_feature_level(level).is_metadata_transaction_supported()
        if txn_start != -1:
            if not txns:
                raise RuntimeError(f"Detected partial bootstrap records transaction at {txn_start}, but the "
                                   f"metadata.version level {level} does not support transactions. Cannot continue.")
            msg.append(f"Aborting partial bootstrap records transaction at offset {txn_start}. Re-appending "
                       f"{len(b.records)} bootstrap record(s) in new metadata transaction at metadata.version "
                       f"level {level} from bootstrap source '{b.source}'.")
            records.append(ApiMessageAndVersion(m.AbortTransactionRecord(reason="Controller failover"), 0))
            records.append(ApiMessageAndVersion(m.BeginTransactionRecord(name="Bootstrap records"), 0))
        else:
            msg.append(f"The metadata log appears to be empty. Appending {len(b.records)} bootstrap record(s)"
                       f"{' in metadata transaction' if txns else ''} at metadata.version level {level} from "
                       f"bootstrap source '{b.source}'.")
            if txns:
                records.append(ApiMessageAndVersion(m.BeginTransactionRecord(name="Bootstrap records"), 0))
        records.extend(b.records)
        warn(" ".join(msg))
        if txns:
            records.append(ApiMessageAndVersion(m.EndTransactionRecord(), 0))
            return ControllerResult.of(records, None)
        return ControllerResult.atomic_of(records, None)
    if txn_start != -1:
        msg.append(f"Aborting in-progress metadata transaction at offset {txn_start}.")
        records.append(ApiMessageAndVersion(m.AbortTransactionRecord(reason="Controller failover"), 0))
    warn(" ".join(msg))
    return ControllerResult.atomic_of(records, None)

__all__ = ["ControllerFuture", "ControllerRaft", "FatalFaultError", "QuorumController", "activation_records",
           "LATEST_EPOCH"]
