"""The next producer id in the metadata image (Kafka's ``ProducerIdsImage`` / ``ProducerIdsDelta``).

Why: the controller hands out producer ids in blocks (ProducerIdsRecord); the image keeps only
where the next block starts, so a new controller (or a snapshot) never grants an id twice.

Rules: ``next_producer_id`` is -1 until the first block is granted (Kafka's EMPTY; ``is_empty`` is
exactly that).  A ProducerIdsRecord sets it, whoever asked (the image does not check that it
grows: the controller did when it wrote it).  Writing: one ProducerIdsRecord at version 0 with
broker id and epoch -1 (Kafka's image keeps neither), none while empty.

One deliberate difference: Kafka's ``finishSnapshot`` does nothing here, so loading a snapshot
without a ProducerIdsRecord over an image with one kept the old value.  A snapshot states the
whole image, and one without the record was taken before any grant, so ``finish_snapshot`` resets
to -1 unless the snapshot named a value (this matters for loading an *older* snapshot, as
``image_at`` does).
"""
from __future__ import annotations

from typing import Any, ClassVar

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_storage.messages.metadata import ProducerIdsRecord

__all__ = ["ProducerIdsImage", "ProducerIdsDelta"]


class ProducerIdsImage:
    """The first producer id of the next block to grant; -1 before any grant.  Immutable."""

    __slots__ = ("_next_producer_id",)

    EMPTY: ClassVar[ProducerIdsImage]

    _next_producer_id: int

    def __init__(self, next_producer_id: int = -1) -> None:
        self._next_producer_id = next_producer_id

    @property
    def next_producer_id(self) -> int:
        return self._next_producer_id

    def is_empty(self) -> bool:
        return self._next_producer_id == -1

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        if self._next_producer_id >= 0:
            writer.write(ApiMessageAndVersion(ProducerIdsRecord(
                broker_id=-1, broker_epoch=-1, next_producer_id=self._next_producer_id), 0))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerIdsImage):
            return NotImplemented
        return self._next_producer_id == other._next_producer_id

    def __hash__(self) -> int:
        return hash(self._next_producer_id)

    def __repr__(self) -> str:
        return f"ProducerIdsImage(next_producer_id={self._next_producer_id})"


ProducerIdsImage.EMPTY = ProducerIdsImage()


class ProducerIdsDelta:
    """ProducerIdsRecords replayed over ``image``: the last one wins."""

    __slots__ = ("image", "next_producer_id", "_replayed")

    def __init__(self, image: ProducerIdsImage) -> None:
        self.image = image
        self.next_producer_id = image.next_producer_id
        self._replayed = False

    def finish_snapshot(self) -> None:
        if not self._replayed:
            self.next_producer_id = -1

    def replay(self, record: Any) -> None:
        """Apply a ProducerIdsRecord; ReplayError for any other record."""
        if getattr(record, "API_KEY", None) != ProducerIdsRecord.API_KEY:
            raise ReplayError(f"ProducerIdsDelta cannot replay {type(record).__name__}")
        self.next_producer_id = int(record.next_producer_id)
        self._replayed = True

    def apply(self) -> ProducerIdsImage:
        if self.next_producer_id == self.image.next_producer_id:
            return self.image
        return ProducerIdsImage(self.next_producer_id)

    def __repr__(self) -> str:
        return f"ProducerIdsDelta(next_producer_id={self.next_producer_id})"
