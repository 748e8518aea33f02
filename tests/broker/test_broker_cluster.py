"""A 3-controller, 3-broker cluster started from the CLIs (``kraft-server-start`` processes on
127.0.0.1), driven by real Kafka clients (issue 24, Tests).

* kafka-python's ``KafkaAdminClient`` and aiokafka's ``AIOKafkaAdminClient`` create, list,
  describe, alter configs (incremental and legacy) and delete topics, each step through a
  different broker than the one before, so every answer depends on forwarding to the active
  controller and on propagation to the other brokers;
* the same after kill -9 of the active controller: the brokers' controller channels follow
  the new leader and a create succeeds within a bound;
* a broker restarted (SIGTERM, start) is a new incarnation with a new broker epoch, unfenced;
* a broker killed with -9 is fenced after its session and loses its leaderships (RF 3);
* SIGTERM of a broker leading partitions is a controlled shutdown: exit 0 within the bound,
  its leaderships moved first.

One cluster serves the module (starting six Python processes costs ~10-20 s on the shared
machine); each test leaves every node running again, and checks that first.  Every wait has
a deadline; every process is killed at the end.
"""
from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
import time

import pytest
from conftest import REPO
from support.broker_cluster import (
    BrokerCluster,
    ServerProcess,
    describe_cluster,
    leaders,
    metadata,
    run,
    wait_until,
)

from kraft_node.metadata.image.time_travel import MetadataHistory

kafka_admin = importlib.import_module("kafka.admin")
aiokafka_admin = importlib.import_module("aiokafka.admin")
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource  # noqa: E402
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType  # noqa: E402

pytestmark = pytest.mark.timeout(300)

#: bounds on the waits (the machine's cores are shared; each is far above the expected time)
PROPAGATION_S = 15.0
FAILOVER_S = 30.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = BrokerCluster(str(tmp_path_factory.mktemp("brokers")), controllers=3, brokers=3)
    try:
        c.start(timeout=90)
        yield c
    finally:
        c.close()


def ensure_all_running(c: BrokerCluster) -> None:
    for n in c.nodes.values():
        if not n.alive:
            n.start()
    for n in c.nodes.values():
        n.wait_started(60)
    wait_until(lambda: alive_brokers(c.brokers[0].port) == [b.id for b in c.brokers], PROPAGATION_S,
               "every broker listed as alive")


def alive_brokers(port: int) -> list[int]:
    return sorted(b.node_id for b in run(metadata(port)).brokers)


def topic_names(port: int) -> set[str]:
    return {t.name for t in run(metadata(port)).topics}


def kp_admin(broker: ServerProcess):
    return kafka_admin.KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}", client_id="kraft-h6",
                                        request_timeout_ms=20_000)


def controller_image(c: BrokerCluster):
    """The latest image in an active controller's metadata log (read-only; a torn tail of a
    write in progress is ignored by the reader)."""
    ctl = c.active_controller()
    return MetadataHistory.open(ctl.metadata_dir).load().image


# ------------------------------------------------------------------ the clients' round trip
def kafka_python_round(c: BrokerCluster, tag: str, create_deadline_s: float) -> None:
    b1, b2, b3 = c.brokers
    name = f"{tag}-kp"
    a1, a2, a3 = kp_admin(b1), kp_admin(b2), kp_admin(b3)
    try:
        topic = kafka_admin.NewTopic(name, 3, 3, topic_configs={"retention.ms": "3600000"})
        deadline = time.monotonic() + create_deadline_s
        while True:  # a create during a failover may time out; retried, it must succeed in time
            try:
                a1.create_topics([topic], timeout_ms=10_000)
                break
            except kafka_admin.errors.TopicAlreadyExistsError:
                break  # an earlier attempt was committed after its answer timed out
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        wait_until(lambda: name in a2.list_topics(), PROPAGATION_S, f"{name} listed through broker 102")
        (desc,) = a3.describe_topics([name])
        assert desc["error_code"] == 0 and desc["name"] == name, desc
        parts = sorted(desc["partitions"], key=lambda p: p["partition_index"])
        assert [p["partition_index"] for p in parts] == [0, 1, 2], parts
        for p in parts:
            assert sorted(p["replica_nodes"]) == [101, 102, 103], p
            assert p["leader_id"] in (101, 102, 103), p
        res = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, name,
                                         configs={"retention.ms": "7200000"})
        result = a2.alter_configs([res], incremental=True)
        assert_no_errors(result)

        def described(admin, key):
            r = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, name)
            (by_type,) = admin.describe_configs([r]).values()
            return by_type[name][key]["value"]

        wait_until(lambda: described(a3, "retention.ms") == "7200000", PROPAGATION_S,
                   "incremental alter seen through broker 103")
        res = kafka_admin.ConfigResource(kafka_admin.ConfigResourceType.TOPIC, name,
                                         configs={"cleanup.policy": "compact"})
        assert_no_errors(a1.alter_configs([res], incremental=False))
        wait_until(lambda: described(a2, "cleanup.policy") == "compact", PROPAGATION_S,
                   "legacy AlterConfigs seen through broker 102")
        a3.delete_topics([name], timeout_ms=10_000)
        wait_until(lambda: name not in a1.list_topics(), PROPAGATION_S, f"{name} gone through broker 101")
        for b in c.brokers:
            wait_until(lambda b=b: name not in topic_names(b.port), PROPAGATION_S, f"{name} gone from {b}")
    finally:
        for a in (a1, a2, a3):
            a.close()


def assert_no_errors(result) -> None:
    """kafka-python's alter_configs result: ``{type: {name: Error or result}}``; nothing failed."""
    for by_name in result.values():
        for value in by_name.values():
            assert not isinstance(value, Exception), result


def error_codes(obj) -> list[int]:
    """Every ``error_code`` in an aiokafka response (its ``to_object()`` tree)."""
    if isinstance(obj, dict):
        out = [v for k, v in obj.items() if k == "error_code"]
        for v in obj.values():
            out += error_codes(v)
        return out
    if isinstance(obj, list):
        return [e for v in obj for e in error_codes(v)]
    return []


async def aiokafka_round(c: BrokerCluster, tag: str) -> None:
    b1, b2, b3 = c.brokers
    name = f"{tag}-aio"
    clients = [aiokafka_admin.AIOKafkaAdminClient(bootstrap_servers=f"127.0.0.1:{b.port}", request_timeout_ms=20_000)
               for b in (b1, b2, b3)]
    x2, x3, x1 = clients[1], clients[2], clients[0]
    try:
        for x in clients:
            await asyncio.wait_for(x.start(), 30)
        resp = await x2.create_topics([aiokafka_admin.NewTopic(name, 2, 3, topic_configs={"segment.ms": "600000"})])
        assert error_codes(resp.to_object()) == [0], resp

        async def eventually(check, what):
            deadline = time.monotonic() + PROPAGATION_S
            while not await check():
                assert time.monotonic() < deadline, what
                await asyncio.sleep(0.05)

        async def listed():
            return name in await x3.list_topics()

        await eventually(listed, f"{name} listed through broker 103")
        (desc,) = await x1.describe_topics([name])
        assert desc["error_code"] == 0 and len(desc["partitions"]) == 2, desc
        # aiokafka returns Metadata v0-5's field names (partition, leader, replicas, isr)
        assert all(sorted(p["replicas"]) == [101, 102, 103] and p["leader"] in (101, 102, 103)
                   for p in desc["partitions"]), desc
        res = AioConfigResource(AioConfigResourceType.TOPIC, name, configs={"segment.ms": "900000"})
        (alter,) = await x3.alter_configs([res])
        assert set(error_codes(alter.to_object())) == {0}, alter

        async def altered():
            (r,) = await x1.describe_configs([AioConfigResource(AioConfigResourceType.TOPIC, name)])
            entries = r.to_object()["resources"][0]["config_entries"]  # aiokafka calls the name config_names
            return {e["config_names"]: e["config_value"] for e in entries}.get("segment.ms") == "900000"

        await eventually(altered, "AlterConfigs seen through broker 101")
        deleted = await x1.delete_topics([name])
        assert set(error_codes(deleted.to_object())) == {0}, deleted

        async def gone():
            return name not in await x2.list_topics()

        await eventually(gone, f"{name} gone through broker 102")
    finally:
        for x in clients:
            await x.close()


def test_clients_create_list_describe_alter_delete_through_different_brokers(cluster):
    ensure_all_running(cluster)
    kafka_python_round(cluster, "first", create_deadline_s=5)
    run(aiokafka_round(cluster, "first"), timeout=120)


def quorum_leader_from_cli(c: BrokerCluster) -> int:
    """The leader id ``kraft-metadata-quorum describe --status`` prints (the CLI, as an operator)."""
    ctl = next(n for n in c.controllers if n.alive)
    r = subprocess.run([sys.executable, "-m", "kraft_node.server.tools.metadata_quorum", "--bootstrap-controller",
                        f"127.0.0.1:{ctl.controller_port}", "describe", "--status"], capture_output=True, text=True,
                       timeout=30, cwd=REPO)
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stdout.splitlines() if x.startswith("LeaderId:")]
    return int(line.split()[1])


def test_after_kill9_of_the_active_controller_the_brokers_follow_the_new_one(cluster):
    ensure_all_running(cluster)
    leader_id = wait_until(lambda: quorum_leader_from_cli(cluster) if cluster.active_controller() else None,
                           FAILOVER_S, "a leader reported by kraft-metadata-quorum")
    old = cluster.nodes[leader_id]
    assert old.is_controller and old is cluster.active_controller()
    old.kill9()
    t0 = time.monotonic()
    try:
        kafka_python_round(cluster, "failover", create_deadline_s=FAILOVER_S)
        elapsed = time.monotonic() - t0
        new = cluster.active_controller(exclude=old)
        assert new is not old
        run(aiokafka_round(cluster, "failover"), timeout=120)
        print(f"\ncontroller {old.id} killed; kafka-python round done {elapsed:.1f}s later; new leader {new.id}")
    finally:
        old.start()
        old.wait_started(60)


def broker_registration(c: BrokerCluster, broker_id: int):
    reg = controller_image(c).cluster.brokers.get(broker_id)
    assert reg is not None, f"broker {broker_id} is not registered"
    return reg


def test_a_restarted_broker_is_a_new_incarnation_and_unfenced(cluster):
    ensure_all_running(cluster)
    b = cluster.brokers[2]
    before = wait_until(lambda: (r := broker_registration(cluster, b.id)) and not r.fenced and r, PROPAGATION_S,
                        f"{b} unfenced in the controller's image")
    assert b.stop(30) == 0, b.stderr_tail()
    b.start()
    b.wait_started(60)
    after = wait_until(lambda: (r := broker_registration(cluster, b.id)) and r.epoch != before.epoch and r,
                       PROPAGATION_S, f"{b} registered again")
    assert after.incarnation_id != before.incarnation_id
    assert after.epoch > before.epoch and not after.fenced
    assert f"Incarnation {after.incarnation_id} of broker {b.id}" in b.log()
    # every broker, the restarted one included, lists it alive (DescribeCluster, unfenced)
    for other in cluster.brokers:
        desc = wait_until(lambda o=other: (d := run(describe_cluster(o.port))) and b.id in
                          {x.broker_id for x in d.brokers} and d, PROPAGATION_S, f"{b} in {other}'s DescribeCluster")
        (entry,) = [x for x in desc.brokers if x.broker_id == b.id]
        assert entry.port == b.port and not entry.is_fenced, desc


def create_rf3(c: BrokerCluster, name: str, partitions: int) -> None:
    a = kp_admin(c.brokers[0])
    try:
        a.create_topics([kafka_admin.NewTopic(name, partitions, 3)], timeout_ms=10_000)
    finally:
        a.close()
    for b in c.brokers:
        wait_until(lambda b=b: name in topic_names(b.port), PROPAGATION_S, f"{name} on {b}")


def test_kill9_of_a_broker_fences_it_and_moves_its_leaderships(cluster):
    ensure_all_running(cluster)
    create_rf3(cluster, "fence-me", 12)
    victim, witness = cluster.brokers[1], cluster.brokers[0]
    led = [tp for tp, leader in leaders(run(metadata(witness.port, ["fence-me"]))).items() if leader == victim.id]
    assert led, "the placement gave the victim no leadership of 12 partitions"
    try:
        victim.kill9()
        t0 = time.monotonic()
        wait_until(lambda: victim.id not in alive_brokers(witness.port), PROPAGATION_S,
                   f"{victim} dropped from the alive brokers after its session timeout")
        fenced_after = time.monotonic() - t0
        assert fenced_after >= 1.0, f"fenced {fenced_after:.2f}s after kill -9: before the 2 s session could expire"
        for b in (cluster.brokers[0], cluster.brokers[2]):
            new = wait_until(lambda b=b: (m := leaders(run(metadata(b.port, ["fence-me"]))))
                             and victim.id not in m.values() and m, PROPAGATION_S, f"new leaders on {b}")
            assert all(new[tp] in (101, 103) for tp in led), new
        assert broker_registration(cluster, victim.id).fenced
    finally:
        victim.start()
        victim.wait_started(60)


def test_sigterm_of_a_leading_broker_is_a_controlled_shutdown(cluster):
    ensure_all_running(cluster)
    create_rf3(cluster, "move-me", 12)
    victim, witness = cluster.brokers[0], cluster.brokers[2]
    led = [tp for tp, leader in leaders(run(metadata(witness.port, ["move-me"]))).items() if leader == victim.id]
    assert led, "the placement gave the victim no leadership of 12 partitions"
    try:
        t0 = time.monotonic()
        victim.terminate()
        code = victim.wait_exit(victim.shutdown_timeout_s + 10)
        took = time.monotonic() - t0
        assert code == 0, victim.stderr_tail()
        log = victim.log()
        assert "Beginning controlled shutdown." in log, log[-3000:]
        assert "The controller has asked us to exit controlled shutdown." in log, log[-3000:]
        assert "stopping anyway" not in log, log[-3000:]
        # the controller approves only once the leaders moved: the other brokers show it
        for b in (cluster.brokers[1], cluster.brokers[2]):
            m = wait_until(lambda b=b: (m := leaders(run(metadata(b.port, ["move-me"]))))
                           and victim.id not in m.values() and m, PROPAGATION_S, f"leaders moved on {b}")
            assert all(m[tp] in (102, 103) for tp in led), m
        print(f"\ncontrolled shutdown of {victim}: exit 0 {took:.2f}s after SIGTERM, {len(led)} leaderships moved")
    finally:
        victim.start()
        victim.wait_started(60)
