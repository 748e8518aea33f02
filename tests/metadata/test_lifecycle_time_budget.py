"""Broker lifecycle results sized by time (``PartitionChangeContext.clock_ns`` and
``result_build_budget_ns``, session 20): on a running controller a result stops building once
its budget of the controller thread's CPU time is spent, well before the count bound; without a clock (the
simulator's case, and these managers' default) the count alone sizes it.

What must hold: a result never passes the count bound; with a clock it ends at the first clock
reading past the deadline (read every ``BUDGET_CHECK_EVERY`` changes made); the changes go on in
later results to the same end state as count-sized results; the zone walk obeys it too.
"""
from __future__ import annotations

from typing import Any

from support.replication import (
    BROKER_SESSION_TIMEOUT_MS,
    ReplicationControlTestContext,
    default_broker_epoch,
    run_stale_broker_task,
)

from kraft_node.metadata.controller.partition_changes import (
    BUDGET_CHECK_EVERY,
    MAX_PARTITION_CHANGES_PER_RESULT,
    RESULT_BUILD_BUDGET_NS,
    PartitionChangeOps,
    partition_change_count,
)
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest

BROKERS = [0, 1, 2, 3, 4, 5]
#: each reading of the fake clock moves it this far: the budget is spent after
#: RESULT_BUILD_BUDGET_NS // TICK_NS readings past the one that set the deadline
TICK_NS = 1_000_000


class TickingClock:
    """A clock that moves ``TICK_NS`` every time it is read (a controller busy building)."""

    def __init__(self) -> None:
        self.now = 0
        self.readings = 0

    def __call__(self) -> int:
        self.now += TICK_NS
        self.readings += 1
        return self.now


def make(clock: TickingClock | None, topics: int = 12, partitions: int = 100
         ) -> tuple[ReplicationControlTestContext, PartitionChangeOps]:
    ctx = ReplicationControlTestContext()
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control)
    ops.context.clock_ns = clock
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    ctx.register_brokers(*BROKERS)
    ctx.unfence_brokers(*BROKERS)
    for t in range(topics):
        ctx.create_test_topic(f"t{t}", [[(p + k) % 6 for k in range(3)] for p in range(partitions)])
    return ctx, ops


def heartbeat(ctx: ReplicationControlTestContext, broker_id: int, *, want_shut_down: bool = False) -> Any:
    epoch = default_broker_epoch(broker_id)
    ctx.cluster_control.track_broker_heartbeat(broker_id, epoch)
    return ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=ctx.next_offset,
        want_fence=False, want_shut_down=want_shut_down))


def controlled_shutdown(ctx: ReplicationControlTestContext, broker_id: int) -> list[int]:
    """Drive a controlled shutdown of ``broker_id`` to its release (its heartbeats and the
    stale-broker task carry the changes); the partition changes of each result."""
    sizes = []
    for _ in range(1000):
        result = heartbeat(ctx, broker_id, want_shut_down=True)
        sizes.append(partition_change_count(result.records))
        ctx.replay(result.records)
        if result.response.should_shut_down:
            return [s for s in sizes if s]
        if result.response.in_controlled_shutdown:
            ctx.cluster_control.update_controlled_shutdown_offset(broker_id, ctx.next_offset - 1)
        for b in BROKERS:
            if b != broker_id:
                ctx.replay(heartbeat(ctx, b).records)
        task = ctx.cluster_control.fence_stale_broker()
        sizes.append(partition_change_count(task.records))
        ctx.replay(task.records)
    raise AssertionError(f"broker {broker_id} was never released")


def state(ctx: ReplicationControlTestContext) -> dict[Any, Any]:
    rc = ctx.replication_control
    topics = [rc.topic(topic_id) for topic_id in rc.topics().values()]
    return {(t.name, p): (r.leader, r.isr, r.elr, r.last_known_elr)
            for t in topics for p, r in sorted(t.partitions().items())}


def in_isr(ctx: ReplicationControlTestContext, broker_id: int) -> int:
    return len(list(ctx.replication_control.brokers_to_isrs.partitions_with_broker_in_isr(broker_id)))


def test_without_a_clock_the_count_alone_sizes_a_result():
    ctx, ops = make(None)
    assert ops.context.result_deadline_ns() is None and not ops.context.past(None)
    n = in_isr(ctx, 0)
    assert 500 < n < MAX_PARTITION_CHANGES_PER_RESULT  # 588 of the 1,200 partitions
    # one result takes them all
    assert controlled_shutdown(ctx, 0) == [n]


def test_a_clock_ends_each_result_at_its_budget_and_the_end_state_is_the_same():
    clock = TickingClock()
    ctx, ops = make(clock)
    by_count, _ = make(None)
    n = in_isr(ctx, 0)
    sizes = controlled_shutdown(ctx, 0)
    controlled_shutdown(by_count, 0)
    # the deadline is set by one reading; the budget is spent at the RESULT_BUILD_BUDGET_NS //
    # TICK_NS-th reading after it, one every BUDGET_CHECK_EVERY changes made
    per_result = (RESULT_BUILD_BUDGET_NS // TICK_NS) * BUDGET_CHECK_EVERY
    assert sum(sizes) == n
    assert max(sizes) == per_result and len(sizes) == -(-n // per_result)
    assert clock.readings > 0
    assert state(ctx) == state(by_count)
    assert list(ctx.replication_control.brokers_to_isrs.partitions_with_broker_in_isr(0)) == []


def test_the_count_still_caps_a_result_whose_clock_never_runs_out():
    ctx, ops = make(TickingClock())
    ops.context.result_build_budget_ns = 10**18
    ops.context.max_partition_changes_per_result = 250
    n = in_isr(ctx, 0)
    assert controlled_shutdown(ctx, 0) == [250, 250, n - 500]


def test_a_zone_walk_stops_at_its_budget_too():
    clock = TickingClock()
    ctx, ops = make(clock)
    by_count, _ = make(None)
    results = []
    for c in (ctx, by_count):
        c.time.sleep(BROKER_SESSION_TIMEOUT_MS + 1)
        for b in (2, 3, 4, 5):
            c.replay(heartbeat(c, b).records)
        results.append([partition_change_count(r) for r in run_stale_broker_task(c)])
    timed, counted = results
    per_result = (RESULT_BUILD_BUDGET_NS // TICK_NS) * BUDGET_CHECK_EVERY
    assert sum(timed) == sum(counted) > per_result
    # a partition with both zone brokers in its ISR adds two changes at once, so each reading
    # may come up to one change late
    assert max(timed) <= per_result + RESULT_BUILD_BUDGET_NS // TICK_NS
    assert len([s for s in timed if s]) > len([s for s in counted if s])
    assert state(ctx) == state(by_count)
    assert {0, 1} <= ctx.fenced_broker_ids()
