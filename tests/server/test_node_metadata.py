"""The node's metadata loader: the image it publishes follows the controller's committed state.

A controller node runs the QuorumController (timeline state, for writing) and the
MetadataLoader (immutable images, for reading) as two listeners of one Raft driver.
Both must tell the same story: after each committed change, the published image holds
the same brokers, topics, partitions, configs and metadata.version as the controller's
committed state, and the loader's metrics say where it is.
"""
from __future__ import annotations

import asyncio
import time

from support.controller import until_controller_active
from support.raft import cluster_properties
from test_topic_apis import CT, _results, _topic, _unfenced_brokers

from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode


async def _until(pred, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def test_the_published_image_follows_the_controller(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        # the loader writes this node's snapshots (Kafka 3.5+), the QuorumController none
        assert node.metadata is not None and "SnapshotGenerator" in node.metadata.loader.publisher_names()
        assert node.controller is not None and node.controller.controller.snapshot_generator is None
        await node.start()
        try:
            await until_controller_active(node)
            ctl = node.controller.controller
            md = node.metadata
            await _until(lambda: md.image().metadata_version() is not None, "the first image")
            image = md.image()
            assert image.metadata_version() == ctl.feature_control.metadata_version_or_none(
                epoch=ctl.committed_epoch())
            await _until(lambda: 1 in md.image().cluster.controllers, "the controller's own registration")

            from kraft_node.network import KafkaConnection
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            try:
                await _unfenced_brokers(conn, ctl.cluster_id, {0: "a", 1: "b", 2: "c"})
                r = await conn.request(CT(topics=[_topic("foo", 3, 3, configs={"cleanup.policy": "compact"})],
                                          timeout_ms=5000), 7, timeout=5)
                assert _results(r)["foo"][0] == Errors.NONE
                foo_id = r.topics[0].topic_id
                await _until(lambda: md.image().topics.get_topic_by_name("foo") is not None, "topic foo")
                image = md.image()
                committed = ctl.committed_epoch()
                assert image.offset <= ctl.last_stable_offset
                topic = image.topics.get_topic_by_name("foo")
                assert topic.topic_id == foo_id
                assert dict(topic.partitions) == dict(ctl.replication_control.partitions(foo_id, epoch=committed))
                assert sorted(image.cluster.brokers) == [0, 1, 2]
                assert not any(b.fenced for b in image.cluster.brokers.values())
                configs = [c for res, c in image.configs.resource_data.items() if res.name == "foo"]
                assert configs and dict(configs[0].data) == {"cleanup.policy": "compact"}

                r = await conn.request(DeleteTopicsRequest(topic_names=["foo"], timeout_ms=5000), 4, timeout=5)
                assert r.responses[0].error_code == Errors.NONE
                await _until(lambda: md.image().topics.get_topic_by_name("foo") is None, "foo deleted")
                assert not [c for c in md.image().configs.resource_data if c.name == "foo"]
            finally:
                await conn.close()
            # the loader's metrics, under Kafka's names, on the node's registry
            reg = node.metrics.registry
            assert reg.value("kafka_server_MetadataLoader_CurrentMetadataVersion") == \
                md.image().metadata_version().feature_level
            assert reg.value("kafka_server_MetadataLoader_CurrentControllerId") == 1
            assert md.loader.last_applied_offset() > 0
            assert md.loader.failure is None
        finally:
            await node.close()

    asyncio.run(go())
