"""What one publication carries besides the delta and the image (Kafka's ``LoaderManifest``s).

Why: a publisher must know whether it sees the log's tail (a :class:`LogDeltaManifest`: the
leader at that moment, how many batches and bytes went into the delta -- what the snapshot
generator counts) or a whole snapshot (a :class:`SnapshotManifest`: everything was re-stated,
so a publisher that keeps derived state rebuilds it).  Both carry the provenance of the new
image and the time the loader spent building it.

Beyond Kafka: ``num_records`` (both) and ``num_batches`` (snapshots), the record and batch
counts issue 23 asks of a manifest.  They are ordinary fields: two manifests are equal when
every field is (Kafka's equality has only the fields Kafka has).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Union

from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.raft.messages import LeaderAndEpoch

__all__ = ["LoaderManifestType", "LogDeltaManifest", "SnapshotManifest", "LoaderManifest", "UNKNOWN_LEADER"]

#: No leader known yet (Kafka's ``LeaderAndEpoch.UNKNOWN``: no id, epoch 0).
UNKNOWN_LEADER = LeaderAndEpoch(-1, 0)


class LoaderManifestType(enum.Enum):
    LOG_DELTA = "LOG_DELTA"
    SNAPSHOT = "SNAPSHOT"

    def __str__(self) -> str:
        return self.value


def _check_counts(kind: str, **counts: int) -> None:
    for name, value in counts.items():
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{kind}: {name} must be an int >= 0, not {value!r}")


@dataclass(frozen=True, slots=True)
class LogDeltaManifest:
    """A delta folded from committed batches: ``num_batches`` batches of ``num_bytes`` bytes holding
    ``num_records`` metadata records, loaded in ``elapsed_ns``, while ``leader_and_epoch`` led.

    When a transaction starts inside a batch the delta before it is published at once with
    ``num_batches == num_bytes == 0`` (the batch is counted in the delta that ends it), as Kafka."""
    provenance: MetadataProvenance
    leader_and_epoch: LeaderAndEpoch
    num_batches: int
    elapsed_ns: int
    num_bytes: int
    num_records: int = 0

    type: ClassVar[LoaderManifestType] = LoaderManifestType.LOG_DELTA

    def __post_init__(self) -> None:
        _check_counts("LogDeltaManifest", num_batches=self.num_batches, elapsed_ns=self.elapsed_ns,
                      num_bytes=self.num_bytes, num_records=self.num_records)


@dataclass(frozen=True, slots=True)
class SnapshotManifest:
    """A snapshot (or, for a publisher just installed, the whole current image written out) loaded
    in ``elapsed_ns``: ``num_records`` records in ``num_batches`` batches."""
    provenance: MetadataProvenance
    elapsed_ns: int
    num_records: int = 0
    num_batches: int = 0

    type: ClassVar[LoaderManifestType] = LoaderManifestType.SNAPSHOT

    def __post_init__(self) -> None:
        _check_counts("SnapshotManifest", elapsed_ns=self.elapsed_ns, num_records=self.num_records,
                      num_batches=self.num_batches)


#: What a publisher receives with each delta and image.
LoaderManifest = Union[LogDeltaManifest, SnapshotManifest]
