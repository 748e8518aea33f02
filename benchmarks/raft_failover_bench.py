"""Failover of a 3-voter KRaft quorum at Kafka's default ``controller.quorum.*`` timeouts.

    python benchmarks/raft_failover_bench.py [--reps 10] [--modes kill,term] [--poll-ms 5]
                                             [--writer-interval-ms 5] [--json out.json]

Setup: three ``python -m kraft_node.server.start`` processes on 127.0.0.1 (ports
from the OS, data in a temp dir, fsync on), a static quorum whose config
files set no ``controller.quorum.*`` key at all, so every timeout is the
default of :class:`kraft_node.raft.config.QuorumConfig` -- the JSON's
``setup.quorum_config`` shows what the nodes parsed, and
``setup.matches_kafka_4_defaults`` compares it with Kafka 4.x's
``QuorumConfig`` defaults (election timeout 1000 ms, fetch timeout 2000 ms,
election backoff max 1000 ms, request timeout 2000 ms, retry backoff 20 ms,
append linger 25 ms).

Writer: every node runs ``--demo-writer`` (one record every
``--writer-interval-ms`` while it leads; ``ACK <offset> <value>`` on stdout
once committed), so whichever node leads keeps appending.  Every process is
a subprocess, so the leader that gets killed is never this process.

Each repetition, once the quorum is stable (a leader whose DescribeQuorum
shows both followers fetched in the last second and caught up to the high
watermark, after a random 0.3-1.0 s pause so the kill lands at an arbitrary
point of the fetch cycle):

* ``kill``: SIGKILL of the leader.  The followers only notice when their
  fetch timeout (2 s) expires -- Kafka's rule, the closed connection does not
  shortcut it -- then pre-vote, vote, and the winner writes LeaderChange.
* ``term``: SIGTERM of the leader, which resigns with EndQuorumEpoch naming
  its followers as preferred successors (the first one may stand at once).

Measured from the signal (``time.monotonic()`` just before sending it), by
polling DescribeQuorum on every surviving node every ``--poll-ms`` over
persistent TCP connections, and by timestamping the writers' ACK lines:

* ``elected_ms``: first answer naming a new leader (any node's answer: a
  follower's NOT_LEADER_OR_FOLLOWER carries the leader id and epoch);
* ``committing_ms``: first answer *from the new leader* with a high watermark
  (a leader reports none until a record of its own epoch is committed --
  Kafka's epoch-start rule -- so this is "the high watermark advances in the
  new epoch");
* ``first_ack_ms``: first ACK line printed by the new leader's writer: one of
  its appends committed (adds the writer's interval and the 25 ms linger).

Targets (issue 6): ``committing_ms`` <= 2500 ms after kill -9, <= 200 ms after
a graceful resignation.  The JSON also gives each repetition's timeline of
role changes (from the nodes' stderr logs, ms after the signal), and the
epochs skipped (``epoch_gap`` > 1 means a failed/split election).

After a repetition the stopped node is restarted (it rejoins as a follower)
and the next one waits for stability again.  Every wait is bounded; every
process is killed at the end; the nodes also get ``--exit-after-seconds``.
``--keep`` keeps the data dir (the nodes' stderr logs); ``FAILOVER_DEBUG=1``
prints the bench's asyncio task stacks every 10 s (for diagnosing a hang).
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kraft_node.network import KafkaConnection  # noqa: E402
from kraft_node.server.config import NodeConfig  # noqa: E402
from kraft_node.server.tools import metadata_quorum  # noqa: E402
from kraft_node.server.tools.storage import format_storage  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/ (also when loaded by path)
from _support import code_version, free_ports  # noqa: E402

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
NOT_LEADER_OR_FOLLOWER = 6

#: Kafka 4.x ``org.apache.kafka.raft.QuorumConfig`` defaults (ms), by our field names.
KAFKA_DEFAULTS = {"election_timeout_ms": 1000, "fetch_timeout_ms": 2000, "election_backoff_max_ms": 1000,
                  "request_timeout_ms": 2000, "retry_backoff_ms": 20, "append_linger_ms": 25}

_LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\] \w+ (node \d+ .*)$")
_ROLE_WORDS = ("became leader", "following leader", "resigned", "candidate", "prospective", "unattached",
               "shutting down", "shut down")


def write_configs(base: str, voters: int = 3, extra: dict | None = None) -> list[str]:
    """server.properties for ``voters`` static voters, no ``controller.quorum.*`` timeout keys
    (defaults apply) unless ``extra`` sets some; every log dir formatted."""
    ports = free_ports(voters)
    quorum = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(voters))
    paths = []
    for i in range(voters):
        nid = i + 1
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d, exist_ok=True)
        props = {"process.roles": "controller", "node.id": nid, "controller.quorum.voters": quorum,
                 "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}", "controller.listener.names": "CONTROLLER",
                 "log.dirs": os.path.join(d, "data")}
        props.update(extra or {})
        p = os.path.join(d, "server.properties")
        with open(p, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        format_storage(NodeConfig.from_file(p), CLUSTER_ID, out=io.StringIO())
        paths.append(p)
    return paths


class Node:
    """One ``python -m kraft_node.server.start`` process with ``--demo-writer``; ACK lines timestamped."""

    def __init__(self, cfg_path: str, writer_interval_ms: int, max_lifetime_s: float):
        self.cfg_path = cfg_path
        cfg = NodeConfig.from_file(cfg_path)
        self.id = cfg.node_id
        self.port = cfg.controller_endpoint.port
        self.writer_interval_ms = writer_interval_ms
        self.max_lifetime_s = max_lifetime_s
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.acks: list[tuple[float, int]] = []  # (monotonic time read, offset)
        self._lock = threading.Lock()

    def stderr_path(self, start: int | None = None) -> str:
        return os.path.join(os.path.dirname(self.cfg_path), f"stderr.{start or self.starts}")

    def start(self) -> None:
        self.starts += 1
        args = [sys.executable, "-m", "kraft_node.server.start", self.cfg_path, "--shutdown-timeout-seconds", "5",
                "--exit-after-seconds", str(self.max_lifetime_s), "--demo-writer",
                "--writer-interval-ms", str(self.writer_interval_ms), "--writer-batch", "1"]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        err = open(self.stderr_path(), "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env, text=True)
        err.close()
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def _read(self, proc) -> None:
        for line in proc.stdout:
            t = time.monotonic()
            if line.startswith("ACK "):
                with self._lock:
                    self.acks.append((t, int(line.split()[1])))

    def acks_since(self, t0: float) -> list[tuple[float, int]]:
        with self._lock:
            return [a for a in self.acks if a[0] >= t0]

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        if self.alive:
            self.proc.kill()
        if self.proc is not None:
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return open(self.stderr_path()).read()[-n:]
        except OSError:
            return ""


async def wait_serving(node: Node, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", node.port), 0.5)
            w.close()
            return
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.02)
    raise RuntimeError(f"node {node.id} is not serving after {timeout}s:\n{node.stderr_tail()}")


class QuorumPoller:
    """Polls DescribeQuorum on a set of nodes every ``interval`` s, one task per node, and
    records ``(monotonic time of the answer, node id, error, leader id, epoch, hwm)``."""

    def __init__(self, nodes: list[Node], interval: float):
        self.nodes = nodes
        self.interval = interval
        self.samples: list[tuple[float, int, int, int, int, int]] = []
        self._tasks: list[asyncio.Task] = []
        self._stopping = False

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(n)) for n in self.nodes]

    async def stop(self) -> None:
        # A flag first: Python 3.11's wait_for (inside KafkaConnection.request) can swallow a
        # cancellation that races with its answer, which would leave the loop running.
        self._stopping = True
        done, pending = await asyncio.wait(self._tasks, timeout=2.0)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=2.0)

    async def _loop(self, node: Node) -> None:
        conn = None
        req = metadata_quorum.describe_request()
        next_t = time.monotonic()
        try:
            while not self._stopping:
                try:
                    if conn is None:
                        conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=0.5)
                    q = await conn.request(req, 2, timeout=0.5)
                    t = time.monotonic()
                    p = q.topics[0].partitions[0]
                    err = q.error_code or p.error_code
                    self.samples.append((t, node.id, err, p.leader_id, p.leader_epoch, p.high_watermark))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    if conn is not None:
                        try:
                            await conn.close()
                        except Exception:
                            pass
                    conn = None
                next_t += self.interval
                delay = next_t - time.monotonic()
                if delay < 0:
                    next_t = time.monotonic()
                    delay = 0
                await asyncio.sleep(delay)
        finally:
            if conn is not None:
                try:
                    await conn.close()
                except Exception:
                    pass


async def describe(node: Node, timeout: float = 1.0):
    """One DescribeQuorum answer's partition (or None)."""
    try:
        conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=timeout)
    except (OSError, asyncio.TimeoutError):
        return None
    try:
        q = await conn.request(metadata_quorum.describe_request(), 2, timeout=timeout)
        return q.topics[0].partitions[0] if not q.error_code else None
    except Exception:
        return None
    finally:
        try:
            await conn.close()
        except Exception:
            pass


async def wait_stable(nodes: list[Node], timeout: float = 30.0) -> tuple[Node, int, int]:
    """Until one node leads with every voter fetching (last fetch < 1 s ago) and caught up to
    the high watermark, twice in a row 100 ms apart.  Returns (leader, epoch, hwm)."""
    deadline = time.monotonic() + timeout
    ok_before = None
    while time.monotonic() < deadline:
        for n in nodes:
            if not n.alive:
                continue
            p = await describe(n)
            if p is None or p.error_code or p.leader_id != n.id or p.high_watermark < 0:
                continue
            now_wall = int(time.time() * 1000)
            fresh = all(v.replica_id == n.id or (0 <= now_wall - v.last_fetch_timestamp < 1000
                                                and v.log_end_offset >= p.high_watermark - 50)
                        for v in p.current_voters)
            if len(p.current_voters) == len(nodes) and fresh:
                if ok_before == (n.id, p.leader_epoch):
                    return n, p.leader_epoch, p.high_watermark
                ok_before = (n.id, p.leader_epoch)
                break
        else:
            ok_before = None
        await asyncio.sleep(0.1)
    raise RuntimeError("the quorum did not become stable (a leader with every voter caught up) within "
                       f"{timeout}s:\n" + "\n".join(n.stderr_tail(1500) for n in nodes))


def role_timeline(nodes: list[Node], wall0: float, t_from_ms: float, t_to_ms: float,
                  starts: dict[int, list[int]] | None = None) -> list[tuple[float, int, str]]:
    """Role-change lines of the nodes' stderr logs between the two offsets (ms after ``wall0``)."""
    out = []
    for n in nodes:
        for s in (starts or {}).get(n.id, [n.starts]):
            try:
                text = open(n.stderr_path(s)).read()
            except OSError:
                continue
            for line in text.splitlines():
                m = _LOG_LINE.match(line)
                if not m or not any(w in m.group(2) for w in _ROLE_WORDS):
                    continue
                ts = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                rel = round((ts - wall0) * 1000, 0)
                if t_from_ms <= rel <= t_to_ms:
                    out.append((rel, n.id, m.group(2)))
    return sorted(out)


async def measure_once(nodes: list[Node], mode: str, poll_s: float, timeout: float = 15.0) -> dict:
    """One failover: signal the current leader, poll the others until the new leader commits
    in its epoch and its writer has an append committed (or ``timeout``)."""
    leader, epoch0, hwm0 = await wait_stable(nodes)
    await asyncio.sleep(random.uniform(0.3, 1.0))
    p = await describe(leader)
    if p is None or p.error_code or p.leader_id != leader.id:  # changed during the pause: retry later
        return {"skipped": "leadership moved before the signal"}
    epoch0 = p.leader_epoch
    others = [n for n in nodes if n is not leader]
    poller = QuorumPoller(others, poll_s)
    poller.start()
    await asyncio.sleep(3 * poll_s)
    wall0 = time.time()
    t0 = time.monotonic()
    if mode == "kill":
        leader.proc.send_signal(signal.SIGKILL)
    else:
        leader.terminate()
    elected = committing = first_ack = None
    new_leader = new_epoch = new_hwm = None
    deadline = t0 + timeout
    seen = 0
    while time.monotonic() < deadline:
        await asyncio.sleep(poll_s)
        samples = poller.samples
        for t, nid, err, lid, ep, hwm in samples[seen:]:
            if t < t0 or ep <= epoch0 or lid in (-1, leader.id):
                continue
            if elected is None:
                elected, new_leader, new_epoch = t, lid, ep
            if err == 0 and lid == nid and hwm >= 0 and committing is None:
                committing, new_leader, new_epoch, new_hwm = t, nid, ep, hwm
        seen = len(samples)
        if committing is not None and first_ack is None:
            nl = next(n for n in nodes if n.id == new_leader)
            acks = nl.acks_since(t0)
            if acks:
                first_ack = acks[0][0]
        if committing is not None and first_ack is not None:
            break
    await poller.stop()

    def ms(t):
        """Milliseconds from t0 to the monotonic time t, or None if t never came."""
        return None if t is None else round((t - t0) * 1000, 1)

    end_ms = (time.monotonic() - t0) * 1000
    if mode == "kill":
        leader.kill9()
        exit_code = None
    else:
        exit_code = leader.wait_exit(10)
        if exit_code is None:
            leader.kill9()
    res = {"mode": mode, "old_leader": leader.id, "old_epoch": epoch0, "new_leader": new_leader,
           "new_epoch": new_epoch, "epoch_gap": (new_epoch - epoch0) if new_epoch else None,
           "elected_ms": ms(elected), "committing_ms": ms(committing), "first_ack_ms": ms(first_ack),
           "new_leader_hwm": new_hwm, "polls": len(poller.samples),
           "timeline": role_timeline(nodes, wall0, -50, end_ms + 50)}
    if mode == "term":
        res["old_leader_exit_code"] = exit_code
    # the stopped node comes back (it restarts Resigned / as a follower and catches up)
    leader.start()
    await wait_serving(leader)
    return res


def summary(xs: list) -> dict | None:
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return {"n": len(xs), "median": round(statistics.median(xs), 1),
            "p90": round(xs[min(len(xs) - 1, int(0.9 * len(xs)))], 1), "min": xs[0], "max": xs[-1]}


async def run(paths: list[str], modes: list[str], reps: int, poll_s: float, writer_interval_ms: int,
              max_lifetime_s: float, rep_timeout: float = 15.0, log=None) -> dict:
    nodes = [Node(p, writer_interval_ms, max_lifetime_s) for p in paths]
    results = {m: [] for m in modes}
    if os.environ.get("FAILOVER_DEBUG"):
        async def dump():
            while True:
                await asyncio.sleep(10)
                for t in asyncio.all_tasks():
                    t.print_stack(limit=6, file=sys.stderr)
        asyncio.create_task(dump())
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            await wait_serving(n)
        for m in modes:
            attempts = 0
            while len([r for r in results[m] if "skipped" not in r]) < reps and attempts < reps * 2:
                attempts += 1
                r = await measure_once(nodes, m, poll_s, rep_timeout)
                results[m].append(r)
                if log:
                    log(json.dumps({k: v for k, v in r.items() if k != "timeline"}))
    finally:
        for n in nodes:
            n.kill9()
    out = {}
    for m, rs in results.items():
        done = [r for r in rs if "skipped" not in r]
        out[m] = {"elected_ms": summary([r["elected_ms"] for r in done]),
                  "committing_ms": summary([r["committing_ms"] for r in done]),
                  "first_ack_ms": summary([r["first_ack_ms"] for r in done]),
                  "failed": sum(1 for r in done if r["committing_ms"] is None),
                  "split_or_failed_elections": sum(1 for r in done if (r["epoch_gap"] or 0) > 1),
                  "reps": rs}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--modes", default="kill,term", help="comma list of kill (SIGKILL) and term (SIGTERM)")
    ap.add_argument("--poll-ms", type=float, default=5.0)
    ap.add_argument("--writer-interval-ms", type=int, default=5)
    ap.add_argument("--rep-timeout", type=float, default=15.0, help="seconds to wait for a committing leader")
    ap.add_argument("--dir", default=None, help="where the nodes' data goes (default: a temp dir under /tmp)")
    ap.add_argument("--keep", action="store_true", help="keep the data dir (logs) for inspection")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not set(modes) <= {"kill", "term"}:
        ap.error("--modes takes kill and/or term")
    base = tempfile.mkdtemp(prefix="raft-failover-", dir=args.dir)
    try:
        paths = write_configs(base)
        qc = NodeConfig.from_file(paths[0]).quorum
        parsed = {k: getattr(qc, k) for k in KAFKA_DEFAULTS}
        budget = 60 + args.reps * len(modes) * 2 * (args.rep_timeout + 20)
        load_before = os.getloadavg()
        res = asyncio.run(run(paths, modes, args.reps, args.poll_ms / 1000, args.writer_interval_ms, budget,
                              args.rep_timeout, log=lambda s: print(s, file=sys.stderr, flush=True)))
        out = {"setup": {"voters": 3, "transport": "TCP loopback", "fsync": True, "processes": 3,
                         "quorum_config": parsed, "matches_kafka_4_defaults": parsed == KAFKA_DEFAULTS,
                         "poll_ms": args.poll_ms, "writer_interval_ms": args.writer_interval_ms,
                         "cpus": os.cpu_count(), "python": sys.version.split()[0],
                         "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
                         "data_dir": base if args.keep else None,
                         "code": code_version()},
               "targets_ms": {"kill": 2500, "term": 200},
               "result": res}
        for m, r in res.items():
            c = r["committing_ms"]
            r["target_met"] = bool(c and r["failed"] == 0 and c["max"] <= out["targets_ms"][m])
            r["target_met_by_median"] = bool(c and c["median"] <= out["targets_ms"][m])
        text = json.dumps(out, indent=2)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
