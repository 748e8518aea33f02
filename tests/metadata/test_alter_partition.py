"""AlterPartition in the controller (alter_partition.py), re-stating Kafka's
ReplicationControlManagerTest AlterPartition scenarios (item 9 of the reference's 1.2, and the
ELR ones of item 10 that go through AlterPartition) with their exact inputs and codes, on
Kafka's ReplicationControlTestContext (tests/support/replication.py): brokers registered at
epoch 100 + id, records applied only by replaying them.

Versions: Kafka 4.x's AlterPartition has versions 2-3 only (KIP-896 removed 0-1), so where a
Kafka test is parameterised over every version these run v2 and v3, and v0/v1 are refused
with UNSUPPORTED_VERSION."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.replication import ReplicationControlTestContext, default_broker_epoch

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.partition_changes import PartitionChangeOps
from kraft_node.metadata.controller.replication_control import (
    LeaderRecoveryState,
    PartitionRegistration,
    TopicIdPartition,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

Req = AlterPartitionRequest
Resp = AlterPartitionResponse
RECOVERED, RECOVERING = LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING
VERSIONS = (2, 3)


def make(mv: MetadataVersion | None = None, elr: bool | None = None) -> tuple[ReplicationControlTestContext,
                                                                             PartitionChangeOps]:
    ctx = ReplicationControlTestContext(mv, eligible_leader_replicas_enabled=elr)
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    return ctx, ops


def isr_with_default_epoch(*broker_ids: int) -> list[Any]:
    """Kafka's ``isrWithDefaultEpoch``."""
    return [Req.BrokerState(broker_id=b, broker_epoch=default_broker_epoch(b)) for b in broker_ids]


def partition_data(part: PartitionRegistration, index: int, isr: list[Any], recovery: LeaderRecoveryState = RECOVERED,
                   version: int = 3, **overrides: int) -> Any:
    """Kafka's ``newAlterPartition``: the partition's current epochs and the new ISR (v3 with
    epochs, v2 as bare ids)."""
    fields: dict[str, Any] = dict(partition_index=index, leader_epoch=part.leader_epoch,
                                  partition_epoch=part.partition_epoch, leader_recovery_state=int(recovery))
    if version >= 3:
        fields["new_isr_with_epochs"] = isr
    else:
        fields["new_isr"] = [s.broker_id for s in isr]
    fields.update(overrides)
    return Req.PartitionData(**fields)


def request(broker_id: int, broker_epoch: int, topic_id: Uuid, *partitions: Any) -> Any:
    return Req(broker_id=broker_id, broker_epoch=broker_epoch,
               topics=[Req.TopicData(topic_id=topic_id, partitions=list(partitions))])


def send(ctx: ReplicationControlTestContext, ops: PartitionChangeOps, broker_id: int, broker_epoch: int,
         topic_id: Uuid, data: Any, version: int = 3) -> Any:
    """Kafka's ``sendAlterPartition``: answer, then replay the records."""
    result = ops.alter_partition(request(broker_id, broker_epoch, topic_id, data), version)
    ctx.replay(result.records)
    return result


def only_partition(result: Any, topic_id: Uuid, index: int, expected: Errors) -> Any:
    """Kafka's ``assertAlterPartitionResponse``."""
    assert len(result.response.topics) == 1
    topic = result.response.topics[0]
    assert topic.topic_id == topic_id and len(topic.partitions) == 1
    p = topic.partitions[0]
    assert p.partition_index == index and Errors(p.error_code) == expected, p
    return p


def assert_consistent(ctx: ReplicationControlTestContext, tp: TopicIdPartition, p: Any) -> None:
    """Kafka's ``assertConsistentAlterPartitionResponse``: the answer is the replayed state."""
    part = ctx.partition(tp.topic_id, tp.partition_id)
    assert part is not None
    assert (p.leader_id, p.leader_epoch, p.partition_epoch, list(p.isr), p.leader_recovery_state) == (
        part.leader, part.leader_epoch, part.partition_epoch, list(part.isr), int(part.leader_recovery_state))


def three_broker_foo(elr: bool | None = None) -> tuple[ReplicationControlTestContext, PartitionChangeOps,
                                                      TopicIdPartition]:
    ctx, ops = make(elr=elr)
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    topic_id = ctx.create_test_topic("foo", [[0, 1, 2]]).topic_id
    return ctx, ops, TopicIdPartition(topic_id, 0)


# ---------------------------------------------------------------------------------------------

def test_shrink_and_expand_isr():
    """ReplicationControlManagerTest.testShrinkAndExpandIsr."""
    ctx, ops, tp = three_broker_foo()
    part = ctx.partition(*tp)
    assert part.leader == 0
    epoch = ctx.current_broker_epoch(0)
    shrink = send(ctx, ops, 0, epoch, tp.topic_id, partition_data(part, 0, isr_with_default_epoch(0, 1)))
    assert_consistent(ctx, tp, only_partition(shrink, tp.topic_id, 0, Errors.NONE))
    assert ctx.partition(*tp).isr == (0, 1) and ctx.partition(*tp).partition_epoch == 1
    expand = send(ctx, ops, 0, epoch, tp.topic_id,
                  partition_data(ctx.partition(*tp), 0, isr_with_default_epoch(0, 1, 2)))
    assert_consistent(ctx, tp, only_partition(expand, tp.topic_id, 0, Errors.NONE))
    assert ctx.partition(*tp).isr == (0, 1, 2) and ctx.partition(*tp).leader_epoch == 0


def test_invalid_alter_partition_requests():
    """ReplicationControlManagerTest.testInvalidAlterPartitionRequests, plus the two epoch
    checks its code has and the test does not reach (leader epoch behind: FENCED_LEADER_EPOCH;
    partition epoch behind: INVALID_UPDATE_VERSION)."""
    ctx, ops, tp = three_broker_foo()
    part = ctx.partition(*tp)
    epoch = ctx.current_broker_epoch(0)

    def answer(broker: int, broker_epoch: int, data: Any) -> Errors:
        result = send(ctx, ops, broker, broker_epoch, tp.topic_id, data)
        assert result.records == []
        return Errors(only_partition(result, tp.topic_id, 0, Errors(result.response.topics[0].partitions[0]
                                                                      .error_code)).error_code)

    # the request must come from the leader
    assert answer(1, ctx.current_broker_epoch(1), partition_data(part, 0, isr_with_default_epoch(0, 1))) \
        == Errors.INVALID_REQUEST
    # a stale broker epoch refuses the whole request
    with pytest.raises(ApiError) as exc:
        ops.alter_partition(request(0, epoch - 1, tp.topic_id, partition_data(part, 0, isr_with_default_epoch(0, 1))),
                            3)
    assert exc.value == ApiError(Errors.STALE_BROKER_EPOCH, "Expected broker epoch 100, but got broker epoch 99")
    # epochs ahead of the controller's: it is probably not the active one any more
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0, 1), leader_epoch=500)) \
        == Errors.NOT_CONTROLLER
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0, 1), partition_epoch=500)) \
        == Errors.NOT_CONTROLLER
    # 3 is not a replica; the ISR must hold the leader
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0, 1, 3))) == Errors.INVALID_REQUEST
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(1, 2))) == Errors.INVALID_REQUEST
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0, 0))) == Errors.INVALID_REQUEST
    # RECOVERING with more than one ISR member; RECOVERED -> RECOVERING
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0, 1), RECOVERING)) \
        == Errors.INVALID_REQUEST
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0), RECOVERING)) == Errors.INVALID_REQUEST
    # a recovery state that is neither
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0), leader_recovery_state=5)) \
        == Errors.INVALID_REQUEST
    # epochs behind: the leader's view is stale
    send(ctx, ops, 0, epoch, tp.topic_id, partition_data(part, 0, isr_with_default_epoch(0, 1)))
    assert ctx.partition(*tp).partition_epoch == 1
    assert answer(0, epoch, partition_data(part, 0, isr_with_default_epoch(0))) == Errors.INVALID_UPDATE_VERSION
    records: list[Any] = []
    ops.handle_broker_in_controlled_shutdown(0, epoch, records)  # moves the leadership: leader epoch 1
    ctx.replay(records)
    moved = ctx.partition(*tp)
    assert moved.leader == 1 and moved.leader_epoch == 1
    assert answer(1, ctx.current_broker_epoch(1), partition_data(moved, 0, isr_with_default_epoch(1),
                                                                 leader_epoch=0)) == Errors.FENCED_LEADER_EPOCH


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_partition_handle_unknown_topic_id(version):
    """ReplicationControlManagerTest.testAlterPartitionHandleUnknownTopicIdOrName at v2/v3
    (by topic id: UNKNOWN_TOPIC_ID; the by-name versions 0-1 no longer exist)."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    topic_id = Uuid.random()
    for unknown in (topic_id, ZERO_UUID):
        result = ops.alter_partition(request(0, 100, unknown, Req.PartitionData(partition_index=0)), version)
        assert result.records == []
        assert result.response == Resp(topics=[Resp.TopicData(topic_id=unknown, partitions=[
            Resp.PartitionData(partition_index=0, error_code=Errors.UNKNOWN_TOPIC_ID)])])


def test_unknown_partition_and_unsupported_versions():
    """validateAlterPartitionData's first check (UNKNOWN_TOPIC_OR_PARTITION), and the request
    versions 4.x removed."""
    ctx, ops, tp = three_broker_foo()
    result = ops.alter_partition(request(0, 100, tp.topic_id, Req.PartitionData(partition_index=7)), 3)
    only_partition(result, tp.topic_id, 7, Errors.UNKNOWN_TOPIC_OR_PARTITION)
    for version in (0, 1, 4):
        with pytest.raises(ApiError) as exc:
            ops.alter_partition(request(0, 100, tp.topic_id), version)
        assert exc.value.error == Errors.UNSUPPORTED_VERSION
        assert exc.value.message == (f"AlterPartition version {version} is not supported: this controller answers "
                                     "versions 2 to 3.")


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_partition_should_reject_fenced_brokers(version):
    """ReplicationControlManagerTest.testAlterPartitionShouldRejectFencedBrokers."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3, 4]]).topic_id
    records: list[Any] = []
    ops.handle_broker_fenced(3, records)
    ctx.replay(records)
    part = ctx.partition(foo, 0)
    assert (part.replicas, part.isr, part.leader, part.leader_epoch, part.partition_epoch) == (
        (1, 2, 3, 4), (1, 2, 4), 1, 0, 1)
    data = Req.PartitionData(partition_index=0, partition_epoch=1, leader_epoch=0)
    if version >= 3:
        data.new_isr_with_epochs = isr_with_default_epoch(1, 2, 3, 4)
    else:
        data.new_isr = [1, 2, 3, 4]
    result = ops.alter_partition(request(1, 101, foo, data), version)
    assert result.records == []
    assert result.response == Resp(topics=[Resp.TopicData(topic_id=foo, partitions=[
        Resp.PartitionData(partition_index=0, error_code=Errors.INELIGIBLE_REPLICA)])])

    records = []
    ops.handle_broker_unfenced(3, 103, records)
    ctx.replay(records)
    result = ops.alter_partition(request(1, 101, foo, data), version)
    assert result.response == Resp(topics=[Resp.TopicData(topic_id=foo, partitions=[
        Resp.PartitionData(partition_index=0, leader_id=1, leader_epoch=0, isr=[1, 2, 3, 4], partition_epoch=2,
                           error_code=Errors.NONE)])])


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_partition_should_reject_brokers_with_stale_epoch(version):
    """ReplicationControlManagerTest.testAlterPartitionShouldRejectBrokersWithStaleEpoch: a
    late AlterPartition naming broker 4 at its old epoch is refused from v3 on (v2 carries no
    epochs)."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3, 4]]).topic_id
    send(ctx, ops, 1, 101, foo, partition_data(ctx.partition(foo, 0), 0, isr_with_default_epoch(1, 2, 3)))
    data = Req.PartitionData(partition_index=0, partition_epoch=1, leader_epoch=0)
    if version >= 3:
        data.new_isr_with_epochs = isr_with_default_epoch(1, 2, 3, 4)
    else:
        data.new_isr = [1, 2, 3, 4]
    # broker 4 failed silently and registers again at a new epoch, then is unfenced
    new_epoch = default_broker_epoch(4) + 1000
    ctx.replay([_register_record(4, new_epoch)])
    from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
    ctx.cluster_control.track_broker_heartbeat(4, new_epoch)
    hb = ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
        broker_id=4, broker_epoch=new_epoch, current_metadata_offset=ctx.next_offset, want_fence=False,
        want_shut_down=False))
    assert (hb.response.is_caught_up, hb.response.is_fenced) == (True, False)
    ctx.replay(hb.records)
    result = ops.alter_partition(request(1, 101, foo, data), version)
    expected = Errors.INELIGIBLE_REPLICA if version >= 3 else Errors.NONE
    assert Errors(result.response.topics[0].partitions[0].error_code) == expected


def _register_record(broker_id: int, epoch: int) -> Any:
    from kraft_node.metadata.controller.result import ApiMessageAndVersion
    return ApiMessageAndVersion(m.RegisterBrokerRecord(
        broker_id=broker_id, broker_epoch=epoch, rack=None, fenced=True,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092 + broker_id,
                                                          security_protocol=0)]), 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_alter_partition_should_reject_shutting_down_brokers(version):
    """ReplicationControlManagerTest.testAlterPartitionShouldRejectShuttingDownBrokers."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3, 4]]).topic_id
    part = ctx.partition(foo, 0)
    assert (part.isr, part.leader, part.leader_epoch, part.partition_epoch) == ((1, 2, 3, 4), 1, 0, 0)
    ctx.in_controlled_shutdown_brokers(3)
    data = Req.PartitionData(partition_index=0, partition_epoch=0, leader_epoch=0)
    if version >= 3:
        data.new_isr_with_epochs = isr_with_default_epoch(1, 2, 3, 4)
    else:
        data.new_isr = [1, 2, 3, 4]
    result = ops.alter_partition(request(1, 101, foo, data), version)
    assert result.records == []
    assert result.response == Resp(topics=[Resp.TopicData(topic_id=foo, partitions=[
        Resp.PartitionData(partition_index=0, error_code=Errors.INELIGIBLE_REPLICA)])])


def test_ineligible_reasons_name_each_replica():
    """ineligibleReplicasForIsr's reasons: not registered, shutting down, fenced, epoch mismatch."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2)
    ctx.in_controlled_shutdown_brokers(2)
    foo = ctx.create_test_topic("foo", [[0, 1, 2, 3]]).topic_id
    part = ctx.partition(foo, 0)
    states = [(0, 100), (1, 999), (2, 102), (3, 103), (7, -1), (1, -1)]
    assert ops.alter_partitions.ineligible_replicas_for_isr(states, part) == [
        "1 (broker epoch mismatch: requested=999 VS expected=101)", "2 (shutting down)", "3 (fenced)",
        "7 (not registered)"]


def test_eligible_leader_replicas_shrink_and_expand_isr():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_ShrinkAndExpandIsr."""
    ctx, ops, tp = three_broker_foo(elr=True)
    epoch = ctx.current_broker_epoch(0)
    ctx.alter_topic_config("foo", "min.insync.replicas", "2")
    shrink = send(ctx, ops, 0, epoch, tp.topic_id, partition_data(ctx.partition(*tp), 0, isr_with_default_epoch(0)))
    assert_consistent(ctx, tp, only_partition(shrink, tp.topic_id, 0, Errors.NONE))
    part = ctx.partition(*tp)
    assert (part.elr, part.last_known_elr) == ((1, 2), ())
    expand = send(ctx, ops, 0, epoch, tp.topic_id, partition_data(part, 0, isr_with_default_epoch(0, 1)))
    assert_consistent(ctx, tp, only_partition(expand, tp.topic_id, 0, Errors.NONE))
    part = ctx.partition(*tp)
    assert (part.elr, part.last_known_elr) == ((), ())


def test_eligible_leader_replicas_delete_topic():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_DeleteTopic."""
    ctx, ops, tp = three_broker_foo(elr=True)
    ctx.alter_topic_config("foo", "min.insync.replicas", "2")
    send(ctx, ops, 0, 100, tp.topic_id, partition_data(ctx.partition(*tp), 0, isr_with_default_epoch(0)))
    part = ctx.partition(*tp)
    assert (part.elr, part.last_known_elr) == ((1, 2), ())
    rc = ctx.replication_control
    assert rc.partitions_with_broker_in_elr(1)
    ctx.delete_topic(tp.topic_id)
    assert not rc.partitions_with_broker_in_elr(1) and not rc.partitions_with_broker_in_isr(0)


def test_eligible_leader_replicas_effective_min_isr():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_EffectiveMinIsr: min ISR 5 on a
    replication factor of 3 is effectively 3."""
    ctx, ops, tp = three_broker_foo(elr=True)
    ctx.alter_topic_config("foo", "min.insync.replicas", "5")
    assert ops.context.effective_min_isr(ctx.replication_control.topic(tp.topic_id)) == 3
    ctx.alter_topic_config("foo", "min.insync.replicas", "2")
    assert ops.context.effective_min_isr(ctx.replication_control.topic(tp.topic_id)) == 2


def test_unclean_topic_alter_partition_keeps_the_leader():
    """alterPartition sets an UNCLEAN election on topics that allow one; a valid ISR change by
    the leader still keeps it (the election only matters when the leader is not acceptable)."""
    ctx, ops, tp = three_broker_foo()
    ctx.alter_topic_config("foo", "unclean.leader.election.enable", "true")
    result = send(ctx, ops, 0, 100, tp.topic_id, partition_data(ctx.partition(*tp), 0, isr_with_default_epoch(0)))
    assert [r.message for r in result.records] == [m.PartitionChangeRecord(topic_id=tp.topic_id, partition_id=0,
                                                                           isr=[0])]
    assert_consistent(ctx, tp, only_partition(result, tp.topic_id, 0, Errors.NONE))


def test_recovering_leader_reports_recovered():
    """A leader elected uncleanly (RECOVERING) reports RECOVERED with an ISR of itself: the
    record carries the state change and the response the replayed state (KIP-704)."""
    ctx, ops = make(MetadataVersion.IBP_3_6_IV1)
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    foo = ctx.create_test_topic("foo", [[0, 1, 2]]).topic_id
    ctx.fence_brokers(1, 2)
    ctx.fence_brokers(0, 1, 2)
    ctx.unfence_brokers(1)
    from kraft_node.protocol.generated.elect_leaders import ElectLeadersRequest
    election = ops.elect_leaders(ElectLeadersRequest(election_type=1, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic="foo", partitions=[0])]))
    ctx.replay(election.records)
    part = ctx.partition(foo, 0)
    assert (part.leader, part.isr, part.leader_recovery_state) == (1, (1,), RECOVERING)
    result = send(ctx, ops, 1, 101, foo, partition_data(part, 0, isr_with_default_epoch(1), RECOVERED))
    assert [r.message.leader_recovery_state for r in result.records] == [0]
    p = only_partition(result, foo, 0, Errors.NONE)
    assert_consistent(ctx, TopicIdPartition(foo, 0), p)
    assert p.leader_recovery_state == 0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sets(st.sampled_from([1, 2, 3, 4]), max_size=4), st.booleans()), min_size=1,
                      max_size=8),
       min_isr=st.integers(1, 5))
def test_responses_equal_the_replayed_registration(steps, min_isr):
    """Property: whatever valid ISR the leader sends (with ELR on, any min ISR), a NONE answer
    carries exactly the registration its record replays into, the ISR and ELR never overlap,
    and only the partition epoch moves (the leader stays, no leader epoch bump from 3.6 on)."""
    ctx, ops = make(elr=True)
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[0, 1, 2, 3, 4]]).topic_id
    ctx.alter_topic_config("foo", "min.insync.replicas", str(min_isr))
    tp = TopicIdPartition(foo, 0)
    for followers, v2 in steps:
        before = ctx.partition(*tp)
        isr = isr_with_default_epoch(0, *sorted(followers))
        result = send(ctx, ops, 0, 100, foo, partition_data(before, 0, isr, version=2 if v2 else 3),
                      version=2 if v2 else 3)
        p = only_partition(result, foo, 0, Errors.NONE)
        assert_consistent(ctx, tp, p)
        after = ctx.partition(*tp)
        assert after.isr == (0, *sorted(followers))
        assert not set(after.isr) & set(after.elr)
        assert after.leader == 0 and after.leader_epoch == before.leader_epoch
        assert after.partition_epoch == before.partition_epoch + (1 if result.records else 0)
        if len(after.isr) >= min(min_isr, 5):
            assert after.elr == ()
