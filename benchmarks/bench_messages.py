"""Decode speed of metadata records through the generated codecs.

Workloads (record values taken from ``../shared/kafka-fixtures``):

* ``mix``: every metadata record of every fixture log and checkpoint, in file
  order (8,610 records; mostly NoOpRecord, as in real logs, plus registrations,
  topics, partitions, configs);
* ``snapshot``: only the 587 records of the cp-7.6.0 snapshot (TopicRecord,
  PartitionRecord, ConfigRecord: the heavier types).

Each round decodes the whole list one record at a time into typed objects with
``decode_metadata_record(value, offset)``; records/s = records / round time.

    python -m pytest benchmarks/bench_messages.py --benchmark-only
    python benchmarks/bench_messages.py          # prints JSON (median records/s)
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests")]
from test_messages_fixtures import FIXTURES, fixture_records  # noqa: E402

import kraft_storage._pure._messages_metadata as pure_md  # noqa: E402
from kraft_storage import accel  # noqa: E402

IMPLS = {"pure": pure_md}
if accel.native_available("_messages_metadata"):
    import kraft_storage._native._messages_metadata as native_md
    IMPLS["native"] = native_md


def workloads():
    recs = [(p, o, v) for p, o, c, k, v in fixture_records() if not c]
    return {
        "mix": [(v, o) for p, o, v in recs],
        "snapshot": [(v, o) for p, o, v in recs if "cp7.6.0" in str(p)],
    }


WORKLOADS = workloads() if FIXTURES.is_dir() else {}


def decode_all(decode, records):
    for value, offset in records:
        decode(value, offset)


@pytest.mark.skipif(not WORKLOADS, reason="fixtures not present")
@pytest.mark.parametrize("workload", ["mix", "snapshot"])
@pytest.mark.parametrize("impl", list(IMPLS))
def test_decode_metadata_records(benchmark, impl, workload):
    records = WORKLOADS[workload]
    decode = IMPLS[impl].decode_metadata_record
    benchmark.extra_info["records"] = len(records)
    benchmark.pedantic(decode_all, args=(decode, records), rounds=30, warmup_rounds=2)
    benchmark.extra_info["median_records_per_s"] = len(records) / benchmark.stats.stats.median


def main():
    out = {}
    for impl, mod in IMPLS.items():
        for name, records in WORKLOADS.items():
            times = []
            for _ in range(31):
                t = time.perf_counter()
                decode_all(mod.decode_metadata_record, records)
                times.append(time.perf_counter() - t)
            out[f"{impl}/{name}"] = {"records": len(records),
                                     "median_records_per_s": round(len(records) / statistics.median(times))}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
