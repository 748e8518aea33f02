"""Partition reassignment in the controller (reassignment.py), re-stating Kafka's
ReplicationControlManagerTest.testReassignPartitions, testCancelReassignPartitions and
testReassignPartitionsHandlesNewReassignmentThatRemovesPreviouslyAddingReplicas with their
exact records and responses, plus KIP-860 (allowReplicationFactorChange), the unclean revert
rule, atomicity and reads at a committed epoch."""
from __future__ import annotations

from typing import Any

import pytest
from support.replication import ReplicationControlTestContext, broker_dir

from kraft_node.metadata.controller.partition_changes import PartitionChangeOps
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_node.protocol.generated.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from kraft_node.protocol.generated.elect_leaders import ElectLeadersRequest
from kraft_node.protocol.generated.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

Req = AlterPartitionReassignmentsRequest
Resp = AlterPartitionReassignmentsResponse
L = ListPartitionReassignmentsResponse
APR = AlterPartitionRequest
NONE_REASSIGNING = L(error_message=None)
VERSION = MetadataVersion.latest_testing().partition_change_record_version()


def make() -> tuple[ReplicationControlTestContext, PartitionChangeOps]:
    ctx = ReplicationControlTestContext(MetadataVersion.latest_testing())
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    return ctx, ops


def reassign(*topics: tuple[str, list[tuple[int, list[int] | None]]], allow_rf_change: bool = True) -> Any:
    return Req(allow_replication_factor_change=allow_rf_change, topics=[
        Req.ReassignableTopic(name=name, partitions=[Req.ReassignablePartition(partition_index=i, replicas=r)
                                                     for i, r in parts]) for name, parts in topics])


def answer(*topics: tuple[str, list[tuple[int, Errors, str | None]]], allow_rf_change: bool = True) -> Any:
    return Resp(error_message=None, allow_replication_factor_change=allow_rf_change, responses=[
        Resp.ReassignableTopicResponse(name=name, partitions=[
            Resp.ReassignablePartitionResponse(partition_index=i, error_code=code, error_message=message)
            for i, code, message in parts]) for name, parts in topics])


def listing(*topics: tuple[str, list[tuple[int, list[int], list[int], list[int]]]]) -> Any:
    """ListPartitionReassignments' answer: (partition, replicas, adding, removing) per topic."""
    return L(error_message=None, topics=[L.OngoingTopicReassignment(name=name, partitions=[
        L.OngoingPartitionReassignment(partition_index=i, replicas=r, adding_replicas=a, removing_replicas=rm)
        for i, r, a, rm in parts]) for name, parts in topics])


def list_of(name: str, *partitions: int) -> Any:
    return [ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics(name=name,
                                                                               partition_indexes=list(partitions))]


def dirs(*brokers: int) -> list[Uuid]:
    return [broker_dir(b) for b in brokers]


UNKNOWN_FOO_2 = (2, Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition foo:2.")


@pytest.mark.parametrize("version", [2, 3])
def test_reassign_partitions(version):
    """ReplicationControlManagerTest.testReassignPartitions (AlterPartition v2/v3)."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    foo = ctx.create_test_topic("foo", [[1, 2, 3], [3, 2, 1]]).topic_id
    ctx.create_test_topic("bar", [[1, 2, 3]])
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING
    alter = ops.alter_partition_reassignments(reassign(("foo", [(0, [3, 2, 1]), (1, [0, 2, 1]), (2, [0, 2, 1])]),
                                                       ("bar", [])))
    assert alter.atomic
    assert alter.response == answer(("foo", [(0, Errors.NONE, None), (1, Errors.NONE, None), UNKNOWN_FOO_2]),
                                    ("bar", []))
    ctx.replay(alter.records)
    current = listing(("foo", [(1, [0, 2, 1, 3], [0], [3])]))
    assert ops.list_partition_reassignments(None) == current
    assert ops.list_partition_reassignments(list_of("bar", 0, 1, 2)) == NONE_REASSIGNING
    assert ops.list_partition_reassignments(list_of("foo", 0, 1, 2)) == current
    cancel = ops.alter_partition_reassignments(reassign(("foo", [(0, None), (1, None), (2, None)]),
                                                        ("bar", [(0, None)])))
    assert cancel == ControllerResult.atomic_of([ApiMessageAndVersion(m.PartitionChangeRecord(
        topic_id=foo, partition_id=1, replicas=[2, 1, 3], directories=dirs(2, 1, 3), leader=3, removing_replicas=[],
        adding_replicas=[]), VERSION)], answer(
        ("foo", [(0, Errors.NO_REASSIGNMENT_IN_PROGRESS, None), (1, Errors.NONE, None), UNKNOWN_FOO_2]),
        ("bar", [(0, Errors.NO_REASSIGNMENT_IN_PROGRESS, None)])))
    # (the cancel is not replayed:) the new replica joining the ISR completes the reassignment,
    # which moves the leadership off broker 3, the one being removed
    data = APR.PartitionData(partition_index=1, partition_epoch=1, leader_epoch=0)
    if version >= 3:
        data.new_isr_with_epochs = [APR.BrokerState(broker_id=b, broker_epoch=100 + b) for b in (3, 0, 2, 1)]
    else:
        data.new_isr = [3, 0, 2, 1]
    result = ops.alter_partition(APR(broker_id=3, broker_epoch=103, topics=[APR.TopicData(topic_id=foo,
                                                                                         partitions=[data])]), version)
    assert result.response.topics[0].topic_id == foo
    assert [(p.partition_index, p.error_code) for p in result.response.topics[0].partitions] == [
        (1, Errors.NEW_LEADER_ELECTED)]
    ctx.replay(result.records)
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING
    p1 = ctx.partition(foo, 1)
    assert (p1.replicas, p1.isr, p1.leader) == ((0, 2, 1), (0, 2, 1), 0)


def test_cancel_reassign_partitions():
    """ReplicationControlManagerTest.testCancelReassignPartitions."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3, 4], [0, 1, 2, 3], [4, 3, 1, 0], [2, 3, 4, 1]]).topic_id
    bar = ctx.create_test_topic("bar", [[4, 3, 2]]).topic_id
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING
    records: list[ApiMessageAndVersion] = []
    ops.handle_broker_fenced(3, records)
    ctx.replay(records)

    def state(topic_id: Uuid, pid: int) -> tuple[Any, ...]:
        p = ctx.partition(topic_id, pid)
        return (p.replicas, p.isr, p.directories, p.adding_replicas, p.removing_replicas, p.leader,
                p.leader_recovery_state.name, p.leader_epoch, p.partition_epoch)

    assert state(foo, 0) == ((1, 2, 3, 4), (1, 2, 4), tuple(dirs(1, 2, 3, 4)), (), (), 1, "RECOVERED", 0, 1)
    alter = ops.alter_partition_reassignments(reassign(
        ("foo", [(0, [1, 2, 4]), (1, [1, 2, 3, 0]), (2, [5, 6, 7]), (3, [])]), ("bar", [(0, [1, 2, 3, 4, 0])])))
    assert alter.response == answer(
        ("foo", [(0, Errors.NONE, None), (1, Errors.NONE, None),
                 (2, Errors.INVALID_REPLICA_ASSIGNMENT,
                  "The manual partition assignment includes broker 5, but no such broker is registered."),
                 (3, Errors.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica "
                                                        "list.")]),
        ("bar", [(0, Errors.NONE, None)]))
    ctx.replay(alter.records)
    assert state(foo, 0) == ((1, 2, 4), (1, 2, 4), tuple(dirs(1, 2, 4)), (), (), 1, "RECOVERED", 1, 2)
    assert state(foo, 1) == ((1, 2, 3, 0), (0, 1, 2), tuple(dirs(1, 2, 3, 0)), (), (), 0, "RECOVERED", 0, 2)
    assert state(bar, 0) == ((1, 2, 3, 4, 0), (4, 2), tuple(dirs(1, 2, 3, 4, 0)), (0, 1), (), 4, "RECOVERED", 0, 2)
    current = listing(("bar", [(0, [1, 2, 3, 4, 0], [0, 1], [])]))
    assert ops.list_partition_reassignments(None) == current
    assert ops.list_partition_reassignments(list_of("foo", 0, 1, 2)) == NONE_REASSIGNING
    assert ops.list_partition_reassignments(list_of("bar", 0, 1, 2)) == current
    isr_change = ops.alter_partition(APR(broker_id=4, broker_epoch=104, topics=[APR.TopicData(
        topic_id=bar, partitions=[APR.PartitionData(
            partition_index=0, partition_epoch=2, leader_epoch=0,
            new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=100 + b) for b in (4, 1, 2, 0)])])]), 3)
    assert [(p.partition_index, p.leader_id, p.leader_epoch, list(p.isr), p.partition_epoch, p.error_code)
            for p in isr_change.response.topics[0].partitions] == [(0, 4, 0, [4, 1, 2, 0], 3, 0)]
    # (the ISR change is not replayed, as in Kafka's test)
    cancel = ops.alter_partition_reassignments(reassign(("foo", [(0, None)]), ("bar", [(0, None)])))
    assert cancel == ControllerResult.atomic_of([ApiMessageAndVersion(m.PartitionChangeRecord(
        topic_id=bar, partition_id=0, leader=4, replicas=[2, 3, 4], directories=dirs(2, 3, 4), removing_replicas=None,
        adding_replicas=[]), VERSION)], answer(("foo", [(0, Errors.NO_REASSIGNMENT_IN_PROGRESS, None)]),
                                               ("bar", [(0, Errors.NONE, None)])))
    ctx.replay(cancel.records)
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING
    assert state(bar, 0) == ((2, 3, 4), (4, 2), tuple(dirs(2, 3, 4)), (), (), 4, "RECOVERED", 1, 3)


def test_reassign_partitions_handles_new_reassignment_that_removes_previously_adding_replicas():
    """ReplicationControlManagerTest.testReassignPartitionsHandlesNewReassignmentThatRemovesPreviouslyAddingReplicas."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4, 5)
    ctx.unfence_brokers(0, 1, 2, 3, 4, 5)
    topic = "topic-1"
    topic_id = ctx.create_test_topic(topic, [[0, 1]]).topic_id
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING
    one = ops.alter_partition_reassignments(reassign((topic, [(0, [2, 3])])))
    assert one.response == answer((topic, [(0, Errors.NONE, None)]))
    ctx.replay(one.records)
    assert ops.list_partition_reassignments(None) == listing((topic, [(0, [2, 3, 0, 1], [2, 3], [0, 1])]))
    p = ctx.partition(topic_id, 0)

    def isr_change(leader: int, isr: list[int]) -> Any:
        q = ctx.partition(topic_id, 0)
        return ops.alter_partition(APR(broker_id=leader, broker_epoch=ctx.current_broker_epoch(leader), topics=[
            APR.TopicData(topic_id=topic_id, partitions=[APR.PartitionData(
                partition_index=0, partition_epoch=q.partition_epoch, leader_epoch=q.leader_epoch,
                new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=100 + b) for b in isr])])]), 3)

    added = isr_change(p.leader, [0, 1, 2])
    assert [(x.partition_index, list(x.isr), x.partition_epoch, x.leader_id, x.leader_epoch, x.error_code)
            for x in added.response.topics[0].partitions] == [(0, [0, 1, 2], p.partition_epoch + 1, 0, 0, 0)]
    ctx.replay(added.records)
    election = ops.elect_leaders(ElectLeadersRequest(election_type=0, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])]))
    assert [(r.topic, [(x.partition_id, x.error_code, x.error_message) for x in r.partition_result])
            for r in election.response.replica_election_results] == [(topic, [(0, 0, None)])]
    ctx.replay(election.records)
    assert ctx.partition(topic_id, 0).leader == 2
    two = ops.alter_partition_reassignments(reassign((topic, [(0, [4, 5])])))
    assert two.response == answer((topic, [(0, Errors.NONE, None)]))
    ctx.replay(two.records)
    assert ops.list_partition_reassignments(None) == listing((topic, [(0, [4, 5, 0, 1, 2, 3], [4, 5], [0, 1, 2, 3])]))
    p = ctx.partition(topic_id, 0)
    assert p.leader == 2 and 2 in p.replicas
    done = isr_change(2, [0, 1, 2, 3, 4, 5])
    assert [(x.partition_index, x.error_code) for x in done.response.topics[0].partitions] == [
        (0, Errors.NEW_LEADER_ELECTED)]
    ctx.replay(done.records)
    assert ctx.partition(topic_id, 0).leader == 4
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING


def test_replication_factor_may_not_change_when_disallowed():
    """KIP-860: with allowReplicationFactorChange false a target of another size is
    INVALID_REPLICATION_FACTOR (against the set the partition is heading for during a
    reassignment); the response echoes the flag."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    ctx.create_test_topic("foo", [[1, 2, 3], [1, 2, 3]])
    result = ops.alter_partition_reassignments(reassign(("foo", [(0, [0, 1]), (1, [0, 1, 2, 3])]),
                                                        allow_rf_change=False))
    assert result.records == []
    assert result.response == answer(("foo", [
        (0, Errors.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2"),
        (1, Errors.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 4")]),
        allow_rf_change=False)
    started = ops.alter_partition_reassignments(reassign(("foo", [(0, [0, 1, 2])]), allow_rf_change=False))
    assert started.response == answer(("foo", [(0, Errors.NONE, None)]), allow_rf_change=False)
    ctx.replay(started.records)
    assert ops.list_partition_reassignments(None) == listing(("foo", [(0, [0, 1, 2, 3], [0], [3])]))
    # heading for {0, 1, 2}: three replicas, whatever the four listed now
    again = ops.alter_partition_reassignments(reassign(("foo", [(0, [0, 1]), (1, [3, 2, 1])]), allow_rf_change=False))
    assert again.response == answer(("foo", [
        (0, Errors.INVALID_REPLICATION_FACTOR, "The replication factor is changed from 3 to 2"),
        (1, Errors.NONE, None)]), allow_rf_change=False)


def test_cancel_needing_an_unclean_election_is_refused_unless_the_topic_allows_it():
    """cancelPartitionReassignment: every ISR member is a replica being added, so reverting
    would take a replica outside the ISR back: refused unless unclean leader election is
    enabled for the topic."""
    ctx, ops = make()
    ctx.register_brokers(1, 2, 3, 4)
    ctx.unfence_brokers(1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2]]).topic_id
    ctx.replay(ops.alter_partition_reassignments(reassign(("foo", [(0, [3, 4])]))).records)
    p = ctx.partition(foo, 0)
    added = ops.alter_partition(APR(broker_id=1, broker_epoch=101, topics=[APR.TopicData(topic_id=foo, partitions=[
        APR.PartitionData(partition_index=0, partition_epoch=p.partition_epoch, leader_epoch=p.leader_epoch,
                          new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=100 + b)
                                               for b in (1, 2, 3)])])]), 3)
    ctx.replay(added.records)
    ctx.fence_brokers(1, 2)
    p = ctx.partition(foo, 0)
    assert (p.isr, p.leader, p.adding_replicas, p.removing_replicas) == ((3,), 3, (3, 4), (1, 2))
    refused = ops.alter_partition_reassignments(reassign(("foo", [(0, None)])))
    assert refused.records == []
    assert refused.response == answer(("foo", [(0, Errors.INVALID_REPLICA_ASSIGNMENT,
                                                 "Unable to revert partition assignment for foo:0 because it would "
                                                 "require an unclean leader election.")]))
    ctx.alter_topic_config("foo", "unclean.leader.election.enable", "true")
    allowed = ops.alter_partition_reassignments(reassign(("foo", [(0, None)])))
    assert allowed.response == answer(("foo", [(0, Errors.NONE, None)]))
    ctx.replay(allowed.records)
    p = ctx.partition(foo, 0)
    assert (p.replicas, p.isr, p.adding_replicas, p.removing_replicas) == ((1, 2), (1,), (), ())
    assert ops.list_partition_reassignments(None) == NONE_REASSIGNING


def test_unknown_topics_and_the_listing_at_a_committed_epoch():
    """Unknown topic names (UNKNOWN_TOPIC_OR_PARTITION "Unable to find a topic named x.");
    ListPartitionReassignments skips unknown names and partitions, and reads a committed
    epoch, not later writes."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    ctx.create_test_topic("foo", [[1, 2, 3]])
    result = ops.alter_partition_reassignments(reassign(("nope", [(0, [1])]), ("foo", [(0, [1, 2, 3, 0])])))
    assert result.response == answer(
        ("nope", [(0, Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope.")]),
        ("foo", [(0, Errors.NONE, None)]))
    committed = ctx.next_offset
    ctx.registry.get_or_create_snapshot(committed)
    ctx.replay(result.records)
    assert ops.list_partition_reassignments(None) == listing(("foo", [(0, [1, 2, 3, 0], [0], [])]))
    assert ops.list_partition_reassignments(None, epoch=committed) == NONE_REASSIGNING
    assert ops.list_partition_reassignments(list_of("nope", 0) + list_of("foo", 5, 0)) == listing(
        ("foo", [(0, [1, 2, 3, 0], [0], [])]))
