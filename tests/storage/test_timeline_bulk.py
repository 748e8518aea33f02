"""The bulk calls of the timeline collections (put_many, get_many,
contains_many) against their single-op meaning, for both implementations.

The native ones take a tight C path for exact int/str keys and for int64
numpy arrays and hand any other key to the single-op path mid-stream; these
tests mix such keys at every position, make finalizers run in the middle of a
bulk write, and check the int64 hash against Python's own.
"""
from __future__ import annotations

import gc
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kraft_storage._pure._timeline as pure_tl

try:
    import kraft_storage._native._timeline as native_tl
except ImportError:  # pragma: no cover
    native_tl = None

IMPLS = [pytest.param(pure_tl, id="pure"),
         pytest.param(native_tl, id="native",
                      marks=pytest.mark.skipif(native_tl is None, reason="not built"))]


@pytest.fixture(params=IMPLS)
def tl(request):
    return request.param


class Collide:
    """Equal to 7 and to other Collide(n) with the same n; hash of 7."""

    def __init__(self, n):
        self.n = n

    def __hash__(self):
        return 7

    def __eq__(self, other):
        if isinstance(other, Collide):
            return other.n == self.n
        return other == 7 and self.n == 7

    def __repr__(self):
        return f"Collide({self.n})"


class StrSub(str):
    pass


ODD_KEYS = [True, False, 1.0, 2.0, 2**64, -(2**70), (1, 2), Collide(7), Collide(8),
            StrSub("k5"), frozenset({3}), b"k7", None, 2**63 - 1, -(2**63), 3, -4, -1, -2]


def _mixed_keys(n, seed):
    rnd = random.Random(seed)
    keys = []
    for _ in range(n):
        r = rnd.random()
        if r < 0.45:
            keys.append(rnd.randrange(n))
        elif r < 0.8:
            keys.append(f"k{rnd.randrange(n)}")
        else:
            keys.append(rnd.choice(ODD_KEYS))
    return keys


@pytest.mark.parametrize("snapshot", [False, True])
def test_mixed_keys_bulk_equals_single_ops(tl, snapshot):
    """put_many/get_many/contains_many == the single calls, key by key, for
    thousands of keys mixing exact ints/strs with equal-but-other-type keys
    (True == 1, 1.0 == 1, Collide(7) == 7, a str subclass) at random places."""
    reg = tl.SnapshotRegistry()
    bulk, single = tl.TimelineHashMap(reg), tl.TimelineHashMap(reg)
    model = {}
    for rnd in range(4):
        if snapshot:
            reg.get_or_create_snapshot(rnd)
        keys = _mixed_keys(3000, rnd)
        vals = [(rnd, i) for i in range(len(keys))]
        bulk.put_many(keys, vals)
        for k, v in zip(keys, vals):
            single.put(k, v)
            model[k] = v
        probe = _mixed_keys(2000, 100 + rnd) + ["absent", 10**6, 2.5]
        expect = [model.get(k, "MISSING") for k in probe]
        assert bulk.get_many(probe, "MISSING") == expect
        assert single.get_many(tuple(probe), "MISSING") == expect
        assert [single.get(k, "MISSING") for k in probe] == expect
        assert bulk.contains_many(probe) == [k in model for k in probe]
        assert len(bulk) == len(single) == len(model)
    if snapshot:
        for epoch in range(3):
            assert bulk.to_dict(epoch) == single.to_dict(epoch)
        reg.revert_to_snapshot(1)
        assert bulk.to_dict() == single.to_dict()
    if hasattr(bulk, "_check_integrity"):
        bulk._check_integrity()


int64s = st.integers(-(2**63), 2**63 - 1)
edge64 = st.sampled_from([0, 1, -1, -2, 2**61 - 2, 2**61 - 1, 2**61, 2**62, 2**63 - 1,
                          -(2**61) + 1, -(2**61), -(2**63), -(2**63) + 1, 2**31, -(2**31)])


@settings(max_examples=60, deadline=None)
@given(ks=st.lists(st.one_of(int64s, edge64), max_size=60),
       probes=st.lists(st.one_of(int64s, edge64), max_size=30))
@pytest.mark.parametrize("mod", IMPLS)
def test_int64_array_keys_are_python_ints(mod, ks, probes):
    """Keys given as an int64 array act exactly as the same Python ints
    (the native path computes Python's int hash from the C value)."""
    m = mod.TimelineHashMap(mod.SnapshotRegistry())
    m.put_many(np.array(ks, dtype=np.int64), [str(k) for k in ks])
    model = {k: str(k) for k in ks}
    for k in ks:
        assert m.get(k) == str(k)
        assert hash(k) in {hash(x) for x in m.keys()}
    allp = ks + probes
    arr = np.array(allp, dtype=np.int64)
    assert m.get_many(arr, None) == [model.get(k) for k in allp]
    assert m.contains_many(arr) == [k in model for k in allp]
    # and the other way round: keys put as Python ints, read as an array
    m2 = mod.TimelineHashMap(mod.SnapshotRegistry())
    m2.put_many(list(ks), list(ks))
    assert m2.get_many(arr, None) == [k if k in model else None for k in allp]


@pytest.mark.parametrize("make", [
    lambda a: a[::2],                                   # not contiguous
    lambda a: a.astype(np.int32),                       # another width
    lambda a: a.astype(">i8"),                          # not native byte order
    lambda a: a.astype(np.uint64),
    lambda a: a.astype(np.float64),
    lambda a: np.frombuffer(a.tobytes(), dtype=np.int64),   # read-only
], ids=["strided", "int32", "big-endian", "uint64", "float64", "readonly"])
def test_other_arrays_mean_their_tolist(tl, make):
    base = np.arange(-20, 40, dtype=np.int64)
    arr = make(base)
    expect_keys = arr.tolist()
    m = tl.TimelineHashMap(tl.SnapshotRegistry())
    m.put_many(arr, [str(k) for k in expect_keys])
    assert m.to_dict() == {k: str(k) for k in expect_keys}
    assert m.get_many(arr) == [str(k) for k in expect_keys]
    assert m.contains_many(arr) == [True] * len(expect_keys)


def test_int64_array_put_with_snapshots_and_other_type_keys(tl):
    """Array keys equal to stored non-int keys (True, 1.0, Collide(7)) go the
    single-op way: the stored key is kept, the value replaced, and a value
    older than the newest snapshot is saved for reads at that epoch."""
    reg = tl.SnapshotRegistry()
    m = tl.TimelineHashMap(reg)
    m.put_many([True, 2.0, Collide(7), 9], ["t", "f", "c", "n"])
    reg.get_or_create_snapshot(5)
    m.put_many(np.array([1, 2, 7, 9, 10, 1], dtype=np.int64), ["a", "b", "c2", "d", "e", "a2"])
    assert m.get_many(np.array([1, 2, 7, 9, 10], dtype=np.int64)) == ["a2", "b", "c2", "d", "e"]
    assert m.get_many([1, 2, 7, 9, 10], epoch=5) == ["t", "f", "c", "n", None]
    assert len(m) == 5 and m.size(5) == 4
    keys = list(m.keys())
    assert any(k is True for k in keys) and any(type(k) is float for k in keys)
    reg.revert_to_snapshot(5)
    assert m.to_dict() == {True: "t", 2.0: "f", Collide(7): "c", 9: "n"}


def test_finalizers_during_bulk_put(tl):
    """Replacing values whose last reference the map held runs their
    finalizers; those may write to the same map (growing it) while the bulk
    call is still going: the call finishes correctly and the table stays sound."""
    reg = tl.SnapshotRegistry()
    m = tl.TimelineHashMap(reg)
    fired = []

    class Noisy:
        def __init__(self, i):
            self.i = i

        def __del__(self):
            fired.append(self.i)
            m[("fin", self.i)] = self.i          # grows the table mid-call

    n = 500
    keys = list(range(n)) + [f"s{i}" for i in range(n)]
    m.put_many(keys, [Noisy(i) for i in range(len(keys))])
    gc.collect()
    assert not fired
    reg.get_or_create_snapshot(1)
    m.put_many(keys[:300], list(range(300)))     # saved copies keep the old values
    assert not fired
    new_vals = [f"v{i}" for i in range(len(keys))]
    m.put_many(keys, new_vals)                   # these replace values written after snapshot 1
    reg.delete_snapshots_up_to(2)                # the saved Noisy values die now
    gc.collect()
    m.put_many(keys, list(range(len(keys))))
    assert sorted(fired) == list(range(len(keys)))
    for i in range(len(keys)):
        assert m[("fin", i)] == i
    assert m.get_many(keys) == list(range(len(keys)))
    assert len(m) == 2 * len(keys)
    if hasattr(m, "_check_integrity"):
        m._check_integrity()


def test_finalizers_without_snapshots_release_every_value(tl):
    m = tl.TimelineHashMap(tl.SnapshotRegistry())
    fired = []

    class Noisy:
        def __init__(self, i):
            self.i = i

        def __del__(self):
            fired.append(self.i)
            m.put(("fin", self.i), self.i)

    keys = np.arange(1000, dtype=np.int64)
    m.put_many(keys, [Noisy(i) for i in range(1000)])
    m.put_many(keys, [None] * 1000)              # every Noisy's last reference
    assert sorted(fired) == list(range(1000))
    assert len(m) == 2000
    assert m.get_many(keys) == [None] * 1000
    if hasattr(m, "_check_integrity"):
        m._check_integrity()


def test_bulk_input_errors(tl):
    m = tl.TimelineHashMap(tl.SnapshotRegistry())
    with pytest.raises(ValueError):
        m.put_many(np.arange(3), [1, 2])
    with pytest.raises(TypeError):
        m.put_many([[1]], [1])                   # unhashable key
    with pytest.raises(TypeError):
        m.get_many([1, {2}])
    m.put_many([], [])
    assert m.get_many(np.array([], dtype=np.int64)) == []
    assert m.get_many(iter([1, 2]), 0) == [0, 0]
