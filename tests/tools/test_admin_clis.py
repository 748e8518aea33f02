"""kraft-topics, kraft-configs, kraft-features and kraft-cluster, run in-process (``main([...])``)
against a real controller node over TCP (issue 24, item 8).

The node runs on its own event loop in a thread (each CLI call runs ``asyncio.run`` of its
own).  Three brokers register with the controller and heartbeat until unfenced, as in
tests/server/test_topic_apis.py.  Controllers serve no Metadata, so the tests put a small
broker stand-in in front of the node: a KafkaServer on 127.0.0.1:0 that answers Metadata
and DescribeCluster (endpoint type BROKER) from the node's published metadata image and
forwards every other API to the controller listener, as a broker forwards admin writes.
Its Metadata names itself as the address of every broker, so the CLIs' per-broker routing
lands there.  ``--bootstrap-controller`` and ``--bootstrap-server`` of the controller
listener itself are tested too.
"""
from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from support.controller import broker_heartbeat, broker_registration
from support.raft import cluster_properties

from kraft_node.network import KafkaConnection, KafkaServer
from kraft_node.protocol.api_keys import ApiKeys, answer_api_versions
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterResponse
from kraft_node.protocol.generated.metadata import MetadataResponse
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_node.server.tools import cluster, configs, features, topics

FORWARDED = (ApiKeys.CREATE_TOPICS, ApiKeys.DELETE_TOPICS, ApiKeys.CREATE_PARTITIONS, ApiKeys.DESCRIBE_CONFIGS,
             ApiKeys.INCREMENTAL_ALTER_CONFIGS, ApiKeys.LIST_PARTITION_REASSIGNMENTS, ApiKeys.UPDATE_FEATURES,
             ApiKeys.UNREGISTER_BROKER, ApiKeys.ALTER_PARTITION_REASSIGNMENTS)
TIMEOUT_S = 60


class Cluster:
    """A controller node, three registered brokers and the broker stand-in, on a thread's loop."""

    def __init__(self, base: str):
        (path,) = cluster_properties(base, 1)
        self.config = NodeConfig.from_file(path)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.node: Any = None
        self.proxy: Any = None
        self.upstream: Any = None

    def run(self, coro: Any, timeout: float = TIMEOUT_S) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def start(self) -> None:
        self.thread.start()
        self.run(self._start())

    async def _start(self) -> None:
        self.node = KraftNode.from_config(self.config, controller=True)
        await self.node.start()
        ctl = self.node.controller.controller
        deadline = time.monotonic() + 20
        while not (ctl.active and ctl.feature_control.metadata_version_or_none(epoch=ctl.last_stable_offset)):
            assert time.monotonic() < deadline, "the controller did not become active"
            await asyncio.sleep(0.02)
        self.upstream = await KafkaConnection.open("127.0.0.1", self.node.port, timeout=5)
        self.epochs = {}
        for b, rack in {0: "a", 1: "b", 2: "a"}.items():
            reg = await self.upstream.request(broker_registration(b, ctl.cluster_id, port=9092 + b, rack=rack), 4,
                                              timeout=5)
            assert reg.error_code == 0
            self.epochs[b] = reg.broker_epoch
        for b, epoch in self.epochs.items():
            while True:
                hb = await self.upstream.request(broker_heartbeat(b, epoch, epoch), 1, timeout=5)
                assert hb.error_code == 0 and time.monotonic() < deadline
                if not hb.is_fenced:
                    break
                await asyncio.sleep(0.02)
        handlers = {int(k): self._forward for k in FORWARDED}
        handlers[int(ApiKeys.METADATA)] = self._metadata
        handlers[int(ApiKeys.DESCRIBE_CLUSTER)] = self._describe_cluster
        handlers[int(ApiKeys.API_VERSIONS)] = self._api_versions
        self.proxy = KafkaServer("127.0.0.1", 0, handlers, listener="PLAINTEXT", listener_type="broker")
        await self.proxy.start()

    def stop(self) -> None:
        async def go() -> None:
            if self.proxy is not None:
                await self.proxy.close()
            if self.upstream is not None:
                await self.upstream.close()
            if self.node is not None:
                await self.node.close()
        try:
            self.run(go())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    @property
    def broker(self) -> str:
        return f"127.0.0.1:{self.proxy.port}"

    @property
    def controller(self) -> str:
        return f"127.0.0.1:{self.node.port}"

    def image(self) -> Any:
        return self.node.metadata.image()

    def wait_image(self, pred: Any, timeout: float = 10.0) -> Any:
        deadline = time.monotonic() + timeout
        while not pred(self.image()):
            assert time.monotonic() < deadline, "the image did not catch up"
            time.sleep(0.02)
        return self.image()

    # ------------------------------------------------------------ the broker stand-in
    async def _forward(self, ctx: Any, body: Any) -> Any:
        return await self.upstream.request(body, ctx.api_version, 20)

    async def _api_versions(self, ctx: Any, body: Any) -> Any:
        """The controller's answer (its features) with this stand-in's own API list."""
        upstream = await self.upstream.request(ApiVersionsRequest(), 4, 5)
        resp, _ = answer_api_versions(
            body, ctx.api_version, "broker", only=self.proxy.advertised_api_keys(),
            supported_features=[(f.name, f.min_version, f.max_version) for f in upstream.supported_features],
            finalized_features=[(f.name, f.min_version_level, f.max_version_level)
                                for f in upstream.finalized_features],
            finalized_features_epoch=upstream.finalized_features_epoch)
        return resp

    def _brokers(self, cls: Any) -> list[Any]:
        return [cls(node_id=b, host="127.0.0.1", port=self.proxy.port, rack=reg.rack)
                for b, reg in sorted(self.image().cluster.brokers.items())]

    def _metadata(self, ctx: Any, body: Any) -> Any:
        R = MetadataResponse
        image = self.image()
        by_name = image.topics.topics_by_name
        names = sorted(by_name) if not body.topics else [t.name for t in body.topics]
        out = []
        for name in names:
            t = by_name.get(name)
            if t is None:
                out.append(R.MetadataResponseTopic(error_code=int(Errors.UNKNOWN_TOPIC_OR_PARTITION), name=name,
                                                   partitions=[]))
                continue
            parts = [R.MetadataResponsePartition(error_code=0, partition_index=pid, leader_id=p.leader,
                                                 leader_epoch=p.leader_epoch, replica_nodes=list(p.replicas),
                                                 isr_nodes=list(p.isr), offline_replicas=[])
                     for pid, p in sorted(t.partitions.items())]
            out.append(R.MetadataResponseTopic(error_code=0, name=name, topic_id=t.topic_id, is_internal=False,
                                               partitions=parts, topic_authorized_operations=-2147483648))
        return R(brokers=self._brokers(R.MetadataResponseBroker), cluster_id=self.node.cluster_id, controller_id=0,
                 topics=out)

    def _describe_cluster(self, ctx: Any, body: Any) -> Any:
        R = DescribeClusterResponse
        return R(error_code=0, endpoint_type=1, cluster_id=self.node.cluster_id, controller_id=0,
                 brokers=self._brokers(lambda node_id, **kw: R.DescribeClusterBroker(broker_id=node_id, **kw)))


@pytest.fixture(scope="module")
def kc(tmp_path_factory):
    c = Cluster(str(tmp_path_factory.mktemp("admin_clis")))
    c.start()
    try:
        yield c
    finally:
        c.stop()


def _run(capsys, tool, *args) -> tuple[int, str, str]:
    code = tool.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# ---------------------------------------------------------------------- kraft-topics
def test_topics_create_list_describe_alter_delete(kc, capsys):
    b = kc.broker
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--create", "--topic", "orders",
                          "--partitions", "3", "--replication-factor", "3", "--config", "cleanup.policy=compact")
    assert (code, out, err) == (0, "Created topic orders.\n", "")
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--create", "--topic", "orders",
                          "--partitions", "1", "--replication-factor", "1")
    assert (code, out) == (1, "")
    assert err == "Error while executing topic command : Topic 'orders' already exists.\n"
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--create", "--topic", "orders",
                          "--partitions", "1", "--if-not-exists")
    assert (code, out, err) == (0, "", "")
    code, out, _ = _run(capsys, topics, "--bootstrap-server", b, "--create", "--topic", "pay_ments",
                        "--replica-assignment", "0:1,1:2")
    assert code == 0 and out.splitlines()[-1] == "Created topic pay_ments."
    assert out.startswith("WARNING: Due to limitations in metric names")
    image = kc.wait_image(lambda im: {"orders", "pay_ments"} <= set(im.topics.topics_by_name))

    code, out, _ = _run(capsys, topics, "--bootstrap-server", b, "--list")
    assert (code, out) == (0, "orders\npay_ments\n")
    code, out, _ = _run(capsys, topics, "--bootstrap-server", b, "--list", "--topic", "ord.*")
    assert (code, out) == (0, "orders\n")

    orders = image.topics.get_topic_by_name("orders")
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--describe", "--topic", "orders")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == (f"Topic: orders\tTopicId: {orders.topic_id}\tPartitionCount: 3\tReplicationFactor: 3\t"
                        "Configs: cleanup.policy=compact")
    assert len(lines) == 4
    for pid, line in enumerate(lines[1:]):
        p = orders.partitions[pid]
        ids = ",".join(str(r) for r in p.replicas)
        assert line == (f"\tTopic: orders\tPartition: {pid}\tLeader: {p.leader}\tReplicas: {ids}"
                        f"\tIsr: {','.join(str(r) for r in p.isr)}\tElr: \tLastKnownElr: ")
    code, out, _ = _run(capsys, topics, "--bootstrap-server", b, "--describe", "--topic", "pay_ments")
    assert out.splitlines()[1:] == ["\tTopic: pay_ments\tPartition: 0\tLeader: 0\tReplicas: 0,1\tIsr: 0,1"
                                    "\tElr: \tLastKnownElr: ",
                                    "\tTopic: pay_ments\tPartition: 1\tLeader: 1\tReplicas: 1,2\tIsr: 1,2"
                                    "\tElr: \tLastKnownElr: "]
    code, out, _ = _run(capsys, topics, "--bootstrap-server", b, "--describe", "--topics-with-overrides")
    assert [line.split("\t")[0] for line in out.splitlines()] == ["Topic: orders"]
    code, out, _ = _run(capsys, topics, "--bootstrap-server", b, "--describe", "--topic-id", str(orders.topic_id))
    assert code == 0 and out.splitlines()[0].startswith("Topic: orders\t")

    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", "5")
    assert (code, out, err) == (0, "", "")
    kc.wait_image(lambda im: len(im.topics.get_topic_by_name("orders").partitions) == 5)
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--alter", "--topic", "orders", "--partitions", "2")
    assert code == 1
    assert err.startswith("Error while executing topic command : ") and "5" in err and err.count("\n") == 1

    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--delete", "--topic", "pay_ments")
    assert (code, out, err) == (0, "", "")
    kc.wait_image(lambda im: im.topics.get_topic_by_name("pay_ments") is None)
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--delete", "--topic", "pay_ments")
    assert (code, err) == (1, "Error while executing topic command : Topic 'pay_ments' does not exist as expected\n")
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--delete", "--topic", "pay_ments", "--if-exists")
    assert (code, out, err) == (0, "", "")
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--describe", "--topic", "nope")
    assert (code, err) == (1, "Error while executing topic command : Topic 'nope' does not exist as expected\n")


def test_topics_argument_errors(kc, capsys):
    b = kc.broker
    cases = [
        (["--bootstrap-server", b, "--list", "--create"],
         "kraft-topics: Command must include exactly one action: --list, --describe, --create, --alter or --delete"),
        (["--list"], "--bootstrap-server must be specified"),
        (["--bootstrap-server", b, "--create"], 'kraft-topics: Missing required argument "[topic]"'),
        (["--bootstrap-server", b, "--alter", "--topic", "x"],
         'kraft-topics: Missing required argument "[partitions]"'),
        (["--bootstrap-server", b, "--list", "--partitions", "3"],
         'kraft-topics: Option "[partitions]" can\'t be used with option "[list]"'),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--replica-assignment", "1:2", "--partitions", "2"],
         'kraft-topics: Option "[replica-assignment]" can\'t be used with option "[partitions]"'),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--replication-factor", "0"],
         "Error while executing topic command : The replication factor must be between 1 and 32767 inclusive"),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--partitions", "0"],
         "Error while executing topic command : The partitions must be greater than 0"),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--replica-assignment", "1:1"],
         "Error while executing topic command : Partition replica lists may not contain duplicate entries: 1"),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--replica-assignment", "0:1,2"],
         "Error while executing topic command : Partition 1 has different replication factor: [2]"),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--config", "a=b=c"],
         'Error while executing topic command : requirement failed: Invalid topic config: all configs to be added '
         'must be in the format "key=val".'),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--replication-factor", "9"],
         "Error while executing topic command : Unable to replicate the partition 9 time(s): The target "
         "replication factor of 9 cannot be reached because only 3 broker(s) are registered."),
        (["--bootstrap-server", b, "--create", "--topic", "x", "--config", "not.a.config=1"], None),
        (["--bootstrap-server", "nohost", "--list"],
         "kraft-topics: 'nohost' is not host:port (a port from 1 to 65535)"),
    ]
    for args, expected in cases:
        code, out, err = _run(capsys, topics, *args)
        assert code == 1, (args, out, err)
        assert err.count("\n") == 1 and "Traceback" not in err, (args, err)
        if expected is not None:
            assert err == expected + "\n" or err == expected.replace("kraft-topics: ", "Error while executing topic "
                                                                     "command : ") + "\n", (args, err)
        else:
            assert err.startswith("Error while executing topic command : "), err
    assert kc.image().topics.get_topic_by_name("x") is None


def test_connection_errors_are_one_line(tmp_path, capsys):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    start = time.monotonic()
    code, out, err = _run(capsys, topics, "--bootstrap-server", f"127.0.0.1:{port}", "--list")
    assert code == 1 and out == ""
    assert err == f"Error while executing topic command : 127.0.0.1:{port}: connection refused\n"
    assert time.monotonic() - start < 10
    code, out, err = _run(capsys, cluster, "--bootstrap-server", f"127.0.0.1:{port}", "cluster-id")
    assert code == 1 and err == f"127.0.0.1:{port}: connection refused\n"
    code, out, err = _run(capsys, features, "--bootstrap-server", f"127.0.0.1:{port}", "describe")
    assert code == 1 and err == f"127.0.0.1:{port}: connection refused\n"
    cfg = tmp_path / "missing.properties"
    code, out, err = _run(capsys, configs, "--bootstrap-server", f"127.0.0.1:{port}", "--command-config", str(cfg),
                          "--entity-type", "topics", "--describe")
    assert code == 1 and err == f"Properties file {cfg} does not exist.\n"
