"""Configs for clusters with brokers (issue 24): controllers, brokers and combined nodes on
127.0.0.1, every log dir formatted (``kraft-storage format``, as Kafka formats brokers too)."""
from __future__ import annotations

import io
import os

from kraft_node.server.config import NodeConfig
from kraft_node.server.tools.storage import format_storage
from support.raft import CLUSTER_ID, free_ports

#: Raft timeouts short enough for tests (the same as support.raft's quorum configs)
FAST_RAFT = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "500",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.append.linger.ms": "5",
    # a broker heartbeats every 200 ms and is fenced after 2 s without one
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "2000",
}


def cluster_with_brokers(base: str, controllers: int = 1, brokers: int = 0, *, combined: bool = False,
                         extra: dict | None = None, broker_extra: dict | None = None) -> dict[int, str]:
    """Write and format the configs of ``controllers`` controllers (ids 1..c; with
    ``combined``, each is a broker too) and ``brokers`` broker-only nodes (ids 101..).
    Returns ``node id -> server.properties path``; a node's broker port is in its
    ``listeners`` (``PLAINTEXT://127.0.0.1:P``)."""
    ports = free_ports(2 * controllers + brokers)
    quorum = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(controllers))
    out: dict[int, str] = {}
    for i in range(controllers + brokers):
        is_controller = i < controllers
        nid = i + 1 if is_controller else 100 + (i - controllers + 1)
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d, exist_ok=True)
        if is_controller:
            roles = "broker,controller" if combined else "controller"
            listeners = f"CONTROLLER://127.0.0.1:{ports[i]}"
            if combined:
                listeners = f"PLAINTEXT://127.0.0.1:{ports[controllers + i]},{listeners}"
        else:
            roles = "broker"
            listeners = f"PLAINTEXT://127.0.0.1:{ports[controllers + i]}"
        props = {"process.roles": roles, "node.id": str(nid), "controller.quorum.voters": quorum,
                 "listeners": listeners, "controller.listener.names": "CONTROLLER",
                 "log.dirs": os.path.join(d, "data"), **FAST_RAFT}
        props.update(extra or {})
        if "broker" in roles:
            props.update(broker_extra or {})
        path = os.path.join(d, "server.properties")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        format_storage(NodeConfig.from_file(path), CLUSTER_ID, out=io.StringIO())
        out[nid] = path
    return out


def broker_port(path: str) -> int:
    """The PLAINTEXT (client) port of the node whose config is at ``path``."""
    cfg = NodeConfig.from_file(path)
    return next(e.port for e in cfg.broker_listeners)
