"""The publishers every node installs on its loader (Kafka's ``image.publisher`` package and the
core publishers a node starts with).

* :class:`SnapshotGenerator` -- decides when the image should become a snapshot: once the log
  bytes replayed since the last snapshot reach ``max_bytes_since_last_snapshot``, or
  ``max_time_since_last_snapshot_ns`` has passed (0: never by time); never for an image that
  does not end on a batch boundary, never while disabled (the reason is logged).  A snapshot
  loaded, or one generated, resets both counters.  It hands the image to an :class:`Emitter`.
* :class:`SnapshotEmitter` -- the emitter that writes the image through the Raft client's
  ``create_snapshot`` writer (:class:`RaftSnapshotWriter`: records framed with
  ``ApiMessageAndVersion.encode()``, ``batch_size`` per append).
* :class:`FeaturesPublisher` -- the finalized features (:class:`FinalizedFeatures`) for the node's
  ApiVersions answers and feature checks.
* :class:`DynamicConfigPublisher` -- hands each changed topic / broker / client-metrics / group
  config to the node's handler for that resource type, with the resource's whole new config.
* :class:`MetadataCachePublisher` -- the broker metadata cache's hook: keeps the latest image
  for readers on any thread (``current_image()``), optionally hands it to the cache
  (``set_image``), and lets startup wait for the first image.
* :class:`ControllerRegistrationsPublisher` -- the registered controllers (for DescribeCluster
  answered by a controller).

Publishers run on the loader's thread.  The emission of a snapshot is the one long task (it
writes the whole image): :class:`SnapshotGenerator` runs it at once, or, given an
:class:`~kraft_node.metadata.controller.events.EventQueue`, as an event on it (Kafka runs it on
the generator's own thread); while one is queued, no other is scheduled.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.configs.schema import KAFKA_CONFIG_SCHEMA, KafkaConfigSchema
from kraft_node.metadata.controller.cluster_control import ControllerRegistration
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.writer import ImageWriterOptions
from kraft_node.metadata.loader.faults import FaultHandler, LoggingFaultHandler
from kraft_node.metadata.loader.manifest import LoaderManifest, LoaderManifestType, LogDeltaManifest
from kraft_node.metadata.loader.metrics import SnapshotEmitterMetrics
from kraft_node.metadata.loader.publisher import MetadataPublisher
from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME, MetadataVersion
from kraft_node.metrics import wall_clock_ms
from kraft_node.raft.api import SnapshotWriter
from kraft_node.raft.messages import SnapshotId

__all__ = [
    "Emitter", "SnapshotGenerator", "SnapshotEmitter", "RaftSnapshotWriter", "SnapshotCreator",
    "FinalizedFeatures", "FeaturesPublisher", "DynamicConfigPublisher", "ConfigHandler", "DEFAULT_CONFIG_NAME",
    "MetadataCachePublisher", "ControllerRegistrationsPublisher", "DEFAULT_SNAPSHOT_BATCH_SIZE",
]

log = logging.getLogger("kraft.metadata.loader")

#: Kafka's SnapshotEmitter.DEFAULT_BATCH_SIZE: records per snapshot batch (Raft limits batches in
#: bytes; a record count this low never reaches that limit).
DEFAULT_SNAPSHOT_BATCH_SIZE = 1024
#: Kafka's SnapshotGenerator.Builder defaults (a node passes its metadata.log.max.* configs).
DEFAULT_MAX_BYTES_SINCE_LAST_SNAPSHOT = 100 * 1024 * 1024
DEFAULT_MAX_TIME_SINCE_LAST_SNAPSHOT_NS = 24 * 3600 * 1_000_000_000


# ------------------------------------------------------------------ snapshot generation

class Emitter(Protocol):
    """Writes an image as a snapshot; does nothing when that snapshot (offset and epoch) exists."""

    def maybe_emit(self, image: MetadataImage) -> None: ...


class _EmitEvent:
    def __init__(self, generator: SnapshotGenerator, reason: str, image: MetadataImage) -> None:
        self._generator, self._reason, self._image = generator, reason, image

    def run(self) -> None:
        self._generator._emit(self._reason, self._image)

    def handle_exception(self, exc: BaseException) -> None:
        self._generator._pending = False
        log.info("Not creating KRaft snapshot file %s: %s", self._image.provenance.snapshot_name(), exc)


class SnapshotGenerator(MetadataPublisher):
    """See the module doc.  ``disabled_reason``: snapshots start disabled when given (Kafka's
    ``AtomicReference<String>``; :meth:`disable` sets it later -- the first reason stays)."""

    def __init__(self, emitter: Emitter, *, node_id: int = 0, clock_ns: Callable[[], int] = time.monotonic_ns,
                 fault_handler: FaultHandler | None = None,
                 max_bytes_since_last_snapshot: int = DEFAULT_MAX_BYTES_SINCE_LAST_SNAPSHOT,
                 max_time_since_last_snapshot_ns: int = DEFAULT_MAX_TIME_SINCE_LAST_SNAPSHOT_NS,
                 disabled_reason: str | None = None, queue: EventQueue | None = None) -> None:
        if max_bytes_since_last_snapshot < 1:
            raise ValueError(f"SnapshotGenerator: max_bytes_since_last_snapshot must be >= 1, "
                             f"not {max_bytes_since_last_snapshot}")
        if max_time_since_last_snapshot_ns < 0:
            raise ValueError(f"SnapshotGenerator: max_time_since_last_snapshot_ns must be >= 0 (0: off), "
                             f"not {max_time_since_last_snapshot_ns}")
        self.node_id = node_id
        self._emitter = emitter
        self._clock_ns = clock_ns
        self._fault_handler: FaultHandler = fault_handler or LoggingFaultHandler("metadata publishing")
        self.max_bytes_since_last_snapshot = max_bytes_since_last_snapshot
        self.max_time_since_last_snapshot_ns = max_time_since_last_snapshot_ns
        self._disabled_reason = disabled_reason
        self._queue = queue
        #: an emission is queued and has not run yet (only with a queue)
        self._pending = False
        self._closed = False
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_time_ns = clock_ns()

    @property
    def name(self) -> str:
        return "SnapshotGenerator"

    @property
    def disabled_reason(self) -> str | None:
        return self._disabled_reason

    def disable(self, reason: str) -> None:
        """Stop generating snapshots (e.g. after a fault: a snapshot of a suspect image would outlive it)."""
        if self._disabled_reason is None:
            self._disabled_reason = reason

    def reset_snapshot_counters(self) -> None:
        self.bytes_since_last_snapshot = 0
        self.last_snapshot_time_ns = self._clock_ns()

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        if manifest.type is LoaderManifestType.LOG_DELTA:
            assert isinstance(manifest, LogDeltaManifest)
            self.publish_log_delta(delta, new_image, manifest)
        else:
            self.publish_snapshot(new_image)

    def publish_snapshot(self, new_image: MetadataImage) -> None:
        log.debug("Resetting the snapshot counters because we just read %s.", new_image.provenance.snapshot_name())
        self.reset_snapshot_counters()

    def publish_log_delta(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LogDeltaManifest) -> None:
        self.bytes_since_last_snapshot += manifest.num_bytes
        aligned = manifest.provenance.is_offset_batch_aligned
        if self.bytes_since_last_snapshot >= self.max_bytes_since_last_snapshot:
            if not self._pending:
                self._maybe_schedule_emit(f"we have replayed at least {self.max_bytes_since_last_snapshot} bytes",
                                          new_image, aligned)
            else:
                log.debug("Not scheduling a bytes-based snapshot: one is queued already.")
        elif self.max_time_since_last_snapshot_ns != 0 and \
                self._clock_ns() - self.last_snapshot_time_ns >= self.max_time_since_last_snapshot_ns:
            if not self._pending:
                minutes = self.max_time_since_last_snapshot_ns // 60_000_000_000
                self._maybe_schedule_emit(f"we have waited at least {minutes} minute(s)", new_image, aligned)
            else:
                log.debug("Not scheduling a time-based snapshot: one is queued already.")

    def _maybe_schedule_emit(self, reason: str, image: MetadataImage, is_offset_batch_aligned: bool) -> None:
        name = image.provenance.snapshot_name()
        if self._disabled_reason is not None:
            log.error("Not emitting %s despite the fact that %s because snapshots are disabled; %s",
                      name, reason, self._disabled_reason)
        elif not is_offset_batch_aligned:
            log.debug("Not emitting %s despite the fact that %s because snapshots are disabled; %s",
                      name, reason, "metadata image is not batch aligned")
        elif self._closed:
            log.debug("Not emitting %s: the snapshot generator is closed", name)
        elif self._queue is None:
            self._emit(reason, image)
        else:
            self._pending = True
            self._queue.append(_EmitEvent(self, reason, image))

    def _emit(self, reason: str, image: MetadataImage) -> None:
        self._pending = False
        self.reset_snapshot_counters()
        log.info("Creating new KRaft snapshot file %s because %s.", image.provenance.snapshot_name(), reason)
        try:
            self._emitter.maybe_emit(image)
        except Exception as exc:
            self._fault_handler("KRaft snapshot file generation error", exc)

    def begin_shutdown(self) -> None:
        self.disable("we are shutting down")

    def close(self) -> None:
        """No new emission is scheduled; one already queued still runs (as Kafka's queue drains)."""
        self._closed = True


class SnapshotCreator(Protocol):
    """The part of the Raft client (:class:`~kraft_node.raft.api.RaftClient`) the emitter uses."""

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes | None = None, *,
                        last_contained_log_time_ms: int = 0) -> SnapshotWriter | None: ...


class RaftSnapshotWriter:
    """An :class:`~kraft_node.metadata.image.writer.ImageWriter` into a Raft snapshot: each record
    framed (``encode()``), ``batch_size`` records per ``append``; ``close(True)`` appends the rest
    and freezes, ``close(False)`` aborts.  The writer is closed either way."""

    def __init__(self, snapshot_writer: SnapshotWriter, batch_size: int = DEFAULT_SNAPSHOT_BATCH_SIZE) -> None:
        if batch_size < 1:
            raise ValueError(f"RaftSnapshotWriter: batch_size must be >= 1, not {batch_size}")
        self._writer = snapshot_writer
        self._batch_size = batch_size
        self._records: list[bytes] | None = []
        self.records_written = 0
        self.bytes_written = 0
        #: once frozen, the snapshot's size: the records' framed bytes (kraft's SnapshotWriter.freeze
        #: does not return the file's size, as Kafka's does); None until then
        self.frozen_size: int | None = None

    def write(self, record: ApiMessageAndVersion) -> None:
        records = self._records
        if records is None:
            raise RuntimeError("RaftSnapshotWriter: the image writer is closed")
        value = record.encode()
        records.append(value)
        self.bytes_written += len(value)
        if len(records) >= self._batch_size:
            self._writer.append(records)
            self.records_written += len(records)
            self._records = []

    def close(self, complete: bool) -> None:
        records = self._records
        if records is None:
            return
        self._records = None
        try:
            if complete:
                if records:
                    self._writer.append(records)
                    self.records_written += len(records)
                self._writer.freeze()
                self.frozen_size = self.bytes_written
        finally:
            self._writer.close()


class SnapshotEmitter:
    """Writes an image as a Raft snapshot at its provenance's snapshot id (Kafka's ``SnapshotEmitter``).

    ``raft.create_snapshot`` returning None means the snapshot exists (Kafka's empty Optional):
    nothing is written.  The records are written for the image's own metadata.version."""

    def __init__(self, raft: SnapshotCreator, *, node_id: int = 0, batch_size: int = DEFAULT_SNAPSHOT_BATCH_SIZE,
                 metrics: SnapshotEmitterMetrics | None = None, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        if batch_size < 1:
            raise ValueError(f"SnapshotEmitter: batch_size must be >= 1, not {batch_size}")
        self.node_id = node_id
        self._raft = raft
        self._batch_size = batch_size
        self._clock_ms = clock_ms
        self._metrics = metrics if metrics is not None else SnapshotEmitterMetrics(clock_ms=clock_ms)
        #: snapshot ids written, in order (for logs and tests)
        self.emitted: list[SnapshotId] = []

    @property
    def metrics(self) -> SnapshotEmitterMetrics:
        return self._metrics

    def maybe_emit(self, image: MetadataImage) -> None:
        provenance = image.provenance
        name = provenance.snapshot_name()
        offset, epoch = provenance.snapshot_id()
        snapshot_id = SnapshotId(offset, epoch)
        snapshot_writer = self._raft.create_snapshot(
            snapshot_id, last_contained_log_time_ms=provenance.last_contained_log_time_ms)
        if snapshot_writer is None:
            log.error("Not generating %s because it already exists.", name)
            return
        writer = RaftSnapshotWriter(snapshot_writer, self._batch_size)
        mv = image.metadata_version()
        options = ImageWriterOptions(mv if mv is not None else MetadataVersion.LATEST_PRODUCTION,
                                     image_metadata_version=mv)
        try:
            image.write(writer, options)
            writer.close(True)
        except BaseException:
            log.exception("Encountered error while writing %s", name)
            writer.close(False)
            raise
        self._metrics.latest_snapshot_generated_time_ms = self._clock_ms()
        self._metrics.latest_snapshot_generated_bytes = writer.frozen_size or 0
        self.emitted.append(snapshot_id)
        log.info("Successfully wrote %s", name)


# ------------------------------------------------------------------ features

@dataclass(frozen=True)
class FinalizedFeatures:
    """The cluster's finalized features as of ``epoch`` (the image's offset; -1: none loaded yet).
    ``features`` always includes metadata.version (Kafka's KRaft-mode ``FinalizedFeatures``)."""
    metadata_version: MetadataVersion | None
    features: Mapping[str, int]
    epoch: int

    @staticmethod
    def of(image: MetadataImage) -> FinalizedFeatures:
        mv = image.metadata_version()
        levels = dict(image.features.finalized_versions)
        if mv is not None:
            levels[METADATA_VERSION_FEATURE_NAME] = mv.feature_level
        return FinalizedFeatures(mv, MappingProxyType(levels), image.offset)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FinalizedFeatures):
            return NotImplemented
        return (self.metadata_version is other.metadata_version and dict(self.features) == dict(other.features)
                and self.epoch == other.epoch)

    def __hash__(self) -> int:
        return hash((self.metadata_version, tuple(sorted(self.features.items())), self.epoch))


#: Before any image: no metadata.version, no features (Kafka 4 has no default metadata.version).
NO_FEATURES = FinalizedFeatures(None, MappingProxyType({}), -1)


class FeaturesPublisher(MetadataPublisher):
    """Keeps :meth:`features` current: replaced (one reference, read from any thread) when an
    update changes the features."""

    def __init__(self) -> None:
        self._features = NO_FEATURES

    @property
    def name(self) -> str:
        return "FeaturesPublisher"

    def features(self) -> FinalizedFeatures:
        return self._features

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        if delta.features_delta is None:
            return
        new = FinalizedFeatures.of(new_image)
        if new != self._features:
            log.info("Loaded new metadata %s.", new)
            self._features = new


# ------------------------------------------------------------------ dynamic configs

#: ``handler(name, whole new config of the resource)``; Kafka's ``ConfigHandler.processConfigChanges``
ConfigHandler = Callable[[str, dict[str, str]], None]
#: The name the cluster-wide broker defaults are handed over under (Kafka's ``ZooKeeperInternals.DEFAULT_STRING``).
DEFAULT_CONFIG_NAME = "<default>"


class DynamicConfigPublisher(MetadataPublisher):
    """Hands config changes to ``handlers`` (keyed by resource type): a topic's, the cluster default
    broker config (named :data:`DEFAULT_CONFIG_NAME`), this node's broker config (by its id;
    other brokers' are not this node's business), client-metrics and group configs.  Each call gets
    the resource's whole config after the change (empty when it was deleted).  A handler that raises
    is reported to ``fault_handler`` with Kafka's message and the next change is still handed over."""

    def __init__(self, node_id: int, handlers: Mapping[ConfigResourceType, ConfigHandler], *,
                 fault_handler: FaultHandler | None = None, node_type: str = "broker",
                 schema: KafkaConfigSchema = KAFKA_CONFIG_SCHEMA) -> None:
        self.node_id = node_id
        self.handlers = dict(handlers)
        self.node_type = node_type
        self._schema = schema
        self._fault_handler: FaultHandler = fault_handler or LoggingFaultHandler("metadata publishing")

    def loggable(self, resource: ConfigResource, props: Mapping[str, str]) -> str:
        """``k -> v`` pairs for a log line, a password's (or an unknown key's) value as ``[hidden]`` (Kafka's
        ``toLoggableProps``)."""
        return ",".join(f"{k} -> {'[hidden]' if self._schema.is_sensitive(resource.type, k) else v}"
                        for k, v in props.items())

    @property
    def name(self) -> str:
        return f"DynamicConfigPublisher {self.node_type} id={self.node_id}"

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        configs_delta = delta.configs_delta
        if configs_delta is None:
            return
        where = f"MetadataDelta up to {new_image.offset}"
        try:
            for resource in configs_delta.changes:
                self._publish(resource, new_image, where)
        except Exception as exc:
            self._fault_handler(f"Uncaught exception while publishing dynamic configuration changes from {where}",
                                exc)

    def _publish(self, resource: ConfigResource, image: MetadataImage, where: str) -> None:
        rtype = resource.type
        handler = self.handlers.get(rtype)
        if handler is None:
            return
        if rtype is ConfigResourceType.TOPIC:
            name, what = resource.name, f"topic {resource.name}"
        elif rtype is ConfigResourceType.BROKER:
            if resource.name == "":
                name, what = DEFAULT_CONFIG_NAME, "cluster"
            elif resource.name == str(self.node_id):
                name, what = resource.name, "node"
            else:
                return
        elif rtype is ConfigResourceType.CLIENT_METRICS:
            name, what = resource.name, f"client metrics {resource.name}"
        elif rtype is ConfigResourceType.GROUP:
            name, what = resource.name, f"group {resource.name}"
        else:
            return
        props = image.configs.config_properties(resource)
        log.info("Updating %s with new configuration : %s", what, self.loggable(resource, props))
        try:
            handler(name, props)
        except Exception as exc:
            self._fault_handler(f"Error updating {what} with new configuration: {self.loggable(resource, props)} "
                                f"in {where}", exc)


# ------------------------------------------------------------------ the broker's metadata cache

class MetadataCachePublisher(MetadataPublisher):
    """The metadata cache's hook (Kafka's ``KRaftMetadataCachePublisher``).

    :meth:`current_image` may be called from any thread: the image is immutable and replaced by
    one reference assignment (atomic in CPython), so a reader that takes it once sees one
    consistent image for as long as it holds it -- no lock on the read path.  ``set_image``
    (e.g. the cache's own setter) is called first on every update, on the loader's thread;
    :meth:`wait_for_first_image` is what a starting broker blocks on (Kafka's first-publish future),
    and it gives up (returns None) when the publisher is closed first."""

    def __init__(self, set_image: Callable[[MetadataImage], None] | None = None,
                 name: str = "KRaftMetadataCachePublisher") -> None:
        self._name = name
        self._set_image = set_image
        self._image: MetadataImage | None = None
        self._first = threading.Event()

    @property
    def name(self) -> str:
        return self._name

    def current_image(self) -> MetadataImage:
        """The last image published (the empty image before the first)."""
        image = self._image
        return image if image is not None else MetadataImage.EMPTY

    @property
    def has_image(self) -> bool:
        return self._image is not None

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        if self._set_image is not None:
            self._set_image(new_image)
        self._image = new_image
        self._first.set()

    def wait_for_first_image(self, timeout_s: float | None = None) -> MetadataImage | None:
        """Block (another thread) until the first image is published; None on timeout or close."""
        self._first.wait(timeout_s)
        return self._image

    def close(self) -> None:
        self._first.set()


class ControllerRegistrationsPublisher(MetadataPublisher):
    """The registered controllers, for a controller's DescribeCluster answers (Kafka's
    ``ControllerRegistrationsPublisher``): replaced on every log delta and on a snapshot that
    changes the cluster."""

    def __init__(self) -> None:
        self._controllers: Mapping[int, ControllerRegistration] = MappingProxyType({})

    @property
    def name(self) -> str:
        return "ControllerRegistrationsPublisher"

    def controllers(self) -> Mapping[int, ControllerRegistration]:
        return self._controllers

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        if manifest.type is LoaderManifestType.LOG_DELTA or delta.cluster_delta is not None:
            self._controllers = new_image.cluster.controllers
