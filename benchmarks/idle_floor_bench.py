"""What this machine charges any replicated, fsync'd commit after it has been idle: the
floor under the commit latency of a quorum at light load.

    python benchmarks/idle_floor_bench.py [--dir DIR] [--gaps-ms 0.2,1,3,10,30,100] [--samples 40]
                                          [--json out.json]

Why: a KRaft commit at linger 0 needs, at the least, the leader's message to reach a
follower, the follower's write + fdatasync, and the follower's answer to reach the leader.
At 1,000 commits/s all of that runs warm; at 10 commits/s every commit starts after ~100 ms
of idle, and on a VM an idle vCPU is halted (waking it is the host's business) and an idle
disk path may be slower to answer its first flush.  Neither is the quorum's code, so this
script measures them with nothing of kraft in the way, for each idle gap:

* ``fdatasync_us``: ``os.write`` of 100 bytes to a file in ``--dir`` (the file system the
  metadata log lives in) then ``os.fdatasync``, after sleeping the gap; the fdatasync's time.
* ``round_trip_us``: two processes joined by a loopback TCP connection (TCP_NODELAY); the
  parent sleeps the gap, sends 1 byte, the child (blocked in ``recv``) echoes it; the time
  until the parent has it back.  Both processes sleep between samples, as a quorum's do.
* ``floor_us`` = round trip + fdatasync p50: a lower bound on a lone commit's p50 at that
  gap for any implementation that fsyncs before it acknowledges (processing time is zero in
  it, the leader's own fsync runs in parallel and is left out).

Medians and p90 per gap; the gaps run from the shortest to the longest, twice (the second
pass is the one reported: the first warms the file and the processes).
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import socket
import statistics
import tempfile
import time

from _support import code_version, emit_json


def _echo(port: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while True:
        b = s.recv(1)
        if not b or b == b"q":
            return
        s.sendall(b)


def _pct(xs, q):
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(len(xs) * q))], 1)


def fsync_after_gap(directory: str, gap_s: float, samples: int) -> list[float]:
    fd, path = tempfile.mkstemp(dir=directory, prefix=".idle-floor-")
    try:
        out = []
        for _ in range(samples):
            time.sleep(gap_s)
            os.write(fd, b"x" * 100)
            t0 = time.perf_counter()
            os.fdatasync(fd)
            out.append((time.perf_counter() - t0) * 1e6)
        return out
    finally:
        os.close(fd)
        os.unlink(path)


def round_trip_after_gap(conn: socket.socket, gap_s: float, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        time.sleep(gap_s)
        t0 = time.perf_counter()
        conn.sendall(b"p")
        if conn.recv(1) != b"p":
            raise RuntimeError("echo process answered something else")
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=os.getcwd(), help="directory on the metadata log's file system (default: cwd)")
    ap.add_argument("--gaps-ms", default="0.2,1,3,10,30,100")
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--json")
    args = ap.parse_args()
    gaps = [float(g) for g in args.gaps_ms.split(",")]

    lsock = socket.create_server(("127.0.0.1", 0))
    child = multiprocessing.get_context("spawn").Process(target=_echo, args=(lsock.getsockname()[1],), daemon=True)
    child.start()
    conn, _ = lsock.accept()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rows = []
    try:
        for pass_no in (0, 1):
            for gap in gaps:
                fs = fsync_after_gap(args.dir, gap / 1000, args.samples)
                rt = round_trip_after_gap(conn, gap / 1000, args.samples)
                if pass_no == 1:
                    rows.append({"gap_ms": gap,
                                 "fdatasync_us": {"p50": _pct(fs, 0.5), "p90": _pct(fs, 0.9)},
                                 "round_trip_us": {"p50": _pct(rt, 0.5), "p90": _pct(rt, 0.9)},
                                 "floor_us": round(statistics.median(fs) + statistics.median(rt), 1)})
    finally:
        conn.sendall(b"q")
        conn.close()
        lsock.close()
        child.join(5)
    emit_json({"benchmark": "idle_floor", "code": code_version(), "dir": os.path.abspath(args.dir),
               "samples_per_gap": args.samples, "result": rows}, args.json)


if __name__ == "__main__":
    main()
