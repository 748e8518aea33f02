"""Issue 25 end to end: a combined node (the README's), real clients (kafka-python and aiokafka)
producing with acks 0, 1 and all and consuming by manual assignment from the beginning; every
record is read back in order, exactly once per offset, before and after a restart (recovery and
checkpoints), with Kafka's on-disk layout; ListOffsets through the clients; a deleted topic's
directory goes away.

The node runs on the test's asyncio loop; kafka-python's blocking clients run in a thread.
"""
from __future__ import annotations

import asyncio
import importlib
import json
import os
import time

from prometheus_client import generate_latest
from support.brokers import broker_port, cluster_with_brokers

from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.log.partition_metadata import read_partition_metadata

kafka = importlib.import_module("kafka")
kafka_admin = importlib.import_module("kafka.admin")
aiokafka = importlib.import_module("aiokafka")

N = 300  # records per partition
#: the delete delay 0 so that a deleted topic's directory goes at once (Kafka's default is 60 s)
BROKER_EXTRA = {"log.segment.delete.delay.ms": "0", "num.partitions": "1"}


async def _start(path: str) -> KraftNode:
    node = KraftNode.from_config(NodeConfig.from_file(path), controller=True)
    await asyncio.wait_for(node.start(), 30)
    return node


def _data_dir(path: str) -> str:
    return NodeConfig.from_file(path).log_dirs[0]


def _create_topic(port: int, name: str, partitions: int) -> None:
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10_000)
    try:
        admin.create_topics([kafka_admin.NewTopic(name, partitions, 1)], 10_000)
    finally:
        admin.close()


def _produce_kafka_python(port: int, topic: str) -> list[int]:
    """acks=0 to partition 0, acks=1 to 1, acks=all to 2; returns the acknowledged offsets of
    acks 1 and all (acks=0 gives none)."""
    offsets = []
    for partition, acks in ((0, 0), (1, 1), (2, "all")):
        producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=acks, enable_idempotence=False,
                                       linger_ms=5, request_timeout_ms=10_000)
        try:
            futures = [producer.send(topic, key=b"k%d" % i, value=b"%d-%d" % (partition, i), partition=partition)
                       for i in range(N)]
            producer.flush(20)
            if acks != 0:
                offsets += [f.get(10).offset for f in futures]
        finally:
            producer.close(5)
    return offsets


def _consume_kafka_python(port: int, topic: str, partitions: int, expected: int) -> list[tuple[int, int, bytes]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=None, enable_auto_commit=False,
                                   auto_offset_reset="earliest", consumer_timeout_ms=3000, request_timeout_ms=10_000)
    try:
        tps = [kafka.TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out = []
        deadline = time.monotonic() + 20
        while len(out) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out += [(r.partition, r.offset, r.value) for r in records]
        return out
    finally:
        consumer.close()


def _check_read_back(got: list[tuple[int, int, bytes]], partitions: int) -> None:
    for p in range(partitions):
        mine = [(o, v) for (pp, o, v) in got if pp == p]
        assert [o for o, _ in mine] == list(range(N)), f"partition {p}: offsets {[o for o, _ in mine][:20]}..."
        assert [v for _, v in mine] == [b"%d-%d" % (p, i) for i in range(N)]


def test_kafka_python_produce_acks_consume_restart_and_delete(tmp_path):
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True, broker_extra=BROKER_EXTRA)
    port = broker_port(paths[1])
    data = _data_dir(paths[1])

    async def main():
        node = await _start(paths[1])
        try:
            await asyncio.to_thread(_create_topic, port, "acks", 3)
            offsets = await asyncio.wait_for(asyncio.to_thread(_produce_kafka_python, port, "acks"), 60)
            assert sorted(offsets) == sorted(list(range(N)) * 2)
            got = await asyncio.wait_for(asyncio.to_thread(_consume_kafka_python, port, "acks", 3, 3 * N), 60)
            _check_read_back(got, 3)
            assert len(got) == 3 * N  # exactly once per offset

            # ListOffsets through the client: earliest, latest, by timestamp
            def list_offsets():
                consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=None)
                try:
                    tps = [kafka.TopicPartition("acks", p) for p in range(3)]
                    return (consumer.beginning_offsets(tps), consumer.end_offsets(tps),
                            consumer.offsets_for_times({tps[1]: 0, tps[2]: int(time.time() * 1000) + 3_600_000}))
                finally:
                    consumer.close()
            begin, end, by_time = await asyncio.to_thread(list_offsets)
            assert set(begin.values()) == {0} and set(end.values()) == {N}
            assert by_time[kafka.TopicPartition("acks", 1)].offset == 0
            assert by_time[kafka.TopicPartition("acks", 2)] is None  # nothing that late
            topic_id = node.metadata.image().topics.get_topic_by_name("acks").topic_id
            # the partition metrics (issue 25 item 9) on the node's registry
            text = generate_latest(node.metrics.registry.registry).decode()
            assert "kafka_server_ReplicaManager_LeaderCount 3.0" in text
            assert "kafka_server_ReplicaManager_UnderReplicatedPartitions 0.0" in text
            assert f"kafka_server_BrokerTopicMetrics_MessagesInPerSec_total {3 * N}.0" in text
            for name in ("ReplicaManager_IsrShrinksPerSec", "ReplicaManager_IsrExpandsPerSec",
                         "BrokerTopicMetrics_TotalProduceRequestsPerSec", "BrokerTopicMetrics_TotalFetchRequestsPerSec",
                         "BrokerTopicMetrics_BytesInPerSec", "BrokerTopicMetrics_BytesOutPerSec"):
                assert f"kafka_server_{name}_total " in text, name  # Kafka's meter names
        finally:
            await node.shutdown()

        # Kafka's layout, checkpoints written at shutdown
        for p in range(3):
            d = os.path.join(data, f"acks-{p}")
            assert read_partition_metadata(os.path.join(d, "partition.metadata")) == topic_id.bytes
            assert {"00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex",
                    "leader-epoch-checkpoint"} <= set(os.listdir(d))
            assert ".kafka_cleanshutdown" not in os.listdir(d)  # Kafka's: one per log dir, below
        with open(os.path.join(data, ".kafka_cleanshutdown")) as f:
            marker = json.loads(f.read())
        assert marker["version"] == 0 and marker["brokerEpoch"] >= 0  # the epoch it registered with
        for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint"):
            with open(os.path.join(data, name)) as f:
                assert f.read() == f"0\n3\nacks 0 {N}\nacks 1 {N}\nacks 2 {N}\n", name
        with open(os.path.join(data, "log-start-offset-checkpoint")) as f:
            assert f.read() == "0\n3\nacks 0 0\nacks 1 0\nacks 2 0\n"

        # restart: everything is read back again, and new appends continue the offsets
        node = await _start(paths[1])
        try:
            got = await asyncio.wait_for(asyncio.to_thread(_consume_kafka_python, port, "acks", 3, 3 * N), 60)
            _check_read_back(got, 3)

            def produce_one():
                producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1,
                                               enable_idempotence=False)
                try:
                    return producer.send("acks", value=b"after", partition=0).get(10).offset
                finally:
                    producer.close(5)
            assert await asyncio.to_thread(produce_one) == N

            def produce_default():
                # kafka-python's defaults: idempotence on (InitProducerId, producer state), acks=all
                producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}")
                try:
                    return [producer.send("acks", value=b"idem-%d" % i, partition=1).get(10).offset
                            for i in range(3)]
                finally:
                    producer.close(5)
            assert await asyncio.to_thread(produce_default) == [N, N + 1, N + 2]

            def delete():
                admin = kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}")
                try:
                    admin.delete_topics(["acks"], 10_000)
                finally:
                    admin.close()
            await asyncio.to_thread(delete)
            deadline = time.monotonic() + 10
            while any(n.startswith("acks-") for n in os.listdir(data)):
                assert time.monotonic() < deadline, os.listdir(data)
                await asyncio.sleep(0.05)
        finally:
            await node.shutdown()

    asyncio.run(main())


def test_aiokafka_produce_acks_and_consume_from_the_beginning(tmp_path):
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True, broker_extra=BROKER_EXTRA)
    port = broker_port(paths[1])
    bootstrap = f"127.0.0.1:{port}"

    async def main():
        node = await _start(paths[1])
        try:
            await asyncio.to_thread(_create_topic, port, "aio", 3)
            for partition, acks in ((0, 0), (1, 1), (2, "all")):
                producer = aiokafka.AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5)
                await asyncio.wait_for(producer.start(), 20)
                try:
                    futs = [await producer.send("aio", value=b"%d-%d" % (partition, i), partition=partition)
                            for i in range(N)]
                    metas = await asyncio.wait_for(asyncio.gather(*futs), 30)
                    if acks != 0:
                        assert [md.offset for md in metas] == list(range(N))
                finally:
                    await producer.stop()
            consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                                 enable_auto_commit=False, auto_offset_reset="earliest")
            await asyncio.wait_for(consumer.start(), 20)
            try:
                tps = [aiokafka.TopicPartition("aio", p) for p in range(3)]
                consumer.assign(tps)
                await consumer.seek_to_beginning(*tps)
                got: list[tuple[int, int, bytes]] = []
                deadline = time.monotonic() + 30
                while len(got) < 3 * N and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=500)
                    for records in batches.values():
                        got += [(r.partition, r.offset, r.value) for r in records]
                _check_read_back(got, 3)
                assert len(got) == 3 * N
                assert await consumer.end_offsets(tps) == {tp: N for tp in tps}
            finally:
                await consumer.stop()
        finally:
            await node.shutdown()

    asyncio.run(main())
