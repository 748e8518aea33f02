"""A node with the broker role (issue 24): it registers, catches up, is unfenced, then serves
real Kafka clients from its metadata image, forwarding admin writes to the controller.

In process: the node runs on the test's asyncio loop and kafka-python's (blocking) admin
client runs in a thread beside it.
"""
from __future__ import annotations

import asyncio
import importlib
import time

from support.brokers import broker_port, cluster_with_brokers

from kraft_node.broker.lifecycle import BrokerState
from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode

kafka_admin = importlib.import_module("kafka.admin")


async def _start(path: str) -> KraftNode:
    node = KraftNode.from_config(NodeConfig.from_file(path), controller=True)
    await asyncio.wait_for(node.start(), 30)
    return node


def _admin(port: int):
    return kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", client_id="kraft-test",
                                        request_timeout_ms=10_000)


async def _eventually(check, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while True:
        result = await asyncio.to_thread(check)
        if result:
            return result
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.1)


def test_combined_node_serves_kafka_python_admin(tmp_path):
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True)
    port = broker_port(paths[1])

    async def main():
        node = await _start(paths[1])
        try:
            assert node.broker is not None and node.broker.state == BrokerState.RUNNING
            image = node.metadata.image()
            reg = image.cluster.brokers[1]
            assert not reg.fenced and reg.incarnation_id == node.broker.lifecycle.incarnation_id
            admin = await asyncio.to_thread(_admin, port)
            try:
                topics = [kafka_admin.NewTopic("orders", 3, 1, topic_configs={"cleanup.policy": "compact"}),
                          kafka_admin.NewTopic("events", 2, 1)]
                await asyncio.to_thread(admin.create_topics, topics, 10_000)
                listed = await _eventually(lambda: {"orders", "events"} <= set(admin.list_topics())
                                           and admin.list_topics())
                assert "__cluster_metadata" not in listed
                described = await asyncio.to_thread(admin.describe_topics, ["orders"])
                (orders,) = described
                assert orders["error_code"] == 0 and orders["name"] == "orders", orders
                parts = orders["partitions"]
                assert sorted(p["partition_index"] for p in parts) == [0, 1, 2], parts
                assert all(p["leader_id"] == 1 and p["replica_nodes"] == [1] and p["isr_nodes"] == [1]
                           for p in parts), parts
                cluster = await asyncio.to_thread(admin.describe_cluster)
                assert cluster["cluster_id"] == node.cluster_id and cluster["controller_id"] == 1
                assert [(b["broker_id"], b["port"]) for b in cluster["brokers"]] == [(1, port)], cluster
                res = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, "orders")
                configs = await asyncio.to_thread(admin.describe_configs, [res])
                (by_type,) = configs.values()
                entries = by_type["orders"]
                assert entries["cleanup.policy"]["value"] == "compact", entries
                await asyncio.to_thread(admin.delete_topics, ["events"], 10_000)
                await _eventually(lambda: "events" not in admin.list_topics())
            finally:
                await asyncio.to_thread(admin.close)
        finally:
            await asyncio.wait_for(node.shutdown(5), 30)

    asyncio.run(main())


def test_a_broker_only_node_observes_the_quorum_registers_and_shuts_down_in_a_controlled_way(tmp_path):
    """Controller 1 and broker 101 in one process: the broker is a Raft observer, registers
    (fenced), catches up, is unfenced, reports its state in Kafka's BrokerState gauge; on
    shutdown it asks for a controlled shutdown, which the controller approves and records by
    fencing it; a restart is a new incarnation with a higher broker epoch."""
    paths = cluster_with_brokers(str(tmp_path), controllers=1, brokers=1)

    async def main():
        controller = await _start(paths[1])
        try:
            broker = await _start(paths[101])
            assert not broker.driver.is_voter and broker.controller is None
            assert broker.node_id == 101 and broker.broker.state == BrokerState.RUNNING
            first = broker.broker.lifecycle.incarnation_id
            epoch = broker.broker.lifecycle.broker_epoch
            registry = broker.metrics.registry
            assert registry.value("kafka_server_KafkaServer_BrokerState") == BrokerState.RUNNING.value
            assert 0 <= registry.value("kafka_server_KafkaServer_TimeSinceLastHeartbeatAckMs") < 5_000

            def reg():
                return controller.metadata.image().cluster.brokers.get(101)
            assert reg() is not None and reg().incarnation_id == first and not reg().fenced
            assert await asyncio.wait_for(broker.shutdown(5), 30)
            assert reg().fenced  # the controlled shutdown fenced it (Kafka: shut down, not just gone)
            broker = await _start(paths[101])
            try:
                assert broker.broker.lifecycle.incarnation_id != first
                assert broker.broker.lifecycle.broker_epoch > epoch
                deadline = time.monotonic() + 10
                while reg().fenced or reg().incarnation_id == first:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
            finally:
                await asyncio.wait_for(broker.shutdown(5), 30)
        finally:
            await asyncio.wait_for(controller.shutdown(5), 30)

    asyncio.run(main())


def test_aiokafka_admin_on_the_same_loop_as_a_combined_node(tmp_path):
    """aiokafka's admin client (asyncio, so on the node's own loop): create, list, describe,
    alter configs, add partitions and delete, each visible through the broker's image."""
    aiokafka_admin = importlib.import_module("aiokafka.admin")
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True)
    port = broker_port(paths[1])

    async def main():
        node = await _start(paths[1])
        admin = aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10_000)
        try:
            await admin.start()
            await admin.create_topics([aiokafka_admin.NewTopic("clicks", 4, 1)], timeout_ms=10_000)

            async def until(pred):
                deadline = time.monotonic() + 10
                while not pred(node.metadata.image()):
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.02)
            await until(lambda im: im.topics.get_topic_by_name("clicks") is not None)
            assert "clicks" in await admin.list_topics()
            (described,) = await admin.describe_topics(["clicks"])
            assert described["error_code"] == 0 and len(described["partitions"]) == 4
            from aiokafka.admin.config_resource import ConfigResource as AioResource
            from aiokafka.admin.config_resource import ConfigResourceType as AioType
            res = AioResource(AioType.TOPIC, "clicks", {"retention.ms": "60000"})
            await admin.alter_configs([res])
            clicks = ConfigResource(ConfigResourceType.TOPIC, "clicks")
            await until(lambda im: im.configs.config_map_for_resource(clicks).get("retention.ms") == "60000")
            await admin.create_partitions({"clicks": aiokafka_admin.NewPartitions(6)})
            await until(lambda im: len(im.topics.get_topic_by_name("clicks").partitions) == 6)
            cluster = await admin.describe_cluster()
            assert cluster["cluster_id"] == node.cluster_id
            await admin.delete_topics(["clicks"])
            await until(lambda im: im.topics.get_topic_by_name("clicks") is None)
        finally:
            await admin.close()
            await asyncio.wait_for(node.shutdown(5), 30)

    asyncio.run(main())
