"""BrokerApis: Metadata v0-13 against the image, its spliced bytes against the generated encoder,
errors, DescribeCluster / DescribeConfigs / DescribeTopicPartitions / ApiVersions, and the same
read paths over TCP with kafka-python and a librdkafka-shaped request."""
from __future__ import annotations

import asyncio
import importlib
import random
import socket
import struct
import uuid

import pytest
from test_metadata_cache import mixed_image

from kraft_node.broker.apis import (
    AUTHORIZED_OPERATIONS_OMITTED,
    CLUSTER_AUTHORIZED_OPERATIONS,
    TOPIC_AUTHORIZED_OPERATIONS,
    BrokerApis,
)
from kraft_node.broker.metadata_cache import KRaftMetadataCache, partition_view
from kraft_node.broker.metadata_sample import apply_records, sample_image, topic_uuid
from kraft_node.network.server import KafkaServer, RequestContext
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.framing import decode_response, encode_request, encode_response
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.describe_configs import DescribeConfigsRequest
from kraft_node.protocol.generated.describe_topic_partitions import DescribeTopicPartitionsRequest
from kraft_node.protocol.generated.metadata import MetadataRequest
from kraft_node.protocol.headers import RequestHeader
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

VERSIONS = [0, 1, 5, 8, 12, 13]
MR = MetadataRequest


def make_apis(image_holder: list, props: dict | None = None, auto_create=None) -> BrokerApis:
    cache = KRaftMetadataCache(lambda: image_holder[-1], rng=random.Random(5))
    return BrokerApis(1, "cluster-x", cache, "PLAINTEXT", props or {"auto.create.topics.enable": "false"},
                      {"metadata.version": (1, 25), "group.version": (0, 1)}, auto_create=auto_create)


def ctx(version: int, listener: str = "PLAINTEXT") -> RequestContext:
    return RequestContext(RequestHeader(correlation_id=9), version, ("127.0.0.1", 1), listener)


def all_request(version: int, **kw) -> MetadataRequest:
    return MR(topics=[] if version == 0 else None, **kw)


def fast_equals_object_path(apis: BrokerApis, body: MetadataRequest, version: int) -> bytes:
    apis.cache._rng = random.Random(1)
    fast = apis.encode_metadata(body, version, 9)
    apis.cache._rng = random.Random(1)
    ref = encode_response(apis.metadata_response(body, version), version, 9)
    assert fast == bytes(ref), f"v{version}: spliced bytes differ from the generated encoder's"
    return fast


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("bulk", [True, False])
def test_metadata_all_topics_field_by_field(version, bulk):
    img = sample_image(bulk=bulk, brokers=4, topics=6, partitions=5, rf=3, fenced=[3])
    apis = make_apis([img])
    frame = fast_equals_object_path(apis, all_request(version), version)
    _, resp = decode_response(frame[4:], 3, version)
    alive = [b for b in sorted(img.cluster.brokers) if not img.cluster.brokers[b].fenced]
    assert [b.node_id for b in resp.brokers] == alive
    for b in resp.brokers:
        ep = img.cluster.brokers[b.node_id].listeners["PLAINTEXT"]
        assert (b.host, b.port) == (ep.host, ep.port)
        if version >= 1:
            assert b.rack == img.cluster.brokers[b.node_id].rack
    if version >= 1:
        assert resp.controller_id in alive
    if version >= 2:
        assert resp.cluster_id == "cluster-x"
    assert sorted(t.name for t in resp.topics) == sorted(img.topics.topics_by_name)
    for t in resp.topics:
        topic = img.topics.get_topic_by_name(t.name)
        assert t.error_code == 0
        if version >= 10:
            assert t.topic_id == topic.topic_id
        assert [p.partition_index for p in t.partitions] == list(topic.partitions)
        for p in t.partitions:
            reg = topic.partitions[p.partition_index]
            view = partition_view(img, p.partition_index, reg, "PLAINTEXT", filter_unavailable=version == 0,
                                  error_unavailable_listeners=version >= 6)
            assert p.leader_id == reg.leader
            if version >= 7:
                assert p.leader_epoch == reg.leader_epoch
            assert p.isr_nodes == list(view.isr)
            if version == 0:
                assert p.replica_nodes == [r for r in reg.replicas if r != 3]
                assert p.error_code == (Errors.REPLICA_NOT_AVAILABLE if 3 in reg.replicas else 0)
            else:
                assert p.replica_nodes == list(reg.replicas) and p.error_code == 0
            if version >= 5:
                assert p.offline_replicas == [r for r in reg.replicas if r == 3]
        if version >= 8:
            assert t.topic_authorized_operations == AUTHORIZED_OPERATIONS_OMITTED


@pytest.mark.parametrize("version", range(0, 14))
def test_spliced_bytes_equal_generated_on_a_mixed_cluster(version):
    """Fenced, listener-less and unregistered leaders, offline directories: block rows (bulk)
    and registrations (replay) both give the generated encoder's bytes."""
    img = mixed_image()
    apis = make_apis([img])
    fast_equals_object_path(apis, all_request(version), version)
    bulk = sample_image(brokers=5, topics=4, partitions=3, rf=3, fenced=[1])
    apis = make_apis([bulk])
    ops = dict(include_topic_authorized_operations=True) if version >= 8 else {}
    fast_equals_object_path(apis, all_request(version, **ops), version)


def test_cached_bytes_follow_new_images():
    """A new image (a partition moved, a topic created, a broker fenced) is answered from it,
    not from the previous image's cached bytes."""
    images = [sample_image(brokers=3, topics=5, partitions=4)]
    apis = make_apis(images)
    fast_equals_object_path(apis, all_request(12), 12)
    t0 = topic_uuid(0)
    images.append(apply_records(images[-1], [m.PartitionChangeRecord(partition_id=1, topic_id=t0, leader=2, isr=[2])]))
    frame = fast_equals_object_path(apis, all_request(12), 12)
    _, resp = decode_response(frame[4:], 3, 12)
    p = next(t for t in resp.topics if t.topic_id == t0).partitions[1]
    assert (p.leader_id, p.isr_nodes, p.leader_epoch) == (2, [2], 1)
    images.append(apply_records(images[-1], [m.TopicRecord(name="fresh", topic_id=topic_uuid(99)),
                                             m.FenceBrokerRecord(id=0, epoch=100)]))
    frame = fast_equals_object_path(apis, all_request(12), 12)
    _, resp = decode_response(frame[4:], 3, 12)
    assert "fresh" in {t.name for t in resp.topics} and 0 not in {b.node_id for b in resp.brokers}
    images.append(apply_records(images[-1], [m.RemoveTopicRecord(topic_id=topic_uuid(99))]))
    frame = fast_equals_object_path(apis, all_request(12), 12)
    assert "fresh" not in {t.name for t in decode_response(frame[4:], 3, 12)[1].topics}


@pytest.mark.parametrize("version", [0, 5, 9, 12, 13])
def test_cluster_change_reencodes_partitions_and_keeps_topic_prefixes(version):
    """A broker fenced, then unfenced, with no topic changed: every topic's partitions are
    encoded again (offline replicas, errors), their prefixes (name, id, count) carried over
    from the previous cluster's cache, and the bytes are still the generated encoder's."""
    images = [sample_image(brokers=3, topics=6, partitions=4, rf=3)]
    apis = make_apis(images)
    fast_equals_object_path(apis, all_request(version), version)
    before = {k: v[2] for k, v in apis._topic_bytes[(version, "PLAINTEXT", False)].prefixes.items()}
    assert len(before) == 6
    images.append(apply_records(images[-1], [m.FenceBrokerRecord(id=1, epoch=101)]))
    fenced = fast_equals_object_path(apis, all_request(version), version)
    prefixes = apis._topic_bytes[(version, "PLAINTEXT", False)].prefixes
    assert all(prefixes[k][2] is v for k, v in before.items()), "prefixes not carried over"
    _, resp = decode_response(fenced[4:], 3, version)
    if version >= 5:
        assert all(1 in p.offline_replicas for t in resp.topics for p in t.partitions if 1 in p.replica_nodes)
    images.append(apply_records(images[-1], [m.UnfenceBrokerRecord(id=1, epoch=101)]))
    back = fast_equals_object_path(apis, all_request(version), version)
    _, resp = decode_response(back[4:], 3, version)
    assert not any(p.offline_replicas for t in resp.topics for p in t.partitions) if version >= 5 else True


@pytest.mark.parametrize("version", [0, 5, 9, 12])
def test_cluster_changes_after_partition_changes_and_new_topics_slice_the_blocks_again(version):
    """The first all-topics answer after a cluster change re-slices the previous answer's topics
    from their blocks' new rows (``_all_topics_answer``): with topics whose partitions moved out
    of their block (changed partitions: a block of their own), topics created later, a
    named-topic request in between, and a deleted topic, every answer is still the generated
    encoder's, and no topic is encoded one by one when only the cluster changed."""
    images = [sample_image(brokers=4, topics=8, partitions=5, rf=3)]
    apis = make_apis(images)
    key = (version, "PLAINTEXT", False)
    fast_equals_object_path(apis, all_request(version), version)
    images.append(apply_records(images[-1], [
        m.PartitionChangeRecord(partition_id=2, topic_id=topic_uuid(1), leader=3, isr=[3, 0]),
        m.TopicRecord(name="late", topic_id=topic_uuid(50)),
        *[m.PartitionRecord(partition_id=i, topic_id=topic_uuid(50), replicas=[0, 1, 2], isr=[0, 1, 2], leader=i % 3,
                            leader_epoch=0, partition_epoch=0, removing_replicas=[], adding_replicas=[])
          for i in range(3)]]))
    calls = []
    many = apis._encode_many

    def spy(shape, image, objects, todo, *args):
        calls.extend(objects[i].name for i in todo)
        return many(shape, image, objects, todo, *args)
    apis._encode_many = spy
    fast_equals_object_path(apis, all_request(version), version)
    assert sorted(calls) == ["late", "t1"], "a new image re-encoded topics that did not change"
    apis.metadata_response(MR(topics=[MR.MetadataRequestTopic(name="late")]), version)
    calls.clear()
    for records in ([m.FenceBrokerRecord(id=0, epoch=100)], [m.UnfenceBrokerRecord(id=0, epoch=100)],
                    [m.FenceBrokerRecord(id=3, epoch=103)]):
        images.append(apply_records(images[-1], records))
        fast_equals_object_path(apis, all_request(version), version)
    assert calls == [], "a cluster change with the same topics encoded topics one by one"
    answer = apis._topic_bytes[key].answer
    assert answer is not None and bool((answer.block_of >= 0).all())
    images.append(apply_records(images[-1], [m.RemoveTopicRecord(topic_id=topic_uuid(50)),
                                             m.UnfenceBrokerRecord(id=3, epoch=103)]))
    frame = fast_equals_object_path(apis, all_request(version), version)
    assert "late" not in {t.name for t in decode_response(frame[4:], 3, version)[1].topics}
    assert calls == [], "a deleted topic and a cluster change re-encoded the kept topics"
    assert len(apis._topic_bytes[key].answer.blocks) == 2  # the late topic's own block is dropped


@pytest.mark.parametrize("seed", range(6))
def test_random_changes_give_the_generated_encoders_bytes(seed):
    """Random sequences of partition moves, topic creations and deletions, fences, unfences,
    a broker without the listener, offline directories and a 130-replica partition (too long for
    the columns from v9): after each new image, the all-topics answer (versions mixed, so the
    carried answers are of several shapes) and a named-topic answer equal the generated
    encoder's bytes of the same image."""
    rng = random.Random(seed)
    if seed % 2:  # directories (one LOST, one offline, one online) on replay-made partitions
        images = [mixed_image()]
        names = {0: "a"}
    else:
        images = [sample_image(brokers=4, topics=12, partitions=4, rf=3)]
        names = {i: f"t{i:02d}" for i in range(12)}
    apis = make_apis(images)
    created = 100
    live = set(names)
    fenced: set[int] = set()
    for _step in range(40):
        records: list = []
        for _ in range(rng.randint(1, 3)):
            what = rng.random()
            if what < 0.35 and live:
                t = rng.choice(sorted(live))
                leader = rng.randrange(5)
                records.append(m.PartitionChangeRecord(partition_id=rng.randrange(3), topic_id=topic_uuid(t),
                                                       leader=leader, isr=[leader, (leader + 1) % 5]))
            elif what < 0.5:
                t, created = created, created + 1
                live.add(t)
                names[t] = f"new{t}"
                big = rng.random() < 0.2
                records.append(m.TopicRecord(name=f"new{t}", topic_id=topic_uuid(t)))
                for pid in range(3):
                    replicas = list(range(200, 330)) if big and pid == 0 else rng.sample(range(6), 3)
                    records.append(m.PartitionRecord(partition_id=pid, topic_id=topic_uuid(t), replicas=replicas,
                                                     isr=replicas[:2], leader=replicas[0], leader_epoch=1,
                                                     partition_epoch=0, removing_replicas=[], adding_replicas=[]))
            elif what < 0.6 and len(live) > 1:
                t = rng.choice(sorted(live))
                live.discard(t)
                records.append(m.RemoveTopicRecord(topic_id=topic_uuid(t)))
            elif what < 0.8:
                b = rng.randrange(4)
                rec = m.UnfenceBrokerRecord if b in fenced else m.FenceBrokerRecord
                fenced ^= {b}
                records.append(rec(id=b, epoch=100 + b))
            else:
                from kraft_node.broker.metadata_sample import broker_record
                b = rng.choice([4, 5])
                records.append(broker_record(b, listener=rng.choice(["PLAINTEXT", "OTHER"])))
        images.append(apply_records(images[-1], records))
        versions = rng.sample([0, 1, 5, 6, 9, 12, 13], 3)
        for version in versions:
            fast_equals_object_path(apis, all_request(version), version)
        fast_equals_object_path(apis, all_request(versions[0]), versions[0])  # the answer kept for the image
        name = names[rng.choice(sorted(live))]
        fast_equals_object_path(apis, MR(topics=[MR.MetadataRequestTopic(name=name)]), 12)


@pytest.mark.parametrize("version", [0, 1, 9, 12, 13])
def test_no_topics_and_a_topic_without_partitions(version):
    """An empty topics array (no topics), after a cluster change, and a topic with no partitions
    (the generated encoder's topic, not a block slice): the generated encoder's bytes, first
    and warm."""
    images = [sample_image(brokers=3, topics=0, partitions=1)]
    apis = make_apis(images)
    fast_equals_object_path(apis, all_request(version), version)
    images.append(apply_records(images[-1], [m.FenceBrokerRecord(id=1, epoch=101)]))
    fast_equals_object_path(apis, all_request(version), version)
    fast_equals_object_path(apis, all_request(version), version)
    images.append(apply_records(images[-1], [m.TopicRecord(name="bare", topic_id=topic_uuid(7))]))
    frame = fast_equals_object_path(apis, all_request(version), version)
    assert [t.name for t in decode_response(frame[4:], 3, version)[1].topics] == ["bare"]
    images.append(apply_records(images[-1], [m.UnfenceBrokerRecord(id=1, epoch=101)]))
    fast_equals_object_path(apis, all_request(version), version)


def test_metadata_named_topics_errors_and_ids():
    img = sample_image(topics=3, partitions=2)
    apis = make_apis([img])
    body = MR(topics=[MR.MetadataRequestTopic(name="t1"), MR.MetadataRequestTopic(name="missing"),
                      MR.MetadataRequestTopic(name="bad/name")])
    resp = apis.metadata_response(body, 12)
    got = {t.name: t.error_code for t in resp.topics}
    assert got == {"t1": 0, "missing": Errors.UNKNOWN_TOPIC_OR_PARTITION, "bad/name": Errors.INVALID_TOPIC_EXCEPTION}
    fast_equals_object_path(apis, body, 12)
    unknown = Uuid((1 << 100) | 5)
    by_id = MR(topics=[MR.MetadataRequestTopic(topic_id=topic_uuid(2), name=None),
                       MR.MetadataRequestTopic(topic_id=unknown, name=None)])
    resp = apis.metadata_response(by_id, 12)
    assert [(t.name, t.topic_id, t.error_code) for t in resp.topics] == [
        ("t2", topic_uuid(2), 0), (None, unknown, Errors.UNKNOWN_TOPIC_ID)]
    fast_equals_object_path(apis, by_id, 13)
    # topic ids before v12 are refused, on every topic
    resp = apis.metadata_response(MR(topics=[MR.MetadataRequestTopic(topic_id=topic_uuid(2), name="t2")]), 10)
    assert [t.error_code for t in resp.topics] == [Errors.INVALID_REQUEST]


def test_authorized_operations_are_kafkas_values():
    apis = make_apis([sample_image(topics=1)])
    resp = apis.metadata_response(MR(topics=None, include_cluster_authorized_operations=True,
                                     include_topic_authorized_operations=True), 8)
    assert resp.cluster_authorized_operations == CLUSTER_AUTHORIZED_OPERATIONS == 8096
    assert resp.topics[0].topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS == 3576


def test_auto_creation_calls_the_hook_and_answers_leader_not_available():
    created: list[list[str]] = []
    img = sample_image(topics=1)
    apis = make_apis([img], {"auto.create.topics.enable": "true"}, auto_create=created.append)
    body = MR(topics=[MR.MetadataRequestTopic(name="newone"), MR.MetadataRequestTopic(name="in valid")],
              allow_auto_topic_creation=True)
    resp = apis.metadata_response(body, 12)
    assert {t.name: t.error_code for t in resp.topics} == {"newone": Errors.LEADER_NOT_AVAILABLE,
                                                           "in valid": Errors.INVALID_TOPIC_EXCEPTION}
    assert created == [["newone"]]
    resp = apis.metadata_response(MR(topics=[MR.MetadataRequestTopic(name="other")],
                                     allow_auto_topic_creation=False), 12)
    assert resp.topics[0].error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION and created == [["newone"]]
    # no hook: disabled whatever the config says
    apis = make_apis([img], {"auto.create.topics.enable": "true"})
    assert not apis.auto_create_topics_enable
    with pytest.raises(ValueError, match="auto.create.topics.enable"):
        make_apis([img], {"auto.create.topics.enable": "maybe"})


def test_describe_cluster_as_a_broker_endpoint():
    img = sample_image(brokers=3, fenced=[2])
    apis = make_apis([img])
    resp = apis.handle_describe_cluster(ctx(1), DescribeClusterRequest(endpoint_type=1))
    assert resp.error_code == 0 and resp.endpoint_type == 1 and resp.cluster_id == "cluster-x"
    assert [(b.broker_id, b.rack) for b in resp.brokers] == [(0, "rack-0"), (1, "rack-1")]
    assert resp.controller_id in (0, 1)
    resp = apis.handle_describe_cluster(ctx(2), DescribeClusterRequest(endpoint_type=1, include_fenced_brokers=True))
    assert [(b.broker_id, b.is_fenced) for b in resp.brokers] == [(0, False), (1, False), (2, True)]
    resp = apis.handle_describe_cluster(ctx(1), DescribeClusterRequest(endpoint_type=2))
    assert resp.error_code == Errors.MISMATCHED_ENDPOINT_TYPE
    assert resp.error_message == ("The request was sent to an endpoint of type BROKER, but we wanted an endpoint "
                                  "of type CONTROLLER")
    assert apis.handle_describe_cluster(ctx(1), DescribeClusterRequest(endpoint_type=7)).error_code == \
        Errors.UNSUPPORTED_ENDPOINT_TYPE


def test_api_versions_lists_handlers_and_finalized_features():
    img = sample_image()
    apis = make_apis([img])
    resp = apis.handle_api_versions(ctx(3), ApiVersionsRequest())
    assert {k.api_key for k in resp.api_keys} == {3, 18, 32, 60, 75}
    assert [f.name for f in resp.supported_features] == ["metadata.version"]  # group.version min 0, before v4
    assert {f.name for f in resp.finalized_features} == {"metadata.version"}
    assert resp.finalized_features_epoch == img.provenance.last_contained_offset
    resp4 = apis.handle_api_versions(ctx(4), ApiVersionsRequest())
    assert [f.name for f in resp4.supported_features] == ["group.version", "metadata.version"]


def test_describe_configs_topic_and_broker():
    recs = [m.ConfigRecord(resource_type=2, resource_name="t0", name="retention.ms", value="1234"),
            m.ConfigRecord(resource_type=4, resource_name="", name="log.retention.ms", value="999")]
    img = apply_records(sample_image(topics=2), recs)
    apis = make_apis([img], {"auto.create.topics.enable": "false", "num.io.threads": "5"})
    R = DescribeConfigsRequest
    body = R(resources=[R.DescribeConfigsResource(resource_type=2, resource_name="t0", configuration_keys=None),
                        R.DescribeConfigsResource(resource_type=2, resource_name="t1",
                                                  configuration_keys=["retention.ms"]),
                        R.DescribeConfigsResource(resource_type=2, resource_name="nope", configuration_keys=None),
                        R.DescribeConfigsResource(resource_type=4, resource_name="1",
                                                  configuration_keys=["num.io.threads"]),
                        R.DescribeConfigsResource(resource_type=4, resource_name="7", configuration_keys=None)],
             include_synonyms=True, include_documentation=True)
    resp = apis.handle_describe_configs(ctx(4), body)
    t0, t1, nope, me, other = resp.results
    ret = next(c for c in t0.configs if c.name == "retention.ms")
    assert (ret.value, ret.config_source) == ("1234", 1) and ret.documentation
    assert [s.source for s in ret.synonyms][:2] == [1, 3]  # topic, then cluster default log.retention.ms
    assert [(c.name, c.value, c.config_source) for c in t1.configs] == [("retention.ms", "999", 3)]
    assert nope.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert [(c.name, c.value, c.config_source) for c in me.configs] == [("num.io.threads", "5", 4)]
    assert other.error_code == Errors.INVALID_REQUEST
    assert other.error_message == "Unexpected broker id, expected 1 or empty string, but received 7"


def test_describe_topic_partitions_pages_with_a_cursor():
    img = sample_image(topics=3, partitions=4)
    apis = make_apis([img])
    R = DescribeTopicPartitionsRequest
    seen = []
    cursor = None
    for _ in range(10):
        resp = apis.handle_describe_topic_partitions(ctx(0), R(topics=[], response_partition_limit=5, cursor=cursor))
        for t in resp.topics:
            seen += [(t.name, p.partition_index) for p in t.partitions]
            assert t.topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS
        if resp.next_cursor is None:
            break
        cursor = R.Cursor(topic_name=resp.next_cursor.topic_name, partition_index=resp.next_cursor.partition_index)
    assert seen == [(f"t{i}", p) for i in range(3) for p in range(4)]
    resp = apis.handle_describe_topic_partitions(ctx(0), R(topics=[R.TopicRequest(name="zz"), R.TopicRequest(
        name="t1")], response_partition_limit=100))
    assert [(t.name, t.error_code) for t in resp.topics] == [("t1", 0), ("zz", Errors.UNKNOWN_TOPIC_OR_PARTITION)]
    resp = apis.handle_describe_topic_partitions(ctx(0), R(topics=[R.TopicRequest(name="t1")], cursor=R.Cursor(
        topic_name="t2", partition_index=0)))
    assert [t.error_code for t in resp.topics] == [Errors.INVALID_REQUEST]


# ------------------------------------------------------------------ over TCP

async def _serve(apis: BrokerApis) -> KafkaServer:
    server = KafkaServer("127.0.0.1", 0, apis.handlers(), listener="PLAINTEXT", listener_type="broker")
    await server.start()
    return server


def test_real_client_read_paths_over_tcp():
    kafka_admin = importlib.import_module("kafka.admin")
    holder: list = []

    async def main():
        apis = make_apis(holder)
        server = await _serve(apis)
        # the brokers the image advertises are this server
        recs = [m.RegisterBrokerRecord(
            broker_id=1, incarnation_id=Uuid(77), broker_epoch=5, rack=None, fenced=False,
            end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="127.0.0.1", port=server.port,
                                                              security_protocol=0)]),
                m.FeatureLevelRecord(name="metadata.version", feature_level=21),
                m.TopicRecord(name="orders", topic_id=topic_uuid(1)),
                m.PartitionRecord(partition_id=0, topic_id=topic_uuid(1), replicas=[1], isr=[1], leader=1),
                m.PartitionRecord(partition_id=1, topic_id=topic_uuid(1), replicas=[1], isr=[1], leader=1),
                m.ConfigRecord(resource_type=2, resource_name="orders", name="cleanup.policy", value="compact")]
        from kraft_node.metadata.image.metadata_image import MetadataImage
        holder.append(apply_records(MetadataImage.EMPTY, recs))

        def client_calls():
            admin = kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{server.port}",
                                                 request_timeout_ms=10_000)
            try:
                topics = admin.list_topics()
                described = admin.describe_topics(["orders"])
                cluster = admin.describe_cluster()
                configs = admin.describe_configs([kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC,
                                                                             "orders")])
                return topics, described, cluster, configs
            finally:
                admin.close()

        try:
            topics, described, cluster, configs = await asyncio.wait_for(asyncio.to_thread(client_calls), 60)
        finally:
            await server.close()
        assert topics == ["orders"]
        assert described[0]["name"] == "orders"
        assert described[0]["topic_id"] == str(uuid.UUID(bytes=topic_uuid(1).bytes))
        assert [p["partition_index"] for p in described[0]["partitions"]] == [0, 1]
        assert "DESCRIBE_CONFIGS" in described[0]["authorized_operations"]
        assert cluster["cluster_id"] == "cluster-x" and [b["broker_id"] for b in cluster["brokers"]] == [1]
        assert cluster["controller_id"] == 1 and "IDEMPOTENT_WRITE" in cluster["authorized_operations"]
        entry = configs["topic"]["orders"]["cleanup.policy"]
        assert (entry["value"], entry["config_source"]) == ("compact", "DYNAMIC_TOPIC_CONFIG")

    asyncio.run(main())


def test_librdkafka_metadata_v12_with_trailing_bytes_is_answered():
    async def main():
        holder = [sample_image(topics=3)]
        server = await _serve(make_apis(holder))
        try:
            frame = bytearray(encode_request(MR(topics=None, allow_auto_topic_creation=True), 12, 42, "rdkafka"))
            frame += b"\0\0\0"
            struct.pack_into(">i", frame, 0, len(frame) - 4)

            def exchange() -> bytes:
                with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
                    s.sendall(frame)
                    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
                    return s.recv(size, socket.MSG_WAITALL)

            payload = await asyncio.wait_for(asyncio.to_thread(exchange), 30)
        finally:
            await server.close()
        header, resp = decode_response(payload, 3, 12)
        assert header.correlation_id == 42
        assert sorted(t.name for t in resp.topics) == ["t0", "t1", "t2"]

    asyncio.run(main())
