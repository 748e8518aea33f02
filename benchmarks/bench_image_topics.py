"""TopicsDelta.apply at Kafka's JMH scale (issue 23 targets: one topic added at 100k topics in
<= 5 us, the zonal outage delta applied in <= 10 ms).

    python benchmarks/bench_image_topics.py [--topics 12500,25000,50000,100000] [--repeats 15]
        [--inner 1000] [--directories] [--gc default,frozen,off] [--json F]

The layout is Kafka's TopicsImage*Benchmark: T topics of 10 partitions, replication factor 3,
brokers = T*10*3/10000 rounded down to a multiple of 3, the leader round-robin over the brokers,
replicas leader..leader+2 (mod brokers), ISR = replicas.  The base image is built directly as
one PartitionBlock (numpy columns) and one TopicImage per topic -- not timed, and not the bulk
loader (benchmarks/bench_image.py measures that).  ``--directories``: every replica in a real
directory (one per broker), else none (v0 records: MIGRATING).

What is measured, per T, ``apply()`` only, as Kafka's benchmarks time it (the delta is replayed
once up front; applying it does not change it, so it is applied again and again):

* ``single_us``: TopicsImageSingleRecordChangeBenchmark -- a delta of one new TopicRecord and
  one PartitionRecord; the median of ``--repeats`` means of ``--inner`` applies, in us;
* ``zonal_ms``: TopicsImageZonalOutageBenchmark -- for every partition whose ISR holds broker 0,
  a PartitionRecord with that ISR minus broker 0 and the leader the first of the new ISR; the
  median of ``--repeats`` applies, in ms (each result is freed after its clock stops).

Each under ``--gc`` modes: ``default`` (the collector as the process has it), ``frozen``
(``gc.freeze()`` after the base image is built: what a loader that freezes its long-lived image
sees -- collections never walk the image), ``off`` (``gc.disable()``: the CPU of the apply
alone).  Also: the partitions and topics the zonal delta touches, that the result shares the
block, every untouched topic and the name map (name -> topic id: no topic is created or
deleted) by identity, the replay time of each delta (not a target), and which ``_topics_map``
twin did the work (``kernel``; ``KRAFT_NO_EXTENSIONS=1`` measures the pure one).

The machine's noise: on a shared 2-CPU VM one process can run the same apply 1.5-2x slower
than the next (the apply is bound by cache and TLB misses, which neighbours inflate); compare
runs made back to back.

Prints one JSON document; ``--json F`` writes it too.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _support import code_version, emit_json  # noqa: E402

from kraft_node.metadata.image import topic_map  # noqa: E402
from kraft_node.metadata.image.partition_block import PartitionBlock  # noqa: E402
from kraft_node.metadata.image.topics import TopicImage, TopicPartitions, TopicsDelta, TopicsImage  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402

PARTITIONS, RF = 10, 3


def brokers_for(topics: int) -> int:
    return (topics * PARTITIONS * RF // 10_000) // 3 * 3


def base_image(topics: int, directories: bool) -> tuple[PartitionBlock, list[Uuid], TopicsImage]:
    n, brokers = topics * PARTITIONS, brokers_for(topics)
    leader = (np.arange(n, dtype=np.int64) % brokers).astype(np.int32)
    replicas = ((leader[:, None] + np.arange(RF)[None, :]) % brokers).astype(np.int32).ravel()
    offsets = np.arange(0, RF * n + 1, RF, dtype=np.int32)
    none = np.zeros(n + 1, np.int32)
    empty = np.zeros(0, np.int32)
    if directories:
        per_broker = np.frombuffer(os.urandom(16 * brokers), np.uint8).reshape(brokers, 16)
        dirs, dir_offsets = per_broker[replicas], offsets
    else:
        dirs, dir_offsets = np.zeros((0, 16), np.uint8), none
    block = PartitionBlock(
        partition_id=np.tile(np.arange(PARTITIONS, dtype=np.int32), topics), leader=leader,
        leader_epoch=np.zeros(n, np.int32), partition_epoch=np.zeros(n, np.int32),
        leader_recovery_state=np.zeros(n, np.int8), replicas_offsets=offsets, replicas=replicas,
        directories_offsets=dir_offsets, directories=dirs, isr_offsets=offsets, isr=replicas,
        removing_offsets=none, removing=empty, adding_offsets=none, adding=empty, elr_offsets=none, elr=empty,
        last_known_elr_offsets=none, last_known_elr=empty)
    block.check([(i * PARTITIONS, (i + 1) * PARTITIONS) for i in range(0, topics, max(1, topics // 100))])
    ids = [Uuid(os.urandom(16)) for _ in range(topics)]
    image = TopicsImage.of(TopicImage(f"topic-{i}", ids[i], TopicPartitions(block=block, start=i * PARTITIONS,
                                                                            stop=(i + 1) * PARTITIONS))
                           for i in range(topics))
    return block, ids, image


def single_delta(image: TopicsImage) -> TopicsDelta:
    delta = TopicsDelta(image)
    tid = Uuid(os.urandom(16))
    delta.replay(m.TopicRecord(name="new-topic", topic_id=tid))
    delta.replay(m.PartitionRecord(partition_id=0, topic_id=tid, replicas=[0, 1, 2], isr=[0, 1, 2], leader=0,
                                   leader_epoch=0, partition_epoch=0))
    return delta


def zonal_delta(image: TopicsImage, ids: list[Uuid]) -> tuple[TopicsDelta, int, set[Uuid]]:
    delta = TopicsDelta(image)
    count, touched = 0, set()
    for tid in ids:
        parts = image.topics_by_id[tid].partitions
        for pid in parts.partitions_with_replica(0):
            reg = parts[pid]
            if 0 not in reg.isr:
                continue
            isr = [b for b in reg.isr if b != 0]
            delta.replay(m.PartitionRecord(partition_id=pid, topic_id=tid, replicas=list(reg.replicas), isr=isr,
                                           leader=isr[0], leader_epoch=reg.leader_epoch + 1,
                                           partition_epoch=reg.partition_epoch + 1))
            count += 1
            touched.add(tid)
    return delta, count, touched


def median_of(fn: Any, repeats: int, inner: int = 1) -> float:
    """The median over ``repeats`` of the mean seconds of ``inner`` calls.  The last result is
    held until the clock has stopped (freeing a 6,667-topic result is not the apply's cost; JMH
    hands results to a Blackhole and collects them concurrently)."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            result = fn()
        times.append((time.perf_counter() - start) / inner)
        del result
    return statistics.median(times)


def run(topics: int, args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    block, ids, image = base_image(topics, args.directories)
    built = time.perf_counter() - start
    start = time.perf_counter()
    single = single_delta(image)
    single_replay = time.perf_counter() - start
    start = time.perf_counter()
    zonal, count, touched = zonal_delta(image, ids)
    zonal_replay = time.perf_counter() - start
    out = zonal.apply()
    shares_block = all(out.topics_by_id[t].partitions.block is block for t in touched)
    shares_rest = all(out.topics_by_id[t] is image.topics_by_id[t] for t in ids if t not in touched)
    shares_names = out.topic_ids_by_name is image.topic_ids_by_name
    del out
    result: dict[str, Any] = {
        "topics": topics, "partitions": topics * PARTITIONS, "brokers": brokers_for(topics),
        "build_s": round(built, 3), "block_bytes_per_partition": round(block.nbytes / (topics * PARTITIONS), 1),
        "zonal_partitions": count, "zonal_topics": len(touched),
        "zonal_shares_block": shares_block, "zonal_shares_untouched_topics": shares_rest,
        "zonal_shares_name_map": shares_names,
        "single_replay_us": round(single_replay * 1e6, 1), "zonal_replay_s": round(zonal_replay, 3),
    }
    for mode in args.gc:
        if mode == "frozen":
            gc.collect()
            gc.freeze()
        elif mode == "off":
            gc.disable()
        try:
            result[f"single_us_{mode}"] = round(median_of(single.apply, args.repeats, args.inner) * 1e6, 2)
            result[f"zonal_ms_{mode}"] = round(median_of(zonal.apply, args.repeats) * 1e3, 2)
        finally:
            if mode == "frozen":
                gc.unfreeze()
            elif mode == "off":
                gc.enable()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topics", default="12500,25000,50000,100000")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--inner", type=int, default=1000)
    parser.add_argument("--directories", action="store_true")
    parser.add_argument("--gc", default="default,frozen,off")
    parser.add_argument("--json")
    args = parser.parse_args()
    args.gc = [g for g in args.gc.split(",") if g]
    bad = [g for g in args.gc if g not in ("default", "frozen", "off")]
    if bad:
        parser.error(f"--gc: unknown mode(s) {bad}")
    doc = {
        "benchmark": "bench_image_topics", "code": code_version(), "python": platform.python_version(),
        "machine": platform.machine(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
        "directories": args.directories, "repeats": args.repeats, "inner": args.inner,
        "kernel": topic_map.TopicMap.__module__,
        "targets": {"single_us": 5, "zonal_ms_at_100k": 10},
        "runs": [run(int(t), args) for t in args.topics.split(",")],
    }
    emit_json(doc, args.json)


if __name__ == "__main__":
    main()
