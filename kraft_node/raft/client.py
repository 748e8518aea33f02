"""RaftCore: the deterministic KRaft consensus state machine (Kafka's KafkaRaftClient, minus I/O).

Why a core without I/O: the same object must run under a TCP driver and under
a seeded simulator that replays a failure exactly.  So the core owns no
thread, socket, clock or entropy.  Everything comes in through four calls:

* :meth:`RaftCore.handle_request` / :meth:`RaftCore.handle_response`: an
  inbound message, with the current time;
* :meth:`RaftCore.append` (state-machine appends on the leader),
  :meth:`RaftCore.create_snapshot`, :meth:`RaftCore.resign`,
  :meth:`RaftCore.begin_shutdown`;
* :meth:`RaftCore.poll`: "time is now ``now_ms``; do what is due".

and everything goes out through :class:`Ready` (returned by ``poll``):
outbound requests and responses, the quorum-state writes performed, and the
absolute time of the next wake-up.  Listener callbacks are invoked inside
``poll``, on the caller's thread, in offset order.

Ordering rules the driver can rely on (the core enforces them itself, because
the log and the quorum-state store are injected and called synchronously):

1. A quorum-state change is written to the store, durably, *before* the core
   queues any message that depends on it (a granted vote, a Vote request of a
   new epoch, a BeginQuorumEpoch).  So ``Ready.messages`` may be sent at once,
   except a request with ``after_flush`` set (rule 2).
2. Followers (voters) flush each fetched append before the next Fetch
   reports the new end offset, so the leader only counts durable data.  When the
   flush policy's ``follower_jobs`` is set the fsync is a job in ``Ready.flush_jobs`` and the
   Fetch that reports its end offset is an ``OutboundRequest`` whose
   ``after_flush`` is that job: the driver may build and encode it while the
   fsync runs, and must not put it on the wire before the job completed with
   ``handle_flush_done`` returning True (it drops it otherwise).
3. The leader flushes drained batches before counting its own end offset
   towards the high watermark.
4. Only records below the high watermark are delivered to listeners.

Only one Fetch (or FetchSnapshot) is in flight to the leader at a time: the
request manager allows one outstanding request per destination, and responses
whose correlation id is not the outstanding one are dropped.  This is what
stops a follower appending the same offsets twice.

The network may lose, delay, duplicate and reorder messages; the core never
assumes a response will come (requests time out after request.timeout.ms).

Layout (Kafka's KafkaRaftClient, split at its seams): this module keeps the roles,
elections, the follower's side of Fetch/FetchSnapshot, the per-role polls and the
dispatch; the leader's Fetch serving (fetch_serving.py), the voter changes
(voter_changes.py) and listener delivery (listeners.py) are parts of ``RaftCore``
it inherits; the request manager is requests.py; ``RaftListener`` and ``Ready``
are in api.py.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Callable, Sequence

from kraft_node.raft.accumulator import BatchAccumulator
from kraft_node.raft.api import RaftListener, Ready
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.errors import Errors, InvariantViolation, NotLeaderError, RaftError
from kraft_node.raft.fetch_serving import LeaderFetchServing
from kraft_node.raft.flush import CoreOptions, LeaderFlush
from kraft_node.raft.listeners import ListenerContext, ListenerDelivery
from kraft_node.raft.log import FlushJob, RaftLog, RawSnapshotSink
from kraft_node.raft.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    Batch,
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    ControlMessage,
    Endpoint,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    KRaftVersionControl,
    LeaderChangeMessage,
    LeaderIdAndEpoch,
    OffsetAndEpoch,
    Outbound,
    OutboundRequest,
    OutboundResponse,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    ReplicaKey,
    Request,
    Response,
    SnapshotId,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoteRequest,
    VoteResponse,
    VotersControl,
)
from kraft_node.raft.quorum_state import QuorumState, QuorumStateStore
from kraft_node.raft.requests import NEVER, RequestManager
from kraft_node.raft.roles import (
    CandidateState,
    ElectionState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    Role,
    UnattachedState,
)
from kraft_node.raft.voter_changes import VoterChange, VoterChanges
from kraft_node.raft.voters import (
    ControlRecordStateMachine,
    NoSnapshotControl,
    SnapshotControlCodec,
    SnapshotRecordsWriter,
    VoterSet,
)

#: Base of the election backoffs (Kafka's RETRY_BACKOFF_BASE_MS).
RETRY_BACKOFF_BASE_MS = 100


def binary_exponential_backoff(retries: int, rng: random.Random, max_ms: int) -> int:
    """A candidate's backoff after losing ``retries`` elections (Kafka's
    ``binaryExponentialElectionBackoffMs``): random in {0, 100, ..., 100 * (2**retries - 1)} ms,
    capped at ``election.backoff.max.ms``."""
    retries = max(1, retries)
    return min(RETRY_BACKOFF_BASE_MS * rng.randrange(2 << min(20, retries - 1)), max_ms)
NONE = Errors.NONE


def error_name_of(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return str(code)





class _RecordingStore:
    """Wraps the injected store so each write is also reported in Ready."""

    def __init__(self, inner: QuorumStateStore):
        self.inner = inner
        self.pending: list[ElectionState] = []

    def read(self) -> ElectionState | None:
        return self.inner.read()

    def write(self, state: ElectionState) -> None:
        self.inner.write(state)
        self.pending.append(state)


def encode_leader_change(msg: LeaderChangeMessage) -> bytes:
    """Placeholder record value for the LeaderChange control record.

    The wire driver replaces it with the real LeaderChangeMessage encoding; the
    core only needs a deterministic, non-empty value.
    """
    return (f"LeaderChange(v{msg.version},leader={msg.leader_id},voters={list(msg.voters)},"
            f"granting={list(msg.granting_voters)})").encode()


def encode_voters(msg: VotersControl) -> bytes:
    """Placeholder record value of a VotersRecord (the wire log encodes the real body)."""
    return ("Voters(" + ",".join(f"{e.key.id}:{e.key.directory_id}" for e in msg.voters) + ")").encode()


def _placeholder_control_value(msg: ControlMessage) -> bytes:
    if isinstance(msg, VotersControl):
        return encode_voters(msg)
    if isinstance(msg, KRaftVersionControl):
        return f"KRaftVersion({msg.kraft_version})".encode()
    return encode_leader_change(msg)


class SnapshotWriter:
    """The state machine's snapshot being written (``RaftCore.create_snapshot`` without data).

    ``append(records)``: records that share one batch (bytes each); ``freeze()``: durable
    and stored, and the core drops the log prefix it covers; ``close()`` before that
    aborts.  Also a context manager (leaving it without ``freeze()`` aborts)."""

    def __init__(self, core: "RaftCore", snapshot_id: SnapshotId, inner: SnapshotRecordsWriter):
        self.snapshot_id = snapshot_id
        self._core, self._inner = core, inner

    def append(self, records: Sequence[bytes]) -> None:
        self._inner.append(records)

    def freeze(self) -> None:
        self._inner.freeze()
        self._core._snapshot_frozen(self.snapshot_id)

    def close(self) -> None:
        self._inner.close()

    def __enter__(self) -> "SnapshotWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RaftCore(VoterChanges, LeaderFetchServing, ListenerDelivery):
    """One replica of the metadata partition.

    ``voters`` lists the static voters (``controller.quorum.voters``); it may be
    empty when the voter set comes from the log (KIP-853).  The voter set in
    effect is the latest VotersRecord in the local log or snapshot (committed
    or not), else the static set: see :mod:`kraft_node.raft.voters`.
    ``snapshot_control`` tells how that state rides in snapshot bytes (the
    bootstrap snapshot ``(0, 0)`` written by ``kraft-storage format`` holds the
    initial voters).  A ``local_key`` that matches no voter (same id and, where
    both are known, same directory id) makes this replica an observer;
    ``bootstrap_ids`` are the nodes it asks when it knows no voter.
    ``local_listeners`` are the endpoints it announces in AddRaftVoter.
    ``encode_control`` gives the record value of a control message (LeaderChange,
    Voters); the default is a readable placeholder for the simulator.
    ``rng`` is the only entropy (election timeouts, backoffs, correlation ids).
    ``options`` (:class:`~kraft_node.raft.flush.CoreOptions`) are the driver's choices,
    fixed here: the flush policy and whether listeners are delivered by ``poll``.
    """

    def __init__(self, config: QuorumConfig, local_key: ReplicaKey, voters: list[ReplicaKey],
                 log: RaftLog, store: QuorumStateStore, rng: random.Random,
                 cluster_id: str | None = None, *,
                 snapshot_control: SnapshotControlCodec | None = None,
                 local_listeners: tuple[Endpoint, ...] = (),
                 bootstrap_ids: tuple[int, ...] = (),
                 encode_control: Callable[[ControlMessage], bytes] | None = None,
                 options: CoreOptions | None = None):
        self.config = config
        self.options = options = options or CoreOptions()
        #: how each flush runs (in line or as a job): the driver's policy (flush.py)
        self._flush = options.flush
        self.local_key = local_key
        self.local_id = local_key.id
        self.log = log
        self.rng = rng
        self.cluster_id = cluster_id
        self.snapshot_control = snapshot_control or NoSnapshotControl()
        self.local_listeners = tuple(local_listeners)
        self.bootstrap_ids = tuple(bootstrap_ids)
        #: control message -> record value; a real log injects Kafka's encoding
        #: (``kafka_log.encode_control_value``) so the leader's own listener sees the
        #: same bytes as the followers that read the batch from the wire.
        self._encode_control = encode_control or _placeholder_control_value
        self._store = _RecordingStore(store)
        self.control = ControlRecordStateMachine(VoterSet.of(voters))
        self.quorum = QuorumState(local_key, self.control, self._store, rng, config)
        self.requests = RequestManager(config)
        #: Add/Remove/UpdateRaftVoter travel apart from Fetch (one in flight per peer each),
        #: so a joining observer keeps fetching while its AddRaftVoter waits for the commit.
        self.voter_requests = RequestManager(config)
        self._voter_change: VoterChange | None = None
        self._auto_join_next_ms = 0
        self._update_voter_next_ms = 0
        self._outbox: list[Outbound] = []
        self._next_correlation = rng.randrange(1 << 30)
        self._listeners: list[ListenerContext] = []
        self._purgatory: list[tuple[int, int, FetchRequest, int]] = []  # src, corr, req, deadline
        self._listeners_seen = None  # what _poll_listeners last handed out (see there)
        #: Batches this node wrote (as leader, or fetched as follower) that a listener may still need
        #: or, on a leader, a voter has still to fetch (RECENT_BATCHES_MAX_BYTES): delivery and
        #: Fetch answers take them from memory instead of re-reading (and re-decoding) the log.
        self._recent_batches: list[Batch] = []
        self._recent_bytes = 0  # sum of size_in_bytes over _recent_batches
        self._flush_job: tuple[int, FlushJob] | None = None  # (epoch, job) in flight, a leader's or a follower's
        self._new_flush_jobs: list[FlushJob] = []
        self._shutdown_deadline: int | None = None
        self._shutdown_done = False
        self._shutdown_timed_out = False
        self._bootstrap_target: int | None = None
        #: the snapshot writer of a FetchSnapshot transfer in progress (also in the follower
        #: state's ``fetching_snapshot``): aborted when that state ends
        self._snapshot_transfer: RawSnapshotSink | None = None
        self._initialized = False
        #: Event counts (elections, truncations, snapshot installs...) for tests and metrics.
        self.stats: Counter[str] = Counter()

    # ------------------------------------------------------------ queries
    @property
    def state(self) -> Role:
        return self.quorum.state

    @property
    def role(self) -> str:
        return self.quorum.state.name

    @property
    def epoch(self) -> int:
        return self.quorum.epoch

    @property
    def leader_id(self) -> int:
        return self.quorum.leader_id

    @property
    def is_leader(self) -> bool:
        return isinstance(self.quorum.state, LeaderState)

    @property
    def high_watermark(self) -> int | None:
        return self.quorum.state.high_watermark

    @property
    def recent_batches(self) -> tuple[int, int]:
        """(batches, bytes) the leader keeps in memory to answer Fetches and feed listeners
        (see fetch_serving); (0, 0) once every listener and voter has them."""
        return len(self._recent_batches), self._recent_bytes

    def log_end(self) -> OffsetAndEpoch:
        return OffsetAndEpoch(self.log.end_offset, self.log.last_fetched_epoch)

    @property
    def voter_set(self) -> VoterSet:
        """The voter set in effect (latest in the log, committed or not)."""
        return self.control.latest_voter_set()

    @property
    def kraft_version(self) -> int:
        return self.control.kraft_version()

    def committed_voter_set(self) -> VoterSet | None:
        """The latest voter set at an offset below the high watermark (None if unknown)."""
        hwm = self.high_watermark
        if hwm is None:
            return None
        return self.control.voter_set_at(hwm - 1)

    def _dynamic(self) -> bool:
        return self.quorum.dynamic

    # ------------------------------------------------------------ setup
    def register_listener(self, listener: RaftListener) -> None:
        self._listeners.append(ListenerContext(listener))

    def _load_control_state(self) -> None:
        """Rebuild voter set / kraft.version history from the latest snapshot and the log."""
        snap = self.log.latest_snapshot_id()
        if snap is not None and snap.offset <= self.log.start_offset:
            state = self._snapshot_control_state(snap)
            if state is not None:
                self.control.load_snapshot(snap, *state)
        pos = self.log.start_offset
        while pos < self.log.end_offset:
            batches = self.log.read(pos, self.config.fetch_max_bytes)
            if not batches:
                break
            self.control.apply_batches(batches)
            pos = batches[-1].next_offset

    def _snapshot_control_state(self, snapshot_id: SnapshotId) -> tuple[int, VoterSet | None] | None:
        """``(kraft_version, voters)`` from a stored snapshot's control batches (None if it is
        not stored): only the snapshot's head is decoded, never its data."""
        reader = self.log.open_snapshot(snapshot_id)
        if reader is None:
            return None
        kv, voters = 0, None
        try:
            for b in reader.control_batches():
                c = b.control
                if isinstance(c, KRaftVersionControl):
                    kv = c.kraft_version
                elif isinstance(c, VotersControl):
                    voters = VoterSet.of(c.voters)
        finally:
            reader.close()
        return kv, voters

    def initialize(self, now_ms: int) -> None:
        self._load_control_state()
        self.quorum.initialize(self.log_end(), now_ms)
        self._initialized = True
        # A single-voter quorum elects itself at once (Kafka's KafkaRaftClient.initialize: the
        # only voter becomes candidate whatever it restarted as, including Resigned -- a
        # restarted leader -- so it does not wait an election timeout to lead again).
        st = self.quorum.state
        if self.quorum.is_voter and len(self.quorum.voter_ids) == 1 and isinstance(
                st, (UnattachedState, CandidateState, ResignedState, FollowerState)):
            self._transition_to_prospective(now_ms)

    # ------------------------------------------------------------ API
    def append(self, records: list[bytes] | tuple[bytes, ...], epoch: int, now_ms: int, atomic: bool = True) -> int:
        """Queue records on the leader of ``epoch``; returns the last offset assigned.

        The append is acknowledged once the high watermark passes that offset
        *with this epoch* (the listener then receives it).  Raises
        NotLeaderError, BufferFullError or RecordBatchTooLargeError.
        """
        st = self.quorum.state
        if not isinstance(st, LeaderState) or st.epoch != epoch:
            raise NotLeaderError(f"node {self.local_id} is not the leader of epoch {epoch} ({st!r})")
        return st.accumulator.append(epoch, records, now_ms, atomic)

    def next_offset(self, epoch: int) -> int:
        """The offset the next :meth:`append` of the leader of ``epoch`` is given (Kafka's
        ``prepareAppend`` learns it the same way).  The controller replays its records at
        these offsets *before* appending them, so a record it cannot apply is found before
        it is replicated.  NotLeaderError unless this node leads ``epoch``."""
        st = self.quorum.state
        if not isinstance(st, LeaderState) or st.epoch != epoch:
            raise NotLeaderError(f"node {self.local_id} is not the leader of epoch {epoch} ({st!r})")
        return st.accumulator.next_offset

    def time_until_drain(self, now_ms: int) -> int:
        """After :meth:`append`: ms until the leader's poll has a batch to write (0: now).

        Why a driver asks: polling after every append costs a whole poll per append
        while the batch lingers.  Like Kafka's ``scheduleAppend`` (which wakes the I/O
        thread only on the first append or when the accumulator needs draining), the
        driver polls at once only when this is 0 and otherwise makes sure it wakes up
        by then.  Not the leader: 0 (poll, and let the poll sort it out)."""
        st = self.quorum.state
        if not isinstance(st, LeaderState):
            return 0
        return st.accumulator.time_until_drain(now_ms)

    def resign(self, epoch: int) -> None:
        """Ask the leader of ``epoch`` to resign at the next poll (no-op otherwise)."""
        st = self.quorum.state
        if isinstance(st, LeaderState) and st.epoch == epoch:
            st.resign_requested = True

    def begin_shutdown(self, timeout_ms: int, now_ms: int) -> None:
        """Start a graceful shutdown: a leader resigns and waits (up to the timeout)
        until another leader is known; followers and observers finish at once."""
        if self._shutdown_deadline is None:
            self._shutdown_deadline = now_ms + timeout_ms

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes | None = None, *,
                        last_contained_log_time_ms: int = 0) -> "SnapshotWriter | None":
        """A snapshot of the committed state ``[0, snapshot_id.offset)``; on freeze the
        log prefix it covers is dropped.  The offset must be committed and ``epoch`` must
        be the epoch of the record at ``offset - 1`` (RaftError otherwise).

        Without ``data`` (Kafka's ``createSnapshot``): returns a :class:`SnapshotWriter`
        that streams to the log -- ``append(records)`` (one batch each; Kafka records
        format in a KafkaRaftLog), then ``freeze()``, or ``close()`` to abort.  With
        ``data``: stores those bytes whole at once (the simulator's and tests' form)."""
        hwm = self.high_watermark
        if hwm is None or snapshot_id.offset > hwm:
            raise RaftError(f"snapshot {snapshot_id} is beyond the high watermark {hwm}")
        latest = self.log.latest_snapshot_id()
        if latest is not None and snapshot_id.offset <= latest.offset:
            raise RaftError(f"snapshot {snapshot_id} is not after the latest snapshot {latest}")
        if snapshot_id.offset <= self.log.start_offset:
            raise RaftError(f"snapshot {snapshot_id} is not after the log start {self.log.start_offset}")
        end = self.log.end_offset_for_epoch(snapshot_id.epoch)
        before = self.log.end_offset_for_epoch(snapshot_id.epoch - 1)
        if end.epoch != snapshot_id.epoch or end.offset < snapshot_id.offset \
                or (before.epoch < snapshot_id.epoch and before.offset >= snapshot_id.offset):
            raise RaftError(f"snapshot {snapshot_id}: offset {snapshot_id.offset - 1} is not in "
                            f"epoch {snapshot_id.epoch} in the log")
        last = snapshot_id.offset - 1
        history = self.control.voter_history()
        voters = self.control.voter_set_at(last) if history and history[0][0] <= last else None
        kv = self.control.kraft_version_at(last)
        if data is None:
            raw = self.log.create_raw_snapshot(snapshot_id)
            try:
                inner = self.snapshot_control.writer(raw, kv, voters, last_contained_log_time_ms)
            except BaseException:
                raw.close()
                raise
            return SnapshotWriter(self, snapshot_id, inner)
        data = self.snapshot_control.write(data, kv, voters)
        self.log.create_snapshot(snapshot_id, data)
        self.log.delete_before(snapshot_id)
        return None

    def _snapshot_frozen(self, snapshot_id: SnapshotId) -> None:
        """A writer from :meth:`create_snapshot` froze ``snapshot_id``: drop the log prefix
        it covers (unless the log moved past it meanwhile, e.g. a snapshot installed)."""
        log = self.log
        if log.start_offset < snapshot_id.offset <= log.end_offset:
            log.delete_before(snapshot_id)

    # ------------------------------------------------------------ plumbing
    def _send(self, dest: int, request: Request, now_ms: int, after_flush: FlushJob | None = None) -> None:
        corr = self._next_correlation
        self._next_correlation += 1
        self.requests.on_send(dest, corr, now_ms)
        self._outbox.append(OutboundRequest(dest, corr, request, now_ms, after_flush))

    def _send_fetch(self, dest: int, epoch: int, now_ms: int) -> None:
        """Send a Fetch reporting this node's log end offset -- durable first (rule 2).

        A voter (or, in a dynamic quorum, anyone: it may become a voter at any offset) whose
        log end is not flushed either holds the Fetch behind the flush job in flight that
        covers it, or fsyncs in line now."""
        job = None
        log = self.log
        if log.flushed_end_offset < log.end_offset and (self.quorum.is_voter or self._dynamic()):
            cur = self._flush_job
            if cur is not None and getattr(cur[1], "end_offset", -1) >= log.end_offset:
                job = cur[1]
                self.stats["fetches_held_for_flush"] += 1
            else:
                log.flush()
        self._send(dest, self._build_fetch(epoch, now_ms), now_ms, job)

    def _respond(self, dest: int, corr: int, response: Response) -> None:
        self._outbox.append(OutboundResponse(dest, corr, response))

    def _cluster_ok(self, cluster_id: str | None) -> bool:
        return cluster_id is None or self.cluster_id is None or cluster_id == self.cluster_id

    def _leader_and_epoch(self) -> LeaderIdAndEpoch:
        return LeaderIdAndEpoch(self.quorum.leader_id, self.quorum.epoch)

    # ------------------------------------------------------------ transitions (with side effects)
    def _on_role_change(self, now_ms: int) -> None:
        if self._snapshot_transfer is not None:  # the follower state that fetched it is gone
            self._snapshot_transfer.close()
            self._snapshot_transfer = None
        self.requests.reset()
        self.voter_requests.reset()
        if self._voter_change is not None:
            # Kafka answers a pending voter change when leadership ends.
            self._finish_voter_change(Errors.NOT_LEADER_OR_FOLLOWER)
        self._clear_recent()
        self._bootstrap_target = None
        # Parked fetches are answered against the new state (an error now).
        parked, self._purgatory = self._purgatory, []
        for src, corr, req, _ in parked:
            self._respond(src, corr, self._try_complete_fetch(src, req, now_ms))

    def _transition_to_unattached(self, epoch: int, now_ms: int, leader_id: int | None = None) -> None:
        self.quorum.transition_to_unattached(epoch, now_ms, leader_id)
        self._on_role_change(now_ms)

    def _transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        self.quorum.transition_to_follower(epoch, leader_id, now_ms)
        self._on_role_change(now_ms)

    def _transition_to_prospective(self, now_ms: int) -> None:
        self.quorum.transition_to_prospective(now_ms)
        self.stats["became_prospective"] += 1
        self._on_role_change(now_ms)
        self._maybe_transition_forward(now_ms)

    def _transition_to_candidate(self, now_ms: int) -> None:
        self.quorum.transition_to_candidate(now_ms)
        self.stats["became_candidate"] += 1
        self._on_role_change(now_ms)
        self._maybe_transition_forward(now_ms)

    def _transition_to_leader(self, now_ms: int) -> None:
        epoch_start = self.log.end_offset
        acc = BatchAccumulator(self.quorum.state.epoch, epoch_start,
                               self.config.append_linger_ms, self.config.max_batch_size_bytes,
                               self.config.max_number_of_batches)
        leader = self.quorum.transition_to_leader(epoch_start, acc, now_ms)
        self.stats["became_leader"] += 1
        self._on_role_change(now_ms)
        # The HWM can only move once a record of this epoch is committed, so
        # write one right away (the LeaderChange control record).
        msg = LeaderChangeMessage(0, self.local_id, tuple(sorted(self.quorum.voter_ids)),
                                  leader.granting_voters)
        acc.append_control(msg, self._encode_control(msg), now_ms)
        kv = self.kraft_version
        voters = self.voter_set
        if kv >= 1 and voters.entries and self.quorum.is_voter:
            # Kafka (LeaderState.appendStartOfEpochControlRecords): with kraft.version >= 1 the
            # epoch starts with the kraft.version and the voter set in effect, so every replica
            # reading the log -- observers started with no voters, too -- learns them from it.
            # Kafka puts the three records in one control batch; here each is its own one-record
            # control batch at consecutive offsets (the same records, readable by both).  Not
            # written by a leader elected through the previous set (removed by its own
            # uncommitted record, see the README): re-appending the latest set would erase
            # the previous one it stands on; it resigns once that removal commits anyway.
            for c in (KRaftVersionControl(0, kv), voters.to_control()):
                acc.append_control(c, self._encode_control(c), now_ms)
        leader.update_local_state(self.log.flushed_end_offset)

    def _transition_to_resigned(self, now_ms: int) -> None:
        st = self.quorum.state
        assert isinstance(st, LeaderState)
        preferred = st.non_leader_voters_by_descending_fetch_offset()
        self.quorum.transition_to_resigned(preferred, now_ms)
        self.stats["resigned"] += 1
        self._on_role_change(now_ms)

    def _maybe_transition_forward(self, now_ms: int) -> None:
        st = self.quorum.state
        if isinstance(st, ProspectiveState) and st.epoch_election.is_vote_granted():
            self._transition_to_candidate(now_ms)
        elif isinstance(st, CandidateState) and st.backoff_deadline is None and st.epoch_election.is_vote_granted():
            self._transition_to_leader(now_ms)

    def _maybe_handle_election_loss(self, now_ms: int) -> None:
        st = self.quorum.state
        if isinstance(st, CandidateState) and st.backoff_deadline is None and st.epoch_election.is_vote_rejected():
            self.stats["election_lost"] += 1
            st.backoff_deadline = now_ms + self._binary_exponential_backoff(st.retries)
        elif isinstance(st, ProspectiveState) and st.epoch_election.is_vote_rejected():
            self.stats["pre_vote_lost"] += 1
            self._prospective_after_election_loss(now_ms)

    def _prospective_after_election_loss(self, now_ms: int) -> None:
        st = self.quorum.state
        lid = st.leader_id()
        if self._can_follow(lid):
            self._transition_to_follower(st.epoch, lid, now_ms)
        else:
            self._transition_to_unattached(st.epoch, now_ms)

    def _binary_exponential_backoff(self, retries: int) -> int:
        return binary_exponential_backoff(retries, self.rng, self.config.election_backoff_max_ms)

    def _strict_exponential_backoff(self, position: int, total: int) -> int:
        """Kafka's strict exponential backoff by successor position: 0 for the first,
        then ``max >> (total - 1)`` doubling per position, capped at
        election.backoff.max.ms (which is also the value for non-successors)."""
        cap = self.config.election_backoff_max_ms
        if position == 0:
            return 0
        if position < 0 or position >= total:
            return cap
        return min(cap, (cap >> (total - 1)) << (position - 1))

    def _end_epoch_election_backoff(self, preferred: tuple[ReplicaKey, ...]) -> int:
        for pos, key in enumerate(preferred):
            if key.matches(self.local_key):
                return self._strict_exponential_backoff(pos, len(preferred))
        return self.config.election_backoff_max_ms

    def _can_follow(self, leader_id: int) -> bool:
        """Static quorums follow only known voters; with dynamic voters the local log may
        not hold the voter set that elected the leader yet, so any other node may lead."""
        return leader_id >= 0 and leader_id != self.local_id and \
            (leader_id in self.quorum.voters or self._dynamic())

    def _maybe_transition(self, leader_id: int, epoch: int, now_ms: int) -> None:
        """Act on a (leader, epoch) learned from any message."""
        cur_epoch = self.quorum.epoch
        cur_leader = self.quorum.leader_id
        if epoch == cur_epoch and leader_id >= 0 and cur_leader >= 0 and leader_id != cur_leader:
            raise InvariantViolation(f"node {self.local_id}: leader {leader_id} claimed for epoch {epoch} "
                                     f"but the known leader is {cur_leader}")
        if epoch > cur_epoch:
            if self._can_follow(leader_id):
                self._transition_to_follower(epoch, leader_id, now_ms)
            else:
                self._transition_to_unattached(epoch, now_ms)
        elif epoch == cur_epoch and cur_leader < 0 and self._can_follow(leader_id):
            self._transition_to_follower(epoch, leader_id, now_ms)

    def _maybe_handle_common_response(self, error: int, leader_id: int, epoch: int, now_ms: int) -> bool:
        """True if the response was fully handled here (stale, or it revealed a new epoch/leader)."""
        if epoch < self.quorum.epoch or error == Errors.UNKNOWN_LEADER_EPOCH:
            return True
        if epoch > self.quorum.epoch or error in (Errors.FENCED_LEADER_EPOCH, Errors.NOT_LEADER_OR_FOLLOWER):
            self._maybe_transition(leader_id, epoch, now_ms)
            return True
        if epoch == self.quorum.epoch and leader_id >= 0 and self.quorum.leader_id < 0 \
                and leader_id != self.local_id:
            # Learned this epoch's leader (e.g. a nominee or an unattached observer):
            # follow it, then let the handler use the response if it carries no error
            # (a Fetch answered by that leader is appended at once).
            self._maybe_transition(leader_id, epoch, now_ms)
            return error != NONE
        return False

    # ------------------------------------------------------------ inbound dispatch
    def handle_request(self, source: int, correlation_id: int, request: Request, now_ms: int) -> None:
        """Handle an inbound request; its response (if any) is queued for the next Ready."""
        if isinstance(request, FetchRequest):
            self._handle_fetch_request(source, correlation_id, request, now_ms)
            return
        resp: Response | None
        if isinstance(request, VoteRequest):
            resp = self._handle_vote_request(source, request, now_ms)
        elif isinstance(request, BeginQuorumEpochRequest):
            resp = self._handle_begin_quorum_epoch_request(source, request, now_ms)
        elif isinstance(request, EndQuorumEpochRequest):
            resp = self._handle_end_quorum_epoch_request(source, request, now_ms)
        elif isinstance(request, FetchSnapshotRequest):
            resp = self._handle_fetch_snapshot_request(source, request, now_ms)
        elif isinstance(request, AddRaftVoterRequest):
            resp = self._handle_add_voter_request(source, correlation_id, request, now_ms)
        elif isinstance(request, RemoveRaftVoterRequest):
            resp = self._handle_remove_voter_request(source, correlation_id, request, now_ms)
        elif isinstance(request, UpdateRaftVoterRequest):
            resp = self._handle_update_voter_request(source, correlation_id, request, now_ms)
        else:
            raise TypeError(f"unknown request type {type(request).__name__}")
        if resp is not None:  # None: a voter change answers once its record commits
            self._respond(source, correlation_id, resp)

    def handle_response(self, source: int, correlation_id: int, response: Response, now_ms: int) -> None:
        """Handle an inbound response; unexpected correlation ids (stale, duplicated) are dropped."""
        if isinstance(response, (AddRaftVoterResponse, RemoveRaftVoterResponse, UpdateRaftVoterResponse)):
            if self.voter_requests.accept_response(source, correlation_id):
                self.stats[f"{type(response).__name__}:{error_name_of(response.error_code)}"] += 1
                if response.error_code != NONE:
                    self.voter_requests.on_failure(source, now_ms)
            return
        if not self.requests.accept_response(source, correlation_id):
            return
        if isinstance(response, VoteResponse) and response.error_code == Errors.UNSUPPORTED_VERSION \
                and isinstance(self.quorum.state, ProspectiveState):
            # A voter too old for PreVote: skip the pre-vote phase (Kafka does the same).
            self.stats["pre_vote_unsupported"] += 1
            self.quorum.transition_to_candidate(now_ms, force=True)
            self.stats["became_candidate"] += 1
            self._on_role_change(now_ms)
            self._maybe_transition_forward(now_ms)
            return
        if response.error_code != NONE:
            self.requests.on_failure(source, now_ms)
            st = self.quorum.state
            if isinstance(response, (FetchResponse, FetchSnapshotResponse)) and isinstance(st, FollowerState) \
                    and st.leader_id() == source and not st.leader_resigned \
                    and response.error_code in (Errors.BROKER_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT):
                # Not Kafka (README, "fetch failures"): the leader cannot be reached, so a voter
                # whose own fetch timer ran out first may have our (non-binding) pre-vote; the
                # fetch deadline itself is unchanged.
                st.has_fetched_from_leader = False
            return
        if isinstance(response, FetchResponse):
            ok = self._handle_fetch_response(source, response, now_ms)
        elif isinstance(response, VoteResponse):
            ok = self._handle_vote_response(source, response, now_ms)
        elif isinstance(response, BeginQuorumEpochResponse):
            ok = self._handle_begin_quorum_epoch_response(source, response, now_ms)
        elif isinstance(response, EndQuorumEpochResponse):
            ok = self._handle_end_quorum_epoch_response(source, response, now_ms)
        elif isinstance(response, FetchSnapshotResponse):
            ok = self._handle_fetch_snapshot_response(source, response, now_ms)
        else:
            raise TypeError(f"unknown response type {type(response).__name__}")
        if not ok:
            self.requests.on_failure(source, now_ms)

    # ------------------------------------------------------------ Vote
    def _vote_response(self, error: Errors, granted: bool, top: Errors = NONE) -> VoteResponse:
        return VoteResponse(int(top), int(error), self.quorum.leader_id, self.quorum.epoch, granted)

    def _handle_vote_request(self, source: int, req: VoteRequest, now_ms: int) -> VoteResponse:
        if not self._cluster_ok(req.cluster_id):
            return self._vote_response(NONE, False, Errors.INCONSISTENT_CLUSTER_ID)
        if req.last_offset < 0 or req.last_offset_epoch < 0 or req.replica_id < 0 \
                or (req.pre_vote and req.last_offset_epoch > req.replica_epoch) \
                or (not req.pre_vote and req.last_offset_epoch >= req.replica_epoch):
            return self._vote_response(NONE, False, Errors.INVALID_REQUEST)
        if req.replica_epoch < self.quorum.epoch:
            return self._vote_response(Errors.FENCED_LEADER_EPOCH, False)
        if req.replica_epoch > self.quorum.epoch:
            # Kafka moves to the higher epoch for pre-votes too: the prospective
            # learned that epoch legitimately, and no vote is recorded for it.
            self._transition_to_unattached(req.replica_epoch, now_ms)
        # The request must be meant for this replica (id and directory id).
        if req.voter_id != self.local_id \
                or not ReplicaKey(req.voter_id, req.voter_directory_id).matches(self.local_key):
            return self._vote_response(Errors.INVALID_VOTER_KEY, False)
        candidate = ReplicaKey(req.replica_id, req.replica_directory_id)
        voter = self.quorum.voters.get(candidate.id)
        up_to_date = OffsetAndEpoch(req.last_offset, req.last_offset_epoch).at_least(self.log_end())
        st = self.quorum.state
        granted = None
        if req.pre_vote:
            # Non-binding: like Kafka, observers answer too and non-voters may ask;
            # only voters' grants count in the nominee's tally.
            granted = st.can_grant_vote(candidate, up_to_date, True)
        elif not self._dynamic() and (not self.quorum.is_voter or voter is None or not voter.matches(candidate)):
            granted = False  # static quorum: a binding vote is only cast by a voter, for a voter
        # Dynamic quorum (Kafka, KIP-853): the voter key in the request matching this replica is
        # enough; a just-added voter may not have replicated the VotersRecord naming it (nor the
        # candidate) yet, and refusing would deadlock the new majority.
        if granted is None:
            granted = st.can_grant_vote(candidate, up_to_date, False)
        self.stats[("pre_vote_" if req.pre_vote else "vote_") + ("granted" if granted else "rejected")] += 1
        if granted and not req.pre_vote and isinstance(st, (UnattachedState, ProspectiveState)) \
                and st.voted_key is None:
            # Durable before the response exists: one vote per epoch survives crashes.
            self.quorum.add_voted_state(candidate, now_ms)
        return self._vote_response(NONE, granted)

    def _handle_vote_response(self, source: int, resp: VoteResponse, now_ms: int) -> bool:
        err = resp.partition_error_code
        if self._maybe_handle_common_response(err, resp.leader_id, resp.leader_epoch, now_ms):
            return err == NONE
        if err != NONE:
            return False
        st = self.quorum.state
        if isinstance(st, (ProspectiveState, CandidateState)) and resp.leader_epoch == st.epoch:
            if source not in st.epoch_election.states:
                return True
            st.epoch_election.record(source, resp.vote_granted)
            if resp.vote_granted:
                self._maybe_transition_forward(now_ms)
            else:
                self._maybe_handle_election_loss(now_ms)
        return True

    # ------------------------------------------------------------ BeginQuorumEpoch
    def _bqe_response(self, error: Errors, top: Errors = NONE) -> BeginQuorumEpochResponse:
        return BeginQuorumEpochResponse(int(top), int(error), self.quorum.leader_id, self.quorum.epoch)

    def _handle_begin_quorum_epoch_request(self, source: int, req: BeginQuorumEpochRequest,
                                           now_ms: int) -> BeginQuorumEpochResponse:
        if not self._cluster_ok(req.cluster_id):
            return self._bqe_response(NONE, Errors.INCONSISTENT_CLUSTER_ID)
        if req.leader_epoch < self.quorum.epoch:
            return self._bqe_response(Errors.FENCED_LEADER_EPOCH)
        if req.leader_id == self.local_id or (req.leader_id not in self.quorum.voters and not self._dynamic()):
            return self._bqe_response(Errors.INCONSISTENT_VOTER_SET)
        if req.voter_id != self.local_id \
                or not ReplicaKey(req.voter_id, req.voter_directory_id).matches(self.local_key):
            return self._bqe_response(Errors.INVALID_VOTER_KEY)
        self._maybe_transition(req.leader_id, req.leader_epoch, now_ms)
        return self._bqe_response(NONE)

    def _handle_begin_quorum_epoch_response(self, source: int, resp: BeginQuorumEpochResponse, now_ms: int) -> bool:
        err = resp.partition_error_code
        if self._maybe_handle_common_response(err, resp.leader_id, resp.leader_epoch, now_ms):
            return err == NONE
        if err != NONE:
            return False
        st = self.quorum.state
        if isinstance(st, LeaderState) and resp.leader_epoch == st.epoch and source in st.voters:
            st.voters[source].has_acknowledged_leader = True
        return True

    # ------------------------------------------------------------ EndQuorumEpoch
    def _eqe_response(self, error: Errors, top: Errors = NONE) -> EndQuorumEpochResponse:
        return EndQuorumEpochResponse(int(top), int(error), self.quorum.leader_id, self.quorum.epoch)

    def _handle_end_quorum_epoch_request(self, source: int, req: EndQuorumEpochRequest,
                                         now_ms: int) -> EndQuorumEpochResponse:
        if not self._cluster_ok(req.cluster_id):
            return self._eqe_response(NONE, Errors.INCONSISTENT_CLUSTER_ID)
        if req.leader_epoch < self.quorum.epoch:
            return self._eqe_response(Errors.FENCED_LEADER_EPOCH)
        if req.leader_id not in self.quorum.voters and not self._dynamic():
            return self._eqe_response(Errors.INCONSISTENT_VOTER_SET)
        self._maybe_transition(req.leader_id, req.leader_epoch, now_ms)
        st = self.quorum.state
        if isinstance(st, FollowerState) and st.leader_id() == req.leader_id and st.epoch == req.leader_epoch:
            # Most caught-up successors time out first: strict exponential by position.
            backoff = self._end_epoch_election_backoff(req.preferred_candidates)
            self.stats["end_quorum_epoch_backoff"] += 1
            st.fetch_deadline = min(st.fetch_deadline, now_ms + backoff)
            # Not Kafka (README, "graceful resignation"): the leader said it is gone, so
            # this follower now grants pre-votes (non-binding) to the preferred successor.
            st.leader_resigned = True
            st.has_fetched_from_leader = False
        return self._eqe_response(NONE)

    def _handle_end_quorum_epoch_response(self, source: int, resp: EndQuorumEpochResponse, now_ms: int) -> bool:
        err = resp.partition_error_code
        st = self.quorum.state
        if isinstance(st, ResignedState) and resp.leader_epoch >= st.epoch:
            st.unacked_voters.discard(source)
        if self._maybe_handle_common_response(err, resp.leader_id, resp.leader_epoch, now_ms):
            return err == NONE
        return err == NONE

    # ------------------------------------------------------------ leader high watermark
    # (serving Fetch and FetchSnapshot: fetch_serving.LeaderFetchServing)
    def _on_leader_hwm_update(self, now_ms: int) -> None:
        # (called when the leader's high watermark advanced: it is not None)
        self.log.update_high_watermark(self.quorum.state.high_watermark)  # type: ignore[arg-type]
        self._complete_purgatory(now_ms, force=True)
        self._maybe_complete_voter_change(self.quorum.state, now_ms)

    # ------------------------------------------------------------ Fetch (follower side)
    def _handle_fetch_response(self, source: int, resp: FetchResponse, now_ms: int) -> bool:
        err = resp.partition_error_code
        cl = resp.current_leader
        if self._maybe_handle_common_response(err, cl.leader_id, cl.leader_epoch, now_ms):
            return err == NONE
        if err != NONE:
            return False
        st = self.quorum.state
        if not isinstance(st, FollowerState) or st.leader_id() != source or cl.leader_epoch != st.epoch:
            return True
        if resp.diverging_epoch is not None:
            target = OffsetAndEpoch(resp.diverging_epoch.end_offset, resp.diverging_epoch.epoch)
            if st.high_watermark is not None and target.offset < st.high_watermark:
                raise InvariantViolation(f"node {self.local_id}: leader {source} asks truncation to "
                                         f"{target.offset}, below the high watermark {st.high_watermark}")
            self._truncate_to_end_offset(target, st)
        elif resp.snapshot_id is not None:
            self.stats["snapshot_fetch_started"] += 1
            self._abort_snapshot_transfer(st)
            # streamed to the log as the slices come (Kafka's createNewSnapshotUnchecked)
            st.fetching_snapshot = (resp.snapshot_id, self.log.create_raw_snapshot(resp.snapshot_id))
            self._snapshot_transfer = st.fetching_snapshot[1]
        else:
            self._append_as_follower(resp.records)
            if resp.high_watermark >= 0:
                new_hwm = min(resp.high_watermark, self.log.end_offset)
                if st.high_watermark is None or new_hwm > st.high_watermark:
                    st.update_high_watermark(new_hwm)
                    self.log.update_high_watermark(new_hwm)
        self._on_successful_fetch(st, now_ms)
        return True

    def _on_successful_fetch(self, st: FollowerState, now_ms: int) -> None:
        """Reset the fetch timer after a successful Fetch/FetchSnapshot from the leader.

        Two deliberate refinements of Kafka's ``resetFetchTimeoutForSuccessfulFetch``
        (both measured by benchmarks/raft_failover_bench.py, see the README):

        * once the leader announced its resignation (EndQuorumEpoch accepted in this
          epoch), a Fetch answer already in flight does not undo it: the shortened
          deadline stays and pre-votes stay grantable;
        * the deadline gets a random extra of up to a quarter of the fetch timeout, so
          the followers of a leader that died do not all time out within the same
          millisecond (they were answered together) and split the vote -- which costs
          a whole randomized election timeout (1-2 s at Kafka's defaults).
        """
        if st.leader_resigned:
            return
        st.has_fetched_from_leader = True
        timeout = self.config.fetch_timeout_ms
        st.fetch_deadline = now_ms + timeout + (self.rng.randrange(timeout // 4 + 1) if self.quorum.is_voter else 0)

    def _truncate_to_end_offset(self, target: OffsetAndEpoch, st: FollowerState) -> None:
        """Truncate to the end of ``target.epoch`` as both logs know it (Kafka's log reconciliation)."""
        log = self.log
        if target.epoch == 0:
            offset = min(target.offset, log.end_offset)
        else:
            local = log.end_offset_for_epoch(target.epoch)
            offset = min(local.offset, target.offset) if local.epoch == target.epoch else local.offset
        if st.high_watermark is not None and offset < st.high_watermark:
            raise InvariantViolation(f"node {self.local_id}: truncation to {offset} below the high "
                                     f"watermark {st.high_watermark}")
        if offset < log.start_offset:
            raise InvariantViolation(f"node {self.local_id}: truncation to {offset} below the log start "
                                     f"{log.start_offset}")
        if offset < log.end_offset:
            self.stats["truncations"] += 1
        log.truncate_to(offset)
        self._clear_recent()  # the log is the only truth after a truncation
        if self.control.truncate_new_entries(offset):
            self.stats["voter_set_truncated"] += 1
        for ctx in self._listeners:
            if ctx.next_offset > offset:
                raise InvariantViolation(f"node {self.local_id}: truncated delivered offset {offset}")

    def _append_as_follower(self, batches: Sequence[Batch]) -> None:
        end = self.log.end_offset
        keep: list[Batch] = []
        for b in batches:
            if b.next_offset <= end:
                continue
            if b.base_offset < end:
                b = Batch(end, b.epoch, b.records[end - b.base_offset:], b.is_control, b.control, b.append_time_ms)
            if b.base_offset != end:
                break  # a gap: stop; the next fetch resumes at our end offset
            keep.append(b)
            end = b.next_offset
        if keep:
            # all of them, unsliced: hand the log the sequence it was given (a KafkaRaftLog
            # then writes the fetched bytes as they came, see FetchedBatches)
            self.log.append_as_follower(batches if len(keep) == len(batches) and keep[0] is batches[0] else keep)
            if self._listeners:
                self._recent_batches.extend(keep)
                self._recent_bytes += sum(b.size_in_bytes for b in keep)
            self.control.apply_batches(keep)
            # Voters flush before reporting the new end offset in their next Fetch.  With a
            # dynamic quorum an observer may become a voter by a record the leader appends at
            # any moment (its last fetch offset then counts at once), so it flushes too.
            # Asynchronously when allowed and no other flush is in flight: _send_fetch then
            # holds the Fetch behind the job.
            if self.quorum.is_voter or self._dynamic():
                job = self.log.begin_flush() if self._flush.follower_jobs and self._flush_job is None else None
                if job is not None:
                    self._flush_job = (self.quorum.epoch, job)
                    self._new_flush_jobs.append(job)
                else:
                    self.log.flush()

    # ------------------------------------------------------------ FetchSnapshot (follower side)
    # (Add/Remove/UpdateRaftVoter and auto-join: voter_changes.VoterChanges)
    def _handle_fetch_snapshot_response(self, source: int, resp: FetchSnapshotResponse, now_ms: int) -> bool:
        err = resp.partition_error_code
        cl = resp.current_leader
        if self._maybe_handle_common_response(err, cl.leader_id, cl.leader_epoch, now_ms):
            return err == NONE
        st = self.quorum.state
        if not isinstance(st, FollowerState) or st.leader_id() != source or st.fetching_snapshot is None:
            return err == NONE
        if err in (Errors.SNAPSHOT_NOT_FOUND, Errors.POSITION_OUT_OF_RANGE):
            self._abort_snapshot_transfer(st)  # start over from a plain Fetch
            return False
        if err != NONE:
            return False
        sid, writer = st.fetching_snapshot
        if resp.snapshot_id != sid or resp.position != writer.size_in_bytes:
            return True  # stale slice
        writer.append(resp.unaligned_records)
        self.stats["snapshot_slices"] += 1
        if writer.size_in_bytes > resp.size:
            self._abort_snapshot_transfer(st)
            return False
        self._on_successful_fetch(st, now_ms)
        if writer.size_in_bytes == resp.size:
            self._install_snapshot(sid, writer, st)
        return True

    def _abort_snapshot_transfer(self, st: FollowerState) -> None:
        """Give up the FetchSnapshot transfer in progress (its partial snapshot is removed)."""
        if st.fetching_snapshot is not None:
            st.fetching_snapshot[1].close()
            st.fetching_snapshot = None
        self._snapshot_transfer = None

    def _install_snapshot(self, sid: SnapshotId, writer: RawSnapshotSink, st: FollowerState) -> None:
        log = self.log
        st.fetching_snapshot = None
        self._snapshot_transfer = None
        latest = log.latest_snapshot_id()
        if sid.offset <= log.start_offset or (latest is not None and sid.offset <= latest.offset):
            writer.close()  # aborted: we already hold this state (a slow transfer raced a local snapshot)
            return
        self.stats["snapshots_installed"] += 1
        writer.freeze()  # durable and stored: latest_snapshot_id() is sid from here
        state = self._snapshot_control_state(sid)  # its control records (voters, kraft.version)
        local = log.end_offset_for_epoch(sid.epoch)
        if sid.offset <= log.end_offset and local.epoch == sid.epoch and local.offset >= sid.offset:
            log.delete_before(sid)
        else:
            log.truncate_fully_and_start_at(sid)
            self._clear_recent()
        kv, voters = state if state is not None else (0, None)
        if voters is not None or kv:
            # The snapshot's control state replaces history up to it; later log entries stay.
            self.control.load_snapshot(sid, kv, voters)
            pos = log.start_offset
            while pos < log.end_offset:
                batches = log.read(pos, self.config.fetch_max_bytes)
                if not batches:
                    break
                self.control.apply_batches(batches)
                pos = batches[-1].next_offset
        if st.high_watermark is None or sid.offset > st.high_watermark:
            st.update_high_watermark(sid.offset)
            log.update_high_watermark(sid.offset)

    # ------------------------------------------------------------ poll
    def poll(self, now_ms: int) -> Ready:
        """Run timers and due work at ``now_ms``; deliver committed data to listeners."""
        if not self._initialized:
            raise RaftError("initialize() must be called before poll()")
        wake = NEVER
        self.requests.expire(now_ms)
        for _ in range(8):  # repeat while a transition made more work due right now
            before = self.quorum.transitions
            self._maybe_complete_shutdown(now_ms)
            wake = self._poll_role(now_ms)
            if self.quorum.transitions == before:
                break
        if not self.options.defer_listeners:
            self._poll_listeners()
        if self._shutdown_deadline is not None and not self._shutdown_done:
            wake = min(wake, self._shutdown_deadline)
        wake = min(wake, self.requests.next_deadline(now_ms))
        ready = Ready(self._outbox, self._store.pending, max(wake, now_ms),
                      self._shutdown_done, self._shutdown_timed_out, self._new_flush_jobs)
        self._new_flush_jobs = []
        self._outbox = []
        self._store.pending = []
        return ready

    def _maybe_complete_shutdown(self, now_ms: int) -> None:
        if self._shutdown_deadline is None or self._shutdown_done:
            return
        q = self.quorum
        if not q.is_voter or len(q.voter_ids) == 1 or q.has_remote_leader():
            self._shutdown_done = True
        elif now_ms >= self._shutdown_deadline:
            self._shutdown_done = True
            self._shutdown_timed_out = True

    def _poll_role(self, now_ms: int) -> int:
        st = self.quorum.state
        if isinstance(st, LeaderState):
            return self._poll_leader(st, now_ms)
        if isinstance(st, FollowerState):
            return self._poll_follower(st, now_ms)
        if isinstance(st, CandidateState):
            return self._poll_candidate(st, now_ms)
        if isinstance(st, ProspectiveState):
            return self._poll_prospective(st, now_ms)
        if isinstance(st, ResignedState):
            return self._poll_resigned(st, now_ms)
        return self._poll_unattached(st, now_ms)

    def _poll_leader(self, st: LeaderState, now_ms: int) -> int:
        removed_self = not self.quorum.is_voter and st.high_watermark is not None \
            and st.high_watermark > (self.control.last_voter_set_offset() or 0)
        if (self._shutdown_deadline is not None and not self._shutdown_done) or st.resign_requested \
                or st.time_until_check_quorum_expires(now_ms) == 0 or removed_self:
            # A sole voter keeps leading through check-quorum and shutdown (nobody else can
            # take over), but an explicit resign (the controller renouncing) is honoured: it
            # starts a new epoch and elects itself again, as Kafka's sole voter does.
            if self.quorum.voter_ids != {self.local_id} or st.resign_requested:
                if removed_self:
                    self.stats["resigned_after_removal"] += 1
                self._flush_leader(st, now_ms)
                self._transition_to_resigned(now_ms)
                return now_ms
        flush_owed = self._flush_leader(st, now_ms, sync=False)
        self._maybe_complete_voter_change(st, now_ms)
        self._maybe_send_begin_quorum_epoch(st, now_ms)
        self._complete_purgatory(now_ms, force=False)
        wake = min(now_ms + st.accumulator.time_until_drain(now_ms),
                   now_ms + st.time_until_check_quorum_expires(now_ms),
                   st.begin_quorum_epoch_deadline)
        for _, _, _, deadline in self._purgatory:
            wake = min(wake, deadline)
        if flush_owed:
            wake = now_ms
        if self._voter_change is not None:
            wake = min(wake, self._voter_change.deadline_ms)
        return wake

    def _flush_leader(self, st: LeaderState, now_ms: int, sync: bool = True) -> bool:
        """Append the accumulator's ready batches; make what is unflushed durable.

        With ``sync=False`` (the leader's poll) the flush policy says how: in line now,
        as a job (``Ready.flush_jobs``, one at a time), or at the *next* poll -- the
        default for a poll that appended: parked Fetches are answered with the new data
        first, so the followers write and fsync it while this node fsyncs its own copy
        and the two flushes overlap instead of adding up.  This is safe because only
        durable offsets count: the leader's own end offset enters the high watermark
        after its flush, a follower's after its own flush (its next Fetch).  Returns
        True when a flush is still owed (the caller asks to be polled again at once).
        """
        log = self.log
        flush = self._flush
        batches = st.accumulator.drain(now_ms)
        if batches:
            changed = False
            for b in batches:
                written = log.append_as_leader(b) or b
                self._recent_batches.append(written)
                self._recent_bytes += written.size_in_bytes
                flush.leader_appended(written.size_in_bytes, now_ms)
                changed |= self.control.apply_batches((b,))
            if changed:
                # Kafka: a VotersRecord counts for the majority as soon as it is appended.
                st.update_voter_set(self.quorum.voters.values())
            self._complete_purgatory(now_ms, force=True)  # new data for parked fetches
        if log.flushed_end_offset >= log.end_offset:
            return False
        if not sync:
            how = flush.leader_flush(bool(batches), self._flush_job is not None, now_ms)
            if how is LeaderFlush.NEXT_POLL:
                return True
            if how is LeaderFlush.JOB:
                # The driver fsyncs off its loop while the loop keeps answering Fetches;
                # one job at a time, the next one covers whatever was appended meanwhile.
                if self._flush_job is None:
                    job = log.begin_flush()
                    if job is not None:
                        self._flush_job = (st.epoch, job)
                        self._new_flush_jobs.append(job)
                        flush.flush_started()
                return False
        log.flush()
        flush.flush_started()
        if st.update_local_state(log.flushed_end_offset):
            self._on_leader_hwm_update(now_ms)
        return False

    def handle_flush_done(self, job: FlushJob, now_ms: int) -> bool:
        """A flush job from ``Ready.flush_jobs`` ran (``job.run()``): its end offset is
        durable unless the log was truncated meanwhile; as leader of the epoch that
        started it, count it for the high watermark.  An fsync error is raised (fatal,
        as a failed log directory is for Kafka).

        Returns whether the job's end offset is durable: only then may the requests held
        behind it (``OutboundRequest.after_flush is job``) be sent; on False the driver drops
        them (the core sees them time out or fail, and fetches again)."""
        cur, self._flush_job = self._flush_job, None
        if cur is None or cur[1] is not job:
            self._flush_job = cur
            raise RaftError(f"node {self.local_id}: flush completion for a job not in flight")
        if not self.log.complete_flush(job):
            return False
        st = self.quorum.state
        if isinstance(st, LeaderState) and st.epoch == cur[0]:
            if st.update_local_state(self.log.flushed_end_offset):
                self._on_leader_hwm_update(now_ms)
        return True

    def _maybe_send_begin_quorum_epoch(self, st: LeaderState, now_ms: int) -> None:
        if now_ms < st.begin_quorum_epoch_deadline:
            return
        stale = now_ms - st.begin_quorum_epoch_timeout_ms
        for vid, rs in st.voters.items():
            if vid == self.local_id:
                continue
            if rs.has_acknowledged_leader and rs.last_fetch_ms >= stale:
                continue
            if self.requests.is_ready(vid, now_ms):
                self._send(vid, BeginQuorumEpochRequest(self.cluster_id, vid, rs.key.directory_id,
                                                        self.local_id, st.epoch), now_ms)
        st.begin_quorum_epoch_deadline = now_ms + st.begin_quorum_epoch_timeout_ms

    def _poll_resigned(self, st: ResignedState, now_ms: int) -> int:
        if now_ms >= st.election_deadline:
            self._transition_to_unattached(st.epoch + 1, now_ms)
            return now_ms
        for vid in sorted(st.unacked_voters):
            if self.requests.is_ready(vid, now_ms):
                self._send(vid, EndQuorumEpochRequest(self.cluster_id, self.local_id, st.epoch,
                                                      st.preferred_successors), now_ms)
        return st.election_deadline


    def _poll_follower(self, st: FollowerState, now_ms: int) -> int:
        self._maybe_auto_join(st, now_ms)
        self._maybe_update_voter(st, now_ms)
        if now_ms >= st.fetch_deadline:
            if self.quorum.can_stand:
                self._transition_to_prospective(now_ms)
                return now_ms
            # An observer asks another voter who leads now, then retries the leader.
            others = sorted(v for v in self.quorum.voter_ids if v != st.leader_id())
            self._bootstrap_target = self.rng.choice(others) if others else None
            st.fetch_deadline = now_ms + self.config.fetch_timeout_ms
        target = st.leader_id()
        if self._bootstrap_target is not None:
            target = self._bootstrap_target
            if not self.requests.has_inflight(target) and self.requests.is_ready(target, now_ms):
                self._bootstrap_target = None
                self._send_fetch(target, st.epoch, now_ms)
            return st.fetch_deadline
        if self.requests.is_ready(target, now_ms):
            if st.fetching_snapshot is not None:
                sid, writer = st.fetching_snapshot
                self._send(target, FetchSnapshotRequest(self.cluster_id, self.local_id,
                                                        self.config.fetch_snapshot_max_bytes, st.epoch,
                                                        sid, writer.size_in_bytes, self.local_key.directory_id),
                           now_ms)
            else:
                self._send_fetch(target, st.epoch, now_ms)
        return st.fetch_deadline

    def _build_fetch(self, epoch: int, now_ms: int) -> FetchRequest:
        hwm = self.high_watermark
        return FetchRequest(self.cluster_id, self.local_id, self.config.fetch_max_wait_ms, epoch,
                            self.log.end_offset, self.log.last_fetched_epoch, self.log.start_offset,
                            self.local_key.directory_id, hwm if hwm is not None else -1,
                            max_bytes=self.config.fetch_max_bytes)

    def _poll_unattached(self, st: UnattachedState, now_ms: int) -> int:
        if self.quorum.can_stand:
            if st.election_deadline is None:  # became a voter (log or snapshot) while unattached
                st.election_deadline = self.quorum.random_election_deadline(now_ms)
            assert st.election_deadline is not None  # (can_stand: random_election_deadline gives one)
            if now_ms >= st.election_deadline:
                self._transition_to_prospective(now_ms)
                return now_ms
            return st.election_deadline
        # Observer: discover the leader by fetching from a random voter.
        voters = sorted(self.quorum.voter_ids - {self.local_id}) or sorted(set(self.bootstrap_ids) - {self.local_id})
        if not voters:
            return NEVER
        target = self.rng.choice(voters)
        if not any(self.requests.has_inflight(v) for v in voters) and self.requests.is_ready(target, now_ms):
            self._send_fetch(target, st.epoch, now_ms)
        return now_ms + self.config.retry_backoff_ms * 5

    def _send_vote_requests(self, st: ProspectiveState | CandidateState, pre_vote: bool, now_ms: int) -> None:
        end = self.log_end()
        for vid in st.epoch_election.unrecorded():
            key = self.quorum.election_keys().get(vid)
            if key is not None and vid != self.local_id and self.requests.is_ready(vid, now_ms):
                self._send(vid, VoteRequest(self.cluster_id, vid, st.epoch, self.local_id,
                                            self.local_key.directory_id, key.directory_id,
                                            end.epoch, end.offset, pre_vote), now_ms)

    def _poll_prospective(self, st: ProspectiveState, now_ms: int) -> int:
        if now_ms >= st.election_deadline or not self.quorum.can_stand:
            self._prospective_after_election_loss(now_ms)
            return now_ms
        self._send_vote_requests(st, True, now_ms)
        return st.election_deadline

    def _poll_candidate(self, st: CandidateState, now_ms: int) -> int:
        if not self.quorum.can_stand:
            # Removed from the voter set (a truncation or a new record): stop canvassing.
            self._transition_to_unattached(st.epoch, now_ms)
            return now_ms
        if st.backoff_deadline is not None:
            if now_ms >= st.backoff_deadline:
                self._transition_to_prospective(now_ms)
                return now_ms
            return st.backoff_deadline
        if now_ms >= st.election_deadline:
            st.backoff_deadline = now_ms + self._binary_exponential_backoff(st.retries)
            return st.backoff_deadline
        self._send_vote_requests(st, False, now_ms)
        return st.election_deadline

    # (listener delivery: listeners.ListenerDelivery)
