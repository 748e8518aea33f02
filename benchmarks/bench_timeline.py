"""pytest-benchmark suite for the timeline collections (issue 5 B targets).

Run:  python -m pytest benchmarks/bench_timeline.py --benchmark-only \
          --benchmark-timer=time.process_time --benchmark-columns=median,iqr,rounds

Every benchmark does ``N`` operations per round (``extra_info['ops']``), so
per-operation cost = median / N.  ``benchmarks/timeline_bench.py`` prints the
same figures per operation as JSON, side by side with a dict-behind-a-class
and Java's published 277 ns/put (apache/kafka PR #10324).

Compared implementations (same run): ``native`` (Cython), ``pure`` (twin),
``dictclass`` (a Python class whose put/get wrap a dict: the floor any
pure-Python timeline map would pay).
"""
from __future__ import annotations

import pytest

import kraft_storage._pure._timeline as pure_tl

try:
    import kraft_storage._native._timeline as native_tl
except ImportError:  # pragma: no cover
    native_tl = None

N = 100_000
KEYS = list(range(N))
STR_KEYS = [f"topic-{i}" for i in range(N)]
VALUES = [str(i) for i in range(N)]


class DictMap:
    """Baseline: a dict behind a class with put/get methods."""

    __slots__ = ("_d",)

    def __init__(self, registry=None):
        self._d = {}

    def put(self, key, value):
        prev = self._d.get(key)
        self._d[key] = value
        return prev

    def get(self, key, default=None):
        return self._d.get(key, default)


IMPLS = {"pure": pure_tl}
if native_tl is not None:
    IMPLS["native"] = native_tl


def _maker(name):
    if name == "dictclass":
        return lambda: DictMap()
    mod = IMPLS[name]
    reg = mod.SnapshotRegistry()
    return lambda: mod.TimelineHashMap(reg)


NAMES = ["dictclass", *IMPLS]


@pytest.mark.parametrize("impl", NAMES)
@pytest.mark.parametrize("keys", ["int", "str"])
def test_put_single_op(benchmark, impl, keys):
    """N x ``m.put(k, v)`` into an empty map (includes growth)."""
    benchmark.group = f"put-single-{keys}"
    benchmark.extra_info["ops"] = N
    make = _maker(impl)
    ks = KEYS if keys == "int" else STR_KEYS

    def run(m):
        put = m.put
        for k, v in zip(ks, VALUES):
            put(k, v)

    benchmark.pedantic(run, setup=lambda: ((make(),), {}), rounds=15)


@pytest.mark.parametrize("impl", NAMES)
@pytest.mark.parametrize("keys", ["int", "str"])
def test_get_single_op(benchmark, impl, keys):
    """N x ``m.get(k)`` on a map holding the N keys."""
    benchmark.group = f"get-single-{keys}"
    benchmark.extra_info["ops"] = N
    m = _maker(impl)()
    ks = KEYS if keys == "int" else STR_KEYS
    for k, v in zip(ks, VALUES):
        m.put(k, v)

    def run():
        get = m.get
        for k in ks:
            get(k)

    benchmark.pedantic(run, rounds=15)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_put_many(benchmark, impl):
    benchmark.group = "put-bulk-int"
    benchmark.extra_info["ops"] = N
    make = _maker(impl)
    benchmark.pedantic(lambda m: m.put_many(KEYS, VALUES), setup=lambda: ((make(),), {}),
                       rounds=15)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_get_many(benchmark, impl):
    benchmark.group = "get-bulk-int"
    benchmark.extra_info["ops"] = N
    m = _maker(impl)()
    m.put_many(KEYS, VALUES)
    benchmark.pedantic(lambda: m.get_many(KEYS), rounds=15)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_put_many_int64_array(benchmark, impl):
    """Bulk insert with the keys as an int64 numpy array."""
    import numpy as np
    benchmark.group = "put-bulk-int"
    benchmark.extra_info["ops"] = N
    make = _maker(impl)
    arr = np.array(KEYS, dtype=np.int64)
    benchmark.pedantic(lambda m: m.put_many(arr, VALUES), setup=lambda: ((make(),), {}),
                       rounds=15)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_get_many_int64_array(benchmark, impl):
    import numpy as np
    benchmark.group = "get-bulk-int"
    benchmark.extra_info["ops"] = N
    m = _maker(impl)()
    m.put_many(KEYS, VALUES)
    arr = np.array(KEYS, dtype=np.int64)
    benchmark.pedantic(lambda: m.get_many(arr), rounds=15)


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("bulk", [False, True], ids=["single", "bulk"])
def test_get_shuffled(benchmark, impl, bulk):
    """Gets in random key order (every probe a likely cache miss at 100k)."""
    import random
    benchmark.group = "get-shuffled-int"
    benchmark.extra_info["ops"] = N
    m = _maker(impl)()
    m.put_many(KEYS, VALUES)
    ks = KEYS[:]
    random.Random(1).shuffle(ks)

    def run():
        get = m.get
        for k in ks:
            get(k)

    benchmark.pedantic((lambda: m.get_many(ks)) if bulk else run, rounds=15)


@pytest.mark.parametrize("impl", list(IMPLS))
def test_get_at_snapshot_epoch(benchmark, impl):
    """N x ``m.get(k, epoch=E)`` where half the keys changed after E."""
    benchmark.group = "get-at-epoch-int"
    benchmark.extra_info["ops"] = N
    mod = IMPLS[impl]
    reg = mod.SnapshotRegistry()
    m = mod.TimelineHashMap(reg)
    m.put_many(KEYS, VALUES)
    reg.get_or_create_snapshot(1)
    m.put_many(KEYS[::2], VALUES[::2])

    def run():
        get = m.get
        for k in KEYS:
            get(k, epoch=1)

    benchmark.pedantic(run, rounds=10)


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("size", [1_000, 1_000_000])
def test_snapshot_is_constant_time(benchmark, impl, size):
    """Creating (then dropping) a snapshot does not depend on the size of the
    collections: 1,000 create+delete pairs per round, next to a map of ``size``."""
    benchmark.group = "snapshot-create-1000x"
    benchmark.extra_info["ops"] = 1000
    mod = IMPLS[impl]
    reg = mod.SnapshotRegistry()
    m = mod.TimelineHashMap(reg)
    m.put_many(list(range(size)), list(range(size)))
    m[0] = "written after each snapshot"
    state = {"e": 0}

    def run():
        e = state["e"]
        create, delete = reg.get_or_create_snapshot, reg.delete_snapshots_up_to
        for i in range(e, e + 1000):
            create(i)
            m[0] = i                    # a write, so each snapshot gets a delta
            delete(i)
        state["e"] = e + 1000

    benchmark.pedantic(run, rounds=15)
    assert len(m) == size


@pytest.mark.parametrize("impl", list(IMPLS))
@pytest.mark.parametrize("size,changes", [(10_000, 1_000), (1_000_000, 1_000),
                                          (1_000_000, 100_000)])
def test_revert_costs_changes(benchmark, impl, size, changes):
    """Reverting costs O(changes since the snapshot), not O(size)."""
    benchmark.group = "revert"
    benchmark.extra_info.update(size=size, changes=changes)
    mod = IMPLS[impl]
    reg = mod.SnapshotRegistry()
    m = mod.TimelineHashMap(reg)
    m.put_many(range(size), range(size))
    half = changes // 2
    new_keys = list(range(size, size + half))
    old_keys = list(range(half))

    def setup():
        reg.get_or_create_snapshot(1)
        m.put_many(old_keys, old_keys)        # overwrite: saved copies
        m.put_many(new_keys, new_keys)        # inserts: dropped on revert
        return (), {}

    benchmark.pedantic(lambda: reg.revert_to_snapshot(1), setup=setup, rounds=5)
    assert len(m) == size
