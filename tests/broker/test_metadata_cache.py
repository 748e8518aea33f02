"""KRaftMetadataCache: liveness, endpoints, partition errors and offline replicas (Kafka's rules)."""
from __future__ import annotations

import random

from kraft_node.broker.metadata_cache import KRaftMetadataCache, partition_view
from kraft_node.broker.metadata_sample import apply_records, broker_record, sample_image, topic_uuid
from kraft_node.metadata.controller.cluster_control import DirectoryId
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.protocol.errors import Errors
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

DIR_A = Uuid((7 << 64) | 1)
DIR_B = Uuid((7 << 64) | 2)


def mixed_image() -> MetadataImage:
    """Brokers: 0 alive, 1 fenced, 2 alive without PLAINTEXT (only OTHER), 3 alive with dir A online;
    topic "a": partitions whose leaders are 0, 1 (fenced), 2 (no listener), 9 (unregistered), -1."""
    b3 = broker_record(3)
    b3.log_dirs = [DIR_A]
    recs: list[object] = [
        m.FeatureLevelRecord(name="metadata.version", feature_level=21),
        broker_record(0), broker_record(1, fenced=True), broker_record(2, listener="OTHER"), b3,
        m.TopicRecord(name="a", topic_id=topic_uuid(0)),
    ]
    for pid, leader in enumerate([0, 1, 2, 9, -1]):
        replicas = [leader if leader >= 0 else 0, 3, 1 if leader != 1 else 0] if leader != 9 else [9, 0, 3]
        recs.append(m.PartitionRecord(partition_id=pid, topic_id=topic_uuid(0), replicas=replicas,
                                      isr=replicas, leader=leader, leader_epoch=pid, partition_epoch=0,
                                      directories=[DirectoryId.UNASSIGNED, DIR_A if pid % 2 else DIR_B,
                                                   DirectoryId.LOST]))
    return apply_records(MetadataImage.EMPTY, recs)


def test_alive_brokers_and_endpoints_follow_fencing_and_listener():
    img = mixed_image()
    cache = KRaftMetadataCache(lambda: img)
    assert cache.image() is img
    assert [b.id for b in cache.alive_brokers(img)] == [0, 2, 3]
    assert [(e.id, e.port) for e in cache.alive_broker_endpoints(img, "PLAINTEXT")] == [(0, 9092), (3, 9095)]
    assert [e.id for e in cache.alive_broker_endpoints(img, "OTHER")] == [2]
    assert cache.has_alive_broker(img, 0) and not cache.has_alive_broker(img, 1)
    assert not cache.has_alive_broker(img, 9)


def test_random_alive_broker_is_alive_and_none_without_brokers():
    img = mixed_image()
    cache = KRaftMetadataCache(lambda: img, rng=random.Random(3))
    seen = {cache.random_alive_broker_id(img) for _ in range(200)}
    assert seen == {0, 2, 3}
    assert cache.random_alive_broker_id(MetadataImage.EMPTY) is None


def test_topic_lookups_by_name_and_id():
    img = sample_image(topics=3, partitions=2)
    cache = KRaftMetadataCache(lambda: img)
    t = cache.topic(img, "t1")
    assert t is not None and cache.topic_by_id(img, t.topic_id) is t
    assert cache.topic_id(img, "nope") == ZERO_UUID
    assert sorted(cache.topic_names(img)) == ["t0", "t1", "t2"]


def test_partition_errors_and_offline_replicas_as_kafka_computes_them():
    img = mixed_image()
    topic = img.topics.get_topic_by_name("a")
    assert topic is not None
    views = {pid: partition_view(img, pid, reg, "PLAINTEXT") for pid, reg in topic.partitions.items()}
    # leader 0 alive: no error; replica 1 fenced, 3's dir B is not its online dir A -> offline
    assert views[0].error == Errors.NONE and views[0].leader_id == 0
    assert views[0].offline_replicas == [3, 1]
    # a fenced leader that has the listener is still reported (Kafka's getAliveEndpoint ignores fencing)
    assert views[1].error == Errors.NONE and views[1].leader_id == 1
    # 1 is fenced, dir A is 3's online dir, 0's directory is LOST
    assert views[1].offline_replicas == [1, 0]
    # leader without the listener: LISTENER_NOT_FOUND (v6+), LEADER_NOT_AVAILABLE before
    assert views[2].error == Errors.LISTENER_NOT_FOUND and views[2].leader_id == -1
    old = partition_view(img, 2, topic.partitions[2], "PLAINTEXT", error_unavailable_listeners=False)
    assert old.error == Errors.LEADER_NOT_AVAILABLE
    assert views[2].offline_replicas == [2, 3, 1]
    # unregistered leader, and no leader
    assert views[3].error == Errors.LEADER_NOT_AVAILABLE and views[3].offline_replicas[0] == 9
    assert views[4].error == Errors.LEADER_NOT_AVAILABLE and views[4].leader_id == -1
    assert views[4].leader_epoch == 4
    # v0 filtering: unavailable replicas dropped and REPLICA_NOT_AVAILABLE
    v0 = partition_view(img, 0, topic.partitions[0], "PLAINTEXT", filter_unavailable=True)
    assert list(v0.replicas) == [0, 3] and v0.error == Errors.REPLICA_NOT_AVAILABLE


def test_one_image_per_request_even_when_the_source_moves():
    images = [sample_image(topics=1), sample_image(topics=2)]
    cache = KRaftMetadataCache(lambda: images[-1])
    held = cache.image()
    images.append(sample_image(topics=3))
    assert len(held.topics.topics_by_id) == 2 and len(cache.image().topics.topics_by_id) == 3
