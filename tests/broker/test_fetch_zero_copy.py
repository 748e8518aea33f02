"""Fetch answers sent with sendfile on a real broker (issue 25, item 5: log slices sent without
copying): kafka-python and aiokafka consumers read every record back in order, exactly once per
offset, while the broker's records go out by ``os.sendfile``; a raw Fetch v12 answer is
byte-identical with and without zero copy and its records are the partition's segment bytes.

The node runs on the test's asyncio loop; kafka-python's blocking clients run in a thread.
"""
from __future__ import annotations

import asyncio
import importlib
import os
import struct

from support.brokers import broker_port, cluster_with_brokers

from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.framing import decode_response, encode_request
from kraft_node.protocol.generated.fetch import FetchRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode

kafka = importlib.import_module("kafka")
kafka_admin = importlib.import_module("kafka.admin")
aiokafka = importlib.import_module("aiokafka")

N = 2000            # records per partition
VALUE = 1500        # bytes per record: a fetch answer's records are well over the spill size
PARTITIONS = 2


def _create_and_produce(port: int) -> None:
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10_000)
    try:
        admin.create_topics([kafka_admin.NewTopic("zc", PARTITIONS, 1)], 10_000)
    finally:
        admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", acks=1, linger_ms=5,
                                   batch_size=64 * 1024, request_timeout_ms=10_000)
    try:
        for p in range(PARTITIONS):
            for i in range(N):
                producer.send("zc", value=_value(p, i), partition=p)
        producer.flush(30)
    finally:
        producer.close(5)


def _value(p: int, i: int) -> bytes:
    head = b"%d-%d:" % (p, i)
    return head + bytes([i % 251]) * (VALUE - len(head))


def _consume_kafka_python(port: int) -> list[tuple[int, int, bytes]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=None, enable_auto_commit=False,
                                   auto_offset_reset="earliest", request_timeout_ms=10_000,
                                   max_partition_fetch_bytes=256 * 1024)
    try:
        tps = [kafka.TopicPartition("zc", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[tuple[int, int, bytes]] = []
        for _ in range(400):
            if len(out) >= PARTITIONS * N:
                break
            for records in consumer.poll(timeout_ms=500).values():
                out += [(r.partition, r.offset, r.value) for r in records]
        return out
    finally:
        consumer.close()


async def _consume_aiokafka(port: int) -> list[tuple[int, int, bytes]]:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id=None,
                                         enable_auto_commit=False, auto_offset_reset="earliest",
                                         max_partition_fetch_bytes=512 * 1024)
    await asyncio.wait_for(consumer.start(), 20)
    try:
        tps = [aiokafka.TopicPartition("zc", p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[tuple[int, int, bytes]] = []
        while len(out) < PARTITIONS * N:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out += [(r.partition, r.offset, r.value) for r in records]
        return out
    finally:
        await consumer.stop()


def _check(got: list[tuple[int, int, bytes]]) -> None:
    assert len(got) == PARTITIONS * N  # exactly once per offset
    for p in range(PARTITIONS):
        mine = [(o, v) for (pp, o, v) in got if pp == p]
        assert [o for o, _ in mine] == list(range(N)), f"partition {p}"
        assert all(v == _value(p, o) for o, v in mine), f"partition {p}: a value differs"


async def _raw_fetch(port: int) -> bytes:
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=64 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                       topics=[FetchRequest.FetchTopic(topic="zc", partitions=[
                           FetchRequest.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                       last_fetched_epoch=-1, log_start_offset=-1,
                                                       partition_max_bytes=32 << 20)
                           for p in range(PARTITIONS)])])
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 26)
    try:
        writer.write(encode_request(req, 12, 5, "raw"))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        return await reader.readexactly(size)
    finally:
        writer.close()


def test_consumers_read_everything_sent_by_sendfile_and_frames_equal_the_copy_path(tmp_path, monkeypatch):
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True,
                                 broker_extra={"num.partitions": "1"})
    port = broker_port(paths[1])
    data_dir = NodeConfig.from_file(paths[1]).log_dirs[0]
    sendfile_bytes = [0]
    real_sendfile = os.sendfile

    def counting_sendfile(out_fd, in_fd, offset, count):
        n = real_sendfile(out_fd, in_fd, offset, count)
        sendfile_bytes[0] += n
        return n
    monkeypatch.setattr(os, "sendfile", counting_sendfile)

    async def main():
        node = KraftNode.from_config(NodeConfig.from_file(paths[1]), controller=True)
        await asyncio.wait_for(node.start(), 30)
        try:
            await asyncio.wait_for(asyncio.to_thread(_create_and_produce, port), 90)
            _check(await asyncio.wait_for(asyncio.to_thread(_consume_kafka_python, port), 90))
            assert sendfile_bytes[0] >= PARTITIONS * N * VALUE  # the records went out by sendfile
            before = sendfile_bytes[0]
            _check(await asyncio.wait_for(_consume_aiokafka(port), 90))
            assert sendfile_bytes[0] - before >= PARTITIONS * N * VALUE

            zero_copy = await asyncio.wait_for(_raw_fetch(port), 30)
            before = sendfile_bytes[0]
            for server in node.broker.servers.values():
                server.zero_copy = False
            copied = await asyncio.wait_for(_raw_fetch(port), 30)
            assert sendfile_bytes[0] == before  # this one was copied
            assert zero_copy == copied
            _h, body = decode_response(copied, ApiKeys.FETCH, 12)
            for pd in body.responses[0].partitions:
                with open(os.path.join(data_dir, f"zc-{pd.partition_index}", "00000000000000000000.log"), "rb") as f:
                    assert bytes(pd.records) == f.read()  # the whole log, as stored
        finally:
            await node.shutdown()

    asyncio.run(asyncio.wait_for(main(), 240))
