"""A node's snapshot written from the loader's image in slices (issue 23 item 5; issue 22's target:
a 1M-partition snapshot written in <= 2 s; BENCHMARKS.md: the longest event while a 10k-broker
snapshot is written <= 10 ms), in process.

    python benchmarks/bench_image_snapshot.py [--topics 100000] [--brokers 10000] [--runs 3]
        [--records-per-slice 1024] [--slice-budget-ms 5] [--gc-freeze] [--what-if-fast-append]
        [--dir D] [--json F]

Two images, each written ``--runs`` times by the loader's ``SnapshotEmitter`` given an event
queue (what every node runs): the image writer on its helper thread, one slice per event, the
freeze an event of its own, into Kafka's ``RecordsSnapshotWriter`` (a ``.checkpoint`` file,
fsync at freeze) -- the writer ``RaftCore.create_snapshot`` hands out, without the core:

* ``partitions``: ``--topics`` topics x 10 partitions, RF 3 (Kafka's TopicsImage*Benchmark layout,
  ``bench_image.jmh_values``), folded into the image by the bulk path, with metadata.version;
* ``brokers``: ``--brokers`` registered brokers (one endpoint, a rack, one log dir each).

Timed: ``write_s`` (the first slice event's start to the freeze event's end: the queue is
driven back to back, so this is the CPU cost of the emission), ``max_event_ms`` (the longest
event, from the queue's timing hook) and which event it was (``longest_events``: (index, ms),
index 0 is the first slice, the last one the freeze), ``first_event_ms`` and
``max_event_after_first_ms`` (the first slice of the partitions image sorts the 100k topic
names), ``gc`` (the collections during the write, by generation: count and longest, from
``gc.callbacks``), ``slices``, ``bytes`` (the file).  ``image_write_s`` (partitions only): the
image writer alone into a writer that only frames each record (no emitter, no file).  The
snapshot is checked to hold exactly ``image_records(image)`` for the brokers image (not timed;
the partitions image is checked by record count).  Prints one JSON document.

Options measured, not made: ``--gc-freeze`` moves the heap alive once the images are built out of
the collector's reach (``gc.freeze()``, what ``kraft-server-start`` does with its startup heap),
so a full collection during the write does not walk the image; ``--what-if-fast-append`` runs the
Raft snapshot writer with a proposed fast path for framed values (``_as_arrow`` in
``kraft_storage/snapshot/records.py`` joins a list of ``bytes`` directly instead of calling
``_framed`` per value: see :func:`_fast_as_arrow`).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_image  # noqa: E402

from kraft_node.metadata.controller.events import EventQueue  # noqa: E402
from kraft_node.metadata.image import bulk  # noqa: E402
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage, image_records  # noqa: E402
from kraft_node.metadata.image.provenance import MetadataProvenance  # noqa: E402
from kraft_node.metadata.loader import SnapshotEmitter  # noqa: E402
from kraft_node.metadata.versions import MetadataVersion  # noqa: E402
from kraft_node.raft.messages import SnapshotId  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402
from kraft_storage.snapshot import SnapshotId as FileSnapshotId  # noqa: E402
from kraft_storage.snapshot import records as snapshot_records  # noqa: E402
from kraft_storage.snapshot.records import RecordsSnapshotReader, RecordsSnapshotWriter  # noqa: E402

MV = MetadataVersion.latest_production()


def _fast_as_arrow(values: Any) -> tuple[object, Any]:
    """The proposed ``records._as_arrow``: framed values that are all ``bytes`` are joined as
    they are (one C call, and their lengths by ``map(len)``); anything else goes the existing way."""
    if isinstance(values, list) and all(type(v) is bytes for v in values):
        import numpy as np
        lens = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
        off = np.zeros(len(values) + 1, dtype=np.int64)
        np.cumsum(lens, out=off[1:])
        return b"".join(values), off
    return _ORIGINAL_AS_ARROW(values)


_ORIGINAL_AS_ARROW = snapshot_records._as_arrow


class GcLog:
    """The collections while installed: generation -> [count, longest ms]."""

    def __init__(self) -> None:
        self.by_gen: dict[int, list[float]] = {}
        self._t0 = 0.0
        gc.callbacks.append(self._hook)

    def _hook(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        ms = (time.perf_counter() - self._t0) * 1e3
        entry = self.by_gen.setdefault(info["generation"], [0, 0.0])
        entry[0] += 1
        entry[1] = max(entry[1], ms)

    def remove(self) -> dict[str, Any]:
        gc.callbacks.remove(self._hook)
        return {f"gen{g}": {"n": int(n), "max_ms": round(ms, 2)} for g, (n, ms) in sorted(self.by_gen.items())}


class _FileRaft:
    """``create_snapshot`` into a directory, as the Raft core's writer would."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes | None = None, *,
                        last_contained_log_time_ms: int = 0) -> Any:
        return RecordsSnapshotWriter.create(self.directory, FileSnapshotId(snapshot_id.offset, snapshot_id.epoch))


def _base(records: list[Any], offset: int) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay(m.FeatureLevelRecord(name="metadata.version", feature_level=MV.feature_level))
    for r in records:
        delta.replay(r)
    return delta.apply(MetadataProvenance(offset, 1, 0, True))


def partitions_image(topics: int) -> MetadataImage:
    values = bench_image.jmh_values(topics, version=MV.partition_record_version())
    import dataclasses
    image = _base([], len(values))
    return dataclasses.replace(image, topics=bulk.fold_topics(values).image)


def brokers_image(brokers: int) -> MetadataImage:
    recs = [m.RegisterBrokerRecord(
        broker_id=b, broker_epoch=100 + b, incarnation_id=Uuid(b.to_bytes(4, "big") + bytes(11) + b"\x01"),
        rack=f"rack{b % 3}", log_dirs=[Uuid(b"\x09" + b.to_bytes(4, "big") + bytes(11))], fenced=False,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host=f"host-{b}.example", port=9092,
                                                          security_protocol=0)]) for b in range(brokers)]
    return _base(recs, brokers + 10)


def write_once(image: MetadataImage, directory: str, args: argparse.Namespace) -> dict[str, Any]:
    events: list[int] = []
    queue = EventQueue(time.monotonic_ns, on_event_timing=lambda _q, p: events.append(p))
    emitter = SnapshotEmitter(_FileRaft(directory), queue=queue, records_per_slice=args.records_per_slice,
                              slice_budget_ns=int(args.slice_budget_ms * 1e6))
    done: list[BaseException | None] = []
    gc.collect()
    collections = GcLog()
    t0 = time.perf_counter()
    assert emitter.begin_emit(image, done.append)
    while not done:
        queue.run_ready()
    wall = time.perf_counter() - t0
    gcs = collections.remove()
    if done[0] is not None:
        raise done[0]
    record = emitter.history[-1]
    name = f"{record.snapshot_id.offset:020d}-{record.snapshot_id.epoch:010d}.checkpoint"
    top = sorted(range(len(events)), key=lambda k: -events[k])[:5]
    return {"write_s": round(wall, 4), "max_event_ms": round(max(events) / 1e6, 3),
            "longest_events": [(k, round(events[k] / 1e6, 2)) for k in top],
            "first_event_ms": round(events[0] / 1e6, 2),
            "max_event_after_first_ms": round(max(events[1:], default=0) / 1e6, 2),
            "median_event_ms": round(statistics.median(events) / 1e6, 3), "events": len(events), "gc": gcs,
            "records": record.records, "slices": record.slices,
            "bytes": os.path.getsize(os.path.join(directory, name)), "file": name}


class _FramingWriter:
    """An image writer that only frames each record (what the emitter's writer does first)."""

    def __init__(self) -> None:
        self.records = 0

    def write(self, record: Any) -> None:
        record.encode()
        self.records += 1

    def close(self, complete: bool) -> None:
        pass


def image_write_once(image: MetadataImage) -> float:
    writer = _FramingWriter()
    gc.collect()
    t0 = time.perf_counter()
    image.write(writer, SnapshotEmitter.writer_options(image))
    return round(time.perf_counter() - t0, 4)


def measure(what: str, image: MetadataImage, args: argparse.Namespace, check: bool) -> dict[str, Any]:
    runs = []
    for i in range(args.runs):
        directory = tempfile.mkdtemp(prefix=f"snap-{what}-{i}-", dir=args.dir)
        try:
            run = write_once(image, directory, args)
            if check and i == 0:
                with RecordsSnapshotReader(os.path.join(directory, run["file"])) as reader:
                    written = [msg for _o, _k, _v, msg in reader.metadata_records()]
                expected = [r.message for r in image_records(image)]
                assert written == expected, "the snapshot does not hold the image writer's records"
            runs.append(run)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    out = {"runs": runs, "median_write_s": statistics.median(r["write_s"] for r in runs),
           "median_max_event_ms": statistics.median(r["max_event_ms"] for r in runs),
           "median_max_event_after_first_ms": statistics.median(r["max_event_after_first_ms"] for r in runs)}
    if what == "partitions":
        writes = [image_write_once(image) for _ in range(args.runs)]
        out.update(image_write_s=writes, median_image_write_s=statistics.median(writes))
    return out


def _kernel_name() -> str:
    from kraft_node.metadata.image import topics
    return str(topics._objects.__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--brokers", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--records-per-slice", type=int, default=1024)
    parser.add_argument("--slice-budget-ms", type=float, default=5.0)
    parser.add_argument("--gc-freeze", action="store_true",
                        help="gc.freeze() once the images are built (as kraft-server-start freezes its startup heap)")
    parser.add_argument("--what-if-fast-append", action="store_true",
                        help="the Raft snapshot writer with the proposed fast path for framed values")
    parser.add_argument("--dir", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"setup": {"python": platform.python_version(), "load_before": os.getloadavg(),
                                     "records_per_slice": args.records_per_slice,
                                     "slice_budget_ms": args.slice_budget_ms, "gc_freeze": args.gc_freeze,
                                     "what_if_fast_append": args.what_if_fast_append,
                                     "bulk_objects": _kernel_name()}}
    if args.what_if_fast_append:
        snapshot_records._as_arrow = _fast_as_arrow
    brokers = brokers_image(args.brokers) if args.brokers else None
    partitions = partitions_image(args.topics) if args.topics else None
    if args.gc_freeze:
        gc.collect()
        gc.freeze()
    if brokers is not None:
        out["brokers"] = {"brokers": args.brokers, **measure("brokers", brokers, args, True)}
    if partitions is not None:
        image = partitions
        res = measure("partitions", image, args, False)
        assert all(r["records"] == 1 + args.topics * 11 for r in res["runs"]), res["runs"]
        out["partitions"] = {"topics": args.topics, "partitions": args.topics * 10, **res}
    out["setup"]["load_after"] = os.getloadavg()
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
