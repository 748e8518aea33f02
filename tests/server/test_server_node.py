"""KraftNode: the node owns the listener and routes each API key to its handler.

The Raft driver opens no socket of its own: it hands its handlers to the node's routing
table, the node answers DescribeCluster itself, and ApiVersions advertises exactly the
table (a client must not pick an API that nobody on this listener serves).
"""
from __future__ import annotations

import asyncio

import pytest
from support.raft import CLUSTER_ID, cluster_properties

from kraft_node.network import KafkaConnection
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from kraft_node.raft.io.driver import RAFT_APIS, RaftDriver
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode


def test_the_routing_table_holds_the_drivers_handlers_and_the_nodes_own(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    node = KraftNode.from_config(NodeConfig.from_file(path))
    try:
        assert isinstance(node.driver, RaftDriver)
        want = {int(k) for k in RAFT_APIS} | {int(ApiKeys.DESCRIBE_QUORUM), int(ApiKeys.DESCRIBE_CLUSTER)}
        assert set(node.routes) == want
        assert set(node.driver.handlers()) == want - {int(ApiKeys.DESCRIBE_CLUSTER)}
        # an API key has one owner: a second registration is a bug, said at once
        with pytest.raises(ValueError, match="DESCRIBE_CLUSTER already has a handler"):
            node.register({int(ApiKeys.DESCRIBE_CLUSTER): lambda ctx, body: None})
        assert node.port is None  # no listener before start()
    finally:
        asyncio.run(node.close())


def test_the_node_listens_answers_api_versions_from_its_table_and_describe_cluster(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def added(ctx, body):  # what the controller or the broker will do: register a route
        return DescribeClusterResponse(error_code=0, cluster_id="x")

    async def go():
        node = KraftNode.from_config(cfg)
        node.register({int(ApiKeys.CREATE_TOPICS): added})
        await node.start()
        try:
            assert node.port == cfg.controller_endpoint.port
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            try:
                av = await conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"), 3,
                                        timeout=5)
                assert av.error_code == 0
                assert {k.api_key for k in av.api_keys} == set(node.routes) | {int(ApiKeys.API_VERSIONS)}
                assert int(ApiKeys.CREATE_TOPICS) in {k.api_key for k in av.api_keys}
                dc = await conn.request(DescribeClusterRequest(endpoint_type=2), 1, timeout=5)
                assert dc.error_code == 0 and dc.cluster_id == CLUSTER_ID
                assert [(b.broker_id, b.port) for b in dc.brokers] == [(1, node.port)]
                with pytest.raises(RuntimeError, match="before the node starts"):
                    node.register({int(ApiKeys.DELETE_TOPICS): added})
            finally:
                await conn.close()
        finally:
            await node.close()
        # closed: the listener is gone and the log dirs' locks are free again
        with pytest.raises(OSError):
            await KafkaConnection.open("127.0.0.1", cfg.controller_endpoint.port, timeout=2)
        await KraftNode.from_config(cfg).close()

    asyncio.run(asyncio.wait_for(go(), 30))
