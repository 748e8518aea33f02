"""Issue 22's benchmarks on real nodes: three controllers on 127.0.0.1 (node 1 in this process
and the leader, nodes 2 and 3 processes; fsync on), topics and partitions through node 1's
QuorumController, every record committed by the quorum and replayed by the two standbys.

    python benchmarks/replication_bench.py create   [--topics 1000] [--partitions 100] [--rf 3]
                                                    [--brokers 100] [--racks 3] [--topics-per-request 99]
                                                    [--inflight 4] [--runs 3] [--json F]
    python benchmarks/replication_bench.py zonal    [--brokers 300] [--racks 3] [--topics 10000]
                                                    [--partitions 100] [--runs 1] [--changes-per-result N]
    python benchmarks/replication_bench.py shutdown [--brokers 3] [--racks 3] [--topics 300]
                                                    [--partitions 100] [--runs 3] [--changes-per-result N]

``create`` (target >= 200k partitions/s end to end; below 50k/s issue 22 is not done):
``--brokers`` brokers in ``--racks`` racks register and heartbeat until unfenced; then
``--topics`` topics of ``--partitions`` partitions and ``--rf`` replicas are created with
CreateTopics requests of ``--topics-per-request`` topics (99 x 101 records = 9,999, the most
one request may write), ``--inflight`` requests outstanding.  Timed: from the first request
to the last answer (an answer comes once the request's records are committed).  Checked:
every topic created with its partitions in the committed state of node 1.

``zonal`` (target: <= 2 s end to end, no event-loop stall above 50 ms): ``--brokers`` brokers
in ``--racks`` racks heartbeating (session 2 s, heartbeat 0.5 s), ``--topics`` x
``--partitions`` partitions of RF 3 (1M by default, created as above); then every broker of
rack 0 stops heartbeating at once.  Timed from their sessions' expiry (2 s after the last
heartbeat) until every one of them is fenced and in no ISR, in node 1's committed state (so
the fencing task's detection delay, up to session/8, is included).  Reported: the partition
changes written, the largest single append, the longest controller event.

``shutdown`` (target <= 1 s): of ``--brokers`` brokers, broker 0 (leading about
``--topics`` x ``--partitions`` / ``--brokers`` partitions) asks for a controlled shutdown (a
heartbeat with wantShutDown every 10 ms, at the committed offset); timed until a heartbeat
answer says shouldShutDown (its leaderships moved and committed).  Also reported: the
longest gap between two of its heartbeats (an answer waits for the commit of everything
written before it) and ``session_expired`` when that gap passed the session, i.e. the
stale-broker task fenced it and the run timed a fencing, not a controlled shutdown.

``zonal`` and ``shutdown`` also report each node's CPU seconds over the timed part (node 1,
this process, first), the controller's busy time, and take ``--changes-per-result N`` (node
1's bound on one lifecycle result), ``--builder-only`` (node 1 builds every lifecycle change
with the PartitionChangeBuilder, not the bulk path of ``lifecycle_bulk.py``, and replays every
PartitionChangeRecord the general way: the A/B of those paths in the same minutes),
``--bulk-replay`` (node 1 replays runs of PartitionChangeRecords with
``replay_partition_changes`` where the controller does not wire it yet) and ``--profile FILE``
(cProfile of node 1 over the timed part).

Each prints one JSON document (setup with the load average before and after, the runs, the
median of the headline).
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import sys
import time
from array import array
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _support import code_version  # noqa: E402
from bench_controller import broker_features, heartbeat_request, ms_summary, registration_request  # noqa: E402
from controller_tcp_bench import EventLog, GcPauses, LocalCluster, run_repeated, start_py_spy  # noqa: E402
from raft_tcp_bench import cpu_seconds  # noqa: E402

from kraft_node import event_loop  # noqa: E402
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest  # noqa: E402

CT = CreateTopicsRequest


async def wait_all(futures: list[Any], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(f.done() for f in futures):
        if time.monotonic() > deadline:
            raise SystemExit(f"{sum(not f.done() for f in futures)} controller calls unanswered after {timeout} s")
        await asyncio.sleep(0.002)
    for f in futures:
        if f.exception() is not None:
            raise SystemExit(f"a controller call failed: {f.exception()!r}")


async def register_racked(ctl: Any, n: int, racks: int) -> tuple[list[int], list[Any]]:
    """Register ``n`` brokers in ``racks`` racks (broker b in rack b % racks) and unfence them."""
    features = broker_features()
    futs = []
    for b in range(n):
        req = registration_request(b, features, ctl.cluster_id)
        req.rack = f"rack{b % racks}"
        futs.append(ctl.register_broker(req))
    await wait_all(futs)
    epochs = [f.result().epoch for f in futs]
    hbs = [heartbeat_request(b, epochs[b], epochs[b]) for b in range(n)]
    futs = []
    for b in range(n):
        ctl.track_broker_heartbeat(b, epochs[b])
        futs.append(ctl.process_broker_heartbeat(hbs[b]))
    await wait_all(futs)
    if ctl.cluster_control.fenced_broker_count() != 0:
        raise SystemExit("brokers still fenced after their heartbeats")
    return epochs, hbs


def create_requests(topics: int, partitions: int, rf: int, per_request: int, prefix: str = "t") -> list[Any]:
    names = [f"{prefix}{i:06d}" for i in range(topics)]
    return [CT(topics=[CT.CreatableTopic(name=n, num_partitions=partitions, replication_factor=rf, assignments=[],
                                         configs=[]) for n in names[i:i + per_request]], timeout_ms=600_000)
            for i in range(0, topics, per_request)]


async def create_topics(ctl: Any, requests: list[Any], inflight: int) -> tuple[float, list[Any]]:
    """Send the CreateTopics requests, ``inflight`` outstanding; (seconds, answers)."""
    answers: list[Any] = [None] * len(requests)
    pending: list[Any] = []
    t0 = time.perf_counter()
    nxt = 0
    while nxt < len(requests) or pending:
        while nxt < len(requests) and len(pending) < inflight:
            f = ctl.create_topics(requests[nxt])
            pending.append((nxt, f))
            nxt += 1
        await asyncio.sleep(0.0005)
        still = []
        for i, f in pending:
            if f.done():
                if f.exception() is not None:
                    raise SystemExit(f"CreateTopics failed: {f.exception()!r}")
                answers[i] = f.result()
            else:
                still.append((i, f))
        pending = still
    seconds = time.perf_counter() - t0
    for a in answers:
        bad = [(t.name, t.error_code, t.error_message) for t in a.topics if t.error_code]
        if bad:
            raise SystemExit(f"topics not created: {bad[:3]}")
    return seconds, answers


def committed_partitions(ctl: Any) -> int:
    rc = ctl.replication_control
    epoch = ctl.committed_epoch()
    return sum(rc.topic(tid, epoch=epoch).num_partitions(epoch=epoch) for tid in rc.topics(epoch=epoch).values())


async def run_create(args: argparse.Namespace, base: str) -> dict[str, Any]:
    cluster = LocalCluster(base)
    try:
        node = await cluster.start()
        ctl = node.controller.controller
        events = EventLog(node.controller)
        await register_racked(ctl, args.brokers, args.racks)
        requests = create_requests(args.topics, args.partitions, args.rf, args.topics_per_request)
        events.clear()
        pauses = GcPauses()
        cpu0 = [cpu_seconds([p]) for p in cluster.pids]
        seconds, _answers = await create_topics(ctl, requests, args.inflight)
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(cluster.pids, cpu0)]
        pauses.remove()
        total = args.topics * args.partitions
        got = committed_partitions(ctl)
        if got != total:
            raise SystemExit(f"{got} partitions committed, expected {total}")
        creates = events.by_name(lambda n: n == "createTopics")
        return {"topics": args.topics, "partitions": total, "rf": args.rf, "brokers": args.brokers,
                "racks": args.racks, "topics_per_request": args.topics_per_request, "inflight": args.inflight,
                "seconds": round(seconds, 3), "partitions_per_s": round(total / seconds, 1),
                "create_events": ms_summary(creates), "event_processing": ms_summary(events.processing_ns),
                "longest_events": events.longest(), "gc_pauses": pauses.summary(), "cpu_seconds_by_node": cpu}
    finally:
        await cluster.stop()


async def build_cluster_with_topics(args: argparse.Namespace, base: str) -> tuple[LocalCluster, Any, Any,
                                                                                   list[int], list[Any], float]:
    cluster = LocalCluster(base)
    node = await cluster.start()
    ctl = node.controller.controller
    epochs, hbs = await register_racked(ctl, args.brokers, args.racks)
    requests = create_requests(args.topics, args.partitions, 3, args.topics_per_request)
    seconds, _ = await create_topics(ctl, requests, args.inflight)
    return cluster, node, ctl, epochs, hbs, seconds


class HeartbeatKeeper:
    """Keeps brokers' sessions alive: a heartbeat each every ``interval_s``, at the committed
    offset (a broker that has caught up).  ``brokers`` may be changed while it runs."""

    def __init__(self, ctl: Any, epochs: list[int], brokers: list[int], interval_s: float):
        self.ctl, self.epochs, self.brokers, self.interval_s = ctl, epochs, list(brokers), interval_s
        self.task: asyncio.Task[None] | None = None
        self.last_beat: dict[int, float] = {}

    async def _run(self) -> None:
        while True:
            ctl = self.ctl
            off = ctl.committed_epoch()
            now = time.perf_counter()
            for b in list(self.brokers):
                ctl.track_broker_heartbeat(b, self.epochs[b])
                ctl.process_broker_heartbeat(heartbeat_request(b, self.epochs[b], off))
                self.last_beat[b] = now
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()


class BatchSizes:
    """The record counts of node 1's Raft appends (its driver's schedule_append)."""

    def __init__(self, ctl: Any):
        self.sizes = array("q")
        raft = ctl.raft
        self._orig: Callable[..., int] = raft.schedule_append

        def wrapped(records: Any, epoch: int, atomic: bool) -> int:
            self.sizes.append(len(records))
            return self._orig(records, epoch, atomic)
        raft.schedule_append = wrapped
        self._raft = raft

    def remove(self) -> None:
        self._raft.schedule_append = self._orig


class TimedProfile:
    """cProfile of this process (node 1: its controller, Raft driver and metadata loader) over
    the timed part only, written to ``path`` (nothing when ``path`` is None); the setup (topic
    creation) would otherwise dominate a whole-run profile."""

    def __init__(self, path: str | None):
        self.path = path
        self._prof: cProfile.Profile | None = None
        if path is not None:
            self._prof = cProfile.Profile()
            self._prof.enable()

    def stop(self) -> None:
        if self._prof is not None and self.path is not None:
            self._prof.disable()
            self._prof.dump_stats(self.path)
            self._prof = None


def set_changes_per_result(ctl: Any, n: int | None) -> None:
    """Node 1's bound on the partition changes of one broker lifecycle result (None: the
    controller's default), for measuring the bound's effect; only the active controller writes
    them, so the standbys need not know."""
    if n is not None:
        if n < 1:
            raise SystemExit(f"--changes-per-result must be positive, not {n}")
        ctl.partition_ops.context.max_partition_changes_per_result = n


def set_build_budget(ctl: Any, ms: float | None) -> None:
    """Node 1's time budget for building one lifecycle result (None: the default; 0: none, the
    count alone bounds a result)."""
    if ms is not None:
        if ms < 0:
            raise SystemExit(f"--build-budget-ms must not be negative, not {ms}")
        ctx = ctl.partition_ops.context
        if ms == 0:
            ctx.clock_ns = None
        else:
            ctx.result_build_budget_ns = int(ms * 1_000_000)


def set_max_uncommitted(ctl: Any, n: int | None) -> None:
    """Node 1's back-pressure on lifecycle continuations: the stale-broker task writes no
    more partition changes while more than ``n`` records are uncommitted (None: the default)."""
    if n is not None:
        if n < 1:
            raise SystemExit(f"--max-uncommitted must be positive, not {n}")
        ctl.cluster_control.max_uncommitted_for_continuation = n


def wire_bulk_replay(ctl: Any, on: bool) -> None:
    """``--bulk-replay``: node 1 replays runs of PartitionChangeRecords with
    ``replay_partition_changes`` where the controller does not wire it yet (the standbys, other
    processes, replay as their managers say)."""
    from kraft_storage.messages import metadata as m
    if on and int(m.PartitionChangeRecord.API_KEY) not in ctl._bulk_replayers:
        ctl.register_bulk_replayer(m.PartitionChangeRecord, ctl.replication_control.replay_partition_changes)


#: the session settings of the zonal and shutdown scenarios: a short session so the outage is
#: detected quickly (the time from the sessions' expiry is what is reported)
SESSION_MS, HEARTBEAT_MS = 2000, 500


async def run_zonal(args: argparse.Namespace, base: str) -> dict[str, Any]:
    extra = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": HEARTBEAT_MS}
    cluster = LocalCluster(base, extra)
    try:
        node = await cluster.start()
        ctl = node.controller.controller
        set_changes_per_result(ctl, args.changes_per_result)
        set_max_uncommitted(ctl, args.max_uncommitted)
        set_build_budget(ctl, args.build_budget_ms)
        wire_bulk_replay(ctl, args.bulk_replay)
        # --builder-only: node 1 as before the bulk paths (the general replay too)
        ctl.replication_control.fast_simple_changes = not args.builder_only
        epochs, _ = await register_racked(ctl, args.brokers, args.racks)
        keeper = HeartbeatKeeper(ctl, epochs, list(range(args.brokers)), HEARTBEAT_MS / 2000)
        keeper.start()
        requests = create_requests(args.topics, args.partitions, 3, args.topics_per_request)
        create_s, _ = await create_topics(ctl, requests, args.inflight)
        rc, cc = ctl.replication_control, ctl.cluster_control
        rack0 = [b for b in range(args.brokers) if b % args.racks == 0]
        epoch = ctl.committed_epoch()
        affected = len({tp for b in rack0 for tp in rc.partitions_with_broker_in_isr(b, epoch=epoch)})
        led = sum(len(rc.partitions_led_by_broker(b, epoch=epoch)) for b in rack0)
        await asyncio.sleep(1.0)
        events = EventLog(node.controller)
        sizes = BatchSizes(ctl)
        pauses = GcPauses()
        records_before = ctl.records_replayed
        cpu0 = [cpu_seconds([p]) for p in cluster.pids]
        profiler = TimedProfile(args.profile)
        samplers = [start_py_spy(p, args.py_spy_seconds, f"{args.py_spy}.node{i + 1}.txt")
                    for i, p in enumerate(cluster.pids)] if args.py_spy else []
        # the rack goes dark: its brokers stop heartbeating; their sessions expire SESSION_MS
        # after their last heartbeat, which is where the clock starts
        keeper.brokers = [b for b in keeper.brokers if b not in set(rack0)]
        expiry = max(keeper.last_beat[b] for b in rack0) + SESSION_MS / 1000
        deadline = time.monotonic() + 600
        while True:
            epoch = ctl.committed_epoch()
            if (all(not cc.is_unfenced(b, epoch=epoch) for b in rack0)
                    and not any(rc.partitions_with_broker_in_isr(b, epoch=epoch) for b in rack0)):
                break
            if time.monotonic() > deadline:
                raise SystemExit("the rack was not fenced within 600 s")
            await asyncio.sleep(0.002)
        seconds = time.perf_counter() - expiry
        profiler.stop()
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(cluster.pids, cpu0)]
        pauses.remove()
        sizes.remove()
        keeper.stop()
        for sampler in samplers:
            sampler.wait(timeout=args.py_spy_seconds + 30)
        rest = events.by_name(lambda n: True)
        return {"brokers": args.brokers, "racks": args.racks, "partitions": args.topics * args.partitions,
                "fenced_brokers": len(rack0), "partitions_affected": affected, "leaderships_moved": led,
                "create_s": round(create_s, 2), "seconds": round(seconds, 3),
                "records_written": ctl.records_replayed - records_before,
                "largest_batch": max(sizes.sizes, default=0), "appends": len(sizes.sizes),
                "max_event_ms": round(max(rest, default=0) / 1e6, 3), "event_processing": ms_summary(rest),
                "longest_events": events.longest(), "gc_pauses": pauses.summary(),
                "controller_busy_s": round(sum(rest) / 1e9, 3), "cpu_seconds_by_node": cpu}
    finally:
        await cluster.stop()


async def run_shutdown(args: argparse.Namespace, base: str) -> dict[str, Any]:
    extra = {"broker.session.timeout.ms": SESSION_MS, "broker.heartbeat.interval.ms": HEARTBEAT_MS}
    cluster = LocalCluster(base, extra)
    try:
        node = await cluster.start()
        ctl = node.controller.controller
        set_changes_per_result(ctl, args.changes_per_result)
        set_max_uncommitted(ctl, args.max_uncommitted)
        set_build_budget(ctl, args.build_budget_ms)
        wire_bulk_replay(ctl, args.bulk_replay)
        # --builder-only: node 1 as before the bulk paths (the general replay too)
        ctl.replication_control.fast_simple_changes = not args.builder_only
        epochs, _ = await register_racked(ctl, args.brokers, args.racks)
        victim = 0
        keeper = HeartbeatKeeper(ctl, epochs, list(range(args.brokers)), HEARTBEAT_MS / 2000)
        keeper.start()
        requests = create_requests(args.topics, args.partitions, 3, args.topics_per_request)
        create_s, _ = await create_topics(ctl, requests, args.inflight)
        rc = ctl.replication_control
        led = len(rc.partitions_led_by_broker(victim, epoch=ctl.committed_epoch()))
        events = EventLog(node.controller)
        sizes = BatchSizes(ctl)
        records_before = ctl.records_replayed
        cpu0 = [cpu_seconds([p]) for p in cluster.pids]
        profiler = TimedProfile(args.profile)
        samplers = [start_py_spy(p, args.py_spy_seconds, f"{args.py_spy}.node{i + 1}.txt")
                    for i, p in enumerate(cluster.pids)] if args.py_spy else []
        keeper.brokers.remove(victim)  # from now on the victim's heartbeats ask to shut down
        t0 = time.perf_counter()
        deadline = time.monotonic() + 120
        last_sent, longest_gap = t0, 0.0
        while True:
            # the broker's heartbeats, wantShutDown, at the offset it has seen, every 10 ms
            # after the previous answer (an answer waits for the commit of everything written)
            req = heartbeat_request(victim, epochs[victim], ctl.committed_epoch())
            req.want_shut_down = True
            now = time.perf_counter()
            longest_gap, last_sent = max(longest_gap, now - last_sent), now
            ctl.track_broker_heartbeat(victim, epochs[victim])
            f = ctl.process_broker_heartbeat(req)
            while not f.done():
                await asyncio.sleep(0.001)
            if f.exception() is not None:
                raise SystemExit(f"heartbeat failed: {f.exception()!r}")
            if f.result().should_shut_down:
                break
            if time.monotonic() > deadline:
                raise SystemExit("the broker was not released within 120 s")
            await asyncio.sleep(0.01)
        seconds = time.perf_counter() - t0
        profiler.stop()
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(cluster.pids, cpu0)]
        for sampler in samplers:
            sampler.wait(timeout=args.py_spy_seconds + 30)
        sizes.remove()
        keeper.stop()
        still = len(rc.partitions_led_by_broker(victim, epoch=ctl.committed_epoch()))
        rest = events.by_name(lambda n: True)
        return {"brokers": args.brokers, "partitions": args.topics * args.partitions, "led_by_broker": led,
                "leading_after": still, "records_written": ctl.records_replayed - records_before,
                "seconds": round(seconds, 3), "create_s": round(create_s, 2),
                "largest_batch": max(sizes.sizes, default=0), "appends": len(sizes.sizes),
                "max_event_ms": round(max(rest, default=0) / 1e6, 3), "longest_events": events.longest(),
                "controller_busy_s": round(sum(rest) / 1e9, 3), "events": len(rest), "cpu_seconds_by_node": cpu,
                "longest_heartbeat_gap_ms": round(longest_gap * 1e3, 1),
                # past the session the stale-broker task fenced the broker: not a controlled shutdown
                "session_expired": longest_gap * 1000 > SESSION_MS}
    finally:
        await cluster.stop()


SCENARIOS: dict[str, tuple[Callable[..., Any], str]] = {
    "create": (run_create, "partitions_per_s"),
    "zonal": (run_zonal, "seconds"),
    "shutdown": (run_shutdown, "seconds"),
}
DEFAULTS = {"create": dict(topics=1000, partitions=100, brokers=100),
            "zonal": dict(topics=10_000, partitions=100, brokers=300),
            "shutdown": dict(topics=300, partitions=100, brokers=3)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=list(SCENARIOS))
    ap.add_argument("--topics", type=int, default=None)
    ap.add_argument("--partitions", type=int, default=None)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--brokers", type=int, default=None)
    ap.add_argument("--racks", type=int, default=3)
    ap.add_argument("--topics-per-request", type=int, default=99)
    ap.add_argument("--inflight", type=int, default=4, help="CreateTopics requests outstanding")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--changes-per-result", type=int, default=None, metavar="N",
                    help="zonal, shutdown: node 1's bound on one lifecycle result's partition changes "
                         "(default: the controller's)")
    ap.add_argument("--build-budget-ms", type=float, default=None, metavar="MS",
                    help="zonal, shutdown: node 1's time budget for building one lifecycle result "
                         "(default: the controller's; 0: none, the count alone bounds it)")
    ap.add_argument("--max-uncommitted", type=int, default=None, metavar="N",
                    help="zonal, shutdown: node 1 continues lifecycle changes only while at most N records "
                         "are uncommitted (default: the controller's)")
    ap.add_argument("--bulk-replay", action="store_true",
                    help="zonal, shutdown: node 1 replays runs of PartitionChangeRecords in bulk "
                         "(replay_partition_changes) even where the controller does not wire it")
    ap.add_argument("--builder-only", action="store_true",
                    help="zonal, shutdown: node 1 builds every lifecycle change with the PartitionChangeBuilder "
                         "and replays every PartitionChangeRecord through merge and the general upkeep "
                         "(the paths before the bulk ones; an A/B in the same minutes)")
    ap.add_argument("--profile", default=None, metavar="FILE",
                    help="zonal, shutdown: cProfile of node 1 over the timed part (the last run's) to FILE")
    ap.add_argument("--py-spy", default=None, metavar="PREFIX",
                    help="zonal, shutdown: py-spy (raw collapsed stacks) of every node from the rack's last "
                         "heartbeat (zonal) or the first wantShutDown heartbeat (shutdown), --py-spy-seconds "
                         "long, to PREFIX.nodeN.txt (node 1: this process)")
    ap.add_argument("--py-spy-seconds", type=float, default=15.0)
    args = ap.parse_args(argv)
    for k, v in DEFAULTS[args.scenario].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    load_before = os.getloadavg()
    setup = {"argv": sys.argv[1:], "scenario": args.scenario, "voters": 3, "transport": "TCP loopback",
             "fsync": True, "event_loop": event_loop.EVENT_LOOP, "cpus": os.cpu_count(),
             "python": sys.version.split()[0], "code": code_version()}
    if args.builder_only:
        # node 1 (this process) is the only writer; the standbys only replay what it writes
        from kraft_node.metadata.controller import lifecycle_bulk
        lifecycle_bulk.BulkLifecycleChanges.change = lambda self, *a: lifecycle_bulk.FALLBACK  # type: ignore
    fn, headline = SCENARIOS[args.scenario]
    run_repeated(fn, headline, args, f"replication-{args.scenario}-", setup, load_before)


if __name__ == "__main__":
    main()
