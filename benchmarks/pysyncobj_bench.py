"""PySyncObj's committed throughput and commit latency: 3 processes on loopback, journal on disk.

    python benchmarks/pysyncobj_bench.py [--seconds 10] [--record-bytes 100] [--max-inflight N]
                                         [--durability msync|journal|memory] [--json out.json]

The yardstick of issue 6 ("50x PySyncObj"), measured like
``benchmarks/raft_tcp_bench.py`` measures kraft: three replicas, each its own
process, on 127.0.0.1 (ports from the OS, data in a temp dir); the replica
that is leader once the cluster is up offers the load -- records of
``--record-bytes`` bytes, each one ``@replicated`` call (PySyncObj has no
batch API: a command is one log entry), with at most ``--max-inflight``
calls outstanding (default: PySyncObj's own ``commandsQueueSize``, 100,000,
i.e. as many as it accepts; a ``QUEUE_FULL`` answer is counted and retried).
A record is committed when its callback reports ``FAIL_REASON.SUCCESS``
(the leader applied it, which it does once a majority has it); its latency
is from the call to that callback.  One second of warm-up is not counted.

What PySyncObj offers for durability (read from pysyncobj 0.3.x's
``journal.py``/``syncobj.py``), and the three ``--durability`` settings:

* ``memory``: no ``journalFile``: the log is a Python list (PySyncObj's default).
* ``journal``: ``journalFile`` set: ``FileJournal`` writes every entry into an
  ``mmap`` of the file as it is appended (leader) or received (follower), and
  never calls ``msync``/``fsync`` while running (``flush()`` exists but
  nothing calls it; the mapping is flushed only on close).  The term/vote
  file is rewritten with ``flush()`` (no fsync) and renamed.  So an entry
  survives a crash of the process (the page cache has it) but not of the
  machine: it is acknowledged before it is durable.
* ``msync`` (default here: the closest to fsync-per-commit): ``journal`` plus
  two hooks in this script that make an entry durable before it counts,
  as kraft's voters do: a follower ``msync``s (``mmap.flush()``, i.e.
  ``msync(MS_SYNC)``, which forces the dirty pages to disk like ``fdatasync``)
  its journal before every successful append_entries answer, and the leader
  ``msync``s at the start of each tick in which entries were added, before
  it computes the commit index (so its own copy counts only once durable).
  Several entries received or appended together share one msync (group
  commit, as kraft's fsync per batch).  The term/vote file is left as
  PySyncObj writes it.

Other settings are PySyncObj's defaults (``appendEntriesUseBatch=True``: the
leader sends new entries every ``appendEntriesPeriod`` = 100 ms, up to 64 KiB
per message; log compaction every 5,000 entries, in memory).
``--no-batch`` sets ``appendEntriesUseBatch=False`` (send on every command).

Prints one JSON document (and writes it to ``--json`` if given).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/ (also when loaded by path)
from _support import emit_json, free_ports  # noqa: E402


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else None


# --------------------------------------------------------------------------- one replica (child process)
def replica_main(args) -> int:
    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

    ports = [int(p) for p in args.ports.split(",")]
    me = f"127.0.0.1:{ports[args.node]}"
    partners = [f"127.0.0.1:{p}" for i, p in enumerate(ports) if i != args.node]
    journal = None if args.durability == "memory" else os.path.join(args.dir, f"node{args.node}.journal")
    conf = SyncObjConf(journalFile=journal, appendEntriesUseBatch=not args.no_batch,
                       dynamicMembershipChange=False)

    class Bench(SyncObj):
        def __init__(self):
            super().__init__(me, partners, conf)
            self.applied = 0

        @replicated
        def append(self, data):
            self.applied += 1
            return self.applied

    class DurableBench(Bench):
        """``--durability msync``: nothing acknowledges or counts an entry before msync."""

        def __init__(self):
            self._dirty = False
            self.msyncs = 0
            super().__init__()
            log = self._SyncObj__raftLog
            add = log.add

            def add_and_mark(*a):
                add(*a)
                self._dirty = True
            log.add = add_and_mark

        def _sync(self):
            if self._dirty:
                self._dirty = False
                self._SyncObj__raftLog.flush()  # FileJournal -> mmap.flush() -> msync(MS_SYNC)
                self.msyncs += 1

        # follower: the append_entries answer (success) is sent only after the entries are durable
        def _SyncObj__sendNextNodeIdx(self, node, reset=False, nextNodeIdx=None, success=False):
            if success:
                self._sync()
            return SyncObj._SyncObj__sendNextNodeIdx(self, node, reset, nextNodeIdx, success)

        # leader: its own entries are durable before the tick computes the commit index
        def _onTick(self, timeToWait=0.0):
            if self._isLeader():
                self._sync()
            return super()._onTick(timeToWait)

    obj = DurableBench() if args.durability == "msync" else Bench()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (obj._getLeader() is None or not obj.isReady()):
        time.sleep(0.01)
    if obj._getLeader() is None:
        print(json.dumps({"node": args.node, "error": "no leader within 30 s"}), flush=True)
        obj.destroy()
        return 1
    time.sleep(0.5)  # let every replica see the same leader
    if not obj._isLeader():
        # followers serve until the parent stops them (or their lifetime ends)
        end = time.monotonic() + args.lifetime
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        while not stop.is_set() and time.monotonic() < end:
            stop.wait(0.1)
        print(json.dumps({"node": args.node, "role": "follower",
                          "msyncs": getattr(obj, "msyncs", None)}), flush=True)
        obj.destroy()
        return 0

    rec = b"x" * args.record_bytes
    sem = threading.BoundedSemaphore(args.max_inflight)
    done: list[tuple[float, float]] = []  # (commit time, latency ms), appended by the tick thread
    counts = {"failed": 0, "queue_full": 0}

    def cb(t0, res, err):
        sem.release()
        if err == FAIL_REASON.SUCCESS:
            t = time.perf_counter()
            done.append((t, (t - t0) * 1000))
        elif err == FAIL_REASON.QUEUE_FULL:
            counts["queue_full"] += 1
        else:
            counts["failed"] += 1

    warm_end = time.perf_counter() + 1.0
    end = warm_end + args.seconds
    sent = 0
    while time.perf_counter() < end:
        if not sem.acquire(timeout=0.05):
            continue
        t0 = time.perf_counter()
        obj.append(rec, callback=lambda res, err, t0=t0: cb(t0, res, err))
        sent += 1
    # what committed inside the window [warm_end, end], whenever it was offered
    window = [lat for t, lat in list(done) if warm_end <= t <= end]
    elapsed = end - warm_end
    out = {"node": args.node, "role": "leader", "offered": sent, "seconds": round(elapsed, 3),
           "committed_records": len(window),
           "committed_records_per_s": round(len(window) / elapsed, 1),
           "commit_latency_ms": {"p50": round(pct(window, 0.5), 2) if window else None,
                                 "p99": round(pct(window, 0.99), 2) if window else None,
                                 "mean": round(statistics.fmean(window), 2) if window else None},
           "failed": counts["failed"], "queue_full": counts["queue_full"],
           "msyncs": getattr(obj, "msyncs", None)}
    print(json.dumps(out), flush=True)
    obj.destroy()
    return 0


# --------------------------------------------------------------------------- the cluster (parent)
def run_cluster(seconds: float = 10, record_bytes: int = 100, max_inflight: int = 100000,
                durability: str = "msync", no_batch: bool = False, base_dir: str | None = None) -> dict:
    base = tempfile.mkdtemp(prefix="pysyncobj-bench-", dir=base_dir)
    ports = free_ports(3)
    lifetime = seconds + 60
    procs = []
    try:
        for i in range(3):
            cmd = [sys.executable, os.path.abspath(__file__), "--node", str(i), "--ports",
                   ",".join(map(str, ports)), "--dir", base, "--seconds", str(seconds),
                   "--record-bytes", str(record_bytes), "--max-inflight", str(max_inflight),
                   "--durability", durability, "--lifetime", str(lifetime)]
            if no_batch:
                cmd.append("--no-batch")
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(os.path.join(base, f"{i}.err"),
                                                                                      "w"), text=True))
        results = {}
        leader = None
        deadline = time.monotonic() + lifetime + 30
        # the leader finishes first; then stop the followers
        while time.monotonic() < deadline and leader is None:
            for i, p in enumerate(procs):
                if p.poll() is not None and i not in results:
                    line = (p.stdout.read() or "").strip().splitlines()
                    results[i] = json.loads(line[-1]) if line else {"node": i, "error": f"exit {p.returncode}"}
                    if results[i].get("role") == "leader" or "error" in results[i]:
                        leader = i
            time.sleep(0.05)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for i, p in enumerate(procs):
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            if i not in results:
                line = (p.stdout.read() or "").strip().splitlines()
                results[i] = json.loads(line[-1]) if line else {"node": i, "error": f"exit {p.returncode}"}
        if leader is None or "error" in results[leader]:
            errs = {i: open(os.path.join(base, f"{i}.err")).read()[-2000:] for i in range(3)}
            raise RuntimeError(f"PySyncObj run failed: {results} {errs}")
        return {"leader": results[leader], "followers": [r for i, r in results.items() if i != leader]}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        shutil.rmtree(base, ignore_errors=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--max-inflight", type=int, default=100000)
    ap.add_argument("--durability", choices=["msync", "journal", "memory"], default="msync")
    ap.add_argument("--no-batch", action="store_true", help="appendEntriesUseBatch=False")
    ap.add_argument("--dir", default=None, help="where the journals go (default: a temp dir under /tmp)")
    ap.add_argument("--json", default=None)
    # child-process arguments
    ap.add_argument("--node", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ports", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--lifetime", type=float, default=120, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.node is not None:
        sys.exit(replica_main(args))
    import pysyncobj
    res = run_cluster(args.seconds, args.record_bytes, args.max_inflight, args.durability, args.no_batch, args.dir)
    out = {"setup": {"system": "PySyncObj", "version": getattr(pysyncobj, "__version__", None) or _version(),
                     "replicas": 3, "transport": "TCP loopback", "durability": args.durability,
                     "append_entries_use_batch": not args.no_batch, "record_bytes": args.record_bytes,
                     "max_inflight_records": args.max_inflight, "cpus": os.cpu_count(),
                     "python": sys.version.split()[0], "loadavg": os.getloadavg()},
           "result": res}
    emit_json(out, args.json)


def _version():
    try:
        from importlib.metadata import version
        return version("pysyncobj")
    except Exception:
        return None


if __name__ == "__main__":
    main()
