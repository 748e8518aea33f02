"""Writing an image as metadata records (Kafka's ``ImageWriter`` and ``ImageWriterOptions``).

Why: a snapshot is an image written as records.  The writer is told the
``metadata.version`` to write for; state that version has no record for is a
*loss*.  Kafka's rule, kept here: a loss is never silent.  Each sub-image
reports it through :meth:`ImageWriterOptions.handle_loss`, which calls the
options' ``loss_handler`` or, with none, raises :class:`UnwritableMetadataError`
("Metadata has been lost because the following could not be represented in
metadata.version X: <what>").

Writers: :class:`RecordListWriter` collects the records (tests, ``diff``), the
snapshot writers of :mod:`kraft_node.metadata.loader` frame them into a
``.checkpoint``.  ``close(complete)`` says whether the image was written whole.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kraft_node.metadata.controller.replication_control import UnwritableMetadataError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion

__all__ = ["ImageWriter", "ImageWriterOptions", "RecordListWriter", "UnwritableMetadataError"]


class ImageWriter(Protocol):
    """Where an image's records go, in the order the sub-images write them."""

    def write(self, record: ApiMessageAndVersion) -> None: ...

    def close(self, complete: bool) -> None: ...


@dataclass(frozen=True)
class ImageWriterOptions:
    """What to write for: ``metadata_version`` (the image's own by default, see
    :meth:`for_image`), and what to do with a loss (``None``: raise)."""
    metadata_version: MetadataVersion
    loss_handler: Callable[[str], None] | None = None
    #: the metadata.version the image had when it was written (Kafka's ``requestedMetadataVersion``
    #: vs the image's): a downgrade writer may need both
    image_metadata_version: MetadataVersion | None = None

    def handle_loss(self, loss: str) -> None:
        """Report state that ``metadata_version`` cannot carry (``loss`` names it, in Kafka's words)."""
        if self.loss_handler is None:
            raise UnwritableMetadataError(self.metadata_version, loss)
        self.loss_handler(loss)


class RecordListWriter:
    """Collects the records in memory (Kafka's test ``RecordListWriter``)."""

    def __init__(self) -> None:
        self.records: list[ApiMessageAndVersion] = []
        self.closed = False
        self.complete = False

    def write(self, record: ApiMessageAndVersion) -> None:
        if self.closed:
            raise RuntimeError("RecordListWriter: write after close")
        self.records.append(record)

    def close(self, complete: bool) -> None:
        self.closed = True
        self.complete = complete
