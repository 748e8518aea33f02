"""Controller snapshots at scale (issue 22 target: a 1M-partition snapshot, about 75 MB,
written in <= 2 s and loaded into controller state in <= 2 s), in process.

    python benchmarks/bench_controller_snapshot.py [--topics 10000] [--partitions 100] [--rf 3]
        [--brokers 300] [--racks 3] [--topic-configs 1000] [--runs 3] [--dir D] [--json F]

The state: one QuorumController (every default manager) as a standby, given metadata.version
(the newest production one), ``--brokers`` registered unfenced brokers in ``--racks`` racks
(one log directory each), then ``--topics`` topics of ``--partitions`` partitions and
``--rf`` replicas made by ``ReplicationControlManager.create_topics`` (Kafka's
StripedReplicaPlacer) 98 topics a request (with their configs: at most 10,000 records), each result replayed through
``QuorumController.replay_many`` as the controller does; ``--topic-configs`` of the topics
get a ``retention.ms`` ConfigRecord.  The whole state is then marked committed (the offset
manager's commit of the last offset), so the snapshot generator may start.

What is timed, each run:

* ``write_s``: the controller's own snapshot path -- ``SnapshotGenerator.maybe_begin`` and
  every slice event it queues, run by the controller's event queue until the generator is
  done -- into Kafka's ``RecordsSnapshotWriter`` (``kraft_storage.snapshot``: 8 MiB v2 batches,
  CRC32C, the header/footer control batches) on a ``.checkpoint`` file, frozen with fsync.
  ``max_event_ms``: the longest event meanwhile (a slice, or the freeze).
  ``writer_append_s`` / ``writer_freeze_s``: the part of it spent in the records writer (the
  rest: reading the state, encoding the records, the generator's slicing).
* ``bytes``: the size of the ``.checkpoint``.
* ``load_s``: a fresh standby QuorumController loads it through the Raft listener path a node
  takes -- ``KafkaRaftLog``'s snapshot reader (``KafkaSnapshotReader``: CRC-checked batches
  over the file's mmap) handed to the controller's ``handle_load_snapshot``, whose event
  replays every record into the managers' timeline state.  Split into ``read_s`` (the listener
  call: the reader's batches) and ``apply_s`` (the load event).
* the loaded state is checked against the written one: the same topics and partition count,
  and the second controller's snapshot records equal the first's byte for byte (not timed).

What-ifs (proposed changes outside the snapshot code, measured here by patching them in;
the default run measures the code as it is):

* ``--what-if-reader-values``: ``KafkaSnapshotReader`` makes each batch's values with
  ``RecordColumns.values()`` (one list comprehension over the value positions) instead of a
  ``cols.value(i)`` call per record;
* ``--what-if-bulk-slices``: the snapshot generator takes a slice's records with one
  ``islice`` and hands the records writer one ``(data, offsets)`` buffer per slice (its bulk
  form) instead of a list of values it re-frames one by one;
* ``--what-if-deferred-indexes``: the load event's loop over the snapshot's batches runs
  inside ``replication_snapshot.deferred_indexes`` (the ISR and directory index entries of
  all batches put once at its end, before the registry's snapshot), the proposed change of
  ``QuorumController._handle_load_snapshot``.  Patched in by entering the block right after
  the offset manager's ``begin_load_snapshot`` and leaving it right before its
  ``end_load_snapshot`` (the same place as a block around the loop).  Since session 20 the load
  event has that block itself, so the flag changes nothing (a nested block adds to the outer one);
  kept so the session's command lines still run.

Load only (``--keep-snapshot DIR`` on a full run copies its last snapshot into DIR;
``--load-only DIR`` then loads DIR's ``.checkpoint`` into a new controller ``--runs`` times,
without building or writing): the apply can be compared between two checkouts in the same
minutes without paying the build (a minute or more at 1M partitions) for each.  The load is
checked only for its partition count there (``--partitions-expected``).

Not timed: building the state, once (``build_s`` is reported); each run writes it again (a
directory of its own) and loads it into a new controller.  Prints one JSON document: setup
(load average before/after, commit, implementations), each run, the medians.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from itertools import islice
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _support import code_version, emit_json  # noqa: E402

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata  # noqa: E402
from kraft_node.metadata.controller.events import EventQueue  # noqa: E402
from kraft_node.metadata.controller.quorum_controller import QuorumController  # noqa: E402
from kraft_node.metadata.controller.replication_snapshot import deferred_indexes  # noqa: E402
from kraft_node.metadata.controller.result import ApiMessageAndVersion  # noqa: E402
from kraft_node.metadata.controller.snapshot_generator import SnapshotGenerator  # noqa: E402
from kraft_node.metadata.versions import MetadataVersion  # noqa: E402
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest  # noqa: E402
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest  # noqa: E402
from kraft_node.raft.io.kafka_log import KafkaSnapshotReader  # noqa: E402
from kraft_node.raft.messages import Batch, LeaderAndEpoch, SnapshotId  # noqa: E402
from kraft_storage import accel  # noqa: E402
from kraft_storage.messages import columns  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402
from kraft_storage.snapshot import RecordsSnapshotReader, RecordsSnapshotWriter  # noqa: E402
from kraft_storage.snapshot import SnapshotId as FileSnapshotId  # noqa: E402
from kraft_storage.timeline import IMPLEMENTATION  # noqa: E402

EPOCH = 1


class _Writer:
    """The Raft client's snapshot writer over Kafka's RecordsSnapshotWriter (what
    ``KafkaRaftLog`` streams a controller snapshot into): ``append`` one batch's records,
    ``freeze`` (footer, fsync, rename), ``close``."""

    def __init__(self, directory: str, sid: SnapshotId) -> None:
        self.snapshot_id = sid
        self.inner = RecordsSnapshotWriter.create(directory, FileSnapshotId(sid.offset, sid.epoch),
                                                  last_contained_log_timestamp=0)
        self.size = 0
        #: time in the records writer: appends (batches built, CRC'd and written as they fill)
        #: and the freeze (the last batch, the footer, fsync)
        self.append_ns = self.freeze_ns = 0

    def append(self, records: Any) -> None:
        t0 = time.perf_counter_ns()
        self.inner.append(records)
        self.append_ns += time.perf_counter_ns() - t0

    def freeze(self) -> None:
        t0 = time.perf_counter_ns()
        self.size = self.inner.freeze()
        self.freeze_ns += time.perf_counter_ns() - t0

    def close(self) -> None:
        self.inner.close()


class _Raft:
    """A Raft client that is never the leader and writes snapshots into ``directory``."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.listener: Any = None
        self.writers: list[_Writer] = []

    def register_listener(self, listener: Any) -> None:
        self.listener = listener

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(-1, EPOCH)

    def next_offset(self, epoch: int) -> int:
        raise RuntimeError("a standby does not append")

    def schedule_append(self, records: Any, epoch: int, atomic: bool) -> int:
        raise RuntimeError("a standby does not append")

    def resign(self, epoch: int) -> None:
        pass

    def create_snapshot(self, sid: SnapshotId) -> _Writer:
        w = _Writer(self.directory, sid)
        self.writers.append(w)
        return w


class _ValuesReader(KafkaSnapshotReader):
    """--what-if-reader-values: a batch's values from ``RecordColumns.values()``."""

    def __iter__(self) -> Any:
        if self._records is None:
            self._records = RecordsSnapshotReader(self._raw, snapshot_id=self._raw.snapshot_id)
        for row, cols in self._records.iter_batches():
            vals = tuple(cols.values())
            if None in vals:
                vals = tuple(v or b"" for v in vals)
            yield Batch(int(row["base_offset"]), int(row["partition_leader_epoch"]), vals,
                        append_time_ms=int(row["max_timestamp"]))


def _bulk_slice(self: SnapshotGenerator) -> None:
    """--what-if-bulk-slices: SnapshotGenerator._slice taking up to ``records_per_slice``
    records at once and appending them as one (data, offsets) buffer."""
    if self._writer is None or self._records is None:
        return
    try:
        if self._exhausted:
            self._finish()
            return
        values = [r.encode() for r in islice(self._records, self.records_per_slice)]
        if len(values) < self.records_per_slice:
            self._exhausted = True
        if values:
            offsets = np.zeros(len(values) + 1, np.int64)
            np.cumsum(np.fromiter(map(len, values), np.int64, len(values)), out=offsets[1:])
            self._writer.append((b"".join(values), offsets))
            self._count += len(values)
            self._slices += 1
        self._schedule_slice()
    except BaseException:
        self.abort("a write failed")
        raise


def _controller(directory: str) -> tuple[QuorumController, EventQueue, list[int]]:
    queue = EventQueue(clock_ns=time.perf_counter_ns)
    boot = BootstrapMetadata.from_records([ApiMessageAndVersion(m.FeatureLevelRecord(
        name="metadata.version", feature_level=MetadataVersion.latest_production().feature_level), 0)], "bench")
    ctl = QuorumController(node_id=1, cluster_id="fPZv1VBsRFmnlRvmGcOW9w", raft=_Raft(directory), queue=queue,
                           clock_ms=lambda: time.monotonic_ns() // 1_000_000, bootstrap=boot)
    events: list[int] = []
    observe = queue.on_event_timing

    def timing(q_ns: int, p_ns: int) -> None:
        events.append(p_ns)
        if observe is not None:
            observe(q_ns, p_ns)
    queue.on_event_timing = timing
    return ctl, queue, events


def build_state(ctl: QuorumController, args: argparse.Namespace) -> int:
    """Replay the workload into ``ctl``'s managers; return the last offset."""
    offset = 0

    def apply(messages: list[Any]) -> None:
        nonlocal offset
        base = offset
        ctl.replay_many(messages, lambda i: base + i)
        offset += len(messages)

    apply([m.FeatureLevelRecord(name="metadata.version",
                                feature_level=MetadataVersion.latest_production().feature_level)])
    apply([m.RegisterBrokerRecord(
        broker_id=b, broker_epoch=100 + b, incarnation_id=Uuid.random(), rack=f"rack{b % args.racks}",
        log_dirs=[Uuid.random()], fenced=True,
        end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092 + b,
                                                          security_protocol=0)]) for b in range(args.brokers)])
    # unfenced by a heartbeat each, as bench_topic_creation does (the placer needs the
    # cluster manager's soft state: it is activated for the build, then deactivated)
    cluster = ctl.cluster_control
    cluster.activate(ctl.clock_ms)
    for b in range(args.brokers):
        result = cluster.process_broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=b, broker_epoch=100 + b, current_metadata_offset=offset, want_fence=False,
            want_shut_down=False))
        apply([r.message for r in result.records])
    if cluster.active_broker_count() != args.brokers:
        raise SystemExit("the brokers were not unfenced")
    T = CreateTopicsRequest
    rc = ctl.replication_control
    names = [f"topic-{i:05d}" for i in range(args.topics)]
    for i in range(0, args.topics, 98):
        req = T(topics=[T.CreatableTopic(
            name=n, num_partitions=args.partitions, replication_factor=args.rf,
            configs=([T.CreatableTopicConfig(name="retention.ms", value=str(86_400_000 + j))]
                     if j < args.topic_configs else []))
            for j, n in enumerate(names[i:i + 98], start=i)], timeout_ms=60_000)
        result = rc.create_topics(req)
        bad = [t for t in result.response.topics if t.error_code != 0]
        if bad:
            raise SystemExit(f"CreateTopics failed: {bad[:3]}")
        apply([r.message for r in result.records])
        gc.freeze()  # setup only: keeps full collections of the growing state out of the build time
    cluster.deactivate()
    last = offset - 1
    ctl.offset_control.handle_commit_batch(last, EPOCH, 0)
    return last


def write_snapshot(ctl: QuorumController, queue: EventQueue, events: list[int]) -> dict[str, Any]:
    gen = ctl.snapshot_generator
    gen.records_per_slice = max(gen.records_per_slice, 1)
    events.clear()
    t0 = time.perf_counter()
    if not gen.maybe_begin(reason="benchmark"):
        raise SystemExit("the snapshot generator would not start")
    while gen.in_progress:
        if queue.run_ready() == 0:
            raise SystemExit("the snapshot generator stalled")
    write_s = time.perf_counter() - t0
    sid, records, slices = gen.history[-1]
    writer = ctl.raft.writers[-1]
    return {"write_s": round(write_s, 4), "writer_append_s": round(writer.append_ns / 1e9, 4),
            "writer_freeze_s": round(writer.freeze_ns / 1e9, 4), "records": records, "slices": slices,
            "max_event_ms": round(max(events) / 1e6, 3),
            "median_event_ms": round(statistics.median(events) / 1e6, 3),
            "events": len(events), "events_over_10ms": sum(1 for e in events if e > 10_000_000),
            "longest_events_ms": [round(e / 1e6, 1) for e in sorted(events)[-5:]],
            "bytes": writer.size, "snapshot": f"{sid.offset}-{sid.epoch}"}


def _defer_indexes(ctl: QuorumController) -> None:
    """--what-if-deferred-indexes on ``ctl`` (see the module doc)."""
    oc = ctl.offset_control
    begin, end = oc.begin_load_snapshot, oc.end_load_snapshot
    stack = contextlib.ExitStack()

    def begin_deferred(offset: int, epoch: int) -> None:
        begin(offset, epoch)
        stack.enter_context(deferred_indexes(ctl))

    def end_deferred(timestamp_ms: int) -> None:
        stack.close()  # the pending index entries are put here, before the registry's snapshot
        end(timestamp_ms)
    oc.begin_load_snapshot = begin_deferred  # type: ignore[method-assign]
    oc.end_load_snapshot = end_deferred  # type: ignore[method-assign]


def load_snapshot(directory: str, sid: SnapshotId, reader_cls: type = KafkaSnapshotReader,
                  defer: bool = False) -> tuple[QuorumController, dict[str, Any]]:
    ctl, queue, events = _controller(directory)
    if defer:
        _defer_indexes(ctl)
    gc.collect()
    collections = _CollectorTime()
    t0, c0 = time.perf_counter(), time.process_time()
    reader = reader_cls(directory, sid)
    try:
        ctl._listener.handle_load_snapshot(reader)
        t1, c1 = time.perf_counter(), time.process_time()
        with collections:
            queue.run_ready()
        t2, c2 = time.perf_counter(), time.process_time()
    finally:
        reader.close()
    if ctl.fatal is not None:
        raise SystemExit(f"the snapshot did not load: {ctl.fatal!r}")
    if ctl.snapshots_loaded != [sid]:
        raise SystemExit(f"the snapshot was not loaded: {ctl.snapshots_loaded}")
    # the CPU time of this process too: on a shared machine the wall time mostly measures the others
    return ctl, {"load_s": round(t2 - t0, 4), "read_s": round(t1 - t0, 4), "apply_s": round(t2 - t1, 4),
                 "load_cpu_s": round(c2 - c0, 4), "apply_cpu_s": round(c2 - c1, 4),
                 "apply_gc_s": round(collections.seconds, 4), "apply_gc_runs": collections.runs}


class _CollectorTime:
    """The cyclic collector's runs during the block (``gc.callbacks``): how many per
    generation and their wall time -- the collector's cost is invisible to a sampling profile
    (it lands on whatever allocation triggered it)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.runs = [0, 0, 0]
        self._start = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._start
            self.runs[info["generation"]] += 1

    def __enter__(self) -> "_CollectorTime":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)


def check_same(a: QuorumController, b: QuorumController, partitions: int) -> None:
    ea, eb = a.offset_control.last_stable_offset, b.offset_control.last_stable_offset
    ta, tb = a.replication_control.topics(epoch=ea), b.replication_control.topics(epoch=eb)
    if ta != tb:
        raise SystemExit("the loaded topics differ from the written ones")
    count = sum(b.replication_control.topic(t).num_partitions() for t in tb.values())
    if count != partitions:
        raise SystemExit(f"{count} partitions loaded, {partitions} written")
    if a.snapshot_values(ea) != b.snapshot_values(eb):
        raise SystemExit("the loaded controller's snapshot records differ from the writer's")


def one_run(args: argparse.Namespace, ctl: QuorumController, queue: EventQueue, events: list[int],
            base: str, run: int) -> dict[str, Any]:
    """Write the state's snapshot into a directory of its own, load it into a fresh controller."""
    directory = os.path.join(base, f"run{run}")
    os.mkdir(directory)
    try:
        ctl.raft.directory = directory
        ctl.snapshot_generator.last_snapshot_offset = 0  # the same state, written again
        out: dict[str, Any] = write_snapshot(ctl, queue, events)
        sid = ctl.raft.writers[-1].snapshot_id
        loaded, timing = load_snapshot(directory, sid,
                                       _ValuesReader if args.what_if_reader_values else KafkaSnapshotReader,
                                       args.what_if_deferred_indexes)
        out.update(timing)
        out["partitions"] = args.topics * args.partitions
        if args.check:
            check_same(ctl, loaded, args.topics * args.partitions)
        out["checked"] = bool(args.check)
        del loaded
        gc.collect()
        return out
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def load_only(args: argparse.Namespace) -> int:
    """``--load-only DIR``: load DIR's one snapshot into a new controller ``--runs`` times."""
    names = [n for n in os.listdir(args.load_only) if n.endswith(".checkpoint")]
    if len(names) != 1:
        raise SystemExit(f"--load-only: {args.load_only} must hold exactly one .checkpoint, found {names}")
    offset, epoch = (int(x) for x in names[0][:-len(".checkpoint")].split("-"))
    sid = SnapshotId(offset, epoch)
    load_before = os.getloadavg()
    runs = []
    for _ in range(args.runs):
        loaded, timing = load_snapshot(args.load_only, sid, defer=args.what_if_deferred_indexes)
        rc = loaded.replication_control
        timing["partitions"] = sum(rc.topic(t).num_partitions() for t in rc.topics().values())
        runs.append(timing)
        del loaded, rc
        gc.collect()
    doc = {
        "benchmark": "controller_snapshot_load_only",
        "setup": {"args": vars(args), "snapshot": names[0], "load_before": load_before,
                  "load_after": os.getloadavg(), "python": platform.python_version(), "timeline": IMPLEMENTATION,
                  "columns": columns.IMPLEMENTATION, "fallbacks": dict(accel.FALLBACKS), "code": code_version()},
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs)
                   for k in ("load_s", "read_s", "apply_s", "load_cpu_s", "apply_cpu_s", "apply_gc_s")},
    }
    emit_json(doc, args.json)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--rf", type=int, default=3)
    p.add_argument("--brokers", type=int, default=300)
    p.add_argument("--racks", type=int, default=3)
    p.add_argument("--topic-configs", type=int, default=1000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-check", dest="check", action="store_false",
                   help="skip the (untimed) byte comparison of the two controllers' snapshot records")
    p.add_argument("--dir", default=None, help="where the .checkpoint files go (default: the temp dir)")
    p.add_argument("--what-if-reader-values", action="store_true",
                   help="load with the proposed KafkaSnapshotReader batch values (see the module doc)")
    p.add_argument("--what-if-bulk-slices", action="store_true",
                   help="write with the proposed bulk generator slices (see the module doc)")
    p.add_argument("--what-if-deferred-indexes", action="store_true",
                   help="no-op since session 20 (the load event has the deferred_indexes block; see the module doc)")
    p.add_argument("--keep-snapshot", metavar="DIR",
                   help="copy the last run's .checkpoint into DIR (for --load-only)")
    p.add_argument("--load-only", metavar="DIR",
                   help="only load DIR's .checkpoint (from --keep-snapshot), --runs times")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if args.load_only:
        return load_only(args)
    if args.what_if_bulk_slices:
        SnapshotGenerator._slice = _bulk_slice  # type: ignore[method-assign]
    base = tempfile.mkdtemp(prefix="bench-controller-snapshot-", dir=args.dir)
    try:
        ctl, queue, events = _controller(base)
        t0 = time.perf_counter()
        build_state(ctl, args)
        build_s = time.perf_counter() - t0
        gc.collect()
        gc.freeze()  # the state is long-lived, as the controller server freezes its heap
        load_before = os.getloadavg()
        runs = [one_run(args, ctl, queue, events, base, i) for i in range(args.runs)]
        if args.keep_snapshot:
            os.makedirs(args.keep_snapshot, exist_ok=True)
            ctl.raft.directory = args.keep_snapshot
            ctl.snapshot_generator.last_snapshot_offset = 0
            write_snapshot(ctl, queue, events)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    doc = {
        "benchmark": "controller_snapshot",
        "setup": {"args": vars(args), "load_before": load_before, "load_after": os.getloadavg(),
                  "python": platform.python_version(), "timeline": IMPLEMENTATION,
                  "columns": columns.IMPLEMENTATION, "fallbacks": dict(accel.FALLBACKS), "cpus": os.cpu_count(),
                  "code": code_version()},
        "build_s": round(build_s, 2),
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs)
                   for k in ("write_s", "max_event_ms", "bytes", "load_s", "read_s", "apply_s", "load_cpu_s",
                             "apply_cpu_s")},
    }
    emit_json(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
