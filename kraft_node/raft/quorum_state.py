"""QuorumState: the single gatekeeper of role transitions, and the durable election state.

Transitions (voters; observers only move between Unattached and Follower):

* any role -> Unattached(e') on learning a higher epoch ``e'`` (durable).
* Unattached, Prospective -> same role *with a vote* for a candidate (durable,
  written before the granting VoteResponse is queued).
* Unattached, Prospective, Candidate -> Follower(e, leader) on learning the
  leader of the current epoch; any role -> Follower(e' > e) (durable).
* Unattached, Follower, Candidate -> Prospective (same epoch, memory only: it
  changes nothing that must survive a crash).
* Prospective -> Unattached/Follower of the same epoch after losing the
  pre-vote (durable, same content).
* Prospective -> Candidate(e + 1) with a vote for itself (durable).
* Candidate -> Leader (durable; needs a granted election).
* Leader -> Resigned (memory only: on restart a former leader starts Resigned).
* Resigned -> Unattached(e + 1) after its election timeout (durable).

Durability rule: :meth:`QuorumState._durable` writes the new ElectionState to
the store and only then swaps the role, so nothing observable (a vote, a
leadership claim) ever precedes the write.
"""
from __future__ import annotations

import random
from typing import TYPE_CHECKING, Mapping, Protocol, cast

from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.errors import IllegalTransitionError
from kraft_node.raft.messages import OffsetAndEpoch, ReplicaKey
from kraft_node.raft.roles import (
    CandidateState,
    ElectionSets,
    ElectionState,
    FollowerState,
    LeaderState,
    ProspectiveState,
    ResignedState,
    Role,
    UnattachedState,
)

if TYPE_CHECKING:
    from kraft_node.raft.accumulator import BatchAccumulator
    from kraft_node.raft.voters import ControlRecordStateMachine


class QuorumStateStore(Protocol):
    """Durable election state.  ``write`` must be durable (fsync + atomic rename) on return."""

    def read(self) -> ElectionState | None: ...

    def write(self, state: ElectionState) -> None: ...


class MemoryQuorumStateStore:
    """Store for tests/simulation: survives simulated crashes (keep the object), counts writes."""

    def __init__(self, initial: ElectionState | None = None):
        self.state = initial
        self.writes: list[ElectionState] = []

    def read(self) -> ElectionState | None:
        return self.state

    def write(self, state: ElectionState) -> None:
        self.state = state
        self.writes.append(state)


class QuorumState:
    """Roles and election state.  ``voters`` is either a fixed ``{id: ReplicaKey}`` (static
    quorum) or a :class:`~kraft_node.raft.voters.ControlRecordStateMachine`, whose latest
    voter set (committed or not) is the one in effect, as in Kafka."""

    def __init__(self, local_key: ReplicaKey, voters: ControlRecordStateMachine | Mapping[int, ReplicaKey],
                 store: QuorumStateStore,
                 rng: random.Random, config: QuorumConfig):
        from kraft_node.raft.voters import ControlRecordStateMachine, VoterSet
        self.local_key = local_key
        self.local_id = local_key.id
        if not isinstance(voters, ControlRecordStateMachine):
            voters = ControlRecordStateMachine(VoterSet.of(voters.values()))
        self.control = voters
        self._cache_gen = -1
        self._voters: dict[int, ReplicaKey] = {}
        self._voter_ids: frozenset[int] = frozenset()
        self.store = store
        self.rng = rng
        self.config = config
        self.state: Role = UnattachedState(0, None, None, None, None)
        self.transitions = 0

    # ---- queries
    def _refresh(self) -> None:
        if self._cache_gen != self.control.generation:
            vs = self.control.latest_voter_set()
            self._voters = vs.keys()
            self._voter_ids = vs.ids
            self._cache_gen = self.control.generation

    @property
    def voters(self) -> dict[int, ReplicaKey]:
        """The voter set in effect (the latest in the log, committed or not)."""
        self._refresh()
        return self._voters

    @property
    def voter_ids(self) -> frozenset[int]:
        self._refresh()
        return self._voter_ids

    @property
    def is_voter(self) -> bool:
        v = self.voters.get(self.local_id)
        return v is not None and v.matches(self.local_key)

    @property
    def epoch(self) -> int:
        return self.state.epoch

    @property
    def leader_id(self) -> int:
        return self.state.leader_id()

    @property
    def dynamic(self) -> bool:
        """kraft.version >= 1: the voter set lives in the log (KIP-853).  A replica that
        knows no voter at all (empty disk, bootstrap servers) is treated the same way."""
        return self.control.kraft_version() >= 1 or not self.voter_ids

    def _standing_via_previous(self) -> bool:
        """Not a voter in the latest set, but in the set before it, and that latest change is
        not known committed: typically a leader that removed itself and restarted before the
        removal committed.  Only it may have the longest log, so it must be able to stand."""
        if not self.dynamic or self.is_voter:
            return False
        prev = self.control.previous_voter_set()
        if prev is None or not prev.is_voter(self.local_key):
            return False
        hwm = self.state.high_watermark
        last = self.control.last_voter_set_offset()
        return hwm is None or last is None or hwm <= last

    @property
    def can_stand(self) -> bool:
        """May start elections: a voter, or standing via the previous voter set."""
        return self.is_voter or self._standing_via_previous()

    def election_sets(self) -> ElectionSets:
        """Whose votes a nominee needs: the latest set, plus the previous one when standing via it."""
        if self._standing_via_previous():
            prev = self.control.previous_voter_set()
            assert prev is not None  # standing via it
            return [self.voter_ids, prev.ids]
        return self.voter_ids

    def election_keys(self) -> dict[int, ReplicaKey]:
        keys = dict(self.voters)
        if self._standing_via_previous():
            prev = self.control.previous_voter_set()
            assert prev is not None  # standing via it
            for k, v in prev.keys().items():
                keys.setdefault(k, v)
        return keys

    def has_remote_leader(self) -> bool:
        lid = self.leader_id
        return lid >= 0 and lid != self.local_id

    def random_election_deadline(self, now_ms: int) -> int | None:
        if not self.can_stand:
            return None
        t = self.config.election_timeout_ms
        return now_ms + t + self.rng.randrange(t)

    def _require(self, cond: bool, what: str) -> None:
        if not cond:
            raise IllegalTransitionError(f"{what} (node {self.local_id}, current {self.state!r})")

    def _durable(self, new: Role) -> None:
        self.store.write(new.election())
        self._memory(new)

    def _memory(self, new: Role) -> None:
        self.state = new
        self.transitions += 1

    # ---- initialization
    def initialize(self, log_end: OffsetAndEpoch, now_ms: int) -> None:
        """Pick the starting role from the stored election state (Kafka's rules)."""
        election = self.store.read() or ElectionState(0)
        deadline = self.random_election_deadline(now_ms)
        st: Role
        if election.epoch < log_end.epoch:
            # The file is stale (e.g. lost); the log proves a later epoch exists.
            st = UnattachedState(log_end.epoch, None, None, deadline, None)
            self._durable(st)
            return
        if self.can_stand and election.is_leader(self.local_id):
            # A former leader must not vote in its own epoch again, and must not
            # reuse (offset, epoch) pairs that may have been lost unflushed.
            # (a replica that can stand has an election deadline)
            st = ResignedState(election.epoch, self.local_key, self.voter_ids, cast(int, deadline), ())
        elif self.can_stand and election.leader_id < 0 and election.is_voted_candidate(self.local_key):
            st = CandidateState(election.epoch, self.local_key, self.election_sets(), cast(int, deadline), 1, None)
        elif election.has_leader() and (election.leader_id in self.voters or self.dynamic) \
                and election.leader_id != self.local_id:
            st = FollowerState(election.epoch, election.leader_id, election.voted_key,
                               now_ms + self.config.fetch_timeout_ms, None)
        else:
            st = UnattachedState(election.epoch, election.leader_id if election.has_leader() else None,
                                 election.voted_key, deadline, None)
        self._memory(st)

    # ---- transitions
    def transition_to_unattached(self, epoch: int, now_ms: int, leader_id: int | None = None) -> None:
        cur = self.state
        if epoch == cur.epoch:
            self._require(isinstance(cur, (UnattachedState, ProspectiveState))
                          or (isinstance(cur, CandidateState) and not self.can_stand),
                          f"Unattached at the same epoch {epoch}")
            voted = cur.election().voted_key
        else:
            self._require(epoch > cur.epoch, f"Unattached at lower epoch {epoch}")
            voted = None
        deadline: int | None
        if isinstance(cur, (UnattachedState, CandidateState)) and cur.election_deadline is not None \
                and epoch > cur.epoch and self.can_stand:
            deadline = cur.election_deadline  # keep the remaining election time
        else:
            deadline = self.random_election_deadline(now_ms)
        self._durable(UnattachedState(epoch, leader_id, voted, deadline, cur.high_watermark))

    def add_voted_state(self, candidate: ReplicaKey, now_ms: int) -> None:
        cur = self.state
        self._require(self.is_voter or self.dynamic, "vote granted by an observer of a static quorum")
        self._require((candidate.id in self.voter_ids or self.dynamic) and candidate.id != self.local_id,
                      f"vote for {candidate}")
        self._require(isinstance(cur, (UnattachedState, ProspectiveState)) and cur.voted_key is None,
                      "vote without being Unattached/Prospective without a vote")
        if isinstance(cur, UnattachedState):
            new = UnattachedState(cur.epoch, None if cur._leader_id < 0 else cur._leader_id, candidate,
                                  self.random_election_deadline(now_ms), cur.high_watermark)
            self._durable(new)
        elif isinstance(cur, ProspectiveState):  # (the only other role _require lets through)
            self.store.write(ElectionState(cur.epoch, cur._leader_id, candidate))
            cur.voted_key = candidate  # same Prospective object: its tally stays

    def transition_to_follower(self, epoch: int, leader_id: int, now_ms: int) -> None:
        cur = self.state
        self._require(leader_id != self.local_id and (leader_id in self.voters or self.dynamic),
                      f"Follower of {leader_id}")
        if epoch == cur.epoch:
            self._require(isinstance(cur, (UnattachedState, ProspectiveState, CandidateState)),
                          f"Follower at the same epoch {epoch}")
            lid = cur.leader_id()
            self._require(lid < 0 or lid == leader_id, f"second leader {leader_id} in epoch {epoch}")
            voted = cur.election().voted_key
        else:
            self._require(epoch > cur.epoch, f"Follower at lower epoch {epoch}")
            voted = None
        self._durable(FollowerState(epoch, leader_id, voted, now_ms + self.config.fetch_timeout_ms,
                                    cur.high_watermark))

    def transition_to_prospective(self, now_ms: int) -> None:
        cur = self.state
        self._require(self.can_stand, "Prospective as an observer")
        self._require(isinstance(cur, (UnattachedState, FollowerState, CandidateState, ResignedState)),
                      "Prospective")
        if isinstance(cur, CandidateState):
            retries, leader, voted = cur.retries, None, cur.local_key
        elif isinstance(cur, ResignedState):
            # Only a restarted single voter does this (Kafka: the only voter stands at once);
            # it keeps itself as the epoch's leader so it grants no vote in the epoch it led.
            retries, leader, voted = 0, self.local_id, None
        else:
            assert isinstance(cur, (UnattachedState, FollowerState))  # the roles _require left
            retries = 0
            leader = cur.leader_id() if cur.leader_id() >= 0 else None
            voted = cur.voted_key
        # (can_stand was required: random_election_deadline gives a deadline)
        self._memory(ProspectiveState(cur.epoch, self.local_id, self.election_sets(), leader, voted,
                                      cast(int, self.random_election_deadline(now_ms)), retries,
                                      cur.high_watermark))

    def transition_to_candidate(self, now_ms: int, force: bool = False) -> None:
        """``force``: a voter does not support PreVote, so the pre-vote tally is moot."""
        cur = self.state
        self._require(isinstance(cur, ProspectiveState) and (force or cur.epoch_election.is_vote_granted()),
                      "Candidate without a granted pre-vote")
        assert isinstance(cur, ProspectiveState)  # (required above)
        # (a nominee stands, so random_election_deadline gives a deadline)
        self._durable(CandidateState(cur.epoch + 1, self.local_key, self.election_sets(),
                                     cast(int, self.random_election_deadline(now_ms)), cur.retries + 1,
                                     cur.high_watermark))

    def transition_to_leader(self, epoch_start_offset: int, accumulator: BatchAccumulator,
                             now_ms: int) -> LeaderState:
        cur = self.state
        self._require(isinstance(cur, CandidateState) and cur.epoch_election.is_vote_granted()
                      and self.can_stand, "Leader without a granted election")
        assert isinstance(cur, CandidateState)  # (required above)
        # The leader does not inherit the previous high watermark: it must
        # commit a record of its own epoch first (epoch-start commit rule).
        new = LeaderState(cur.epoch, self.local_key, list(self.voters.values()), epoch_start_offset,
                          cur.epoch_election.granting(), accumulator, now_ms, self.config)
        self._durable(new)
        return new

    def transition_to_resigned(self, preferred: list[ReplicaKey], now_ms: int) -> None:
        cur = self.state
        self._require(isinstance(cur, LeaderState), "Resigned from a non-leader")
        deadline = self.random_election_deadline(now_ms)
        if deadline is None:  # a leader that removed itself: no election timer, same wait
            deadline = now_ms + self.config.election_timeout_ms
        self._memory(ResignedState(cur.epoch, self.local_key, self.voter_ids,
                                   deadline, preferred, cur.high_watermark))
