"""Replay stages measured by the Spark/replay benchmarks (no Spark imported here).

A *stage* is a function ``stage(path) -> records`` that reads every Kafka
file under ``path`` and does one level of decoding:

* ``framing``   -- batch scan (CRC-checked) + record framing into columns
  (``scan_batches`` + ``decode_batches``), in chunks as the reader does.
* ``frames``    -- framing + the metadata frame of every record (record type
  and version columns, ``_frame.read_frames``).
* ``arrow``     -- the whole Spark row: every column, as Arrow batches
  (``kraft_storage.spark.reader.read_arrow``).
* ``arrow_replay`` -- the columns a replay needs (offset, timestamp, leader
  epoch, record type, version, value) as Arrow batches.
* ``apply``     -- image apply: the other half of replay.  It arrives with the
  MetadataImage issue; pass ``--apply module:factory`` to the report script,
  where ``factory()`` returns an object with ``apply(batch: pyarrow.RecordBatch)``
  (and optionally ``finish()``); it is fed the ``arrow_replay`` batches and
  timed end to end.  Nothing is measured for it until then.

The implementation (native kernels or pure-Python twins) is the process's:
run with ``KRAFT_NO_EXTENSIONS=1`` for the twins.
"""
from __future__ import annotations

import importlib
import mmap
import os

from kraft_storage.record import decode_batches, scan_batches
from kraft_storage.spark import reader as kr
from kraft_storage.spark.files import find_files

REPLAY_COLUMNS = ("offset", "timestamp", "partition_leader_epoch", "record_type", "record_version", "value")


def log_bytes(path: str) -> int:
    return sum(f.size for f in find_files(path))


def _mapped(path: str):
    for f in find_files(path):
        if f.size == 0:
            continue
        with open(f.path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        yield f.path, mm


def _chunked(path: str, with_frames: bool) -> int:
    n = 0
    for _name, mm in _mapped(path):
        headers = scan_batches(mm).headers
        for a, b in kr._chunks(headers, kr.DEFAULT_BATCH_ROWS):
            cols = decode_batches(mm, headers[a:b])
            if with_frames:
                kr.read_frame_columns(cols)
            n += len(cols)
        del cols, headers
        mm.close()
    return n


def framing(path: str) -> int:
    return _chunked(path, False)


def frames(path: str) -> int:
    return _chunked(path, True)


def arrow(path: str) -> int:
    return sum(b.num_rows for b in kr.read_arrow(path))


def arrow_replay(path: str) -> int:
    return sum(b.num_rows for b in kr.read_arrow(path, kr.ReadOptions(columns=REPLAY_COLUMNS)))


def load_apply(spec: str):
    """``module:factory`` -> a callable stage feeding replay batches to ``factory()``."""
    mod, _, attr = spec.partition(":")
    factory = getattr(importlib.import_module(mod), attr or "make_applier")

    def apply(path: str) -> int:
        target = factory()
        n = 0
        for b in kr.read_arrow(path, kr.ReadOptions(columns=REPLAY_COLUMNS)):
            target.apply(b)
            n += b.num_rows
        finish = getattr(target, "finish", None)
        if finish is not None:
            finish()
        return n
    return apply


STAGES = {"framing": framing, "frames": frames, "arrow": arrow, "arrow_replay": arrow_replay}


def implementation() -> str:
    from kraft_storage import _accel
    return "native" if _accel.WANT_NATIVE and not _accel.FALLBACKS else "pure"


def environment() -> dict:
    return {"cpus": os.cpu_count(), "loadavg": os.getloadavg()}
