"""Issue 24's broker targets, measured on real processes (``kraft-server-start`` on 127.0.0.1).

    python benchmarks/broker_bench.py propagation [--controllers 3] [--brokers 3] [--topics 200] [--runs 3]
                                                  [--poll-ms 1] [--linger-ms 5] [--out F]
    python benchmarks/broker_bench.py shutdown    [--partitions 10000] [--runs 3] [--heartbeat-ms 200]
                                                  [--session-ms 9000] [--out F]
    python benchmarks/broker_bench.py start       [--partitions 1000000] [--fake-brokers 97] [--runs 3] [--out F]
    python benchmarks/broker_bench.py tail-replay --metadata-dir D [--runs 3]

``propagation`` (target p99 <= 50 ms): topics (1 partition, RF 3) are created one at a time through
broker 101 with CreateTopics v7 on kraft's own connection; from the moment its answer arrives,
every broker is asked Metadata v12 for that topic every ``--poll-ms`` (one connection per broker,
the three polls concurrent) until it answers the topic without error.  Per topic, the time until
the *last* broker shows it; p50/p99 over ``--topics`` topics per run.

``shutdown`` (target <= 2 s): 1 controller, 3 brokers; ``--partitions`` partitions (RF 3,
replicas ``[101, 102, 103]``, so broker 101 is the preferred leader of every one) are created
through the controller listener; then broker 101 gets SIGTERM: timed until its process exits
(the controlled shutdown moves its leaderships to 102 and 103, approved only once committed;
then the broker closes its partition logs and writes its checkpoints: the LogManager's line
gives both times).  Each run restarts broker 101 if needed and deletes the previous run's topics
first, so the broker hosts ``--partitions`` logs.  Heartbeat 200 ms (the tests'), session 9 s.

``start`` (target <= 3 s at 1M partitions): 1 controller and 3 brokers, plus ``--fake-brokers``
brokers that only exist in the metadata (:class:`FakeBrokers`: registered and kept unfenced
over the controller listener from this process), so that the controller's default placement
gives the restarted broker a realistic share (3/(3+N) of the partitions) rather than all of them
(``--fake-brokers 0``: session 15's setup).  ``--partitions`` partitions (RF 3) are created in
CreateTopics batches through the controller listener; then broker 103 is stopped (SIGTERM,
controlled shutdown) and started again: timed from the process start to its "serving Kafka
clients" line (unfenced), with the phases from its log (metadata loaded, logs loaded, replicas
made, registered, unfenced).  Kafka's heartbeat/session (2 s / 9 s).  A broker holds one file
descriptor a partition log (five with the pure index twin): a run that would exceed
RLIMIT_NOFILE is refused (``--nofile`` raises it when the machine allows).

``tail-replay``: a broker's metadata catch-up in process (the latest snapshot of a
``__cluster_metadata-0`` left by ``start``, then the log after it through a MetadataLoader).

Each writes a Markdown report (``--out``; default ``benchmarks/results/s17/broker_<name>.md``) with
the command, the setup, every run and the median, and prints it.  Every wait has a deadline;
the processes this script started are killed at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import resource
import socket
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))  # support.broker_cluster, support.brokers
sys.path.insert(0, REPO)

from _support import code_version  # noqa: E402
from support.broker_cluster import BrokerCluster, ServerProcess, leaders, metadata, run  # noqa: E402
from support.raft import CLUSTER_ID  # noqa: E402

from kraft_node.metadata.versions import supported_features  # noqa: E402
from kraft_node.network import KafkaConnection  # noqa: E402
from kraft_node.protocol.errors import Errors  # noqa: E402
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest  # noqa: E402
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest  # noqa: E402
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest  # noqa: E402
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest  # noqa: E402
from kraft_node.protocol.generated.metadata import MetadataRequest  # noqa: E402
from kraft_node.server.tools import metadata_quorum  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402

CT = CreateTopicsRequest
MR = MetadataRequest
#: the most records one CreateTopics may write (the controller's per-request limit is 10,000)
MAX_RECORDS_PER_REQUEST = 9_999


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, int(round(q / 100 * len(s) + 0.5)) - 1))]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


#: what raise_nofile() did (in every report's header)
NOFILE_NOTE = ["not changed"]


def raise_nofile(want: int) -> None:
    """Raise this process's RLIMIT_NOFILE (soft and, when allowed, hard) to ``want``: the
    brokers it starts inherit it.  Why: a partition log held five descriptors per segment before
    session 18 (the segment, and its two indexes twice), so a broker hosting 10k partitions needed
    ~50k; with this machine's 20,000 the shutdown bench's brokers died of EMFILE (session 17).
    Now one (:func:`fds_per_log`).  Kafka's docs ask
    for 100,000 or more for the same reason."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if want <= 0 or soft >= want:
        NOFILE_NOTE[0] = f"{soft} (unchanged)"
        return
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(want, hard)))
    except (ValueError, OSError) as exc:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        NOFILE_NOTE[0] = f"{hard} (wanted {want}: {exc})"
        print(f"warning: RLIMIT_NOFILE {want} refused ({exc}); brokers run with {hard}", file=sys.stderr)
        return
    NOFILE_NOTE[0] = f"{want} (was {soft}/{hard})"


def fds_per_log() -> int:
    """Descriptors a broker holds per partition log (one segment): the segment file only with the
    native index kernel (its indexes are mapped by ``FileMap`` and hold none, session 18); with
    the pure twin, each index twice more (kraft_storage's own and the one ``mmap.mmap`` duplicates
    -- before session 18 that was every broker's count)."""
    from kraft_storage.accel import native_available
    return 1 if native_available("_index") and not os.environ.get("KRAFT_NO_EXTENSIONS") else 5


FDS_PER_LOG = fds_per_log()


def check_fds(logs_per_broker: int, what: str) -> None:
    """Refuse a run whose brokers would run out of descriptors (they then fail their heartbeats
    and log writes with EMFILE and are fenced: no figure, only noise)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = logs_per_broker * FDS_PER_LOG + 1000
    if need > soft:
        raise SystemExit(f"{what}: each broker would host ~{logs_per_broker:,} partition logs, ~{need:,} file "
                         f"descriptors ({FDS_PER_LOG} a log), above RLIMIT_NOFILE {soft:,}; use fewer partitions "
                         "(or more --fake-brokers for start), or a machine that allows a higher limit")


def header(title: str, argv: list[str], setup: dict[str, Any]) -> list[str]:
    cv = code_version()
    lines = [f"# {title}", "",
             f"Command: `python benchmarks/broker_bench.py {' '.join(argv)}`  ",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared with other sessions), "
             f"Python {platform.python_version()}; commit {cv.get('commit')}"
             + (f", uncommitted: {', '.join(cv['uncommitted'])}" if cv.get("uncommitted") else "") + "  ",
             f"Processes' RLIMIT_NOFILE: {NOFILE_NOTE[0]}  ",
             "Setup: " + ", ".join(f"{k} {v}" for k, v in setup.items()), ""]
    return lines


def write_report(lines: list[str], out: str) -> None:
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)


async def create(port: int, topics: list[Any], timeout_s: float = 120.0) -> None:
    """One CreateTopics v7 (answered once committed); every topic must be created."""
    conn = await KafkaConnection.open("127.0.0.1", port, timeout=10)
    try:
        resp = await conn.request(CT(topics=topics, timeout_ms=int(timeout_s * 1000)), 7, timeout=timeout_s)
    finally:
        await conn.close()
    bad = [(t.name, t.error_code, t.error_message) for t in resp.topics if t.error_code]
    if bad:
        raise SystemExit(f"CreateTopics failed: {bad[:3]}")


async def create_partitions(port: int, prefix: str, partitions: int, per_topic: int,
                            replicas: list[int] | None = None, inflight: int = 2) -> float:
    """``partitions`` partitions in topics of ``per_topic``, RF 3 (``replicas`` for every partition,
    else the controller's placement), in requests of at most 9,999 records, ``inflight`` at a time.
    Returns the seconds taken."""
    topics = []
    left, i = partitions, 0
    while left > 0:
        n = min(per_topic, left)
        if replicas is None:
            topics.append(CT.CreatableTopic(name=f"{prefix}{i}", num_partitions=n, replication_factor=3))
        else:
            topics.append(CT.CreatableTopic(name=f"{prefix}{i}", num_partitions=-1, replication_factor=-1,
                                            assignments=[CT.CreatableReplicaAssignment(partition_index=p,
                                                                                       broker_ids=replicas)
                                                         for p in range(n)]))
        left -= n
        i += 1
    per_request = max(1, MAX_RECORDS_PER_REQUEST // (per_topic + 1))
    batches = [topics[j:j + per_request] for j in range(0, len(topics), per_request)]
    t0 = time.monotonic()
    sem = asyncio.Semaphore(inflight)

    async def one(batch: list[Any]) -> None:
        async with sem:
            await create(port, batch)

    await asyncio.gather(*(one(b) for b in batches))
    return time.monotonic() - t0


async def delete_topics(port: int, names: list[str], timeout_s: float = 120.0) -> None:
    """One DeleteTopics v4 through the controller listener (answered once committed)."""
    conn = await KafkaConnection.open("127.0.0.1", port, timeout=10)
    try:
        resp = await conn.request(DeleteTopicsRequest(topic_names=names, timeout_ms=int(timeout_s * 1000)), 4,
                                  timeout=timeout_s)
    finally:
        await conn.close()
    bad = [(t.name, t.error_code) for t in resp.responses if t.error_code]
    if bad:
        raise SystemExit(f"DeleteTopics failed: {bad[:3]}")


async def wait_everywhere(create_port: int, ports: list[int], sentinel: str, timeout_s: float) -> None:
    """Create topic ``sentinel`` (after every earlier create was answered, so its record follows
    theirs in the log) and wait until every broker's Metadata shows it: each has then applied
    everything created before.  (An all-topics Metadata at 1M partitions would be ~45 MB.)"""
    await create(create_port, [CT.CreatableTopic(name=sentinel, num_partitions=1, replication_factor=3)])
    deadline = time.monotonic() + timeout_s
    for port in ports:
        while True:
            resp = await metadata(port, [sentinel], 12, timeout=60)
            if resp.topics and resp.topics[0].error_code == 0:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"broker on port {port} does not show {sentinel} after {timeout_s} s")
            await asyncio.sleep(0.2)


# ------------------------------------------------------------------ fake brokers
#: a fake broker's pause before it retries a failed heartbeat
RETRY_BACKOFF_S = 0.1


class FakeBrokers:
    """``ids`` brokers that exist only in the metadata: registered over the controller listener
    (BrokerRegistration v4, as ``controller_tcp_bench.py register`` does) and kept unfenced by
    BrokerHeartbeat v1 every ``interval_s`` (the bench's ``broker.heartbeat.interval.ms``) from a
    thread of this process with its own event loop, for the whole run.

    Why: issue 24's start target is about the *metadata* size (1M partitions), but with 3 brokers
    and RF 3 every broker hosts every partition -- 1M partition logs on one broker, which no Kafka
    deployment runs.  With ~100 brokers the controller's default placement gives each ~3% of the
    replicas, so the restarted real broker opens a realistic number of logs.

    Each heartbeat reports as its metadata offset the controller's high watermark (DescribeQuorum
    on the same connection before each round), as a caught-up broker would: the controller
    approves a controlled shutdown only once every active broker's reported offset has passed the
    records that moved the leaders away (Kafka's ``lowestActiveOffset``), so fakes reporting their
    registration offset held broker 103's shutdown until its timeout (session 17's first try).

    Their listener (same name as the real brokers', ``PLAINTEXT``) is 127.0.0.1 on a port bound
    here and never listened on: a real broker that follows one of them gets "connection refused"
    at once and backs off (``replica.fetch.backoff.ms``); no DNS, no hang.  They never fetch, so
    the real leaders would shrink them out of the ISR after ``replica.lag.time.max.ms``: the bench
    raises that for the real brokers (a real cluster's followers would fetch and stay in)."""

    def __init__(self, controller_port: int, ids: list[int], interval_s: float):
        self.controller_port = controller_port
        self.ids = ids
        self.interval_s = interval_s
        self.epochs: dict[int, int] = {}
        self.conns: dict[int, KafkaConnection] = {}
        self._offset = 0
        self.heartbeats = 0
        self.fenced_answers = 0
        self.errors: dict[str, int] = {}
        self.max_gap_s = 0.0
        self._dead = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._dead.bind(("127.0.0.1", 0))  # bound, not listening: connects are refused
        self.dead_port = self._dead.getsockname()[1]
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fake-brokers", daemon=True)

    def start(self, timeout: float = 60.0) -> float:
        """Register them all and wait until every one is unfenced; returns the seconds taken."""
        t0 = time.monotonic()
        self._thread.start()
        if not self._ready.wait(timeout):
            raise SystemExit(f"{len(self.ids)} fake brokers not unfenced within {timeout} s: {self.errors}")
        if self._failure is not None:
            raise SystemExit(f"fake brokers failed: {self._failure!r}")
        return time.monotonic() - t0

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(self.interval_s + 35)
        self._dead.close()

    def summary(self) -> str:
        return (f"{self.heartbeats} heartbeats, longest gap between two of a broker's {self.max_gap_s:.2f} s, "
                f"{self.fenced_answers} answered fenced, errors {self.errors or 'none'}")

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - reported by start() / summary()
            self._failure = exc
            self._ready.set()

    def _registration(self, broker_id: int, features: list[Any]) -> Any:
        br = BrokerRegistrationRequest
        return br(broker_id=broker_id, cluster_id=CLUSTER_ID, incarnation_id=Uuid((0xFB << 120) | broker_id),
                  listeners=[br.Listener(name="PLAINTEXT", host="127.0.0.1", port=self.dead_port,
                                         security_protocol=0)],
                  rack=None, is_migrating_zk_broker=False, features=features,
                  log_dirs=[Uuid((0xFD << 120) | broker_id)])

    async def _main(self) -> None:
        # one connection per broker, as real brokers have: the controller answers a connection's
        # requests one at a time, and a heartbeat's answer may wait for a commit -- ~1,000
        # heartbeats queued on one connection took longer than the session (9 s) while 1M
        # partitions were being created, and the controller fenced them (session 17's first try)
        conn = await KafkaConnection.open("127.0.0.1", self.controller_port, timeout=10)
        sem = asyncio.Semaphore(50)

        async def connect() -> KafkaConnection:
            async with sem:
                return await KafkaConnection.open("127.0.0.1", self.controller_port, timeout=30)
        self.conns = dict(zip(self.ids, await asyncio.gather(*(connect() for _ in self.ids))))
        features = [BrokerRegistrationRequest.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                    for n, (lo, hi) in sorted(supported_features().items())]
        try:
            regs = await asyncio.gather(*(self.conns[b].request(self._registration(b, features), 4, timeout=30)
                                          for b in self.ids))
            for b, r in zip(self.ids, regs):
                if r.error_code:
                    raise SystemExit(f"registering fake broker {b}: {Errors(r.error_code).name}")
                self.epochs[b] = r.broker_epoch
            fenced = set(self.ids)
            deadline = time.monotonic() + 60
            while fenced:
                answers = await self._round(conn, sorted(fenced))
                fenced = {b for b, r in answers.items() if r is None or r.is_fenced}
                if fenced:
                    if time.monotonic() > deadline:
                        raise SystemExit(f"{len(fenced)} fake brokers still fenced after 60 s")
                    await asyncio.sleep(0.05)
            self._ready.set()
            # from now on each broker heartbeats on its own schedule (spread over the interval,
            # as independent brokers are), at the latest high watermark polled below
            self._offset = max(self.epochs.values())
            beats = [asyncio.ensure_future(self._beat(b, i * self.interval_s / len(self.ids)))
                     for i, b in enumerate(self.ids)]
            try:
                while not self._stopping.is_set():
                    offset = await self._high_watermark(conn)
                    if offset is not None:
                        self._offset = max(self._offset, offset)
                    await asyncio.sleep(0.25)
            finally:
                for t in beats:
                    t.cancel()
                await asyncio.gather(*beats, return_exceptions=True)
        finally:
            await asyncio.gather(*(c.close() for c in [conn, *self.conns.values()]), return_exceptions=True)

    async def _high_watermark(self, conn: KafkaConnection) -> int | None:
        try:
            q = await conn.request(metadata_quorum.describe_request(), 2, timeout=30)
        except Exception as exc:  # noqa: BLE001 - counted; the last offset is kept
            self.errors["DescribeQuorum " + type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            return None
        if q.error_code or not q.topics or q.topics[0].partitions[0].error_code:
            return None
        return int(q.topics[0].partitions[0].high_watermark)

    async def _beat(self, b: int, delay_s: float) -> None:
        """Broker ``b``'s heartbeats after its first unfenced answer: one every interval (the
        next ``interval_s`` after the previous was sent, or at once when its answer came later)."""
        await asyncio.sleep(delay_s)
        last = time.monotonic()
        while True:
            sent = time.monotonic()
            self.max_gap_s = max(self.max_gap_s, sent - last)
            last = sent
            req = BrokerHeartbeatRequest(broker_id=b, broker_epoch=self.epochs[b],
                                         current_metadata_offset=self._offset, want_fence=False, want_shut_down=False)
            self.heartbeats += 1
            failed = False
            try:
                r = await self.conns[b].request(req, 1, timeout=30)
                if r.error_code:
                    failed = True
                    self.errors[Errors(r.error_code).name] = self.errors.get(Errors(r.error_code).name, 0) + 1
                elif r.is_fenced:
                    self.fenced_answers += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - counted; the next heartbeat retries
                failed = True
                self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
            # a failed heartbeat (the controller answers REQUEST_TIMED_OUT when its queue is slow)
            # is retried after a short backoff, as a broker's lifecycle manager does: waiting a
            # whole interval after it let 1M-partition creation outlast sessions (session 17)
            pause = RETRY_BACKOFF_S if failed else self.interval_s - (time.monotonic() - sent)
            await asyncio.sleep(max(0.0, pause))

    async def _round(self, conn: KafkaConnection, ids: list[int]) -> dict[int, Any]:
        """One heartbeat from each of ``ids`` (concurrently, each on its broker's connection), at
        the controller's current high watermark (asked on ``conn``); the answers (None for an
        error, counted)."""
        offset = 0
        try:
            q = await conn.request(metadata_quorum.describe_request(), 2, timeout=30)
            if not q.error_code and q.topics and not q.topics[0].partitions[0].error_code:
                offset = q.topics[0].partitions[0].high_watermark
        except Exception as exc:  # noqa: BLE001 - counted; the registration offsets are used
            self.errors["DescribeQuorum " + type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1

        async def one(b: int) -> Any:
            req = BrokerHeartbeatRequest(broker_id=b, broker_epoch=self.epochs[b],
                                         current_metadata_offset=max(offset, self.epochs[b]), want_fence=False,
                                         want_shut_down=False)
            self.heartbeats += 1
            try:
                r = await self.conns[b].request(req, 1, timeout=30)
            except Exception as exc:  # noqa: BLE001 - counted; the next round retries
                self.errors[type(exc).__name__] = self.errors.get(type(exc).__name__, 0) + 1
                return None
            if r.error_code:
                name = Errors(r.error_code).name
                self.errors[name] = self.errors.get(name, 0) + 1
                return None
            return r
        answers = await asyncio.gather(*(one(b) for b in ids))
        return dict(zip(ids, answers))


# ------------------------------------------------------------------ propagation
async def propagation_run(c: BrokerCluster, run_no: int, topics: int, poll_s: float) -> list[float]:
    ports = [b.port for b in c.brokers]
    polls = [await KafkaConnection.open("127.0.0.1", p, timeout=10) for p in ports]
    creator = await KafkaConnection.open("127.0.0.1", ports[0], timeout=10)
    lags: list[float] = []
    try:
        for i in range(topics):
            name = f"prop-{run_no}-{i}"
            resp = await creator.request(CT(topics=[CT.CreatableTopic(name=name, num_partitions=1,
                                                                      replication_factor=3)], timeout_ms=10_000),
                                         7, timeout=15)
            t0 = time.perf_counter()
            if resp.topics[0].error_code:
                raise SystemExit(f"creating {name}: error {resp.topics[0].error_code} {resp.topics[0].error_message}")

            async def visible(conn: KafkaConnection) -> float:
                req = MR(topics=[MR.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False)
                deadline = t0 + 10
                while True:
                    r = await conn.request(req, 12, timeout=5)
                    if r.topics and r.topics[0].error_code == 0 and r.topics[0].partitions:
                        return time.perf_counter() - t0
                    if time.perf_counter() > deadline:
                        raise SystemExit(f"{name} not visible on {conn} within 10 s")
                    await asyncio.sleep(poll_s)

            seen = await asyncio.gather(*(visible(conn) for conn in polls))
            lags.append(max(seen) * 1000)
    finally:
        for conn in polls + [creator]:
            await conn.close()
    return lags


def cmd_propagation(args: argparse.Namespace, argv: list[str]) -> None:
    base = tempfile.mkdtemp(prefix="broker-bench-")
    extra = {"controller.quorum.append.linger.ms": str(args.linger_ms)}
    c = BrokerCluster(base, controllers=args.controllers, brokers=args.brokers, extra=extra)
    setup = {"controllers": args.controllers, "brokers": args.brokers, "topics per run": args.topics,
             "poll every": f"{args.poll_ms} ms", "controller.quorum.append.linger.ms": args.linger_ms,
             "load before": load()}
    runs = []
    try:
        c.start(timeout=120)
        for r in range(args.runs):
            lags = run(propagation_run(c, r, args.topics, args.poll_ms / 1000), timeout=600)
            runs.append({"p50": statistics.median(lags), "p99": percentile(lags, 99), "max": max(lags),
                         "min": min(lags), "n": len(lags),
                         "slow": sum(1 for x in lags if x > 100)})
            print(f"run {r}: {runs[-1]}", file=sys.stderr)
    finally:
        c.close()
    setup["load after"] = load()
    lines = header(f"Propagation: CreateTopics answer to visibility in every broker's Metadata "
                   f"({args.brokers} brokers, {args.controllers} controller(s), loopback)", argv, setup)
    lines += ["| run | topics | p50 ms | p99 ms | min ms | max ms | topics > 100 ms |",
              "|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs):
        lines.append(f"| {i} | {r['n']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['min']:.2f} | {r['max']:.2f} | "
                     f"{r['slow']} |")
    lines += ["", f"Median over runs: p50 {statistics.median(r['p50'] for r in runs):.2f} ms, "
              f"p99 {statistics.median(r['p99'] for r in runs):.2f} ms.  Target (issue 24): p99 <= 50 ms."]
    write_report(lines, args.out or os.path.join(HERE, "results", "s17", "broker_propagation.md"))


# ------------------------------------------------------------------ shutdown
def log_time(line_re: str, text: str) -> float | None:
    """The wall-clock time (epoch seconds) of the first log line matching ``line_re``."""
    for line in text.splitlines():
        if re.search(line_re, line):
            m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]", line)
            if m:
                return datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
    return None


def wait_logs_open(node: Any, timeout_s: float) -> None:
    """Wait until ``node``'s ReplicaManager has opened every partition log it started opening in
    the background (its log says so: a large batch of new logs is opened while the broker's loop
    runs, so the Metadata answer can show a leader that is still creating its logs)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = node.log()
        started = text.count("partition logs in the background (the loop keeps running)")
        if text.count("the background batch of partition logs is open") >= started:
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"broker {node.id} still opening partition logs after {timeout_s} s")
        time.sleep(0.2)


def cmd_shutdown(args: argparse.Namespace, argv: list[str]) -> None:
    check_fds(args.partitions, "shutdown")
    base = tempfile.mkdtemp(prefix="broker-bench-")
    # the tests' 200 ms heartbeat (the shutdown handshake's pace, as in session 15) with Kafka's 9 s
    # session: creating thousands of partition logs holds a broker's loop for seconds (the
    # ReplicaManager waits for the batch), and with the tests' 2 s session all three brokers were
    # fenced mid-creation and broker 101 led 600 of 3,000 partitions when SIGTERM came
    extra = {"broker.heartbeat.interval.ms": str(args.heartbeat_ms), "broker.session.timeout.ms": str(args.session_ms)}
    c = BrokerCluster(base, controllers=1, brokers=3, shutdown_timeout_s=args.shutdown_timeout, extra=extra)
    ctl_port = c.controllers[0].controller_port
    assert ctl_port is not None
    victim = c.nodes[101]
    setup = {"controllers": 1, "brokers": 3, "partitions led by broker 101": args.partitions,
             "replicas": "[101, 102, 103]", "--shutdown-timeout-seconds": args.shutdown_timeout, **extra,
             "load before": load()}
    runs = []
    try:
        c.start(timeout=120)
        for r in range(args.runs):
            if not victim.alive:
                victim.start()
                victim.wait_started(120)
            if r:
                # the previous run's topics go (their logs are closed and renamed away), so that
                # each run's broker holds ``--partitions`` logs, not r times as many
                run(delete_topics(ctl_port, [f"sd{r - 1}-{i}" for i in range((args.partitions + 999) // 1000)]),
                    timeout=300)
            load0 = load()
            took = run(create_partitions(ctl_port, f"sd{r}-", args.partitions, 1000, replicas=[101, 102, 103]),
                       timeout=600)
            run(wait_everywhere(ctl_port, [b.port for b in c.brokers], f"sd{r}-sentinel", 300), timeout=400)
            wait_logs_open(victim, 300)
            shown = leaders(run(metadata(c.nodes[102].port, timeout=60), timeout=120))
            led = sum(1 for v in shown.values() if v == 101)
            samplers = []
            if args.py_spy and r == 0:
                from controller_tcp_bench import start_py_spy
                samplers = [start_py_spy(n.proc.pid, args.py_spy_seconds, f"{args.py_spy}.{n.id}.txt")
                            for n in c.nodes.values() if n.proc is not None and n.alive]
            t0, wall0 = time.monotonic(), time.time()
            victim.terminate()
            code = victim.wait_exit(60)
            took_s = time.monotonic() - t0
            for sampler in samplers:
                sampler.wait(timeout=args.py_spy_seconds + 30)
            log = victim.log()
            m = re.search(r"closed (\d+) partition logs in ([\d.]+) s; checkpoints written in ([\d.]+) s", log)
            approved = "The controller has asked us to exit controlled shutdown." in log
            approved_at = log_time("The controller has asked us to exit controlled shutdown", log)
            after = leaders(run(metadata(c.nodes[102].port, timeout=60), timeout=120))
            still = sum(1 for v in after.values() if v == 101)
            runs.append({"exit_s": took_s, "code": code, "led": led, "approved": approved, "still_led": still,
                         "create_s": took, "approved_s": None if approved_at is None else approved_at - wall0,
                         "closed": None if m is None else (int(m.group(1)), float(m.group(2)), float(m.group(3))),
                         "load": f"{load0} -> {load()}"})
            print(f"run {r}: {runs[-1]}", file=sys.stderr)
    finally:
        c.close()
    setup["load after"] = load()
    lines = header("Controlled shutdown: SIGTERM to process exit of a broker leading "
                   f"{args.partitions:,} partitions", argv, setup)
    lines += ["| run | load (1/5/15 min) before -> after | partitions led | SIGTERM to approval s (its log) | "
              "logs closed | closing s | checkpoints s | SIGTERM to exit s | exit code | still led after |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(runs):
        ap = "not approved" if r["approved_s"] is None else f"{r['approved_s']:.2f}"
        cl = ("-", "-", "-") if r["closed"] is None else (f"{r['closed'][0]:,}", f"{r['closed'][1]:.2f}",
                                                          f"{r['closed'][2]:.3f}")
        lines.append(f"| {i} | {r['load']} | {r['led']:,} | {ap} | {cl[0]} | {cl[1]} | {cl[2]} | {r['exit_s']:.2f} | "
                     f"{r['code']} | {r['still_led']} |")
    lines += ["", "'logs closed', 'closing' and 'checkpoints' are from the broker's LogManager line (closing: "
              "flush and clean-shutdown marker of every log, 16 threads; checkpoints: the three checkpoint "
              "files).  Each run deletes the previous run's topics first, so the broker hosts --partitions logs."]
    short = [i for i, r in enumerate(runs) if r["led"] < args.partitions]
    if short:
        lines += ["", f"**Runs {short} did not measure what they should**: broker 101 led fewer than "
                  f"{args.partitions:,} partitions at SIGTERM (fenced during the creation?)."]
    lines += ["", f"Median SIGTERM to exit: {statistics.median(r['exit_s'] for r in runs):.2f} s.  "
              "Target (issue 24): <= 2 s."]
    write_report(lines, args.out or os.path.join(HERE, "results", "s17", "broker_shutdown.md"))


# ------------------------------------------------------------------ start
#: broker log lines that mark the phases of a start (the first match of each; ms resolution)
START_PHASES = [
    ("metadata loaded", r"The loader finished catching up to the current high water mark"),
    ("logs loaded", r"loaded \d+ partition logs from"),
    ("replicas made", r"initializing BrokerRegistrationTracker"),
    ("registered", r"Successfully registered broker"),
    ("unfenced", r"unfenced with broker epoch"),
]


def hosted_counts(log: str) -> dict[str, int]:
    """From a broker's log: the logs it loaded at start, and the leaderships and followerships
    its first image gave it (the ReplicaManager's lines; summed over its lines)."""
    out = {"loaded": 0, "leader": 0, "follower": 0}
    m = re.search(r"loaded (\d+) partition logs from", log)
    if m:
        out["loaded"] = int(m.group(1))
    out["leader"] = sum(int(x) for x in re.findall(r": leader of (\d+) partitions", log))
    out["follower"] = sum(int(x) for x in re.findall(r": follower of (\d+) partitions", log))
    return out


def cmd_start(args: argparse.Namespace, argv: list[str]) -> None:
    check_fds(args.partitions * 3 // (3 + args.fake_brokers), "start")
    base = tempfile.mkdtemp(prefix="broker-bench-")
    # Kafka's heartbeat and session defaults: with the tests' 200 ms / 2 s, building 100k partitions
    # on two shared cores overloaded the controller's queue until it fenced healthy brokers.
    extra = {"broker.heartbeat.interval.ms": str(args.heartbeat_ms), "broker.session.timeout.ms": str(args.session_ms)}
    broker_extra = {}
    if args.fake_brokers:
        # the fake brokers never fetch: without this the real leaders would shrink every ISR
        # (an AlterPartition per partition they lead) in the middle of the measurement
        broker_extra["replica.lag.time.max.ms"] = str(args.replica_lag_ms)
    c = BrokerCluster(base, controllers=1, brokers=3, shutdown_timeout_s=60, extra=extra, broker_extra=broker_extra)
    ctl_port = c.controllers[0].controller_port
    assert ctl_port is not None
    victim: ServerProcess = c.nodes[103]
    total = 3 + args.fake_brokers
    setup = {"cluster dir": base, "controllers": 1, "brokers": f"3 real + {args.fake_brokers} fake = {total}",
             "partitions": f"{args.partitions:,}", "RF": 3, "placement": "the controller's default", **extra,
             **broker_extra, "partitions per topic": args.per_topic, "load before": load()}
    runs = []
    fakes: FakeBrokers | None = None
    try:
        c.start(timeout=120)
        if args.fake_brokers:
            fakes = FakeBrokers(ctl_port, list(range(1001, 1001 + args.fake_brokers)), args.heartbeat_ms / 1000)
            setup["fake brokers unfenced in"] = f"{fakes.start(120):.2f} s"
        build_s = run(create_partitions(ctl_port, "st-", args.partitions, args.per_topic, inflight=2),
                      timeout=7200)
        run(wait_everywhere(ctl_port, [b.port for b in c.brokers], "st-sentinel", 3600), timeout=3700)
        setup["created in"] = f"{build_s:.1f} s ({args.partitions / build_s:,.0f} partitions/s)"
        print(f"created {args.partitions} partitions in {build_s:.1f} s; load {load()}", file=sys.stderr)
        for r in range(args.runs):
            before = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
            t_stop = time.monotonic()
            code = victim.stop(300)
            stop_s = time.monotonic() - t_stop
            approved = "The controller has asked us to exit controlled shutdown." in victim.log()
            wall0 = time.time()
            victim.start()
            started_s = victim.wait_started(600)
            log = victim.log()
            after = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else []
            phases = {}
            for name, pattern in START_PHASES:
                t = log_time(pattern, log)
                phases[name] = None if t is None else t - wall0
            first_line = log_time(r".", log)
            runs.append({"started_s": started_s, "first_log_s": None if first_line is None else first_line - wall0,
                         "phases": phases, "stop_s": stop_s, "stop_code": code, "approved": approved,
                         "hosted": hosted_counts(log),
                         "load": f"{' '.join(before)} -> {' '.join(after)}"})
            print(f"run {r}: {runs[-1]}", file=sys.stderr)
    finally:
        if fakes is not None:
            fakes.stop()
            setup["fake brokers' heartbeats"] = fakes.summary()
        c.close()
    setup["load after"] = load()

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.2f}"

    lines = header(f"Broker start: a restarted broker unfenced, {args.partitions:,} partitions in the metadata",
                   argv, setup)
    if args.fake_brokers:
        lines += [f"The cluster's metadata holds {args.partitions:,} partitions (RF 3) placed by the controller "
                  f"over {total} unfenced brokers: 3 real brokers (`kraft-server-start`, 101-103) and "
                  f"{args.fake_brokers} fake ones (1001-) that only register and heartbeat over the controller "
                  "listener from the bench process (`FakeBrokers` in the script), so the restarted broker 103 "
                  f"hosts ~{3 / total:.1%} of the partitions, as a broker of a {total}-broker cluster would.  "
                  "`--fake-brokers 0` is session 15's setup (every broker hosts every partition).", ""]
    names = [n for n, _ in START_PHASES]
    lines += ["| run | load (1/5/15 min) before -> after | stop s (SIGTERM to exit, approved?) | logs loaded | "
              "leader of | follower of | first log line s | " + " | ".join(f"{n} s" for n in names)
              + " | 'serving Kafka clients' s |",
              "|---|---|---|---|---|---|---|" + "---|" * len(names) + "---|"]
    for i, r in enumerate(runs):
        h = r["hosted"]
        ok = "approved" if r["approved"] else "NOT approved"
        lines.append(f"| {i} | {r['load']} | {r['stop_s']:.2f} ({ok}) | {h['loaded']:,} | {h['leader']:,} | "
                     f"{h['follower']:,} | {fmt(r['first_log_s'])} | "
                     + " | ".join(fmt(r["phases"][n]) for n in names) + f" | {r['started_s']:.2f} |")
    lines += ["", "Times from the process start (Popen), phases from the broker's own log (ms resolution): "
              "'first log line' is roughly the interpreter and import cost; 'metadata loaded' the loader caught "
              "up with the quorum's high watermark (snapshot plus log, concurrent with the next); 'logs loaded' "
              "the LogManager's start (opening the partition logs found on disk, 16 worker threads); 'replicas "
              "made' the ReplicaManager's first image applied (Partitions, fetchers), after which the broker "
              "registers; 'registered' the controller's answer; 'unfenced' the broker's unfenced line (the "
              "controller saw it caught up); 'serving Kafka clients' kraft-server-start's "
              "started line, seen by polling its stderr every 5 ms.  'stop' is the controlled shutdown before "
              "the start (the broker leaves the ISRs it is in).",
              "", f"Median to 'serving Kafka clients': {statistics.median(r['started_s'] for r in runs):.2f} s.  "
              "Target (issue 24): <= 3 s at 1M partitions."]
    write_report(lines, args.out or os.path.join(HERE, "results", "s17", f"broker_start_{args.partitions}.md"))


# ------------------------------------------------------------------ tail replay (in process)
def cmd_tail_replay(args: argparse.Namespace, argv: list[str]) -> None:
    """A broker's start, metadata half, in process: load the latest snapshot of ``--metadata-dir``
    (a ``__cluster_metadata-0`` left by ``start``; copy it first) into a MetadataLoader, then time
    the commit of the log after it in chunks of 50 batches, as the broker's loader gets them.
    (Session 17's what-if here -- log_fold's ``_take`` widening only the rows' offsets, 18.5 ->
    5.1 s with equal images -- landed in log_fold; s17/broker_start_tail_replay.md has its A/B.)"""
    import gc

    from kraft_node.metadata.loader import MetadataLoader
    from kraft_node.metadata.loader.publishers import MetadataCachePublisher
    from kraft_node.raft.io.kafka_log import KafkaRaftLog

    raft_log = KafkaRaftLog(args.metadata_dir)
    sid = raft_log.latest_snapshot_id()
    if sid is None:
        raise SystemExit(f"{args.metadata_dir}: no snapshot")
    batches: list[Any] = []
    off = sid.offset
    while True:
        got = raft_log.read(off, 8 << 20)
        if not got:
            break
        batches.extend(got)
        off = got[-1].next_offset
    end = off
    records = sum(len(b.records) for b in batches)
    variants = ["as is"]
    setup = {"snapshot": f"{sid.offset}", "tail": f"{len(batches)} batches, {records:,} records",
             "load before": load()}
    rows: list[tuple[int, str, float, float, bool]] = []
    try:
        for rnd in range(args.runs):
            images = []
            for name in variants:
                loader = MetadataLoader(high_watermark=lambda: end)
                cache = MetadataCachePublisher()
                loader.install_publishers([cache])
                t0 = time.perf_counter()
                snap = raft_log.open_snapshot(sid)
                assert snap is not None
                loader.handle_load_snapshot(snap)
                snap_s = time.perf_counter() - t0
                gc.collect()
                t0 = time.perf_counter()
                for i in range(0, len(batches), 50):
                    loader.handle_commit(tuple(batches[i:i + 50]))
                tail_s = time.perf_counter() - t0
                if loader.failure is not None:
                    raise SystemExit(f"{name}: the loader failed: {loader.failure}")
                images.append(cache.current_image())
                rows.append((rnd, name, snap_s, tail_s, images[0] == images[-1]))
                print(f"round {rnd} {name}: snapshot {snap_s:.2f} s, tail {tail_s:.2f} s", file=sys.stderr)
    finally:
        raft_log.close()
    setup["load after"] = load()
    lines = header("A broker's metadata catch-up in process: latest snapshot, then the log after it", argv, setup)
    lines += ["| round | variant | snapshot load s | tail replay s | image equal to 'as is' |", "|---|---|---|---|---|"]
    lines += [f"| {r} | {n} | {a:.2f} | {b:.2f} | {e} |" for r, n, a, b, e in rows]
    for name in variants:
        med = statistics.median(b for _r, n, _a, b, _e in rows if n == name)
        lines.append(f"\nMedian tail replay, {name}: {med:.2f} s.")
    write_report(lines, args.out or os.path.join(HERE, "results", "s17", "broker_start_tail_replay.md"))


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(prog="broker_bench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("propagation")
    s.add_argument("--controllers", type=int, default=3)
    s.add_argument("--brokers", type=int, default=3)
    s.add_argument("--topics", type=int, default=200)
    s.add_argument("--poll-ms", type=float, default=1.0)
    s.add_argument("--linger-ms", type=int, default=5, help="controller.quorum.append.linger.ms (Kafka: 25)")
    s = sub.add_parser("shutdown")
    s.add_argument("--partitions", type=int, default=10_000)
    s.add_argument("--shutdown-timeout", type=float, default=30.0, help="the broker's --shutdown-timeout-seconds")
    s.add_argument("--heartbeat-ms", type=int, default=200, help="broker.heartbeat.interval.ms (the tests' 200)")
    s.add_argument("--session-ms", type=int, default=9000, help="broker.session.timeout.ms (Kafka's default)")
    s.add_argument("--py-spy", default=None, metavar="PREFIX",
                   help="the first run: py-spy (raw collapsed stacks, 250 Hz) of every node from the SIGTERM, "
                        "--py-spy-seconds long, to PREFIX.<node id>.txt")
    s.add_argument("--py-spy-seconds", type=float, default=12.0)
    s = sub.add_parser("start")
    s.add_argument("--partitions", type=int, default=1_000_000)
    s.add_argument("--per-topic", type=int, default=1000)
    s.add_argument("--heartbeat-ms", type=int, default=2000, help="broker.heartbeat.interval.ms (Kafka's default)")
    s.add_argument("--session-ms", type=int, default=9000, help="broker.session.timeout.ms (Kafka's default)")
    s.add_argument("--fake-brokers", type=int, default=97,
                   help="brokers that only register and heartbeat (the placement spreads partitions over them "
                        "too); 0: session 15's setup, every real broker hosts every partition")
    s.add_argument("--replica-lag-ms", type=int, default=3_600_000,
                   help="the real brokers' replica.lag.time.max.ms when there are fake brokers (they never fetch)")
    s = sub.add_parser("tail-replay")
    s.add_argument("--metadata-dir", required=True, help="a copy of a broker's __cluster_metadata-0 (from start)")
    for s in sub.choices.values():
        s.add_argument("--runs", type=int, default=3)
        s.add_argument("--out", default=None, help="the Markdown report (default: results/s17/broker_<name>.md)")
        s.add_argument("--nofile", type=int, default=262_144,
                       help="RLIMIT_NOFILE for the started processes (one descriptor per partition log "
                            "segment); 0: leave it")
    args = p.parse_args(argv)
    for name in ("runs", "partitions", "topics", "controllers", "brokers"):
        if getattr(args, name, 1) < 1:
            p.error(f"--{name} must be at least 1")
    if getattr(args, "fake_brokers", 0) < 0:
        p.error("--fake-brokers must be at least 0")
    raise_nofile(args.nofile)
    {"propagation": cmd_propagation, "shutdown": cmd_shutdown, "start": cmd_start,
     "tail-replay": cmd_tail_replay}[args.cmd](args, argv)


if __name__ == "__main__":
    main()
