"""The metadata loader's live replay of a controlled shutdown's PartitionChangeRecords, old way vs new.

An image of ``--topics`` x ``--partitions`` (RF 3 over ``--brokers``), then brokers shut down one
after another until ``--changes`` ISR/leader-only PartitionChangeRecords were written (a shutdown
removes the broker from each ISR it is in and moves the leadership it holds), in batches of
``--batch`` records, one commit each (``load_batch`` + ``maybe_flush_batches``: what a caught-up
node's loader does).  Both ways run alternately, ``--rounds`` times each; the figure is process
CPU microseconds per record (min and median over rounds).  ``--layout block`` loads the topics as
a snapshot/bulk load leaves them (block rows); ``dict`` as small topic creations leave them
(registrations in overrides dicts).

    python benchmarks/loader_changes_bench.py --layout block
"""
from __future__ import annotations

import argparse
import random
import statistics
import time

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.loader import MetadataBatchLoader, RecordingFaultHandler
from kraft_node.raft.messages import Batch, LeaderAndEpoch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

LE = LeaderAndEpoch(1, 1)


def build(args: argparse.Namespace) -> tuple[MetadataImage, list[Batch]]:
    rng = random.Random(1)
    tids = [Uuid(rng.randbytes(16)) for _ in range(args.topics)]
    state: dict[tuple[int, int], tuple[list[int], list[int], int]] = {}
    records: list[bytes] = []
    for t, tid in enumerate(tids):
        records.append(ApiMessageAndVersion(m.TopicRecord(name=f"topic-{t}", topic_id=tid), 0).encode())
        for p in range(args.partitions):
            replicas = rng.sample(range(args.brokers), 3)
            state[t, p] = (replicas, list(replicas), replicas[0])
            records.append(ApiMessageAndVersion(m.PartitionRecord(
                partition_id=p, topic_id=tid, replicas=replicas, isr=replicas, leader=replicas[0]), 1).encode())
    loader = MetadataBatchLoader(clock_ns=time.monotonic_ns, fault_handler=RecordingFaultHandler("bench"),
                                 callback=lambda d, i, m_: None)
    out: list[MetadataImage] = []
    loader._callback = lambda d, i, m_: out.append(i)
    if args.layout == "block":
        loader.load_batch(Batch(0, 1, tuple(records)), LE)
    else:  # one batch per topic (< 512 records: record at a time, partitions in dicts)
        step = args.partitions + 1
        for k in range(0, len(records), step):
            loader.load_batch(Batch(k, 1, tuple(records[k:k + step])), LE)
            loader.maybe_flush_batches(LE)
    loader.maybe_flush_batches(LE)
    image = out[-1]
    changes: list[bytes] = []
    down: set[int] = set()
    for b in range(args.brokers):
        if len(changes) >= args.changes:
            break
        down.add(b)
        for (t, p), (replicas, isr, leader) in sorted(state.items()):
            if b not in isr:
                continue
            isr = [x for x in isr if x != b]
            new_leader = -2
            if leader == b:
                leader = new_leader = isr[0] if isr else -1
            state[t, p] = (replicas, isr, leader)
            changes.append(ApiMessageAndVersion(m.PartitionChangeRecord(
                partition_id=p, topic_id=tids[t], isr=isr, leader=new_leader), 0).encode())
    changes = changes[:args.changes]
    base = image.offset + 1
    batches = [Batch(base + k, 2, tuple(changes[k:k + args.batch])) for k in range(0, len(changes), args.batch)]
    return image, batches


def run(image: MetadataImage, batches: list[Batch], fast: bool) -> tuple[float, MetadataImage]:
    last: list[MetadataImage] = []
    loader = MetadataBatchLoader(clock_ns=time.monotonic_ns, fault_handler=RecordingFaultHandler("bench"),
                                 callback=lambda d, i, m_: last.append(i))
    loader.fast_changes = fast
    loader.reset_to_image(image, seen_record=True)
    n = sum(len(b.records) for b in batches)
    start = time.process_time()
    for b in batches:
        loader.load_batch(b, LE)
        loader.maybe_flush_batches(LE)
    cpu = time.process_time() - start
    assert loader.failure is None, loader.failure
    return cpu / n * 1e6, last[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topics", type=int, default=300)
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=30)
    ap.add_argument("--changes", type=int, default=30_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layout", choices=("block", "dict"), default="block")
    args = ap.parse_args()
    image, batches = build(args)
    n = sum(len(b.records) for b in batches)
    results: dict[bool, list[float]] = {False: [], True: []}
    finals: dict[bool, MetadataImage] = {}
    for _ in range(args.rounds):
        for fast in (False, True):
            us, finals[fast] = run(image, batches, fast)
            results[fast].append(us)
    assert finals[False] == finals[True], "the two ways disagree"
    print(f"{n} changes in {len(batches)} batches of <= {args.batch}, {args.topics}x{args.partitions} "
          f"({args.layout} layout), {args.rounds} rounds alternating")
    for fast, label in ((False, "record at a time"), (True, "columnar runs")):
        r = results[fast]
        print(f"  {label:18s} CPU us/record: min {min(r):6.2f}  median {statistics.median(r):6.2f}")
    print(f"  ratio (median old / new): {statistics.median(results[False]) / statistics.median(results[True]):.2f}x")


if __name__ == "__main__":
    main()
