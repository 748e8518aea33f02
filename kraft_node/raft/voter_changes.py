"""Voter changes (KIP-853): AddRaftVoter / RemoveRaftVoter / UpdateRaftVoter.

The leader's side (Kafka's AddVoterHandler, RemoveVoterHandler and
UpdateVoterHandler: one change at a time, answered when its VotersRecord
commits) and the sender's side (auto-join of an observer, UpdateRaftVoter of a
voter whose endpoints moved).  ``VoterChanges`` is a part of
:class:`~kraft_node.raft.client.RaftCore`, split out by seam: its methods run
on the core's state (quorum, control records, accumulator, outbox) and are only
called by the core's dispatch and poll.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from kraft_node.raft.errors import Errors
from kraft_node.raft.messages import (
    AddRaftVoterRequest,
    AddRaftVoterResponse,
    ControlMessage,
    Endpoint,
    LeaderIdAndEpoch,
    Outbound,
    OutboundRequest,
    RemoveRaftVoterRequest,
    RemoveRaftVoterResponse,
    ReplicaKey,
    Response,
    UpdateRaftVoterRequest,
    UpdateRaftVoterResponse,
    VoterEntry,
)
from kraft_node.raft.roles import FollowerState, LeaderState, Role
from kraft_node.raft.voters import VoterSet

if TYPE_CHECKING:
    from kraft_node.raft.config import QuorumConfig
    from kraft_node.raft.quorum_state import QuorumState
    from kraft_node.raft.requests import RequestManager
    from kraft_node.raft.voters import ControlRecordStateMachine

NONE = Errors.NONE


@dataclass
class VoterChange:
    """The one voter change a leader may have in progress (Kafka's Add/Remove/UpdateVoterHandlerState).

    ``offset`` is where its VotersRecord went (None until appended); the
    change completes when the high watermark passes it."""
    kind: str            # "add" | "remove" | "update"
    source: int
    correlation_id: int
    deadline_ms: int
    key: ReplicaKey
    offset: int | None = None


class VoterChanges:
    """Add/Remove/UpdateRaftVoter handling of :class:`RaftCore` (a mixin: see the module doc)."""

    # This part's state (RaftCore.__init__ sets it) and what it uses of the core's, declared
    # for the type checker only (annotations: nothing at run time).
    _voter_change: VoterChange | None
    _auto_join_next_ms: int
    _update_voter_next_ms: int
    config: QuorumConfig
    quorum: QuorumState
    control: ControlRecordStateMachine
    voter_requests: RequestManager
    local_id: int
    local_key: ReplicaKey
    local_listeners: tuple[Endpoint, ...]
    cluster_id: str | None
    stats: Counter[str]
    _outbox: list[Outbound]
    _next_correlation: int
    _encode_control: Callable[[ControlMessage], bytes]

    if TYPE_CHECKING:
        @property
        def voter_set(self) -> VoterSet: ...

        @property
        def kraft_version(self) -> int: ...

        def _dynamic(self) -> bool: ...

        def _cluster_ok(self, cluster_id: str | None) -> bool: ...

        def _leader_and_epoch(self) -> LeaderIdAndEpoch: ...

        def _validate_leader_only(self, request_epoch: int) -> Errors: ...

        def _respond(self, dest: int, corr: int, response: Response) -> None: ...

        def _flush_leader(self, st: LeaderState, now_ms: int, sync: bool = True) -> bool: ...

    def _voter_change_precheck(self, now_ms: int) -> tuple[Errors, str] | None:
        """Kafka's shared rules, in its order: one change at a time, an established high
        watermark, kraft.version >= 1, and the latest voter set committed."""
        if self._voter_change is not None:
            return Errors.REQUEST_TIMED_OUT, "a previous voter change is still in progress"
        st = self.quorum.state
        if st.high_watermark is None:
            return Errors.REQUEST_TIMED_OUT, "the leader has not committed an offset in its epoch yet"
        if not self._dynamic():
            return Errors.UNSUPPORTED_VERSION, "kraft.version 0 does not support voter changes"
        last = self.control.last_voter_set_offset()
        if last is None or last >= st.high_watermark:
            return Errors.REQUEST_TIMED_OUT, f"the latest voter change at {last} is not committed yet"
        return None

    def _append_voter_set(self, st: LeaderState, voters: VoterSet, change: VoterChange, now_ms: int) -> None:
        msg = voters.to_control()
        change.offset = st.accumulator.append_control(msg, self._encode_control(msg), now_ms)
        self._voter_change = change
        self.stats[f"voter_change_{change.kind}_appended"] += 1
        self._flush_leader(st, now_ms)  # takes effect for the majority on append

    def _handle_add_voter_request(self, source: int, corr: int, req: AddRaftVoterRequest,
                                  now_ms: int) -> AddRaftVoterResponse | None:
        if not self._cluster_ok(req.cluster_id):
            return AddRaftVoterResponse(int(Errors.INCONSISTENT_CLUSTER_ID), "cluster id mismatch")
        st = self.quorum.state
        if not isinstance(st, LeaderState):
            return AddRaftVoterResponse(int(Errors.NOT_LEADER_OR_FOLLOWER), "not the leader")
        bad = self._voter_change_precheck(now_ms)
        if bad is not None:
            return AddRaftVoterResponse(int(bad[0]), bad[1])
        key = ReplicaKey(req.voter_id, req.voter_directory_id)
        voters = self.voter_set
        if key.id in voters.ids:
            return AddRaftVoterResponse(int(Errors.DUPLICATE_VOTER), f"voter id {key.id} is already a voter")
        if req.voter_id < 0 or req.voter_directory_id is None:
            return AddRaftVoterResponse(int(Errors.INVALID_REQUEST), "a new voter needs an id and a directory id")
        # Kafka asks the new voter (ApiVersions) for its kraft.version range; this core has
        # no ApiVersions channel and takes every replica to support [0, 1].
        if not st.is_replica_caught_up(key, now_ms):
            return AddRaftVoterResponse(int(Errors.REQUEST_TIMED_OUT),
                                        f"new voter {key} is not caught up with the leader")
        new = voters.add(VoterEntry(key, tuple(req.listeners)))
        assert new is not None  # (not a voter yet: checked above)
        timeout = req.timeout_ms if req.timeout_ms > 0 else self.config.request_timeout_ms
        self._append_voter_set(st, new, VoterChange("add", source, corr, now_ms + timeout, key), now_ms)
        return None

    def _handle_remove_voter_request(self, source: int, corr: int, req: RemoveRaftVoterRequest,
                                     now_ms: int) -> RemoveRaftVoterResponse | None:
        if not self._cluster_ok(req.cluster_id):
            return RemoveRaftVoterResponse(int(Errors.INCONSISTENT_CLUSTER_ID), "cluster id mismatch")
        st = self.quorum.state
        if not isinstance(st, LeaderState):
            return RemoveRaftVoterResponse(int(Errors.NOT_LEADER_OR_FOLLOWER), "not the leader")
        bad = self._voter_change_precheck(now_ms)
        if bad is not None:
            return RemoveRaftVoterResponse(int(bad[0]), bad[1])
        key = ReplicaKey(req.voter_id, req.voter_directory_id)
        new = self.voter_set.remove(key)
        if new is None:
            return RemoveRaftVoterResponse(int(Errors.VOTER_NOT_FOUND),
                                           f"{key} cannot be removed from {sorted(self.voter_set.ids)}")
        self._append_voter_set(st, new, VoterChange("remove", source, corr,
                                                     now_ms + self.config.request_timeout_ms, key), now_ms)
        return None

    def _handle_update_voter_request(self, source: int, corr: int, req: UpdateRaftVoterRequest,
                                     now_ms: int) -> UpdateRaftVoterResponse | None:
        def resp(err: Errors) -> UpdateRaftVoterResponse:
            return UpdateRaftVoterResponse(int(err), self._leader_and_epoch())
        if not self._cluster_ok(req.cluster_id):
            return resp(Errors.INCONSISTENT_CLUSTER_ID)
        err = self._validate_leader_only(req.current_leader_epoch)
        if err != NONE:
            return resp(err)
        st = self.quorum.state
        key = ReplicaKey(req.voter_id, req.voter_directory_id)
        if not self._dynamic() and self._voter_change is None and st.high_watermark is not None:
            # Static quorum: the endpoints come from config; nothing to write.
            return resp(NONE if self.voter_set.is_voter(key) else Errors.VOTER_NOT_FOUND)
        bad = self._voter_change_precheck(now_ms)
        if bad is not None:
            return resp(bad[0])
        kv = self.kraft_version
        if not req.min_kraft_version <= kv <= req.max_kraft_version:
            return resp(Errors.INVALID_REQUEST)
        new = self.voter_set.update(VoterEntry(key, tuple(req.listeners), req.min_kraft_version,
                                               req.max_kraft_version))
        if new is None:
            return resp(Errors.VOTER_NOT_FOUND)
        if new == self.voter_set:
            return resp(NONE)  # already up to date: no record
        assert isinstance(st, LeaderState)  # (_validate_leader_only said so)
        self._append_voter_set(st, new, VoterChange("update", source, corr,
                                                     now_ms + self.config.request_timeout_ms, key), now_ms)
        return None

    def _maybe_complete_voter_change(self, st: Role, now_ms: int) -> None:
        ch = self._voter_change
        if ch is None or not isinstance(st, LeaderState):
            return
        if ch.offset is not None and st.high_watermark is not None and st.high_watermark > ch.offset:
            self.stats[f"voter_change_{ch.kind}_committed"] += 1
            self._finish_voter_change(NONE)
        elif now_ms >= ch.deadline_ms:
            self._finish_voter_change(Errors.REQUEST_TIMED_OUT)

    def _finish_voter_change(self, error: Errors) -> None:
        ch, self._voter_change = self._voter_change, None
        assert ch is not None  # (callers check that a change is in progress)
        msg = None if error == NONE else f"voter change of {ch.key}: {error.name}"
        r: AddRaftVoterResponse | RemoveRaftVoterResponse | UpdateRaftVoterResponse
        if ch.kind == "add":
            r = AddRaftVoterResponse(int(error), msg)
        elif ch.kind == "remove":
            r = RemoveRaftVoterResponse(int(error), msg)
        else:
            r = UpdateRaftVoterResponse(int(error), self._leader_and_epoch())
        self._respond(ch.source, ch.correlation_id, r)

    def _maybe_auto_join(self, st: FollowerState, now_ms: int) -> None:
        """``controller.quorum.auto.join.enable``: an observer that has fetched from the
        leader asks it to add this replica; if the voter set holds this node id with
        another directory id (a re-formatted disk), it first asks to remove that key."""
        if not self.config.auto_join_enable or not self._dynamic() or self.quorum.is_voter \
                or not st.has_fetched_from_leader or now_ms < self._auto_join_next_ms:
            return
        leader = st.leader_id()
        if self.voter_requests.has_inflight(leader) or not self.voter_requests.is_ready(leader, now_ms):
            return
        old = self.quorum.voters.get(self.local_id)
        req: RemoveRaftVoterRequest | AddRaftVoterRequest
        if old is not None:
            req = RemoveRaftVoterRequest(self.cluster_id, old.id, old.directory_id)
        else:
            req = AddRaftVoterRequest(self.cluster_id, self.config.request_timeout_ms, self.local_id,
                                      self.local_key.directory_id, self.local_listeners)
        corr = self._next_correlation
        self._next_correlation += 1
        self.voter_requests.on_send(leader, corr, now_ms)
        self._outbox.append(OutboundRequest(leader, corr, req, now_ms))
        self.stats["auto_join_requests"] += 1
        self._auto_join_next_ms = now_ms + self.config.fetch_timeout_ms // 2

    def _maybe_update_voter(self, st: FollowerState, now_ms: int) -> None:
        """A voter whose endpoints in the voter set differ from its own listeners (it moved
        to another host/port) asks the leader to update them with UpdateRaftVoter (KIP-853),
        every fetch.timeout/2 until the updated VotersRecord reaches its log.  Kafka's
        follower sends UpdateRaftVoter once per epoch whatever the drift; sending only on
        drift writes the same records (the leader writes none for an unchanged entry)."""
        if not self.local_listeners or not self.quorum.is_voter or self.kraft_version < 1 \
                or not st.has_fetched_from_leader or now_ms < self._update_voter_next_ms:
            return
        mine = self.voter_set.entry(self.local_id)
        if mine is None or set(mine.endpoints) == set(self.local_listeners):
            return
        leader = st.leader_id()
        if self.voter_requests.has_inflight(leader) or not self.voter_requests.is_ready(leader, now_ms):
            return
        req = UpdateRaftVoterRequest(self.cluster_id, st.epoch, self.local_id, self.local_key.directory_id,
                                     self.local_listeners, mine.min_kraft_version, mine.max_kraft_version)
        corr = self._next_correlation
        self._next_correlation += 1
        self.voter_requests.on_send(leader, corr, now_ms)
        self._outbox.append(OutboundRequest(leader, corr, req, now_ms))
        self.stats["update_voter_requests"] += 1
        self._update_voter_next_ms = now_ms + self.config.fetch_timeout_ms // 2
