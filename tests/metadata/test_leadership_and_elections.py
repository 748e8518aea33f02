"""Broker state -> partition changes (leadership.py) and elections (elections.py), re-stating
Kafka's ReplicationControlManagerTest items 10-11 (ELR, fencing, preferred/unclean elections,
leader balancing, controlled shutdown, offline directories) and QuorumControllerTest's
fencing, ELR unclean-shutdown and leader-balancing scenarios at the manager level, with their
exact inputs and outcomes; then the bounded results of leadership.py (KAFKA-13858), which
Kafka does not have: every result within the bound, Kafka's record order kept across results,
the broker excluded while its change is unfinished, and the end state equal to Kafka's
single-result one.

Harness: Kafka's ReplicationControlTestContext (tests/support/replication.py) with
PartitionChangeOps attached to its ClusterControlManager, so heartbeats and the stale-broker
task move partitions as Kafka's ReplicationControlManager does."""
from __future__ import annotations

from typing import Any, Iterable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.controller import broker_registration
from support.replication import (
    BROKER_SESSION_TIMEOUT_MS,
    CLUSTER_ID,
    ReplicationControlTestContext,
    broker_dir,
    default_broker_epoch,
    run_stale_broker_task,
)

from kraft_node.metadata.configs.resources import AlterConfigOp
from kraft_node.metadata.controller.configuration_control import ConfigResource, ConfigurationControlManager
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.leadership import ChangeKind
from kraft_node.metadata.controller.partition_changes import PartitionChangeOps, partition_change_count
from kraft_node.metadata.controller.replication_control import NO_LEADER, TopicIdPartition
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

MV = MetadataVersion
APR = AlterPartitionRequest
ELR = ElectLeadersResponse
NOT_NEEDED = (Errors.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition.")
PREFERRED_NA = (Errors.PREFERRED_LEADER_NOT_AVAILABLE, "The preferred leader was not available.")
ELIGIBLE_NA = (Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE, "Eligible topic partition leaders are not available.")
OK = (Errors.NONE, None)


def make(mv: MetadataVersion | None = None, *, elr: bool | None = None, n: int | None = None,
         configs: Any = None) -> tuple[ReplicationControlTestContext, PartitionChangeOps]:
    ctx = ReplicationControlTestContext(mv, eligible_leader_replicas_enabled=elr, configuration_control=configs)
    kwargs = {} if n is None else {"max_partition_changes_per_result": n}
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control, **kwargs)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    return ctx, ops


def heartbeat(ctx: ReplicationControlTestContext, broker_id: int, epoch: int | None = None, *,
              want_fence: bool = False, want_shut_down: bool = False, offline_dirs: Iterable[Uuid] = (),
              offset: int | None = None) -> Any:
    """A heartbeat through the RPC path (contact first, then the event); not replayed."""
    epoch = default_broker_epoch(broker_id) if epoch is None else epoch
    ctx.cluster_control.track_broker_heartbeat(broker_id, epoch)
    return ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=ctx.next_offset if offset is None else offset,
        want_fence=want_fence, want_shut_down=want_shut_down, offline_log_dirs=list(offline_dirs)))


def register(ctx: ReplicationControlTestContext, broker_id: int, *, previous_epoch: int = -1,
             dirs: list[Uuid] | None = None) -> int:
    """A new incarnation's BrokerRegistration through the ClusterControlManager, replayed; its epoch."""
    request = broker_registration(broker_id, CLUSTER_ID)
    request.previous_broker_epoch = previous_epoch
    if dirs is not None:
        request.log_dirs = dirs
    result = ctx.cluster_control.register_broker(request, ctx.next_offset, ctx.feature_control.finalized_features())
    ctx.replay(result.records)
    return int(result.response.epoch)


def part(ctx: ReplicationControlTestContext, topic_id: Uuid, pid: int) -> Any:
    p = ctx.partition(topic_id, pid)
    assert p is not None
    return p


def elect_request(election_type: int, partitions: dict[str, list[int]] | None) -> Any:
    if partitions is None:
        return ElectLeadersRequest(election_type=election_type, topic_partitions=None)
    return ElectLeadersRequest(election_type=election_type, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=t, partitions=ps) for t, ps in partitions.items()])


def election_results(response: Any) -> dict[tuple[str, int], tuple[Errors, str | None]]:
    """Kafka's ``collectElectLeadersErrors``."""
    assert response.error_code == 0
    return {(t.topic, p.partition_id): (Errors(p.error_code), p.error_message)
            for t in response.replica_election_results for p in t.partition_result}


def alter_isr(ctx: ReplicationControlTestContext, ops: PartitionChangeOps, leader: int, topic_id: Uuid, pid: int,
              isr: list[int], *, leader_epoch_of: int | None = None) -> Any:
    """An AlterPartition (v3, default epochs) from ``leader``; replayed."""
    p = part(ctx, topic_id, pid)
    result = ops.alter_partition(APR(broker_id=leader, broker_epoch=ctx.current_broker_epoch(leader), topics=[
        APR.TopicData(topic_id=topic_id, partitions=[APR.PartitionData(
            partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
            new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=ctx.current_broker_epoch(b))
                                 for b in isr])])]), 3)
    ctx.replay(result.records)
    return result.response.topics[0].partitions[0]


# =============================================================================================
# ReplicationControlManagerTest: fencing and ELR
# =============================================================================================

def test_remove_leaderships():
    """ReplicationControlManagerTest.testRemoveLeaderships."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    foo = ctx.create_test_topic("foo", [[0, 1, 2], [1, 2, 3], [2, 3, 0], [0, 2, 1]]).topic_id
    rc = ctx.replication_control
    assert set(rc.partitions_led_by_broker(0)) == {TopicIdPartition(foo, 0), TopicIdPartition(foo, 3)}
    records: list[ApiMessageAndVersion] = []
    ops.handle_broker_fenced(0, records)
    assert isinstance(records[-1].message, m.BrokerRegistrationChangeRecord) and records[-1].message.fenced == 1
    ctx.replay(records)
    assert rc.partitions_led_by_broker(0) == [] and rc.partitions_with_broker_in_isr(0) == []


def test_fence_multiple_brokers():
    """ReplicationControlManagerTest.testFenceMultipleBrokers."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]]).topic_id
    assert ctx.fenced_broker_ids() == set()
    ctx.fence_brokers(2, 3)
    p0, p1, p2 = (part(ctx, foo, i) for i in range(3))
    assert (p0.replicas, p0.isr, p0.leader) == ((1, 2, 3), (1,), 1)
    assert (p1.replicas, p1.isr, p1.leader) == ((2, 3, 4), (4,), 4)
    assert (p2.replicas, p2.isr) == ((0, 2, 1), (0, 1)) and p2.leader != 2


def test_eligible_leader_replicas_broker_fence():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_BrokerFence."""
    ctx, ops = make(elr=True)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    foo = ctx.create_test_topic("foo", [[0, 1, 2, 3]]).topic_id
    assert part(ctx, foo, 0).leader == 0
    ctx.alter_topic_config("foo", "min.insync.replicas", "3")
    ctx.fence_brokers(2, 3)
    assert (part(ctx, foo, 0).elr, part(ctx, foo, 0).last_known_elr) == ((3,), ())
    ctx.fence_brokers(1, 2, 3)
    assert (part(ctx, foo, 0).elr, part(ctx, foo, 0).last_known_elr) == ((1, 3), ())
    ctx.unfence_brokers(0, 1, 2, 3)
    assert (part(ctx, foo, 0).elr, part(ctx, foo, 0).last_known_elr) == ((1, 3), ())


def test_eligible_leader_replicas_clean_election():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_CleanElection: with the ISR
    empty, an unfenced ELR member is elected (cleanly) and the ISR becomes just it."""
    ctx, ops = make(elr=True)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    foo = ctx.create_test_topic("foo", [[0, 1, 2, 3]]).topic_id
    ctx.alter_topic_config("foo", "min.insync.replicas", "3")
    ctx.fence_brokers(1, 2, 3)
    assert (part(ctx, foo, 0).elr, part(ctx, foo, 0).last_known_elr) == ((2, 3), ())
    ctx.unfence_brokers(2)
    ctx.fence_brokers(0, 1)
    p = part(ctx, foo, 0)
    assert (p.elr, p.isr, p.leader, p.last_known_elr) == ((0, 3), (2,), 2, ())


def test_eligible_leader_replicas_unclean_shutdown():
    """ReplicationControlManagerTest.testEligibleLeaderReplicas_UncleanShutdown: an ELR member
    restarting uncleanly leaves the ELR; the last ISR member doing so becomes the last known
    leader."""
    ctx, ops = make(elr=True)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    foo = ctx.create_test_topic("foo", [[0, 1, 2, 3]]).topic_id
    ctx.alter_topic_config("foo", "min.insync.replicas", "3")
    ctx.fence_brokers(1, 2, 3)
    assert (part(ctx, foo, 0).elr, part(ctx, foo, 0).last_known_elr) == ((2, 3), ())
    for broker, (elr, lke) in ((3, ((2,), ())), (0, ((2,), (0,)))):
        records: list[ApiMessageAndVersion] = []
        ops.handle_broker_shutdown(broker, False, records)
        ctx.replay(records)
        assert (part(ctx, foo, 0).elr, part(ctx, foo, 0).last_known_elr) == (elr, lke)


def test_unregister_broker_leaves_its_partitions_leaderless():
    """QuorumControllerTest.testUnregisterBroker (its partition part): foo RF 1 on broker 0;
    unregistering broker 0 leaves foo-0 with no leader, the UnregisterBrokerRecord last."""
    ctx, ops = make()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    foo = ctx.create_test_topic("foo", [[0]]).topic_id
    assert ctx.replication_control.partitions_with_broker_in_isr(0) == [TopicIdPartition(foo, 0)]
    result = ctx.cluster_control.unregister_broker(0)
    assert [type(r.message) for r in result.records] == [m.PartitionChangeRecord, m.UnregisterBrokerRecord]
    ctx.replay(result.records)
    assert ctx.replication_control.partitions_with_no_leader() == [TopicIdPartition(foo, 0)]
    assert ctx.cluster_control.registration(0) is None


def test_process_broker_heartbeat_in_controlled_shutdown():
    """ReplicationControlManagerTest.testProcessBrokerHeartbeatInControlledShutdown (MV
    3.3-IV3; 3.3-IV2 is below this kraft's minimum): the in-controlled-shutdown record, then
    the partition moving off broker 0, at PartitionChangeRecord v0."""
    ctx, ops = make(MV.IBP_3_3_IV3)
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    foo = ctx.create_test_topic("foo", [[0, 1, 2]]).topic_id
    result = heartbeat(ctx, 0, 100, offset=0, want_shut_down=True)
    assert result.records == [
        ApiMessageAndVersion(m.BrokerRegistrationChangeRecord(broker_epoch=100, broker_id=0, in_controlled_shutdown=1),
                             1),
        ApiMessageAndVersion(m.PartitionChangeRecord(partition_id=0, topic_id=foo, isr=[1, 2], leader=1), 0)]
    reply = result.response
    assert (reply.is_fenced, reply.in_controlled_shutdown, reply.should_shut_down) == (False, True, False)


def test_handle_directories_offline():
    """ReplicationControlManagerTest.testHandleDirectoriesOffline: broker 101 reports dir1b1
    (and 102's dir1b2, not its own) offline: a0 and b0 (placed in dir1b1) move to 102, then a
    registration change lists 101's remaining directory; three records in all."""
    ctx, ops = make()
    b1, b2 = 101, 102
    dir1b1, dir2b1 = Uuid.from_string("suitdzfTTdqoWcy8VqmkUg"), Uuid.from_string("yh3acnzGSeurSTj8aIhOjw")
    dir1b2, dir2b2 = Uuid.from_string("OmpmJ8RjQliQlEFht56DwQ"), Uuid.from_string("w05baLpsT5Oz0LvKTKXoDw")
    ctx.register_brokers_with_dirs({b1: [dir1b1, dir2b1], b2: [dir1b2, dir2b2]})
    ctx.unfence_brokers(b1, b2)
    a = ctx.create_test_topic("a", [[b1, b2], [b1, b2]]).topic_id
    b = ctx.create_test_topic("b", [[b1, b2], [b1, b2]]).topic_id
    # what AssignReplicasToDirs would write: partition 0s in dir1, partition 1s in dir2
    ctx.replay([ApiMessageAndVersion(m.PartitionChangeRecord(topic_id=t, partition_id=p, directories=dirs), 2)
                for t in (a, b) for p, dirs in ((0, [dir1b1, dir1b2]), (1, [dir2b1, dir2b2]))])
    records: list[ApiMessageAndVersion] = []
    ops.handle_directories_offline(b1, default_broker_epoch(b1), [dir1b1, dir1b2], records)
    assert len(records) == 3
    assert records[-1] == ApiMessageAndVersion(m.BrokerRegistrationChangeRecord(
        broker_id=b1, broker_epoch=default_broker_epoch(b1), log_dirs=[dir2b1]), 2)
    changes = sorted((r.message for r in records[:-1]), key=lambda c: (str(c.topic_id), c.partition_id))
    version = ctx.feature_control.metadata_version().partition_change_record_version()
    assert {r.version for r in records[:-1]} == {version}
    assert changes == sorted([m.PartitionChangeRecord(topic_id=a, partition_id=0, leader=b2, isr=[b2]),
                              m.PartitionChangeRecord(topic_id=b, partition_id=0, leader=b2, isr=[b2])],
                             key=lambda c: (str(c.topic_id), c.partition_id))
    ctx.replay(records)
    assert ctx.cluster_control.registration(b1).directories == (dir2b1,)


# =============================================================================================
# ReplicationControlManagerTest: elections
# =============================================================================================

def test_elect_preferred_leaders():
    """ReplicationControlManagerTest.testElectPreferredLeaders."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(1, 2, 3, 4)
    ctx.in_controlled_shutdown_brokers(1)
    foo = ctx.create_test_topic("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]]).topic_id
    request = elect_request(0, {"foo": [0, 1, 2], "bar": [0, 1]})
    no_bar = (Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such topic as bar")
    first = ops.elect_leaders(request)
    assert election_results(first.response) == {("foo", 0): PREFERRED_NA, ("foo", 1): NOT_NEEDED,
                                                ("foo", 2): PREFERRED_NA, ("bar", 0): no_bar, ("bar", 1): no_bar}
    assert first.records == []
    # broker 1 re-registers to leave controlled shutdown; 0 and 1 unfence
    ctx.register_brokers(1)
    ctx.unfence_brokers(0, 1)
    r0 = alter_isr(ctx, ops, 2, foo, 0, [1, 2, 3])
    r2 = alter_isr(ctx, ops, 2, foo, 2, [0, 2, 1])
    assert [(r.leader_id, r.leader_epoch, list(r.isr), r.partition_epoch, r.error_code) for r in (r0, r2)] == [
        (2, 0, [1, 2, 3], 1, 0), (2, 0, [0, 2, 1], 1, 0)]
    second = ops.elect_leaders(request)
    assert election_results(second.response) == {("foo", 0): OK, ("foo", 1): NOT_NEEDED, ("foo", 2): OK,
                                                 ("bar", 0): no_bar, ("bar", 1): no_bar}
    version = MV.latest_testing().partition_change_record_version()
    assert second.records == [ApiMessageAndVersion(m.PartitionChangeRecord(partition_id=0, topic_id=foo, leader=1),
                                                   version),
                              ApiMessageAndVersion(m.PartitionChangeRecord(partition_id=2, topic_id=foo, leader=0),
                                                   version)]


def test_unknown_election_type_and_unknown_partition():
    """electionType's "Unknown election type N" and electLeader's "No such partition as"."""
    ctx, ops = make()
    ctx.register_brokers(0)
    ctx.unfence_brokers(0)
    ctx.create_test_topic("foo", [[0]])
    with pytest.raises(ApiError) as exc:
        ops.elect_leaders(elect_request(2, {"foo": [0]}))
    assert exc.value == ApiError(Errors.INVALID_REQUEST, "Unknown election type 2")
    result = ops.elect_leaders(elect_request(0, {"foo": [0, 5]}))
    assert election_results(result.response) == {
        ("foo", 0): NOT_NEEDED, ("foo", 5): (Errors.UNKNOWN_TOPIC_OR_PARTITION, "No such partition as foo-5")}


def test_balance_partition_leaders():
    """ReplicationControlManagerTest.testBalancePartitionLeaders."""
    ctx, ops = make()
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]]).topic_id
    assert ops.are_partition_leaders_imbalanced()
    ctx.unfence_brokers(1)
    r = alter_isr(ctx, ops, 2, foo, 0, [1, 2, 3])
    assert (r.leader_id, r.leader_epoch, list(r.isr), r.partition_epoch, r.error_code) == (2, 0, [1, 2, 3], 1, 0)
    version = MV.latest_testing().partition_change_record_version()
    balance = ops.maybe_balance_partition_leaders()
    ctx.replay(balance.records)
    assert balance.records == [ApiMessageAndVersion(m.PartitionChangeRecord(partition_id=0, topic_id=foo, leader=1),
                                                    version)]
    assert ops.are_partition_leaders_imbalanced() and balance.response is False
    ctx.unfence_brokers(0)
    r = alter_isr(ctx, ops, 2, foo, 2, [0, 2, 1])
    assert (r.leader_id, r.leader_epoch, list(r.isr), r.partition_epoch, r.error_code) == (2, 0, [0, 2, 1], 1, 0)
    balance = ops.maybe_balance_partition_leaders()
    ctx.replay(balance.records)
    assert balance.records == [ApiMessageAndVersion(m.PartitionChangeRecord(partition_id=2, topic_id=foo, leader=0),
                                                    version)]
    assert not ops.are_partition_leaders_imbalanced() and balance.response is False


def test_balance_stops_at_max_elections_per_imbalance():
    """maybeBalancePartitionLeaders writes at most maxElectionsPerImbalance records a run and
    answers True (run again at once) when it hit the bound."""
    ctx = ReplicationControlTestContext()
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control, max_elections_per_imbalance=2)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(1)
    foo = ctx.create_test_topic("foo", [[0, 1]] * 5).topic_id
    ctx.unfence_brokers(0)
    for pid in range(5):
        alter_isr(ctx, ops, 1, foo, pid, [0, 1])
    runs = []
    while True:
        result = ops.maybe_balance_partition_leaders()
        ctx.replay(result.records)
        runs.append((len(result.records), result.response))
        if not result.response:
            break
    assert runs == [(2, True), (2, True), (1, False)]
    assert not ops.are_partition_leaders_imbalanced()


@pytest.mark.parametrize("elect_all", [True, False])
def test_elect_unclean_leaders_without_elr(elect_all):
    """ReplicationControlManagerTest.testElectUncleanLeaders_WithoutElr (MV 3.6-IV1)."""
    ctx, ops = make(MV.IBP_3_6_IV1)
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3], [2, 3, 4], [0, 2, 1]]).topic_id
    ctx.fence_brokers(2, 3)
    ctx.fence_brokers(1, 2, 3)
    assert [(part(ctx, foo, i).leader, part(ctx, foo, i).isr) for i in range(3)] == [
        (NO_LEADER, (1,)), (4, (4,)), (0, (0,))]
    request = elect_request(1, None if elect_all else {"foo": [0, 1, 2]})

    def expected(p0: tuple[Errors, str | None]) -> dict[tuple[str, int], tuple[Errors, str | None]]:
        out = {("foo", 0): p0, ("foo", 1): NOT_NEEDED, ("foo", 2): NOT_NEEDED}
        return {k: v for k, v in out.items() if not (elect_all and v == NOT_NEEDED)}

    first = ops.elect_leaders(request)
    assert first.records == [] and election_results(first.response) == expected(ELIGIBLE_NA)
    ctx.unfence_brokers(2)
    alter_isr(ctx, ops, 4, foo, 1, [2, 4])
    second = ops.elect_leaders(request)
    assert len(second.records) == 1
    change = second.records[0].message
    assert (change.partition_id, change.leader, change.isr) == (0, 2, [2])
    ctx.replay(second.records)
    assert [(part(ctx, foo, i).leader, part(ctx, foo, i).isr) for i in range(3)] == [(2, (2,)), (4, (2, 4)), (0, (0,))]
    assert election_results(second.response) == expected(OK)


def test_preferred_election_does_not_trigger_unclean_election():
    """ReplicationControlManagerTest.testPreferredElectionDoesNotTriggerUncleanElection."""
    ctx, ops = make()
    ctx.register_brokers(1, 2, 3, 4)
    ctx.unfence_brokers(1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 3]]).topic_id
    ctx.fence_brokers(2, 3)
    ctx.fence_brokers(1, 2, 3)
    ctx.unfence_brokers(2)
    assert (part(ctx, foo, 0).leader, part(ctx, foo, 0).isr) == (NO_LEADER, (1,))
    ctx.alter_topic_config("foo", "unclean.leader.election.enable", "true")
    result = ops.elect_leaders(elect_request(0, {"foo": [0]}))
    assert result.records == []
    assert result.response == ELR(error_code=0, replica_election_results=[ELR.ReplicaElectionResult(
        topic="foo", partition_result=[ELR.PartitionResult(
            partition_id=0, error_code=Errors.PREFERRED_LEADER_NOT_AVAILABLE, error_message=PREFERRED_NA[1])])])


@pytest.mark.parametrize("unclean_config", ["none", "static", "dynamic_cluster", "dynamic_node", "dynamic_topic"])
def test_maybe_trigger_unclean_leader_election_for_leaderless_partitions(unclean_config):
    """ReplicationControlManagerTest.testMaybeTriggerUncleanLeaderElectionForLeaderlessPartitions."""
    static = {"unclean.leader.election.enable": "true"} if unclean_config == "static" else {}
    ctx, ops = make(configs=lambda reg: ConfigurationControlManager(reg, static_config=static, node_id=0))
    ctx.register_brokers(0, 1, 2, 3, 4)
    ctx.unfence_brokers(0, 1, 2, 3, 4)
    foo = ctx.create_test_topic("foo", [[1, 2, 4], [1, 3, 4], [0, 2, 4]]).topic_id
    assert not ops.are_some_partitions_leaderless()
    ctx.fence_brokers(0, 1, 2, 3, 4)
    assert ops.are_some_partitions_leaderless()
    assert [(part(ctx, foo, i).isr, part(ctx, foo, i).leader) for i in range(3)] == [((4,), NO_LEADER)] * 3
    ctx.unfence_brokers(2)
    elected = [((2,), 2), ((4,), NO_LEADER), ((2,), 2)]
    state = [(part(ctx, foo, i).isr, part(ctx, foo, i).leader) for i in range(3)]
    # statically enabled: unfencing 2 already elected it uncleanly
    assert state == (elected if unclean_config == "static" else [((4,), NO_LEADER)] * 3)
    resource = {"dynamic_cluster": ConfigResource.broker(""), "dynamic_node": ConfigResource.broker("0"),
                "dynamic_topic": ConfigResource.topic("foo")}.get(unclean_config)
    if resource is not None:
        ctx.replay(ctx.configuration_control.incremental_alter_configs(
            {resource: {"unclean.leader.election.enable": (AlterConfigOp.SET, "true")}}, True).records)
    result = ops.maybe_elect_unclean_leaders()
    assert result.response is False
    if unclean_config in ("none", "static"):
        assert result.records == []
    else:
        assert result.records
        ctx.replay(result.records)
        assert [(part(ctx, foo, i).isr, part(ctx, foo, i).leader) for i in range(3)] == elected
        assert {part(ctx, foo, i).leader_recovery_state.name for i in (0, 2)} == {"RECOVERING"}


# =============================================================================================
# QuorumControllerTest scenarios at the manager level
# =============================================================================================

def test_quorum_fence_multiple_brokers():
    """QuorumControllerTest.testFenceMultipleBrokers: 5 brokers, foo 5 x RF 5 placed; brokers
    2-5 stop heartbeating and are fenced: foo-0's ISR is [1], led by 1, and leaders are imbalanced."""
    ctx, ops = make()
    ctx.register_brokers(1, 2, 3, 4, 5)
    ctx.unfence_brokers(1, 2, 3, 4, 5)
    foo = ctx.create_test_topic_placed("foo", 5, 5).topic_id
    ctx.fence_brokers(2, 3, 4, 5)
    assert (part(ctx, foo, 0).isr, part(ctx, foo, 0).leader) == ((1,), 1)
    assert ops.are_partition_leaders_imbalanced()


def test_quorum_unclean_shutdown_broker_elr_enabled():
    """QuorumControllerTest.testUncleanShutdownBrokerElrEnabled (Kafka 4.x): 3 brokers with ELR
    (MV 4.0-IV1, eligible.leader.replicas.version 1), foo 1 x RF 3, min.insync.replicas 2; all
    fenced: no ISR, no leader, 2 ELR members, the last leader in the last known ELR.  The last
    known leader restarting uncleanly leaves the ELR (and stays the last known leader); the
    other member restarting cleanly (previous broker epoch) keeps its place; once it is
    unfenced it leads with ISR [itself] and both ELR lists empty."""
    ctx, ops = make(MV.IBP_4_0_IV1)
    ctx.replay([ApiMessageAndVersion(m.FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
                                     0)])
    assert ops.context.elr_enabled()
    dirs = {b: Uuid.random() for b in (1, 2, 3)}
    epochs = {b: register(ctx, b, dirs=[dirs[b]]) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, epochs[b]).records)
    assert ctx.fenced_broker_ids() == set()
    foo = ctx.create_test_topic_placed("foo", 1, 3).topic_id
    ctx.alter_topic_config("foo", "min.insync.replicas", "2")
    ctx.fence_brokers(1, 2, 3)
    p = part(ctx, foo, 0)
    assert (p.isr, p.leader, len(p.elr), len(p.last_known_elr)) == ((), NO_LEADER, 2, 1), p
    last_known = p.last_known_elr
    unclean = last_known[0]
    leader = p.elr[1] if p.elr[0] == unclean else p.elr[0]
    epochs[unclean] = register(ctx, unclean, dirs=[dirs[unclean]])
    p = part(ctx, foo, 0)
    assert (p.elr, p.last_known_elr) == ((leader,), last_known), p
    epochs[leader] = register(ctx, leader, previous_epoch=epochs[leader], dirs=[dirs[leader]])
    p = part(ctx, foo, 0)
    assert (p.elr, p.last_known_elr) == ((leader,), last_known), p
    ctx.replay(heartbeat(ctx, leader, epochs[leader]).records)
    assert ctx.cluster_control.is_unfenced(leader)
    p = part(ctx, foo, 0)
    assert (p.isr, p.elr, p.last_known_elr, p.leader) == ((leader,), (), (), leader), p


def test_quorum_unclean_shutdown_elr_disabled():
    """QuorumControllerTest.testUncleanShutdownElrDisabled (MV 4.0-IV0, no ELR): each leader in
    turn restarts uncleanly; its leadership moves (leader epoch bumped) and it leaves the ISR,
    except the last standing member, which stays in the ISR with no leader."""
    ctx, ops = make(MV.IBP_4_0_IV0)
    epochs = {b: register(ctx, b) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, epochs[b]).records)
    foo = ctx.create_test_topic_placed("foo", 1, 3).topic_id
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for i in range(3):
        p = part(ctx, foo, 0)
        assert (p.elr, p.last_known_elr) == ((), ())
        prev_leader, prev_epoch = p.leader, p.leader_epoch
        register(ctx, prev_leader)
        p = part(ctx, foo, 0)
        assert p.leader != prev_leader and p.leader_epoch != prev_epoch
        if i == 2:
            assert (p.isr, p.leader) == ((prev_leader,), NO_LEADER)
        else:
            assert prev_leader not in p.isr


def test_quorum_balance_partition_leaders():
    """QuorumControllerTest.testBalancePartitionLeaders (MV 3.3-IV3): broker 3 stops
    heartbeating and is fenced; re-registered and unfenced, it is the preferred replica of
    exactly one imbalanced partition; once its leader adds it back to the ISR (AlterPartition
    v2), the balancing task makes it the leader again."""
    ctx, ops = make(MV.IBP_3_3_IV3)
    epochs = {b: register(ctx, b) for b in (1, 2, 3)}
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, epochs[b]).records)
    foo = ctx.create_test_topic_placed("foo", 3, 3).topic_id
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (1, 2):
        ctx.replay(heartbeat(ctx, b, epochs[b]).records)
    while (result := ctx.cluster_control.fence_stale_broker()).response:
        ctx.replay(result.records)
    assert ctx.fenced_broker_ids() == {3}
    assert ops.are_partition_leaders_imbalanced()
    epochs[3] = register(ctx, 3)
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, epochs[b]).records)
    imbalanced = ctx.replication_control.imbalanced()
    assert len(imbalanced) == 1
    tp = next(iter(imbalanced))
    p = part(ctx, foo, tp.partition_id)
    assert p.replicas[0] == 3 and 3 not in p.isr
    result = ops.alter_partition(APR(broker_id=p.leader, broker_epoch=epochs[p.leader], topics=[APR.TopicData(
        topic_id=foo, partitions=[APR.PartitionData(partition_index=tp.partition_id, leader_epoch=p.leader_epoch,
                                                    partition_epoch=p.partition_epoch, new_isr=[1, 2, 3])])]), 2)
    assert result.response.topics[0].partitions[0].error_code == 0
    ctx.replay(result.records)
    balance = ops.maybe_balance_partition_leaders()
    ctx.replay(balance.records)
    assert not ops.are_partition_leaders_imbalanced() and part(ctx, foo, tp.partition_id).leader == 3


# =============================================================================================
# Bounded results (KAFKA-13858): not in Kafka
# =============================================================================================

N = 20


def big_cluster(n: int | None = N, *, elr: bool | None = None, leads: int = 60, follows: int = 30,
                mv: MetadataVersion | None = None) -> tuple[ReplicationControlTestContext, PartitionChangeOps, Uuid]:
    """Brokers 0-3; "big" with ``leads`` partitions on [0, 1, 2] (broker 0 leads them) then
    ``follows`` on [1, 0, 2] (broker 0 follows)."""
    ctx, ops = make(mv, elr=elr, n=n)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    big = ctx.create_test_topic("big", [[0, 1, 2]] * leads + [[1, 0, 2]] * follows).topic_id
    return ctx, ops, big


def snapshot(ctx: ReplicationControlTestContext, topic_id: Uuid) -> dict[int, Any]:
    return ctx.replication_control.partitions(topic_id)


def check_partition_invariants(ctx: ReplicationControlTestContext, topic_id: Uuid) -> None:
    for pid, p in snapshot(ctx, topic_id).items():
        assert not set(p.isr) & set(p.elr), (pid, p)
        assert p.leader == NO_LEADER or p.leader in p.isr, (pid, p)


def fence_via_task(ctx: ReplicationControlTestContext, *broker_ids: int) -> list[list[ApiMessageAndVersion]]:
    """Let sessions expire, keep the others alive, and run the stale-broker task until it has
    nothing left, replaying each result; the results."""
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in ctx.cluster_control.brokers():
        if b not in broker_ids:
            ctx.replay(heartbeat(ctx, b, ctx.current_broker_epoch(b)).records)
    return run_stale_broker_task(ctx)


def test_fencing_a_big_leader_is_bounded_and_ends_with_the_fence_record():
    """90 partitions to change, at most 20 per result; the fence record only in the result that
    completes them; meanwhile the broker is excluded: no election picks it and AlterPartition
    may not add it back (INELIGIBLE_REPLICA)."""
    ctx, ops, big = big_cluster()
    rc = ctx.replication_control
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b).records)
    chunks = 0
    saw_exclusion = False
    while True:
        result = ctx.cluster_control.fence_stale_broker()
        assert partition_change_count(result.records) <= N
        fence = [r for r in result.records if isinstance(r.message, m.BrokerRegistrationChangeRecord)]
        ctx.replay(result.records)
        check_partition_invariants(ctx, big)
        if result.records:
            chunks += 1
        if ops.lifecycle.has_pending(ChangeKind.FENCE, 0):
            assert fence == [] and ctx.cluster_control.is_unfenced(0)
            saw_exclusion = True
            assert ops.context.excluded(0, broker_dir(0))
            # the leader of a partition broker 0 left may not take it back into the ISR
            tp = next(tp for tp in rc.partitions_led_by_broker(1) if 0 in part(ctx, big, tp.partition_id).replicas)
            p = part(ctx, big, tp.partition_id)
            refused = ops.alter_partition(APR(broker_id=1, broker_epoch=101, topics=[APR.TopicData(
                topic_id=big, partitions=[APR.PartitionData(
                    partition_index=tp.partition_id, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                    new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=100 + b)
                                         for b in sorted(set(p.isr) | {0})])])]), 3)
            assert refused.response.topics[0].partitions[0].error_code == Errors.INELIGIBLE_REPLICA
            # a preferred election of a partition broker 0 is preferred for does not elect it
            assert all(r.message.leader != 0 for r in ops.maybe_balance_partition_leaders().records)
        if not result.response:
            break
    assert saw_exclusion and chunks == 5  # 90 changes / 20, the last one with the fence record
    assert not ctx.cluster_control.is_unfenced(0)
    assert rc.partitions_led_by_broker(0) == [] and rc.partitions_with_broker_in_isr(0) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.permutations([0, 1, 2, 3]).map(lambda p: p[:3]), min_size=1, max_size=40),
       victim=st.integers(0, 3), n=st.integers(1, 7), elr=st.booleans(), min_isr=st.integers(1, 3))
def test_bounded_fencing_ends_where_one_result_would(rows, victim, n, elr, min_isr):
    """Property: fencing a broker in results of at most ``n`` partition changes ends in the
    same partitions (leaders, ISRs, ELRs, epochs) as Kafka's one result does, every result is
    within the bound, and the fence record is written once, last."""
    ends = []
    for bound in (n, 10_000):
        ctx, ops = make(elr=elr, n=bound)
        ctx.register_brokers(0, 1, 2, 3)
        ctx.unfence_brokers(0, 1, 2, 3)
        topic = ctx.create_test_topic("t", rows).topic_id
        ctx.alter_topic_config("t", "min.insync.replicas", str(min_isr))
        results = fence_via_task(ctx, victim)
        fences = [i for i, rs in enumerate(results) for r in rs
                  if isinstance(r.message, m.BrokerRegistrationChangeRecord)]
        assert len(fences) == 1 and all(partition_change_count(rs) == 0 for rs in results[fences[0] + 1:])
        assert all(partition_change_count(rs) <= bound for rs in results)
        assert not ops.lifecycle.has_work()
        ends.append(snapshot(ctx, topic))
    assert ends[0] == ends[1]


def test_controlled_shutdown_moves_leaderships_first_and_shuts_down_after_all():
    """A broker leading 60 partitions (and following 30) asks to shut down: the
    in-controlled-shutdown record first, then at most 20 changes per result, leaderships
    before follower ISR removals; heartbeats continue it; it is told to shut down only once
    everything is written and every active broker has read past the last leadership move
    (its controlled shutdown offset is raised to that batch, not left at the first)."""
    ctx, ops, big = big_cluster()
    rc = ctx.replication_control
    cluster = ctx.cluster_control
    first = heartbeat(ctx, 0, want_shut_down=True)
    assert isinstance(first.records[0].message, m.BrokerRegistrationChangeRecord)
    assert first.records[0].message.in_controlled_shutdown == 1
    assert partition_change_count(first.records) == N
    assert (first.response.in_controlled_shutdown, first.response.should_shut_down) == (True, False)
    ctx.replay(first.records)
    cluster.update_controlled_shutdown_offset(0, ctx.next_offset - 1)  # what the controller's after() does
    first_offset = cluster.heartbeat_manager.controlled_shutdown_offset(0)
    led = [len(rc.partitions_led_by_broker(0))]
    follows = [len(rc.partitions_with_broker_in_isr(0)) - led[0]]
    while True:
        # the other brokers have read everything so far
        for b in (1, 2, 3):
            ctx.replay(heartbeat(ctx, b).records)
        result = heartbeat(ctx, 0, want_shut_down=True)
        assert partition_change_count(result.records) <= N
        ctx.replay(result.records)
        if result.response.in_controlled_shutdown:
            cluster.update_controlled_shutdown_offset(0, ctx.next_offset - 1)
        led.append(len(rc.partitions_led_by_broker(0)))
        follows.append(len(rc.partitions_with_broker_in_isr(0)) - led[-1])
        if result.response.should_shut_down:
            assert result.response.is_fenced
            break
    assert led[:4] == [40, 20, 0, 0] and follows[:3] == [30, 30, 30]  # leaderships first
    assert rc.partitions_with_broker_in_isr(0) == [] and not ops.lifecycle.has_work()
    assert cluster.heartbeat_manager.controlled_shutdown_offset(0) is None  # fenced now
    assert first_offset is not None and first_offset < ctx.next_offset


def test_controlled_shutdown_waits_for_the_last_leadership_batch():
    """When the last leaderships move in a result of the stale-broker task (not a heartbeat),
    the next heartbeat does not grant the shutdown, even if every broker has read past the
    first batch: it raises the controlled shutdown offset; the one after may grant it."""
    ctx, ops, big = big_cluster(leads=30, follows=0)
    cluster = ctx.cluster_control
    first = heartbeat(ctx, 0, want_shut_down=True)
    ctx.replay(first.records)
    cluster.update_controlled_shutdown_offset(0, ctx.next_offset - 1)
    first_offset = cluster.heartbeat_manager.controlled_shutdown_offset(0)
    task = cluster.fence_stale_broker()  # continues the controlled shutdown: the last 10 leaderships
    assert partition_change_count(task.records) == 10
    ctx.replay(task.records)
    assert ctx.replication_control.partitions_led_by_broker(0) == []
    # brokers 1-3 report an offset past the first batch but before the task's
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, offset=first_offset).records)
    again = heartbeat(ctx, 0, want_shut_down=True)
    assert (again.response.in_controlled_shutdown, again.response.should_shut_down) == (True, False)
    ctx.replay(again.records)
    cluster.update_controlled_shutdown_offset(0, ctx.next_offset - 1)
    raised = cluster.heartbeat_manager.controlled_shutdown_offset(0)
    assert raised > first_offset
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, offset=raised - 1).records)
    assert not heartbeat(ctx, 0, want_shut_down=True).response.should_shut_down
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b, offset=raised).records)
    assert heartbeat(ctx, 0, want_shut_down=True).response.should_shut_down


def test_unclean_restart_of_a_big_broker_registers_once_its_cleanup_is_written():
    """ELR on: broker 0's previous incarnation is in 90 ISRs; its new incarnation's
    registration is refused (REQUEST_TIMED_OUT, nothing written) while the cleanup does not fit
    one result; the stale-broker task writes it in bounded results; the retry then registers
    atomically, and the end state is the one Kafka's single atomic batch gives."""
    ends = []
    for bound in (N, 10_000):
        ctx, ops, big = big_cluster(bound, elr=True)
        ctx.alter_topic_config("big", "min.insync.replicas", "2")
        ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)  # broker 0's session expired, nothing fenced yet
        for b in (1, 2, 3):
            ctx.replay(heartbeat(ctx, b).records)
        request = broker_registration(0, CLUSTER_ID)
        if bound == N:
            with pytest.raises(ApiError) as exc:
                ctx.cluster_control.register_broker(request, ctx.next_offset, ctx.feature_control.finalized_features())
            assert exc.value.error == Errors.REQUEST_TIMED_OUT
            assert ops.lifecycle.has_pending(ChangeKind.SHUTDOWN, 0) and ops.context.excluded(0, None)
            while (task := ctx.cluster_control.fence_stale_broker()).records:
                assert partition_change_count(task.records) <= N
                ctx.replay(task.records)
        result = ctx.cluster_control.register_broker(request, ctx.next_offset, ctx.feature_control.finalized_features())
        assert result.atomic and isinstance(result.records[-1].message, m.RegisterBrokerRecord)
        assert partition_change_count(result.records) == (0 if bound == N else 90)
        ctx.replay(result.records)
        assert not ops.lifecycle.pending() or all(c.kind is ChangeKind.LEADERLESS for c in ops.lifecycle.pending())
        assert ctx.replication_control.partitions_with_broker_in_isr(0) == []
        assert ctx.replication_control.partitions_with_broker_in_elr(0) == []
        ends.append({pid: (p.leader, p.isr, p.elr, p.last_known_elr) for pid, p in snapshot(ctx, big).items()})
    assert ends[0] == ends[1]


def test_unfencing_elects_leaderless_partitions_across_results():
    """RF 1 partitions on broker 0 (90 of them) lose their leader when it is fenced and get it
    back when it unfences: the unfence record first, then at most 20 elections per result; the
    task finishes the rest."""
    ctx, ops = make(n=N)
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    solo = ctx.create_test_topic("solo", [[0]] * 90).topic_id
    fence_via_task(ctx, 0)
    assert len(ctx.replication_control.partitions_with_no_leader()) == 90
    result = heartbeat(ctx, 0)
    assert isinstance(result.records[0].message, m.BrokerRegistrationChangeRecord)
    assert result.records[0].message.fenced == -1 and partition_change_count(result.records) == N
    ctx.replay(result.records)
    while (task := ctx.cluster_control.fence_stale_broker()).response:
        assert partition_change_count(task.records) <= N
        ctx.replay(task.records)
    ctx.replay(task.records)
    assert ctx.replication_control.partitions_with_no_leader() == []
    assert {p.leader for p in snapshot(ctx, solo).values()} == {0}


def test_offline_directory_moves_its_partitions_in_bounded_results():
    """Broker 0's directory holding 90 partitions goes offline: heartbeats move at most 20 per
    result, the broker is excluded for partitions in that directory meanwhile, and the
    registration change listing the remaining directory comes last."""
    ctx, ops = make(n=N)
    d_bad, d_good = Uuid.from_string("suitdzfTTdqoWcy8VqmkUg"), Uuid.from_string("yh3acnzGSeurSTj8aIhOjw")
    ctx.register_brokers_with_dirs({0: [d_bad, d_good], 1: [broker_dir(1)], 2: [broker_dir(2)]})
    ctx.unfence_brokers(0, 1, 2)
    big = ctx.create_test_topic("big", [[0, 1, 2]] * 90).topic_id
    ctx.replay([ApiMessageAndVersion(m.PartitionChangeRecord(topic_id=big, partition_id=p, directories=[
        d_bad, broker_dir(1), broker_dir(2)]), 2) for p in range(90)])
    results = []
    while True:
        result = heartbeat(ctx, 0, offline_dirs=[d_bad])
        assert partition_change_count(result.records) <= N
        results.append(result.records)
        ctx.replay(result.records)
        if ops.lifecycle.has_pending(ChangeKind.OFFLINE_DIRS, 0):
            assert ops.context.excluded(0, d_bad) and not ops.context.excluded(0, d_good)
        if any(isinstance(r.message, m.BrokerRegistrationChangeRecord) for r in result.records):
            break
    assert len(results) == 5 and results[-1][-1].message.log_dirs == [d_good]
    assert ctx.cluster_control.registration(0).directories == (d_good,)
    assert ctx.replication_control.partitions_led_by_broker(0) == []
    assert heartbeat(ctx, 0, offline_dirs=[d_bad]).records == []  # nothing new offline


def test_unregistering_a_big_broker_writes_the_unregister_record_last():
    ctx, ops, big = big_cluster()
    first = ctx.cluster_control.unregister_broker(0)
    assert partition_change_count(first.records) == N and all(
        isinstance(r.message, m.PartitionChangeRecord) for r in first.records)
    ctx.replay(first.records)
    assert ops.context.excluded(0, None)
    results = [first.records]
    while (task := ctx.cluster_control.fence_stale_broker()).response:
        results.append(task.records)
        ctx.replay(task.records)
    results.append(task.records)
    ctx.replay(task.records)
    unregister = [i for i, rs in enumerate(results) for r in rs if isinstance(r.message, m.UnregisterBrokerRecord)]
    assert len(unregister) == 1 and results[unregister[0]][-1].message == m.UnregisterBrokerRecord(
        broker_id=0, broker_epoch=100)
    assert ctx.cluster_control.registration(0) is None
    assert ctx.replication_control.partitions_with_broker_in_isr(0) == []


def test_a_live_broker_cancels_its_unfinished_fencing():
    """A broker whose fencing is half written heartbeats again: the fencing is dropped, the
    exclusion ends, it is unfenced (the unfence record) and may rejoin ISRs."""
    ctx, ops, big = big_cluster()
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b).records)
    ctx.replay(ctx.cluster_control.fence_stale_broker().records)
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0) and ctx.cluster_control.is_unfenced(0)
    back = heartbeat(ctx, 0)
    assert back.response.is_fenced is False
    ctx.replay(back.records)
    assert not ops.lifecycle.has_pending(ChangeKind.FENCE, 0) and not ops.context.excluded(0, None)
    moved = next(tp for tp in ctx.replication_control.partitions_led_by_broker(1))
    assert alter_isr(ctx, ops, 1, big, moved.partition_id, [1, 2, 0]).error_code == Errors.NONE


def test_renounce_drops_pending_changes_and_activation_sweeps_leaderless_partitions():
    """Pending changes are soft state: deactivate drops them (their records are reverted with
    the registry); a new activation starts with a sweep of the leaderless partitions."""
    ctx, ops, big = big_cluster()
    records: list[ApiMessageAndVersion] = []
    ops.handle_broker_fenced(0, records)
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0)
    ctx.cluster_control.deactivate()
    assert ops.lifecycle.pending() == [] and not ops.context.excluded(0, None)
    ctx.cluster_control.activate()
    assert [c.kind for c in ops.lifecycle.pending()] == [ChangeKind.LEADERLESS]
    result = ctx.cluster_control.fence_stale_broker()
    assert result.records == [] and result.response is False and ops.lifecycle.pending() == []


def test_a_change_of_a_re_registered_broker_is_dropped():
    """A pending fencing is for one registration epoch: once the broker has another (a new
    incarnation registered), the continuation drops it instead of fencing the new one."""
    ctx, ops, big = big_cluster(leads=30, follows=0)
    records: list[ApiMessageAndVersion] = []
    ops.handle_broker_fenced(0, records)
    ctx.replay(records)
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0)
    ctx.replay([ApiMessageAndVersion(m.RegisterBrokerRecord(
        broker_id=0, broker_epoch=500, incarnation_id=Uuid.random(), fenced=True, log_dirs=[broker_dir(0)],
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092,
                                                          security_protocol=0)]), 3)])
    result = ops.lifecycle.continue_pending()
    assert result.records == [] and result.response is False and ops.lifecycle.pending() == []


def test_one_result_never_changes_a_partition_twice():
    """A heartbeat that both fences the broker and reports its directory offline: Kafka
    computes both sets of changes from the same state (two records per partition); here the
    directory's changes stop at the first partition the fencing already changed, and finish
    from the replayed state on the next heartbeat (then the registration change)."""
    ctx, ops = make()
    d_bad, d_good = Uuid.from_string("suitdzfTTdqoWcy8VqmkUg"), Uuid.from_string("yh3acnzGSeurSTj8aIhOjw")
    ctx.register_brokers_with_dirs({0: [d_bad, d_good], 1: [broker_dir(1)], 2: [broker_dir(2)]})
    ctx.unfence_brokers(0, 1, 2)
    big = ctx.create_test_topic("big", [[0, 1, 2]] * 10).topic_id
    ctx.replay([ApiMessageAndVersion(m.PartitionChangeRecord(topic_id=big, partition_id=p, directories=[
        d_bad, broker_dir(1), broker_dir(2)]), 2) for p in range(10)])
    first = heartbeat(ctx, 0, want_fence=True, offline_dirs=[d_bad])
    changed = [(r.message.topic_id, r.message.partition_id) for r in first.records
               if isinstance(r.message, m.PartitionChangeRecord)]
    assert len(changed) == len(set(changed)) == 10
    assert [r.message.fenced for r in first.records if isinstance(r.message, m.BrokerRegistrationChangeRecord)] == [1]
    assert ops.lifecycle.has_pending(ChangeKind.OFFLINE_DIRS, 0)
    ctx.replay(first.records)
    second = heartbeat(ctx, 0, want_fence=True, offline_dirs=[d_bad])
    assert second.records == [ApiMessageAndVersion(m.BrokerRegistrationChangeRecord(
        broker_id=0, broker_epoch=100, log_dirs=[d_good]), 2)]
    ctx.replay(second.records)
    assert ctx.cluster_control.registration(0).directories == (d_good,) and not ops.lifecycle.has_work()


def test_the_stale_broker_task_keeps_fencing_while_changes_are_pending():
    """Two brokers' sessions expire together: the task's first run starts both fencings (both
    excluded at once, before any partition change is written), and the next runs write their
    changes together (a zone walk, ``test_zone_fencing.py``), so a big fencing never holds up
    the next one."""
    ctx, ops = make(n=N)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    ctx.create_test_topic("a", [[0, 2, 3]] * 50)
    ctx.create_test_topic("b", [[1, 2, 3]] * 50)
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (2, 3):
        ctx.replay(heartbeat(ctx, b).records)
    run1 = ctx.cluster_control.fence_stale_broker()
    ctx.replay(run1.records)
    assert run1.response and ops.lifecycle.has_pending(ChangeKind.FENCE, 0)
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 1) and ops.context.excluded(1, None)
    run2 = ctx.cluster_control.fence_stale_broker()
    ctx.replay(run2.records)
    assert partition_change_count(run2.records) == N
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0) and ops.lifecycle.has_pending(ChangeKind.FENCE, 1)
    assert ops.context.excluded(1, None)
    while (run := ctx.cluster_control.fence_stale_broker()).response:
        assert partition_change_count(run.records) <= N
        ctx.replay(run.records)
    ctx.replay(run.records)
    assert ctx.fenced_broker_ids() == {0, 1}
    assert ctx.replication_control.partitions_with_broker_in_isr(0) == []
    assert ctx.replication_control.partitions_with_broker_in_isr(1) == []


def test_a_pass_over_partitions_needing_nothing_is_bounded_too():
    """MV 3.6 (no ELR): broker 0 is the last ISR member of 100 RF 1 partitions, so fencing
    leaves it in their ISRs (without a leader).  When the fenced broker then asks to shut
    down, Kafka fences it again: 100 partitions to look at, none to change; one step looks at
    no more than 4 x the bound (80), so the fence record comes in the second result."""
    ctx, ops = make(MV.IBP_3_6_IV1, n=N)
    ctx.register_brokers(0, 1)
    ctx.unfence_brokers(0, 1)
    solo = ctx.create_test_topic("solo", [[0]] * 100).topic_id
    fence_via_task(ctx, 0)
    assert {(p.isr, p.leader) for p in snapshot(ctx, solo).values()} == {((0,), NO_LEADER)}
    shutdown = heartbeat(ctx, 0, want_shut_down=True)
    assert shutdown.response.should_shut_down and shutdown.records == []
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0)
    task = ctx.cluster_control.fence_stale_broker()
    assert [type(r.message) for r in task.records] == [m.BrokerRegistrationChangeRecord]
    assert not ops.lifecycle.has_work()


def test_quorum_min_isr_update_with_elr():
    """QuorumControllerTest.testMinIsrUpdateWithElr at the manager level: with ELR on and the
    cluster-level min.insync.replicas 2, brokers 2 and 3 are fenced, so foo and bar each keep
    ISR [1] and one ELR member.  Lowering min.insync.replicas to 1 for foo writes the config
    record and a ClearElrRecord for foo (the configuration manager's KAFKA-16540 hook), which
    empties foo's ELR; lowering the cluster level does the same for every topic (bar)."""
    ctx, ops = make(MV.IBP_4_0_IV1)
    ctx.replay([ApiMessageAndVersion(m.FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
                                     0)])
    configs = ctx.configuration_control
    configs.feature_control = ctx.feature_control
    ctx.register_brokers(1, 2, 3)
    ctx.unfence_brokers(1, 2, 3)
    foo = ctx.create_test_topic_placed("foo", 1, 3).topic_id
    bar = ctx.create_test_topic_placed("bar", 1, 3).topic_id
    ctx.replay([ApiMessageAndVersion(m.ConfigRecord(resource_type=4, resource_name="", name="min.insync.replicas",
                                                    value="2"), 0)])
    ctx.fence_brokers(2, 3)
    for topic_id in (foo, bar):
        assert part(ctx, topic_id, 0).isr == (1,) and len(part(ctx, topic_id, 0).elr) == 1
    for resource, topic_id, name in ((ConfigResource.topic("foo"), foo, "foo"), (ConfigResource.broker(""), bar, "")):
        result = configs.incremental_alter_configs({resource: {"min.insync.replicas": (AlterConfigOp.SET, "1")}},
                                                   True)
        assert [type(r.message) for r in result.records] == [m.ConfigRecord, m.ClearElrRecord]
        assert result.records[1].message.topic_name == name
        ctx.replay(result.records)
        p = part(ctx, topic_id, 0)
        assert (p.elr, p.isr) == ((), (1,))


def test_a_new_incarnation_does_not_inherit_the_old_ones_exclusion():
    """Broker 0's fencing is half written when its next incarnation registers: the
    registration writes the rest (it fits) before its RegisterBrokerRecord, and ends every
    change of the old incarnation, so the new one is not excluded from leading."""
    ctx, ops, big = big_cluster(leads=30, follows=0)
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b).records)
    ctx.replay(ctx.cluster_control.fence_stale_broker().records)
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0) and ops.context.excluded(0, None)
    result = ctx.cluster_control.register_broker(broker_registration(0, CLUSTER_ID), ctx.next_offset,
                                                 ctx.feature_control.finalized_features())
    assert partition_change_count(result.records) == 10
    assert isinstance(result.records[-1].message, m.RegisterBrokerRecord)
    ctx.replay(result.records)
    assert not ops.context.excluded(0, None)
    assert [c.kind for c in ops.lifecycle.pending()] in ([], [ChangeKind.LEADERLESS])
    assert ctx.replication_control.partitions_with_broker_in_isr(0) == []


def test_a_broker_whose_fence_record_is_not_replayed_yet_is_not_elected_by_the_next_change():
    """Found by the controller simulator (seed 83 with three changes per result): one run of
    the stale-broker task finishes broker 1's fencing -- its last partition change, then its
    fence record -- and in the same result starts fencing broker 2.  Broker 2's first change
    is to foo-0, whose ISR is [2] and ELR [1] (broker 1 left it in an earlier result): with
    the ISR empty the election looks at the ELR.  Broker 1's fence record is in the result but
    not replayed, and its fencing is no longer pending, so it counted as an acceptable leader
    and was elected, after its own fence record.  It must stay excluded until its fence record
    is replayed: foo-0 is left leaderless, with both in its ELR."""
    ctx, ops = make(elr=True, n=2)
    ctx.register_brokers(0, 1, 2, 3)
    ctx.unfence_brokers(0, 1, 2, 3)
    # broker 1 leads all three (foo-0 first); min.insync.replicas 2 puts who leaves into the ELR
    foo = ctx.create_test_topic("foo", [[1, 2], [1, 0], [1, 3]], configs={"min.insync.replicas": "2"}).topic_id
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (0, 2, 3):
        ctx.replay(heartbeat(ctx, b).records)
    first = ctx.cluster_control.fence_stale_broker()  # broker 1: foo-0 and foo-1, then a pause
    assert partition_change_count(first.records) == 2 and ops.lifecycle.has_pending(ChangeKind.FENCE, 1)
    ctx.replay(first.records)
    assert (part(ctx, foo, 0).leader, part(ctx, foo, 0).isr, part(ctx, foo, 0).elr) == (2, (2,), (1,))
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (0, 3):
        ctx.replay(heartbeat(ctx, b).records)
    second = ctx.cluster_control.fence_stale_broker()  # the rest of broker 1's fencing, then broker 2's
    kinds = [(type(r.message).__name__, getattr(r.message, "broker_id", None), getattr(r.message, "partition_id", None))
             for r in second.records]
    assert kinds == [("PartitionChangeRecord", None, 2), ("BrokerRegistrationChangeRecord", 1, None),
                     ("PartitionChangeRecord", None, 0), ("BrokerRegistrationChangeRecord", 2, None)]
    foo0 = second.records[2].message
    assert (foo0.leader, foo0.isr, foo0.eligible_leader_replicas) == (NO_LEADER, [], [1, 2])
    assert ops.context.excluded(1, None)  # until its fence record is replayed
    ctx.replay(second.records)
    assert not ops.context.excluded(1, None) and ctx.cluster_control.registration(1).fenced
    while (task := ctx.cluster_control.fence_stale_broker()).records:
        ctx.replay(task.records)
    assert ctx.fenced_broker_ids() == {1, 2}
    for pid, p in snapshot(ctx, foo).items():
        assert p.leader not in (1, 2) and not {1, 2} & set(p.isr), (pid, p)


def test_a_heartbeat_heard_before_the_fencing_continues_cancels_it():
    """Found by the controller simulator (seed 869): broker 0's fencing is half written when
    its heartbeat arrives; the RPC path records the contact at once (KAFKA-15019) and queues
    the heartbeat, but the stale-broker task's next run is ahead of it in the queue.  That run
    must not go on fencing a broker heard from within its session (it wrote the fence record
    of a live broker): it drops the fencing, as the heartbeat itself would."""
    ctx, ops, big = big_cluster()
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
    for b in (1, 2, 3):
        ctx.replay(heartbeat(ctx, b).records)
    ctx.replay(ctx.cluster_control.fence_stale_broker().records)
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0) and ops.context.excluded(0, None)
    assert ctx.cluster_control.track_broker_heartbeat(0, default_broker_epoch(0))  # contact; event queued
    task = ctx.cluster_control.fence_stale_broker()
    assert task.records == [] and not ops.lifecycle.has_pending(ChangeKind.FENCE, 0)
    assert not ops.context.excluded(0, None)
    back = heartbeat(ctx, 0)  # (its unfence record restates the registration's unfenced state)
    assert back.response.is_fenced is False
    ctx.replay(back.records)
    assert not ctx.cluster_control.registration(0).fenced
    assert not any(isinstance(r.message, m.BrokerRegistrationChangeRecord) and r.message.fenced == 1
                   for r in ctx.cluster_control.fence_stale_broker().records)


def test_a_fencing_started_after_other_changes_of_its_result_sees_the_leaderships_they_give():
    """Found by the controller simulator (seed 2868, two changes per result): one run of the
    stale-broker task first continues broker 5's unclean-restart cleanup, whose change to
    foo-0 (ISR [5], ELR [0, 4]) empties the ISR and elects broker 0 from the ELR; then, in the
    same result, it starts fencing broker 0, whose session expired.  That fencing looked for
    broker 0's partitions in the state before the result, where broker 0 is only in foo-0's
    ELR, found none, and wrote the fence record at once: broker 0 was committed fenced while
    leading foo-0.  Partitions the result's earlier records give the broker must be looked at
    too; they are not replayed yet, so the fencing stops before them and goes on in the next
    result, and its fence record comes only once broker 0 has left foo-0's ISR."""
    ctx, ops = make(elr=True, n=2)
    ctx.register_brokers(0, 1, 2, 3, 4, 5)
    ctx.unfence_brokers(0, 1, 2, 3, 4, 5)
    foo = ctx.create_test_topic("foo", [[5, 0, 4], [5, 1, 2], [5, 2, 3], [5, 3, 1]],
                                configs={"min.insync.replicas": "3"}).topic_id
    assert alter_isr(ctx, ops, 5, foo, 0, [5]).error_code == Errors.NONE  # 0 and 4 into the ELR
    assert (part(ctx, foo, 0).isr, part(ctx, foo, 0).elr) == ((5,), (0, 4))
    ctx.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)  # broker 0's session expires
    for b in (1, 2, 3, 4):
        ctx.replay(heartbeat(ctx, b).records)
    ctx.cluster_control.heartbeat_manager.remove_session(5, default_broker_epoch(5))  # (lost in a failover)
    with pytest.raises(ApiError) as refused:  # broker 5 restarts uncleanly: its cleanup does not fit one result
        ctx.cluster_control.register_broker(broker_registration(5, CLUSTER_ID), ctx.next_offset,
                                            ctx.feature_control.finalized_features())
    assert refused.value.error == Errors.REQUEST_TIMED_OUT
    first = ctx.cluster_control.fence_stale_broker()
    foo0 = [r.message for r in first.records
            if isinstance(r.message, m.PartitionChangeRecord) and r.message.partition_id == 0]
    assert [(r.leader, r.isr) for r in foo0] == [(0, [0])]  # the cleanup elects broker 0 from the ELR
    assert ops.lifecycle.has_pending(ChangeKind.FENCE, 0)  # broker 0's fencing started ...
    assert not any(isinstance(r.message, m.BrokerRegistrationChangeRecord) and r.message.fenced == 1
                   for r in first.records)  # ... but is not complete: foo-0 waits for the next result
    ctx.replay(first.records)
    while (task := ctx.cluster_control.fence_stale_broker()).records:
        ctx.replay(task.records)
    assert ctx.cluster_control.registration(0).fenced
    for pid, p in snapshot(ctx, foo).items():
        assert p.leader != 0 and 0 not in p.isr, (pid, p)
