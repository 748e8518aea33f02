"""The node's metadata loader and its publishers (the loader half of Kafka's ``SharedServer``).

Why every node has one: a controller's managers keep timeline state for writing, but
what the rest of a node reads -- the finalized features, the registered controllers,
the broker's metadata cache (issue 24) -- is the immutable :class:`MetadataImage` the
:class:`MetadataLoader` publishes from the committed log.  Kafka runs the loader on
brokers and controllers alike; so does kraft.

Wiring (what Kafka's SharedServer and ControllerServer/BrokerServer install):

* the loader is a second Raft listener of the driver, after the controller's (both see
  the same committed batches and snapshots, in offset order);
* it runs deferred work (the catching-up retry of publisher installs) on its own
  event queue, run on the node's asyncio loop like the controller's;
* publishers: the metadata cache hook (:class:`MetadataCachePublisher`, read from any
  thread with no lock) and the finalized features on every node, the controller
  registrations on controller nodes;
* snapshots: on every node -- broker, controller or both -- the loader's
  :class:`SnapshotGenerator` decides when (``metadata.log.max.record.bytes.between.snapshots``
  and ``metadata.log.max.snapshot.interval.ms``, the node's config) and its
  :class:`SnapshotEmitter` writes the published image with the image writer, in slices on
  the loader's queue so that no event holds the shared loop for long (publishers.py's module
  doc).  As in Kafka 3.5+, the QuorumController writes none (``ControllerServer`` leaves it
  without a snapshot generator): one writer per log, so no race for a snapshot id, and a
  snapshot is always of a committed image -- the loader never publishes half a metadata
  transaction, and an image is immutable, so the loader goes on publishing while one is
  written.  A metadata loading fault disables snapshots (Kafka's SharedServer: a snapshot of a
  suspect image would outlive the fault), and so may the node (:meth:`NodeMetadata.disable_snapshots`,
  e.g. on a fatal controller fault);
* a load fault (a committed record the image refuses) is fatal on a controller node, as
  Kafka's controller fault handler is (the controller replaying the same record has
  failed too, or the two disagree: either way the node must not go on), and logged on a
  broker-only node, whose loader stops applying (Kafka's broker logs it and counts it
  in the metadata load error gauge).
"""
from __future__ import annotations

import logging
from collections.abc import Callable

from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.loader import (
    ControllerRegistrationsPublisher,
    FeaturesPublisher,
    LoggingFaultHandler,
    MetadataCachePublisher,
    MetadataLoader,
    MetadataLoaderMetrics,
    MetadataPublisher,
    SnapshotEmitter,
    SnapshotEmitterMetrics,
    SnapshotGenerator,
)
from kraft_node.metrics import MetricsRegistry
from kraft_node.server.controller import ControllerRunner

log = logging.getLogger(__name__)

__all__ = ["NodeMetadata"]

#: Kafka's metadata.log.max.record.bytes.between.snapshots and metadata.log.max.snapshot.interval.ms
DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS = 20 * 1024 * 1024
DEFAULT_MAX_SNAPSHOT_INTERVAL_MS = 60 * 60 * 1000


class NodeMetadata:
    """Builds the loader and its publishers for one node and registers the loader with the
    driver; :meth:`start` on the node's loop, :meth:`close` when the node stops."""

    def __init__(self, driver: object, registry: MetricsRegistry | None, *, node_id: int, is_controller: bool,
                 is_broker: bool, on_fatal: Callable[[BaseException], None] | None = None,
                 max_bytes_between_snapshots: int = DEFAULT_MAX_BYTES_BETWEEN_SNAPSHOTS,
                 max_snapshot_interval_ms: int = DEFAULT_MAX_SNAPSHOT_INTERVAL_MS) -> None:
        self.node_id = node_id
        self.runner = ControllerRunner("metadata-loader")
        self.metrics = MetadataLoaderMetrics(registry, broker=is_broker)
        self._on_fatal = on_fatal
        core = driver.core  # type: ignore[attr-defined]
        self.loader = MetadataLoader(high_watermark=lambda: core.high_watermark, node_id=node_id,
                                     fault_handler=LoggingFaultHandler("metadata loading", self._load_fault),
                                     metrics=self.metrics, queue=self.runner.queue)
        self._is_controller = is_controller
        #: the latest published image, readable from any thread
        self.cache = MetadataCachePublisher()
        self.features = FeaturesPublisher()
        publishers: list[MetadataPublisher] = [self.cache, self.features]
        self.controller_registrations: ControllerRegistrationsPublisher | None = None
        if is_controller:
            self.controller_registrations = ControllerRegistrationsPublisher()
            publishers.append(self.controller_registrations)
        self._emitter_metrics = SnapshotEmitterMetrics(registry)
        #: writes the snapshots of this node's metadata log (see the module doc)
        self.snapshot_emitter = SnapshotEmitter(driver, node_id=node_id,  # type: ignore[arg-type]
                                                metrics=self._emitter_metrics, queue=self.runner.queue)
        self.snapshot_generator = SnapshotGenerator(
            self.snapshot_emitter, node_id=node_id, max_bytes_since_last_snapshot=max_bytes_between_snapshots,
            max_time_since_last_snapshot_ns=max_snapshot_interval_ms * 1_000_000, queue=self.runner.queue)
        publishers.append(self.snapshot_generator)
        driver.register_listener(self.loader)  # type: ignore[attr-defined]
        self.loader.install_publishers(publishers)
        self._closed = False

    def set_on_fatal(self, on_fatal: Callable[[BaseException], None]) -> None:
        """What a controller node does with a load fault (the node stops)."""
        self._on_fatal = on_fatal

    def disable_snapshots(self, reason: str) -> None:
        """No more snapshots from this node (the first reason is kept and logged when one is due)."""
        self.snapshot_generator.disable(reason)

    def _load_fault(self) -> None:
        self.disable_snapshots("metadata loading fault")
        if self._is_controller:
            self._fatal()

    def _fatal(self) -> None:
        failure = self.loader.failure
        err = RuntimeError(f"node {self.node_id}: the metadata loader stopped at offset "
                           f"{failure[0] if failure else '?'}: {failure[1] if failure else 'unknown fault'}")
        if self._on_fatal is not None:
            self._on_fatal(err)

    def image(self) -> MetadataImage:
        """The latest published image (the empty image before the first)."""
        return self.cache.current_image()

    def start(self) -> None:
        self.runner.start()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.loader.close()
        self.runner.close()
        self.metrics.close()
        self._emitter_metrics.close()
