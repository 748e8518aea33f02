"""pytest-benchmark suite of the replay decode stages (small log; the big runs are replay_report.py).

    python -m pytest benchmarks/spark/bench_replay.py --benchmark-only

Native stages on a generated 200k-record metadata log, and the pure-Python
twins' frame kernel on the same columns (the whole pure pipeline is timed
by ``replay_report.py --modes pure`` in its own process).
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stages  # noqa: E402

import kraft_storage._native._frame as native_frame  # noqa: E402
import kraft_storage._pure._frame as pure_frame  # noqa: E402
from kraft_storage.record import decode_records  # noqa: E402
from kraft_storage.tools.gen_metadata_log import write_log  # noqa: E402

N = 200_000


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    write_log(str(d), N, seed=1)
    return str(d)


@pytest.mark.parametrize("stage", list(stages.STAGES))
def test_stage(benchmark, log_dir, stage):
    benchmark.extra_info["records"] = N
    n = benchmark(stages.STAGES[stage], log_dir)
    assert n == N


@pytest.mark.parametrize("impl", [native_frame, pure_frame], ids=["native", "pure"])
def test_read_frames(benchmark, log_dir, impl):
    path = os.path.join(log_dir, "__cluster_metadata-0", "00000000000000000000.log")
    cols = decode_records(open(path, "rb").read())
    k = np.empty(len(cols), np.int16)
    v = np.empty(len(cols), np.int16)
    b = np.empty(len(cols), np.int64)
    good = benchmark(impl.read_frames, cols.data, cols.value_pos, cols.value_len, k, v, b)
    assert good == N - 1  # all but the LeaderChange control record


@pytest.mark.parametrize("impl", [native_frame, pure_frame], ids=["native", "pure"])
def test_gather_values(benchmark, log_dir, impl):
    path = os.path.join(log_dir, "__cluster_metadata-0", "00000000000000000000.log")
    cols = decode_records(open(path, "rb").read())
    out, off, _v, _n = benchmark(impl.gather, cols.data, cols.value_pos, cols.value_len)
    assert len(off) == N + 1
