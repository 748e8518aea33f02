"""A metadata log folded into a MetadataImage on Spark, and the image handed back as Spark DataFrames.

Why: issue 23 (item 10) makes image apply the other half of the Spark replay benchmark, and
lets a user query a cluster's metadata in Spark SQL.  The work is the log fold of
:mod:`kraft_node.metadata.image.log_fold`, cut along byte ranges:

1. the driver plans splits of the log's segments at batch boundaries
   (:func:`kraft_storage.spark.files.plan_splits`, the same splits the ``kraft`` data source
   reads), in offset order;
2. one Spark task per split mmaps its byte range, decodes its batches into columns and folds
   them with a :class:`~kraft_node.metadata.image.log_fold.LogFolder` into a
   :class:`~kraft_node.metadata.image.log_fold.PartialDelta`, which it returns pickled (numpy
   arrays and per-key dicts: no Python object per partition crosses the wire);
3. the driver composes the partial deltas in split order -- which is offset order, the one
   order in which composing is exact (``PartialDelta.compose`` keeps relative records such as
   PartitionChangeRecord exact across a cut: see log_fold's module doc) -- and applies the
   result to the base image.

The base image is empty when the log starts at offset 0.  When the log's first segment starts
later (its start was deleted after a snapshot), the newest ``.checkpoint`` whose end offset is
at or past the log start is loaded with :func:`kraft_node.metadata.image.bulk.load_snapshot_file`
and only records at or after its end offset are folded.

The same plan runs without Spark (:func:`fold_splits`), which is how the tests tell a Spark
problem from a composition problem.

:func:`image_tables` / :func:`image_dataframes` turn an image into four tables (topics,
partitions, brokers, configs).  Partitions are built from the topics' :class:`PartitionBlock`
arrays with numpy gathers and go to Arrow as whole columns; only partitions held as
overrides (changed by a delta after the block was built) are read as registrations.

pyspark is imported only inside the functions that need a SparkSession: the module (and the
fold of a split, which Spark's Python workers run) works without it.
"""
from __future__ import annotations

import mmap
import os
import pickle
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]  # (the spark extra; no stubs)

from kraft_node.metadata.controller.cluster_control import SECURITY_PROTOCOLS
from kraft_node.metadata.image.bulk import load_snapshot_file
from kraft_node.metadata.image.log_fold import DEFAULT_CHUNK_RECORDS, LogFolder, PartialDelta, compose_all
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.topics import TopicImage
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.spark.files import DEFAULT_MAX_SPLIT_BYTES, SNAPSHOT_RE, Split, find_files, plan_splits

__all__ = ["FoldPlan", "SparkFoldError", "SparkFoldResult", "fold_split", "fold_splits", "image_dataframes",
           "image_tables", "plan_fold", "spark_fold"]


class SparkFoldError(ValueError):
    """A split of the log could not be read or folded (the message names the file and byte range),
    or the log and its snapshots do not fit together."""


# ---------------------------------------------------------------------------------------------
# Planning
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FoldPlan:
    """What to fold: ``splits`` of the log's segments (offset order), records from
    ``start_offset`` on, over the image of ``snapshot`` (None: the empty image)."""
    splits: tuple[Split, ...]
    start_offset: int = 0
    snapshot: str | None = None

    @property
    def log_bytes(self) -> int:
        return sum(s.size for s in self.splits)


def _snapshot_end(path: str) -> int:
    m = SNAPSHOT_RE.match(os.path.basename(path))
    return int(m.group(1)) if m else 0  # bootstrap.checkpoint holds offset -1 (end offset 0)


def plan_fold(path: str | os.PathLike[str], *, max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES,
              splits: int | None = None) -> FoldPlan:
    """The plan for the metadata log under ``path`` (a segment, a ``__cluster_metadata-0``
    directory, or a log dir holding one).

    ``splits``: aim for about this many byte ranges in all (the split size is the log's size
    over it, and never more than ``max_split_bytes``), so that every core of a Spark master gets
    tasks of equal size.  Segments from several directories are refused: one plan is one log.
    """
    p = os.fspath(path)
    logs = find_files(p, kinds=("log",)) if _has_kind(p, "log") else []
    if not logs:
        raise SparkFoldError(f"{p}: no log segment (<20-digit offset>.log) to fold")
    dirs = {os.path.dirname(f.path) for f in logs}
    metadata = {d for d in dirs if os.path.basename(d) == "__cluster_metadata-0"}
    if len(dirs) > 1 and len(metadata) == 1:  # a broker's log dir: its other partitions are not metadata
        dirs = metadata
        logs = [f for f in logs if os.path.dirname(f.path) in dirs]
    if len(dirs) > 1:
        raise SparkFoldError(f"{p}: segments of {len(dirs)} logs ({', '.join(sorted(dirs))}); fold one at a time")
    total = sum(f.size for f in logs)
    if splits is not None:
        if splits < 1:
            raise ValueError(f"splits must be at least 1, not {splits}")
        max_split_bytes = max(1, min(max_split_bytes, -(-total // splits)))
    planned = tuple(plan_splits(sorted(dirs)[0] if os.path.isdir(p) else p, kinds=("log",),
                                max_split_bytes=max_split_bytes))
    log_start = min(f.min_offset for f in logs)
    if log_start == 0:
        return FoldPlan(planned)
    # the log's head was deleted after a snapshot: start from the newest snapshot that reaches it
    directory = sorted(dirs)[0]
    snaps = [f.path for f in find_files(directory, kinds=("checkpoint",))] if _has_kind(directory, "checkpoint") else []
    usable = sorted((_snapshot_end(s), s) for s in snaps if _snapshot_end(s) >= log_start)
    if not usable:
        raise SparkFoldError(f"{directory}: the log starts at offset {log_start} and no snapshot ends at or after "
                             f"it (snapshots: {sorted(os.path.basename(s) for s in snaps) or 'none'})")
    end, snapshot = usable[-1]
    return FoldPlan(tuple(s for s in planned if s.max_offset >= end), end, snapshot)


def _has_kind(path: str, kind: str) -> bool:
    try:
        return bool(find_files(path, kinds=(kind,)))
    except ValueError:  # NotKafkaFileError: a directory holding none of that kind
        return False


# ---------------------------------------------------------------------------------------------
# Folding one split (the body of a Spark task)
# ---------------------------------------------------------------------------------------------

def _batch_ranges(counts: npt.NDArray[np.int64], records: int) -> Iterator[tuple[int, int]]:
    """[a, b) runs of batches holding about ``records`` records each (one batch at least)."""
    cum = np.cumsum(counts)
    a, nb = 0, len(counts)
    while a < nb:
        before = int(cum[a - 1]) if a else 0
        b = max(int(np.searchsorted(cum, before + records, side="right")), a + 1)
        yield a, min(b, nb)
        a = b


def fold_split(split: Split, start_offset: int = 0, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> PartialDelta:
    """The records of ``split`` at offsets >= ``start_offset``, folded into a partial delta.

    Batches are CRC-checked; a damaged or torn batch is a :class:`SparkFoldError` naming the
    file and byte range.  After a record the fold refuses, nothing more is folded (the delta
    carries the error; ``apply`` raises it with the record's offset)."""
    where = f"{split.path} bytes [{split.start}, {split.end})"
    try:
        with open(split.path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size < split.end:
                raise SparkFoldError(f"{where}: the file shrank to {size} bytes since the fold was planned")
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise SparkFoldError(f"{where}: {exc}") from exc
    folder = LogFolder()
    try:
        try:
            headers = scan_batches(mm, split.start, split.end, source=split.path).headers
        except Exception as exc:
            raise SparkFoldError(f"{where}: {exc}") from exc
        if start_offset > 0:  # whole batches before the snapshot's end are dropped unread
            last = headers["base_offset"] + headers["last_offset_delta"]
            headers = headers[last >= start_offset]
        for a, b in _batch_ranges(headers["records_count"].astype(np.int64), chunk_records):
            cols = decode_record_columns(mm, headers[a:b], source=split.path)
            if len(cols) and int(cols.offset[0]) < start_offset:  # a batch straddling the snapshot's end
                k = int(np.searchsorted(cols.offset, start_offset))
                cols = replace(cols, offset=cols.offset[k:], timestamp=cols.timestamp[k:], key_pos=cols.key_pos[k:],
                               key_len=cols.key_len[k:], value_pos=cols.value_pos[k:], value_len=cols.value_len[k:],
                               headers_pos=cols.headers_pos[k:], headers_count=cols.headers_count[k:],
                               batch=cols.batch[k:], attributes=cols.attributes[k:], storage=None)
            folder.add_record_columns(cols)
            del cols
            if folder.failed:
                break
        return folder.finish()
    finally:
        try:
            mm.close()
        except BufferError:  # a view outlives the fold (the GC closes the map)
            pass


def fold_splits(plan: FoldPlan, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> MetadataImage:
    """The plan folded in this process, split after split, composed and applied: what
    :func:`spark_fold` computes, without Spark."""
    deltas = [fold_split(s, plan.start_offset, chunk_records) for s in plan.splits]
    return compose_all(deltas).apply(_base_image(plan))


def _base_image(plan: FoldPlan) -> MetadataImage:
    return MetadataImage.EMPTY if plan.snapshot is None else load_snapshot_file(plan.snapshot)


def _task(items: Iterable[tuple[int, Split]], start_offset: int, chunk_records: int) -> Iterator[Any]:
    """Spark's mapPartitions body: (index, pickled delta or None, error text or None, wall seconds,
    CPU seconds).  Wall well above CPU means the task waited for a core (a shared machine)."""
    for index, split in items:
        t = time.perf_counter()
        c = time.process_time()
        try:
            delta = fold_split(split, start_offset, chunk_records)
            payload: bytes | None = pickle.dumps(delta, protocol=5)
            error = None
        except Exception as exc:  # returned, not raised: the driver names the split in one clear error
            payload, error = None, f"{type(exc).__name__}: {exc}"
        yield index, payload, error, time.perf_counter() - t, time.process_time() - c


# ---------------------------------------------------------------------------------------------
# Folding on Spark
# ---------------------------------------------------------------------------------------------

@dataclass
class SparkFoldResult:
    """The image and where the time went (seconds; ``task_seconds`` / ``task_cpu_seconds`` per
    split, wall and CPU, measured in the task)."""
    image: MetadataImage
    records: int
    splits: int
    delta_bytes: int
    fold_seconds: float
    compose_seconds: float
    load_snapshot_seconds: float
    apply_seconds: float
    task_seconds: list[float] = field(default_factory=list)
    task_cpu_seconds: list[float] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.fold_seconds + self.compose_seconds + self.load_snapshot_seconds + self.apply_seconds


def spark_fold(spark: Any, path: str | os.PathLike[str] | FoldPlan, *, splits: int | None = None,
               max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES,
               chunk_records: int = DEFAULT_CHUNK_RECORDS) -> SparkFoldResult:
    """The image of the metadata log at ``path`` (or of a ready plan), folded on ``spark``.

    ``splits`` defaults to two tasks per core of the session (``defaultParallelism``), so a
    local[2] master folds two equal halves at a time.  The partial deltas come back in task
    order (= offset order) and are composed in that order on the driver."""
    sc = spark.sparkContext
    if isinstance(path, FoldPlan):
        plan = path
    else:
        plan = plan_fold(path, max_split_bytes=max_split_bytes,
                         splits=splits if splits is not None else 2 * int(sc.defaultParallelism))
    start = plan.start_offset
    t0 = time.perf_counter()
    items = list(enumerate(plan.splits))
    rdd = sc.parallelize(items, max(1, len(items)))
    rows = rdd.mapPartitions(lambda it: _task(it, start, chunk_records)).collect()
    t1 = time.perf_counter()
    rows.sort(key=lambda r: r[0])
    deltas: list[PartialDelta] = []
    nbytes = 0
    for index, payload, error, _wall, _cpu in rows:
        split = plan.splits[index]
        if error is not None:
            raise SparkFoldError(f"split {index} ({split.path} bytes [{split.start}, {split.end})): {error}")
        nbytes += len(payload)
        deltas.append(pickle.loads(payload))
    if len(deltas) != len(plan.splits):
        raise SparkFoldError(f"{len(deltas)} partial deltas came back for {len(plan.splits)} splits")
    composed = compose_all(deltas)
    t2 = time.perf_counter()
    base = _base_image(plan)
    t3 = time.perf_counter()
    image = composed.apply(base)
    t4 = time.perf_counter()
    return SparkFoldResult(image, composed.records, len(plan.splits), nbytes, t1 - t0, t2 - t1, t3 - t2, t4 - t3,
                           [r[3] for r in rows], [r[4] for r in rows])


# ---------------------------------------------------------------------------------------------
# The image as tables
# ---------------------------------------------------------------------------------------------

_B64 = np.frombuffer(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_", np.uint8)


def uuid_strings(raw: npt.NDArray[np.uint8]) -> pa.StringArray:
    """Kafka's text form of Uuids (URL-safe base64 of the 16 bytes, unpadded: 22 characters),
    for ``raw`` uint8[n, 16], computed in numpy (no Uuid object per entry)."""
    n = len(raw)
    padded = np.zeros((n, 18), np.uint8)
    padded[:, :16] = raw.reshape(n, 16)
    g = padded.reshape(n, 6, 3).astype(np.uint32)
    word = (g[:, :, 0] << 16) | (g[:, :, 1] << 8) | g[:, :, 2]
    idx = np.stack([(word >> 18) & 63, (word >> 12) & 63, (word >> 6) & 63, word & 63], axis=2).reshape(n, 24)
    text = np.ascontiguousarray(_B64[idx[:, :22]])
    offsets = np.arange(0, 22 * n + 1, 22, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(text.tobytes()))


def _gather_lists(offsets: npt.NDArray[np.int32], rows: npt.NDArray[np.int64]
                  ) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]:
    """Rows ``rows`` of a list column: (new offsets from 0, indices into the old values)."""
    starts = offsets[rows].astype(np.int64)
    lengths = offsets[rows + 1].astype(np.int64) - starts
    new = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lengths, out=new[1:])
    owner = np.repeat(np.arange(len(rows)), lengths)
    index = starts[owner] + (np.arange(int(new[-1])) - new[:-1][owner])
    return new.astype(np.int32), index


_PARTITION_LISTS = (("replicas", "replicas"), ("isr", "isr"), ("removing", "removing_replicas"),
                    ("adding", "adding_replicas"), ("elr", "elr"), ("last_known_elr", "last_known_elr"))
_MIGRATING_TEXT = uuid_strings(np.zeros((1, 16), np.uint8))[0].as_py()  # DirectoryId.MIGRATING's text


def _block_rows(block: PartitionBlock, rows: npt.NDArray[np.int64]) -> dict[str, pa.Array]:
    """The partition columns of ``block``'s ``rows`` (a row with no directories is shown with
    MIGRATING per replica, which is what the image reads it as)."""
    out: dict[str, pa.Array] = {
        "partition": pa.array(block.partition_id[rows]),
        "leader": pa.array(block.leader[rows]),
        "leader_epoch": pa.array(block.leader_epoch[rows]),
        "partition_epoch": pa.array(block.partition_epoch[rows]),
        "leader_recovery_state": pa.array(block.leader_recovery_state[rows]),
    }
    for column, name in _PARTITION_LISTS:
        offs, index = _gather_lists(getattr(block, column + "_offsets"), rows)
        values: npt.NDArray[np.int32] = getattr(block, column)
        out[name] = pa.ListArray.from_arrays(pa.array(offs), pa.array(values[index]))
    # directories: rows without any stand for MIGRATING per replica
    d_offs, d_index = _gather_lists(block.directories_offsets, rows)
    r_offs = out["replicas"].offsets.to_numpy()
    d_len = np.diff(d_offs.astype(np.int64))
    fill = (d_len == 0)
    length = np.where(fill, np.diff(r_offs.astype(np.int64)), d_len)
    offs = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(length, out=offs[1:])
    owner = np.repeat(np.arange(len(rows)), length)
    within = np.arange(int(offs[-1])) - offs[:-1][owner]
    texts = uuid_strings(block.directories[d_index])
    source = np.where(fill[owner], len(d_index), d_offs[:-1].astype(np.int64)[owner] + within)
    values_all = pa.concat_arrays([texts, pa.array([_MIGRATING_TEXT])])
    out["directories"] = pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), values_all.take(pa.array(source)))
    return out


def _topic_blocks(topics: Sequence[TopicImage]) -> tuple[list[tuple[PartitionBlock, npt.NDArray[np.int64],
                                                                       npt.NDArray[np.int64]]], list[int]]:
    """Per distinct block: (block, its live rows, the topic index of each row), and the
    overrides' (topic index) list, in the image's topic order."""
    by_block: dict[int, tuple[PartitionBlock, list[int], list[int], list[int], list[int]]] = {}
    for ti, topic in enumerate(topics):
        parts = topic.partitions
        block = parts.block
        if block is None or parts.stop <= parts.start:
            continue
        entry = by_block.setdefault(id(block), (block, [], [], [], []))
        entry[1].append(ti)
        entry[2].append(parts.start)
        entry[3].append(parts.stop)
        for pid in parts.overrides:  # a partition held as an override hides its block row
            row = block.row_of(pid, parts.start, parts.stop)
            if row >= 0:
                entry[4].append(row)
    out = []
    for block, tis, starts, stops, hidden in by_block.values():
        s = np.array(starts, np.int64)
        lengths = np.array(stops, np.int64) - s
        owner = np.repeat(np.arange(len(tis)), lengths)
        offs = np.zeros(len(tis) + 1, np.int64)
        np.cumsum(lengths, out=offs[1:])
        rows = s[owner] + (np.arange(int(offs[-1])) - offs[:-1][owner])
        topic_index = np.array(tis, np.int64)[owner]
        if hidden:
            keep = ~np.isin(rows, np.array(hidden, np.int64))
            rows, topic_index = rows[keep], topic_index[keep]
        out.append((block, rows, topic_index))
    return out, [ti for ti, t in enumerate(topics) if t.partitions.overrides]


PARTITIONS_SCHEMA = pa.schema([
    ("topic", pa.string()), ("topic_id", pa.string()), ("partition", pa.int32()), ("leader", pa.int32()),
    ("leader_epoch", pa.int32()), ("partition_epoch", pa.int32()), ("leader_recovery_state", pa.int8()),
    ("replicas", pa.list_(pa.int32())), ("isr", pa.list_(pa.int32())), ("removing_replicas", pa.list_(pa.int32())),
    ("adding_replicas", pa.list_(pa.int32())), ("elr", pa.list_(pa.int32())),
    ("last_known_elr", pa.list_(pa.int32())), ("directories", pa.list_(pa.string())),
])


def _partitions_table(topics: Sequence[TopicImage], names: pa.Array, ids: pa.Array) -> pa.Table:
    blocks, with_overrides = _topic_blocks(topics)
    parts: list[pa.Table] = []
    for block, rows, topic_index in blocks:
        cols = _block_rows(block, rows)
        ti = pa.array(topic_index)
        parts.append(pa.table({"topic": names.take(ti), "topic_id": ids.take(ti), **cols}, schema=PARTITIONS_SCHEMA))
    if with_overrides:  # changed partitions: a small block of their own (overrides are few between compactions)
        pids: list[int] = []
        regs = []
        tis: list[int] = []
        for ti in with_overrides:
            for pid, reg in sorted(topics[ti].partitions.overrides.items()):
                pids.append(pid)
                regs.append(reg)
                tis.append(ti)
        small = PartitionBlock.from_registrations(pids, regs)
        cols = _block_rows(small, np.arange(len(small), dtype=np.int64))
        ti = pa.array(np.array(tis, np.int64))
        parts.append(pa.table({"topic": names.take(ti), "topic_id": ids.take(ti), **cols}, schema=PARTITIONS_SCHEMA))
    if not parts:
        return PARTITIONS_SCHEMA.empty_table()
    return pa.concat_tables(parts)


def _brokers_table(image: MetadataImage) -> pa.Table:
    listener = pa.struct([("name", pa.string()), ("security_protocol", pa.string()), ("host", pa.string()),
                          ("port", pa.int32())])
    schema = pa.schema([("id", pa.int32()), ("epoch", pa.int64()), ("incarnation_id", pa.string()),
                        ("fenced", pa.bool_()), ("in_controlled_shutdown", pa.bool_()), ("rack", pa.string()),
                        ("listeners", pa.list_(listener)), ("directories", pa.list_(pa.string())),
                        ("is_migrating_zk_broker", pa.bool_())])
    rows = []
    for bid in sorted(image.cluster.brokers):
        b = image.cluster.brokers[bid]
        rows.append({"id": b.id, "epoch": b.epoch, "incarnation_id": str(b.incarnation_id), "fenced": b.fenced,
                     "in_controlled_shutdown": b.in_controlled_shutdown, "rack": b.rack,
                     "listeners": [{"name": e.name,
                                    "security_protocol": SECURITY_PROTOCOLS.get(e.security_protocol,
                                                                                str(e.security_protocol)),
                                    "host": e.host, "port": e.port} for e in b.listeners.values()],
                     "directories": [str(d) for d in b.directories],
                     "is_migrating_zk_broker": b.is_migrating_zk_broker})
    return pa.Table.from_pylist(rows, schema=schema)


def _configs_table(image: MetadataImage) -> pa.Table:
    types: list[str] = []
    names: list[str] = []
    keys: list[str] = []
    values: list[str] = []
    for resource, config in image.configs.resource_data.items():
        data = config.data
        n = len(data)
        types.extend([resource.type.name] * n)
        names.extend([resource.name] * n)
        keys.extend(data.keys())
        values.extend(data.values())
    return pa.table({"resource_type": pa.array(types, pa.string()), "resource_name": pa.array(names, pa.string()),
                     "name": pa.array(keys, pa.string()), "value": pa.array(values, pa.string())})


def image_tables(image: MetadataImage) -> dict[str, pa.Table]:
    """The image as Arrow tables: ``topics`` (name, topic_id, partitions), ``partitions`` (one
    row per partition, columns as PARTITIONS_SCHEMA), ``brokers`` and ``configs`` (one row per
    key of each resource; a deleted key is absent)."""
    topics = list(image.topics.topics_by_id.values())
    names = pa.array([t.name for t in topics], pa.string())
    ids = uuid_strings(np.frombuffer(b"".join(t.topic_id.bytes for t in topics), np.uint8).reshape(len(topics), 16))
    counts = pa.array(np.fromiter((len(t.partitions) for t in topics), np.int32, len(topics)))
    return {
        "topics": pa.table({"name": names, "topic_id": ids, "partitions": counts}),
        "partitions": _partitions_table(topics, names, ids),
        "brokers": _brokers_table(image),
        "configs": _configs_table(image),
    }


def image_dataframes(spark: Any, image: MetadataImage, *, views: bool = False) -> dict[str, Any]:
    """The image as Spark DataFrames (``topics``, ``partitions``, ``brokers``, ``configs``; see
    :func:`image_tables`), each made from an Arrow table in one call.  ``views``: also register
    each as a temporary view of that name, for ``spark.sql``."""
    out = {}
    for name, table in image_tables(image).items():
        df = spark.createDataFrame(table)
        if views:
            df.createOrReplaceTempView(name)
        out[name] = df
    return out
