"""Does Numba earn its place?  (issue 20, Deliver 5)

Measures one array-in/array-out kernel of the kind the design card has in mind --
a batched lookup over an mmap'd Kafka offset index (big-endian int32 pairs) -- three
ways in one run: the Cython kernel kraft ships (``OffsetIndex.lookup_many``), numpy
(``searchsorted`` after a byte-swapping copy), and a Numba ``@njit(cache=True)`` kernel
reading the mapped bytes in place.  Also reports the costs Numba brings with it: its
import time, its first-call JIT compile (what a fresh Spark worker pays without a warm
cache) and the install size of numba + llvmlite.

    python benchmarks/numba_eval.py [--entries 100000] [--queries 1000000] [--rounds 7]

Prints one JSON object.  Needs numba installed (``pip install numba``); it is not a
dependency of kraft (see BENCHMARKS.md, "Numba").
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

import numpy as np


def _site_size(mod: str) -> int:
    import importlib
    root = os.path.dirname(importlib.import_module(mod).__file__)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--entries", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=7)
    a = p.parse_args(argv)

    from kraft_storage.log.index import OffsetIndex
    d = tempfile.mkdtemp()
    n = a.entries
    idx = OffsetIndex(d + "/00000000000000000000.index", 0, n * 8)
    idx.append_relative(np.arange(n, dtype=np.int64) * 37, np.arange(n, dtype=np.int64) * 4096 + 1)
    idx.flush()
    targets = np.random.default_rng(2).integers(0, n * 37, a.queries).astype(np.int64)
    raw = np.memmap(idx.path, dtype=np.uint8, mode="r")[: n * 8]

    import_t = subprocess.run([sys.executable, "-c", "import time; t=time.perf_counter(); import numba; "
                               "print(time.perf_counter()-t)"], capture_output=True, text=True, check=True)
    import numba

    @numba.njit(cache=False)
    def lookup_many_nb(buf, n, base, targets, out_o, out_p):
        for i in range(targets.shape[0]):
            rel = targets[i] - base
            lo, hi = 0, n - 1
            if n == 0 or rel < ((np.int64(buf[0]) << 24) | (np.int64(buf[1]) << 16)
                                | (np.int64(buf[2]) << 8) | np.int64(buf[3])):
                out_o[i] = base
                out_p[i] = 0
                continue
            while lo < hi:  # last slot whose relative offset <= rel
                mid = (lo + hi + 1) >> 1
                j = mid * 8
                v = (np.int64(buf[j]) << 24) | (np.int64(buf[j + 1]) << 16) | (np.int64(buf[j + 2]) << 8) \
                    | np.int64(buf[j + 3])
                if v <= rel:
                    lo = mid
                else:
                    hi = mid - 1
            j = lo * 8
            out_o[i] = base + ((np.int64(buf[j]) << 24) | (np.int64(buf[j + 1]) << 16)
                               | (np.int64(buf[j + 2]) << 8) | np.int64(buf[j + 3]))
            out_p[i] = (np.int64(buf[j + 4]) << 24) | (np.int64(buf[j + 5]) << 16) \
                | (np.int64(buf[j + 6]) << 8) | np.int64(buf[j + 7])

    out_o = np.empty(len(targets), np.int64)
    out_p = np.empty(len(targets), np.int64)
    t = time.perf_counter()
    lookup_many_nb(raw, n, 0, targets, out_o, out_p)
    jit_s = time.perf_counter() - t

    def numpy_way():
        pairs = np.frombuffer(raw, dtype=">i4").reshape(-1, 2).astype(np.int64)  # the byte-swapping copy
        slot = np.searchsorted(pairs[:, 0], targets, side="right") - 1
        slot = np.maximum(slot, 0)
        return pairs[slot, 0], pairs[slot, 1]

    ref_o, ref_p = idx.lookup_many(targets)
    np_o, np_p = numpy_way()
    assert (out_o == ref_o).all() and (out_p == ref_p).all(), "numba kernel disagrees with kraft's"
    assert (np_o == ref_o).all() and (np_p == ref_p).all(), "numpy way disagrees with kraft's"

    def rate(fn):
        xs = []
        for _ in range(a.rounds):
            t = time.perf_counter()
            fn()
            xs.append(len(targets) / (time.perf_counter() - t))
        return statistics.median(xs)

    res = {
        "entries": n, "queries": len(targets), "rounds": a.rounds,
        "lookups_per_s": {
            "cython_kraft": rate(lambda: idx.lookup_many(targets)),
            "numba_njit": rate(lambda: lookup_many_nb(raw, n, 0, targets, out_o, out_p)),
            "numpy_searchsorted": rate(numpy_way),
        },
        "numba_import_s": float(import_t.stdout.strip()),
        "numba_first_call_jit_s": jit_s,
        "install_bytes": {"numba": _site_size("numba"), "llvmlite": _site_size("llvmlite")},
        "numba_version": numba.__version__,
    }
    res["numba_vs_cython"] = res["lookups_per_s"]["numba_njit"] / res["lookups_per_s"]["cython_kraft"]
    print(json.dumps(res, indent=1))
    idx.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
