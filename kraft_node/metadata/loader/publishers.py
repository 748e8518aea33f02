"""The publishers every node installs on its loader (Kafka's ``image.publisher`` package and the
core publishers a node starts with).

* :class:`SnapshotGenerator` -- decides when the image should become a snapshot: once the log
  bytes replayed since the last snapshot reach ``max_bytes_since_last_snapshot``, or
  ``max_time_since_last_snapshot_ns`` has passed (0: never by time); never for an image that
  does not end on a batch boundary, never while disabled (the reason is logged).  A snapshot
  loaded, or one generated, resets both counters.  It hands the image to an :class:`Emitter`.
* :class:`SnapshotEmitter` -- the emitter that writes the image through the Raft client's
  ``create_snapshot`` writer, with the image writer (``MetadataImage.write``: features,
  cluster, topics, configs, quotas, producer ids, ACLs, SCRAM, delegation tokens -- Kafka's
  order).  At once (:meth:`SnapshotEmitter.maybe_emit`), or in slices on an event queue
  (:meth:`SnapshotEmitter.begin_emit`, see below).
* :class:`FeaturesPublisher` -- the finalized features (:class:`FinalizedFeatures`) for the node's
  ApiVersions answers and feature checks.
* :class:`DynamicConfigPublisher` -- hands each changed topic / broker / client-metrics / group
  config to the node's handler for that resource type, with the resource's whole new config.
* :class:`MetadataCachePublisher` -- the broker metadata cache's hook: keeps the latest image
  for readers on any thread (``current_image()``), optionally hands it to the cache
  (``set_image``), and lets startup wait for the first image.
* :class:`ControllerRegistrationsPublisher` -- the registered controllers (for DescribeCluster
  answered by a controller).

Snapshots on a node (Kafka 3.5+: the loader's SnapshotGenerator on brokers *and* controllers;
the QuorumController writes none).  Publishers run on the loader's event queue, on the node's
asyncio loop, which the Raft driver and the network share: an event that runs for long stalls
all of them.  Writing a 1M-partition image takes seconds, so with a ``queue`` the emission is
cut in events:

1. the generator's start event (the image chosen: an immutable value, so the loader goes on
   publishing newer images meanwhile; one emission in flight at a time, the next one is
   considered on a later publish);
2. slice events: each runs the image writer for at most ``records_per_slice`` records or
   ``slice_budget_ns`` of clock time (checked every 16 records) and appends what it wrote to
   the Raft snapshot writer as one batch;
3. the freeze (the last batch, the footer, the fsync, the log prefix dropped): an event of its own.

How a push writer (``image.write(writer)`` calls ``writer.write(record)`` all the way down)
is cut in slices without rewriting every sub-image as a generator: the image writer runs on a
helper thread in strict alternation with the loop thread (:class:`_ImageWriterThread`, a
coroutine made of two semaphores).  A slice event hands control to the helper and waits; the
helper writes until the slice is full, hands control back and waits.  Exactly one of the two
runs at any time, so nothing is shared unguarded; the Raft writer is only touched on the loop
thread.  Aborting (a failure, the generator closed, the queue shut down) wakes the helper with
a flag that makes its next ``write`` raise, so it unwinds and exits; the partial snapshot is
closed without a freeze (deleted).
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.configs.schema import KAFKA_CONFIG_SCHEMA, KafkaConfigSchema
from kraft_node.metadata.controller.cluster_control import ControllerRegistration
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.replication_snapshot import paused_gc
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
    "SlicedEmitter", "EmissionRecord", "DEFAULT_RECORDS_PER_SLICE", "DEFAULT_SLICE_BUDGET_NS",
]

log = logging.getLogger("kraft.metadata.loader")

#: Kafka's SnapshotEmitter.DEFAULT_BATCH_SIZE: records per snapshot batch (Raft limits batches in
#: bytes; a record count this low never reaches that limit).
DEFAULT_SNAPSHOT_BATCH_SIZE = 1024
#: Kafka's SnapshotGenerator.Builder defaults (a node passes its metadata.log.max.* configs).
DEFAULT_MAX_BYTES_SINCE_LAST_SNAPSHOT = 100 * 1024 * 1024
DEFAULT_MAX_TIME_SINCE_LAST_SNAPSHOT_NS = 24 * 3600 * 1_000_000_000
#: A sliced emission's slice: at most this many records (one Raft snapshot batch each) ...
DEFAULT_RECORDS_PER_SLICE = DEFAULT_SNAPSHOT_BATCH_SIZE
#: ... or this much clock time, whichever comes first (BENCHMARKS.md: the longest event while a
#: 10k-broker snapshot is written must stay <= 10 ms)
DEFAULT_SLICE_BUDGET_NS = 5_000_000


# ------------------------------------------------------------------ snapshot generation

class Emitter(Protocol):
    """Writes an image as a snapshot; does nothing when that snapshot (offset and epoch) exists."""

    def maybe_emit(self, image: MetadataImage) -> None: ...


@runtime_checkable
class SlicedEmitter(Emitter, Protocol):
    """An emitter that can also write in slices on an event queue (see the module doc)."""

    def begin_emit(self, image: MetadataImage, on_done: Callable[[BaseException | None], None]) -> bool:
        """Start writing ``image``; False when nothing is to be written (the snapshot exists, or
        the emitter has no queue) and ``on_done`` is never called; else ``on_done(None)`` once the
        snapshot is frozen, or ``on_done(exc)`` once it was abandoned."""
        ...

    def abort(self, reason: str) -> None:
        """Abandon the emission in flight, if any (its ``on_done`` gets the reason as an error)."""
        ...


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
        self.reset_snapshot_counters()
        log.info("Creating new KRaft snapshot file %s because %s.", image.provenance.snapshot_name(), reason)
        emitter = self._emitter
        try:
            if self._queue is not None and isinstance(emitter, SlicedEmitter):
                # _pending stays set until the emitter reports the snapshot frozen or abandoned
                if not emitter.begin_emit(image, self._emit_done):
                    self._pending = False
                return
            self._pending = False
            emitter.maybe_emit(image)
        except Exception as exc:
            self._pending = False
            self._fault_handler("KRaft snapshot file generation error", exc)

    def _emit_done(self, exc: BaseException | None) -> None:
        self._pending = False
        if exc is None:
            return
        if self._closed:
            log.info("Abandoned a KRaft snapshot file on close: %s", exc)
        else:
            self._fault_handler("KRaft snapshot file generation error", exc)

    @property
    def emitting(self) -> bool:
        """An emission is queued or being written."""
        return self._pending

    def begin_shutdown(self) -> None:
        self.disable("we are shutting down")

    def close(self) -> None:
        """No new emission is scheduled; one already queued still starts (as Kafka's queue drains),
        but one being written in slices is abandoned, its partial file deleted: a node going down
        does not wait for a snapshot it can write again later (and its queue, closing too, takes
        no more slice events)."""
        self._closed = True
        emitter = self._emitter
        if isinstance(emitter, SlicedEmitter):
            emitter.abort("the snapshot generator is closed")


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


class _Aborted(Exception):
    """Raised inside the helper thread's ``write`` to unwind an abandoned image write."""


class _ImageWriterThread:
    """``image.write`` on a helper thread, run one slice at a time by the loop thread (see the
    module doc).  It is the :class:`~kraft_node.metadata.image.writer.ImageWriter` the image
    writes into: each record encoded (framed as ``ApiMessageAndVersion.encode()``) into the
    slice's list of values.

    Invariant (strict alternation): the helper runs only between ``_go.release()`` in
    :meth:`next_slice` / :meth:`abort` and its own ``_yielded.release()``, and the loop thread
    is blocked in ``_yielded.acquire()`` all that time; so ``_values``, ``_deadline_ns`` and the
    flags are never touched by both at once."""

    def __init__(self, image: MetadataImage, options: ImageWriterOptions, *, records_per_slice: int,
                 slice_budget_ns: int, clock_ns: Callable[[], int], name: str) -> None:
        self._image = image
        self._options = options
        self._records_per_slice = records_per_slice
        self._slice_budget_ns = slice_budget_ns
        self._clock_ns = clock_ns
        self._go = threading.Semaphore(0)
        self._yielded = threading.Semaphore(0)
        self._values: list[bytes] = []
        self._deadline_ns = 0
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = False
        self._aborted = False
        #: the image writer returned (or raised): no more slices
        self.done = False
        #: ``image.write`` closed the writer with complete=True (it wrote every sub-image)
        self.complete = False
        self.error: BaseException | None = None
        self.bytes_written = 0

    # -- the ImageWriter, on the helper thread ----------------------------------------------------

    def write(self, record: ApiMessageAndVersion) -> None:
        if self._aborted:
            raise _Aborted()
        value = record.encode()
        values = self._values
        values.append(value)
        self.bytes_written += len(value)
        n = len(values)
        if n >= self._records_per_slice or (n & 15 == 0 and self._clock_ns() >= self._deadline_ns):
            self._yielded.release()
            self._go.acquire()
            if self._aborted:
                raise _Aborted()

    def close(self, complete: bool) -> None:
        self.complete = complete

    def _main(self) -> None:
        self._go.acquire()
        try:
            if not self._aborted:
                self._image.write(self, self._options)
        except _Aborted:
            pass
        except BaseException as exc:  # handed to the loop thread, which reports it
            self.error = exc
        finally:
            self.done = True
            self._yielded.release()

    # -- the loop thread ---------------------------------------------------------------------------

    def next_slice(self) -> list[bytes]:
        """Run the image writer for one slice; the values it wrote (empty once it is done).
        Raises what the image writer raised."""
        if self.done:
            return []
        self._values = []
        self._deadline_ns = self._clock_ns() + self._slice_budget_ns
        if not self._started:
            self._started = True
            self._thread.start()
        # The cyclic collector paused for the slice: what the image writer allocates (a chunk's
        # registrations) dies by reference counting, and a full collection of a 1M-partition
        # heap (~60 ms, measured) must not land inside a slice.
        with paused_gc():
            self._go.release()
            self._yielded.acquire()
        if self.error is not None:
            raise self.error
        if self.done and not self.complete:
            raise RuntimeError("the image writer returned without closing the snapshot")
        return self._values

    def abort(self) -> None:
        """Make the helper unwind and exit (at once if it never started)."""
        if self.done:
            return
        self._aborted = True
        if not self._started:
            self.done = True
            return
        self._go.release()
        self._yielded.acquire()
        self._thread.join()


@dataclass(frozen=True)
class EmissionRecord:
    """One snapshot written: its id, records, batches appended (slices), and bytes (framed values)."""
    snapshot_id: SnapshotId
    records: int
    slices: int
    bytes: int


class _SliceEvent:
    def __init__(self, emission: _Emission) -> None:
        self._emission = emission

    def run(self) -> None:
        self._emission.step()

    def handle_exception(self, exc: BaseException) -> None:
        self._emission.fail(exc)


class _Emission:
    """One snapshot being written in slices (see the module doc): ``step`` is one event."""

    def __init__(self, emitter: SnapshotEmitter, image: MetadataImage, writer: SnapshotWriter,
                 snapshot_id: SnapshotId, on_done: Callable[[BaseException | None], None]) -> None:
        self.emitter = emitter
        self.name = image.provenance.snapshot_name()
        self.snapshot_id = snapshot_id
        self._writer = writer
        self._on_done = on_done
        self._image_writer = _ImageWriterThread(
            image, emitter.writer_options(image), records_per_slice=emitter.records_per_slice,
            slice_budget_ns=emitter.slice_budget_ns, clock_ns=emitter.clock_ns, name=f"snapshot-writer-{self.name}")
        self.records = 0
        self.slices = 0
        self.finished = False

    def schedule(self) -> None:
        queue = self.emitter.queue
        assert queue is not None
        queue.append(_SliceEvent(self))

    def step(self) -> None:
        if self.finished:
            return
        if self._image_writer.done:
            self._freeze()  # an event of its own: the last batch, the footer, the fsync
            return
        values = self._image_writer.next_slice()
        if values:
            self._writer.append(values)
            self.records += len(values)
            self.slices += 1
        self.schedule()

    def _freeze(self) -> None:
        self._writer.freeze()  # a failure reaches fail(), which closes (deletes) the partial snapshot
        self.finished = True
        self._writer.close()
        self.emitter._emitted(self)
        self._on_done(None)

    def fail(self, exc: BaseException) -> None:
        if self.finished:
            return
        self.finished = True
        try:
            self._image_writer.abort()
        finally:
            try:
                self._writer.close()
            finally:
                self.emitter._abandoned(self, exc)
                self._on_done(exc)


class SnapshotEmitter:
    """Writes an image as a Raft snapshot at its provenance's snapshot id (Kafka's ``SnapshotEmitter``).

    ``raft.create_snapshot`` returning None means the snapshot exists (Kafka's empty Optional):
    nothing is written.  The records are written for the image's own metadata.version.
    :meth:`maybe_emit` writes the whole image at once; with a ``queue``, :meth:`begin_emit`
    writes it in slices of at most ``records_per_slice`` records or ``slice_budget_ns`` of
    ``clock_ns`` (see the module doc), one emission at a time."""

    def __init__(self, raft: SnapshotCreator, *, node_id: int = 0, batch_size: int = DEFAULT_SNAPSHOT_BATCH_SIZE,
                 metrics: SnapshotEmitterMetrics | None = None, clock_ms: Callable[[], int] = wall_clock_ms,
                 queue: EventQueue | None = None, records_per_slice: int = DEFAULT_RECORDS_PER_SLICE,
                 slice_budget_ns: int = DEFAULT_SLICE_BUDGET_NS,
                 clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        if batch_size < 1:
            raise ValueError(f"SnapshotEmitter: batch_size must be >= 1, not {batch_size}")
        if records_per_slice < 1:
            raise ValueError(f"SnapshotEmitter: records_per_slice must be >= 1, not {records_per_slice}")
        if slice_budget_ns < 0:
            raise ValueError(f"SnapshotEmitter: slice_budget_ns must be >= 0, not {slice_budget_ns}")
        self.node_id = node_id
        self._raft = raft
        self._batch_size = batch_size
        self._clock_ms = clock_ms
        self._metrics = metrics if metrics is not None else SnapshotEmitterMetrics(clock_ms=clock_ms)
        self.queue = queue
        self.records_per_slice = records_per_slice
        self.slice_budget_ns = slice_budget_ns
        self.clock_ns = clock_ns
        self._in_flight: _Emission | None = None
        #: snapshot ids written, in order (for logs and tests)
        self.emitted: list[SnapshotId] = []
        #: what each snapshot written by :meth:`begin_emit` held (for logs, tests and benchmarks)
        self.history: list[EmissionRecord] = []

    @property
    def metrics(self) -> SnapshotEmitterMetrics:
        return self._metrics

    @property
    def in_flight(self) -> bool:
        """A sliced emission has started and is not frozen or abandoned yet."""
        return self._in_flight is not None

    @staticmethod
    def writer_options(image: MetadataImage) -> ImageWriterOptions:
        """The image's own metadata.version (the newest production one for an image with none)."""
        mv = image.metadata_version()
        return ImageWriterOptions(mv if mv is not None else MetadataVersion.LATEST_PRODUCTION,
                                  image_metadata_version=mv)

    def _create(self, image: MetadataImage) -> tuple[SnapshotWriter | None, SnapshotId]:
        provenance = image.provenance
        offset, epoch = provenance.snapshot_id()
        snapshot_id = SnapshotId(offset, epoch)
        snapshot_writer = self._raft.create_snapshot(
            snapshot_id, last_contained_log_time_ms=provenance.last_contained_log_time_ms)
        if snapshot_writer is None:
            log.error("Not generating %s because it already exists.", provenance.snapshot_name())
        return snapshot_writer, snapshot_id

    def maybe_emit(self, image: MetadataImage) -> None:
        name = image.provenance.snapshot_name()
        snapshot_writer, snapshot_id = self._create(image)
        if snapshot_writer is None:
            return
        writer = RaftSnapshotWriter(snapshot_writer, self._batch_size)
        try:
            image.write(writer, self.writer_options(image))
            writer.close(True)
        except BaseException:
            log.exception("Encountered error while writing %s", name)
            writer.close(False)
            raise
        self._metrics.latest_snapshot_generated_time_ms = self._clock_ms()
        self._metrics.latest_snapshot_generated_bytes = writer.frozen_size or 0
        self.emitted.append(snapshot_id)
        log.info("Successfully wrote %s", name)

    def begin_emit(self, image: MetadataImage, on_done: Callable[[BaseException | None], None]) -> bool:
        """See :class:`SlicedEmitter`.  Raises (nothing started) when one is in flight already or
        ``create_snapshot`` fails."""
        if self.queue is None:
            return False
        if self._in_flight is not None:
            raise RuntimeError(f"SnapshotEmitter: {self._in_flight.name} is still being written")
        snapshot_writer, snapshot_id = self._create(image)
        if snapshot_writer is None:
            return False
        emission = _Emission(self, image, snapshot_writer, snapshot_id, on_done)
        self._in_flight = emission
        emission.schedule()
        return True

    def abort(self, reason: str) -> None:
        emission = self._in_flight
        if emission is not None:
            emission.fail(RuntimeError(f"{emission.name} abandoned: {reason}"))

    def _emitted(self, emission: _Emission) -> None:
        self._in_flight = None
        size = emission._image_writer.bytes_written
        self._metrics.latest_snapshot_generated_time_ms = self._clock_ms()
        self._metrics.latest_snapshot_generated_bytes = size
        self.emitted.append(emission.snapshot_id)
        self.history.append(EmissionRecord(emission.snapshot_id, emission.records, emission.slices, size))
        log.info("Successfully wrote %s: %d records in %d slices.", emission.name, emission.records,
                 emission.slices)

    def _abandoned(self, emission: _Emission, exc: BaseException) -> None:
        self._in_flight = None
        log.warning("Abandoned %s after %d records: %s", emission.name, emission.records, exc)


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
