"""Issue 25's produce and consume throughput on one combined node (``kraft-server-start``),
RF 1, acks=1, 100 B records, with librdkafka (confluent-kafka) as the load generator so that the
Python client is not what is measured (``--client aiokafka`` for the pure-Python client).

    python benchmarks/broker_produce_bench.py [--records 1000000] [--size 100] [--partitions 1]
                                              [--client confluent|aiokafka|raw] [--runs 3] [--out F]

``--client raw`` takes the client's per-record work out: one Produce v9 batch of
``--batch-records`` records is built once and sent again and again on one connection (5 requests
in flight, acks=1), and the records are read back with Fetch v12 on one connection (10 MiB per
partition per request, records counted from the batch headers).  What is left is the broker:
the wire codec, validation, the append and the read.  (Why: on this 2-CPU machine the
confluent-kafka Python binding itself tops out near 430k ``produce()`` calls/s, and its consumer
spends more per ``Message`` object than the broker spends per record.)

Per run: a fresh topic; produce ``--records`` records (``acks=1``, linger 5 ms, 1 MiB batches,
no compression) timed from the first send to the last delivery report; then one consumer
assigned to every partition from the beginning, timed until it has every record.  Records/s and
MB/s of each, per run and the median; the issue's targets are >= 1M records/s produce (acks=1, RF
1) and >= 2M records/s consume.  Writes a Markdown report (default
``benchmarks/results/s16/broker_produce.md``) and prints it.  The node process this script
started is killed at the end; every wait has a deadline.

``--zero-copy-ab`` measures Fetch's zero copy: two such nodes, one sending the records of its
Fetch answers with sendfile and one copying them (``KRAFT_ZERO_COPY=0``); each run produces the
same records to both and consumes from both, in alternating order, and reports consume
records/s and the node process's CPU seconds (utime + stime from /proc) per MB consumed.
Written to ``benchmarks/results/s16/broker_fetch_zero_copy.md`` unless ``--out`` says otherwise.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, REPO)

from _support import code_version  # noqa: E402
from support.broker_cluster import ServerProcess  # noqa: E402
from support.brokers import cluster_with_brokers  # noqa: E402


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    try:
        admin.create_topics([NewTopic(name, partitions, 1)], 20_000)
    finally:
        admin.close()
    time.sleep(0.5)  # the leaders are made from the next image


def produce_confluent(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 2_000_000, "queue.buffering.max.kbytes": 1 << 21,
                  "enable.idempotence": False, "compression.type": "none"})
    return drive_producer(p, topic, records, size, partitions, "produce", flush_s=120)


def drive_producer(p: Any, topic: str, records: int, size: int, partitions: int, what: str,
                   flush_s: float) -> float:
    """Seconds for a confluent-kafka ``Producer`` to have ``records`` records of ``size`` bytes
    (round robin over ``partitions``) delivered; raises naming ``what`` on any failure."""
    payload = os.urandom(size)
    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)
    t0 = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=i % partitions, on_delivery=report)
                break
            except BufferError:
                p.poll(0.001)
        if i % 10_000 == 0:
            p.poll(0)
    left = p.flush(flush_s)
    elapsed = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"{what}: {left} not delivered, {len(errors)} errors (first: {errors[:1]})")
    return elapsed


def consume_confluent(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kraft-bench-unused", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20,
                  "fetch.wait.max.ms": 100, "log_level": 0})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = 0
        t0 = time.perf_counter()
        deadline = time.monotonic() + 300
        while got < records:
            if time.monotonic() > deadline:
                raise RuntimeError(f"consume: {got} of {records} records before the deadline")
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    got += 1
        return time.perf_counter() - t0
    finally:
        c.close()


async def _aio_produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    from aiokafka import AIOKafkaProducer
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=1 << 20,
                         max_request_size=8 << 20)
    await p.start()
    payload = os.urandom(size)
    try:
        t0 = time.perf_counter()
        futs = [await p.send(topic, payload, partition=i % partitions) for i in range(records)]
        await asyncio.gather(*futs)
        return time.perf_counter() - t0
    finally:
        await p.stop()


async def _aio_consume(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_bytes=50 << 20,
                         max_partition_fetch_bytes=10 << 20)
    await c.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        c.assign(tps)
        await c.seek_to_beginning(*tps)
        got = 0
        t0 = time.perf_counter()
        while got < records:
            for batch in (await c.getmany(timeout_ms=500, max_records=100_000)).values():
                got += len(batch)
        return time.perf_counter() - t0
    finally:
        await c.stop()


async def _raw_produce(port: int, topic: str, records: int, size: int, batch_records: int) -> float:
    from kraft_node.network import KafkaConnection
    from kraft_node.protocol.generated.produce import ProduceRequest as P
    from kraft_storage.record.builder import build_batch
    batch = build_batch([(None, os.urandom(size))] * batch_records)
    body = P(acks=1, timeout_ms=30_000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])])
    conn = await KafkaConnection.open("127.0.0.1", port)
    try:
        requests = -(-records // batch_records)
        window = asyncio.Semaphore(5)

        async def one() -> None:
            async with window:
                resp = await conn.request(body, 9, 30)
                err = resp.responses[0].partition_responses[0].error_code
                if err:
                    raise RuntimeError(f"produce error {err}")
        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        return (time.perf_counter() - t0) * records / (requests * batch_records)
    finally:
        await conn.close()


async def _raw_consume(port: int, topic: str, records: int) -> float:
    from kraft_node.network import KafkaConnection
    from kraft_node.protocol.generated.fetch import FetchRequest as R
    from kraft_storage.record.batch import scan_batches
    conn = await KafkaConnection.open("127.0.0.1", port)
    try:
        offset = got = 0
        t0 = time.perf_counter()
        while got < records:
            body = R(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=50 << 20, session_epoch=-1,
                     topics=[R.FetchTopic(topic=topic, partitions=[R.FetchPartition(
                         partition=0, fetch_offset=offset, partition_max_bytes=10 << 20)])])
            resp = await conn.request(body, 12, 30)
            h = scan_batches(resp.responses[0].partitions[0].records, crc_mode=0).headers
            if len(h):
                got += int(h["records_count"].sum())
                offset = int(h["base_offset"][-1] + h["last_offset_delta"][-1] + 1)
        return time.perf_counter() - t0
    finally:
        await conn.close()


def _cpu_seconds(pid: int) -> float:
    """utime + stime of process ``pid`` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _consume(args: argparse.Namespace, port: int, topic: str) -> float:
    if args.client == "confluent":
        return consume_confluent(f"127.0.0.1:{port}", topic, args.records, args.partitions)
    if args.client == "raw":
        return asyncio.run(_raw_consume(port, topic, args.records))
    return asyncio.run(_aio_consume(f"127.0.0.1:{port}", topic, args.records, args.partitions))


def _produce(args: argparse.Namespace, port: int, topic: str) -> float:
    if args.client == "confluent":
        return produce_confluent(f"127.0.0.1:{port}", topic, args.records, args.size, args.partitions)
    if args.client == "raw":
        return asyncio.run(_raw_produce(port, topic, args.records, args.size, args.batch_records))
    return asyncio.run(_aio_produce(f"127.0.0.1:{port}", topic, args.records, args.size, args.partitions))


def zero_copy_ab(args: argparse.Namespace, argv: list[str]) -> None:
    """See the module doc (``--zero-copy-ab``)."""
    from kraft_node.server.config import NodeConfig
    if args.client == "raw" and args.partitions != 1:
        raise SystemExit("--client raw uses one partition")
    nodes: dict[str, tuple[ServerProcess, int]] = {}
    saved = os.environ.get("KRAFT_ZERO_COPY")
    rows: list[tuple[int, str, float, float]] = []
    try:
        for mode, flag in (("sendfile", "1"), ("copy", "0")):
            paths = cluster_with_brokers(tempfile.mkdtemp(prefix=f"kraft-fetch-{mode}-"), controllers=1, combined=True)
            os.environ["KRAFT_ZERO_COPY"] = flag  # read by the node's listeners (kraft_node.network.server)
            node = ServerProcess(paths[1])
            node.start()
            nodes[mode] = (node, next(e.port for e in NodeConfig.from_file(paths[1]).broker_listeners))
        for node, _port in nodes.values():
            node.wait_started(60)
        mb = args.records * args.size / 1e6
        for run_no in range(1, args.runs + 1):
            topic = f"bench-{run_no}"
            order = ["sendfile", "copy"] if run_no % 2 else ["copy", "sendfile"]
            for mode in order:
                node, port = nodes[mode]
                create_topic(f"127.0.0.1:{port}", topic, args.partitions)
                _produce(args, port, topic)
            for mode in order:
                node, port = nodes[mode]
                assert node.proc is not None
                cpu0 = _cpu_seconds(node.proc.pid)
                tc = _consume(args, port, topic)
                cpu = _cpu_seconds(node.proc.pid) - cpu0
                rows.append((run_no, mode, args.records / tc, cpu / mb))
                print(f"run {run_no} {mode}: consume {args.records / tc:,.0f} records/s, node CPU "
                      f"{cpu * 1e3 / mb:.2f} ms/MB", flush=True)
    finally:
        if saved is None:
            os.environ.pop("KRAFT_ZERO_COPY", None)
        else:
            os.environ["KRAFT_ZERO_COPY"] = saved
        for node, _port in nodes.values():
            node.kill9()
    client = {"confluent": "confluent-kafka (librdkafka)", "aiokafka": "aiokafka (pure Python)",
              "raw": "kraft's own connection, Fetch v12 (10 MiB per partition)"}[args.client]
    load = os.getloadavg()
    lines = [f"# Fetch zero copy: sendfile vs copy ({datetime.now().strftime('%Y-%m-%d %H:%M')})", "",
             f"Command: `python benchmarks/broker_produce_bench.py {' '.join(argv)}`", "",
             f"Setup: two combined nodes (kraft-server-start), one with KRAFT_ZERO_COPY=0; RF 1, "
             f"{args.partitions} partition(s), {args.records:,} records of {args.size} B per run, consumer {client}; "
             f"runs alternate which node is read first; {platform.machine()}, {os.cpu_count()} CPUs, "
             f"Python {platform.python_version()}; load at the end {load[0]:.1f}; code {code_version()}", "",
             "| run | node | consume records/s | consume MB/s | node CPU ms per MB consumed |", "|---|---|---|---|---|"]
    for run_no, mode, c, cpu_mb in rows:
        lines.append(f"| {run_no} | {mode} | {c:,.0f} | {c * args.size / 1e6:.1f} | {cpu_mb * 1e3:.2f} |")
    for mode in ("sendfile", "copy"):
        mine = [r for r in rows if r[1] == mode]
        c = statistics.median(r[2] for r in mine)
        cpu_mb = statistics.median(r[3] for r in mine)
        lines.append(f"| median | {mode} | {c:,.0f} | {c * args.size / 1e6:.1f} | {cpu_mb * 1e3:.2f} |")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    ap.add_argument("--client", choices=("confluent", "aiokafka", "raw"), default="confluent")
    ap.add_argument("--batch-records", type=int, default=9000, help="records per Produce batch (raw)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None, help="the report (default results/s16/broker_produce.md, or "
                    "broker_fetch_zero_copy.md with --zero-copy-ab)")
    ap.add_argument("--zero-copy-ab", action="store_true",
                    help="consume from a sendfile node and a copying node, alternating (see the module doc)")
    args = ap.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    if args.out is None:
        name = "broker_fetch_zero_copy.md" if args.zero_copy_ab else "broker_produce.md"
        args.out = os.path.join(HERE, "results", "s16", name)
    if args.zero_copy_ab:
        zero_copy_ab(args, argv)
        return
    base = tempfile.mkdtemp(prefix="kraft-produce-bench-")
    paths = cluster_with_brokers(base, controllers=1, combined=True)
    node = ServerProcess(paths[1])
    node.start()
    rows = []
    try:
        node.wait_started(60)
        from kraft_node.server.config import NodeConfig
        port = next(e.port for e in NodeConfig.from_file(paths[1]).broker_listeners)
        bootstrap = f"127.0.0.1:{port}"
        for run_no in range(1, args.runs + 1):
            topic = f"bench-{run_no}"
            create_topic(bootstrap, topic, args.partitions)
            if args.client == "confluent":
                tp = produce_confluent(bootstrap, topic, args.records, args.size, args.partitions)
                tc = consume_confluent(bootstrap, topic, args.records, args.partitions)
            elif args.client == "raw":
                if args.partitions != 1:
                    raise SystemExit("--client raw uses one partition")
                tp = asyncio.run(_raw_produce(port, topic, args.records, args.size, args.batch_records))
                tc = asyncio.run(_raw_consume(port, topic, args.records))
            else:
                tp = asyncio.run(_aio_produce(bootstrap, topic, args.records, args.size, args.partitions))
                tc = asyncio.run(_aio_consume(bootstrap, topic, args.records, args.partitions))
            rows.append((run_no, args.records / tp, args.records / tc))
            print(f"run {run_no}: produce {args.records / tp:,.0f} records/s, consume {args.records / tc:,.0f} "
                  "records/s", flush=True)
    finally:
        node.kill9()
    mb = args.size / 1e6
    prod = statistics.median(r[1] for r in rows)
    cons = statistics.median(r[2] for r in rows)
    client = {"confluent": "confluent-kafka (librdkafka)", "aiokafka": "aiokafka (pure Python)",
              "raw": f"kraft's own connection, one prebuilt {args.batch_records}-record batch resent (Produce v9, "
                     "5 in flight) and Fetch v12"}[args.client]
    lines = [f"# Broker produce/consume throughput ({datetime.now().strftime('%Y-%m-%d %H:%M')})", "",
             f"Command: `python benchmarks/broker_produce_bench.py {' '.join(argv)}`", "",
             f"Setup: one combined node (kraft-server-start), RF 1, acks=1, {args.partitions} partition(s), "
             f"{args.records:,} records of {args.size} B per run, client {client}; "
             f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"code {code_version()}", "",
             "| run | produce records/s | produce MB/s | consume records/s | consume MB/s |", "|---|---|---|---|---|"]
    for run_no, p, c in rows:
        lines.append(f"| {run_no} | {p:,.0f} | {p * mb:.1f} | {c:,.0f} | {c * mb:.1f} |")
    lines.append(f"| median | {prod:,.0f} | {prod * mb:.1f} | {cons:,.0f} | {cons * mb:.1f} |")
    lines += ["", "Targets (issue 25): produce acks=1 RF 1 >= 1M records/s; consume >= 2M records/s."]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
