"""A node serves its metrics with Kafka's names on ``kraft.metrics.listener`` (issue 21,
Deliver 9): the controller's (ActiveControllerCount, event queue times, broker counts,
offsets) and the Raft client's (leader, epoch, high watermark, commit latency), scraped over
HTTP from a running single-voter controller; no endpoint when the key is unset."""
from __future__ import annotations

import asyncio
import re
import time
import urllib.request

from support.raft import cluster_properties, free_ports

from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode


def _value(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? ([-0-9.e+naNIf]+)$", text, re.M)
    assert m, f"{name} not in the scrape"
    return float(m.group(1))


def test_a_controller_node_serves_kafkas_metrics(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    (mport,) = free_ports(1)
    with open(path, "a") as f:
        f.write(f"\nkraft.metrics.listener=127.0.0.1:{mport}\n")
    cfg = NodeConfig.from_file(path)

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            assert node.metrics_address == ("127.0.0.1", mport)
            ctl = node.controller.controller
            deadline = time.monotonic() + 15
            while not (ctl.active and ctl.last_stable_offset >= 0):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)
            loop = asyncio.get_running_loop()
            url = f"http://127.0.0.1:{mport}/metrics"
            return await loop.run_in_executor(None, lambda: urllib.request.urlopen(url, timeout=5).read().decode())
        finally:
            await node.shutdown(2.0)

    text = asyncio.run(go())
    assert _value(text, "kafka_controller_KafkaController_ActiveControllerCount") == 1
    assert _value(text, "kafka_controller_KafkaController_ActiveBrokerCount") == 0
    assert _value(text, "kafka_controller_KafkaController_FencedBrokerCount") == 0
    assert _value(text, "kafka_controller_KafkaController_LastCommittedRecordOffset") >= 0
    assert _value(text, "kafka_controller_ControllerEventManager_EventQueueProcessingTimeMs_count") > 0
    assert _value(text, "kafka_server_raft_metrics_current_leader") == 1
    assert _value(text, "kafka_server_raft_metrics_high_watermark") > 0
    assert "kafka_controller_KafkaController_NewActiveControllersCount" in text


def test_no_endpoint_without_the_key(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        try:
            return node.metrics_address
        finally:
            await node.shutdown(2.0)
    assert asyncio.run(go()) is None
