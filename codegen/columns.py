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

Where the text comes from: this module computes the per-type functions and the
tables (``LAYOUTS``, ``ERRORS``, the apiKey dispatch); everything else -- the
runtime helpers (``Cur``, ``Buf``, ``rd_*``, ``ap_*``, ...) and the entry points
``decode_type``/``decode_rows`` -- is written out in the templates
``codegen/templates/_metadata_columns.py.tmpl`` (twin) and
``_metadata_columns.pyx.tmpl`` (Cython), whose ``${name}`` placeholders receive
the computed parts (``render_template``; see the ``codegen`` package doc).
"""
from __future__ import annotations

import re
from importlib.resources import files
from string import Template

from .emit import HEADER, Emitter
from .schema import FieldSpec, MessageSpec

#: Where the module templates live (``render_template``).
TEMPLATES = files(__package__) / "templates"

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
            from kraft_storage.messages.runtime import Uuid
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
        """The whole module: ``templates/_metadata_columns.<dialect>.tmpl`` filled in."""
        layouts = []
        for m in msgs:
            self.out(0, f"# {'-' * 70} {m.name} (apiKey {m.api_key})")
            self.out(0)
            plan, tree, fn = self.emit_type(m)
            layouts.append((m, plan, tree, fn))
            self.out(0)
        values = {
            "header": HEADER.rstrip("\n"),
            "doc": doc.strip("\n"),
            "types": "\n".join(self.lines).strip("\n"),
            "layouts": "\n".join(
                f"    {m.api_key}: ({m.name!r}, ({m.valid.lo}, {m.valid.hi}),\n"
                f"        {tuple(plan.bufs)!r},\n"
                f"        {tree!r},\n"
                f"        {tuple(plan.field_names)!r}),"
                for m, plan, tree, fn in layouts),
            "errors": "\n".join(f"    {k}: {v!r}," for k, v in ERRORS.items()),
            "max_api_key": str(max(m.api_key for m in msgs)),
        }
        if self.dialect == "pyx":
            values["nkeys"] = str(max(m.api_key for m in msgs) + 1)
            values["decoder_cases"] = "\n".join(
                f"    if api_key == {m.api_key}:\n        return {fn}" for m, plan, tree, fn in layouts)
            values["record_decoder_cases"] = "\n".join(
                f"    if api_key == {m.api_key}:\n        return _rec_{m.name}" for m, plan, tree, fn in layouts)
        else:
            values["decoders"] = "\n".join(f"    {m.api_key}: {fn}," for m, plan, tree, fn in layouts)
            values["record_decoders"] = "\n".join(
                f"    {m.api_key}: _rec_{m.name}," for m, plan, tree, fn in layouts)
        text = render_template(f"_metadata_columns.{self.dialect}.tmpl", values)
        # Tidy: no trailing blanks, at most two blank lines in a row, one final newline.
        out, blank = [], 0
        for line in text.split("\n"):
            blank = blank + 1 if not line.strip() else 0
            if blank <= 2:
                out.append(line.rstrip())
        return "\n".join(out).rstrip("\n") + "\n"


def columns_source(msgs: list[MessageSpec], doc: str, dialect: str) -> str:
    return ColumnsEmitter(dialect).module(msgs, doc)


def render_template(name: str, values: dict[str, str]) -> str:
    """``templates/<name>`` with every ``${key}`` replaced by ``values[key]`` (``string.Template``).

    The keys must be exactly the template's placeholders: a placeholder
    without a value, or a value without a placeholder, is an error rather
    than a silently unfilled or dropped section.  A literal ``$`` is ``$$``.
    """
    tmpl = Template((TEMPLATES / name).read_text(encoding="utf-8"))
    if not tmpl.is_valid():
        raise ValueError(f"codegen/templates/{name}: malformed placeholder (write $$ for a literal $)")
    wanted = set(tmpl.get_identifiers())
    if wanted != set(values):
        raise KeyError(f"codegen/templates/{name}: placeholders {sorted(wanted)}, values {sorted(values)}")
    return tmpl.substitute(values)
