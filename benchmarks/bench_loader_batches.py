"""The MetadataLoader's cost per committed record: record at a time vs the bulk path.

    python benchmarks/bench_loader_batches.py --runs 5

A controller's topic creation commits batches of up to 10,000 records (a TopicRecord and its
PartitionRecords, v2 with three directories each); every metadata node's loader folds them
into its image.  Batches of ``BULK_MIN_RECORDS`` or more (nothing pending, no transaction
marker) go through ``bulk_delta``; smaller ones record at a time.  This times
``handle_commit`` over ~100k records cut into batches of 101 (record path) and of 1,001 and
10,001 (bulk path), each in a fresh loader that publishes after every commit, and prints
microseconds per record (median of ``--runs``) and JSON with ``--json``.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time

from kraft_node.metadata.loader import MetadataLoader
from kraft_node.metadata.loader.batch_loader import BULK_MIN_RECORDS
from kraft_node.raft.messages import Batch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import encode_metadata_record
from kraft_storage.messages.runtime import Uuid


def batches(partitions_per_topic: int, total: int) -> tuple[list[Batch], int]:
    out = [Batch(0, 1, (encode_metadata_record(m.FeatureLevelRecord(name="metadata.version", feature_level=22), 0),))]
    off = 1
    t = 0
    while off < total:
        tid = Uuid.random()
        rs = [encode_metadata_record(m.TopicRecord(name=f"t{t}", topic_id=tid), 0)]
        for p in range(partitions_per_topic):
            rs.append(encode_metadata_record(m.PartitionRecord(
                partition_id=p, topic_id=tid, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                directories=[Uuid.random() for _ in range(3)]), 2))
        out.append(Batch(off, 1, tuple(rs)))
        off += len(rs)
        t += 1
    return out, off


def run(partitions_per_topic: int, total: int) -> float:
    bs, end = batches(partitions_per_topic, total)
    loader = MetadataLoader(high_watermark=lambda: end)
    gc.collect()
    t0 = time.perf_counter()
    for b in bs:
        loader.handle_commit((b,))
    elapsed = time.perf_counter() - t0
    assert loader.failure is None and len(loader.image.topics.topics_by_id) == len(bs) - 1
    return elapsed / end * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    out = {"bulk_min_records": BULK_MIN_RECORDS, "records": a.records, "loadavg_before": os.getloadavg()[0],
           "results": []}
    for ppt in (100, 1000, 10000):
        runs = [run(ppt, a.records) for _ in range(a.runs)]
        path = "bulk" if ppt + 1 >= BULK_MIN_RECORDS else "record at a time"
        med = statistics.median(runs)
        print(f"batches of {ppt + 1:>6} records ({path}): {med:6.2f} us/record (runs: "
              + ", ".join(f"{r:.2f}" for r in runs) + ")")
        out["results"].append({"batch_records": ppt + 1, "path": path, "median_us_per_record": med, "runs": runs})
    out["loadavg_after"] = os.getloadavg()[0]
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
