"""pytest-benchmark suite for the record-batch codec.

    python -m pytest benchmarks/bench_record_batch.py --benchmark-columns=median,iqr,rounds

100k records (16 B key, 100 B value, 1000 per batch) per round; the JSON
report script (record_batch_report.py) runs the 1M-record workload.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_workload as rw  # noqa: E402

N = 100_000
W = rw.Workload(N)
DATA = {c: rw.kraft_encode(W, c) for c in ("none", "zstd")}


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.benchmark(group="encode")
def test_encode_kraft(benchmark, codec):
    benchmark(rw.kraft_encode, W, codec)


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.benchmark(group="encode")
def test_encode_aiokafka(benchmark, codec):
    benchmark(rw.aiokafka_encode, W, codec)


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.benchmark(group="decode")
def test_decode_columns_kraft(benchmark, codec):
    assert benchmark(rw.kraft_decode_columns, DATA[codec]) == N


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.benchmark(group="iterate")
def test_iterate_kraft(benchmark, codec):
    benchmark(rw.kraft_iter_records, DATA[codec])


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.benchmark(group="iterate")
def test_iterate_aiokafka(benchmark, codec):
    benchmark(rw.aiokafka_iter_records, DATA[codec])


@pytest.mark.benchmark(group="iterate")
def test_iterate_kafka_python(benchmark):
    small = DATA["none"][: len(DATA["none"]) // 10]
    from kraft_storage.record import scan_batches
    small = small[: scan_batches(small, allow_partial_tail=True).end]
    benchmark(rw.kafka_python_iter_records, small)


@pytest.mark.parametrize("codec", ["none", "zstd"])
@pytest.mark.benchmark(group="encode")
def test_encode_kraft_reused_buffer(benchmark, codec):
    buf = bytearray(len(DATA[codec]) + 1024)
    benchmark(rw.kraft_encode_into, W, codec, buf)
