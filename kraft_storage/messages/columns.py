"""Metadata record bodies decoded into columns: one table per record type, no object per record.

Why: replay and the Spark reader read millions of metadata records; the typed
codecs (:mod:`kraft_storage.messages.metadata`) make one Python object per
record and per nested struct.  Here every body of one record type is decoded
by one generated loop (``kraft_storage._native._metadata_columns``, or its
pure-Python twin, chosen by ``kraft_storage.accel``) into flat buffers, and
this module wraps the buffers as columns in Arrow's layout:

* fixed-width scalars (int8 .. int64, uint16, uint32, float64, bool): one
  numpy array (:class:`FixedColumn`);
* Uuid: ``uint8[m, 16]``, Kafka's 16 raw bytes (:class:`UuidColumn`);
* string / bytes: int32 ``offsets[m + 1]`` + ``data`` bytes (entry i is
  ``data[offsets[i]:offsets[i+1]]``) and, for fields nullable in some version,
  a boolean ``valid`` mask (:class:`BinaryColumn`);
* arrays: int32 ``offsets[m + 1]`` into a child column (+ ``valid`` for
  nullable arrays) (:class:`ListColumn`); an array of structs has a
  :class:`StructColumn` child (one column per struct field, one entry per
  element).

A record type's table (:class:`RecordTypeColumns`) is a StructColumn over the
records of that type, plus ``rows`` (which input rows they were, ascending) and
their ``versions``.  Fields a record's version does not have hold the schema
default (null where Kafka's default is null), exactly as the typed decoder
fills its attributes; tagged fields are decoded where the schema declares them
and unknown tags are skipped.

Bad bytes raise :class:`MessageError` naming the record type and field, the
byte position inside the record body and, when ``offsets`` are given, the
record's log offset.  Rows whose record type is not a metadata type this
process knows (control records, non-frames, apiKeys of newer Kafka versions)
are not decoded; :attr:`MetadataColumns.unknown_rows` lists the latter.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType

import numpy as np

from kraft_storage.accel import load
from kraft_storage.messages.runtime import MessageError

_impl = load("_metadata_columns")
#: The implementation module in use (native or the twin).
IMPLEMENTATION = _impl.__name__
#: apiKey -> (name, (lowest, highest version), buffers, layout tree, field names).
LAYOUTS = _impl.LAYOUTS
ERRORS = _impl.ERRORS
#: indexed by apiKey + 1 for every int16 apiKey: True for -1 (not a frame) and the known types.
_KNOWN_ANY = np.zeros(1 << 16, bool)
_KNOWN_ANY[0] = True
_KNOWN_ANY[[k + 1 for k in LAYOUTS]] = True

__all__ = ["BinaryColumn", "FixedColumn", "ListColumn", "MetadataColumns", "RecordTypeColumns", "StructColumn",
           "UuidColumn", "arrow_type", "decode_bodies", "decode_record_columns", "type_column_name",
           "IMPLEMENTATION", "LAYOUTS"]


def _bitmap(valid: np.ndarray | None):
    import pyarrow as pa
    if valid is None:
        return None, 0
    nulls = int(len(valid) - np.count_nonzero(valid))
    if not nulls:
        return None, 0
    return pa.py_buffer(np.packbits(valid, bitorder="little")), nulls


@dataclass
class FixedColumn:
    kind: str              # int8 int16 uint16 int32 uint32 int64 float64 bool
    values: np.ndarray

    def __len__(self):
        return len(self.values)

    def value(self, i: int):
        v = self.values[i]
        return bool(v) if self.kind == "bool" else v.item()

    def to_arrow(self, spark: bool = False):
        import pyarrow as pa
        v = self.values
        if spark and self.kind == "uint16":
            v = v.astype(np.int32)
        elif spark and self.kind == "uint32":
            v = v.astype(np.int64)
        return pa.array(v, type=_scalar_type(self.kind, spark))


@dataclass
class UuidColumn:
    values: np.ndarray     # uint8[m, 16]

    def __len__(self):
        return len(self.values)

    def value(self, i: int) -> bytes:
        return self.values[i].tobytes()

    def to_arrow(self, spark: bool = False):
        import pyarrow as pa
        m = len(self.values)
        data = pa.py_buffer(np.ascontiguousarray(self.values).reshape(-1))
        if spark:  # Spark has no fixed-size binary: a binary column of 16-byte values
            offs = np.arange(0, 16 * (m + 1), 16, dtype=np.int32)
            return pa.Array.from_buffers(pa.binary(), m, [None, pa.py_buffer(offs), data])
        return pa.Array.from_buffers(pa.binary(16), m, [None, data])


@dataclass
class BinaryColumn:
    is_string: bool
    offsets: np.ndarray    # int32[m + 1]
    data: np.ndarray       # uint8
    valid: np.ndarray | None = None

    def __len__(self):
        return len(self.offsets) - 1

    def value(self, i: int):
        if self.valid is not None and not self.valid[i]:
            return None
        raw = self.data[self.offsets[i]:self.offsets[i + 1]].tobytes()
        return raw.decode("utf-8") if self.is_string else raw

    def to_arrow(self, spark: bool = False):
        import pyarrow as pa
        bm, nulls = _bitmap(self.valid)
        return pa.Array.from_buffers(pa.string() if self.is_string else pa.binary(), len(self),
                                     [bm, pa.py_buffer(self.offsets), pa.py_buffer(self.data)], null_count=nulls)


@dataclass
class ListColumn:
    offsets: np.ndarray    # int32[m + 1] into child
    child: object
    valid: np.ndarray | None = None

    def __len__(self):
        return len(self.offsets) - 1

    def value(self, i: int):
        if self.valid is not None and not self.valid[i]:
            return None
        return [self.child.value(k) for k in range(int(self.offsets[i]), int(self.offsets[i + 1]))]

    def to_arrow(self, spark: bool = False):
        import pyarrow as pa
        child = self.child.to_arrow(spark)
        bm, nulls = _bitmap(self.valid)
        return pa.Array.from_buffers(pa.list_(child.type), len(self), [bm, pa.py_buffer(self.offsets)],
                                     null_count=nulls, children=[child])


@dataclass
class StructColumn:
    fields: dict           # attr -> column, in schema order
    length: int

    def __len__(self):
        return self.length

    def value(self, i: int) -> dict:
        return {k: c.value(i) for k, c in self.fields.items()}

    def to_arrow(self, spark: bool = False):
        import pyarrow as pa
        arrays = [c.to_arrow(spark) for c in self.fields.values()]
        if not arrays:  # NoOpRecord, EndTransactionRecord: a struct with no fields
            return pa.Array.from_buffers(pa.struct([]), self.length, [None], children=[])
        return pa.StructArray.from_arrays(arrays, fields=[pa.field(k, a.type) for k, a in
                                                          zip(self.fields, arrays)])


@dataclass
class RecordTypeColumns:
    """Every decoded record of one type: ``rows`` (input row indices) and the body columns."""
    api_key: int
    name: str
    rows: np.ndarray       # int64 input row indices (in input order)
    versions: np.ndarray   # int16
    body: StructColumn

    def __len__(self):
        return len(self.rows)

    @property
    def columns(self) -> dict:
        return self.body.fields

    def __getitem__(self, attr: str):
        return self.body.fields[attr]

    def row(self, i: int) -> dict:
        """Record ``i`` of this table as a dict (attr -> Python value; Uuid as 16 bytes)."""
        return self.body.value(i)

    def to_arrow(self, spark: bool = False):
        """A ``pyarrow.StructArray`` of the bodies (``spark``: Spark-compatible types, see arrow_type)."""
        return self.body.to_arrow(spark)


@dataclass
class MetadataColumns:
    """Result of :func:`decode_bodies`: apiKey -> table, for the types present."""
    tables: dict = field(default_factory=dict)
    #: rows that are metadata frames of an apiKey this process has no schema for.
    unknown_rows: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    def __getitem__(self, api_key: int) -> RecordTypeColumns:
        return self.tables[api_key]

    def __contains__(self, api_key) -> bool:
        return api_key in self.tables

    def __iter__(self):
        return iter(self.tables.values())

    def __len__(self):
        return sum(len(t) for t in self.tables.values())

    def by_name(self, name: str) -> RecordTypeColumns:
        for t in self.tables.values():
            if t.name == name:
                return t
        raise KeyError(name)


# ------------------------------------------------------------------ layout -> columns / types

def _build(node, bufs):
    kind = node[0]
    if kind == "fixed":
        return FixedColumn(node[1], bufs[node[2]])
    if kind == "uuid":
        return UuidColumn(bufs[node[1]])
    if kind in ("string", "bytes"):
        return BinaryColumn(kind == "string", bufs[node[1]], bufs[node[2]], None if node[3] < 0 else bufs[node[3]])
    if kind == "list":
        return ListColumn(bufs[node[1]], _build(node[3], bufs), None if node[2] < 0 else bufs[node[2]])
    if kind == "struct":
        fields = {name: _build(sub, bufs) for name, sub in node[1]}
        n = len(next(iter(fields.values()))) if fields else 0
        return StructColumn(fields, n)
    raise ValueError(kind)


def _scalar_type(kind: str, spark: bool):
    import pyarrow as pa
    if spark and kind == "uint16":
        return pa.int32()
    if spark and kind == "uint32":
        return pa.int64()
    return {"int8": pa.int8(), "int16": pa.int16(), "uint16": pa.uint16(), "int32": pa.int32(),
            "uint32": pa.uint32(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}[kind]


def _node_type(node, spark: bool):
    import pyarrow as pa
    kind = node[0]
    if kind == "fixed":
        return _scalar_type(node[1], spark)
    if kind == "uuid":
        return pa.binary() if spark else pa.binary(16)
    if kind == "string":
        return pa.string()
    if kind == "bytes":
        return pa.binary()
    if kind == "list":
        return pa.list_(_node_type(node[3], spark))
    return pa.struct([pa.field(name, _node_type(sub, spark)) for name, sub in node[1]])


def arrow_type(api_key: int, spark: bool = False):
    """The Arrow struct type of a record type's bodies.

    ``spark=True`` gives the types Spark reads: uint16 -> int32, uint32 ->
    int64, Uuid -> binary (Spark has no unsigned or fixed-size binary types).
    """
    return _node_type(LAYOUTS[api_key][3], spark)


def _snake(name: str) -> str:
    import re
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def type_column_name(api_key: int) -> str:
    """``PartitionChangeRecord`` -> ``partition_change_record`` (the Spark column of that type)."""
    return _snake(LAYOUTS[api_key][0])


# ------------------------------------------------------------------ decoding

def _error(api_key: int, row: int, code: int, pos: int, fld: int, body_pos, offsets) -> MessageError:
    name, _v, _b, _t, names = LAYOUTS[api_key]
    where = names[fld] if 0 <= fld < len(names) else name
    reason = ERRORS.get(code, f"error {code}")
    off = None if offsets is None else int(offsets[row])
    return MessageError(f"metadata record body does not decode: {reason}", int(pos - body_pos[row]),
                        [where], off)


def decode_bodies(data, body_pos, body_end, api_key, version, *, rows=None, offsets=None, types=None,
                  impl: ModuleType | None = None) -> MetadataColumns:
    """Decode record bodies into one column table per record type.

    ``data``: the buffer holding the record values; ``body_pos``/``body_end``:
    int64 [start, end) of each record's body in it (after the frame header);
    ``api_key``/``version``: each record's type and version (-1 where the row
    is not a metadata frame; see ``kraft_storage._pure._frame.read_frames``).
    ``rows``: decode only these row indices (default all; a table's rows keep
    the order of ``rows``, ascending in the usual case); ``offsets``: each
    row's log offset, named in errors; ``types``: decode only these apiKeys;
    ``impl``: an implementation module (default: the process's choice).

    One ``decode_rows`` call checks every version against its type's valid
    versions, then decodes the rows front to back, each body by its type's
    generated function.
    """
    impl = impl or _impl
    mv = memoryview(data).cast("B") if not isinstance(data, np.ndarray) else data
    keys = np.ascontiguousarray(api_key, dtype=np.int16)
    body_pos = np.ascontiguousarray(body_pos, dtype=np.int64)
    body_end = np.ascontiguousarray(body_end, dtype=np.int64)
    version = np.ascontiguousarray(version, dtype=np.int16)
    n = len(keys)
    if not (len(body_pos) == len(body_end) == len(version) == n):
        raise ValueError("api_key, version, body_pos and body_end must have the same length")
    if rows is None:
        sel, k_sel = np.arange(n, dtype=np.int64), keys
    else:
        sel = np.ascontiguousarray(rows, dtype=np.int64)
        if len(sel) and (sel.min() < 0 or sel.max() >= n):
            raise ValueError("row index outside the columns")
        k_sel = keys[sel]
    out = MetadataColumns()
    unknown = ~_KNOWN_ANY[np.maximum(k_sel, -1).astype(np.int32) + 1]  # frames of apiKeys unknown here
    if unknown.any():
        out.unknown_rows = np.sort(sel[unknown])
    wanted = sorted(LAYOUTS if types is None else (int(k) for k in types if int(k) in LAYOUTS))
    if not wanted:
        return out
    res, err = impl.decode_rows(mv, body_pos, body_end, keys, version, sel, wanted)
    if err is not None:
        row, k, code, pos, fld = err
        row, k = int(row), int(k)
        if code == 13:
            name, (lo, hi) = LAYOUTS[k][0], LAYOUTS[k][1]
            raise MessageError(f"unsupported {name} (apiKey {k}) version {int(version[row])}, valid versions "
                               f"are {lo}-{hi}", 0, [name], None if offsets is None else int(offsets[row]))
        raise _error(k, row, code, pos, fld, body_pos, offsets)
    for k, (r, bufs) in res.items():
        name, _v, _bufs, tree, _names = LAYOUTS[k]
        body = _build(tree, bufs)
        body.length = len(r)
        out.tables[k] = RecordTypeColumns(k, name, r, version[r], body)
    return out


def decode_record_columns(cols, *, types=None, impl: ModuleType | None = None) -> MetadataColumns:
    """Bodies of every metadata record in a :class:`kraft_storage.record.RecordColumns`.

    Reads the frame headers (``_frame.read_frames``), leaves control records
    out, and calls :func:`decode_bodies` with the records' offsets for errors.
    """
    frame = load("_frame")
    n = len(cols)
    k = np.empty(n, np.int16)
    v = np.empty(n, np.int16)
    b = np.empty(n, np.int64)
    frame.read_frames(cols.data, cols.value_pos, cols.value_len, k, v, b)
    ctl = cols.is_control()
    if ctl.any():
        k[ctl] = -1
    end = cols.value_pos + np.maximum(cols.value_len, 0)
    return decode_bodies(cols.data, b, end, k, v, offsets=cols.offset, types=types, impl=impl)
