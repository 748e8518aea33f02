"""In-process CPU of a whole controlled shutdown at one controller, split by phase: building the
lifecycle results (the wantShutDown heartbeats and ``continue_pending``, the records' encoding
included where a step encodes them), encoding what is left (``ApiMessageAndVersion.encode``, as
``QuorumController._replay_at`` does), and replaying them (runs of PartitionChangeRecords through
``ReplicationControlManager.replay_partition_changes``, as the controller's bulk replayer does).

    python benchmarks/bench_lifecycle_steps.py [--topics 300] [--partitions 100] [--rounds 3]

The shape is replication_bench's ``shutdown``: 3 brokers, RF 3, replicas rotated so broker 0
leads a third of the partitions and is in every ISR; broker 0 asks to shut down until the
answer says shouldShutDown.  No clock is wired, so results are sized by count (2,000 changes).
For an A/B, run it from a worktree of the other commit (``PYTHONPATH`` on it) in alternation.
Prints one JSON document: us per partition change for each phase and round, and the medians.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from support.replication import ReplicationControlTestContext, default_broker_epoch  # noqa: E402

from kraft_node.metadata.controller.partition_changes import (  # noqa: E402
    PartitionChangeOps,
    partition_change_count,
)
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402


def replay(ctx: ReplicationControlTestContext, records: list[Any]) -> None:
    """Runs of two or more PartitionChangeRecords in bulk, anything else one by one (what
    ``QuorumController.replay_many`` does with the bulk replayer the managers register)."""
    rc = ctx.replication_control
    i = 0
    while i < len(records):
        j = i
        while j < len(records) and type(records[j].message) is m.PartitionChangeRecord:
            j += 1
        if j - i > 1:
            rc.replay_partition_changes([r.message for r in records[i:j]])
            ctx.next_offset += j - i
            i = j
        else:
            ctx.replay(records[i:i + 1])
            i += 1


def one_round(topics: int, partitions: int) -> dict[str, float]:
    ctx = ReplicationControlTestContext()
    ops = PartitionChangeOps(ctx.replication_control, ctx.cluster_control, ctx.configuration_control,
                             ctx.feature_control)
    ctx.cluster_control.set_lifecycle(ops.lifecycle)
    ctx.register_brokers(0, 1, 2)
    ctx.unfence_brokers(0, 1, 2)
    for t in range(topics):
        ctx.create_test_topic(f"t{t}", [[(p + k) % 3 for k in range(3)] for p in range(partitions)])
    gc.collect()
    gc.freeze()  # as the controller server does: the state is not the collector's to walk
    build = encode = replayed = 0.0
    changes = 0
    epoch = default_broker_epoch(0)
    try:
        for _ in range(10_000):
            t0 = time.process_time()
            ctx.cluster_control.track_broker_heartbeat(0, epoch)
            result = ctx.cluster_control.process_broker_heartbeat(BrokerHeartbeatRequest(
                broker_id=0, broker_epoch=epoch, current_metadata_offset=ctx.next_offset, want_fence=False,
                want_shut_down=True))
            first = list(result.records)
            more = ops.lifecycle.continue_pending().records
            t1 = time.process_time()
            for r in first + more:
                r.encode()
            t2 = time.process_time()
            replay(ctx, first)
            replay(ctx, more)
            t3 = time.process_time()
            build += t1 - t0
            encode += t2 - t1
            replayed += t3 - t2
            made = partition_change_count(first) + partition_change_count(more)
            changes += made
            if result.response.should_shut_down or (changes and not made):
                break  # released, or nothing left to change (the harness commits nothing)
    finally:
        gc.unfreeze()
    return {"changes": changes, "build_us": build / changes * 1e6, "encode_us": encode / changes * 1e6,
            "replay_us": replayed / changes * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rounds = [one_round(args.topics, args.partitions) for _ in range(args.rounds)]
    keys = ("build_us", "encode_us", "replay_us")
    print(json.dumps({"changes": rounds[0]["changes"], "args": vars(args), "loadavg": os.getloadavg(),
                      "rounds": {k: [round(r[k], 2) for r in rounds] for k in keys},
                      "median": {k: round(statistics.median(r[k] for r in rounds), 2) for k in keys},
                      "median_total_us": round(statistics.median(sum(r[k] for k in keys) for r in rounds), 2)},
                     indent=1))


if __name__ == "__main__":
    main()
