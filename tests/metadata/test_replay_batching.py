"""Replaying the controller's records in batches of any size gives the state replaying them
one by one gives (Kafka's RecordTestUtils.TestThroughAllIntermediateImagesLeadingToFinalImageHelper,
which QuorumControllerTest.testToImages and every *ImageTest run over their record lists).

Why: a standby controller replays each committed batch through ``QuorumController.replay_many``,
which hands a run of consecutive PartitionRecords to ``ReplicationControlManager.replay_partitions``
in one call (new partitions of a topic indexed with one write per broker and directory).  Where
Raft cuts the log into batches is arbitrary, so every cut must lead to the same state, and the
state at every cut must be the one-by-one replay's at that offset.

The records come from driving the managers through a scenario that writes every record type of
topics, partitions and configs (issue 22): topics with configs, placed and manually assigned,
partitions added, fencing and unfencing in bounded results (three partition changes per
result), a controlled shutdown, AlterPartition shrinking and expanding an ISR, preferred and
unclean elections, reassignment started, completed and cancelled, ELR changes with
eligible.leader.replicas.version 1, ClearElrRecords for one topic and for all, topic deletion
and a name created again.  Each record is kept as it is replayed into the generating managers.

Then, as Kafka's helper does: for every split point k, a fresh controller replays the first k
records as one batch (its "first image"), then the rest in batches of size b, for b = 1..8 and b =
everything left; after each batch a registry snapshot is taken at the batch's last offset (as a
standby does).  The state after each batch, and once the run ends the state read back at each
snapshot, must equal the one-by-one replay's state at that offset; the final state's snapshot
records must digest as the one-by-one replay's do (sorted and hashed, as the simulator's
``state_digest`` compares controllers).  The states compared are the managers' values
(features, brokers, configs, every partition registration) and the ReplicationControlManager's
derived indexes, which the bulk path writes its own way and no snapshot record shows.

Kafka tries every batch size; 1..8 and "the rest" bound the cost: the scenario's 117 records
give about 1,000 replays from scratch and 40,000 state comparisons (about 10 s).
"""
from __future__ import annotations

import hashlib
from itertools import groupby
from typing import Any, Iterable

import pytest
from support.controller import broker_registration
from support.replication import CLUSTER_ID, ReplicationControlTestContext, broker_dir
from support.replication import run_stale_broker_task as run_task_to_end

from kraft_node.metadata.configs.resources import AlterConfigOp, ConfigResource
from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.partition_changes import PartitionChangeOps, partition_change_count
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    LeaderRecoveryState,
    ReplicationControlManager,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_node.protocol.generated.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.elect_leaders import ElectLeadersRequest
from kraft_node.raft.messages import LeaderAndEpoch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH

MV = MetadataVersion.latest_testing()
#: partition changes per broker lifecycle result while generating (so fencing, unfencing and the
#: controlled shutdown each take several results)
BOUND = 3
#: batch sizes tried after each split point, besides "everything left"
BATCH_SIZES = range(1, 9)
APR = AlterPartitionRequest
Reassign = AlterPartitionReassignmentsRequest


# ------------------------------------------------------------------ generating the records
class RecordingContext(ReplicationControlTestContext):
    """Kafka's ReplicationControlTestContext that keeps every record it replays, after the
    metadata.version record its constructor applies directly."""

    def __init__(self, metadata_version: MetadataVersion) -> None:
        super().__init__(metadata_version)
        self.log: list[ApiMessageAndVersion] = [ApiMessageAndVersion(
            m.FeatureLevelRecord(name="metadata.version", feature_level=metadata_version.feature_level), 0)]

    def replay(self, records: Iterable[ApiMessageAndVersion]) -> None:
        records = list(records)
        self.log.extend(records)
        super().replay(records)


def heartbeat(ctx: RecordingContext, broker_id: int, *, want_shut_down: bool = False) -> Any:
    """A caught-up heartbeat through the RPC path (contact first, then the event); replayed."""
    epoch = ctx.current_broker_epoch(broker_id)
    ctx.cluster_control.track_broker_heartbeat(broker_id, epoch)
    result = ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=ctx.next_offset, want_fence=False,
        want_shut_down=want_shut_down))
    assert partition_change_count(result.records) <= BOUND
    ctx.replay(result.records)
    return result.response


def run_stale_broker_task(ctx: RecordingContext) -> int:
    """The stale-broker task until it has nothing left to write, each result within the bound;
    how many results wrote."""
    results = run_task_to_end(ctx)
    assert all(partition_change_count(records) <= BOUND for records in results)
    return sum(1 for records in results if records)


def fence(ctx: RecordingContext, *broker_ids: int) -> None:
    """Let a session timeout pass with every other unfenced broker heartbeating; the task
    fences ``broker_ids``."""
    ctx.time.sleep(1001)
    for b, reg in sorted(ctx.cluster_control.brokers().items()):
        if b not in broker_ids and not reg.fenced:
            heartbeat(ctx, b)
    run_stale_broker_task(ctx)
    assert set(broker_ids) <= ctx.fenced_broker_ids()


def alter_isr(ctx: RecordingContext, ops: PartitionChangeOps, topic_id: Uuid, pid: int, isr: list[int]) -> Errors:
    """AlterPartition v3 from the partition's leader, at its current epochs; replayed."""
    p = ctx.partition(topic_id, pid)
    assert p is not None and p.leader != NO_LEADER
    result = ops.alter_partition(APR(broker_id=p.leader, broker_epoch=ctx.current_broker_epoch(p.leader), topics=[
        APR.TopicData(topic_id=topic_id, partitions=[APR.PartitionData(
            partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
            new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=ctx.current_broker_epoch(b))
                                 for b in isr])])]), 3)
    ctx.replay(result.records)
    return Errors(result.response.topics[0].partitions[0].error_code)


def elect(ctx: RecordingContext, ops: PartitionChangeOps, election_type: int, topic: str, pid: int) -> Errors:
    result = ops.elect_leaders(ElectLeadersRequest(election_type=election_type, topic_partitions=[
        ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[pid])]))
    ctx.replay(result.records)
    return Errors(result.response.replica_election_results[0].partition_result[0].error_code)


def reassign(ctx: RecordingContext, ops: PartitionChangeOps, topic: str, pid: int,
             replicas: list[int] | None) -> Errors:
    result = ops.alter_partition_reassignments(Reassign(allow_replication_factor_change=True, topics=[
        Reassign.ReassignableTopic(name=topic, partitions=[
            Reassign.ReassignablePartition(partition_index=pid, replicas=replicas)])]))
    ctx.replay(result.records)
    return Errors(result.response.responses[0].partitions[0].error_code)


def alter_min_isr(ctx: RecordingContext, resource: ConfigResource, value: str) -> None:
    result = ctx.configuration_control.incremental_alter_configs(
        {resource: {"min.insync.replicas": (AlterConfigOp.SET, value)}}, False)
    assert all(e.error == Errors.NONE for e in result.response.values()), result.response
    ctx.replay(result.records)


def scenario() -> list[ApiMessageAndVersion]:
    """Every record the scenario (module doc) writes, in order."""
    ctx = RecordingContext(MV)
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control, max_partition_changes_per_result=BOUND)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    ctx.configuration_control.feature_control = ctx.feature_control  # min.insync.replicas changes clear ELRs
    rc = ctx.replication_control
    ctx.replay([ApiMessageAndVersion(m.FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
                                     0)])
    brokers = (0, 1, 2, 3, 4, 5)
    ctx.register_brokers(*brokers)
    ctx.unfence_brokers(*brokers)
    ctx.replay([ApiMessageAndVersion(m.ConfigRecord(resource_type=4, resource_name="", name="min.insync.replicas",
                                                    value="2"), 0)])

    # topics: placed, manually assigned with configs, a small one; then partitions added
    foo = ctx.create_test_topic_placed("foo", 6, 3).topic_id
    bar = ctx.create_test_topic("bar", [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]],
                                configs={"min.insync.replicas": "2", "retention.ms": "3600000"}).topic_id
    baz = ctx.create_test_topic("baz", [[4, 5], [5, 0], [0, 4]]).topic_id
    ctx.create_partitions(9, "foo", [[3, 4, 5], [4, 5, 0], [5, 0, 1]], Errors.NONE)

    # AlterPartition: bar-0's leader drops a follower, then takes it back
    first = ctx.partition(bar, 0)
    assert first is not None
    follower = first.isr[-1]
    assert alter_isr(ctx, ops, bar, 0, [b for b in first.isr if b != follower]) == Errors.NONE
    assert alter_isr(ctx, ops, bar, 0, list(first.isr)) == Errors.NONE

    # brokers 1 and 2 stop heartbeating: fenced in bounded results, ISRs of RF 3 partitions
    # drop below min.insync.replicas 2 and their ELRs fill
    fence(ctx, 1, 2)
    assert ctx.fenced_broker_ids() == {1, 2}
    assert any(p.elr for t in (foo, bar) for p in rc.partitions(t).values())

    # broker 1 comes back: the unfence record first, then elections of leaderless partitions
    heartbeat(ctx, 1)
    run_stale_broker_task(ctx)

    # broker 3 shuts down cleanly: its controlled shutdown moves its leaderships in bounded
    # results; once every active broker has read past them it is told to shut down
    reply = heartbeat(ctx, 3, want_shut_down=True)
    assert reply.in_controlled_shutdown
    for _ in range(20):
        ctx.cluster_control.update_controlled_shutdown_offset(3, ctx.next_offset - 1)
        for b in (0, 1, 4, 5):
            heartbeat(ctx, b)
        if heartbeat(ctx, 3, want_shut_down=True).should_shut_down:
            break
    else:
        raise AssertionError("broker 3 was never told to shut down")
    assert rc.partitions_with_broker_in_isr(3) == []

    # broker 3 restarts cleanly and broker 2 uncleanly (new incarnations): registered, unfenced
    for b, previous in ((3, ctx.current_broker_epoch(3)), (2, -1)):
        request = broker_registration(b, CLUSTER_ID)
        request.incarnation_id = Uuid((b + 1) << 64 | 7)  # (deterministic: the records are the same each run)
        request.log_dirs = [broker_dir(b)]
        request.previous_broker_epoch = previous
        for _ in range(20):
            try:
                result = ctx.cluster_control.register_broker(request, ctx.next_offset,
                                                             ctx.feature_control.finalized_features())
                break
            except ApiError as e:  # the unclean restart's cleanup does not fit one result: the task writes it
                assert e.error == Errors.REQUEST_TIMED_OUT
                assert run_stale_broker_task(ctx) > 0
        else:
            raise AssertionError(f"broker {b} never registered")
        ctx.replay(result.records)
        run_stale_broker_task(ctx)
        heartbeat(ctx, b)
        run_stale_broker_task(ctx)

    # AlterPartition brings the returning brokers back into ISRs (clearing ELRs)
    for topic_id in (foo, bar):
        for pid, p in sorted(rc.partitions(topic_id).items()):
            if p.leader != NO_LEADER and set(p.isr) != set(p.replicas):
                alter_isr(ctx, ops, topic_id, pid, list(p.replicas))

    # elections: preferred where the leader is not the first replica; then unclean: qux-0 on
    # [5, 4] (min.insync.replicas 1, so a shrink leaves the ELR empty) shrinks to [5], broker 5
    # is fenced (ISR empty, ELR [5]), and broker 4, live but neither in the ISR nor the ELR, is
    # elected uncleanly (RECOVERING), then declares itself recovered through AlterPartition
    imbalanced = sorted((rc.topic_name(tp.topic_id), tp.partition_id) for tp in rc.imbalanced())
    assert imbalanced
    for name, pid in imbalanced[:3]:
        assert elect(ctx, ops, 0, name, pid) in (Errors.NONE, Errors.PREFERRED_LEADER_NOT_AVAILABLE)
    qux = ctx.create_test_topic("qux", [[5, 4]], configs={"min.insync.replicas": "1"}).topic_id
    assert alter_isr(ctx, ops, qux, 0, [5]) == Errors.NONE
    fence(ctx, 5)
    q = ctx.partition(qux, 0)
    assert q is not None and (q.leader, q.isr, q.elr) == (NO_LEADER, (), (5,))
    assert elect(ctx, ops, 1, "qux", 0) == Errors.NONE
    q = ctx.partition(qux, 0)
    assert q is not None and (q.leader, q.isr, q.leader_recovery_state) == (4, (4,), LeaderRecoveryState.RECOVERING)
    assert alter_isr(ctx, ops, qux, 0, [4]) == Errors.NONE
    heartbeat(ctx, 5)
    run_stale_broker_task(ctx)

    # reassignment: bar-1 [1, 2, 3] -> [0, 4, 5] started, completed by AlterPartition; bar-2
    # started and cancelled
    assert reassign(ctx, ops, "bar", 1, [0, 4, 5]) == Errors.NONE
    p = ctx.partition(bar, 1)
    assert p is not None and p.is_reassigning
    code = alter_isr(ctx, ops, bar, 1, list(p.replicas))
    assert code in (Errors.NONE, Errors.NEW_LEADER_ELECTED)
    p = ctx.partition(bar, 1)
    assert p is not None and not p.is_reassigning and p.replicas == (0, 4, 5)
    assert reassign(ctx, ops, "bar", 2, [5, 0, 1]) == Errors.NONE
    assert reassign(ctx, ops, "bar", 2, None) == Errors.NONE
    p = ctx.partition(bar, 2)
    assert p is not None and not p.is_reassigning and p.replicas == (2, 3, 4)

    # ELR cleared: min.insync.replicas of foo, then the cluster default
    alter_min_isr(ctx, ConfigResource.topic("foo"), "1")
    alter_min_isr(ctx, ConfigResource.broker(""), "1")

    # deletion, and the name again (a new topic id)
    ctx.delete_topic(baz)
    assert ctx.create_test_topic("baz", [[1, 2]]).topic_id != baz
    return ctx.log


@pytest.fixture(scope="module")
def records() -> list[ApiMessageAndVersion]:
    return scenario()


def test_the_scenario_writes_every_record_type_of_the_issue(records):
    kinds = {type(r.message) for r in records}
    assert {m.FeatureLevelRecord, m.RegisterBrokerRecord, m.BrokerRegistrationChangeRecord, m.ConfigRecord,
            m.TopicRecord, m.PartitionRecord, m.PartitionChangeRecord, m.ClearElrRecord,
            m.RemoveTopicRecord} <= kinds, kinds
    changes = [r.message for r in records if isinstance(r.message, m.PartitionChangeRecord)]
    assert any(c.eligible_leader_replicas for c in changes)  # ELR set ...
    assert any(c.eligible_leader_replicas == [] for c in changes)  # ... and cleared
    assert any(c.adding_replicas for c in changes) and any(c.removing_replicas == [] for c in changes)
    assert any(c.leader_recovery_state == LeaderRecoveryState.RECOVERING for c in changes)  # unclean
    assert any(isinstance(r.message, m.BrokerRegistrationChangeRecord) and r.message.in_controlled_shutdown == 1
               for r in records)
    assert {r.message.topic_name for r in records if isinstance(r.message, m.ClearElrRecord)} >= {"foo", ""}
    # runs of PartitionRecords for the bulk path (a creation's partitions)
    runs = [len(list(g)) for is_part, g in _runs(records) if is_part]
    assert max(runs) >= 6
    assert 100 <= len(records) <= 200, len(records)


def _runs(records: list[ApiMessageAndVersion]) -> Iterable[tuple[bool, Iterable[Any]]]:
    return groupby(records, key=lambda r: isinstance(r.message, m.PartitionRecord))


# ------------------------------------------------------------------ replaying them
class _NoRaft:
    """The Raft client of a controller that only replays (never active, never appends)."""

    def register_listener(self, listener: Any) -> None:
        pass

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(-1, 0)


_BOOTSTRAP = BootstrapMetadata.from_records(
    [ApiMessageAndVersion(m.FeatureLevelRecord(name="metadata.version", feature_level=MV.feature_level), 0)], "test")


def fresh_controller() -> QuorumController:
    """A controller with the default managers, as a process builds it."""
    def fatal(message: str, exc: BaseException | None) -> BaseException:
        raise AssertionError(f"fatal fault: {message}: {exc!r}")
    return QuorumController(node_id=1, cluster_id=CLUSTER_ID, raft=_NoRaft(),
                            queue=EventQueue(clock_ns=lambda: 0), clock_ms=lambda: 0, bootstrap=_BOOTSTRAP,
                            fatal_fault_handler=fatal)


def digest(ctl: QuorumController, epoch: int) -> str:
    """The controller's snapshot records at ``epoch``, sorted and hashed (as the simulator's
    ``state_digest`` compares controllers); "empty" before metadata.version."""
    if ctl.feature_control.metadata_version_or_none(epoch=epoch) is None:
        return "empty"
    h = hashlib.sha256()
    for value in sorted(ctl.snapshot_values(epoch)):
        h.update(len(value).to_bytes(4, "big"))
        h.update(value)
    return h.hexdigest()


def state(ctl: QuorumController, epoch: int) -> tuple[Any, ...]:
    """The controller's state at ``epoch`` as comparable values, cheaper than encoding it and
    stronger than its snapshot records: the finalized features, broker registrations, configs,
    every topic's partition registrations (every field), and the ReplicationControlManager's
    derived indexes, which the bulk path writes its own way (ISR and ELR members by broker,
    preferred-leader imbalance, reassignments, partitions by log directory)."""
    rc = ctl.replication_control
    dirs = rc.directories_to_partitions
    features = ctl.feature_control
    return (
        features.finalized_features(epoch=epoch) if features.metadata_version_or_none(epoch=epoch) else None,
        ctl.cluster_control.brokers(epoch=epoch),
        ctl.configuration_control.all_configs(epoch=epoch),
        {name: (topic_id, rc.partitions(topic_id, epoch=epoch)) for name, topic_id in rc.topics(epoch=epoch).items()},
        rc.brokers_to_isrs.to_dict(epoch=epoch),
        rc.brokers_to_elrs.to_dict(epoch=epoch),
        rc.imbalanced(epoch=epoch),
        rc.reassigning(epoch=epoch),
        {d: rc.partitions_in_directory(d, epoch=epoch) for d in dirs.keys(epoch)},
    )


def one_by_one(records: list[ApiMessageAndVersion]) -> tuple[list[tuple[Any, ...]], str]:
    """The reference: the state after the first i records for i in 0..n, replaying one record
    at a time (record i at offset i), and the final state's snapshot-record digest."""
    ctl = fresh_controller()
    states = [state(ctl, LATEST_EPOCH)]
    for offset, r in enumerate(records):
        ctl.replay(r.message, offset)
        states.append(state(ctl, LATEST_EPOCH))
    return states, digest(ctl, LATEST_EPOCH)


def replay_batch(ctl: QuorumController, messages: list[Any], base: int) -> None:
    """One committed batch as a standby replays it: the bulk path, then a registry snapshot
    at the batch's last offset."""
    ctl.replay_many(messages, lambda i: base + i)
    ctl.registry.get_or_create_snapshot(base + len(messages) - 1)


def test_one_by_one_replay_rebuilds_the_generating_state(records):
    """The reference replay ends in the state the scenario's own managers reached: the fresh
    controller's topics and partitions are theirs, and they keep the partition invariants."""
    ctl = fresh_controller()
    for offset, r in enumerate(records):
        ctl.replay(r.message, offset)
    rc = ctl.replication_control
    assert sorted(rc.topics()) == ["bar", "baz", "foo", "qux"]
    assert sum(len(rc.partitions(t)) for t in rc.topics().values()) == 9 + 4 + 1 + 1
    for name, topic_id in rc.topics().items():
        for pid, p in rc.partitions(topic_id).items():
            assert not set(p.isr) & set(p.elr), (name, pid, p)
            assert p.leader == NO_LEADER or p.leader in p.isr, (name, pid, p)


def check_batches(records: list[ApiMessageAndVersion], split_points: Iterable[int],
                  sizes: Iterable[int]) -> tuple[int, int]:
    """For each split point k: the first k records in one batch, then the rest in batches of
    each size (and of everything left); every state equals the one-by-one replay's (module
    doc).  (runs, states compared)."""
    messages = [r.message for r in records]
    n = len(messages)
    reference, final = one_by_one(records)
    sizes = list(sizes)
    runs = compared = 0
    for k in split_points:
        rest = n - k
        for size in sorted({s for s in sizes if s <= rest} | {max(rest, 1)}):
            ctl = fresh_controller()
            boundaries: list[int] = []
            if k:
                replay_batch(ctl, messages[:k], 0)
                boundaries.append(k)
            assert state(ctl, LATEST_EPOCH) == reference[k], f"the first {k} records in one batch"
            for start in range(k, n, size):
                end = min(n, start + size)
                replay_batch(ctl, messages[start:end], start)
                boundaries.append(end)
                assert state(ctl, LATEST_EPOCH) == reference[end], (
                    f"split at {k}, batches of {size}: the state after records [{start}, {end}) is not the "
                    f"one-by-one replay's")
            for end in boundaries:  # the registry snapshots read the same states
                assert state(ctl, end - 1) == reference[end], f"split at {k}, batches of {size}: at offset {end - 1}"
            compared += 2 * len(boundaries)
            assert digest(ctl, LATEST_EPOCH) == final, f"split at {k}, batches of {size}: the final snapshot records"
            runs += 1
    return runs, compared


def test_every_split_and_batch_size_reaches_every_intermediate_state(records):
    """Kafka's TestThroughAllIntermediateImagesLeadingToFinalImageHelper.test, over the
    controller's bulk replay path (module doc)."""
    n = len(records)
    reference, _ = one_by_one(records)
    assert sum(a != b for a, b in zip(reference, reference[1:])) > n // 2  # (the states do change)
    runs, compared = check_batches(records, range(n + 1), BATCH_SIZES)
    assert runs > 8 * (n - 8) and compared > n * n


def test_the_check_catches_a_bulk_replay_that_forgets_to_index_a_partition(records, monkeypatch):
    """The comparison can fail: a bulk path that leaves the last partition of a run out of
    the indexes (the one-by-one path, one partition per call, is unaffected) is caught."""
    add = ReplicationControlManager._add_new_partitions

    def forgetful(self: ReplicationControlManager, topic: Any, pids: list[int], regs: list[Any]) -> None:
        if len(pids) < 2:
            add(self, topic, pids, regs)
            return
        add(self, topic, pids[:-1], regs[:-1])
        topic.parts.put(pids[-1], regs[-1])

    monkeypatch.setattr(ReplicationControlManager, "_add_new_partitions", forgetful)
    with pytest.raises(AssertionError, match="is not the one-by-one replay's|in one batch"):
        check_batches(records, range(0, len(records) + 1, 10), [8])
