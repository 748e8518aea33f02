"""Client quotas in the metadata image (Kafka's ``ClientQuotasImage`` / ``ClientQuotaImage`` and their deltas).

Why: brokers enforce produce/fetch/request/connection quotas per entity (a user, a client id, an
IP, or a user and client id together, or their defaults); the image holds each entity's
key -> value quotas as the ClientQuotaRecords left them.

Rules (Kafka's): a record with ``remove`` set drops one key; an entity whose last key goes
disappears (the image never holds an empty ClientQuotaImage).  Entities are the controller's
:class:`~kraft_node.metadata.controller.security_control.ClientQuotaEntity` (type -> name, None for
the type's default; equal whatever order a record listed the types in).

Writing: one ClientQuotaRecord (version 0, ``remove`` false) per (entity, key), entities in the
controller's ``snapshot_records`` order (by type, default first, then name) and keys by name.
Structural sharing: the entity map is an ``immutables.Map`` patched per changed entity.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import immutables

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import ClientQuotaEntity
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages.metadata import ClientQuotaRecord

__all__ = ["ClientQuotaImage", "ClientQuotaDelta", "ClientQuotasImage", "ClientQuotasDelta", "ClientQuotaEntity"]


class ClientQuotaImage:
    """One entity's quotas: key -> value.  Immutable; equal by value."""

    __slots__ = ("_quotas",)

    EMPTY: ClassVar[ClientQuotaImage]

    _quotas: immutables.Map[str, float]

    def __init__(self, quotas: Mapping[str, float] | None = None) -> None:
        self._quotas = freeze(quotas)

    @property
    def quotas(self) -> immutables.Map[str, float]:
        return self._quotas

    def is_empty(self) -> bool:
        return not self._quotas

    def write(self, entity: ClientQuotaEntity, writer: ImageWriter, options: ImageWriterOptions) -> None:
        entity_data = entity.to_entity_data()
        for key in sorted(self._quotas):
            writer.write(ApiMessageAndVersion(ClientQuotaRecord(
                entity=entity_data, key=key, value=self._quotas[key], remove=False), 0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClientQuotaImage):
            return NotImplemented
        return self._quotas == other._quotas

    def __hash__(self) -> int:
        return hash(self._quotas)

    def __repr__(self) -> str:
        return f"ClientQuotaImage({{{', '.join(f'{k}={self._quotas[k]}' for k in sorted(self._quotas))}}})"


ClientQuotaImage.EMPTY = ClientQuotaImage()


class ClientQuotaDelta:
    """ClientQuotaRecords of one entity replayed over ``image``: key -> new value, or None for removed."""

    __slots__ = ("image", "changes")

    def __init__(self, image: ClientQuotaImage) -> None:
        self.image = image
        self.changes: dict[str, float | None] = {}

    def finish_snapshot(self) -> None:
        for key in self.image.quotas:
            self.changes.setdefault(key, None)

    def replay(self, record: Any) -> None:
        self.changes[record.key] = None if record.remove else float(record.value)

    def apply(self) -> ClientQuotaImage:
        quotas = apply_changes(self.image.quotas, self.changes)
        return self.image if quotas is self.image.quotas else ClientQuotaImage(quotas)


class ClientQuotasImage:
    """Every entity's quotas: ClientQuotaEntity -> ClientQuotaImage (never an empty one)."""

    __slots__ = ("_entities",)

    EMPTY: ClassVar[ClientQuotasImage]

    _entities: immutables.Map[ClientQuotaEntity, ClientQuotaImage]

    def __init__(self, entities: Mapping[ClientQuotaEntity, ClientQuotaImage] | None = None) -> None:
        self._entities = freeze(entities)

    @property
    def entities(self) -> immutables.Map[ClientQuotaEntity, ClientQuotaImage]:
        return self._entities

    def quotas(self, entity: ClientQuotaEntity) -> Mapping[str, float]:
        """The entity's quotas; empty when it has none."""
        image = self._entities.get(entity)
        return image.quotas if image is not None else ClientQuotaImage.EMPTY.quotas

    def is_empty(self) -> bool:
        return not self._entities

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        for entity in sorted(self._entities, key=ClientQuotaEntity.sort_key):
            self._entities[entity].write(entity, writer, options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ClientQuotasImage):
            return NotImplemented
        return self._entities == other._entities

    def __hash__(self) -> int:
        return hash(self._entities)

    def __repr__(self) -> str:
        entries = ", ".join(f"{e!r}: {self._entities[e]!r}"
                            for e in sorted(self._entities, key=ClientQuotaEntity.sort_key))
        return f"ClientQuotasImage({{{entries}}})"


ClientQuotasImage.EMPTY = ClientQuotasImage()


class ClientQuotasDelta:
    """ClientQuotaRecords replayed over ``image``, one ClientQuotaDelta per entity touched."""

    __slots__ = ("image", "changes")

    def __init__(self, image: ClientQuotasImage) -> None:
        self.image = image
        self.changes: dict[ClientQuotaEntity, ClientQuotaDelta] = {}

    def _delta_for(self, entity: ClientQuotaEntity) -> ClientQuotaDelta:
        delta = self.changes.get(entity)
        if delta is None:
            delta = ClientQuotaDelta(self.image.entities.get(entity, ClientQuotaImage.EMPTY))
            self.changes[entity] = delta
        return delta

    def finish_snapshot(self) -> None:
        """A snapshot re-states every quota: the image's entities and keys it did not name are removed."""
        for entity in self.image.entities:
            self._delta_for(entity).finish_snapshot()

    def replay(self, record: Any) -> None:
        """Apply a ClientQuotaRecord; ReplayError for any other record."""
        if getattr(record, "API_KEY", None) != ClientQuotaRecord.API_KEY:
            raise ReplayError(f"ClientQuotasDelta cannot replay {type(record).__name__}")
        self._delta_for(ClientQuotaEntity.from_record(record)).replay(record)

    def apply(self) -> ClientQuotasImage:
        updates: dict[ClientQuotaEntity, ClientQuotaImage | None] = {}
        for entity, delta in self.changes.items():
            new = delta.apply()
            updates[entity] = None if new.is_empty() else new
        entities = apply_changes(self.image.entities, updates)
        return self.image if entities is self.image.entities else ClientQuotasImage(entities)

    def __repr__(self) -> str:
        changes = ", ".join(f"{e!r}: {d.changes!r}" for e, d in self.changes.items())
        return f"ClientQuotasDelta({{{changes}}})"
