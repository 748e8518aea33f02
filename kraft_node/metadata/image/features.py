"""The finalized feature levels of the metadata image (Kafka's ``FeaturesImage`` / ``FeaturesDelta``).

Why an image of its own: ``metadata.version`` decides how every other record is read and
written, and the other finalized features (``transaction.version``, ``group.version``,
``eligible.leader.replicas.version``, ...) gate broker behaviour.  Publishers want to know
when they change, so the delta keeps the changes apart from the image they apply to.

Kafka 4 rules, kept here:

* An empty image has **no** metadata.version (``metadata_version()`` is ``None``;
  :meth:`FeaturesImage.metadata_version_or_throw` raises).  Kafka 3.x defaulted an empty image to
  3.0-IV1; Kafka 4 (whose oldest level is 3.3-IV3) made it optional, and kraft follows Kafka 4.
* ``metadata.version`` is not kept in ``finalized_versions``: it is the image's
  ``metadata_version``.  A FeatureLevelRecord for it at levels 4..7 (pre-release 3.3 levels a
  cluster may still have in its log) reads as 3.3-IV3, as Kafka 4's FeaturesDelta does.
* ``kraft.version`` is not kept either: it lives in the Raft log (KRaftVersionRecord); a stray
  FeatureLevelRecord for it is skipped, as the controller skips it (KAFKA-18979), so an image and the
  controller's state write the same snapshot.
* A level of 0 removes a feature: ``finalized_versions`` never holds a 0.

Writing: the metadata.version record first, at version 0 and at the *target*
``options.metadata_version`` (a reader needs it before anything else, and any reader can read
v0), then the other features by name.  Kafka 4 has no loss here: every level it can write at
(3.3-IV3 and later) carries FeatureLevelRecords.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import immutables

from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image._changes import apply_changes, freeze
from kraft_node.metadata.image.writer import ImageWriter, ImageWriterOptions
from kraft_node.metadata.versions import (
    ELIGIBLE_LEADER_REPLICAS_VERSION,
    KRAFT_VERSION,
    METADATA_VERSION_FEATURE_NAME,
    MetadataVersion,
)
from kraft_storage.messages.metadata import FeatureLevelRecord

__all__ = ["FeaturesImage", "FeaturesDelta", "UnknownMetadataVersionError"]

#: Kafka's FeaturesDelta.MINIMUM_PERSISTED_FEATURE_LEVEL: the first metadata.version level ever
#: written to a log (3.3-IV0); levels from here up to 3.3-IV3 read as 3.3-IV3.
_MINIMUM_PERSISTED_FEATURE_LEVEL = 4


class UnknownMetadataVersionError(RuntimeError):
    """The image has no metadata.version yet (Kafka's IllegalStateException from ``metadataVersionOrThrow``)."""


class FeaturesImage:
    """Finalized feature levels (name -> level > 0, never metadata.version or kraft.version) and the
    metadata.version, or None before any was replayed.  Immutable; equal by value."""

    __slots__ = ("_finalized_versions", "_metadata_version")

    EMPTY: ClassVar[FeaturesImage]

    _finalized_versions: immutables.Map[str, int]
    _metadata_version: MetadataVersion | None

    def __init__(self, finalized_versions: Mapping[str, int] | None = None,
                 metadata_version: MetadataVersion | None = None) -> None:
        self._finalized_versions = freeze(finalized_versions)
        self._metadata_version = metadata_version

    # -- reads ----------------------------------------------------------------------------------

    @property
    def finalized_versions(self) -> immutables.Map[str, int]:
        return self._finalized_versions

    def metadata_version(self) -> MetadataVersion | None:
        """The finalized metadata.version; None for an image that has none yet (Kafka 4's Optional)."""
        return self._metadata_version

    def metadata_version_or_throw(self) -> MetadataVersion:
        mv = self._metadata_version
        if mv is None:
            raise UnknownMetadataVersionError(f"Unknown metadata version for FeaturesImage: {self!r}")
        return mv

    def finalized_version(self, name: str) -> int:
        """A feature's finalized level; 0 when it is not finalized (metadata.version: its level)."""
        if name == METADATA_VERSION_FEATURE_NAME:
            return self._metadata_version.feature_level if self._metadata_version is not None else 0
        return self._finalized_versions.get(name, 0)

    def is_elr_enabled(self) -> bool:
        """eligible.leader.replicas.version >= 1 (Kafka's ``isElrEnabled``)."""
        return self._finalized_versions.get(ELIGIBLE_LEADER_REPLICAS_VERSION.name, 0) >= 1

    def is_empty(self) -> bool:
        return not self._finalized_versions and self._metadata_version is None

    # -- writing --------------------------------------------------------------------------------

    def write(self, writer: ImageWriter, options: ImageWriterOptions) -> None:
        """metadata.version (the target's level) first, then every other feature by name, all at v0."""
        writer.write(ApiMessageAndVersion(FeatureLevelRecord(
            name=METADATA_VERSION_FEATURE_NAME, feature_level=options.metadata_version.feature_level), 0))
        for name in sorted(self._finalized_versions):
            if name != METADATA_VERSION_FEATURE_NAME:
                writer.write(ApiMessageAndVersion(
                    FeatureLevelRecord(name=name, feature_level=self._finalized_versions[name]), 0))

    # -- value ----------------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FeaturesImage):
            return NotImplemented
        return (self._metadata_version is other._metadata_version
                and self._finalized_versions == other._finalized_versions)

    def __hash__(self) -> int:
        return hash((self._metadata_version, self._finalized_versions))

    def __repr__(self) -> str:
        levels = ", ".join(f"{n}={self._finalized_versions[n]}" for n in sorted(self._finalized_versions))
        return f"FeaturesImage(metadata_version={self._metadata_version}, finalized_versions={{{levels}}})"


FeaturesImage.EMPTY = FeaturesImage()


class FeaturesDelta:
    """FeatureLevelRecords replayed over ``image``.  ``changes``: name -> new level, or None for a
    feature removed (level 0, or not re-stated by a snapshot)."""

    __slots__ = ("image", "changes", "_metadata_version")

    def __init__(self, image: FeaturesImage) -> None:
        self.image = image
        self.changes: dict[str, int | None] = {}
        #: the last metadata.version replayed into this delta (None: none was)
        self._metadata_version: MetadataVersion | None = None

    def metadata_version_change(self) -> MetadataVersion | None:
        """The metadata.version this delta moves to, when it differs from the image's (else None)."""
        mv = self._metadata_version
        if mv is None or mv is self.image.metadata_version():
            return None
        return mv

    def finish_snapshot(self) -> None:
        """A snapshot re-states every feature: those of the image it did not name are removed.
        (metadata.version stays as it is when the snapshot has no record for it: every snapshot
        Kafka 4 writes has one.)"""
        changes = self.changes
        for name in self.image.finalized_versions:
            if name not in changes:
                changes[name] = None

    def replay(self, record: Any) -> None:
        """Apply a FeatureLevelRecord; ReplayError for any other record or an unknown metadata.version level."""
        if getattr(record, "API_KEY", None) != FeatureLevelRecord.API_KEY:
            raise ReplayError(f"FeaturesDelta cannot replay {type(record).__name__}")
        name, level = record.name, int(record.feature_level)
        if name == METADATA_VERSION_FEATURE_NAME:
            if _MINIMUM_PERSISTED_FEATURE_LEVEL <= level <= MetadataVersion.IBP_3_3_IV3.feature_level:
                self._metadata_version = MetadataVersion.IBP_3_3_IV3
            else:
                try:
                    self._metadata_version = MetadataVersion.from_feature_level(level)
                except ValueError as exc:
                    raise ReplayError(f"Unable to replay {record!r}: {exc}") from None
        elif name == KRAFT_VERSION.name:
            return
        else:
            self.changes[name] = level if level != 0 else None

    def apply(self) -> FeaturesImage:
        image = self.image
        finalized = apply_changes(image.finalized_versions, self.changes)
        mv = self._metadata_version if self._metadata_version is not None else image.metadata_version()
        if finalized is image.finalized_versions and mv is image.metadata_version():
            return image
        return FeaturesImage(finalized, mv)

    def __repr__(self) -> str:
        changes = ", ".join(f"{n}={self.changes[n]}" for n in sorted(self.changes))
        return f"FeaturesDelta(changes={{{changes}}}, metadata_version={self._metadata_version})"
