"""The controller in the deterministic simulator: QuorumControllers on the Raft simulator,
brokers that talk to them, chaos, and the controller's invariants checked after every event.

Each simulated node (``kraft_node.raft.sim``: RaftCore, MemoryRaftLog, seeded network,
virtual clock, crashes that lose unflushed data) gets a :class:`QuorumController` whose
event queue runs on the simulator's scheduler and whose Raft client is the node's core.
A crash discards the controller with the core; a restart builds a new one that replays the
log, exactly as a process restart does.

Simulated brokers (:class:`SimBroker`) talk to the controller they believe active through
the controller's public API, as the RPC layer does (``register_broker``;
``track_broker_heartbeat`` then ``process_broker_heartbeat`` with half the heartbeat
interval as deadline; ``allocate_producer_ids``), over a seeded channel of their own with
delay and loss: a request or answer that is lost is retried after a timeout, NOT_CONTROLLER
sends the broker to another controller.  A broker registers with a fresh incarnation id at
each process start, heartbeats every ``broker.heartbeat.interval.ms`` reporting the metadata
offset it has "seen" (the active controller's stable offset when it sends), and the chaos
pauses it, crashes and restarts it, or shuts it down cleanly.

Topics (issue 22): brokers sit in racks (``rack-<id mod racks>``), and :class:`SimAdmin`, an
admin client on the same lossy channel, creates topics (1-8 partitions, replication factor
1-3), sometimes deletes one, adds partitions or alters min.insync.replicas, retrying as a
client does.  Each broker reads the partitions it leads from the committed state at the
offset it reports (its *view*) and, as leader, sends AlterPartition (v3) to shrink the ISR
of a follower that stopped being a live replica and to expand it with one that is back and
caught up (:class:`SimBroker`'s doc has the model); a stale view is refused
(NEW_LEADER_ELECTED, FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA) and
refreshed.  The chaos adds *zonal outages*: every broker of one rack paused, or crashed and
restarted together.  Topic ids and placements come from the seed (``Uuid.random`` and the
placer's ``java.util.Random`` are seeded while the simulation runs), so a seed replays the
same records.

:class:`ControllerInvariants` checks after every simulator event (next to the Raft
simulator's own checker):

* **committed states agree**: each controller's state at each stable offset it reaches is
  digested (:func:`state_digest`); two controllers' digests for one offset must be equal;
  the registry keeps a snapshot at the stable offset (committed reads and a renounce's
  revert read it);
* **no answer before commit**: a write's future succeeds only once the answering
  controller's stable offset covers everything it had written when the write ran;
* **nothing uncommitted on a standby**: a standby holds no registry snapshot past its
  committed offset, never applies past its node's high watermark, and outside a metadata
  transaction its latest state equals its stable state -- checked again the moment a
  controller stops being active (after a failover the revert must be complete);
* **fencing is safe**: no controller writes a fence for a broker session it heard a
  heartbeat from within the session timeout (unless the broker asked to be fenced);
* **fencing is live** (calm phase only, one stable leader): a broker that stopped
  heartbeating is fenced in the leader's stable state within session timeout + one
  fence-task period + a commit allowance of the later of its last heartbeat the leader
  received and the leader's claim;
* **partitions are sound** (on each controller's committed state, for what the records
  committed since its last check touched): a leader is in the ISR, the ISR is a subset of
  the replicas, the ELR is disjoint from the ISR, no broker whose registration is fenced is
  in an ISR or leads (without ELR Kafka keeps the last ISR member of a leaderless partition),
  and a partition's leader epoch and partition epoch never go down in a controller's
  committed history;
* **answers are true**: a registration answer's epoch is the offset its atomic batch starts
  at (the previous incarnation's cleanup, then the RegisterBrokerRecord carrying that epoch);
  a created topic's id is in a committed TopicRecord of its name; an AlterPartition success
  answers the partition (leader, ISR, epochs, recovery state) as the committed history has it
  at the answered partition epoch (a shadow folds every committed partition record in log
  order, independently of the controllers); producer id blocks granted
  are disjoint; a broker or the admin never gets an unexpected error (UNKNOWN_SERVER_ERROR,
  STALE_BROKER_EPOCH for its current epoch, INVALID_REQUEST from AlterPartition...);
* any controller fatal fault fails the run.

:func:`run_seed` derives a whole scenario from a seed (cluster shape, racks, network faults,
settings, metadata.version, partition changes per result, brokers, chaos, the admin's
operations), heals, demands convergence (one leader, every running broker registered with
its incarnation and unfenced, every partition that has a usable candidate for a clean
election led, and every led partition's ISR all its replicas again), then stops some
brokers and checks they are fenced in time.  Replay one seed::

    python -m kraft_node.metadata.controller.sim --seeds 17:18 --trace
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Callable, Iterator, NoReturn

from kraft_node.metadata.configs.resources import AlterConfigOp, ConfigResource
from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.partition_changes import MAX_PARTITION_CHANGES_PER_RESULT
from kraft_node.metadata.controller.quorum_controller import ControllerFuture, QuorumController
from kraft_node.metadata.controller.replication_control import NO_LEADER, LeaderRecoveryState, PartitionRegistration
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.placement import JavaRandom, StripedReplicaPlacer
from kraft_node.metadata.versions import MetadataVersion, bootstrap_records, supported_features
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
from kraft_node.protocol.generated.create_partitions import CreatePartitionsRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.raft.messages import LeaderAndEpoch
from kraft_node.raft.sim.cluster import Cluster, SimConfig, SimNode
from kraft_node.raft.sim.invariants import SafetyViolation
from kraft_node.raft.sim.network import NetworkConfig
from kraft_node.raft.sim.runner import random_sim_config
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH

NS_PER_MS = 1_000_000

#: BrokerRegistrationChangeRecord.fenced: 1 fences (Kafka's BrokerRegistrationFencingChange.FENCE)
_FENCE = 1
_NOT_CONTROLLER_HINT = re.compile(r"The active controller appears to be node (\d+)\.")


def default_bootstrap(mv: MetadataVersion | None = None, source: str = "sim") -> BootstrapMetadata:
    """What ``kraft-storage format`` writes at ``mv`` (default: the latest production level)."""
    mv = mv or MetadataVersion.latest_production()
    return BootstrapMetadata.from_records([ApiMessageAndVersion(r, v) for r, v in bootstrap_records(mv)], source)


@dataclass(frozen=True)
class SimSettings:
    """The controller settings a simulation varies (ControllerSettings' field names; the
    managers read any attribute of that name and take Kafka's default for the rest).
    Shorter than Kafka's defaults so a seed runs several sessions in a few virtual seconds."""
    broker_session_timeout_ms: int = 1000
    broker_heartbeat_interval_ms: int = 250
    metadata_max_idle_interval_ms: int = 500
    #: a controller snapshot after this many committed record bytes (None: Kafka's 20 MiB)
    metadata_log_max_record_bytes_between_snapshots: int | None = None


@dataclass
class BrokerNetworkConfig:
    """The brokers' channel to the controllers (separate from the Raft network)."""
    min_delay_ms: int = 1
    max_delay_ms: int = 5
    drop_probability: float = 0.0
    #: a request not answered within this is retried (on another controller)
    request_timeout_ms: int = 300


class _SimRaft:
    """The controller's Raft client on a simulated node: the node's core, with a poll
    scheduled after each append (never from inside a poll)."""

    def __init__(self, node: SimNode, on_append: Callable[[int, list[bytes]], None] | None = None):
        self.node = node
        self.incarnation = node.incarnation
        self._poll_pending = False
        #: told (first offset, values) of every batch scheduled (the invariants' view of writes)
        self.on_append = on_append

    @property
    def core(self) -> Any:
        return self.node.core

    def register_listener(self, listener: Any) -> None:
        self.core.register_listener(listener)

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        c = self.core
        if c is None:
            return LeaderAndEpoch(-1, 0)
        lid = c.leader_id
        return LeaderAndEpoch(lid if lid is not None else -1, c.epoch)

    def next_offset(self, epoch: int) -> int:
        return int(self.core.next_offset(epoch))

    def schedule_append(self, records: Any, epoch: int, atomic: bool) -> int:
        n = self.node
        values = list(records)
        last = int(self.core.append(values, epoch, n.cluster.scheduler.now, atomic))
        if self.on_append is not None:
            self.on_append(last - len(values) + 1, values)
        self._schedule_poll()
        return last

    def resign(self, epoch: int) -> None:
        self.core.resign(epoch)
        self._schedule_poll()

    def create_snapshot(self, snapshot_id: Any) -> Any:
        return self.core.create_snapshot(snapshot_id)

    def _schedule_poll(self) -> None:
        if self._poll_pending:
            return
        self._poll_pending = True
        n = self.node
        inc = self.incarnation

        def poll() -> None:
            self._poll_pending = False
            if n.alive and n.incarnation == inc:
                n.poll()
        n.cluster.scheduler.at(n.cluster.scheduler.now, poll)


class _ObservedWrite:
    """A write event wrapped by :class:`_ObservingQueue` for the no-answer-before-commit
    check: ``mark`` is the last offset its controller had written (in its claim epoch) once
    the write ran; its future may succeed only when the stable offset covers it."""

    __slots__ = ("event", "sc", "mark")

    def __init__(self, event: Any, sc: "SimController"):
        self.event, self.sc = event, sc
        #: None until the write has run (an answer given while it runs reads the offsets then)
        self.mark: int | None = None

    def run(self) -> None:
        future = self.event.future
        future.add_done_callback(partial(self.sc.csim.invariants.write_answered, self))
        self.event.run()
        if not future.done():
            self.mark = self.sc.written.get(self.sc.controller.claim_epoch, -1)

    def handle_exception(self, exc: BaseException) -> None:
        self.event.handle_exception(exc)

    def __repr__(self) -> str:
        return f"observed({self.event!r})"


class _ObservingQueue(EventQueue):
    """The controller's queue with every write event (one that answers a future with the
    result of an operation) wrapped in :class:`_ObservedWrite`."""

    sc: "SimController"

    def _wrap(self, event: Any) -> Any:
        if getattr(event, "op", None) is not None and isinstance(getattr(event, "future", None), ControllerFuture):
            return _ObservedWrite(event, self.sc)
        return event

    def append(self, event: Any) -> None:
        super().append(self._wrap(event))

    def prepend(self, event: Any) -> None:
        super().prepend(self._wrap(event))

    def append_with_deadline(self, deadline_ns: int, event: Any) -> None:
        super().append_with_deadline(deadline_ns, self._wrap(event))

    def schedule_deferred(self, tag: str | None, deadline_ns: int, event: Any, *, keep_earlier: bool = False) -> None:
        super().schedule_deferred(tag, deadline_ns, self._wrap(event), keep_earlier=keep_earlier)


class SimController:
    """One node incarnation's controller, its queue run on the simulator's clock.

    Also the invariants' per-controller memory: ``heard`` (broker session -> the last time
    this controller, while active, recorded a heartbeat of it), ``written`` (claim epoch ->
    the last offset it appended then: what a write answered in that epoch must wait for;
    not ``next_write_offset - 1``, which also counts the LeaderChange control record Raft
    wrote at the epoch start, and the previous leader's tail, neither of which the
    controller holds in memory), ``claimed_at`` (when it last
    became active) and ``checked_lso`` (the stable offset last digested)."""

    def __init__(self, csim: "ControllerSim", node: SimNode):
        self.csim = csim
        self.node = node
        self.incarnation = node.incarnation
        sched = node.cluster.scheduler
        self._run_at: int | None = None
        checking = csim.config.invariants
        self.queue: EventQueue
        if checking:
            observing = _ObservingQueue(clock_ns=lambda: sched.now * NS_PER_MS, on_ready=self._kick,
                                        name=f"controller-{node.id}")
            observing.sc = self
            self.queue = observing
        else:
            self.queue = EventQueue(clock_ns=lambda: sched.now * NS_PER_MS, on_ready=self._kick,
                                    name=f"controller-{node.id}")
        self.raft = _SimRaft(node, self._appended if checking else None)
        self.heard: dict[tuple[int, int], int] = {}
        #: claim epoch -> the last offset this controller appended in it
        self.written: dict[int, int] = {}
        self.claimed_epoch = -1
        self.claimed_at = -1
        self.checked_lso: int | None = None
        self.controller = QuorumController(
            node_id=node.id, cluster_id=node.cluster.cluster_id, raft=self.raft, queue=self.queue,
            clock_ms=lambda: sched.now, bootstrap=csim.bootstrap, settings=csim.settings,
            fatal_fault_handler=self._fatal, managers=csim.install_managers)
        bound = csim.config.partition_changes_per_result
        ops = getattr(self.controller, "partition_ops", None)
        if bound is not None and ops is not None:
            ops.context.max_partition_changes_per_result = bound
        rc = getattr(self.controller, "replication_control", None)
        if rc is not None and rc._replica_placer is None:
            # Kafka's placer over java.util.Random, seeded from the seed, the node and its
            # incarnation (not the OS): a seed places its replicas the same way every run
            rc._replica_placer = StripedReplicaPlacer(JavaRandom(
                (csim.seed * 1_000_003 + node.id * 10_007 + node.incarnation) & ((1 << 48) - 1)))
        #: committed offsets whose touched partitions this controller has checked (the
        #: partition invariants), and each partition's (leader epoch, partition epoch) in its
        #: committed history
        self.partitions_scanned = -1
        self.partition_epochs: dict[tuple[Uuid, int], tuple[int, int]] = {}
        #: (stable offset, digest) last computed for it (forgotten when it loads a snapshot)
        self.digest_at: tuple[int, str] = (-2, "")
        load = self.controller._handle_load_snapshot

        def loading(sid: Any, batches: Any, timestamp_ms: int) -> None:
            self.digest_at = (-2, "")
            load(sid, batches, timestamp_ms)
        setattr(self.controller, "_handle_load_snapshot", loading)  # noqa: B010 (an instance's method)
        csim.on_controller_created(self)

    @property
    def alive(self) -> bool:
        return self.node.alive and self.node.incarnation == self.incarnation

    def _fatal(self, message: str, exc: BaseException | None) -> BaseException:
        err = SafetyViolation(f"controller {self.node.id}: fatal fault: {message}: {exc!r}")
        self.csim.faults.append(err)
        return err

    def _appended(self, base: int, values: list[bytes]) -> None:
        self.written[self.controller.claim_epoch] = base + len(values) - 1
        self.csim.invariants.on_append(self, base, values)

    def _kick(self) -> None:
        self._arm(self.node.cluster.scheduler.now)

    def _arm(self, at_ms: int) -> None:
        if self._run_at is not None and self._run_at <= at_ms:
            return
        self._run_at = at_ms
        self.node.cluster.scheduler.at(at_ms, lambda: self._run(at_ms))

    def _run(self, at_ms: int) -> None:
        if self._run_at != at_ms or not self.alive:
            # superseded by an earlier arm, or its incarnation is gone: nothing runs
            self.csim.quiet = True
            if self._run_at == at_ms:
                self._run_at = None
            return
        self._run_at = None
        self.queue.run_ready()
        nxt = self.queue.next_deadline_ns()
        if nxt is not None:
            now = self.node.cluster.scheduler.now
            self._arm(max(now, -(-nxt // NS_PER_MS)))


@dataclass
class ControllerSimConfig:
    raft: SimConfig = field(default_factory=SimConfig)
    settings: Any = None
    #: brokers (ids 0..n-1) started by :meth:`ControllerSim.start_all`
    brokers: int = 0
    broker_network: BrokerNetworkConfig = field(default_factory=BrokerNetworkConfig)
    #: check :class:`ControllerInvariants` after every event (off: benchmarks)
    invariants: bool = True
    #: the commit allowance of the fencing-liveness check, ms (plus 10 ms per broker)
    fence_allowance_ms: int = 200
    #: brokers spread over this many racks (0: no rack); zonal outages take a whole rack
    racks: int = 0
    #: an admin client (:class:`SimAdmin`), driven by :func:`run_seed`'s chaos
    admin: bool = False
    #: partition leaders send AlterPartition (:class:`SimBroker`'s replication model)
    replication: bool = False
    #: a follower not a live replica for this long leaves the ISR (None: half the session timeout)
    replica_lag_ms: int | None = None
    #: a replica live for this long has caught up and rejoins the ISR (None: the heartbeat interval)
    caught_up_ms: int | None = None
    #: the most partition changes one broker lifecycle result writes (None: the controller's 200);
    #: a small bound makes fencing, shutdowns and unclean restarts span several results
    partition_changes_per_result: int | None = None
    #: the metadata.version the cluster is formatted at (None: the latest production one)
    metadata_version: MetadataVersion | None = None


class ControllerSim:
    """A Raft simulator cluster whose nodes run controllers, and its brokers (module doc)."""

    def __init__(self, seed: int, config: ControllerSimConfig | None = None, *,
                 bootstrap: BootstrapMetadata | None = None,
                 install_managers: Callable[[QuorumController], None] | None = None,
                 trace: Callable[[str], object] | None = None):
        self.seed = seed
        self.config = config or ControllerSimConfig()
        self.bootstrap = bootstrap if bootstrap is not None else default_bootstrap()
        self.settings = self.config.settings
        if bootstrap is None and self.config.metadata_version is not None:
            self.bootstrap = default_bootstrap(self.config.metadata_version)
        self.install_managers = install_managers
        self.trace = trace
        #: how to replay this run, named in every violation (set by :func:`run_seed`)
        self.rerun = ""
        self.raft = Cluster(seed, self.config.raft)
        self.raft.checker.trace = trace
        self.faults: list[BaseException] = []
        self.controllers: dict[int, SimController] = {}
        self.created_hooks: list[Callable[[SimController], None]] = []
        #: called after every simulator event, after the checks (tests inject faults here)
        self.after_event_hooks: list[Callable[[], None]] = []
        self.invariants = ControllerInvariants(self)
        #: the brokers' own randomness (delays, losses, incarnation ids): the Raft cluster's
        #: stream stays what it would be without them
        self.rng = random.Random(seed * 1_000_003 + 7)
        self.brokers: dict[int, SimBroker] = {b: SimBroker(self, b) for b in range(self.config.brokers)}
        self.admin: SimAdmin | None = SimAdmin(self) if self.config.admin else None
        self.digest_cache: DigestCache = {}
        #: set by an event that changed no controller or Raft state (:meth:`_after_event`
        #: skips the checks)
        self.quiet = False
        #: topic ids (``Uuid.random``) drawn from the seed while the simulation runs
        self.uuid_rng = random.Random(seed * 2_000_003 + 17)
        self.raft.start_hooks.append(self._node_started)

    # ---- settings the brokers and checks need (the managers' defaults when unset)
    def setting(self, name: str, default: int) -> int:
        value = getattr(self.settings, name, None) if self.settings is not None else None
        return int(default if value is None else value)

    @property
    def session_timeout_ms(self) -> int:
        return self.setting("broker_session_timeout_ms", 9000)

    @property
    def heartbeat_interval_ms(self) -> int:
        return self.setting("broker_heartbeat_interval_ms", 2000)

    @property
    def replica_lag_ms(self) -> int:
        lag = self.config.replica_lag_ms
        return self.session_timeout_ms // 2 if lag is None else lag

    @property
    def caught_up_ms(self) -> int:
        caught_up = self.config.caught_up_ms
        return self.heartbeat_interval_ms if caught_up is None else caught_up

    def _node_started(self, node: SimNode) -> None:
        if node.id in self.raft.voter_ids:
            if node.sm is not None:
                # the raft simulator's listener reads its own snapshot format; on a controller
                # node the snapshots are the controller's (see _load_controller_snapshot)
                node.sm.handle_load_snapshot = partial(_load_controller_snapshot, self, node)  # type: ignore[method-assign]
            self.controllers[node.id] = SimController(self, node)

    def on_controller_created(self, sc: SimController) -> None:
        if self.trace is not None:
            self.trace(f"t={self.now:>6} controller {sc.node.id} (inc {sc.incarnation}) started")
        for hook in self.created_hooks:
            hook(sc)

    @property
    def scheduler(self) -> Any:
        return self.raft.scheduler

    @property
    def now(self) -> int:
        return int(self.raft.scheduler.now)

    def start_all(self, brokers: bool = True) -> None:
        """Start every node (its controller with it) and, unless ``brokers`` is false, every
        broker."""
        self.raft.start_all()
        if brokers:
            for b in self.brokers.values():
                b.start()

    def _after_event(self) -> None:
        if self.quiet:
            # The event changed no controller and no Raft state: a client's own step (a
            # request arriving is only queued for the controller's next run, an answer or a
            # timeout reaches the client, a retry timer fires), or a superseded wake-up.
            # Every check would see what it saw after the previous event; the client-side
            # checks (unexpected errors, producer id blocks) ran inside it.
            self.quiet = False
            return
        self.raft.checker.check()
        if self.faults:
            self.invariants.fail(str(self.faults[0]))
        if self.config.invariants:
            self.invariants.check()
        for hook in self.after_event_hooks:
            hook()

    def run_until(self, end_ms: int) -> None:
        with _seeded_uuids(self.uuid_rng):
            self.raft.scheduler.run_until(end_ms, self._after_event)
        if self.faults:
            raise self.faults[0]

    def run_for(self, ms: int) -> None:
        self.run_until(self.now + ms)

    def live(self) -> list[QuorumController]:
        return [sc.controller for sc in self.controllers.values() if sc.alive]

    def live_controllers(self) -> list[SimController]:
        return [sc for sc in self.controllers.values() if sc.alive]

    def active(self) -> QuorumController | None:
        act = [c for c in self.live() if c.active]
        return max(act, key=lambda c: c.claim_epoch) if act else None

    def active_sim_controller(self) -> SimController | None:
        act = [sc for sc in self.live_controllers() if sc.controller.active]
        return max(act, key=lambda sc: sc.controller.claim_epoch) if act else None

    def committed_records(self) -> list[tuple[int, int, Any]]:
        """``(offset, version, record)`` of every committed metadata record, in log order,
        decoded from the log of the live node with the highest high watermark (control
        batches left out).  The whole history only while no snapshot truncated that log."""
        with_hwm = [(n.core.high_watermark, n) for n in self.raft.nodes.values()
                    if n.alive and n.core is not None and n.core.high_watermark is not None]
        if not with_hwm:
            return []
        hwm, node = max(with_hwm, key=lambda pair: pair[0])
        out = []
        for batch in node.log.batches():
            if batch.is_control:
                continue
            for i, value in enumerate(batch.records):
                offset = batch.base_offset + i
                if offset < hwm:
                    _, version, record = decode_metadata_record(value, offset)
                    out.append((offset, version, record))
        return out


@contextmanager
def _seeded_uuids(rng: random.Random) -> Iterator[None]:
    """``Uuid.random`` (the controller's topic ids, Kafka's ``Uuid.randomUuid``) drawn from
    ``rng`` while the simulation runs, so a seed replays the same topic ids (and with them
    the same record bytes, digests and events).  Restored afterwards."""
    original = Uuid.__dict__["random"]

    def seeded(cls: type[Uuid]) -> Uuid:
        while True:
            raw = rng.getrandbits(128).to_bytes(16, "big")
            if raw[:-1] != bytes(15) or raw[-1] > 1:  # never ZERO nor ONE, as Uuid.random
                return cls(raw)

    Uuid.random = classmethod(seeded)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        Uuid.random = original  # type: ignore[method-assign]


def _load_controller_snapshot(csim: ControllerSim, node: SimNode, reader: Any) -> None:
    """The Raft simulator's listener on a controller node, loading a snapshot.  Its own
    snapshots hold its entries; a controller's hold controller records, so its entries (the
    committed log, which its checker compares them with) come from the checker's global
    committed log instead."""
    sm = node.sm
    assert sm is not None
    offset = reader.snapshot_id.offset
    committed = node.cluster.checker.committed
    if len(committed) < offset:
        raise SafetyViolation(f"node {node.id} loads snapshot {reader.snapshot_id}, past the committed log "
                              f"({len(committed)} records)")
    sm.entries = list(committed[:offset])
    sm.snapshots_loaded += 1
    csim.invariants.stats["snapshot_loads"] += 1
    node.cluster.checker.on_snapshot_loaded(node)


#: A cache of :func:`state_digest`'s partition encodings: id(registration) -> (the
#: registration, topic id, partition id, its record's bytes).  PartitionRegistrations are
#: immutable and the cache holds them, so an id is never reused for another while cached.
DigestCache = dict[int, tuple[PartitionRegistration, Uuid, int, bytes]]


def state_digest(controller: QuorumController, epoch: int, cache: DigestCache | None = None) -> str:
    """A digest of the controller's state at registry ``epoch``: its records (sorted, so map
    order does not matter); equal digests mean equal states.  A state without
    metadata.version (before the bootstrap transaction committed) has no records to write;
    it digests as ``"empty"``.

    Topics and partitions are digested from the ReplicationControlManager's state directly
    (each topic's TopicRecord, each partition's PartitionRecord at the newest version: every
    field), not through its snapshot writer, so that ``cache`` can keep each registration's
    bytes: most of a state is unchanged from one stable offset to the next, and encoding
    every partition at every offset was the simulator's largest cost."""
    if controller.feature_control.metadata_version_or_none(epoch=epoch) is None:
        return "empty"
    rc = getattr(controller, "replication_control", None)
    values: list[bytes] = []
    # (the one place the digest reads the controller's wiring: which snapshot source is
    # the replication manager's, digested below instead)
    for source in controller._snapshot_sources:
        if rc is not None and source == rc.snapshot_records:
            continue
        values.extend(r.encode() for r in source(epoch))
    if rc is not None:
        values.extend(_replication_values(rc, epoch, {} if cache is None else cache))
    h = hashlib.sha256()
    for value in sorted(values):
        h.update(len(value).to_bytes(4, "big"))
        h.update(value)
    return h.hexdigest()


def _replication_values(rc: Any, epoch: int, cache: DigestCache) -> Iterator[bytes]:
    for name, topic_id in rc.topics(epoch=epoch).items():
        yield ApiMessageAndVersion(m.TopicRecord(name=name, topic_id=topic_id), 0).encode()
        for pid, part in rc.partitions(topic_id, epoch=epoch).items():
            hit = cache.get(id(part))
            if hit is None or hit[0] is not part or hit[1] != topic_id or hit[2] != pid:
                hit = (part, topic_id, pid, part.to_record(topic_id, pid).encode())
                cache[id(part)] = hit
            yield hit[3]


# ====================================================================== clients: brokers and the admin
class _Slot:
    """One request channel of a client (Kafka's brokers keep one request in flight per
    channel: the lifecycle manager's, the producer-id manager's, the AlterPartition
    manager's; the admin keeps one operation in flight)."""

    __slots__ = ("name", "corr", "in_flight", "failures")

    def __init__(self, name: str):
        self.name = name
        self.corr = 0
        self.in_flight = False
        #: consecutive failed attempts (the retry backoff doubles with each)
        self.failures = 0


class _Client:
    """A process that talks to the controllers over the brokers' channel (seeded delay and
    loss, a timeout per request, NOT_CONTROLLER or a timeout moving it to another
    controller).  Every answer is matched to its request by (process incarnation, channel,
    correlation id): one for a request the client gave up on, or for a previous process, is
    dropped."""

    def __init__(self, csim: "ControllerSim", label: str, target: int):
        self.csim = csim
        self.label = label
        self.state = "down"
        self.process = 0
        self.isolated_until = 0
        self.target = target
        self.stats: dict[str, int] = {"answers": 0, "timeouts": 0, "not_controller": 0}

    def _trace(self, what: str) -> None:
        if self.csim.trace is not None:
            self.csim.trace(f"t={self.csim.now:>6} {self.label} {what}")

    def _send(self, slot: _Slot, call: Callable[[SimController], ControllerFuture[Any]],
              answered: Callable[[BaseException | None, Any], None], timed_out: Callable[[], None]) -> None:
        """Send one request to ``self.target`` over the channel; ``answered(exc, result)``
        gets the answer, ``timed_out()`` runs if none comes in time."""
        csim = self.csim
        cfg = csim.config.broker_network
        rng = csim.rng
        sched = csim.scheduler
        slot.corr += 1
        slot.in_flight = True
        corr, process, target = slot.corr, self.process, self.target

        def current() -> bool:
            return self.process == process and slot.corr == corr and slot.in_flight and self.state != "down"

        def on_timeout() -> None:
            csim.quiet = True  # (client-side only)
            if not current():
                return
            slot.in_flight = False
            self.stats["timeouts"] += 1
            self._trace(f"{slot.name} request to controller {target} timed out")
            self._next_controller(None)
            timed_out()

        def deliver_answer(f: ControllerFuture[Any]) -> None:
            csim.quiet = True  # (client-side only)
            if not current():
                return
            slot.in_flight = False
            self.stats["answers"] += 1
            exc = f.exception()
            answered(exc, None if exc is not None else f.result())

        def on_done(f: ControllerFuture[Any]) -> None:
            if self._lost(rng, cfg):
                return
            sched.at(sched.now + rng.randint(cfg.min_delay_ms, cfg.max_delay_ms), partial(deliver_answer, f))

        def arrive() -> None:
            # (the controller only queues the request, or answers at once without an event;
            # its run is an event of its own, checked)
            csim.quiet = True
            sc = csim.controllers.get(target)
            if sc is None or not sc.alive:
                return  # connection refused: the client's timeout handles it
            call(sc).add_done_callback(on_done)

        sched.at(sched.now + cfg.request_timeout_ms, on_timeout)
        if not self._lost(rng, cfg):
            sched.at(sched.now + rng.randint(cfg.min_delay_ms, cfg.max_delay_ms), arrive)

    def _lost(self, rng: random.Random, cfg: BrokerNetworkConfig) -> bool:
        if self.isolated_until > self.csim.now:
            return True
        return bool(cfg.drop_probability) and rng.random() < cfg.drop_probability

    def _next_controller(self, exc: BaseException | None) -> bool:
        """After NOT_CONTROLLER or a timeout, choose where to send next: the controller the
        error names (as a broker learns the Raft leader from the metadata log; the named
        node may be the one that answered, a leader that has not claimed yet), else the
        next one in turn.  True when a named controller was chosen (retry soon)."""
        ids = self.csim.raft.voter_ids
        hint = _NOT_CONTROLLER_HINT.match(exc.message or "") if isinstance(exc, ApiError) else None
        if hint is not None and int(hint.group(1)) in ids and self.csim.rng.random() < 0.9:
            named = int(hint.group(1))
            moved = named != self.target
            self.target = named
            return moved
        self.target = ids[(ids.index(self.target) + 1) % len(ids)]
        return False

    def _retry_delay(self, slot: _Slot, exc: BaseException | None) -> int:
        """NOT_CONTROLLER: a short pause if it named another controller, else the backoff."""
        if self._next_controller(exc):
            return self.csim.rng.randint(5, 30)
        return self._backoff(slot)

    def _backoff(self, slot: _Slot) -> int:
        """Kafka's broker resend backoff: 100 ms doubling per failure up to half the session
        timeout, with 2% jitter (here from 50 ms, the simulator's sessions being short)."""
        slot.failures += 1
        base = min(50 * 2 ** min(slot.failures - 1, 16), max(50, self.csim.session_timeout_ms // 2))
        return max(1, int(base * self.csim.rng.uniform(0.98, 1.02)))

    def _after(self, ms: int, fn: Callable[[], None]) -> None:
        process = self.process
        csim = self.csim

        def later() -> None:
            csim.quiet = True  # (client-side only)
            if self.process == process:
                fn()
        csim.scheduler.at(csim.now + ms, later)


#: AlterPartition answers a leader acts on by dropping the partition from its view until the
#: next metadata refresh (its epochs or its followers' states were stale), then retrying.
_ALTER_PARTITION_REFRESH = frozenset({
    Errors.NEW_LEADER_ELECTED, Errors.FENCED_LEADER_EPOCH, Errors.INVALID_UPDATE_VERSION,
    Errors.INELIGIBLE_REPLICA, Errors.UNKNOWN_TOPIC_ID, Errors.UNKNOWN_TOPIC_OR_PARTITION,
    Errors.NOT_CONTROLLER})
#: The AlterPartition version the simulated brokers send (ISR members with broker epochs).
_ALTER_PARTITION_VERSION = 3
_RECOVERING = 1


class SimBroker(_Client):
    """A broker process seen from the controller: registration, heartbeats, producer ids and,
    when the simulation models replication, the partitions it leads.

    States: ``down`` (no process), ``registering``, ``running`` (registered, heartbeating),
    ``shutting_down`` (heartbeats with WantShutDown until told to exit).  ``paused_until``
    stops heartbeats (a GC pause, a hung disk) without ending the process; ``stopped`` (the
    calm phase's) means it will send nothing more.

    Replication (``ControllerSimConfig.replication``): a broker is a *live replica* while it
    runs unpaused (``running_since`` / ``unavailable_since`` time the transitions).  Its
    metadata *view* is the active controller's committed state at the offset it reports in
    each heartbeat: the partitions it leads there and every broker registration.  As leader
    it sends one AlterPartition (v3) at a time for the partitions whose ISR should change:
    a follower that has not been a live replica for ``replica_lag_ms`` leaves the ISR; a
    replica outside it that has been live for ``caught_up_ms``, and that the view shows
    registered at its current epoch, unfenced and not shutting down, joins it; a partition
    RECOVERING after an unclean election is declared RECOVERED with its one-member ISR.  A
    success updates the view with the answer's epochs and ISR; NEW_LEADER_ELECTED,
    FENCED_LEADER_EPOCH, INVALID_UPDATE_VERSION, INELIGIBLE_REPLICA, an unknown topic or
    partition or NOT_CONTROLLER drop the partition from the view until the next refresh."""

    def __init__(self, csim: "ControllerSim", broker_id: int):
        super().__init__(csim, f"broker {broker_id}", csim.raft.voter_ids[broker_id % len(csim.raft.voter_ids)])
        self.id = broker_id
        rng = csim.rng
        racks = csim.config.racks
        #: the broker's rack (``rack-<i>``, brokers spread round-robin); None without racks
        self.rack = f"rack-{broker_id % racks}" if racks > 0 else None
        #: the log directory keeps its id across restarts (meta.properties)
        self.dir_id = Uuid(rng.getrandbits(128) | (1 << 127))
        self.incarnation_id: Uuid | None = None
        self.epoch = -1
        self.previous_epoch = -1
        self.fenced = True
        self.seen_offset = -1
        self.paused_until = 0
        self.stopped_at: int | None = None
        self.restart_after_ms: int | None = None
        #: when it last registered (became a live replica, unless paused)
        self.running_since = -1
        #: when it last stopped being a live replica (paused, crashed, shutting down)
        self.unavailable_since = 0
        #: (topic id, partition) -> the registration of each partition it leads, as last seen
        self.view: dict[tuple[Uuid, int], PartitionRegistration] = {}
        #: broker id -> registration, as last seen
        self.view_regs: dict[int, Any] = {}
        self.lifecycle = _Slot("lifecycle")
        self.pids = _Slot("producer ids")
        self.isr = _Slot("alter partition")
        self.stats.update({"registrations": 0, "heartbeats": 0, "pid_blocks": 0, "restarts": 0,
                           "alter_partitions": 0, "isr_changes": 0, "isr_refreshes": 0})

    # ---- process lifecycle
    def start(self) -> None:
        """Start a process: a new incarnation that registers."""
        if self.state != "down" or self.stopped_at is not None:
            return
        self.process += 1
        self.incarnation_id = Uuid(self.csim.rng.getrandbits(128) | (1 << 126))
        self.state = "registering"
        self.epoch = -1
        self.fenced = True
        self.paused_until = 0
        self.view = {}
        self.view_regs = {}
        self.lifecycle = _Slot("lifecycle")
        self.pids = _Slot("producer ids")
        self.isr = _Slot("alter partition")
        self._trace(f"starts (incarnation {self.incarnation_id})")
        self._register()

    def crash(self) -> None:
        """The process dies: nothing in flight is answered to it any more."""
        if self.state == "down":
            return
        self._trace("crashes")
        self._becomes_unavailable()
        self.previous_epoch = -1
        self.state = "down"

    def shut_down(self, restart_after_ms: int | None = None) -> None:
        """Clean shutdown: heartbeat WantShutDown until the controller lets it exit; then
        start again ``restart_after_ms`` later (if given)."""
        if self.state != "running":
            return
        self.restart_after_ms = restart_after_ms
        self._trace("begins a controlled shutdown")
        self._becomes_unavailable()
        self.state = "shutting_down"
        self.csim.invariants.fence_exempt.add((self.id, self.epoch))
        if not self.lifecycle.in_flight:
            self._heartbeat()

    def pause(self, ms: int) -> None:
        self._trace(f"pauses for {ms} ms")
        self._becomes_unavailable()
        self.paused_until = max(self.paused_until, self.csim.now + ms)

    def stop(self) -> None:
        """The calm phase's stop: the broker sends nothing more (paused for good)."""
        self._becomes_unavailable()
        self.stopped_at = self.csim.now
        self.paused_until = 1 << 62
        self._trace("stops heartbeating")

    @property
    def running(self) -> bool:
        return self.state == "running" and self.paused_until <= self.csim.now

    def _becomes_unavailable(self) -> None:
        if self.running:
            self.unavailable_since = self.csim.now

    def replica_liveness(self, now: int) -> tuple[bool, int]:
        """(whether it is a live replica, since when it has been so or not)."""
        if self.state == "running" and self.paused_until <= now:
            return True, max(self.running_since, self.paused_until)
        return False, self.unavailable_since

    def _unexpected(self, what: str, exc: BaseException) -> None:
        self.csim.invariants.fail(f"broker {self.id} (epoch {self.epoch}) got {exc!r} from controller "
                                  f"{self.target} for {what}")

    # ---- registration
    def _register(self) -> None:
        if self.state != "registering":
            return
        csim = self.csim
        req = BrokerRegistrationRequest(
            broker_id=self.id, cluster_id=csim.raft.cluster_id, incarnation_id=self.incarnation_id,
            listeners=[BrokerRegistrationRequest.Listener(name="PLAINTEXT", host=f"broker-{self.id}.sim",
                                                          port=9092, security_protocol=0)],
            features=[BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in sorted(supported_features().items())],
            rack=self.rack, is_migrating_zk_broker=False, log_dirs=[self.dir_id],
            previous_broker_epoch=self.previous_epoch)
        self.stats["registrations"] += 1
        self._send(self.lifecycle, lambda sc: sc.controller.register_broker(req), self._registered,
                   lambda: self._after(self._backoff(self.lifecycle), self._register))

    def _registered(self, exc: BaseException | None, reply: Any) -> None:
        if self.state != "registering":
            return
        if exc is None:
            self.lifecycle.failures = 0
            self.epoch = int(reply.epoch)
            self.state = "running"
            self.running_since = self.csim.now
            self._trace(f"registered at epoch {self.epoch} (controller {self.target})")
            self.csim.invariants.registration_answered(self, self.epoch)
            self._heartbeat()
            return
        code = exc.error if isinstance(exc, ApiError) else None
        self._trace(f"registration failed: {exc!r} (controller {self.target})")
        if code == Errors.NOT_CONTROLLER:
            self.stats["not_controller"] += 1
            self._after(self._retry_delay(self.lifecycle, exc), self._register)
        elif code in (Errors.DUPLICATE_BROKER_REGISTRATION, Errors.REQUEST_TIMED_OUT):
            # (duplicate: the previous incarnation's session has not expired yet)
            self._after(self._backoff(self.lifecycle), self._register)
        else:
            self._unexpected("its registration", exc)

    # ---- heartbeats
    def _seen(self) -> int:
        """The metadata offset this broker has read: the active controller's stable offset
        (never going back).  With replication modelled, the view is read there too."""
        act = self.csim.active()
        if act is not None:
            lso = act.last_stable_offset
            if lso >= self.seen_offset:
                self.seen_offset = lso
                if self.csim.config.replication:
                    self._refresh_view(act, lso)
        return self.seen_offset

    def _heartbeat(self) -> None:
        if self.state not in ("running", "shutting_down") or self.lifecycle.in_flight:
            return
        now = self.csim.now
        if self.paused_until > now:
            if self.stopped_at is None:
                self._after(self.paused_until - now, self._heartbeat)
            return
        req = BrokerHeartbeatRequest(broker_id=self.id, broker_epoch=self.epoch,
                                     current_metadata_offset=self._seen(), want_fence=False,
                                     want_shut_down=self.state == "shutting_down")
        self.stats["heartbeats"] += 1
        deadline_ms = self.csim.heartbeat_interval_ms // 2

        def call(sc: SimController) -> ControllerFuture[Any]:
            # The RPC layer: the contact time first (KAFKA-15019), then the event with a deadline.
            ctl = sc.controller
            if ctl.track_broker_heartbeat(req.broker_id, req.broker_epoch):
                sc.heard[(req.broker_id, req.broker_epoch)] = self.csim.now
            return ctl.process_broker_heartbeat(req, deadline_ns=(self.csim.now + deadline_ms) * NS_PER_MS)

        self._send(self.lifecycle, call, self._heartbeat_answered, self._heartbeat)
        if self.csim.config.replication:
            self._maybe_alter_isr()

    def _heartbeat_answered(self, exc: BaseException | None, reply: Any) -> None:
        if self.state not in ("running", "shutting_down"):
            return
        interval = self.csim.heartbeat_interval_ms
        if exc is None:
            self.lifecycle.failures = 0
            if reply.is_fenced != self.fenced:
                self._trace(f"is {'fenced' if reply.is_fenced else 'unfenced'} (controller {self.target})")
            self.fenced = reply.is_fenced
            if reply.should_shut_down:
                self._trace("exits after its controlled shutdown")
                self.previous_epoch = self.epoch
                self.state = "down"
                if self.restart_after_ms is not None:
                    self._after(self.restart_after_ms, self.start)
                return
            self._after(interval, self._heartbeat)
            return
        code = exc.error if isinstance(exc, ApiError) else None
        if code == Errors.NOT_CONTROLLER:
            self.stats["not_controller"] += 1
            self._after(min(interval, self._retry_delay(self.lifecycle, exc)), self._heartbeat)
        elif code == Errors.REQUEST_TIMED_OUT:
            self._after(interval, self._heartbeat)
        else:
            self._unexpected(f"a heartbeat at epoch {self.epoch}", exc)

    # ---- producer ids
    def allocate_producer_ids(self) -> None:
        """Ask for a block of producer ids (a transactional producer needs one)."""
        if self.state != "running" or self.fenced or self.pids.in_flight or not self.running:
            return
        epoch = self.epoch

        def answered(exc: BaseException | None, block: Any) -> None:
            if exc is None:
                self.stats["pid_blocks"] += 1
                self.csim.invariants.block_granted(self, block)
                return
            code = exc.error if isinstance(exc, ApiError) else None
            if code == Errors.NOT_CONTROLLER:
                self._next_controller(exc)
            elif code not in (Errors.REQUEST_TIMED_OUT,):
                self._unexpected("producer ids", exc)

        self._send(self.pids, lambda sc: sc.controller.allocate_producer_ids(self.id, epoch), answered,
                   lambda: None)

    # ---- replication: the partitions it leads
    def _refresh_view(self, act: QuorumController, lso: int) -> None:
        rc = getattr(act, "replication_control", None)
        if rc is None or not act.registry.has_snapshot(lso):
            return
        view: dict[tuple[Uuid, int], PartitionRegistration] = {}
        for tp in rc.partitions_led_by_broker(self.id, epoch=lso):
            part = rc.partition(tp.topic_id, tp.partition_id, epoch=lso)
            if part is not None:
                view[(tp.topic_id, tp.partition_id)] = part
        self.view = view
        self.view_regs = act.cluster_control.brokers(epoch=lso)

    def _target_isr(self, part: PartitionRegistration, now: int) -> list[int] | None:
        """The ISR this leader wants for ``part`` (None: no change)."""
        if part.leader_recovery_state == _RECOVERING:
            return list(part.isr)  # recovered: declared with the one-member ISR
        brokers = self.csim.brokers
        lag, caught_up = self.csim.replica_lag_ms, self.csim.caught_up_ms
        target: list[int] = []
        changed = False
        for r in part.isr:
            f = brokers.get(r)
            if r != self.id and f is not None:
                live, since = f.replica_liveness(now)
                if not live and now - since >= lag:
                    changed = True
                    continue
            target.append(r)
        for r in part.replicas:
            f = brokers.get(r)
            if r in part.isr or f is None:
                continue
            live, since = f.replica_liveness(now)
            reg = self.view_regs.get(r)
            if (live and now - since >= caught_up and reg is not None and not reg.fenced
                    and not reg.in_controlled_shutdown and reg.epoch == f.epoch):
                target.append(r)
                changed = True
        return target if changed else None

    def _maybe_alter_isr(self) -> None:
        """Send one AlterPartition for every led partition whose ISR should change."""
        if not self.running and self.state != "shutting_down":
            return
        if self.isr.in_flight or self.paused_until > self.csim.now or not self.view:
            return
        now = self.csim.now
        T = AlterPartitionRequest
        topics: dict[Uuid, list[Any]] = {}
        for (topic_id, pid), part in self.view.items():
            if part.leader != self.id:
                continue
            target = self._target_isr(part, now)
            if target is None:
                continue
            states = [T.BrokerState(broker_id=b, broker_epoch=self._epoch_of(b)) for b in target]
            topics.setdefault(topic_id, []).append(T.PartitionData(
                partition_index=pid, leader_epoch=part.leader_epoch, partition_epoch=part.partition_epoch,
                leader_recovery_state=0, new_isr_with_epochs=states))
        if not topics:
            return
        req = AlterPartitionRequest(broker_id=self.id, broker_epoch=self.epoch,
                                    topics=[T.TopicData(topic_id=t, partitions=ps) for t, ps in topics.items()])
        self.stats["alter_partitions"] += 1
        if self.csim.trace is not None:
            self._trace("sends AlterPartition " + ", ".join(
                f"{t}-{p.partition_index}@{p.leader_epoch}/{p.partition_epoch} isr="
                f"{[s.broker_id for s in p.new_isr_with_epochs]}" for t, ps in topics.items() for p in ps))
        self._send(self.isr, lambda sc: sc.controller.alter_partition(req, _ALTER_PARTITION_VERSION),
                   self._alter_partition_answered, lambda: None)

    def _epoch_of(self, broker_id: int) -> int:
        if broker_id == self.id:
            return self.epoch
        reg = self.view_regs.get(broker_id)
        return int(reg.epoch) if reg is not None else -1

    def _alter_partition_answered(self, exc: BaseException | None, reply: Any) -> None:
        if exc is not None:
            code = exc.error if isinstance(exc, ApiError) else None
            if code == Errors.NOT_CONTROLLER:
                self.stats["not_controller"] += 1
                self._next_controller(exc)
            elif code != Errors.REQUEST_TIMED_OUT:
                self._unexpected("an AlterPartition", exc)
            return
        if reply.error_code != Errors.NONE:
            self._unexpected("an AlterPartition", ApiError(Errors(reply.error_code), "(the response's error)"))
        for topic in reply.topics:
            for p in topic.partitions:
                key = (topic.topic_id, p.partition_index)
                code = Errors(p.error_code)
                part = self.view.get(key)
                if code == Errors.NONE:
                    self.stats["isr_changes"] += 1
                    self.csim.invariants.alter_partition_answered(topic.topic_id, p)
                    if part is not None and p.leader_id == self.id:
                        self.view[key] = replace(
                            part, isr=tuple(p.isr), leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                            leader_recovery_state=LeaderRecoveryState.of(p.leader_recovery_state))
                    else:
                        self.view.pop(key, None)
                elif code in _ALTER_PARTITION_REFRESH:
                    self.stats["isr_refreshes"] += 1
                    self._trace(f"AlterPartition of {key[0]}-{key[1]}: {code.name}; refreshes")
                    self.view.pop(key, None)
                    if code == Errors.NOT_CONTROLLER:
                        self._next_controller(None)
                else:
                    self._unexpected(f"an AlterPartition of {key[0]}-{key[1]} ({part})",
                                     ApiError(code, "(the partition's error)"))


class SimAdmin(_Client):
    """An admin client (Kafka's Admin through the controller's RPC layer): creates topics
    (1-8 partitions, replication factor 1-3, sometimes with min.insync.replicas), sometimes
    deletes one (by name: the id is looked up first, as ControllerApis does), adds partitions
    to one, or alters min.insync.replicas of a topic or the cluster default.  ``LANES``
    operations at a time (two clients racing on the same topics), each retried on
    NOT_CONTROLLER, REQUEST_TIMED_OUT and lost answers with the brokers' backoff (up to
    ``MAX_ATTEMPTS``), so a retry may meet its own earlier success, or the other lane's
    (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, UNKNOWN_TOPIC_ID are then expected).

    ``topics`` is what the admin believes exists (name -> partition count); it only chooses
    operations, nothing is checked against it."""

    MAX_ATTEMPTS = 10
    LANES = 2

    def __init__(self, csim: "ControllerSim"):
        super().__init__(csim, "admin", csim.raft.voter_ids[0])
        self.state = "running"
        self.process = 1
        #: the admin's own randomness (its choices leave the brokers' stream alone)
        self.rng = random.Random(csim.seed * 7_777_781 + 13)
        self.lanes = [_Slot(f"admin lane {i}") for i in range(self.LANES)]
        #: the lanes with an operation in progress
        self.busy: set[int] = set()
        self.topics: dict[str, int] = {}
        self.deleted: list[str] = []
        self.next_name = 0
        self.stats.update({"ops": 0, "topics_created": 0, "topics_deleted": 0, "partitions_created": 0,
                           "configs_altered": 0, "gave_up": 0, "refused": 0})

    def act(self) -> bool:
        """Start one operation on a free lane; False if every lane is busy."""
        free = [i for i in range(self.LANES) if i not in self.busy]
        if not free:
            return False
        lane = free[0]
        rng = self.rng
        r = rng.random()
        names = sorted(self.topics)
        if not names or r < 0.5:
            self._create_topic(lane)
        elif r < 0.65:
            self._delete_topic(lane, rng.choice(names))
        elif r < 0.8:
            self._create_partitions(lane, rng.choice(names))
        else:
            self._alter_min_isr(lane, rng.choice(names) if rng.random() < 0.85 else None)
        return True

    # ---- operations
    def _create_topic(self, lane: int) -> None:
        rng = self.rng
        if self.deleted and rng.random() < 0.25:
            name = self.deleted.pop(rng.randrange(len(self.deleted)))  # a name again, a new topic id
        else:
            name = f"topic-{self.next_name}"
            self.next_name += 1
        partitions, rf = rng.randint(1, 8), rng.randint(1, 3)
        T = CreateTopicsRequest
        configs = []
        if rng.random() < 0.3:
            configs.append(T.CreatableTopicConfig(name="min.insync.replicas", value=str(rng.randint(1, rf))))
        topic = T.CreatableTopic(name=name, num_partitions=partitions, replication_factor=rf, assignments=[],
                                 configs=configs)
        req = CreateTopicsRequest(topics=[topic], timeout_ms=self.csim.config.broker_network.request_timeout_ms,
                                  validate_only=False)

        def answered(reply: Any) -> None:
            result = reply.topics[0]
            code = Errors(result.error_code)
            if code == Errors.NONE:
                self.stats["topics_created"] += 1
                self.topics[name] = partitions
                self.csim.invariants.topic_created(name, result.topic_id)
            elif code == Errors.TOPIC_ALREADY_EXISTS:
                self.topics.setdefault(name, partitions)
            elif code == Errors.INVALID_REPLICATION_FACTOR:
                self.stats["refused"] += 1
            else:
                self._unexpected(f"creating {name}", ApiError(code, result.error_message))

        self._run(lane, f"create {name} ({partitions} partitions, RF {rf})",
                  lambda sc, d: sc.controller.create_topics(req, {name}, deadline_ns=d), answered)

    def _delete_topic(self, lane: int, name: str) -> None:
        def call(sc: SimController, deadline_ns: int) -> ControllerFuture[Any]:
            # ControllerApis.deleteTopics: the names' ids first, then the deletion by id
            ctl = sc.controller
            out: ControllerFuture[Any] = ControllerFuture()

            def found(f: ControllerFuture[Any]) -> None:
                exc = f.exception()
                if exc is not None:
                    out.set_exception(exc)
                    return
                topic_id = f.result()[name]
                if isinstance(topic_id, ApiError):
                    out.set_result(topic_id)
                    return

                def deleted(g: ControllerFuture[Any]) -> None:
                    exc = g.exception()
                    if exc is not None:
                        out.set_exception(exc)
                    else:
                        out.set_result(g.result()[topic_id])
                ctl.delete_topics([topic_id], deadline_ns=deadline_ns).add_done_callback(deleted)
            ctl.find_topic_ids([name], deadline_ns=deadline_ns).add_done_callback(found)
            return out

        def answered(error: ApiError) -> None:
            if error.error == Errors.NONE:
                self.stats["topics_deleted"] += 1
            elif error.error not in (Errors.UNKNOWN_TOPIC_ID, Errors.UNKNOWN_TOPIC_OR_PARTITION):
                self._unexpected(f"deleting {name}", error)
            if self.topics.pop(name, None) is not None:
                self.deleted.append(name)

        self._run(lane, f"delete {name}", call, answered)

    def _create_partitions(self, lane: int, name: str) -> None:
        count = self.topics[name] + self.rng.randint(1, 3)
        topic = CreatePartitionsRequest.CreatePartitionsTopic(name=name, count=count, assignments=None)

        def answered(results: Any) -> None:
            code = Errors(results[0].error_code)
            if code == Errors.NONE:
                self.stats["partitions_created"] += 1
                self.topics[name] = count
            elif code == Errors.INVALID_PARTITIONS:
                self.topics[name] = max(count, self.topics.get(name, 0))  # (its own earlier success)
            elif code == Errors.UNKNOWN_TOPIC_OR_PARTITION:
                self.topics.pop(name, None)
            elif code == Errors.INVALID_REPLICATION_FACTOR:
                self.stats["refused"] += 1
            else:
                self._unexpected(f"adding partitions to {name}", ApiError(code, results[0].error_message))

        self._run(lane, f"grow {name} to {count} partitions",
                  lambda sc, d: sc.controller.create_partitions([topic], False, deadline_ns=d), answered)

    def _alter_min_isr(self, lane: int, name: str | None) -> None:
        resource = ConfigResource.topic(name) if name is not None else ConfigResource.broker("")
        if self.rng.random() < 0.2:
            change: tuple[AlterConfigOp, str | None] = (AlterConfigOp.DELETE, None)
        else:
            change = (AlterConfigOp.SET, str(self.rng.randint(1, 3)))
        changes = {resource: {"min.insync.replicas": change}}

        def answered(results: Any) -> None:
            error = results[resource]
            if error.error == Errors.NONE:
                self.stats["configs_altered"] += 1
            elif error.error == Errors.UNKNOWN_TOPIC_OR_PARTITION and name is not None:
                self.topics.pop(name, None)
            elif (error.error == Errors.INVALID_CONFIG and name is None and change[0] == AlterConfigOp.DELETE
                  and error.message == "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."):
                self.stats["refused"] += 1
            else:
                self._unexpected(f"altering {resource}", error)

        self._run(lane, f"alter {resource} min.insync.replicas {change[0].name} {change[1]}",
                  lambda sc, d: sc.controller.incremental_alter_configs(changes, False, deadline_ns=d), answered)

    # ---- the retry loop
    def _run(self, lane: int, what: str, call: Callable[[SimController, int], ControllerFuture[Any]],
             answered: Callable[[Any], None]) -> None:
        self.busy.add(lane)
        self.stats["ops"] += 1
        slot = self.lanes[lane]
        slot.failures = 0
        attempts = [0]
        timeout_ms = self.csim.config.broker_network.request_timeout_ms

        def attempt() -> None:
            attempts[0] += 1
            if attempts[0] > self.MAX_ATTEMPTS:
                self.stats["gave_up"] += 1
                self._trace(f"gives up: {what}")
                self.busy.discard(lane)
                return
            self._trace(f"{what} (attempt {attempts[0]}, controller {self.target})")
            deadline_ns = (self.csim.now + timeout_ms) * NS_PER_MS
            self._send(slot, lambda sc: call(sc, deadline_ns), on_answer,
                       lambda: self._after(self._backoff(slot), attempt))

        def on_answer(exc: BaseException | None, reply: Any) -> None:
            if exc is not None:
                code = exc.error if isinstance(exc, ApiError) else None
                if code == Errors.NOT_CONTROLLER:
                    self.stats["not_controller"] += 1
                    self._after(self._retry_delay(slot, exc), attempt)
                elif code == Errors.REQUEST_TIMED_OUT:
                    self._after(self._backoff(slot), attempt)
                else:
                    self._unexpected(what, exc)
                return
            self._trace(f"{what}: answered {reply!r:.200}")
            self.busy.discard(lane)
            answered(reply)

        attempt()

    def _unexpected(self, what: str, exc: BaseException) -> None:
        self.csim.invariants.fail(f"the admin got {exc!r} from controller {self.target} for {what}")

# ====================================================================== invariants
class ControllerInvariants:
    """The controller's invariants (module doc), checked after every simulator event.

    Cheap by construction: a state is digested only when a controller's stable offset
    moved (and once more when it stops being active); the write check is a comparison at
    each answer; the fencing checks look at the records a controller appends and, in the
    calm phase, at the stopped brokers every 10 virtual ms."""

    def __init__(self, csim: ControllerSim):
        self.csim = csim
        #: stable offset -> (digest, node id that reached it first)
        self.digests: dict[int, tuple[str, int]] = {}
        #: (broker id, epoch) sessions that asked to be fenced (a controlled shutdown)
        self.fence_exempt: set[tuple[int, int]] = set()
        #: first producer id -> broker id, of every block answered
        self.granted_blocks: dict[int, int] = {}
        self.unverified_registrations: list[tuple[int, Uuid, int]] = []
        #: set by the runner when the calm phase starts (the fencing-liveness check)
        self.calm_since: int | None = None
        self._next_fence_check = 0
        #: the extra fencing time bounded partition changes take in the calm phase
        self.fencing_work_ms = 0
        self.violations: list[SafetyViolation] = []
        #: (offset, epoch) of every metadata record a controller appended that changes a
        #: partition, a topic or a broker -> what it touches: ("p", topic id, partition),
        #: ("t", topic id), ("n", topic name; "" every topic) or ("b", broker id)
        self.touched: dict[tuple[int, int], list[tuple[Any, ...]]] = {}
        #: (name, topic id) -> (offset, epoch) of each TopicRecord appended for it
        self.topic_records: dict[tuple[str, Uuid], list[tuple[int, int]]] = {}
        #: (offset, epoch) of every metadata record a controller appended -> whether it is a
        #: NoOpRecord (a stable offset that moves over NoOps and control records only keeps
        #: its state, so its digest is reused)
        self.noop: dict[tuple[int, int], bool] = {}
        self.unverified_topics: list[tuple[str, Uuid]] = []
        #: (offset, epoch) -> each appended record that changes partitions, for the shadow
        self.partition_records: dict[tuple[int, int], Any] = {}
        #: the shadow: every committed partition change folded in log order, independently of
        #: the controllers; each (topic id, partition, partition epoch) it passed through
        self.shadow_scanned = -1
        self.shadow_topics: dict[str, Uuid] = {}
        self.shadow: dict[tuple[Uuid, int], PartitionRegistration] = {}
        self.partition_states: dict[tuple[Uuid, int, int], PartitionRegistration] = {}
        #: AlterPartition successes answered, not yet matched with the committed history
        self.unverified_alters: list[tuple[Uuid, int, Any]] = []
        self.stats = {"digests": 0, "writes_checked": 0, "fences_checked": 0, "standby_checks": 0,
                      "registrations_verified": 0, "liveness_checks": 0, "snapshot_loads": 0,
                      "partitions_checked": 0, "fenced_brokers_checked": 0, "topics_verified": 0,
                      "alters_verified": 0}

    def fail(self, msg: str) -> NoReturn:
        raise self._violation(msg)

    def report(self, msg: str) -> None:
        """A violation seen inside a controller's event (a future's callback, an append):
        raising there would be taken for the event's own failure, so it is kept and raised
        after the event (:meth:`check`)."""
        self.violations.append(self._violation(msg))

    def _violation(self, msg: str) -> SafetyViolation:
        c = self.csim
        rerun = f" (rerun: {c.rerun})" if c.rerun else ""
        return SafetyViolation(f"seed={c.seed} t={c.now}ms: {msg}{rerun}")

    # ---- no answer before commit
    def write_answered(self, write: _ObservedWrite, future: ControllerFuture[Any]) -> None:
        if future.exception() is not None:
            return
        sc = write.sc
        oc = sc.controller.offset_control
        mark = write.mark
        if mark is None:
            # answered while the write ran: everything it wrote so far must be committed
            mark = sc.written.get(sc.controller.claim_epoch, -1)
        self.stats["writes_checked"] += 1
        if oc.last_stable_offset < mark:
            self.report(f"controller {sc.node.id} answered a write (event {sc.controller.current_event!r}) at stable "
                        f"offset {oc.last_stable_offset}, before its records up to offset {mark} committed")

    # ---- fencing safety (and what each record touches, for the partition invariants)
    def on_append(self, sc: SimController, base: int, values: list[bytes]) -> None:
        now = self.csim.now
        session = self.csim.session_timeout_ms
        epoch = sc.controller.claim_epoch
        noop = self.noop
        for i, value in enumerate(values):
            rec = decode_metadata_record(value, base + i)[2]
            noop[(base + i, epoch)] = isinstance(rec, m.NoOpRecord)
            touched = _touches(rec)
            if touched is not None:
                self.touched.setdefault((base + i, epoch), []).append(touched)
                if not isinstance(rec, _BROKER_RECORDS):
                    self.partition_records[(base + i, epoch)] = rec
                if isinstance(rec, m.TopicRecord):
                    self.topic_records.setdefault((rec.name, rec.topic_id), []).append((base + i, epoch))
            if isinstance(rec, m.BrokerRegistrationChangeRecord) and rec.fenced == _FENCE:
                session_key = (rec.broker_id, rec.broker_epoch)
            elif isinstance(rec, m.FenceBrokerRecord):
                session_key = (rec.id, rec.epoch)
            else:
                continue
            self.stats["fences_checked"] += 1
            if self.csim.trace is not None:
                self.csim.trace(f"t={now:>6} controller {sc.node.id} fences broker {session_key[0]} "
                                f"epoch {session_key[1]}")
            if session_key in self.fence_exempt:
                continue
            last = sc.heard.get(session_key)
            if last is not None and last >= now - session:
                self.report(f"controller {sc.node.id} fenced broker {session_key[0]} epoch {session_key[1]} at offset "
                          f"{base + i}, but received its heartbeat at t={last}ms, within the session timeout "
                          f"{session} ms")

    # ---- answers are true
    def registration_answered(self, broker: SimBroker, epoch: int) -> None:
        assert broker.incarnation_id is not None
        self.unverified_registrations.append((broker.id, broker.incarnation_id, epoch))

    def block_granted(self, broker: SimBroker, block: Any) -> None:
        first = int(block.first_producer_id)
        for start, owner in self.granted_blocks.items():
            if start < first + block.size and first < start + block.size:
                self.fail(f"producer id block at {first} answered to broker {broker.id} overlaps the block at "
                          f"{start} answered to broker {owner}")
        self.granted_blocks[first] = broker.id

    def topic_created(self, name: str, topic_id: Uuid) -> None:
        """A CreateTopics success answered ``topic_id`` for ``name``: a TopicRecord of both
        must be (or become) committed."""
        self.unverified_topics.append((name, topic_id))

    def _verify_topics(self) -> None:
        committed = self.csim.raft.checker.committed
        keep = []
        for name, topic_id in self.unverified_topics:
            at = self.topic_records.get((name, topic_id), [])
            if any(off < len(committed) and committed[off][0] == epoch for off, epoch in at):
                self.stats["topics_verified"] += 1
            elif not at:
                self.fail(f"topic {name} was answered created with id {topic_id}, but no controller wrote a "
                          f"TopicRecord of that name and id")
            else:
                keep.append((name, topic_id))
        self.unverified_topics = keep

    def alter_partition_answered(self, topic_id: Uuid, answer: Any) -> None:
        """An AlterPartition answered NONE for ``topic_id``-``answer.partition_index``: the
        committed history must hold the partition at the answered partition epoch with the
        answered leader, ISR, leader epoch and recovery state."""
        self.unverified_alters.append((topic_id, answer.partition_index, answer))

    def _advance_shadow(self, committed: list[tuple[int, bytes]]) -> None:
        """Fold the newly committed partition records into the shadow (as
        ReplicationControlManager's replay applies them)."""
        shadow, states, topics = self.shadow, self.partition_states, self.shadow_topics
        for off in range(self.shadow_scanned + 1, len(committed)):
            rec = self.partition_records.get((off, committed[off][0]))
            if rec is None:
                continue
            changed: list[tuple[tuple[Uuid, int], PartitionRegistration]] = []
            if isinstance(rec, m.TopicRecord):
                topics[rec.name] = rec.topic_id
            elif isinstance(rec, m.PartitionRecord):
                changed.append(((rec.topic_id, rec.partition_id), PartitionRegistration.from_record(rec)))
            elif isinstance(rec, m.PartitionChangeRecord):
                key = (rec.topic_id, rec.partition_id)
                prev = shadow.get(key)
                if prev is not None:  # (a record for no partition fails every controller's replay)
                    changed.append((key, prev.merge(rec)))
            elif isinstance(rec, m.RemoveTopicRecord):
                for key in [k for k in shadow if k[0] == rec.topic_id]:
                    del shadow[key]
                for name in [n for n, t in topics.items() if t == rec.topic_id]:
                    del topics[name]
            elif isinstance(rec, m.ClearElrRecord):
                ids = set(topics.values()) if not rec.topic_name else {topics.get(rec.topic_name)}
                for key, part in list(shadow.items()):
                    if key[0] in ids and (part.elr or part.last_known_elr):
                        changed.append((key, part.merge(m.PartitionChangeRecord(
                            topic_id=key[0], partition_id=key[1], eligible_leader_replicas=[], last_known_elr=[]))))
            for key, part in changed:
                shadow[key] = part
                states[(key[0], key[1], part.partition_epoch)] = part
        self.shadow_scanned = len(committed) - 1

    def _verify_alters(self) -> None:
        keep = []
        for topic_id, pid, answer in self.unverified_alters:
            state = self.partition_states.get((topic_id, pid, answer.partition_epoch))
            if state is None:
                current = self.shadow.get((topic_id, pid))
                if current is not None and current.partition_epoch < answer.partition_epoch:
                    keep.append((topic_id, pid, answer))  # not committed that far yet
                    continue
                self.fail(f"AlterPartition of {topic_id}-{pid} was answered at partition epoch "
                          f"{answer.partition_epoch}, which the committed history of the partition never had "
                          f"(it is at {current})")
            got = (answer.leader_id, tuple(answer.isr), answer.leader_epoch, answer.leader_recovery_state)
            want = (state.leader, state.isr, state.leader_epoch, int(state.leader_recovery_state))
            if got != want:
                self.fail(f"AlterPartition of {topic_id}-{pid} was answered (leader, ISR, leader epoch, recovery "
                          f"state) {got} at partition epoch {answer.partition_epoch}, but the committed partition "
                          f"then was {state}")
            self.stats["alters_verified"] += 1
        self.unverified_alters = keep

    def _verify_registrations(self) -> None:
        committed = self.csim.raft.checker.committed
        keep = []
        for broker_id, incarnation, epoch in self.unverified_registrations:
            # The epoch is the offset the registration's atomic batch starts at (Kafka's
            # nextWriteOffset): the previous incarnation's cleanup (PartitionChangeRecords),
            # if any, then the RegisterBrokerRecord carrying that epoch.
            off = epoch
            rec: Any = None
            while off < len(committed) and committed[off][0] == committed[epoch][0]:
                rec = decode_metadata_record(committed[off][1], off)[2]
                if not isinstance(rec, m.PartitionChangeRecord):
                    break
                off += 1
            else:
                if epoch >= len(committed) or off >= len(committed):
                    keep.append((broker_id, incarnation, epoch))
                    continue
            if not (isinstance(rec, m.RegisterBrokerRecord) and rec.broker_id == broker_id
                    and rec.incarnation_id == incarnation and rec.broker_epoch == epoch):
                self.fail(f"broker {broker_id} (incarnation {incarnation}) was answered epoch {epoch}, but the "
                          f"committed records from that offset are {off - epoch} partition change(s), then {rec!r}")
            self.stats["registrations_verified"] += 1
        self.unverified_registrations = keep

    # ---- after every event
    def check(self) -> None:
        if self.violations:
            raise self.violations[0]
        now = self.csim.now
        for sc in self.csim.controllers.values():
            if not sc.alive:
                continue
            ctl = sc.controller
            if ctl.fatal is not None:
                self.fail(f"controller {sc.node.id} stopped on a fatal fault: {ctl.fatal!r}")
            if ctl.active:
                if sc.claimed_epoch != ctl.claim_epoch:
                    sc.claimed_epoch = ctl.claim_epoch
                    sc.claimed_at = now
                    if self.csim.trace is not None:
                        self.csim.trace(f"t={now:>6} controller {sc.node.id} active in epoch {ctl.claim_epoch}")
            elif sc.claimed_epoch != -1:
                if self.csim.trace is not None:
                    self.csim.trace(f"t={now:>6} controller {sc.node.id} renounced epoch {sc.claimed_epoch}")
                sc.claimed_epoch = -1
                sc.heard.clear()
                self._check_standby(sc, "after renouncing")
            oc = ctl.offset_control
            lso = oc.last_stable_offset
            if lso != sc.checked_lso:
                sc.checked_lso = lso
                self._check_digest(sc, lso)
                self._check_partitions(sc, lso)
                if not ctl.active:
                    self._check_standby(sc, "at a new stable offset")
        if self.unverified_registrations:
            self._verify_registrations()
        if self.unverified_topics:
            self._verify_topics()
        committed = self.csim.raft.checker.committed
        if self.shadow_scanned < len(committed) - 1:
            self._advance_shadow(committed)
        if self.unverified_alters:
            self._verify_alters()
        if self.calm_since is not None and now >= self._next_fence_check:
            self._next_fence_check = now + 10
            self.check_fencing_liveness()

    def _check_digest(self, sc: SimController, lso: int) -> None:
        ctl = sc.controller
        if not ctl.registry.has_snapshot(lso):
            # OffsetControlManager's invariant: committed reads and a renounce's revert need it
            oc = ctl.offset_control
            self.fail(f"{'active' if ctl.active else 'standby'} controller {sc.node.id} has no registry snapshot at "
                      f"its stable offset {lso} (snapshots {list(ctl.registry.epochs())}, committed offset "
                      f"{oc.last_committed_offset}, next write offset {oc.next_write_offset}): committed reads fail "
                      f"and a renounce cannot revert")
        before, digest = sc.digest_at
        if not (0 <= before < lso and self._only_noops(before, lso)):
            digest = state_digest(ctl, lso, self.csim.digest_cache)
            self.stats["digests"] += 1
        sc.digest_at = (lso, digest)
        first = self.digests.setdefault(lso, (digest, sc.node.id))
        if first[0] != digest:
            self.fail(f"controller {sc.node.id} (incarnation {sc.incarnation})'s state at stable offset {lso} "
                      f"differs from the one controller {first[1]} had at that offset; it holds:\n  "
                      f"{_describe(sc.controller, lso)}")

    def _check_partitions(self, sc: SimController, lso: int) -> None:
        """The partition invariants on the controller's committed state at ``lso``, for what
        the committed records since its last check touched (a partition, every partition of a
        topic, or a broker whose registration changed):

        * the leader is in the ISR, or there is none; the ISR is a duplicate-free subset of
          the replicas; the ELR is disjoint from the ISR;
        * no broker whose registration is fenced is in an ISR or leads (without ELR Kafka
          keeps the last ISR member of a leaderless partition: that one may be fenced);
        * a partition's leader epoch and partition epoch never go down in this controller's
          committed history (a topic's partitions are forgotten with it)."""
        ctl = sc.controller
        rc = getattr(ctl, "replication_control", None)
        if rc is None:
            return
        committed = self.csim.raft.checker.committed
        end = min(lso, len(committed) - 1)
        if end <= sc.partitions_scanned:
            return
        parts: dict[tuple[Uuid, int], None] = {}
        topics: dict[Uuid, None] = {}
        brokers: dict[int, None] = {}
        everything = False
        touched = self.touched
        for off in range(sc.partitions_scanned + 1, end + 1):
            items = touched.get((off, committed[off][0]))
            if items is None:
                continue
            for item in items:
                kind = item[0]
                if kind == "p":
                    parts[(item[1], item[2])] = None
                elif kind == "t":
                    topics[item[1]] = None
                elif kind == "b":
                    brokers[item[1]] = None
                elif item[1] == "":
                    everything = True
                else:
                    topic_id = rc.topic_id(item[1], epoch=lso)
                    if topic_id is not None:
                        topics[topic_id] = None
        sc.partitions_scanned = end
        if everything:
            topics.update(dict.fromkeys(rc.topics(epoch=lso).values()))
        known = sc.partition_epochs
        for topic_id in topics:
            topic = rc.topic(topic_id, epoch=lso)
            if topic is None:
                for key in [k for k in known if k[0] == topic_id]:
                    del known[key]
                continue
            for pid in topic.partitions(epoch=lso):
                parts[(topic_id, pid)] = None
        if not parts and not brokers:
            return
        cc = ctl.cluster_control
        elr = ctl.feature_control.is_elr_enabled(epoch=lso)
        registrations: dict[int, Any] = {}

        def fenced(broker_id: int) -> bool:
            if broker_id not in registrations:
                registrations[broker_id] = cc.registration(broker_id, epoch=lso)
            reg = registrations[broker_id]
            return reg is not None and bool(reg.fenced)

        where = f"controller {sc.node.id}'s committed state at offset {lso}"
        for key in parts:
            part = rc.partition(key[0], key[1], epoch=lso)
            if part is None:
                known.pop(key, None)
                continue
            self.stats["partitions_checked"] += 1
            name = f"{key[0]}-{key[1]}"
            isr = part.isr
            if part.leader != NO_LEADER and part.leader not in isr:
                self.fail(f"in {where}, partition {name} is led by {part.leader}, outside its ISR: {part}")
            if len(set(isr)) != len(isr) or not set(isr) <= set(part.replicas):
                self.fail(f"in {where}, partition {name} has an ISR that is not a subset of its replicas: {part}")
            if set(part.elr) & set(isr):
                self.fail(f"in {where}, partition {name} has brokers in both its ISR and its ELR: {part}")
            for b in isr:
                if fenced(b) and (elr or part.leader != NO_LEADER or len(isr) > 1):
                    self.fail(f"in {where}, partition {name} has broker {b}, fenced, in its ISR: {part}")
            epochs = (part.leader_epoch, part.partition_epoch)
            before = known.get(key)
            if before is not None and (epochs[0] < before[0] or epochs[1] < before[1]):
                self.fail(f"in {where}, partition {name}'s (leader epoch, partition epoch) went from {before} to "
                          f"{epochs}: {part}")
            known[key] = epochs
        for b in brokers:
            if not fenced(b):
                continue
            self.stats["fenced_brokers_checked"] += 1
            for tp in rc.partitions_with_broker_in_isr(b, epoch=lso):
                part = rc.partition(tp.topic_id, tp.partition_id, epoch=lso)
                if part is not None and (elr or part.leader != NO_LEADER or len(part.isr) > 1):
                    self.fail(f"in {where}, broker {b} is fenced but partition {tp} has it in its ISR: {part}")

    def _only_noops(self, after: int, upto: int) -> bool:
        """Whether the committed records in (``after``, ``upto``] are NoOpRecords and control
        records only (no state change between the two stable offsets)."""
        committed = self.csim.raft.checker.committed
        if upto >= len(committed):
            return False
        noop = self.noop
        for off in range(after + 1, upto + 1):
            if not noop.get((off, committed[off][0]), True):
                return False
        return True

    def _check_standby(self, sc: SimController, when: str) -> None:
        ctl = sc.controller
        oc = ctl.offset_control
        if oc.active or oc.current_snapshot_id is not None:
            return
        self.stats["standby_checks"] += 1
        latest = ctl.registry.latest_epoch
        if latest > oc.last_committed_offset:
            self.fail(f"standby controller {sc.node.id} ({when}) holds a registry snapshot at {latest}, past its "
                      f"committed offset {oc.last_committed_offset}")
        core = sc.node.core
        hwm = core.high_watermark if core is not None else None
        if hwm is not None and oc.last_committed_offset >= hwm and oc.last_committed_offset >= sc.node.log.start_offset:
            self.fail(f"standby controller {sc.node.id} ({when}) applied up to {oc.last_committed_offset}, past its "
                      f"node's high watermark {hwm}")
        if oc.transaction_start_offset == -1:
            cache = self.csim.digest_cache
            latest_digest = state_digest(ctl, LATEST_EPOCH, cache)
            lso = oc.last_stable_offset
            stable_digest = sc.digest_at[1] if sc.digest_at[0] == lso else state_digest(ctl, lso, cache)
            if latest_digest != stable_digest:
                self.fail(f"standby controller {sc.node.id} ({when}): its latest state is not its state at the stable "
                          f"offset {oc.last_stable_offset}: something uncommitted is visible")

    # ---- fencing liveness (calm phase)
    def fence_budget_ms(self) -> int:
        """How long after its last heartbeat (or the claim) a stopped broker may stay
        unfenced: the session timeout, one period of the fence task (session / 8), and the
        commit allowance (the fence task fences one broker per 10 ms run), plus the time the
        bounded results of the stopped brokers' partition changes take
        (:meth:`expect_fencing_work`)."""
        csim = self.csim
        session = csim.session_timeout_ms
        return (session + max(1, session // 8) + csim.config.fence_allowance_ms + 10 * len(csim.brokers)
                + self.fencing_work_ms)

    #: one bounded result of partition changes: the task's 10 ms re-run and its commit
    RESULT_MS = 25

    def expect_fencing_work(self, stopped: list[SimBroker]) -> None:
        """The calm phase stops ``stopped``: their fencing first takes them out of every ISR
        and ELR they are in, ``partition_changes_per_result`` changes a result (the task runs
        again 10 ms after a result that left work); :meth:`fence_budget_ms` allows for it."""
        act = self.csim.active()
        rc = getattr(act, "replication_control", None) if act is not None else None
        if act is None or rc is None:
            return
        lso = act.last_stable_offset
        changes = sum(len(rc.partitions_with_broker_in_isr(b.id, epoch=lso))
                      + len(rc.partitions_with_broker_in_elr(b.id, epoch=lso)) for b in stopped)
        bound = self.csim.config.partition_changes_per_result or MAX_PARTITION_CHANGES_PER_RESULT
        self.fencing_work_ms = -(-changes // bound) * self.RESULT_MS

    def check_fencing_liveness(self) -> None:
        """Every stopped broker must be fenced, in the stable state of the one active
        controller, by session + period + allowance after the later of its last heartbeat
        that controller heard and that controller's claim."""
        csim = self.csim
        act = [sc for sc in csim.live_controllers() if sc.controller.active]
        if len(act) != 1:
            return
        sc = act[0]
        ctl = sc.controller
        budget = self.fence_budget_ms()
        now = csim.now
        lso = ctl.last_stable_offset
        self.stats["liveness_checks"] += 1
        for b in csim.brokers.values():
            if b.stopped_at is None or b.epoch < 0:
                continue
            reg = ctl.cluster_control.registration(b.id, epoch=lso)
            if reg is None or reg.fenced or reg.epoch != b.epoch:
                continue
            heard = sc.heard.get((b.id, b.epoch), -1)
            start = max(heard, sc.claimed_at)
            if now > start + budget:
                self.fail(f"broker {b.id} (epoch {b.epoch}) stopped heartbeating at t={b.stopped_at}ms; controller "
                          f"{sc.node.id} (active since t={sc.claimed_at}ms, last heard it at t={heard}ms) has not "
                          f"fenced it by t={now}ms (budget {budget} ms from t={start}ms)")


_BROKER_RECORDS = (m.RegisterBrokerRecord, m.BrokerRegistrationChangeRecord, m.UnregisterBrokerRecord,
                   m.FenceBrokerRecord, m.UnfenceBrokerRecord)


def _touches(rec: Any) -> tuple[Any, ...] | None:
    """What a record changes, for the partition invariants (see ``ControllerInvariants.touched``)."""
    if isinstance(rec, (m.PartitionRecord, m.PartitionChangeRecord)):
        return ("p", rec.topic_id, rec.partition_id)
    if isinstance(rec, (m.TopicRecord, m.RemoveTopicRecord)):
        return ("t", rec.topic_id)
    if isinstance(rec, m.ClearElrRecord):
        return ("n", rec.topic_name or "")
    if isinstance(rec, (m.RegisterBrokerRecord, m.BrokerRegistrationChangeRecord, m.UnregisterBrokerRecord)):
        return ("b", rec.broker_id)
    if isinstance(rec, (m.FenceBrokerRecord, m.UnfenceBrokerRecord)):
        return ("b", rec.id)
    return None


def _describe(ctl: QuorumController, epoch: int) -> str:
    return "\n  ".join(repr(r) for r in ctl.snapshot_records(epoch))


# ====================================================================== seeded scenarios
@dataclass
class RunResult:
    seed: int
    voters: int
    brokers: int
    events: int
    virtual_ms: int
    committed: int
    max_epoch: int
    controller_crashes: int
    broker_crashes: int
    registrations: int
    heartbeats: int
    fences: int
    digests: int
    writes_checked: int
    topics_created: int = 0
    partition_changes: int = 0
    isr_changes: int = 0
    partitions_checked: int = 0
    zonal_outages: int = 0


def random_config(rng: random.Random, seed: int) -> ControllerSimConfig:
    """A seed's cluster: the Raft runner's random quorum (1/3/5 voters, network delay, loss,
    duplication, crashes after votes, flush modes), static and without observers (a
    controller runs on each voter), its buffers as large as a controller's; then the broker
    channel's faults, 3-8 brokers, and the session settings."""
    raft = random_sim_config(rng)
    # Kafka's controller appends into a pool of 5 batches of 8 MiB; smaller batches here split
    # the controller's writes and Raft's fetches, but the pool never fills (a full one is a
    # failover with UNKNOWN_SERVER_ERROR, in Kafka too: BufferAllocationException).
    quorum = replace(raft.quorum, max_number_of_batches=max(5, raft.quorum.max_number_of_batches),
                     max_batch_size_bytes=max(4096, raft.quorum.max_batch_size_bytes))
    raft = replace(raft, observers=0, dynamic=False, auto_join=0, quorum=quorum,
                   defer_listeners=(seed // 3) % 2 == 1, async_follower_flush=(seed // 5) % 2 == 1,
                   write_behind=(seed // 7) % 2 == 1)
    if raft.async_leader_flush:
        raft = replace(raft, async_flush_min_bytes=(0, 150, 1 << 20)[seed % 3])
    session = rng.choice([600, 1000, 1500])
    settings = SimSettings(broker_session_timeout_ms=session,
                           broker_heartbeat_interval_ms=rng.choice([session // 4, session // 3]),
                           metadata_max_idle_interval_ms=rng.choice([200, 500]),
                           metadata_log_max_record_bytes_between_snapshots=rng.choice([None, 300, 1000, 4000]))
    max_delay = rng.choice([2, 5, 20, 60])
    brokers = BrokerNetworkConfig(min_delay_ms=1, max_delay_ms=max_delay,
                                  drop_probability=rng.choice([0.0, 0.0, 0.02, 0.1]),
                                  request_timeout_ms=2 * max_delay + rng.choice([100, 300]))
    return ControllerSimConfig(raft=raft, settings=settings, brokers=rng.randint(3, 8), broker_network=brokers,
                               racks=rng.choice([2, 3]), admin=True, replication=True,
                               partition_changes_per_result=rng.choice([None, None, 1, 3]),
                               metadata_version=rng.choice([None, None, None, MetadataVersion.IBP_4_0_IV3,
                                                            MetadataVersion.IBP_3_9_IV0]))


def run_seed(seed: int, chaos_ms: int = 3000, settle_ms: int = 10_000,
             trace: Callable[[str], object] | None = None,
             observe: Callable[[ControllerSim], object] | None = None) -> RunResult:
    """One seeded scenario (module doc): chaos for ``chaos_ms``, heal, converge within
    ``settle_ms``, then stop some brokers and check they are fenced in time.  ``observe``
    is handed the simulation before it starts (its counters stay readable if the run fails)."""
    rng = random.Random(seed * 104_729 + 11)
    cfg = random_config(rng, seed)
    csim = ControllerSim(seed, cfg, trace=trace)
    csim.rerun = f"python -m kraft_node.metadata.controller.sim --seeds {seed}:{seed + 1} --trace"
    if observe is not None:
        observe(csim)
    if trace is not None:
        trace(f"seed {seed}: {cfg}")
    c = csim.raft
    sched = csim.scheduler
    ids = list(c.voter_ids)
    stats = {"controller_crashes": 0, "broker_crashes": 0, "zonal_outages": 0}

    def restart_if_dead(nid: int) -> None:
        if not c.nodes[nid].alive:
            c.nodes[nid].start()

    def crash(nid: int) -> None:
        if c.nodes[nid].alive:
            c.crash(nid)
            stats["controller_crashes"] += 1

    def restart_broker(b: SimBroker) -> None:
        if b.state == "down" and b.stopped_at is None:
            b.stats["restarts"] += 1
            b.start()

    def chaos_step() -> None:
        now = sched.now
        if now >= chaos_ms:
            return
        r = rng.random()
        brokers = list(csim.brokers.values())
        if r < 0.06:
            nid = rng.choice(ids)
            crash(nid)
            sched.at(now + rng.randint(50, 1500), partial(restart_if_dead, nid))
        elif r < 0.12:
            act = csim.active()
            if act is not None:  # kill the active controller: the failover path
                crash(act.node_id)
                sched.at(now + rng.randint(50, 1500), partial(restart_if_dead, act.node_id))
        elif r < 0.20:
            if rng.random() < 0.5:
                c.network.isolate(rng.choice(ids), ids)
            else:
                shuffled = ids[:]
                rng.shuffle(shuffled)
                cut = rng.randint(1, len(shuffled))
                c.network.partition([set(shuffled[:cut]), set(shuffled[cut:])])
            sched.at(now + rng.randint(100, 1500), c.network.heal)
        elif r < 0.23:
            for n in c.leaders():
                core = n.core
                if core is not None:
                    core.resign(core.epoch)
                    n.poll()
        elif r < 0.25:
            # The controller gives up (as after an unexpected event error); a sole voter
            # resigns too and elects itself again (test_a_sole_controller_is_active_again_after_renouncing).
            act = csim.active()
            if act is not None:
                act.renounce()
        elif r < 0.27:
            for k in range(rng.randint(2, 4)):
                nid = rng.choice(ids)
                t = now + k * rng.randint(1, 40)
                sched.at(t, partial(crash, nid))
                sched.at(t + rng.randint(1, 30), partial(restart_if_dead, nid))
        elif r < 0.29:
            nid = rng.choice(ids)
            c.shutdown_gracefully(nid, rng.choice([200, 1000]))
            sched.at(now + rng.randint(300, 1500), partial(restart_if_dead, nid))
        elif r < 0.45:
            rng.choice(brokers).pause(rng.randint(50, 2 * csim.session_timeout_ms))
        elif r < 0.53:
            b = rng.choice(brokers)
            if b.state != "down":
                b.crash()
                stats["broker_crashes"] += 1
                # down longer than any request can be in flight: no request of the old process
                # reaches a controller after the new one registered
                sched.at(now + cfg.broker_network.request_timeout_ms + rng.randint(50, 1500),
                         partial(restart_broker, b))
        elif r < 0.57:
            b = rng.choice(brokers)
            if b.state == "running":
                b.shut_down(restart_after_ms=cfg.broker_network.request_timeout_ms + rng.randint(50, 1000))
        elif r < 0.62:
            b = rng.choice(brokers)
            b.isolated_until = now + rng.randint(50, 2 * csim.session_timeout_ms)
        elif r < 0.66 and cfg.racks:
            # A zonal outage: every broker of one rack paused at once, or crashed and later
            # restarted together.
            rack = f"rack-{rng.randrange(cfg.racks)}"
            zone = [b for b in brokers if b.rack == rack]
            stats["zonal_outages"] += 1
            if csim.trace is not None:
                csim.trace(f"t={now:>6} zonal outage of {rack}: brokers {[b.id for b in zone]}")
            if rng.random() < 0.5:
                ms = rng.randint(100, 2 * csim.session_timeout_ms)
                for b in zone:
                    b.pause(ms)
            else:
                back = now + cfg.broker_network.request_timeout_ms + rng.randint(50, 1500)
                for b in zone:
                    if b.state != "down":
                        b.crash()
                        stats["broker_crashes"] += 1
                        sched.at(back, partial(restart_broker, b))
        else:
            rng.choice(brokers).allocate_producer_ids()
        sched.at(now + rng.randint(20, 200), chaos_step)

    admin = csim.admin

    def admin_step() -> None:
        # during the chaos; after it only until the admin has created two topics (a seed whose
        # quorum barely worked under chaos still gets topics for the calm phase to fence)
        if admin is None or (sched.now >= chaos_ms and (admin.stats["topics_created"] >= 2
                                                         or sched.now >= chaos_ms + 4000)):
            return
        csim.quiet = True  # (client-side only)
        admin.act()
        sched.at(sched.now + admin.rng.randint(20, 200), admin_step)

    csim.start_all()
    sched.at(rng.randint(0, 100), chaos_step)
    if admin is not None:
        sched.at(admin.rng.randint(100, 400), admin_step)
    csim.run_until(chaos_ms)

    # Heal: a perfect network, no more faults, every controller and broker up; then the
    # cluster must converge.
    c.network.heal()
    c.network.config = NetworkConfig(min_delay_ms=1, max_delay_ms=5)
    c.sim = replace(c.sim, crash_after_vote_probability=0.0)
    cfg.broker_network = replace(cfg.broker_network, drop_probability=0.0,
                                 max_delay_ms=min(5, cfg.broker_network.max_delay_ms))
    for nid in ids:
        n = c.nodes[nid]
        if not n.alive:
            n.start()
        elif n.shutting_down:
            n.crash()
            n.start()
    for b in csim.brokers.values():
        b.paused_until = 0
        b.isolated_until = 0
        if b.state == "down":
            sched.at(sched.now + cfg.broker_network.request_timeout_ms, partial(restart_broker, b))
        elif b.state in ("running", "shutting_down") and not b.lifecycle.in_flight:
            b._heartbeat()
    deadline = chaos_ms + settle_ms
    while True:
        csim.run_for(50)
        if _converged(csim):
            break
        if sched.now >= deadline:
            _fail_convergence(csim)

    # Calm: stop some brokers; they must be fenced in time, and the others never.
    inv = csim.invariants
    inv.calm_since = sched.now
    brokers = list(csim.brokers.values())
    stopped = rng.sample(brokers, rng.randint(1, max(1, len(brokers) // 2)))
    for b in stopped:
        b.stop()
    inv.expect_fencing_work(stopped)
    for b in brokers:
        if b.stopped_at is None and rng.random() < 0.5:
            b.allocate_producer_ids()
    # Long enough for the active controller (and, should one fail over, its successor from
    # its claim) to fence every stopped broker.
    budget = inv.fence_budget_ms()
    while True:
        csim.run_for(50)
        act = csim.active_sim_controller()
        if act is not None and sched.now > max(inv.calm_since, act.claimed_at) + budget + 50:
            break
        if sched.now > inv.calm_since + 5 * budget:
            inv.fail(f"no controller stayed active for {budget} ms in the calm phase")
    assert act is not None
    lso = act.controller.last_stable_offset
    for b in brokers:
        reg = act.controller.cluster_control.registration(b.id, epoch=lso)
        if b.stopped_at is None and (reg is None or reg.fenced or reg.epoch != b.epoch):
            inv.fail(f"broker {b.id} kept heartbeating, but its registration at the end is {reg}")
        if b.stopped_at is not None and reg is not None and reg.epoch == b.epoch and not reg.fenced:
            inv.fail(f"broker {b.id} stopped at t={b.stopped_at}ms but is not fenced at the end")
    inv.check_fencing_liveness()
    committed = csim.committed_records()
    return RunResult(seed, cfg.raft.voters, len(brokers), sched.events_run, sched.now, len(c.checker.committed),
                     max(c.checker.leader_of_epoch, default=0), stats["controller_crashes"], stats["broker_crashes"],
                     sum(b.stats["registrations"] for b in brokers), sum(b.stats["heartbeats"] for b in brokers),
                     inv.stats["fences_checked"], inv.stats["digests"], inv.stats["writes_checked"],
                     admin.stats["topics_created"] if admin is not None else 0,
                     sum(isinstance(r, m.PartitionChangeRecord) for _, _, r in committed),
                     sum(b.stats["isr_changes"] for b in brokers), inv.stats["partitions_checked"],
                     stats["zonal_outages"])


def _converged(csim: ControllerSim) -> bool:
    """One active controller on the Raft leader, every voter caught up with the leader's log
    (so no Fetch lost before the heal still waits for its timeout), and every broker running,
    registered with its current incarnation and unfenced in the committed state."""
    act = csim.active_sim_controller()
    if act is None or len([sc for sc in csim.live_controllers() if sc.controller.active]) != 1:
        return False
    leader = act.node
    if leader.core is None or not leader.core.is_leader or leader.core.high_watermark != leader.log.end_offset:
        return False
    for nid in csim.raft.voter_ids:
        n = csim.raft.nodes[nid]
        if not n.alive or n.shutting_down or n.core is None or n.log.end_offset != leader.log.end_offset \
                or n.core.high_watermark != leader.core.high_watermark:
            return False
    ctl = act.controller
    lso = ctl.last_stable_offset
    for b in csim.brokers.values():
        if b.state != "running":
            return False
        reg = ctl.cluster_control.registration(b.id, epoch=lso)
        if reg is None or reg.fenced or reg.epoch != b.epoch or reg.incarnation_id != b.incarnation_id:
            return False
    return not _unconverged_partitions(csim, ctl, lso, limit=1)


def _unconverged_partitions(csim: ControllerSim, ctl: QuorumController, lso: int,
                            limit: int = 1 << 30) -> list[str]:
    """Partitions not yet where a healed cluster takes them (every broker running and
    unfenced): each with a usable (unfenced, not shutting down) leader candidate has a
    leader, and with replication modelled, a partition with a leader has all its replicas
    in its ISR and is RECOVERED.

    A candidate is what Kafka's clean election may pick: an ISR member, else an ELR member,
    else the last known leader (KIP-966).  A partition whose ISR emptied and whose ELR a
    min.insync.replicas change then cleared (ClearElrRecord clears the last known leader
    too) has none: Kafka keeps it leaderless rather than elect a replica that may lack
    committed data (only ``unclean.leader.election.enable`` would), and so does this."""
    rc = getattr(ctl, "replication_control", None)
    if rc is None:
        return []
    usable = {b for b, reg in ctl.cluster_control.brokers(epoch=lso).items()
              if not reg.fenced and not reg.in_controlled_shutdown}
    out: list[str] = []
    for name, topic_id in sorted(rc.topics(epoch=lso).items()):
        for pid, part in sorted(rc.partitions(topic_id, epoch=lso).items()):
            if part.leader == NO_LEADER:
                if usable.intersection(part.isr or part.elr or part.last_known_elr):
                    out.append(f"{name}-{pid} has no leader: {part}")
            elif csim.config.replication and (set(part.isr) != set(part.replicas)
                                              or part.leader_recovery_state != LeaderRecoveryState.RECOVERED):
                out.append(f"{name}-{pid} has not recovered its whole ISR: {part}")
            if len(out) >= limit:
                return out
    return out


def _fail_convergence(csim: ControllerSim) -> None:
    act = csim.active_sim_controller()
    brokers = {b.id: (b.state, b.epoch, b.fenced, b.target) for b in csim.brokers.values()}
    regs = None
    if act is not None:
        lso = act.controller.last_stable_offset
        regs = {i: (r.epoch, r.fenced) for i, r in act.controller.cluster_control.brokers(epoch=lso).items()}
    controllers = {sc.node.id: (sc.controller.active, sc.controller.last_stable_offset)
                   for sc in csim.live_controllers()}
    parts = _unconverged_partitions(csim, act.controller, act.controller.last_stable_offset, limit=5) if act else []
    csim.invariants.fail(f"no convergence after healing: active {act.node.id if act else None}, controllers "
                         f"(active, stable offset) {controllers}, brokers (state, epoch, fenced, target) {brokers}, "
                         f"committed registrations (epoch, fenced) {regs}, partitions {parts}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:100", help="start:stop range of seeds")
    ap.add_argument("--chaos-ms", type=int, default=3000)
    ap.add_argument("--trace", action="store_true", help="print role changes, claims, broker events (one seed)")
    ap.add_argument("--log", default="CRITICAL", help="the controllers' log level (e.g. INFO with --trace)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=args.log.upper(), format="%(name)s %(levelname)s %(message)s")
    a, b = (int(x) for x in args.seeds.split(":"))
    failures = []
    events = 0
    for s in range(a, b):
        try:
            r = run_seed(s, args.chaos_ms, trace=print if args.trace else None)
            events += r.events
            if args.trace:
                print(r)
        except Exception as e:  # report every failing seed, keep going
            failures.append({"seed": s, "error": f"{type(e).__name__}: {e}"})
    print(json.dumps({"seeds": b - a, "failures": failures, "events": events}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
