"""The example configs under config/ stay valid: they parse, and the cluster's files agree."""
from __future__ import annotations

from conftest import REPO

from kraft_node.server.config import NodeConfig

CONFIG = REPO / "config"


def test_single_node_example_parses():
    cfg = NodeConfig.from_file(str(CONFIG / "server.properties"))
    assert cfg.is_controller and [v.id for v in cfg.voters] == [cfg.node_id]
    assert cfg.controller_endpoint.port == cfg.voters[0].port


def test_three_controller_example_is_one_consistent_quorum():
    cfgs = [NodeConfig.from_file(str(p)) for p in sorted((CONFIG / "cluster").glob("controller-*.properties"))]
    assert [c.node_id for c in cfgs] == [1, 2, 3]
    voters = {(v.id, v.host, v.port) for v in cfgs[0].voters}
    for c in cfgs:
        assert {(v.id, v.host, v.port) for v in c.voters} == voters
        ep = c.controller_endpoint
        assert (c.node_id, ep.host, ep.port) in voters
    assert len({c.log_dirs[0] for c in cfgs}) == 3  # one directory each


def test_single_node_example_is_a_combined_node_on_kafkas_ports():
    cfg = NodeConfig.from_file(str(CONFIG / "server.properties"))
    assert cfg.roles == {"broker", "controller"}
    assert [(e.name, e.port) for e in cfg.advertised_listeners] == [("PLAINTEXT", 9092)]
    assert cfg.unused_keys() == []


def test_the_example_brokers_join_the_example_quorum_on_distinct_ports():
    controllers = [NodeConfig.from_file(str(p)) for p in sorted((CONFIG / "cluster").glob("controller-*.properties"))]
    brokers = [NodeConfig.from_file(str(p)) for p in sorted((CONFIG / "cluster").glob("broker-*.properties"))]
    assert [b.node_id for b in brokers] == [4, 5, 6]
    voters = {(v.id, v.host, v.port) for v in controllers[0].voters}
    ports = set()
    for b in brokers:
        assert b.roles == {"broker"} and {(v.id, v.host, v.port) for v in b.voters} == voters
        assert b.unused_keys() == []
        ports.update(e.port for e in b.listeners)
    assert len(ports) == 3 and not ports & {v[2] for v in voters}
    assert len({b.log_dirs[0] for b in brokers} | {c.log_dirs[0] for c in controllers}) == 6
