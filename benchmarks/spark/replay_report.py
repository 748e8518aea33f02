"""Replay benchmark: decode throughput of generated metadata logs, four ways, plus a record-type breakdown.

Usage (from the repository root)::

    python benchmarks/spark/replay_report.py --sizes 1e6,10e6 \\
        --modes native,pure,spark1,spark2 --data-dir /tmp/kraft_bench

Every measurement runs in a fresh subprocess (``worker`` / ``spark``
sub-commands of this script), so the native/pure choice is made cleanly
(``KRAFT_NO_EXTENSIONS=1`` for the twins) and every Spark master gets its
own JVM.  Logs are generated once per size and seed with
``kraft-gen-metadata-log`` and reused.  The result is printed as JSON and
written to ``--out`` (``replay_<sizes>.json``) with PNG plots:
``throughput_<size>.png`` (records/s per stage and mode),
``scaling.png`` (records/s against log size) and ``breakdown_by_type.png``.

Modes and what they time (median of ``--repeats`` runs, after the JVM
start for Spark):

* ``native`` / ``pure``: the stages of :mod:`stages` (framing, frames,
  arrow, arrow_replay; plus ``apply`` with ``--apply module:factory``).
* ``spark1`` / ``spark2``: ``spark.read.format("kraft")`` with master
  ``local[1]`` / ``local[2]`` written to Spark's ``noop`` sink, for the full
  schema (``spark_full``), the replay columns (``spark_replay``), the full
  schema with ``fields="columns"`` (``spark_columns``: bodies decoded, one
  struct column per record type) and ``stages.COLUMNS_REPLAY`` + the type
  columns (``spark_columns_replay``: the information of the native
  ``columns`` stage, i.e. the same work plus the trip to the JVM);
  ``spark_ceiling`` is a trivial Python data source yielding ready Arrow
  batches (2 columns), i.e. what Spark's Python data source path itself
  can move on this machine; ``spark_ceiling_columns`` the same with the
  ``spark_columns_replay`` batches of the log's first chunk, replayed (what
  Spark alone costs for that schema).  Either is counted as ``--ceiling-rows``
  rows (10,485,760 by default, rounded down to whole replays).

The pure-Python twins are slow: at sizes above ``--pure-max`` (default 2M)
they are measured on the first ``--pure-max`` records only (an offset
range), and the rate is reported for that prefix.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def _num(s: str) -> int:
    return int(float(s))


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k"


# -- subprocess workers --------------------------------------------------------

def cmd_worker(a) -> None:
    import stages
    fn = stages.load_apply(a.apply) if a.stage == "apply" else stages.STAGES[a.stage]
    path = a.path
    if a.max_records:
        path = _prefix_copy(a.path, a.max_records)
    times, n = [], 0
    for _ in range(a.repeats):
        t = time.perf_counter()
        n = fn(path)
        times.append(time.perf_counter() - t)
    print(json.dumps({"stage": a.stage, "impl": stages.implementation(), "records": n,
                      "bytes": stages.log_bytes(path), "times": times}))


def _prefix_copy(path: str, max_records: int) -> str:
    """A log holding the first ``max_records`` records of ``path`` (cached next to it)."""
    from kraft_storage.record import scan_batches
    from kraft_storage.spark.files import find_files
    out_dir = f"{path.rstrip('/')}.prefix{max_records}"
    out = os.path.join(out_dir, "__cluster_metadata-0", "00000000000000000000.log")
    if os.path.exists(out):
        return out_dir
    first = find_files(path)[0].path
    with open(first, "rb") as f:
        buf = f.read()
    h = scan_batches(buf, verify_crc=False).headers
    cum = (h["records_count"]).cumsum()
    k = int((cum < max_records).sum()) + 1
    end = int(h["position"][k] if k < len(h) else len(buf))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out + ".tmp", "wb") as f:
        f.write(buf[:end])
    os.replace(out + ".tmp", out)
    return out_dir


def cmd_spark(a) -> None:
    import stages
    from pyspark.sql import SparkSession
    os.environ["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    spark = (SparkSession.builder.master(a.master).appName("kraft-replay-bench")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from kraft_storage.spark import register
    register(spark)
    out = {"master": a.master, "results": {}}
    workloads = a.workloads.split(",")
    for w in workloads:
        times = []
        for _ in range(a.repeats):
            if w == "spark_ceiling":
                df = _ceiling_df(spark, a.ceiling_rows)
                n = a.ceiling_rows
            elif w == "spark_ceiling_columns":
                df = _ceiling_columns_df(spark, a.path, a.ceiling_rows)
                n = a.ceiling_rows
            else:
                r = spark.read.format("kraft").option("maxPartitionBytes", a.max_partition_bytes)
                if w == "spark_replay":
                    r = r.schema(", ".join(f"{c} {_ddl(c)}" for c in stages.REPLAY_COLUMNS))
                elif w in ("spark_columns", "spark_columns_replay"):
                    r = r.option("fields", "columns")
                    if w == "spark_columns_replay":
                        r = r.schema(_columns_replay_schema())
                df = r.load(a.path)
                n = None
            t = time.perf_counter()
            df.write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - t)
        out["results"][w] = {"times": times, "records": n}
    out["partitions"] = spark.read.format("kraft").option(
        "maxPartitionBytes", a.max_partition_bytes).load(a.path).rdd.getNumPartitions()
    spark.stop()
    print(json.dumps(out))


def _columns_replay_schema():
    """COLUMNS_REPLAY plus every record type column, as a Spark StructType."""
    import stages
    from pyspark.sql import types as T

    from kraft_storage.spark.reader import spark_schema
    full = {f.name: f for f in spark_schema("columns").fields}
    return T.StructType([full[c] for c in stages.COLUMNS_REPLAY]
                        + [f for n, f in full.items() if n.endswith("_record")])


def _ddl(col: str) -> str:
    from kraft_storage.spark.reader import SCHEMA_FIELDS
    return {n: d for n, _t, d in SCHEMA_FIELDS}[col]


def _ceiling_df(spark, rows: int):
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class _R(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(8)]

        def read(self, p):
            import numpy as np
            import pyarrow as pa
            n = 131072
            b = pa.RecordBatch.from_arrays([pa.array(np.arange(n)), pa.array(np.zeros(n, np.int16))],
                                           names=["offset", "record_type"])
            for _ in range(max(rows // (8 * n), 1)):
                yield b

    class _D(DataSource):
        @classmethod
        def name(cls):
            return "kraft_ceiling"

        def schema(self):
            return "offset LONG, record_type SHORT"

        def reader(self, schema):
            return _R()

    spark.dataSource.register(_D)
    return spark.read.format("kraft_ceiling").load()


def _ceiling_columns_df(spark, path: str, rows: int):
    """Spark's cost of taking ``spark_columns_replay`` batches, with no decoding at all.

    Each of 8 partitions decodes the log's first chunk once (fields="columns",
    stages.COLUMNS_REPLAY + every type column) and then yields those same
    Arrow batches again and again until it has produced rows/8 rows: what is
    timed is Spark's Python data source path for this schema, not kraft.
    """
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    schema = _columns_replay_schema()
    names = tuple(schema.fieldNames())  # the workers do not import stages.py

    class _R(DataSourceReader):
        def partitions(self):
            return [InputPartition(i) for i in range(8)]

        def read(self, p):
            from kraft_storage.spark import reader as kr
            opts = kr.ReadOptions(fields="columns", columns=names, max_offset=kr.DEFAULT_BATCH_ROWS - 1)
            batches = list(kr.read_arrow(path, opts))
            per = sum(b.num_rows for b in batches)
            for _ in range(max(rows // (8 * per), 1)):
                yield from batches

    class _D(DataSource):
        @classmethod
        def name(cls):
            return "kraft_ceiling_columns"

        def schema(self):
            return schema

        def reader(self, schema):
            return _R()

    spark.dataSource.register(_D)
    return spark.read.format("kraft_ceiling_columns").load()


# -- breakdown by record type ----------------------------------------------------

def breakdown(path: str, sample: int = 20_000) -> list[dict]:
    """Per record type: count, value bytes, and body decode rates of the generated codecs."""
    import numpy as np

    from kraft_storage._pure import _messages_metadata as pure_codec
    from kraft_storage.messages import metadata as native_codec
    from kraft_storage.spark import reader as kr
    table = kr.read_table(path, kr.ReadOptions(columns=("record_type_name", "record_type", "value")))
    names = table.column("record_type_name").to_numpy(zero_copy_only=False)
    values = table.column("value")
    lens = np.array([0 if v is None else len(v) for v in values.to_pylist()]) if len(values) < 3_000_000 else None
    out = []
    total = len(names)
    for name in sorted(set(x for x in names if x is not None)):
        idx = np.flatnonzero(names == name)
        row = {"type": name, "count": int(len(idx)), "share": len(idx) / total}
        if lens is not None:
            row["value_bytes"] = int(lens[idx].sum())
        vals = [values[int(i)].as_py() for i in idx[:sample]]
        if table.column("record_type")[int(idx[0])].as_py() is not None:
            for label, codec in (("native", native_codec.decode_metadata_record),
                                 ("pure", pure_codec.decode_metadata_record)):
                vs = vals if label == "native" else vals[: max(1, len(vals) // 10)]
                t = time.perf_counter()
                for v in vs:
                    codec(v)
                row[f"decode_{label}_rps"] = len(vs) / (time.perf_counter() - t)
            t = time.perf_counter()
            for v in vals[:2000]:
                _k, ver, msg = native_codec.decode_metadata_record(v)
                json.dumps(msg.to_dict(ver))
            row["json_rps"] = min(len(vals), 2000) / (time.perf_counter() - t)
        out.append(row)
    rates = columnar_rates(path)
    for row in out:
        if row["type"] in rates:
            row["columns_native_rps"] = rates[row["type"]]
    return out


def columnar_rates(path: str) -> dict:
    """Per record type: records/s of the native columnar body decoder (its type loop alone, best of 3)."""
    import mmap

    import numpy as np

    from kraft_storage._native import _metadata_columns as ncols
    from kraft_storage.record import decode_records
    from kraft_storage.spark import reader as kr
    from kraft_storage.spark.files import find_files
    spent: dict = {}
    for f in find_files(path):
        with open(f.path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        cols = decode_records(mm)
        fr = kr.read_frame_columns(cols)
        end = cols.value_pos + np.maximum(cols.value_len, 0)
        mv = memoryview(mm)
        for k, lay in ncols.LAYOUTS.items():
            rows = np.flatnonzero(fr.api_key == k).astype(np.int64)
            if not len(rows):
                continue
            best = float("inf")
            for _ in range(3):
                t = time.perf_counter()
                ncols.decode_type(k, mv, fr.body_pos, end, fr.version, rows)
                best = min(best, time.perf_counter() - t)
            n, s = spent.get(lay[0], (0, 0.0))
            spent[lay[0]] = (n + len(rows), s + best)
        del cols, fr, end, mv
        mm.close()
    return {name: n / s for name, (n, s) in spent.items() if s > 0}


# -- orchestration ------------------------------------------------------------------

def _run(args: list[str], env_extra: dict | None = None, timeout: int = 3600) -> dict:
    env = dict(os.environ, **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), *args], env=env, capture_output=True,
                       text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def ensure_log(data_dir: str, n: int, seed: int) -> str:
    from kraft_storage.tools.gen_metadata_log import write_log
    d = os.path.join(data_dir, f"gen_{_label(n)}_seed{seed}")
    done = os.path.join(d, ".complete")
    if not os.path.exists(done):
        write_log(d, n, seed=seed, progress=True)
        open(done, "w").close()
    return d


def cmd_run(a) -> None:
    import stages
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    sizes = [_num(s) for s in a.sizes.split(",")]
    modes = a.modes.split(",")
    stage_names = (a.stages.split(",") if a.stages else list(stages.STAGES)) + (["apply"] if a.apply else [])
    plan = []
    for n in sizes:
        for m in modes:
            if m in ("native", "pure"):
                plan += [(n, m, s) for s in stage_names]
            else:
                plan.append((n, m, None))
    report = {"sizes": sizes, "seed": a.seed, "repeats": a.repeats, "started": time.strftime("%FT%T"),
              "env_before": stages.environment(), "runs": [], "breakdown": None}
    bar = tqdm(total=len(plan), desc="replay bench", unit="run") if tqdm else None
    paths = {}
    for n in sizes:
        paths[n] = ensure_log(a.data_dir, n, a.seed)
    for n, mode, stage in plan:
        path = paths[n]
        if bar:
            bar.set_postfix_str(f"{_label(n)} {mode} {stage or ''}")
        load = os.getloadavg()[0]
        if mode in ("native", "pure"):
            args = ["worker", "--stage", stage, "--path", path, "--repeats", str(a.repeats)]
            if a.apply:
                args += ["--apply", a.apply]
            env = {"KRAFT_NO_EXTENSIONS": "1"} if mode == "pure" else {}
            if mode == "pure" and n > a.pure_max:
                args += ["--max-records", str(a.pure_max)]
            r = _run(args, env)
            med = statistics.median(r["times"])
            report["runs"].append({"size": n, "mode": mode, "stage": stage, "impl": r["impl"],
                                   "records": r["records"], "bytes": r["bytes"], "median_s": med,
                                   "times": r["times"], "records_per_s": r["records"] / med,
                                   "mb_per_s": r["bytes"] / med / 1e6, "load1": load})
        else:
            master = {"spark1": "local[1]", "spark2": "local[2]"}[mode]
            wl = a.spark_workloads + (",spark_ceiling" if n == sizes[0] and a.ceiling else "")
            r = _run(["spark", "--master", master, "--path", path, "--repeats", str(a.repeats),
                      "--workloads", wl, "--max-partition-bytes", str(a.max_partition_bytes)])
            nbytes = stages.log_bytes(path)
            for w, res in r["results"].items():
                med = statistics.median(res["times"])
                recs = res["records"] or n
                report["runs"].append({"size": n, "mode": mode, "stage": w, "records": recs,
                                       "bytes": None if w == "spark_ceiling" else nbytes,
                                       "median_s": med, "times": res["times"], "records_per_s": recs / med,
                                       "mb_per_s": None if w == "spark_ceiling" else nbytes / med / 1e6,
                                       "partitions": r["partitions"], "load1": load})
        if bar:
            bar.update(1)
    if bar:
        bar.close()
    if not a.no_breakdown:
        report["breakdown"] = {"size": sizes[0], "types": breakdown(paths[sizes[0]])}
    report["env_after"] = stages.environment()
    os.makedirs(a.out, exist_ok=True)
    name = f"replay_{'_'.join(_label(n) for n in sizes)}"
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump(report, f, indent=1)
    plot(report, a.out)
    print(json.dumps(summary(report), indent=1))


def summary(report: dict) -> dict:
    out = {}
    for r in report["runs"]:
        out.setdefault(_label(r["size"]), {})[f"{r['mode']}/{r['stage']}"] = {
            "records_per_s": round(r["records_per_s"]), "mb_per_s": r["mb_per_s"] and round(r["mb_per_s"], 1),
            "median_s": round(r["median_s"], 3), "records": r["records"]}
    if report.get("breakdown"):
        out["breakdown"] = report["breakdown"]
    return out


def plot(report: dict, out_dir: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    runs = report["runs"]
    for n in report["sizes"]:
        rs = [r for r in runs if r["size"] == n]
        if not rs:
            continue
        fig, ax = plt.subplots(figsize=(9, 4.5))
        labels = [f"{r['mode']}\n{r['stage']}" for r in rs]
        ax.bar(range(len(rs)), [r["records_per_s"] / 1e6 for r in rs],
               color=[{"native": "C0", "pure": "C1", "spark1": "C2", "spark2": "C3"}[r["mode"]] for r in rs])
        ax.set_xticks(range(len(rs)), labels, fontsize=7, rotation=60, ha="right")
        ax.set_ylabel("million records / s")
        ax.set_yscale("log")
        ax.set_title(f"Decode throughput, {_label(n)}-record metadata log (median)")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, f"throughput_{_label(n)}.png"), dpi=110)
        plt.close(fig)
    if len(report["sizes"]) > 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        keys = sorted({(r["mode"], r["stage"]) for r in runs})
        for mode, stage in keys:
            pts = sorted((r["size"], r["records_per_s"]) for r in runs if (r["mode"], r["stage"]) == (mode, stage))
            if len(pts) > 1:
                ax.plot([p[0] for p in pts], [p[1] / 1e6 for p in pts], marker="o", label=f"{mode}/{stage}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records in the log")
        ax.set_ylabel("million records / s")
        ax.set_title("Throughput against log size")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "scaling.png"), dpi=110)
        plt.close(fig)
    bd = report.get("breakdown")
    if bd:
        types = [t for t in bd["types"] if "decode_native_rps" in t]
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.5))
        a1.barh([t["type"] for t in types], [t["share"] * 100 for t in types])
        a1.set_xlabel("% of records")
        a2.barh([t["type"] for t in types], [t["decode_native_rps"] / 1e6 for t in types], label="native codec")
        a2.barh([t["type"] for t in types], [t["decode_pure_rps"] / 1e6 for t in types], label="pure codec")
        a2.set_xlabel("million bodies / s (object decode)")
        a2.legend(fontsize=7)
        a2.set_yticks([])
        fig.suptitle(f"Record types of the {_label(bd['size'])} log")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "breakdown_by_type.png"), dpi=110)
        plt.close(fig)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd")
    r = sub.add_parser("run")
    r.add_argument("--sizes", default="1e6,10e6")
    r.add_argument("--modes", default="native,pure,spark1,spark2")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--repeats", type=int, default=3)
    r.add_argument("--data-dir", default="/tmp/kraft_bench")
    r.add_argument("--out", default=os.path.join(HERE, "results"))
    r.add_argument("--pure-max", type=_num, default=2_000_000)
    r.add_argument("--apply", default=None, help="module:factory of the image-apply stage")
    r.add_argument("--no-breakdown", action="store_true")
    r.add_argument("--stages", default=None, help="native/pure stages to run (default: all)")
    r.add_argument("--spark-workloads", default="spark_full,spark_replay,spark_columns,spark_columns_replay")
    r.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                   help="skip the spark_ceiling workload (trivial source) at the first size")
    r.add_argument("--max-partition-bytes", type=_num, default=32 << 20,
                   help="Spark split size (smaller: more tasks for local[2])")
    w = sub.add_parser("worker")
    w.add_argument("--stage", required=True)
    w.add_argument("--path", required=True)
    w.add_argument("--repeats", type=int, default=3)
    w.add_argument("--max-records", type=_num, default=0)
    w.add_argument("--apply", default=None)
    s = sub.add_parser("spark")
    s.add_argument("--master", required=True)
    s.add_argument("--path", required=True)
    s.add_argument("--repeats", type=int, default=3)
    s.add_argument("--workloads", default="spark_full,spark_replay")
    s.add_argument("--ceiling-rows", type=_num, default=10_485_760)
    s.add_argument("--max-partition-bytes", type=_num, default=32 << 20)
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0].startswith("-"):
        argv = ["run", *argv]
    a = p.parse_args(argv)
    {"run": cmd_run, "worker": cmd_worker, "spark": cmd_spark}[a.cmd](a)


if __name__ == "__main__":
    main()
