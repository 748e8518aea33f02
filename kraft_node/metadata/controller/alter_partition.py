"""AlterPartition: a partition leader asks the controller to change its ISR (Kafka's
ReplicationControlManager.alterPartition and validateAlterPartitionData, as of Kafka 4.x).

Why the controller validates so much: the leader's view may be stale (a newer leader epoch
was elected, the partition epoch moved on, a replica it wants back was fenced or restarted
since), and an ISR change applied against the wrong state would admit a replica that has
not caught up.  So the request is checked against the registration the controller has, in
Kafka's order, and each partition gets its own code:

====================================================  =========================================
condition                                             code
====================================================  =========================================
request's broker epoch is not the broker's            STALE_BROKER_EPOCH (the whole request)
topic id unknown (or the zero Uuid)                   UNKNOWN_TOPIC_ID
partition unknown                                     UNKNOWN_TOPIC_OR_PARTITION
leader or partition epoch *ahead* of ours             NOT_CONTROLLER (we are likely stale)
leader epoch behind ours                              FENCED_LEADER_EPOCH
sender is not the leader                              INVALID_REQUEST
partition epoch behind ours                           INVALID_UPDATE_VERSION
ISR not a duplicate-free subset of the replicas       INVALID_REQUEST
ISR without the leader                                INVALID_REQUEST
RECOVERING with more than one ISR member              INVALID_REQUEST
RECOVERED -> RECOVERING                               INVALID_REQUEST
an ISR member unregistered, shutting down, fenced,    INELIGIBLE_REPLICA
or (v3) at another broker epoch than registered
====================================================  =========================================

Versions: the schema here is Kafka 4.x's, versions 2-3 (0 and 1, which named topics and
answered OPERATION_NOT_ATTEMPTED / FENCED_LEADER_EPOCH / UNKNOWN_TOPIC_OR_PARTITION where
these answer INELIGIBLE_REPLICA / NEW_LEADER_ELECTED / UNKNOWN_TOPIC_ID, were removed by
KIP-896); another version is refused with UNSUPPORTED_VERSION.  v2 carries ``new_isr``
(broker ids, epoch not checked, i.e. -1), v3 ``new_isr_with_epochs``.

A change that completes a reassignment may move the leadership off the sender: its records
are written and the sender gets NEW_LEADER_ELECTED (it must refetch metadata).  Otherwise
the response carries the partition as it will be once the record is replayed (leader, ISR,
recovery state, epochs), which is the registration merged with the record.
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.partition_change import Election
from kraft_node.metadata.controller.partition_changes import PartitionChangeContext
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
    TopicControlInfo,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kraft_storage.messages.runtime import ZERO_UUID

log = logging.getLogger("kraft.controller.replication")

#: The AlterPartition versions this controller answers (Kafka 4.x's).
LOWEST_VERSION, HIGHEST_VERSION = AlterPartitionRequest.LOWEST_VERSION, AlterPartitionRequest.HIGHEST_VERSION

#: A v2 ISR member's epoch: "do not check" (Kafka's newIsrToSimpleNewIsrWithBrokerEpochs).
UNCHECKED_BROKER_EPOCH = -1


def valid_isr(replicas: Sequence[int], isr: Sequence[int]) -> bool:
    """Kafka's Replicas.validateIsr: every ISR member is a replica, none negative, none twice
    (an empty ISR is valid here; the leader check rejects it)."""
    return len(set(isr)) == len(isr) and all(r >= 0 for r in isr) and set(isr) <= set(replicas)


class AlterPartitionManager:
    """The AlterPartition write (see the module doc)."""

    def __init__(self, ctx: PartitionChangeContext):
        self.ctx = ctx

    def alter_partition(self, request: Any, version: int) -> ControllerResult[Any]:
        """Answer an AlterPartitionRequest (data) sent at ``version``: one PartitionChangeRecord
        per partition that changes (non-atomic, as Kafka's) and the response.  ApiError
        UNSUPPORTED_VERSION for a version outside 2-3, STALE_BROKER_EPOCH for a sender whose
        epoch is not its registration's."""
        if not LOWEST_VERSION <= version <= HIGHEST_VERSION:
            raise ApiError(Errors.UNSUPPORTED_VERSION,
                           f"AlterPartition version {version} is not supported: this controller answers versions "
                           f"{LOWEST_VERSION} to {HIGHEST_VERSION}.")
        ctx = self.ctx
        ctx.cluster.check_broker_epoch(request.broker_id, request.broker_epoch)
        response = AlterPartitionResponse()
        records: list[ApiMessageAndVersion] = []
        for topic_data in request.topics:
            topic_response = AlterPartitionResponse.TopicData(topic_id=topic_data.topic_id)
            response.topics.append(topic_response)
            topic = None if topic_data.topic_id == ZERO_UUID else ctx.replication.topic(topic_data.topic_id)
            if topic is None:
                for partition_data in topic_data.partitions:
                    topic_response.partitions.append(AlterPartitionResponse.PartitionData(
                        partition_index=partition_data.partition_index, error_code=Errors.UNKNOWN_TOPIC_ID))
                log.info("Rejecting AlterPartition request for unknown topic ID %s.", topic_data.topic_id)
                continue
            for partition_data in topic_data.partitions:
                topic_response.partitions.append(
                    self._alter_one(request.broker_id, topic, partition_data, version, records))
        return ControllerResult.of(records, response)

    def _alter_one(self, broker_id: int, topic: TopicControlInfo, data: Any, version: int,
                   records: list[ApiMessageAndVersion]) -> Any:
        ctx = self.ctx
        pid = data.partition_index
        isr_with_epochs = _isr_with_epochs(data, version)
        partition: PartitionRegistration | None = topic.parts.get(pid)
        error = self._validate(broker_id, topic, pid, partition, data, isr_with_epochs)
        if error is not Errors.NONE:
            return AlterPartitionResponse.PartitionData(partition_index=pid, error_code=error)
        assert partition is not None
        builder = ctx.builder(topic, pid, partition)
        if ctx.unclean_enabled(topic.name):
            builder.set_election(Election.UNCLEAN)
        builder.set_target_isr([b for b, _ in isr_with_epochs])
        builder.set_target_leader_recovery_state(LeaderRecoveryState.of(data.leader_recovery_state))
        record = builder.build()
        if record is not None:
            records.append(record)
            change = record.message
            partition = partition.merge(change)
            log.debug("Node %d has altered ISR for %s-%d to %s.", broker_id, topic.name, pid, change.isr)
            if change.leader != broker_id and change.leader != NO_LEADER_CHANGE:
                # Completing a reassignment moved the leadership: the records stand, and the
                # old leader must refetch metadata before it tries again.
                log.info("AlterPartition request from node %d for %s-%d completed the ongoing partition "
                         "reassignment and triggered a leadership change. Returning NEW_LEADER_ELECTED.",
                         broker_id, topic.name, pid)
                return AlterPartitionResponse.PartitionData(partition_index=pid,
                                                            error_code=Errors.NEW_LEADER_ELECTED)
            if partition.is_reassigning:
                log.info("AlterPartition request from node %d for %s-%d completed the ongoing partition "
                         "reassignment.", broker_id, topic.name, pid)
        return AlterPartitionResponse.PartitionData(
            partition_index=pid, error_code=Errors.NONE, leader_id=partition.leader, isr=list(partition.isr),
            leader_recovery_state=int(partition.leader_recovery_state), leader_epoch=partition.leader_epoch,
            partition_epoch=partition.partition_epoch)

    def _validate(self, broker_id: int, topic: TopicControlInfo, pid: int, partition: PartitionRegistration | None,
                  data: Any, isr_with_epochs: list[tuple[int, int]]) -> Errors:
        """Kafka's validateAlterPartitionData, in its order (see the module doc's table)."""
        name = topic.name
        if partition is None:
            log.info("Rejecting AlterPartition request for unknown partition %s-%d.", name, pid)
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        # An epoch ahead of ours means this controller is probably no longer active.
        if data.leader_epoch > partition.leader_epoch:
            log.debug("Rejecting AlterPartition request from node %d for %s-%d because the current leader epoch "
                      "is %d, which is greater than the local value %d.", broker_id, name, pid, data.leader_epoch,
                      partition.leader_epoch)
            return Errors.NOT_CONTROLLER
        if data.partition_epoch > partition.partition_epoch:
            log.debug("Rejecting AlterPartition request from node %d for %s-%d because the current partition "
                      "epoch is %d, which is greater than the local value %d.", broker_id, name, pid,
                      data.partition_epoch, partition.partition_epoch)
            return Errors.NOT_CONTROLLER
        if data.leader_epoch < partition.leader_epoch:
            log.debug("Rejecting AlterPartition request from node %d for %s-%d because the current leader epoch "
                      "is %d, not %d.", broker_id, name, pid, partition.leader_epoch, data.leader_epoch)
            return Errors.FENCED_LEADER_EPOCH
        if broker_id != partition.leader:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the current leader is %d.",
                     broker_id, name, pid, partition.leader)
            return Errors.INVALID_REQUEST
        if data.partition_epoch < partition.partition_epoch:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the current partition epoch "
                     "is %d, not %d.", broker_id, name, pid, partition.partition_epoch, data.partition_epoch)
            return Errors.INVALID_UPDATE_VERSION
        new_isr = [b for b, _ in isr_with_epochs]
        if not valid_isr(partition.replicas, new_isr):
            log.error("Rejecting AlterPartition request from node %d for %s-%d because it specified an invalid ISR "
                      "%s.", broker_id, name, pid, new_isr)
            return Errors.INVALID_REQUEST
        if partition.leader not in new_isr:
            log.error("Rejecting AlterPartition request from node %d for %s-%d because it specified an invalid ISR "
                      "%s that doesn't include itself.", broker_id, name, pid, new_isr)
            return Errors.INVALID_REQUEST
        try:
            recovery = LeaderRecoveryState.of(data.leader_recovery_state)
        except ValueError as exc:
            # Kafka throws out of the whole request here; one bad partition answers for itself.
            log.info("Rejecting AlterPartition request from node %d for %s-%d: %s.", broker_id, name, pid, exc)
            return Errors.INVALID_REQUEST
        if recovery is LeaderRecoveryState.RECOVERING and len(new_isr) > 1:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the ISR %s had more than one "
                     "replica while the leader was still recovering from an unclean leader election.",
                     broker_id, name, pid, new_isr)
            return Errors.INVALID_REQUEST
        if (partition.leader_recovery_state is LeaderRecoveryState.RECOVERED
                and recovery is LeaderRecoveryState.RECOVERING):
            log.info("Rejecting AlterPartition request from node %d for %s-%d because the leader recovery state "
                     "cannot change from RECOVERED to RECOVERING.", broker_id, name, pid)
            return Errors.INVALID_REQUEST
        ineligible = self.ineligible_replicas_for_isr(isr_with_epochs, partition)
        if ineligible:
            log.info("Rejecting AlterPartition request from node %d for %s-%d because it specified ineligible "
                     "replicas %s in the new ISR %s.", broker_id, name, pid, ", ".join(ineligible), new_isr)
            return Errors.INELIGIBLE_REPLICA
        return Errors.NONE

    def ineligible_replicas_for_isr(self, isr_with_epochs: Sequence[tuple[int, int]],
                                    partition: PartitionRegistration) -> list[str]:
        """Kafka's ineligibleReplicasForIsr, as ``"<id> (<reason>)"`` strings: not registered,
        shutting down, fenced, or a broker epoch other than the registered one (-1: unchecked).
        A broker a lifecycle change is still taking out of this partition (its fencing,
        unregistration or offline directory not yet all written) counts as fenced."""
        ctx = self.ctx
        dirs = dict(zip(partition.replicas, partition.directories))
        out = []
        for broker_id, broker_epoch in isr_with_epochs:
            registration = ctx.cluster.registration(broker_id)
            if registration is None:
                out.append(f"{broker_id} (not registered)")
            elif registration.in_controlled_shutdown:
                out.append(f"{broker_id} (shutting down)")
            elif registration.fenced or ctx.excluded(broker_id, dirs.get(broker_id)):
                out.append(f"{broker_id} (fenced)")
            elif broker_epoch != UNCHECKED_BROKER_EPOCH and registration.epoch != broker_epoch:
                out.append(f"{broker_id} (broker epoch mismatch: requested={broker_epoch} "
                           f"VS expected={registration.epoch})")
        return out


def _isr_with_epochs(data: Any, version: int) -> list[tuple[int, int]]:
    """``[(broker id, broker epoch)]`` of the requested ISR: v3's NewIsrWithEpochs, or v2's
    NewIsr with every epoch unchecked."""
    if version >= 3:
        return [(s.broker_id, s.broker_epoch) for s in data.new_isr_with_epochs]
    return [(b, UNCHECKED_BROKER_EPOCH) for b in data.new_isr]
