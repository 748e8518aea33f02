"""The metadata loader (issue 23): committed Raft data into images, published to subsystems.

* :class:`MetadataLoader` (``loader.py``) -- the RaftListener: snapshots and committed batches
  into :class:`~kraft_node.metadata.image.metadata_image.MetadataImage`\\ s, published once caught up;
* :class:`MetadataBatchLoader` (``batch_loader.py``) -- batches into deltas, metadata transactions;
* manifests (``manifest.py``), the publisher protocol (``publisher.py``), fault handlers
  (``faults.py``), metrics (``metrics.py``);
* the publishers a node installs (``publishers.py``): SnapshotGenerator and SnapshotEmitter,
  FeaturesPublisher, DynamicConfigPublisher, MetadataCachePublisher,
  ControllerRegistrationsPublisher.
"""
from __future__ import annotations

from kraft_node.metadata.loader.batch_loader import MetadataBatchLoader, TransactionState
from kraft_node.metadata.loader.faults import (
    FaultHandler,
    FaultHandlerError,
    LoggingFaultHandler,
    RecordingFaultHandler,
)
from kraft_node.metadata.loader.loader import MetadataLoader
from kraft_node.metadata.loader.manifest import (
    UNKNOWN_LEADER,
    LoaderManifest,
    LoaderManifestType,
    LogDeltaManifest,
    SnapshotManifest,
)
from kraft_node.metadata.loader.metrics import MetadataLoaderMetrics, SnapshotEmitterMetrics
from kraft_node.metadata.loader.publisher import MetadataPublisher
from kraft_node.metadata.loader.publishers import (
    ControllerRegistrationsPublisher,
    DynamicConfigPublisher,
    FeaturesPublisher,
    FinalizedFeatures,
    MetadataCachePublisher,
    RaftSnapshotWriter,
    SnapshotEmitter,
    SnapshotGenerator,
)

__all__ = [
    "MetadataLoader", "MetadataBatchLoader", "TransactionState",
    "FaultHandler", "FaultHandlerError", "LoggingFaultHandler", "RecordingFaultHandler",
    "LoaderManifest", "LoaderManifestType", "LogDeltaManifest", "SnapshotManifest", "UNKNOWN_LEADER",
    "MetadataLoaderMetrics", "SnapshotEmitterMetrics", "MetadataPublisher",
    "SnapshotGenerator", "SnapshotEmitter", "RaftSnapshotWriter", "FeaturesPublisher", "FinalizedFeatures",
    "DynamicConfigPublisher", "MetadataCachePublisher", "ControllerRegistrationsPublisher",
]
