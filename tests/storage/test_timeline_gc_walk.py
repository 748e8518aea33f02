"""The native tables skip the cycle collector's walk while they hold only objects it ignores
(``tbl_note`` in kraft_storage/_native/_timeline_table.pxi): a million-partition controller's
partition maps hold a million untracked registrations, and every collection walked them.

What must hold: a cycle through anything a table holds is still collected -- a tracked value
stored after untracked ones, a value replaced in bulk, a dict stored while empty (untracked)
that later becomes tracked (CPython re-tracks dicts), a saved copy in a snapshot tier -- and
the walk is skipped only while every element is ignorable (seen through ``gc.get_referents``).
"""
from __future__ import annotations

import gc
import weakref

import kraft_storage._native._timeline as tl


class Node:
    pass


def _collected(build) -> bool:
    """Whether everything ``build()`` returns (it keeps no other reference) is freed by a
    collection: only possible if the collector walked the cycle through the table."""
    refs = [weakref.ref(o) for o in build()]
    gc.collect()
    return all(r() is None for r in refs)


def _untracked_tuples(n: int) -> list[tuple[int, ...]]:
    values = [(i, i + 1) for i in range(n)]
    gc.collect()  # the collector untracks tuples of ints at its first pass
    assert not any(gc.is_tracked(v) for v in values)
    return values


def test_a_table_of_ignorable_objects_is_not_walked_until_a_tracked_one_arrives():
    reg = tl.SnapshotRegistry()
    m = tl.TimelineHashMap(reg)
    values = _untracked_tuples(50)
    m.put_many(list(range(50)), values)
    m["s"] = "text"
    assert not any(v in gc.get_referents(m) for v in values[:3])
    node = Node()
    m["node"] = node  # tracked: from now on the table is walked, all of it
    referents = gc.get_referents(m)
    assert node in referents and any(r is values[0] for r in referents)


def test_cycle_through_a_tracked_value_after_untracked_ones_is_collected():
    def build():
        reg = tl.SnapshotRegistry()
        m = tl.TimelineHashMap(reg)
        m.put_many(list(range(100)), _untracked_tuples(100))
        node = Node()
        node.m = m
        m.put_many([100], [node])  # the bulk insert path
        return m, reg

    assert _collected(build)


def test_cycle_through_a_bulk_replaced_value_is_collected():
    def build():
        reg = tl.SnapshotRegistry()
        m = tl.TimelineHashMap(reg)
        m.put_many(list(range(10)), _untracked_tuples(10))
        node = Node()
        node.m = m
        m.put_many([3], [node])  # replaces an untracked value in place
        return m, reg

    assert _collected(build)


def test_dict_stored_untracked_then_tracked_keeps_its_cycle_collectable():
    def build():
        reg = tl.SnapshotRegistry()
        m = tl.TimelineHashMap(reg)
        d: dict[str, object] = {}
        assert not gc.is_tracked(d)
        m.put_many(["d"], [d])
        d["m"] = m  # the dict is tracked from now on, and holds the map
        assert gc.is_tracked(d)
        return m, reg

    assert _collected(build)


def test_cycle_through_a_saved_copy_is_collected():
    def build():
        reg = tl.SnapshotRegistry()
        m = tl.TimelineHashMap(reg)
        m.put_many(list(range(5)), _untracked_tuples(5))
        node = Node()
        node.m = m
        m[7] = node
        reg.get_or_create_snapshot(1)
        m[7] = (1, 2)  # the node now lives in the snapshot's saved copy only
        return m, reg

    assert _collected(build)


def test_set_of_ints_is_not_walked_and_a_tracked_member_makes_it_walked():
    def build():
        reg = tl.SnapshotRegistry()
        s = tl.TimelineHashSet(reg)
        for i in range(20):
            s.add(i)
        node = Node()
        node.s = s
        s.add(node)
        return s, reg

    assert _collected(build)
