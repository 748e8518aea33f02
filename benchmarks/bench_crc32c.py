"""CRC-32C throughput: kraft's native kernel vs the `crc32c` package vs the portable kernel.

Run:  python -m pytest -q benchmarks/bench_crc32c.py --benchmark-columns=median,iqr,rounds
Each case records ``extra_info["gb_per_s_median"]`` (decimal GB/s at the
median round time).  For a compact JSON table use ``benchmarks/crc32c_report.py``.
"""
from __future__ import annotations

import os

import crc32c as crc32c_pkg
import pytest

from kraft_storage._native import _crc32c as native
from kraft_storage._pure import _crc32c as pure

SIZES = {"1KiB": 1 << 10, "64KiB": 1 << 16, "1MiB": 1 << 20}

IMPLS = {
    "kraft-native": native.crc32c,
    "crc32c-package": lambda data: crc32c_pkg.crc32c(data),
    "kraft-portable-slice8": native.crc32c_portable,
}
# Each hardware kernel on its own, when this CPU can run it.
for _k in native._kernels():
    if _k != "slice8":
        IMPLS[f"kraft-kernel-{_k}"] = (lambda k: lambda data: native._crc32c_kernel(k, data))(_k)
IMPLS["kraft-pure-twin"] = pure.crc32c


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
@pytest.mark.parametrize("impl", list(IMPLS), ids=list(IMPLS))
def test_crc32c_throughput(benchmark, impl, size):
    data = os.urandom(SIZES[size])
    fn = IMPLS[impl]
    benchmark.group = f"crc32c {size}"
    benchmark.extra_info["impl"] = native.impl() if impl == "kraft-native" else impl
    result = benchmark(fn, data)
    assert result == crc32c_pkg.crc32c(data)
    benchmark.extra_info["gb_per_s_median"] = round(
        SIZES[size] / benchmark.stats.stats.median / 1e9, 2)
