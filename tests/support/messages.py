"""Message helpers for the tests (no tests here).

* Hypothesis strategies derived from each generated class's ``_JSON`` table (field kinds,
  the versions a field exists in, the versions it may be null in): ``message_strategy``,
  with ``cases`` (one parameter per class and version) and ``is_flexible``; new schemas are
  covered without touching the tests.
* ``fixture_records()``: a deliberately tiny record-batch walker over the Kafka fixtures
  (uncompressed v2 batches only), so the message tests do not depend on the batch codec.
"""
from __future__ import annotations

import struct

import pytest
from conftest import require_fixtures
from hypothesis import strategies as st

from kraft_storage.messages.runtime import Uuid

INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=6)


def _in(v, lo, hi):
    return lo is not None and lo <= v and (hi is None or v <= hi)


def value_strategy(kind, scls, nullable, version, flexible, depth):
    if kind.startswith("[]"):
        inner = value_strategy(kind[2:], scls, False, version, flexible, depth)
        base = st.lists(inner, max_size=3 if depth < 2 else 1)
    elif kind in INT_RANGES:
        bits = INT_RANGES[kind]
        base = st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    elif kind == "uint16":
        base = st.integers(0, 0xFFFF)
    elif kind == "uint32":
        base = st.integers(0, 0xFFFFFFFF)
    elif kind == "bool":
        base = st.booleans()
    elif kind == "float":
        base = st.floats(allow_nan=False)
    elif kind == "uuid":
        base = st.binary(min_size=16, max_size=16).map(Uuid)
    elif kind == "str":
        base = TEXT
    elif kind == "bytes":
        base = st.binary(max_size=6)
    elif kind == "struct":
        base = message_strategy(scls, version, flexible, depth + 1)
    else:
        raise AssertionError(kind)
    return st.none() | base if nullable else base


def message_strategy(cls, version, flexible, depth=0):
    fields = {}
    for attr, _name, kind, lo, hi, scls, nlo, nhi in cls._JSON:
        if _in(version, lo, hi):
            fields[attr] = value_strategy(kind, scls, _in(version, nlo, nhi), version, flexible, depth)
    if flexible:
        # unknown tagged fields must survive a round trip (tags above any schema's)
        fields["unknown_tagged_fields"] = st.lists(
            st.tuples(st.integers(100, 5000), st.binary(max_size=4)), max_size=2,
            unique_by=lambda t: t[0]).map(lambda xs: tuple(sorted(xs)))
    return st.fixed_dictionaries(fields).map(lambda kw: cls(**kw))


def cases(classes):
    out = []
    for cls in classes:
        for v in range(cls.LOWEST_VERSION, cls.HIGHEST_VERSION + 1):
            out.append(pytest.param(cls, v, id=f"{cls.NAME}-v{v}"))
    return out


def is_flexible(cls, v):
    return cls.FIRST_FLEXIBLE_VERSION is not None and v >= cls.FIRST_FLEXIBLE_VERSION


def _zigzag(buf, p):
    result = shift = 0
    while True:
        b = buf[p]
        p += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), p
        shift += 7


def iter_records(data: bytes):
    """Yield ``(offset, is_control, key, value)`` for every record of every batch."""
    pos = 0
    while pos + 61 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        end = pos + 12 + length
        if end > len(data) or length < 49:
            break  # tail of an active segment
        attributes, = struct.unpack_from(">h", data, pos + 21)
        count, = struct.unpack_from(">i", data, pos + 57)
        assert attributes & 0x07 == 0, "fixtures are uncompressed"
        p = pos + 61
        for _ in range(count):
            rlen, p = _zigzag(data, p)
            rend = p + rlen
            p += 1  # attributes
            _, p = _zigzag(data, p)  # timestamp delta
            odelta, p = _zigzag(data, p)
            klen, p = _zigzag(data, p)
            key = None if klen < 0 else data[p:p + klen]
            p += max(klen, 0)
            vlen, p = _zigzag(data, p)
            value = None if vlen < 0 else data[p:p + vlen]
            yield base_offset + odelta, bool(attributes & 0x20), key, value
            p = rend
        pos = end


def batch_fixture_files():
    """Every .log and .checkpoint file of the Kafka fixtures (a test failure without them)."""
    return sorted(p for p in require_fixtures().rglob("*") if p.suffix in (".log", ".checkpoint"))


def fixture_records():
    """``(path, offset, is_control, key, value)`` for every record of every fixture batch file."""
    for path in batch_fixture_files():
        for rec in iter_records(path.read_bytes()):
            yield (path, *rec)
