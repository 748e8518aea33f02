"""CRC-32C: every implementation against independent oracles.

Oracles: published vectors (RFC 3720 B.4, the CRC catalogue's check value),
the CRCs stored in real Kafka log files, the pure-Python table algorithm
(``_pure._crc32c.crc32c_table``) and the ``crc32c`` PyPI package.  Under test:
the native module's ``crc32c`` (dispatched kernel), each C kernel the CPU can
run (``slice8``, ``sse42-3way``, ``vpclmul-avx2``), and the pure twin.
"""
from __future__ import annotations

import array
import functools
import mmap
import os
import pathlib
import random
import struct
import subprocess
import sys
import threading

import crc32c as crc32c_pkg
import numpy as np
import pytest
from conftest import REPO, require_fixtures
from hypothesis import given, settings
from hypothesis import strategies as st

import kraft_storage.crc32c as facade
from kraft_storage import accel
from kraft_storage._native import _crc32c as native
from kraft_storage._pure import _crc32c as pure


def _kernel_fn(name):
    fn = functools.partial(native._crc32c_kernel, name)
    fn.__name__ = f"kernel:{name}"
    return fn


#: name -> callable(data, crc=0) for everything that must agree.
IMPLS = {
    "native": native.crc32c,
    "native-portable": native.crc32c_portable,
    **{f"kernel:{k}": _kernel_fn(k) for k in native._kernels()},
    "pure": pure.crc32c,
    "pure-table": pure.crc32c_table,
}
#: The implementations fast enough for megabyte inputs.
FAST = {k: v for k, v in IMPLS.items() if k != "pure-table"}

impl_param = pytest.mark.parametrize("fn", list(IMPLS.values()), ids=list(IMPLS))
fast_param = pytest.mark.parametrize("fn", list(FAST.values()), ids=list(FAST))


def test_this_machine_runs_the_hardware_kernels():
    # The build machine (x86-64 with SSE4.2/PCLMULQDQ/AVX2/VPCLMULQDQ) must
    # exercise every kernel; elsewhere at least the portable one exists.
    kernels = native._kernels()
    assert kernels[0] == "slice8"
    assert native.impl() == "native:" + kernels[-1]
    flags = set()
    if pathlib.Path("/proc/cpuinfo").exists():
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if {"sse4_2", "pclmulqdq"} <= flags:
        assert "sse42-3way" in kernels
    if {"sse4_2", "pclmulqdq", "avx2", "vpclmulqdq"} <= flags:
        assert "vpclmul-avx2" in kernels


# --------------------------------------------------------------------------
# Known vectors
# --------------------------------------------------------------------------

ISCSI_READ_PDU = bytes.fromhex(
    "01c00000000000000000000000000000"
    "14000000000004000000001400000018"
    "28000000000000000200000000000000")

VECTORS = [
    (b"", 0x00000000),
    (b"a", 0xC1D04330),
    (b"123456789", 0xE3069283),  # the CRC catalogue's "check" value
    (bytes(32), 0x8A9136AA),  # RFC 3720 B.4: 32 bytes of zeros
    (b"\xff" * 32, 0x62A8AB43),  # RFC 3720 B.4: 32 bytes of ones
    (bytes(range(32)), 0x46DD794E),  # RFC 3720 B.4: incrementing
    (bytes(range(31, -1, -1)), 0x113FDB5C),  # RFC 3720 B.4: decrementing
    (ISCSI_READ_PDU, 0xD9963A56),  # RFC 3720 B.4: iSCSI Read PDU
]


@impl_param
@pytest.mark.parametrize("data,expected", VECTORS, ids=[f"v{i}" for i in range(len(VECTORS))])
def test_known_vectors(fn, data, expected):
    assert fn(data) == expected
    assert crc32c_pkg.crc32c(data) == expected  # the oracle agrees too


@impl_param
def test_empty_input_returns_running_crc(fn):
    for crc in (0, 1, 0xE3069283, 0xFFFFFFFF):
        assert fn(b"", crc) == crc


def _fixture_batches():
    """(file, position, stored crc, crc'd bytes) for every batch in the Kafka fixtures."""
    out = []
    for path in sorted(require_fixtures().rglob("*")):
        if path.suffix not in (".log", ".checkpoint"):
            continue
        buf = path.read_bytes()
        pos = 0
        while pos + 61 <= len(buf):
            (batch_length,) = struct.unpack_from(">i", buf, pos + 8)
            end = pos + 12 + batch_length
            assert buf[pos + 16] == 2 and end <= len(buf), (path, pos)
            (stored,) = struct.unpack_from(">I", buf, pos + 17)
            out.append((path, pos, stored, buf[pos + 21:end]))
            pos = end
    return out


def test_crc_of_every_batch_in_real_kafka_files():
    batches = _fixture_batches()
    assert len(batches) > 1000  # the fixtures hold thousands of batches
    for fn in FAST.values():
        for path, pos, stored, body in batches:
            assert fn(body) == stored, (fn, path, pos)
    # The slow oracle on a sample, so it is tied to real data as well.
    for path, pos, stored, body in batches[::97]:
        assert pure.crc32c_table(body) == stored, (path, pos)


# --------------------------------------------------------------------------
# Property tests against the table oracle
# --------------------------------------------------------------------------

crcs = st.one_of(st.just(0), st.just(0xFFFFFFFF), st.integers(0, 0xFFFFFFFF))


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=4096), start=st.integers(0, 64), crc=crcs)
def test_all_implementations_match_the_oracle(data, start, crc):
    # Slicing a memoryview gives unaligned starts without copying.
    view = memoryview(data)[min(start, len(data)):]
    expected = pure.crc32c_table(view, crc)
    assert crc32c_pkg.crc32c(view, crc) == expected
    for name, fn in FAST.items():
        assert fn(view, crc) == expected, name


@settings(max_examples=200, deadline=None)
@given(a=st.binary(max_size=3000), b=st.binary(max_size=3000), crc=crcs)
def test_chaining(a, b, crc):
    for name, fn in IMPLS.items():
        assert fn(b, fn(a, crc)) == fn(a + b, crc), name


@settings(max_examples=100, deadline=None)
@given(data=st.binary(min_size=1, max_size=2048), pos=st.integers(0, 2047), bit=st.integers(0, 7))
def test_single_bit_flip_changes_crc(data, pos, bit):
    # CRC-32C detects every single-bit error; a kernel that skips or
    # double-counts a byte fails this for some position.
    flipped = bytearray(data)
    flipped[pos % len(data)] ^= 1 << bit
    for name, fn in FAST.items():
        assert fn(data) != fn(flipped), name


# --------------------------------------------------------------------------
# Long inputs: every internal block boundary of every kernel
# --------------------------------------------------------------------------

# Block sizes inside csrc/crc32c.c: 8-byte words, 16/32-byte vector lanes,
# 3-way SSE4.2 blocks of 3x64, 3x256, 3x4096; the AVX2 kernel's 256-byte
# stride and its 2048-byte minimum; the hybrid block of 17408 bytes.
_BASES = [0, 8, 16, 32, 64, 128, 192, 256, 512, 768, 1024, 2048, 3072, 4096,
          12288, 17408, 2 * 17408, 3 * 17408 + 12288 + 768, 65536, 1 << 20]
_DELTAS = [-33, -17, -9, -1, 0, 1, 7, 15, 31, 33, 255, 257]
LENGTHS = sorted({b + d for b in _BASES for d in _DELTAS if b + d >= 0})

_rng = random.Random(20240611)
BIG = _rng.randbytes((1 << 20) + 4096)


@fast_param
def test_lengths_across_block_boundaries(fn):
    view = memoryview(BIG)
    for n in LENGTHS:
        for start in (0, 1, 3, 7, 8, 13):
            piece = view[start:start + n]
            crc = (n * 2654435761 + start) & 0xFFFFFFFF
            assert fn(piece, crc) == crc32c_pkg.crc32c(piece, crc), (n, start)


@fast_param
def test_every_region_of_a_hybrid_block_is_weighted_correctly(fn):
    # A single non-zero byte at position i: catches a region (vector part or
    # one of the three scalar streams) being shifted by the wrong power of x.
    n = 2 * 17408 + 999
    buf = bytearray(n)
    for i in list(range(0, n, 61)) + [n - 1]:
        buf[i] = 0xA5
        assert fn(buf) == crc32c_pkg.crc32c(buf), i
        buf[i] = 0


@fast_param
def test_large_buffer(fn):
    data = BIG * 4  # ~4 MiB, crosses many hybrid blocks
    assert fn(data) == crc32c_pkg.crc32c(data)
    assert fn(data, 0x12345678) == crc32c_pkg.crc32c(data, 0x12345678)


def test_concurrent_threads_agree():
    # The native crc32c releases the GIL for large inputs; results must not
    # depend on what other threads do meanwhile.
    chunks = [BIG[i * 1000:] for i in range(8)]
    expected = [crc32c_pkg.crc32c(c) for c in chunks]
    results: dict[int, list[int]] = {}

    def work(i):
        results[i] = [native.crc32c(chunks[i]) for _ in range(20)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        assert results[i] == [expected[i]] * 20


# --------------------------------------------------------------------------
# Buffer types and argument errors
# --------------------------------------------------------------------------

def _buffers(tmp_path):
    raw = bytes(BIG[5:5 + 5003])
    path = tmp_path / "blob"
    path.write_bytes(raw)
    fh = open(path, "rb")
    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    fh.close()
    arr = np.frombuffer(raw[:5000], dtype=np.uint8)
    return raw, mm, [
        ("bytes", raw, raw),
        ("bytearray", bytearray(raw), raw),
        ("memoryview", memoryview(raw), raw),
        ("memoryview-slice", memoryview(raw)[3:4001], raw[3:4001]),
        ("readonly-memoryview", memoryview(bytearray(raw)).toreadonly(), raw),
        ("mmap", mm, raw),
        ("numpy-uint8", arr.copy(), raw[:5000]),
        ("numpy-int64", np.frombuffer(raw[:5000], dtype=np.int64).copy(), raw[:5000]),
        ("numpy-2d", arr.reshape(50, 100).copy(), raw[:5000]),
        ("array-I", array.array("I", raw[:5000]), raw[:5000]),
        ("memoryview-cast-I", memoryview(raw[:5000]).cast("I"), raw[:5000]),
        ("empty-bytearray", bytearray(), b""),
        ("empty-numpy", np.zeros(0, dtype=np.uint8), b""),
    ]


@impl_param
def test_buffer_types(fn, tmp_path):
    _, mm, cases = _buffers(tmp_path)
    try:
        for name, obj, raw in cases:
            assert fn(obj, 7) == crc32c_pkg.crc32c(raw, 7), name
    finally:
        del cases
        mm.close()


BAD_DATA = ["text", None, 12, 1.5, [1, 2, 3], object()]


@impl_param
@pytest.mark.parametrize("bad", BAD_DATA, ids=lambda b: type(b).__name__)
def test_non_buffers_raise_type_error(fn, bad):
    with pytest.raises(TypeError, match="bytes-like"):
        fn(bad)


@impl_param
def test_non_contiguous_buffers_raise_buffer_error(fn):
    for bad in (memoryview(b"abcdefgh")[::2], np.arange(16, dtype=np.uint8)[::2],
                np.zeros((4, 4), dtype=np.uint8).T):
        with pytest.raises(BufferError, match="C-contiguous"):
            fn(bad)


@impl_param
def test_dead_buffers_raise_value_error(fn):
    mm = mmap.mmap(-1, 4096)
    mm.close()
    with pytest.raises(ValueError):
        fn(mm)
    mv = memoryview(b"abc")
    mv.release()
    with pytest.raises(ValueError):
        fn(mv)


@impl_param
@pytest.mark.parametrize("crc,exc", [(-1, ValueError), (1 << 32, ValueError), (1 << 80, ValueError),
                                     (-(1 << 80), ValueError), (1.0, TypeError), ("0", TypeError),
                                     (None, TypeError), (np.float64(1), TypeError)])
def test_bad_crc_argument(fn, crc, exc):
    with pytest.raises(exc):
        fn(b"abc", crc)


@impl_param
def test_integer_like_crc_accepted(fn):
    expected = crc32c_pkg.crc32c(b"abc", 7)
    assert fn(b"abc", np.uint32(7)) == expected
    assert fn(b"abc", np.int64(7)) == expected
    assert fn(b"abc", True) == crc32c_pkg.crc32c(b"abc", 1)


def test_twin_and_native_raise_identical_errors():
    cases = [("x",), (None,), (memoryview(b"abcd")[::2],), (np.arange(8)[::2],),
             (b"a", -1), (b"a", 1 << 32), (b"a", 2.5), (b"a", "1")]
    for args in cases:
        errors = []
        for fn in (native.crc32c, pure.crc32c, native.crc32c_portable, pure.crc32c_portable):
            with pytest.raises(Exception) as info:
                fn(*args)
            errors.append((type(info.value), str(info.value)))
        assert len(set(errors)) == 1, (args, errors)


def test_unknown_kernel_name():
    with pytest.raises(ValueError, match="not available"):
        native._crc32c_kernel("no-such-kernel", b"abc")


# --------------------------------------------------------------------------
# Facade and twin selection
# --------------------------------------------------------------------------

def test_facade_picks_per_accel_rule():
    expected = native if accel.WANT_NATIVE else pure
    assert facade.crc32c is expected.crc32c
    assert facade.impl() == expected.impl()
    assert facade.crc32c(b"123456789") == 0xE3069283


def _run(code, **env):
    full_env = {**os.environ, **env}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full_env,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_no_extensions_env_uses_twin():
    out = _run("import kraft_storage.crc32c as c; print(c.impl(), c.crc32c(b'123456789'))",
               KRAFT_NO_EXTENSIONS="1")
    assert out == f"pure:crc32c-package {0xE3069283}"


def test_twin_without_crc32c_package_uses_table():
    code = ("import sys; sys.modules['crc32c'] = None\n"
            "from kraft_storage._pure import _crc32c as p\n"
            "print(p.impl(), p.crc32c(b'123456789'), p.crc32c(b'56789', p.crc32c(b'1234')))")
    assert _run(code) == f"pure:table {0xE3069283} {0xE3069283}"
