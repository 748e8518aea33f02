"""AlterPartition in slices under the controller simulator's faults (``kraft_node.metadata.controller.sim``):
the controller answers every AlterPartition through ``AlterPartitionManager.submit`` (as
``QuorumController.alter_partition`` does once wired to it) with one partition per event, so every
multi-partition request interleaves with heartbeats, fencings, admin writes, failovers and snapshot
loads; the simulator's invariants (answers equal the committed partition, ISR safety, epochs, standbys,
convergence after healing) must hold on every seed.
"""
from __future__ import annotations

from typing import Any

import pytest

from kraft_node.metadata.controller import alter_partition
from kraft_node.metadata.controller.alter_partition import AlterPartitionManager, AlterPartitionWrite
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.sim import run_seed

SEEDS = range(100, 140)


@pytest.fixture
def one_partition_an_event(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    counts = {"requests": 0, "continuations": 0}

    def through_submit(self: QuorumController, request: Any, version: int, *,
                       deadline_ns: int | None = None) -> Any:
        counts["requests"] += 1
        return self.partition_ops.alter_partitions.submit(self, request, version, deadline_ns=deadline_ns)

    queue = AlterPartitionWrite._queue

    def counting(self: AlterPartitionWrite, *, first: bool) -> None:
        if not first:
            counts["continuations"] += 1
        queue(self, first=first)

    monkeypatch.setattr(alter_partition, "MAX_COST_PER_EVENT", 1)
    monkeypatch.setattr(QuorumController, "alter_partition", through_submit)
    monkeypatch.setattr(AlterPartitionWrite, "_queue", counting)
    return counts


def test_sliced_alter_partition_keeps_the_simulators_invariants(one_partition_an_event: dict[str, int]) -> None:
    failures = []
    for seed in SEEDS:
        try:
            run_seed(seed)
        except Exception as e:  # noqa: BLE001 - every failing seed is reported
            failures.append(f"seed {seed}: {type(e).__name__}: {e}"[:400])
    assert not failures, "\n".join(failures)
    # the seeds did send multi-partition requests, answered over several events
    assert one_partition_an_event["requests"] > 0 and one_partition_an_event["continuations"] > 0, \
        one_partition_an_event


def test_the_simulator_checks_the_answers_of_later_slices(one_partition_an_event: dict[str, int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutation: partitions answered by a slice after the first get a leader epoch they never
    had.  The simulator's answer check must report it (so the seeds above do check what the
    later slices answer)."""
    alter = AlterPartitionManager.alter_slice

    def off_by_one(self: AlterPartitionManager, request: Any, version: int, cursor: tuple[int, int],
                   max_cost: int | None, records: list[Any], answers: list[tuple[int, Any]],
                   deadline_ns: int | None = None) -> tuple[int, int] | None:
        start = len(answers)
        later = cursor != (0, 0)
        after = alter(self, request, version, cursor, max_cost, records, answers, deadline_ns)
        for _, p in answers[start:]:
            if later and p.error_code == 0:
                p.leader_epoch += 1
        return after
    monkeypatch.setattr(AlterPartitionManager, "alter_slice", off_by_one)
    reported = []
    for seed in SEEDS:
        try:
            run_seed(seed)
        except Exception as e:  # noqa: BLE001 - looking for the answer check's report
            reported.append(str(e))
            if "was answered (leader, ISR, leader epoch, recovery state)" in str(e):
                return
    raise AssertionError(f"no seed reported the wrong answers; other failures: {reported[:3]}")
