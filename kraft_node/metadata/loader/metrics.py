"""The loader's and the snapshot emitter's metrics, under Kafka's names.

Why kraft keeps Kafka's names: operators' dashboards and Kafka's monitoring documentation name
these; :mod:`kraft_node.metrics` maps ``<domain>:type=<type>,name=<name>`` to one Prometheus
name (``kafka_server_MetadataLoader_CurrentMetadataVersion``...).

:class:`MetadataLoaderMetrics` -- Kafka's ``MetadataLoaderMetrics`` and, when ``broker`` is
true, the loader's half of Kafka's ``BrokerServerMetrics`` (Kafka builds it on broker nodes
only and hands the loader its histogram updaters):

* ``kafka.server:type=MetadataLoader``: ``CurrentMetadataVersion`` (the feature level of the last
  published image, Kafka's minimum until one has it), ``CurrentControllerId`` (-1: unknown),
  ``HandleLoadSnapshotCount``, and ``FinalizedLevel`` with a ``featureName`` label per feature in
  Kafka's camel case (``metadataVersion``, ``kraftVersion``, ``transactionVersion``...);
* ``kafka.server:type=BrokerMetadataListener``: ``MetadataBatchProcessingTimeUs`` and
  ``MetadataBatchSizes`` histograms (one observation per committed batch);
* ``kafka.server:type=broker-metadata-metrics``: ``last-applied-record-offset``,
  ``-timestamp``, ``-lag-ms`` (of the last *published* image: what every publisher has seen),
  ``metadata-load-error-count`` (faults the loader reported) and ``metadata-apply-error-count``
  (for the publishers to count theirs);
* kraft's own ``kraft:type=MetadataLoader,name=SnapshotLoadTimeMs`` histogram (Kafka logs a
  snapshot's load time; a histogram makes slow loads visible without the log).

:class:`SnapshotEmitterMetrics` -- ``kafka.server:type=SnapshotEmitter``:
``LatestSnapshotGeneratedBytes`` and ``LatestSnapshotGeneratedAgeMs``.

Both work without a registry (``registry=None``: values kept, nothing exported -- tests and tools),
and ``close`` removes every metric they added, so a loader can be rebuilt on the same registry.
Values are written on the loader's thread and read at scrape time on the same event loop.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME, PRODUCTION_FEATURES, MetadataVersion
from kraft_node.metrics import MS_BUCKETS, MetricsRegistry, metric_name, wall_clock_ms

__all__ = ["MetadataLoaderMetrics", "SnapshotEmitterMetrics", "camel_case_feature_name"]

_DOMAIN = "kafka.server"
_LOADER = "MetadataLoader"
_LISTENER = "BrokerMetadataListener"
_BROKER_GROUP = "broker-metadata-metrics"

#: microseconds: 10 us (a one-record batch) to 10 s (a 10,000-record creation on a slow disk)
US_BUCKETS: tuple[float, ...] = (10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000,
                                 100_000, 250_000, 1_000_000, 10_000_000, math.inf)
#: records per batch: 1 (a heartbeat's change) to Kafka's 10,000 per batch
SIZE_BUCKETS: tuple[float, ...] = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, math.inf)


def camel_case_feature_name(name: str) -> str:
    """Kafka's ``featureName`` tag: ``metadata.version`` -> ``metadataVersion``,
    ``eligible.leader.replicas.version`` -> ``eligibleLeaderReplicasVersion``."""
    words = name.split(".")
    return words[0] + "".join(w[:1].upper() + w[1:].lower() for w in words[1:])


class _FinalizedLevels(Collector):
    """``FinalizedLevel{featureName=...}``: one gauge family with a label per feature."""

    def __init__(self, name: str, levels: dict[str, int]) -> None:
        self._name = name
        self._levels = levels

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self._name, "Finalized level of each feature in the last published image",
                                 labels=["featureName"])

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield self._family()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = self._family()
        for feature in sorted(self._levels):
            family.add_metric([camel_case_feature_name(feature)], self._levels[feature])
        yield family


class MetadataLoaderMetrics:
    """See the module doc.  ``wall_clock`` (ms since the epoch) is what the lag gauge subtracts
    record timestamps from."""

    def __init__(self, registry: MetricsRegistry | None = None, *, broker: bool = True,
                 wall_clock: Callable[[], int] = wall_clock_ms) -> None:
        self._registry = registry
        self._wall_clock = wall_clock
        self.current_metadata_version: MetadataVersion = MetadataVersion.MINIMUM_VERSION
        self.current_controller_id = -1
        self.handle_load_snapshot_count = 0
        self.last_applied_provenance = MetadataProvenance.EMPTY
        self.load_errors = 0
        self.apply_errors = 0
        #: feature name -> finalized level (Kafka starts every production feature at 0 and
        #: metadata.version at the minimum level)
        self.finalized_levels: dict[str, int] = {f.name: 0 for f in PRODUCTION_FEATURES}
        self.finalized_levels[METADATA_VERSION_FEATURE_NAME] = MetadataVersion.MINIMUM_VERSION.feature_level
        self._collectors: list[Any] = []
        self._batch_time_us: Any = None
        self._batch_sizes: Any = None
        self._snapshot_load_ms: Any = None
        if registry is None:
            return

        def gauge(type_: str, name: str, doc: str, fn: Callable[[], float]) -> None:
            self._collectors.append(registry.callback_gauge(_DOMAIN, type_, name, doc, fn))

        gauge(_LOADER, "CurrentMetadataVersion", "Feature level of metadata.version in the last published image",
              lambda: self.current_metadata_version.feature_level)
        gauge(_LOADER, "CurrentControllerId", "Id of the active controller (-1: none known)",
              lambda: self.current_controller_id)
        gauge(_LOADER, "HandleLoadSnapshotCount", "Snapshots the metadata loader loaded",
              lambda: self.handle_load_snapshot_count)
        levels = _FinalizedLevels(metric_name(_DOMAIN, _LOADER, "FinalizedLevel"), self.finalized_levels)
        registry.register(levels)
        self._collectors.append(levels)
        self._snapshot_load_ms = registry.histogram(
            "kraft", _LOADER, "SnapshotLoadTimeMs", "Time to load a snapshot into a delta (ms)", MS_BUCKETS)
        self._collectors.append(self._snapshot_load_ms)
        if not broker:
            return
        self._batch_time_us = registry.histogram(
            _DOMAIN, _LISTENER, "MetadataBatchProcessingTimeUs", "Time to fold one committed batch (us)", US_BUCKETS)
        self._batch_sizes = registry.histogram(
            _DOMAIN, _LISTENER, "MetadataBatchSizes", "Records per committed batch", SIZE_BUCKETS)
        self._collectors += [self._batch_time_us, self._batch_sizes]
        gauge(_BROKER_GROUP, "last-applied-record-offset", "Offset of the last record in the published image",
              lambda: self.last_applied_provenance.last_contained_offset)
        gauge(_BROKER_GROUP, "last-applied-record-timestamp",
              "Append time (wall-clock ms) of the last record in the published image",
              lambda: self.last_applied_provenance.last_contained_log_time_ms)
        gauge(_BROKER_GROUP, "last-applied-record-lag-ms",
              "Wall-clock ms since the append time of the last record in the published image",
              lambda: self._wall_clock() - self.last_applied_provenance.last_contained_log_time_ms)
        gauge(_BROKER_GROUP, "metadata-load-error-count", "Faults the metadata loader reported",
              lambda: self.load_errors)
        gauge(_BROKER_GROUP, "metadata-apply-error-count", "Faults publishers reported applying an image",
              lambda: self.apply_errors)

    # -- what the loader calls ------------------------------------------------------------------

    def update_batch_processing_time_ns(self, elapsed_ns: int) -> None:
        if self._batch_time_us is not None:
            self._batch_time_us.observe(elapsed_ns / 1000.0)

    def update_batch_size(self, size: int) -> None:
        if self._batch_sizes is not None:
            self._batch_sizes.observe(size)

    def update_snapshot_load_time_ns(self, elapsed_ns: int) -> None:
        if self._snapshot_load_ms is not None:
            self._snapshot_load_ms.observe(elapsed_ns / 1e6)

    def update_last_applied_image_provenance(self, provenance: MetadataProvenance) -> None:
        self.last_applied_provenance = provenance

    @property
    def last_applied_offset(self) -> int:
        """The offset of the last image every publisher has seen (-1 before the first)."""
        return self.last_applied_provenance.last_contained_offset

    def set_current_metadata_version(self, metadata_version: MetadataVersion) -> None:
        self.current_metadata_version = metadata_version
        self.finalized_levels[METADATA_VERSION_FEATURE_NAME] = metadata_version.feature_level

    def set_finalized_level(self, feature: str, level: int) -> None:
        self.finalized_levels[feature] = level

    def set_current_controller_id(self, controller_id: int) -> None:
        self.current_controller_id = controller_id

    def increment_handle_load_snapshot_count(self) -> int:
        self.handle_load_snapshot_count += 1
        return self.handle_load_snapshot_count

    def increment_load_errors(self) -> None:
        self.load_errors += 1

    def increment_apply_errors(self) -> None:
        self.apply_errors += 1

    def close(self) -> None:
        """Remove every metric this object registered (idempotent)."""
        registry, self._registry = self._registry, None
        if registry is not None:
            for collector in self._collectors:
                registry.unregister(collector)
        self._collectors = []


class SnapshotEmitterMetrics:
    """Kafka's ``SnapshotEmitterMetrics``; ``clock_ms`` is wall-clock ms (the age starts at 0 when
    the emitter is made, as Kafka's)."""

    def __init__(self, registry: MetricsRegistry | None = None, *,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self._registry = registry
        self._clock_ms = clock_ms
        self.latest_snapshot_generated_bytes = 0
        self.latest_snapshot_generated_time_ms = clock_ms()
        self._collectors: list[Any] = []
        if registry is None:
            return
        self._collectors = [
            registry.callback_gauge(_DOMAIN, "SnapshotEmitter", "LatestSnapshotGeneratedBytes",
                                    "Size of the latest snapshot this node generated (bytes)",
                                    lambda: self.latest_snapshot_generated_bytes),
            registry.callback_gauge(_DOMAIN, "SnapshotEmitter", "LatestSnapshotGeneratedAgeMs",
                                    "Time since this node generated its latest snapshot (ms)",
                                    lambda: self.latest_snapshot_generated_age_ms),
        ]

    @property
    def latest_snapshot_generated_age_ms(self) -> int:
        return self._clock_ms() - self.latest_snapshot_generated_time_ms

    def close(self) -> None:
        registry, self._registry = self._registry, None
        if registry is not None:
            for collector in self._collectors:
                registry.unregister(collector)
        self._collectors = []
