"""Record-batch codec benchmark: kraft vs aiokafka (Cython) vs kafka-python, one process.

    python benchmarks/record_batch_report.py [--records 1000000] [--repeat 5]

Prints JSON: for each codec (none, zstd) and operation, the median seconds
and records/s of each contender, and the ratios kraft/aiokafka.  kafka-python
and the pure twin are measured on a smaller slice (``--slow-records``) and
reported in records/s, since they are 50-100x slower.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import record_workload as rw  # noqa: E402


def median_time(fn, repeat: int) -> float:
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--slow-records", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()

    import kraft_storage._pure._batch as pure
    from kraft_storage.crc32c import impl as crc_impl
    from kraft_storage.record import batch as _b

    w = rw.Workload(args.records)
    ws = rw.Workload(args.slow_records)
    out = {"load_average_before": os.getloadavg(), "records": args.records, "slow_records": args.slow_records,
           "repeat": args.repeat, "kraft_kernels": _b._k.__name__, "crc32c": crc_impl(), "results": {}}
    for codec in ("none", "zstd"):
        res = {}
        data = rw.kraft_encode(w, codec)
        data_slow = rw.kraft_encode(ws, codec)
        res["bytes"] = len(data)

        def rate(fn, n, repeat=args.repeat):
            t = median_time(fn, repeat)
            return {"median_s": round(t, 5), "records_per_s": round(n / t)}

        reuse = bytearray(len(data) + 1024)
        res["encode"] = {
            "kraft": rate(lambda: rw.kraft_encode(w, codec), w.n),
            "kraft_reused_buffer": rate(lambda: rw.kraft_encode_into(w, codec, reuse), w.n),
            "aiokafka": rate(lambda: rw.aiokafka_encode(w, codec), w.n),
            "kafka_python": rate(lambda: rw.kafka_python_encode(ws, codec), ws.n, 3),
            "kraft_pure": rate(lambda: rw.kraft_encode(ws, codec, pure), ws.n, 3),
        }
        holder = [None]
        res["decode_columnar_crc"] = {
            "kraft": rate(lambda: rw.kraft_decode_columns(data), w.n),
            "kraft_reused_columns": rate(lambda: rw.kraft_decode_columns_reused(data, holder), w.n),
            "kraft_pure": rate(lambda: rw.kraft_decode_columns(data_slow, pure), ws.n, 3),
        }
        res["iterate_records_crc"] = {
            "kraft": rate(lambda: rw.kraft_iter_records(data), w.n),
            "aiokafka": rate(lambda: rw.aiokafka_iter_records(data), w.n),
            "kafka_python": rate(lambda: rw.kafka_python_iter_records(data_slow), ws.n, 3),
        }
        a = res["encode"]["aiokafka"]["records_per_s"]
        ai = res["iterate_records_crc"]["aiokafka"]["records_per_s"]
        res["ratios_vs_aiokafka"] = {
            "encode": round(res["encode"]["kraft"]["records_per_s"] / a, 2),
            "encode_reused_buffer": round(res["encode"]["kraft_reused_buffer"]["records_per_s"] / a, 2),
            "decode_columnar_reused_vs_aiokafka_iterate": round(
                res["decode_columnar_crc"]["kraft_reused_columns"]["records_per_s"] / ai, 2),
            "decode_columnar_vs_aiokafka_iterate": round(
                res["decode_columnar_crc"]["kraft"]["records_per_s"] / ai, 2),
            "iterate_records": round(res["iterate_records_crc"]["kraft"]["records_per_s"] / ai, 2),
        }
        out["results"][codec] = res
    out["load_average_after"] = os.getloadavg()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
