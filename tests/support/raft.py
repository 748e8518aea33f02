"""Helpers shared by the TCP cluster tests (no tests here): free ports, configs, formatted dirs."""
from __future__ import annotations

import io
import os
import socket

from kraft_node.server.config import NodeConfig
from kraft_node.server.tools.storage import format_storage

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def cluster_properties(base: str, voters: int, observers: int = 0, extra: dict | None = None) -> list[str]:
    """Write server.properties for ``voters`` voters (ids 1..n) and observers (ids after);
    format every node's log dir.  Returns the config file paths, in node-id order."""
    ports = free_ports(voters + observers)
    quorum = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(voters))
    paths = []
    for i in range(voters + observers):
        nid = i + 1
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d, exist_ok=True)
        props = {
            "process.roles": "controller",
            "node.id": str(nid),
            "controller.quorum.voters": quorum,
            "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": os.path.join(d, "data"),
            "controller.quorum.election.timeout.ms": "500",
            "controller.quorum.fetch.timeout.ms": "1000",
            "controller.quorum.election.backoff.max.ms": "500",
            "controller.quorum.request.timeout.ms": "1000",
            "controller.quorum.append.linger.ms": "5",
        }
        props.update(extra or {})
        path = os.path.join(d, "server.properties")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        format_storage(NodeConfig.from_file(path), CLUSTER_ID, out=io.StringIO())
        paths.append(path)
    return paths
