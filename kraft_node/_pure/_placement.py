"""The striped placer's per-partition loop over a flat copy of its rack list: the pure-Python
twin of ``kraft_node._native._placement`` (and its oracle in the tests).

Caller: ``kraft_node.metadata.placement.striped`` (``StripedReplicaPlacer.place_columns``),
which builds the rack list (grouping, sorting, the initial random offsets, the HashMap order)
and hands its state here; this module knows nothing of brokers or racks beyond these arrays.

Layout (R racks, lists ``2r`` = rack ``r``'s unfenced brokers, ``2r + 1`` = its fenced ones):

* ``out``        int32[P, RF]  written: row p = partition p's replicas, leader first
* ``brokers``    int32[B]      every list end to end: list l is ``brokers[starts[l]:starts[l+1]]``
                               (shuffled in place)
* ``starts``     int32[2R + 1]
* ``cursors``    int64[3 * 2R] per list (index, offset, epoch), updated
* ``rack_names`` int32[R]      rack ids in the rack list's name order (shuffled in place)
* ``map_order``  int32[R]      rack ids in the order their lists are shuffled (HashMap order)
* ``rack_state`` int64[3]      (epoch, offset, number of unfenced brokers), updated
* ``rng``        uint64[4]     (state, multiplier, addend, width): ``java.util.Random``'s
                               ``next(bits)`` over a ``width``-bit LCG; ``rng[0]`` updated

Preconditions (checked by the caller, which raises Kafka's errors): RF >= 1, at least one
unfenced broker, at least RF brokers.  A loop that would never end (see the placer's module
doc) raises RuntimeError.
"""
from __future__ import annotations

from typing import Any

__all__ = ["place_partitions"]

_INT_MAX = (1 << 31) - 1


def place_partitions(out: Any, brokers: Any, starts: Any, cursors: Any, rack_names: Any,
                     map_order: Any, rack_state: Any, rng: Any) -> None:
    """Place ``out.shape[0]`` partitions of ``out.shape[1]`` replicas; update the state arrays."""
    num_partitions, rf = out.shape
    blist = [int(b) for b in brokers]
    start = [int(s) for s in starts]
    cur = [int(c) for c in cursors]
    names = [int(n) for n in rack_names]
    order = [int(n) for n in map_order]
    num_racks = len(names)
    num_lists = 2 * num_racks
    if len(start) != num_lists + 1 or len(cur) != 3 * num_lists or len(order) != num_racks:
        raise ValueError(f"placement state sizes disagree: {num_racks} racks, {len(start)} list starts, "
                         f"{len(cur)} cursor slots, {len(order)} map-order entries")
    if len(rack_state) < 3 or len(rng) < 4:
        raise ValueError("rack_state needs 3 entries and rng 4")
    if num_racks == 0 or rf < 1:
        raise ValueError(f"nothing to place on: {num_racks} racks, replication factor {rf}")
    if start[0] != 0 or start[num_lists] != len(blist):
        raise ValueError(f"list starts must run from 0 to {len(blist)}")
    for i in range(num_lists):
        if start[i + 1] < start[i]:
            raise ValueError(f"list starts must not decrease (list {i})")
    for i in range(num_racks):
        if not (0 <= names[i] < num_racks and 0 <= order[i] < num_racks):
            raise ValueError(f"rack id out of range at {i}")
    epoch, offset, num_unfenced = (int(v) for v in rack_state[:3])
    state, mult, add, width = (int(v) for v in rng[:4])
    if not 31 <= width <= 64:
        raise ValueError(f"LCG width must be 31..64 bits, got {width}")
    mask = (1 << width) - 1
    shift = width - 31

    def next_int(bound: int) -> int:
        nonlocal state
        state = (state * mult + add) & mask
        r = (state >> shift) & 0x7FFFFFFF
        m = bound - 1
        if bound & m == 0:
            return (bound * r) >> 31
        u = r
        r = u % bound
        while u - r + m > _INT_MAX:
            state = (state * mult + add) & mask
            u = (state >> shift) & 0x7FFFFFFF
            r = u % bound
        return r

    def shuffle(items: list[int], lo: int, hi: int) -> None:
        for i in range(hi - lo, 1, -1):
            j = next_int(i)
            items[lo + i - 1], items[lo + j] = items[lo + j], items[lo + i - 1]

    def next_of(lst: int, ep: int) -> int:
        lo = start[lst]
        size = start[lst + 1] - lo
        if size == 0:
            return -1
        c = 3 * lst
        if cur[c + 2] != ep:
            cur[c + 2] = ep
            cur[c] = 0
            cur[c + 1] = (cur[c + 1] + 1) % size
        index = cur[c]
        if index >= size:
            return -1
        cur[c] = index + 1
        return blist[lo + (index + cur[c + 1]) % size]

    rows: list[list[int]] = []
    try:
        for _ in range(num_partitions):
            if epoch == num_unfenced and num_unfenced > 1:
                shuffle(names, 0, num_racks)
                for r in order:
                    shuffle(blist, start[2 * r + 1], start[2 * r + 2])  # fenced first, as Rack.shuffle
                    shuffle(blist, start[2 * r], start[2 * r + 1])
                epoch = 0
            if offset == num_racks:
                offset = 0
            first = offset
            misses = 0
            while True:
                leader = next_of(2 * names[first], epoch)
                if leader >= 0:
                    break
                misses += 1
                if misses > num_racks:
                    raise RuntimeError(f"no rack has an unfenced broker left in iteration epoch {epoch}")
                first += 1
                if first == num_racks:
                    first = 0
            row = [leader]
            index = offset
            for replica in range(1, rf):
                misses = 0
                while True:
                    result = -1
                    if index == first:
                        first = -1
                    else:
                        r = names[index]
                        result = next_of(2 * r, epoch)
                        if result < 0:
                            result = next_of(2 * r + 1, epoch)
                    index += 1
                    if index == num_racks:
                        index = 0
                    if result >= 0:
                        break
                    misses += 1
                    if misses > num_racks + 1:
                        raise RuntimeError(
                            f"no rack has a broker left for replica {replica} in iteration epoch {epoch}")
                row.append(result)
            rows.append(row)
            epoch += 1
            offset += 1
    finally:
        # the state as far as it got (on a RuntimeError too: the caller's random has advanced)
        if rows:
            out[:len(rows)] = rows
        brokers[:] = blist
        cursors[:] = cur
        rack_names[:] = names
        rack_state[0] = epoch
        rack_state[1] = offset
        rng[0] = state
