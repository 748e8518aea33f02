"""Partitions on a cluster of processes (issue 25, Tests): 3 controllers and 3 brokers started from
the CLIs (``kraft-server-start``) on 127.0.0.1, driven by real Kafka clients.

* **round trip**: kafka-python and confluent-kafka (librdkafka) produce with ``acks=all`` to an
  RF 3 topic and consume by manual assignment from the beginning (kafka-python's records also with
  aiokafka); every record is read back in order, exactly once per offset, at the offset its
  delivery report gave;
* **ISR**: a follower paused with SIGSTOP leaves the ISR after ``replica.lag.time.max.ms`` while it
  is still registered and unfenced (the session timeout is set far above the lag bound, so the
  shrink is the leader's AlterPartition, not the controller's fencing); ``acks=all`` keeps working
  with ``min.insync.replicas=2``; pausing the second follower gives NOT_ENOUGH_REPLICAS; after
  SIGCONT both come back into the ISR;
* **leader-epoch truncation**: the leader of an RF 2 topic with ``unclean.leader.election.enable``
  takes writes its paused follower never sees (its divergent tail), is killed with -9; the follower
  resumes and is elected uncleanly, takes new writes in a new leader epoch; the old leader
  restarts, learns the diverging epoch from its Fetch, truncates its tail and replicates the new
  leader's history.  Its partition log (read with ``kraft_storage.log`` once it is stopped) holds
  exactly the new leader's records, byte for byte.

One cluster serves the module; each test leaves every node running (and not paused) again.  Every
wait has a deadline; every process this module started is killed at the end.
"""
from __future__ import annotations

import importlib
import re
import signal
import time

import pytest
from support.broker_cluster import BrokerCluster, ServerProcess, metadata, run, wait_until
from support.partition_logs import read_partition_log

from kraft_node.protocol.errors import Errors

kafka = importlib.import_module("kafka")
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

pytestmark = pytest.mark.timeout(400)

#: the leader shrinks the ISR after 1.5 s without a caught-up fetch; the controller fences a broker
#: only after 10 s without a heartbeat, so a shrink seen sooner is the leader's doing
LAG_MS = 1500
SESSION_MS = 10_000
BOUND_S = 30.0     # every wait's bound (the cores are shared; far above the expected times)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = BrokerCluster(str(tmp_path_factory.mktemp("partitions")), controllers=3, brokers=3,
                      extra={"broker.session.timeout.ms": str(SESSION_MS)},
                      broker_extra={"replica.lag.time.max.ms": str(LAG_MS)})
    try:
        c.start(timeout=120)
        yield c
    finally:
        for b in c.brokers:
            resume(b)
        c.close()


# ------------------------------------------------------------------ helpers
def pause(node: ServerProcess) -> None:
    assert node.proc is not None and node.alive
    node.proc.send_signal(signal.SIGSTOP)


def resume(node: ServerProcess) -> None:
    if node.alive:
        assert node.proc is not None
        node.proc.send_signal(signal.SIGCONT)


def ensure_all_running(c: BrokerCluster) -> None:
    for n in c.nodes.values():
        resume(n)
        if not n.alive:
            n.start()
    for n in c.nodes.values():
        n.wait_started(90)
    wait_until(lambda: sorted(b.node_id for b in run(metadata(c.brokers[0].port)).brokers) == [101, 102, 103],
               BOUND_S, "every broker listed as alive")


def partition_states(port: int, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """``partition -> (leader, replicas, isr)`` as the broker on ``port`` answers Metadata v12."""
    resp = run(metadata(port, [topic]))
    (t,) = resp.topics
    assert t.error_code == 0, f"{topic}: {Errors(t.error_code).name}"
    return {p.partition_index: (p.leader_id, list(p.replica_nodes), sorted(p.isr_nodes)) for p in t.partitions}


def alive_ids(port: int) -> list[int]:
    return sorted(b.node_id for b in run(metadata(port)).brokers)


def create_topic(c: BrokerCluster, topic: NewTopic, via: ServerProcess | None = None) -> dict:
    """Create ``topic`` and wait until every broker shows every partition led with a full ISR."""
    via = via or c.brokers[0]
    admin = KafkaAdminClient(bootstrap_servers=c.bootstrap(via), request_timeout_ms=20_000)
    try:
        admin.create_topics([topic], timeout_ms=15_000)
    finally:
        admin.close()

    def ready():
        views = [partition_states(b.port, topic.name) for b in c.brokers if b.alive]
        first = views[0]
        ok = all(v == first for v in views) and all(
            leader >= 0 and sorted(replicas) == isr for leader, replicas, isr in first.values())
        return first if ok else None
    return wait_until(ready, BOUND_S, f"{topic.name}: led, full ISR, on every broker", interval=0.1)


def broker(c: BrokerCluster, node_id: int) -> ServerProcess:
    return next(b for b in c.brokers if b.id == node_id)


def kp_producer(bootstrap: str, **kw):
    return kafka.KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=2, request_timeout_ms=20_000,
                               max_block_ms=20_000, **kw)


def kp_consume(bootstrap: str, topic: str, expected: dict[int, int], timeout: float = BOUND_S
               ) -> dict[int, list[tuple[int, bytes]]]:
    """Read each partition from the beginning by manual assignment until ``expected[p]`` records;
    ``partition -> [(offset, value)]`` (no group: FindCoordinator is not served)."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                   auto_offset_reset="earliest", request_timeout_ms=20_000)
    try:
        tps = [TopicPartition(topic, p) for p in expected]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
        deadline = time.monotonic() + timeout
        while any(len(got[p]) < n for p, n in expected.items()):
            assert time.monotonic() < deadline, f"consumed { {p: len(v) for p, v in got.items()} } of {expected}"
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                got[tp.partition] += [(m.offset, m.value) for m in msgs]
        return got
    finally:
        consumer.close()


async def aio_consume(bootstrap: str, topic: str, expected: dict[int, int]) -> dict[int, list[tuple[int, bytes]]]:
    """:func:`kp_consume` with aiokafka."""
    import aiokafka
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                         auto_offset_reset="earliest", request_timeout_ms=20_000)
    await consumer.start()
    try:
        tps = [aiokafka.TopicPartition(topic, p) for p in expected]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got: dict[int, list[tuple[int, bytes]]] = {p: [] for p in expected}
        while any(len(got[p]) < n for p, n in expected.items()):
            for tp, msgs in (await consumer.getmany(timeout_ms=500)).items():
                got[tp.partition] += [(m.offset, m.value) for m in msgs]
        return got
    finally:
        await consumer.stop()


def assert_read_back(got: dict[int, list[tuple[int, bytes]]], sent: dict[int, list[tuple[int, bytes]]]) -> None:
    """Every partition read back in offset order from 0, each offset once, each value where its
    delivery report put it."""
    for p, records in sent.items():
        offsets = [o for o, _ in got[p]]
        assert offsets == list(range(len(offsets))), f"partition {p}: offsets {offsets[:20]}..."
        assert sorted(records) == got[p], f"partition {p}: read back differs from the acknowledged records"


# ------------------------------------------------------------------ round trip with real clients
def test_kafka_python_acks_all_rf3_read_back_in_order_once(cluster):
    c = cluster
    ensure_all_running(c)
    create_topic(c, NewTopic("rt-kp", 3, 3))
    bootstrap = ",".join(c.bootstrap(b) for b in c.brokers)
    n = 3000
    producer = kp_producer(bootstrap)
    try:
        futures = [(i % 3, f"kp-{i:06d}".encode(), producer.send("rt-kp", f"kp-{i:06d}".encode(), partition=i % 3))
                   for i in range(n)]
        producer.flush(60)
        sent: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
        for p, value, fut in futures:
            md = fut.get(timeout=30)
            assert md.partition == p
            sent[p].append((md.offset, value))
    finally:
        producer.close(10)
    # within a partition, the send order is the offset order (one connection, max 5 in flight, no retries)
    for p, records in sent.items():
        assert [v for _, v in sorted(records)] == [v for _, v in records], f"partition {p} reordered"
    got = kp_consume(bootstrap, "rt-kp", {p: len(r) for p, r in sent.items()})
    assert_read_back(got, sent)
    # aiokafka (the other client of the test extra) reads the same, through another broker first
    got = run(aio_consume(f"{c.bootstrap(c.brokers[2])}", "rt-kp", {p: len(r) for p, r in sent.items()}), 60)
    assert_read_back(got, sent)


def test_confluent_kafka_acks_all_rf3_read_back_in_order_once(cluster):
    ck = importlib.import_module("confluent_kafka")
    c = cluster
    ensure_all_running(c)
    create_topic(c, NewTopic("rt-ck", 3, 3))
    bootstrap = ",".join(c.bootstrap(b) for b in c.brokers)
    n = 20_000
    producer = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                            "enable.idempotence": True, "message.timeout.ms": 60_000})
    sent: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    errors: list[str] = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            sent[msg.partition()].append((msg.offset(), msg.value()))
    for i in range(n):
        producer.produce("rt-ck", f"ck-{i:06d}".encode(), partition=i % 3, on_delivery=report)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "deliveries still outstanding after 60 s"
    assert not errors, errors[:5]
    assert sum(len(r) for r in sent.values()) == n
    for p, records in sent.items():  # idempotent: the send order is the offset order
        assert [v for _, v in sorted(records)] == [f"ck-{i:06d}".encode() for i in range(p, n, 3)]

    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "kraft-h7-unused",
                            "enable.auto.commit": False, "enable.partition.eof": False})
    got: dict[int, list[tuple[int, bytes]]] = {0: [], 1: [], 2: []}
    try:
        consumer.assign([ck.TopicPartition("rt-ck", p, ck.OFFSET_BEGINNING) for p in range(3)])
        deadline = time.monotonic() + BOUND_S
        while sum(len(v) for v in got.values()) < n:
            assert time.monotonic() < deadline, f"consumed { {p: len(v) for p, v in got.items()} } of {n}"
            for m in consumer.consume(10_000, 0.5):
                assert m.error() is None, m.error()
                got[m.partition()].append((m.offset(), m.value()))
    finally:
        consumer.close()
    assert_read_back(got, sent)


# ------------------------------------------------------------------ ISR shrink and expand
def test_isr_shrinks_on_a_paused_follower_then_not_enough_replicas_then_expands(cluster):
    c = cluster
    ensure_all_running(c)
    state = create_topic(c, NewTopic("isr", 1, 3, topic_configs={"min.insync.replicas": "2"}))
    leader_id, replicas, _ = state[0]
    leader = broker(c, leader_id)
    f1, f2 = (broker(c, r) for r in replicas if r != leader_id)
    bootstrap = c.bootstrap(leader)
    acked: list[tuple[int, bytes]] = []
    producer = kp_producer(bootstrap, retries=0)
    # the acks=1 producer learns the metadata now, while every broker answers: made after the
    # pauses, kafka-python asks its least loaded node, often a paused broker (10 s timeouts, and
    # "Failed to update metadata after 60.0 secs" in about 1 run of 10 under load)
    p1 = kafka.KafkaProducer(bootstrap_servers=bootstrap, acks=1, retries=0, request_timeout_ms=20_000)
    try:
        def send(value: bytes):
            md = producer.send("isr", value, partition=0).get(timeout=30)
            acked.append((md.offset, value))

        md = p1.send("isr", b"acks-one-first", partition=0).get(timeout=30)
        acked.append((md.offset, b"acks-one-first"))
        for i in range(20):
            send(f"all-three-{i}".encode())
        paused_at = time.monotonic()
        pause(f1)

        def shrunk():
            _, _, isr = partition_states(leader.port, "isr")[0]
            return f1.id not in isr and isr
        isr = wait_until(shrunk, BOUND_S, f"ISR without the paused {f1}")
        took = time.monotonic() - paused_at
        assert isr == sorted([leader_id, f2.id]), isr
        assert f1.id in alive_ids(leader.port), (
            f"{f1} was fenced before the shrink ({took:.1f} s): the shrink is not the leader's lag rule")
        for i in range(20):      # min.insync.replicas=2 met by leader + f2
            send(f"two-of-three-{i}".encode())

        pause(f2)
        wait_until(lambda: partition_states(leader.port, "isr")[0][2] == [leader_id], BOUND_S,
                   f"ISR down to the leader {leader_id}")
        with pytest.raises(kafka.errors.NotEnoughReplicasError):
            producer.send("isr", b"refused", partition=0).get(timeout=30)
        # acks=1 is not bound by min.insync.replicas
        md = p1.send("isr", b"acks-one", partition=0).get(timeout=30)
        acked.append((md.offset, b"acks-one"))

        resume(f1)
        resume(f2)
        wait_until(lambda: partition_states(leader.port, "isr")[0][2] == sorted(replicas), BOUND_S,
                   "both followers back in the ISR")
        send(b"all-three-again")
    finally:
        resume(f1)
        resume(f2)
        producer.close(10)
        p1.close(10)
    got = kp_consume(bootstrap, "isr", {0: len(acked)})
    assert_read_back(got, {0: acked})
    assert b"refused" not in [v for _, v in got[0]]


# ------------------------------------------------------------------ leader-epoch truncation
def test_old_leader_truncates_its_divergent_tail_after_an_unclean_election(cluster):
    c = cluster
    ensure_all_running(c)
    a, b, other = c.brokers
    state = create_topic(c, NewTopic("trunc", replica_assignments={0: [a.id, b.id]},
                                     topic_configs={"unclean.leader.election.enable": "true",
                                                    "min.insync.replicas": "1"}))
    assert state[0][0] == a.id, state
    base = [f"base-{i}".encode() for i in range(100)]
    tail = [f"tail-{i}".encode() for i in range(50)]
    new = [f"new-{i}".encode() for i in range(30)]

    def producer(to: ServerProcess, acks) -> kafka.KafkaProducer:
        p = kafka.KafkaProducer(bootstrap_servers=c.bootstrap(to), acks=acks, linger_ms=2, retries=3,
                                request_timeout_ms=20_000, max_block_ms=20_000)
        p.partitions_for("trunc")  # the topic's metadata, learnt now
        return p

    def produce(p: kafka.KafkaProducer, values: list[bytes]) -> None:
        try:
            for f in [p.send("trunc", v, partition=0) for v in values]:
                f.get(timeout=30)
        finally:
            p.close(10)
    # the tail's producer learns the metadata while every broker answers: made after the pause,
    # kafka-python asks its least loaded node, often the paused one ("Failed to update metadata
    # after 20.0 secs" in a CI run at load ~6, as the ISR test above once did)
    tail_producer = producer(a, 1)
    try:
        produce(producer(a, "all"), base)            # on both replicas
        pause(b)
        wait_until(lambda: partition_states(a.port, "trunc")[0][2] == [a.id], BOUND_S, "ISR shrunk to the leader")
        produce(tail_producer, tail)                 # only the leader has these: its divergent tail
        a.kill9()
        resume(b)
        # a's session expires; the controller elects b although it is out of the ISR (unclean)
        wait_until(lambda: partition_states(other.port, "trunc")[0][0] == b.id, SESSION_MS / 1000 + BOUND_S,
                   f"{b} elected leader (unclean)")
        produce(producer(b, "all"), new)
        a.start()
        a.wait_started(90)
        # its log still ends with the tail (150 records), the leader's epoch 0 ends at 100
        wait_until(lambda: re.search(r"Truncating partition trunc-0 to offset 100\b", a.log()), BOUND_S,
                   f"{a} truncating its divergent tail")
        wait_until(lambda: partition_states(other.port, "trunc")[0][2] == sorted([a.id, b.id]), BOUND_S,
                   f"{a} back in the ISR after truncating")
        assert a.stop(30) == 0, a.stderr_tail()
        log_a = read_partition_log(a.cfg.log_dirs[0], "trunc", 0)
    finally:
        tail_producer.close(0)
        resume(b)
        ensure_all_running(c)
    assert log_a.values == base + new, (log_a.values[:3], log_a.values[95:110])
    assert log_a.offsets == list(range(len(base) + len(new)))
    epochs = [e for _, _, e in log_a.batches]
    assert epochs == sorted(epochs) and epochs[-1] > epochs[0], f"the new leader's batches carry its epoch: {epochs}"
    # byte for byte the new leader's history, as it serves it to a consumer
    got = kp_consume(c.bootstrap(b), "trunc", {0: len(base) + len(new)})
    assert [v for _, v in got[0]] == base + new
    a.stop(30)
    b.stop(30)
    try:
        log_b = read_partition_log(b.cfg.log_dirs[0], "trunc", 0)
    finally:
        ensure_all_running(c)
    assert log_b.raw == log_a.raw, "the replicas' logs differ"
