"""A single-controller NodeConfig built in memory, with some keys changed or removed."""
from __future__ import annotations

from kraft_node.server.config import NodeConfig

#: The smallest valid controller config: node 1, one voter, one CONTROLLER listener.
BASE = {"process.roles": "controller", "node.id": "1", "controller.quorum.voters": "1@127.0.0.1:9093",
        "listeners": "CONTROLLER://127.0.0.1:9093", "controller.listener.names": "CONTROLLER",
        "log.dirs": "/unused"}


def cfg(**over: str | None) -> NodeConfig:
    """BASE with ``over`` applied (keys with dots via ``**{"a.b": v}``; None removes a key)."""
    props: dict[str, str | None] = dict(BASE)
    props.update(over)
    return NodeConfig.from_properties({k: v for k, v in props.items() if v is not None}, "server.properties")
