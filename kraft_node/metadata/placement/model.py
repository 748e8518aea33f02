"""What a replica placer is given and what it answers (Kafka's ``metadata.placement`` value
types and interfaces): :class:`PlacementSpec` in, a :class:`ClusterDescriber` to read the
usable brokers from, a :class:`TopicAssignment` of :class:`PartitionAssignment` out, and
:class:`InvalidReplicationFactorError` when the replicas cannot be placed.

These live apart from the placer so that the controller's broker bookkeeping
(``controller/heartbeats.py``, which yields :class:`UsableBroker`) and any placer share them
without importing each other.

Invariants: a :class:`PartitionAssignment` has one directory per replica, in replica order
(``directories[i]`` hosts ``replicas[i]``); both are tuples, so an assignment is immutable and
hashable, equal exactly when replicas and directories are (Kafka's ``equals``/``hashCode``).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.runtime import Uuid

__all__ = [
    "UsableBroker",
    "PlacementSpec",
    "PartitionAssignment",
    "TopicAssignment",
    "DefaultDirProvider",
    "ClusterDescriber",
    "ReplicaPlacer",
    "InvalidReplicationFactorError",
]


@dataclass(frozen=True, slots=True)
class UsableBroker:
    """A broker a replica may be placed on (Kafka's ``placement.UsableBroker``): ``rack`` is
    ``None`` when the broker has none (Kafka's ``Optional.empty()``); the placer prefers unfenced
    brokers and never makes a fenced one a leader."""
    id: int
    rack: str | None
    fenced: bool


@dataclass(frozen=True, slots=True)
class PlacementSpec:
    """A placement to make: ``num_partitions`` partitions of ``num_replicas`` replicas each,
    the first being partition ``start_partition`` of its topic (0 for a new topic, the current
    partition count when partitions are added).  Kafka's ``numReplicas`` is a ``short``."""
    start_partition: int
    num_partitions: int
    num_replicas: int

    def __str__(self) -> str:
        return (f"PlacementSpec(startPartition={self.start_partition}, numPartitions={self.num_partitions}, "
                f"numReplicas={self.num_replicas})")


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """The replicas of one partition, leader first, and the log directory of each on its broker
    (from :meth:`ClusterDescriber.default_dir` at placement time)."""
    replicas: tuple[int, ...]
    directories: tuple[Uuid, ...]

    def __post_init__(self) -> None:
        if len(self.replicas) != len(self.directories):
            raise ValueError(f"PartitionAssignment needs one directory per replica, got "
                             f"{len(self.replicas)} replicas and {len(self.directories)} directories")

    @classmethod
    def of(cls, replicas: Iterable[int], default_dir: Callable[[int], Uuid]) -> PartitionAssignment:
        """Kafka's ``new PartitionAssignment(replicas, defaultDirProvider)``: each replica's
        directory is the provider's default for its broker."""
        replicas = tuple(replicas)
        return cls(replicas, tuple(default_dir(r) for r in replicas))

    def __str__(self) -> str:
        return (f"PartitionAssignment(replicas=[{', '.join(map(str, self.replicas))}], "
                f"directories=[{', '.join(map(str, self.directories))}])")


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """The assignments of a placement, one per partition, in partition order."""
    assignments: tuple[PartitionAssignment, ...]

    def __init__(self, assignments: Iterable[PartitionAssignment]) -> None:
        object.__setattr__(self, "assignments", tuple(assignments))

    def __str__(self) -> str:
        return f"TopicAssignment(assignments=[{', '.join(map(str, self.assignments))}])"


class DefaultDirProvider(Protocol):
    """The default log directory for new replicas on a broker: its only directory when it has
    one, ``DirectoryId.UNASSIGNED`` when it has several (the broker picks), ``MIGRATING`` when
    it registered none."""

    def default_dir(self, broker_id: int) -> Uuid:
        """The directory a new replica on ``broker_id`` is assigned to."""
        ...


class ClusterDescriber(DefaultDirProvider, Protocol):
    """What a placer reads of the cluster."""

    def usable_brokers(self) -> Iterator[UsableBroker]:
        """The brokers replicas may be placed on (registered, not shutting down), in the
        order the placer should meet them."""
        ...


class ReplicaPlacer(Protocol):
    """A replica placement policy (Kafka's ``ReplicaPlacer``)."""

    def place(self, spec: PlacementSpec, cluster: ClusterDescriber) -> TopicAssignment:
        """Place ``spec``'s partitions; :class:`InvalidReplicationFactorError` when they cannot
        be (too few brokers, all fenced, a non-positive replication factor)."""
        ...


class InvalidReplicationFactorError(ApiError):
    """The replicas cannot be placed (Kafka's ``InvalidReplicationFactorException``,
    ``INVALID_REPLICATION_FACTOR``)."""

    def __init__(self, message: str) -> None:
        super().__init__(Errors.INVALID_REPLICATION_FACTOR, message)
