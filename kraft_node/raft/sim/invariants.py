"""Safety invariants checked after every simulator event.

* **single leader per epoch**: no two nodes are ever Leader (or Resigned, a
  leader that gave up) of the same epoch, across restarts.
* **committed prefixes agree**: every node's log below its high watermark
  matches one global committed log (built from whichever node knew first).
* **monotonic high watermark**: a node's HWM never goes back within one
  incarnation; a voter's never goes back even across restarts (its log is
  flushed before it reports offsets, so a restart cannot lose committed data).
* **no committed record lost**: a new leader's log holds the whole global
  committed log, and every listener saw exactly the committed records.
* **acknowledged means committed**: every acknowledged append is in the
  global committed log at its offset, with its epoch.
* **single-member voter changes** (KIP-853): along the committed log, every
  VotersRecord differs from the voter set before it by at most one voter key.
* **voter set follows the log**: a node's voter-set history never names an
  offset at or past its log end (a truncation must revert it); after healing,
  every node's voter set in effect is the committed one.
* **leaders are voters**: a node becomes leader only while it is a voter (or, having
  removed itself by a not yet committed VotersRecord, a voter of the set before it).

The checks are incremental (each offset is compared once per node
incarnation) so they can run after every event.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from kraft_node.raft.messages import VotersControl
from kraft_node.raft.roles import LeaderState, ResignedState
from kraft_node.raft.voters import VoterSet

if TYPE_CHECKING:
    from kraft_node.raft.client import RaftCore
    from kraft_node.raft.sim.cluster import Cluster, PendingAppend, SimNode, StateMachine


def _core(n: SimNode) -> RaftCore:
    """The core of a node that is alive (a crashed node has none)."""
    core = n.core
    assert core is not None, f"node {n.id} is not running"
    return core


def _sm(n: SimNode) -> StateMachine:
    """The listener of a node that is alive."""
    sm = n.sm
    assert sm is not None, f"node {n.id} is not running"
    return sm


class SafetyViolation(AssertionError):
    pass


class InvariantChecker:
    def __init__(self, cluster: "Cluster"):
        self.cluster = cluster
        self.leader_of_epoch: dict[int, int] = {}
        self.committed: list[tuple[int, bytes]] = []
        self.max_voter_hwm: dict[int, int] = {}
        self.inc_hwm: dict[tuple[int, int], int] = {}
        self.log_checked: dict[tuple[int, int], int] = {}
        self.sm_checked: dict[tuple[int, int], int] = {}
        self.leader_verified: set[tuple[int, int]] = set()
        self.unverified_acks: list["PendingAppend"] = []
        #: Committed voter sets in log order, from the bootstrap set (dynamic quorums).
        self.committed_voter_sets: list[tuple[int, VoterSet]] = [(-1, VoterSet.of(cluster.voter_keys))]
        self.checks = 0
        #: When set (e.g. ``print``), every role change is reported: a replay aid.
        self.trace: Callable[[str], object] | None = None
        self._last_role: dict[int, tuple[int, str, int, int]] = {}

    def fail(self, msg: str) -> None:
        c = self.cluster
        raise SafetyViolation(f"seed={c.seed} t={c.scheduler.now}ms: {msg}")

    # ---- hooks
    def on_start(self, node: "SimNode") -> None:
        pass

    def on_crash(self, node: "SimNode") -> None:
        pass

    def on_snapshot_loaded(self, node: "SimNode") -> None:
        self.sm_checked[(node.id, node.incarnation)] = 0

    def on_snapshot_created(self, node: "SimNode") -> None:
        pass

    def on_ack(self, p: "PendingAppend") -> None:
        self.unverified_acks.append(p)

    # ---- the checks
    def check(self) -> None:
        self.checks += 1
        committed = self.committed
        for n in self.cluster.nodes.values():
            if not n.alive:
                continue
            core = n.core
            assert core is not None  # (alive)
            st = core.state
            key = (n.id, n.incarnation)
            if self.trace is not None:
                role = (n.incarnation, st.name, st.epoch, core.leader_id)
                if self._last_role.get(n.id) != role:
                    self._last_role[n.id] = role
                    self.trace(f"t={self.cluster.scheduler.now:>6} node {n.id} (inc {n.incarnation}) "
                               f"{st.name} epoch={st.epoch} leader={core.leader_id} "
                               f"end={n.log.end_offset} hwm={core.high_watermark}")
            if isinstance(st, (LeaderState, ResignedState)):
                prev = self.leader_of_epoch.setdefault(st.epoch, n.id)
                if prev != n.id:
                    self.fail(f"two leaders in epoch {st.epoch}: {prev} and {n.id}")
                if isinstance(st, LeaderState) and (n.id, st.epoch) not in self.leader_verified:
                    self.leader_verified.add((n.id, st.epoch))
                    self._verify_leader_log(n)
            last_change = core.control.last_voter_set_offset()
            if last_change is not None and last_change >= n.log.end_offset:
                self.fail(f"node {n.id} voter set history names offset {last_change} past its log end "
                          f"{n.log.end_offset}")
            hwm = core.high_watermark
            if hwm is not None:
                if hwm < self.inc_hwm.get(key, -1):
                    self.fail(f"node {n.id} high watermark went back {self.inc_hwm[key]} -> {hwm}")
                self.inc_hwm[key] = hwm
                if not core.quorum.is_voter:
                    self.max_voter_hwm.pop(n.id, None)  # observers do not flush in static quorums
                else:
                    if hwm < self.max_voter_hwm.get(n.id, -1):
                        self.fail(f"voter {n.id} high watermark went back across restarts "
                                  f"{self.max_voter_hwm[n.id]} -> {hwm}")
                    self.max_voter_hwm[n.id] = hwm
                if hwm > n.log.end_offset:
                    self.fail(f"node {n.id} high watermark {hwm} beyond its log end {n.log.end_offset}")
                off = max(self.log_checked.get(key, 0), n.log.start_offset)
                while off < hwm and off <= len(committed):
                    entry = n.log.entry_at(off)
                    if off == len(committed):
                        committed.append(entry)
                        b = n.log.batch_at(off)
                        if b.is_control and isinstance(b.control, VotersControl):
                            self._on_committed_voters(off, VoterSet.of(b.control.voters))
                    elif committed[off] != entry:
                        self.fail(f"node {n.id} committed offset {off} = {entry}, but {committed[off]} "
                                  f"was committed before")
                    off += 1
                self.log_checked[key] = off
            sm = n.sm
            assert sm is not None  # (alive)
            done = self.sm_checked.get(key, 0)
            ents = sm.entries
            lim = min(len(ents), len(committed))
            for off in range(done, lim):
                if ents[off] != committed[off]:
                    self.fail(f"node {n.id} listener got {ents[off]} at offset {off}, committed is "
                              f"{committed[off]}")
            self.sm_checked[key] = max(done, lim)
            if len(ents) > (hwm if hwm is not None else 0) and len(ents) > n.log.start_offset \
                    and len(ents) > len(committed):
                self.fail(f"node {n.id} listener is at {len(ents)}, beyond the committed log")
        if self.unverified_acks:
            keep = []
            for p in self.unverified_acks:
                if p.offset >= len(committed):
                    keep.append(p)
                elif committed[p.offset] != (p.epoch, p.record):
                    self.fail(f"acknowledged append {p} is not committed (found {committed[p.offset]})")
            self.unverified_acks = keep

    def _on_committed_voters(self, offset: int, voters: VoterSet) -> None:
        prev_off, prev = self.committed_voter_sets[-1]
        if not voters.is_single_change_from(prev):
            self.fail(f"committed voter set at {offset} {sorted(voters.ids)} is more than one change from "
                      f"{sorted(prev.ids)} (at {prev_off})")
        self.committed_voter_sets.append((offset, voters))

    def _verify_leader_log(self, n: "SimNode") -> None:
        core = _core(n)
        if not core.quorum.can_stand:
            self.fail(f"node {n.id} became leader of epoch {core.epoch} without being a voter")
        committed = self.committed
        log = n.log
        if log.end_offset < len(committed):
            self.fail(f"new leader {n.id} (epoch {core.epoch}) log ends at {log.end_offset}, "
                      f"but {len(committed)} records are committed")
        for off in range(log.start_offset, len(committed)):
            if log.entry_at(off) != committed[off]:
                self.fail(f"new leader {n.id} has {log.entry_at(off)} at committed offset {off}, "
                          f"expected {committed[off]}")

    def final_check(self) -> None:
        """After healing: one leader, everyone caught up, every ack verified."""
        self.check()
        if self.unverified_acks:
            self.fail(f"{len(self.unverified_acks)} acknowledged appends never became visible as committed")
        alive = [n for n in self.cluster.nodes.values() if n.alive]
        leaders = [n for n in alive if isinstance(_core(n).state, LeaderState)]
        if len(leaders) != 1:
            self.fail(f"after healing expected one leader, found {[n.id for n in leaders]} "
                      f"(roles { {n.id: repr(_core(n).state) for n in alive} })")
        leader = leaders[0]
        hwm = _core(leader).high_watermark
        if hwm is None or hwm != leader.log.end_offset:
            self.fail(f"leader {leader.id} did not commit its log: hwm {hwm}, end {leader.log.end_offset}")
        for n in alive:
            if _core(n).leader_id != leader.id or _core(n).epoch != _core(leader).epoch:
                self.fail(f"node {n.id} does not follow leader {leader.id}: {_core(n).state!r}")
            if _core(n).high_watermark != hwm or n.log.end_offset != leader.log.end_offset:
                self.fail(f"node {n.id} not caught up: hwm {_core(n).high_watermark} end {n.log.end_offset}, "
                          f"leader hwm {hwm} end {leader.log.end_offset}")
            if len(_sm(n).entries) != hwm:
                self.fail(f"node {n.id} listener at {len(_sm(n).entries)}, expected {hwm}")
            committed_set = self.committed_voter_sets[-1][1]
            if self.cluster.sim.dynamic and _core(n).voter_set.key_set() != committed_set.key_set():
                self.fail(f"node {n.id} voter set {sorted(_core(n).voter_set.ids)} is not the committed "
                          f"{sorted(committed_set.ids)}")
