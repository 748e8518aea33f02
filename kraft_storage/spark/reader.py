"""Decoding a split of a Kafka file into Arrow record batches (the executor's hot path).

One row per record.  Everything is computed on whole columns: the native
batch scanner (CRC-checked) and record decoder give numpy columns, the
``_frame`` kernel reads every metadata frame header and gathers keys and
values into Arrow's binary layout, batch fields are ``take``-n from the
batch header rows, and the arrays are handed to pyarrow without a Python
object per record.  The only per-record Python path is the optional JSON
``fields`` column (``fields="json"``), which runs the generated codecs.

This module needs pyarrow, not pyspark: the Spark data source
(:mod:`kraft_storage.spark.datasource`) calls :func:`read_split` in its
executors, and the single-process reader / benchmarks call it directly, so
both produce byte-identical batches.

Columns (``SCHEMA_DDL``; all nullable; ``-1``-style "none" values of Kafka's
batch header are kept as Kafka writes them):

=======================  ========  =============================================
file                     string    the file the record came from
batch_position           long      byte position of its batch in the file
offset                   long      the record's offset
timestamp                long      epoch ms (create or log-append time)
batch_base_offset        long      batch header fields ...
batch_last_offset        long
partition_leader_epoch   int
producer_id              long
producer_epoch           short
base_sequence            int
compression              string    none, gzip, snappy, lz4, zstd
timestamp_type           string    CreateTime / LogAppendTime
is_transactional         boolean
is_control               boolean
key                      binary    null for a null key
value                    binary
record_type              short     metadata apiKey (null: control/not a frame)
record_version           short     metadata record version
record_type_name         string    e.g. PartitionChangeRecord, or the control
                                   type (LEADER_CHANGE, SNAPSHOT_HEADER, ...)
control_type             short     control records' type (null otherwise)
fields                   string    JSON of the decoded body (fields="json")
<type>_record ...        struct    with ``fields="columns"`` only: one column per
                                   metadata record type (``topic_record``,
                                   ``partition_change_record``, ... 26 of them;
                                   ``TYPE_COLUMNS``), the decoded body of rows
                                   of that type, null for every other row
=======================  ========  =============================================

``fields="columns"`` decodes bodies with the generated columnar decoder
(:mod:`kraft_storage.messages.columns`): struct fields are the schema fields
in snake case, arrays are Arrow lists (arrays of structs: lists of structs),
Uuids are 16-byte binaries, uint16 ports are ints (Spark has no unsigned or
fixed-size binary types).  Rows then come grouped by record type inside each
chunk of ``batch_rows`` records (one Arrow batch per type present, in offset
order within it; then the rows that are not metadata records): each batch
carries one real struct column and nulls in the others, which is what
keeps the cost down -- every null struct column still ships its (zeroed)
child buffers to the JVM (Arrow IPC), 466 bytes per row for all 26 types, so
``column_types`` (option ``columnTypes``) keeps only the types you need.
Order by ``offset`` when log order matters.
"""
from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from kraft_storage.accel import load
from kraft_storage.errors import CorruptRecordError
from kraft_storage.messages import columns as _mc
from kraft_storage.messages.control import ControlRecordType
from kraft_storage.messages.metadata import METADATA_RECORD_TYPES, decode_metadata_record
from kraft_storage.messages.runtime import MessageError
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.spark.files import NO_OFFSET_LIMIT, Split, plan_splits

_f = load("_frame")

SCHEMA_FIELDS: list[tuple[str, pa.DataType, str]] = [
    ("file", pa.string(), "STRING"),
    ("batch_position", pa.int64(), "LONG"),
    ("offset", pa.int64(), "LONG"),
    ("timestamp", pa.int64(), "LONG"),
    ("batch_base_offset", pa.int64(), "LONG"),
    ("batch_last_offset", pa.int64(), "LONG"),
    ("partition_leader_epoch", pa.int32(), "INT"),
    ("producer_id", pa.int64(), "LONG"),
    ("producer_epoch", pa.int16(), "SHORT"),
    ("base_sequence", pa.int32(), "INT"),
    ("compression", pa.string(), "STRING"),
    ("timestamp_type", pa.string(), "STRING"),
    ("is_transactional", pa.bool_(), "BOOLEAN"),
    ("is_control", pa.bool_(), "BOOLEAN"),
    ("key", pa.binary(), "BINARY"),
    ("value", pa.binary(), "BINARY"),
    ("record_type", pa.int16(), "SHORT"),
    ("record_version", pa.int16(), "SHORT"),
    ("record_type_name", pa.string(), "STRING"),
    ("control_type", pa.int16(), "SHORT"),
    ("fields", pa.string(), "STRING"),
]
SCHEMA_DDL = ", ".join(f"{n} {ddl}" for n, _t, ddl in SCHEMA_FIELDS)
_FIELD_TYPES = {n: t for n, t, _d in SCHEMA_FIELDS}
ARROW_SCHEMA = pa.schema([pa.field(n, t, nullable=True) for n, t, _d in SCHEMA_FIELDS])

#: fields="columns": (column name, apiKey, Arrow struct type as Spark reads it), by apiKey.
TYPE_COLUMNS: list[tuple[str, int, pa.DataType]] = [
    (_mc.type_column_name(k), k, _mc.arrow_type(k, spark=True)) for k in sorted(_mc.LAYOUTS)]
_TYPE_COLUMN_TYPES = {n: t for n, _k, t in TYPE_COLUMNS}
_TYPE_COLUMN_KEYS = {n: k for n, k, _t in TYPE_COLUMNS}
_ALL_TYPES = {**_FIELD_TYPES, **_TYPE_COLUMN_TYPES}
_TYPE_NAME_KEYS = {_mc.LAYOUTS[k][0]: k for k in _mc.LAYOUTS}


def parse_column_types(spec) -> tuple[int, ...] | None:
    """``"PartitionChangeRecord,topic_record,2"`` -> apiKeys (type names, column names or numbers)."""
    if spec is None or spec == "":
        return None
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    out = []
    for it in items:
        it = str(it).strip()
        if it.lstrip("-").isdigit() and int(it) in _mc.LAYOUTS:
            out.append(int(it))
        elif it in _TYPE_NAME_KEYS:
            out.append(_TYPE_NAME_KEYS[it])
        elif it in _TYPE_COLUMN_KEYS:
            out.append(_TYPE_COLUMN_KEYS[it])
        else:
            raise ValueError(f"unknown metadata record type {it!r} in columnTypes; the types are "
                             f"{sorted(_TYPE_NAME_KEYS)}")
    return tuple(sorted(set(out)))


_COMPRESSION_NAMES = pa.array(["none", "gzip", "snappy", "lz4", "zstd", "unknown5", "unknown6", "unknown7"])
_TS_TYPE_NAMES = pa.array(["CreateTime", "LogAppendTime"])
_MAX_KEY = max(METADATA_RECORD_TYPES)
_CONTROL_BASE = _MAX_KEY + 1
_N_CONTROL = max(ControlRecordType) + 1
#: Index i < _CONTROL_BASE: metadata apiKey i; then the control types.
_TYPE_NAMES = pa.array([METADATA_RECORD_TYPES[k].NAME if k in METADATA_RECORD_TYPES else None
                        for k in range(_CONTROL_BASE)]
                       + [ControlRecordType(c).name for c in range(_N_CONTROL)])
_NOOP_KEY = next(k for k, c in METADATA_RECORD_TYPES.items() if c.NAME == "NoOpRecord")

DEFAULT_BATCH_ROWS = 1 << 17


def spark_schema(fields: str = "none", column_types: tuple[int, ...] | None = None):
    """The schema as a pyspark StructType (imports pyspark); ``fields="columns"`` adds the type columns."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import from_arrow_type
    kinds = {"STRING": T.StringType, "LONG": T.LongType, "INT": T.IntegerType, "SHORT": T.ShortType,
             "BOOLEAN": T.BooleanType, "BINARY": T.BinaryType}
    out = [T.StructField(n, kinds[d](), True) for n, _t, d in SCHEMA_FIELDS]
    if fields == "columns":
        out += [T.StructField(n, from_arrow_type(t), True) for n, k, t in TYPE_COLUMNS
                if column_types is None or k in column_types]
    return T.StructType(out)


@dataclass
class ReadOptions:
    """What to decode and keep.  Offsets filters are inclusive bounds plus an optional set."""
    verify_crc: bool = True
    fields: str = "none"                 # "none", "json" or "columns"
    batch_rows: int = DEFAULT_BATCH_ROWS
    min_offset: int | None = None
    max_offset: int | None = None
    offset_in: tuple[int, ...] | None = None
    record_types: tuple[int, ...] | None = None  # keep only these apiKeys
    allow_partial_tail: bool = False
    columns: tuple[str, ...] | None = None       # a subset of the schema's columns, in output order
    column_types: tuple[int, ...] | None = None  # fields="columns": only these apiKeys' type columns

    def __post_init__(self):
        if self.fields not in ("none", "json", "columns"):
            raise ValueError(f"fields must be 'none', 'json' or 'columns', not {self.fields!r}")
        if self.batch_rows <= 0:
            raise ValueError("batch_rows must be positive")
        if self.column_types is not None:
            self.column_types = parse_column_types(self.column_types)
        if self.columns is not None:
            allowed = self._all_names()
            unknown = [c for c in self.columns if c not in allowed]
            if unknown:
                hint = ("" if self.fields == "columns" or not any(c in _TYPE_COLUMN_TYPES for c in unknown)
                        else " (record type columns need fields='columns')")
                raise ValueError(f"unknown column(s) {unknown}{hint}; the kraft columns are {list(allowed)}")
            self.columns = tuple(self.columns)

    def _all_names(self) -> tuple[str, ...]:
        names = tuple(_FIELD_TYPES)
        if self.fields == "columns":
            names += tuple(n for n, k, _t in TYPE_COLUMNS if self.column_types is None or k in self.column_types)
        return names

    def column_names(self) -> tuple[str, ...]:
        return self._all_names() if self.columns is None else self.columns

    def type_columns(self) -> list[tuple[str, int]]:
        """(name, apiKey) of the record type columns in the output (fields="columns")."""
        if self.fields != "columns":
            return []
        return [(c, _TYPE_COLUMN_KEYS[c]) for c in self.column_names() if c in _TYPE_COLUMN_KEYS]

    def arrow_schema(self) -> pa.Schema:
        if self.columns is None and self.fields != "columns":
            return ARROW_SCHEMA
        return pa.schema([pa.field(c, _ALL_TYPES[c], nullable=True) for c in self.column_names()])

    def bounds(self) -> tuple[int, int]:
        lo = -(2**63) if self.min_offset is None else self.min_offset
        hi = NO_OFFSET_LIMIT if self.max_offset is None else self.max_offset
        if self.offset_in is not None:
            if not self.offset_in:
                return 1, 0
            lo, hi = max(lo, min(self.offset_in)), min(hi, max(self.offset_in))
        return lo, hi


@dataclass
class FrameColumns:
    """The metadata frame of every record (-1 where a record is not a metadata frame)."""
    api_key: np.ndarray
    version: np.ndarray
    body_pos: np.ndarray
    control_type: np.ndarray
    frames: int = 0
    extra: dict = field(default_factory=dict)


def read_frame_columns(cols) -> FrameColumns:
    """Frame headers of metadata records and control types of control records, vectorized."""
    n = len(cols)
    k = np.empty(n, np.int16)
    v = np.empty(n, np.int16)
    b = np.empty(n, np.int64)
    good = _f.read_frames(cols.data, cols.value_pos, cols.value_len, k, v, b)
    ctl = (cols.batches["attributes"][cols.batch] & 0x20) != 0
    ctype = np.full(n, -1, np.int16)
    if ctl.any():
        k[ctl] = -1
        v[ctl] = -1
        b[ctl] = -1
        ok = ctl & (cols.key_len >= 4)
        if ok.any():
            raw = np.frombuffer(memoryview(cols.data).cast("B"), np.uint8)
            kp = cols.key_pos[ok]
            ctype[ok] = (raw[kp + 2].astype(np.int16) << 8) | raw[kp + 3]
        good = int((k >= 0).sum())
    return FrameColumns(k, v, b, ctype, good)


def _binary(data, pos, length) -> pa.Array:
    out, off, valid, nulls = _f.gather(data, pos, length)
    return pa.Array.from_buffers(pa.binary(), len(off) - 1,
                                 [None if valid is None else pa.py_buffer(valid),
                                  pa.py_buffer(off), pa.py_buffer(out)], null_count=nulls)


def _masked(a: np.ndarray) -> pa.Array:
    bad = a < 0
    return pa.array(a, mask=bad) if bad.any() else pa.array(a)


def _fields_json(cols, frames: FrameColumns, rows: np.ndarray, source: str) -> pa.Array:
    """JSON of each metadata body (per-record Python: the only slow column, opt-in)."""
    mv = memoryview(cols.data).cast("B")
    out: list = []
    append = out.append
    k_all, pos_all, len_all = frames.api_key, cols.value_pos, cols.value_len
    for i in rows.tolist():
        k = int(k_all[i])
        if k < 0:
            append(None)
            continue
        p, n = int(pos_all[i]), int(len_all[i])
        if k == _NOOP_KEY and n == 4 and mv[p + 3] == 0:  # NoOpRecord: no fields, no tags
            append("{}")
            continue
        if k not in METADATA_RECORD_TYPES:
            append(None)
            continue
        try:
            key, ver, msg = decode_metadata_record(mv[p:p + n], int(cols.offset[i]))
        except MessageError as exc:
            raise CorruptRecordError(f"metadata record body does not decode: {exc}",
                                     int(cols.batches["position"][cols.batch[i]]),
                                     int(cols.offset[i]), source) from None
        append(json.dumps(msg.to_dict(ver), separators=(",", ":")))
    return pa.array(out, pa.string())


def _null_column(name: str, n: int) -> pa.Array:
    """An all-null type column of length n.

    Built fresh rather than sliced from a cached longer one: Arrow's IPC
    writer ships a sliced list's whole child arrays, which doubled the bytes
    sent to the JVM.
    """
    return pa.nulls(n, _TYPE_COLUMN_TYPES[name])


def columns_to_arrow(cols, frames: FrameColumns, file_name: str, options: ReadOptions,
                     rows: np.ndarray | None = None, source: str | None = None,
                     type_arrays: dict | None = None) -> pa.RecordBatch:
    """One Arrow batch from decoded columns (``rows`` selects records, None = all).

    Only the columns in ``options.columns`` are built (all by default): a
    narrow schema skips the gathers and takes it does not need.  Record type
    columns (fields="columns") come from ``type_arrays`` (name -> array of
    the selected rows); the others are null.
    """
    def sel(a):
        return a if rows is None else a[rows]

    hb = cols.batches
    bidx = sel(cols.batch)
    n = len(bidx)
    cache: dict = {}

    def attrs():
        if "a" not in cache:
            cache["a"] = hb["attributes"][bidx]
        return cache["a"]

    def hcol(name):
        return hb[name][bidx]

    def type_names():
        api_key, ctype = sel(frames.api_key), sel(frames.control_type)
        idx = np.where(api_key >= 0, api_key.astype(np.int32),
                       np.where(ctype >= 0, ctype.astype(np.int32) + _CONTROL_BASE, -1))
        idx[idx >= len(_TYPE_NAMES)] = -1
        return _TYPE_NAMES.take(_masked(idx))

    def fields():
        if options.fields != "json":
            return pa.nulls(n, pa.string())
        return _fields_json(cols, frames, np.arange(len(cols)) if rows is None else rows,
                            source or file_name)

    build = {
        "file": lambda: pa.repeat(pa.scalar(file_name, pa.string()), n),
        "batch_position": lambda: pa.array(hcol("position")),
        "offset": lambda: pa.array(sel(cols.offset)),
        "timestamp": lambda: pa.array(sel(cols.timestamp)),
        "batch_base_offset": lambda: pa.array(hcol("base_offset")),
        "batch_last_offset": lambda: pa.array(hcol("base_offset") + hcol("last_offset_delta")),
        "partition_leader_epoch": lambda: pa.array(hcol("partition_leader_epoch")),
        "producer_id": lambda: pa.array(hcol("producer_id")),
        "producer_epoch": lambda: pa.array(hcol("producer_epoch")),
        "base_sequence": lambda: pa.array(hcol("base_sequence")),
        "compression": lambda: _COMPRESSION_NAMES.take(pa.array(attrs() & 7)),
        "timestamp_type": lambda: _TS_TYPE_NAMES.take(pa.array((attrs() >> 3) & 1)),
        "is_transactional": lambda: pa.array((attrs() & 0x10) != 0),
        "is_control": lambda: pa.array((attrs() & 0x20) != 0),
        "key": lambda: _binary(cols.data, sel(cols.key_pos), sel(cols.key_len)),
        "value": lambda: _binary(cols.data, sel(cols.value_pos), sel(cols.value_len)),
        "record_type": lambda: _masked(sel(frames.api_key)),
        "record_version": lambda: _masked(sel(frames.version)),
        "record_type_name": type_names,
        "control_type": lambda: _masked(sel(frames.control_type)),
        "fields": fields,
    }
    names = options.column_names()
    type_arrays = type_arrays or {}
    arrays = []
    for c in names:
        if c in build:
            arrays.append(build[c]())
        else:
            arr = type_arrays.get(c)
            arrays.append(_null_column(c, n) if arr is None else arr)
    return pa.RecordBatch.from_arrays(arrays, schema=options.arrow_schema())


def _record_position(cols, offset) -> int:
    hit = np.flatnonzero(cols.offset == offset) if offset is not None else ()
    return int(cols.batches["position"][cols.batch[hit[0]]]) if len(hit) else -1


def columns_batches(cols, frames: FrameColumns, file_name: str, options: ReadOptions,
                    rows: np.ndarray | None = None, source: str | None = None):
    """fields="columns": one Arrow batch per record type present in ``rows``, then the other rows.

    Each type's batch holds that type's decoded bodies as its struct column
    (no scatter into a full-length column: see the module doc for why).
    """
    wanted = options.type_columns()
    if not wanted:
        yield columns_to_arrow(cols, frames, file_name, options, rows, source)
        return
    names = {k: n for n, k in wanted}
    end = cols.value_pos + np.maximum(cols.value_len, 0)
    try:
        dec = _mc.decode_bodies(cols.data, frames.body_pos, end, frames.api_key, frames.version,
                                rows=rows, offsets=cols.offset, types=set(names))
    except MessageError as exc:
        raise CorruptRecordError(str(exc), _record_position(cols, exc.offset), exc.offset,
                                 source or file_name) from None
    left = np.zeros(len(cols), bool)
    left[slice(None) if rows is None else rows] = True
    for t in dec:
        left[t.rows] = False
        yield columns_to_arrow(cols, frames, file_name, options, t.rows, source,
                               {names[t.api_key]: t.to_arrow(spark=True)})
    rest = np.flatnonzero(left)
    if len(rest):
        yield columns_to_arrow(cols, frames, file_name, options, None if len(rest) == len(cols) else rest, source)


def _row_filter(cols, frames: FrameColumns | None, options: ReadOptions) -> np.ndarray | None:
    lo, hi = options.bounds()
    mask = None
    off = cols.offset
    if lo > -(2**63) or hi < NO_OFFSET_LIMIT:
        mask = (off >= lo) & (off <= hi)
    if options.offset_in is not None:
        m = np.isin(off, np.asarray(options.offset_in, np.int64))
        mask = m if mask is None else mask & m
    if options.record_types is not None and frames is not None:
        m = np.isin(frames.api_key, np.asarray(options.record_types, np.int16))
        mask = m if mask is None else mask & m
    if mask is None or mask.all():
        return None
    return np.flatnonzero(mask)


def _chunks(headers: np.ndarray, batch_rows: int):
    """[a, b) ranges of batch rows holding about ``batch_rows`` records each."""
    counts = np.cumsum(headers["records_count"].astype(np.int64))
    a = 0
    nb = len(headers)
    while a < nb:
        before = counts[a - 1] if a else 0
        b = int(np.searchsorted(counts, before + batch_rows, side="right"))
        b = max(b, a + 1)
        yield a, min(b, nb)
        a = b


def read_buffer(buf, file_name: str, options: ReadOptions, start: int = 0, end: int | None = None,
                source: str | None = None):
    """Yield Arrow batches for the records in ``buf[start:end]``."""
    source = source or file_name
    scan = scan_batches(buf, start, end, verify_crc=options.verify_crc,
                        allow_partial_tail=options.allow_partial_tail, source=source)
    headers = scan.headers
    lo, hi = options.bounds()
    if lo > -(2**63) or hi < NO_OFFSET_LIMIT:  # drop whole batches outside the range first
        last = headers["base_offset"] + headers["last_offset_delta"]
        headers = headers[(last >= lo) & (headers["base_offset"] <= hi)]
    for a, b in _chunks(headers, options.batch_rows):
        cols = decode_record_columns(buf, headers[a:b], source=source)
        if not len(cols):
            continue
        frames = read_frame_columns(cols)
        rows = _row_filter(cols, frames, options)
        if rows is not None and not len(rows):
            continue
        if options.fields == "columns":
            yield from columns_batches(cols, frames, file_name, options, rows, source)
        else:
            yield columns_to_arrow(cols, frames, file_name, options, rows, source)


def read_split(split: Split, options: ReadOptions | None = None):
    """Yield Arrow batches for one split (the body of a Spark task)."""
    options = options or ReadOptions()
    lo, hi = options.bounds()
    if split.max_offset < lo or split.min_offset > hi or split.end <= split.start:
        return
    with open(split.path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size < split.end:
            raise CorruptRecordError(f"file shrank to {size} bytes since the read was planned",
                                     size, None, split.path)
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        # Every Arrow array owns copies (gathered binaries, taken numpy columns), so the
        # mmap can be closed once the batch is built.
        yield from read_buffer(mm, split.path, options, split.start, split.end, split.path)
    finally:
        try:
            mm.close()
        except BufferError:  # a caller still holds a view; the GC closes it later
            pass


def read_arrow(paths, options: ReadOptions | None = None, *, kinds=("log", "checkpoint"),
               max_split_bytes: int | None = None):
    """Single-process reader: every Arrow batch of every Kafka file under ``paths``, in order."""
    from kraft_storage.spark.files import DEFAULT_MAX_SPLIT_BYTES
    options = options or ReadOptions()
    lo, hi = options.bounds()
    for s in plan_splits(paths, kinds=kinds, max_split_bytes=max_split_bytes or DEFAULT_MAX_SPLIT_BYTES,
                         min_offset=lo, max_offset=hi):
        yield from read_split(s, options)


def read_table(paths, options: ReadOptions | None = None, **kw) -> pa.Table:
    options = options or ReadOptions()
    batches = list(read_arrow(paths, options, **kw))
    return pa.Table.from_batches(batches, schema=options.arrow_schema())
