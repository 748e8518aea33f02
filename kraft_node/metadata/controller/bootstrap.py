"""The bootstrap metadata ``kraft-storage format`` wrote (Kafka's BootstrapMetadata).

The first active controller of an empty log appends these records (the initial
``metadata.version`` first, then the other finalized features) as its opening
metadata transaction.  Kafka reads them from the bootstrap snapshot
``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint`` when there is one
(a dynamic quorum, KIP-853) and else from the legacy ``bootstrap.checkpoint`` in the
metadata log dir (static quorums; every Kafka fixture has one).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_storage.errors import KraftStorageError
from kraft_storage.messages.metadata import FeatureLevelRecord

BOOTSTRAP_FILE = "bootstrap.checkpoint"
BOOTSTRAP_SNAPSHOT = os.path.join("__cluster_metadata-0", "00000000000000000000-0000000000.checkpoint")


class BootstrapError(KraftStorageError):
    pass


@dataclass(frozen=True)
class BootstrapMetadata:
    records: tuple[ApiMessageAndVersion, ...]
    #: where the records came from (a path, or "the test harness")
    source: str

    @property
    def metadata_version_level(self) -> int:
        for r in self.records:
            if isinstance(r.message, FeatureLevelRecord) and r.message.name == "metadata.version":
                return int(r.message.feature_level)
        raise BootstrapError(f"No FeatureLevelRecord for metadata.version found in {self.source}")

    @classmethod
    def from_records(cls, records: list[ApiMessageAndVersion], source: str) -> "BootstrapMetadata":
        b = cls(tuple(records), source)
        b.metadata_version_level  # noqa: B018 -- refuse bootstrap metadata without a metadata.version
        return b

    @classmethod
    def from_directory(cls, metadata_log_dir: str) -> "BootstrapMetadata":
        """The bootstrap snapshot if present, else ``bootstrap.checkpoint``; BootstrapError
        naming the directory when neither exists (the node was not formatted by
        kraft-storage or Kafka's kafka-storage)."""
        from kraft_storage.snapshot.records import read_bootstrap_checkpoint
        for rel in (BOOTSTRAP_SNAPSHOT, BOOTSTRAP_FILE):
            path = os.path.join(metadata_log_dir, rel)
            if not os.path.exists(path):
                continue
            try:
                with read_bootstrap_checkpoint(path) as reader:
                    records = [ApiMessageAndVersion(msg, version)
                               for _off, _key, version, msg in reader.metadata_records()]
            except KraftStorageError as exc:
                raise BootstrapError(f"{path}: cannot read the bootstrap metadata: {exc}") from None
            return cls.from_records(records, path)
        raise BootstrapError(f"{metadata_log_dir}: no bootstrap metadata ({BOOTSTRAP_FILE} or {BOOTSTRAP_SNAPSHOT}); "
                             "format the directory with kraft-storage format")
