"""Record-frame kernels (``_frame``): native and pure twin, against an oracle and each other."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import batch_params
from hypothesis import given, settings
from hypothesis import strategies as st

import kraft_storage._native._frame as native_frame
import kraft_storage._pure._frame as pure_frame
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import uvarint_bytes
from kraft_storage.record import decode_records

IMPLS = pytest.mark.parametrize("impl", [native_frame, pure_frame], ids=["native", "pure"])


def _frames(impl, data, pos, ln):
    n = len(pos)
    k = np.full(n, 99, np.int16)
    v = np.full(n, 99, np.int16)
    b = np.full(n, 99, np.int64)
    good = impl.read_frames(data, np.asarray(pos, np.int64), np.asarray(ln, np.int32), k, v, b)
    return good, k, v, b


def _oracle(value: bytes | None):
    """Reference answer written independently: (api_key, version, body offset) or -1s."""
    if not value:
        return -1, -1, -1
    out, i = [], 0
    for _ in range(3):
        x = shift = 0
        for _nbytes in range(1, 6):
            if i >= len(value):
                return -1, -1, -1
            c = value[i]
            i += 1
            x |= (c & 0x7F) << shift
            shift += 7
            if c < 0x80:
                break
        else:
            return -1, -1, -1
        out.append(x)
    if out[0] != 1 or out[1] > 32767 or out[2] > 32767:
        return -1, -1, -1
    return out[1], out[2], i


def _lay_out(values):
    """Values (bytes or None) placed in one buffer with junk between them."""
    buf, pos, ln = bytearray(b"\xff\x80"), [], []
    for v in values:
        if v is None:
            pos.append(0)
            ln.append(-1)
        else:
            pos.append(len(buf))
            ln.append(len(v))
            buf += v
        buf += b"\x81\x80\x80"  # continuation bytes: a kernel reading past the end would misparse
    return bytes(buf), pos, ln


@IMPLS
def test_simple_frames(impl):
    vals = [uvarint_bytes(1) + uvarint_bytes(3) + uvarint_bytes(2) + b"body",
            uvarint_bytes(1) + uvarint_bytes(200) + uvarint_bytes(0),      # 2-byte apiKey, empty body
            None, b"", uvarint_bytes(2) + b"\x00\x00",                      # null, empty, frame v2
            uvarint_bytes(1) + uvarint_bytes(40000) + b"\x00",              # apiKey too large
            b"\x01\x03",                                                    # truncated before version
            b"\x01\x80\x80\x80\x80\x80\x01\x00"]                            # 6-byte varint
    data, pos, ln = _lay_out(vals)
    good, k, v, b = _frames(impl, data, pos, ln)
    assert good == 2
    assert k.tolist() == [3, 200, -1, -1, -1, -1, -1, -1]
    assert v.tolist() == [2, 0, -1, -1, -1, -1, -1, -1]
    assert b[0] == pos[0] + 3 and b[1] == pos[1] + 4
    assert b[2:].tolist() == [-1] * 6


def _uvarint_any(x: int) -> bytes:
    """Unsigned LEB128 of any size (the runtime's writer stops at 32 bits, on purpose)."""
    out = bytearray()
    while True:
        out.append((x & 0x7F) | (0x80 if x > 0x7F else 0))
        x >>= 7
        if not x:
            return bytes(out)


uvar = st.integers(0, 2**40).map(_uvarint_any)
frame_like = st.builds(lambda a, b, c, body: a + b + c + body,
                       st.sampled_from([b"\x01", b"\x02", b"\x81\x00"]), uvar, uvar,
                       st.binary(max_size=8))
values_st = st.lists(st.one_of(st.none(), st.binary(max_size=12), frame_like), max_size=40)


@settings(max_examples=300, deadline=None)
@given(values_st)
def test_read_frames_matches_oracle_and_twin(values):
    data, pos, ln = _lay_out(values)
    expect = [_oracle(v) for v in values]
    for impl in (native_frame, pure_frame):
        good, k, v, b = _frames(impl, data, pos, ln)
        got = [(int(k[i]), int(v[i]), -1 if b[i] < 0 else int(b[i]) - pos[i]) for i in range(len(values))]
        assert got == expect, impl.__name__
        assert good == sum(e[0] >= 0 for e in expect)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=30)), max_size=60))
def test_gather_is_arrow_binary_layout(values):
    data, pos, ln = _lay_out(values)
    results = []
    for impl in (native_frame, pure_frame):
        out, off, valid, nulls = impl.gather(data, np.asarray(pos, np.int64), np.asarray(ln, np.int32))
        assert off.dtype == np.int32 and len(off) == len(values) + 1 and off[0] == 0
        assert nulls == sum(v is None for v in values)
        got = []
        for i in range(len(values)):
            present = valid is None or bool(valid[i >> 3] >> (i & 7) & 1)
            got.append(bytes(out[off[i]:off[i + 1]]) if present else None)
        assert got == values
        results.append((bytes(out), off.tolist(), None if valid is None else valid.tolist()))
    assert results[0] == results[1]


@IMPLS
@pytest.mark.parametrize("pos,ln", [([5], [10]), ([-1], [1]), ([0, 13], [1, 1]), ([2**62], [1])])
def test_out_of_buffer_slices_are_errors(impl, pos, ln):
    data = b"\x01" * 13
    with pytest.raises(ValueError, match="outside the 13-byte buffer"):
        _frames(impl, data, pos, ln)
    with pytest.raises(ValueError, match="outside the 13-byte buffer"):
        impl.gather(data, np.asarray(pos, np.int64), np.asarray(ln, np.int32))


@IMPLS
def test_mismatched_and_short_arrays(impl):
    with pytest.raises(ValueError):
        impl.gather(b"abc", np.zeros(2, np.int64), np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="shorter"):
        impl.read_frames(b"abc", np.zeros(2, np.int64), np.zeros(2, np.int32),
                         np.zeros(1, np.int16), np.zeros(2, np.int16), np.zeros(2, np.int64))


@IMPLS
def test_empty_inputs(impl):
    good, k, _v, _b = _frames(impl, b"", [], [])
    assert good == 0 and len(k) == 0
    out, off, valid, nulls = impl.gather(b"", np.zeros(0, np.int64), np.zeros(0, np.int32))
    assert len(out) == 0 and off.tolist() == [0] and valid is None and nulls == 0


@IMPLS
@pytest.mark.parametrize("path", batch_params(), ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fixture_frames_match_the_generated_codec(impl, path):
    buf = path.read_bytes()
    cols = decode_records(buf)
    good, k, v, b = _frames(impl, cols.data, cols.value_pos, cols.value_len)
    control = cols.is_control()
    assert (k[control] == -1).sum() <= control.sum()
    n_meta = 0
    for i in np.flatnonzero(~control).tolist():
        api_key, version, _msg = decode_metadata_record(cols.value(i))
        assert (int(k[i]), int(v[i])) == (api_key, version)
        n_meta += 1
    assert good >= n_meta
