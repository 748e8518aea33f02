"""The controller's in-process benchmarks (issue 21): the QuorumController and its real
EventQueue, with the Raft underneath either scripted or simulated.

    python benchmarks/bench_controller.py heartbeats [--raft scripted|sim] [--brokers 1000]
                                                     [--inflight 100] [--seconds 4] [--runs 3]
    python benchmarks/bench_controller.py writes     [--raft scripted|sim] [--inflight 100] ...
    python benchmarks/bench_controller.py register   [--raft scripted|sim] [--brokers 1000] ...
    python benchmarks/bench_controller.py snapshot   [--raft scripted|sim] [--brokers 10000] ...
    (every one takes --json F; `all` runs the four on both harnesses)

What-ifs (changes proposed elsewhere, measured here without being made there):
``--what-if-snapshot-batch-bytes N`` (snapshot),
``--what-if-gc-threshold a,b,c`` (heartbeats); ``--records-per-slice N`` sets the generator's
own knob, ``--records-per-write K`` makes each write K NoOpRecords.

Why in-process: these figures are the controller's own cost -- the event loop, the managers,
the timeline state, the purgatory -- with nothing else on the core.  The over-TCP figures
(``controller_tcp_bench.py``) add the network, the RPC codecs and a real quorum's fsyncs, and
are compared with these.

The two harnesses:

* ``scripted``: one QuorumController whose Raft leads epoch 1 alone and commits every append
  at once (``InstantRaft``: ``schedule_append`` hands the batch straight back through the
  listener, which queues the commit event as a real Raft callback would).  The queue runs on
  ``time.monotonic_ns``, so the periodic tasks (the no-op record every 500 ms, the stale-broker
  check) run as in a node, and the queue's own ``on_event_timing`` hook measures each event.
  A pump runs at most 2 ms of events, as the node's runner does before it yields to the loop.
  Snapshots go to real files in Kafka's format (``RecordsSnapshotWriter``: batches of up to
  8 MiB, fsync and rename at freeze), as the node's log writes them.
* ``sim``: the 3-controller cluster of ``kraft_node.metadata.controller.sim`` on the Raft
  simulator (three RaftCores, the seeded network with 0-1 ms delays, the standbys replaying
  every batch), stepped 1 virtual ms at a time.  Its clock is virtual, so the queue's hook
  would read 0 for every event: event processing times here come from a wall-clock wrapper
  put around each queued event (``EventTimer``).  Rates are per wall-clock second of the one
  Python process that runs all three nodes.

Brokers are registered through ``register_broker`` with the request a Kafka 4 broker sends
(one listener, one log directory, every supported feature) and unfenced with a heartbeat
at their own registration offset; a steady-state heartbeat is ``track_broker_heartbeat``
(what the RPC layer calls before queueing) then ``process_broker_heartbeat`` for an
unfenced, caught-up broker, which writes no record.  Requests are built once per broker
and reused (the wire decode is in the TCP figures).  Every reply is checked (an error or a
fenced answer in steady state fails the run).

Prints one JSON document: the setup (load average before and after, commit, Python), each
run, and the median over runs.
"""
from __future__ import annotations

import abc
import argparse
import gc
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from array import array
from typing import Any, Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata  # noqa: E402
from kraft_node.metadata.controller.events import EventQueue  # noqa: E402
from kraft_node.metadata.controller.quorum_controller import QuorumController  # noqa: E402
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult  # noqa: E402
from kraft_node.metadata.controller.sim import ControllerSim, ControllerSimConfig  # noqa: E402
from kraft_node.metadata.versions import MetadataVersion, bootstrap_records, supported_features  # noqa: E402
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest  # noqa: E402
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest  # noqa: E402
from kraft_node.raft.messages import Batch, LeaderAndEpoch, SnapshotId  # noqa: E402
from kraft_node.raft.sim.cluster import SimConfig  # noqa: E402
from kraft_node.raft.sim.network import NetworkConfig  # noqa: E402
from kraft_node.server.start import freeze_startup_heap  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402
from kraft_storage.snapshot.files import SnapshotId as FileSnapshotId  # noqa: E402
from kraft_storage.snapshot.raw import RawSnapshotWriter  # noqa: E402
from kraft_storage.snapshot.records import RecordsSnapshotWriter  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/ (also when loaded by path)
from _support import code_version, emit_json  # noqa: E402

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
PLAINTEXT = 0
#: Events run per pump of the scripted harness, in clock time: the node's runner's slice
#: (kraft_node.server.controller.RUN_BUDGET_NS) before it yields to the loop.
RUN_BUDGET_NS = 2_000_000


# ------------------------------------------------------------------ requests
def bootstrap_metadata() -> BootstrapMetadata:
    """What ``kraft-storage format`` writes at the latest production metadata.version."""
    records = [ApiMessageAndVersion(r, v) for r, v in bootstrap_records(MetadataVersion.LATEST_PRODUCTION)]
    return BootstrapMetadata.from_records(records, "bench_controller")


def broker_features() -> list[Any]:
    return [BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
            for n, (lo, hi) in sorted(supported_features().items())]


def incarnation_of(broker_id: int) -> Uuid:
    return Uuid((0xB0 << 120) | (broker_id + 1))


def directory_of(broker_id: int) -> Uuid:
    return Uuid((0xD0 << 120) | (broker_id + 1))


def registration_request(broker_id: int, features: list[Any], cluster_id: str = CLUSTER_ID) -> Any:
    """A Kafka 4 broker's BrokerRegistrationRequest: one PLAINTEXT listener, one log dir."""
    return BrokerRegistrationRequest(
        broker_id=broker_id, cluster_id=cluster_id, incarnation_id=incarnation_of(broker_id),
        listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host=f"broker-{broker_id}.local",
                                                      port=9092, security_protocol=PLAINTEXT)],
        rack=None, is_migrating_zk_broker=False, features=features, log_dirs=[directory_of(broker_id)])


def heartbeat_request(broker_id: int, broker_epoch: int, metadata_offset: int) -> Any:
    return BrokerHeartbeatRequest(broker_id=broker_id, broker_epoch=broker_epoch,
                                  current_metadata_offset=metadata_offset, want_fence=False, want_shut_down=False)


def no_op_write() -> ControllerResult[None]:
    return ControllerResult.of([ApiMessageAndVersion(m.NoOpRecord(), 0)], None)


def no_op_writes(k: int) -> Callable[[], ControllerResult[None]]:
    """A write of ``k`` NoOpRecords (one operation, one Raft append): with k > 1 it shows what
    the write path costs per record once its per-write costs are shared."""
    if k == 1:
        return no_op_write
    records = [ApiMessageAndVersion(m.NoOpRecord(), 0) for _ in range(k)]
    return lambda: ControllerResult.of(records, None)


# ------------------------------------------------------------------ timing
def pct(xs: Any, q: float) -> float | None:
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def ms_summary(ns: Any) -> dict[str, Any]:
    """p50/p99/max of nanosecond samples, in ms."""
    if not ns:
        return {"n": 0}
    return {"n": len(ns), "p50_ms": round(pct(ns, 0.50) / 1e6, 4), "p99_ms": round(pct(ns, 0.99) / 1e6, 4),
            "max_ms": round(max(ns) / 1e6, 3)}


class GcPauses:
    """Garbage-collector pauses while installed (``gc.callbacks``), by generation: a full
    collection stops the loop like a long event, and its length grows with the heap."""

    def __init__(self) -> None:
        self.ns = {0: array("q"), 1: array("q"), 2: array("q")}
        self._t0 = 0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
        else:
            self.ns[info["generation"]].append(time.perf_counter_ns() - self._t0)

    def clear(self) -> None:
        self.ns = {0: array("q"), 1: array("q"), 2: array("q")}

    def summary(self) -> dict[str, Any]:
        return {f"gen{g}": {"n": len(xs), "max_ms": round(max(xs) / 1e6, 3) if xs else None}
                for g, xs in self.ns.items()}

    def remove(self) -> None:
        gc.callbacks.remove(self._callback)


class _TimedEvent:
    """An event wrapped by :class:`EventTimer`: its ``run`` (and ``handle_exception``) timed
    by the wall clock and recorded under the event's name."""

    __slots__ = ("event", "timer")

    def __init__(self, event: Any, timer: "EventTimer"):
        self.event, self.timer = event, timer

    def run(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            self.event.run()
        finally:
            self.timer.record(self.event, time.perf_counter_ns() - t0)

    def handle_exception(self, exc: BaseException) -> None:
        t0 = time.perf_counter_ns()
        try:
            self.event.handle_exception(exc)
        finally:
            self.timer.record(self.event, time.perf_counter_ns() - t0)


class EventTimer:
    """Wall-clock processing time of every event queued on ``queue`` from now on, by name.

    Why a wrapper and not the queue's ``on_event_timing`` hook: the hook reads the queue's
    clock, which in the simulator is virtual (every event takes 0 ns), and it does not say
    which event took the time (the snapshot figure needs the slices apart).  The wrapper sits
    on the queue's public enqueue methods of this one instance.

    Samples go into ``array``s of C integers, never lists: the garbage collector walks every
    item of a list on each full collection, and a list of a million samples made the
    benchmark's own GC pauses (30 ms) the longest "events" it measured."""

    def __init__(self, queue: EventQueue):
        self.ns = array("q")
        self.name_ids = array("H")
        self.names: dict[str, int] = {}
        self.enabled = True
        for name in ("append", "prepend"):
            orig = getattr(queue, name)
            setattr(queue, name, lambda ev, _o=orig: _o(_TimedEvent(ev, self)))
        orig_deadline = queue.append_with_deadline
        queue.append_with_deadline = lambda d, ev: orig_deadline(d, _TimedEvent(ev, self))  # type: ignore[method-assign]
        orig_deferred = queue.schedule_deferred

        def deferred(tag: Any, deadline_ns: int, ev: Any, **kw: Any) -> None:
            orig_deferred(tag, deadline_ns, _TimedEvent(ev, self), **kw)
        queue.schedule_deferred = deferred  # type: ignore[method-assign]

    def record(self, event: Any, ns: int) -> None:
        if self.enabled:
            name = getattr(event, "name", type(event).__name__)
            i = self.names.get(name)
            if i is None:
                i = self.names[name] = len(self.names)
            self.ns.append(ns)
            self.name_ids.append(i)

    def samples(self) -> list[tuple[str, int]]:
        names = {i: n for n, i in self.names.items()}
        return [(names[i], ns) for i, ns in zip(self.name_ids, self.ns)]

    def clear(self) -> None:
        self.ns = array("q")
        self.name_ids = array("H")


# ------------------------------------------------------------------ the scripted Raft
class _FileSnapshotWriter:
    """A snapshot file in Kafka's format behind the interface the SnapshotGenerator uses
    (Raft's ``SnapshotWriter``), on the writer the node's log uses (``RecordsSnapshotWriter``
    on a ``RawSnapshotWriter``, as ``KafkaRaftLog``'s snapshot control builds it): records
    packed into batches of up to 8 MiB (Kafka's), so a 10k-broker snapshot is one batch
    encoded and written at ``freeze()``, which then fsyncs and renames.  ``close()`` aborts
    an unfrozen one.  ``freeze_ns``: how long the freeze took (inside the last slice)."""

    def __init__(self, directory: str, snapshot_id: SnapshotId, max_batch_size: int | None = None):
        self.snapshot_id = snapshot_id
        raw = RawSnapshotWriter.create(directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch))
        self._inner = RecordsSnapshotWriter(raw) if max_batch_size is None else \
            RecordsSnapshotWriter(raw, max_batch_size=max_batch_size)
        self.bytes = 0
        self.freeze_ns = 0

    def append(self, values: list[bytes]) -> None:
        self._inner.append(values)

    def freeze(self) -> None:
        t0 = time.perf_counter_ns()
        self.bytes = self._inner.freeze()
        self.freeze_ns = time.perf_counter_ns() - t0

    def close(self) -> None:
        self._inner.close()


class InstantRaft:
    """A Raft that is leader of epoch 1 and commits every append at once: ``schedule_append``
    gives the next offsets and calls the listener's ``handle_commit`` with the batch, which
    queues the commit event (as the driver's listener callback does).  Snapshots are files
    under ``snapshot_dir``; ``snapshot_batch_bytes``: their batch size (default Kafka's 8 MiB;
    a smaller one is the what-if of spreading the batch encoding over the slices)."""

    def __init__(self, snapshot_dir: str | None, clock_ms: Callable[[], int], snapshot_batch_bytes: int | None = None):
        self.listener: Any = None
        self.leader = LeaderAndEpoch(-1, 0)
        self.end = 0
        self.snapshot_dir = snapshot_dir
        self.clock_ms = clock_ms
        self.snapshots: list[_FileSnapshotWriter] = []
        self.snapshot_batch_bytes = snapshot_batch_bytes

    def register_listener(self, listener: Any) -> None:
        self.listener = listener

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return self.leader

    def next_offset(self, epoch: int) -> int:
        return self.end

    def schedule_append(self, records: Any, epoch: int, atomic: bool) -> int:
        base = self.end
        self.end = base + len(records)
        self.listener.handle_commit((Batch(base, epoch, tuple(records), append_time_ms=self.clock_ms()),))
        return self.end - 1

    def resign(self, epoch: int) -> None:
        raise RuntimeError("the scripted Raft never loses its leadership")

    def create_snapshot(self, snapshot_id: SnapshotId) -> _FileSnapshotWriter | None:
        if self.snapshot_dir is None:
            return None
        w = _FileSnapshotWriter(self.snapshot_dir, snapshot_id, self.snapshot_batch_bytes)
        self.snapshots.append(w)
        return w

    def elect(self) -> None:
        self.leader = LeaderAndEpoch(1, 1)
        self.listener.handle_leader_change(self.leader)


# ------------------------------------------------------------------ harnesses
class Harness(abc.ABC):
    """An active controller and a way to let it work: ``pump()`` runs what is due (scripted:
    the queue until idle; sim: one virtual millisecond of the whole cluster)."""

    name = ""
    controller: QuorumController
    queue: EventQueue
    timer: EventTimer | None = None
    gc_pauses: GcPauses | None = None

    @abc.abstractmethod
    def pump(self) -> None:
        """Run what is due (each harness says how)."""

    def virtual_ms(self) -> int | None:
        return None

    def close(self) -> None:
        if self.gc_pauses is not None:
            self.gc_pauses.remove()
        gc.unfreeze()  # the next run starts from its own startup heap
        gc.collect()


class ScriptedHarness(Harness):
    name = "scripted"

    def __init__(self, *, settings: Any = None, event_timer: bool = False, snapshot_batch_bytes: int | None = None):
        self.dir = tempfile.mkdtemp(prefix="bench-controller-")
        self.queue_ns = array("q")  # arrays, not lists: see EventTimer
        self.processing_ns = array("q")
        self.queue = EventQueue(time.monotonic_ns, name="controller-1")
        self.raft = InstantRaft(self.dir, lambda: time.monotonic_ns() // 1_000_000, snapshot_batch_bytes)
        self.controller = QuorumController(
            node_id=1, cluster_id=CLUSTER_ID, raft=self.raft, queue=self.queue,
            clock_ms=lambda: time.monotonic_ns() // 1_000_000, bootstrap=bootstrap_metadata(), settings=settings)
        # The controller feeds its performance monitor (and the metrics) from the queue's
        # timing hook: record the same figures, then pass them on.
        self._next_hook = self.queue.on_event_timing
        self.queue.on_event_timing = self._timing
        if event_timer:
            self.timer = EventTimer(self.queue)
        self.raft.elect()
        while not (self.controller.active and self.controller.last_stable_offset >= 0):
            self.pump()

    def _timing(self, queue_ns: int, processing_ns: int) -> None:
        self.queue_ns.append(queue_ns)
        self.processing_ns.append(processing_ns)
        if self._next_hook is not None:
            self._next_hook(queue_ns, processing_ns)

    def clear_timings(self) -> None:
        self.queue_ns = array("q")
        self.processing_ns = array("q")

    def pump(self) -> None:
        # At most RUN_BUDGET_NS of events per pump, then back to the caller (who queues more
        # requests), as the node's runner gives the loop back to the network.
        self.queue.run_ready(budget_ns=RUN_BUDGET_NS)

    def close(self) -> None:
        super().close()
        shutil.rmtree(self.dir, ignore_errors=True)


class SimHarness(Harness):
    name = "sim"

    def __init__(self, *, seed: int = 1, settings: Any = None, event_timer: bool = True):
        raft = SimConfig(network=NetworkConfig(min_delay_ms=0, max_delay_ms=1))
        self.sim = ControllerSim(seed, ControllerSimConfig(raft=raft, settings=settings),
                                 bootstrap=bootstrap_metadata())
        self.sim.start_all()
        for _ in range(30_000):
            act = self.sim.active()
            if act is not None and act.last_stable_offset >= 0 and act.offset_control.transaction_start_offset == -1:
                break
            self.sim.run_for(1)
        else:
            raise SystemExit("the simulated quorum elected no active controller in 30 s of virtual time")
        self.controller = act
        self.sc = next(sc for sc in self.sim.controllers.values() if sc.controller is act)
        self.queue = self.sc.queue
        self.timer = EventTimer(self.queue) if event_timer else None

    def pump(self) -> None:
        self.sim.run_for(1)
        if self.sim.active() is not self.controller:
            raise SystemExit("the active controller changed during the run")

    def virtual_ms(self) -> int:
        return int(self.sim.scheduler.now)


def make_harness(kind: str, **kw: Any) -> Harness:
    """A harness with an active controller, its startup heap frozen as the node freezes its
    own once started (``freeze_startup_heap``: full collections then walk only what was
    made since), and its GC pauses recorded."""
    h = ScriptedHarness(**kw) if kind == "scripted" else SimHarness(**kw)
    freeze_startup_heap()
    h.gc_pauses = GcPauses()
    return h


# ------------------------------------------------------------------ brokers
class Brokers:
    """``n`` brokers of one harness: register, unfence, and their steady-state heartbeats."""

    def __init__(self, h: Harness, n: int):
        self.h = h
        self.n = n
        self.features = broker_features()
        self.epochs: list[int] = [-1] * n
        self.heartbeats: list[Any] = []

    def register_and_unfence(self, *, step_limit: int = 1_000_000) -> dict[str, Any]:
        """Every broker registers at once; each heartbeats (at its registration offset: a broker
        that has read its own RegisterBrokerRecord) as soon as its registration is answered,
        and again until a heartbeat answers unfenced.  Returns the wall time (and, in the
        simulator, the virtual time) until every broker is unfenced."""
        ctl = self.h.controller
        unfenced = [False] * self.n
        remaining = [self.n]
        errors: list[BaseException] = []
        pending_hb: list[int] = []

        def heartbeat(b: int) -> None:
            ctl.track_broker_heartbeat(b, self.epochs[b])
            fut = ctl.process_broker_heartbeat(heartbeat_request(b, self.epochs[b], self.epochs[b]))
            fut.add_done_callback(lambda f, b=b: heartbeat_done(b, f))

        def heartbeat_done(b: int, f: Any) -> None:
            exc = f.exception()
            if exc is not None:
                errors.append(exc)
                return
            if f.result().is_fenced:
                pending_hb.append(b)  # heartbeat again on the next step
            elif not unfenced[b]:
                unfenced[b] = True
                remaining[0] -= 1

        def registered(b: int, f: Any) -> None:
            exc = f.exception()
            if exc is not None:
                errors.append(exc)
                return
            self.epochs[b] = f.result().epoch
            pending_hb.append(b)

        v0 = self.h.virtual_ms()
        gc.collect()
        t0 = time.perf_counter()
        for b in range(self.n):
            ctl.register_broker(registration_request(b, self.features, ctl.cluster_id)).add_done_callback(
                lambda f, b=b: registered(b, f))
        steps = 0
        while remaining[0] and not errors and steps < step_limit:
            self.h.pump()
            steps += 1
            while pending_hb:
                batch, pending_hb[:] = list(pending_hb), []
                for b in batch:
                    heartbeat(b)
        wall = time.perf_counter() - t0
        if errors:
            raise SystemExit(f"registration failed: {errors[0]!r}")
        if remaining[0]:
            raise SystemExit(f"{remaining[0]} brokers still fenced after {steps} steps")
        v1 = self.h.virtual_ms()
        cc = ctl.cluster_control
        assert cc.active_broker_count() == self.n and cc.fenced_broker_count() == 0
        self.heartbeats = [heartbeat_request(b, self.epochs[b], self.epochs[b]) for b in range(self.n)]
        return {"brokers": self.n, "all_unfenced_s": round(wall, 4),
                "virtual_ms": (v1 - v0) if v0 is not None else None, "pump_steps": steps}

    def steady_heartbeats(self, seconds: float, inflight: int) -> dict[str, Any]:
        """Round-robin heartbeats, ``inflight`` queued per pump, for ``seconds`` of wall time;
        counts those answered (unfenced, no error)."""
        ctl = self.h.controller
        hbs, epochs, n = self.heartbeats, self.epochs, self.n
        answered = [0]
        bad: list[Any] = []

        def done(f: Any) -> None:
            exc = f.exception()
            if exc is not None or f.result().is_fenced:
                bad.append(exc if exc is not None else f.result())
            else:
                answered[0] += 1

        track = ctl.track_broker_heartbeat
        process = ctl.process_broker_heartbeat
        issued = 0
        b = 0
        v0 = self.h.virtual_ms()
        t0 = time.perf_counter()
        end = t0 + seconds
        while True:
            for _ in range(inflight):
                track(b, epochs[b])
                process(hbs[b]).add_done_callback(done)
                b += 1
                if b == n:
                    b = 0
            issued += inflight
            self.h.pump()
            if bad:
                raise SystemExit(f"a steady-state heartbeat failed: {bad[0]!r}")
            if time.perf_counter() >= end:
                break
        while answered[0] < issued and not bad:
            self.h.pump()
        wall = time.perf_counter() - t0
        v1 = self.h.virtual_ms()
        return {"heartbeats": answered[0], "seconds": round(wall, 3),
                "heartbeats_per_s": round(answered[0] / wall, 1),
                "virtual_ms": (v1 - v0) if v0 is not None else None}


# ------------------------------------------------------------------ scenarios
def timing_summary(h: Harness) -> dict[str, Any]:
    """Event processing (and queue) times seen during the measured part."""
    out: dict[str, Any] = {}
    if isinstance(h, ScriptedHarness):
        out["event_processing_hook"] = ms_summary(h.processing_ns)
        out["event_queue_time_hook"] = ms_summary(h.queue_ns)
    if h.timer is not None:
        out["event_processing_wall"] = ms_summary(h.timer.ns)
    if h.gc_pauses is not None:
        out["gc_pauses"] = h.gc_pauses.summary()
    return out


def reset_timings(h: Harness) -> None:
    if isinstance(h, ScriptedHarness):
        h.clear_timings()
    if h.timer is not None:
        h.timer.clear()
    if h.gc_pauses is not None:
        h.gc_pauses.clear()


def scenario_heartbeats(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    h = make_harness(kind)
    old_threshold = gc.get_threshold()
    if args.what_if_gc_threshold:
        gc.set_threshold(*(int(x) for x in args.what_if_gc_threshold.split(",")))
    try:
        brokers = Brokers(h, args.brokers)
        setup = brokers.register_and_unfence()
        brokers.steady_heartbeats(min(1.0, args.seconds / 4), args.inflight)  # warm-up
        reset_timings(h)
        res = brokers.steady_heartbeats(args.seconds, args.inflight)
        res.update(timing_summary(h))
        res["setup_register_s"] = setup["all_unfenced_s"]
        res["records_written_meanwhile"] = h.controller.records_replayed
        res["gc_threshold"] = list(gc.get_threshold())
        return res
    finally:
        gc.set_threshold(*old_threshold)
        h.close()


def scenario_writes(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """No-op writes (one NoOpRecord each) with ``inflight`` outstanding: the write path's
    ceiling with a Raft that costs nothing (scripted) or the simulated quorum (sim)."""
    h = make_harness(kind)
    try:
        ctl = h.controller
        op = no_op_writes(args.records_per_write)
        answered = [0]
        bad: list[BaseException] = []
        outstanding = [0]

        def done(f: Any) -> None:
            outstanding[0] -= 1
            exc = f.exception()
            if exc is not None:
                bad.append(exc)
            else:
                answered[0] += 1

        def run(seconds: float) -> dict[str, Any]:
            answered[0] = 0
            v0 = h.virtual_ms()
            t0 = time.perf_counter()
            end = t0 + seconds
            while time.perf_counter() < end:
                while outstanding[0] < args.inflight:
                    outstanding[0] += 1
                    ctl.append_write("noOp", op).add_done_callback(done)
                h.pump()
                if bad:
                    raise SystemExit(f"a no-op write failed: {bad[0]!r}")
            while outstanding[0]:
                h.pump()
            wall = time.perf_counter() - t0
            v1 = h.virtual_ms()
            return {"writes": answered[0], "seconds": round(wall, 3), "writes_per_s": round(answered[0] / wall, 1),
                    "records_per_write": args.records_per_write,
                    "records_per_s": round(answered[0] * args.records_per_write / wall, 1),
                    "virtual_ms": (v1 - v0) if v0 is not None else None}
        run(min(1.0, args.seconds / 4))
        reset_timings(h)
        res = run(args.seconds)
        res.update(timing_summary(h))
        return res
    finally:
        h.close()


def scenario_register(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    h = make_harness(kind)
    try:
        res = Brokers(h, args.brokers).register_and_unfence()
        res.update(timing_summary(h))
        return res
    finally:
        h.close()


def scenario_snapshot(args: argparse.Namespace, kind: str) -> dict[str, Any]:
    """Register ``--brokers`` brokers, then write a snapshot of the committed state while the
    brokers keep heartbeating (``--inflight`` per pump); the figure is the longest event
    (any event, the slices included) while the snapshot is written."""
    kw: dict[str, Any] = {"event_timer": True}
    if kind == "scripted" and args.what_if_snapshot_batch_bytes:
        kw["snapshot_batch_bytes"] = args.what_if_snapshot_batch_bytes
    h = make_harness(kind, **kw)
    try:
        ctl = h.controller
        brokers = Brokers(h, args.brokers)
        setup = brokers.register_and_unfence()
        for _ in range(20):
            h.pump()  # let the last commits land: the stable offset must be the committed offset
        gen = ctl.snapshot_generator
        if args.records_per_slice:
            gen.records_per_slice = args.records_per_slice  # the A/B of a smaller slice
        hbs, epochs, n = brokers.heartbeats, brokers.epochs, brokers.n
        failures: list[Any] = []

        def done(f: Any) -> None:
            if f.exception() is not None:
                failures.append(f.exception())
        tg = time.perf_counter()
        gc.collect()  # the registrations' garbage, before the measured part; its length: a full
        full_collect_ms = (time.perf_counter() - tg) * 1000  # collection of this heap
        reset_timings(h)
        t0 = time.perf_counter()
        if not gen.maybe_begin(reason="benchmark"):
            raise SystemExit("the snapshot generator refused to start")
        b = 0
        beats = 0
        while gen.in_progress:
            for _ in range(args.inflight):
                ctl.track_broker_heartbeat(b, epochs[b])
                ctl.process_broker_heartbeat(hbs[b]).add_done_callback(done)
                b = (b + 1) % n
            beats += args.inflight
            h.pump()
        wall = time.perf_counter() - t0
        h.pump()
        if failures:
            raise SystemExit(f"a heartbeat failed during the snapshot: {failures[0]!r}")
        assert h.timer is not None
        samples = h.timer.samples()
        slices = [ns for name, ns in samples if name == "writeSnapshotSlice"]
        others = [ns for name, ns in samples if name != "writeSnapshotSlice"]
        sid, records, nslices = gen.history[-1]
        res: dict[str, Any] = {
            "brokers": args.brokers, "snapshot": f"{sid.offset}-{sid.epoch}", "records": records, "slices": nslices,
            "records_per_slice": gen.records_per_slice, "snapshot_wall_s": round(wall, 4),
            "heartbeats_meanwhile": beats,
            "max_event_ms": round(max(ns for _n, ns in samples) / 1e6, 3),
            "slice_events": ms_summary(slices), "slice_ms": [round(ns / 1e6, 2) for ns in slices],
            "other_events": ms_summary(others),
            "setup_register_s": setup["all_unfenced_s"]}
        if h.gc_pauses is not None:
            res["gc_pauses"] = h.gc_pauses.summary()
        res["full_gc_collect_ms"] = round(full_collect_ms, 1)
        if isinstance(h, ScriptedHarness):
            res["file_bytes"] = h.raft.snapshots[-1].bytes
            res["freeze_ms"] = round(h.raft.snapshots[-1].freeze_ns / 1e6, 3)
            res["max_event_ms_hook"] = round(max(h.processing_ns) / 1e6, 3)
        return res
    finally:
        h.close()


SCENARIOS = {"heartbeats": scenario_heartbeats, "writes": scenario_writes, "register": scenario_register,
             "snapshot": scenario_snapshot}

#: the figure each scenario's runs are summarised by (median, min, max over runs)
HEADLINE = {"heartbeats": "heartbeats_per_s", "writes": "writes_per_s", "register": "all_unfenced_s",
            "snapshot": "max_event_ms"}


def run_scenario(args: argparse.Namespace, scenario: str, kind: str) -> dict[str, Any]:
    runs = []
    for i in range(args.runs):
        r = SCENARIOS[scenario](args, kind)
        print(f"# {scenario} {kind} run {i + 1}: {HEADLINE[scenario]} = {r[HEADLINE[scenario]]}", file=sys.stderr,
              flush=True)
        runs.append(r)
    xs = [r[HEADLINE[scenario]] for r in runs]
    return {"scenario": scenario, "raft": kind, "headline": HEADLINE[scenario],
            "median": statistics.median(xs), "min": min(xs), "max": max(xs), "runs": runs}


DEFAULT_BROKERS = {"heartbeats": 1000, "writes": 0, "register": 1000, "snapshot": 10_000}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=[*SCENARIOS, "all"])
    ap.add_argument("--raft", choices=("scripted", "sim", "both"), default="both")
    ap.add_argument("--brokers", type=int, default=None, help="default: 1000 (10,000 for snapshot)")
    ap.add_argument("--inflight", type=int, default=100, help="requests queued per pump (heartbeats, writes)")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records-per-slice", type=int, default=None,
                    help="snapshot: override the generator's records per slice (default: its own, 500)")
    ap.add_argument("--records-per-write", type=int, default=1, help="writes: NoOpRecords per write")
    ap.add_argument("--what-if-gc-threshold", default=None,
                    help="heartbeats: gc.set_threshold(a, b, c) given as a,b,c (the defaults are 700,10,10)")
    ap.add_argument("--what-if-snapshot-batch-bytes", type=int, default=None,
                    help="snapshot, scripted: snapshot batches of this size instead of Kafka's 8 MiB")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)  # the activation's WARN line and INFO per registration
    kinds = ["scripted", "sim"] if args.raft == "both" else [args.raft]
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    load_before = os.getloadavg()
    results = []
    brokers_arg = args.brokers
    for sc in scenarios:
        args.brokers = brokers_arg if brokers_arg is not None else DEFAULT_BROKERS[sc]
        for kind in kinds:
            results.append(run_scenario(args, sc, kind))
    args.brokers = brokers_arg
    emit_json({"setup": {"argv": sys.argv[1:], "inflight": args.inflight, "seconds": args.seconds,
                         "what_if_snapshot_batch_bytes": args.what_if_snapshot_batch_bytes,
                         "runs": args.runs, "cpus": os.cpu_count(), "python": sys.version.split()[0],
                         "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "code": code_version()},
               "results": results}, args.json)


if __name__ == "__main__":
    main()
