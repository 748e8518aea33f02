"""server.properties parsing with Kafka's key names; clear errors naming key and file."""
import pytest

from kraft_node.server.config import ConfigError, NodeConfig, parse_voters
from kraft_storage.meta_properties import parse_properties

BASE = """
process.roles=controller
node.id=2
controller.quorum.voters=1@127.0.0.1:9001,2@127.0.0.1:9002,3@localhost:9003
listeners=CONTROLLER://127.0.0.1:9002
controller.listener.names=CONTROLLER
log.dirs=/data/a,/data/b
controller.quorum.election.timeout.ms=500
"""


def cfg(text=BASE, **over):
    props = parse_properties(text)
    props.update({k.replace("_", "."): v for k, v in over.items()})
    for k in [k for k, v in props.items() if v is None]:
        del props[k]
    return NodeConfig.from_properties(props, "server.properties")


def test_parses_kafka_keys():
    c = cfg()
    assert c.node_id == 2 and c.is_controller
    assert [(v.id, v.host, v.port) for v in c.voters] == [(1, "127.0.0.1", 9001), (2, "127.0.0.1", 9002),
                                                          (3, "localhost", 9003)]
    assert str(c.controller_endpoint) == "CONTROLLER://127.0.0.1:9002"
    assert c.metadata_log_dir == "/data/a" and c.metadata_partition_dir == "/data/a/__cluster_metadata-0"
    assert c.quorum.election_timeout_ms == 500 and c.quorum.fetch_timeout_ms == 2000


def test_dynamic_voter_syntax():
    (v,) = parse_voters("3@host:9093:Teb3PFb009qvAZgMDEFH4g")
    assert (v.id, v.host, v.port, v.directory_id) == (3, "host", 9093, "Teb3PFb009qvAZgMDEFH4g")


@pytest.mark.parametrize("over,msg", [
    ({"node.id": None}, "missing required key node.id"),
    ({"node.id": "x"}, "node.id: 'x' is not a number"),
    ({"process.roles": "zk"}, "process.roles"),
    ({"controller.quorum.voters": "1@nohostport"}, "is not host:port"),
    ({"controller.quorum.voters": "a@h:1"}, "voter id 'a' is not a number"),
    ({"controller.quorum.voters": "1@h:1,1@h:2"}, "duplicate voter ids"),
    ({"controller.quorum.voters": None}, "controller.quorum.voters or controller.quorum.bootstrap.servers"),
    ({"controller.quorum.bootstrap.servers": "h:1"}, "not both"),
    ({"listeners": "CONTROLLER://127.0.0.1:9999"}, "port 9002 but its controller listener"),
    ({"controller.listener.names": "OTHER"}, "names no entry of listeners"),
    ({"log.dirs": None}, "missing required key log.dirs"),
    ({"controller.quorum.election.timeout.ms": "soon"}, "server.properties"),
    ({"controller.quorum.bogus.ms": "1"}, "unknown quorum config"),
    ({"controller.quorum.election.timeout.ms": "0"}, "election.timeout.ms=0 is out of range"),
    ({"controller.quorum.fetch.timeout.ms": "-5"}, "fetch.timeout.ms=-5 is out of range"),
    ({"controller.quorum.request.timeout.ms": "0"}, "request.timeout.ms=0 is out of range"),
    ({"controller.quorum.append.linger.ms": "-1"}, "append.linger.ms=-1 is out of range"),
    ({"controller.quorum.fetch.timeout.ms": "9" * 20}, "fetch.timeout.ms=9+ is out of range"),
    ({"controller.quorum.retry.backoff.ms": "abc"}, "retry.backoff.ms='abc' is not an integer"),
    ({"process.roles": "broker"}, "node.id 2 is listed in controller.quorum.voters"),
])
def test_errors_name_the_key_and_file(over, msg):
    with pytest.raises(ConfigError, match=msg) as ei:
        cfg(**{k.replace(".", "_"): v for k, v in over.items()})
    assert "server.properties" in str(ei.value)


def test_zero_linger_and_backoff_are_accepted():
    c = cfg(controller_quorum_append_linger_ms="0", controller_quorum_retry_backoff_ms="0")
    assert c.quorum.append_linger_ms == 0 and c.quorum.retry_backoff_ms == 0


def test_embedded_default_is_valid():
    c = NodeConfig.default()
    assert c.is_controller and c.voters[0].id == c.node_id == 1


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="No such file"):
        NodeConfig.from_file(str(tmp_path / "nope.properties"))


@pytest.mark.parametrize("argv,env,msg", [
    (["--log-level", "bogus"], {}, "--log-level (or KRAFT_LOG_LEVEL) 'bogus' is not one of"),
    ([], {"KRAFT_EXIT_AFTER_SECONDS": "xyz"}, "KRAFT_EXIT_AFTER_SECONDS='xyz' is not a number"),
    (["--exit-after-seconds", "-1"], {}, "--exit-after-seconds must be"),
    (["--writer-interval-ms", "0"], {}, "--writer-interval-ms and --writer-batch must be at least 1"),
])
def test_server_command_line_errors_are_usage_errors(argv, env, msg, monkeypatch, capsys):
    """kraft-server-start refuses bad options with a usage error (exit 2) naming them,
    before it formats or starts anything -- not with a traceback."""
    from kraft_node.server import start as server
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(SystemExit) as ei:
        server.main(argv)
    assert ei.value.code == 2
    assert msg in capsys.readouterr().err
