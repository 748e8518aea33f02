"""Replica placement throughput: Kafka's StripedReplicaPlacer as reproduced here (issue 22's
target: placement alone >= 1M replicas/s).

Workloads (one ``place`` call per topic, as Kafka's controller makes one per CreatableTopic,
so each call also reads the cluster's brokers and builds the rack list):

* ``create``: 1,000 topics x 100 partitions x RF 3 on 100 brokers in 3 racks (300k replicas);
* ``create-fenced``: the same with 5 of the brokers fenced (fenced lists in every rack);
* ``wide``: 30 topics x 10,000 partitions x RF 3 (the per-partition loop dominates).

Paths: ``place`` (a TopicAssignment of PartitionAssignment objects, directories included) and
``place_columns`` (an int32 array), each on the native kernel and on its pure-Python twin, and
``object-model``: ``place_columns`` with a random that overrides ``next``, so the placer falls
back to the Python object model (the shape of Kafka's Java code, row by row).

Run:  python benchmarks/bench_placement.py [--runs 5] [--json out.json]
Prints, per workload and path, the median over the runs of one pass's wall time and of its
CPU time (this process), with the replicas placed per second of each: on a shared machine the
CPU figure is the steadier one.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import time
from collections.abc import Callable, Iterator

from _support import code_version, emit_json  # this directory is on sys.path when run as a script

from kraft_node.metadata.controller.cluster_control import DirectoryId
from kraft_node.metadata.placement import MockRandom, PlacementSpec, StripedReplicaPlacer, UsableBroker, striped
from kraft_storage.messages.runtime import Uuid

KERNELS = {
    "native": importlib.import_module("kraft_node._native._placement"),
    "pure": importlib.import_module("kraft_node._pure._placement"),
}


class ListCluster:
    """A ClusterDescriber over a fixed broker list (every default directory MIGRATING)."""

    def __init__(self, brokers: list[UsableBroker]) -> None:
        self.brokers = brokers

    def usable_brokers(self) -> Iterator[UsableBroker]:
        return iter(self.brokers)

    def default_dir(self, broker_id: int) -> Uuid:
        return DirectoryId.MIGRATING


class OverriddenNext(MockRandom):
    """A MockRandom the kernel cannot run (``next`` overridden): the object-model path."""

    def next(self, bits: int) -> int:
        return super().next(bits)


def brokers(n: int, racks: int, fenced: int = 0) -> list[UsableBroker]:
    return [UsableBroker(i, f"rack-{i % racks}", i < fenced) for i in range(n)]


WORKLOADS = {
    "create": (1000, 100, 3, brokers(100, 3)),
    "create-fenced": (1000, 100, 3, brokers(100, 3, fenced=5)),
    "wide": (30, 10_000, 3, brokers(100, 3)),
}


def one_pass(path: str, topics: int, partitions: int, rf: int, cluster: ListCluster) -> tuple[float, float]:
    """(wall, CPU) seconds to place ``topics`` topics on ``path``."""
    method, _, kernel = path.partition("/")
    if kernel:
        striped._kernel = KERNELS[kernel]
    placer = StripedReplicaPlacer(OverriddenNext() if method == "object-model" else MockRandom())
    place: Callable[[PlacementSpec, ListCluster], object] = (
        placer.place if method == "place" else placer.place_columns)
    spec = PlacementSpec(0, partitions, rf)
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(topics):
        place(spec, cluster)
    return time.perf_counter() - start, time.process_time() - start_cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="passes per workload and path (median reported)")
    parser.add_argument("--workload", choices=list(WORKLOADS), action="append",
                        help="run only these workloads (default: all)")
    parser.add_argument("--json", help="also write the results as JSON to this file")
    args = parser.parse_args()
    paths = ["place_columns/native", "place/native", "place_columns/pure", "place/pure", "object-model"]
    results = []
    saved = striped._kernel
    try:
        for name in args.workload or list(WORKLOADS):
            topics, partitions, rf, broker_list = WORKLOADS[name]
            cluster = ListCluster(broker_list)
            replicas = topics * partitions * rf
            for path in paths:
                one_pass(path, max(1, topics // 10), partitions, rf, cluster)  # warm-up
                passes = [one_pass(path, topics, partitions, rf, cluster) for _ in range(args.runs)]
                times = [wall for wall, _cpu in passes]
                median = statistics.median(times)
                cpu = statistics.median(c for _wall, c in passes)
                results.append({"workload": name, "path": path, "replicas": replicas, "runs": args.runs,
                                "median_s": median, "min_s": min(times), "max_s": max(times),
                                "median_cpu_s": cpu, "replicas_per_s": replicas / median,
                                "replicas_per_cpu_s": replicas / cpu})
                print(f"{name:14s} {path:21s} {replicas:>9,d} replicas  median {median * 1e3:7.1f} ms "
                      f"{replicas / median / 1e6:6.2f} M/s wall  (min {min(times) * 1e3:.1f}, max "
                      f"{max(times) * 1e3:.1f} ms)  cpu {cpu * 1e3:7.1f} ms {replicas / cpu / 1e6:6.2f} M/s",
                      flush=True)
    finally:
        striped._kernel = saved
    if args.json:
        emit_json({"benchmark": "placement", "code": code_version(), "load_average": os.getloadavg(),
                   "results": results}, args.json)


if __name__ == "__main__":
    main()
