"""What a config belongs to and what an incremental alter does to it: Kafka's ``ConfigResource``
and ``AlterConfigOp.OpType``.

Why here (not in the controller): the config definitions, the validators, the controller's
``ConfigurationControlManager`` and the broker's DescribeConfigs/AlterConfigs handlers all name
resources the same way; ``kraft_node.metadata.controller.configuration_control`` re-exports them.

Byte layouts: ``ConfigRecord.ResourceType`` and the AlterConfigs/DescribeConfigs
``ResourceType`` are the ``ConfigResourceType`` ids (int8); IncrementalAlterConfigs'
``ConfigOperation`` is the ``AlterConfigOp`` id (int8: 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT).
"""
from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["ConfigResourceType", "ConfigResource", "AlterConfigOp", "DEFAULT_NODE"]


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (the ConfigRecord.ResourceType byte)."""
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def for_id(cls, type_id: int) -> ConfigResourceType:
        """The type for an id; UNKNOWN for one Kafka does not define (never an error)."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN


class ConfigResource(NamedTuple):
    """What a config belongs to: ``(type, name)``; broker ``""`` is the cluster default."""
    type: ConfigResourceType
    name: str

    def __str__(self) -> str:
        return f"ConfigResource(type={self.type.name}, name='{self.name}')"

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, name: str) -> ConfigResource:
        """A broker's configs by id as text; ``""`` is the cluster-wide default."""
        return cls(ConfigResourceType.BROKER, name)

    @property
    def is_cluster_default(self) -> bool:
        return self.type is ConfigResourceType.BROKER and self.name == ""


#: Kafka's ``ConfigurationControlManager.DEFAULT_NODE``: the cluster-wide broker defaults.
DEFAULT_NODE = ConfigResource.broker("")


class AlterConfigOp(enum.IntEnum):
    """``AlterConfigOp.OpType``: SET a value, DELETE the key, APPEND to / SUBTRACT from a LIST
    (its elements split on ``,``; APPEND skips present elements, SUBTRACT removes the first
    occurrence of each)."""
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3

    @classmethod
    def for_id(cls, op_id: int) -> AlterConfigOp | None:
        """The operation for a wire id, None for an id Kafka does not define."""
        try:
            return cls(op_id)
        except ValueError:
            return None
