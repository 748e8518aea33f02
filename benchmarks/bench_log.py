"""pytest-benchmark suite of the segmented log (figures: benchmarks/log_report.py).

    python -m pytest benchmarks/bench_log.py --benchmark-only
"""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from log_workload import fill_log, make_batches  # noqa: E402

from kraft_storage.log.config import LogConfig  # noqa: E402
from kraft_storage.log.index import OffsetIndex  # noqa: E402
from kraft_storage.log.log import KafkaLog  # noqa: E402
from kraft_storage.log.segment import LogSegment  # noqa: E402


@pytest.mark.parametrize("batch_bytes", [4 << 10, 64 << 10, 1 << 20])
def test_append_page_cache(benchmark, tmp_path, batch_bytes):
    batches = make_batches(batch_bytes, 32)
    logs = []

    def setup():
        d = tmp_path / f"a{len(logs)}-0"
        logs.append(KafkaLog.open(d))
        return (logs[-1],), {}

    def run(log):
        for b in batches:
            log.append_as_leader(b, 1)
    benchmark.extra_info["bytes_per_round"] = sum(len(b) for b in batches)
    benchmark.pedantic(run, setup=setup, rounds=10)
    for lg in logs:
        lg.close_uncleanly()


@pytest.mark.parametrize("mode", ["leader", "follower", "plain_pwrite"])
def test_append_small_4k(benchmark, tmp_path, mode):
    """1024 appends of ~4 KiB batches per round (appends/s = 1024 / time), next to a
    plain pwrite loop of the same bytes."""
    from kraft_storage.record.batch import scan_batches
    batches = make_batches(4 << 10, 64) * 16
    if mode == "follower":
        src, off = [], 0
        for b in batches:  # contiguous offsets; each round continues where the last ended
            lod = int(scan_batches(b).headers["last_offset_delta"][0])
            src.append(bytearray(b))
            off += lod + 1
        step = off
    state = {"n": 0, "open": []}

    def setup():  # closing the previous round's log or fd here keeps it out of the timing
        for t in state["open"]:
            os.close(t) if isinstance(t, int) else t.close_uncleanly()
        state["open"].clear()
        state["n"] += 1
        if mode == "plain_pwrite":
            return (os.open(tmp_path / f"p{state['n']}.log", os.O_RDWR | os.O_CREAT, 0o644),), {}
        log = KafkaLog.open(tmp_path / f"s{state['n']}-0")
        # One untimed append first: the first append of an epoch writes and fsyncs the
        # leader-epoch checkpoint (once per epoch, ~ms), which is not the steady state.
        if mode == "leader":
            log.append_as_leader(batches[0], 1)
        else:  # a fresh log each round: offsets start after the untimed batch
            warm = bytearray(src[0])
            warm[0:8] = (0).to_bytes(8, "big")
            log.append_as_follower(warm)
            o = log.log_end_offset
            for b in src:
                b[0:8] = o.to_bytes(8, "big")
                o += int(scan_batches(b).headers["last_offset_delta"][0]) + 1
            assert o - log.log_end_offset == step
        return (log,), {}

    def run(target):
        state["open"].append(target)
        if mode == "plain_pwrite":
            pos = 0
            for b in batches:
                os.pwrite(target, b, pos)
                pos += len(b)
        elif mode == "leader":
            for b in batches:
                target.append_as_leader(b, 1)
        else:
            for b in src:
                target.append_as_follower(b)
    benchmark.extra_info["appends_per_round"] = len(batches)
    benchmark.pedantic(run, setup=setup, rounds=10)
    setup()


@pytest.mark.parametrize("mode", ["log_flush_messages_1", "plain_write_fdatasync"])
def test_append_fsync_per_batch(benchmark, tmp_path, mode):
    batches = make_batches(1 << 10, 16)
    if mode.startswith("log"):
        log = KafkaLog.open(tmp_path / "f-0", LogConfig(flush_messages=1))
        log.append_as_leader(batches[-1], 1)  # the epoch's one-time checkpoint fsyncs, untimed

        def run():
            for b in batches:
                log.append_as_leader(b, 1)
    else:
        fd = os.open(tmp_path / "plain.log", os.O_RDWR | os.O_CREAT, 0o644)

        def run():
            for b in batches:
                os.write(fd, b)
                os.fdatasync(fd)
    benchmark.pedantic(run, rounds=10)


@pytest.fixture(scope="module")
def filled_log(tmp_path_factory):
    d = tmp_path_factory.mktemp("read") / "r-0"
    log = fill_log(str(d), 128 << 20, 16 << 10, LogConfig(segment_bytes=32 << 20))
    yield log
    log.close_uncleanly()


def test_read_by_offset(benchmark, filled_log):
    offs = np.random.default_rng(1).integers(0, filled_log.log_end_offset, 2000).tolist()

    def run():
        for o in offs:
            filled_log.read(o, 65536).tobytes()
    benchmark(run)


@pytest.fixture(scope="module")
def big_index(tmp_path_factory):
    d = tmp_path_factory.mktemp("idx")
    n = 100_000
    idx = OffsetIndex(str(d / "00000000000000000000.index"), 0, n * 8)
    idx.append_relative(np.arange(n, dtype=np.int64) * 37, np.arange(n, dtype=np.int64) * 4096 + 1)
    yield idx
    idx.close()


def test_index_lookup_single(benchmark, big_index):
    targets = np.random.default_rng(2).integers(0, 3_700_000, 100_000).tolist()
    lookup = big_index.lookup

    def run():
        for t in targets:
            lookup(t)
    benchmark(run)


def test_index_lookup_batched(benchmark, big_index):
    targets = np.random.default_rng(3).integers(0, 3_700_000, 1_000_000).astype(np.int64)
    benchmark(big_index.lookup_many, targets)


def test_index_lookup_batched_into(benchmark, big_index):
    """The kernel alone: output arrays preallocated (no page faults per call)."""
    targets = np.random.default_rng(3).integers(0, 3_700_000, 1_000_000).astype(np.int64)
    out_o = np.empty(len(targets), np.int64)
    out_p = np.empty(len(targets), np.int64)
    benchmark(big_index.lookup_many_into, targets, out_o, out_p)


def test_recovery_scan(benchmark, tmp_path):
    d = str(tmp_path / "c-0")
    gib = float(os.environ.get("KRAFT_BENCH_RECOVERY_GIB", "0.25"))
    log = fill_log(d, int(gib * (1 << 30)), 64 << 10, LogConfig(segment_bytes=2 << 30))
    size = log.active_segment.size
    log.close_uncleanly()

    def run():
        s = LogSegment(d, 0, index_interval_bytes=4096, max_index_size=10 << 20)
        rep = s.recover()
        s.close()
        assert rep.valid_bytes == size
    benchmark.extra_info["segment_bytes"] = size
    benchmark.pedantic(run, rounds=3)
