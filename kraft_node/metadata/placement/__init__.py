"""Replica placement (Kafka's ``metadata.placement``): where the replicas of new partitions go.

:class:`StripedReplicaPlacer` is Kafka's default placer, reproduced exactly (same replicas for
the same seed and brokers: :mod:`.java_random` supplies ``java.util.Random``,
``Collections.shuffle`` and ``HashMap`` order); :meth:`StripedReplicaPlacer.place_columns` is its
columnar fast path.  The value types and interfaces are in :mod:`.model`.
"""
from kraft_node.metadata.placement.java_random import JavaRandom, MockRandom, hash_map_order, java_shuffle
from kraft_node.metadata.placement.model import (
    ClusterDescriber,
    DefaultDirProvider,
    InvalidReplicationFactorError,
    PartitionAssignment,
    PlacementSpec,
    ReplicaPlacer,
    TopicAssignment,
    UsableBroker,
)
from kraft_node.metadata.placement.striped import PlacementError, StripedReplicaPlacer

__all__ = [
    "ClusterDescriber",
    "DefaultDirProvider",
    "InvalidReplicationFactorError",
    "JavaRandom",
    "MockRandom",
    "PartitionAssignment",
    "PlacementError",
    "PlacementSpec",
    "ReplicaPlacer",
    "StripedReplicaPlacer",
    "TopicAssignment",
    "UsableBroker",
    "hash_map_order",
    "java_shuffle",
]
