"""Model-based test of the timeline collections (issue 5 B.4).

A hypothesis state machine drives a SnapshotRegistry with one map, one set and
three scalars, and checks every read, at LATEST and at every live snapshot
epoch, against a naive oracle that keeps a *full copy* of the state for each
snapshot.  It runs once per implementation (native Cython and pure twin).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import kraft_storage._pure._timeline as pure_tl

try:
    import kraft_storage._native._timeline as native_tl
except ImportError:  # pragma: no cover - reported by the native-presence test
    native_tl = None


class Collide:
    """Key whose hash collides with every other Collide: exercises the
    equality path of the probe sequence and the saved-copy tables."""

    __slots__ = ("n",)

    def __init__(self, n: int):
        self.n = n

    def __hash__(self) -> int:
        return 12345

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Collide) and other.n == self.n

    def __repr__(self) -> str:
        return f"Collide({self.n})"


KEYS = st.one_of(
    st.integers(0, 3),                       # a hot set, so keys get rewritten
    st.integers(0, 3),                       # across several snapshots
    st.integers(0, 40),                      # many keys: forces resizes
    st.sampled_from(["a", "b", "topic-1", ""]),
    st.tuples(st.integers(0, 2), st.integers(0, 2)),
    st.builds(Collide, st.integers(0, 3)),
    st.sampled_from([-1, -2, 2**61 - 1, 2**64]),   # -1 and -2 share a hash
    # equal to an int key but of another type (the bulk paths' general case),
    # and int64 extremes whose hash equals a small key's (2**63-1 ~ 3, -2**63 ~ -4)
    st.sampled_from([True, 1.0, 2**63 - 1, -(2**63), -4]),
)
# keys a bulk call may take as a C int64 array
INT64_KEYS = st.one_of(st.integers(0, 40),
                       st.sampled_from([-1, -2, -4, 3, 2**61 - 1, 2**63 - 1, -(2**63)]))
VALUES = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=3))
ALL_KEYS = list(range(41)) + ["a", "b", "topic-1", "", "zz"] + \
    [(i, j) for i in range(3) for j in range(3)] + [Collide(i) for i in range(5)] + \
    [-1, -2, 2**61 - 1, 2**64, True, 1.0, 2**63 - 1, -(2**63), -4]
ALL_INT64 = np.array([k for k in ALL_KEYS if type(k) is int and -(2**63) <= k < 2**63],
                     dtype=np.int64)

LATEST = pure_tl.LATEST_EPOCH


def _canon(k):
    """One representative of equal keys of different types (True == 1.0 == 1)."""
    return int(k) if type(k) in (bool, float) else k


class Oracle:
    """Naive model: the whole state, copied in full at each snapshot."""

    def __init__(self):
        self.map: dict = {}
        self.set: set = set()
        self.long = 0
        self.int = 0
        self.obj = "init"
        self.snaps: dict[int, tuple] = {}   # epoch -> full copy (insertion = epoch order)
        self.high = None

    def state(self):
        return (dict(self.map), set(self.set), self.long, self.int, self.obj)

    def restore(self, state):
        self.map, self.set, self.long, self.int, self.obj = copy.copy(state[0]), set(state[1]), \
            state[2], state[3], state[4]


def make_machine(mod):
    class TimelineMachine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            self.reg = mod.SnapshotRegistry()
            self.m = mod.TimelineHashMap(self.reg)
            self.s = mod.TimelineHashSet(self.reg, 4)
            self.long = mod.TimelineLong(self.reg)
            self.int = mod.TimelineInteger(self.reg)
            self.obj = mod.TimelineObject(self.reg, "init")
            self.o = Oracle()

        # -- writes -------------------------------------------------------
        @rule(k=KEYS, v=VALUES)
        def put(self, k, v):
            expected = self.o.map.get(k)
            assert self.m.put(k, v) == expected
            self.o.map[k] = v

        @rule(k=KEYS, v=VALUES)
        def setitem(self, k, v):
            self.m[k] = v
            self.o.map[k] = v

        @rule(ks=st.lists(KEYS, max_size=8), v=VALUES)
        def put_many(self, ks, v):
            vals = [v] * len(ks)
            self.m.put_many(ks, vals)
            for k in ks:
                self.o.map[k] = v

        @rule(ks=st.lists(KEYS, max_size=40), v=VALUES)
        def put_many_fresh_values(self, ks, v):
            # one new value object per key, so a later write drops the last
            # reference to it (the bulk paths release those after the batch)
            vals = [[v, i] for i in range(len(ks))]
            self.m.put_many(tuple(ks), vals)
            for k, val in zip(ks, vals):
                self.o.map[k] = val

        @rule(ks=st.lists(INT64_KEYS, max_size=40), v=VALUES, fresh=st.booleans())
        def put_many_int64_array(self, ks, v, fresh):
            arr = np.array(ks, dtype=np.int64)
            vals = [[v, i] for i in range(len(ks))] if fresh else [v] * len(ks)
            self.m.put_many(arr, np.array(vals, dtype=object) if fresh else vals)
            for k, val in zip(ks, vals):
                self.o.map[k] = val

        @rule(k=KEYS)
        def remove(self, k):
            assert self.m.remove(k) == self.o.map.pop(k, None)

        @rule(k=KEYS)
        def delitem(self, k):
            if k in self.o.map:
                del self.m[k]
                del self.o.map[k]
            else:
                with pytest.raises(KeyError):
                    del self.m[k]

        @precondition(lambda self: len(self.o.map) < 60)
        @rule()
        def clear_map(self):
            self.m.clear()
            self.o.map.clear()

        @rule(k=KEYS)
        def set_add(self, k):
            assert self.s.add(k) == (k not in self.o.set)
            self.o.set.add(k)

        @rule(ks=st.lists(KEYS, max_size=8))
        def set_add_many(self, ks):
            new = len(set(ks) - self.o.set)
            assert self.s.add_many(ks) == new
            self.o.set.update(ks)

        @rule(k=KEYS)
        def set_remove(self, k):
            assert self.s.remove(k) == (k in self.o.set)
            self.o.set.discard(k)

        @rule(v=st.integers(-(2**63), 2**63 - 1))
        def long_set(self, v):
            self.long.set(v)
            self.o.long = v

        @rule(up=st.booleans())
        def int_step(self, up):
            if up and self.o.int < 2**31 - 1:
                self.int.increment()
                self.o.int += 1
            elif not up and self.o.int > -(2**31):
                self.int.decrement()
                self.o.int -= 1

        @rule(v=VALUES)
        def obj_set(self, v):
            self.obj.set(v)
            self.o.obj = v

        # -- snapshots ----------------------------------------------------
        @rule(step=st.integers(0, 3))
        def create_snapshot(self, step):
            base = self.o.high if self.o.high is not None else -2
            epoch = base + step
            newest_live = max(self.o.snaps) if self.o.snaps else None
            if self.o.high is not None and epoch == self.o.high and epoch != newest_live:
                # that epoch was snapshotted and deleted since: re-creating it
                # would hide the writes made after it
                with pytest.raises(mod.SnapshotEpochError):
                    self.reg.get_or_create_snapshot(epoch)
                return
            snap = self.reg.get_or_create_snapshot(epoch)
            assert snap.epoch == epoch
            if epoch not in self.o.snaps:
                self.o.snaps[epoch] = self.o.state()
            self.o.high = epoch

        @precondition(lambda self: self.o.high is not None)
        @rule(back=st.integers(1, 3))
        def create_snapshot_at_or_before_high_water_fails(self, back):
            epoch = self.o.high - back + 1
            if self.o.snaps and epoch == max(self.o.snaps):
                # the newest live snapshot is simply reused
                assert self.reg.get_or_create_snapshot(epoch).epoch == epoch
                return
            with pytest.raises(mod.SnapshotEpochError):
                self.reg.get_or_create_snapshot(epoch)

        @precondition(lambda self: bool(self.o.snaps))
        @rule(data=st.data())
        def revert(self, data):
            epoch = data.draw(st.sampled_from(sorted(self.o.snaps)))
            self.reg.revert_to_snapshot(epoch)
            self.o.restore(self.o.snaps[epoch])
            self.o.snaps = {e: s for e, s in self.o.snaps.items() if e <= epoch}
            self.o.high = epoch

        @precondition(lambda self: bool(self.o.snaps))
        @rule(data=st.data())
        def delete_snapshot(self, data):
            epoch = data.draw(st.sampled_from(sorted(self.o.snaps)))
            self.reg.delete_snapshot(epoch)
            del self.o.snaps[epoch]

        @precondition(lambda self: bool(self.o.snaps))
        @rule(data=st.data())
        def delete_up_to(self, data):
            epochs = sorted(self.o.snaps)
            upto = data.draw(st.integers(epochs[0] - 1, epochs[-1] + 1))
            self.reg.delete_snapshots_up_to(upto)
            self.o.snaps = {e: s for e, s in self.o.snaps.items() if e >= upto}

        @rule()
        def reset(self):
            self.reg.reset()
            self.o = Oracle()

        # -- reads at every epoch -----------------------------------------
        @invariant()
        def registry_matches(self):
            assert self.reg.epochs() == sorted(self.o.snaps)
            assert len(self.reg) == len(self.o.snaps)

        @invariant()
        def reads_match_at_every_epoch(self):
            views = [(LATEST, self.o.state())] + sorted(self.o.snaps.items())
            for epoch, (omap, oset, olong, oint, oobj) in views:
                assert self.m.to_dict(epoch) == omap, epoch
                assert self.m.size(epoch) == len(omap)
                # which of two equal keys (1, True, 1.0) a map keeps is unspecified
                assert sorted(map(repr, map(_canon, self.m.keys(epoch)))) == \
                    sorted(map(repr, map(_canon, omap)))
                assert sorted(map(repr, self.m.values(epoch))) == \
                    sorted(map(repr, omap.values()))
                assert self.s.to_set(epoch) == oset
                assert self.s.size(epoch) == len(oset)
                assert self.s.is_empty(epoch) == (not oset)
                got = self.m.get_many(ALL_KEYS, "MISSING", epoch=epoch)
                assert got == [omap.get(k, "MISSING") for k in ALL_KEYS]
                assert self.s.contains_many(ALL_KEYS, epoch) == [k in oset for k in ALL_KEYS]
                ints = ALL_INT64.tolist()
                assert self.m.get_many(ALL_INT64, "MISSING", epoch=epoch) == \
                    [omap.get(k, "MISSING") for k in ints]
                assert self.m.contains_many(ALL_INT64, epoch) == [k in omap for k in ints]
                assert self.s.contains_many(ALL_INT64, epoch) == [k in oset for k in ints]
                assert self.m.get_many(tuple(ALL_KEYS), "MISSING", epoch=epoch) == \
                    [omap.get(k, "MISSING") for k in ALL_KEYS]
                for k in ALL_KEYS[::7]:
                    assert self.m.get(k, "MISSING", epoch=epoch) == omap.get(k, "MISSING")
                    assert self.m.contains(k, epoch) == (k in omap)
                    assert self.s.contains(k, epoch) == (k in oset)
                assert self.long.get(epoch) == olong
                assert self.int.get(epoch) == oint
                assert self.obj.get(epoch) == oobj
            # current-state fast paths
            omap = self.o.map
            assert len(self.m) == len(omap)
            assert dict(self.m.items()) == omap
            for k in ALL_KEYS[::5]:
                assert (k in self.m) == (k in omap)
                if k in omap:
                    assert self.m[k] == omap[k]

        @invariant()
        def native_table_integrity(self):
            if hasattr(self.m, "_check_integrity"):
                self.m._check_integrity()
                self.s._check_integrity()

    return TimelineMachine


IMPLS = [pytest.param(pure_tl, id="pure"),
         pytest.param(native_tl, id="native",
                      marks=pytest.mark.skipif(native_tl is None, reason="not built"))]


@pytest.mark.parametrize("mod", IMPLS)
def test_model(mod):
    machine = make_machine(mod)
    machine.TestCase.settings = settings(
        max_examples=100, stateful_step_count=50, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    machine.TestCase().runTest()
