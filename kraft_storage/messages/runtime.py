"""Shared runtime of the generated Kafka message classes (public: every layer that
reads or writes Kafka messages imports ``Uuid``, ``Reader``, ``Writer``, ``MessageError``
from here; a leaf that imports only :mod:`kraft_storage.errors`, so the kernels may too).

The code generator (``codegen/``) turns each of Kafka's JSON message schemas
into straight-line ``_read_X(r, version)`` / ``_write_X(obj, w, version)``
functions.  Those functions only ever talk to the two small classes here:

* :class:`Reader` walks a ``bytes`` buffer and decodes Kafka's primitive types.
  Every read is bounds-checked and raises :class:`MessageError` naming the byte
  position; ``kraft_storage/_native/_messages_reader.pxi`` is a Cython twin with
  the exact same method names (the generated text is compiled against either).
* :class:`Writer` appends the same primitives to a ``bytearray``.

Wire forms (all integers big-endian, no padding):

=============  ==============================================================
type           encoding
=============  ==============================================================
int8..int64    two's complement, 1/2/4/8 bytes; uint16 2 bytes unsigned
bool           1 byte, 0 = false, anything else = true (Kafka reads != 0)
float64        IEEE-754 double, 8 bytes
uuid           16 raw bytes
string         int16 length (-1 = null) + UTF-8       (non-flexible)
compact str    uvarint (length + 1) (0 = null) + UTF-8 (flexible)
bytes/records  int32 length (-1 = null) + raw / uvarint (length + 1)
array          int32 count (-1 = null) / uvarint (count + 1)
tagged fields  uvarint count, then per field: uvarint tag, uvarint size, value
               (tags strictly ascending; unknown tags are kept verbatim)
=============  ==============================================================

``Uuid`` is Kafka's 128-bit id; its text form is URL-safe base64 without
padding (``AAAAAAAAAAAAAAAAAAAAAA`` for :data:`ZERO_UUID`), as Kafka prints it.

:class:`Message` is the base of every generated class: generic ``read`` /
``write`` entry points, ``__eq__``/``__repr__`` over ``__slots__`` and the
``to_dict``/``from_dict`` JSON forms driven by each class's ``_JSON`` table.
"""
from __future__ import annotations

import base64
import math
import os
import re
import struct
from typing import Any, Protocol

from kraft_storage.errors import KraftStorageError

__all__ = [
    "MessageError", "Uuid", "ZERO_UUID", "ONE_UUID", "METADATA_TOPIC_ID", "Reader", "Writer",
    "Message", "UNSET", "uvarint_size", "kafka_json_names", "GeneratedMessage",
]


class MessageError(KraftStorageError):
    """Malformed message bytes, or a value that cannot be written in a version.

    Attributes:
        reason: what is wrong.
        position: byte position inside the buffer given to the decoder (-1 if n/a).
        path: the message/field path being decoded, outermost first
            (e.g. ``["RegisterBrokerRecord.EndPoints", "BrokerEndpoint.Port"]``).
        offset: log offset of the record, when the caller knows it.
    """

    def __init__(self, reason: str, position: int = -1, path=None, offset=None):
        self.reason = reason
        self.position = position
        self.path = list(path or ())
        self.offset = offset
        super().__init__(reason)

    def __str__(self) -> str:
        parts = [self.reason]
        where = []
        if self.path:
            where.append(" -> ".join(self.path))
        if self.position >= 0:
            where.append(f"byte position {self.position}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if where:
            parts.append(f"({', '.join(where)})")
        return " ".join(parts)

    def within(self, where: str) -> "MessageError":
        """Prefix the field path with an enclosing ``Class.Field`` (innermost is added first)."""
        self.path.insert(0, where)
        return self

    def at_offset(self, offset) -> "MessageError":
        if offset is not None and self.offset is None:
            self.offset = offset
        return self


# --------------------------------------------------------------------------- Uuid

class Uuid:
    """Kafka's 128-bit Uuid (immutable).  ``str()`` gives Kafka's base64 form."""

    __slots__ = ("_b",)

    def __init__(self, value: bytes | str | int):
        if isinstance(value, str):
            value = _uuid_bytes_from_string(value)
        elif isinstance(value, int):
            if not 0 <= value < 1 << 128:
                raise ValueError("Uuid integer out of range")
            value = value.to_bytes(16, "big")
        else:
            value = bytes(value)
            if len(value) != 16:
                raise ValueError(f"Uuid needs 16 bytes, got {len(value)}")
        object.__setattr__(self, "_b", value)

    @classmethod
    def from_string(cls, text: str) -> "Uuid":
        return cls(_uuid_bytes_from_string(text))

    @classmethod
    def random(cls) -> "Uuid":
        """A random Uuid that is neither ZERO nor ONE (Kafka reserves those)."""
        while True:
            u = cls(os.urandom(16))
            if u._b[:-1] != bytes(15) or u._b[-1] > 1:
                return u

    @property
    def bytes(self) -> bytes:
        return self._b

    @property
    def most_significant_bits(self) -> int:
        return int.from_bytes(self._b[:8], "big", signed=True)

    @property
    def least_significant_bits(self) -> int:
        return int.from_bytes(self._b[8:], "big", signed=True)

    def __str__(self) -> str:
        return base64.urlsafe_b64encode(self._b).rstrip(b"=").decode("ascii")

    def __repr__(self) -> str:
        return f"Uuid('{self}')"

    def __eq__(self, other):
        if type(other) is Uuid:
            return self._b == other._b
        return NotImplemented

    def __hash__(self):
        return hash(self._b)

    def __setattr__(self, name, value):
        raise AttributeError("Uuid is immutable")

    def __reduce__(self):
        return (Uuid, (self._b,))


#: Kafka's Uuid text: 22 characters of URL-safe base64, no padding.
_UUID_TEXT = re.compile(r"[A-Za-z0-9_-]{22}")


def _uuid_bytes_from_string(text: str) -> bytes:
    """Kafka's ``Uuid.fromString``: its URL decoder refuses ``+``, ``/`` and anything outside
    the URL-safe alphabet, which Python's ``urlsafe_b64decode`` would let through."""
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"not a Kafka base64 Uuid (22 characters expected): {text!r}")
    if not _UUID_TEXT.fullmatch(text):
        raise ValueError(f"not a Kafka base64 Uuid (URL-safe base64 characters expected): {text!r}")
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except Exception as exc:  # binascii.Error
        raise ValueError(f"not a Kafka base64 Uuid: {text!r}") from exc
    if len(raw) != 16:
        raise ValueError(f"not a Kafka base64 Uuid: {text!r}")
    return raw


def _make_uuid(raw: bytes) -> Uuid:
    u = object.__new__(Uuid)
    object.__setattr__(u, "_b", raw)
    return u


ZERO_UUID = Uuid(bytes(16))
ONE_UUID = Uuid(bytes(15) + b"\x01")
#: The fixed topic id of ``__cluster_metadata`` (``AAAAAAAAAAAAAAAAAAAAAQ``).
METADATA_TOPIC_ID = ONE_UUID


class _Unset:
    """Sentinel for 'use the schema default' where ``None`` is a legal value."""

    __slots__ = ()

    def __repr__(self):
        return "UNSET"

    def __reduce__(self):
        return "UNSET"


UNSET = _Unset()

# --------------------------------------------------------------------------- Reader

_I8 = struct.Struct(">b").unpack_from
_U8 = struct.Struct(">B").unpack_from
_I16 = struct.Struct(">h").unpack_from
_U16 = struct.Struct(">H").unpack_from
_I32 = struct.Struct(">i").unpack_from
_U32 = struct.Struct(">I").unpack_from
_I64 = struct.Struct(">q").unpack_from
_F64 = struct.Struct(">d").unpack_from


class Reader:
    """Bounds-checked cursor over ``bytes`` (pure-Python twin of the Cython Reader).

    ``pos`` is the next byte to read; ``end`` is one past the last readable byte.
    Every method raises :class:`MessageError` (with the position) instead of
    reading past ``end``.
    """

    __slots__ = ("buf", "pos", "end")

    def __init__(self, buf, pos: int = 0, end: int | None = None):
        if type(buf) is not bytes:
            buf = bytes(buf)
        self.buf = buf
        self.pos = pos
        self.end = len(buf) if end is None else end

    # -- errors
    def error(self, reason: str, position: int | None = None) -> MessageError:
        return MessageError(reason, self.pos if position is None else position)

    def _need(self, n: int) -> int:
        p = self.pos
        if n > self.end - p:
            raise MessageError(f"truncated: {n} bytes needed, {self.end - p} left", p)
        self.pos = p + n
        return p

    def remaining(self) -> int:
        return self.end - self.pos

    def expect_end(self):
        if self.pos != self.end:
            raise MessageError(f"{self.end - self.pos} unexpected trailing bytes", self.pos)

    # -- fixed width
    def int8(self) -> int:
        return _I8(self.buf, self._need(1))[0]

    def boolean(self) -> bool:
        return self.buf[self._need(1)] != 0

    def int16(self) -> int:
        return _I16(self.buf, self._need(2))[0]

    def uint16(self) -> int:
        return _U16(self.buf, self._need(2))[0]

    def int32(self) -> int:
        return _I32(self.buf, self._need(4))[0]

    def uint32(self) -> int:
        return _U32(self.buf, self._need(4))[0]

    def int64(self) -> int:
        return _I64(self.buf, self._need(8))[0]

    def float64(self) -> float:
        return _F64(self.buf, self._need(8))[0]

    def uuid(self) -> Uuid:
        p = self._need(16)
        return _make_uuid(self.buf[p:p + 16])

    # -- varints (Kafka's unsigned varint: 7 bits per byte, low groups first, at most 5 bytes)
    def uvarint(self) -> int:
        buf = self.buf
        p = self.pos
        end = self.end
        result = 0
        shift = 0
        while True:
            if p >= end:
                raise MessageError("truncated varint", self.pos)
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 28:
                raise MessageError("malformed varint (more than 5 bytes)", self.pos)
        if result > 0xFFFFFFFF:
            raise MessageError("malformed varint (over 32 bits)", self.pos)
        self.pos = p
        return result

    # -- lengths
    def _length(self, n: int, nullable: bool, what: str, start: int):
        if n < 0:
            if n == -1 and nullable:
                return None
            if n == -1:
                raise MessageError(f"null {what} in a non-nullable field", start)
            raise MessageError(f"negative {what} length {n}", start)
        if n > self.end - self.pos:
            raise MessageError(f"{what} length {n} exceeds the {self.end - self.pos} bytes left", start)
        return n

    def _text(self, n, start):
        p = self.pos
        self.pos = p + n
        try:
            return self.buf[p:p + n].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise MessageError(f"invalid UTF-8 in string: {exc.reason}", start) from None

    def string(self, nullable: bool = False):
        start = self.pos
        n = self._length(self.int16(), nullable, "string", start)
        return None if n is None else self._text(n, start)

    def compact_string(self, nullable: bool = False):
        start = self.pos
        n = self._length(self.uvarint() - 1, nullable, "string", start)
        return None if n is None else self._text(n, start)

    def bytes_(self, nullable: bool = False):
        start = self.pos
        n = self._length(self.int32(), nullable, "bytes", start)
        if n is None:
            return None
        p = self.pos
        self.pos = p + n
        return self.buf[p:p + n]

    def compact_bytes(self, nullable: bool = False):
        start = self.pos
        n = self._length(self.uvarint() - 1, nullable, "bytes", start)
        if n is None:
            return None
        p = self.pos
        self.pos = p + n
        return self.buf[p:p + n]

    def array_len(self, nullable: bool = False):
        """int32 element count; -1 is null.  A count above the bytes left is malformed."""
        start = self.pos
        return self._length(self.int32(), nullable, "array", start)

    def compact_array_len(self, nullable: bool = False):
        start = self.pos
        return self._length(self.uvarint() - 1, nullable, "array", start)

    def int32_array(self, n: int) -> list:
        p = self._need(4 * n)
        return list(struct.unpack_from(f">{n}i", self.buf, p))

    def raw(self, n: int) -> bytes:
        p = self._need(n)
        return self.buf[p:p + n]

    def raw_to(self, end: int) -> bytes:
        """The bytes from ``pos`` up to ``end`` (a position already checked by ``tag_header``)."""
        p = self.pos
        if not p <= end <= self.end:
            raise MessageError("bad raw range", p)
        self.pos = end
        return self.buf[p:end]

    # -- tagged fields
    def tag_count(self) -> int:
        return self.uvarint()

    def tag_header(self, last_tag: int):
        """Read one tag and its size; returns ``(tag, end_position)``."""
        start = self.pos
        tag = self.uvarint()
        if tag <= last_tag:
            raise MessageError(f"tagged field {tag} out of order (after tag {last_tag})", start)
        size = self.uvarint()
        if size > self.end - self.pos:
            raise MessageError(f"tagged field {tag} size {size} exceeds the {self.end - self.pos} bytes left", start)
        return tag, self.pos + size

    def tag_end(self, tag: int, end: int):
        if self.pos != end:
            raise MessageError(f"tagged field {tag} value does not fill its declared size", self.pos)


# --------------------------------------------------------------------------- Writer

_P8 = struct.Struct(">b").pack
_P16 = struct.Struct(">h").pack
_PU16 = struct.Struct(">H").pack
_P32 = struct.Struct(">i").pack
_PU32 = struct.Struct(">I").pack
_P64 = struct.Struct(">q").pack
_PF64 = struct.Struct(">d").pack


def uvarint_bytes(value: int) -> bytes:
    if not 0 <= value <= 0xFFFFFFFF:
        raise MessageError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def uvarint_size(value: int) -> int:
    n = 1
    while value >= 0x80:
        value >>= 7
        n += 1
    return n


#: bytes/records values at least this long are not copied into a spilling Writer.
SPILL_MIN_BYTES = 4096


class Writer:
    """Appends Kafka primitives to a bytearray (``getvalue()`` returns bytes).

    ``spill``: None (default), or a list that makes the writer leave large
    ``bytes``/``records`` values out of ``out``: their length prefix is written
    and ``(position in out, value)`` is appended to ``spill`` instead of the
    bytes (see ``framing.encode_response(chunks=True)``: a Fetch answer's records
    go to the socket without being copied into the frame first)."""

    __slots__ = ("out", "spill")

    def __init__(self):
        self.out = bytearray()
        self.spill = None

    def getvalue(self) -> bytes:
        return bytes(self.out)

    def int8(self, v):
        self.out += _P8(v)

    def boolean(self, v):
        if type(v) is not bool:
            raise MessageError(f"bool expected, got {type(v).__name__}")
        self.out.append(1 if v else 0)

    def int16(self, v):
        self.out += _P16(v)

    def uint16(self, v):
        self.out += _PU16(v)

    def int32(self, v):
        self.out += _P32(v)

    def uint32(self, v):
        self.out += _PU32(v)

    def int64(self, v):
        self.out += _P64(v)

    def float64(self, v):
        self.out += _PF64(v)

    def uuid(self, v):
        if type(v) is not Uuid:
            raise MessageError(f"Uuid expected, got {type(v).__name__}")
        self.out += v._b

    def uvarint(self, v):
        self.out += uvarint_bytes(v)

    def string(self, v, nullable=False):
        if v is None:
            if not nullable:
                raise MessageError("null in a non-nullable string field")
            self.out += b"\xff\xff"
            return
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise MessageError(f"string of {len(b)} bytes is too long for an int16 length")
        self.out += _P16(len(b))
        self.out += b

    def compact_string(self, v, nullable=False):
        if v is None:
            if not nullable:
                raise MessageError("null in a non-nullable string field")
            self.out.append(0)
            return
        b = v.encode("utf-8")
        if len(b) > 0x7FFF:
            raise MessageError(f"string of {len(b)} bytes is too long")
        self.out += uvarint_bytes(len(b) + 1)
        self.out += b

    def bytes_(self, v, nullable=False):
        if v is None:
            if not nullable:
                raise MessageError("null in a non-nullable bytes field")
            self.out += b"\xff\xff\xff\xff"
            return
        self.out += _P32(len(v))
        if self.spill is not None and len(v) >= SPILL_MIN_BYTES:
            self.spill.append((len(self.out), v))
        else:
            self.out += v

    def compact_bytes(self, v, nullable=False):
        if v is None:
            if not nullable:
                raise MessageError("null in a non-nullable bytes field")
            self.out.append(0)
            return
        self.out += uvarint_bytes(len(v) + 1)
        if self.spill is not None and len(v) >= SPILL_MIN_BYTES:
            self.spill.append((len(self.out), v))
        else:
            self.out += v

    def array_len(self, v, nullable=False):
        """Write the count of sequence ``v``; returns False when ``v`` is null."""
        if v is None:
            if not nullable:
                raise MessageError("null in a non-nullable array field")
            self.out += b"\xff\xff\xff\xff"
            return False
        self.out += _P32(len(v))
        return True

    def compact_array_len(self, v, nullable=False):
        if v is None:
            if not nullable:
                raise MessageError("null in a non-nullable array field")
            self.out.append(0)
            return False
        self.out += uvarint_bytes(len(v) + 1)
        return True

    def raw(self, b):
        self.out += b

    def check_unknown_tags(self, unknown, known_tags):
        """Unknown tagged fields must not reuse a tag the version defines, and must be well-formed."""
        for entry in unknown:
            tag, data = entry
            if type(tag) is not int or not 0 <= tag <= 0xFFFFFFFF or not isinstance(data, (bytes, bytearray)):
                raise MessageError(f"malformed unknown tagged field {entry!r}")
            if tag in known_tags:
                raise MessageError(f"unknown tagged field {tag} collides with a known tagged field")

    def tagged_fields(self, known, unknown):
        """Write a tagged-field section from known ``[(tag, bytes)]`` and unknown ``((tag, bytes), ...)``."""
        if unknown:
            seen = {t for t, _ in known}
            for t, _ in unknown:
                if t in seen:
                    raise MessageError(f"unknown tagged field {t} collides with a known tagged field")
            known = sorted(list(known) + list(unknown), key=lambda e: e[0])
        self.out += uvarint_bytes(len(known))
        for tag, data in known:
            self.out += uvarint_bytes(tag)
            self.out += uvarint_bytes(len(data))
            self.out += data


# --------------------------------------------------------------------------- Message

def _b64(b) -> str:
    return base64.b64encode(bytes(b)).decode("ascii")


def _to_json(kind, v, version):
    if v is None:
        return None
    if kind == "uuid":
        return str(v)
    if kind == "bytes":
        return _b64(v)
    if kind == "float":
        if math.isnan(v) or math.isinf(v):
            return str(v)  # JSON has no NaN/Infinity; Kafka's Jackson writes them as text too
        return v
    if kind == "struct":
        return v.to_dict(version)
    if kind.startswith("[]"):
        inner = kind[2:]
        return [_to_json(inner, e, version) for e in v]
    return v


def _from_json(kind, v, cls, version):
    if v is None:
        return None
    if kind == "uuid":
        return Uuid.from_string(v)
    if kind == "bytes":
        return base64.b64decode(v)
    if kind == "float":
        return float(v)
    if kind == "struct":
        return cls.from_dict(v, version)
    if kind.startswith("[]"):
        inner = kind[2:]
        return [_from_json(inner, e, cls, version) for e in v]
    if kind == "bool":
        if type(v) is not bool:
            raise MessageError(f"JSON boolean expected, got {v!r}")
        return v
    if kind.startswith(("int", "uint")):
        if type(v) is not int:
            raise MessageError(f"JSON integer expected, got {v!r}")
        return v
    if kind == "str":
        if type(v) is not str:
            raise MessageError(f"JSON string expected, got {v!r}")
    return v


def _in(version, lo, hi):
    return version is None or (lo <= version and (hi is None or version <= hi))


class Message:
    """Base of generated message and struct classes.

    Subclasses define ``__slots__`` (field attributes, then ``unknown_tagged_fields``),
    ``_read(r, version)`` (classmethod), ``_write(w, version)``, ``_defaults()`` and
    ``_JSON``: a tuple of ``(attr, schema_name, kind, lo, hi, struct_class, nlo, nhi)``
    where ``lo..hi`` are the versions the field exists in (``hi`` None = open),
    ``kind`` is the schema type (``int32``, ``str``, ``uuid``, ``struct``, ``[]int32``...)
    and ``nlo..nhi`` the versions where it may be null (``nlo`` None = never).
    """

    __slots__ = ()
    NAME = "Message"
    LOWEST_VERSION = 0
    HIGHEST_VERSION = 0
    _JSON = ()

    @classmethod
    def read(cls, buf, version: int):
        """Decode a whole buffer as this message at ``version`` (trailing bytes are an error)."""
        cls._check_version(version)
        r = Reader(buf)
        obj = cls._read(r, version)
        if r.pos != r.end:
            raise MessageError(f"{r.end - r.pos} unexpected trailing bytes after {cls.NAME}", r.pos)
        return obj

    @classmethod
    def read_prefix(cls, buf, pos: int, version: int):
        """Decode this message at ``version`` from ``buf[pos:]``: ``(message, end position)``.

        For framing (a header, then a body): each generated module decodes with its own
        Reader (the Cython one in a native build), so callers never hand one in."""
        cls._check_version(version)
        r = Reader(buf, pos)
        obj = cls._read(r, version)
        return obj, r.pos

    def write(self, version: int) -> bytes:
        """Encode at ``version``; raises MessageError if a value cannot be carried by it."""
        self._check_version(version)
        w = Writer()
        self._write(w, version)
        return bytes(w.out)

    @classmethod
    def _check_version(cls, version):
        if type(version) is not int or not cls.LOWEST_VERSION <= version <= cls.HIGHEST_VERSION:
            raise MessageError(
                f"{cls.NAME} version {version} is not supported "
                f"(valid versions {cls.LOWEST_VERSION}-{cls.HIGHEST_VERSION})")

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        for name in self.__slots__:
            a = getattr(self, name)
            b = getattr(other, name)
            if a is b:
                continue
            if name == "unknown_tagged_fields":
                if tuple(a) != tuple(b):
                    return False
            elif a != b:
                return False
        return True

    __hash__ = None

    def __repr__(self):
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__
                           if n != "unknown_tagged_fields" or getattr(self, n))
        return f"{type(self).__qualname__}({fields})"

    def to_dict(self, version: int | None = None) -> dict:
        """JSON-safe dict keyed by the schema's field names (only fields present in ``version``).

        Uuids are Kafka base64 text, bytes are standard base64.  Unknown tagged
        fields appear as ``"_unknownTaggedFields": [[tag, base64], ...]`` if any.
        """
        d = {}
        for attr, name, kind, lo, hi, _cls, *_ in self._JSON:
            if _in(version, lo, hi):
                d[name] = _to_json(kind, getattr(self, attr), version)
        unknown = self.unknown_tagged_fields
        if unknown:
            d["_unknownTaggedFields"] = [[t, _b64(b)] for t, b in unknown]
        return d

    @classmethod
    def from_dict(cls, d: dict, version: int | None = None):
        """Inverse of :meth:`to_dict`; missing fields take their schema defaults."""
        obj = cls()
        for attr, name, kind, lo, hi, scls, *_ in cls._JSON:
            if name in d and _in(version, lo, hi):
                try:
                    setattr(obj, attr, _from_json(kind, d[name], scls, version))
                except MessageError as exc:
                    exc.within(f"{cls.NAME}.{name}")  # the same error, its field path prefixed
                    raise
                except (ValueError, TypeError) as exc:
                    raise MessageError(f"bad JSON value: {exc}").within(f"{cls.NAME}.{name}") from None
        if d.get("_unknownTaggedFields"):
            obj.unknown_tagged_fields = tuple((int(t), base64.b64decode(b)) for t, b in d["_unknownTaggedFields"])
        return obj


def kafka_json_names(value):
    """Rename schema names (``PartitionId``) to Kafka's JSON converter names (``partitionId``)."""
    if isinstance(value, dict):
        return {(k[:1].lower() + k[1:] if k[:1] != "_" else k): kafka_json_names(v) for k, v in value.items()}
    if isinstance(value, list):
        return [kafka_json_names(v) for v in value]
    return value


class GeneratedMessage(Protocol):
    """A generated message class (one per schema; its fields are keyword-only constructor arguments)."""

    NAME: str
    LOWEST_VERSION: int
    HIGHEST_VERSION: int
    FIRST_FLEXIBLE_VERSION: int
    unknown_tagged_fields: Any

    def __init__(self, **fields: Any) -> None:
        """The fields by name (the schema, generated into both twins by ``codegen``: the twins must agree)."""

    @classmethod
    def read(cls, buf: Any, version: int) -> Any:
        """Decode a whole body of ``version`` (MessageError on bad bytes or trailing bytes)."""

    @classmethod
    def read_prefix(cls, buf: Any, pos: int, version: int) -> tuple[Any, int]:
        """Decode one body at ``buf[pos:]``: ``(message, end position)``."""

    def write(self, version: int) -> bytes:
        """Encode as ``version``."""

    def to_dict(self, version: int | None = None) -> dict[str, Any]:
        """Kafka's JSON form (of ``version``'s fields when given)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any], version: int | None = None) -> Any:
        """Inverse of :meth:`to_dict`."""
