"""Emit the columnar decoder of metadata record bodies (native Cython + pure-Python twin).

Why a second target: the typed codecs (``emit.py``) build one Python object per
record and per nested struct, which caps replay at 1-5M records/s per type.
Replay and the Spark reader want *columns*: this target decodes every body of
one record type in one tight loop into growable flat buffers, with no Python
object per record.  Both dialects are emitted from the same walk over the
schemas, so the twin (``py``) is the executable specification of the native
module (``pyx``): same functions, same buffers, same error codes.

Column layout (Arrow-compatible; ``layout`` node kinds, buffers numbered per
record type; every buffer is appended to in record order)::

    ("fixed", dtype, v)         scalars: int8 int16 uint16 int32 uint32 int64
                                float64 bool; buffer v holds one value per entry
    ("uuid", v)                 16 raw bytes per entry (Kafka's Uuid)
    ("string"|"bytes", o, d, n) o: int32 offsets (starts with one 0, one more per
                                entry), d: the bytes, n: validity (1 byte per
                                entry, 0 = null) or -1 when never nullable
    ("list", o, n, child)       o: int32 offsets into the child entries, n as above
    ("struct", ((name, node), ...))  array elements of a struct type: each child
                                has one entry per element (elements are never null)

Entry points of the generated modules: ``decode_rows`` (every wanted type in
one front-to-back pass over the rows, each body handed to its type's
``_rec_<Type>`` function: reads the buffer in order, which matters when types
interleave) and ``decode_type`` (the rows of one type, ``_dec_<Type>``; kept
for per-type measurements).  Both return errors instead of raising, see below.

Decoding rules (the same as the typed decoder, ``emit.Emitter.emit_reader``):
fields absent in a record's version get the schema default; tagged fields
first get their default at their place, and a known tag then *replaces* that
last entry (``pop_*`` + read); unknown tags are skipped; tags must ascend and
fill their declared size; varints are at most 5 bytes and 32 bits; an array
count must not exceed the bytes left; strings must be valid UTF-8; a body must
be consumed exactly.  A read never goes past the record's end: on the first
problem the cursor records (error code, byte position, field id) and jumps to
the end, so every later read of the record fails fast, and the type loop stops
after that record.  Errors are returned, never raised, from the hot loop; the
public facade (``kraft_storage.messages.columns``) turns them into
``MessageError`` naming the record offset.
"""
from __future__ import annotations

import re

from .emit import HEADER, Emitter
from .schema import FieldSpec, MessageSpec

#: buffer kind -> (element size in bytes, numpy dtype name)
BUF_KINDS = {
    "int8": (1, "int8"), "int16": (2, "int16"), "uint16": (2, "uint16"), "int32": (4, "int32"),
    "uint32": (4, "uint32"), "int64": (8, "int64"), "float64": (8, "float64"), "bool": (1, "bool"),
    "uuid": (16, "uint8"), "offsets": (4, "int32"), "data": (1, "uint8"), "valid": (1, "bool"),
}
FIXED = ("int8", "int16", "uint16", "int32", "uint32", "int64", "float64", "bool")
#: C type of each fixed kind (pyx dialect).
CTYPE = {"int8": "int8_t", "int16": "int16_t", "uint16": "uint16_t", "int32": "int32_t",
         "uint32": "uint32_t", "int64": "int64_t", "float64": "double", "bool": "uint8_t"}

#: error code -> reason (shared by both dialects and the facade).
ERRORS = {
    1: "truncated record body",
    2: "malformed varint",
    3: "length exceeds the bytes left in the record",
    4: "null in a non-nullable field",
    5: "negative length",
    6: "invalid UTF-8 in string",
    7: "tagged field out of order",
    8: "tagged field size exceeds the bytes left in the record",
    9: "tagged field value does not fill its declared size",
    10: "unexpected trailing bytes after the record body",
    11: "column larger than 2 GiB (decode fewer records at a time)",
    12: "out of memory",
    13: "unsupported record version",
}


class _Plan:
    """Buffers and layout of one record type."""

    def __init__(self):
        self.bufs: list[tuple[str, int]] = []  # (kind, top-level?)
        self.field_names: list[str] = []

    def buf(self, kind: str, top: bool) -> int:
        self.bufs.append((kind, 1 if top else 0))
        return len(self.bufs) - 1

    def fid(self, name: str) -> int:
        self.field_names.append(name)
        return len(self.field_names) - 1


def _has_validity(f: FieldSpec) -> bool:
    return not f.nullable.empty or f.default == "null"


def _node(plan: _Plan, f: FieldSpec, top: bool, elem: bool = False):
    """Layout node of field ``f`` (``elem``: the element type of an array field)."""
    t = f.elem if elem else f.type
    if not elem and f.is_array:
        o = plan.buf("offsets", top)
        n = plan.buf("valid", top) if _has_validity(f) else -1
        return ("list", o, n, _node(plan, f, False, elem=True))
    if f.is_struct:
        if not elem:
            raise NotImplementedError(f"columnar decoding of a non-array struct field ({f.name})")
        return ("struct", tuple((g.attr, _node(plan, g, False)) for g in f.struct.fields))
    if t in FIXED:
        return ("fixed", t, plan.buf(t, top))
    if t == "uuid":
        return ("uuid", plan.buf("uuid", top))
    if t in ("string", "bytes", "records"):
        o = plan.buf("offsets", top)
        d = plan.buf("data", top)
        n = plan.buf("valid", top) if (not elem and _has_validity(f)) else -1
        return ("string" if t == "string" else "bytes", o, d, n)
    raise NotImplementedError(f"columnar decoding of type {t} ({f.name})")


class ColumnsEmitter:
    def __init__(self, dialect: str):
        assert dialect in ("py", "pyx")
        self.dialect = dialect
        self.lines: list[str] = []

    def out(self, ind: int, text: str = ""):
        self.lines.append(("    " * ind + text) if text else "")

    def B(self, i: int) -> str:
        if i < 0:
            return "NULL" if self.dialect == "pyx" else "None"
        return f"&b[{i}]" if self.dialect == "pyx" else f"b[{i}]"

    def lit(self, raw: bytes) -> str:
        return repr(raw)

    # ------------------------------------------------------------ defaults
    def default_fixed(self, f: FieldSpec) -> str:
        d = f.default
        t = f.type
        if t == "bool":
            return "1" if d == "true" else "0"
        if t == "float64":
            return repr(float(d)) if d not in (None, "") else "0.0"
        return str(int(d, 0)) if d not in (None, "") else "0"

    def emit_default(self, ind: int, f: FieldSpec, node):
        kind = node[0]
        if kind == "fixed":
            self.out(ind, f"ap_{node[1]}(c, {self.B(node[2])}, {self.default_fixed(f)})")
        elif kind == "uuid":
            from kraft_storage.messages._runtime import Uuid
            raw = bytes(16) if f.default in (None, "") else bytes(Uuid(f.default)._b)
            self.out(ind, f"ap_raw(c, {self.B(node[1])}, {self.lit(raw)}, 16)")
        elif kind in ("string", "bytes"):
            if f.default == "null":
                self.out(ind, f"ap_blob_null(c, {self.B(node[1])}, {self.B(node[3])})")
            else:
                raw = (f.default or "").encode() if kind == "string" else b""
                self.out(ind, f"ap_blob(c, {self.B(node[1])}, {self.B(node[2])}, {self.B(node[3])}, "
                              f"{self.lit(raw)}, {len(raw)})")
        elif kind == "list":
            self.out(ind, f"ap_list(c, {self.B(node[1])}, {self.B(node[2])}, {-1 if f.default == 'null' else 0})")
        else:
            raise NotImplementedError(kind)

    def emit_pop(self, ind: int, node):
        kind = node[0]
        if kind == "fixed":
            self.out(ind, f"pop(c, {self.B(node[2])}, {BUF_KINDS[node[1]][0]})")
        elif kind == "uuid":
            self.out(ind, f"pop(c, {self.B(node[1])}, 16)")
        elif kind in ("string", "bytes"):
            self.out(ind, f"pop_blob(c, {self.B(node[1])}, {self.B(node[2])}, {self.B(node[3])})")
        elif kind == "list":
            self.out(ind, f"pop_list(c, {self.B(node[1])}, {self.B(node[2])})")
        else:
            raise NotImplementedError(kind)

    # ------------------------------------------------------------ reads
    def emit_value(self, ind: int, f: FieldSpec, node, msg: MessageSpec, flex: bool, nullable: bool,
                   depth: int, plan: _Plan, path: str):
        kind = node[0]
        n = "1" if nullable else "0"
        if kind == "fixed":
            self.out(ind, f"ap_{node[1]}(c, {self.B(node[2])}, rd_{node[1]}(c))")
        elif kind == "uuid":
            self.out(ind, f"rd_uuids(c, {self.B(node[1])}, 1)")
        elif kind in ("string", "bytes"):
            mode = 0 if flex else (1 if kind == "string" else 2)
            utf8 = "1" if kind == "string" else "0"
            self.out(ind, f"rd_blob(c, {self.B(node[1])}, {self.B(node[2])}, {self.B(node[3])}, {mode}, {n}, {utf8})")
        elif kind == "list":
            nv, kv = f"n{depth}", f"k{depth}"
            self.out(ind, f"{nv} = rd_arrlen(c, {1 if flex else 0}, {n})")
            child = node[3]
            ck = child[0]
            if ck == "fixed" and child[1] == "int32":
                self.out(ind, f"rd_int32s(c, {self.B(child[2])}, {nv})")
            elif ck == "uuid":
                self.out(ind, f"rd_uuids(c, {self.B(child[1])}, {nv})")
            elif ck == "struct":
                self.out(ind, f"for {kv} in range({nv}):")
                self.emit_level(ind + 1, f.struct.fields, child, msg, depth + 1, plan, path + "[]")
            else:
                self.out(ind, f"for {kv} in range({nv}):")
                self.emit_value(ind + 1, f, child, msg, flex, False, depth + 1, plan, path + "[]")
            self.out(ind, f"ap_list(c, {self.B(node[1])}, {self.B(node[2])}, {nv})")
        else:
            raise NotImplementedError(kind)

    def emit_level(self, ind: int, fields: list[FieldSpec], node, msg: MessageSpec, depth: int,
                   plan: _Plan, path: str):
        """Fields of one record body or one struct array element, then its tagged fields."""
        vs = msg.version_list
        vmin, vmax = vs[0], vs[-1]
        children = dict(node[1])
        em = Emitter()
        for f in fields:
            cn = children[f.attr]
            fid = plan.fid(f"{path}.{f.name}")
            self.out(ind, f"c.fld = {fid}")
            runs = em.groups(vs, lambda v, f=f: em._read_key(f, msg, v))
            if len(runs) == 1:
                self._field_mode(ind, f, cn, msg, runs[0][2], depth, plan, path)
                continue
            kw = "if"
            for lo, hi, k in runs:
                self.out(ind, f"{kw} {em.cond(lo, hi, vmin, vmax)}:")
                self._field_mode(ind + 1, f, cn, msg, k, depth, plan, path)
                kw = "elif"
        flex_runs = [(lo, hi) for lo, hi, k in em.groups(vs, lambda v: v in msg.flexible) if k]
        if not flex_runs:
            return
        lo, hi = flex_runs[0]
        cnd = em.cond(lo, hi, vmin, vmax)
        if cnd != "True":
            self.out(ind, f"if {cnd}:")
            ind += 1
        d = depth
        self.out(ind, f"c.fld = {plan.fid(path + '._tagged_fields')}")
        self.out(ind, f"nt{d} = rd_uvarint(c)")
        self.out(ind, f"last{d} = -1")
        self.out(ind, f"for t{d} in range(nt{d}):")
        self.out(ind + 1, f"tag{d} = rd_uvarint(c)")
        self.out(ind + 1, f"tend{d} = tag_start(c, tag{d}, last{d})")
        self.out(ind + 1, f"last{d} = tag{d}")
        tagged = sorted((f for f in fields if not f.tagged.empty), key=lambda f: f.tag)
        kw = "if"
        for f in tagged:
            cn = children[f.attr]
            for tlo, thi, nullable in em.groups([v for v in vs if v in f.tagged], lambda v, f=f: v in f.nullable):
                c = em.cond(tlo, thi, vmin, vmax)
                c = f"tag{d} == {f.tag}" + ("" if c == "True" else f" and {c}")
                self.out(ind + 1, f"{kw} {c}:")
                self.out(ind + 2, f"c.fld = {plan.fid(f'{path}.{f.name}')}")
                self.emit_pop(ind + 2, cn)
                self.emit_value(ind + 2, f, cn, msg, True, nullable, depth + 1, plan, f"{path}.{f.name}")
                kw = "elif"
        if kw == "elif":
            self.out(ind + 1, "else:")
            self.out(ind + 2, f"c.pos = tend{d}")
        else:
            self.out(ind + 1, f"c.pos = tend{d}")
        self.out(ind + 1, f"tag_end(c, tend{d})")
        self.out(ind + 1, "if c.err:")
        self.out(ind + 2, "break")

    def _field_mode(self, ind, f, cn, msg, mode, depth, plan, path):
        if mode[0] == "reg":
            self.emit_value(ind, f, cn, msg, mode[1], mode[2], depth + 1, plan, f"{path}.{f.name}")
        else:
            self.emit_default(ind, f, cn)

    # ------------------------------------------------------------ per type
    def emit_type(self, msg: MessageSpec) -> tuple:
        """``_rec_<Name>``: one record body at c.pos..c.end; ``_dec_<Name>``: a loop over rows of the type."""
        plan = _Plan()
        tree = ("struct", tuple((f.attr, _node(plan, f, True)) for f in msg.fields))
        rec, fn = f"_rec_{msg.name}", f"_dec_{msg.name}"
        if self.dialect == "pyx":
            self.out(0, f"cdef inline int {rec}(Cur* c, Buf* b, int version) noexcept nogil:")
        else:
            self.out(0, f"def {rec}(c, b, version):")
        decl_at = len(self.lines)
        self.emit_level(1, msg.fields, tree, msg, 0, plan, msg.name)
        self.out(1, "if c.err == 0 and c.pos != c.end:")
        self.out(2, f"c.fld = {plan.fid(msg.name)}")
        self.out(2, "fail(c, 10)")
        self.out(1, "return c.err")
        if self.dialect == "pyx":
            text = "\n".join(self.lines[decl_at:])
            used = sorted(set(re.findall(r"\b(?:n|k|nt|t|tag|last|tend)[0-9]+\b", text)))
            if used:
                self.lines.insert(decl_at, "    cdef int64_t " + ", ".join(used))
        self.out(0)
        self.out(0)
        if self.dialect == "pyx":
            self.out(0, f"cdef int64_t {fn}(Cur* c, Buf* b, const int64_t* bpos, const int64_t* bend, "
                        "const int16_t* vers, const int64_t* rows, int64_t m) noexcept nogil:")
            self.out(1, "cdef int64_t j, i")
        else:
            self.out(0, f"def {fn}(c, b, bpos, bend, vers, rows, m):")
        self.out(1, "for j in range(m):")
        self.out(2, "i = rows[j]")
        self.out(2, "c.pos = bpos[i]")
        self.out(2, "c.end = bend[i]")
        self.out(2, f"if {rec}(c, b, vers[i]):")
        self.out(3, "return j")
        self.out(1, "return -1")
        self.out(0)
        return plan, tree, fn

    # ------------------------------------------------------------ module
    def module(self, msgs: list[MessageSpec], doc: str) -> str:
        self.out(0, HEADER.rstrip("\n"))
        if self.dialect == "pyx":
            self.out(0, "# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True")
        self.out(0, '"""' + doc.strip("\n"))
        self.out(0, '"""')
        self.lines += (PYX_RUNTIME if self.dialect == "pyx" else PY_RUNTIME).strip("\n").split("\n")
        self.out(0)
        self.out(0)
        layouts = []
        for m in msgs:
            self.out(0, f"# {'-' * 70} {m.name} (apiKey {m.api_key})")
            self.out(0)
            plan, tree, fn = self.emit_type(m)
            layouts.append((m, plan, tree, fn))
            self.out(0)
        self.out(0, "#: apiKey -> (name, (lowest, highest version), buffers ((kind, top-level), ...),")
        self.out(0, "#: layout tree, field names by id).  See the module doc for the layout nodes.")
        self.out(0, "LAYOUTS = {")
        for m, plan, tree, fn in layouts:
            self.out(1, f"{m.api_key}: ({m.name!r}, ({m.valid.lo}, {m.valid.hi}),")
            self.out(2, f"{tuple(plan.bufs)!r},")
            self.out(2, f"{tree!r},")
            self.out(2, f"{tuple(plan.field_names)!r}),")
        self.out(0, "}")
        self.out(0)
        self.out(0, "#: error code -> reason.")
        self.out(0, "ERRORS = {")
        for k, v in ERRORS.items():
            self.out(1, f"{k}: {v!r},")
        self.out(0, "}")
        self.out(0)
        self.out(0)
        self.out(0, "#: the highest apiKey with a decoder")
        self.out(0, f"MAX_API_KEY = {max(m.api_key for m in msgs)}")
        if self.dialect == "pyx":
            self.out(0)
            self.out(0, "cdef enum:")
            self.out(1, f"_NKEYS = {max(m.api_key for m in msgs) + 1}")
        self.out(0)
        if self.dialect == "pyx":
            self.out(0, "cdef decfn _decoder(int api_key) noexcept:")
            for m, plan, tree, fn in layouts:
                self.out(1, f"if api_key == {m.api_key}:")
                self.out(2, f"return {fn}")
            self.out(1, "return NULL")
            self.out(0)
            self.out(0)
            self.out(0, "cdef recfn _record_decoder(int api_key) noexcept:")
            for m, plan, tree, fn in layouts:
                self.out(1, f"if api_key == {m.api_key}:")
                self.out(2, f"return _rec_{m.name}")
            self.out(1, "return NULL")
        else:
            self.out(0, "_DECODERS = {")
            for m, plan, tree, fn in layouts:
                self.out(1, f"{m.api_key}: {fn},")
            self.out(0, "}")
            self.out(0, "_RECORD_DECODERS = {")
            for m, plan, tree, fn in layouts:
                self.out(1, f"{m.api_key}: _rec_{m.name},")
            self.out(0, "}")
        self.out(0)
        self.lines += (PYX_ENTRY if self.dialect == "pyx" else PY_ENTRY).strip("\n").split("\n")
        out, blank = [], 0
        for line in self.lines:
            blank = blank + 1 if not line.strip() else 0
            if blank <= 2:
                out.append(line.rstrip())
        return "\n".join(out).rstrip("\n") + "\n"


def columns_source(msgs: list[MessageSpec], doc: str, dialect: str) -> str:
    return ColumnsEmitter(dialect).module(msgs, doc)


# =====================================================================================
# Runtime of the pure-Python dialect (emitted verbatim into the twin).
# =====================================================================================

PY_RUNTIME = r'''
from __future__ import annotations

import struct as _struct

import numpy as np

_I16 = _struct.Struct(">h").unpack_from
_U16 = _struct.Struct(">H").unpack_from
_I32 = _struct.Struct(">i").unpack_from
_U32 = _struct.Struct(">I").unpack_from
_I64 = _struct.Struct(">q").unpack_from
_F64 = _struct.Struct(">d").unpack_from
_INT32_MAX = 0x7FFFFFFF


class Cur:
    """Cursor over one record body: ``p`` the whole buffer, [pos, end) the body."""

    __slots__ = ("p", "pos", "end", "err", "errpos", "fld", "errfld")

    def __init__(self, p):
        self.p = p
        self.pos = self.end = 0
        self.err = self.errpos = 0
        self.fld = self.errfld = -1


class Buf:
    """One growable column buffer: a list of values, or a bytearray for raw bytes."""

    __slots__ = ("v",)

    def __init__(self, kind):
        if kind in ("uuid", "data"):
            self.v = bytearray()
        elif kind == "offsets":
            self.v = [0]
        else:
            self.v = []


def fail(c, code):
    """Record the first problem (code, position, field) and jump to the end of the body."""
    if c.err == 0:
        c.err = code
        c.errpos = c.pos
        c.errfld = c.fld
    c.pos = c.end


def need(c, k):
    q = c.pos
    if c.end - q < k:
        fail(c, 1)
        return -1
    c.pos = q + k
    return q


def rd_int8(c):
    q = need(c, 1)
    if q < 0:
        return 0
    b = c.p[q]
    return b - 256 if b > 127 else b


def rd_bool(c):
    q = need(c, 1)
    return 0 if q < 0 else (1 if c.p[q] else 0)


def rd_int16(c):
    q = need(c, 2)
    return 0 if q < 0 else _I16(c.p, q)[0]


def rd_uint16(c):
    q = need(c, 2)
    return 0 if q < 0 else _U16(c.p, q)[0]


def rd_int32(c):
    q = need(c, 4)
    return 0 if q < 0 else _I32(c.p, q)[0]


def rd_uint32(c):
    q = need(c, 4)
    return 0 if q < 0 else _U32(c.p, q)[0]


def rd_int64(c):
    q = need(c, 8)
    return 0 if q < 0 else _I64(c.p, q)[0]


def rd_float64(c):
    q = need(c, 8)
    return 0.0 if q < 0 else _F64(c.p, q)[0]


def rd_uvarint(c):
    """Kafka's unsigned varint: at most 5 bytes, at most 32 bits."""
    q = c.pos
    p = c.p
    result = shift = 0
    while True:
        if q >= c.end:
            fail(c, 1)
            return 0
        b = p[q]
        q += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            fail(c, 2)
            return 0
    if result > 0xFFFFFFFF:
        fail(c, 2)
        return 0
    c.pos = q
    return result


def _length(c, n, nullable):
    """-1 for null, else n checked against the bytes left (0 after a failure)."""
    if n < 0:
        if n == -1 and nullable:
            return -1
        fail(c, 4 if n == -1 else 5)
        return 0
    if n > c.end - c.pos:
        fail(c, 3)
        return 0
    return n


def rd_arrlen(c, compact, nullable):
    n = rd_uvarint(c) - 1 if compact else rd_int32(c)
    if c.err:
        return 0
    return _length(c, n, nullable)


def ap_int8(c, b, v):
    b.v.append(v)


ap_int16 = ap_uint16 = ap_int32 = ap_uint32 = ap_int64 = ap_float64 = ap_bool = ap_int8


def ap_raw(c, b, raw, n):
    b.v += raw


def pop(c, b, size):
    if isinstance(b.v, bytearray):
        del b.v[len(b.v) - size:]
    else:
        b.v.pop()


def _offset(c, o, n):
    end = o.v[-1] + n
    if end > _INT32_MAX:
        fail(c, 11)
        return
    o.v.append(end)


def ap_blob_null(c, o, valid):
    o.v.append(o.v[-1])
    valid.v.append(0)


def ap_blob(c, o, d, valid, raw, n):
    d.v += raw
    _offset(c, o, n)
    if valid is not None:
        valid.v.append(1)


def pop_blob(c, o, d, valid):
    o.v.pop()
    del d.v[o.v[-1]:]
    if valid is not None:
        valid.v.pop()


def rd_blob(c, o, d, valid, mode, nullable, utf8):
    if mode == 0:
        n = rd_uvarint(c) - 1
    elif mode == 1:
        n = rd_int16(c)
    else:
        n = rd_int32(c)
    if c.err:
        return
    n = _length(c, n, nullable)
    if n < 0:
        ap_blob_null(c, o, valid)
        return
    q = c.pos
    raw = bytes(c.p[q:q + n])
    if utf8:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            fail(c, 6)
            return
    c.pos = q + n
    ap_blob(c, o, d, valid, raw, n)


def ap_list(c, o, valid, n):
    _offset(c, o, n if n > 0 else 0)
    if valid is not None:
        valid.v.append(0 if n < 0 else 1)


def pop_list(c, o, valid):
    o.v.pop()
    if valid is not None:
        valid.v.pop()


def rd_int32s(c, b, n):
    if n <= 0:
        return
    q = need(c, 4 * n)
    if q < 0:
        return
    b.v.extend(_struct.unpack_from(f">{n}i", c.p, q))


def rd_uuids(c, b, n):
    if n <= 0:
        return
    q = need(c, 16 * n)
    if q < 0:
        return
    b.v += c.p[q:q + 16 * n]


def tag_start(c, tag, last):
    """Check a tag header (tag already read); read its size; return where its value ends."""
    if c.err:
        return c.end
    if tag <= last:
        fail(c, 7)
        return c.end
    size = rd_uvarint(c)
    if c.err:
        return c.end
    if size > c.end - c.pos:
        fail(c, 8)
        return c.end
    return c.pos + size


def tag_end(c, tend):
    if c.err == 0 and c.pos != tend:
        fail(c, 9)
'''

PY_ENTRY = r'''
_DTYPES = {"int8": np.int8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
           "int64": np.int64, "float64": np.float64, "bool": np.bool_, "offsets": np.int32, "valid": np.bool_}


def _finish(kind, b):
    if kind in ("uuid", "data"):
        a = np.frombuffer(bytes(b.v), dtype=np.uint8)
        return a.reshape(-1, 16) if kind == "uuid" else a
    return np.array(b.v, dtype=_DTYPES[kind])


def decode_type(api_key, data, body_pos, body_end, version, rows):
    """Decode the bodies of ``rows`` (all of record type ``api_key``) into column buffers.

    ``body_pos``/``body_end``: int64 [start, end) of every record's body in
    ``data``; ``version``: int16 record versions (already checked against the
    type's valid versions by the caller); ``rows``: int64 indices into them.
    Returns ``(buffers, None)``, buffers being numpy arrays in ``LAYOUTS``
    order, or ``(None, (j, code, position, field_id))`` for the first bad
    record ``rows[j]`` (``ERRORS[code]``; ``position`` indexes ``data``).
    """
    layout = LAYOUTS[api_key]
    fn = _DECODERS[api_key]
    mv = memoryview(data).cast("B")
    bpos = np.asarray(body_pos, dtype=np.int64)
    bend = np.asarray(body_end, dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    if len(bpos) != len(bend) or len(version) != len(bpos):
        raise ValueError("body_pos, body_end and version must have the same length")
    if len(rows):
        if rows.min() < 0 or rows.max() >= len(bpos):
            raise ValueError("row index outside the columns")
        sp, se = bpos[rows], bend[rows]
        if (sp < 0).any() or (se < sp).any() or (se > len(mv)).any():
            raise ValueError(f"a record body lies outside the {len(mv)}-byte buffer")
    c = Cur(mv)
    b = [Buf(kind) for kind, _top in layout[2]]
    bad = fn(c, b, bpos.tolist(), bend.tolist(), np.asarray(version).tolist(), rows.tolist(), len(rows))
    if bad >= 0:
        return None, (bad, c.err, c.errpos, c.errfld)
    return [_finish(kind, x) for (kind, _top), x in zip(layout[2], b)], None



def decode_rows(data, body_pos, body_end, api_key, version, rows, wanted):
    """Decode ``rows`` in row order, each body with the decoder of its record type.

    Rows whose ``api_key`` is not in ``wanted`` (or has no decoder, or is -1:
    not a frame) are skipped.  Walking the rows in order reads the buffer
    front to back, which is what makes this faster than one pass per type
    when the types are interleaved.  Returns ``({api_key: (rows_of_type,
    buffers)}, None)`` or ``(None, (row, api_key, code, position, field_id))``
    for the first bad record: first the first row whose version its type
    does not have (code 13), else the first body that does not decode.
    """
    mv = memoryview(data).cast("B")
    bpos = np.asarray(body_pos, dtype=np.int64)
    bend = np.asarray(body_end, dtype=np.int64)
    keys_a = np.asarray(api_key, dtype=np.int16)
    rows = np.asarray(rows, dtype=np.int64)
    if not (len(bpos) == len(bend) == len(version) == len(keys_a)):
        raise ValueError("body_pos, body_end, api_key and version must have the same length")
    wanted = {int(k) for k in wanted if int(k) in LAYOUTS}
    if len(rows) and (rows.min() < 0 or rows.max() >= len(bpos)):
        raise ValueError("row index outside the columns")
    sel = rows[np.isin(keys_a[rows], np.array(sorted(wanted), dtype=np.int16))] if len(rows) else rows
    sp, se = bpos[sel], bend[sel]
    if len(sel) and ((sp < 0).any() or (se < sp).any() or (se > len(mv)).any()):
        raise ValueError(f"a record body lies outside the {len(mv)}-byte buffer")
    if len(sel):  # every version must be one its type has (checked before any body is decoded)
        ks, vsel = keys_a[sel].astype(np.int64), np.asarray(version)[sel]
        lo = np.array([LAYOUTS[k][1][0] if k in LAYOUTS else 0 for k in range(MAX_API_KEY + 1)])[ks]
        hi = np.array([LAYOUTS[k][1][1] if k in LAYOUTS else 0 for k in range(MAX_API_KEY + 1)])[ks]
        badv = np.flatnonzero((vsel < lo) | (vsel > hi))
        if len(badv):
            i = int(sel[badv[0]])
            return None, (i, int(keys_a[i]), 13, int(bpos[i]), -1)
    keys = keys_a.tolist()
    bp, be, vs = bpos.tolist(), bend.tolist(), np.asarray(version).tolist()
    c = Cur(mv)
    bufs = {k: [Buf(kind) for kind, _top in LAYOUTS[k][2]] for k in wanted}
    found = {k: [] for k in wanted}
    for i in sel.tolist():
        k = keys[i]
        c.pos = bp[i]
        c.end = be[i]
        if _RECORD_DECODERS[k](c, bufs[k], vs[i]):
            return None, (i, k, c.err, c.errpos, c.errfld)
        found[k].append(i)
    out = {}
    for k in sorted(wanted):
        if found[k]:
            out[k] = (np.array(found[k], dtype=np.int64),
                      [_finish(kind, x) for (kind, _top), x in zip(LAYOUTS[k][2], bufs[k])])
    return out, None
'''

# =====================================================================================
# Runtime of the Cython dialect.
# =====================================================================================

PYX_RUNTIME = r'''
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

import numpy as np

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    static inline uint16_t kr_be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
    static inline uint32_t kr_be32(const uint8_t *p) {
        uint32_t v; memcpy(&v, p, 4); return __builtin_bswap32(v);
    }
    static inline uint64_t kr_be64(const uint8_t *p) {
        uint64_t v; memcpy(&v, p, 8); return __builtin_bswap64(v);
    }
    /* Strict UTF-8 (RFC 3629: no overlongs, no surrogates, <= U+10FFFF), as
       Python's decoder; 8 ASCII bytes at a time on the fast path. */
    static int kr_utf8_ok(const uint8_t *s, int64_t n) {
        int64_t i = 0;
        while (i < n) {
            if (i + 8 <= n) {
                uint64_t w; memcpy(&w, s + i, 8);
                if (!(w & 0x8080808080808080ULL)) { i += 8; continue; }
            }
            uint8_t c = s[i];
            if (c < 0x80) { i++; continue; }
            if (c < 0xC2) return 0;
            if (c < 0xE0) {
                if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
                i += 2; continue;
            }
            if (c < 0xF0) {
                if (i + 2 >= n) return 0;
                uint8_t c1 = s[i + 1];
                if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
                if (c == 0xE0 && c1 < 0xA0) return 0;
                if (c == 0xED && c1 > 0x9F) return 0;
                i += 3; continue;
            }
            if (c < 0xF5) {
                if (i + 3 >= n) return 0;
                uint8_t c1 = s[i + 1];
                if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
                if (c == 0xF0 && c1 < 0x90) return 0;
                if (c == 0xF4 && c1 > 0x8F) return 0;
                i += 4; continue;
            }
            return 0;
        }
        return 1;
    }
    """
    uint16_t kr_be16(const uint8_t *p) noexcept nogil
    uint32_t kr_be32(const uint8_t *p) noexcept nogil
    uint64_t kr_be64(const uint8_t *p) noexcept nogil
    int kr_utf8_ok(const uint8_t *s, int64_t n) noexcept nogil

cdef int64_t _INT32_MAX = 0x7FFFFFFF
cdef uint8_t _EMPTY[1]

ctypedef struct Cur:
    const uint8_t* p
    int64_t pos
    int64_t end
    int err
    int64_t errpos
    int fld
    int errfld

ctypedef struct Buf:
    uint8_t* d
    int64_t n
    int64_t cap

ctypedef int64_t (*decfn)(Cur*, Buf*, const int64_t*, const int64_t*, const int16_t*, const int64_t*,
                          int64_t) noexcept nogil
ctypedef int (*recfn)(Cur*, Buf*, int) noexcept nogil


cdef inline void fail(Cur* c, int code) noexcept nogil:
    """Record the first problem (code, position, field) and jump to the end of the body."""
    if c.err == 0:
        c.err = code
        c.errpos = c.pos
        c.errfld = c.fld
    c.pos = c.end


cdef inline int64_t need(Cur* c, int64_t k) noexcept nogil:
    cdef int64_t q = c.pos
    if c.end - q < k:
        fail(c, 1)
        return -1
    c.pos = q + k
    return q


cdef inline int8_t rd_int8(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 1)
    return 0 if q < 0 else <int8_t>c.p[q]


cdef inline uint8_t rd_bool(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 1)
    return 0 if q < 0 else (1 if c.p[q] else 0)


cdef inline int16_t rd_int16(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 2)
    return 0 if q < 0 else <int16_t>kr_be16(c.p + q)


cdef inline uint16_t rd_uint16(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 2)
    return 0 if q < 0 else kr_be16(c.p + q)


cdef inline int32_t rd_int32(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 4)
    return 0 if q < 0 else <int32_t>kr_be32(c.p + q)


cdef inline uint32_t rd_uint32(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 4)
    return 0 if q < 0 else kr_be32(c.p + q)


cdef inline int64_t rd_int64(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 8)
    return 0 if q < 0 else <int64_t>kr_be64(c.p + q)


cdef inline double rd_float64(Cur* c) noexcept nogil:
    cdef int64_t q = need(c, 8)
    cdef uint64_t bits
    cdef double d = 0.0
    if q >= 0:
        bits = kr_be64(c.p + q)
        memcpy(&d, &bits, 8)
    return d


cdef inline int64_t rd_uvarint(Cur* c) noexcept nogil:
    """Kafka's unsigned varint: at most 5 bytes, at most 32 bits (0 after a failure)."""
    cdef int64_t q = c.pos
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if q >= c.end:
            fail(c, 1)
            return 0
        b = c.p[q]
        q += 1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 28:
            fail(c, 2)
            return 0
    if result > <uint64_t>0xFFFFFFFFU:
        fail(c, 2)
        return 0
    c.pos = q
    return <int64_t>result


cdef inline int64_t _length(Cur* c, int64_t n, int nullable) noexcept nogil:
    if n < 0:
        if n == -1 and nullable:
            return -1
        fail(c, 4 if n == -1 else 5)
        return 0
    if n > c.end - c.pos:
        fail(c, 3)
        return 0
    return n


cdef inline int64_t rd_arrlen(Cur* c, int compact, int nullable) noexcept nogil:
    cdef int64_t n
    if compact:
        n = rd_uvarint(c) - 1
    else:
        n = rd_int32(c)
    if c.err:
        return 0
    return _length(c, n, nullable)


cdef int grow(Cur* c, Buf* b, int64_t k) noexcept nogil:
    cdef int64_t cap = b.cap * 2
    cdef uint8_t* p
    if cap < b.n + k:
        cap = b.n + k + 64
    p = <uint8_t*>realloc(b.d, cap)
    if p == NULL:
        fail(c, 12)
        return 0
    b.d = p
    b.cap = cap
    return 1


cdef inline uint8_t* room(Cur* c, Buf* b, int64_t k) noexcept nogil:
    """Where to write k more bytes (NULL after a failure); the caller then adds k to b.n."""
    if b.n + k > b.cap and not grow(c, b, k):
        return NULL
    return b.d + b.n


cdef inline void ap_int8(Cur* c, Buf* b, int8_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 1)
    if w != NULL:
        w[0] = <uint8_t>v
        b.n += 1


cdef inline void ap_bool(Cur* c, Buf* b, uint8_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 1)
    if w != NULL:
        w[0] = v
        b.n += 1


cdef inline void ap_int16(Cur* c, Buf* b, int16_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 2)
    if w != NULL:
        memcpy(w, &v, 2)
        b.n += 2


cdef inline void ap_uint16(Cur* c, Buf* b, uint16_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 2)
    if w != NULL:
        memcpy(w, &v, 2)
        b.n += 2


cdef inline void ap_int32(Cur* c, Buf* b, int32_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 4)
    if w != NULL:
        memcpy(w, &v, 4)
        b.n += 4


cdef inline void ap_uint32(Cur* c, Buf* b, uint32_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 4)
    if w != NULL:
        memcpy(w, &v, 4)
        b.n += 4


cdef inline void ap_int64(Cur* c, Buf* b, int64_t v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 8)
    if w != NULL:
        memcpy(w, &v, 8)
        b.n += 8


cdef inline void ap_float64(Cur* c, Buf* b, double v) noexcept nogil:
    cdef uint8_t* w = room(c, b, 8)
    if w != NULL:
        memcpy(w, &v, 8)
        b.n += 8


cdef inline void ap_raw(Cur* c, Buf* b, const char* raw, int64_t n) noexcept nogil:
    cdef uint8_t* w = room(c, b, n)
    if w != NULL:
        memcpy(w, raw, n)
        b.n += n


cdef inline void pop(Cur* c, Buf* b, int64_t size) noexcept nogil:
    if b.n >= size:
        b.n -= size


cdef inline int32_t last_offset(Buf* o) noexcept nogil:
    cdef int32_t v
    memcpy(&v, o.d + o.n - 4, 4)
    return v


cdef inline void _offset(Cur* c, Buf* o, int64_t n) noexcept nogil:
    cdef int64_t end = <int64_t>last_offset(o) + n
    if end > _INT32_MAX:
        fail(c, 11)
        return
    ap_int32(c, o, <int32_t>end)


cdef inline void ap_blob_null(Cur* c, Buf* o, Buf* valid) noexcept nogil:
    ap_int32(c, o, last_offset(o))
    if valid != NULL:
        ap_bool(c, valid, 0)


cdef inline void ap_blob(Cur* c, Buf* o, Buf* d, Buf* valid, const char* raw, int64_t n) noexcept nogil:
    ap_raw(c, d, raw, n)
    _offset(c, o, n)
    if valid != NULL:
        ap_bool(c, valid, 1)


cdef inline void pop_blob(Cur* c, Buf* o, Buf* d, Buf* valid) noexcept nogil:
    if o.n >= 8:
        o.n -= 4
        d.n = last_offset(o)
    if valid != NULL and valid.n >= 1:
        valid.n -= 1


cdef inline void rd_blob(Cur* c, Buf* o, Buf* d, Buf* valid, int mode, int nullable, int utf8) noexcept nogil:
    cdef int64_t n, q
    if mode == 0:
        n = rd_uvarint(c) - 1
    elif mode == 1:
        n = rd_int16(c)
    else:
        n = rd_int32(c)
    if c.err:
        return
    n = _length(c, n, nullable)
    if n < 0:
        ap_blob_null(c, o, valid)
        return
    q = c.pos
    if utf8 and not kr_utf8_ok(c.p + q, n):
        fail(c, 6)
        return
    c.pos = q + n
    ap_blob(c, o, d, valid, <const char*>(c.p + q), n)


cdef inline void ap_list(Cur* c, Buf* o, Buf* valid, int64_t n) noexcept nogil:
    _offset(c, o, n if n > 0 else 0)
    if valid != NULL:
        ap_bool(c, valid, 0 if n < 0 else 1)


cdef inline void pop_list(Cur* c, Buf* o, Buf* valid) noexcept nogil:
    if o.n >= 8:
        o.n -= 4
    if valid != NULL and valid.n >= 1:
        valid.n -= 1


cdef inline void rd_int32s(Cur* c, Buf* b, int64_t n) noexcept nogil:
    cdef int64_t q, k
    cdef uint8_t* w
    cdef int32_t v
    if n <= 0:
        return
    q = need(c, 4 * n)
    if q < 0:
        return
    w = room(c, b, 4 * n)
    if w == NULL:
        return
    for k in range(n):
        v = <int32_t>kr_be32(c.p + q + 4 * k)
        memcpy(w + 4 * k, &v, 4)
    b.n += 4 * n


cdef inline void rd_uuids(Cur* c, Buf* b, int64_t n) noexcept nogil:
    cdef int64_t q
    if n <= 0:
        return
    q = need(c, 16 * n)
    if q < 0:
        return
    ap_raw(c, b, <const char*>(c.p + q), 16 * n)


cdef inline int64_t tag_start(Cur* c, int64_t tag, int64_t last) noexcept nogil:
    cdef int64_t size
    if c.err:
        return c.end
    if tag <= last:
        fail(c, 7)
        return c.end
    size = rd_uvarint(c)
    if c.err:
        return c.end
    if size > c.end - c.pos:
        fail(c, 8)
        return c.end
    return c.pos + size


cdef inline void tag_end(Cur* c, int64_t tend) noexcept nogil:
    if c.err == 0 and c.pos != tend:
        fail(c, 9)
'''

PYX_ENTRY = r'''
_DTYPES = {"int8": np.int8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
           "int64": np.int64, "float64": np.float64, "bool": np.bool_, "offsets": np.int32, "valid": np.bool_,
           "uuid": np.uint8, "data": np.uint8}
_SIZES = {"int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8, "bool": 1,
          "offsets": 4, "valid": 1, "uuid": 16, "data": 1}


def decode_type(api_key, const uint8_t[::1] data, const int64_t[::1] body_pos, const int64_t[::1] body_end,
                const int16_t[::1] version, const int64_t[::1] rows):
    """Decode the bodies of ``rows`` (all of record type ``api_key``) into column buffers.

    Same contract as the twin (``kraft_storage._pure._metadata_columns``):
    ``(buffers, None)`` or ``(None, (j, code, position, field_id))``.  Every
    row index and body range is checked before the loop, which then runs
    without the GIL.
    """
    layout = LAYOUTS[api_key]
    cdef decfn fn = _decoder(api_key)
    cdef int64_t m = rows.shape[0], nb = len(layout[2]), n = body_pos.shape[0], j, i, k, size, bad = -1
    cdef int64_t dlen = data.shape[0]
    cdef Cur c
    cdef Buf* b
    cdef uint8_t[::1] dst
    if fn == NULL:
        raise ValueError(f"no columnar decoder for apiKey {api_key}")
    if body_end.shape[0] != n or version.shape[0] != n:
        raise ValueError("body_pos, body_end and version must have the same length")
    with nogil:
        for j in range(m):
            i = rows[j]
            if i < 0 or i >= n:
                bad = -2
                break
            if body_pos[i] < 0 or body_end[i] < body_pos[i] or body_end[i] > dlen:
                bad = -3
                break
    if bad == -2:
        raise ValueError("row index outside the columns")
    if bad == -3:
        raise ValueError(f"a record body lies outside the {dlen}-byte buffer")
    b = <Buf*>malloc(sizeof(Buf) * (nb if nb else 1))
    if b == NULL:
        raise MemoryError()
    for k in range(nb):
        b[k].d = NULL
        b[k].n = 0
        b[k].cap = 0
    try:
        for k in range(nb):
            kind, top = layout[2][k]
            size = _SIZES[kind]
            b[k].cap = (m * size if top else (m * size) // 2) + 64
            b[k].d = <uint8_t*>malloc(b[k].cap)
            if b[k].d == NULL:
                raise MemoryError()
            if kind == "offsets":
                (<int32_t*>b[k].d)[0] = 0
                b[k].n = 4
        c.p = &data[0] if dlen else _EMPTY
        c.pos = c.end = 0
        c.err = 0
        c.errpos = 0
        c.fld = -1
        c.errfld = -1
        with nogil:
            bad = fn(&c, b, &body_pos[0] if n else NULL, &body_end[0] if n else NULL,
                     &version[0] if n else NULL, &rows[0] if m else NULL, m)
        if bad >= 0:
            return None, (bad, c.err, c.errpos, c.errfld)
        out = []
        for k in range(nb):
            kind, _top = layout[2][k]
            raw = np.empty(b[k].n, dtype=np.uint8)
            if b[k].n:
                dst = raw
                memcpy(&dst[0], b[k].d, b[k].n)
            a = raw.view(_DTYPES[kind])
            out.append(a.reshape(-1, 16) if kind == "uuid" else a)
        return out, None
    finally:
        for k in range(nb):
            free(b[k].d)
        free(b)



cdef list _finish_all(tuple kinds, Buf* b):
    """The buffers as numpy arrays (copies), in LAYOUTS order."""
    cdef list out = []
    cdef int64_t k
    cdef uint8_t[::1] dst
    for k in range(len(kinds)):
        kind = kinds[k][0]
        raw = np.empty(b[k].n, dtype=np.uint8)
        if b[k].n:
            dst = raw
            memcpy(&dst[0], b[k].d, b[k].n)
        a = raw.view(_DTYPES[kind])
        out.append(a.reshape(-1, 16) if kind == "uuid" else a)
    return out


cdef Buf* _alloc_bufs(tuple kinds, int64_t m) except NULL:
    """Column buffers for m records of one type (grown on demand); free with _free_bufs."""
    cdef int64_t nb = len(kinds), k, size
    cdef Buf* b = <Buf*>malloc(sizeof(Buf) * (nb if nb else 1))
    if b == NULL:
        raise MemoryError()
    for k in range(nb):
        b[k].d = NULL
        b[k].n = 0
        b[k].cap = 0
    for k in range(nb):
        kind, top = kinds[k]
        size = _SIZES[kind]
        b[k].cap = (m * size if top else (m * size) // 2) + 64
        b[k].d = <uint8_t*>malloc(b[k].cap)
        if b[k].d == NULL:
            _free_bufs(b, nb)
            raise MemoryError()
        if kind == "offsets":
            (<int32_t*>b[k].d)[0] = 0
            b[k].n = 4
    return b


cdef void _free_bufs(Buf* b, int64_t nb) noexcept:
    cdef int64_t k
    if b == NULL:
        return
    for k in range(nb):
        free(b[k].d)
    free(b)


def decode_rows(const uint8_t[::1] data, const int64_t[::1] body_pos, const int64_t[::1] body_end,
                const int16_t[::1] api_key, const int16_t[::1] version, const int64_t[::1] rows, wanted):
    """Decode ``rows`` in row order, each body with the decoder of its record type.

    Same contract as the twin (``kraft_storage._pure._metadata_columns``).
    Pass 1 counts the rows of each wanted type and checks every row index,
    body range and version; pass 2, without the GIL, decodes front to back
    through a table of per-type record functions.
    """
    cdef int64_t n = body_pos.shape[0], m = rows.shape[0], dlen = data.shape[0], j, i, k, bad = -1, err = 0
    cdef int key
    cdef recfn fns[_NKEYS]
    cdef Buf* tb[_NKEYS]
    cdef int64_t cnt[_NKEYS]
    cdef int64_t fill[_NKEYS]
    cdef int64_t* rp[_NKEYS]
    cdef int lo[_NKEYS]
    cdef int hi[_NKEYS]
    cdef int64_t[::1] rv
    cdef Cur c
    if body_end.shape[0] != n or version.shape[0] != n or api_key.shape[0] != n:
        raise ValueError("body_pos, body_end, api_key and version must have the same length")
    want = {int(x) for x in wanted}
    for k in range(_NKEYS):
        fns[k] = _record_decoder(k) if k in want else NULL
        lo[k], hi[k] = LAYOUTS[k][1] if k in LAYOUTS else (0, -1)
        tb[k] = NULL
        cnt[k] = 0
        fill[k] = 0
        rp[k] = NULL
    with nogil:
        for j in range(m):
            i = rows[j]
            if i < 0 or i >= n:
                err = -2
                break
            key = api_key[i]
            if key < 0 or key >= _NKEYS or fns[key] == NULL:
                continue
            if body_pos[i] < 0 or body_end[i] < body_pos[i] or body_end[i] > dlen:
                err = -3
                break
            if version[i] < lo[key] or version[i] > hi[key]:
                if bad < 0:
                    bad = i  # reported after the range checks of every row
                continue
            cnt[key] += 1
    if err == -2:
        raise ValueError("row index outside the columns")
    if err == -3:
        raise ValueError(f"a record body lies outside the {dlen}-byte buffer")
    if bad >= 0:
        return None, (bad, api_key[bad], 13, body_pos[bad], -1)
    row_arrays = {}
    try:
        for k in range(_NKEYS):
            if cnt[k]:
                arr = np.empty(cnt[k], dtype=np.int64)
                row_arrays[k] = arr
                rv = arr
                rp[k] = &rv[0]
                tb[k] = _alloc_bufs(LAYOUTS[k][2], cnt[k])
        c.p = &data[0] if dlen else _EMPTY
        c.pos = c.end = 0
        c.err = 0
        c.errpos = 0
        c.fld = -1
        c.errfld = -1
        with nogil:
            for j in range(m):
                i = rows[j]
                key = api_key[i]
                if key < 0 or key >= _NKEYS or fns[key] == NULL:
                    continue
                c.pos = body_pos[i]
                c.end = body_end[i]
                if fns[key](&c, tb[key], version[i]):
                    bad = i
                    break
                rp[key][fill[key]] = i
                fill[key] += 1
        if bad >= 0:
            return None, (bad, api_key[bad], c.err, c.errpos, c.errfld)
        out = {}
        for k in range(_NKEYS):
            if cnt[k]:
                out[k] = (row_arrays[k], _finish_all(LAYOUTS[k][2], tb[k]))
        return out, None
    finally:
        for k in range(_NKEYS):
            if tb[k] != NULL:
                _free_bufs(tb[k], len(LAYOUTS[k][2]))
'''
