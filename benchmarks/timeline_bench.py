"""Print the timeline-collection figures (issue 5 B targets) as JSON.

Usage:  python benchmarks/timeline_bench.py [--n 100000] [--repeat 15] [--quick] [--bulk-only]

Per-operation costs are medians over ``--repeat`` rounds of ``n`` operations,
measured with CPU time (``time.process_time``: the benchmark machine is shared
and its wall clock mostly measures the neighbours) and also reported in wall
time.  Same run, same keys: native (Cython), pure twin, and ``dictclass`` (a
dict behind a Python class with put/get methods).  Java's 277 ns per put
(apache/kafka PR #10324, TimelineHashMap JMH) is quoted for reference.

Targets checked: >= 5M puts/s and >= 8M gets/s from single-op calls; bulk
API >= 5x faster than the single-op calls (``ops`` and ``bulk``: int keys in
insertion order and shuffled, as a list and as an int64 numpy array, at n
and at 1M); snapshot creation O(1); revert
O(changes); memory <= 2x a dict holding the same entries.
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kraft_storage._pure._timeline as pure_tl  # noqa: E402

try:
    import kraft_storage._native._timeline as native_tl  # noqa: E402
except ImportError:  # pragma: no cover
    native_tl = None

JAVA_PUT_NS = 277.0


class DictMap:
    __slots__ = ("_d",)

    def __init__(self):
        self._d = {}

    def put(self, key, value):
        prev = self._d.get(key)
        self._d[key] = value
        return prev

    def get(self, key, default=None):
        return self._d.get(key, default)


def measure(fn, setup, n, repeat):
    """Median ns/op in CPU and wall time; ``setup()`` builds fn's argument."""
    cpu, wall = [], []
    for _ in range(repeat):
        arg = setup()
        gc.disable()
        c0, w0 = time.process_time(), time.perf_counter()
        fn(arg)
        c1, w1 = time.process_time(), time.perf_counter()
        gc.enable()
        cpu.append((c1 - c0) / n * 1e9)
        wall.append((w1 - w0) / n * 1e9)
    return {"cpu_ns": round(statistics.median(cpu), 2), "wall_ns": round(statistics.median(wall), 2)}


def op_figures(impls, n, repeat):
    out = {}
    vals = [str(i) for i in range(n)]
    for kind, keys in (("int", list(range(n))), ("str", [f"topic-{i}" for i in range(n)])):
        res = out[kind] = {}
        for name, make in impls.items():
            r = res[name] = {}

            def put_loop(m, keys=keys):
                put = m.put
                for k, v in zip(keys, vals):
                    put(k, v)

            def get_loop(m, keys=keys):
                get = m.get
                for k in keys:
                    get(k)

            full = make()
            put_loop(full)
            r["put"] = measure(put_loop, make, n, repeat)
            r["get"] = measure(get_loop, lambda full=full: full, n, repeat)
            if name != "dictclass":
                def setitem_loop(m, keys=keys):
                    for k, v in zip(keys, vals):
                        m[k] = v

                def getitem_loop(m, keys=keys):
                    for k in keys:
                        m[k]

                r["setitem"] = measure(setitem_loop, make, n, repeat)
                r["getitem"] = measure(getitem_loop, lambda full=full: full, n, repeat)
                r["put_many"] = measure(lambda m, keys=keys: m.put_many(keys, vals), make, n, repeat)
                r["get_many"] = measure(lambda m, keys=keys: m.get_many(keys),
                                        lambda full=full: full, n, repeat)
                r["put_many_replace"] = measure(lambda m, keys=keys: m.put_many(keys, vals),
                                                lambda full=full: full, n, repeat)
            for fig in list(r.values()):
                fig["mops_per_s"] = round(1e3 / fig["cpu_ns"], 2)
    return out


def bulk_figures(impls, n, repeat, seed=1):
    """Single-op vs bulk calls on int keys, same run, same n: keys in
    insertion order and shuffled, as a list and as an int64 numpy array."""
    import random

    import numpy as np

    out = {}
    vals = [str(i) for i in range(n)]
    ordered = list(range(n))
    shuffled = ordered[:]
    random.Random(seed).shuffle(shuffled)
    for order, keys in (("ordered", ordered), ("shuffled", shuffled)):
        arr = np.array(keys, dtype=np.int64)
        res = out[order] = {}
        for name, make in impls.items():
            if name == "dictclass":
                continue
            r = res[name] = {}
            full = make()
            full.put_many(keys, vals)

            def put_loop(m, keys=keys):
                put = m.put
                for k, v in zip(keys, vals):
                    put(k, v)

            def get_loop(m, keys=keys):
                get = m.get
                for k in keys:
                    get(k)

            r["put"] = measure(put_loop, make, n, repeat)
            r["get"] = measure(get_loop, lambda full=full: full, n, repeat)
            r["put_many"] = measure(lambda m, keys=keys: m.put_many(keys, vals), make, n, repeat)
            r["put_many_replace"] = measure(lambda m, keys=keys: m.put_many(keys, vals),
                                            lambda full=full: full, n, repeat)
            r["get_many"] = measure(lambda m, keys=keys: m.get_many(keys),
                                    lambda full=full: full, n, repeat)
            r["put_many_int64_array"] = measure(lambda m, arr=arr: m.put_many(arr, vals),
                                                make, n, repeat)
            r["put_many_int64_array_replace"] = measure(lambda m, arr=arr: m.put_many(arr, vals),
                                                        lambda full=full: full, n, repeat)
            r["get_many_int64_array"] = measure(lambda m, arr=arr: m.get_many(arr),
                                                lambda full=full: full, n, repeat)
            r["speedup_vs_single"] = {
                op: round(r[single]["cpu_ns"] / r[op]["cpu_ns"], 2)
                for op, single in (("put_many", "put"), ("put_many_replace", "put"),
                                   ("get_many", "get"), ("put_many_int64_array", "put"),
                                   ("put_many_int64_array_replace", "put"),
                                   ("get_many_int64_array", "get"))}
            del full
    return out


def snapshot_figures(mod, sizes, repeat):
    """ns per get_or_create_snapshot (+ delete) with a map of each size."""
    out = {}
    for size in sizes:
        reg = mod.SnapshotRegistry()
        m = mod.TimelineHashMap(reg)
        m.put_many(list(range(size)), list(range(size)))
        state = {"e": 0}
        loops = 2000

        def run(_):
            e = state["e"]
            create, delete = reg.get_or_create_snapshot, reg.delete_snapshots_up_to
            for i in range(e, e + loops):
                create(i)
                delete(i)
            state["e"] = e + loops

        out[str(size)] = measure(run, lambda: None, loops, repeat)
        del m
    return out


def revert_figures(mod, cases, repeat):
    out = {}
    for size, changes in cases:
        reg = mod.SnapshotRegistry()
        m = mod.TimelineHashMap(reg)
        m.put_many(list(range(size)), list(range(size)))
        half = changes // 2
        old_keys, new_keys = list(range(half)), list(range(size, size + half))
        epoch = {"e": 0}

        def setup():
            epoch["e"] += 1
            reg.get_or_create_snapshot(epoch["e"])
            m.put_many(old_keys, old_keys)
            m.put_many(new_keys, new_keys)
            return epoch["e"]

        fig = measure(lambda e: reg.revert_to_snapshot(e), setup, 1, repeat)
        assert len(m) == size
        fig = {"us": round(fig["cpu_ns"] / 1e3, 1), "wall_us": round(fig["wall_ns"] / 1e3, 1),
               "ns_per_change": round(fig["cpu_ns"] / changes, 1)}
        out[f"size={size},changes={changes}"] = fig
    return out


def memory_figures(sizes):
    out = {}
    for size in sizes:
        keys = [f"topic-{i}" for i in range(size)]
        row = {}
        for name, make in (("dict", dict),
                           ("native", (lambda: native_tl.TimelineHashMap(native_tl.SnapshotRegistry()))
                            if native_tl else None),
                           ("pure", lambda: pure_tl.TimelineHashMap(pure_tl.SnapshotRegistry()))):
            if make is None:
                continue
            gc.collect()
            tracemalloc.start()
            b0 = tracemalloc.get_traced_memory()[0]
            c = make()
            for k in keys:
                c[k] = k
            b1 = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            row[name] = {"bytes": b1 - b0, "bytes_per_entry": round((b1 - b0) / size, 1)}
            del c
        for name in row:
            row[name]["x_dict"] = round(row[name]["bytes"] / row["dict"]["bytes"], 2)
        out[str(size)] = row
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--bulk-only", action="store_true",
                    help="only the single-op vs bulk figures (at --n and at 1M)")
    args = ap.parse_args()
    n, repeat = (10_000, 3) if args.quick else (args.n, args.repeat)
    big = 100_000 if args.quick else 1_000_000

    impls = {"dictclass": DictMap}
    if native_tl is not None:
        impls["native"] = lambda: native_tl.TimelineHashMap(native_tl.SnapshotRegistry())
    impls["pure"] = lambda: pure_tl.TimelineHashMap(pure_tl.SnapshotRegistry())

    if args.bulk_only:
        nat = {k: v for k, v in impls.items() if k == "native"} or impls
        result = {"python": sys.version.split()[0], "n": n, "repeat": repeat,
                  "timer": "process_time (cpu); perf_counter (wall)",
                  f"bulk_n={n}": bulk_figures(nat, n, repeat)}
        if not args.quick:
            result["bulk_n=1000000"] = bulk_figures(nat, 1_000_000, max(3, repeat // 3))
        print(json.dumps(result, indent=1))
        return

    ops = op_figures(impls, n, repeat)
    result = {
        "python": sys.version.split()[0], "machine": platform.machine(), "n": n,
        "repeat": repeat, "timer": "process_time (cpu); perf_counter (wall)",
        "java_put_ns_reference": JAVA_PUT_NS,
        "ops": ops,
    }
    mods = {"pure": pure_tl}
    if native_tl is not None:
        mods["native"] = native_tl
        nat = ops["int"]["native"]
        result["targets_native_int_keys"] = {
            "puts_per_s_M": nat["put"]["mops_per_s"], "puts_target_M": 5,
            "gets_per_s_M": nat["get"]["mops_per_s"], "gets_target_M": 8,
            "bulk_put_speedup": round(nat["put"]["cpu_ns"] / nat["put_many"]["cpu_ns"], 2),
            "bulk_get_speedup": round(nat["get"]["cpu_ns"] / nat["get_many"]["cpu_ns"], 2),
            "vs_java_put": round(JAVA_PUT_NS / nat["put"]["cpu_ns"], 2),
        }
    result["bulk"] = {f"n={n}": bulk_figures(impls, n, repeat)}
    if not args.quick:
        nat = {k: v for k, v in impls.items() if k == "native"}
        result["bulk"]["n=1000000"] = bulk_figures(nat, 1_000_000, max(3, repeat // 3))
    result["snapshot_create_delete_ns"] = {
        name: snapshot_figures(mod, [1_000, big], repeat) for name, mod in mods.items()}
    result["revert"] = {name: revert_figures(mod, [(10_000, 1_000), (big, 1_000), (big, 100_000)],
                                             min(repeat, 7))
                        for name, mod in mods.items()}
    result["memory"] = memory_figures([10_000, big])
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
