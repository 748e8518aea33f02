"""The broker's read-only views of the metadata image (Kafka's ``KRaftMetadataCache`` role).

Why a separate object: every client API a broker serves (Metadata, DescribeCluster,
DescribeConfigs, DescribeTopicPartitions) answers from the latest published
:class:`~kraft_node.metadata.image.metadata_image.MetadataImage`.  The loader swaps that image
atomically (``image_source`` returns whichever is current); a request must read ONE image
from start to end, or an answer could mix two offsets (a topic listed with partitions of a
later delta, a leader from one image and its endpoint from another).  So the cache has no
state of its own: :meth:`KRaftMetadataCache.image` is called once per request and every view
here is a function of ``(image, ...)``.

Liveness, as Kafka's KRaftMetadataCache defines it (each rule has a test):

* an *alive* broker is a registered broker that is not fenced;
* a partition's leader endpoint (:meth:`leader_endpoint`) does NOT look at fencing: a fenced
  leader that still has the listener is reported (Kafka's ``getAliveEndpoint`` takes the
  registration's node as it is); a leader that is not registered (or -1) is
  LEADER_NOT_AVAILABLE, one without the listener LISTENER_NOT_FOUND from Metadata v6 on;
* a replica is *offline* (:meth:`offline_replicas`) when its broker is not registered, is
  fenced, lacks the listener, or the partition's directory for it is not one of the broker's
  online directories;
* ``filter_unavailable`` (Metadata v0 only) keeps the replicas whose broker is alive with the
  listener.

The "controller id" a broker reports is a random alive broker (:meth:`random_alive_broker_id`),
not the Raft leader: clients send admin requests to the controller id they are given, and a
broker forwards them (KIP-590), while controllers are not reachable on a broker listener.
"""
from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kraft_node.metadata.controller.cluster_control import BrokerRegistration
from kraft_node.metadata.controller.replication_control import PartitionRegistration
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.image.topics import TopicImage
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

__all__ = ["KRaftMetadataCache", "BrokerEndpoint", "PartitionView", "partition_view", "is_internal_topic",
           "INTERNAL_TOPICS"]

#: Kafka's internal topics (``Topic.isInternal``): reported with is_internal = true.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

#: Metadata's "no leader" id (``MetadataResponse.NO_LEADER_ID``).
NO_LEADER_ID = -1


def is_internal_topic(name: str) -> bool:
    return name in INTERNAL_TOPICS


@dataclass(frozen=True, slots=True)
class BrokerEndpoint:
    """A broker's address on one listener (Kafka's ``Node``)."""
    id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """What Metadata / DescribeTopicPartitions say about one partition on one listener.
    ``error`` is Metadata's partition error (DescribeTopicPartitions has none)."""
    partition_id: int
    error: Errors
    leader_id: int
    leader_epoch: int
    replicas: Sequence[int]
    isr: Sequence[int]
    offline_replicas: Sequence[int]
    elr: Sequence[int]
    last_known_elr: Sequence[int]


def _offline(image: MetadataImage, reg: PartitionRegistration, listener: str) -> list[int]:
    brokers = image.cluster.brokers
    out: list[int] = []
    for i, broker_id in enumerate(reg.replicas):
        b = brokers.get(broker_id)
        if b is None or b.fenced or listener not in b.listeners:
            out.append(broker_id)
        elif reg.directories and not b.has_online_dir(reg.directories[i]):
            out.append(broker_id)
    return out


def _alive_with_listener(image: MetadataImage, ids: Sequence[int], listener: str) -> list[int]:
    brokers = image.cluster.brokers
    out = []
    for broker_id in ids:
        b = brokers.get(broker_id)
        if b is not None and not b.fenced and listener in b.listeners:
            out.append(broker_id)
    return out


def partition_view(image: MetadataImage, partition_id: int, reg: PartitionRegistration, listener: str, *,
                   filter_unavailable: bool = False, error_unavailable_listeners: bool = True) -> PartitionView:
    """Kafka's ``getPartitionMetadata`` for one partition (see the module doc for the rules).

    ``filter_unavailable``: Metadata v0's ``errorUnavailableEndpoints`` (replicas and ISR keep
    only alive brokers with the listener); ``error_unavailable_listeners``: v6+ answers
    LISTENER_NOT_FOUND for a registered leader without the listener (older versions
    LEADER_NOT_AVAILABLE)."""
    if filter_unavailable:
        replicas: Sequence[int] = _alive_with_listener(image, reg.replicas, listener)
        isr: Sequence[int] = _alive_with_listener(image, reg.isr, listener)
    else:
        replicas, isr = reg.replicas, reg.isr
    offline = _offline(image, reg, listener)
    leader = image.cluster.brokers.get(reg.leader)
    if leader is None or listener not in leader.listeners:
        if leader is None or not error_unavailable_listeners:
            error = Errors.LEADER_NOT_AVAILABLE
        else:
            error = Errors.LISTENER_NOT_FOUND
        leader_id = NO_LEADER_ID
    else:
        leader_id = reg.leader
        if len(replicas) < len(reg.replicas) or len(isr) < len(reg.isr):
            error = Errors.REPLICA_NOT_AVAILABLE
        else:
            error = Errors.NONE
    return PartitionView(partition_id, error, leader_id, reg.leader_epoch, replicas, isr, offline, reg.elr,
                         reg.last_known_elr)


class KRaftMetadataCache:
    """Read-only views over the image ``image_source()`` returns (the loader's current one).

    Call :meth:`image` once at the start of a request and pass that image to the other
    methods; nothing here caches an image, so a request never sees two offsets."""

    def __init__(self, image_source: Callable[[], MetadataImage], rng: random.Random | None = None) -> None:
        self._image_source = image_source
        self._rng = rng if rng is not None else random.Random()

    def image(self) -> MetadataImage:
        """The current image (one read: the loader may publish a new one right after)."""
        return self._image_source()

    # ------------------------------------------------------------------ brokers
    @staticmethod
    def alive_brokers(image: MetadataImage) -> list[BrokerRegistration]:
        """Registered, unfenced brokers, by id."""
        brokers = image.cluster.brokers
        return [brokers[i] for i in sorted(brokers) if not brokers[i].fenced]

    @staticmethod
    def alive_broker_endpoints(image: MetadataImage, listener: str) -> list[BrokerEndpoint]:
        """Kafka's ``getAliveBrokerNodes``: the alive brokers that have ``listener``, with their
        address on it and their rack, by id."""
        out = []
        for b in KRaftMetadataCache.alive_brokers(image):
            ep = b.listeners.get(listener)
            if ep is not None:
                out.append(BrokerEndpoint(b.id, ep.host, ep.port, b.rack))
        return out

    @staticmethod
    def has_alive_broker(image: MetadataImage, broker_id: int) -> bool:
        b = image.cluster.brokers.get(broker_id)
        return b is not None and not b.fenced

    def random_alive_broker_id(self, image: MetadataImage) -> int | None:
        """A random alive broker (what Metadata and DescribeCluster report as the controller),
        None when no broker is alive."""
        brokers = image.cluster.brokers
        alive = [i for i, b in brokers.items() if not b.fenced]
        if not alive:
            return None
        return alive[self._rng.randrange(len(alive))]

    # ------------------------------------------------------------------ topics
    @staticmethod
    def topic(image: MetadataImage, name: str) -> TopicImage | None:
        return image.topics.get_topic_by_name(name)

    @staticmethod
    def topic_by_id(image: MetadataImage, topic_id: Uuid) -> TopicImage | None:
        return image.topics.get_topic(topic_id)

    @staticmethod
    def topic_id(image: MetadataImage, name: str) -> Uuid:
        """The topic's id, the zero Uuid when there is no such topic (Kafka's ``getTopicId``)."""
        t = image.topics.get_topic_by_name(name)
        return t.topic_id if t is not None else ZERO_UUID

    @staticmethod
    def topic_names(image: MetadataImage) -> list[str]:
        return list(image.topics.topics_by_name)

    @staticmethod
    def leader_endpoint(image: MetadataImage, reg: PartitionRegistration, listener: str) -> BrokerEndpoint | None:
        """The leader's address on ``listener`` (fencing not looked at, as Kafka); None when the
        leader is not registered or lacks the listener."""
        b = image.cluster.brokers.get(reg.leader)
        if b is None:
            return None
        ep = b.listeners.get(listener)
        return None if ep is None else BrokerEndpoint(b.id, ep.host, ep.port, b.rack)

    @staticmethod
    def offline_replicas(image: MetadataImage, reg: PartitionRegistration, listener: str) -> list[int]:
        return _offline(image, reg, listener)

    @staticmethod
    def partitions(image: MetadataImage, topic: TopicImage, listener: str, *, filter_unavailable: bool = False,
                   error_unavailable_listeners: bool = True) -> list[PartitionView]:
        """Every partition of ``topic`` on ``listener``, by partition id."""
        return [partition_view(image, pid, reg, listener, filter_unavailable=filter_unavailable,
                               error_unavailable_listeners=error_unavailable_listeners)
                for pid, reg in topic.partitions.items()]
