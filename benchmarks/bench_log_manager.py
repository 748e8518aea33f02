"""A broker's partition logs: open all (start) and close all (shutdown), and descriptors per log.

    python benchmarks/bench_log_manager.py [--logs 2000] [--rounds 3] [--dir D] [--json F]

Why: issue 24's broker start (1M partitions in the metadata, ~3,000 logs on the restarted
broker) and controlled shutdown (10k partition logs) both pay these two phases, and a descriptor
per index made 10k logs impossible under a 20k RLIMIT_NOFILE.  Creates ``--logs`` partition logs
(one batch each) with a ``LogManager`` in ``--dir`` (default: a temporary directory on the
working disk, not tmpfs: the fsyncs are the cost), shuts it down, then ``--rounds`` times: a new
LogManager's ``startup()`` (the logs opened after a clean shutdown, 16 threads), the descriptors
held, ``shutdown()`` (flush, trim, checkpoints, markers).  Prints JSON: medians and every round.
Run it from two trees (``PYTHONPATH=<tree>``) for an A/B: it uses only APIs both have.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--logs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    import resource

    from kraft_node.broker.log_manager import LogManager
    from kraft_node.metadata.image.topics import TopicPartition
    from kraft_storage.record import build_batch

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    root = tempfile.mkdtemp(prefix="bench-log-manager-", dir=args.dir or os.getcwd())
    dirs = [os.path.join(root, "logs0")]
    try:
        lm = LogManager(dirs)
        lm.startup()
        batch = build_batch([(None, b"x" * 100)])
        for p in range(args.logs):
            kl = lm.get_or_create_log(TopicPartition(f"t{p // 100}", p % 100), uuid.uuid4().bytes, {})
            kl.append_as_leader(batch, leader_epoch=1)
        asyncio.run(lm.shutdown())
        del lm
        rounds = []
        for _ in range(args.rounds):
            base = _fds()
            t0 = time.perf_counter()
            lm = LogManager(dirs)
            lm.startup()
            opened = time.perf_counter() - t0
            held = _fds() - base
            assert len(lm.logs) == args.logs, len(lm.logs)
            t0 = time.perf_counter()
            asyncio.run(lm.shutdown())
            closed = time.perf_counter() - t0
            del lm
            rounds.append({"start_s": round(opened, 3), "shutdown_s": round(closed, 3),
                           "descriptors_per_log": round(held / args.logs, 2)})
            print(rounds[-1], file=sys.stderr)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out = {"logs": args.logs, "loadavg": os.getloadavg(),
           "median_start_s": statistics.median(r["start_s"] for r in rounds),
           "median_shutdown_s": statistics.median(r["shutdown_s"] for r in rounds),
           "descriptors_per_log": rounds[-1]["descriptors_per_log"], "rounds": rounds}
    print(json.dumps(out, indent=2))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
