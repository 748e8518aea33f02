"""The ``_topics_map`` kernel pair's persistent map (TopicMap, TopicMapMutation).

Both twins against a dict model on random operation sequences (hypothesis), every version kept
and checked at the end (a map never changes once made); the native trie's hash collisions and
deep paths (keys made to share all or the top bits of their 64-bit hash); keys of other types;
finished mutations; finalizers that use a mutation while it is being changed; the native tables
given back when maps die; and the native maps staying out of the cyclic collector.  The
topics delta's apply in the kernel is tested in test_topics_image.py.
"""
from __future__ import annotations

import gc
import importlib
import os
import pickle
import sys
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kraft_node._pure._topics_map as pure
from kraft_storage.messages.runtime import Uuid

#: The native twin is built in either mode (KRAFT_NO_EXTENSIONS only changes which one the image uses).
NATIVE: ModuleType = importlib.import_module("kraft_node._native._topics_map")
TWINS = [pure, NATIVE]
TWIN_IDS = ["pure", "native"]

MISSING = object()


# ---------------------------------------------------------------------------------------------
# Keys whose trie hashes collide (the native hash: a murmur3 finalizer of lo * K ^ hi, with lo
# and hi the Uuid's two 8-byte halves loaded in the machine's byte order)
# ---------------------------------------------------------------------------------------------

M64 = (1 << 64) - 1
K = 0x9E3779B97F4A7C15
C1, C2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
INV1, INV2 = pow(C1, -1, 1 << 64), pow(C2, -1, 1 << 64)


def unmix(h: int) -> int:
    h ^= h >> 33
    h = (h * INV2) & M64
    h ^= h >> 33
    h = (h * INV1) & M64
    return h ^ (h >> 33)


def uuid_with_hash(h: int, salt: int) -> Uuid:
    """A Uuid whose native trie hash is ``h`` (``salt`` picks one of the 2**64 such ids)."""
    lo = salt & M64
    hi = unmix(h) ^ ((lo * K) & M64)
    return Uuid(lo.to_bytes(8, sys.byteorder) + hi.to_bytes(8, sys.byteorder))


BASE_HASH = 0xDEADBEEF12345678
#: Uuids of one hash (a collision node), Uuids sharing the top 59..4 bits with it (one deep path
#: each), random Uuids, and short names.
COLLIDING = [uuid_with_hash(BASE_HASH, s) for s in range(1, 5)]
DEEP = [uuid_with_hash(BASE_HASH ^ (1 << bit), 100 + bit) for bit in (0, 3, 4, 9, 30, 58)]
RANDOM = [Uuid(int.from_bytes(os.urandom(16), "big")) for _ in range(8)]
NAMES = ["", "a", "b", "topic-1", "topic-2", "ü", "\U0001f600", "a" * 40]
KEYS: list[Any] = COLLIDING + DEEP + RANDOM + NAMES


def test_the_made_keys_collide_in_the_native_trie() -> None:
    assert {NATIVE._key_hash(u) for u in COLLIDING} == {BASE_HASH}
    assert [NATIVE._key_hash(u) for u in DEEP] == [BASE_HASH ^ (1 << b) for b in (0, 3, 4, 9, 30, 58)]
    assert NATIVE._key_hash(5) is None and NATIVE._key_hash(b"x") is None


# ---------------------------------------------------------------------------------------------
# Random operation sequences against a dict model
# ---------------------------------------------------------------------------------------------

keys = st.sampled_from(KEYS)
values = st.integers(0, 3) | st.sampled_from(["x", None])
pairs = st.lists(st.tuples(keys, values), max_size=12)
mutation_ops = st.lists(st.one_of(st.tuples(st.just("set"), keys, values), st.tuples(st.just("del"), keys),
                                  st.tuples(st.just("update"), pairs)), max_size=10)
operations = st.lists(st.one_of(
    st.tuples(st.just("set"), keys, values),
    st.tuples(st.just("delete"), keys),
    st.tuples(st.just("update"), pairs),
    st.tuples(st.just("build"), pairs),
    st.tuples(st.just("mutate"), mutation_ops),
    st.tuples(st.just("back"), st.integers(0, 1000)),
), max_size=25)


def run(twin: ModuleType, ops: list[Any]) -> list[tuple[Any, dict[Any, Any]]]:
    """Every version made by ``ops`` (each op applies to the current version; "back" makes an
    older one current), each with its dict model."""
    versions: list[tuple[Any, dict[Any, Any]]] = [(twin.TopicMap(), {})]
    cur, model = versions[0]
    for op in ops:
        kind = op[0]
        if kind == "set":
            cur, model = cur.set(op[1], op[2]), {**model, op[1]: op[2]}
        elif kind == "delete":
            if op[1] in model:
                cur = cur.delete(op[1])
                model = {k: v for k, v in model.items() if k != op[1]}
            else:
                with pytest.raises(KeyError):
                    cur.delete(op[1])
        elif kind == "update":
            cur, model = cur.update(op[1]), {**model, **dict(op[1])}
        elif kind == "build":
            cur, model = twin.TopicMap(op[1]), dict(op[1])
        elif kind == "mutate":
            mm = cur.mutate()
            model = dict(model)
            for m_op in op[1]:
                if m_op[0] == "set":
                    mm[m_op[1]] = m_op[2]
                    model[m_op[1]] = m_op[2]
                elif m_op[0] == "del":
                    if m_op[1] in model:
                        del mm[m_op[1]]
                        del model[m_op[1]]
                    else:
                        with pytest.raises(KeyError):
                            del mm[m_op[1]]
                else:
                    mm.update(m_op[1])
                    model.update(dict(m_op[1]))
                assert len(mm) == len(model)
                for k in KEYS:
                    assert mm.get(k, MISSING) == model.get(k, MISSING)
                    assert (k in mm) == (k in model)
            cur = mm.finish()
        else:  # back
            cur, model = versions[op[1] % len(versions)]
        versions.append((cur, model))
    return versions


def check_version(m: Any, model: dict[Any, Any]) -> None:
    assert len(m) == len(model)
    assert dict(m.items()) == model
    listed = list(m)
    assert len(listed) == len(set(listed)) == len(model)
    assert set(m.keys()) == set(model) and len(m.keys()) == len(model)
    assert sorted(map(repr, m.values())) == sorted(map(repr, model.values()))
    for k in KEYS:
        assert (k in m) == (k in model)
        assert m.get(k, MISSING) == model.get(k, MISSING)
        if k in model:
            assert m[k] == model[k]
            assert (k, model[k]) in m.items() and k in m.keys()
        else:
            with pytest.raises(KeyError):
                m[k]


@settings(max_examples=300, deadline=None)
@given(operations)
def test_both_twins_match_a_dict_model_in_every_version(ops: list[Any]) -> None:
    runs = [run(twin, ops) for twin in TWINS]
    for versions in runs:
        for m, model in versions:
            check_version(m, model)
        # equality between any two versions is the models' (the native one compares shapes)
        for i in range(0, len(versions), 3):
            for j in range(0, len(versions), 2):
                assert (versions[i][0] == versions[j][0]) == (versions[i][1] == versions[j][1])
                assert (versions[i][0] != versions[j][0]) == (versions[i][1] != versions[j][1])
    # the twins agree, version by version
    for (a, _), (b, _) in zip(*runs):
        assert dict(a.items()) == dict(b.items())


@settings(max_examples=100, deadline=None)
@given(pairs, pairs)
def test_built_and_grown_maps_are_equal(first: list[Any], second: list[Any]) -> None:
    """A map built in bulk from pairs equals one grown a key at a time and one grown by
    updates: one key set, one shape (the native equality walks shapes)."""
    for twin in TWINS:
        built = twin.TopicMap(first + second)
        grown = twin.TopicMap()
        for k, v in first + second:
            grown = grown.set(k, v)
        assert built == grown == twin.TopicMap(first).update(second)
        assert pickle.loads(pickle.dumps(built)) == built


# ---------------------------------------------------------------------------------------------
# API details, both twins
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("twin", TWINS, ids=TWIN_IDS)
def test_keys_of_other_types(twin: ModuleType) -> None:
    m = twin.TopicMap({"a": 1})
    for bad in (5, b"abc", ("a",), 1.5, None):
        with pytest.raises(TypeError, match=f"a TopicMap key is a str or a Uuid, not {type(bad).__name__}"):
            m.set(bad, 1)
        with pytest.raises(TypeError, match="a TopicMap key is a str or a Uuid"):
            twin.TopicMap([(bad, 1)])
        with pytest.raises(TypeError, match="a TopicMap key is a str or a Uuid"):
            m.update({bad: 1})
        assert bad not in m and m.get(bad) is None and m.get(bad, 7) == 7
        with pytest.raises(KeyError):
            m[bad]
        with pytest.raises(KeyError):
            m.delete(bad)
    # a str subclass is not a str key either (its hash and equality could run Python code)
    class Name(str):
        pass
    with pytest.raises(TypeError):
        m.set(Name("a"), 1)
    assert Name("a") not in m
    # pairs that are not pairs
    with pytest.raises((TypeError, ValueError)):
        twin.TopicMap([("a", 1, 2)])
    with pytest.raises(TypeError):
        twin.TopicMap([5])


@pytest.mark.parametrize("twin", TWINS, ids=TWIN_IDS)
def test_immutability_and_identity(twin: ModuleType) -> None:
    v = object()
    m = twin.TopicMap({"a": v})
    assert m.set("a", v) is m  # the same value object: nothing changes
    try:  # calling __init__ again changes nothing (the pure twin refuses, the native one ignores it)
        m.__init__({"b": 1})  # type: ignore[misc]
    except TypeError:
        pass
    assert dict(m.items()) == {"a": v}
    with pytest.raises(TypeError):
        hash(m)
    assert m != {"a": v} and (m == {"a": v}) is False  # never equal to another kind of mapping
    assert repr(twin.TopicMap({"a": 1})) == "TopicMap({'a': 1})"
    from collections.abc import Mapping
    assert isinstance(m, Mapping)


@pytest.mark.parametrize("twin", TWINS, ids=TWIN_IDS)
def test_mutations(twin: ModuleType) -> None:
    base = twin.TopicMap({"a": 1, "b": 2})
    with base.mutate() as mm:
        mm["c"] = 3
        mm.set("a", 10)
        del mm["b"]
        assert mm.get("a") == 10 and mm["c"] == 3 and "b" not in mm and len(mm) == 2
        with pytest.raises(KeyError):
            del mm["b"]
    done = mm.finish()
    assert dict(done.items()) == {"a": 10, "c": 3}
    assert dict(base.items()) == {"a": 1, "b": 2}  # the base never changes
    for change in (lambda: mm.set("z", 1), lambda: mm.update({"z": 1}), lambda: mm.__delitem__("a")):
        with pytest.raises(ValueError, match="this TopicMapMutation has been finished"):
            change()
    assert mm["a"] == 10 and len(mm) == 2  # reads stay allowed after finish
    # a mutation's maps are snapshots: changes after one finish() are not in it
    mm2 = done.mutate()
    first = mm2.finish()
    assert first == done
    empty = twin.TopicMapMutation()
    empty["x"] = 1
    assert dict(empty.finish().items()) == {"x": 1}
    with pytest.raises(TypeError, match="a TopicMapMutation starts from a TopicMap"):
        twin.TopicMapMutation({"a": 1})


@pytest.mark.parametrize("twin", TWINS, ids=TWIN_IDS)
def test_a_finalizer_that_changes_the_mutation_being_changed(twin: ModuleType) -> None:
    """A value dropped by a write runs its ``__del__`` only once the write is over; that
    ``__del__`` may write to the same mutation (the native tree must be consistent by then)."""
    mm = twin.TopicMap({u: i for i, u in enumerate(RANDOM + COLLIDING)}).mutate()
    seen: list[int] = []

    class Noisy:
        def __init__(self, n: int) -> None:
            self.n = n

        def __del__(self) -> None:
            seen.append(self.n)
            mm["written-by-del-%d" % self.n] = self.n
            if COLLIDING[0] in mm:
                del mm[COLLIDING[0]]

    mm[COLLIDING[1]] = Noisy(1)
    mm[COLLIDING[1]] = Noisy(2)  # drops Noisy(1)
    assert seen == [1]
    mm.update([(COLLIDING[2], Noisy(3)), (COLLIDING[2], 7)])  # the update drops Noisy(3)
    assert sorted(seen) == [1, 3]
    del mm[COLLIDING[1]]  # drops Noisy(2)
    assert sorted(seen) == [1, 2, 3]
    out = mm.finish()
    assert {k for k in out if isinstance(k, str)} == {"written-by-del-1", "written-by-del-2", "written-by-del-3"}
    assert COLLIDING[0] not in out and COLLIDING[1] not in out and out[COLLIDING[2]] == 7
    assert len(out) == len(RANDOM) + len(COLLIDING) - 2 + 3


# ---------------------------------------------------------------------------------------------
# Native only: memory given back, not tracked by the collector
# ---------------------------------------------------------------------------------------------

def test_native_tables_are_given_back() -> None:
    gc.collect()
    before = NATIVE._stats()
    ids = [Uuid(int.from_bytes(os.urandom(16), "big")) for _ in range(3000)] + COLLIDING + DEEP
    big = NATIVE.TopicMap((u, i) for i, u in enumerate(ids))
    versions = [big]
    for i in range(0, len(ids), 7):
        versions.append(versions[-1].set(ids[i], -i).delete(ids[(i * 13) % len(ids)]) if ids[(i * 13) % len(ids)]
                        in versions[-1] else versions[-1].set(ids[i], -i))
    with big.mutate() as mm:
        for u in ids[::3]:
            del mm[u]
        mm.update((u, "again") for u in ids[::5])
    versions.append(mm.finish())
    it = iter(big.items())
    next(it)
    nodes, recs, _ = NATIVE._stats()
    assert nodes > before[0] and recs > before[1]
    del big, versions, mm, it
    gc.collect()
    assert NATIVE._stats() == before


def test_native_maps_are_not_tracked_by_the_cyclic_collector() -> None:
    m = NATIVE.TopicMap({"a": [1]})
    assert not gc.is_tracked(m) and not gc.is_tracked(m.mutate())
    # an iterator holds its map: the map outlives every other reference
    it = iter(NATIVE.TopicMap({"k%d" % i: i for i in range(100)}).items())
    gc.collect()
    assert sorted(v for _, v in it) == list(range(100))
