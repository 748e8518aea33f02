"""Messages that say what and where (issue 19, Deliver 6 and 8; the Why's items 5 and 7).

* port 0 is refused where peers need a fixed address, naming the key;
* a host that does not resolve is named with its port and the key it came from
  (the node's own listener at start; a peer's address in a WARNING, once), never
  a bare "[Errno -2] Name or service not known";
* a non-UTF-8 properties file is named, with the byte position;
* ``kraft-metadata-quorum`` against a refused port fails within ~1-2 s saying
  "connection refused" with host:port (it waited ~11 s and said "timed out").
"""
from __future__ import annotations

import asyncio
import logging
import time

import pytest
from support.config import cfg
from support.raft import cluster_properties, free_ports

from kraft_node.network import ConnectFailed, KafkaConnection, KafkaServer
from kraft_node.server.config import ConfigError, NodeConfig
from kraft_node.server.node import KraftNode
from kraft_node.server.tools import metadata_quorum

BAD_HOST = "no-such-host.invalid"  # RFC 2606: never resolves



@pytest.mark.parametrize("over,key", [
    ({"controller.quorum.voters": "1@127.0.0.1:9093,2@127.0.0.1:0"}, "controller.quorum.voters"),
    ({"controller.quorum.voters": None, "controller.quorum.bootstrap.servers": "127.0.0.1:0"},
     "controller.quorum.bootstrap.servers"),
    ({"controller.quorum.voters": None, "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
      "listeners": "CONTROLLER://127.0.0.1:0"}, "listeners"),
])
def test_port_zero_is_refused_where_a_fixed_address_is_needed(over, key):
    with pytest.raises(ConfigError, match="port 0") as ei:
        cfg(**over)
    assert key in str(ei.value) and "server.properties" in str(ei.value)


def test_port_zero_is_fine_for_an_observer_of_a_static_quorum():
    c = cfg(**{"node.id": "5", "listeners": "CONTROLLER://127.0.0.1:0"})
    assert c.controller_endpoint.port == 0


def test_a_non_utf8_properties_file_is_named_with_the_byte_position(tmp_path, capsys):
    path = tmp_path / "server.properties"
    path.write_bytes(b"process.roles=controller\nnode.id=1\n# caf\xe9\n")
    with pytest.raises(ConfigError) as ei:
        NodeConfig.from_file(str(path))
    assert str(ei.value) == (f"{path}: not a UTF-8 properties file: byte 0xe9 at byte position 40 (line 3) "
                             "is not valid UTF-8")
    from kraft_node.server import start as server
    assert server.main([str(path)]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "byte position 40" in err and "Traceback" not in err


def test_a_listener_host_that_does_not_resolve_is_named_with_the_key():
    async def go():
        s = KafkaServer(BAD_HOST, 9093, {}, listener="CONTROLLER")
        with pytest.raises(OSError) as ei:
            await s.start()
        return str(ei.value)
    msg = asyncio.run(go())
    assert f"cannot listen on CONTROLLER://{BAD_HOST}:9093 (listeners): host '{BAD_HOST}' does not resolve" in msg
    assert "Errno" not in msg


@pytest.mark.parametrize("host,reason,text", [(BAD_HOST, "unresolved", f"host '{BAD_HOST}' does not resolve"),
                                              ("127.0.0.1", "refused", "connection refused")])
def test_a_failed_connection_names_host_port_and_what_happened(host, reason, text):
    port = free_ports(1)[0]

    async def go():
        with pytest.raises(ConnectFailed) as ei:
            await KafkaConnection.open(host, port, timeout=5)
        return ei.value
    exc = asyncio.run(go())
    assert exc.reason == reason
    assert str(exc).startswith(f"{host}:{port}: {text}")
    assert isinstance(exc, OSError)  # callers that catch OSError still do


def test_a_peer_whose_host_does_not_resolve_is_logged_once_with_the_key(tmp_path, caplog):
    path = cluster_properties(str(tmp_path), 1)[0]
    port = NodeConfig.from_file(path).controller_endpoint.port
    text = open(path).read().replace(f"controller.quorum.voters=1@127.0.0.1:{port}",
                                     f"controller.quorum.voters=1@127.0.0.1:{port},2@{BAD_HOST}:9093")
    with open(path, "w") as f:
        f.write(text)

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(path))
        await node.start()
        try:
            await asyncio.sleep(2.5)  # a few elections: each asks node 2 for its vote
        finally:
            await node.close()
    with caplog.at_level(logging.WARNING, logger="kraft.raft"):
        asyncio.run(asyncio.wait_for(go(), 30))
    lines = [r.getMessage() for r in caplog.records if BAD_HOST in r.getMessage()]
    assert lines == [f"node 1: cannot connect to node 2 (address from controller.quorum.voters): "
                     f"{BAD_HOST}:9093: host '{BAD_HOST}' does not resolve" + lines[0].split("does not resolve")[1]]
    assert "Errno" not in lines[0]


def test_metadata_quorum_says_connection_refused_within_two_seconds(capsys):
    port = free_ports(1)[0]
    t0 = time.monotonic()
    rc = metadata_quorum.main(["--bootstrap-controller", f"127.0.0.1:{port}", "describe", "--status"])
    took = time.monotonic() - t0
    err = capsys.readouterr().err
    assert rc == 1
    assert took < 2.5, took
    assert f"127.0.0.1:{port}: connection refused" in err and "timed out" not in err
    assert err.count("\n") == 1


def test_metadata_quorum_names_a_host_that_does_not_resolve(capsys):
    t0 = time.monotonic()
    rc = metadata_quorum.main(["--bootstrap-controller", f"{BAD_HOST}:9093", "describe", "--status"])
    err = capsys.readouterr().err
    assert rc == 1 and time.monotonic() - t0 < 5
    assert f"{BAD_HOST}:9093: host '{BAD_HOST}' does not resolve" in err and "Errno" not in err
