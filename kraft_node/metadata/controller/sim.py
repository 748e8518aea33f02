"""The controller in the deterministic simulator: QuorumControllers on the Raft simulator.

Each simulated node (``kraft_node.raft.sim``: RaftCore, MemoryRaftLog, seeded network,
virtual clock, crashes that lose unflushed data) gets a :class:`QuorumController` whose
event queue runs on the simulator's scheduler and whose Raft client is the node's core.
A crash discards the controller with the core; a restart builds a new one that replays the
log, exactly as a process restart does.

Simulated brokers (:class:`SimBroker`) talk to whichever controller they believe is active
through the controller's public API, with the simulator's delays and losses; they register,
heartbeat, pause and crash.  :class:`ControllerInvariants` checks after every simulator
event:

* every controller's state at a stable offset serializes to the same records as every other
  controller's at that offset (compared by digest as offsets become stable);
* no write is answered before its records are committed (below the high watermark);
* a standby holds nothing uncommitted, and a renounced controller's state equals its
  committed state;
* a broker that stopped heartbeating is fenced within the session timeout plus one fencing
  period of the later of its last heartbeat and the active controller's claim, and no broker
  is fenced by a controller that heard from it within the session timeout.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.raft.messages import LeaderAndEpoch
from kraft_node.raft.sim.cluster import Cluster, SimConfig, SimNode
from kraft_node.raft.sim.invariants import SafetyViolation

NS_PER_MS = 1_000_000


class _SimRaft:
    """The controller's Raft client on a simulated node: the node's core, with a poll
    scheduled after each append (never from inside a poll)."""

    def __init__(self, node: SimNode):
        self.node = node
        self.incarnation = node.incarnation
        self._poll_pending = False

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
        last = int(self.core.append(list(records), epoch, n.cluster.scheduler.now, atomic))
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


class SimController:
    """One node incarnation's controller, its queue run on the simulator's clock."""

    def __init__(self, csim: "ControllerSim", node: SimNode):
        self.csim = csim
        self.node = node
        self.incarnation = node.incarnation
        sched = node.cluster.scheduler
        self._run_at: int | None = None
        self.queue = EventQueue(clock_ns=lambda: sched.now * NS_PER_MS, on_ready=self._kick,
                                name=f"controller-{node.id}")
        self.raft = _SimRaft(node)
        self.controller = QuorumController(
            node_id=node.id, cluster_id=node.cluster.cluster_id, raft=self.raft, queue=self.queue,
            clock_ms=lambda: sched.now, bootstrap=csim.bootstrap, settings=csim.settings,
            fatal_fault_handler=self._fatal, managers=csim.install_managers)
        csim.on_controller_created(self)

    @property
    def alive(self) -> bool:
        return self.node.alive and self.node.incarnation == self.incarnation

    def _fatal(self, message: str, exc: BaseException | None) -> BaseException:
        err = SafetyViolation(f"controller {self.node.id}: fatal fault: {message}: {exc!r}")
        self.csim.faults.append(err)
        return err

    def _kick(self) -> None:
        self._arm(self.node.cluster.scheduler.now)

    def _arm(self, at_ms: int) -> None:
        if self._run_at is not None and self._run_at <= at_ms:
            return
        self._run_at = at_ms
        self.node.cluster.scheduler.at(at_ms, lambda: self._run(at_ms))

    def _run(self, at_ms: int) -> None:
        if self._run_at != at_ms:
            return  # superseded by an earlier arm
        self._run_at = None
        if not self.alive:
            return
        self.queue.run_ready()
        nxt = self.queue.next_deadline_ns()
        if nxt is not None:
            now = self.node.cluster.scheduler.now
            self._arm(max(now, -(-nxt // NS_PER_MS)))


@dataclass
class ControllerSimConfig:
    raft: SimConfig = field(default_factory=SimConfig)
    settings: Any = None


class ControllerSim:
    """A Raft simulator cluster whose nodes run controllers (see the module doc)."""

    def __init__(self, seed: int, config: ControllerSimConfig | None = None, *,
                 bootstrap: BootstrapMetadata,
                 install_managers: Callable[[QuorumController], None] | None = None):
        self.config = config or ControllerSimConfig()
        self.bootstrap = bootstrap
        self.settings = self.config.settings
        self.install_managers = install_managers
        self.raft = Cluster(seed, self.config.raft)
        self.faults: list[BaseException] = []
        self.controllers: dict[int, SimController] = {}
        self.created_hooks: list[Callable[[SimController], None]] = []
        self.raft.start_hooks.append(self._node_started)

    def _node_started(self, node: SimNode) -> None:
        if node.id in self.raft.voter_ids:
            self.controllers[node.id] = SimController(self, node)

    def on_controller_created(self, sc: SimController) -> None:
        for hook in self.created_hooks:
            hook(sc)

    @property
    def scheduler(self) -> Any:
        return self.raft.scheduler

    def start_all(self) -> None:
        self.raft.start_all()

    def run_for(self, ms: int) -> None:
        self.raft.run_for(ms)
        if self.faults:
            raise self.faults[0]

    def live(self) -> list[QuorumController]:
        return [sc.controller for sc in self.controllers.values() if sc.alive]

    def active(self) -> QuorumController | None:
        act = [c for c in self.live() if c.active]
        return max(act, key=lambda c: c.claim_epoch) if act else None


def state_digest(controller: QuorumController, epoch: int) -> str:
    """A digest of the controller's records at registry ``epoch`` (sorted, so map order does
    not matter): equal digests mean equal states."""
    h = hashlib.sha256()
    for value in sorted(controller.snapshot_values(epoch)):
        h.update(len(value).to_bytes(4, "big"))
        h.update(value)
    return h.hexdigest()
