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
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest, CreateTopicsResponse
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
        #: the stand-in answers the next CreateTopics with NOT_CONTROLLER (a broker whose
        #: controller moved), or leaves every request unanswered (a hung broker)
        self.not_controller_once = False
        self.stall = False

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
        if self.stall:
            await asyncio.sleep(30)
        if self.not_controller_once and isinstance(body, CreateTopicsRequest):
            self.not_controller_once = False
            R = CreateTopicsResponse
            return R(topics=[R.CreatableTopicResult(name=t.name, error_code=int(Errors.NOT_CONTROLLER))
                             for t in body.topics])
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


# ---------------------------------------------------------------------- kraft-configs
def test_configs_describe_and_alter_topics_and_brokers(kc, capsys):
    b, ctl = kc.broker, kc.controller
    assert _run(capsys, topics, "--bootstrap-server", b, "--create", "--topic", "cfg", "--partitions", "1",
                "--replication-factor", "1")[0] == 0
    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg",
                          "--alter", "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    assert (code, out, err) == (0, "Completed updating config for topic cfg.\n", "")
    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg",
                          "--describe")
    assert (code, err) == (0, "")
    assert out == ("Dynamic configs for topic cfg are:\n"
                   "  cleanup.policy=compact,delete sensitive=false "
                   "synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}\n"
                   "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}\n")
    # the same through the controller listener (--bootstrap-controller), and --topic, the short form
    code, out2, _ = _run(capsys, configs, "--bootstrap-controller", ctl, "--topic", "cfg", "--describe")
    assert (code, out2) == (0, out)
    code, out, _ = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg",
                        "--describe", "--all")
    assert code == 0 and out.startswith("All configs for topic cfg are:\n")
    entries = [line.split(" ")[2] for line in out.splitlines()[1:]]
    assert entries == sorted(entries) and len(entries) > 20
    assert "\n  min.insync.replicas=1 sensitive=false synonyms={" in out  # a default: listed only with --all

    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg",
                          "--alter", "--delete-config", "retention.ms")
    assert (code, out) == (0, "Completed updating config for topic cfg.\n")
    code, out, _ = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg",
                        "--describe")
    assert [line.split("=")[0] for line in out.splitlines()] == ["Dynamic configs for topic cfg are:",
                                                                 "  cleanup.policy"]
    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg",
                          "--alter", "--delete-config", "retention.ms,nope")
    assert (code, out, err) == (1, "", "Invalid config(s): retention.ms,nope\n")
    args = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "cfg", "--alter", "--add-config",
            "bogus.key=1"]
    code, out, err = _run(capsys, configs, *args)
    assert (code, out) == (1, "")
    assert err == f"Error while executing config command with args '{' '.join(args)}': Unknown topic config name: " \
                  "bogus.key\n"
    args = ["--bootstrap-server", b, "--entity-type", "topics", "--entity-name", "nope", "--describe"]
    code, out, err = _run(capsys, configs, *args)
    assert (code, err) == (1, f"Error while executing config command with args '{' '.join(args)}': "
                              "The topic 'nope' does not exist.\n")

    # brokers: the cluster default and one broker (routed to that broker)
    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "brokers", "--entity-default",
                          "--alter", "--add-config", "log.retention.ms=5000")
    assert (code, out, err) == (0, "Completed updating default config for brokers in the cluster.\n", "")
    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--broker", "1", "--alter", "--add-config",
                          "log.cleaner.threads=2")
    assert (code, out, err) == (0, "Completed updating config for broker 1.\n", "")
    code, out, err = _run(capsys, configs, "--bootstrap-server", b, "--entity-type", "brokers", "--describe")
    assert (code, err) == (0, "")
    assert out == ("Dynamic configs for broker 0 are:\n"
                   "Dynamic configs for broker 1 are:\n"
                   "  log.cleaner.threads=2 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.cleaner.threads=2, "
                   "DEFAULT_CONFIG:log.cleaner.threads=1}\n"
                   "Dynamic configs for broker 2 are:\n"
                   "Default configs for brokers in the cluster are:\n"
                   "  log.retention.ms=5000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
                   "log.retention.ms=5000}\n")


def test_configs_argument_errors(kc, capsys, tmp_path):
    b = kc.broker
    bad_file = tmp_path / "add.properties"
    bad_file.write_text("ok.key=1\n")
    cases = [
        (["--bootstrap-server", b, "--entity-type", "topics"],
         "kraft-configs: Command must include exactly one action: --describe, --alter"),
        (["--bootstrap-server", b, "--entity-type", "topics", "--describe", "--add-config", "a=b"],
         'kraft-configs: Option "[describe]" can\'t be used with option "[add-config]"'),
        (["--bootstrap-server", b, "--describe"], "At least one entity type must be specified"),
        (["--bootstrap-server", b, "--entity-type", "users", "--describe"],
         "Entity type users is not supported by kraft-configs yet (topics and brokers are)"),
        (["--bootstrap-server", b, "--entity-type", "widgets", "--describe"],
         "Invalid entity type widgets, the entity type must be one of topics, clients, users, brokers, ips, "
         "broker-loggers, client-metrics, groups with a --bootstrap-server or --bootstrap-controller argument"),
        (["--bootstrap-server", b, "--entity-type", "topics", "--entity-type", "topics", "--describe"],
         "Duplicate entity type(s) specified: topics"),
        (["--entity-type", "topics", "--describe"],
         "One of the required --bootstrap-server or --bootstrap-controller arguments must be specified"),
        (["--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "x", "--describe"],
         "The entity name for brokers must be a valid integer broker id, but it is: x"),
        (["--bootstrap-server", b, "--entity-type", "topics", "--entity-default", "--describe"],
         "--entity-default must not be specified with --describe of topics"),
        (["--bootstrap-server", b, "--entity-type", "topics", "--alter", "--add-config", "a=1"],
         "An entity name must be specified with --alter of topics"),
        (["--bootstrap-server", b, "--entity-type", "brokers", "--alter", "--add-config", "a=1"],
         "An entity-name or default entity must be specified with --alter of users, clients, brokers or ips"),
        (["--bootstrap-server", b, "--topic", "cfg", "--alter"],
         "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"),
        (["--bootstrap-server", b, "--topic", "cfg", "--alter", "--add-config", "a=1", "--add-config-file",
          str(bad_file)], "Only one of --add-config or --add-config-file must be specified"),
        (["--bootstrap-server", b, "--topic", "cfg", "--entity-type", "topics", "--describe"],
         "Duplicate entity type(s) specified: topics"),
        (["--bootstrap-server", b, "--topic", "cfg", "--alter", "--add-config", "a=1,b"],
         'requirement failed: Invalid entity config: all configs to be added must be in the format "key=val".'),
        (["--bootstrap-server", b, "--topic", "cfg", "--alter", "--add-config", "a$b=1"],
         "Invalid character found for config key: a$b"),
        (["--bootstrap-server", b, "--topic", "bad/name", "--describe"],
         "Topic name is invalid: 'bad/name' contains one or more characters other than ASCII alphanumerics, '.', "
         "'_' and '-'"),
    ]
    for args, expected in cases:
        code, out, err = _run(capsys, configs, *args)
        assert (code, out, err) == (1, "", expected + "\n"), args


# ---------------------------------------------------------------------- kraft-features
def test_features_describe_and_changes(kc, capsys):
    b, ctl = kc.broker, kc.controller
    from kraft_node.metadata.versions import MetadataVersion, supported_features
    image = kc.image()
    finalized = dict(image.features.finalized_versions)
    code, out, err = _run(capsys, features, "--bootstrap-controller", ctl, "describe")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    names = [line.split("\t")[0] for line in lines]
    assert names == [f"Feature: {n}" for n in sorted(supported_features())] and len(names) > 1
    mv = next(line for line in lines if line.startswith("Feature: metadata.version\t"))
    fields = mv.split("\t")
    assert fields[1:3] == [f"SupportedMinVersion: {MetadataVersion.MINIMUM_VERSION.name}",
                           f"SupportedMaxVersion: {MetadataVersion.LATEST_PRODUCTION.name}"]
    level = image.features.metadata_version().name
    assert fields[3] == f"FinalizedVersionLevel: {level}"
    assert fields[4].startswith("Epoch: ") and int(fields[4][7:]) >= 0
    for line in lines:
        name = line.split("\t")[0][len("Feature: "):]
        if name != "metadata.version":
            assert line.split("\t")[3] == f"FinalizedVersionLevel: {finalized.get(name, 0)}"
    # the same lines (but the epoch) through the broker stand-in
    code, out2, _ = _run(capsys, features, "--bootstrap-server", b, "describe")
    assert code == 0
    assert [line.rsplit("\t", 1)[0] for line in out2.splitlines()] == [line.rsplit("\t", 1)[0] for line in lines]

    code, out, err = _run(capsys, features, "--bootstrap-server", b, "downgrade", "--metadata", "3.3-IV3", "--dry-run")
    assert code == 1 and err == "1 out of 1 operation(s) failed.\n"
    assert out.splitlines()[0] == " `metadata` flag is deprecated and may be removed in a future release."
    assert out.splitlines()[1].startswith("Can not downgrade metadata.version to 7. ")
    assert "Refusing to perform the requested downgrade" in out
    code, out, err = _run(capsys, features, "--bootstrap-controller", ctl, "upgrade", "--feature", "group.version=1",
                          "--dry-run")
    assert (code, out, err) == (0, "group.version can be upgraded to 1.\n", "")
    code, out, err = _run(capsys, features, "--bootstrap-controller", ctl, "upgrade", "--feature", "foo.bar=1")
    assert code == 1 and out.startswith("Could not upgrade foo.bar to 1. ") and out.count("\n") == 1
    assert err == "1 out of 1 operation(s) failed.\n"
    for args, expected in [
        (["upgrade", "--feature", "x"], "Can't parse feature=level string x: equals sign not found."),
        (["upgrade", "--feature", "x=y"], "Can't parse feature=level string x=y: unable to parse y as a short."),
        (["upgrade", "--feature", "a=1", "--feature", "a=2"], "Feature a was specified more than once."),
        (["upgrade", "--release-version", "3.9", "--feature", "a=1"],
         "Can not specify `release-version` with other feature flags."),
        (["upgrade"], "You must specify at least one feature to upgrade"),
        (["upgrade", "--metadata", "9.9"], "Unknown metadata.version 9.9. Supported metadata.version are "
         + MetadataVersion.metadata_versions_to_string(MetadataVersion.MINIMUM_VERSION,
                                                       MetadataVersion.LATEST_PRODUCTION)),
    ]:
        code, out, err = _run(capsys, features, "--bootstrap-controller", ctl, *args)
        assert (code, err) == (1, expected + "\n"), args
    code, out, err = _run(capsys, features, "--bootstrap-server", b, "--bootstrap-controller", ctl, "describe")
    assert (code, err) == (1, "You cannot specify both --bootstrap-controller and --bootstrap-server.\n")
    code, out, _ = _run(capsys, features, "--bootstrap-server", b, "version-mapping", "--release-version", "3.9-IV0")
    assert code == 0 and out.splitlines()[0] == "metadata.version=21 (3.9-IV0)"


# ---------------------------------------------------------------------- kraft-cluster
def test_cluster_id_and_unregister(kc, capsys):
    b, ctl = kc.broker, kc.controller
    want = f"Cluster ID: {kc.node.cluster_id}\n"
    assert _run(capsys, cluster, "--bootstrap-server", b, "cluster-id") == (0, want, "")
    assert _run(capsys, cluster, "cluster-id", "--bootstrap-controller", ctl) == (0, want, "")
    assert _run(capsys, cluster, "cluster-id", "-b", b) == (0, want, "")

    async def register() -> None:
        reg = await kc.upstream.request(broker_registration(3, kc.node.cluster_id, port=9095), 4, timeout=5)
        assert reg.error_code == 0
    kc.run(register())
    kc.wait_image(lambda im: im.cluster.broker(3) is not None)
    assert _run(capsys, cluster, "unregister", "--bootstrap-server", b, "--id", "3") == \
        (0, "Broker 3 is no longer registered.\n", "")
    kc.wait_image(lambda im: im.cluster.broker(3) is None)
    code, out, err = _run(capsys, cluster, "unregister", "--bootstrap-controller", ctl, "--id", "9")
    assert (code, out, err) == (1, "", "BrokerIdNotRegisteredException: The given broker ID was not registered.\n")
    code, out, err = _run(capsys, cluster, "cluster-id")
    assert (code, err) == (1, "You must specify either --bootstrap-controller or --bootstrap-server.\n")


def test_command_config(kc, capsys, tmp_path):
    cfg = tmp_path / "admin.properties"
    cfg.write_text("request.timeout.ms=5000\ndefault.api.timeout.ms=8000\nlinger.ms=5\n")
    code, out, err = _run(capsys, cluster, "--bootstrap-server", kc.broker, "--config", str(cfg), "cluster-id")
    assert code == 0 and out == f"Cluster ID: {kc.node.cluster_id}\n"
    assert err == f"WARNING: {cfg}: linger.ms is not used by kraft's admin client (ignored)\n"
    cfg.write_text("security.protocol=SASL_SSL\n")
    code, out, err = _run(capsys, topics, "--bootstrap-server", kc.broker, "--command-config", str(cfg), "--list")
    assert code == 1
    assert err == (f"Error while executing topic command : {cfg}: security.protocol=SASL_SSL is not supported: "
                   "kraft does not implement SASL\n")
    cfg.write_text("request.timeout.ms=soon\n")
    code, out, err = _run(capsys, features, "--bootstrap-server", kc.broker, "--command-config", str(cfg), "describe")
    assert (code, err) == (1, f"{cfg}: request.timeout.ms='soon' is not a number of milliseconds\n")


def test_topics_through_a_controller_listener(kc, capsys):
    """A controller listener serves the writes but no Metadata: create works, list says why it cannot."""
    ctl = kc.controller
    code, out, err = _run(capsys, topics, "--bootstrap-server", ctl, "--create", "--topic", "viactl",
                          "--partitions", "2", "--replication-factor", "2")
    assert (code, out, err) == (0, "Created topic viactl.\n", "")
    kc.wait_image(lambda im: im.topics.get_topic_by_name("viactl") is not None)
    code, out, err = _run(capsys, topics, "--bootstrap-server", ctl, "--list")
    assert code == 1 and err == (f"Error while executing topic command : {ctl} is a listener without Metadata: "
                                 "listing or describing topics needs a broker (--bootstrap-server of a broker "
                                 "listener)\n")


def test_retries_and_timeouts(kc, capsys, tmp_path):
    b = kc.broker
    kc.not_controller_once = True
    code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--create", "--topic", "retried",
                          "--partitions", "1")
    assert (code, out, err) == (0, "Created topic retried.\n", "")
    assert not kc.not_controller_once  # the first answer was NOT_CONTROLLER: the client asked again
    cfg = tmp_path / "fast.properties"
    cfg.write_text("request.timeout.ms=300\ndefault.api.timeout.ms=1000\n")
    kc.stall = True
    try:
        start = time.monotonic()
        code, out, err = _run(capsys, topics, "--bootstrap-server", b, "--command-config", str(cfg), "--create",
                              "--topic", "stalled")
        assert time.monotonic() - start < 5
    finally:
        kc.stall = False
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith("Error while executing topic command : timed out after 1s: CreateTopicsRequest to "), err


def test_help_exits_zero(capsys):
    for tool in (topics, configs, features, cluster):
        assert tool.main(["--help"]) == 0
        out, err = capsys.readouterr()
        assert out.startswith("usage: kraft-") and err == ""
