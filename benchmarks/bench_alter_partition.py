"""The controller's AlterPartition at 1k and 10k partitions, in process: how long the
events that answer it run (wall and CPU), and the cost per partition.

    python benchmarks/bench_alter_partition.py [--sizes 1000,10000] [--per-topic 100] [--runs 3]
                                               [--json F] [--markdown F] [--breakdown]

The scenario is the one measured in session 19 on the 3-node cluster: a broker restarts and
catches up on all its partitions, and their leaders send AlterPartition requests adding it
back to the ISR.  Here: one QuorumController on the scripted Raft of ``bench_controller.py``
(its real EventQueue, replay, purgatory; every append committed at once), brokers 0-2
registered, 0 and 1 unfenced; ``size`` partitions in topics of ``--per-topic``, RF 3, replicas
rotated ``[(p + k) % 3]`` and created while broker 2 is fenced (so broker 2 is in no ISR and
leads nothing); broker 2 unfenced.  Then each leader (0 and 1) sends ONE AlterPartition v3
naming all its partitions with the ISR plus broker 2 (at its broker epoch), both queued at
once, and the queue is run until both are answered.  Every answer is checked (NONE, ISR of 3,
partition epoch + 1) and so is the controller's state after.

Figures (per run): each event that worked on the requests (``alterPartition*`` by name) --
its wall time (perf_counter) and CPU time (thread_time) -- the longest one, their sum, and us
per partition of the sum; the wall time from queueing to both answers; the number of events.
The partition changes get the controller thread's CPU clock, as the node's server wires it
(slices then end after 8 ms of building as well as after their cost).
Which code answers: ``AlterPartitionManager.submit`` when this tree has it (the sliced path,
as ``QuorumController.alter_partition`` calls it once wired), else
``QuorumController.alter_partition`` (one event per request): the same script measures an old
checkout and a new one, alternated by the caller in the same minutes.

Prints one JSON document (setup, each run, medians); ``--markdown F`` writes a table.
``--breakdown``: instead, the CPU per partition of a write's parts outside the event loop
(building through the full path and through the bulk path, encoding, replaying).
"""
from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))

from _support import code_version, emit_json  # noqa: E402
from bench_controller import Brokers, ScriptedHarness, heartbeat_request, registration_request  # noqa: E402
from support.replication import creatable_topic, create_topics_request  # noqa: E402

from kraft_node.protocol.errors import Errors  # noqa: E402
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest  # noqa: E402

APR = AlterPartitionRequest
BROKERS = 3


class _Timed:
    """An event whose run is timed (wall and this thread's CPU) under its name."""

    __slots__ = ("event", "sink")

    def __init__(self, event: Any, sink: Callable[[str, int, int], None]):
        self.event, self.sink = event, sink

    def run(self) -> None:
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        try:
            self.event.run()
        finally:
            self.sink(getattr(self.event, "name", type(self.event).__name__),
                      time.perf_counter_ns() - w0, time.thread_time_ns() - c0)

    def handle_exception(self, exc: BaseException) -> None:
        self.event.handle_exception(exc)


def time_events(queue: Any, sink: Callable[[str, int, int], None]) -> None:
    """Every event queued on ``queue`` from now on goes through :class:`_Timed`."""
    for name in ("append", "prepend"):
        orig = getattr(queue, name)
        setattr(queue, name, lambda ev, _o=orig: _o(_Timed(ev, sink)))
    orig_deadline = queue.append_with_deadline
    queue.append_with_deadline = lambda d, ev: orig_deadline(d, _Timed(ev, sink))


def pump_until(h: ScriptedHarness, done: Callable[[], bool], what: str, limit_s: float = 120.0) -> None:
    t_end = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > t_end:
            raise SystemExit(f"{what}: not done in {limit_s} s")
        h.pump()


def setup(size: int, per_topic: int) -> tuple[ScriptedHarness, Brokers, list[tuple[Any, int, Any]]]:
    """The controller, its brokers, and ``(topic id, partition, registration)`` of every partition."""
    h = ScriptedHarness()
    ctl = h.controller
    brokers = Brokers(h, BROKERS)
    # register all three; unfence 0 and 1 (heartbeat at their registration offset)
    futs = [ctl.register_broker(registration_request(b, brokers.features, ctl.cluster_id)) for b in range(BROKERS)]
    pump_until(h, lambda: all(f.done() for f in futs), "registration")
    for b, f in enumerate(futs):
        brokers.epochs[b] = f.result().epoch

    def unfence(b: int) -> None:
        for _ in range(50):
            fut = ctl.process_broker_heartbeat(heartbeat_request(b, brokers.epochs[b], ctl.last_stable_offset))
            pump_until(h, fut.done, f"heartbeat of {b}")
            if not fut.result().is_fenced:
                return
        raise SystemExit(f"broker {b} stays fenced")
    unfence(0)
    unfence(1)
    topics = size // per_topic
    for t0 in range(0, topics, 50):  # 50 topics a request (at most 5,000 partitions: under 10,000 records)
        req = create_topics_request(*[
            creatable_topic(f"t{t:05d}", assignments=[[(p + k) % BROKERS for k in range(3)] for p in range(per_topic)])
            for t in range(t0, min(topics, t0 + 50))])
        fut = ctl.create_topics(req, {t.name for t in req.topics})
        pump_until(h, fut.done, "create topics")
        assert all(r.error_code == 0 for r in fut.result().topics), fut.result()
    unfence(2)
    context = ctl.partition_ops.context
    if hasattr(context, "clock_ns"):
        context.clock_ns = time.thread_time_ns  # as the node's server wires it (kraft_node/server/controller.py)
    rc = ctl.replication_control
    parts = []
    for topic in rc.topics_by_id.values():
        for pid in range(per_topic):
            p = topic.parts.get(pid)
            assert p is not None and 2 not in p.isr and p.leader in (0, 1), p
            parts.append((topic.topic_id, pid, p))
    return h, brokers, parts


def requests(brokers: Brokers, parts: list[tuple[Any, int, Any]]) -> dict[int, Any]:
    """One AlterPartition (v3) per leader: each of its partitions with broker 2 added."""
    by_leader: dict[int, dict[Any, list[Any]]] = {}
    for topic_id, pid, p in parts:
        by_leader.setdefault(p.leader, {}).setdefault(topic_id, []).append(APR.PartitionData(
            partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
            leader_recovery_state=0,
            new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=brokers.epochs[b])
                                 for b in (*p.isr, 2)]))
    return {leader: APR(broker_id=leader, broker_epoch=brokers.epochs[leader],
                        topics=[APR.TopicData(topic_id=t, partitions=ps) for t, ps in topics.items()])
            for leader, topics in by_leader.items()}


def one_run(size: int, per_topic: int) -> dict[str, Any]:
    h, brokers, parts = setup(size, per_topic)
    ctl = h.controller
    reqs = requests(brokers, parts)
    manager = ctl.partition_ops.alter_partitions
    submit = getattr(manager, "submit", None)
    path = "sliced (AlterPartitionManager.submit)" if submit is not None else "one event (QuorumController)"
    samples: list[tuple[str, int, int]] = []
    time_events(h.queue, lambda name, w, c: samples.append((name, w, c)))
    gc.collect()
    gc.freeze()
    t0 = time.perf_counter()
    futs = {}
    for leader, req in reqs.items():
        futs[leader] = (submit(ctl, req, 3) if submit is not None else ctl.alter_partition(req, 3))
    pump_until(h, lambda: all(f.done() for f in futs.values()), "AlterPartition")
    wall = time.perf_counter() - t0
    gc.unfreeze()
    # every answer, and the state after
    answered = 0
    rc = ctl.replication_control
    for leader, fut in futs.items():
        exc = fut.exception()
        if exc is not None:
            raise SystemExit(f"the request of leader {leader} failed: {exc!r}")
        for t in fut.result().topics:
            for p in t.partitions:
                if p.error_code != Errors.NONE or len(p.isr) != 3:
                    raise SystemExit(f"leader {leader}: {t.topic_id}-{p.partition_index} answered {p}")
                answered += 1
    assert answered == len(parts), (answered, len(parts))
    for topic_id, pid, before in parts:
        now = rc.topic(topic_id).parts.get(pid)
        assert now.isr == (*before.isr, 2) and now.partition_epoch == before.partition_epoch + 1, (before, now)
    events = [(n, w, c) for n, w, c in samples if n.startswith("alterPartition")]
    h.close()
    total_w = sum(w for _, w, _ in events)
    total_c = sum(c for _, _, c in events)
    return {
        "path": path, "partitions": len(parts), "requests": len(reqs),
        "partitions_per_request": sorted(sum(len(t.partitions) for t in r.topics) for r in reqs.values()),
        "events": len(events),
        "longest_event_wall_ms": round(max(w for _, w, _ in events) / 1e6, 2),
        "longest_event_cpu_ms": round(max(c for _, _, c in events) / 1e6, 2),
        "events_wall_ms": round(total_w / 1e6, 2), "events_cpu_ms": round(total_c / 1e6, 2),
        "us_per_partition_wall": round(total_w / 1e3 / len(parts), 2),
        "us_per_partition_cpu": round(total_c / 1e3 / len(parts), 2),
        "queue_to_answers_ms": round(wall * 1e3, 2),
    }


def breakdown(size: int, per_topic: int, rounds: int) -> dict[str, Any]:
    """CPU per partition of the parts of one write, on leader 0's request (no event loop):
    building with the full path (validation + PartitionChangeBuilder, ``_alter_one``) and with
    ``alter_slice`` (the bulk path where it can), then encoding and replaying the records
    (``replay_many``, the bulk replayer).  Needs a tree with ``alter_slice``."""
    h, brokers, parts = setup(size, per_topic)
    ctl = h.controller
    manager = ctl.partition_ops.alter_partitions
    if not hasattr(manager, "alter_slice"):
        h.close()
        return {"skipped": "this tree has no AlterPartitionManager.alter_slice"}
    req = requests(brokers, parts)[0]
    rc = ctl.replication_control
    items = [(rc.topic(t.topic_id), p) for t in req.topics for p in t.partitions]
    n = len(items)
    gc.collect()
    gc.freeze()
    rows: dict[str, list[float]] = {"build_full_us": [], "build_bulk_us": [], "encode_us": []}
    records: list[Any] = []
    for _ in range(rounds):
        with manager.ctx.reading_once():
            t0 = time.thread_time()
            full: list[Any] = []
            for topic, data in items:
                manager._alter_one(0, topic, data, 3, full)
            t1 = time.thread_time()
        records, answers = [], []
        t2 = time.thread_time()
        manager.alter_slice(req, 3, (0, 0), None, records, answers)
        t3 = time.thread_time()
        assert [r.encode() for r in records] == [r.encode() for r in full]
        t4 = time.thread_time()
        [r.encode() for r in records]
        t5 = time.thread_time()
        rows["build_full_us"].append((t1 - t0) / n * 1e6)
        rows["build_bulk_us"].append((t3 - t2) / n * 1e6)
        rows["encode_us"].append((t5 - t4) / n * 1e6)
    t0 = time.thread_time()
    ctl.replay_many([r.message for r in records], lambda i: 1 << 40)
    replay = (time.thread_time() - t0) / n * 1e6
    gc.unfreeze()
    h.close()
    med = {k: round(statistics.median(v), 2) for k, v in rows.items()}
    return {"partitions": n, "rounds": {k: [round(x, 2) for x in v] for k, v in rows.items()}, "median": med,
            "replay_us": round(replay, 2), "build_ratio": round(med["build_full_us"] / med["build_bulk_us"], 2)}


def markdown(doc: dict[str, Any]) -> str:
    lines = ["| partitions | path | events | longest event wall ms | longest CPU ms | sum wall ms | "
             "sum CPU ms | us/partition (CPU) | queue to answers ms |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for size, med in doc["median"].items():
        lines.append(f"| {size} | {med['path']} | {med['events']} | {med['longest_event_wall_ms']} | "
                     f"{med['longest_event_cpu_ms']} | {med['events_wall_ms']} | {med['events_cpu_ms']} | "
                     f"{med['us_per_partition_cpu']} | {med['queue_to_answers_ms']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000", help="partition counts, comma-separated")
    ap.add_argument("--per-topic", type=int, default=100)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the JSON document here")
    ap.add_argument("--markdown", default=None, help="write a markdown table of the medians here")
    ap.add_argument("--breakdown", action="store_true",
                    help="only the CPU per partition of building (full vs bulk), encoding and replaying")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for s in sizes:
        if s <= 0 or s % args.per_topic:
            ap.error(f"--sizes: {s} is not a positive multiple of --per-topic {args.per_topic}")
    doc: dict[str, Any] = {"benchmark": "alter_partition", "argv": ["benchmarks/bench_alter_partition.py",
                                                                   *sys.argv[1:]],
                           "code": code_version(), "python": sys.version.split()[0],
                           "loadavg_before": os.getloadavg(), "runs": {}, "median": {}}
    if args.breakdown:
        doc["breakdown"] = {str(size): breakdown(size, args.per_topic, args.runs) for size in sizes}
        doc["loadavg_after"] = os.getloadavg()
        emit_json(doc, args.json)
        return
    for size in sizes:
        runs = [one_run(size, args.per_topic) for _ in range(args.runs)]
        doc["runs"][str(size)] = runs
        med: dict[str, Any] = {"path": runs[0]["path"], "events": runs[0]["events"]}
        for key in ("longest_event_wall_ms", "longest_event_cpu_ms", "events_wall_ms", "events_cpu_ms",
                    "us_per_partition_wall", "us_per_partition_cpu", "queue_to_answers_ms"):
            med[key] = round(statistics.median(r[key] for r in runs), 2)
        doc["median"][str(size)] = med
    doc["loadavg_after"] = os.getloadavg()
    emit_json(doc, args.json)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(doc))


if __name__ == "__main__":
    main()
