"""Print CRC-32C throughput medians as JSON (decimal GB/s per size per implementation).

    python benchmarks/crc32c_report.py [--rounds 31] [--sizes 1024,65536,1048576]

Method: for each (implementation, size) the call is timed in rounds; a round
repeats the call enough times to last about 2 ms (so timer resolution and
call overhead are amortised the same way for all), the median round gives
seconds per call, and GB/s = size / that.  Implementations are interleaved
round by round, so a noisy neighbour on a shared machine hurts all of them
alike rather than one.  ``results`` holds medians (quote these), ``best``
the fastest round, and ``loadavg_*`` how busy the machine was.  Figures include the Python call overhead (about
0.1 microsecond), which dominates below a few KiB.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import crc32c as crc32c_pkg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kraft_storage._native import _crc32c as native  # noqa: E402
from kraft_storage._pure import _crc32c as pure  # noqa: E402


def implementations():
    impls = {
        "kraft-native": native.crc32c,
        "crc32c-package": crc32c_pkg.crc32c,
        "kraft-portable-slice8": native.crc32c_portable,
        "kraft-pure-twin": pure.crc32c,
    }
    for k in native._kernels():
        if k != "slice8":
            impls[f"kraft-kernel-{k}"] = (lambda k: lambda data: native._crc32c_kernel(k, data))(k)
    return impls


def calibrate(fn, data, target_s=0.002):
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(data)
        dt = time.perf_counter() - t0
        if dt >= target_s / 4 or reps >= 1 << 22:
            return max(1, int(reps * target_s / max(dt, 1e-9)))
        reps *= 4


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=31)
    ap.add_argument("--sizes", default="1024,65536,1048576")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    impls = implementations()
    result = {
        "unit": "GB/s (1e9 bytes/s), median of rounds",
        "native_impl": native.impl(),
        "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "python": platform.python_version()},
        "rounds": args.rounds,
        # 1-minute load average: on a shared machine, figures taken at a load
        # above the core count are not comparable with quiet ones.
        "loadavg_start": _loadavg(),
        "results": {},
        "best": {},  # fastest round, a bound on what the code can do when undisturbed
    }
    for size in sizes:
        data = os.urandom(size)
        want = crc32c_pkg.crc32c(data)
        reps = {}
        for name, fn in impls.items():
            assert fn(data) == want, name
            reps[name] = calibrate(fn, data)
        times = {name: [] for name in impls}
        for _ in range(args.rounds):
            for name, fn in impls.items():
                n = reps[name]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn(data)
                times[name].append((time.perf_counter() - t0) / n)
        result["results"][str(size)] = {
            name: round(size / statistics.median(ts) / 1e9, 3) for name, ts in times.items()}
        result["best"][str(size)] = {
            name: round(size / min(ts) / 1e9, 3) for name, ts in times.items()}
    result["loadavg_end"] = _loadavg()
    json.dump(result, sys.stdout, indent=2)
    print()


def _loadavg():
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    main()
