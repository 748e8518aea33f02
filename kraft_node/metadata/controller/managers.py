"""Wiring: build the control managers on a QuorumController and connect them (Kafka's
QuorumController constructor does this inline).

Each manager keeps its state in timeline collections of the controller's registry; this
module registers each record type's replayer, each manager's snapshot source (features
first: a reader needs metadata.version before any other record), the soft-state hooks of
claim and renounce, and the periodic tasks.  Settings are read by Kafka's key names with
Kafka's defaults, from any object with those attributes (the node's ControllerSettings), so
the simulator and tests run the same wiring as a process.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from kraft_node.metadata.controller.cluster_control import ClusterControlManager
from kraft_node.metadata.controller.configuration_control import (
    ConfigurationControlManager,
    config_resource_existence_checker,
)
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.features import FeatureControlManager, QuorumFeatures
from kraft_node.metadata.controller.partition_changes import PartitionChangeOps
from kraft_node.metadata.controller.periodic import PeriodicTask, PeriodicTaskControlManager, PeriodicTaskFlag
from kraft_node.metadata.controller.producer_ids import ProducerIdControlManager
from kraft_node.metadata.controller.replication_control import ReplicationControlManager
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.controller.security_control import (
    AclControlManager,
    ClientQuotaControlManager,
    DelegationTokenControlManager,
    ScramControlManager,
)
from kraft_node.metadata.controller.snapshot_generator import SnapshotGenerator
from kraft_node.metadata.versions import supported_features
from kraft_node.protocol.errors import Errors
from kraft_storage.messages import metadata as m

if TYPE_CHECKING:
    from kraft_node.metadata.controller.quorum_controller import QuorumController

log = logging.getLogger("kraft.controller")

NS_PER_MS = 1_000_000

#: The replay-side managers of security and quota records (security_control.py).
SECURITY_MANAGERS = (AclControlManager, ScramControlManager, DelegationTokenControlManager,
                     ClientQuotaControlManager)
#: those whose snapshot records depend on metadata.version (and refuse lossy ones)
VERSIONED = (ScramControlManager, DelegationTokenControlManager)

#: Kafka's defaults for the settings the managers read (ControllerSettings' fields).
DEFAULTS = {
    "broker_session_timeout_ms": 9000,
    "broker_heartbeat_interval_ms": 2000,
    "metadata_max_idle_interval_ms": 500,
    "metadata_log_max_record_bytes_between_snapshots": 20 * 1024 * 1024,
    "metadata_log_max_snapshot_interval_ms": 3_600_000,
    "controller_performance_sample_period_ms": 60_000,
    "controller_performance_always_log_threshold_ms": 2000,
    "num_partitions": 1,
    "default_replication_factor": 1,
    "leader_imbalance_check_interval_seconds": 300,
}

#: Periodic task names (Kafka's).
FENCE_STALE_BROKERS = "maybeFenceStaleBroker"
WRITE_NO_OP = "writeNoOpRecord"
PERFORMANCE_LOG = "generatePeriodicPerformanceMessage"
ELECT_PREFERRED = "electPreferred"
ELECT_UNCLEAN = "electUnclean"


def static_config(ctl: "QuorumController") -> dict[str, str]:
    """The node's server.properties as read (``settings.static_config``; empty when the
    controller runs without a node): the static level of effective config values."""
    raw = getattr(ctl.settings, "static_config", None) if ctl.settings is not None else None
    return {str(k): str(v) for k, v in dict(raw or {}).items()}


def setting(ctl: "QuorumController", name: str) -> int:
    value = getattr(ctl.settings, name, None) if ctl.settings is not None else None
    return int(DEFAULTS[name] if value is None else value)


class RaftKRaftVersion:
    """kraft.version as the Raft layer has it (finalized in the log's control records, not in
    the controller's state).  kraft's Raft layer does not change it at run time: an
    UpdateFeatures that asks to is refused, naming why (nothing silent)."""

    def __init__(self, ctl: "QuorumController"):
        self.ctl = ctl

    def kraft_version(self) -> int:
        kv = getattr(self.ctl.raft, "kraft_version", None)
        if kv is None:
            core = getattr(self.ctl.raft, "core", None)
            kv = getattr(core, "kraft_version", 0) if core is not None else 0
        return int(kv)

    def upgrade_kraft_version(self, epoch: int, version: int, validate_only: bool) -> None:
        if version == self.kraft_version():
            return
        raise ApiError(Errors.INVALID_UPDATE_VERSION,
                       f"kraft.version cannot be changed from {self.kraft_version()} to {version} at run time by "
                       "this controller: format the controllers with --standalone or --initial-controllers for "
                       "kraft.version 1 (a dynamic quorum)")


class _QueueAccessor:
    """What the periodic manager schedules through: deferred writes on the controller's
    queue, keeping the earlier deadline when a task is rescheduled (Kafka's
    EarliestDeadlineFunction)."""

    def __init__(self, ctl: "QuorumController"):
        self.ctl = ctl

    def schedule_deferred(self, tag: str, deadline_ns: int, op: Any) -> None:
        self.ctl.schedule_deferred_write(tag, deadline_ns, op)

    def cancel_deferred(self, tag: str) -> None:
        self.ctl.cancel_deferred(tag)


def install_default_managers(ctl: "QuorumController") -> None:
    """Build and connect every manager of this issue (features, cluster, producer ids,
    periodic tasks, snapshots) and, when present, the replay-side managers of topics,
    configs and security records."""
    reg = ctl.registry
    voters = getattr(ctl.settings, "voter_ids", ()) or ()
    features = FeatureControlManager(reg, QuorumFeatures(ctl.node_id, supported_features(), list(voters)),
                                     kraft_version_accessor=RaftKRaftVersion(ctl))
    session_ms = setting(ctl, "broker_session_timeout_ms")
    cluster = ClusterControlManager(reg, cluster_id=ctl.cluster_id, feature_control=features, clock_ms=ctl.clock_ms,
                                    session_timeout_ms=session_ms,
                                    has_leaderships=lambda b: ctl.replication_control.has_leaderships(b))
    features.cluster_support = cluster
    oc = ctl.offset_control
    cluster.uncommitted_records = lambda: max(0, oc.next_write_offset - 1 - oc.last_committed_offset) \
        if oc.active else 0
    configs = ConfigurationControlManager(
        reg, static_config=static_config(ctl), node_id=ctl.node_id, feature_control=features,
        existence_checker=config_resource_existence_checker(
            broker_registered=lambda b: cluster.registration(b) is not None,
            is_controller_id=lambda n: n in voters or cluster.controller_registration(n) is not None,
            topic_exists=lambda name: ctl.replication_control.topic_id(name) is not None))
    replication = ReplicationControlManager(
        reg, configs, cluster_control=cluster, feature_control=features,
        default_num_partitions=setting(ctl, "num_partitions"),
        default_replication_factor=setting(ctl, "default_replication_factor"))
    ops = PartitionChangeOps(replication, cluster, configs, features)
    cluster.set_lifecycle(ops.lifecycle)
    replication.broker_excluded = lambda b: ops.context.excluded(b, None)
    ctl.partition_ops = ops
    pids = ProducerIdControlManager(reg, cluster)
    ctl.feature_control = features
    ctl.cluster_control = cluster
    ctl.producer_id_control = pids
    ctl.replication_control = replication

    ctl.register_replayer(m.FeatureLevelRecord, features.replay)
    for rt in ClusterControlManager.RECORD_TYPES:
        ctl.register_replayer(rt, cluster.replay)
    ctl.register_replayer(m.ProducerIdsRecord, pids.replay)
    ctl.register_snapshot_source(features.snapshot_records)
    ctl.register_snapshot_source(cluster.snapshot_records)
    ctl.register_snapshot_source(pids.snapshot_records)
    _install_replay_managers(ctl, replication, configs)

    ctl.on_activate(lambda: cluster.activate(ctl.clock_ms))
    ctl.on_deactivate(cluster.deactivate)

    periodic = PeriodicTaskControlManager(lambda: ctl.clock_ms() * NS_PER_MS, _QueueAccessor(ctl))
    ctl.periodic_control = periodic
    periodic.register_task(PeriodicTask(FENCE_STALE_BROKERS, cluster.fence_stale_broker,
                                        max(1, session_ms // 8) * NS_PER_MS))
    # Kafka 4's election tasks: preferred leaders back in place (at most 1,000 elections a
    # run, auto.leader.rebalance.enable), and unclean elections for topics that allow them
    if static_config(ctl).get("auto.leader.rebalance.enable", "true").strip().lower() != "false":
        periodic.register_task(PeriodicTask(
            ELECT_PREFERRED, ops.maybe_balance_partition_leaders,
            setting(ctl, "leader_imbalance_check_interval_seconds") * 1000 * NS_PER_MS,
            frozenset({PeriodicTaskFlag.VERBOSE})))
    periodic.register_task(PeriodicTask(ELECT_UNCLEAN, ops.maybe_elect_unclean_leaders, 5 * 60_000 * NS_PER_MS,
                                        frozenset({PeriodicTaskFlag.VERBOSE})))
    idle = setting(ctl, "metadata_max_idle_interval_ms")
    if idle > 0:
        periodic.register_task(PeriodicTask(WRITE_NO_OP, lambda: _no_op_record(ctl), idle * NS_PER_MS))
    ctl.on_activation_complete(periodic.activate)
    ctl.on_deactivate(periodic.deactivate)

    ctl.snapshot_generator = SnapshotGenerator(
        ctl, max_bytes_between_snapshots=setting(ctl, "metadata_log_max_record_bytes_between_snapshots"),
        max_interval_ms=setting(ctl, "metadata_log_max_snapshot_interval_ms") or 2**62)


def replication_metadata_version(ctl: "QuorumController", features: FeatureControlManager | None = None) -> Any:
    """epoch -> the metadata.version in force there (None before one is finalized: the
    writers then use their newest record versions)."""
    fc = features if features is not None else ctl.feature_control
    return lambda e: fc.metadata_version_or_none(epoch=e)


def _no_op_record(ctl: "QuorumController") -> ControllerResult[bool]:
    """Kafka's writeNoOpRecord task: keeps the log (and the high watermark, and every
    broker's view of liveness) moving when nothing else is written."""
    mv = ctl.feature_control.metadata_version_or_none()
    if mv is None or not mv.is_no_op_record_supported():
        return ControllerResult.of([], False)
    return ControllerResult.of([ApiMessageAndVersion(m.NoOpRecord(), 0)], False)


def _install_replay_managers(ctl: "QuorumController", replication: ReplicationControlManager,
                             configs: ConfigurationControlManager) -> None:
    """Topics/partitions, configs, ACLs, SCRAM, delegation tokens and quotas: their state and
    replay (the write side comes with the next issue).  A Kafka-written log holds them, and an
    unhandled record type is fatal."""
    ctl.configuration_control = configs
    for rt in ReplicationControlManager.RECORD_TYPES:
        ctl.register_replayer(rt, replication.replay)
    ctl.register_bulk_replayer(m.PartitionRecord, replication.replay_partitions)
    # runs of ISR/leader-only changes of one topic (a broker fenced or shutting down) merged,
    # then each broker's index tuple rewritten once (session 16: 27 -> 9.5 us a change)
    ctl.register_bulk_replayer(m.PartitionChangeRecord, replication.replay_partition_changes)
    ctl.register_replayer(m.ConfigRecord, configs.replay)
    ctl.register_snapshot_source(replication.snapshot_records)
    ctl.register_snapshot_source(configs.snapshot_records)
    mv_at = replication_metadata_version(ctl)
    ctl.security_managers = [cls(ctl.registry, metadata_version=mv_at) if cls in VERSIONED else cls(ctl.registry)
                             for cls in SECURITY_MANAGERS]
    for mgr in ctl.security_managers:
        for rt in mgr.RECORD_TYPES:
            ctl.register_replayer(rt, mgr.replay)
        ctl.register_snapshot_source(mgr.snapshot_records)
