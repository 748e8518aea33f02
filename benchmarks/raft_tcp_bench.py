"""Committed-throughput and commit-latency of a KRaft quorum over loopback TCP (the
raft-only load server, like Kafka's TestRaftServer).

    python benchmarks/raft_tcp_bench.py [--voters 3] [--seconds 10] [--record-bytes 100]
                                        [--records-per-append 100] [--max-inflight 64]
                                        [--rate RECORDS_PER_S] [--linger-ms 5] [--json out.json]

Setup: node 1 runs in this process (a KraftNode on this event loop) and is
the one that offers the load; nodes 2..N are ``python -m kraft_node.server.start``
subprocesses.  Node 1 gets a short election timeout and the others a long
one, so node 1 wins the first election.  Every voter fsyncs (fdatasync)
before it reports/counts an offset, as the core requires.

Offered load: appends of ``--records-per-append`` records of ``--record-bytes``
bytes each, at most ``--max-inflight`` appends outstanding (BufferFullError
from the accumulator is backpressure).  An append's latency is the time from
``append()`` to its future resolving (the records committed: a majority has
them durably and the leader's listener saw them).

Also measured in the same run, in the same file system: the disk's
write+fdatasync rate (4 KiB and 64 KiB appends), which bounds how often
each voter can make a batch durable.

``--voter-changes N`` measures KIP-853 reconfiguration instead: node 1 is
formatted ``--standalone`` (in this process), nodes 2 and 3 ``--no-initial-controllers``
(subprocesses, observers via ``controller.quorum.bootstrap.servers``); node 2 is
added once, then node 3 is added and removed N times.  Each figure is the time
from sending AddRaftVoter/RemoveRaftVoter (over TCP, like ``kraft-metadata-quorum``)
to its answer, which the leader sends once the VotersRecord is committed.

Prints one JSON document (and writes it to ``--json`` if given).
"""
from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kraft_node import event_loop  # noqa: E402
from kraft_node.raft.errors import BufferFullError, NotLeaderError  # noqa: E402
from kraft_node.server.config import NodeConfig  # noqa: E402
from kraft_node.server.node import KraftNode  # noqa: E402
from kraft_node.server.start import freeze_startup_heap  # noqa: E402
from kraft_node.server.tools.storage import format_storage  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/ (also when loaded by path)
from _support import free_ports  # noqa: E402

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def write_configs(base, linger_ms, n=3):
    ports = free_ports(n)
    voters = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(n))
    paths = []
    for i in range(n):
        nid = i + 1
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d)
        props = {
            "process.roles": "controller", "node.id": nid, "controller.quorum.voters": voters,
            "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}", "controller.listener.names": "CONTROLLER",
            "log.dirs": os.path.join(d, "data"),
            "controller.quorum.election.timeout.ms": 300 if nid == 1 else 5000,
            "controller.quorum.fetch.timeout.ms": 10000,
            "controller.quorum.append.linger.ms": linger_ms,
        }
        p = os.path.join(d, "server.properties")
        with open(p, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        format_storage(NodeConfig.from_file(p), CLUSTER_ID, out=io.StringIO())
        paths.append(p)
    return paths


def disk_fsync_rate(directory, block, seconds=1.0):
    path = os.path.join(directory, f"fsync-probe-{block}")
    buf = os.urandom(block)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    n = 0
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < seconds:
            os.write(fd, buf)
            os.fdatasync(fd)
            n += 1
    finally:
        os.close(fd)
        os.unlink(path)
    dt = time.perf_counter() - t0
    return {"block_bytes": block, "fsyncs_per_s": round(n / dt, 1), "mb_per_s": round(n * block / dt / 1e6, 2)}


def log_bytes(dirs) -> int:
    """Bytes in the segment files (``*.log``) under ``dirs``: what the voters wrote."""
    total = 0
    for d in dirs:
        for root, _, files in os.walk(d):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files if f.endswith(".log"))
    return total


def cpu_seconds(pids) -> float:
    """user+system CPU seconds used so far by ``pids`` (Linux /proc), for CPU cost per record:
    unlike records/s it hardly depends on what else the shared machine runs."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total / tick


def run_queue_wait_seconds(pid) -> float:
    """Seconds the threads of ``pid`` spent runnable but waiting for a CPU so far (Linux
    ``/proc/PID/task/*/schedstat``, second field; 0 where unavailable).  Why: three voters
    and the load generator share 2 cores, and at light load the time a woken process waits
    for a core is a visible part of commit latency (session 6)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def voter_env() -> dict:
    """Environment of the voter processes: this repository on the path, after
    ``KRAFT_BENCH_PYTHONPATH`` when set (how ``benchmarks/trace`` gets into them)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (os.environ.get("KRAFT_BENCH_PYTHONPATH"), REPO) if p))


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


async def offered_load(driver, seconds, record_bytes, per_append, max_inflight, rate=None, pids=(),
                       data_dirs=()):
    """Offer appends for ``seconds`` after a 1 s warm-up.

    Closed loop (``rate`` None): keep ``max_inflight`` appends outstanding --
    the saturation throughput.  Open loop (``rate`` records/s, like Kafka's
    TestRaftServer ``--throughput``): one append of ``per_append`` records every
    ``per_append / rate`` seconds whatever the commits do, so the latency
    figures are those of a quorum *at that load* (not of a queue the generator
    itself keeps full).  ``max_inflight`` still caps the outstanding appends in
    open loop; appends the cap or backpressure refused are counted as dropped.
    """
    rec = b"x" * record_bytes
    batch = [rec] * per_append
    epoch = driver.leader_and_epoch.epoch  # node 1 leads this epoch for the whole run
    lat = []
    committed = 0
    failed = 0
    dropped = 0
    inflight = set()

    slot_free = asyncio.Event()

    def done(t0, fut):
        nonlocal committed, failed
        inflight.discard(fut)
        slot_free.set()
        if fut.cancelled() or fut.exception() is not None:
            failed += 1
            return
        committed += per_append
        lat.append((time.perf_counter() - t0) * 1000)

    def issue() -> bool:
        t0 = time.perf_counter()
        try:
            fut = driver.append(batch, epoch)
        except BufferFullError:
            return False
        except NotLeaderError:
            raise SystemExit("node 1 lost leadership during the run") from None
        inflight.add(fut)
        fut.add_done_callback(lambda f, t0=t0: done(t0, f))
        return True

    warm_end = time.perf_counter() + 1.0
    end = warm_end + seconds
    measured_start_committed = None
    t_start = None
    interval = per_append / rate if rate else None
    next_at = time.perf_counter()
    while True:
        now = time.perf_counter()
        if now >= end:
            break
        if measured_start_committed is None and now >= warm_end:
            measured_start_committed = committed
            lat.clear()
            dropped = 0
            t_start = now
            cpu_start = cpu_seconds(pids)
            cpu_each_start = [cpu_seconds([p]) for p in pids]
            wait_start = [run_queue_wait_seconds(p) for p in pids]
            bytes_start = log_bytes(data_dirs)
        if interval is not None:
            while next_at <= now:
                next_at += interval
                if len(inflight) >= max_inflight or not issue():
                    dropped += per_append
            # Never less than 1 ms: uvloop rounds a shorter timer down to 0, and a
            # generator that spins until the next send time took up to a seventh of
            # a core from the voters sharing the 2 cores (session 5).  An append is
            # then issued up to ~1 ms late (the rate is kept: the loop above catches
            # up); its latency is measured from when it is issued.
            await asyncio.sleep(max(0.001, next_at - time.perf_counter()))
            continue
        # Closed loop: one append per loop iteration while the window has room (so the
        # node's I/O interleaves with the offered load), else sleep until a commit frees a
        # slot -- no polling: a poller burns a core that the voters share with it.
        if len(inflight) < max_inflight and issue():
            await asyncio.sleep(0)
            continue
        slot_free.clear()
        try:
            await asyncio.wait_for(slot_free.wait(), 0.05)  # (0.05 s: also retries after backpressure)
        except asyncio.TimeoutError:
            pass
    elapsed = time.perf_counter() - t_start
    total = committed - measured_start_committed
    cpu = cpu_seconds(pids) - cpu_start
    cpu_each = [round(cpu_seconds([p]) - c, 2) for p, c in zip(pids, cpu_each_start)]
    wait_each = [run_queue_wait_seconds(p) - w for p, w in zip(pids, wait_start)]
    written = log_bytes(data_dirs) - bytes_start
    if inflight:
        await asyncio.wait(list(inflight), timeout=10)
    return {"committed_records": total, "seconds": round(elapsed, 3),
            "offered_records_per_s": rate, "dropped_records": dropped if rate else None,
            "committed_records_per_s": round(total / elapsed, 1),
            "cpu_seconds_all_voters": round(cpu, 2),
            "cpu_seconds_by_node": cpu_each,  # node 1 (the leader, with the load generator), 2, 3, ...
            "log_bytes_per_s_all_voters": round(written / elapsed) if data_dirs else None,
            "cpu_us_per_committed_record": round(cpu * 1e6 / total, 3) if total else None,
            # per append (not per record): how long each node waited for a core, on average
            "run_queue_wait_us_per_append_by_node": [round(w * 1e6 / len(lat), 1) if lat else None
                                                     for w in wait_each],
            "appends_measured": len(lat),
            "commit_latency_ms": {"p50": round(pct(lat, 0.50), 2) if lat else None,
                                  "p90": round(pct(lat, 0.90), 2) if lat else None,
                                  "p99": round(pct(lat, 0.99), 2) if lat else None,
                                  "max": round(max(lat), 2) if lat else None,
                                  "mean": round(statistics.fmean(lat), 2) if lat else None},
            "failed_appends": failed}


def write_dynamic_configs(base, linger_ms):
    ports = free_ports(3)
    paths = []
    for i in range(3):
        nid = i + 1
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d)
        props = {
            "process.roles": "controller", "node.id": nid,
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{ports[0]}",
            "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}", "controller.listener.names": "CONTROLLER",
            "log.dirs": os.path.join(d, "data"),
            "controller.quorum.election.timeout.ms": 300 if nid == 1 else 5000,
            "controller.quorum.fetch.timeout.ms": 10000,
            "controller.quorum.append.linger.ms": linger_ms,
        }
        p = os.path.join(d, "server.properties")
        with open(p, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        format_storage(NodeConfig.from_file(p), CLUSTER_ID, standalone=(nid == 1),
                       no_initial_controllers=(nid != 1), out=io.StringIO())
        paths.append(p)
    return paths


#: The voters run Raft only: ``--demo-writer`` with a writer that never fires in a run.
RAFT_ONLY = ("--demo-writer", "--writer-interval-ms", "3600000")


async def voter_changes(args, base):
    from kraft_node.network import KafkaConnection
    from kraft_node.protocol.generated.add_raft_voter import AddRaftVoterRequest
    from kraft_node.protocol.generated.remove_raft_voter import RemoveRaftVoterRequest
    from kraft_node.server.tools.metadata_quorum import controller_to_add
    paths = write_dynamic_configs(base, args.linger_ms)
    env = voter_env()
    # Raft only on every voter (--demo-writer without writes; controller=False in process): the
    # benchmark's records are opaque bytes, which a controller would refuse as metadata records
    procs = [subprocess.Popen([sys.executable, "-m", "kraft_node.server.start", p, "--log-level", "WARNING",
                               *RAFT_ONLY], stdout=subprocess.DEVNULL, stderr=open(p + ".stderr", "w"), env=env,
                              cwd=REPO)
             for p in paths[1:]]
    node = KraftNode.from_config(NodeConfig.from_file(paths[0]), controller=False)
    driver = node.driver
    add_ms, remove_ms = [], []
    try:
        await node.start()
        freeze_startup_heap()  # as kraft-server-start does
        deadline = time.monotonic() + 20
        while not driver.is_leader or len(driver.core.state.observers) < 2:
            if time.monotonic() > deadline:
                raise SystemExit("node 1 did not lead with nodes 2 and 3 fetching within 20 s")
            await asyncio.sleep(0.01)
        conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)

        async def change(body, version, into):
            t0 = time.perf_counter()
            resp = await conn.request(body, version, timeout=30)
            if resp.error_code:
                raise SystemExit(f"{type(body).__name__} failed with error {resp.error_code}: {resp.error_message}")
            if into is not None:
                into.append((time.perf_counter() - t0) * 1000)

        def add(path):
            nid, did, eps = controller_to_add(path)
            R = AddRaftVoterRequest
            return R(cluster_id=None, timeout_ms=30000, voter_id=nid, voter_directory_id=did,
                     listeners=[R.Listener(name=n, host=h, port=p) for n, h, p in eps])

        try:
            await change(add(paths[1]), 1, None)
            for _ in range(args.voter_changes):
                await change(add(paths[2]), 1, add_ms)
                nid, did, _ = controller_to_add(paths[2])
                await change(RemoveRaftVoterRequest(cluster_id=None, voter_id=nid, voter_directory_id=did), 0,
                             remove_ms)
        finally:
            await conn.close()
    finally:
        await node.shutdown(3)
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

    def summary(xs):
        return {"n": len(xs), "median": round(statistics.median(xs), 2), "p90": round(pct(xs, 0.9), 2),
                "max": round(max(xs), 2)}
    return {"add_voter_ms": summary(add_ms), "remove_voter_ms": summary(remove_ms)}


async def all_voters_replicating(driver, deadline) -> None:
    """Wait until every voter has fetched past a fresh record.  Why: a voter that was not
    listening yet when node 1 won its election learns of it only when the leader resends
    BeginQuorumEpoch (fetch timeout / 2 = 5 s here, as Kafka does) or when its own
    election timeout fires; measuring before that measures a two-voter quorum."""
    off = await driver.append([b"warm-up"], driver.leader_and_epoch.epoch)
    while True:
        st = driver.core.state
        ends = [rs.end_offset for vid, rs in st.voters.items() if vid != driver.node_id]
        if all(e is not None and e > off for e in ends):
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"not every voter replicates (end offsets {ends}, need > {off})")
        await asyncio.sleep(0.01)


async def main_async(args, base):
    paths = write_configs(base, args.linger_ms, args.voters)
    env = voter_env()
    procs = [subprocess.Popen([sys.executable, "-m", "kraft_node.server.start", p, "--log-level", "WARNING",
                               "--follower-flush", args.follower_flush, *RAFT_ONLY],
                              stdout=subprocess.DEVNULL, stderr=open(p + ".stderr", "w"), env=env, cwd=REPO)
             for p in paths[1:]]
    node = KraftNode.from_config(NodeConfig.from_file(paths[0]), leader_flush=args.leader_flush,
                                 follower_flush=args.follower_flush, controller=False)
    driver = node.driver
    try:
        await node.start()
        freeze_startup_heap()  # as kraft-server-start does
        deadline = time.monotonic() + 20
        while not driver.is_leader:
            if time.monotonic() > deadline:
                raise SystemExit("node 1 did not become leader")
            await asyncio.sleep(0.01)
        await all_voters_replicating(driver, deadline)
        result = await offered_load(driver, args.seconds, args.record_bytes, args.records_per_append,
                                    args.max_inflight, args.rate,
                                    pids=[os.getpid()] + [p.pid for p in procs],
                                    data_dirs=[os.path.join(os.path.dirname(p), "data") for p in paths])
        result["leader_flush_used"] = driver.leader_flush  # what "auto" resolved to on this machine
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--voters", type=int, default=3, help="quorum size (node 1 in this process leads)")
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--records-per-append", type=int, default=100)
    ap.add_argument("--max-inflight", type=int, default=64)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--leader-flush", choices=("auto", "inline", "thread", "aio"), default="auto",
                    help="where node 1 fsyncs as leader (RaftDriver leader_flush; A/B)")
    ap.add_argument("--follower-flush", choices=("inline", "aio"), default="inline",
                    help="where nodes 2..N fsync as followers (kraft-server-start --follower-flush; A/B)")
    ap.add_argument("--rate", type=float, default=None,
                    help="open loop: offer this many records/s (default: closed loop, --max-inflight appends)")
    ap.add_argument("--dir", default=None, help="where the nodes' data goes (default: a temp dir)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--voter-changes", type=int, default=0,
                    help="measure N add+remove cycles of a voter (KIP-853) instead of the append load")
    args = ap.parse_args()
    base = tempfile.mkdtemp(prefix="raft-bench-", dir=args.dir)
    try:
        disk = [disk_fsync_rate(base, 4096), disk_fsync_rate(base, 65536),
                disk_fsync_rate(base, 1 << 20, seconds=0.5)]
        if args.voter_changes:
            res = event_loop.run(voter_changes(args, base))
            out = {"setup": {"quorum": "standalone node 1 + 2 observers, node 3 added/removed repeatedly",
                             "transport": "TCP loopback", "fsync": True, "linger_ms": args.linger_ms,
                             "cpus": os.cpu_count(), "python": sys.version.split()[0],
                             "loadavg": os.getloadavg()},
                   "result": res, "disk_write_fdatasync": disk}
            text = json.dumps(out, indent=2)
            print(text)
            if args.json:
                with open(args.json, "w") as f:
                    f.write(text + "\n")
            return
        res = event_loop.run(main_async(args, base))
        out = {"setup": {"voters": args.voters, "transport": "TCP loopback", "fsync": True,
                         "event_loop": event_loop.EVENT_LOOP,
                         "record_bytes": args.record_bytes, "records_per_append": args.records_per_append,
                         "max_inflight_appends": args.max_inflight, "linger_ms": args.linger_ms,
                         "offered_records_per_s": args.rate, "loadavg": os.getloadavg(),
                         "leader_flush": args.leader_flush, "follower_flush": args.follower_flush,
                         "cpus": os.cpu_count(), "python": sys.version.split()[0]},
               "result": res, "disk_write_fdatasync": disk}
        if res.get("log_bytes_per_s_all_voters"):
            # what the quorum wrote, against the best write+fdatasync bandwidth of the probe
            best = max(d["mb_per_s"] for d in disk)
            res["log_mb_per_s_vs_disk_probe"] = round(res["log_bytes_per_s_all_voters"] / 1e6 / best, 3)
        text = json.dumps(out, indent=2)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
