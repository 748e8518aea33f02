"""Kafka's ConfigurationControlManager, replay side: the dynamic configs of topics, brokers,
broker loggers, client-metrics subscriptions and groups.

Why the shape: Kafka keeps ``TimelineHashMap<ConfigResource, TimelineHashMap<String, String>>``
and every config read the controller serves (DescribeConfigs, a topic's
``min.insync.replicas`` during AlterPartition, the cluster defaults under broker ``""``)
looks a resource up and then a key, at the last committed offset.  Nested timeline maps give
both lookups at any registry epoch, and a revert undoes uncommitted changes to either level.

Invariants:

* a resource is present iff it has at least one key (the last key's removal removes it),
  so "no dynamic config" reads the same whether it never had one or lost its last;
* a ConfigRecord with a null value deletes the key (a delete of an absent key is a no-op,
  as in Kafka);
* the resource type is Kafka's ``ConfigResource.Type.forId``: an id it does not know maps
  to ``UNKNOWN`` (and is written back as 0 in a snapshot, as Kafka's image writer does).

The write side (IncrementalAlterConfigs, LegacyAlterConfigs, topic-creation configs,
policies and the config schema) comes with the next issue and reads this state.
"""
from __future__ import annotations

import enum
import logging
from typing import Any, Iterator, NamedTuple

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap

log = logging.getLogger("kraft.controller.configs")


class ConfigResourceType(enum.IntEnum):
    """Kafka's ConfigResource.Type ids (the ConfigRecord.ResourceType byte)."""
    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def for_id(cls, type_id: int) -> "ConfigResourceType":
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
    def topic(cls, name: str) -> "ConfigResource":
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, name: str) -> "ConfigResource":
        """A broker's configs by id as text; ``""`` is the cluster-wide default."""
        return cls(ConfigResourceType.BROKER, name)


class ConfigurationControlManager:
    """Dynamic configs: the state and its replay (see the module doc)."""

    RECORD_TYPES: tuple[type, ...] = (m.ConfigRecord,)

    def __init__(self, snapshot_registry: Any) -> None:
        self.registry = snapshot_registry
        #: ConfigResource -> TimelineHashMap of name -> value
        self.config_data = TimelineHashMap(snapshot_registry)

    # ------------------------------------------------------------------ replay
    def replay(self, message: Any, offset: int) -> None:
        """Set (or, value None, delete) one key of one resource."""
        if message.API_KEY != m.ConfigRecord.API_KEY:
            raise ReplayError(f"ConfigurationControlManager cannot replay {type(message).__name__}")
        resource = ConfigResource(ConfigResourceType.for_id(message.resource_type), message.resource_name)
        configs = self.config_data.get(resource)
        if message.value is None:
            if configs is not None:
                configs.remove(message.name)
                if configs.is_empty():
                    self.config_data.remove(resource)
        else:
            if configs is None:
                configs = TimelineHashMap(self.registry)
                self.config_data.put(resource, configs)
            configs.put(message.name, message.value)
        # Values are not logged: without the config schema a password cannot be told apart.
        log.info("Replayed ConfigRecord for %s which %s configuration %s", resource,
                 "removed" if message.value is None else "set", message.name)

    def delete_topic_configs(self, name: str) -> None:
        """Forget a deleted topic's configs (ReplicationControlManager's RemoveTopicRecord
        replay calls this: Kafka writes no ConfigRecords for a topic deletion)."""
        self.config_data.remove(ConfigResource.topic(name))

    # ------------------------------------------------------------------ reads
    def configs(self, resource: ConfigResource, *, epoch: int = LATEST_EPOCH) -> dict[str, str]:
        """The dynamic configs of ``resource`` (empty when it has none)."""
        configs = self.config_data.get(resource, epoch=epoch)
        return {} if configs is None else dict(configs.to_dict(epoch))

    def config(self, resource: ConfigResource, name: str, *, epoch: int = LATEST_EPOCH) -> str | None:
        """One key's value, or None when it is not set dynamically."""
        configs = self.config_data.get(resource, epoch=epoch)
        return None if configs is None else configs.get(name, epoch=epoch)

    def resources(self, *, epoch: int = LATEST_EPOCH) -> list[ConfigResource]:
        """Every resource with at least one dynamic config."""
        return list(self.config_data.keys(epoch))

    def all_configs(self, *, epoch: int = LATEST_EPOCH) -> dict[ConfigResource, dict[str, str]]:
        return {r: dict(c.to_dict(epoch)) for r, c in self.config_data.items(epoch)}

    # ------------------------------------------------------------------ snapshot
    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """One ConfigRecord (version 0, the only one) per key, as Kafka's ConfigurationsImage
        writes them; sorted by resource type id, resource name, key (deterministic bytes).
        ``metadata_version`` changes nothing here; it is accepted so every manager's
        ``snapshot_records`` takes the same arguments."""
        for resource, configs in sorted(self.config_data.items(epoch)):
            for name, value in sorted(configs.items(epoch)):
                yield ApiMessageAndVersion(m.ConfigRecord(resource_type=int(resource.type),
                                                          resource_name=resource.name, name=name, value=value), 0)
