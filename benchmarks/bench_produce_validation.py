"""Produce validation throughput: kraft's LogValidator (+ the producer-state check) on 1 MiB requests.

Run:  python benchmarks/bench_produce_validation.py [--rounds 30] [--json out.json]

One partition's data as a Produce request carries it: one v2 batch of ~1 MiB of 100-byte
records (values of random hex text, so zstd compresses them about 2x, no keys), uncompressed
and zstd, idempotent (producer id and sequence set).  Cases:

* ``create-time``: the topic's default; the batch passes untouched (zero copy);
* ``log-append-time``: the header is rewritten (type bit, maxTimestamp) and the CRC recomputed
  over the batch (one copy of the request);
* ``create-time+producer-state``: the validator and ProducerStateManager.check_leader_append, as
  the leader runs them per partition before the append.

Figures: median of ``--rounds`` timed calls after warm-up; records/s, GB/s of request bytes
(what the broker received) and GB/s of record bytes (decompressed, for zstd).  The validator
decompresses a zstd batch to check its records (as Kafka does) but never recompresses it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _support import code_version, emit_json  # noqa: E402

from kraft_node.broker.log.producer_state import ProducerStateManager  # noqa: E402
from kraft_node.broker.log.validator import ValidationConfig, validate_produce_records  # noqa: E402
from kraft_storage.crc32c import impl as crc_impl  # noqa: E402
from kraft_storage.record import Compression, TimestampType, build_batch  # noqa: E402

REQUEST_BYTES = 1 << 20
VALUE_BYTES = 100
NOW = 1_700_000_000_000


def make_batch(codec: Compression) -> tuple[bytes, int, int]:
    """(batch bytes, records, uncompressed record bytes): ~1 MiB of records before compression."""
    per_record = VALUE_BYTES + 8  # length, attributes, deltas, key/value lengths, headers count
    n = (REQUEST_BYTES - 61) // per_record
    values = [os.urandom(VALUE_BYTES // 2).hex().encode() for _ in range(n)]
    data = build_batch([(None, v) for v in values], timestamp=NOW, compression=codec, producer_id=1000,
                       producer_epoch=0, base_sequence=0)
    plain = build_batch([(None, v) for v in values], timestamp=NOW) if codec else data
    return data, n, len(plain) - 61


def measure(fn, rounds: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", default=None, help="also write the JSON document here")
    args = ap.parse_args()
    create = ValidationConfig(max_message_bytes=2 * REQUEST_BYTES)
    lat = ValidationConfig(max_message_bytes=2 * REQUEST_BYTES, timestamp_type=TimestampType.LOG_APPEND_TIME)
    rows = []
    tmp = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench-produce-validation-{os.getpid()}")
    os.makedirs(tmp, exist_ok=True)
    psm = ProducerStateManager(tmp, "bench-0")
    for codec in (Compression.NONE, Compression.ZSTD):
        data, n, raw = make_batch(codec)

        def v_create(data: bytes = data) -> object:
            return validate_produce_records(data, topic_partition="bench-0", config=create, now_ms=NOW)

        def v_lat(data: bytes = data) -> object:
            return validate_produce_records(data, topic_partition="bench-0", config=lat, now_ms=NOW)

        def v_psm(data: bytes = data) -> object:
            r = validate_produce_records(data, topic_partition="bench-0", config=create, now_ms=NOW)
            return psm.check_leader_append(r, 0)

        for case, fn in (("create-time", v_create), ("log-append-time", v_lat),
                         ("create-time+producer-state", v_psm)):
            s = measure(fn, args.rounds)
            rows.append({"codec": codec.name.lower(), "case": case, "records": n, "request_bytes": len(data),
                         "record_bytes": raw, "median_ms": round(s * 1000, 3),
                         "records_per_s": round(n / s), "request_gb_per_s": round(len(data) / s / 1e9, 3),
                         "record_gb_per_s": round(raw / s / 1e9, 3)})
    os.rmdir(tmp)
    emit_json({"benchmark": "produce_validation", "crc32c": crc_impl(), "rounds": args.rounds,
               "code": code_version(), "rows": rows}, args.json)


if __name__ == "__main__":
    main()
