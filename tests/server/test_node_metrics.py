"""A node serves its metrics with Kafka's names on ``kraft.metrics.listener`` (issue 21,
Deliver 9): the controller's (ActiveControllerCount, event queue times, broker counts,
offsets) and the Raft client's (leader, epoch, high watermark, commit latency), scraped over
HTTP from a running single-voter controller; issue 22's topic and partition counts; no
endpoint when the key is unset."""
from __future__ import annotations

import asyncio
import re
import time
import urllib.request

from support.controller import broker_heartbeat, broker_registration
from support.raft import cluster_properties, free_ports

from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
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
            # a topic of 2 partitions on brokers 0 and 1 (RF 1); broker 1 unregistered: its
            # partition is left without a leader (offline, and not on its preferred replica)
            epochs = []
            for b in (0, 1):
                f = ctl.register_broker(broker_registration(b, ctl.cluster_id, port=9092 + b))
                while not f.done():
                    await asyncio.sleep(0.01)
                epochs.append(f.result().epoch)
            for b in (0, 1):
                ctl.track_broker_heartbeat(b, epochs[b])
                ctl.process_broker_heartbeat(broker_heartbeat(b, epochs[b], epochs[b]))
            while ctl.cluster_control.fenced_broker_count(epoch=ctl.committed_epoch()):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            T = CreateTopicsRequest
            f = ctl.create_topics(T(topics=[T.CreatableTopic(name="foo", num_partitions=-1, replication_factor=-1,
                                                             assignments=[T.CreatableReplicaAssignment(
                                                                 partition_index=i, broker_ids=[i]) for i in (0, 1)],
                                                             configs=[])]))
            while not f.done():
                await asyncio.sleep(0.01)
            assert f.result().topics[0].error_code == 0
            f = ctl.unregister_broker(1)
            while not f.done():
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)
            loop = asyncio.get_running_loop()
            url = f"http://127.0.0.1:{mport}/metrics"
            return await loop.run_in_executor(None, lambda: urllib.request.urlopen(url, timeout=5).read().decode())
        finally:
            await node.shutdown(2.0)

    text = asyncio.run(go())
    assert _value(text, "kafka_controller_KafkaController_ActiveControllerCount") == 1
    assert _value(text, "kafka_controller_KafkaController_ActiveBrokerCount") == 1
    assert _value(text, "kafka_controller_KafkaController_FencedBrokerCount") == 0
    assert _value(text, "kafka_controller_KafkaController_GlobalTopicCount") == 1
    assert _value(text, "kafka_controller_KafkaController_GlobalPartitionCount") == 2
    assert _value(text, "kafka_controller_KafkaController_OfflinePartitionsCount") == 1
    assert _value(text, "kafka_controller_KafkaController_PreferredReplicaImbalanceCount") == 1
    assert _value(text, "kafka_controller_ControllerStats_UncleanLeaderElectionsPerSec_total") == 0
    assert _value(text, "kafka_controller_ControllerStats_ElectionFromEligibleLeaderReplicasPerSec_total") == 0
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
