"""``ReplicationControlManager.replay_partition_changes`` (the bulk replay of runs of
PartitionChangeRecords) against replaying the same records one by one: the same partitions,
the same ISR index -- the order of its brokers, topics and entries included, which the
lifecycle cursors walk -- the same imbalanced set and election counters, and a record that
does not fit named by its index with every record before it applied."""
from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.replication import ReplicationControlTestContext, creatable_topic, create_topics_request, find_result

from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    PartitionReplayError,
)
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

BROKERS = list(range(5))


def _worlds(layout: list[list[list[int]]]
            ) -> tuple[ReplicationControlTestContext, ReplicationControlTestContext, list[Uuid]]:
    """Two controllers' state made of the same records: the topics of ``layout`` (one list of
    replica lists per topic)."""
    one, two = ReplicationControlTestContext(), ReplicationControlTestContext()
    ids = []
    for ctx in (one, two):
        ctx.register_brokers(*BROKERS)
        ctx.unfence_brokers(*BROKERS)
    for t, parts in enumerate(layout):
        result = one.replication_control.create_topics(
            create_topics_request(creatable_topic(f"t{t}", assignments=parts)), {f"t{t}"})
        topic = find_result(result.response, f"t{t}")
        assert topic.error_code == 0, topic.error_message
        ids.append(topic.topic_id)
        one.replay(result.records)
        two.replay(result.records)
    return one, two, ids


def _state(ctx: ReplicationControlTestContext) -> Any:
    rc = ctx.replication_control
    parts = {tid: list(t.parts.items()) for tid, t in rc.topics_by_id.items()}
    isrs = [(b, list(tm.items())) for b, tm in rc.brokers_to_isrs._members.items()]
    elrs = [(b, list(tm.items())) for b, tm in rc.brokers_to_elrs._members.items()]
    return (parts, isrs, elrs, list(rc.imbalanced_partitions), rc.unclean_leader_elections.get(),
            rc.elections_from_elr.get(), list(rc.reassigning_topics.items()))


@st.composite
def scenarios(draw: Any) -> tuple[list[list[list[int]]], list[tuple[int, int, dict[str, Any]]]]:
    layout = []
    for _ in range(draw(st.integers(1, 3))):
        n, rf = draw(st.integers(1, 6)), draw(st.integers(1, 4))
        layout.append([list(draw(st.permutations(BROKERS))[:rf]) for _ in range(n)])
    changes = []
    for _ in range(draw(st.integers(1, 30))):
        t = draw(st.integers(0, len(layout) - 1))
        pid = draw(st.integers(0, len(layout[t]) - 1))
        replicas = layout[t][pid]
        fields: dict[str, Any] = {}
        if draw(st.integers(0, 3)):
            fields["isr"] = [r for r in draw(st.permutations(replicas)) if draw(st.integers(0, 2))]
        fields["leader"] = draw(st.sampled_from([NO_LEADER_CHANGE, NO_LEADER] + replicas))
        if draw(st.integers(0, 9)) == 0:  # a shape the bulk path leaves to the one-by-one replay
            fields[draw(st.sampled_from(["eligible_leader_replicas", "leader_recovery_state", "replicas"]))] = None
        changes.append((t, pid, fields))
    return layout, changes


def _records(ids: list[Uuid], changes: list[tuple[int, int, dict[str, Any]]], layout: list[list[list[int]]]) -> list:
    out = []
    for t, pid, fields in changes:
        f = dict(fields)
        if "eligible_leader_replicas" in f:
            f["eligible_leader_replicas"] = []
        if "leader_recovery_state" in f:
            f["leader_recovery_state"] = 0
        if "replicas" in f:
            f["replicas"] = list(layout[t][pid])
            f["directories"] = None
        out.append(m.PartitionChangeRecord(topic_id=ids[t], partition_id=pid, **f))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_short_replay_one_by_one_leaves_the_general_state(scenario: Any) -> None:
    """``_replay_simple_change`` (ISR/leader-only records one by one) against ``merge`` and
    the general index upkeep."""
    layout, changes = scenario
    general, short, ids = _worlds(layout)
    general.replication_control.fast_simple_changes = False
    for r in _records(ids, changes, layout):
        general.replication_control.replay(r, -1)
        short.replication_control.replay(r, -1)
    assert _state(short) == _state(general)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_bulk_replay_leaves_the_one_by_one_state(scenario: Any) -> None:
    layout, changes = scenario
    one, bulk, ids = _worlds(layout)
    one.replication_control.fast_simple_changes = False  # the reference: merge and the general upkeep
    records = _records(ids, changes, layout)
    for r in records:
        one.replication_control.replay(r, -1)
    bulk.replication_control.replay_partition_changes(records)
    assert _state(bulk) == _state(one)


def test_a_controlled_shutdown_run_is_replayed_in_bulk_and_equal() -> None:
    """Broker 0 leaves 40 ISRs of one topic (leading a third): one run, same state."""
    layout = [[[(p + k) % 3 for k in range(3)] for p in range(40)]]
    one, bulk, ids = _worlds(layout)
    records = []
    for pid, replicas in enumerate(layout[0]):
        isr = [r for r in replicas if r != 0]
        records.append(m.PartitionChangeRecord(topic_id=ids[0], partition_id=pid, isr=isr,
                                               leader=isr[0] if replicas[0] == 0 else NO_LEADER_CHANGE))
    rc = bulk.replication_control
    calls = []
    original = rc.replay
    rc.replay = lambda msg, off: (calls.append(msg), original(msg, off))  # type: ignore[method-assign]
    rc.replay_partition_changes(records)
    assert calls == []  # no record went one by one
    for r in records:
        one.replication_control.replay(r, -1)
    assert _state(bulk) == _state(one)
    assert 0 not in dict(rc.brokers_to_isrs.to_dict())


def test_a_zone_run_whose_new_leaders_held_one_entry_of_the_topic_is_replayed_in_bulk_and_equal() -> None:
    """A zone's fencing, topic by topic: broker 0 leaves every ISR of topic t0, and where it led,
    the next replica -- which holds that partition as its only entry of t0, but has entries of
    t1 -- becomes leader (its entry ``p`` becomes ``p | LEADER``: its t0 entries are empty for a
    moment, so one by one t0 moves to the end of its map).  One run, no record one by one, the
    same state (the maps' order included)."""
    layout = [[[0, 1, 3], [0, 2, 4]], [[1, 2, 3], [2, 3, 1], [3, 1, 2]]]
    one, bulk, ids = _worlds(layout)
    records = [m.PartitionChangeRecord(topic_id=ids[0], partition_id=p, isr=layout[0][p][1:], leader=layout[0][p][1])
               for p in range(2)]
    rc = bulk.replication_control
    calls = []
    original = rc.replay
    rc.replay = lambda msg, off: (calls.append(msg), original(msg, off))  # type: ignore[method-assign]
    rc.replay_partition_changes(records)
    assert calls == []
    one.replication_control.fast_simple_changes = False
    for r in records:
        one.replication_control.replay(r, -1)
    assert _state(bulk) == _state(one)
    # the order did change: t0 is now after t1 in broker 1's map
    assert [t for t, _ in rc.brokers_to_isrs.entries_by_topic(1)] == [ids[1], ids[0]]


def test_a_record_that_does_not_fit_is_named_with_the_ones_before_applied() -> None:
    layout = [[[0, 1, 2]] * 4]
    one, bulk, ids = _worlds(layout)
    records = [m.PartitionChangeRecord(topic_id=ids[0], partition_id=p, isr=[1, 2], leader=1) for p in range(3)]
    records.append(m.PartitionChangeRecord(topic_id=ids[0], partition_id=9, isr=[1], leader=1))
    records.append(m.PartitionChangeRecord(topic_id=ids[0], partition_id=3, isr=[1], leader=1))
    with pytest.raises(PartitionReplayError) as info:
        bulk.replication_control.replay_partition_changes(records)
    assert info.value.index == 3
    for r in records[:3]:
        one.replication_control.replay(r, -1)
    assert _state(bulk) == _state(one)
    with pytest.raises(PartitionReplayError) as info:
        bulk.replication_control.replay_partition_changes([records[4], m.PartitionChangeRecord(
            topic_id=Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAQ"), partition_id=0, isr=[1], leader=1)])
    assert info.value.index == 1


@settings(max_examples=500, deadline=None)
@given(st.permutations(BROKERS), st.integers(1, 5), st.data())
def test_merge_of_an_isr_leader_change_equals_the_general_merge(order: list[int], rf: int, data: Any) -> None:
    """``PartitionRegistration.merge``'s short way (ISR and leader only) against ``merge_general``."""
    from kraft_node.metadata.controller.replication_control import (
        DirectoryId,
        LeaderRecoveryState,
        PartitionRegistration,
    )
    replicas = tuple(order[:rf])
    dirs = data.draw(st.sampled_from([DirectoryId.migrating_tuple(rf), tuple(Uuid((7 << 64) | r) for r in replicas)]))
    isr = tuple(r for r in replicas if data.draw(st.booleans()))
    prev = PartitionRegistration(replicas, dirs, isr, (), (), data.draw(st.sampled_from(list(isr) + [NO_LEADER])),
                                 data.draw(st.sampled_from(list(LeaderRecoveryState))), data.draw(st.integers(0, 9)),
                                 data.draw(st.integers(0, 9)), elr=tuple(r for r in replicas if r not in isr)[:1])
    fields: dict[str, Any] = {"leader": data.draw(st.sampled_from([NO_LEADER_CHANGE, NO_LEADER, *replicas]))}
    if data.draw(st.booleans()):
        fields["isr"] = [r for r in replicas if data.draw(st.booleans())]
    change = m.PartitionChangeRecord(topic_id=Uuid((1 << 64) | 5), partition_id=0, **fields)
    assert prev.merge(change) == prev.merge_general(change)
