"""Kafka's ``StripedReplicaPlacer``: the same replicas, in the same order, for the same
random seed and brokers.  Two implementations of the per-partition loop: the readable object
model (:class:`BrokerList`, :class:`Rack`, :meth:`RackList.place`, Kafka's classes restated --
the reference, and the path of a random that overrides ``next``), and the ``_placement``
kernel (Cython, with a pure-Python twin) that :meth:`StripedReplicaPlacer.place` and
:meth:`StripedReplicaPlacer.place_columns` run on a flat copy of the :class:`RackList`.  The
rack list itself (reading the cluster, the initial random draws) is always built here.

The algorithm (Kafka's, restated):

* Racks: brokers are grouped by rack (``None`` is a rack of its own).  Each rack holds two
  :class:`BrokerList` s, unfenced and fenced, each sorted by id and given a random start
  offset -- drawn rack by rack in the *HashMap order* of the rack names, unfenced list after
  fenced, only for non-empty lists (:func:`~.java_random.hash_map_order`).  The rack names are
  then sorted (``None`` first, then ``String.compareTo``) and the rack list gets a random start
  offset too.
* Each partition is one *iteration epoch*.  The leader is the next unfenced broker of the first
  rack, from the rack offset on, that still has one in this epoch; each follower is the next
  broker (unfenced first, then fenced) of the next rack in turn, starting again from the rack
  offset and skipping the leader's rack once.  Then epoch and offset advance by one.  A broker
  list reset by a new epoch starts one further along (``offset + 1``), hence the stripes.
* Once as many partitions have been placed as there are unfenced brokers (and there are two or
  more), the rack names are shuffled, then every rack's fenced and unfenced lists (racks in
  HashMap order), and the epoch restarts at 0.

The placer's errors are checked after the rack list is built (so its random draws happen even
for a request that fails), in this order: replication factor not positive, no unfenced broker,
fewer brokers than replicas.  Kafka's ``RackList.place`` checks the last two the other way round.

A note on Kafka's loops: a list last used in epoch 0, then skipped until the epoch restarts
at 0 after a shuffle, does not reset (its epoch is still 0) and answers nothing in the new
epoch 0.  Kafka would then loop for ever if no other rack could supply a replica; here a full
turn of the racks that finds nothing raises :class:`PlacementError` instead.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from kraft_node.metadata.placement.java_random import (
    JavaRandom,
    hash_map_order,
    java_shuffle,
    sorted_optional_strings,
)
from kraft_node.metadata.placement.model import (
    ClusterDescriber,
    InvalidReplicationFactorError,
    PartitionAssignment,
    PlacementSpec,
    TopicAssignment,
    UsableBroker,
)
from kraft_storage.accel import load as _load

__all__ = [
    "BrokerList",
    "Rack",
    "RackList",
    "StripedReplicaPlacer",
    "PlacementError",
    "KERNEL",
]

#: The per-partition loop of :meth:`StripedReplicaPlacer.place_columns`: the Cython build
#: ``kraft_node._native._placement`` or its pure-Python twin (``kraft_storage.accel``).
_kernel = _load("_placement", package="kraft_node")
#: Name of the kernel module in use.
KERNEL: str = _kernel.__name__


class PlacementError(RuntimeError):
    """The placement loop cannot make progress (where Kafka's loop would not terminate)."""


def _check_positive(replication_factor: int) -> None:
    if replication_factor <= 0:
        raise InvalidReplicationFactorError(
            f"Invalid replication factor {replication_factor}: the replication factor must be positive.")


def _check_some_unfenced(num_unfenced: int) -> None:
    if num_unfenced == 0:
        raise InvalidReplicationFactorError("All brokers are currently fenced.")


def _check_enough_brokers(replication_factor: int, num_total: int) -> None:
    if replication_factor > num_total:
        raise InvalidReplicationFactorError(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{num_total} broker(s) are registered.")


class BrokerList:
    """Brokers iterated round-robin, at most once each per iteration epoch.

    ``index``: how many were returned in the current epoch; ``offset``: where the round starts
    (``(index + offset) % size`` is the next one); ``epoch``: the epoch last seen -- a call
    with another epoch restarts the round one further along."""

    __slots__ = ("brokers", "index", "offset", "epoch")

    def __init__(self, brokers: Iterable[int] = ()) -> None:
        self.brokers: list[int] = list(brokers)
        self.index = 0
        self.offset = 0
        self.epoch = 0

    def add(self, broker: int) -> BrokerList:
        self.brokers.append(broker)
        return self

    def initialize(self, random: JavaRandom) -> None:
        """Sort, and draw the start offset (no draw for an empty list)."""
        if self.brokers:
            self.brokers.sort()
            self.offset = random.next_int(len(self.brokers))

    def shuffle(self, random: JavaRandom) -> None:
        java_shuffle(self.brokers, random)

    def size(self) -> int:
        return len(self.brokers)

    def next(self, epoch: int) -> int:
        """The next broker of this round, or -1 when every broker was returned in ``epoch``."""
        brokers = self.brokers
        if not brokers:
            return -1
        if self.epoch != epoch:
            self.epoch = epoch
            self.index = 0
            self.offset = (self.offset + 1) % len(brokers)
        if self.index >= len(brokers):
            return -1
        broker = brokers[(self.index + self.offset) % len(brokers)]
        self.index += 1
        return broker


class Rack:
    """A rack's brokers: unfenced ones are always offered before fenced ones."""

    __slots__ = ("fenced", "unfenced")

    def __init__(self) -> None:
        self.fenced = BrokerList()
        self.unfenced = BrokerList()

    def initialize(self, random: JavaRandom) -> None:
        self.fenced.initialize(random)
        self.unfenced.initialize(random)

    def shuffle(self, random: JavaRandom) -> None:
        self.fenced.shuffle(random)
        self.unfenced.shuffle(random)

    def next_unfenced(self, epoch: int) -> int:
        return self.unfenced.next(epoch)

    def next(self, epoch: int) -> int:
        result = self.unfenced.next(epoch)
        return result if result >= 0 else self.fenced.next(epoch)


class RackList:
    """The racks of the cluster, iterated round-robin (Kafka's ``RackList``).

    ``racks`` is in first-seen order of the brokers (what a Java ``HashMap`` is given);
    ``map_order`` the indexes of ``racks`` in that map's iteration order; ``rack_names`` the
    names sorted as Kafka sorts them (reshuffled every ``num_unfenced`` placements)."""

    def __init__(self, random: JavaRandom, brokers: Iterable[UsableBroker]) -> None:
        self.random = random
        # per rack, in first-seen order: ([unfenced ids], [fenced ids]) -- index by `fenced`
        groups: dict[str | None, tuple[list[int], list[int]]] = {}
        for broker in brokers:
            group = groups.get(broker.rack)
            if group is None:
                group = groups[broker.rack] = ([], [])
            group[broker.fenced].append(broker.id)
        by_name: dict[str | None, Rack] = {}
        num_total = num_unfenced = 0
        for name, (unfenced, fenced) in groups.items():
            rack = by_name[name] = Rack()
            rack.unfenced.brokers = unfenced
            rack.fenced.brokers = fenced
            num_unfenced += len(unfenced)
            num_total += len(unfenced) + len(fenced)
        names = list(by_name)
        self.racks = by_name
        self.map_order: tuple[int, ...] = hash_map_order(names)
        self._map_racks = [by_name[names[i]] for i in self.map_order]
        for rack in self._map_racks:
            rack.initialize(random)
        self.rack_names: list[str | None] = sorted_optional_strings(names)
        self.num_total_brokers = num_total
        self.num_unfenced_brokers = num_unfenced
        self.epoch = 0
        self.offset = random.next_int(len(names)) if names else 0

    def place(self, replication_factor: int) -> list[int]:
        """The replicas of the next partition, leader first."""
        _check_positive(replication_factor)
        _check_enough_brokers(replication_factor, self.num_total_brokers)
        _check_some_unfenced(self.num_unfenced_brokers)
        if self.epoch == self.num_unfenced_brokers and self.num_unfenced_brokers > 1:
            self.shuffle()
            self.epoch = 0
        num_racks = len(self.rack_names)
        if self.offset == num_racks:
            self.offset = 0
        epoch = self.epoch
        racks = self.racks
        names = self.rack_names
        # the leader: the first rack from the offset on with an unfenced broker left
        first = self.offset
        misses = 0
        while True:
            leader = racks[names[first]].next_unfenced(epoch)
            if leader >= 0:
                break
            misses += 1
            if misses > num_racks:
                raise PlacementError(f"no rack has an unfenced broker left in iteration epoch {epoch}")
            first += 1
            if first == num_racks:
                first = 0
        replicas = [leader]
        index = self.offset
        for _ in range(1, replication_factor):
            misses = 0
            while True:
                result = -1
                if index == first:
                    first = -1  # the leader's rack, skipped once
                else:
                    result = racks[names[index]].next(epoch)
                index += 1
                if index == num_racks:
                    index = 0
                if result >= 0:
                    break
                misses += 1
                if misses > num_racks + 1:
                    raise PlacementError(f"no rack has a broker left for replica {len(replicas)} "
                                         f"in iteration epoch {epoch}")
            replicas.append(result)
        self.epoch += 1
        self.offset += 1
        return replicas

    def shuffle(self) -> None:
        java_shuffle(self.rack_names, self.random)
        for rack in self._map_racks:
            rack.shuffle(self.random)


@dataclass(frozen=True, slots=True)
class _FlatRacks:
    """A :class:`RackList` flattened for the kernel (the layout is the kernel's, see
    ``kraft_node/_pure/_placement.py``)."""
    brokers: npt.NDArray[np.int32]
    starts: npt.NDArray[np.int32]
    cursors: npt.NDArray[np.int64]
    rack_names: npt.NDArray[np.int32]
    map_order: npt.NDArray[np.int32]
    rack_state: npt.NDArray[np.int64]


def _flatten(rack_list: RackList) -> _FlatRacks:
    racks = list(rack_list.racks.values())
    ids = {name: i for i, name in enumerate(rack_list.racks)}
    brokers: list[int] = []
    starts = [0]
    cursors: list[int] = []
    for rack in racks:
        for blist in (rack.unfenced, rack.fenced):
            brokers.extend(blist.brokers)
            starts.append(len(brokers))
            cursors += (blist.index, blist.offset, blist.epoch)
    return _FlatRacks(
        brokers=np.array(brokers, dtype=np.int32),
        starts=np.array(starts, dtype=np.int32),
        cursors=np.array(cursors, dtype=np.int64),
        rack_names=np.array([ids[n] for n in rack_list.rack_names], dtype=np.int32),
        map_order=np.array(rack_list.map_order, dtype=np.int32),
        rack_state=np.array([rack_list.epoch, rack_list.offset, rack_list.num_unfenced_brokers], dtype=np.int64),
    )


class StripedReplicaPlacer:
    """Kafka's default replica placer (see the module doc).  ``random`` is shared by every
    placement, so the same sequence of requests on the same brokers gives the same replicas.

    Both :meth:`place` and :meth:`place_columns` build the :class:`RackList` (Python: it reads
    the cluster) and run the partition loop in the ``_placement`` kernel on a flat copy of it,
    unless ``random`` overrides ``next`` (then :meth:`RackList.place`, row by row).  The tests
    hold the kernel, native and pure, to :meth:`RackList.place` and both to Kafka's outputs."""

    def __init__(self, random: JavaRandom) -> None:
        self.random = random

    def _rack_list(self, spec: PlacementSpec, cluster: ClusterDescriber) -> RackList:
        rack_list = RackList(self.random, cluster.usable_brokers())
        _check_positive(spec.num_replicas)
        _check_some_unfenced(rack_list.num_unfenced_brokers)
        _check_enough_brokers(spec.num_replicas, rack_list.num_total_brokers)
        return rack_list

    def place(self, spec: PlacementSpec, cluster: ClusterDescriber) -> TopicAssignment:
        """Kafka's ``place``: one :class:`PartitionAssignment` per partition, directories from
        ``cluster.default_dir``.  :class:`InvalidReplicationFactorError` when it cannot."""
        columns = self.place_columns(spec, cluster)
        # default_dir is a read of the cluster: asked once per broker placed on, not per replica
        dirs = {broker: cluster.default_dir(broker) for broker in np.unique(columns).tolist()}
        same_dir = next(iter(dirs.values())) if len(set(dirs.values())) == 1 else None
        uniform = (same_dir,) * spec.num_replicas  # every replica's directory, when they all agree
        lookup = dirs.__getitem__
        out = []
        new, set_field = object.__new__, object.__setattr__
        for row in columns.tolist():
            # PartitionAssignment(replicas, directories) without its length check (equal here)
            assignment = new(PartitionAssignment)
            set_field(assignment, "replicas", tuple(row))
            set_field(assignment, "directories", uniform if same_dir is not None else tuple(map(lookup, row)))
            out.append(assignment)
        return TopicAssignment(out)

    def place_columns(self, spec: PlacementSpec, cluster: ClusterDescriber) -> npt.NDArray[np.int32]:
        """The replicas :meth:`place` chooses, as an ``int32`` array of shape
        ``(num_partitions, num_replicas)`` (row ``p``: partition ``start_partition + p``, leader
        first), drawing the same random numbers -- for the controller's columnar topic
        creation.  Directories are left to the caller (``cluster.default_dir`` per broker)."""
        rack_list = self._rack_list(spec, cluster)
        if spec.num_partitions < 0:
            raise ValueError(f"num_partitions must not be negative, got {spec.num_partitions}")
        out = np.empty((spec.num_partitions, spec.num_replicas), dtype=np.int32)
        if spec.num_partitions == 0:
            return out
        random = self.random
        if not type(random).is_lcg():
            # a generator the kernel cannot run: the object model, row by row
            for p in range(spec.num_partitions):
                out[p] = rack_list.place(spec.num_replicas)
            return out
        flat = _flatten(rack_list)
        rng = np.array([random.state, random.MULTIPLIER, random.ADDEND, random.WIDTH], dtype=np.uint64)
        try:
            _kernel.place_partitions(out, flat.brokers, flat.starts, flat.cursors, flat.rack_names,
                                     flat.map_order, flat.rack_state, rng)
        except RuntimeError as exc:
            raise PlacementError(str(exc)) from exc
        finally:
            random.state = int(rng[0])
        return out
