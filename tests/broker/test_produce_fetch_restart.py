"""Issue 25: a combined node process killed with SIGKILL keeps every acknowledged record.

The node (``kraft-server-start``) is killed while its partition logs are open (no flush, no
clean-shutdown marker: Kafka's default does not fsync appends, the page cache survives a process
kill); at the next start the logs recover from their checkpointed recovery points and every
record produced with acks=1 is read back, in order, once per offset.
"""
from __future__ import annotations

import importlib
import os
import time

from support.broker_cluster import ServerProcess
from support.brokers import cluster_with_brokers

from kraft_node.server.config import NodeConfig

kafka = importlib.import_module("kafka")
kafka_admin = importlib.import_module("kafka.admin")

N = 500


def _produce(bootstrap: str) -> list[tuple[int, int]]:
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([kafka_admin.NewTopic("crash", 2, 1)], 10_000)
    finally:
        admin.close()
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, enable_idempotence=False, linger_ms=2,
                                   request_timeout_ms=10_000, retries=5)
    try:
        futures = [producer.send("crash", value=b"%d-%d" % (i % 2, i // 2), partition=i % 2) for i in range(2 * N)]
        producer.flush(20)
        return [(f.get(10).partition, f.get(10).offset) for f in futures]
    finally:
        producer.close(5)


def _consume(bootstrap: str) -> list[tuple[int, int, bytes]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                   auto_offset_reset="earliest", request_timeout_ms=10_000)
    try:
        tps = [kafka.TopicPartition("crash", p) for p in range(2)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[tuple[int, int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(out) < 2 * N and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out += [(r.partition, r.offset, r.value) for r in records]
        return out
    finally:
        consumer.close()


def test_acknowledged_records_survive_kill_9(tmp_path):
    paths = cluster_with_brokers(str(tmp_path), controllers=1, combined=True)
    cfg = NodeConfig.from_file(paths[1])
    bootstrap = f"127.0.0.1:{next(e.port for e in cfg.broker_listeners)}"
    data = cfg.log_dirs[0]
    node = ServerProcess(paths[1])
    try:
        node.start()
        node.wait_started(60)
        acked = _produce(bootstrap)
        assert sorted(acked) == sorted((p, o) for p in range(2) for o in range(N))
        node.kill9()
        for p in range(2):
            assert ".kafka_cleanshutdown" not in os.listdir(os.path.join(data, f"crash-{p}"))
        node.start()
        node.wait_started(60)
        text = node.log()
        for p in range(2):
            assert f"crash-{p}: log loaded after an unclean shutdown" in text, node.stderr_tail()
        got = _consume(bootstrap)
        for p in range(2):
            mine = [(o, v) for pp, o, v in got if pp == p]
            assert [o for o, _ in mine] == list(range(N)), node.stderr_tail()
            assert [v for _, v in mine] == [b"%d-%d" % (p, i) for i in range(N)]
        assert len(got) == 2 * N
    finally:
        node.kill9()
