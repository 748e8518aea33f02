"""One scenario test per KRaft rule (reference: 10-kraft-consensus-raft.txt).

Single-replica tests drive one RaftCore by hand (``Ctx``): they deliver
requests/responses and inspect what the core emits.  Multi-replica tests use
the simulator's Cluster with a fault-free network.
"""
from __future__ import annotations

import random
import uuid

import pytest

from kraft_node.raft.client import RETRY_BACKOFF_BASE_MS, RaftCore, binary_exponential_backoff
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.errors import Errors, InvariantViolation, NotLeaderError, RaftError
from kraft_node.raft.flush import CoreOptions, JobFlush
from kraft_node.raft.log import MemoryRaftLog
from kraft_node.raft.messages import (
    Batch,
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    LeaderAndEpoch,
    LeaderIdAndEpoch,
    OffsetAndEpoch,
    OutboundRequest,
    OutboundResponse,
    ReplicaKey,
    VoteRequest,
    VoteResponse,
)
from kraft_node.raft.quorum_state import MemoryQuorumStateStore
from kraft_node.raft.roles import (
    CandidateState,
    ElectionState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from kraft_node.raft.sim.cluster import Cluster, SimConfig
from kraft_node.raft.snapshot import data_frame

CLUSTER = "cluster-A"


def key(i: int) -> ReplicaKey:
    return ReplicaKey(i, uuid.UUID(int=i))


def make_log(spec) -> MemoryRaftLog:
    """spec: [(epoch, number of records), ...] appended as one batch each, flushed."""
    log = MemoryRaftLog()
    off = 0
    for epoch, n in spec:
        log.append_as_follower([Batch(off, epoch, tuple(f"e{epoch}o{off + i}".encode() for i in range(n)))])
        off += n
    log.flush()
    return log


class Recorder:
    def __init__(self):
        self.events = []
        self.commits: list[Batch] = []

    def handle_commit(self, batches):
        self.commits.extend(batches)
        self.events.append(("commit", batches[0].base_offset, batches[-1].next_offset))

    def handle_load_snapshot(self, reader):
        self.events.append(("snapshot", reader.snapshot_id, tuple(r for b in reader for r in b.records)))

    def handle_leader_change(self, leader):
        self.events.append(("leader", leader))

    def next_offset(self):
        return self.commits[-1].next_offset if self.commits else 0


class Ctx:
    """Drives one RaftCore by hand on a manual clock."""

    def __init__(self, local=1, voters=(1, 2, 3), log=None, election=None, config=None, seed=1,
                 store=None, options=None):
        self.local = local
        self.options = options
        self.voters = voters
        self.config = config or QuorumConfig()
        self.log = log if log is not None else MemoryRaftLog()
        self.store = store if store is not None else MemoryQuorumStateStore(election)
        self.seed = seed
        self.now = 0
        self.outbox: list = []
        self.flush_jobs: list = []  # every job any poll returned (a test runs them)
        self.corr = 1000
        self.start()

    def start(self):
        self.core = RaftCore(self.config, key(self.local), [key(v) for v in self.voters], self.log,
                             self.store, random.Random(self.seed), cluster_id=CLUSTER, options=self.options)
        self.listener = Recorder()
        self.core.register_listener(self.listener)
        self.core.initialize(self.now)
        self.outbox = []

    @property
    def state(self):
        return self.core.state

    def poll(self):
        r = self.core.poll(self.now)
        self.outbox.extend(r.messages)
        self.flush_jobs.extend(r.flush_jobs)
        self.ready = r
        return r

    def advance(self, ms):
        self.now += ms
        return self.poll()

    def advance_to(self, t):
        self.now = t
        return self.poll()

    def take(self, typ, dest=None) -> list[OutboundRequest]:
        got = [m for m in self.outbox if isinstance(m, OutboundRequest) and isinstance(m.request, typ)
               and (dest is None or m.destination == dest)]
        self.outbox = [m for m in self.outbox if m not in got]
        return got

    def request(self, src, req):
        """Deliver a request; return its response (None if the core parked it)."""
        self.corr += 1
        corr = self.corr
        self.core.handle_request(src, corr, req, self.now)
        self.poll()
        return self.response_for(src, corr)

    def response_for(self, src, corr):
        for m in self.outbox:
            if isinstance(m, OutboundResponse) and m.destination == src and m.correlation_id == corr:
                self.outbox.remove(m)
                return m.response
        return None

    def reply(self, out: OutboundRequest, resp):
        self.core.handle_response(out.destination, out.correlation_id, resp, self.now)
        return self.poll()

    # ---- message builders
    def vote(self, src, epoch, last_epoch, last_offset, pre_vote=False, voter_dir=None, cluster=CLUSTER):
        return VoteRequest(cluster, self.local, epoch, src, key(src).directory_id,
                           voter_dir if voter_dir is not None else key(self.local).directory_id,
                           last_epoch, last_offset, pre_vote)

    def fetch(self, src, offset, last_epoch, epoch=None, max_wait=0, hwm=-1, cluster=CLUSTER):
        return FetchRequest(cluster, src, max_wait, self.core.epoch if epoch is None else epoch, offset,
                            last_epoch, replica_directory_id=key(src).directory_id, high_watermark=hwm)

    def elect(self):
        """Win an election: time out, collect pre-votes, then votes."""
        self.advance(2 * self.config.election_timeout_ms)
        assert isinstance(self.state, ProspectiveState), self.state
        for r in self.take(VoteRequest):
            assert r.request.pre_vote
            self.reply(r, VoteResponse(0, 0, -1, r.request.replica_epoch, True))
        assert isinstance(self.state, (CandidateState, LeaderState)), self.state
        for r in self.take(VoteRequest):
            assert not r.request.pre_vote
            self.reply(r, VoteResponse(0, 0, -1, r.request.replica_epoch, True))
        assert isinstance(self.state, LeaderState), self.state
        self.poll()
        return self.state

    def follow(self, leader=2, epoch=5, fetched=False):
        """Make the local replica a follower via BeginQuorumEpoch."""
        r = self.request(leader, BeginQuorumEpochRequest(CLUSTER, self.local, key(self.local).directory_id,
                                                         leader, epoch))
        assert r.partition_error_code == 0
        assert isinstance(self.state, FollowerState)
        if fetched:
            self.poll()
            f = self.take(FetchRequest, leader)[-1]
            self.reply(f, FetchResponse(0, 0, -1, LeaderIdAndEpoch(leader, epoch)))
        return self.state


# =====================================================================
# Restart initialization
# =====================================================================
def test_initialize_stale_quorum_state_starts_unattached_at_log_epoch():
    ctx = Ctx(log=make_log([(1, 2), (4, 1)]), election=ElectionState(2, 3, None))
    assert isinstance(ctx.state, UnattachedState) and ctx.state.epoch == 4
    assert ctx.store.state.epoch == 4


def test_initialize_former_leader_starts_resigned_in_same_epoch():
    ctx = Ctx(election=ElectionState(6, 1, key(1)))
    assert isinstance(ctx.state, ResignedState) and ctx.state.epoch == 6
    # it can never vote in its own epoch
    resp = ctx.request(2, ctx.vote(2, 6, 0, 0))
    assert not resp.vote_granted


def test_initialize_voted_for_self_starts_candidate():
    ctx = Ctx(election=ElectionState(3, -1, key(1)))
    assert isinstance(ctx.state, CandidateState) and ctx.state.epoch == 3


def test_initialize_known_leader_starts_follower():
    ctx = Ctx(election=ElectionState(3, 2, key(2)))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id() == 2
    assert ctx.state.voted_key == key(2)


def test_initialize_vote_without_leader_starts_unattached_with_vote():
    ctx = Ctx(election=ElectionState(3, -1, key(2)))
    assert isinstance(ctx.state, UnattachedState) and ctx.state.voted_key == key(2)


def test_initialize_single_voter_becomes_leader_immediately():
    ctx = Ctx(voters=(1,))
    assert isinstance(ctx.state, LeaderState) and ctx.state.epoch == 1


# =====================================================================
# Pre-vote (KIP-996) and the Prospective role
# =====================================================================
def test_election_timeout_goes_prospective_without_bumping_epoch():
    ctx = Ctx(election=ElectionState(4))
    writes = len(ctx.store.writes)
    ctx.advance(2 * ctx.config.election_timeout_ms)
    assert isinstance(ctx.state, ProspectiveState) and ctx.state.epoch == 4
    assert len(ctx.store.writes) == writes  # Prospective is not persisted
    reqs = ctx.take(VoteRequest)
    assert sorted(r.destination for r in reqs) == [2, 3]
    assert all(r.request.pre_vote and r.request.replica_epoch == 4 for r in reqs)


def test_fetch_timeout_moves_follower_to_prospective():
    ctx = Ctx(election=ElectionState(5, 2, None))
    assert isinstance(ctx.state, FollowerState)
    ctx.advance(ctx.config.fetch_timeout_ms - 1)
    assert isinstance(ctx.state, FollowerState)
    ctx.advance(1)
    assert isinstance(ctx.state, ProspectiveState) and ctx.state.epoch == 5


def test_prospective_majority_pre_votes_becomes_candidate_with_durable_self_vote():
    ctx = Ctx(election=ElectionState(4))
    ctx.advance(2000)
    r = [m for m in ctx.take(VoteRequest) if m.destination == 2][0]
    ready = ctx.reply(r, VoteResponse(0, 0, -1, 4, True))
    assert isinstance(ctx.state, CandidateState) and ctx.state.epoch == 5
    assert ctx.store.state == ElectionState(5, -1, key(1))
    assert ElectionState(5, -1, key(1)) in ready.quorum_state_writes
    votes = ctx.take(VoteRequest)
    assert votes and all(not v.request.pre_vote and v.request.replica_epoch == 5 for v in votes)


def test_prospective_loses_pre_vote_returns_to_follower_when_leader_known():
    ctx = Ctx(election=ElectionState(5, 2, None))
    ctx.advance(ctx.config.fetch_timeout_ms)
    assert isinstance(ctx.state, ProspectiveState)
    for r in ctx.take(VoteRequest):
        ctx.reply(r, VoteResponse(0, 0, 2, 5, False))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id() == 2 and ctx.state.epoch == 5


def test_prospective_loses_pre_vote_returns_to_unattached_without_leader():
    ctx = Ctx(election=ElectionState(5))
    ctx.advance(2000)
    for r in ctx.take(VoteRequest):
        ctx.reply(r, VoteResponse(0, 0, -1, 5, False))
    assert isinstance(ctx.state, UnattachedState) and ctx.state.epoch == 5


def test_nominee_that_learns_the_leader_of_its_epoch_follows_it():
    ctx = Ctx(election=ElectionState(5))
    ctx.advance(2000)
    assert isinstance(ctx.state, ProspectiveState)
    r = ctx.take(VoteRequest)[0]
    ctx.reply(r, VoteResponse(0, 0, 3, 5, False))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id() == 3 and ctx.state.epoch == 5


def test_pre_vote_unsupported_by_a_voter_falls_back_to_candidacy():
    ctx = Ctx(election=ElectionState(5))
    ctx.advance(2000)
    r = ctx.take(VoteRequest)[0]
    ctx.reply(r, VoteResponse(int(Errors.UNSUPPORTED_VERSION), 0, -1, -1, False))
    assert isinstance(ctx.state, CandidateState) and ctx.state.epoch == 6
    assert ctx.store.state == ElectionState(6, -1, key(1))


def test_follower_keeps_its_vote_when_it_learns_the_leader_of_the_same_epoch():
    ctx = Ctx(election=ElectionState(2))
    assert ctx.request(2, ctx.vote(2, 3, 0, 0)).vote_granted
    ctx.follow(leader=2, epoch=3)
    assert ctx.state.voted_key == key(2) and ctx.store.state == ElectionState(3, 2, key(2))


def test_follower_grants_pre_vote_before_it_has_fetched_from_leader():
    ctx = Ctx(log=make_log([(5, 3)]), election=ElectionState(5, 2, None))
    assert ctx.request(3, ctx.vote(3, 5, 5, 3, pre_vote=True)).vote_granted
    # one successful fetch from the leader and it stops granting pre-votes
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(0, 0, 3, LeaderIdAndEpoch(2, 5)))
    assert ctx.state.has_fetched_from_leader
    assert not ctx.request(3, ctx.vote(3, 5, 5, 3, pre_vote=True)).vote_granted


def test_pre_vote_never_records_a_vote():
    ctx = Ctx(election=ElectionState(5))
    resp = ctx.request(2, ctx.vote(2, 5, 0, 0, pre_vote=True))
    assert resp.vote_granted and ctx.core.epoch == 5
    assert ctx.state.voted_key is None and (ctx.store.state is None or ctx.store.state.voted_key is None)
    # a second pre-vote for another replica is granted too: nothing was bound
    assert ctx.request(3, ctx.vote(3, 5, 0, 0, pre_vote=True)).vote_granted


def test_pre_vote_with_a_higher_epoch_moves_to_unattached_at_that_epoch():
    ctx = Ctx(log=make_log([(2, 3)]), election=ElectionState(2, 2, None))
    assert isinstance(ctx.state, FollowerState)
    resp = ctx.request(3, ctx.vote(3, 3, 2, 3, pre_vote=True))
    assert resp.vote_granted and resp.leader_epoch == 3 and resp.leader_id == -1
    assert isinstance(ctx.state, UnattachedState) and ctx.state.epoch == 3 and ctx.state.voted_key is None


def test_candidate_pre_vote_only_when_log_up_to_date():
    ctx = Ctx(log=make_log([(2, 4)]), election=ElectionState(3, -1, key(1)))
    assert isinstance(ctx.state, CandidateState)
    assert ctx.request(2, ctx.vote(2, 3, 2, 4, pre_vote=True)).vote_granted
    assert not ctx.request(2, ctx.vote(2, 3, 2, 3, pre_vote=True)).vote_granted
    assert not ctx.request(2, ctx.vote(2, 3, 2, 4, pre_vote=False)).vote_granted


# =====================================================================
# Vote granting
# =====================================================================
def test_vote_rejected_when_candidate_log_is_not_up_to_date():
    ctx = Ctx(log=make_log([(1, 3), (2, 2)]), election=ElectionState(2))
    assert not ctx.request(2, ctx.vote(2, 3, 2, 4)).vote_granted        # shorter, same epoch
    assert not ctx.request(3, ctx.vote(3, 3, 1, 100)).vote_granted      # longer but older epoch
    assert ctx.request(3, ctx.vote(3, 3, 2, 5)).vote_granted            # equal


def test_one_vote_per_epoch():
    ctx = Ctx(election=ElectionState(2))
    assert ctx.request(2, ctx.vote(2, 3, 0, 0)).vote_granted
    assert not ctx.request(3, ctx.vote(3, 3, 0, 0)).vote_granted
    assert ctx.request(2, ctx.vote(2, 3, 0, 0)).vote_granted  # same candidate: idempotent


def test_granted_vote_is_durable_before_the_response_and_survives_restart():
    ctx = Ctx(election=ElectionState(2))
    ctx.core.handle_request(2, 77, ctx.vote(2, 3, 0, 0), ctx.now)
    # the store already holds the vote although no response has been polled out yet
    assert ctx.store.state == ElectionState(3, -1, key(2))
    ctx.start()  # crash + restart with the same store
    assert isinstance(ctx.state, UnattachedState) and ctx.state.voted_key == key(2)
    assert not ctx.request(3, ctx.vote(3, 3, 0, 0)).vote_granted


def test_unattached_or_prospective_with_a_known_leader_rejects_standard_votes():
    ctx = Ctx(election=ElectionState(5, 2, None))
    ctx.advance(ctx.config.fetch_timeout_ms)
    assert isinstance(ctx.state, ProspectiveState) and ctx.state.leader_id() == 2
    assert not ctx.request(3, ctx.vote(3, 5, 0, 0)).vote_granted
    assert ctx.request(3, ctx.vote(3, 5, 0, 0, pre_vote=True)).vote_granted


def test_vote_for_another_directory_id_is_invalid_voter_key():
    ctx = Ctx(election=ElectionState(2))
    resp = ctx.request(2, ctx.vote(2, 3, 0, 0, voter_dir=uuid.UUID(int=999)))
    assert resp.partition_error_code == Errors.INVALID_VOTER_KEY and not resp.vote_granted


def test_standard_vote_from_candidate_with_unknown_directory_id_is_rejected():
    ctx = Ctx(election=ElectionState(2))
    req = ctx.vote(2, 3, 0, 0)
    req = VoteRequest(req.cluster_id, req.voter_id, 3, 2, uuid.UUID(int=12345), req.voter_directory_id, 0, 0)
    assert not ctx.request(2, req).vote_granted


def test_vote_from_lower_epoch_is_fenced():
    ctx = Ctx(election=ElectionState(5))
    resp = ctx.request(2, ctx.vote(2, 4, 0, 0))
    assert resp.partition_error_code == Errors.FENCED_LEADER_EPOCH and resp.leader_epoch == 5


def test_standard_vote_with_higher_epoch_moves_to_unattached_even_if_rejected():
    ctx = Ctx(log=make_log([(3, 5)]), election=ElectionState(3, 2, None))
    resp = ctx.request(3, ctx.vote(3, 7, 1, 1))
    assert not resp.vote_granted
    assert isinstance(ctx.state, UnattachedState) and ctx.state.epoch == 7 and ctx.state.voted_key is None


def test_vote_request_with_last_epoch_not_below_its_epoch_is_invalid():
    ctx = Ctx(election=ElectionState(2))
    assert ctx.request(2, ctx.vote(2, 3, 3, 1)).error_code == Errors.INVALID_REQUEST
    assert ctx.request(2, ctx.vote(2, 3, 4, 1, pre_vote=True)).error_code == Errors.INVALID_REQUEST


def test_requests_from_another_cluster_are_inconsistent_cluster_id():
    ctx = Ctx(election=ElectionState(2))
    assert ctx.request(2, ctx.vote(2, 3, 0, 0, cluster="other")).error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert ctx.request(2, ctx.fetch(2, 0, 0, cluster="other")).error_code == Errors.INCONSISTENT_CLUSTER_ID
    assert ctx.store.state is None or ctx.store.state.voted_key is None


# =====================================================================
# Election timing
# =====================================================================
def test_randomized_election_timeout_is_between_t_and_2t():
    deadlines = set()
    for seed in range(40):
        ctx = Ctx(election=ElectionState(1), seed=seed)
        d = ctx.state.election_deadline
        assert 1000 <= d < 2000
        deadlines.add(d)
    assert len(deadlines) > 10


def test_candidate_election_backoff_is_binary_exponential_and_capped():
    rng, max_ms = random.Random(5), Ctx().config.election_backoff_max_ms
    for retries, hi in [(1, 100), (2, 300), (3, 700)]:
        vals = {binary_exponential_backoff(retries, rng, max_ms) for _ in range(300)}
        assert vals <= set(range(0, hi + 1, RETRY_BACKOFF_BASE_MS)) and max(vals) == hi
    assert max(binary_exponential_backoff(12, rng, max_ms) for _ in range(300)) == 1000  # capped


def test_candidate_that_loses_backs_off_then_goes_prospective():
    outcomes = set()
    for seed in range(20):
        ctx = Ctx(election=ElectionState(3, -1, key(1)), seed=seed)
        ctx.poll()
        for r in ctx.take(VoteRequest):
            ctx.reply(r, VoteResponse(0, 0, -1, 3, False))
        assert ctx.core.stats["election_lost"] == 1
        st = ctx.state
        if isinstance(st, CandidateState):
            # first loss: backoff is 0 or 100 ms (binary exponential, retries=1)
            assert st.backoff_deadline - ctx.now == 100
            ctx.advance(99)
            assert isinstance(ctx.state, CandidateState)
            ctx.advance(1)
            outcomes.add(100)
        else:
            outcomes.add(0)
        assert isinstance(ctx.state, ProspectiveState) and ctx.state.epoch == 3
    assert outcomes == {0, 100}


def test_end_quorum_epoch_backoff_is_strict_exponential_by_preferred_position():
    # position p of n successors: 0 for the first, else (max >> (n - 1)) << (p - 1)
    for preferred, expect in [((1, 3), 0), ((3, 1), 500), ((3, 2, 1), 500), ((3, 1, 2), 250),
                              ((2, 1, 3, 4), 125), ((3,), 1000)]:
        ctx = Ctx(voters=(1, 2, 3, 4), election=ElectionState(5, 2, None))
        ctx.now = 10
        resp = ctx.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, tuple(key(i) for i in preferred)))
        assert resp.partition_error_code == 0
        if expect == 0:
            assert isinstance(ctx.state, ProspectiveState)
        else:
            assert ctx.state.fetch_deadline == 10 + expect


def test_follower_told_of_resignation_grants_pre_votes_and_keeps_the_short_deadline():
    """Not Kafka (README): after EndQuorumEpoch from its leader a follower grants pre-votes
    (the leader said it is gone) and a Fetch answer still in flight does not push the
    shortened deadline back to a full fetch timeout."""
    ctx = Ctx(log=make_log([(5, 3)]), election=ElectionState(5, 2, None))
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    ctx.now = 10
    assert ctx.request(2, EndQuorumEpochRequest(CLUSTER, 2, 5, (key(3), key(1)))).partition_error_code == 0
    assert isinstance(ctx.state, FollowerState) and ctx.state.fetch_deadline == 10 + 500
    assert ctx.request(3, ctx.vote(3, 5, 5, 3, pre_vote=True)).vote_granted
    ctx.reply(f, FetchResponse(0, 0, 3, LeaderIdAndEpoch(2, 5)))  # sent before the resignation
    assert ctx.state.fetch_deadline == 10 + 500
    assert ctx.request(3, ctx.vote(3, 5, 5, 3, pre_vote=True)).vote_granted


def test_follower_whose_fetch_fails_at_the_transport_grants_pre_votes_again():
    """Not Kafka (README): a leader that cannot be reached does not count as heard from."""
    ctx = Ctx(log=make_log([(5, 3)]), election=ElectionState(5, 2, None))
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(0, 0, 3, LeaderIdAndEpoch(2, 5)))
    assert not ctx.request(3, ctx.vote(3, 5, 5, 3, pre_vote=True)).vote_granted
    deadline = ctx.state.fetch_deadline
    ctx.advance(1)
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(int(Errors.BROKER_NOT_AVAILABLE), 0, -1, LeaderIdAndEpoch(-1, -1)))
    assert isinstance(ctx.state, FollowerState) and ctx.state.fetch_deadline == deadline
    assert ctx.request(3, ctx.vote(3, 5, 5, 3, pre_vote=True)).vote_granted


def test_fetch_timeout_has_a_random_extra_of_at_most_a_quarter():
    """Followers answered together must not all time out in the same millisecond."""
    deadlines = set()
    for seed in range(20):
        ctx = Ctx(log=make_log([(5, 3)]), election=ElectionState(5, 2, None), seed=seed)
        ctx.poll()
        f = ctx.take(FetchRequest, 2)[0]
        ctx.now = 100
        ctx.reply(f, FetchResponse(0, 0, 3, LeaderIdAndEpoch(2, 5)))
        d = ctx.state.fetch_deadline - 100
        t = ctx.config.fetch_timeout_ms
        assert t <= d <= t + t // 4
        deadlines.add(d)
    assert len(deadlines) > 5


# =====================================================================
# Replication
# =====================================================================
def leader_ctx(spec=(), voters=(1, 2, 3), **kw):
    log = make_log(list(spec))
    last_epoch = log.last_fetched_epoch
    ctx = Ctx(voters=voters, log=log, election=ElectionState(last_epoch), **kw)
    ctx.elect()
    return ctx


def test_leader_change_control_record_written_on_becoming_leader():
    ctx = leader_ctx([(1, 3)])
    st = ctx.state
    assert st.epoch_start_offset == 3 and ctx.log.end_offset == 4
    b = ctx.log.batches()[-1]
    assert b.is_control and b.epoch == st.epoch and b.base_offset == 3
    assert b.control.leader_id == 1 and set(b.control.voters) == {1, 2, 3}
    assert 1 in b.control.granting_voters and len(b.control.granting_voters) >= 2


def test_fetch_at_diverging_epoch_returns_that_epochs_end():
    ctx = leader_ctx([(1, 3), (3, 2)])
    resp = ctx.request(2, ctx.fetch(2, 4, 2))
    assert resp.diverging_epoch == EpochEndOffset(1, 3) and not resp.records
    resp = ctx.request(2, ctx.fetch(2, 7, 3))  # offset past the end of epoch 3
    assert resp.diverging_epoch == EpochEndOffset(3, 5)
    resp = ctx.request(2, ctx.fetch(2, 3, 1))  # valid
    assert resp.diverging_epoch is None and resp.records[0].base_offset == 3


def test_follower_truncates_at_diverging_epoch():
    ctx = Ctx(log=make_log([(1, 3), (2, 2)]), election=ElectionState(4, 2, None))
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    assert (f.request.fetch_offset, f.request.last_fetched_epoch) == (5, 2)
    ctx.reply(f, FetchResponse(0, 0, -1, LeaderIdAndEpoch(2, 4), diverging_epoch=EpochEndOffset(1, 3)))
    assert ctx.log.end_offset == 3 and ctx.log.last_fetched_epoch == 1
    f = ctx.take(FetchRequest, 2)[0]
    assert (f.request.fetch_offset, f.request.last_fetched_epoch) == (3, 1)


def test_follower_never_truncates_below_high_watermark():
    ctx = Ctx(log=make_log([(1, 3), (2, 2)]), election=ElectionState(4, 2, None))
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(0, 0, 5, LeaderIdAndEpoch(2, 4)))
    assert ctx.core.high_watermark == 5
    ctx.advance(1)
    f = ctx.take(FetchRequest, 2)[0]
    with pytest.raises(InvariantViolation):
        ctx.reply(f, FetchResponse(0, 0, 5, LeaderIdAndEpoch(2, 4), diverging_epoch=EpochEndOffset(1, 3)))
    assert ctx.log.end_offset == 5


def test_fetch_below_log_start_returns_snapshot_id():
    log = make_log([(1, 3), (2, 3)])
    log.create_snapshot(OffsetAndEpoch(4, 2), data_frame([b"snap"]))
    log.delete_before(OffsetAndEpoch(4, 2))
    ctx = Ctx(log=log, election=ElectionState(2))
    ctx.elect()
    for offset, epoch in [(0, 0), (2, 1), (4, 1)]:
        resp = ctx.request(2, ctx.fetch(2, offset, epoch))
        assert resp.snapshot_id == OffsetAndEpoch(4, 2), (offset, epoch)
    assert ctx.request(2, ctx.fetch(2, 4, 2)).snapshot_id is None


def test_only_one_fetch_in_flight_per_follower():
    ctx = Ctx(election=ElectionState(4, 2, None))
    for _ in range(10):
        ctx.advance(50)
    fetches = ctx.take(FetchRequest)
    assert len(fetches) == 1
    ctx.reply(fetches[0], FetchResponse(0, 0, -1, LeaderIdAndEpoch(2, 4)))
    assert len(ctx.take(FetchRequest)) == 1
    # a duplicated (stale) response is ignored
    ctx.reply(fetches[0], FetchResponse(0, 0, -1, LeaderIdAndEpoch(2, 4)))
    assert len(ctx.take(FetchRequest)) == 0


def test_fetch_request_times_out_then_retries_after_backoff():
    ctx = Ctx(election=ElectionState(4, 2, None), config=QuorumConfig(request_timeout_ms=500))
    ctx.poll()
    assert len(ctx.take(FetchRequest)) == 1
    ctx.advance(ctx.config.request_timeout_ms - 1)
    assert not ctx.take(FetchRequest)
    ctx.advance(1)
    ctx.advance(ctx.config.retry_backoff_ms)
    assert len(ctx.take(FetchRequest)) == 1


def test_high_watermark_is_the_majority_end_offset():
    ctx = leader_ctx([], voters=(1, 2, 3, 4, 5))
    ctx.core.append([b"a", b"b"], ctx.core.epoch, ctx.now)
    ctx.advance(ctx.config.append_linger_ms)
    end, ep = ctx.log.end_offset, ctx.core.epoch
    assert end == 3
    ctx.request(2, ctx.fetch(2, end, ep))
    assert ctx.core.high_watermark is None  # 2 of 5
    ctx.request(3, ctx.fetch(3, 2, ep))
    assert ctx.core.high_watermark == 2  # 3 of 5 have reached offset 2
    ctx.request(4, ctx.fetch(4, end, ep))
    assert ctx.core.high_watermark == 3


def test_epoch_start_commit_rule_holds_back_prior_epoch_records():
    ctx = leader_ctx([(1, 5)])
    st = ctx.state
    assert st.epoch_start_offset == 5
    # a majority has the old records but not the LeaderChange of the new epoch
    ctx.request(2, ctx.fetch(2, 5, 1))
    assert ctx.core.high_watermark is None
    ctx.request(2, ctx.fetch(2, 6, st.epoch))
    assert ctx.core.high_watermark == 6


def test_high_watermark_is_monotonic():
    ctx = leader_ctx([(1, 5)])
    ep = ctx.core.epoch
    ctx.request(2, ctx.fetch(2, 6, ep))
    assert ctx.core.high_watermark == 6
    ctx.request(2, ctx.fetch(2, 5, 1))  # follower went back (e.g. restarted)
    assert ctx.core.high_watermark == 6


def test_observer_fetches_do_not_count_towards_high_watermark():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    ctx.request(9, FetchRequest(CLUSTER, 9, 0, ep, 1, ep))
    assert ctx.core.high_watermark is None
    assert 9 in ctx.state.observers
    ctx.request(2, ctx.fetch(2, 1, ep))
    assert ctx.core.high_watermark == 1


def test_empty_fetch_is_parked_until_new_data_arrives():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    ctx.request(2, ctx.fetch(2, 1, ep))
    ctx.request(3, ctx.fetch(3, 1, ep))
    assert ctx.core.high_watermark == 1
    assert ctx.request(2, ctx.fetch(2, 1, ep, max_wait=500, hwm=1)) is None  # parked
    ctx.core.append([b"x"], ep, ctx.now)
    ctx.advance(ctx.config.append_linger_ms)
    resp = [m.response for m in ctx.outbox if isinstance(m, OutboundResponse) and m.destination == 2]
    assert resp and resp[-1].records[0].records == (b"x",)


def test_parked_fetch_is_answered_at_max_wait():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    ctx.request(2, ctx.fetch(2, 1, ep))
    ctx.request(3, ctx.fetch(3, 1, ep))
    assert ctx.request(2, ctx.fetch(2, 1, ep, max_wait=500, hwm=1)) is None
    assert ctx.ready.next_wakeup_ms <= ctx.now + 500
    ctx.advance(499)
    assert not [m for m in ctx.outbox if isinstance(m, OutboundResponse)]
    ctx.advance(1)
    resp = [m.response for m in ctx.outbox if isinstance(m, OutboundResponse)]
    assert len(resp) == 1 and resp[0].records == () and resp[0].high_watermark == 1


def test_fetch_epoch_validation_errors():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    assert ctx.request(2, ctx.fetch(2, 0, 0, epoch=ep - 1)).partition_error_code == Errors.FENCED_LEADER_EPOCH
    assert ctx.request(2, ctx.fetch(2, 0, 0, epoch=ep + 1)).partition_error_code == Errors.UNKNOWN_LEADER_EPOCH
    follower = Ctx(election=ElectionState(4, 2, None))
    assert follower.request(3, follower.fetch(3, 0, 0, epoch=4)).partition_error_code == Errors.NOT_LEADER_OR_FOLLOWER


def test_malformed_fetch_is_invalid_request():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    for bad in (ctx.fetch(2, -1, 0), ctx.fetch(2, 0, -1), ctx.fetch(2, 0, ep + 1, epoch=ep),
                ctx.fetch(2, 0, 0, max_wait=-1)):
        assert ctx.request(2, bad).partition_error_code == Errors.INVALID_REQUEST


def test_begin_quorum_epoch_sent_to_voters_after_election():
    ctx = leader_ctx([])
    bqe = ctx.take(BeginQuorumEpochRequest)
    assert sorted(m.destination for m in bqe) == [2, 3]
    assert all(m.request.leader_epoch == ctx.core.epoch and m.request.leader_id == 1 for m in bqe)


def test_begin_quorum_epoch_makes_unattached_voter_follow_the_leader():
    ctx = Ctx(local=2, election=ElectionState(3))
    resp = ctx.request(1, BeginQuorumEpochRequest(CLUSTER, 2, key(2).directory_id, 1, 4))
    assert resp.partition_error_code == 0 and resp.leader_epoch == 4
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id() == 1
    assert ctx.store.state == ElectionState(4, 1, None)
    stale = ctx.request(3, BeginQuorumEpochRequest(CLUSTER, 2, key(2).directory_id, 3, 3))
    assert stale.partition_error_code == Errors.FENCED_LEADER_EPOCH


def test_check_quorum_resigns_after_one_and_a_half_fetch_timeouts():
    ctx = leader_ctx([])
    t0 = ctx.now
    ctx.advance_to(t0 + 2999)
    assert isinstance(ctx.state, LeaderState)
    ctx.advance_to(t0 + 3000)
    assert isinstance(ctx.state, ResignedState)
    assert sorted(m.destination for m in ctx.take(EndQuorumEpochRequest)) == [2, 3]


def test_check_quorum_is_reset_by_fetches_from_a_majority():
    ctx = leader_ctx([])
    t0 = ctx.now
    ctx.advance_to(t0 + 2000)
    ctx.request(2, ctx.fetch(2, 1, ctx.core.epoch))
    ctx.advance_to(t0 + 4999)
    assert isinstance(ctx.state, LeaderState)
    ctx.advance_to(t0 + 5000)
    assert isinstance(ctx.state, ResignedState)


def test_single_voter_leader_never_resigns_on_check_quorum():
    ctx = Ctx(voters=(1,))
    ctx.advance(100_000)
    assert isinstance(ctx.state, LeaderState)


def test_higher_epoch_in_a_response_makes_the_leader_step_down():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    bqe = ctx.take(BeginQuorumEpochRequest, 2)[0]
    from kraft_node.raft.messages import BeginQuorumEpochResponse
    ctx.reply(bqe, BeginQuorumEpochResponse(0, 0, 3, ep + 1))
    assert isinstance(ctx.state, FollowerState) and ctx.state.epoch == ep + 1 and ctx.state.leader_id() == 3


# =====================================================================
# Listener API
# =====================================================================
def test_listener_receives_only_committed_records_in_offset_order():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    ctx.core.append([b"a", b"b"], ep, ctx.now)
    ctx.advance(25)
    assert ctx.listener.next_offset() == 0
    ctx.request(2, ctx.fetch(2, 1, ep))
    assert ctx.listener.next_offset() == 1
    ctx.request(2, ctx.fetch(2, 3, ep))
    assert ctx.listener.next_offset() == 3
    offs = [b.base_offset for b in ctx.listener.commits]
    assert offs == sorted(offs)
    assert ctx.listener.commits[-1].records == (b"a", b"b")


def test_leader_listener_gets_in_memory_batches_without_reading_the_log():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    ctx.core.append([b"a"], ep, ctx.now)
    ctx.advance(25)

    def no_read(*a, **k):
        raise AssertionError("the leader re-read its own batches")

    ctx.log.read = no_read
    # Commit offsets [0, 2): follower 2 fetches at the end, so the answer carries no batch and
    # the leader reads nothing to serve it.
    ctx.request(2, ctx.fetch(2, 2, ep))
    ctx.poll()
    assert ctx.listener.next_offset() == 2 and ctx.listener.commits[-1].records == (b"a",)


def test_leader_change_fires_after_prior_epoch_commits_and_before_new_ones():
    ctx = leader_ctx([(1, 3)])
    ep = ctx.core.epoch
    ctx.request(2, ctx.fetch(2, 4, ep))
    events = ctx.listener.events
    pos = events.index(("leader", LeaderAndEpoch(1, ep)))
    before = [e for e in events[:pos] if e[0] == "commit"]
    after = [e for e in events[pos:] if e[0] == "commit"]
    assert before and before[-1][2] == 3  # all prior-epoch data first
    assert after and after[0][1] == 3     # then the new epoch, starting at its LeaderChange


def test_listener_loads_snapshot_when_the_log_starts_after_it():
    log = make_log([(1, 4)])
    log.create_snapshot(OffsetAndEpoch(3, 1), data_frame([b"state@3"]))
    log.delete_before(OffsetAndEpoch(3, 1))
    ctx = Ctx(log=log, election=ElectionState(1, 2, None))
    ctx.poll()
    assert ("snapshot", OffsetAndEpoch(3, 1), (b"state@3",)) in ctx.listener.events
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(0, 0, 4, LeaderIdAndEpoch(2, 1)))
    assert ctx.listener.commits[0].base_offset == 3 and ctx.listener.next_offset() == 4


def test_listener_streams_a_memory_snapshot_larger_than_any_read():
    """A MemoryRaftLog snapshot of many batches, larger than the node's fetch.max.bytes, is
    handed to the listener as a reader: every batch in order, at contiguous offsets, with the
    writer's timestamp and the snapshot's epoch; the core's control state comes from its head
    (kraft.version 1 and the voter set) without the listener seeing those batches."""
    from kraft_node.raft.voters import FramedSnapshotControl, VoterSet

    class Loads(Recorder):
        def handle_load_snapshot(self, reader):
            self.reader = reader
            self.loaded = (reader.snapshot_id, reader.last_contained_log_time_ms,
                           [(b.base_offset, b.epoch, b.records) for b in reader])

    sid = OffsetAndEpoch(4, 1)
    log = make_log([(1, 4)])
    voters = VoterSet.of([ReplicaKey(1, None), ReplicaKey(2, None), ReplicaKey(3, None)])
    w = FramedSnapshotControl().writer(log.create_raw_snapshot(sid), 1, voters, 777)
    batches = [tuple(bytes([i, j]) * 500 for j in range(3)) for i in range(40)]
    for records in batches:
        w.append(records)
    w.freeze()
    log.delete_before(sid)
    cfg = QuorumConfig(fetch_max_bytes=4096)
    assert len(log.read_snapshot(sid)) > 10 * cfg.fetch_max_bytes
    ctx = Ctx(log=log, election=ElectionState(1, 2, None), config=cfg)
    listener = Loads()
    ctx.core.register_listener(listener)
    ctx.poll()
    got_sid, ts, got = listener.loaded
    assert got_sid == sid and ts == 777
    assert [records for _, _, records in got] == batches
    assert [base for base, _, _ in got] == [2 + 3 * i for i in range(40)]  # after the two control batches
    assert {epoch for _, epoch, _ in got} == {1}
    assert ctx.core.kraft_version == 1 and ctx.core.voter_set == voters
    with pytest.raises(ValueError, match="closed"):  # closed once the call returned
        list(listener.reader)


def test_corrupt_memory_snapshot_fails_naming_it_and_the_position():
    from kraft_node.raft.snapshot import data_frame
    log = MemoryRaftLog()
    sid = OffsetAndEpoch(3, 1)
    good = data_frame([b"a", b"b"]) + data_frame([b"c"])
    log.create_snapshot(sid, good[:-1])  # the second batch is cut short
    with log.open_snapshot(sid) as r:
        it = iter(r)
        assert next(it).records == (b"a", b"b")
        where = r"memory snapshot \(3, 1\).* at position %d" % len(data_frame([b"a", b"b"]))
        with pytest.raises(RaftError, match=where):
            next(it)


# =====================================================================
# Snapshots
# =====================================================================
def test_create_snapshot_requires_a_committed_offset_in_the_right_epoch():
    ctx = leader_ctx([(1, 3)])
    ep = ctx.core.epoch
    with pytest.raises(RaftError):
        ctx.core.create_snapshot(OffsetAndEpoch(3, 1), data_frame([b"s"]))  # nothing committed yet
    ctx.request(2, ctx.fetch(2, 4, ep))
    with pytest.raises(RaftError):
        ctx.core.create_snapshot(OffsetAndEpoch(3, ep), data_frame([b"s"]))  # wrong epoch for offset 2
    ctx.core.create_snapshot(OffsetAndEpoch(3, 1), data_frame([b"s"]))
    assert ctx.log.start_offset == 3 and ctx.log.latest_snapshot_id() == OffsetAndEpoch(3, 1)


def test_fetch_snapshot_is_served_in_slices():
    cfg = QuorumConfig(fetch_snapshot_max_bytes=4)
    log = make_log([(1, 3)])
    data = data_frame([b"0123456789"])
    log.create_snapshot(OffsetAndEpoch(3, 1), data)
    log.delete_before(OffsetAndEpoch(3, 1))
    ctx = Ctx(log=log, election=ElectionState(1), config=cfg)
    ctx.elect()
    ep = ctx.core.epoch
    got = b""
    while True:
        r = ctx.request(2, FetchSnapshotRequest(CLUSTER, 2, 100, ep, OffsetAndEpoch(3, 1), len(got)))
        assert r.partition_error_code == 0 and r.size == len(data) and r.position == len(got)
        got += r.unaligned_records
        if len(got) == r.size:
            break
    assert got == data
    bad = ctx.request(2, FetchSnapshotRequest(CLUSTER, 2, 100, ep, OffsetAndEpoch(3, 1), len(data)))
    assert bad.partition_error_code == Errors.POSITION_OUT_OF_RANGE
    missing = ctx.request(2, FetchSnapshotRequest(CLUSTER, 2, 100, ep, OffsetAndEpoch(2, 1), 0))
    assert missing.partition_error_code == Errors.SNAPSHOT_NOT_FOUND


def test_fetched_snapshot_is_installed_and_log_truncated_to_it():
    c = Cluster(11, SimConfig(voters=3, quorum=QuorumConfig(fetch_snapshot_max_bytes=64)))
    c.start_all()
    c.run_for(3000)
    leader = c.leaders()[0]
    lagger = next(i for i in c.voter_ids if i != leader.id)
    c.crash(lagger)
    for _ in range(30):
        c.client_append(4)
        c.run_for(30)
    c.run_for(500)
    assert c.maybe_snapshot(leader.id)
    sid = leader.log.latest_snapshot_id()
    assert leader.log.start_offset == sid.offset > 0
    c.restart(lagger)
    c.run_for(5000)
    n = c.nodes[lagger]
    assert n.core.stats["snapshots_installed"] == 1
    assert n.core.stats["snapshot_slices"] > 1
    assert n.log.latest_snapshot_id() == sid and n.log.start_offset >= sid.offset
    assert n.sm.snapshots_loaded == 1 and len(n.sm.entries) == n.core.high_watermark
    c.checker.final_check()


def test_snapshot_not_found_mid_download_restarts_with_a_plain_fetch():
    ctx = Ctx(election=ElectionState(4, 2, None))
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(0, 0, -1, LeaderIdAndEpoch(2, 4), snapshot_id=OffsetAndEpoch(10, 3)))
    fs = ctx.take(FetchSnapshotRequest, 2)
    assert len(fs) == 1 and fs[0].request.position == 0
    from kraft_node.raft.messages import FetchSnapshotResponse
    ctx.reply(fs[0], FetchSnapshotResponse(0, int(Errors.SNAPSHOT_NOT_FOUND), OffsetAndEpoch(10, 3),
                                           LeaderIdAndEpoch(2, 4)))
    assert ctx.state.fetching_snapshot is None
    ctx.advance(ctx.config.retry_backoff_ms)
    assert len(ctx.take(FetchRequest, 2)) == 1 and not ctx.take(FetchSnapshotRequest)


# =====================================================================
# Graceful shutdown and resignation
# =====================================================================
def test_graceful_shutdown_of_leader_resigns_and_hands_over():
    c = Cluster(5, SimConfig(voters=3))
    c.start_all()
    c.run_for(3000)
    old = c.leaders()[0]
    old_epoch = old.core.epoch
    c.shutdown_gracefully(old.id, timeout_ms=5000)
    assert isinstance(old.core.state, ResignedState)
    c.run_for(3000)
    assert not old.alive  # shutdown completed (the node stopped)
    new = c.leaders()
    assert len(new) == 1 and new[0].id != old.id and new[0].core.epoch > old_epoch
    assert old.store.state.epoch > old_epoch  # it learned the new leader before stopping


def test_graceful_shutdown_of_follower_completes_immediately():
    ctx = Ctx(election=ElectionState(4, 2, None))
    ctx.core.begin_shutdown(5000, ctx.now)
    r = ctx.poll()
    assert r.shutdown_complete and not r.shutdown_timed_out


def test_graceful_shutdown_times_out_without_a_new_leader():
    ctx = leader_ctx([])
    ctx.core.begin_shutdown(1000, ctx.now)
    r = ctx.poll()
    assert isinstance(ctx.state, ResignedState) and not r.shutdown_complete
    r = ctx.advance(1000)
    assert r.shutdown_complete and r.shutdown_timed_out


def test_resigned_leader_moves_to_unattached_in_the_next_epoch_after_election_timeout():
    ctx = Ctx(election=ElectionState(6, 1, key(1)))
    assert isinstance(ctx.state, ResignedState)
    ctx.advance_to(ctx.state.election_deadline)
    assert ctx.core.epoch == 7 and isinstance(ctx.state, (UnattachedState, ProspectiveState))


def test_resign_api_makes_the_leader_resign():
    ctx = leader_ctx([])
    ctx.core.resign(ctx.core.epoch + 1)  # wrong epoch: ignored
    ctx.poll()
    assert isinstance(ctx.state, LeaderState)
    ctx.core.resign(ctx.core.epoch)
    ctx.poll()
    assert isinstance(ctx.state, ResignedState)
    eqe = ctx.take(EndQuorumEpochRequest)
    assert eqe and eqe[0].request.leader_epoch == ctx.core.epoch


def test_resigned_leader_retries_end_quorum_epoch_until_acknowledged():
    ctx = leader_ctx([], config=QuorumConfig(request_timeout_ms=300))
    ep = ctx.core.epoch
    ctx.core.resign(ep)
    ctx.poll()
    first = {m.destination: m for m in ctx.take(EndQuorumEpochRequest)}
    assert set(first) == {2, 3}
    from kraft_node.raft.messages import EndQuorumEpochResponse
    ctx.reply(first[2], EndQuorumEpochResponse(0, 0, -1, ep))
    ctx.advance(ctx.config.request_timeout_ms)  # 3's request times out: retry backoff starts
    assert not ctx.take(EndQuorumEpochRequest)
    ctx.advance(ctx.config.retry_backoff_ms)
    again = [m.destination for m in ctx.take(EndQuorumEpochRequest)]
    assert again == [3]  # 2 acknowledged; 3's request timed out and is retried


# =====================================================================
# Observers
# =====================================================================
def test_unattached_observer_discovers_the_leader_by_fetching_a_voter():
    ctx = Ctx(local=9, voters=(1, 2, 3))
    assert isinstance(ctx.state, UnattachedState) and ctx.state.election_deadline is None
    ctx.poll()
    f = ctx.take(FetchRequest)
    assert len(f) == 1 and f[0].destination in (1, 2, 3) and f[0].request.replica_id == 9
    ctx.reply(f[0], FetchResponse(0, int(Errors.FENCED_LEADER_EPOCH), -1, LeaderIdAndEpoch(2, 7)))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id() == 2 and ctx.state.epoch == 7
    ctx.advance(ctx.config.retry_backoff_ms)
    assert [m.destination for m in ctx.take(FetchRequest)] == [2]


def test_observer_never_starts_an_election_and_never_votes():
    ctx = Ctx(local=9, voters=(1, 2, 3), election=ElectionState(4, 2, None))
    assert isinstance(ctx.state, FollowerState)
    ctx.advance(10 * ctx.config.fetch_timeout_ms)
    assert not isinstance(ctx.state, (ProspectiveState, CandidateState))
    assert not ctx.take(VoteRequest)
    resp = ctx.request(1, VoteRequest(CLUSTER, 9, 5, 1, key(1).directory_id, None, 4, 0))
    assert not resp.vote_granted and resp.partition_error_code == 0
    assert ctx.store.state.voted_key is None
    # pre-votes are non-binding: an observer answers them like any replica
    resp = ctx.request(1, VoteRequest(CLUSTER, 9, 5, 1, key(1).directory_id, None, 4, 0, True))
    assert resp.vote_granted


def test_pre_vote_from_a_non_voter_is_answered_but_standard_vote_is_not_granted():
    ctx = Ctx(election=ElectionState(2))
    req = VoteRequest(CLUSTER, 1, 3, 7, None, key(1).directory_id, 0, 0, True)
    assert ctx.request(7, req).vote_granted
    req = VoteRequest(CLUSTER, 1, 3, 7, None, key(1).directory_id, 0, 0, False)
    assert not ctx.request(7, req).vote_granted
    assert ctx.store.state.voted_key is None


def test_observer_does_not_flush_fetched_data_but_voters_do():
    for local, flushed in [(9, False), (3, True)]:
        ctx = Ctx(local=local, voters=(1, 2, 3), election=ElectionState(4, 2, None))
        ctx.poll()
        f = ctx.take(FetchRequest, 2)[0]
        ctx.reply(f, FetchResponse(0, 0, 1, LeaderIdAndEpoch(2, 4), records=(Batch(0, 4, (b"x",)),)))
        assert ctx.log.end_offset == 1
        assert (ctx.log.flushed_end_offset == 1) == flushed


def test_leader_resends_begin_quorum_epoch_to_voters_that_do_not_fetch():
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    ctx.take(BeginQuorumEpochRequest)
    ctx.request(2, ctx.fetch(2, 1, ep))  # 2 fetches, 3 stays silent
    ctx.advance(ctx.config.request_timeout_ms)  # the first BQE to 3 times out
    ctx.request(2, ctx.fetch(2, 1, ep))  # keeps check-quorum satisfied
    ctx.advance(ctx.config.begin_quorum_epoch_timeout_ms)
    assert isinstance(ctx.state, LeaderState)
    assert [m.destination for m in ctx.take(BeginQuorumEpochRequest)] == [3]


def test_quorum_config_uses_kafka_names_and_defaults():
    cfg = QuorumConfig()
    assert (cfg.election_timeout_ms, cfg.election_backoff_max_ms, cfg.fetch_timeout_ms, cfg.request_timeout_ms,
            cfg.retry_backoff_ms, cfg.append_linger_ms) == (1000, 1000, 2000, 2000, 20, 25)
    assert cfg.check_quorum_timeout_ms == 3000
    cfg = QuorumConfig.from_properties({"controller.quorum.election.timeout.ms": "500",
                                        "controller.quorum.append.linger.ms": "5",
                                        "controller.quorum.voters": "1@a:1", "other.key": "x"})
    assert cfg.election_timeout_ms == 500 and cfg.append_linger_ms == 5
    with pytest.raises(ValueError):
        QuorumConfig.from_properties({"controller.quorum.bogus.ms": "1"})


def test_listener_catch_up_is_chunked_by_fetch_max_bytes_and_complete():
    log = make_log([(1, 1)] * 20)
    ctx = Ctx(log=log, election=ElectionState(1, 2, None), config=QuorumConfig(fetch_max_bytes=200))
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[0]
    ctx.reply(f, FetchResponse(0, 0, 20, LeaderIdAndEpoch(2, 1)))
    commits = [e for e in ctx.listener.events if e[0] == "commit"]
    assert len(commits) > 1
    assert [b.base_offset for b in ctx.listener.commits] == list(range(20))


def test_fetch_answered_by_the_leader_of_our_epoch_is_used_right_away():
    ctx = Ctx(local=9, voters=(1, 2, 3), election=ElectionState(4))
    ctx.poll()
    f = ctx.take(FetchRequest)[0]
    leader = f.destination
    ctx.reply(f, FetchResponse(0, 0, 1, LeaderIdAndEpoch(leader, 4), records=(Batch(0, 4, (b"x",)),)))
    assert isinstance(ctx.state, FollowerState) and ctx.state.leader_id() == leader
    assert ctx.log.end_offset == 1 and ctx.core.high_watermark == 1


def test_leader_and_resigned_election_state_records_no_vote():
    # Kafka's LeaderState/ResignedState.election() is withElectedLeader(epoch, localId): the
    # quorum-state file of a leader says votedId -1 (as every Kafka fixture file does).
    ctx = Ctx(local=1, voters=(1,))
    assert isinstance(ctx.state, (LeaderState, ProspectiveState, CandidateState))
    ctx.advance(10)
    assert isinstance(ctx.state, LeaderState)
    assert ctx.store.state.leader_id == 1 and ctx.store.state.voted_key is None
    # a former leader of a multi-voter quorum restarts Resigned in its epoch, still with no vote
    ctx = Ctx(local=1, voters=(1, 2, 3), election=ElectionState(5, 1, None))
    assert isinstance(ctx.state, ResignedState) and ctx.state.epoch == 5
    assert ctx.store.state.voted_key is None


def test_restarted_single_voter_leader_leads_again_at_once():
    # Kafka's KafkaRaftClient.initialize: the only voter becomes candidate whatever state it
    # restarted in (a former leader starts Resigned), so it leads the next epoch without
    # waiting an election timeout.
    ctx = Ctx(local=1, voters=(1,))
    ctx.advance(10)
    assert isinstance(ctx.state, LeaderState)
    epoch = ctx.core.epoch
    ctx.start()  # restart from the stored state
    assert isinstance(ctx.state, LeaderState) and ctx.state.epoch == epoch + 1
    assert ctx.store.state.leader_id == 1 and ctx.store.state.epoch == epoch + 1


def _follower_fetches_one_record(ctx):
    """Node 1 follows leader 2 in epoch 5 and gets one record at offset 0 in a Fetch answer:
    returns that poll's Ready and its next Fetch requests (asserted to ask for offset 1)."""
    ctx.follow(leader=2, epoch=5, fetched=True)
    ctx.poll()
    f = ctx.take(FetchRequest, 2)[-1]
    r = ctx.reply(f, FetchResponse(0, 0, 1, LeaderIdAndEpoch(2, 5), 0, None, None, (Batch(0, 5, (b"a",)),)))
    nxt = [m for m in r.messages if isinstance(m, OutboundRequest) and isinstance(m.request, FetchRequest)]
    assert nxt and nxt[-1].request.fetch_offset == 1
    return r, nxt


def test_deferred_listeners_let_the_followers_next_fetch_go_out_first():
    """Kafka's poll order (requests of pollCurrentState are sent before pollListeners):
    with ``defer_listeners`` a follower's poll returns its next Fetch -- the one the
    leader's commit waits for -- before any listener hears of the newly committed data."""
    ctx = Ctx(local=1, options=CoreOptions(defer_listeners=True))
    _r, _nxt = _follower_fetches_one_record(ctx)
    assert ctx.listener.next_offset() == 0  # not delivered by poll
    ctx.core.poll_listeners()
    assert ctx.listener.next_offset() == 1 and ctx.listener.commits[-1].records == (b"a",)


def test_append_names_its_epoch_and_fails_once_that_epoch_is_over():
    """Kafka's scheduleAppend(epoch, records): an append prepared in one epoch is refused
    (NotLeaderError) in any other -- also when the same node leads again later -- so a
    state machine never writes under an epoch it did not claim."""
    ctx = Ctx(local=1, voters=(1,))  # the only voter: it leads at once
    ctx.poll()
    core = ctx.core
    assert core.is_leader
    ep = core.epoch
    with pytest.raises(NotLeaderError):
        core.append([b"x"], ep - 1, ctx.now)
    with pytest.raises(NotLeaderError):
        core.append([b"x"], ep + 1, ctx.now)
    last = core.append([b"a"], ep, ctx.now)
    ctx.poll()
    ctx.start()  # a restart: the only voter stands again at once, in a new epoch
    ctx.poll()
    core = ctx.core
    assert core.is_leader and core.epoch > ep
    with pytest.raises(NotLeaderError):
        core.append([b"late"], ep, ctx.now)  # the same node, but not the epoch it claimed
    assert core.append([b"b"], core.epoch, ctx.now) > last


def _single_voter_with_commits(ctx, n=3):
    ctx.poll()
    core = ctx.core
    for i in range(n):
        core.append([b"r%d" % i], core.epoch, ctx.now)
        ctx.advance(10)
    ctx.advance(10)
    assert core.high_watermark == ctx.log.end_offset
    return core


def test_snapshot_writer_streams_to_the_log_and_drops_the_prefix_on_freeze():
    """Kafka's createSnapshot: the state machine writes a snapshot batch by batch; nothing
    is stored (nor the log prefix dropped) until freeze(); close() before that aborts."""
    ctx = Ctx(local=1, voters=(1,))
    core = _single_voter_with_commits(ctx)
    log = ctx.log
    sid = OffsetAndEpoch(core.high_watermark, core.epoch)
    with core.create_snapshot(sid) as aborted:
        aborted.append([b"never"])
    assert log.latest_snapshot_id() is None and log.start_offset == 0
    w = core.create_snapshot(sid)
    w.append([b"a", b"b"])
    w.append([b"c"])
    assert log.latest_snapshot_id() is None and log.start_offset == 0  # not before freeze
    w.freeze()
    assert log.latest_snapshot_id() == sid and log.start_offset == sid.offset
    with log.open_snapshot(sid) as r:  # one batch per append, in order
        assert [b.records for b in r] == [(b"a", b"b"), (b"c",)]
    with pytest.raises(RaftError, match="not after the latest snapshot"):
        core.create_snapshot(sid)


def test_leader_flush_leaves_the_loop_for_a_steady_stream_of_small_batches_not_for_a_lone_one():
    """With flush jobs on and a 1,000-byte threshold: a lone small batch is fsync'd in line
    by the next poll (no job: a lone commit would wait for a thread hand-off), while small
    batches arriving back to back (linger 0 under load) go to jobs once 1,000 bytes were
    appended within the rate window -- else every poll would block its loop for an fsync.
    (The rule is the TCP driver's policy, io.flush.RateFlush, run by the core here.)"""
    from kraft_node.raft.io.flush import RateFlush
    ctx = Ctx(config=QuorumConfig(append_linger_ms=0), options=CoreOptions(flush=RateFlush(min_bytes=1000)))
    ctx.elect()
    core = ctx.core
    ctx.advance(1000)  # quiet: the epoch-start batch is long past

    def append_and_poll(n_bytes=200):
        core.append([b"x" * n_bytes], core.epoch, ctx.now)
        made = []
        for _ in range(2):  # drain + answer (a job may start here), then the owed flush
            r = ctx.poll()
            made += r.flush_jobs
            for job in r.flush_jobs:
                job.run()
                core.handle_flush_done(job, ctx.now)
        return len(made)

    assert append_and_poll() == 0                       # lone: in line
    assert ctx.log.flushed_end_offset == ctx.log.end_offset
    ctx.advance(100)
    got = []
    for _ in range(8):                                  # a stream: one batch per ms
        got.append(append_and_poll())
        ctx.advance(1)
    assert got[:3] == [0, 0, 0] and sum(got[3:]) == 5, got  # ~1,000 bytes in: jobs from then on
    assert ctx.log.flushed_end_offset == ctx.log.end_offset
    ctx.advance(100)                                    # quiet again: back in line
    assert append_and_poll() == 0


def test_follower_fetch_reports_only_a_durable_end_offset_and_waits_for_an_async_flush():
    """Rule 2 (a voter's Fetch reports a durable end offset), with ``async_follower_flush``:
    the fetched records are fsync'd by a job, and the next Fetch -- fetch offset = the new
    end -- comes out of the same poll held behind that job (``after_flush``).  The job
    landing durable says so (True); a job the log's truncation overtook says False, so its
    held Fetch is never sent.  Without the flag the follower fsyncs in line."""
    for async_flush in (False, True):
        ctx = Ctx(local=1, options=CoreOptions(flush=JobFlush(leader_jobs=False, follower_jobs=True))
                  if async_flush else None)
        r, nxt = _follower_fetches_one_record(ctx)
        if not async_flush:
            assert r.flush_jobs == [] and nxt[-1].after_flush is None
            assert ctx.log.flushed_end_offset == 1
            continue
        assert len(r.flush_jobs) == 1 and nxt[-1].after_flush is r.flush_jobs[0]
        assert ctx.log.flushed_end_offset == 0  # not durable until the job runs
        job = r.flush_jobs[0]
        job.run()
        assert ctx.core.handle_flush_done(job, ctx.now) is True
        assert ctx.log.flushed_end_offset == 1
        # a job overtaken by a truncation of the bytes it covered is not durable
        r2 = ctx.reply(nxt[-1], FetchResponse(0, 0, 1, LeaderIdAndEpoch(2, 5), 0, None, None,
                                              (Batch(1, 5, (b"b",)),)))
        job2 = r2.flush_jobs[0]
        ctx.log.truncate_to(1)
        job2.run()
        assert ctx.core.handle_flush_done(job2, ctx.now) is False


def test_leader_answers_a_lagging_voter_from_memory_within_a_byte_cap(monkeypatch):
    """The leader keeps the batches it wrote until every listener has them *and* every voter
    has fetched them: a follower behind the high watermark (with 3 voters one of the two
    usually is) is answered from memory, not by reading the log back.  Over
    RECENT_BATCHES_MAX_BYTES the oldest go (a dead voter must not pin memory) and that
    follower reads the log -- the same records either way."""
    from kraft_node.raft import fetch_serving
    ctx = leader_ctx([])
    ep = ctx.core.epoch
    start = ctx.log.end_offset  # after the LeaderChange record
    ctx.request(2, ctx.fetch(2, start, ep))
    ctx.request(3, ctx.fetch(3, start, ep))

    def append_batches(n, tag):
        for i in range(n):
            ctx.core.append([b"%s%d" % (tag, i)], ep, ctx.now)
            ctx.advance(ctx.config.append_linger_ms)
            ctx.poll()

    def records(resp):
        return [r for b in resp.records for r in b.records]

    append_batches(5, b"a")
    end = ctx.log.end_offset
    ctx.request(2, ctx.fetch(2, end, ep))  # leader + node 2: all committed, the listener has it
    assert ctx.core.high_watermark == end and ctx.listener.next_offset() == end
    read_back = []
    real_read = ctx.log.read
    monkeypatch.setattr(ctx.log, "read", lambda *a: read_back.append(a) or real_read(*a))
    resp = ctx.request(3, ctx.fetch(3, start, ep))
    assert records(resp) == [b"a%d" % i for i in range(5)] and read_back == []  # from memory

    # node 3 falls behind again; with a cap of 1 byte the batches it lacks are dropped
    append_batches(3, b"b")
    end2 = ctx.log.end_offset
    monkeypatch.setattr(fetch_serving, "RECENT_BATCHES_MAX_BYTES", 1)
    ctx.request(2, ctx.fetch(2, end2, ep))
    assert ctx.core.high_watermark == end2 and ctx.core.recent_batches == (0, 0)
    resp = ctx.request(3, ctx.fetch(3, end, ep))
    assert records(resp) == [b"b%d" % i for i in range(3)] and read_back  # from the log


def test_leader_answers_parked_fetches_before_writing_the_batch_to_its_file(tmp_path):
    """Write-behind (KafkaRaftLog): a leader poll that appends answers the parked Fetches
    with the new batch while the log still holds its bytes back -- nothing written, no
    fsync started -- and asks to be polled again at once; the driver writes the batch once
    the answers are on the wire, and that next poll starts its fsync.  Positions count the batch
    throughout, and a follower fetching it gets the same bytes the file ends up with."""
    from kraft_node.raft.io.kafka_log import KafkaRaftLog
    log = KafkaRaftLog(str(tmp_path / "__cluster_metadata-0"))
    # the TCP driver's default ("aio"): fsync as a flush job, deferred while the log holds back
    ctx = Ctx(log=log, config=QuorumConfig(append_linger_ms=0),
              options=CoreOptions(flush=JobFlush(held_back=lambda: log.pending_writes)))
    ctx.elect()
    core = ctx.core
    for _ in range(3):  # the LeaderChange batch: written and flushed
        jobs, ctx.flush_jobs = ctx.flush_jobs, []
        for job in jobs:
            job.run()
            core.handle_flush_done(job, ctx.now)
        ctx.poll()
    ep, start = core.epoch, log.end_offset
    assert log.pending_writes == 0 and log.flushed_end_offset == start
    for f in (2, 3):  # each follower at the end: told the high watermark, then parked
        ctx.request(f, ctx.fetch(f, start, ep))
    assert core.high_watermark == start
    for f in (2, 3):
        assert ctx.request(f, ctx.fetch(f, start, ep, max_wait=500, hwm=start)) is None
    size_before = log.kafka_log.active_segment.size

    core.append([b"hello"], ep, ctx.now)
    r = ctx.poll()
    answers = [m.response for m in r.messages if isinstance(m, OutboundResponse)]
    assert len(answers) == 2 and all(a.records[0].records == (b"hello",) for a in answers)
    assert log.pending_writes == 1 and log.end_offset == start + 1
    assert log._log.log_end_offset == start and log._log.active_segment.size == size_before  # not written
    assert r.flush_jobs == [] and r.next_wakeup_ms == ctx.now  # owed: poll again at once

    log.write_pending()  # what the driver does once the poll's answers are sent
    r2 = ctx.poll()
    assert log.pending_writes == 0 and log._log.log_end_offset == start + 1
    assert len(r2.flush_jobs) == 1 and r2.flush_jobs[0].end_offset == start + 1
    r2.flush_jobs[0].run()
    core.handle_flush_done(r2.flush_jobs[0], ctx.now)
    assert log.flushed_end_offset == start + 1
    assert log.read(start, 1 << 20)[0].raw == answers[0].records[0].raw
