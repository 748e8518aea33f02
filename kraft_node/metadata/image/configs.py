"""Dynamic configurations in the metadata image (Kafka's ``ConfigurationsImage`` / ``ConfigurationImage``
and their deltas).

Why: brokers apply dynamic broker, topic, client-metrics and group configs from the metadata log;
the image holds every resource's key -> value overrides, as the ConfigRecords left them.

Rules (Kafka's): a ConfigRecord with a null value deletes the key; a resource whose last key is
deleted disappears (the image never holds an empty ConfigurationImage); a resource type id Kafka
does not define reads as UNKNOWN (never an error).  A RemoveTopicRecord deletes the topic's
configs (:meth:`ConfigurationsDelta.delete_topic`, called by the MetadataDelta).

One deliberate difference: Kafka's ``replay(RemoveTopicRecord)`` only clears the configs the
*image* holds, so a topic created, configured and deleted within one delta would keep its configs
-- and the final image would depend on where the loader cut its deltas.  Here ``delete_topic``
clears them whichever delta they came from, as the controller's ``delete_topic_configs`` does.

Structural sharing: the resource map is an ``immutables.Map`` patched per changed resource; each
resource's own map (a handful of keys) is rebuilt only when one of its keys changes.  Writing:
one ConfigRecord (version 0, the only one) per key, by resource (type id, name) then key -- the
order of the controller's ``snapshot_records``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import immutables

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages.metadata import ConfigRecord

__all__ = ["ConfigurationImage", "ConfigurationDelta", "ConfigurationsImage", "ConfigurationsDelta"]

#: ConfigRecord.ResourceType id -> type (a dict look-up: the enum's own call costs a microsecond a record)
_RESOURCE_TYPES: dict[int, ConfigResourceType] = {t.value: t for t in ConfigResourceType}


class ConfigurationImage:
    """One resource's configs: key -> value (never None).  Immutable; equal by value."""

    __slots__ = ("_resource", "_data")

    _resource: ConfigResource
    _data: immutables.Map[str, str]

    def __init__(self, resource: ConfigResource, data: Mapping[str, str] | None = None) -> None:
        self._resource = resource
        self._data = freeze(data)

    @property
    def resource(self) -> ConfigResource:
        return self._resource

    @property
    def data(self) -> immutables.Map[str, str]:
        return self._data

    def is_empty(self) -> bool:
        return not self._data

    def to_dict(self) -> dict[str, str]:
        """A mutable copy (Kafka's ``toProperties``)."""
        return dict(self._data)

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        resource = self._resource
        for name in sorted(self._data):
            writer.write(ApiMessageAndVersion(ConfigRecord(
                resource_type=int(resource.type), resource_name=resource.name, name=name, value=self._data[name]), 0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigurationImage):
            return NotImplemented
        return self._resource == other._resource and self._data == other._data

    def __hash__(self) -> int:
        return hash((self._resource, self._data))

    def __repr__(self) -> str:
        # the values stay out: a sensitive config (a password) must not reach a log by mistake
        return f"ConfigurationImage({self._resource}, keys={sorted(self._data)})"


class ConfigurationDelta:
    """ConfigRecords of one resource replayed over ``image``: key -> new value, or None for deleted."""

    __slots__ = ("image", "changes")

    def __init__(self, image: ConfigurationImage) -> None:
        self.image = image
        self.changes: dict[str, str | None] = {}

    def finish_snapshot(self) -> None:
        for name in self.image.data:
            self.changes.setdefault(name, None)

    def replay(self, record: Any) -> None:
        self.changes[record.name] = record.value

    def delete_all(self) -> None:
        """Every key removed, including those set earlier in this delta."""
        self.changes = dict.fromkeys(self.image.data)

    def apply(self) -> ConfigurationImage:
        image = self.image
        data = apply_changes(image.data, self.changes)
        return image if data is image.data else ConfigurationImage(image.resource, data)

    def __repr__(self) -> str:
        return f"ConfigurationDelta({self.image.resource}, changed_keys={sorted(self.changes)})"


class ConfigurationsImage:
    """Every resource's configs: ConfigResource -> ConfigurationImage (never an empty one)."""

    __slots__ = ("_data",)

    EMPTY: ClassVar[ConfigurationsImage]

    _data: immutables.Map[ConfigResource, ConfigurationImage]

    def __init__(self, data: Mapping[ConfigResource, ConfigurationImage] | None = None) -> None:
        self._data = freeze(data)

    @property
    def resource_data(self) -> immutables.Map[ConfigResource, ConfigurationImage]:
        return self._data

    def is_empty(self) -> bool:
        return not self._data

    def config_map_for_resource(self, resource: ConfigResource) -> Mapping[str, str]:
        """The resource's own overrides (no defaults, no inherited values); empty when it has none."""
        image = self._data.get(resource)
        return image.data if image is not None else immutables.Map()

    def config_properties(self, resource: ConfigResource) -> dict[str, str]:
        """A mutable copy of the resource's overrides (Kafka's ``configProperties``)."""
        image = self._data.get(resource)
        return image.to_dict() if image is not None else {}

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for resource in sorted(self._data):
            self._data[resource].write(writer, options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConfigurationsImage):
            return NotImplemented
        return self._data == other._data

    def __hash__(self) -> int:
        return hash(self._data)

    def __repr__(self) -> str:
        return f"ConfigurationsImage([{', '.join(repr(self._data[r]) for r in sorted(self._data))}])"


ConfigurationsImage.EMPTY = ConfigurationsImage()


class ConfigurationsDelta:
    """ConfigRecords (and topic deletions) replayed over ``image``, one ConfigurationDelta per resource touched."""

    __slots__ = ("image", "changes")

    def __init__(self, image: ConfigurationsImage) -> None:
        self.image = image
        self.changes: dict[ConfigResource, ConfigurationDelta] = {}

    def _delta_for(self, resource: ConfigResource) -> ConfigurationDelta:
        delta = self.changes.get(resource)
        if delta is None:
            image = self.image.resource_data.get(resource)
            delta = ConfigurationDelta(image if image is not None else ConfigurationImage(resource))
            self.changes[resource] = delta
        return delta

    def finish_snapshot(self) -> None:
        """A snapshot re-states every config: the image's resources and keys it did not name are removed."""
        for resource in self.image.resource_data:
            self._delta_for(resource).finish_snapshot()

    def replay(self, record: Any) -> None:
        """Apply a ConfigRecord (value None: delete the key); ReplayError for any other record."""
        if getattr(record, "API_KEY", None) != ConfigRecord.API_KEY:
            raise ReplayError(f"ConfigurationsDelta cannot replay {type(record).__name__}")
        resource = ConfigResource(_RESOURCE_TYPES.get(record.resource_type, ConfigResourceType.UNKNOWN),
                                  record.resource_name)
        self._delta_for(resource).replay(record)

    def delete_topic(self, name: str) -> None:
        """A RemoveTopicRecord: the topic's configs go, whether in the image or set in this delta."""
        resource = ConfigResource.topic(name)
        if resource in self.changes or resource in self.image.resource_data:
            self._delta_for(resource).delete_all()

    def apply(self) -> ConfigurationsImage:
        image = self.image
        updates: dict[ConfigResource, ConfigurationImage | None] = {}
        for resource, delta in self.changes.items():
            new = delta.apply()
            updates[resource] = None if new.is_empty() else new
        data = apply_changes(image.resource_data, updates)
        return image if data is image.resource_data else ConfigurationsImage(data)

    def __repr__(self) -> str:
        return f"ConfigurationsDelta({list(self.changes.values())!r})"
