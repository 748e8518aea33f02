"""Topics, partitions and configs over the wire, on one controller node (issue 22, the RPCs of
``kraft_node/server/topic_apis.py``).

Three brokers in two racks register and heartbeat until unfenced; then, through the wire
protocol as Kafka's admin tools send them: CreateTopics (defaults, configs, validateOnly,
Kafka's messages for a replication factor that cannot be met, duplicates and the metadata
topic refused by the RPC layer), CreatePartitions, AlterPartition from a partition leader,
ElectLeaders, a reassignment and its listing, IncrementalAlterConfigs and the legacy
AlterConfigs (Kafka's messages for unknown keys and topics), DescribeConfigs (effective
values, sources, synonyms), DeleteTopics by name and by id (both in one entry refused), and what the
controller's committed state holds after each.
"""
from __future__ import annotations

import asyncio
import time

from support.controller import broker_heartbeat, broker_registration, until_controller_active
from support.raft import cluster_properties

from kraft_node.network import KafkaConnection
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_configs import AlterConfigsRequest
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_node.protocol.generated.alter_partition_reassignments import AlterPartitionReassignmentsRequest
from kraft_node.protocol.generated.create_partitions import CreatePartitionsRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest
from kraft_node.protocol.generated.describe_configs import DescribeConfigsRequest
from kraft_node.protocol.generated.elect_leaders import ElectLeadersRequest
from kraft_node.protocol.generated.incremental_alter_configs import IncrementalAlterConfigsRequest
from kraft_node.protocol.generated.list_partition_reassignments import ListPartitionReassignmentsRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode

TOPIC, BROKER = 2, 4  # ConfigResource.Type ids
CT = CreateTopicsRequest


def _topic(name, partitions=-1, rf=-1, configs=None, assignments=None):
    return CT.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        assignments=[CT.CreatableReplicaAssignment(partition_index=i, broker_ids=b)
                     for i, b in enumerate(assignments or [])],
        configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])




async def _unfenced_brokers(conn, cluster_id: str, racks: dict[int, str]) -> None:
    for b, rack in racks.items():
        reg = await conn.request(broker_registration(b, cluster_id, port=9092 + b, rack=rack), 4, timeout=5)
        assert reg.error_code == 0
        hb = await conn.request(broker_heartbeat(b, reg.broker_epoch, reg.broker_epoch), 1, timeout=5)
        assert hb.error_code == 0
        deadline = time.monotonic() + 10
        while hb.is_fenced:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
            hb = await conn.request(broker_heartbeat(b, reg.broker_epoch, reg.broker_epoch), 1, timeout=5)


def _results(resp) -> dict[str, tuple[int, str | None]]:
    return {t.name: (t.error_code, t.error_message) for t in resp.topics}


def test_topics_partitions_and_configs_over_the_wire(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)
    E = Errors

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            await until_controller_active(node)
            ctl = node.controller.controller
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            try:
                # no broker yet: Kafka's message, and nothing written
                r = await conn.request(CT(topics=[_topic("early", 1, 1)], timeout_ms=5000), 7, timeout=5)
                assert _results(r)["early"] == (
                    E.INVALID_REPLICATION_FACTOR,
                    "Unable to replicate the partition 1 time(s): All brokers are currently fenced.")

                await _unfenced_brokers(conn, ctl.cluster_id, {0: "a", 1: "b", 2: "a"})

                # validateOnly: the same answer as a create, no topic
                r = await conn.request(CT(topics=[_topic("foo", 3, 3)], timeout_ms=5000, validate_only=True),
                                       7, timeout=5)
                assert _results(r)["foo"][0] == E.NONE
                assert ctl.replication_control.topic_id("foo") is None

                r = await conn.request(CT(topics=[
                    _topic("foo", 3, 3, configs={"cleanup.policy": "compact"}),
                    _topic("bar"),                                   # num.partitions / RF defaults (1, 1)
                    _topic("dup", 1, 1), _topic("dup", 1, 1),        # refused by the RPC layer
                    _topic("__cluster_metadata", 1, 1),
                    _topic("big", 1, 4),
                    _topic("bad.cfg", 1, 1, configs={"not.a.real.topic.config": "1"}),
                ], timeout_ms=5000), 7, timeout=5)
                res = _results(r)
                assert res["foo"][0] == E.NONE and res["bar"][0] == E.NONE
                assert res["dup"] == (E.INVALID_REQUEST, "Duplicate topic name.")
                assert res["__cluster_metadata"] == (
                    E.INVALID_REQUEST, "Creation of internal topic __cluster_metadata is prohibited.")
                assert res["big"] == (E.INVALID_REPLICATION_FACTOR,
                                      "Unable to replicate the partition 4 time(s): The target replication factor "
                                      "of 4 cannot be reached because only 3 broker(s) are registered.")
                assert res["bad.cfg"][0] == E.INVALID_CONFIG
                by_name = {t.name: t for t in r.topics}
                assert (by_name["foo"].num_partitions, by_name["foo"].replication_factor) == (3, 3)
                assert (by_name["bar"].num_partitions, by_name["bar"].replication_factor) == (1, 1)
                committed = ctl.committed_epoch()
                rc = ctl.replication_control
                foo_id = rc.topic_id("foo", epoch=committed)
                assert foo_id is not None and by_name["foo"].topic_id == foo_id
                parts = rc.partitions(foo_id, epoch=committed)
                assert sorted(parts) == [0, 1, 2]
                for p in parts.values():
                    assert sorted(p.replicas) == [0, 1, 2] and p.leader == p.replicas[0] and set(p.isr) == {0, 1, 2}
                assert rc.topic_id("dup") is None and rc.topic_id("big") is None

                r = await conn.request(CT(topics=[_topic("foo", 1, 1)], timeout_ms=5000), 7, timeout=5)
                assert _results(r)["foo"] == (E.TOPIC_ALREADY_EXISTS, "Topic 'foo' already exists.")

                # CreatePartitions (no manual assignment is a null list, as Kafka's admin client sends)
                CP = CreatePartitionsRequest
                r = await conn.request(CP(topics=[CP.CreatePartitionsTopic(name="foo", count=5, assignments=None),
                                                  CP.CreatePartitionsTopic(name="bar", count=1, assignments=None),
                                                  CP.CreatePartitionsTopic(name="nope", count=2, assignments=None)],
                                          timeout_ms=5000), 3, timeout=5)
                res = {t.name: (t.error_code, t.error_message) for t in r.results}
                assert res["foo"] == (E.NONE, None), res
                assert res["bar"] == (E.INVALID_PARTITIONS, "Topic already has 1 partition(s).")
                assert res["nope"][0] == E.UNKNOWN_TOPIC_OR_PARTITION
                assert sorted(rc.partitions(foo_id, epoch=ctl.committed_epoch())) == [0, 1, 2, 3, 4]

                # AlterPartition from foo-0's leader: the ISR shrinks to the leader and one follower
                foo0 = rc.partition(foo_id, 0, epoch=ctl.committed_epoch())
                leader = foo0.leader
                follower = next(b for b in foo0.isr if b != leader)
                AP = AlterPartitionRequest
                epochs = {b: ctl.cluster_control.registration(b).epoch for b in (0, 1, 2)}
                r = await conn.request(AP(broker_id=leader, broker_epoch=epochs[leader], topics=[AP.TopicData(
                    topic_id=foo_id, partitions=[AP.PartitionData(
                        partition_index=0, leader_epoch=foo0.leader_epoch, partition_epoch=foo0.partition_epoch,
                        new_isr_with_epochs=[AP.BrokerState(broker_id=b, broker_epoch=epochs[b])
                                             for b in (leader, follower)])])]), 3, timeout=5)
                (part,) = r.topics[0].partitions
                assert (r.error_code, part.error_code) == (E.NONE, E.NONE)
                after = rc.partition(foo_id, 0, epoch=ctl.committed_epoch())
                assert sorted(after.isr) == sorted([leader, follower]) == sorted(part.isr)
                assert part.partition_epoch == after.partition_epoch == foo0.partition_epoch + 1
                # a stale partition epoch is refused (Kafka 4: INVALID_UPDATE_VERSION)
                r = await conn.request(AP(broker_id=leader, broker_epoch=epochs[leader], topics=[AP.TopicData(
                    topic_id=foo_id, partitions=[AP.PartitionData(
                        partition_index=0, leader_epoch=foo0.leader_epoch, partition_epoch=foo0.partition_epoch,
                        new_isr_with_epochs=[AP.BrokerState(broker_id=leader, broker_epoch=epochs[leader])])])]),
                    3, timeout=5)
                assert r.topics[0].partitions[0].error_code == E.INVALID_UPDATE_VERSION

                # ElectLeaders (preferred): foo's leaders are their preferred replicas already
                EL = ElectLeadersRequest
                r = await conn.request(EL(election_type=0, topic_partitions=[
                    EL.TopicPartitions(topic="foo", partitions=[1])], timeout_ms=5000), 2, timeout=5)
                assert r.replica_election_results[0].partition_result[0].error_code == E.ELECTION_NOT_NEEDED

                # a reassignment of bar-0 onto the broker it is not on, listed until it completes
                bar_id = rc.topic_id("bar", epoch=ctl.committed_epoch())
                (bar0,) = rc.partitions(bar_id, epoch=ctl.committed_epoch()).values()
                target = [b for b in (0, 1, 2) if b not in bar0.replicas][:1]
                RA = AlterPartitionReassignmentsRequest
                r = await conn.request(RA(topics=[RA.ReassignableTopic(name="bar", partitions=[
                    RA.ReassignablePartition(partition_index=0, replicas=target)])], timeout_ms=5000), 0, timeout=5)
                assert (r.error_code, r.responses[0].partitions[0].error_code) == (E.NONE, E.NONE)
                LR = ListPartitionReassignmentsRequest
                r = await conn.request(LR(topics=None, timeout_ms=5000), 0, timeout=5)
                (ongoing,) = r.topics
                assert ongoing.name == "bar"
                assert ongoing.partitions[0].adding_replicas == target
                assert ongoing.partitions[0].removing_replicas == list(bar0.replicas)

                # IncrementalAlterConfigs (Kafka's KRaftClusterTest.testIncrementalAlterConfigs messages)
                IA = IncrementalAlterConfigsRequest
                r = await conn.request(IA(resources=[
                    IA.AlterConfigsResource(resource_type=TOPIC, resource_name="foo", configs=[
                        IA.AlterableConfig(name="retention.ms", config_operation=0, value="1000")]),
                    IA.AlterConfigsResource(resource_type=TOPIC, resource_name="bar", configs=[
                        IA.AlterableConfig(name="not.a.real.topic.config", config_operation=0, value="1")]),
                    IA.AlterConfigsResource(resource_type=TOPIC, resource_name="baz", configs=[
                        IA.AlterableConfig(name="segment.jitter.ms", config_operation=0, value="345")]),
                    IA.AlterConfigsResource(resource_type=BROKER, resource_name="", configs=[
                        IA.AlterableConfig(name="log.roll.ms", config_operation=0, value="1234567")]),
                    IA.AlterConfigsResource(resource_type=99, resource_name="x", configs=[]),
                ]), 1, timeout=5)
                res = {(x.resource_type, x.resource_name): (x.error_code, x.error_message) for x in r.responses}
                assert res[(TOPIC, "foo")][0] == E.NONE
                assert res[(TOPIC, "bar")] == (E.INVALID_CONFIG, "Unknown topic config name: not.a.real.topic.config")
                assert res[(TOPIC, "baz")] == (E.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'baz' does not exist.")
                assert res[(BROKER, "")][0] == E.NONE
                assert res[(99, "x")] == (E.UNSUPPORTED_VERSION, "Unknown resource type 99.")

                # DescribeConfigs: every key with its effective value and source (Kafka's
                # ConfigSource ids: 1 topic, 3 cluster default, 5 Kafka's default)
                DC = DescribeConfigsRequest
                r = await conn.request(DC(resources=[
                    DC.DescribeConfigsResource(resource_type=TOPIC, resource_name="foo", configuration_keys=None),
                    DC.DescribeConfigsResource(resource_type=TOPIC, resource_name="bar",
                                               configuration_keys=["segment.ms", "log.roll.ms"]),
                    DC.DescribeConfigsResource(resource_type=BROKER, resource_name="", configuration_keys=None),
                    DC.DescribeConfigsResource(resource_type=TOPIC, resource_name="nope", configuration_keys=None)],
                    include_synonyms=True), 4, timeout=5)
                got = {(x.resource_type, x.resource_name): {c.name: (c.value, c.config_source) for c in x.configs}
                       for x in r.results}
                errors = {(x.resource_type, x.resource_name): (x.error_code, x.error_message) for x in r.results}
                foo = got[(TOPIC, "foo")]
                assert foo["cleanup.policy"] == ("compact", 1) and foo["retention.ms"] == ("1000", 1)
                assert foo["min.insync.replicas"] == ("1", 5) and len(foo) > 30
                # the cluster-level log.roll.ms is bar's segment.ms (its synonym); unknown keys are left out
                assert got[(TOPIC, "bar")] == {"segment.ms": ("1234567", 3)}
                assert got[(BROKER, "")] == {"log.roll.ms": ("1234567", 3)}
                assert errors[(TOPIC, "nope")] == (E.UNKNOWN_TOPIC_OR_PARTITION, "The topic 'nope' does not exist.")
                syn = {c.name: [(y.name, y.source) for y in c.synonyms] for c in r.results[1].configs}
                assert syn["segment.ms"][0] == ("log.roll.ms", 3)

                # the legacy AlterConfigs replaces the whole set
                AC = AlterConfigsRequest
                r = await conn.request(AC(resources=[AC.AlterConfigsResource(
                    resource_type=TOPIC, resource_name="foo",
                    configs=[AC.AlterableConfig(name="segment.ms", value="100000")])]), 2, timeout=5)
                assert [(x.error_code, x.resource_name) for x in r.responses] == [(E.NONE, "foo")]
                from kraft_node.metadata.controller.configuration_control import ConfigResource
                assert ctl.configuration_control.configs(ConfigResource.topic("foo"),
                                                         epoch=ctl.committed_epoch()) == {"segment.ms": "100000"}

                # DeleteTopics: by name, by id, both (refused), unknown
                DT = DeleteTopicsRequest
                r = await conn.request(DT(topics=[
                    DT.DeleteTopicState(name="bar"),
                    DT.DeleteTopicState(topic_id=foo_id),
                    DT.DeleteTopicState(name="foo", topic_id=foo_id),
                    DT.DeleteTopicState(name="nope")], timeout_ms=5000), 6, timeout=5)
                res = [(x.name, x.error_code, x.error_message) for x in r.responses]
                assert ("bar", E.NONE, None) in res
                assert ("foo", E.NONE, None) in res
                assert ("foo", E.INVALID_REQUEST, "You may not specify both topic name and topic id.") in res
                assert any(n == "nope" and c == E.UNKNOWN_TOPIC_OR_PARTITION for n, c, _ in res)
                committed = ctl.committed_epoch()
                assert rc.topics(epoch=committed) == {}
                assert ctl.configuration_control.configs(ConfigResource.topic("foo"), epoch=committed) == {}
            finally:
                await conn.close()
        finally:
            await node.shutdown(3)

    asyncio.run(asyncio.wait_for(go(), 60))
