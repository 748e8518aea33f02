"""The PySpark data source ``kraft``: Kafka log segments and checkpoints as a DataFrame.

Usage::

    df = spark.read.format("kraft").load("/var/lib/kafka/__cluster_metadata-0")
    df = (spark.read.format("kraft").option("minOffset", 1000).option("maxOffset", 1999)
          .load(path))                   # offset range, pruned before any task runs

Spark 4 finds the format through the top-level module ``pyspark_kraft`` (its
lookup imports every installed ``pyspark_*`` module with a ``DefaultSource``);
``register(spark)`` registers it explicitly, on a session that cannot see it.

``load`` takes a directory (searched recursively), a segment
(``00000000000000000000.log``), a ``.checkpoint`` snapshot, or several of
them separated by commas.  The schema is fixed (see
:mod:`kraft_storage.spark.reader` for the columns).  Options:

=====================  =========  ==============================================
fields                 none       ``json``: decode every metadata body into the
                                  ``fields`` column (slow: one Python object per
                                  record; ``none`` leaves it null);
                                  ``columns``: add one struct column per metadata
                                  record type (``partition_change_record``, ...)
                                  holding the decoded body, decoded natively into
                                  columns (rows come grouped by type within each
                                  batch of ``batchRows``; see
                                  :mod:`kraft_storage.spark.reader`)
columnTypes            (all)      with ``fields=columns``: only these record types
                                  get a column (``PartitionChangeRecord,TopicRecord``
                                  or column names or apiKeys); a null type column
                                  still ships zeroed child buffers to the JVM, 0-66
                                  bytes per row (466 for all 26 types)
files                  all        ``log``: only segments; ``checkpoint``: only
                                  snapshots
minOffset, maxOffset   (none)     inclusive offset range to read
maxPartitionBytes      134217728  a segment bigger than this is read by several
                                  tasks, cut at batch boundaries
batchRows              131072     records per Arrow batch handed to the JVM
verifyCrc              true       check every batch's CRC-32C
allowPartialTail       false      a torn last batch ends the read quietly
pushdown               false      ``true``: take ``WHERE`` filters on ``offset``
                                  (=, <, <=, >, >=, IN) and ``record_type``
                                  (=, IN) from Spark, evaluated exactly; needs
                                  ``spark.sql.python.filterPushdown.enabled``
                                  (``register(spark, pushdown=True)`` sets it)
=====================  =========  ==============================================

Reading fewer columns: Python data sources get no column pruning from
Spark, but a schema given by the caller is honoured, and only its columns
are built and shipped to the JVM (much faster for narrow jobs)::

    spark.read.format("kraft").schema("offset LONG, record_type SHORT, value BINARY").load(path)

Why filter pushdown is opt-in: in pyspark 4.3.0 a scan that pushes no
filter can reuse the read plan of an earlier scan *of the same DataFrame*
that did push filters (``df.filter("offset < 5").count()`` then
``df.count()`` returns 5); later Spark sources cache only the pushdown-free
plan on the data source.  With ``pushdown=true`` on such a Spark, build a
fresh DataFrame (``spark.read...load``) per filtered query, or use the
``minOffset``/``maxOffset`` options, which are part of the DataFrame and
always safe.  Either way, offset ranges skip whole files (by the base
offset in the file name) and whole splits before any task starts, then
whole batches, then rows.

Partitions: one per file, and large segments are cut by byte range
(:mod:`kraft_storage.spark.files`).  Executors mmap their file and yield
``pyarrow.RecordBatch`` objects built from the native columnar decoder.

Only local (or locally mounted) paths are supported: every executor opens
the files by path.
"""
from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from kraft_storage.spark.files import DEFAULT_MAX_SPLIT_BYTES, Split, find_files, plan_splits
from kraft_storage.spark.reader import DEFAULT_BATCH_ROWS, ReadOptions, parse_column_types, read_split, spark_schema

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _bool(options, name: str, default: bool) -> bool:
    v = options.get(name)
    if v is None:
        return default
    s = str(v).strip().lower()
    if s in _TRUE:
        return True
    if s in _FALSE:
        return False
    raise ValueError(f"option {name} must be true or false, not {v!r}")


def _int(options, name: str, default: int) -> int:
    v = options.get(name)
    if v is None:
        return default
    try:
        n = int(v)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, not {v!r}") from None
    if n <= 0:
        raise ValueError(f"option {name} must be positive, not {n}")
    return n


def _offset(options, name: str) -> int | None:
    v = options.get(name)
    if v is None:
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"option {name} must be an integer offset, not {v!r}") from None


def _kinds(options) -> tuple[str, ...]:
    v = str(options.get("files", "all")).strip().lower()
    table = {"all": ("log", "checkpoint"), "log": ("log",), "checkpoint": ("checkpoint",)}
    if v not in table:
        raise ValueError(f"option files must be all, log or checkpoint, not {v!r}")
    return table[v]


class KraftPartition(InputPartition):
    """One split (picklable: plain fields)."""

    def __init__(self, split: Split):
        super().__init__(split)
        self.split = split


class KraftDataSource(DataSource):
    """``spark.read.format("kraft").load(path)`` over Kafka log dirs, segments and checkpoints."""

    @classmethod
    def name(cls) -> str:
        return "kraft"

    def _paths(self) -> str:
        path = self.options.get("path") or self.options.get("paths")
        if not path:
            raise ValueError('the kraft data source needs a path: spark.read.format("kraft").load(path)')
        return path

    def schema(self):
        find_files(self._paths(), _kinds(self.options))  # fail early, with a clear error
        return spark_schema(*_fields(self.options))

    def reader(self, schema):
        columns = _columns(schema, self.options)
        if _bool(self.options, "pushdown", False):
            return KraftPushdownReader(self._paths(), self.options, columns)
        return KraftReader(self._paths(), self.options, columns)


def _fields(options) -> tuple[str, tuple[int, ...] | None]:
    fields = str(options.get("fields", "none")).strip().lower()
    if fields not in ("none", "json", "columns"):
        raise ValueError(f"option fields must be none, json or columns, not {options.get('fields')!r}")
    return fields, parse_column_types(options.get("columnTypes"))


def _columns(schema, options=None) -> tuple[str, ...] | None:
    """The user's schema (``spark.read.schema(...)``) as a column subset; None = all columns."""
    full = {f.name: f.dataType for f in spark_schema(*_fields(options or {})).fields}
    names = tuple(f.name for f in schema.fields)
    for f in schema.fields:
        if f.name not in full:
            hint = (" (record type columns need option fields=columns)"
                    if f.name.endswith("_record") and _fields(options or {})[0] != "columns" else "")
            raise ValueError(f"the kraft source has no column {f.name!r}{hint}; its columns are {list(full)}")
        if f.dataType != full[f.name]:
            raise ValueError(f"column {f.name} is {full[f.name].simpleString()} in the kraft source, "
                             f"not {f.dataType.simpleString()}")
    return None if names == tuple(full) else names


class KraftReader(DataSourceReader):
    def __init__(self, paths: str, options, columns: tuple[str, ...] | None = None):
        self.paths = paths
        self.kinds = _kinds(options)
        self.max_split_bytes = _int(options, "maxPartitionBytes", DEFAULT_MAX_SPLIT_BYTES)
        self.read_options = ReadOptions(
            verify_crc=_bool(options, "verifyCrc", True),
            fields=_fields(options)[0], column_types=_fields(options)[1],
            batch_rows=_int(options, "batchRows", DEFAULT_BATCH_ROWS),
            allow_partial_tail=_bool(options, "allowPartialTail", False),
            min_offset=_offset(options, "minOffset"), max_offset=_offset(options, "maxOffset"),
            columns=columns)
        self._base = (self.read_options.min_offset, self.read_options.max_offset)

    def partitions(self):
        lo, hi = self.read_options.bounds()
        splits = plan_splits(self.paths, kinds=self.kinds, max_split_bytes=self.max_split_bytes,
                             min_offset=lo, max_offset=hi)
        return [KraftPartition(s) for s in splits]

    def read(self, partition):
        # Spark substitutes InputPartition(None) when partitions() is empty (nothing to read).
        split = getattr(partition, "split", None)
        if split is not None:
            yield from read_split(split, self.read_options)


def _int_value(v) -> int | None:
    if isinstance(v, bool) or not isinstance(v, int):
        return None
    return v


class KraftPushdownReader(KraftReader):
    """KraftReader that takes offset and record_type filters (exactly)."""

    def pushFilters(self, filters):
        # Start from no filters: this call describes the whole query.
        o = self.read_options
        o.min_offset, o.max_offset = self._base
        o.offset_in = o.record_types = None
        for f in filters:
            col = tuple(f.attribute)
            if col == ("offset",) and self._push_offset(f, o):
                continue
            if col == ("record_type",) and self._push_type(f, o):
                continue
            yield f

    @staticmethod
    def _push_offset(f, o: ReadOptions) -> bool:
        if isinstance(f, In):
            vals = [_int_value(v) for v in f.value]
            if any(v is None for v in vals):
                return False
            s = set(vals) if o.offset_in is None else set(vals) & set(o.offset_in)
            o.offset_in = tuple(sorted(s))
            return True
        if isinstance(f, IsNotNull):  # offset is never null
            return True
        if not isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)):
            return False
        v = _int_value(f.value)
        if v is None:
            return False
        lo = -(2**63) if o.min_offset is None else o.min_offset
        hi = 2**63 - 1 if o.max_offset is None else o.max_offset
        if isinstance(f, EqualTo):
            lo, hi = max(lo, v), min(hi, v)
        elif isinstance(f, GreaterThan):
            lo = max(lo, v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            lo = max(lo, v)
        elif isinstance(f, LessThan):
            hi = min(hi, v - 1)
        elif isinstance(f, LessThanOrEqual):
            hi = min(hi, v)
        else:
            return False
        o.min_offset, o.max_offset = lo, hi
        return True

    @staticmethod
    def _push_type(f, o: ReadOptions) -> bool:
        if isinstance(f, EqualTo):
            vals = [_int_value(f.value)]
        elif isinstance(f, In):
            vals = [_int_value(v) for v in f.value]
        else:
            return False
        if any(v is None for v in vals):
            return False
        s = set(vals) if o.record_types is None else set(vals) & set(o.record_types)
        o.record_types = tuple(sorted(s))
        return True


def register(spark, *, pushdown: bool = False) -> None:
    """Register the ``kraft`` format on ``spark``; ``pushdown`` also turns on Python filter pushdown.

    Readers still push filters only with ``option("pushdown", "true")`` (see the module doc).
    """
    if pushdown:
        spark.conf.set(PUSHDOWN_CONF, "true")
    spark.dataSource.register(KraftDataSource)
