"""Image-apply benchmark: generated metadata logs replayed into a MetadataImage, in one process and on Spark.

Usage (from the repository root)::

    python benchmarks/spark/image_apply.py --sizes 1e6,10e6 --modes native,pure,spark1,spark2 --repeats 3

Why: issue 23's headline figure is how fast a multi-million-record metadata log becomes an
image.  The replay benchmark (``replay_report.py``) measures decoding; this one measures the
whole replay, segment files to final image, four ways:

* ``native``: one process, :func:`kraft_node.metadata.image.log_fold.replay_log` (fold every
  chunk of the log, then apply) with the native kernels;
* ``pure``: the same with ``KRAFT_NO_EXTENSIONS=1`` (every kernel's pure-Python twin); it runs
  about 20x slower, so by default only at the sizes of ``--pure-sizes`` (1M);
* ``spark1`` / ``spark2``: :func:`kraft_node.metadata.image.spark_apply.spark_fold` on a
  ``local[1]`` / ``local[2]`` master: one task per byte range of the segments folds a partial
  delta, the driver composes them in offset order and applies.  Timed after one warm-up fold
  (JVM start and the Python workers' imports are not counted), from job submission to image.

Each (size, mode) runs in a fresh subprocess (its own heap, kernels and JVM); the median of
``--repeats`` runs is reported in records/s (every record of the log, control records and
NoOps included).  For Spark the split of the time is kept too: tasks (the fold, parallel),
compose (unpickle + compose, driver), apply (driver), and each task's own seconds.

Outputs under ``--out`` (``benchmarks/spark/results/image_apply/`` by default):
``image_apply_<sizes>.json`` (every run, the medians, the machine's load before and after),
``scaling.png`` (records/s against log size, per mode, with the 2M records/s target),
``stages_<size>.png`` (where the time goes per mode) and ``breakdown_by_type.png`` (each
record type's share of the records and of the bytes of the first size's log).

The logs are ``kraft-gen-metadata-log --records N --seed 1`` in ``gen1m``, ``gen10m`` under the system temp dir
(``--data-dir`` names another parent; written when missing, tens of seconds at 10M).
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
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

MODES = ("native", "pure", "spark1", "spark2")
MASTERS = {"spark1": "local[1]", "spark2": "local[2]"}
TARGET_RPS = 2_000_000


def _num(s: str) -> int:
    return int(float(s))


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


def log_path(data_dir: str, n: int) -> str:
    return os.path.join(data_dir, f"gen{_label(n).lower()}")


def ensure_log(data_dir: str, n: int, seed: int) -> str:
    """The generated log of ``n`` records (written when its directory holds no segment)."""
    from kraft_storage.tools.gen_metadata_log import write_log
    path = log_path(data_dir, n)
    seg = os.path.join(path, "__cluster_metadata-0")
    if not (os.path.isdir(seg) and any(f.endswith(".log") for f in os.listdir(seg))):
        write_log(path, n, seed=seed, progress=True)
    return path


# -- children -----------------------------------------------------------------------------------

def cmd_one(a: argparse.Namespace) -> None:
    """One process: fold + apply, ``a.repeats`` times."""
    from kraft_node.metadata.image import log_fold
    from kraft_storage import accel
    runs = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        delta = log_fold.fold_log(a.path)
        t1 = time.perf_counter()
        image = delta.apply()
        t2 = time.perf_counter()
        runs.append({"seconds": t2 - t0, "fold_s": t1 - t0, "apply_s": t2 - t1})
        records, partitions = delta.records, image.topics.num_partitions()
        del delta, image
    print(json.dumps({"impl": "pure" if (not accel.WANT_NATIVE or accel.FALLBACKS) else "native",
                      "fallbacks": sorted(accel.FALLBACKS), "records": records, "partitions": partitions,
                      "runs": runs}))


def cmd_spark(a: argparse.Namespace) -> None:
    """One Spark master: a warm-up fold, then ``a.repeats`` timed folds."""
    from pyspark.sql import SparkSession

    from kraft_node.metadata.image import spark_apply as sa
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    spark = (SparkSession.builder.master(a.master).appName("kraft-image-apply-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    cores = int(spark.sparkContext.defaultParallelism)
    plan = sa.plan_fold(a.path, splits=a.splits_per_core * cores)
    t = time.perf_counter()
    warm = sa.spark_fold(spark, plan)
    warm_s = time.perf_counter() - t
    runs = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        r = sa.spark_fold(spark, plan)
        wall = time.perf_counter() - t
        runs.append({"seconds": wall, "tasks_s": r.fold_seconds, "compose_s": r.compose_seconds,
                     "apply_s": r.apply_seconds + r.load_snapshot_seconds, "task_seconds": r.task_seconds,
                     "task_cpu_seconds": r.task_cpu_seconds,
                     "delta_bytes": r.delta_bytes})
        records, partitions = r.records, r.image.topics.num_partitions()
        del r
    spark.stop()
    print(json.dumps({"impl": "native", "master": a.master, "cores": cores, "splits": len(plan.splits),
                      "records": records, "partitions": partitions, "warmup_s": warm_s,
                      "warmup_records": warm.records, "runs": runs}))


# -- breakdown by record type -----------------------------------------------------------------------

def breakdown(path: str) -> list[dict[str, Any]]:
    """Per record type: records and value bytes, and their shares of the log."""
    import numpy as np

    from kraft_node.metadata.image import log_fold
    from kraft_storage.messages.framing import METADATA_RECORD_TYPES
    from kraft_storage.spark.reader import read_frame_columns
    counts = np.zeros(1 << 16, np.int64)
    nbytes = np.zeros(1 << 16, np.int64)
    for cols in log_fold.iter_chunks(path):
        fr = read_frame_columns(cols)
        key = np.where(cols.is_control(), -1, fr.api_key.astype(np.int64)) + 1  # 0: control records
        counts += np.bincount(key, minlength=len(counts))[: len(counts)]
        nbytes += np.bincount(key, weights=np.maximum(cols.value_len, 0), minlength=len(counts))[
            : len(counts)].astype(np.int64)
        del cols, fr
    total, total_b = int(counts.sum()), int(nbytes.sum())
    out = []
    for k in np.flatnonzero(counts).tolist():
        cls = METADATA_RECORD_TYPES.get(k - 1)
        name = "control records" if k == 0 else (cls.__name__ if cls is not None else f"apiKey {k - 1}")
        out.append({"type": name, "records": int(counts[k]), "share": int(counts[k]) / total,
                    "value_bytes": int(nbytes[k]), "byte_share": int(nbytes[k]) / max(total_b, 1)})
    out.sort(key=lambda r: -r["records"])
    return out


# -- orchestration --------------------------------------------------------------------------

def _child(args: list[str], env_extra: dict[str, str] | None = None, timeout: int = 7200) -> dict[str, Any]:
    env = dict(os.environ, **(env_extra or {}))
    if not env_extra or "KRAFT_NO_EXTENSIONS" not in env_extra:
        env.pop("KRAFT_NO_EXTENSIONS", None)
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env, capture_output=True, text=True,
                       timeout=timeout, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{p.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def cmd_run(a: argparse.Namespace) -> None:
    from tqdm import tqdm
    sizes = [_num(s) for s in a.sizes.split(",")]
    modes = [m for m in a.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r} (expected some of {', '.join(MODES)})")
    pure_sizes = {_num(s) for s in a.pure_sizes.split(",") if s}
    plan = [(n, m) for n in sizes for m in modes if m != "pure" or n in pure_sizes]
    report: dict[str, Any] = {"sizes": sizes, "modes": modes, "repeats": a.repeats, "seed": a.seed,
                              "splits_per_core": a.splits_per_core, "started": time.strftime("%FT%T"),
                              "cpus": os.cpu_count(), "load_before": os.getloadavg(), "commit": _commit(),
                              "skipped": [[n, "pure"] for n in sizes if "pure" in modes and n not in pure_sizes],
                              "results": []}
    paths = {n: ensure_log(a.data_dir, n, a.seed) for n in sizes}
    bar = tqdm(total=len(plan), desc="image apply", unit="run")
    for n, mode in plan:
        bar.set_postfix_str(f"{_label(n)} {mode}")
        load = os.getloadavg()[0]
        if mode in ("native", "pure"):
            r = _child(["one", "--path", paths[n], "--repeats", str(a.repeats)],
                       {"KRAFT_NO_EXTENSIONS": "1"} if mode == "pure" else None)
        else:
            r = _child(["spark", "--master", MASTERS[mode], "--path", paths[n], "--repeats", str(a.repeats),
                        "--splits-per-core", str(a.splits_per_core)])
        med = statistics.median(run["seconds"] for run in r["runs"])
        row = {"size": n, "mode": mode, "median_s": med, "records_per_s": r["records"] / med, "load1": load, **r}
        for part in ("fold_s", "apply_s", "tasks_s", "compose_s"):
            if part in r["runs"][0]:
                row[f"median_{part}"] = statistics.median(run[part] for run in r["runs"])
        if "task_seconds" in r["runs"][0]:  # wall well above CPU: the tasks waited for a core
            row["median_task_wall_sum_s"] = statistics.median(sum(run["task_seconds"]) for run in r["runs"])
            row["median_task_cpu_sum_s"] = statistics.median(sum(run["task_cpu_seconds"]) for run in r["runs"])
        report["results"].append(row)
        bar.update(1)
        bar.write(f"{_label(n):>4} {mode:7} {row['records_per_s'] / 1e6:6.2f}M records/s  (median {med:.3f} s)")
    bar.close()
    report["breakdown"] = {"size": sizes[0], "types": breakdown(paths[sizes[0]])}
    report["load_after"] = os.getloadavg()
    report["summary"] = summary(report)
    os.makedirs(a.out, exist_ok=True)
    name = f"image_apply_{'_'.join(_label(n) for n in sizes)}"
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump(report, f, indent=1)
    plot(report, a.out)
    print(json.dumps(report["summary"], indent=1))


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """Medians per size and mode, and the targets' ratios."""
    out: dict[str, Any] = {}
    for r in report["results"]:
        entry = {"records_per_s": round(r["records_per_s"]), "median_s": round(r["median_s"], 3)}
        for key in ("median_tasks_s", "median_compose_s", "median_apply_s", "median_task_wall_sum_s",
                    "median_task_cpu_sum_s"):
            if key in r:
                entry[key.removeprefix("median_")] = round(r[key], 3)
        out.setdefault(_label(r["size"]), {})[r["mode"]] = entry
    for modes in out.values():
        t: dict[str, Any] = {}
        if "native" in modes:
            t["one_process_native_ge_2M"] = modes["native"]["records_per_s"] >= TARGET_RPS
        if "spark1" in modes and "spark2" in modes:
            t["spark2_over_spark1"] = round(modes["spark2"]["records_per_s"] / modes["spark1"]["records_per_s"], 2)
        if "spark2" in modes and "native" in modes:
            t["native_over_spark2"] = round(modes["native"]["records_per_s"] / modes["spark2"]["records_per_s"], 2)
        modes["targets"] = t
    return out


def plot(report: dict[str, Any], out_dir: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colors = {"native": "C0", "pure": "C1", "spark1": "C2", "spark2": "C3"}
    res = report["results"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode in report["modes"]:
        pts = sorted((r["size"], r["records_per_s"]) for r in res if r["mode"] == mode)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], marker="o", color=colors[mode], label=mode)
    ax.axhline(TARGET_RPS / 1e6, color="grey", linestyle="--", linewidth=1, label="target (one process)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records in the log")
    ax.set_ylabel("million records / s (median)")
    ax.set_title("Metadata log replayed into the image")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "scaling.png"), dpi=110)
    plt.close(fig)
    for n in report["sizes"]:
        rs = [r for r in res if r["size"] == n]
        if not rs:
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = [r["mode"] for r in rs]
        parts = [("median_fold_s", "fold (one process)"), ("median_tasks_s", "Spark tasks (fold, parallel)"),
                 ("median_compose_s", "compose (driver)"), ("median_apply_s", "apply")]
        bottom = [0.0] * len(rs)
        for i, (key, label) in enumerate(parts):
            vals = [r.get(key, 0.0) for r in rs]
            if any(vals):
                ax.bar(labels, vals, bottom=bottom, label=label, color=f"C{i + 4}")
                bottom = [b + v for b, v in zip(bottom, vals)]
        for i, r in enumerate(rs):
            ax.text(i, bottom[i], f"{r['records_per_s'] / 1e6:.2f}M/s", ha="center", va="bottom", fontsize=8)
        ax.set_ylabel("seconds (median)")
        ax.set_title(f"Where the time goes, {_label(n)}-record log")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"stages_{_label(n)}.png"), dpi=110)
        plt.close(fig)
    bd = report.get("breakdown")
    if bd:
        types = bd["types"]
        fig, ax = plt.subplots(figsize=(9, 0.35 * len(types) + 1.5))
        y = list(range(len(types)))
        ax.barh([i - 0.2 for i in y], [t["share"] * 100 for t in types], height=0.4, label="% of records")
        ax.barh([i + 0.2 for i in y], [t["byte_share"] * 100 for t in types], height=0.4, label="% of value bytes")
        ax.set_yticks(y, [t["type"] for t in types], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("%")
        ax.set_title(f"Record types of the {_label(bd['size'])}-record log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "breakdown_by_type.png"), dpi=110)
        plt.close(fig)


def _commit() -> str:
    try:
        return subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run")
    r.add_argument("--sizes", default="1e6,10e6")
    r.add_argument("--modes", default=",".join(MODES))
    r.add_argument("--pure-sizes", default="1e6", help="sizes at which the pure twins run (slow: ~20x native)")
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--splits-per-core", type=int, default=2, help="Spark tasks per core of the master")
    r.add_argument("--data-dir", default=tempfile.gettempdir())
    r.add_argument("--out", default=os.path.join(HERE, "results", "image_apply"))
    o = sub.add_parser("one")
    o.add_argument("--path", required=True)
    o.add_argument("--repeats", type=int, default=3)
    s = sub.add_parser("spark")
    s.add_argument("--master", required=True)
    s.add_argument("--path", required=True)
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--splits-per-core", type=int, default=2)
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        argv = ["run", *argv]
    a = p.parse_args(argv)
    {"run": cmd_run, "one": cmd_one, "spark": cmd_spark}[a.cmd](a)


if __name__ == "__main__":
    main()
