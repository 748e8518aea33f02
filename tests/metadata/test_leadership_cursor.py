"""The scan cursor of leadership.py's bounded broker changes, and what it bought: a change
starts from an O(topics) copy of the broker's index and hands out partitions in Kafka's order
(leaderships first), however the index changes under it; the exclusion sets follow every
mutation of the pending changes."""
from __future__ import annotations

from support.replication import ReplicationControlTestContext

from kraft_node.metadata.controller.leadership import ChangeKind, PendingChange, _Cursor, _PendingChanges
from kraft_node.metadata.controller.partition_changes import PartitionChangeOps, partition_change_count
from kraft_node.metadata.controller.replication_control import LEADER_FLAG, NO_LEADER, TopicIdPartition
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

A, B = Uuid.from_string("AAAAAAAAAAAAAAAAAAAAAA"), Uuid.from_string("BBBBBBBBBBBBBBBBBBBBBA")
GROUPS = [(A, (0, 1 | LEADER_FLAG, 2)), (B, (5 | LEADER_FLAG, 7))]


def drain(cursor: _Cursor) -> list[TopicIdPartition]:
    out = []
    while (tp := cursor.peek()) is not None:
        out.append(tp)
        cursor.advance()
    return out


def test_leaders_first_then_the_rest_in_index_order():
    assert drain(_Cursor(GROUPS, (True, False))) == [
        TopicIdPartition(A, 1), TopicIdPartition(B, 5), TopicIdPartition(A, 0), TopicIdPartition(A, 2),
        TopicIdPartition(B, 7)]
    assert drain(_Cursor(GROUPS)) == [TopicIdPartition(A, p) for p in (0, 1, 2)] + [
        TopicIdPartition(B, p) for p in (5, 7)]
    assert drain(_Cursor(GROUPS, (True,))) == [TopicIdPartition(A, 1), TopicIdPartition(B, 5)]
    assert drain(_Cursor([], (True, False))) == [] and drain(_Cursor.of([])) == []


def test_peek_does_not_consume_and_a_copy_moves_on_its_own():
    cursor = _Cursor(GROUPS, (True, False))
    assert cursor.peek() == cursor.peek() == TopicIdPartition(A, 1)
    cursor.advance()
    twin = cursor.copy()
    assert drain(twin)[0] == TopicIdPartition(B, 5)
    assert cursor.peek() == TopicIdPartition(B, 5)  # the original did not move
    cursor.advance()
    assert cursor.rest() == [TopicIdPartition(A, 0), TopicIdPartition(A, 2), TopicIdPartition(B, 7)]
    assert cursor.peek() is None


def test_the_index_copy_is_not_changed_by_later_replays():
    """The cursor walks the index as it was when the change started; a record replayed in
    between (here: broker 0 leaves one partition's ISR) does not change what it hands out."""
    ctx = ReplicationControlTestContext(None)
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    topic = ctx.create_test_topic("t", [[0, 1, 2], [1, 0, 2], [2, 1, 0]]).topic_id
    rc = ctx.replication_control
    cursor = _Cursor(rc.isr_entries_by_topic(0), (True, False))
    ctx.replay([ApiMessageAndVersion(m.PartitionChangeRecord(topic_id=topic, partition_id=1, isr=[1, 2]), 0)])
    assert [tp.partition_id for tp in drain(_Cursor(rc.isr_entries_by_topic(0)))] == [0, 2]
    assert drain(cursor) == [TopicIdPartition(topic, p) for p in (0, 1, 2)]
    assert drain(_Cursor(rc.isr_entries_by_topic(NO_LEADER), (True,))) == []


def test_the_exclusion_sets_follow_every_mutation():
    pending = _PendingChanges()

    def change(kind: ChangeKind, broker: int) -> PendingChange:
        return PendingChange(kind, broker, 1, [])
    for kind, broker in ((ChangeKind.FENCE, 1), (ChangeKind.CONTROLLED_SHUTDOWN, 2), (ChangeKind.OFFLINE_DIRS, 3),
                         (ChangeKind.UNREGISTER, 4), (ChangeKind.SHUTDOWN, 5)):
        pending[(kind, broker)] = change(kind, broker)
    assert pending.excluding == {1, 4, 5} and pending.offline == {3}
    del pending[(ChangeKind.FENCE, 1)]
    assert pending.pop((ChangeKind.UNREGISTER, 4)).broker_id == 4
    assert pending.pop((ChangeKind.UNREGISTER, 4), None) is None
    assert pending.excluding == {5} and pending.offline == {3}
    pending.clear()
    assert pending.excluding == frozenset() and pending.offline == frozenset() and not pending


def test_the_first_step_of_a_big_controlled_shutdown_lists_nothing_up_front(monkeypatch):
    """The event that starts a controlled shutdown of a broker in 3,000 ISRs reads the index
    per topic (30 groups), never the per-partition lists the old scan built; the change then
    goes leaderships first, within the bound, to Kafka's end state."""
    ctx = ReplicationControlTestContext(None)
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control, max_partition_changes_per_result=100)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    rows = [[(i + k) % 3 for k in range(3)] for i in range(100)]
    for t in range(30):
        ctx.create_test_topic(f"t{t}", rows)
    rc = ctx.replication_control

    def refuse(*_a, **_k):
        raise AssertionError("a per-partition list of the broker's index was built")
    monkeypatch.setattr(rc, "partitions_with_broker_in_isr", refuse)
    monkeypatch.setattr(rc, "partitions_led_by_broker", refuse)
    led = {tp for tp in rc.brokers_to_isrs.partitions_led_by_broker(0)}
    assert len(led) == 30 * 34  # rows 0, 3, ..., 99 of each topic
    seen_led_after_follower = False
    moved_follower = False
    while True:
        result = ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=0, broker_epoch=ctx.current_broker_epoch(0), current_metadata_offset=ctx.next_offset,
            want_fence=False, want_shut_down=True))
        assert partition_change_count(result.records) <= 100
        for r in result.records:
            tp = TopicIdPartition(getattr(r.message, "topic_id", None), getattr(r.message, "partition_id", -1))
            if tp in led:
                seen_led_after_follower |= moved_follower
            elif isinstance(r.message, m.PartitionChangeRecord):
                moved_follower = True
        ctx.replay(result.records)
        if result.response.in_controlled_shutdown:
            ctx.cluster_control.update_controlled_shutdown_offset(0, ctx.next_offset - 1)
        for b in (1, 2):
            ctx.replay(ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
                broker_id=b, broker_epoch=ctx.current_broker_epoch(b), current_metadata_offset=ctx.next_offset,
                want_fence=False, want_shut_down=False)).records)
        if result.response.should_shut_down:
            break
    assert not seen_led_after_follower and moved_follower
    assert list(rc.brokers_to_isrs.partitions_with_broker_in_isr(0)) == []
