"""ReplicationControlManager's write side for topics: CreateTopics, CreatePartitions,
DeleteTopics and the topic-id lookups, re-stating Kafka's ReplicationControlManagerTest
(and the topic parts of QuorumControllerTest) with their exact inputs, placements (Kafka's
MockRandom through the StripedReplicaPlacer), records and messages.  Each test names the
Kafka test it re-states; the others check what Kafka's tests leave implicit (the replay-side
invariants after a creation, the bulk replay path equal to the one-by-one one, the records
equal to PartitionRegistration.to_record)."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.replication import (
    ReplicationControlTestContext,
    broker_dir,
    creatable_topic,
    create_partitions_topic,
    create_topics_request,
    find_result,
)
from test_replay_managers import Controller, check_invariants

from kraft_node.metadata.controller.configuration_control import ConfigResource
from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.replication_control import (
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
    TopicIdPartition,
)
from kraft_node.metadata.controller.result import MAX_RECORDS_PER_USER_OP
from kraft_node.metadata.controller.topic_creation import (
    MAX_PARTITIONS_PER_BATCH,
    random_topic_id,
    validate_new_topic_names,
    validate_total_number_of_partitions,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.create_partitions import CreatePartitionsResponse
from kraft_node.protocol.generated.create_topics import CreateTopicsResponse
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import ONE_UUID, ZERO_UUID, Uuid

R = CreateTopicsResponse
PR = CreatePartitionsResponse.CreatePartitionsTopicResult
MV = MetadataVersion


def result_tuple(r: Any) -> tuple[Any, ...]:
    """A CreatableTopicResult without its configs (Kafka's ``withoutConfigs``)."""
    return (r.name, r.topic_id, r.error_code, r.error_message, r.topic_config_error_code, r.num_partitions,
            r.replication_factor)


def error_result(name: str, code: Errors, message: str | None) -> tuple[Any, ...]:
    """What Kafka answers for a failed topic: name, code, message, the rest at defaults."""
    return (name, ZERO_UUID, int(code), message, 0, -1, -1)


def ok_result(name: str, topic_id: Uuid, num_partitions: int, replication_factor: int) -> tuple[Any, ...]:
    return (name, topic_id, 0, None, 0, num_partitions, replication_factor)


def registration(replicas: list[int], isr: list[int], leader: int, dirs: list[Uuid] | None = None,
                 leader_epoch: int = 0, partition_epoch: int = 0) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=tuple(replicas),
        directories=tuple(dirs) if dirs is not None else tuple(broker_dir(b) for b in replicas),
        isr=tuple(isr), removing_replicas=(), adding_replicas=(), leader=leader,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=leader_epoch,
        partition_epoch=partition_epoch)


def topic_id_of(result: Any) -> Uuid:
    record = result.records[0].message
    assert isinstance(record, m.TopicRecord)
    return record.topic_id


# ---------------------------------------------------------------------------
# CreateTopics
# ---------------------------------------------------------------------------

def test_create_topics():
    # ReplicationControlManagerTest.testCreateTopics
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    request = create_topics_request(creatable_topic("foo", -1, -1))
    result = rc.create_topics(request, {"foo"})
    assert [result_tuple(t) for t in result.response.topics] == [error_result(
        "foo", Errors.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 3 time(s): All brokers are currently fenced.")]
    assert result.records == [] and result.atomic

    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0)
    ctx.in_controlled_shutdown_brokers(0)
    result2 = rc.create_topics(request, {"foo"})
    assert [result_tuple(t) for t in result2.response.topics] == [error_result(
        "foo", Errors.INVALID_REPLICATION_FACTOR,
        "Unable to replicate the partition 3 time(s): All brokers are currently fenced or in controlled shutdown.")]

    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    result3 = rc.create_topics(request, {"foo"})
    foo = find_result(result3.response, "foo")
    assert [result_tuple(t) for t in result3.response.topics] == [ok_result("foo", foo.topic_id, 1, 3)]
    assert topic_id_of(result3) == foo.topic_id
    ctx.replay(result3.records)
    assert rc.partition(foo.topic_id, 0) == registration([1, 2, 0], [1, 2, 0], 1)

    result4 = rc.create_topics(request, {"foo"})
    assert [result_tuple(t) for t in result4.response.topics] == [error_result(
        "foo", Errors.TOPIC_ALREADY_EXISTS, "Topic 'foo' already exists.")]


def test_create_topics_isr_invariants():
    # ReplicationControlManagerTest.testCreateTopicsISRInvariants: broker 2 is fenced and broker 1
    # in controlled shutdown, so both are placed but only broker 0 is in the ISR.
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1)
    ctx.in_controlled_shutdown_brokers(1)
    result = rc.create_topics(create_topics_request(creatable_topic("foo", -1, -1)), {"foo"})
    foo = find_result(result.response, "foo")
    assert [result_tuple(t) for t in result.response.topics] == [ok_result("foo", foo.topic_id, 1, 3)]
    ctx.replay(result.records)
    assert rc.partition(topic_id_of(result), 0) == registration([1, 0, 2], [0], 0)


def test_a_broker_still_being_fenced_in_bounded_results_is_kept_out_of_new_isrs():
    """kraft's bounded fencing (leadership.py) leaves a broker unfenced in the log while its
    partition changes are still being written; the partition-change side's soft state
    excludes it (``broker_excluded``), and a topic created meanwhile must not put it in an ISR
    (it is still placed, as a fenced broker would be)."""
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    rc.broker_excluded = lambda b: b == 1
    result = rc.create_topics(create_topics_request(creatable_topic("foo", 3, 3)), {"foo"})
    ctx.replay(result.records)
    for p in rc.partitions(topic_id_of(result)).values():
        assert sorted(p.replicas) == [0, 1, 2] and 1 not in p.isr and p.leader != 1
    rc.broker_excluded = None
    result = rc.create_topics(create_topics_request(creatable_topic("bar", 3, 3)), {"bar"})
    ctx.replay(result.records)
    assert all(sorted(p.isr) == [0, 1, 2] for p in rc.partitions(topic_id_of(result)).values())


def test_create_topics_with_configs():
    # ReplicationControlManagerTest.testCreateTopicsWithConfigs
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    valid = {"foo": "notNull"}
    result1 = rc.create_topics(create_topics_request(creatable_topic("foo", -1, -1, configs=valid)), {"foo"})
    assert find_result(result1.response, "foo").error_code == 0
    assert [type(r.message) for r in result1.records] == [m.TopicRecord, m.ConfigRecord, m.PartitionRecord]
    ctx.replay(result1.records)
    assert ctx.configuration_control.configs(ConfigResource.topic("foo"))["foo"] == "notNull"

    result2 = rc.create_topics(create_topics_request(creatable_topic("bar", -1, -1, configs={"foo": None})),
                               {"bar"})
    bar = find_result(result2.response, "bar")
    assert (bar.error_code, bar.error_message) == (int(Errors.INVALID_CONFIG),
                                                   "Null value not supported for topic configs: foo")

    result3 = rc.create_topics(create_topics_request(creatable_topic("baz", -1, -2, configs=valid)), {"baz"})
    assert find_result(result3.response, "baz").error_code == int(Errors.INVALID_REPLICATION_FACTOR)
    assert result3.records == []

    # several topics in one request: only the good one's records
    result4 = rc.create_topics(create_topics_request(creatable_topic("batched-topic-1", -1, -1, configs=valid),
                                                     creatable_topic("batched-topic2", -1, -2, configs=valid)),
                               {"batched-topic-1", "batched-topic2"})
    assert find_result(result4.response, "batched-topic-1").error_code == 0
    assert find_result(result4.response, "batched-topic2").error_code == int(Errors.INVALID_REPLICATION_FACTOR)
    assert len(result4.records) == 3
    topic_record, config_record, partition_record = (r.message for r in result4.records)
    assert isinstance(topic_record, m.TopicRecord) and topic_record.name == "batched-topic-1"
    assert config_record == m.ConfigRecord(resource_name="batched-topic-1", resource_type=2, name="foo",
                                           value="notNull")
    assert isinstance(partition_record, m.PartitionRecord) and partition_record.topic_id == topic_record.topic_id


def test_create_topics_with_validate_only_flag():
    # ReplicationControlManagerTest.testCreateTopicsWithValidateOnlyFlag (no mutation quotas in kraft)
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    request = create_topics_request(creatable_topic("foo", 1, 3), validate_only=True)
    result = ctx.replication_control.create_topics(request, {"foo"})
    assert result.records == []
    foo = find_result(result.response, "foo")
    assert (foo.error_code, foo.num_partitions, foo.replication_factor) == (0, 1, 3)
    assert ctx.replication_control.topic_id("foo") is None


def test_invalid_create_topics_with_validate_only_flag():
    # ReplicationControlManagerTest.testInvalidCreateTopicsWithValidateOnlyFlag
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    request = create_topics_request(creatable_topic("foo", 1, 4), validate_only=True)
    result = ctx.replication_control.create_topics(request, {"foo"})
    assert result.records == []
    assert [result_tuple(t) for t in result.response.topics] == [error_result(
        "foo", Errors.INVALID_REPLICATION_FACTOR, "Unable to replicate the partition 4 time(s): The target "
        "replication factor of 4 cannot be reached because only 3 broker(s) are registered.")]


def test_create_topic_with_collision_chars():
    # ReplicationControlManagerTest.testCreateTopicWithCollisionChars: a deleted topic's name is
    # free again and the new topic gets a new id.
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    initial = ctx.create_test_topic_placed("foo.bar", 2, 2)
    assert ctx.replication_control.topic(initial.topic_id).num_partitions() == 2
    # while foo.bar exists, foo_bar collides with it, and foo.bar itself already exists (Kafka's
    # TOPIC_ALREADY_EXISTS replaces the collision foo.bar has with itself)
    colliding = ctx.create_test_topic_placed("foo_bar", 1, 1, Errors.INVALID_TOPIC_EXCEPTION)
    assert colliding.error_message == "Topic 'foo_bar' collides with existing topic: foo.bar"
    again = ctx.create_test_topic_placed("foo.bar", 1, 1, Errors.TOPIC_ALREADY_EXISTS)
    assert again.error_message == "Topic 'foo.bar' already exists."
    ctx.delete_topic(initial.topic_id)
    recreated = ctx.create_test_topic_placed("foo.bar", 4, 2)
    assert recreated.topic_id != initial.topic_id
    assert ctx.replication_control.topic(recreated.topic_id).num_partitions() == 4
    assert ctx.replication_control.topic(initial.topic_id) is None


def test_validate_new_topic_names():
    # ReplicationControlManagerTest.testValidateNewTopicNames
    errors: dict[str, ApiError] = {}
    validate_new_topic_names(errors, [creatable_topic(""), creatable_topic("woo"), creatable_topic(".")],
                             lambda _n: None)
    assert errors == {
        "": ApiError(Errors.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: the empty string is not allowed"),
        ".": ApiError(Errors.INVALID_TOPIC_EXCEPTION, "Topic name is invalid: '.' is not allowed"),
    }


def test_topic_name_collision():
    # ReplicationControlManagerTest.testTopicNameCollision (Kafka's TreeSet: the first name sorted)
    errors: dict[str, ApiError] = {}
    collisions = {"foo_bar": sorted(["foo_bar"]), "woo_bar_foo": sorted(["woo_bar.foo", "woo.bar.foo"])}
    validate_new_topic_names(errors, [creatable_topic("foo.bar"), creatable_topic("woo.bar_foo")], collisions.get)
    assert errors == {
        "foo.bar": ApiError(Errors.INVALID_TOPIC_EXCEPTION, "Topic 'foo.bar' collides with existing topic: foo_bar"),
        "woo.bar_foo": ApiError(Errors.INVALID_TOPIC_EXCEPTION,
                                "Topic 'woo.bar_foo' collides with existing topic: woo.bar.foo"),
    }


@pytest.mark.parametrize("name, reason", [
    ("..", "'..' is not allowed"),
    ("a" * 250, f"the length of '{'a' * 250}' is longer than the max allowed length 249"),
    ("\U0001F600" * 125, f"the length of '{chr(0x1F600) * 125}' is longer than the max allowed length 249"),
    ("foo bar", "'foo bar' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
    ("föo", "'föo' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"),
])
def test_invalid_topic_names(name, reason):
    # Kafka's Topic.validate messages (TopicTest), answered per topic by createTopics; the emoji
    # name is 125 characters but 250 UTF-16 units, which is what Java's length() counts.
    ctx = ReplicationControlTestContext()
    result = ctx.replication_control.create_topics(create_topics_request(creatable_topic(name, 1, 1)))
    assert [result_tuple(t) for t in result.response.topics] == [
        error_result(name, Errors.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")]


def test_longest_valid_topic_name_is_created():
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    assert ctx.create_test_topic_placed("a" * 249 + "", 1, 1).error_code == 0


@pytest.mark.parametrize("rf, partitions, code, message", [
    (0, 1, Errors.INVALID_REPLICATION_FACTOR,
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (-2, 1, Errors.INVALID_REPLICATION_FACTOR,
     "Replication factor must be larger than 0, or -1 to use the default value."),
    (1, 0, Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
    (1, -2, Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value."),
])
def test_invalid_counts(rf, partitions, code, message):
    # ReplicationControlManager.createTopic's checks of a placed topic's counts
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    result = ctx.replication_control.create_topics(create_topics_request(creatable_topic("foo", partitions, rf)))
    assert [result_tuple(t) for t in result.response.topics] == [error_result("foo", code, message)]
    assert result.records == []


@pytest.mark.parametrize("topic, code, message", [
    (creatable_topic("foo", -1, 2, assignments=[[0]]), Errors.INVALID_REQUEST,
     "A manual partition assignment was specified, but replication factor was not set to -1."),
    (creatable_topic("foo", 1, -1, assignments=[[0]]), Errors.INVALID_REQUEST,
     "A manual partition assignment was specified, but numPartitions was not set to -1."),
    (creatable_topic("foo", assignments=[[]]), Errors.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes an empty replica list."),
    (creatable_topic("foo", assignments=[[0, 1], [1]]), Errors.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes a partition with 1 replica(s), but this is not consistent with "
     "previous partitions, which have 2 replica(s)."),
    (creatable_topic("foo", assignments=[[0, 7]]), Errors.INVALID_REPLICA_ASSIGNMENT,
     "The manual partition assignment includes broker 7, but no such broker is registered."),
    (creatable_topic("foo", assignments=[[2]]), Errors.INVALID_REPLICA_ASSIGNMENT,
     "All brokers specified in the manual partition assignment for partition 0 are fenced or in controlled "
     "shutdown."),
])
def test_bad_manual_assignments_in_create_topics(topic, code, message):
    # ReplicationControlManager.createTopic's manual-assignment branch (broker 2 is fenced)
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1)
    result = ctx.replication_control.create_topics(create_topics_request(topic))
    assert [result_tuple(t) for t in result.response.topics] == [error_result("foo", code, message)]


def test_manual_assignment_indexes():
    # createTopic: partition indexes must be 0..n-1, each given once
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    T = create_topics_request().__class__
    twice = creatable_topic("foo")
    twice.assignments = [T.CreatableReplicaAssignment(partition_index=0, broker_ids=[0]),
                         T.CreatableReplicaAssignment(partition_index=0, broker_ids=[1])]
    gap = creatable_topic("bar")
    gap.assignments = [T.CreatableReplicaAssignment(partition_index=1, broker_ids=[0]),
                       T.CreatableReplicaAssignment(partition_index=2, broker_ids=[1])]
    shuffled = creatable_topic("baz")
    shuffled.assignments = [T.CreatableReplicaAssignment(partition_index=1, broker_ids=[1, 0]),
                            T.CreatableReplicaAssignment(partition_index=0, broker_ids=[0, 1])]
    result = ctx.replication_control.create_topics(create_topics_request(twice, gap, shuffled))
    assert [result_tuple(t) for t in result.response.topics[:2]] == [
        error_result("foo", Errors.INVALID_REPLICA_ASSIGNMENT, "Found multiple manual partition assignments for "
                     "partition 0"),
        error_result("bar", Errors.INVALID_REPLICA_ASSIGNMENT,
                     "partitions should be a consecutive 0-based integer sequence")]
    ctx.replay(result.records)
    baz = ctx.replication_control.topic_id("baz")
    assert [p.replicas for p in (ctx.partition(baz, 0), ctx.partition(baz, 1))] == [(0, 1), (1, 0)]
    assert [r.message.partition_id for r in result.records[1:]] == [0, 1]


def test_manual_partition_assignment_on_all_fenced_brokers():
    # ReplicationControlManagerTest.testManualPartitionAssignmentOnAllFencedBrokers
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1, 2, 3)
    ctx.create_test_topic("foo", [[0, 1, 2]], expected_error=Errors.INVALID_REPLICA_ASSIGNMENT)


def test_snapshot_save_and_load_topic_records():
    # QuorumControllerTest.testSnapshotSaveAndLoad, the topic's records: brokers 0..2 unfenced,
    # 3 fenced, MV 3.7-IV0 (PartitionRecord v0, no directories), foo with p0=[0,1,2], p1=[1,2,0].
    ctx = ReplicationControlTestContext(MV.IBP_3_7_IV0)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2)
    request = create_topics_request(creatable_topic("foo", assignments=[[0, 1, 2], [1, 2, 0]]))
    result = ctx.replication_control.create_topics(request, {"foo"})
    foo_id = find_result(result.response, "foo").topic_id
    assert [(r.message, r.version) for r in result.records] == [
        (m.TopicRecord(name="foo", topic_id=foo_id), 0),
        (m.PartitionRecord(partition_id=0, topic_id=foo_id, replicas=[0, 1, 2], isr=[0, 1, 2], removing_replicas=[],
                           adding_replicas=[], leader=0, leader_epoch=0, partition_epoch=0), 0),
        (m.PartitionRecord(partition_id=1, topic_id=foo_id, replicas=[1, 2, 0], isr=[1, 2, 0], removing_replicas=[],
                           adding_replicas=[], leader=1, leader_epoch=0, partition_epoch=0), 0),
    ]
    assert result.atomic
    ctx.replay(result.records)
    assert ctx.partition(foo_id, 1) == registration([1, 2, 0], [1, 2, 0], 1,
                                                    dirs=[DirectoryId.MIGRATING] * 3)


def test_unregister_broker_create_topics():
    # QuorumControllerTest.testUnregisterBroker, its CreateTopics part: RF 1 while the only
    # broker is fenced, then after its heartbeat unfences it (the unregistration's leader
    # change is the broker-lifecycle side's).
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    request = create_topics_request(creatable_topic("foo", 1, 1))
    foo = find_result(ctx.replication_control.create_topics(request, {"foo"}).response, "foo")
    assert (foo.error_code, foo.error_message) == (
        int(Errors.INVALID_REPLICATION_FACTOR),
        "Unable to replicate the partition 1 time(s): All brokers are currently fenced.")
    ctx.unfence_brokers(0)
    result = ctx.replication_control.create_topics(request, {"foo"})
    assert find_result(result.response, "foo").error_code == 0
    ctx.replay(result.records)
    foo_id = topic_id_of(result)
    assert ctx.replication_control.partitions_with_broker_in_isr(0) == [TopicIdPartition(foo_id, 0)]
    assert ctx.replication_control.partitions_led_by_broker(0) == [TopicIdPartition(foo_id, 0)]


def test_excessive_number_of_topics_cannot_be_created():
    # ReplicationControlManagerTest.testExcessiveNumberOfTopicsCannotBeCreated (Kafka 4.0, KAFKA-17870)
    ctx = ReplicationControlTestContext()
    request = create_topics_request(creatable_topic("foo", 5000, 1), creatable_topic("bar", 5000, 1),
                                    creatable_topic("baz", 1, 1))
    with pytest.raises(ApiError) as err:
        ctx.replication_control.create_topics(request, {"foo", "bar", "baz"})
    assert err.value == ApiError(Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")


def test_excessive_number_of_topics_cannot_be_created_with_assignments():
    # ReplicationControlManagerTest.testExcessiveNumberOfTopicsCannotBeCreatedWithAssignments
    T = create_topics_request().__class__
    baz = creatable_topic("baz", 0, 0)
    baz.assignments = [T.CreatableReplicaAssignment(partition_index=1), T.CreatableReplicaAssignment(partition_index=2)]
    topics = [creatable_topic("foo", -1, 1), baz]
    with pytest.raises(ApiError) as err:
        validate_total_number_of_partitions(topics, 9999)
    assert err.value == ApiError(Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")
    validate_total_number_of_partitions(topics, 9998)  # exactly 10,000 is allowed


def test_overly_large_create_topics():
    # QuorumControllerTest / CreateTopicsTest.testOverlyLargeCreateTopics (Kafka 4.x): 10,001
    # topics of 100,000 partitions each fail as a whole, before any placement.
    ctx = ReplicationControlTestContext()
    request = create_topics_request(*(creatable_topic(f"foo{i}", 100000, 1) for i in range(10001)))
    with pytest.raises(ApiError) as err:
        ctx.replication_control.create_topics(request)
    assert err.value == ApiError(Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")


def test_more_records_than_one_operation_may_write():
    # QuorumController.MAX_RECORDS_PER_USER_OP (Kafka's BoundedList in createTopics, answered
    # by the controller's event handler): 5,001 one-partition topics stay under the partition
    # cap but need 10,002 records, so the whole request fails, even validate-only (Kafka builds
    # the records before it drops them).
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    topics = [creatable_topic(f"t{i}", 1, 1) for i in range(5001)]
    for validate_only in (False, True):
        with pytest.raises(ApiError) as err:
            ctx.replication_control.create_topics(create_topics_request(*topics, validate_only=validate_only))
        assert err.value == ApiError(Errors.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")
    # 5,000 topics: exactly 10,000 records
    result = ctx.replication_control.create_topics(create_topics_request(*topics[:5000]))
    assert len(result.records) == MAX_RECORDS_PER_USER_OP == 2 * 5000
    assert MAX_PARTITIONS_PER_BATCH == 10_000


def test_duplicate_names_in_one_request():
    # Kafka's ControllerApis.createTopics answers a repeated name with INVALID_REQUEST before
    # the controller sees it; the manager does the same so no caller gets two TopicRecords.
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    result = ctx.replication_control.create_topics(create_topics_request(
        creatable_topic("foo", 1, 1), creatable_topic("bar", 1, 1), creatable_topic("foo", 2, 1)))
    assert [result_tuple(t) for t in result.response.topics if t.name == "foo"] == [
        error_result("foo", Errors.INVALID_REQUEST, "Duplicate topic name.")] * 2
    assert [r.message.name for r in result.records if isinstance(r.message, m.TopicRecord)] == ["bar"]


def test_topics_the_caller_may_not_describe():
    # createTopic: without describe permission the result hides the configs, counts and RF
    # (TOPIC_AUTHORIZATION_FAILED as topic_config_error_code) but the topic is created.
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    result = ctx.replication_control.create_topics(create_topics_request(
        creatable_topic("seen", 2, 2), creatable_topic("hidden", 2, 2)), {"seen"})
    seen, hidden = (find_result(result.response, n) for n in ("seen", "hidden"))
    assert (seen.error_code, seen.topic_config_error_code, seen.num_partitions, seen.replication_factor) == (
        0, 0, 2, 2)
    assert (hidden.error_code, hidden.topic_config_error_code, hidden.num_partitions, hidden.replication_factor,
            hidden.configs) == (0, int(Errors.TOPIC_AUTHORIZATION_FAILED), -1, -1, [])
    assert hidden.topic_id != ZERO_UUID
    assert len(result.records) == 6


def test_records_below_directory_assignment_are_v0_and_migrating():
    # KRaftClusterDescriber.defaultDir before 3.7-IV2: MIGRATING, and PartitionRecord v0
    ctx = ReplicationControlTestContext(MV.IBP_3_6_IV2)
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    result = ctx.replication_control.create_topics(create_topics_request(creatable_topic("foo", 2, 2)))
    versions = [(type(r.message).__name__, r.version) for r in result.records]
    assert versions == [("TopicRecord", 0), ("PartitionRecord", 0), ("PartitionRecord", 0)]
    assert all(r.message.directories == [] for r in result.records[1:])
    for r in result.records:
        r.encode()  # writable at its version


@pytest.mark.parametrize("mv, version", [(MV.IBP_3_6_IV2, 0), (MV.IBP_3_7_IV2, 1), (MV.IBP_3_9_IV0, 1),
                                         (MV.IBP_4_0_IV1, 2), (MV.latest_testing(), None)])
def test_partition_records_equal_to_registration_to_record(mv, version):
    # the records are built straight from the placement; PartitionRegistration.to_record (the
    # image writer's form) is the reference at every record version
    ctx = ReplicationControlTestContext(mv)
    ctx.register_brokers_with_dirs({0: [], 1: [broker_dir(1)], 2: [broker_dir(2), Uuid.random()], 3: [broker_dir(3)]})
    ctx.unfence_brokers(0, 1, 2)
    ctx.in_controlled_shutdown_brokers(1)
    result = ctx.replication_control.create_topics(create_topics_request(
        creatable_topic("foo", 20, 3), creatable_topic("bar", assignments=[[3, 2], [1, 0]])))
    assert all(t.error_code == 0 for t in result.response.topics), result.response
    ctx.replay(result.records)
    for r in result.records[1:]:
        if isinstance(r.message, m.TopicRecord):
            continue
        reg = ctx.partition(r.message.topic_id, r.message.partition_id)
        expected = reg.to_record(r.message.topic_id, r.message.partition_id, mv)
        assert (r.message, r.version) == (expected.message, expected.version)
        assert version is None or r.version == version
        assert reg.isr == tuple(b for b in reg.replicas if b in (0, 2)) and reg.leader == reg.isr[0]


# ---------------------------------------------------------------------------
# Lookups and DeleteTopics
# ---------------------------------------------------------------------------

def test_delete_topics():
    # ReplicationControlManagerTest.testDeleteTopics
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"}
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    create = rc.create_topics(create_topics_request(creatable_topic("foo", 3, 2, configs=configs)), {"foo"})
    topic_id = find_result(create.response, "foo").topic_id
    assert [result_tuple(t) for t in create.response.topics] == [ok_result("foo", topic_id, 3, 2)]
    # nothing changes until the records are replayed
    assert rc.partition(topic_id, 0) is None
    assert ctx.configuration_control.configs(ConfigResource.topic("foo")) == {}
    ctx.replay(create.records)
    assert [rc.partition(topic_id, p) is not None for p in range(4)] == [True, True, True, False]
    assert ctx.configuration_control.configs(ConfigResource.topic("foo")) == configs

    latest = 2**63 - 1
    assert rc.find_topic_names(latest, [topic_id]) == {topic_id: "foo"}
    assert rc.find_topic_ids(latest, ["foo"]) == {"foo": topic_id}
    invalid_id = Uuid(((topic_id.most_significant_bits + 1) % 2**64).to_bytes(8, "big")
                      + topic_id.bytes[8:])
    assert rc.find_topic_names(latest, [invalid_id]) == {
        invalid_id: ApiError(Errors.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")}
    assert rc.find_topic_ids(latest, ["bar"]) == {
        "bar": ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")}

    invalid_delete = rc.delete_topics([invalid_id])
    assert invalid_delete.records == []
    assert invalid_delete.response == {invalid_id: ApiError(Errors.UNKNOWN_TOPIC_ID, None)}
    delete = rc.delete_topics([topic_id])
    assert delete.atomic
    assert delete.response == {topic_id: ApiError(Errors.NONE, None)}
    assert [(r.message, r.version) for r in delete.records] == [(m.RemoveTopicRecord(topic_id=topic_id), 0)]
    ctx.replay(delete.records)
    assert [rc.partition(topic_id, p) for p in range(4)] == [None] * 4
    assert rc.find_topic_names(latest, [topic_id]) == {
        topic_id: ApiError(Errors.UNKNOWN_TOPIC_ID, "This server does not host this topic ID.")}
    assert rc.find_topic_ids(latest, ["foo"]) == {
        "foo": ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.")}
    assert ctx.configuration_control.configs(ConfigResource.topic("foo")) == {}


def test_delete_several_topics_at_once():
    # deleteTopics: one RemoveTopicRecord per existing topic (a repeated id once), unknown ids
    # answered per id, all in one atomic result
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    a = ctx.create_test_topic_placed("a", 2, 1).topic_id
    b = ctx.create_test_topic_placed("b", 1, 1).topic_id
    unknown = Uuid.random()
    result = ctx.replication_control.delete_topics([a, unknown, b, a])
    assert result.atomic
    assert result.response == {a: ApiError(Errors.NONE, None), unknown: ApiError(Errors.UNKNOWN_TOPIC_ID, None),
                               b: ApiError(Errors.NONE, None)}
    assert [r.message for r in result.records] == [m.RemoveTopicRecord(topic_id=a), m.RemoveTopicRecord(topic_id=b)]
    ctx.replay(result.records)
    assert ctx.replication_control.find_all_topic_ids() == {}


def test_find_topic_ids_and_names_at_an_epoch():
    # findTopicIds / findTopicNames / findAllTopicIds read a registry epoch (the committed
    # offset); a null name or a null / zero id is INVALID_REQUEST with Kafka's messages
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    foo = ctx.create_test_topic_placed("foo", 1, 1).topic_id
    epoch = ctx.next_offset - 1
    ctx.registry.get_or_create_snapshot(epoch)
    bar = ctx.create_test_topic_placed("bar", 1, 1).topic_id
    assert rc.find_all_topic_ids(epoch) == {"foo": foo}
    assert rc.find_all_topic_ids() == {"foo": foo, "bar": bar}
    assert rc.find_topic_ids(epoch, ["foo", "bar", None]) == {
        "foo": foo,
        "bar": ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition."),
        None: ApiError(Errors.INVALID_REQUEST, "Invalid null topic name.")}
    assert rc.find_topic_names(epoch, [foo, bar, None, ZERO_UUID]) == {
        foo: "foo", bar: ApiError(Errors.UNKNOWN_TOPIC_ID, "This server does not host this topic ID."),
        None: ApiError(Errors.INVALID_REQUEST, "Attempt to find topic with invalid topicId null"),
        ZERO_UUID: ApiError(Errors.INVALID_REQUEST,
                            "Attempt to find topic with invalid topicId AAAAAAAAAAAAAAAAAAAAAA")}


def test_random_topic_ids_skip_reserved_dashed_and_taken(monkeypatch):
    # Kafka's Uuid.randomUuid never returns ZERO/ONE or an id printed with a leading '-';
    # kraft also skips an id already in use
    dashed = Uuid.from_string("-" + "A" * 20 + "A")
    taken, fresh = Uuid.random(), Uuid.random()
    while str(taken).startswith("-") or str(fresh).startswith("-"):
        taken, fresh = Uuid.random(), Uuid.random()
    draws = iter([dashed, taken, fresh])
    monkeypatch.setattr(Uuid, "random", classmethod(lambda cls: next(draws)))
    assert random_topic_id(lambda u: u == taken) == fresh
    monkeypatch.undo()
    for _ in range(2000):
        u = random_topic_id()
        assert u not in (ZERO_UUID, ONE_UUID) and not str(u).startswith("-")


# ---------------------------------------------------------------------------
# CreatePartitions
# ---------------------------------------------------------------------------

def test_create_partitions():
    # ReplicationControlManagerTest.testCreatePartitions
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    d1a, d1b = Uuid.from_string("QMzamNQVQ7GnJK9DwQHG7Q"), Uuid.from_string("loDxEBLETdedNnQGOKKENw")
    d3 = Uuid.from_string("dxCDSgNjQvS4WuyqEKoCwA")
    ctx.register_brokers_with_dirs({0: [], 1: [d1a, d1b], 3: [d3]})
    ctx.unfence_brokers(0, 1, 3)
    create = rc.create_topics(create_topics_request(
        creatable_topic("foo", 3, 2), creatable_topic("bar", 4, 2), creatable_topic("quux", 2, 2),
        creatable_topic("foo2", 2, 2)), {"foo", "bar", "quux", "foo2"})
    ctx.replay(create.records)

    result = rc.create_partitions([create_partitions_topic("foo", 5), create_partitions_topic("bar", 3),
                                   create_partitions_topic("baz", 3), create_partitions_topic("quux", 2)])
    assert [(r.name, r.error_code, r.error_message) for r in result.response] == [
        ("foo", 0, None),
        ("bar", int(Errors.INVALID_PARTITIONS),
         "The topic bar currently has 4 partition(s); 3 would not be an increase."),
        ("baz", int(Errors.UNKNOWN_TOPIC_OR_PARTITION), None),
        ("quux", int(Errors.INVALID_PARTITIONS), "Topic already has 2 partition(s)."),
    ]
    assert result.atomic and len(result.records) == 2
    ctx.replay(result.records)

    result2 = rc.create_partitions([create_partitions_topic("foo", 6, [[1, 3]]),
                                    create_partitions_topic("bar", 5, [[1]]),
                                    create_partitions_topic("quux", 4, [[1, 0]]),
                                    create_partitions_topic("foo2", 3, [[2, 0]])])
    assert [(r.name, r.error_code, r.error_message) for r in result2.response] == [
        ("foo", 0, None),
        ("bar", int(Errors.INVALID_REPLICA_ASSIGNMENT), "The manual partition assignment includes a partition "
         "with 1 replica(s), but this is not consistent with previous partitions, which have 2 replica(s)."),
        ("quux", int(Errors.INVALID_REPLICA_ASSIGNMENT),
         "Attempted to add 2 additional partition(s), but only 1 assignment(s) were specified."),
        ("foo2", int(Errors.INVALID_REPLICA_ASSIGNMENT),
         "The manual partition assignment includes broker 2, but no such broker is registered."),
    ]
    ctx.replay(result2.records)
    foo = rc.topic_id("foo")
    assert ctx.partition(foo, 5).directories == (DirectoryId.UNASSIGNED, d3)
    assert rc.topic(foo).num_partitions() == 6


def test_create_partitions_fails_when_all_brokers_are_fenced_or_in_controlled_shutdown():
    # ReplicationControlManagerTest.testCreatePartitionsFailsWhenAllBrokersAreFencedOrInControlledShutdown
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    ctx.replay(rc.create_topics(create_topics_request(creatable_topic("foo", 1, 2)), {"foo"}).records)
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0)
    ctx.in_controlled_shutdown_brokers(0)
    result = rc.create_partitions([create_partitions_topic("foo", 2)])
    assert [(r.name, r.error_code, r.error_message) for r in result.response] == [
        ("foo", int(Errors.INVALID_REPLICATION_FACTOR),
         "Unable to replicate the partition 2 time(s): All brokers are currently fenced or in controlled shutdown.")]
    assert result.records == []


def test_create_partitions_isr_invariants():
    # ReplicationControlManagerTest.testCreatePartitionsISRInvariants
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1)
    ctx.in_controlled_shutdown_brokers(1)
    create = rc.create_topics(create_topics_request(creatable_topic("foo", 1, 3)), {"foo"})
    ctx.replay(create.records)
    grow = rc.create_partitions([create_partitions_topic("foo", 2)])
    ctx.replay(grow.records)
    assert ctx.partition(topic_id_of(create), 1) == registration([0, 1, 2], [0], 0)


def test_create_partitions_fails_with_manual_assignment_with_all_fenced():
    # ReplicationControlManagerTest.testCreatePartitionsFailsWithManualAssignmentWithAllFenced
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1, 2, 3, 4, 5)
    ctx.unfence_brokers(0, 1, 2)
    foo_id = ctx.create_test_topic("foo", [[0, 1, 2]]).topic_id
    ctx.create_partitions(2, "foo", [[3, 4, 5]], Errors.INVALID_REPLICA_ASSIGNMENT)
    ctx.create_partitions(2, "foo", [[2, 4, 5]], Errors.NONE)
    assert ctx.partition(foo_id, 1) == registration([2, 4, 5], [2], 2)


def test_create_partitions_placement_errors_are_the_placers():
    # createPartitions passes the placer's InvalidReplicationFactorException on unprefixed
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    ctx.create_test_topic_placed("foo", 1, 2)
    ctx.fence_brokers(0, 1)
    result = ctx.replication_control.create_partitions([create_partitions_topic("foo", 3)])
    assert [(r.error_code, r.error_message) for r in result.response] == [
        (int(Errors.INVALID_REPLICATION_FACTOR), "All brokers are currently fenced.")]


def test_create_partitions_validate_only():
    # QuorumController.createPartitions(validateOnly): the same answers, no records
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    ctx.create_test_topic_placed("foo", 1, 2)
    result = ctx.replication_control.create_partitions([create_partitions_topic("foo", 3)], validate_only=True)
    assert [(r.name, r.error_code) for r in result.response] == [("foo", 0)]
    assert result.records == []


def test_validate_good_manual_partition_assignments():
    # ReplicationControlManagerTest.testValidateGoodManualPartitionAssignments
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(1, 2, 3)
    validate = ctx.replication_control.validate_manual_partition_assignment
    validate([1], 1)
    validate([1], None)
    validate([1, 2, 3], 3)
    validate([1, 2, 3], None)


def test_validate_bad_manual_partition_assignments():
    # ReplicationControlManagerTest.testValidateBadManualPartitionAssignments
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(1, 2)
    validate = ctx.replication_control.validate_manual_partition_assignment
    cases = [
        ([], None, "The manual partition assignment includes an empty replica list."),
        ([1, 2, 3], None, "The manual partition assignment includes broker 3, but no such broker is registered."),
        ([1, 2, 2], None, "The manual partition assignment includes the broker 2 more than once."),
        ([1, 2], 3, "The manual partition assignment includes a partition with 2 replica(s), but this is not "
         "consistent with previous partitions, which have 3 replica(s)."),
    ]
    for replicas, rf, message in cases:
        with pytest.raises(ApiError) as err:
            validate(replicas, rf)
        assert err.value == ApiError(Errors.INVALID_REPLICA_ASSIGNMENT, message)


def test_kraft_cluster_describer():
    # ReplicationControlManagerTest.testKRaftClusterDescriber
    ctx = ReplicationControlTestContext()
    rc = ctx.replication_control
    d2 = Uuid.from_string("ozwqsVMFSNiYQUPSJA3j0w")
    ctx.register_brokers_with_dirs({0: [], 1: [], 2: [d2], 3: [Uuid.from_string("SSDgCZ4BTyec5QojGT65qg"),
                                                              Uuid.from_string("K8KwMrviRcOUvgI8FPOJWg")], 4: []})
    ctx.unfence_brokers(2, 3, 4)
    ctx.create_test_topic("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]])
    ctx.create_test_topic("bar", [[2, 3, 4], [3, 4, 2]])
    describer = rc.cluster_describer
    assert {(b.id, b.rack, b.fenced) for b in describer.usable_brokers()} == {
        (0, None, True), (1, None, True), (2, None, False), (3, None, False), (4, None, False)}
    assert describer.default_dir(1) == DirectoryId.MIGRATING
    assert describer.default_dir(2) == d2
    assert describer.default_dir(3) == DirectoryId.UNASSIGNED


def test_write_side_needs_cluster_and_feature_control():
    # today's replay-only construction keeps working; a write names what is missing
    ctl = Controller()
    with pytest.raises(RuntimeError, match="without cluster_control and feature_control"):
        ctl.replication.create_topics(create_topics_request(creatable_topic("foo", 1, 1)))
    assert ctl.replication.delete_topics([Uuid.random()]).records == []


# ---------------------------------------------------------------------------
# Replay of what creation writes
# ---------------------------------------------------------------------------

def _mixed_creation(ctx: ReplicationControlTestContext) -> list[Any]:
    """A cluster with fenced and shutting-down brokers, several dirs, and a creation request
    mixing placed and manual topics and errors.  ``a.b`` and ``a_b`` collide but are created
    together: Kafka checks collisions against existing topics only."""
    d = [Uuid.random() for _ in range(3)]
    ctx.register_brokers_with_dirs({0: [broker_dir(0)], 1: [d[0], d[1]], 2: [], 3: [d[2]], 4: [broker_dir(4)]})
    ctx.unfence_brokers(0, 1, 2, 3)
    ctx.in_controlled_shutdown_brokers(3)
    result = ctx.replication_control.create_topics(create_topics_request(
        creatable_topic("a.b", 7, 3), creatable_topic("a_b", 1, 1), creatable_topic("c", assignments=[[4, 0], [3, 1]]),
        creatable_topic("d", 30, 2), creatable_topic("e", 2, 9)))
    errors = {t.name: t.error_code for t in result.response.topics}
    assert errors == {"a.b": 0, "a_b": 0, "c": 0, "d": 0,
                      "e": int(Errors.INVALID_REPLICATION_FACTOR)}
    return result.records


def test_replaying_creation_keeps_replay_invariants():
    # Everything create_topics / create_partitions / delete_topics wrote, replayed one record at
    # a time by a replay-only controller, leaves the indexes exactly what the partitions imply,
    # and equals the test context's state; a revert to before the creation undoes it.
    ctx = ReplicationControlTestContext()
    written = _mixed_creation(ctx)
    ctx.registry.get_or_create_snapshot(ctx.next_offset - 1)
    before = ctx.next_offset - 1
    ctx.replay(written)
    grow = ctx.replication_control.create_partitions([create_partitions_topic("d", 40),
                                                      create_partitions_topic("c", 3, [[0, 4]])])
    assert [r.error_code for r in grow.response] == [0, 0]
    ctx.replay(grow.records)
    written += grow.records
    delete = ctx.replication_control.delete_topics([ctx.replication_control.topic_id("a.b")])
    ctx.replay(delete.records)
    written += delete.records

    other = Controller()
    for offset, r in enumerate(written):
        other.replay(r.message, offset)
    check_invariants(other)
    mine = Controller()
    mine.replication = ctx.replication_control
    mine.configs = ctx.configuration_control
    state = other.state()
    assert {k: v for k, v in state.items() if k in ("topics", "partitions", "isr_index", "elr_index", "imbalanced",
                                                   "reassigning", "directories", "collisions")} == {
        "topics": ctx.replication_control.topics(),
        "partitions": {(t, p): reg for t in ctx.replication_control.topics().values()
                       for p, reg in ctx.replication_control.partitions(t).items()},
        "isr_index": ctx.replication_control.brokers_to_isrs.to_dict(),
        "elr_index": ctx.replication_control.brokers_to_elrs.to_dict(),
        "imbalanced": ctx.replication_control.imbalanced(),
        "reassigning": {t: sorted(ps) for t, ps in ctx.replication_control.reassigning().items()},
        "directories": {d: s.to_set() for d, s in ctx.replication_control.directories_to_partitions.items()},
        "collisions": {n: s.to_set() for n, s in ctx.replication_control.topics_with_collision_chars.items()},
    }
    ctx.registry.revert_to_snapshot(before)
    assert ctx.replication_control.topics() == {}
    assert ctx.replication_control.brokers_to_isrs.to_dict() == {}


_BROKERS = st.integers(min_value=0, max_value=5)
_DIRS = st.sampled_from([DirectoryId.MIGRATING, DirectoryId.UNASSIGNED, DirectoryId.LOST,
                         Uuid.from_string("QMzamNQVQ7GnJK9DwQHG7Q"), Uuid.from_string("loDxEBLETdedNnQGOKKENw"),
                         Uuid.from_string("dxCDSgNjQvS4WuyqEKoCwA")])


@st.composite
def partition_records(draw: Any, topic_ids: list[Uuid]) -> Any:
    replicas = draw(st.lists(_BROKERS, min_size=0, max_size=4, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), unique=True)) if replicas else []
    leader = draw(st.sampled_from(isr + [-1])) if isr else -1
    rest = [b for b in range(6) if b not in isr]
    elr = draw(st.lists(st.sampled_from(rest), unique=True, max_size=2)) if draw(st.booleans()) else None
    dirs = draw(st.lists(_DIRS, min_size=len(replicas), max_size=len(replicas))) if draw(st.booleans()) else []
    adding = draw(st.lists(st.sampled_from(replicas), unique=True, max_size=1)) if replicas else []
    return m.PartitionRecord(
        topic_id=draw(st.sampled_from(topic_ids)), partition_id=draw(st.integers(min_value=0, max_value=6)),
        replicas=replicas, isr=isr, leader=leader, removing_replicas=[], adding_replicas=adding,
        leader_recovery_state=0, leader_epoch=draw(st.integers(0, 2)), partition_epoch=0, directories=dirs,
        eligible_leader_replicas=elr)


_TOPIC_IDS = [Uuid.from_string("Ktv3YkMQRe-MId4VkkrMyw"), Uuid.from_string("8auUWq8zQqe_99H_m2LAmw")]


@settings(max_examples=150, deadline=None)
@given(st.lists(partition_records(_TOPIC_IDS), max_size=25))
def test_bulk_replay_equals_one_by_one(records):
    # replay_partitions (new partitions indexed per broker / directory at once) leaves exactly
    # the state replaying each record does, whatever mix of new, repeated and existing partitions
    one, bulk = Controller(), Controller()
    for ctl in (one, bulk):
        for i, t in enumerate(_TOPIC_IDS):
            ctl.replay(m.TopicRecord(name=f"t{i}", topic_id=t), i)
    for offset, r in enumerate(records, 2):
        one.replay(r, offset)
    bulk.replication.replay_partitions(records)
    assert bulk.state() == one.state()
    check_invariants(bulk)


def test_bulk_replay_refuses_what_one_by_one_refuses():
    ctl = Controller()
    topic = Uuid.random()
    ctl.replay(m.TopicRecord(name="foo", topic_id=topic), 0)
    good = m.PartitionRecord(topic_id=topic, partition_id=0, replicas=[1], isr=[1], leader=1,
                             leader_recovery_state=0, leader_epoch=0, partition_epoch=0)
    bad = m.PartitionRecord(topic_id=topic, partition_id=1, replicas=[1, 2], isr=[1], leader=1,
                            leader_recovery_state=0, leader_epoch=0, partition_epoch=0, directories=[Uuid.random()])
    with pytest.raises(ReplayError, match="The lengths for replicas and directories do not match") as err:
        ctl.replication.replay_partitions([good, bad])
    assert err.value.index == 1  # the caller can name the failing record's offset
    assert set(ctl.replication.partitions(topic)) == {0}  # what came before the bad record stays
    with pytest.raises(ReplayError, match="but no topic with that ID was found") as err:
        ctl.replication.replay_partitions([good, m.PartitionRecord(topic_id=Uuid.random(), partition_id=0)])
    assert err.value.index == 1
    with pytest.raises(ReplayError, match="takes PartitionRecords") as err:
        ctl.replication.replay_partitions([m.TopicRecord(name="x", topic_id=Uuid.random())])
    assert err.value.index == 0


def test_partition_record_slots_are_the_ones_creation_sets():
    # new_partition_records sets every slot of PartitionRecord itself (object.__new__, as the
    # generated decoders do): a field added by codegen must be added there too
    import importlib

    from kraft_node.metadata.controller.topic_creation import PARTITION_RECORD_SLOTS
    for impl in ("_pure", "_native"):
        try:
            module = importlib.import_module(f"kraft_storage.{impl}._messages_metadata")
        except ImportError:
            assert impl == "_native"  # a tree without the extensions built
            continue
        assert module.PartitionRecord.__slots__ == PARTITION_RECORD_SLOTS


class _View:
    """What new_partition_records reads of a write's view: the record version, default dirs."""

    def __init__(self, version: int, dirs: dict[int, Uuid]) -> None:
        self.record_version = version
        self._dirs = dirs

    def default_dir(self, broker_id: int) -> Uuid:
        return self._dirs.get(broker_id, ZERO_UUID)  # MIGRATING unless given


@settings(max_examples=150, deadline=None)
@given(version=st.sampled_from([0, 1, 2]), start=st.integers(0, 5),
       rows=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=4, unique=True), min_size=0, max_size=30),
       with_dirs=st.booleans(), wide=st.booleans(), data=st.data())
def test_created_partitions_encoded_in_bulk_equal_the_record_objects(version, start, rows, with_dirs, wide, data):
    """new_partition_records writes the values from columns (FramedRecord): byte for byte what
    encoding each record object gives, equal as records, for every PartitionRecord version; a row
    the kernel does not write (127 or more replicas) is a record object in its place."""
    from kraft_node.metadata.controller.result import FramedRecord
    from kraft_node.metadata.controller.topic_creation import _partition_record_objects, new_partition_records
    if wide and rows:
        rows[data.draw(st.integers(0, len(rows) - 1))] = list(range(100, 230))  # 130 replicas
    isrs = [[b for b in row if data.draw(st.booleans())] or row[:1] for row in rows]
    dirs = {b: Uuid.random() for b in range(0, 230)} if with_dirs and version >= 1 else {}
    view = _View(version, dirs)
    topic_id = Uuid.random()
    framed = new_partition_records(topic_id, start, rows, isrs, view)
    objects = _partition_record_objects(topic_id, start, rows, isrs, view)
    assert len(framed) == len(objects) == len(rows)
    for i, (f, o) in enumerate(zip(framed, objects)):
        assert f.encode() == o.encode(), i
        assert f == o and f.version == o.version == version
        assert isinstance(f, FramedRecord) == (len(rows[i]) < 127)
        if isinstance(f, FramedRecord):
            assert f.api_key == m.PartitionRecord.API_KEY and f.message == o.message


def test_created_topic_answers_its_effective_configs():
    # createTopic with describe permission: every topic config's effective value, sorted by
    # name (ConfigurationControlManager.computeEffectiveTopicConfigs); topics of one request
    # with the same configs get equal answers
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    result = ctx.replication_control.create_topics(create_topics_request(
        creatable_topic("a", 1, 1, configs={"cleanup.policy": "compact"}),
        creatable_topic("b", 1, 1, configs={"cleanup.policy": "compact"}), creatable_topic("c", 1, 1)))
    a, b, c = (find_result(result.response, n) for n in "abc")
    names = [e.name for e in a.configs]
    assert names == sorted(names) and "cleanup.policy" in names and "min.insync.replicas" in names
    expected = ctx.configuration_control.compute_effective_topic_configs({"cleanup.policy": "compact"})
    assert [(e.name, e.value, e.read_only, e.config_source, e.is_sensitive) for e in a.configs] == [
        (n, expected[n].describe_value, expected[n].is_read_only, int(expected[n].source), expected[n].is_sensitive)
        for n in sorted(expected)]
    policy = {e.name: e for e in a.configs}["cleanup.policy"]
    assert (policy.value, policy.config_source) == ("compact", 1)  # DYNAMIC_TOPIC_CONFIG
    assert a.configs == b.configs
    assert {e.name: e.value for e in c.configs}["cleanup.policy"] == "delete"


_BROKER_STATES = st.lists(st.sampled_from(["fenced", "unfenced", "shutting-down"]), min_size=1, max_size=7)
_TOPICS = st.lists(st.tuples(st.integers(-1, 12), st.integers(-1, 4)), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(_BROKER_STATES, _TOPICS)
def test_creation_on_any_cluster(states, topics):
    # Whatever the brokers' states: a created partition has RF distinct registered replicas,
    # its ISR is exactly its active replicas (unfenced, not in controlled shutdown) in replica
    # order, its leader the first of them; a refused topic says why with Kafka's prefix and
    # writes nothing; with every broker active and RF <= brokers, nothing is refused.
    ctx = ReplicationControlTestContext(default_num_partitions=2, default_replication_factor=2)
    ids = list(range(len(states)))
    ctx.register_brokers(*ids)
    ctx.unfence_brokers(*[b for b, s in zip(ids, states) if s != "fenced"])
    ctx.in_controlled_shutdown_brokers(*[b for b, s in zip(ids, states) if s == "shutting-down"])
    active = {b for b, s in zip(ids, states) if s == "unfenced"}
    request = create_topics_request(*(creatable_topic(f"t{i}", n, rf) for i, (n, rf) in enumerate(topics)))
    result = ctx.replication_control.create_topics(request)
    ctx.replay(result.records)
    for i, (n, rf) in enumerate(topics):
        answer = find_result(result.response, f"t{i}")
        n = 2 if n == -1 else n
        rf = 2 if rf == -1 else rf
        if n == 0 or rf == 0:
            assert answer.error_code in (int(Errors.INVALID_PARTITIONS), int(Errors.INVALID_REPLICATION_FACTOR))
            continue
        if answer.error_code:
            assert answer.error_code == int(Errors.INVALID_REPLICATION_FACTOR)
            assert answer.error_message.startswith(f"Unable to replicate the partition {rf} time(s): ")
            assert not (len(active) == len(ids) and rf <= len(ids))
            assert ctx.replication_control.topic_id(f"t{i}") is None
            continue
        parts = ctx.replication_control.partitions(answer.topic_id)
        assert sorted(parts) == list(range(n)) and (answer.num_partitions, answer.replication_factor) == (n, rf)
        for reg in parts.values():
            assert len(reg.replicas) == len(set(reg.replicas)) == rf and set(reg.replicas) <= set(ids)
            assert reg.isr == tuple(b for b in reg.replicas if b in active) and reg.leader == reg.isr[0]
            assert (reg.leader_epoch, reg.partition_epoch, reg.elr, reg.adding_replicas) == (0, 0, (), ())
    other = Controller()
    for offset, r in enumerate(result.records):
        other.replay(r.message, offset)
    check_invariants(other)
