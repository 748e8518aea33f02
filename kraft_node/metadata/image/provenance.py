"""Where an image came from (Kafka's ``MetadataProvenance``).

``last_contained_offset`` / ``last_contained_epoch`` / ``last_contained_log_time_ms``
are those of the last record folded into the image; ``is_offset_batch_aligned`` is
true when that offset ends a Raft batch (an image taken inside a batch -- a split
point of the intermediate-images tests -- cannot be written as a snapshot whose id
Kafka would accept).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["MetadataProvenance"]


@dataclass(frozen=True, slots=True)
class MetadataProvenance:
    last_contained_offset: int
    last_contained_epoch: int
    last_contained_log_time_ms: int
    is_offset_batch_aligned: bool = False

    EMPTY: ClassVar["MetadataProvenance"]

    def snapshot_id(self) -> tuple[int, int]:
        """Kafka's ``snapshotId()``: (end offset, epoch) of the snapshot this image would be."""
        return (self.last_contained_offset + 1, self.last_contained_epoch)

    def snapshot_name(self) -> str:
        """Kafka's ``snapshotName()``: ``snapshot <end offset>-<epoch>`` as a checkpoint file is named."""
        return f"snapshot {self.last_contained_offset + 1:020d}-{self.last_contained_epoch:010d}"


MetadataProvenance.EMPTY = MetadataProvenance(-1, -1, -1, False)
