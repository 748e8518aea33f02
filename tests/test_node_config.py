"""server.properties parsing with Kafka's key names; clear errors naming key and file."""
import pytest

from kraft_node.config import ConfigError, NodeConfig, parse_voters
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
])
def test_errors_name_the_key_and_file(over, msg):
    with pytest.raises(ConfigError, match=msg) as ei:
        cfg(**{k.replace(".", "_"): v for k, v in over.items()})
    assert "server.properties" in str(ei.value)


def test_embedded_default_is_valid():
    c = NodeConfig.default()
    assert c.is_controller and c.voters[0].id == c.node_id == 1


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="No such file"):
        NodeConfig.from_file(str(tmp_path / "nope.properties"))
