"""kraft's Raft vs PySyncObj, back to back in one run, same machine, same file system.

    python benchmarks/raft_vs_pysyncobj.py [--seconds 10] [--pysyncobj-durability msync]
                                           [--raft-inflight 256,512] [--pysyncobj-inflight 100000,6400]
                                           [--json out.json]

Runs, one after the other (never at the same time, the machine has 2 cores):

1. the disk probe: write+fdatasync rate for 4 KiB and 64 KiB appends in the
   temp dir both systems use (``raft_tcp_bench.disk_fsync_rate``);
2. ``benchmarks/raft_tcp_bench.py --seconds S`` (3 kraft voters on loopback,
   fsync on, 100 B records, closed loop; see that file), once per
   ``--raft-inflight`` value (appends of 100 records kept in flight, by
   default 256, 512 and 1024); kraft's best throughput of these is the one
   compared -- the rule PySyncObj gets below.  (Why several: since session 5
   an append no longer polls the leader while its batch lingers, so a window
   of 256 appends is refilled within one linger and rides in one batch, lock
   step, leaving the pipeline idle part of the time; 512 and 1024 keep it
   full.  All are reported, in ``kraft_by_inflight``.)
3. ``benchmarks/pysyncobj_bench.py --seconds S`` (3 PySyncObj replicas on
   loopback, journal on disk, msync before an entry counts by default, 100 B
   records; see that file), once per ``--pysyncobj-inflight`` value: by
   default 100,000 records in flight (as many as PySyncObj's queue accepts)
   and 6,400 (what raft_tcp_bench keeps in flight: 64 appends x 100 records);
   PySyncObj's better throughput of the two is the one compared;
4. the disk probe again (the disk is shared with other jobs: if the two
   probes differ a lot, so did the conditions of the two runs).

Each benchmark runs as its own subprocess and writes its JSON; this script
prints one JSON document with both, ``kraft_advantage`` (committed records/s
kraft / PySyncObj; commit latency p50 and p99 PySyncObj / kraft: > 1 means
kraft is better), and the load average before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/ (also when loaded by path)
from _support import code_version  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def disk_probe(directory: str) -> list[dict]:
    from raft_tcp_bench import disk_fsync_rate
    return [disk_fsync_rate(directory, 4096), disk_fsync_rate(directory, 65536)]


def run_json(cmd: list[str], out_path: str, timeout: float) -> dict:
    t0 = time.monotonic()
    r = subprocess.run(cmd + ["--json", out_path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       timeout=timeout, cwd=os.path.dirname(HERE))
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-3000:]}")
    with open(out_path) as f:
        doc = json.load(f)
    doc["wall_seconds"] = round(time.monotonic() - t0, 1)
    return doc


def ratio(a, b):
    return round(a / b, 2) if a is not None and b else None


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--record-bytes", type=int, default=100)
    ap.add_argument("--pysyncobj-durability", choices=["msync", "journal", "memory"], default="msync")
    ap.add_argument("--pysyncobj-inflight", default="100000,6400",
                    help="comma list: one PySyncObj run per value of records in flight")
    ap.add_argument("--raft-inflight", default="256,512,1024",
                    help="comma list: one kraft run per value of appends in flight (--max-inflight)")
    ap.add_argument("--raft-args", default="", help="extra arguments for raft_tcp_bench.py, e.g. '--max-inflight 16'")
    ap.add_argument("--dir", default=None, help="where the data goes (default: a temp dir under /tmp)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    base = tempfile.mkdtemp(prefix="raft-vs-pysyncobj-", dir=args.dir)
    try:
        load_before = os.getloadavg()
        disk_before = disk_probe(base)
        budget = args.seconds + 120
        kruns = []
        for n in [int(x) for x in args.raft_inflight.split(",") if x.strip()]:
            kruns.append(run_json([sys.executable, os.path.join(HERE, "raft_tcp_bench.py"), "--seconds",
                                   str(args.seconds), "--record-bytes", str(args.record_bytes), "--dir", base,
                                   "--max-inflight", str(n)] + args.raft_args.split(),
                                  os.path.join(base, f"raft-{n}.json"), budget))
        raft = max(kruns, key=lambda r: r["result"]["committed_records_per_s"])
        runs = []
        for n in [int(x) for x in args.pysyncobj_inflight.split(",") if x.strip()]:
            runs.append(run_json([sys.executable, os.path.join(HERE, "pysyncobj_bench.py"), "--seconds",
                                  str(args.seconds), "--record-bytes", str(args.record_bytes), "--durability",
                                  args.pysyncobj_durability, "--max-inflight", str(n), "--dir", base],
                                 os.path.join(base, f"pysyncobj-{n}.json"), budget))
        disk_after = disk_probe(base)
        k = raft["result"]
        pso = max(runs, key=lambda r: r["result"]["leader"]["committed_records_per_s"])
        p = pso["result"]["leader"]
        out = {
            "setup": {"seconds": args.seconds, "record_bytes": args.record_bytes, "cpus": os.cpu_count(),
                      "python": sys.version.split()[0], "loadavg_before": load_before,
                      "loadavg_after": os.getloadavg(),
                      "code": code_version()},
            "disk_write_fdatasync": {"before": disk_before, "after": disk_after},
            "kraft": {"committed_records_per_s": k["committed_records_per_s"],
                      "commit_latency_ms": k["commit_latency_ms"], "failed_appends": k.get("failed_appends"),
                      "setup": raft["setup"]},
            "kraft_by_inflight": {r["setup"]["max_inflight_appends"]: {
                "committed_records_per_s": r["result"]["committed_records_per_s"],
                "commit_latency_ms": r["result"]["commit_latency_ms"]} for r in kruns},
            "pysyncobj": {"committed_records_per_s": p["committed_records_per_s"],
                          "commit_latency_ms": p["commit_latency_ms"], "failed": p["failed"],
                          "queue_full": p["queue_full"], "setup": pso["setup"]},
            "pysyncobj_by_inflight": {r["setup"]["max_inflight_records"]: {
                "committed_records_per_s": r["result"]["leader"]["committed_records_per_s"],
                "commit_latency_ms": r["result"]["leader"]["commit_latency_ms"]} for r in runs},
            # > 1 means kraft is better: throughput kraft/PySyncObj, latency PySyncObj/kraft
            "kraft_advantage": {
                "committed_records_per_s": ratio(k["committed_records_per_s"], p["committed_records_per_s"]),
                "commit_latency_p50": ratio(p["commit_latency_ms"]["p50"], k["commit_latency_ms"]["p50"]),
                "commit_latency_p99": ratio(p["commit_latency_ms"]["p99"], k["commit_latency_ms"]["p99"]),
            },
            "raw": {"kraft": kruns, "pysyncobj": runs},
        }
        text = json.dumps(out, indent=2)
        print(text)
        if args.json:
            with open(args.json, "w") as f:
                f.write(text + "\n")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
