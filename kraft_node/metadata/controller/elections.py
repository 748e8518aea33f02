"""Leader elections: the ElectLeaders RPC (preferred and unclean), and the two periodic tasks
that keep leaders where they should be (Kafka's ReplicationControlManager.electLeaders /
electLeader, maybeBalancePartitionLeaders, maybeElectUncleanLeaders).

Why here and not in the lifecycle: these elect for a partition's own sake (its preferred
replica is back, or it has been leaderless too long and its topic allows an unclean leader),
not because a broker changed state; they never take a replica out of an ISR.

* ``elect_leaders``: per partition, ELECTION_NOT_NEEDED when the preferred replica already
  leads (PREFERRED) or there is a leader (UNCLEAN); otherwise a record, or
  PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when the builder finds no
  acceptable leader; UNKNOWN_TOPIC_OR_PARTITION ("No such topic as foo", "No such partition as
  foo-3").  A request with no partitions (null) elects for every partition and leaves the
  ELECTION_NOT_NEEDED ones out of the response.  An election type other than 0 and 1 is
  INVALID_REQUEST "Unknown election type N".  A PREFERRED election never elects outside the
  ISR, even where the topic allows unclean elections.  Error messages are Kafka's
  ``ApiError(Errors)`` ones: the code's default message, null for success.
* ``maybe_balance_partition_leaders`` (periodic, Kafka's ``leader.imbalance.check.interval``):
  a preferred election for each partition whose leader is not its first replica, at most
  ``max_elections_per_imbalance`` records a run; the response is True (run again at once) when
  the run hit that bound.
* ``maybe_elect_unclean_leaders`` (periodic, Kafka 4.x's ``unclean.leader.election.interval.ms``,
  5 minutes): an unclean election for each leaderless partition of a topic with
  ``unclean.leader.election.enable``, with the same bound and response.

The ``min.insync.replicas`` -> ELR rule (KAFKA-16540) is the configuration manager's
``clear_elr_records`` hook: Kafka 4.x writes one ClearElrRecord per changed level, not
partition changes, and the replication manager replays it.
"""
from __future__ import annotations

import logging
from typing import Any

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.partition_change import Election
from kraft_node.metadata.controller.partition_changes import PartitionChangeContext
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.elect_leaders import ElectLeadersResponse
from kraft_storage.timeline import LATEST_EPOCH

log = logging.getLogger("kraft.controller.replication")

#: ElectLeadersRequest.ElectionType values (Kafka's ElectionType).
PREFERRED, UNCLEAN = 0, 1

#: Kafka's default messages of the election outcomes (``new ApiError(Errors.X)`` carries them).
DEFAULT_MESSAGES: dict[Errors, str] = {
    Errors.ELECTION_NOT_NEEDED: "Leader election not needed for topic partition.",
    Errors.PREFERRED_LEADER_NOT_AVAILABLE: "The preferred leader was not available.",
    Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE: "Eligible topic partition leaders are not available.",
}


class ElectionManager:
    """ElectLeaders and the periodic elections (see the module doc)."""

    def __init__(self, ctx: PartitionChangeContext):
        self.ctx = ctx

    # -- ElectLeaders --------------------------------------------------------------------------

    def elect_leaders(self, request: Any) -> ControllerResult[Any]:
        """Answer an ElectLeadersRequest (data): the election records (non-atomic) and the
        ElectLeadersResponse.  ApiError INVALID_REQUEST for an unknown election type."""
        election_type = request.election_type
        if election_type not in (PREFERRED, UNCLEAN):
            raise ApiError(Errors.INVALID_REQUEST, f"Unknown election type {election_type}")
        replication = self.ctx.replication
        records: list[ApiMessageAndVersion] = []
        response = ElectLeadersResponse(error_code=Errors.NONE)
        if request.topic_partitions is None:
            # Every partition of every topic; partitions already led as wanted are left out.
            for name, topic_id in sorted(replication.topics().items()):
                result = ElectLeadersResponse.ReplicaElectionResult(topic=name)
                response.replica_election_results.append(result)
                for partition_id in sorted(replication.partitions(topic_id)):
                    error, message = self.elect_leader(name, partition_id, election_type, records)
                    if error is not Errors.ELECTION_NOT_NEEDED:
                        result.partition_result.append(ElectLeadersResponse.PartitionResult(
                            partition_id=partition_id, error_code=error, error_message=message))
        else:
            for topic in request.topic_partitions:
                result = ElectLeadersResponse.ReplicaElectionResult(topic=topic.topic)
                response.replica_election_results.append(result)
                for partition_id in topic.partitions:
                    error, message = self.elect_leader(topic.topic, partition_id, election_type, records)
                    result.partition_result.append(ElectLeadersResponse.PartitionResult(
                        partition_id=partition_id, error_code=error, error_message=message))
        return ControllerResult.of(records, response)

    def elect_leader(self, topic_name: str, partition_id: int, election_type: int,
                     records: list[ApiMessageAndVersion]) -> tuple[Errors, str | None]:
        """Kafka's electLeader for one partition: ``(code, message)``, appending the record
        of a successful election."""
        ctx = self.ctx
        topic_id = ctx.replication.topic_id(topic_name)
        if topic_id is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic_name}"
        topic = ctx.replication.topic(topic_id)
        if topic is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic id as {topic_id}"
        partition = topic.parts.get(partition_id)
        if partition is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {topic_name}-{partition_id}"
        if ((election_type == PREFERRED and partition.has_preferred_leader)
                or (election_type == UNCLEAN and partition.has_leader)):
            return _default(Errors.ELECTION_NOT_NEEDED)
        election = Election.PREFERRED if election_type == PREFERRED else Election.UNCLEAN
        record = ctx.builder(topic, partition_id, partition, election=election).build()
        if record is None:
            return _default(Errors.PREFERRED_LEADER_NOT_AVAILABLE if election_type == PREFERRED
                            else Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE)
        records.append(record)
        return Errors.NONE, None

    # -- the periodic tasks --------------------------------------------------------------------

    def maybe_balance_partition_leaders(self) -> ControllerResult[bool]:
        """One run of the leader-balancing task: preferred elections for imbalanced
        partitions, at most ``max_elections_per_imbalance``; True when it stopped at the bound."""
        ctx = self.ctx
        limit = ctx.max_elections_per_imbalance
        records: list[ApiMessageAndVersion] = []
        for tp in ctx.replication.imbalanced():
            if len(records) >= limit:
                break
            topic = ctx.replication.topic(tp.topic_id)
            if topic is None:
                log.error("Skipping unknown imbalanced topic %s", tp)
                continue
            partition = topic.parts.get(tp.partition_id)
            if partition is None:
                log.error("Skipping unknown imbalanced partition %s", tp)
                continue
            record = ctx.builder(topic, tp.partition_id, partition, election=Election.PREFERRED).build()
            if record is not None:
                records.append(record)
        return ControllerResult.of(records, len(records) >= limit)

    def maybe_elect_unclean_leaders(self) -> ControllerResult[bool]:
        """One run of the unclean-election task: for each leaderless partition of a topic with
        unclean leader election enabled, an UNCLEAN election, at most
        ``max_elections_per_imbalance``; True when it stopped at the bound."""
        ctx = self.ctx
        limit = ctx.max_elections_per_imbalance
        records: list[ApiMessageAndVersion] = []
        for tp in ctx.replication.partitions_with_no_leader():
            if len(records) >= limit:
                break
            name = ctx.replication.topic_name(tp.topic_id)
            if name is None:
                continue
            if not ctx.unclean_enabled(name):
                log.debug("Cannot trigger unclean leader election for offline partition %s-%d because unclean "
                          "leader election is disabled for this topic.", name, tp.partition_id)
                continue
            error, _message = self.elect_leader(name, tp.partition_id, UNCLEAN, records)
            if error is Errors.NONE:
                log.info("Triggering unclean leader election for offline partition %s-%d.", name, tp.partition_id)
            else:
                log.warning("Cannot trigger unclean leader election for offline partition %s-%d: %s", name,
                            tp.partition_id, error.name)
        return ControllerResult.of(records, len(records) >= limit)

    # -- reads ---------------------------------------------------------------------------------

    def are_partition_leaders_imbalanced(self, *, epoch: int = LATEST_EPOCH) -> bool:
        return bool(self.ctx.replication.imbalanced(epoch=epoch))

    def are_some_partitions_leaderless(self, *, epoch: int = LATEST_EPOCH) -> bool:
        return bool(self.ctx.replication.partitions_with_no_leader(epoch=epoch))


def _default(error: Errors) -> tuple[Errors, str | None]:
    return error, DEFAULT_MESSAGES[error]
