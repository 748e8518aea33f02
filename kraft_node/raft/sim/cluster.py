"""A simulated KRaft quorum: nodes running RaftCore over the seeded network.

A node is a RaftCore plus what survives it: a MemoryRaftLog (whose unflushed
tail a crash drops) and a MemoryQuorumStateStore (durable).  Its listener is
a tiny state machine, the ordered list of committed records, which can write
and load snapshots.  A client appends records on whichever node leads, and an
append counts as *acknowledged* when that node's own listener receives it
committed in the epoch it was appended in.
"""
from __future__ import annotations

import random
import struct
import uuid
from dataclasses import dataclass, field, replace
from typing import Iterable

from kraft_node.raft.api import SnapshotReader
from kraft_node.raft.client import RaftCore
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.errors import BufferFullError, NotLeaderError
from kraft_node.raft.flush import CoreOptions, InlineFlush, JobFlush
from kraft_node.raft.log import MemoryRaftLog
from kraft_node.raft.messages import (
    Batch,
    FetchRequest,
    LeaderAndEpoch,
    OffsetAndEpoch,
    OutboundRequest,
    ReplicaKey,
    VoteRequest,
)
from kraft_node.raft.quorum_state import MemoryQuorumStateStore
from kraft_node.raft.sim.invariants import InvariantChecker, SafetyViolation
from kraft_node.raft.sim.network import Envelope, EventScheduler, Network, NetworkConfig
from kraft_node.raft.snapshot import data_frame
from kraft_node.raft.voters import FramedSnapshotControl, VoterSet

#: Node id of the simulated admin client (kraft-metadata-quorum add/remove-controller).
ADMIN_ID = 0


#: Records per data batch of a simulator snapshot: several batches even for short logs, so
#: every load walks the reader across batch boundaries.
SNAPSHOT_BATCH_RECORDS = 16
_EPOCH = struct.Struct(">i")


def snapshot_batches(entries: list[tuple[int, bytes]]) -> list[list[bytes]]:
    """The state machine's snapshot records, batched: each is ``epoch:i32`` + the record."""
    recs = [_EPOCH.pack(e) + r for e, r in entries]
    return [recs[i:i + SNAPSHOT_BATCH_RECORDS] for i in range(0, len(recs), SNAPSHOT_BATCH_RECORDS)]


def encode_snapshot(entries: list[tuple[int, bytes]]) -> bytes:
    """The data frames of a whole snapshot (``RaftCore.create_snapshot(id, data)``'s form)."""
    return b"".join(data_frame(b) for b in snapshot_batches(entries))


def decode_snapshot(batches: Iterable[Batch]) -> list[tuple[int, bytes]]:
    """The entries a snapshot reader's batches hold, in order."""
    return [(_EPOCH.unpack_from(r)[0], r[4:]) for b in batches for r in b.records]


class SimSnapshotControl(FramedSnapshotControl):
    """The simulator's dynamic quorums: framed snapshots with kraft.version and the voter set
    as control frames at the head (as Kafka's snapshots carry KRaftVersion/Voters records)."""

    def __init__(self) -> None:
        super().__init__(carry_control=True)


class StateMachine:
    """The listener: committed (epoch, record) pairs from offset 0, in order."""

    def __init__(self, node: "SimNode"):
        self.node = node
        self.entries: list[tuple[int, bytes]] = []
        self.leader_changes: list[LeaderAndEpoch] = []
        self.snapshots_loaded = 0

    def handle_commit(self, batches: tuple[Batch, ...]) -> None:
        for b in batches:
            if b.base_offset != len(self.entries):
                raise AssertionError(f"node {self.node.id}: commit at {b.base_offset}, expected "
                                     f"{len(self.entries)}")
            for i, r in enumerate(b.records):
                self.entries.append((b.epoch, r))
                self.node.cluster.on_committed(self.node, b.base_offset + i, b.epoch, r)

    def handle_load_snapshot(self, reader: SnapshotReader) -> None:
        snapshot_id = reader.snapshot_id
        entries = decode_snapshot(reader)
        if len(entries) != snapshot_id.offset:
            raise AssertionError(f"node {self.node.id}: snapshot {snapshot_id} holds {len(entries)} records")
        self.entries = entries
        self.snapshots_loaded += 1
        self.node.cluster.checker.on_snapshot_loaded(self.node)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader_changes.append(leader)


@dataclass
class PendingAppend:
    node_id: int
    incarnation: int
    epoch: int
    offset: int
    record: bytes


class SimNode:
    def __init__(self, cluster: "Cluster", node_id: int, key: ReplicaKey):
        self.cluster = cluster
        self.id = node_id
        self.key = key
        self.log = MemoryRaftLog()
        if cluster.sim.dynamic:
            # kraft-storage format --initial-controllers: the (0, 0) bootstrap snapshot.
            codec = SimSnapshotControl()
            self.log.create_snapshot(OffsetAndEpoch(0, 0), codec.write(encode_snapshot([]), 1,
                                                                       VoterSet.of(cluster.voter_keys)))
        self.store = MemoryQuorumStateStore()
        self.alive = False
        self.incarnation = 0
        self.core: RaftCore | None = None
        self.sm: StateMachine | None = None
        self._wake_gen = 0
        self.shutting_down = False

    def start(self) -> None:
        c = self.cluster
        self.incarnation += 1
        self.alive = True
        self.shutting_down = False
        cfg = c.config
        if c.sim.dynamic and self.id in c.auto_join_ids:
            cfg = replace(cfg, auto_join_enable=True)
        self.log.write_behind = c.sim.write_behind
        log = self.log
        if c.sim.async_leader_flush or c.sim.async_follower_flush:
            # Jobs as the TCP driver runs them; the in-line threshold without its rate rule
            # (io.flush.RateFlush): which flushes leave the loop is tuning, any mix is safe.
            flush = JobFlush(leader_jobs=c.sim.async_leader_flush, follower_jobs=c.sim.async_follower_flush,
                             min_bytes=c.sim.async_flush_min_bytes, held_back=lambda: log.pending_writes)
        else:
            flush = InlineFlush()
        self.core = RaftCore(cfg, self.key, [] if c.sim.dynamic else c.voter_keys, self.log, self.store,
                             random.Random(c.rng.getrandbits(64)), cluster_id=c.cluster_id,
                             snapshot_control=SimSnapshotControl() if c.sim.dynamic else None,
                             bootstrap_ids=tuple(c.voter_ids) if c.sim.dynamic else (),
                             options=CoreOptions(flush=flush, defer_listeners=c.sim.defer_listeners))
        self.held: dict[int, list] = {}  # id(flush job) -> requests waiting for it (after_flush)
        self.sm = StateMachine(self)
        self.core.register_listener(self.sm)
        self.core.initialize(c.scheduler.now)
        c.checker.on_start(self)
        for hook in c.start_hooks:  # state machines built on the node (the controller simulation)
            hook(self)
        self.poll()

    def crash(self) -> None:
        """Kill the process: unflushed log data is lost, the quorum-state store survives."""
        if not self.alive:
            return
        self.alive = False
        self._wake_gen += 1
        self.log = self.log.after_crash()
        self.core = None
        self.sm = None
        self.cluster.checker.on_crash(self)
        for hook in self.cluster.crash_hooks:
            hook(self)

    def poll(self) -> None:
        if not self.alive:
            return
        c = self.cluster
        now = c.scheduler.now
        ready = self.core.poll(now)
        for m in ready.messages:
            if isinstance(m, OutboundRequest) and m.after_flush is not None:
                self.held.setdefault(id(m.after_flush), []).append(m)  # sent once the job lands
                continue
            self._send(m)
        if self.core.options.defer_listeners:  # as the TCP driver does: listeners after the sends
            self.core.poll_listeners()
        # Write-behind (as the TCP driver): this poll's answers are out, the held-back batches go
        self.log.write_pending()
        for job in ready.flush_jobs:
            inc = self.incarnation
            c.scheduler.at(now + c.rng.randint(0, 3), lambda job=job, inc=inc: self._flush_done(job, inc))
        if ready.shutdown_complete and self.shutting_down:
            c.on_shutdown_complete(self)
            return
        self._wake_gen += 1
        gen = self._wake_gen
        c.scheduler.at(ready.next_wakeup_ms, lambda: self._wake(gen))

    def _send(self, m) -> None:
        c = self.cluster
        if isinstance(m, OutboundRequest) and isinstance(m.request, FetchRequest) and self.alive \
                and (self.core.quorum.is_voter or c.sim.dynamic) \
                and m.request.fetch_offset > self.log.flushed_end_offset:
            # RaftCore rule 2: the leader counts a voter's fetch offset as durable.
            raise SafetyViolation(f"node {self.id}: a Fetch reports offset {m.request.fetch_offset} "
                                  f"beyond its durable end {self.log.flushed_end_offset}")
        kind = "request" if isinstance(m, OutboundRequest) else "response"
        payload = m.request if kind == "request" else m.response
        inc = 0 if m.destination == ADMIN_ID else c.nodes[m.destination].incarnation
        c.network.send(Envelope(self.id, m.destination, inc, kind, m.correlation_id, payload))

    def _flush_done(self, job, incarnation: int) -> None:
        if not self.alive or incarnation != self.incarnation:
            return  # the process died with the fsync in flight: after_crash() dropped that data
        job.run()
        durable = self.core.handle_flush_done(job, self.cluster.scheduler.now)
        held = self.held.pop(id(job), [])
        if durable:  # else dropped, as the TCP driver does: the core retries after a timeout
            for m in held:
                self._send(m)
        self.poll()

    def _wake(self, gen: int) -> None:
        if gen == self._wake_gen and self.alive:
            self.poll()

    def deliver(self, env: Envelope) -> None:
        if not self.alive or env.dest_incarnation != self.incarnation:
            return
        now = self.cluster.scheduler.now
        if env.kind == "request":
            self.core.handle_request(env.source, env.correlation_id, env.payload, now)
        else:
            self.core.handle_response(env.source, env.correlation_id, env.payload, now)
        self.poll()
        c = self.cluster
        if env.kind == "request" and isinstance(env.payload, VoteRequest) and not env.payload.pre_vote \
                and c.sim.crash_after_vote_probability and c.rng.random() < c.sim.crash_after_vote_probability:
            # Targeted fault: die right after answering a vote, then come back fast,
            # while the candidates of that epoch are still canvassing.
            self.crash()
            c.scheduler.at(now + c.rng.randint(1, 20), lambda: None if self.alive else self.start())


@dataclass
class SimConfig:
    voters: int = 3
    observers: int = 0
    quorum: QuorumConfig = field(default_factory=lambda: QuorumConfig(fetch_snapshot_max_bytes=512))
    network: NetworkConfig = field(default_factory=NetworkConfig)
    #: Directory ids on voter keys (KIP-853); exercises the voter-key checks.
    with_directory_ids: bool = True
    #: Chance that a voter crashes (and restarts within 20 ms) right after answering a Vote.
    crash_after_vote_probability: float = 0.0
    #: KIP-853 dynamic quorum: the voters come from a bootstrap snapshot (kraft.version 1)
    #: and the chaos adds and removes voters.
    dynamic: bool = False
    #: Observers that run with controller.quorum.auto.join.enable (dynamic only).
    auto_join: int = 0
    #: Leaders flush through ``Ready.flush_jobs`` (as the TCP driver does, on a thread),
    #: each completing 0-3 virtual ms later unless a crash loses it first.
    async_leader_flush: bool = False
    #: With async_leader_flush: smaller flushes run in line (flush.JobFlush.min_bytes).
    async_flush_min_bytes: int = 0
    #: Listeners are delivered after the poll's messages are sent (CoreOptions.defer_listeners).
    defer_listeners: bool = False
    #: Followers flush through ``Ready.flush_jobs`` too, their next Fetch held until the
    #: job lands (JobFlush.follower_jobs; the TCP driver's follower_flush="aio").
    async_follower_flush: bool = False
    #: Logs hold a leader's appends back until its next poll (KafkaRaftLog's write-behind),
    #: so the flush policy's write-behind deferral (NEXT_POLL) runs under the chaos too.
    write_behind: bool = False


class Cluster:
    def __init__(self, seed: int, sim: SimConfig):
        self.seed = seed
        self.rng = random.Random(seed)
        self.sim = sim
        self.config = sim.quorum
        self.cluster_id = "sim-cluster"
        self.scheduler = EventScheduler()
        self.network = Network(self.scheduler, random.Random(self.rng.getrandbits(64)), sim.network,
                               self._deliver)
        ids = list(range(1, sim.voters + sim.observers + 1))
        keys = {}
        for i in ids:
            d = uuid.UUID(int=self.rng.getrandbits(128)) if sim.with_directory_ids else None
            keys[i] = ReplicaKey(i, d)
        self.voter_ids = ids[:sim.voters]
        self.observer_ids = ids[sim.voters:]
        self.voter_keys = [keys[i] for i in self.voter_ids]
        self.keys = keys
        self.auto_join_ids = set(self.observer_ids[:sim.auto_join])
        self.admin_responses: list[tuple[int, object]] = []
        self._admin_corr = 0
        self.checker = InvariantChecker(self)
        #: called with a node after its core is initialized (before its first poll) / after it crashed
        self.start_hooks: list = []
        self.crash_hooks: list = []
        self.nodes = {i: SimNode(self, i, keys[i]) for i in ids}
        self.pending: list[PendingAppend] = []
        self.acked: list[PendingAppend] = []
        self._append_seq = 0
        self.append_attempts = 0

    # ---- lifecycle
    def start_all(self) -> None:
        for n in self.nodes.values():
            n.start()
        self.checker.check()

    def _deliver(self, env: Envelope) -> None:
        if env.destination == ADMIN_ID:
            self.admin_responses.append((env.source, env.payload))
            return
        self.nodes[env.destination].deliver(env)

    # ---- admin client (AddRaftVoter / RemoveRaftVoter over the faulty network)
    def admin_send(self, node_id: int, request) -> None:
        self._admin_corr += 1
        n = self.nodes[node_id]
        self.network.send(Envelope(ADMIN_ID, node_id, n.incarnation, "request", self._admin_corr, request))

    def run_until(self, end_ms: int) -> None:
        self.scheduler.run_until(end_ms, self.checker.check)

    def run_for(self, ms: int) -> None:
        self.run_until(self.scheduler.now + ms)

    def crash(self, node_id: int) -> None:
        self.nodes[node_id].crash()

    def restart(self, node_id: int) -> None:
        n = self.nodes[node_id]
        if n.alive:
            n.crash()
        n.start()

    def shutdown_gracefully(self, node_id: int, timeout_ms: int = 5000) -> None:
        n = self.nodes[node_id]
        if not n.alive or n.shutting_down:
            return
        n.shutting_down = True
        n.core.begin_shutdown(timeout_ms, self.scheduler.now)
        n.poll()

    def on_shutdown_complete(self, node: SimNode) -> None:
        node.log.flush()  # a clean close flushes
        node.crash()

    # ---- clients
    def leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive and n.core.is_leader]

    def client_append(self, count: int = 1) -> bool:
        """Append ``count`` records on the current leader (the one with the highest epoch)."""
        leaders = self.leaders()
        if not leaders:
            return False
        n = max(leaders, key=lambda x: x.core.epoch)
        if n.shutting_down:
            return False
        recs = []
        for _ in range(count):
            self._append_seq += 1
            recs.append(f"r{self._append_seq}@{n.id}".encode())
        self.append_attempts += 1
        try:
            last = n.core.append(recs, n.core.epoch, self.scheduler.now, atomic=self.rng.random() < 0.5)
        except (BufferFullError, NotLeaderError):
            return False
        first = last - len(recs) + 1
        for i, r in enumerate(recs):
            self.pending.append(PendingAppend(n.id, n.incarnation, n.core.epoch, first + i, r))
        n.poll()
        return True

    def on_committed(self, node: SimNode, offset: int, epoch: int, record: bytes) -> None:
        """Called by a node's listener: acknowledge the matching pending append, if any."""
        if not self.pending:
            return
        keep = []
        for p in self.pending:
            if p.node_id == node.id and p.offset == offset:
                if p.incarnation == node.incarnation and p.epoch == epoch and p.record == record:
                    self.acked.append(p)
                    self.checker.on_ack(p)
                # a different record committed at that offset: the append failed (never acked)
                continue
            keep.append(p)
        self.pending = keep

    def maybe_snapshot(self, node_id: int) -> bool:
        n = self.nodes[node_id]
        if not n.alive:
            return False
        sm, core = n.sm, n.core
        off = len(sm.entries)
        latest = n.log.latest_snapshot_id()
        if off == 0 or (latest is not None and latest.offset >= off) or off <= n.log.start_offset:
            return False
        if core.high_watermark is None or off > core.high_watermark:
            return False
        self.checker.check()  # record the log below the HWM before the snapshot drops it
        sid = OffsetAndEpoch(off, sm.entries[-1][0])
        if off % 2:  # both forms of Kafka's createSnapshot: streamed batches, or whole bytes
            w = core.create_snapshot(sid)
            assert w is not None
            for records in snapshot_batches(sm.entries):
                w.append(records)
            w.freeze()
        else:
            core.create_snapshot(sid, encode_snapshot(sm.entries))
        self.checker.on_snapshot_created(n)
        return True
