"""Idle replication cost: CPU of each broker while its followers fetch 10,000 idle partitions.

Why: with sessionless fetches (before KIP-227 follower sessions, issue 24/25) each follower sends
every partition in every Fetch and the leader answers every one, twice per
``replica.fetch.wait.max.ms`` long poll, even when nothing is produced.  This measures what an
idle cluster costs: 1 controller and brokers 101-103 as processes (tests/support/broker_cluster),
``--partitions`` partitions with replicas [101, 102, 103] (101 leads all, 102 and 103 follow), no
produce; after ``--settle`` seconds the CPU time (user + system, /proc/<pid>/stat) of each
process is read over ``--window`` seconds.

Usage: ``python benchmarks/bench_follower_fetch_idle.py --partitions 10000`` (prints a markdown
table; ``--out FILE`` writes it).  Compare code versions by running it from a worktree of each
(``PYTHONPATH=<tree>``), alternating, and note the load average (printed).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from broker_bench import (  # noqa: E402
    BrokerCluster,
    check_fds,
    create_partitions,
    load,
    run,
    wait_everywhere,
    wait_logs_open,
)

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` (fields 14 and 15 of /proc/<pid>/stat, after the
    parenthesised command name, which may hold spaces)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--settle", type=float, default=10.0, help="seconds after the logs are open before measuring")
    p.add_argument("--window", type=float, default=20.0, help="seconds measured")
    p.add_argument("--out", default=None)
    p.add_argument("--py-spy", default=None, metavar="PREFIX",
                   help="also sample every node with py-spy over the window, to PREFIX.<node id>.txt")
    args = p.parse_args(argv)
    check_fds(args.partitions, "idle fetch")
    base = tempfile.mkdtemp(prefix="idle-fetch-bench-")
    c = BrokerCluster(base, controllers=1, brokers=3, extra={"broker.heartbeat.interval.ms": "200",
                                                             "broker.session.timeout.ms": "9000"})
    ctl_port = c.controllers[0].controller_port
    assert ctl_port is not None
    shown = " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"# Idle follower fetching: {args.partitions:,} partitions led by broker 101, RF 3", "",
             f"Command: `python benchmarks/bench_follower_fetch_idle.py {shown}`"
             f"  (PYTHONPATH={os.environ.get('PYTHONPATH', '')!r})", ""]
    try:
        c.start(timeout=120)
        run(create_partitions(ctl_port, "idle-", args.partitions, 1000, replicas=[101, 102, 103]), timeout=600)
        run(wait_everywhere(ctl_port, [b.port for b in c.brokers], "idle-sentinel", 300), timeout=400)
        for b in c.brokers:
            wait_logs_open(b, 300)
        time.sleep(args.settle)
        procs = {n.id: n.proc.pid for n in c.nodes.values() if n.proc is not None}
        load0 = load()
        samplers = []
        if args.py_spy:
            from controller_tcp_bench import start_py_spy
            samplers = [start_py_spy(pid, args.window, f"{args.py_spy}.{nid}.txt") for nid, pid in procs.items()]
        before = {nid: cpu_s(pid) for nid, pid in procs.items()}
        t0 = time.monotonic()
        time.sleep(args.window)
        after = {nid: cpu_s(pid) for nid, pid in procs.items()}
        wall = time.monotonic() - t0
        for sampler in samplers:
            sampler.wait(timeout=args.window + 30)
        lines += [f"Load (1/5/15 min) before the window: {load0}; after: {load()}.  Window {wall:.1f} s.", "",
                  "| node | CPU s in the window | CPU share |", "|---|---|---|"]
        for nid in sorted(procs):
            used = after[nid] - before[nid]
            lines.append(f"| {nid} | {used:.2f} | {100 * used / wall:.0f}% |")
    finally:
        c.close()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
