"""The partition leader's ISR rules as pure functions and immutable states (Kafka's
``Partition`` ISR logic and ``ReplicaState``/``Replica``, issue 25 item 3).

Why pure: the rules decide safety -- which replicas count for the high watermark and for
``acks=all`` -- and are easiest to get right, and to test against Kafka's PartitionTest cases,
without a log, a loop or a controller.  The broker's ``Partition`` holds one
:class:`PartitionState` and one :class:`ReplicaState` per remote replica, calls these functions,
and hands a pending change's ``sent`` to the
:class:`~kraft_node.broker.alter_partition_manager.AlterPartitionManager`.

The pending-ISR rule (KIP-497, Kafka's ``PendingExpandIsr`` / ``PendingShrinkIsr``): the leader
acts on a new ISR only once the controller committed it.  While a change is in flight:

* ``isr`` is the last committed ISR (what ``min.insync.replicas`` is checked against);
* ``maximal_isr`` is the ISR used for the high watermark and ``acks=all``: the committed ISR
  plus a replica being added (expanding early only makes the high watermark stricter, so it is
  safe if the change fails), but NOT minus the replicas being removed (shrinking early could
  advance the high watermark past records only the removed replicas lack, and the change may
  fail);
* no other change is started (one in flight per partition).

Out of sync (Kafka's ``getOutOfSyncReplicas``): a follower in the ISR (not the leader) is out of
sync when it is not caught up: its log end differs from the leader's and its last caught-up
time is more than ``replica.lag.time.max.ms`` ago.  ``last_caught_up_time_ms`` is the latest
time ``t`` such that a fetch from the follower reached the leader's log end as of ``t``.

Expansion (Kafka's ``isFollowerInSync`` + ``canAddReplicaToIsr``): a follower not in the ISR
joins when no change is in flight, it is eligible (not fenced, not in controlled shutdown, and
the broker epoch of its fetches matches the image's -- or was -1), and its log end offset is at
least the leader's high watermark and at least the start offset of the leader's current epoch.
"""
from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

from kraft_node.protocol.errors import Errors

__all__ = ["ReplicaState", "LeaderAndIsr", "CommittedPartitionState", "PendingExpandIsr", "PendingShrinkIsr",
           "PartitionState", "StaleFetchStateError", "AlterPartitionErrorAction", "RECOVERED", "RECOVERING",
           "update_fetch_state", "reset_replica_state", "is_caught_up", "out_of_sync_replicas",
           "is_follower_in_sync", "is_broker_epoch_isr_eligible", "is_replica_isr_eligible",
           "can_add_replica_to_isr", "prepare_isr_expand", "prepare_isr_shrink", "leader_high_watermark",
           "alter_partition_error_action", "committed_state_after", "UNKNOWN_OFFSET"]

#: Kafka's UnifiedLog.UnknownOffset: a replica whose offsets the leader has not heard yet
UNKNOWN_OFFSET = -1
#: LeaderRecoveryState values (the AlterPartition and PartitionRecord field)
RECOVERED = 0
RECOVERING = 1


class StaleFetchStateError(Exception):
    """A follower fetch carried a broker epoch older than the image's for that broker: the fetch
    comes from a previous incarnation and is answered NOT_LEADER_OR_FOLLOWER (``error``)."""
    error = Errors.NOT_LEADER_OR_FOLLOWER


@dataclass(frozen=True)
class ReplicaState:
    """What the leader knows of one remote replica (Kafka's ``ReplicaState``).

    ``last_fetch_leader_log_end_offset``: the leader's log end when the previous fetch came;
    ``last_caught_up_time_ms``: see the module doc; ``broker_epoch``: from the follower's fetch
    (None before one)."""
    log_start_offset: int = UNKNOWN_OFFSET
    log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_leader_log_end_offset: int = 0
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int | None = None


def update_fetch_state(state: ReplicaState, *, fetch_offset: int, log_start_offset: int, fetch_time_ms: int,
                       leader_end_offset: int, broker_epoch: int, cached_broker_epoch: int | None) -> ReplicaState:
    """A follower fetched from ``fetch_offset`` at ``fetch_time_ms`` while the leader's log ended
    at ``leader_end_offset`` (Kafka's ``Replica.updateFetchStateOrThrow``).

    Caught up now if the fetch reached the leader's end; else caught up as of the previous fetch
    if it reached what the leader's end was then.  Raises :class:`StaleFetchStateError` when
    ``broker_epoch`` (not -1) is older than the image's ``cached_broker_epoch``."""
    if broker_epoch != -1 and cached_broker_epoch is not None and cached_broker_epoch > broker_epoch:
        raise StaleFetchStateError(f"Received stale fetch state update. broker epoch={broker_epoch} "
                                   f"vs expected={cached_broker_epoch}")
    if fetch_offset >= leader_end_offset:
        caught_up = max(state.last_caught_up_time_ms, fetch_time_ms)
    elif fetch_offset >= state.last_fetch_leader_log_end_offset:
        caught_up = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
    else:
        caught_up = state.last_caught_up_time_ms
    return ReplicaState(log_start_offset=log_start_offset, log_end_offset=fetch_offset,
                        last_fetch_leader_log_end_offset=max(leader_end_offset, state.last_fetch_leader_log_end_offset),
                        last_fetch_time_ms=fetch_time_ms, last_caught_up_time_ms=caught_up,
                        broker_epoch=broker_epoch)


def reset_replica_state(state: ReplicaState, *, now_ms: int, leader_end_offset: int, is_new_leader: bool,
                        is_follower_in_sync: bool) -> ReplicaState:
    """The leader was (re-)elected (Kafka's ``Replica.resetReplicaState``): an ISR member counts as
    caught up now, any other replica as never (so it does not hold the high watermark back)."""
    caught_up = now_ms if is_follower_in_sync else 0
    if is_new_leader:
        return ReplicaState(last_fetch_leader_log_end_offset=UNKNOWN_OFFSET, last_caught_up_time_ms=caught_up)
    return replace(state, last_fetch_leader_log_end_offset=leader_end_offset,
                   last_fetch_time_ms=now_ms if is_follower_in_sync else 0, last_caught_up_time_ms=caught_up)


def is_caught_up(state: ReplicaState, leader_end_offset: int, now_ms: int, max_lag_ms: int) -> bool:
    """Kafka's ``ReplicaState.isCaughtUp``."""
    return leader_end_offset == state.log_end_offset or now_ms - state.last_caught_up_time_ms <= max_lag_ms


@dataclass(frozen=True)
class LeaderAndIsr:
    """What an AlterPartition proposes and the controller answers (Kafka's ``LeaderAndIsr``).
    ``isr_with_epochs``: ``(broker id, broker epoch)`` pairs, epoch -1 when unknown."""
    leader: int
    leader_epoch: int
    isr_with_epochs: tuple[tuple[int, int], ...]
    leader_recovery_state: int
    partition_epoch: int

    @property
    def isr(self) -> frozenset[int]:
        return frozenset(b for b, _e in self.isr_with_epochs)


@dataclass(frozen=True)
class CommittedPartitionState:
    isr: frozenset[int]
    leader_recovery_state: int = RECOVERED

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.isr

    @property
    def is_inflight(self) -> bool:
        return False


@dataclass(frozen=True)
class PendingExpandIsr:
    new_in_sync_replica_id: int
    sent: LeaderAndIsr
    last_committed: CommittedPartitionState

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr | {self.new_in_sync_replica_id}

    @property
    def leader_recovery_state(self) -> int:
        return RECOVERED

    @property
    def is_inflight(self) -> bool:
        return True


@dataclass(frozen=True)
class PendingShrinkIsr:
    out_of_sync_replica_ids: frozenset[int]
    sent: LeaderAndIsr
    last_committed: CommittedPartitionState

    @property
    def isr(self) -> frozenset[int]:
        return self.last_committed.isr

    @property
    def maximal_isr(self) -> frozenset[int]:
        return self.last_committed.isr   # not shrunk until committed (see the module doc)

    @property
    def leader_recovery_state(self) -> int:
        return RECOVERED

    @property
    def is_inflight(self) -> bool:
        return True


PartitionState = CommittedPartitionState | PendingExpandIsr | PendingShrinkIsr


def out_of_sync_replicas(state: PartitionState, local_broker_id: int, replicas: Mapping[int, ReplicaState],
                         leader_end_offset: int, now_ms: int, max_lag_ms: int) -> frozenset[int]:
    """ISR members (not the leader) that are not caught up; empty while a change is in flight
    (Kafka's ``getOutOfSyncReplicas``).  A member the leader has no state for is out of sync."""
    if state.is_inflight:
        return frozenset()
    out = set()
    for rid in state.isr - {local_broker_id}:
        rs = replicas.get(rid)
        if rs is None or not is_caught_up(rs, leader_end_offset, now_ms, max_lag_ms):
            out.add(rid)
    return frozenset(out)


def is_follower_in_sync(follower_end_offset: int, leader_high_watermark: int,
                        leader_epoch_start_offset: int | None) -> bool:
    """Kafka's ``isFollowerInSync``: caught up to the high watermark and into the current
    leader epoch (``leader_epoch_start_offset`` None: the leader has not started its epoch)."""
    return follower_end_offset >= leader_high_watermark and leader_epoch_start_offset is not None and \
        follower_end_offset >= leader_epoch_start_offset


def is_broker_epoch_isr_eligible(stored_broker_epoch: int | None, cached_broker_epoch: int | None) -> bool:
    """Kafka's ``isBrokerEpochIsrEligible``: the fetches' epoch is the image's, or -1 (not checked)."""
    return stored_broker_epoch is not None and cached_broker_epoch is not None and \
        (stored_broker_epoch == -1 or stored_broker_epoch == cached_broker_epoch)


def is_replica_isr_eligible(replica: ReplicaState | None, *, cached_broker_epoch: int | None, fenced: bool,
                            in_controlled_shutdown: bool) -> bool:
    """Kafka's ``isReplicaIsrEligible`` (KRaft): known, not fenced, not shutting down, epoch ok."""
    if replica is None:
        return False
    return not fenced and not in_controlled_shutdown and \
        is_broker_epoch_isr_eligible(replica.broker_epoch, cached_broker_epoch)


def can_add_replica_to_isr(state: PartitionState, replica_id: int, eligible: bool) -> bool:
    """Kafka's ``canAddReplicaToIsr``."""
    return not state.is_inflight and replica_id not in state.isr and eligible


def _with_epochs(isr: Iterable[int], local_broker_id: int, local_broker_epoch: int,
                 replicas: Mapping[int, ReplicaState]) -> tuple[tuple[int, int], ...]:
    """Kafka's ``addBrokerEpochToIsr``: our own epoch for us, the fetches' for the others, -1 unknown."""
    out = []
    for b in sorted(isr):
        if b == local_broker_id:
            out.append((b, local_broker_epoch))
        else:
            rs = replicas.get(b)
            epoch = rs.broker_epoch if rs is not None and rs.broker_epoch is not None else -1
            out.append((b, epoch))
    return tuple(out)


def prepare_isr_expand(state: CommittedPartitionState, replica_id: int, *, local_broker_id: int,
                       local_broker_epoch: int, leader_epoch: int, partition_epoch: int,
                       replicas: Mapping[int, ReplicaState]) -> PendingExpandIsr:
    """The pending state that adds ``replica_id`` (Kafka's ``prepareIsrExpand``)."""
    sent = LeaderAndIsr(local_broker_id, leader_epoch,
                        _with_epochs(state.isr | {replica_id}, local_broker_id, local_broker_epoch, replicas),
                        state.leader_recovery_state, partition_epoch)
    return PendingExpandIsr(replica_id, sent, state)


def prepare_isr_shrink(state: CommittedPartitionState, out_of_sync: Iterable[int], *, local_broker_id: int,
                       local_broker_epoch: int, leader_epoch: int, partition_epoch: int,
                       replicas: Mapping[int, ReplicaState]) -> PendingShrinkIsr:
    """The pending state that removes ``out_of_sync`` (Kafka's ``prepareIsrShrink``)."""
    removed = frozenset(out_of_sync)
    sent = LeaderAndIsr(local_broker_id, leader_epoch,
                        _with_epochs(state.isr - removed, local_broker_id, local_broker_epoch, replicas),
                        state.leader_recovery_state, partition_epoch)
    return PendingShrinkIsr(removed, sent, state)


def leader_high_watermark(*, leader_end_offset: int, replicas: Mapping[int, ReplicaState], state: PartitionState,
                          now_ms: int, max_lag_ms: int, eligible: Callable[[int], bool],
                          min_insync_replicas: int = 1) -> int | None:
    """The high watermark the leader may move to (Kafka's ``maybeIncrementLeaderHW``), or None
    while the committed ISR is under ``min.insync.replicas``.  The caller keeps the larger of
    this and its current high watermark (it never goes back).

    The minimum log end over the leader and every remote replica that is in the maximal ISR, or
    caught up and eligible (about to join: waiting for it avoids a high watermark it would
    have to catch up to again)."""
    if len(state.isr) < min_insync_replicas:
        return None
    hw = leader_end_offset
    for rid, rs in replicas.items():
        if rs.log_end_offset < hw and (
                rid in state.maximal_isr or (is_caught_up(rs, leader_end_offset, now_ms, max_lag_ms)
                                             and eligible(rid))):
            hw = rs.log_end_offset
    return hw


class AlterPartitionErrorAction(enum.Enum):
    """What the leader does with a failed AlterPartition (Kafka's ``handleAlterPartitionError``)."""
    #: the controller says the request was not applied: back to the last committed state
    RESET_TO_COMMITTED = "reset"
    #: stay pending until new metadata replaces the partition state
    AWAIT_METADATA = "await"
    #: send the same change again
    RETRY = "retry"


def alter_partition_error_action(error: int) -> tuple[AlterPartitionErrorAction, str]:
    """The action for ``error`` and the reason to log, Kafka's words."""
    e = int(error)
    if e in (Errors.OPERATION_NOT_ATTEMPTED, Errors.INELIGIBLE_REPLICA):
        return (AlterPartitionErrorAction.RESET_TO_COMMITTED,
                "the controller rejected the request; the partition state is reset to the latest committed state")
    reasons = {
        int(Errors.UNKNOWN_TOPIC_OR_PARTITION): "the controller doesn't know about this topic or partition",
        int(Errors.UNKNOWN_TOPIC_ID): "the controller doesn't know about this topic",
        int(Errors.FENCED_LEADER_EPOCH): "the leader epoch is old",
        int(Errors.INVALID_UPDATE_VERSION): "the partition epoch is invalid",
        int(Errors.INVALID_REQUEST): "the request is invalid",
        int(Errors.NEW_LEADER_ELECTED): ("the change was applied but this replica was removed from the replica set "
                                         "while completing a reassignment"),
    }
    if e in reasons:
        return (AlterPartitionErrorAction.AWAIT_METADATA,
                f"{reasons[e]}. Partition state may be out of sync, awaiting the latest metadata")
    try:
        name = Errors(e).name
    except ValueError:
        name = f"error code {e}"
    return AlterPartitionErrorAction.RETRY, f"unexpected {name}. Retrying"


def committed_state_after(result: LeaderAndIsr, *, leader_epoch: int,
                          partition_epoch: int) -> CommittedPartitionState | None:
    """The committed state a successful AlterPartition answer gives (Kafka's
    ``handleAlterPartitionUpdate``), or None to ignore it: an answer for another leader epoch,
    or one older than the partition epoch we know (new metadata overtook it)."""
    if result.leader_epoch != leader_epoch or result.partition_epoch < partition_epoch:
        return None
    return CommittedPartitionState(result.isr, result.leader_recovery_state)
