"""In-process CPU cost of a broker lifecycle change's partition changes, old path against new,
alternating in the same process (so the machine's load hits both alike):

* build: ``PartitionChangeContext.partition_update`` (a PartitionChangeBuilder per partition)
  against ``lifecycle_bulk.BulkLifecycleChanges.update``;
* replay: ``ReplicationControlManager.replay`` one record at a time through ``merge`` and the
  general index upkeep (``fast_simple_changes`` off: the path before this session), one record at
  a time through the short path of ISR/leader-only records, and ``replay_partition_changes``
  (the bulk replayer), each on its own copy of the same state.

    python benchmarks/bench_lifecycle_bulk.py [--topics 300] [--partitions 100] [--brokers 3] [--rounds 3]

The shape is replication_bench's ``shutdown``: ``--brokers`` brokers, RF 3, replicas rotated
so broker 0 leads a third of the partitions and is in every ISR (``--brokers 3``); the change
takes broker 0 out of every ISR (in controlled shutdown: not an acceptable leader).  The
records are replayed in results of ``--per-result`` (default 200, the controller's bound).
Prints one JSON document: us per change for each path and round, and the ratios of medians.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from support.replication import (  # noqa: E402
    ReplicationControlTestContext,
    creatable_topic,
    create_topics_request,
    find_result,
)

from kraft_node.metadata.controller.lifecycle_bulk import BulkLifecycleChanges  # noqa: E402
from kraft_node.metadata.controller.partition_changes import PartitionChangeOps  # noqa: E402
from kraft_node.metadata.controller.replication_control import NO_LEADER  # noqa: E402


def world(topics: int, partitions: int, brokers: int) -> tuple[list[ReplicationControlTestContext],
                                                                 PartitionChangeOps]:
    """Three identical controllers' state (one per replay path), broker 0 in controlled
    shutdown, and the PartitionChangeOps of the first."""
    ctxs = [ReplicationControlTestContext() for _ in range(3)]
    one = ctxs[0]
    for ctx in ctxs:
        ctx.register_brokers(*range(brokers))
        ctx.unfence_brokers(*range(brokers))
    for t in range(topics):
        name = f"t{t:05d}"
        parts = [[(p + k) % brokers for k in range(3)] for p in range(partitions)]
        result = one.replication_control.create_topics(create_topics_request(creatable_topic(name, assignments=parts)),
                                                       {name})
        assert find_result(result.response, name).error_code == 0
        for ctx in ctxs:
            ctx.replay(result.records)
    for ctx in ctxs:
        ctx.in_controlled_shutdown_brokers(0)
    rc = one.replication_control
    ops = PartitionChangeOps(rc, one.cluster_control, one.configuration_control, one.feature_control)
    return ctxs, ops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--per-result", type=int, default=200)
    args = ap.parse_args()
    rows: dict[str, list[float]] = {"build_builder_us": [], "build_bulk_us": [], "replay_general_us": [],
                                    "replay_short_us": [], "replay_bulk_us": []}
    for _ in range(args.rounds):
        ctxs, ops = world(args.topics, args.partitions, args.brokers)
        # as the controller server does after every 10,000 records: the state is not the GC's
        # to walk, so whichever path runs when a full collection triggers is not charged for it
        gc.collect()
        gc.freeze()
        rc = ctxs[0].replication_control
        ctx = ops.context
        items = []
        for tp in rc.partitions_with_broker_in_isr(0):
            topic = rc.topic(tp.topic_id)
            assert topic is not None
            items.append((topic, tp.partition_id, topic.parts.get(tp.partition_id)))
        n = len(items)
        with ctx.reading_once():
            t0 = time.process_time()
            want = [ctx.partition_update(t, pid, p, 0, NO_LEADER, NO_LEADER) for t, pid, p in items]
            t1 = time.process_time()
            bulk = BulkLifecycleChanges(ctx, 0, NO_LEADER, NO_LEADER)
            got = bulk.changes(items)
            t2 = time.process_time()
        assert bulk.fallbacks == 0 and [g.encode() for g in got] == [w.encode() for w in want]  # type: ignore
        rows["build_builder_us"].append((t1 - t0) / n * 1e6)
        rows["build_bulk_us"].append((t2 - t1) / n * 1e6)
        messages = [r.message for r in got]  # type: ignore[union-attr]
        chunks = [messages[i:i + args.per_result] for i in range(0, n, args.per_result)]
        general, short, bulk_rc = (c.replication_control for c in ctxs)
        general.fast_simple_changes = False
        t0 = time.process_time()
        for chunk in chunks:
            for msg in chunk:
                general.replay(msg, -1)
        t1 = time.process_time()
        for chunk in chunks:
            for msg in chunk:
                short.replay(msg, -1)
        t2 = time.process_time()
        for chunk in chunks:
            bulk_rc.replay_partition_changes(chunk)
        t3 = time.process_time()
        rows["replay_general_us"].append((t1 - t0) / n * 1e6)
        rows["replay_short_us"].append((t2 - t1) / n * 1e6)
        rows["replay_bulk_us"].append((t3 - t2) / n * 1e6)
        assert general.brokers_to_isrs.to_dict() == short.brokers_to_isrs.to_dict() == bulk_rc.brokers_to_isrs.to_dict()
    med = {k: round(statistics.median(v), 2) for k, v in rows.items()}
    print(json.dumps({"changes": n, "args": vars(args), "loadavg": os.getloadavg(),
                      "rounds": {k: [round(x, 2) for x in v] for k, v in rows.items()}, "median": med,
                      "build_ratio": round(med["build_builder_us"] / med["build_bulk_us"], 2),
                      "replay_ratio_short": round(med["replay_general_us"] / med["replay_short_us"], 2),
                      "replay_ratio_bulk": round(med["replay_general_us"] / med["replay_bulk_us"], 2)}, indent=1))


if __name__ == "__main__":
    main()
