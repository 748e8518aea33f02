"""Partition reassignment: AlterPartitionReassignments and ListPartitionReassignments
(Kafka's ReplicationControlManager.alterPartitionReassignments / alterPartitionReassignment /
changePartitionReassignment / cancelPartitionReassignment / listPartitionReassignments).

How a reassignment runs (Kafka's stages):

1. the request writes one PartitionChangeRecord per partition: replicas = target + the
   replicas being removed, with ``adding`` and ``removing`` set (the lists of
   :class:`PartitionReassignmentReplicas`);
2. the new replicas catch up and the leader adds them to the ISR with AlterPartition;
3. the AlterPartition that makes the ISR hold every replica that stays completes it (the
   PartitionChangeBuilder drops the removed replicas and clears both lists, electing a new
   leader if the old one is being removed).

A target that only reorders the current replicas, or whose new replicas are already in the
ISR, completes in step 1.  Cancelling (``replicas`` null) reverts to the original replicas
and the ISR less the replicas being added (:class:`PartitionReassignmentRevert`); if that
leaves no ISR member the revert is an unclean election, refused (INVALID_REPLICA_ASSIGNMENT)
unless the topic allows unclean leader election.

Atomicity: the whole request is one atomic result (Kafka's ``atomicOf``), one record per
partition, so a reassignment is never half visible: either every accepted partition of the
request starts (or is cancelled) in the same batch, or none does.  Errors are per partition
(``ApiError.fromThrowable``: a message equal to the code's default is sent as null).

KIP-860 (AlterPartitionReassignments v1): with ``allow_replication_factor_change`` false, a
target whose size differs from the replica set the partition is heading for (the replicas,
or during a reassignment replicas + adding - removing) is INVALID_REPLICATION_FACTOR "The
replication factor is changed from 3 to 2".
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.partition_change import (
    Election,
    PartitionReassignmentReplicas,
    PartitionReassignmentRevert,
)
from kraft_node.metadata.controller.partition_changes import PartitionChangeContext
from kraft_node.metadata.controller.replication_control import PartitionRegistration, TopicControlInfo
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition_reassignments import AlterPartitionReassignmentsResponse
from kraft_node.protocol.generated.list_partition_reassignments import ListPartitionReassignmentsResponse
from kraft_storage.timeline import LATEST_EPOCH

log = logging.getLogger("kraft.controller.replication")

#: Kafka's NO_REASSIGNMENT_IN_PROGRESS default message (sent as null, being the default).
NO_REASSIGNMENT_IN_PROGRESS_MESSAGE = "No partition reassignment is in progress."

_Response = AlterPartitionReassignmentsResponse
_List = ListPartitionReassignmentsResponse


class ReassignmentManager:
    """AlterPartitionReassignments and ListPartitionReassignments (see the module doc)."""

    def __init__(self, ctx: PartitionChangeContext):
        self.ctx = ctx

    def alter_partition_reassignments(self, request: Any) -> ControllerResult[Any]:
        """Answer an AlterPartitionReassignmentsRequest (data): one atomic result of a
        PartitionChangeRecord per partition that changes, and the per-partition errors."""
        allow_rf_change = bool(request.allow_replication_factor_change)
        response = _Response(error_message=None, allow_replication_factor_change=allow_rf_change)
        records: list[ApiMessageAndVersion] = []
        succeeded = total = 0
        for topic in request.topics:
            topic_response = _Response.ReassignableTopicResponse(name=topic.name)
            for target in topic.partitions:
                code, message = Errors.NONE, None
                try:
                    self.alter_partition_reassignment(topic.name, target, records, allow_rf_change)
                    succeeded += 1
                except ApiError as exc:
                    log.info("Unable to alter partition reassignment for %s:%d because of an %s error: %s",
                             topic.name, target.partition_index, exc.error.name, exc.message)
                    code = exc.error
                    message = exc.message
                total += 1
                topic_response.partitions.append(_Response.ReassignablePartitionResponse(
                    partition_index=target.partition_index, error_code=code, error_message=message))
            response.responses.append(topic_response)
        log.info("Successfully altered %d out of %d partition reassignment(s).", succeeded, total)
        return ControllerResult.atomic_of(records, response)

    def alter_partition_reassignment(self, topic_name: str, target: Any, records: list[ApiMessageAndVersion],
                                     allow_rf_change: bool = True) -> None:
        """Start, change or (``target.replicas`` None) cancel one partition's reassignment,
        appending its record if anything changes.  ApiError with Kafka's code and message."""
        replication = self.ctx.replication
        topic_id = replication.topic_id(topic_name)
        if topic_id is None:
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic_name}.")
        topic = replication.topic(topic_id)
        if topic is None:
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic with ID {topic_id}.")
        partition_id = target.partition_index
        partition = topic.parts.get(partition_id)
        if partition is None:
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION,
                           f"Unable to find partition {topic_name}:{partition_id}.")
        if target.replicas is None:
            record = self.cancel_partition_reassignment(topic, partition_id, partition)
        else:
            record = self.change_partition_reassignment(topic, partition_id, partition, list(target.replicas),
                                                        allow_rf_change)
        if record is not None:
            records.append(record)

    def cancel_partition_reassignment(self, topic: TopicControlInfo, partition_id: int,
                                      partition: PartitionRegistration) -> ApiMessageAndVersion | None:
        """Revert an ongoing reassignment.  NO_REASSIGNMENT_IN_PROGRESS (message null, it being
        the default) if there is none; INVALID_REPLICA_ASSIGNMENT if reverting needs an unclean
        election the topic does not allow."""
        if not partition.is_reassigning:
            raise ApiError(Errors.NO_REASSIGNMENT_IN_PROGRESS, None)
        ctx = self.ctx
        revert = PartitionReassignmentRevert.of(partition)
        unclean_allowed = ctx.unclean_enabled(topic.name)
        if revert.unclean and not unclean_allowed:
            raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                           f"Unable to revert partition assignment for {topic.name}:{partition_id} because it would "
                           "require an unclean leader election.")
        builder = ctx.builder(topic, partition_id, partition,
                              election=Election.UNCLEAN if unclean_allowed else None)
        builder.set_target_isr(revert.isr)
        builder.set_target_replicas(revert.replicas)
        builder.set_target_removing([])
        builder.set_target_adding([])
        record: ApiMessageAndVersion | None = builder.build()
        return record

    def change_partition_reassignment(self, topic: TopicControlInfo, partition_id: int,
                                      partition: PartitionRegistration, target: list[int],
                                      allow_rf_change: bool = True) -> ApiMessageAndVersion | None:
        """Kafka's changePartitionReassignment: validate ``target`` (the replication manager's
        validateManualPartitionAssignment: registered, distinct, non-empty; and KIP-860's
        replication factor check when it may not change), then one record moving the partition
        towards it (or completing at once when the ISR allows)."""
        ctx = self.ctx
        ctx.replication.validate_manual_partition_assignment(target, None)
        if not allow_rf_change:
            _validate_replication_factor_unchanged(partition, target)
        reassignment = PartitionReassignmentReplicas.from_assignments(list(partition.replicas), target)
        builder = ctx.builder(topic, partition_id, partition)
        if reassignment.replicas != list(partition.replicas):
            builder.set_target_replicas(reassignment.replicas)
        if reassignment.removing:
            builder.set_target_removing(reassignment.removing)
        if reassignment.adding:
            builder.set_target_adding(reassignment.adding)
        record: ApiMessageAndVersion | None = builder.build()
        return record

    def list_partition_reassignments(self, topics: Sequence[Any] | None, *, epoch: int = LATEST_EPOCH) -> Any:
        """The ongoing reassignments as of ``epoch`` (a committed offset): of every topic
        (``topics`` None), or of the named topics' listed partitions (unknown names and
        partitions are skipped, as in Kafka)."""
        replication = self.ctx.replication
        response = _List(error_message=None)
        if topics is None:
            for topic_id, partition_ids in replication.reassigning(epoch=epoch).items():
                self._list_topic(response, topic_id, partition_ids, epoch)
        else:
            for wanted in topics:
                named = replication.topic_id(wanted.name, epoch=epoch)
                if named is not None:
                    self._list_topic(response, named, wanted.partition_indexes, epoch)
        return response

    def _list_topic(self, response: Any, topic_id: Any, partition_ids: Sequence[int], epoch: int) -> None:
        topic = self.ctx.replication.topic(topic_id, epoch=epoch)
        if topic is None:
            return
        ongoing = _List.OngoingTopicReassignment(name=topic.name)
        for partition_id in partition_ids:
            partition = topic.parts.get(partition_id, epoch=epoch)
            if partition is None or not partition.is_reassigning:
                continue
            ongoing.partitions.append(_List.OngoingPartitionReassignment(
                partition_index=partition_id, replicas=list(partition.replicas),
                adding_replicas=list(partition.adding_replicas), removing_replicas=list(partition.removing_replicas)))
        if ongoing.partitions:
            response.topics.append(ongoing)


def _validate_replication_factor_unchanged(partition: PartitionRegistration, target: Sequence[int]) -> None:
    """Kafka's validatePartitionReplicationFactorUnchanged (KIP-860)."""
    if partition.is_reassigning:
        heading = (set(partition.replicas) | set(partition.adding_replicas)) - set(partition.removing_replicas)
        current = len(heading)
    else:
        current = len(partition.replicas)
    if current != len(target):
        raise ApiError(Errors.INVALID_REPLICATION_FACTOR,
                       f"The replication factor is changed from {current} to {len(target)}")
