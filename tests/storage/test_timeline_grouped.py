"""``put_grouped``: the native kernel against its pure twin (the specification), and the
twin against a plain-dict model of what it states.

The controller fills its reverse indexes (broker -> topic -> partitions, directory -> topic
-> partitions) with it when it loads a snapshot (replication_snapshot.py); the controller
tests compare that state with a record-at-a-time replay.  Here: random columns (entries in
topic order or not, groups of one or several entries, maps that already hold some topics,
stale flags set or not, the directory index's ``distinct`` merge), a snapshot taken before
the call (the puts must be revertible writes), the same result in both twins -- the same
items in the same order, one-entry groups sharing the caller's tuples -- and bad input
refused with the argument named.  The native kernel inserts the groups of a map without
stale topics straight into its table when the registry has no snapshot and the keys are
exact strs; the columns here take that path, its fallback (a map holding a topic not flagged
stale) and the general one (a snapshot, stale topics, str-subclass keys).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kraft_storage._native._timeline as native_tl
import kraft_storage._pure._timeline as pure_tl

TWINS = [pytest.param(pure_tl, id="pure"), pytest.param(native_tl, id="native")]


def _columns(data: st.DataObject) -> dict:
    nk = data.draw(st.integers(1, 6), label="maps")
    nt = data.draw(st.integers(1, 8), label="topics")
    nc = data.draw(st.integers(1, 5), label="distinct entries")
    n = data.draw(st.integers(0, 60), label="entries")
    key_of = data.draw(st.lists(st.integers(0, nk - 1), min_size=n, max_size=n))
    topic_of = data.draw(st.lists(st.integers(0, nt - 1), min_size=n, max_size=n))
    if data.draw(st.booleans(), label="in topic order"):
        topic_of.sort()
    codes = data.draw(st.lists(st.integers(0, nc - 1), min_size=n, max_size=n))
    # entries as the controller has them: partition ids, some with the leader flag
    ints = sorted(set(data.draw(st.lists(st.integers(0, 1 << 31 | 99), min_size=nc, max_size=nc, unique=True))))
    while len(ints) < nc:
        ints.append(ints[-1] + 1)
    stale = data.draw(st.lists(st.booleans(), min_size=nt, max_size=nt))
    # topics some maps already hold: where stale (read and extended); elsewhere the caller
    # guarantees absence, but a map that holds such a topic anyway gets its value replaced,
    # as put_many would (the native fast path's fallback)
    unflagged = data.draw(st.booleans(), label="held without the stale flag")
    before = [{t: tuple(data.draw(st.lists(st.sampled_from(ints), min_size=1, max_size=3)))
               for t in range(nt) if (stale[t] or unflagged) and data.draw(st.booleans())} for _ in range(nk)]
    return dict(nk=nk, nt=nt, key_of=key_of, topic_of=topic_of, codes=codes, ints=ints, stale=stale,
                before=before, distinct=data.draw(st.booleans(), label="distinct"),
                exact_keys=data.draw(st.booleans(), label="exact str keys"))


class _Key(str):
    """A str subclass: not an exact str, so the kernel takes its general path for it."""


def _run(tl, c: dict, *, snapshot: bool) -> tuple[list, list, list]:
    """Apply c with twin ``tl``: (items per map after, items per map after a revert, the
    one-entry tuples given)."""
    reg = tl.SnapshotRegistry()
    keys = [f"topic-{t:02d}" if c["exact_keys"] else _Key(f"topic-{t:02d}") for t in range(c["nt"])]
    maps = [tl.TimelineHashMap(reg) for _ in range(c["nk"])]
    for m, held in zip(maps, c["before"]):
        m.put_many([keys[t] for t in held], list(held.values()))
    if snapshot:
        reg.get_or_create_snapshot(10)
    ones = [(v,) for v in c["ints"]]
    tl.put_grouped(maps, np.array(c["key_of"], np.int32), np.array(c["topic_of"], np.int32),
                   np.array(c["codes"], np.int32), list(c["ints"]), ones, keys,
                   np.array(c["stale"], np.uint8), c["distinct"])
    after = [list(m.items()) for m in maps]
    reverted = []
    if snapshot:
        reg.revert_to_snapshot(10)
        reverted = [list(m.items()) for m in maps]
    return after, reverted, ones


def _model(c: dict) -> list[dict]:
    """What put_grouped states, with plain dicts (insertion order = put order)."""
    keys = [f"topic-{t:02d}" for t in range(c["nt"])]
    out = [{keys[t]: v for t, v in held.items()} for held in c["before"]]
    for k in range(c["nk"]):
        groups: dict[int, list[int]] = {}
        for i, key in enumerate(c["key_of"]):
            if key == k:
                groups.setdefault(c["topic_of"][i], []).append(c["ints"][c["codes"][i]])
        for t in sorted(groups):
            new = tuple(groups[t])
            old = out[k].get(keys[t]) if c["stale"][t] else None
            if old is not None:
                new = old + tuple(p for p in new if p not in set(old)) if c["distinct"] else old + new
            out[k][keys[t]] = new
    return out


@settings(max_examples=300, deadline=None)
@given(st.data(), st.booleans())
def test_native_equals_pure_and_the_model(data, snapshot):
    c = _columns(data)
    pure_after, pure_reverted, _ = _run(pure_tl, c, snapshot=snapshot)
    native_after, native_reverted, ones = _run(native_tl, c, snapshot=snapshot)
    assert native_after == pure_after
    # (iteration order after a revert is unspecified: compared as dicts)
    assert [dict(items) for items in native_reverted] == [dict(items) for items in pure_reverted]
    assert [dict(items) for items in pure_after] == _model(c)
    if snapshot:  # the puts were ordinary timeline writes: a revert undoes them
        keys = [f"topic-{t:02d}" for t in range(c["nt"])]
        assert [dict(items) for items in pure_reverted] == [{keys[t]: v for t, v in held.items()}
                                                            for held in c["before"]]


@pytest.mark.parametrize("tl", TWINS)
def test_one_entry_groups_share_the_given_tuples(tl):
    reg = tl.SnapshotRegistry()
    maps = [tl.TimelineHashMap(reg) for _ in range(2)]
    ones = [(5,), (7 | 1 << 31,)]
    # map 0: topic 0 -> (5,), topic 1 -> (5, flagged 7); map 1: topic 0 -> (flagged 7,)
    tl.put_grouped(maps, np.array([0, 1, 0, 0], np.int32), np.array([0, 0, 1, 1], np.int32),
                   np.array([0, 1, 0, 1], np.int32), [5, 7 | 1 << 31], ones, ["a", "b"],
                   np.zeros(2, np.uint8), False)
    assert maps[0].get("a") is ones[0]
    assert maps[1].get("a") is ones[1]
    assert maps[0].get("b") == (5, 7 | 1 << 31)
    assert list(maps[0].keys()) == ["a", "b"]


@pytest.mark.parametrize("tl", TWINS)
def test_bad_input_is_refused_with_the_argument_named(tl):
    reg = tl.SnapshotRegistry()
    maps = [tl.TimelineHashMap(reg)]
    i32 = np.int32

    def call(key_of=(0,), topic_of=(0,), codes=(0,), ints=(1,), ones=((1,),), keys=("a",), stale=(0,), m=None):
        tl.put_grouped(maps if m is None else m, np.array(key_of, i32), np.array(topic_of, i32),
                       np.array(codes, i32), list(ints), list(ones), list(keys), np.array(stale, np.uint8), False)
    with pytest.raises(ValueError, match=r"key_of\[0\] = 1 is not a map index"):
        call(key_of=(1,))
    with pytest.raises(ValueError, match=r"topic_of\[0\] = -1 is not a topic index"):
        call(topic_of=(-1,))
    with pytest.raises(ValueError, match=r"codes\[0\] = 3 is not an index of ints"):
        call(codes=(3,))
    with pytest.raises(ValueError, match="key_of has 1 entries, topic_of 2"):
        call(topic_of=(0, 0))
    with pytest.raises(ValueError, match="1 ints but 0 one-entry tuples"):
        call(ones=())
    with pytest.raises(ValueError, match="1 topic keys but 2 stale flags"):
        call(stale=(0, 1))
    with pytest.raises(TypeError, match=r"maps\[0\] is dict"):
        call(m=[{}])
    assert maps[0].is_empty()  # nothing was put by a refused call
