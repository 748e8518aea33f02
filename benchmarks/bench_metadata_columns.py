"""pytest-benchmark: metadata record bodies decoded into columns (``kraft_storage.messages.columns``).

    python -m pytest benchmarks/bench_metadata_columns.py --benchmark-only

On a generated 200k-record metadata log (``kraft-gen-metadata-log`` model,
seed 1), already framed into record columns, so only the body decoding is
timed: every type at once through ``decode_bodies`` (native, and the pure
twin on the first 20k records), and the three commonest types alone through
the generated per-type loop.  The end-to-end stage (files -> columns) is
``benchmarks/spark/bench_replay.py::test_stage[columns]`` and
``benchmarks/spark/replay_report.py``.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import kraft_storage._native._metadata_columns as native_cols
import kraft_storage._pure._metadata_columns as pure_cols
from kraft_storage.messages import columns as mc
from kraft_storage.record import decode_records
from kraft_storage.spark.reader import read_frame_columns
from kraft_storage.tools.gen_metadata_log import write_log

N = 200_000
PURE_N = 20_000


@pytest.fixture(scope="module")
def framed(tmp_path_factory):
    d = tmp_path_factory.mktemp("columns")
    write_log(str(d), N, seed=1)
    path = os.path.join(str(d), "__cluster_metadata-0", "00000000000000000000.log")
    cols = decode_records(open(path, "rb").read())
    fr = read_frame_columns(cols)
    end = cols.value_pos + np.maximum(cols.value_len, 0)
    return cols, fr, end


@pytest.mark.parametrize("impl,n", [(native_cols, N), (pure_cols, PURE_N)], ids=["native", "pure"])
def test_decode_bodies(benchmark, framed, impl, n):
    cols, fr, end = framed
    rows = np.arange(n, dtype=np.int64)
    benchmark.extra_info["records"] = n
    out = benchmark(mc.decode_bodies, cols.data, fr.body_pos, end, fr.api_key, fr.version, rows=rows,
                    offsets=cols.offset, impl=impl)
    assert len(out) == int((fr.api_key[:n] >= 0).sum())


@pytest.mark.parametrize("name", ["PartitionChangeRecord", "NoOpRecord", "BrokerRegistrationChangeRecord",
                                  "ConfigRecord"])
def test_decode_one_type_native(benchmark, framed, name):
    cols, fr, end = framed
    key = next(k for k, lay in mc.LAYOUTS.items() if lay[0] == name)
    rows = np.flatnonzero(fr.api_key == key).astype(np.int64)
    benchmark.extra_info["records"] = len(rows)
    mv = memoryview(cols.data).cast("B")
    bufs, err = benchmark(native_cols.decode_type, key, mv, fr.body_pos, end, fr.version, rows)
    assert err is None and len(rows) > 1000
