"""The topics image at Kafka's JMH scale (issue 23 targets: a 1M-partition snapshot loaded into a
queryable image in <= 1 s, in <= 400 B a partition), in process.

    python benchmarks/bench_image.py [--topics 12500,25000,50000,100000] [--runs 3]
        [--partition-record-version 0] [--reference-runs 1] [--reference-max-topics N]
        [--no-checkpoint] [--dir D] [--no-memory] [--no-maps] [--json F]

The layout is Kafka's TopicsImage*Benchmark (jmh-benchmarks/.../metadata/): T topics of 10
partitions, replication factor 3, brokers = T*10*3/10000 rounded down to a multiple of 3, the
leader round-robin over the brokers, replicas leader..leader+2 (mod brokers), ISR = replicas.
Each topic is its TopicRecord followed by its PartitionRecords, as a snapshot writes it; the
framed values are encoded once up front (numpy fills a template the generated codec wrote;
checked to decode to the records the layout names) and are not part of any timing.

What is measured, per T:

* (a) ``load``: ``bulk.fold_topics(values)`` -- framed values to a queryable TopicsImage (the
  call, the cyclic collection it causes on its way out included), ``--runs`` times, wall and
  CPU seconds (the process's: the load is one thread, so on a quiet machine the two agree,
  and on a busy one the CPU time is the fairer figure); and the phases of one more run
  (``phases``: joining the values, decoding and grouping the columns, making the topic
  objects and maps, the collection after).  ``reference``: the
  record-at-a-time path for comparison, ``--reference-runs`` times (skipped above
  ``--reference-max-topics``): ``replay_s`` decodes each value and replays it into
  ``TopicsDelta(EMPTY)``, ``apply_s`` is ``apply()`` alone (what Kafka's
  TopicsImageSnapshotLoadBenchmark times: a delta with every record pre-replayed, applied).
  The two images are checked equal (up to ``--check-max-topics``, 12,500 by default: the
  comparison makes every registration, it is slow).  ``checkpoint_load``: the same records
  written (untimed) as a ``.checkpoint`` file, then opened (batches scanned, CRC-checked), read
  as columns over the file's mmap and folded: file to image, no bytes object per record.
* (b) ``memory``: the image the bulk path built, per partition: ``tracemalloc`` of the build
  (retained after it, and the peak), the RSS growth of the process (``/proc/self/statm``) with
  the image alive and the input freed, and the PartitionBlock's own bytes.  The
  record-at-a-time image's RSS growth when its reference ran.
* (c) ``maps``: the top-level topic maps (by id and by name) as ``immutables.Map`` (what the
  image uses), ``pyrsistent.pmap`` (``pip install pyrsistent``; reported absent otherwise) and a
  copy-on-write ``dict``: ``build_s`` (both maps from T topics), ``add_one_us`` (one new
  topic in both maps: a ``set`` each, or a copy of both dicts and a store), and ``zonal_ms``
  (the topics of the JMH zonal outage -- every topic with a partition whose ISR holds broker
  0 -- replaced in both maps: a ``mutate()``/``evolver()`` batch, or one copy and the stores).
  Medians of ``--map-repeats`` repetitions.

Prints one JSON document (setup, each T's runs, medians); ``--json F`` writes it too.
"""
from __future__ import annotations

import argparse
import gc
import importlib.metadata
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from typing import Any, Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _support import code_version, emit_json  # noqa: E402

from kraft_node.metadata.image import bulk  # noqa: E402
from kraft_node.metadata.image.partition_block import PartitionBlock  # noqa: E402
from kraft_node.metadata.image.topics import TopicImage, TopicsDelta, TopicsImage  # noqa: E402
from kraft_storage import accel  # noqa: E402
from kraft_storage.messages import columns  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402
from kraft_storage.snapshot import RecordsSnapshotReader, RecordsSnapshotWriter, SnapshotId  # noqa: E402
from kraft_storage.snapshot.files import snapshot_path  # noqa: E402

PARTITIONS = 10
RF = 3
REPLICAS_PER_BROKER = 10_000
_SENTINELS = [0x7E5A3C00 + j for j in range(8)]
_SENTINEL_ID = bytes([0xE7] * 15 + [0x10])
_SENTINEL_DIRS = [bytes([0xD7] * 15 + [0x20 + j]) for j in range(3)]


def num_brokers(topics: int) -> int:
    n = topics * PARTITIONS * RF // REPLICAS_PER_BROKER
    return n - n % 3


def _template(version: int) -> tuple[bytes, dict[str, int]]:
    """A PartitionRecord value with sentinels in its variable fields, and their byte positions."""
    s = _SENTINELS
    fields: dict[str, Any] = dict(partition_id=s[0], topic_id=Uuid(_SENTINEL_ID), replicas=s[1:4], isr=s[4:7],
                                  removing_replicas=[], adding_replicas=[], leader=s[7], leader_epoch=0,
                                  partition_epoch=0)
    if version >= 1:
        fields["directories"] = [Uuid(d) for d in _SENTINEL_DIRS]
    value = encode_metadata_record(m.PartitionRecord(**fields), version)
    where = {f"s{j}": value.index(s[j].to_bytes(4, "big")) for j in range(8)}
    where["topic_id"] = value.index(_SENTINEL_ID)
    for j, d in enumerate(_SENTINEL_DIRS if version >= 1 else []):
        where[f"d{j}"] = value.index(d)
    return value, where


def jmh_values(topics: int, version: int = 0, seed: int = 1) -> list[bytes]:
    """The layout's framed records: per topic its TopicRecord then its PartitionRecords."""
    brokers = num_brokers(topics)
    template, where = _template(version)
    size = len(template)
    n = topics * PARTITIONS
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 256, (topics, 16), dtype=np.uint8)
    out = np.tile(np.frombuffer(template, np.uint8), (n, 1))
    leader = np.arange(n, dtype=np.int64) % brokers

    def put(at: int, values: np.ndarray) -> None:
        out[:, at:at + 4] = values.astype(">i4").view(np.uint8).reshape(n, 4)

    put(where["s0"], np.tile(np.arange(PARTITIONS), topics))
    for j in range(RF):
        replica = (leader + j) % brokers
        put(where[f"s{1 + j}"], replica)
        put(where[f"s{4 + j}"], replica)
        if version >= 1:  # one log directory per broker
            dirs = np.zeros((n, 16), np.uint8)
            dirs[:, 0] = 0xD1
            dirs[:, 12:16] = replica.astype(">u4").view(np.uint8).reshape(n, 4)
            out[:, where[f"d{j}"]:where[f"d{j}"] + 16] = dirs
    put(where["s7"], leader)
    out[:, where["topic_id"]:where["topic_id"] + 16] = np.repeat(ids, PARTITIONS, axis=0)
    raw = out.tobytes()
    values: list[bytes] = []
    for t in range(topics):
        values.append(encode_metadata_record(m.TopicRecord(name=f"topic{t}", topic_id=Uuid(ids[t].tobytes())), 0))
        base = t * PARTITIONS * size
        values.extend(raw[base + k * size:base + (k + 1) * size] for k in range(PARTITIONS))
    _check_layout(values, brokers, version)
    return values


def _check_layout(values: list[bytes], brokers: int, version: int) -> None:
    """The first topics decode to the records the layout names (guards the template patching)."""
    leader = 0
    for t in range(min(3, len(values) // (PARTITIONS + 1))):
        topic = decode_metadata_record(values[t * (PARTITIONS + 1)])[2]
        assert topic.name == f"topic{t}"
        for p in range(PARTITIONS):
            rec = decode_metadata_record(values[t * (PARTITIONS + 1) + 1 + p])[2]
            replicas = [(leader + j) % brokers for j in range(RF)]
            assert (rec.partition_id, rec.topic_id, rec.replicas, rec.isr, rec.leader) == (
                p, topic.topic_id, replicas, replicas, leader), rec
            assert len(rec.directories) == (RF if version >= 1 else 0)
            leader = (leader + 1) % brokers


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# (a) load
# ---------------------------------------------------------------------------------------------

def bulk_runs(values: list[bytes], runs: int) -> tuple[list[float], list[float]]:
    """Wall and CPU seconds of each bulk load (the CPU time of this one-threaded load is the
    figure a shared, busy machine distorts least)."""
    walls, cpus = [], []
    for _ in range(runs):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        load = bulk.fold_topics(values)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
        assert load.replayed == 0 and load.cut == len(values)
        del load
    return walls, cpus


def checkpoint_runs(values: list[bytes], runs: int, directory: str | None) -> dict[str, Any]:
    """The same records as a ``.checkpoint`` file (written untimed, 8 MiB batches): opening it
    (every batch scanned and CRC-checked), its records as columns over the file's mmap, and the
    fold of those columns (no bytes object per record, no join)."""
    base = tempfile.mkdtemp(prefix="bench-image-", dir=directory)
    try:
        sid = SnapshotId(len(values), 1)
        with RecordsSnapshotWriter.create(base, sid) as writer:
            writer.append_framed(values)
            writer.freeze()
        path = snapshot_path(base, sid)
        read, fold = [], []
        for _ in range(runs):
            gc.collect()
            t0 = time.perf_counter()
            with RecordsSnapshotReader(path) as reader:
                cols = reader.records()
                t1 = time.perf_counter()
                load = bulk.fold_topics(cols)
                t2 = time.perf_counter()
                assert load.replayed == 0 and load.bulk_partitions == len(values) * PARTITIONS // (PARTITIONS + 1)
                del load, cols
            read.append(t1 - t0)
            fold.append(t2 - t1)
        total = [a + b for a, b in zip(read, fold)]
        return {"bytes": os.path.getsize(path), "read_s": [round(x, 4) for x in read],
                "fold_s": [round(x, 4) for x in fold], "median_s": round(statistics.median(total), 4)}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def bulk_phases(values: list[bytes]) -> dict[str, float]:
    """One bulk load cut into its phases (the module's steps, called one by one)."""
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        fr = bulk.framed_records(values)
        t1 = time.perf_counter()
        prefix = bulk._prefix(fr, TopicsImage.EMPTY)
        t2 = time.perf_counter()
        image = bulk._prefix_image(prefix, TopicsImage.EMPTY)
        t3 = time.perf_counter()
    finally:
        gc.enable()
    gc.collect(0)
    t4 = time.perf_counter()
    assert len(image.topics_by_id) == len(prefix.names)
    return {"join_and_frames_s": t1 - t0, "decode_and_group_s": t2 - t1, "objects_and_maps_s": t3 - t2,
            "collection_after_s": t4 - t3}


def reference_run(values: list[bytes]) -> tuple[TopicsImage, dict[str, float]]:
    """The record-at-a-time path: each value decoded and replayed into TopicsDelta(EMPTY), then apply."""
    gc.collect()
    rss0 = _rss()
    delta = TopicsDelta(TopicsImage.EMPTY)
    t0 = time.perf_counter()
    for value in values:
        delta.replay(decode_metadata_record(value)[2])
    t1 = time.perf_counter()
    image = delta.apply()
    t2 = time.perf_counter()
    delta = TopicsDelta(TopicsImage.EMPTY)  # the replayed one freed: only the image stays
    gc.collect()
    partitions = len(values) * PARTITIONS / (PARTITIONS + 1)
    return image, {"replay_s": t1 - t0, "apply_s": t2 - t1, "total_s": t2 - t0,
                   "rss_bytes_per_partition": (_rss() - rss0) / partitions}


# ---------------------------------------------------------------------------------------------
# (b) memory
# ---------------------------------------------------------------------------------------------

def memory(values: list[bytes], partitions: int) -> dict[str, Any]:
    """Bytes per partition of the bulk-built image: RSS growth (the input stays, the image is
    kept, the temporaries are freed), then tracemalloc of a second build (retained and peak)."""
    gc.collect()
    rss0 = _rss()
    image = bulk.load_topics_bulk(values)
    gc.collect()
    rss = _rss() - rss0
    block = _block_of(image)
    del image
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        image = bulk.load_topics_bulk(values)
        gc.collect()
        retained, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del image
    return {"rss_bytes_per_partition": round(rss / partitions, 1),
            "tracemalloc_retained_bytes_per_partition": round((retained - base) / partitions, 1),
            "tracemalloc_peak_bytes_per_partition": round((peak - base) / partitions, 1),
            "block_bytes_per_partition": round(block.nbytes / partitions, 1)}


def _block_of(image: TopicsImage) -> PartitionBlock:
    for topic in image.topics_by_id.values():
        if topic.partitions.block is not None:
            return topic.partitions.block
    raise AssertionError("no block")


# ---------------------------------------------------------------------------------------------
# (c) the top-level maps
# ---------------------------------------------------------------------------------------------

def _zonal_topics(image: TopicsImage) -> list[TopicImage]:
    """The topics of Kafka's zonal-outage benchmark: those with a partition whose ISR holds broker 0."""
    block = _block_of(image)
    offsets = block.isr_offsets.astype(np.int64)
    rows = np.unique(np.searchsorted(offsets, np.flatnonzero(block.isr == 0), side="right") - 1)
    hit = set(rows.tolist())
    return [t for t in image.topics_by_id.values()
            if any(r in hit for r in range(t.partitions.start, t.partitions.stop))]


def _median_us(fn: Callable[[], Any], repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples) / 1e3


def maps(image: TopicsImage, repeats: int) -> dict[str, Any]:
    import immutables
    topics = list(image.topics_by_id.values())
    by_id_pairs = [(t.topic_id, t) for t in topics]
    by_name_pairs = [(t.name, t) for t in topics]
    new = TopicImage("new-topic", Uuid(bytes(range(16))))
    zonal = _zonal_topics(image)
    zonal_new = [TopicImage(t.name, t.topic_id, t.partitions) for t in zonal]
    builds = max(3, repeats // 40)
    out: dict[str, Any] = {"topics": len(topics), "zonal_topics": len(zonal)}

    # immutables.Map
    def build_immutables() -> tuple[Any, Any]:
        return immutables.Map().update(by_id_pairs), immutables.Map().update(by_name_pairs)
    ids, names = build_immutables()

    def zonal_immutables() -> None:
        with ids.mutate() as mi, names.mutate() as mn:
            for t in zonal_new:
                mi[t.topic_id] = t
                mn[t.name] = t
            mi.finish()
            mn.finish()
    out["immutables"] = {
        "build_s": _median_us(build_immutables, builds) / 1e6,
        "add_one_us": _median_us(lambda: (ids.set(new.topic_id, new), names.set(new.name, new)), repeats),
        "zonal_ms": _median_us(zonal_immutables, max(5, repeats // 20)) / 1e3,
    }
    # pyrsistent.pmap
    try:
        import pyrsistent
    except ImportError:
        out["pyrsistent"] = "not installed (pip install pyrsistent)"
    else:
        def build_pyrsistent() -> tuple[Any, Any]:
            return pyrsistent.pmap(dict(by_id_pairs)), pyrsistent.pmap(dict(by_name_pairs))
        pids, pnames = build_pyrsistent()

        def zonal_pyrsistent() -> None:
            ei, en = pids.evolver(), pnames.evolver()
            for t in zonal_new:
                ei[t.topic_id] = t
                en[t.name] = t
            ei.persistent()
            en.persistent()
        out["pyrsistent"] = {
            "version": importlib.metadata.version("pyrsistent"),
            "build_s": _median_us(build_pyrsistent, builds) / 1e6,
            "add_one_us": _median_us(lambda: (pids.set(new.topic_id, new), pnames.set(new.name, new)), repeats),
            "zonal_ms": _median_us(zonal_pyrsistent, max(5, repeats // 20)) / 1e3,
        }
    # copy-on-write dict

    def build_dict() -> tuple[dict[Any, Any], dict[Any, Any]]:
        return dict(by_id_pairs), dict(by_name_pairs)
    dids, dnames = build_dict()

    def add_dict() -> None:
        a, b = dict(dids), dict(dnames)
        a[new.topic_id] = new
        b[new.name] = new

    def zonal_dict() -> None:
        a, b = dict(dids), dict(dnames)
        for t in zonal_new:
            a[t.topic_id] = t
            b[t.name] = t
    out["dict_copy_on_write"] = {
        "build_s": _median_us(build_dict, builds) / 1e6,
        "add_one_us": _median_us(add_dict, max(5, repeats // 20)),
        "zonal_ms": _median_us(zonal_dict, max(5, repeats // 20)) / 1e3,
    }
    out["immutables_version"] = immutables.__version__
    return out


# ---------------------------------------------------------------------------------------------

def one_size(topics: int, args: argparse.Namespace) -> dict[str, Any]:
    values, gen_s = _timed(lambda: jmh_values(topics, args.partition_record_version))
    partitions = topics * PARTITIONS
    out: dict[str, Any] = {"topics": topics, "partitions": partitions, "brokers": num_brokers(topics),
                           "records": len(values), "bytes": sum(map(len, values)), "generate_s": round(gen_s, 2)}
    runs, cpus = bulk_runs(values, args.runs)
    out["load"] = {"runs_s": [round(s, 4) for s in runs], "median_s": round(statistics.median(runs), 4),
                   "cpu_runs_s": [round(s, 4) for s in cpus], "median_cpu_s": round(statistics.median(cpus), 4),
                   "phases": {k: round(v, 4) for k, v in bulk_phases(values).items()}}
    if args.checkpoint:
        out["checkpoint_load"] = checkpoint_runs(values, args.runs, args.dir)
    if args.reference_runs and topics <= args.reference_max_topics:
        refs = []
        ref_image = None
        for _ in range(args.reference_runs):
            ref_image, timing = reference_run(values)
            refs.append(timing)
        out["reference"] = {"runs": [{k: round(v, 4) for k, v in r.items()} for r in refs],
                            "median": {k: round(statistics.median(r[k] for r in refs), 4) for k in refs[0]}}
        if topics <= args.check_max_topics:
            out["checked_equal"] = bool(bulk.load_topics_bulk(values) == ref_image)
            if not out["checked_equal"]:
                raise SystemExit(f"{topics} topics: the bulk image differs from the record-at-a-time image")
        del ref_image
        gc.collect()
    if args.memory:
        out["memory"] = memory(values, partitions)
    if args.maps:
        out["maps"] = maps(bulk.load_topics_bulk(values), args.map_repeats)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", default="12500,25000,50000,100000", help="comma-separated topic counts")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--partition-record-version", type=int, choices=(0, 1, 2), default=0,
                   help="0: no directories (Kafka's JMH records); 1, 2: one log directory per broker")
    p.add_argument("--reference-runs", type=int, default=1, help="runs of the record-at-a-time path (0: none)")
    p.add_argument("--reference-max-topics", type=int, default=100_000)
    p.add_argument("--check-max-topics", type=int, default=12_500,
                   help="compare the two images up to this many topics (slow: every registration is made)")
    p.add_argument("--no-checkpoint", dest="checkpoint", action="store_false",
                   help="skip the load from a .checkpoint file")
    p.add_argument("--dir", default=None, help="where the .checkpoint goes (default: the temp dir)")
    p.add_argument("--no-memory", dest="memory", action="store_false")
    p.add_argument("--no-maps", dest="maps", action="store_false")
    p.add_argument("--map-repeats", type=int, default=400)
    p.add_argument("--json")
    args = p.parse_args(argv)
    sizes = [int(x) for x in args.topics.split(",") if x.strip()]
    load_before = os.getloadavg()
    results = [one_size(t, args) for t in sizes]
    doc = {
        "benchmark": "image",
        "setup": {"args": vars(args), "load_before": load_before, "load_after": os.getloadavg(),
                  "python": platform.python_version(), "cpus": os.cpu_count(), "join": bulk.IMPLEMENTATION,
                  "columns": columns.IMPLEMENTATION, "fallbacks": dict(accel.FALLBACKS), "code": code_version()},
        "sizes": results,
        "median": {str(r["topics"]): {"load_s": r["load"]["median_s"], "load_cpu_s": r["load"]["median_cpu_s"],
                                      **({"checkpoint_load_s": r["checkpoint_load"]["median_s"]}
                                         if "checkpoint_load" in r else {}),
                                      **({"reference_s": r["reference"]["median"]["total_s"],
                                          "reference_apply_s": r["reference"]["median"]["apply_s"]}
                                         if "reference" in r else {}),
                                      **({"bytes_per_partition_rss": r["memory"]["rss_bytes_per_partition"],
                                          "bytes_per_partition_tracemalloc":
                                              r["memory"]["tracemalloc_retained_bytes_per_partition"]}
                                         if "memory" in r else {})}
                   for r in results},
    }
    emit_json(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
