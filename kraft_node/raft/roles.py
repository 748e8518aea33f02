"""The six roles of a KRaft replica (Kafka's ``EpochState`` implementations).

Each role is a plain object holding the data of one epoch plus its timers
(absolute deadlines on the virtual clock, in ms).  Roles never change the role
themselves: :class:`~kraft_node.raft.quorum_state.QuorumState` is the single
gatekeeper of transitions.  What a role decides is *whether it may grant a
vote* (``can_grant_vote``), following Kafka:

============  =====================================  ========================
role          standard vote                          pre-vote (KIP-996)
============  =====================================  ========================
Unattached    no vote yet: log up to date (and no    log up to date
              known leader); voted: only the same
              candidate again
Prospective   as Unattached                          log up to date
Candidate     never (voted for itself)               log up to date
Follower      never (has a leader this epoch)        log up to date and not
                                                     yet fetched from leader (or
                                                     the leader announced its
                                                     resignation: not Kafka)
Leader        never                                  never
Resigned      never                                  never
============  =====================================  ========================

A "Voted" state is Unattached (or Prospective) carrying a ``voted_key``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, AbstractSet, Iterable, Union

from kraft_node.raft.messages import ReplicaKey, SnapshotId

if TYPE_CHECKING:
    from kraft_node.raft.accumulator import BatchAccumulator
    from kraft_node.raft.config import QuorumConfig
    from kraft_node.raft.log import RawSnapshotSink

#: Whose votes a nominee needs (``QuorumState.election_sets``): one voter id set, or a list
#: of sets that must each grant a majority.
ElectionSets = AbstractSet[int] | list[frozenset[int]]


@dataclass(frozen=True, slots=True)
class ElectionState:
    """What the quorum-state file holds: epoch, leader (-1 if none) and vote."""
    epoch: int
    leader_id: int = -1
    voted_key: ReplicaKey | None = None

    def has_leader(self) -> bool:
        return self.leader_id >= 0

    def is_leader(self, local_id: int) -> bool:
        return self.leader_id == local_id

    def is_voted_candidate(self, key: ReplicaKey) -> bool:
        return self.voted_key is not None and self.voted_key.matches(key)


GRANTED, REJECTED, UNRECORDED = "granted", "rejected", "unrecorded"


class EpochElection:
    """Vote tally of a nominee (Prospective or Candidate) over a fixed voter set.

    The local replica grants itself on construction.  ``is_vote_granted`` once a
    majority (``n // 2 + 1``) granted; ``is_vote_rejected`` once winning is
    impossible (granted + unrecorded < majority).
    """

    def __init__(self, local_id: int, voter_ids: ElectionSets):
        # ``voter_ids``: one set, or a list of sets that must each grant a majority (a
        # replica whose own uncommitted VotersRecord removed it stands under both sets).
        sets = [frozenset(v) for v in voter_ids] if isinstance(voter_ids, list) else [frozenset(voter_ids)]
        self.sets = sets
        self.states = {v: UNRECORDED for vs in sets for v in vs}
        self.majority = len(sets[0]) // 2 + 1
        if local_id in self.states:
            self.states[local_id] = GRANTED

    def record(self, voter_id: int, granted: bool) -> bool:
        """Record a response; returns False for non-voters or an already recorded voter."""
        if self.states.get(voter_id) != UNRECORDED:
            return False
        self.states[voter_id] = GRANTED if granted else REJECTED
        return True

    def unrecorded(self) -> list[int]:
        return sorted(v for v, s in self.states.items() if s == UNRECORDED)

    def granting(self) -> list[int]:
        return sorted(v for v, s in self.states.items() if s == GRANTED)

    def is_vote_granted(self) -> bool:
        return all(sum(1 for v in vs if self.states[v] == GRANTED) >= len(vs) // 2 + 1 for vs in self.sets)

    def is_vote_rejected(self) -> bool:
        return any(sum(1 for v in vs if self.states[v] != REJECTED) < len(vs) // 2 + 1 for vs in self.sets)

    def __repr__(self) -> str:
        return f"EpochElection({self.states})"


class EpochState:
    name: str = "?"
    epoch: int
    high_watermark: int | None

    def election(self) -> ElectionState:
        raise NotImplementedError

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return False

    def leader_id(self) -> int:
        return self.election().leader_id

    def __repr__(self) -> str:
        return f"{self.name}(epoch={self.epoch}, {self.election()})"


def _unattached_can_grant(voted_key: ReplicaKey | None, leader_id: int, candidate: ReplicaKey,
                          up_to_date: bool, pre_vote: bool) -> bool:
    if pre_vote:
        return up_to_date
    if voted_key is not None:
        return voted_key.matches(candidate)
    if leader_id >= 0:
        return False  # this epoch already has a leader: behave like a follower
    return up_to_date


class UnattachedState(EpochState):
    """Knows the epoch but follows no leader; may hold this epoch's vote.

    ``election_deadline`` is None for observers (they never start elections).
    """
    name = "Unattached"

    def __init__(self, epoch: int, leader_id: int | None, voted_key: ReplicaKey | None,
                 election_deadline: int | None, high_watermark: int | None):
        self.epoch = epoch
        self._leader_id = leader_id if leader_id is not None else -1
        self.voted_key = voted_key
        self.election_deadline = election_deadline
        self.high_watermark = high_watermark

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self._leader_id, self.voted_key)

    def leader_id(self) -> int:  # (asked after every poll: no ElectionState built)
        return self._leader_id

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_can_grant(self.voted_key, self._leader_id, candidate, log_up_to_date, pre_vote)


class ProspectiveState(EpochState):
    """Canvassing pre-votes at the current epoch before bumping it (KIP-996).

    Keeps the leader id and vote of the epoch it came from, so losing the
    pre-vote can return to following that leader.  Not persisted.
    """
    name = "Prospective"

    def __init__(self, epoch: int, local_id: int, voter_ids: ElectionSets, leader_id: int | None,
                 voted_key: ReplicaKey | None, election_deadline: int, retries: int,
                 high_watermark: int | None):
        self.epoch = epoch
        self._leader_id = leader_id if leader_id is not None else -1
        self.voted_key = voted_key
        self.epoch_election = EpochElection(local_id, voter_ids)
        self.election_deadline = election_deadline
        self.retries = retries
        self.high_watermark = high_watermark

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self._leader_id, self.voted_key)

    def leader_id(self) -> int:  # (asked after every poll: no ElectionState built)
        return self._leader_id

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return _unattached_can_grant(self.voted_key, self._leader_id, candidate, log_up_to_date, pre_vote)


class CandidateState(EpochState):
    """Has bumped the epoch and voted for itself; canvasses standard votes.

    After losing (majority rejected) or timing out it backs off for a random
    binary-exponential time (``backoff_deadline``) before going Prospective.
    """
    name = "Candidate"

    def __init__(self, epoch: int, local_key: ReplicaKey, voter_ids: ElectionSets, election_deadline: int,
                 retries: int, high_watermark: int | None):
        self.epoch = epoch
        self.local_key = local_key
        self.epoch_election = EpochElection(local_key.id, voter_ids)
        self.election_deadline = election_deadline
        self.retries = retries
        self.backoff_deadline: int | None = None
        self.high_watermark = high_watermark

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, -1, self.local_key)

    def leader_id(self) -> int:
        return -1

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return pre_vote and log_up_to_date


class FollowerState(EpochState):
    """Fetches from a known leader of this epoch.

    ``fetch_deadline``: a voter goes Prospective when it passes without a
    successful fetch.  ``has_fetched_from_leader`` gates pre-vote grants.
    ``fetching_snapshot`` is ``(snapshot_id, raw snapshot writer)`` during a FetchSnapshot
    transfer (``RaftLog.create_raw_snapshot``: the slices go to the log as they come).
    """
    name = "Follower"

    def __init__(self, epoch: int, leader_id: int, voted_key: ReplicaKey | None, fetch_deadline: int,
                 high_watermark: int | None):
        self.epoch = epoch
        self._leader_id = leader_id
        self.voted_key = voted_key
        self.fetch_deadline = fetch_deadline
        self.high_watermark = high_watermark
        self.has_fetched_from_leader = False
        #: EndQuorumEpoch from this leader accepted: later Fetch answers keep the short deadline
        self.leader_resigned = False
        self.fetching_snapshot: tuple[SnapshotId, RawSnapshotSink] | None = None

    def election(self) -> ElectionState:
        return ElectionState(self.epoch, self._leader_id, self.voted_key)

    def leader_id(self) -> int:  # (asked after every poll: no ElectionState built)
        return self._leader_id

    def can_grant_vote(self, candidate: ReplicaKey, log_up_to_date: bool, pre_vote: bool) -> bool:
        return pre_vote and not self.has_fetched_from_leader and log_up_to_date

    def update_high_watermark(self, offset: int) -> bool:
        """Monotonic: a lower value is a protocol violation."""
        if self.high_watermark is not None and offset < self.high_watermark:
            from kraft_node.raft.errors import InvariantViolation
            raise InvariantViolation(f"non-monotonic follower high watermark {offset} < {self.high_watermark}")
        if self.high_watermark == offset:
            return False
        self.high_watermark = offset
        return True


#: AddRaftVoter's caught-up window (Kafka's LeaderState.isReplicaCaughtUp: one hour).
CAUGHT_UP_FETCH_WINDOW_MS = 3_600_000
#: An observer that has not fetched for this long is dropped when the quorum is described
#: (Kafka's LeaderState.OBSERVER_SESSION_TIMEOUT_MS).
OBSERVER_SESSION_TIMEOUT_MS = 300_000


@dataclass(slots=True)
class ReplicaState:
    """The leader's view of one replica (voter or observer)."""
    key: ReplicaKey
    end_offset: int | None = None
    last_fetch_ms: int = -1
    has_acknowledged_leader: bool = False
    #: Kafka's lastCaughtUpTimestamp: the last time the replica had fetched everything the
    #: leader had (used by AddRaftVoter's caught-up rule).
    last_caught_up_ms: int = -1
    #: Leader end offset when this replica last fetched (to credit the previous fetch).
    leader_end_at_last_fetch: int | None = None

    def record_fetch(self, fetch_offset: int, now_ms: int, leader_end: int) -> None:
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = now_ms
        elif self.leader_end_at_last_fetch is not None and fetch_offset >= self.leader_end_at_last_fetch:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end


class LeaderState(EpochState):
    """Leader of ``epoch``.

    High watermark rule: the ``n // 2``-th largest voter end offset (the
    leader counts with its flushed end offset), advanced only once it exceeds
    ``epoch_start_offset`` (a record of this epoch is committed), and never
    moved backwards.  Check-quorum: if fewer than ``n // 2`` other voters
    fetched within ``1.5 * fetch.timeout.ms`` the leader resigns.
    """
    name = "Leader"

    def __init__(self, epoch: int, local_key: ReplicaKey, voter_keys: Iterable[ReplicaKey],
                 epoch_start_offset: int, granting_voters: Iterable[int], accumulator: BatchAccumulator,
                 now_ms: int, config: QuorumConfig):
        self.epoch = epoch
        self.local_key = local_key
        self.epoch_start_offset = epoch_start_offset
        self.granting_voters = tuple(granting_voters)
        self.accumulator: BatchAccumulator = accumulator
        self.high_watermark: int | None = None
        self.local = ReplicaState(local_key, has_acknowledged_leader=True)
        self.voters: dict[int, ReplicaState] = {}
        self.observers: dict[int, ReplicaState] = {}
        self.fetched_voters: set[int] = set()
        self.update_voter_set(voter_keys)
        self.check_quorum_timeout_ms = config.check_quorum_timeout_ms
        self.check_quorum_deadline = now_ms + self.check_quorum_timeout_ms
        self.begin_quorum_epoch_timeout_ms = config.begin_quorum_epoch_timeout_ms
        self.begin_quorum_epoch_deadline = now_ms  # send immediately
        self.resign_requested = False

    def election(self) -> ElectionState:
        # Kafka (LeaderState/ResignedState.election) records the elected leader and no vote:
        # the quorum-state file says votedId -1, as every Kafka fixture shows.
        return ElectionState(self.epoch, self.local_key.id, None)

    def leader_id(self) -> int:
        return self.local_key.id

    def update_voter_set(self, voter_keys: Iterable[ReplicaKey]) -> None:
        """Adopt a new voter set (Kafka: on appending a VotersRecord, committed or not).

        Replica progress moves with the replica between ``voters`` and
        ``observers``, so a caught-up observer that becomes a voter counts for
        the high watermark at once.  The leader's own state is ``local``; it is
        in ``voters`` only while the leader is a voter (a leader removing itself
        leads, without counting, until that change commits)."""
        keys = list(voter_keys)
        old = {**self.observers, **self.voters}
        voters: dict[int, ReplicaState] = {}
        for k in keys:
            if k.id == self.local_key.id and k.matches(self.local_key):
                voters[k.id] = self.local
                continue
            rs = old.pop(k.id, None)
            if rs is None or not rs.key.matches(k):
                rs = ReplicaState(k)
            voters[k.id] = rs
        old.pop(self.local_key.id, None)
        self.observers = {i: rs for i, rs in old.items()}
        self.voters = voters
        self.fetched_voters &= set(voters)

    @property
    def is_local_voter(self) -> bool:
        return self.voters.get(self.local_key.id) is self.local

    def time_until_check_quorum_expires(self, now_ms: int) -> int:
        if self.is_local_voter and len(self.voters) == 1:
            # Kafka (LeaderState.timeUntilCheckQuorumExpires) keeps resetting the timer while
            # the leader is the only voter: when a second voter is added later, the leader
            # gets a full check-quorum timeout to hear from it instead of resigning at once.
            self.check_quorum_deadline = now_ms + self.check_quorum_timeout_ms
            return 2 ** 62
        return max(0, self.check_quorum_deadline - now_ms)

    def _update_check_quorum(self, replica_id: int, now_ms: int) -> None:
        if replica_id not in self.voters or replica_id == self.local_key.id:
            return
        self.fetched_voters.add(replica_id)
        # Others needed besides the leader: a majority minus the leader's own vote,
        # or a full majority when the leader is not (any more) a voter.
        needed = len(self.voters) // 2 if self.is_local_voter else len(self.voters) // 2 + 1
        if len(self.fetched_voters) >= needed:
            self.fetched_voters.clear()
            self.check_quorum_deadline = now_ms + self.check_quorum_timeout_ms

    def update_local_state(self, flushed_end_offset: int) -> bool:
        rs = self.local
        if rs.end_offset is not None and flushed_end_offset < rs.end_offset:
            from kraft_node.raft.errors import InvariantViolation
            raise InvariantViolation(f"leader end offset went back {rs.end_offset} -> {flushed_end_offset}")
        rs.end_offset = flushed_end_offset
        return self.maybe_update_high_watermark()

    def update_replica_state(self, key: ReplicaKey, now_ms: int, fetch_offset: int) -> bool:
        """Record a valid Fetch at ``fetch_offset``; returns True if the HWM advanced."""
        leader_end = self.local.end_offset if self.local.end_offset is not None else 0
        rs = self.voters.get(key.id)
        if rs is None or not rs.key.matches(key):
            rs = self.observers.get(key.id)
            if rs is None or rs.key != key:
                rs = self.observers[key.id] = ReplicaState(key)
            rs.record_fetch(fetch_offset, now_ms, leader_end)
            return False
        # Fetch offsets are a follower's flushed LEO; they may go back after a
        # truncation or restart, and the HWM computation tolerates that.
        rs.record_fetch(fetch_offset, now_ms, leader_end)
        rs.has_acknowledged_leader = True
        self._update_check_quorum(key.id, now_ms)
        return self.maybe_update_high_watermark()

    def clear_inactive_observers(self, now_ms: int) -> None:
        """Forget observers that have not fetched for ``OBSERVER_SESSION_TIMEOUT_MS`` (Kafka's
        ``clearInactiveObservers``, run when the quorum is described), so a stopped observer
        leaves DescribeQuorum's observer list instead of staying in it for the epoch."""
        for oid in [oid for oid, rs in self.observers.items()
                    if now_ms - rs.last_fetch_ms >= OBSERVER_SESSION_TIMEOUT_MS and oid != self.local_key.id]:
            del self.observers[oid]

    def is_replica_caught_up(self, key: ReplicaKey, now_ms: int) -> bool:
        """Kafka's ``LeaderState.isReplicaCaughtUp``, AddRaftVoter's check: ``key`` (id and
        directory id) is an observer of this epoch that was caught up with the leader at
        least once and fetched within the last hour (``CAUGHT_UP_FETCH_WINDOW_MS``).
        Kafka's own reasoning: a stricter lag bound would refuse every voter under load."""
        rs = self.observers.get(key.id)
        if rs is None or rs.key != key:
            return False
        return rs.last_caught_up_ms >= 0 and rs.last_fetch_ms >= 0 \
            and rs.last_fetch_ms > now_ms - CAUGHT_UP_FETCH_WINDOW_MS

    def maybe_update_high_watermark(self) -> bool:
        if not self.voters:
            return False
        offsets = sorted((rs.end_offset if rs.end_offset is not None else -1
                          for rs in self.voters.values()), reverse=True)
        candidate = offsets[len(offsets) // 2]
        if candidate <= self.epoch_start_offset:
            return False
        if self.high_watermark is None or candidate > self.high_watermark:
            self.high_watermark = candidate
            return True
        return False

    def non_leader_voters_by_descending_fetch_offset(self) -> list[ReplicaKey]:
        others = [rs for vid, rs in self.voters.items() if vid != self.local_key.id]
        others.sort(key=lambda rs: (-(rs.end_offset if rs.end_offset is not None else -1), rs.key.id))
        return [rs.key for rs in others]


class ResignedState(EpochState):
    """A leader that gave up its epoch (graceful shutdown, check-quorum, restart).

    It keeps the epoch's election state (so it can never vote in it), tells the
    voters in ``unacked_voters`` with EndQuorumEpoch, and after its election
    timeout moves to Unattached at ``epoch + 1``.
    """
    name = "Resigned"

    def __init__(self, epoch: int, local_key: ReplicaKey, voter_ids: Iterable[int], election_deadline: int,
                 preferred_successors: Iterable[ReplicaKey], high_watermark: int | None = None):
        self.epoch = epoch
        self.local_key = local_key
        self.unacked_voters = set(v for v in voter_ids if v != local_key.id)
        self.election_deadline = election_deadline
        self.preferred_successors = tuple(preferred_successors)
        self.high_watermark = high_watermark

    def election(self) -> ElectionState:
        # Kafka (LeaderState/ResignedState.election) records the elected leader and no vote:
        # the quorum-state file says votedId -1, as every Kafka fixture shows.
        return ElectionState(self.epoch, self.local_key.id, None)

    def leader_id(self) -> int:
        return self.local_key.id


#: The role a replica is in (``QuorumState.state``): one of the six, so that a chain of
#: ``isinstance`` tests over them is exhaustive for the type checker.
Role = Union[UnattachedState, ProspectiveState, CandidateState, FollowerState, LeaderState, ResignedState]
