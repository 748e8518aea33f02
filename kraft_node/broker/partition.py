"""``Partition``: one partition replica on this broker (Kafka's ``Partition``).

State taken from the image's ``PartitionRegistration`` by :meth:`Partition.make_leader` and
:meth:`Partition.make_follower`: the leader id and leader epoch, the partition epoch, the
replicas and the ISR.  A registration whose partition epoch is older than the one applied is
ignored (Kafka: "Skipped the become-leader state change ... since the partition epoch is
older"), so a replayed delta cannot roll the state back.

Leader side (what this module keeps, issue 25 item 3):

* appends stamp the partition's leader epoch on every batch (``KafkaLog.append_as_leader``);
* ``acks=all`` is refused with NOT_ENOUGH_REPLICAS *before* the append when the ISR is smaller
  than ``min.insync.replicas`` (Kafka's ``appendRecordsToLeader``); acks 0 and 1 are not;
* the high watermark is the minimum log end offset over the ISR (the leader's own LEO for
  itself, the last fetch offset for each follower), never moved backwards.  With only the
  leader in the ISR that is its log end offset, so an acks=1 write to RF 1 is readable at once;
* follower fetch state (:meth:`update_follower_fetch_state`): each follower's log end offset
  (its fetch offset) and the last time it was caught up (fetch offset >= the leader's LEO at
  its previous fetch, Kafka's ``lastCaughtUpTimeMs`` rule), from which the ISR expands (a
  follower at or past the high watermark) and shrinks (not caught up for
  ``replica.lag.time.max.ms``).  The ISR is changed only through ``alter_partition``
  (H5's AlterPartitionManager) and acted on once the controller committed it (the next image):
  Kafka's pending-ISR rule; while a change is in flight no other is proposed.

Interfaces for the follower side (H5, ``replica_fetcher.py``): a follower Partition exposes
``.log`` (KafkaLog), ``.leader_id``, ``.leader_epoch``, ``.topic_id``, ``.topic_partition``,
``.high_watermark``, ``.producer_state`` (append fetched batches with H4's
``append_replicated_as_follower(partition.log, partition.producer_state, records)``) and
:meth:`maybe_update_high_watermark_from_leader`.  The leader's
``alter_partition(partition, new_isr) -> None`` is optional: without it the ISR never changes
(and a lagging follower holds back the high watermark; RF 1 is unaffected).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kraft_node.broker.log.producer_state import (
    LeaderAppend,
    ProducerStateManager,
    ProducerStateManagerConfig,
    append_validated_as_leader,
)
from kraft_node.broker.log.validator import ValidationConfig, ValidationResult, validate_produce_records
from kraft_node.metadata.controller.replication_control import PartitionRegistration
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.protocol.errors import Errors
from kraft_storage.log.log import KafkaLog
from kraft_storage.messages.runtime import Uuid

log = logging.getLogger("kraft.broker.partition")

__all__ = ["Partition", "PartitionError", "ReplicaState", "AlterPartitionCallback"]

#: ``alter_partition(partition, proposed_isr)``: send an AlterPartition to the controller (H5)
AlterPartitionCallback = Callable[["Partition", list[int]], None]
#: the checks applied to bytes appended without a Produce request's topic settings (tests, tools)
_TRUSTED = ValidationConfig(max_message_bytes=2**31 - 1)


class PartitionError(Exception):
    """A request on this partition fails with a Kafka error code (the message says why)."""

    def __init__(self, error: Errors, message: str) -> None:
        super().__init__(message)
        self.error = error


@dataclass
class ReplicaState:
    """A follower as the leader sees it (Kafka's ``Replica``)."""
    replica_id: int
    log_end_offset: int = -1
    #: the follower's log start offset as its last fetch said (-1: unknown)
    log_start_offset: int = -1
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    #: the leader's LEO when this follower last fetched (the next fetch reaching it is "caught up")
    last_fetch_leader_log_end_offset: int = 0
    #: the broker epoch its last fetch carried (KIP-903, Fetch v15+; -1: an older fetch that
    #: carries none; None: no fetch yet)
    broker_epoch: int | None = None


class Partition:
    """One local replica (see the module doc).  ``log`` is opened by the LogManager."""

    def __init__(self, tp: TopicPartition, topic_id: Uuid, log_: KafkaLog, local_broker_id: int, *,
                 high_watermark: int = 0, alter_partition: AlterPartitionCallback | None = None,
                 producer_state_config: ProducerStateManagerConfig | None = None,
                 clock_ms: Callable[[], int] | None = None,
                 isr_eligible: Callable[[int, int | None], bool] | None = None,
                 alive_broker_epoch: Callable[[int], int | None] | None = None) -> None:
        self.topic_partition = tp
        self.topic_id = topic_id
        self.log = log_
        self.local_broker_id = local_broker_id
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.alter_partition = alter_partition
        #: Kafka's ``isReplicaIsrEligible`` (KIP-841, KIP-903): whether the latest metadata lets a
        #: follower join the ISR, given the broker epoch its fetches carried (the ReplicaManager's
        #: answer from its image: not fenced, not in controlled shutdown, that epoch or -1); None:
        #: every follower may (no metadata to ask)
        self.isr_eligible = isr_eligible
        #: Kafka's ``getAliveBrokerEpoch``: a broker's epoch in the latest metadata, None when it is
        #: not registered or fenced; a follower fetch carrying an older epoch is refused
        self.alive_broker_epoch = alive_broker_epoch
        #: an ISR change sent and not yet seen in the image
        self.pending_isr: tuple[int, ...] | None = None
        self.remote_replicas: dict[int, ReplicaState] = {}
        #: the log end offset when this broker became leader at ``leader_epoch`` (a follower must
        #: reach it to join the ISR: it then has every batch of this leadership's history)
        self.leader_epoch_start_offset = 0
        self._high_watermark = min(max(high_watermark, log_.log_start_offset), log_.log_end_offset)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        #: the idempotent producers of this partition (H4's ProducerStateManager), rebuilt from the
        #: latest snapshot and the log after it (nothing to scan after a clean shutdown)
        self.producer_state = ProducerStateManager(log_.directory, str(tp), producer_state_config,
                                                   clock=self._clock_ms)
        self.producer_state.rebuild(log_, reload_from_clean_shutdown=log_.load_report.clean_shutdown)

    # ------------------------------------------------------------------ facts
    def __repr__(self) -> str:
        return (f"Partition({self.topic_partition}, leader={self.leader_id}, leaderEpoch={self.leader_epoch}, "
                f"partitionEpoch={self.partition_epoch}, isr={list(self.isr)}, hw={self._high_watermark}, "
                f"leo={self.log.log_end_offset})")

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.local_broker_id

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    # ------------------------------------------------------------------ transitions
    def _newer(self, reg: PartitionRegistration, what: str) -> bool:
        if reg.partition_epoch < self.partition_epoch:
            log.info("%s: skipped the %s state change with partition epoch %d since the partition epoch is "
                     "older than the current %d", self.topic_partition, what, reg.partition_epoch,
                     self.partition_epoch)
            return False
        return True

    def make_leader(self, reg: PartitionRegistration, now_ms: int) -> bool:
        """Become (or stay) the leader per ``reg``.  Returns True when this is a new leadership
        (a leader epoch change or a follower becoming leader).  On a new leadership the
        followers' states are reset: their offsets are unknown until they fetch again."""
        if not self._newer(reg, "become-leader"):
            return False
        is_new = not self.is_leader or reg.leader_epoch != self.leader_epoch
        self.leader_id = reg.leader
        self.leader_epoch = reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        self.replicas = tuple(reg.replicas)
        self.isr = tuple(reg.isr)
        self.pending_isr = None
        old = self.remote_replicas
        self.remote_replicas = {}
        for r in self.replicas:
            if r == self.local_broker_id:
                continue
            state = old.get(r) if not is_new else None
            self.remote_replicas[r] = state or ReplicaState(r, last_caught_up_time_ms=now_ms if r in self.isr else 0,
                                                            last_fetch_time_ms=now_ms)
        if is_new:
            if self.producer_state.map_end_offset() != self.log.log_end_offset:
                # a safety net: the fetcher keeps the producer state with its appends and
                # truncations, but a state that does not end at the log end is rebuilt from the
                # log before any client batch is checked against it
                self.producer_state.rebuild(self.log)
            self.leader_epoch_start_offset = self.log.log_end_offset
            # DEBUG, not INFO: the ReplicaManager logs each transition's partitions at INFO in one
            # line; a line per partition was ~60% of a 10,000-partition leadership move on the
            # surviving brokers of a controlled shutdown (session 21, py-spy)
            if log.isEnabledFor(logging.DEBUG):
                log.debug("%s: leader with leader epoch %d, partition epoch %d, ISR %s, high watermark %d, log "
                          "end offset %d", self.topic_partition, self.leader_epoch, self.partition_epoch,
                          list(self.isr), self._high_watermark, self.log.log_end_offset)
        self.maybe_increment_high_watermark()
        return is_new

    def make_follower(self, reg: PartitionRegistration) -> bool:
        """Follow ``reg.leader``.  Returns True when the leader or leader epoch changed (the
        fetcher must restart from this log, truncating per the diverging-epoch answer)."""
        if not self._newer(reg, "become-follower"):
            return False
        changed = self.leader_id != reg.leader or self.leader_epoch != reg.leader_epoch
        self.leader_id = reg.leader
        self.leader_epoch = reg.leader_epoch
        self.partition_epoch = reg.partition_epoch
        self.replicas = tuple(reg.replicas)
        self.isr = tuple(reg.isr)
        self.pending_isr = None
        self.remote_replicas = {}
        return changed

    # ------------------------------------------------------------------ leader
    def check_leader_epoch(self, current_leader_epoch: int, *, require_leader: bool = True) -> None:
        """Kafka's ``getLocalLog``: NOT_LEADER_OR_FOLLOWER when not the leader (if required),
        FENCED_LEADER_EPOCH for an older epoch, UNKNOWN_LEADER_EPOCH for a newer one (-1: no check)."""
        if require_leader and not self.is_leader:
            raise PartitionError(Errors.NOT_LEADER_OR_FOLLOWER,
                                 f"Leader not local for partition {self.topic_partition} on broker "
                                 f"{self.local_broker_id}")
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.leader_epoch:
                raise PartitionError(Errors.FENCED_LEADER_EPOCH,
                                     f"The leader epoch {current_leader_epoch} of the request is older than the "
                                     f"current leader epoch {self.leader_epoch} of {self.topic_partition}")
            if current_leader_epoch > self.leader_epoch:
                raise PartitionError(Errors.UNKNOWN_LEADER_EPOCH,
                                     f"The leader epoch {current_leader_epoch} of the request is newer than the "
                                     f"current leader epoch {self.leader_epoch} of {self.topic_partition}")

    def append_records_to_leader(self, records: ValidationResult | bytes | memoryview, acks: int,
                                 min_insync_replicas: int) -> LeaderAppend:
        """Kafka's ``appendRecordsToLeader``: NOT_ENOUGH_REPLICAS for acks=all when the ISR is
        below ``min.insync.replicas``; else append with the leader epoch (and the producer-state
        checks: a retried batch is not written again, its first offsets are returned with
        ``duplicate``; ProducerStateError for a bad sequence or a fenced epoch) and advance the
        high watermark (at once with an ISR of one).  ``records``: the validator's result for a
        Produce; raw bytes are validated here with no topic limit (tests, tools)."""
        if not self.is_leader:
            raise PartitionError(Errors.NOT_LEADER_OR_FOLLOWER,
                                 f"Leader not local for partition {self.topic_partition} on broker "
                                 f"{self.local_broker_id}")
        if acks == -1 and len(self.isr) < min_insync_replicas:
            raise PartitionError(Errors.NOT_ENOUGH_REPLICAS,
                                 f"The size of the current ISR {list(self.isr)} is insufficient to satisfy the "
                                 f"min.isr requirement of {min_insync_replicas} for partition "
                                 f"{self.topic_partition}")
        if not isinstance(records, ValidationResult):
            records = validate_produce_records(records, topic_partition=str(self.topic_partition), config=_TRUSTED,
                                               now_ms=self._clock_ms())
        out = append_validated_as_leader(self.log, self.producer_state, records, self.leader_epoch)
        self.maybe_increment_high_watermark()
        return out

    def check_enough_replicas_reach_offset(self, required_offset: int,
                                           min_insync_replicas: int) -> tuple[bool, Errors]:
        """Kafka's ``checkEnoughReplicasReachOffset`` (acks=all): done when the high watermark
        reached ``required_offset``; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below
        ``min.insync.replicas`` meanwhile; NOT_LEADER_OR_FOLLOWER if leadership moved."""
        if not self.is_leader:
            return True, Errors.NOT_LEADER_OR_FOLLOWER
        if self._high_watermark >= required_offset:
            if len(self.isr) >= min_insync_replicas:
                return True, Errors.NONE
            return True, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return False, Errors.NONE

    def low_watermark(self) -> int:
        """Kafka's ``lowWatermarkIfLeader``: the minimum log start offset over this leader and the
        followers whose log start offset is known (what DeleteRecords waits for)."""
        known = [s.log_start_offset for s in self.remote_replicas.values() if s.log_start_offset >= 0]
        return min([self.log.log_start_offset, *known])

    def delete_records_on_leader(self, offset: int) -> int:
        """Kafka's ``deleteRecordsOnLeader``: move the log start offset to ``offset`` (-1: the high
        watermark); OFFSET_OUT_OF_RANGE below 0 or past the high watermark.  Returns the offset
        the low watermark must reach.  The producer state forgets what is before it."""
        if not self.is_leader:
            raise PartitionError(Errors.NOT_LEADER_OR_FOLLOWER,
                                 f"Leader not local for partition {self.topic_partition} on broker "
                                 f"{self.local_broker_id}")
        target = self._high_watermark if offset == -1 else offset
        if target < 0:
            raise PartitionError(Errors.OFFSET_OUT_OF_RANGE,
                                 f"The offset {target} for partition {self.topic_partition} is not valid")
        if target > self._high_watermark:
            raise PartitionError(Errors.OFFSET_OUT_OF_RANGE,
                                 f"Cannot increment the log start offset to {target} of partition "
                                 f"{self.topic_partition} since it is larger than the high watermark "
                                 f"{self._high_watermark}")
        if self.log.advance_log_start_offset(target):
            self.producer_state.on_log_start_offset_incremented(target)
            self.producer_state.delete_snapshots_before(target)
        return target

    def maybe_increment_high_watermark(self) -> bool:
        """Move the high watermark to the minimum log end offset over the ISR (leader only);
        never backwards.  True when it moved."""
        if not self.is_leader:
            return False
        new_hw = self.log.log_end_offset
        for r in self.isr:
            if r == self.local_broker_id:
                continue
            state = self.remote_replicas.get(r)
            leo = state.log_end_offset if state is not None else -1
            if leo < new_hw:
                new_hw = leo
        if new_hw > self._high_watermark:
            self._high_watermark = new_hw
            return True
        return False

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int,
                                    log_start_offset: int = -1, *, broker_epoch: int = -1) -> bool:
        """A follower fetched from ``fetch_offset`` (its log end offset).  Updates its caught-up
        time, may propose an ISR expansion, and may move the high watermark.  True when the
        high watermark moved.  A replica that is not in the replica set is NOT_LEADER_OR_FOLLOWER.
        ``broker_epoch``: the epoch the fetch carried (Fetch v15+, -1 when none); one older than
        the metadata's for that broker is a previous incarnation's fetch, refused with
        NOT_LEADER_OR_FOLLOWER and not recorded (Kafka's ``Replica.updateFetchStateOrThrow``,
        KIP-903)."""
        state = self.remote_replicas.get(replica_id)
        if state is None:
            raise PartitionError(Errors.NOT_LEADER_OR_FOLLOWER,
                                 f"Replica {replica_id} is not a replica of {self.topic_partition} "
                                 f"(replicas {list(self.replicas)})")
        if broker_epoch != -1 and self.alive_broker_epoch is not None:
            alive = self.alive_broker_epoch(replica_id)
            if alive is not None and alive > broker_epoch:
                raise PartitionError(Errors.NOT_LEADER_OR_FOLLOWER,
                                     f"Received stale fetch state update. broker epoch={broker_epoch} "
                                     f"vs expected={state.broker_epoch if state.broker_epoch is not None else alive}")
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            state.last_caught_up_time_ms = now_ms
        elif fetch_offset >= state.last_fetch_leader_log_end_offset:
            state.last_caught_up_time_ms = max(state.last_caught_up_time_ms, state.last_fetch_time_ms)
        state.log_end_offset = fetch_offset
        if log_start_offset >= 0:
            state.log_start_offset = log_start_offset
        state.last_fetch_time_ms = now_ms
        state.last_fetch_leader_log_end_offset = leader_leo
        state.broker_epoch = broker_epoch
        self._maybe_expand_isr(state)
        return self.maybe_increment_high_watermark()

    def _maybe_expand_isr(self, state: ReplicaState) -> None:
        """Kafka's ``maybeExpandIsr``: a follower not in the ISR whose log end offset reached the
        high watermark (and the start of the current leader epoch) joins it, through
        AlterPartition.  Nothing while another change is pending, nor for a follower the
        metadata says is fenced or in controlled shutdown (Kafka's ``canAddReplicaToIsr``,
        KIP-841): the controller would refuse it (INELIGIBLE_REPLICA), and a broker shutting down
        keeps fetching until it exits -- without the check every leader it left proposed it
        again on each of its fetches, thousands of refused changes a second at 10k partitions
        (session 20).  Nor for a follower whose fetches carried a broker epoch other than the
        metadata's (KIP-903: a restarted broker's fetches from before its new registration); the
        epochs go to the controller with the change (:meth:`replica_broker_epoch`), which checks
        them again."""
        if self.alter_partition is None or self.pending_isr is not None or state.replica_id in self.isr:
            return
        if state.log_end_offset >= self._high_watermark and state.log_end_offset >= self.leader_epoch_start_offset:
            eligible = self.isr_eligible
            if eligible is not None and not eligible(state.replica_id, state.broker_epoch):
                return
            self._propose_isr([*self.isr, state.replica_id])

    def maybe_shrink_isr(self, now_ms: int, replica_lag_time_max_ms: int) -> None:
        """Kafka's ``maybeShrinkIsr``: drop the followers not caught up for
        ``replica.lag.time.max.ms`` (through AlterPartition; the leader always stays)."""
        if not self.is_leader or self.alter_partition is None or self.pending_isr is not None:
            return
        out = [r for r in self.isr if r != self.local_broker_id
               and now_ms - self.remote_replicas.get(r, ReplicaState(r)).last_caught_up_time_ms
               > replica_lag_time_max_ms]
        if out:
            log.info("%s: shrinking the ISR from %s to %s (lagging more than %d ms: %s)", self.topic_partition,
                     list(self.isr), [r for r in self.isr if r not in out], replica_lag_time_max_ms, out)
            self._propose_isr([r for r in self.isr if r not in out])

    def _propose_isr(self, new_isr: Sequence[int]) -> None:
        self.pending_isr = tuple(new_isr)
        assert self.alter_partition is not None
        self.alter_partition(self, list(new_isr))

    def replica_broker_epoch(self, broker_id: int) -> int:
        """The broker epoch sent with ``broker_id`` in an AlterPartition ISR (Kafka's
        ``addBrokerEpochToIsr``): what its last fetch carried, -1 when unknown."""
        state = self.remote_replicas.get(broker_id)
        return -1 if state is None or state.broker_epoch is None else state.broker_epoch

    def on_alter_partition_failed(self) -> None:
        """H5's manager reports a refused or failed AlterPartition: a later fetch or shrink
        check may propose again."""
        self.pending_isr = None

    # ------------------------------------------------------------------ follower
    def maybe_update_high_watermark_from_leader(self, leader_high_watermark: int) -> bool:
        """A follower takes the leader's high watermark, capped by its own log end offset."""
        new_hw = min(leader_high_watermark, self.log.log_end_offset)
        if new_hw != self._high_watermark and new_hw >= 0:
            self._high_watermark = new_hw
            return True
        return False
