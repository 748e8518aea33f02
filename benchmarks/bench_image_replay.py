"""Issue 23's headline benchmark: a generated 1M- and 10M-record metadata log replayed into a MetadataImage.

Usage::

    python benchmarks/bench_image_replay.py --sizes 1e6,10e6 --runs 3 --json out.json
    python benchmarks/bench_image_replay.py --sizes 1e6 --modes native,pure,record --runs 1

Modes (each run in a fresh subprocess, so the kernels' choice and the heap start clean):

* ``native``: :func:`kraft_node.metadata.image.log_fold.replay_log` with the native kernels;
* ``pure``: the same with ``KRAFT_NO_EXTENSIONS=1`` (every kernel's pure-Python twin);
* ``record``: the baseline, record at a time: every value decoded into its object
  (``decode_metadata_record``) and ``MetadataDelta.replay``-ed, then ``apply`` (only at the
  sizes named by ``--record-sizes``, 1M by default: it runs at about 0.3M records/s).

A run times the whole replay, from the segment files (mmap'd, in the page cache after the first
run) to the final image: batch scan, columnar decode, the fold, ``apply``.  It reports records/s
(every record of the log, control records and NoOps included, as the target counts them) and,
for the fold modes, the split between the fold (read, decode, fold: ``fold_log``) and ``apply``.  The JSON holds each
run, the median per (size, mode), the machine's load and the commit.

The logs: ``kraft-gen-metadata-log --records N --seed 1 --out <temp dir>/gen<N>`` (``gen1m``,
``gen10m`` under the system temp dir), written when missing (``--log-dir`` names another).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kraft_storage.tools import gen_metadata_log as gen  # noqa: E402


def _default_dir(records: int) -> str:
    """``gen1m``, ``gen10m``... under the system temp dir (shared with benchmarks/spark/image_apply.py)."""
    name = f"gen{records // 1_000_000}m" if records % 1_000_000 == 0 else f"gen{records}"
    return os.path.join(tempfile.gettempdir(), name)


def ensure_log(records: int, log_dir: str | None, seed: int = 1) -> str:
    """The log of ``records`` records (written by the generator when its directory has no segment)."""
    path = log_dir or _default_dir(records)
    segments = Path(path) / "__cluster_metadata-0"
    if not (segments.is_dir() and any(segments.glob("*.log"))):
        gen.write_log(path, records, seed=seed)
    return path


# -- one run, in a child process ------------------------------------------------------------

def _run_fold(path: str) -> dict[str, Any]:
    from kraft_node.metadata.image import log_fold
    from kraft_storage import accel
    t0 = time.perf_counter()
    delta = log_fold.fold_log(path)
    t1 = time.perf_counter()
    image = delta.apply()
    t2 = time.perf_counter()
    return {"records": delta.records, "seconds": t2 - t0, "fold_s": t1 - t0, "apply_s": t2 - t1,
            "topics": len(image.topics.topics_by_id), "partitions": image.topics.num_partitions(),
            "brokers": len(image.cluster.brokers), "config_resources": len(image.configs.resource_data),
            "fallbacks": sorted(accel.FALLBACKS)}


def _run_record(path: str) -> dict[str, Any]:
    from kraft_node.metadata.image import log_fold
    from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
    from kraft_storage.messages.framing import decode_metadata_record
    t0 = time.perf_counter()
    delta = MetadataDelta(MetadataImage.EMPTY)
    records = 0
    for cols in log_fold.iter_chunks(path):
        control = cols.is_control().tolist()
        data = memoryview(cols.data).cast("B")
        for pos, n, ctl in zip(cols.value_pos.tolist(), cols.value_len.tolist(), control):
            records += 1
            if not ctl:
                delta.replay(decode_metadata_record(bytes(data[pos:pos + n]))[2])
    image = delta.apply(MetadataImage.EMPTY.provenance)
    t1 = time.perf_counter()
    return {"records": records, "seconds": t1 - t0, "topics": len(image.topics.topics_by_id),
            "partitions": image.topics.num_partitions()}


def child(mode: str, path: str) -> None:
    out = _run_record(path) if mode == "record" else _run_fold(path)
    print(json.dumps(out))


def run_once(mode: str, path: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if mode == "pure":
        env["KRAFT_NO_EXTENSIONS"] = "1"
    else:
        env.pop("KRAFT_NO_EXTENSIONS", None)
    proc = subprocess.run([sys.executable, __file__, "--child", mode, path], env=env, capture_output=True,
                          text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} run on {path} failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1e6,10e6", help="log sizes in records (comma separated, 1e6 accepted)")
    p.add_argument("--modes", default="native,pure,record")
    p.add_argument("--record-sizes", default="1e6", help="sizes at which the record-at-a-time baseline runs")
    p.add_argument("--pure-sizes", default="1e6", help="sizes at which the pure twins run")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--log-dir", default=None, help="the log to replay (one size only); default /tmp/kraft-replay-N")
    p.add_argument("--json", default=None, help="write the results here")
    p.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        child(*a.child)
        return 0

    def sizes(text: str) -> list[int]:
        return [int(float(s)) for s in text.split(",") if s.strip()]

    record_sizes, pure_sizes = set(sizes(a.record_sizes)), set(sizes(a.pure_sizes))
    results: dict[str, Any] = {"commit": _commit(), "cpus": os.cpu_count(), "runs": a.runs, "results": []}
    for size in sizes(a.sizes):
        path = ensure_log(size, a.log_dir)
        for mode in a.modes.split(","):
            if (mode == "record" and size not in record_sizes) or (mode == "pure" and size not in pure_sizes):
                continue
            runs = []
            for _ in range(a.runs):
                load = os.getloadavg()[0]
                r = run_once(mode, path)
                r["loadavg_before"] = load
                r["records_per_s"] = r["records"] / r["seconds"]
                runs.append(r)
                print(f"{size:>10} {mode:>6}: {r['records_per_s'] / 1e6:6.2f}M records/s ({r['seconds']:.2f} s"
                      + (f"; fold {r['fold_s']:.2f} s, apply {r['apply_s']:.2f} s" if "fold_s" in r else "")
                      + f", load {load:.1f})", flush=True)
            med = statistics.median(r["records_per_s"] for r in runs)
            results["results"].append({"size": size, "mode": mode, "median_records_per_s": med, "runs": runs})
            print(f"{size:>10} {mode:>6}: median {med / 1e6:.2f}M records/s", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
