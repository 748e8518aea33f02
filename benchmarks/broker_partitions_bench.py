"""Issue 25's replication targets on real processes, librdkafka (confluent-kafka) as the load
generator so that a Python client is not what is measured.

    python benchmarks/broker_partitions_bench.py [--runs 3] [--records 200000] [--size 100] [--partitions 3]
                                                 [--controllers 1] [--raft-seconds 5]
                                                 [--latency-rate 10000] [--latency-seconds 10]
                                                 [--failovers 3] [--out F]

One cluster of ``--controllers`` controllers and 3 brokers (``kraft-server-start`` processes on
127.0.0.1, fsync as configured by default, the tests' fast Raft timeouts: broker heartbeat 200 ms,
session 2 s).  In order, never two phases at once (the machine has 2 shared cores):

1. **the Raft quorum's committed records/s**, the issue's anchor, in a subprocess of this script
   before the cluster starts and again after it is gone: 3 Raft-only voters on loopback, 100 B
   records, closed loop (``raft_tcp_bench``'s load generator and configs; see :func:`quorum_rate`
   for why not its ``main``);
2. per run, **produce acks=all to RF 3** (``--partitions`` partitions, ``min.insync.replicas=2``):
   ``--records`` records, by ``kcat -P`` (C end to end: from its start until it exits with every
   record acknowledged) and by confluent-kafka's ``produce()`` loop (from the first ``produce()``
   to the last acknowledgement), each on a topic of its own (``--acks-all-generator``); then
   **acks=1 to RF 1** (one partition on one broker) and **consume from that one broker** from the
   beginning, with ``broker_produce_bench``'s producer and consumer;
3. **latency** at ``--latency-rate`` records/s, acks=all, RF 3, one partition: librdkafka's own
   per-message latency (``Message.latency()``: ``produce()`` to the acknowledgement), p50/p99;
4. **failover**: a producer offers 1,000 records/s (acks=all, RF 3, one partition); the partition's
   leader is killed with -9; timed from the kill until a broker's Metadata names a new leader, and
   until the first acknowledgement of a record produced after it (only a new leader can give
   one); then the same with kafka-python as the producer (see :func:`failover_once_kafka_python`).
   The broker is restarted and back in the ISR before the next one.  Target: the session timeout
   + 1 s.

Medians over the runs; load averages at each phase.  Writes a Markdown report (default
``benchmarks/results/s18/broker_partitions.md``) and prints it.  Every process this script starts
is killed at the end; every wait has a deadline.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, REPO)

from _support import code_version  # noqa: E402
from broker_produce_bench import consume_confluent, produce_confluent  # noqa: E402
from support.broker_cluster import BrokerCluster, metadata, run, wait_until  # noqa: E402
from support.brokers import FAST_RAFT  # noqa: E402

SESSION_S = int(FAST_RAFT["broker.session.timeout.ms"]) / 1000
#: the paced load generator's wait between its 1 ms slices (confluent-kafka rounds to whole ms)
POLL_S = 0.001
#: the load generator's CPU (cores) in each paced run, for the report
LOAD_GENERATOR_CPU: list[float] = []


def nodes_cpu_s(c: BrokerCluster) -> float:
    """CPU seconds (user + system) used so far by the cluster's live processes (/proc/PID/stat)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for n in c.nodes.values():
        if n.proc is not None and n.proc.poll() is None:
            with open(f"/proc/{n.proc.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / tick


def loadavg() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


# ------------------------------------------------------------------ the Raft anchor
def quorum_rate(seconds: float) -> dict:
    """The Raft quorum's committed records/s, in a fresh subprocess (``--quorum-only``)."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--quorum-only", str(seconds)],
                         capture_output=True, text=True, timeout=seconds + 120, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"quorum run failed ({out.returncode}): {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _quorum_only(seconds: float) -> None:
    """``raft_tcp_bench``'s closed-loop load on 3 Raft-only voters.  Why not its ``main``: it starts
    node 1 with a controller and nodes 2-3 as controllers (``kraft-server-start`` without
    ``--demo-writer``), whose metadata loaders now stop on its opaque records (``unsupported
    metadata record frame``), so nothing commits.  Here node 1 is ``controller=False`` and the
    voters run ``--demo-writer`` (Raft only; they never lead: their election timeout is 5 s)."""
    import raft_tcp_bench as rtb

    from kraft_node.server.config import NodeConfig
    from kraft_node.server.node import KraftNode
    from kraft_node.server.start import freeze_startup_heap

    async def main(base: str) -> dict:
        paths = rtb.write_configs(base, 5, 3)
        procs = [subprocess.Popen([sys.executable, "-m", "kraft_node.server.start", p, "--log-level", "WARNING",
                                   "--demo-writer", "--writer-interval-ms", "3600000"],
                                  stdout=subprocess.DEVNULL, stderr=open(p + ".stderr", "w"), env=rtb.voter_env(),
                                  cwd=REPO) for p in paths[1:]]
        node = KraftNode.from_config(NodeConfig.from_file(paths[0]), controller=False)
        try:
            await node.start()
            freeze_startup_heap()
            deadline = time.monotonic() + 30
            while not node.driver.is_leader:
                if time.monotonic() > deadline:
                    raise SystemExit("node 1 did not become leader")
                await asyncio.sleep(0.01)
            await rtb.all_voters_replicating(node.driver, deadline)
            result: dict = await rtb.offered_load(node.driver, seconds, 100, 100, 512)
        finally:
            await node.shutdown(3)
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        return result

    with tempfile.TemporaryDirectory(prefix="kraft-quorum-") as base:
        result = asyncio.run(main(base))
    print(json.dumps({"committed_records_per_s": result["committed_records_per_s"],
                      "commit_p99_ms": result["commit_latency_ms"]["p99"]}))


# ------------------------------------------------------------------ cluster helpers
def create_topic(c: BrokerCluster, name: str, partitions: int, rf: int, configs: dict | None = None,
                 assignment: dict | None = None) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap(c.brokers[0]), request_timeout_ms=20_000)
    try:
        topic = (NewTopic(name, replica_assignments=assignment, topic_configs=configs or {}) if assignment
                 else NewTopic(name, partitions, rf, topic_configs=configs or {}))
        admin.create_topics([topic], timeout_ms=20_000)
    finally:
        admin.close()
    wait_until(lambda: all(len(isr) == rf and leader >= 0 for leader, isr in states(c, name).values()), 30,
               f"{name} led with a full ISR")


def states(c: BrokerCluster, topic: str) -> dict[int, tuple[int, list[int]]]:
    """``partition -> (leader, isr)`` from the first broker that answers."""
    for b in c.brokers:
        if b.alive:
            try:
                (t,) = run(metadata(b.port, [topic])).topics
                return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for p in t.partitions}
            except Exception:
                continue
    raise RuntimeError("no broker answers Metadata")


def producer(bootstrap: str, acks: Any, **extra: Any):
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
            "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1 << 21,
            "enable.idempotence": False, "compression.type": "none", "log_level": 0}
    conf.update(extra)
    return Producer(conf)


#: per acks=all run: seconds until the load generator's last produce() returned (its share of the run)
PRODUCE_LOOP_S: list[float] = []
#: per acks=all run with kcat: its CPU seconds
KCAT_CPU_S: list[float] = []


def produce_acks_all_kcat(bootstrap: str, topic: str, records: int, size: int) -> float:
    """Seconds for ``kcat -P`` (librdkafka's own command-line producer, C end to end) to send
    ``records`` records of ``size`` bytes from a file and exit once all are acknowledged (its
    start and metadata lookup included).  Why: confluent-kafka's ``produce()`` costs ~2.5 us of
    Python per record, so its loop alone offers at most ~400k records/s on a core the cluster
    also needs (it lasted 60-99% of the acks=all runs at load 4-8); kcat spends ~1.3 us per
    record.  Records go to partitions by librdkafka's default partitioner for keyless records."""
    import resource
    import shutil
    kcat = shutil.which("kcat")
    if kcat is None:
        raise RuntimeError("kcat is not installed (apt-get install kcat), or use --acks-all-generator confluent")
    with tempfile.NamedTemporaryFile("wb", prefix="kraft-kcat-", suffix=".txt") as f:
        line = b"x" * size + b"\n"
        for _ in range(records // 10_000):
            f.write(line * 10_000)
        f.write(line * (records % 10_000))
        f.flush()
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        out = subprocess.run([kcat, "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all", "-X", "linger.ms=5",
                              "-X", "batch.size=1048576", "-X", "queue.buffering.max.messages=2000000",
                              "-X", "queue.buffering.max.kbytes=2097152", "-X", "enable.idempotence=false",
                              "-X", "compression.type=none", "-l", f.name],
                             capture_output=True, text=True, timeout=300)
        elapsed = time.perf_counter() - t0
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"kcat failed ({out.returncode}): {out.stderr[-2000:]}")
    KCAT_CPU_S.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return elapsed


def produce_acks_all(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    """Seconds until ``records`` records (round robin over ``partitions``) are acknowledged.
    Delivery reports only for errors (one global callback): a Python callback per record costs
    the load generator ~1 us of the 2 CPUs the cluster shares; ``produce()`` itself ~2.5 us."""
    errors: list[Any] = []
    p = producer(bootstrap, "all", **{"delivery.report.only.error": True,
                                      "on_delivery": lambda err, _msg: errors.append(err) if err else None})
    payload = os.urandom(size)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10_000 == 0:
            p.poll(0)
    PRODUCE_LOOP_S.append(time.perf_counter() - t0)
    left = p.flush(180)
    elapsed = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"acks=all produce: {left} not delivered, {len(errors)} errors (first: {errors[:1]})")
    return elapsed


def paced_latencies(bootstrap: str, topic: str, rate: int, seconds: float, size: int, inflight: int,
                    warmup: float = 2.0) -> tuple[list[float], float]:
    """Offer ``rate`` records/s for ``warmup + seconds`` (in 1 ms slices), at most ``inflight``
    Produce requests in flight per connection; librdkafka's per-message latency in ms of the
    records produced after the warm-up (connections, metadata and the first batches excluded),
    and the achieved rate."""
    p = producer(bootstrap, "all", **{"linger.ms": 1, "max.in.flight.requests.per.connection": inflight})
    payload = os.urandom(size)
    lat: list[float] = []
    errors: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        elif msg.key() == b"m":
            lat.append(msg.latency() * 1000)
    sent = 0
    cpu0 = os.times()
    t0 = time.perf_counter()
    while (now := time.perf_counter()) - t0 < warmup + seconds:
        due = int((now - t0) * rate)
        key = b"m" if now - t0 >= warmup else b"w"
        while sent < due:
            p.produce(topic, payload, key=key, partition=0, on_delivery=report)
            sent += 1
        # 1 ms: confluent-kafka takes whole milliseconds (poll(0.0005) is poll(0), which made this
        # loop spin a whole core of the 2 the cluster shares; the latency clock starts at produce())
        p.poll(POLL_S)
    cpu1 = os.times()
    LOAD_GENERATOR_CPU.append((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (time.perf_counter() - t0))
    left = p.flush(120)
    if left or errors:
        raise RuntimeError(f"latency run: {left} not delivered, {len(errors)} errors (first: {errors[:1]})")
    return lat, len(lat) / seconds


def failover_once(c: BrokerCluster, topic: str, rate: int = 1000) -> tuple[float, float]:
    """Kill -9 ``topic``-0's leader under load.  Returns the seconds from the kill until a broker's
    Metadata names a new leader (polled every ~20 ms), and until the first acknowledgement of a
    record produced after the kill (only a new leader can give one).  The client's backoffs are
    capped at 100 ms (librdkafka's default cap, 1 s, would add up to a second of client waiting)."""
    p = producer(",".join(c.bootstrap(b) for b in c.brokers), "all",
                 **{"linger.ms": 1, "message.timeout.ms": 60_000, "retry.backoff.ms": 20,
                    "retry.backoff.max.ms": 100, "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 100,
                    "topic.metadata.refresh.fast.interval.ms": 20})
    acked_after: list[float] = []
    t_kill = [float("inf")]
    new_leader: list[float] = []

    def report(err: Any, _msg: Any, produced_at: float) -> None:
        if err is None and produced_at > t_kill[0] and not acked_after:
            acked_after.append(time.monotonic())
    leader_id = states(c, topic)[0][0]
    victim = next(b for b in c.brokers if b.id == leader_id)
    others = [b for b in c.brokers if b is not victim]
    sent = 0
    t0 = last_poll = time.monotonic()
    try:
        while True:
            now = time.monotonic()
            if now - t0 > 2.0 and t_kill[0] == float("inf"):
                victim.kill9()
                t_kill[0] = time.monotonic()
            if (acked_after and new_leader) or now - t0 > 60:
                break
            if t_kill[0] < now and not new_leader and now - last_poll >= 0.02:
                last_poll = now
                try:
                    (t,) = run(metadata(others[0].port, [topic]), timeout=2).topics
                    if t.partitions[0].leader_id not in (-1, victim.id):
                        new_leader.append(time.monotonic())
                except Exception:
                    pass
            due = int((now - t0) * rate)
            while sent < due:
                p.produce(topic, b"x" * 100, partition=0,
                          on_delivery=lambda err, msg, at=now: report(err, msg, at))
                sent += 1
            p.poll(0.001)
        p.flush(30)
    finally:
        victim.start()
        victim.wait_started(90)
    if not acked_after or not new_leader:
        raise RuntimeError("no new leader or the producer did not resume within 60 s of the kill")
    wait_until(lambda: states(c, topic)[0][1] == [101, 102, 103], 60, f"{victim} back in the ISR")
    return new_leader[0] - t_kill[0], acked_after[0] - t_kill[0]


def failover_once_kafka_python(c: BrokerCluster, topic: str) -> float:
    """The same kill with kafka-python as the producer (acks=all, backoffs 20-100 ms): seconds from
    the kill until a record sent after it is acknowledged.  Why a second client: librdkafka looks
    for a leaderless partition's new leader from a 1 s timer (its topic scan), which rounds its
    figure up to the next whole second; kafka-python refreshes metadata on the error itself."""
    import kafka
    p = kafka.KafkaProducer(bootstrap_servers=",".join(c.bootstrap(b) for b in c.brokers), acks="all",
                            retries=1000, retry_backoff_ms=20, request_timeout_ms=5000, linger_ms=1,
                            reconnect_backoff_ms=20, reconnect_backoff_max_ms=100, max_block_ms=30_000)
    leader_id = states(c, topic)[0][0]
    victim = next(b for b in c.brokers if b.id == leader_id)
    try:
        for _ in range(50):
            p.send(topic, b"x" * 100, partition=0).get(10)
        victim.kill9()
        t_kill = time.monotonic()
        futures = []
        while not any(f.is_done and f.succeeded() for f in futures):
            if time.monotonic() - t_kill > 60:
                raise RuntimeError("kafka-python did not resume within 60 s of the kill")
            futures.append(p.send(topic, b"y" * 100, partition=0))
            time.sleep(0.005)
        resumed = time.monotonic() - t_kill
    finally:
        p.close(5)
        victim.start()
        victim.wait_started(90)
    wait_until(lambda: states(c, topic)[0][1] == [101, 102, 103], 60, f"{victim} back in the ISR")
    return resumed


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


# ------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=3, help="partitions of the acks=all RF 3 topic")
    ap.add_argument("--controllers", type=int, default=1)
    ap.add_argument("--raft-seconds", type=float, default=5.0)
    ap.add_argument("--latency-rate", type=int, default=10_000)
    ap.add_argument("--latency-seconds", type=float, default=10.0)
    ap.add_argument("--latency-inflight", default="1,5,1000000",
                    help="max.in.flight.requests.per.connection values of the latency runs (librdkafka's default "
                         "is 1000000, the Java client's 5)")
    ap.add_argument("--acks-all-generator", choices=("kcat", "confluent", "both"), default=None,
                    help="the acks=all RF 3 load generator: kcat (C end to end), confluent-kafka's Python produce() "
                         "loop, or both in turn (default when kcat is on PATH; else confluent, said on stderr: kcat "
                         "is a system package, `apt-get install kcat`, not a Python dependency)")
    ap.add_argument("--failovers", type=int, default=3)
    ap.add_argument("--quorum-only", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "s18", "broker_partitions.md"))
    args = ap.parse_args(argv)
    if args.acks_all_generator is None:
        args.acks_all_generator = "both" if shutil.which("kcat") else "confluent"
        if args.acks_all_generator == "confluent":
            print("kcat is not installed (apt-get install kcat): acks=all measured with confluent-kafka's Python "
                  "produce() loop only, which tops out near 400k records/s on one core", file=sys.stderr)
    if args.quorum_only is not None:
        _quorum_only(args.quorum_only)
        return
    argv = sys.argv[1:] if argv is None else argv
    loads: list[tuple[str, str]] = [("start", loadavg())]
    quorum = [quorum_rate(args.raft_seconds)]
    loads.append(("after quorum run 1", loadavg()))
    print(f"quorum: {quorum[0]}", flush=True)

    base = tempfile.mkdtemp(prefix="kraft-partitions-bench-")
    c = BrokerCluster(base, controllers=args.controllers, brokers=3, shutdown_timeout_s=3.0)
    rows: list[tuple[int, float, float, float]] = []
    kcat_rows: list[tuple[int, float]] = []
    latency: list[tuple[int, list[float], float, float, float]] = []
    failovers: list[tuple[float, float]] = []
    failovers_kp: list[float] = []
    try:
        c.start(timeout=120)
        all_brokers = ",".join(c.bootstrap(b) for b in c.brokers)
        one = c.brokers[0]
        for r in range(1, args.runs + 1):
            t_kcat = None
            if args.acks_all_generator in ("kcat", "both"):
                create_topic(c, f"rf3-kcat-{r}", args.partitions, 3, {"min.insync.replicas": "2"})
                t_kcat = produce_acks_all_kcat(all_brokers, f"rf3-kcat-{r}", args.records, args.size)
                kcat_rows.append((r, args.records / t_kcat))
            if args.acks_all_generator == "kcat":
                assert t_kcat is not None
                t_all = t_kcat
            else:
                create_topic(c, f"rf3-{r}", args.partitions, 3, {"min.insync.replicas": "2"})
                t_all = produce_acks_all(all_brokers, f"rf3-{r}", args.records, args.size, args.partitions)
            create_topic(c, f"rf1-{r}", 1, 1, assignment={0: [one.id]})
            t_one = produce_confluent(c.bootstrap(one), f"rf1-{r}", args.records, args.size, 1)
            t_cons = consume_confluent(c.bootstrap(one), f"rf1-{r}", args.records, 1)
            rows.append((r, args.records / t_all, args.records / t_one, args.records / t_cons))
            loads.append((f"after run {r}", loadavg()))
            kcat_rate = kcat_rows[-1][1] if kcat_rows else 0.0
            print(f"run {r}: acks=all RF 3 {rows[-1][1]:,.0f}/s (kcat {kcat_rate:,.0f}/s), "
                  f"acks=1 RF 1 {rows[-1][2]:,.0f}/s, consume {rows[-1][3]:,.0f}/s (load {loads[-1][1]})", flush=True)
        for inflight in (int(x) for x in args.latency_inflight.split(",")):
            create_topic(c, f"latency-{inflight}", 1, 3, {"min.insync.replicas": "2"})
            cpu0, w0 = nodes_cpu_s(c), time.monotonic()
            lat, achieved = paced_latencies(all_brokers, f"latency-{inflight}", args.latency_rate,
                                            args.latency_seconds, args.size, inflight)
            nodes_cpu = (nodes_cpu_s(c) - cpu0) / (time.monotonic() - w0)
            latency.append((inflight, lat, achieved, LOAD_GENERATOR_CPU[-1], nodes_cpu))
            loads.append((f"after latency (in flight {inflight})", loadavg()))
            print(f"latency at {achieved:,.0f}/s, {inflight} in flight: p50 {pct(lat, 0.5):.2f} ms "
                  f"p99 {pct(lat, 0.99):.2f} ms", flush=True)
        create_topic(c, "failover", 1, 3, {"min.insync.replicas": "2"})
        for i in range(args.failovers):
            failovers.append(failover_once(c, "failover"))
            print(f"failover {i + 1}: new leader in Metadata after {failovers[-1][0]:.3f} s, producer resumed "
                  f"after {failovers[-1][1]:.3f} s", flush=True)
        for i in range(args.failovers):
            failovers_kp.append(failover_once_kafka_python(c, "failover"))
            print(f"failover {i + 1} (kafka-python): producer resumed after {failovers_kp[-1]:.3f} s", flush=True)
        loads.append(("after failovers", loadavg()))
    finally:
        c.close()
        shutil.rmtree(base, ignore_errors=True)  # the cluster's logs (tens of MB a run)
    quorum.append(quorum_rate(args.raft_seconds))
    loads.append(("after quorum run 2", loadavg()))
    print(f"quorum: {quorum[1]}", flush=True)

    q = statistics.median(x["committed_records_per_s"] for x in quorum)
    med = [statistics.median(row[i] for row in rows) if rows else float("nan") for i in (1, 2, 3)]
    lines = [f"# Broker replication figures, issue 25 ({datetime.now().strftime('%Y-%m-%d %H:%M')})", "",
             f"Command: `python benchmarks/broker_partitions_bench.py {' '.join(argv)}`", "",
             f"Setup: {args.controllers} controller(s) + 3 brokers (kraft-server-start processes, 127.0.0.1), "
             f"records of {args.size} B, load generator confluent-kafka {_ck_version()} (librdkafka); "
             f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; code {code_version()}",
             "", "Load averages (1/5/15 min): " + "; ".join(f"{k} {v}" for k, v in loads), "",
             "## Throughput", "",
             f"{args.records:,} records per run; acks=all RF 3: {args.partitions} partitions, min.insync.replicas=2, "
             "linger 5 ms, 1 MiB batches; acks=1 RF 1: one partition on broker 101, consumed from it.", "",
             "acks=all RF 3 by two load generators in turn, each on a topic of its own: kcat (librdkafka's "
             "command-line producer, C end to end; its CPU seconds) and confluent-kafka's Python produce() loop "
             "(how long the loop itself took, of the run).", "",
             "| run | acks=all RF 3 kcat records/s | kcat CPU s | acks=all RF 3 confluent-kafka records/s "
             "| produce() loop s / run s | acks=1 RF 1 records/s | consume one broker records/s |",
             "|---|---|---|---|---|---|---|"]
    kcat_by_run = dict(kcat_rows)
    kcat_cpu = iter(KCAT_CPU_S)
    loops = iter(PRODUCE_LOOP_S)
    for r, a, o, k in rows:
        kr = kcat_by_run.get(r)
        kc = f"{kr:,.0f} | {next(kcat_cpu):.2f}" if kr is not None else "- | -"
        if args.acks_all_generator == "kcat":
            py = "- | -"
        else:
            py = f"{a:,.0f} | {next(loops):.2f} / {args.records / a:.2f}"
        lines.append(f"| {r} | {kc} | {py} | {o:,.0f} | {k:,.0f} |")
    kmed = statistics.median(x for _r, x in kcat_rows) if kcat_rows else float("nan")
    pmed = med[0] if args.acks_all_generator != "kcat" else float("nan")
    lines.append(f"| median | {kmed:,.0f} | | {pmed:,.0f} | | {med[1]:,.0f} | {med[2]:,.0f} |")
    lines += ["", f"Raft quorum (3 Raft-only voters, fsync, 100 B records, closed loop, {args.raft_seconds:.0f} s, "
              "before and after the cluster): " + ", ".join(f"{x['committed_records_per_s']:,.0f}" for x in quorum)
              + f" committed records/s, median {q:,.0f}.", "",
              f"acks=all RF 3 / quorum (target >= 50%): kcat **{kmed / q:.1%}**, confluent-kafka {pmed / q:.1%}.", "",
              "## Latency", "",
              f"acks=all, RF 3, one partition, offered {args.latency_rate:,}/s for 2 s of warm-up + "
              f"{args.latency_seconds:.0f} s measured, linger 1 ms; librdkafka's per-message latency "
              "(`Message.latency()`, produce() to acknowledgement) of the measured records; target p99 <= 10 ms.", "",
              "CPU columns: cores used during the paced run by the load generator's process and by the four "
              "kraft processes together (/proc/PID/stat).", "",
              "| max in flight per connection | records/s measured | p50 ms | p90 ms | p99 ms | max ms "
              "| load generator CPU | kraft processes CPU |",
              "|---|---|---|---|---|---|---|---|"]
    for inflight, lat, achieved, gen_cpu, nodes_cpu in latency:
        lines.append(f"| {inflight:,} | {achieved:,.0f} | {pct(lat, 0.5):.2f} | {pct(lat, 0.9):.2f} | "
                     f"{pct(lat, 0.99):.2f} | {max(lat):.2f} | {gen_cpu:.2f} | {nodes_cpu:.2f} |")
    lines += ["",
              "## Failover", "",
              f"kill -9 of the partition leader under 1,000 records/s acks=all (RF 3, one partition); session timeout "
              f"{SESSION_S:.0f} s, target: producer resumed within {SESSION_S + 1:.0f} s.", "",
              "| failover | new leader in Metadata (s) | librdkafka resumed (s) | kafka-python resumed (s) |",
              "|---|---|---|---|"]
    for i, ((leader_s, resumed_s), kp_s) in enumerate(zip(failovers, failovers_kp), 1):
        lines.append(f"| {i} | {leader_s:.2f} | {resumed_s:.2f} | {kp_s:.2f} |")
    if failovers:
        lines.append(f"| median | {statistics.median(x[0] for x in failovers):.2f} | "
                     f"**{statistics.median(x[1] for x in failovers):.2f}** | "
                     f"**{statistics.median(failovers_kp):.2f}** |")
    lines += ["",
              "Targets (issue 25): acks=all RF 3 >= 50% of the quorum; acks=1 RF 1 >= 1M records/s; consume >= 2M "
              "records/s; p99 <= 10 ms at 10k records/s; failover <= session timeout + 1 s."]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def _ck_version() -> str:
    import confluent_kafka
    return f"{confluent_kafka.version()[0]} / librdkafka {confluent_kafka.libversion()[0]}"


if __name__ == "__main__":
    main()
