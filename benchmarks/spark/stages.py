"""Replay stages measured by the Spark/replay benchmarks (no Spark imported here).

A *stage* is a function ``stage(path) -> records`` that reads every Kafka
file under ``path`` and does one level of decoding:

* ``framing``   -- batch scan (CRC-checked) + record framing into columns
  (``scan_batches`` + ``decode_record_columns``), in chunks as the reader does.
* ``frames``    -- framing + the metadata frame of every record (record type
  and version columns, ``_frame.read_frames``).
* ``arrow``     -- the whole Spark row: every column, as Arrow batches
  (``kraft_storage.spark.reader.read_arrow``).
* ``arrow_replay`` -- the columns a replay needs (offset, timestamp, leader
  epoch, record type, version, value) as Arrow batches.
* ``columns``   -- frames + every metadata body decoded into columns, one
  table per record type (``kraft_storage.messages.columns.decode_bodies``):
  the native "bodies decoded into columns" stage, end to end from the files.
* ``arrow_columns`` -- the whole Spark row with ``fields="columns"`` (every
  column plus one struct column per record type) as Arrow batches: what the
  Spark source hands to the JVM.
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

import numpy as np

from kraft_storage.messages import columns as _mc
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.spark import reader as kr
from kraft_storage.spark.files import find_files

REPLAY_COLUMNS = ("offset", "timestamp", "partition_leader_epoch", "record_type", "record_version", "value")
#: fields="columns" replay: the record's place and type plus its decoded body (one struct column per
#: type) instead of the raw value -- the same information the native ``columns`` stage produces.
COLUMNS_REPLAY = ("offset", "timestamp", "partition_leader_epoch", "record_type", "record_version")


def log_bytes(path: str) -> int:
    return sum(f.size for f in find_files(path))


def _mapped(path: str):
    for f in find_files(path):
        if f.size == 0:
            continue
        with open(f.path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        yield f.path, mm


def _chunked(path: str, with_frames: bool, with_bodies: bool = False) -> int:
    n = 0
    for _name, mm in _mapped(path):
        headers = scan_batches(mm).headers
        for a, b in kr._chunks(headers, kr.DEFAULT_BATCH_ROWS):
            cols = decode_record_columns(mm, headers[a:b])
            if with_frames:
                fr = kr.read_frame_columns(cols)
                if with_bodies:
                    tables = _mc.decode_bodies(cols.data, fr.body_pos, cols.value_pos + np.maximum(cols.value_len, 0),
                                               fr.api_key, fr.version, offsets=cols.offset)
                    del tables
                del fr
            n += len(cols)
        del cols, headers
        mm.close()
    return n


def framing(path: str) -> int:
    return _chunked(path, False)


def frames(path: str) -> int:
    return _chunked(path, True)


def columns(path: str) -> int:
    return _chunked(path, True, True)


def arrow_columns(path: str) -> int:
    return sum(b.num_rows for b in kr.read_arrow(path, kr.ReadOptions(fields="columns")))


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


STAGES = {"framing": framing, "frames": frames, "columns": columns, "arrow": arrow, "arrow_replay": arrow_replay,
          "arrow_columns": arrow_columns}


def implementation() -> str:
    from kraft_storage import accel
    return "native" if accel.WANT_NATIVE and not accel.FALLBACKS else "pure"


def environment() -> dict:
    return {"cpus": os.cpu_count(), "loadavg": os.getloadavg()}
