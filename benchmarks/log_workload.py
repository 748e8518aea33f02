"""Shared workloads of the segmented-log benchmarks (bench_log.py, log_report.py)."""
from __future__ import annotations

import os

import numpy as np

from kraft_storage.log.config import LogConfig
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batches


def make_batches(batch_bytes: int, n_batches: int, record_bytes: int = 1000) -> list[bytes]:
    """``n_batches`` uncompressed batches of about ``batch_bytes`` each."""
    per = max(batch_bytes // (record_bytes + 10), 1)
    n = per * n_batches
    vals = np.frombuffer(os.urandom(record_bytes) * 1, dtype=np.uint8)
    values = np.tile(vals, n)
    offs = np.arange(n + 1, dtype=np.int64) * record_bytes
    buf, pos = _build(values, offs, per)
    return [bytes(buf[pos[i]:pos[i + 1]]) for i in range(len(pos) - 1)]


def _build(values, offs, per):
    buf, positions = build_batches((values, offs), records_per_batch=per, return_positions=True)
    pos = [int(p) for p in positions] + [len(buf)]
    return memoryview(buf), pos


def fill_log(d: str, total_bytes: int, batch_bytes: int, cfg: LogConfig | None = None) -> KafkaLog:
    log = KafkaLog.open(d, cfg or LogConfig())
    batches = make_batches(batch_bytes, 64)
    written = 0
    i = 0
    while written < total_bytes:
        b = batches[i % len(batches)]
        log.append_as_leader(b, 1)
        written += len(b)
        i += 1
    return log
