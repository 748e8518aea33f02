"""The finalized features: Kafka's FeatureControlManager and QuorumFeatures.

Why the controller keeps them: metadata.version decides which records (and record versions)
every other manager may write, and a feature may only be finalized at a level every node of
the cluster can run.  So the levels are hard state, changed only by replaying
``FeatureLevelRecord`` s, and an update is checked against what this controller, every
registered broker and every voter of the quorum say they support.

* :class:`QuorumFeatures` -- this controller's node id, the ``{feature: (min, max)}`` its
  software supports, and the quorum's voter ids (a voter that has not registered may not
  support a new level, so a feature cannot move until it has).
* :class:`ClusterFeatureSupportDescriber` -- what the registered brokers and controllers
  support.  The ClusterControlManager implements it (Kafka's ClusterFeatureSupportDescriber).
* :class:`KRaftVersionAccessor` -- kraft.version is not a FeatureLevelRecord: it lives in the
  Raft log (KRaftVersionRecord), so the manager reads and upgrades it through the Raft layer.
* :class:`FeatureControlManager` -- the timeline state (metadata.version; the other
  finalized levels), ``replay``, ``update_features`` (Kafka's UpdateFeatures rules and
  messages) and committed reads at a registry epoch.

Invariants: the finalized map never holds a level 0 (0 is "not finalized": replaying it
removes the feature) nor metadata.version or kraft.version (held elsewhere); every level
replayed is inside this controller's supported range (else ReplayError: the log holds
something this software cannot run); an update's records are all-or-nothing (one atomic
batch, none at all when any feature is refused).
"""
from __future__ import annotations

import logging
from enum import IntEnum
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Protocol, Sequence

from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import (
    ELIGIBLE_LEADER_REPLICAS_VERSION,
    KRAFT_VERSION,
    METADATA_VERSION_FEATURE_NAME,
    MetadataVersion,
    feature_from_name,
    supported_features,
    validate_version,
    version_range_str,
)
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.metadata import FeatureLevelRecord, NoOpRecord
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap, TimelineObject

__all__ = [
    "UpgradeType", "VersionRange", "ClusterFeatureSupportDescriber", "KRaftVersionAccessor",
    "QuorumFeatures", "FeatureControlManager", "UnknownMetadataVersionError", "update_failed_error",
]

log = logging.getLogger("kraft.controller.features")

#: ``(min, max)`` levels, both inclusive (Kafka's VersionRange).
VersionRange = tuple[int, int]

_MV = METADATA_VERSION_FEATURE_NAME
_KRAFT = KRAFT_VERSION.name


class UpgradeType(IntEnum):
    """Kafka's ``FeatureUpdate.UpgradeType`` (the UpdateFeatures request's UpgradeType codes)."""
    UNKNOWN = 0
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3

    @classmethod
    def from_code(cls, code: int) -> UpgradeType:
        """Any code this software does not know is UNKNOWN (refused per feature, not a crash)."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN

    @classmethod
    def of_request(cls, upgrade_type: int, allow_downgrade: bool, api_version: int) -> UpgradeType:
        """The type a FeatureUpdateKey asks for: version 0 has only AllowDowngrade (a safe
        downgrade when set), version 1+ the UpgradeType code."""
        if api_version == 0:
            return cls.SAFE_DOWNGRADE if allow_downgrade else cls.UPGRADE
        return cls.from_code(upgrade_type)


class ClusterFeatureSupportDescriber(Protocol):
    """What the cluster's registered nodes support (the ClusterControlManager implements it).

    Each call yields ``(node id, {feature name: (min, max)})`` per registered broker /
    controller; a feature a node does not list is supported only at level 0."""

    def broker_supported(self) -> Iterable[tuple[int, Mapping[str, VersionRange]]]: ...

    def controller_supported(self) -> Iterable[tuple[int, Mapping[str, VersionRange]]]: ...


class KRaftVersionAccessor(Protocol):
    """kraft.version as the Raft layer holds it (Kafka's KRaftVersionAccessor).
    ``upgrade_kraft_version`` raises ApiError (answered as is) or ValueError (an invalid
    update version) when the quorum cannot move to ``version``."""

    def kraft_version(self) -> int: ...

    def upgrade_kraft_version(self, epoch: int, version: int, validate_only: bool) -> None: ...


class _NoNodes:
    """No broker or controller has registered (a describer for a controller not wired to one)."""

    def broker_supported(self) -> Iterable[tuple[int, Mapping[str, VersionRange]]]:
        return ()

    def controller_supported(self) -> Iterable[tuple[int, Mapping[str, VersionRange]]]:
        return ()


class _LocalKRaftVersion:
    """kraft.version kept in memory (Kafka's builder default; for tests and tools that run a
    manager without a Raft layer).  Starts at the latest production level."""

    def __init__(self, version: int = KRAFT_VERSION.latest_production):
        self.version = version

    def kraft_version(self) -> int:
        return self.version

    def upgrade_kraft_version(self, epoch: int, version: int, validate_only: bool) -> None:
        if not validate_only:
            self.version = version


class QuorumFeatures:
    """This controller's supported features and the quorum's voter ids (Kafka's QuorumFeatures)."""

    #: The range of a feature a node does not know: level 0 only.
    DISABLED: VersionRange = (0, 0)

    def __init__(self, node_id: int, local_supported_features: Mapping[str, VersionRange],
                 quorum_node_ids: Sequence[int]):
        self.node_id = node_id
        self.local_supported_features: Mapping[str, VersionRange] = MappingProxyType(
            {k: (int(lo), int(hi)) for k, (lo, hi) in local_supported_features.items()})
        self.quorum_node_ids: tuple[int, ...] = tuple(quorum_node_ids)

    @staticmethod
    def default_supported_feature_map(enable_unstable: bool = False) -> dict[str, VersionRange]:
        """What this software supports (versions.supported_features): metadata.version from
        the minimum to the latest (production, unless ``enable_unstable``), and every other
        feature whose top level is above 0."""
        return supported_features(enable_unstable)

    @staticmethod
    def reason_not_supported(new_version: int, what: str, supported: VersionRange) -> str | None:
        """None when ``new_version`` is in ``supported``; else why not, in Kafka's words."""
        lo, hi = supported
        if lo <= new_version <= hi:
            return None
        if hi == 0:
            return f"{what} does not support this feature."
        return f"{what} only supports versions {version_range_str(lo, hi)}"

    def local_supported_feature(self, name: str) -> VersionRange:
        return self.local_supported_features.get(name, self.DISABLED)

    def is_controller_id(self, node_id: int) -> bool:
        return node_id in self.quorum_node_ids

    def reason_not_locally_supported(self, feature_name: str, new_version: int) -> str | None:
        return self.reason_not_supported(new_version, f"Local controller {self.node_id}",
                                         self.local_supported_feature(feature_name))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, QuorumFeatures) and (
            self.node_id, dict(self.local_supported_features), self.quorum_node_ids) == (
            other.node_id, dict(other.local_supported_features), other.quorum_node_ids)

    def __hash__(self) -> int:
        return hash((self.node_id, self.quorum_node_ids))

    def __repr__(self) -> str:
        feats = ", ".join(f"{k}: {version_range_str(*v)}" for k, v in sorted(self.local_supported_features.items()))
        ids = ", ".join(str(i) for i in sorted(self.quorum_node_ids))
        return f"QuorumFeatures(nodeId={self.node_id}, localSupportedFeatures={{{feats}}}, quorumNodeIds=[{ids}])"


class UnknownMetadataVersionError(RuntimeError):
    """No FeatureLevelRecord for metadata.version has been replayed yet (at the epoch read):
    the log is empty or still loading.  A programming error for anything but the
    activation check (which uses ``metadata_version_or_none``)."""


def update_failed_error(error: ApiError) -> ApiError:
    """The top-level error an UpdateFeatures response carries when a feature was refused
    (Kafka's QuorumController.updateFeatures: the whole request fails)."""
    return ApiError(error.error, "The update failed for all features since the following feature had an "
                                 f"error: {error.message}")


class FeatureControlManager:
    """metadata.version and the other finalized feature levels, as timeline state.

    ``update_features`` returns ``ControllerResult[dict[str, ApiError | None]]``: Kafka's
    update is all-or-nothing and stops at the first refused feature, so the dict is either
    ``{feature: None}`` for every requested feature (the records, one atomic batch) or the
    single refused ``{feature: ApiError(INVALID_UPDATE_VERSION, ...)}`` with no records.
    """

    def __init__(self, snapshot_registry: Any, quorum_features: QuorumFeatures | None = None, *,
                 cluster_support: ClusterFeatureSupportDescriber | None = None,
                 kraft_version_accessor: KRaftVersionAccessor | None = None):
        self.quorum_features = quorum_features if quorum_features is not None else QuorumFeatures(
            0, QuorumFeatures.default_supported_feature_map(), [0])
        self.cluster_support: ClusterFeatureSupportDescriber = \
            cluster_support if cluster_support is not None else _NoNodes()
        self.kraft_version_accessor: KRaftVersionAccessor = \
            kraft_version_accessor if kraft_version_accessor is not None else _LocalKRaftVersion()
        # snapshot_registry: a kraft_storage.timeline.SnapshotRegistry (native or pure twin)
        #: feature name -> finalized level (> 0); never metadata.version or kraft.version
        self._finalized = TimelineHashMap(snapshot_registry)
        #: the MetadataVersion, or None until the first FeatureLevelRecord for it is replayed
        self._metadata_version = TimelineObject(snapshot_registry, None)

    # ------------------------------------------------------------------ reads

    def metadata_version_or_none(self, *, epoch: int = LATEST_EPOCH) -> MetadataVersion | None:
        mv: MetadataVersion | None = self._metadata_version.get(epoch)
        return mv

    def metadata_version(self, *, epoch: int = LATEST_EPOCH) -> MetadataVersion:
        """The metadata.version at ``epoch``; UnknownMetadataVersionError before any is set."""
        mv = self.metadata_version_or_none(epoch=epoch)
        if mv is None:
            raise UnknownMetadataVersionError("Unknown metadata version for FeatureControlManager")
        return mv

    def finalized_features(self, *, epoch: int = LATEST_EPOCH) -> dict[str, int]:
        """``{name: level}`` at ``epoch``, metadata.version included (kraft.version is the
        Raft layer's: ``kraft_version_accessor``)."""
        out = {_MV: self.metadata_version(epoch=epoch).feature_level}
        out.update(self._finalized.to_dict(epoch))
        return out

    def feature_level(self, name: str, *, epoch: int = LATEST_EPOCH) -> int:
        """A feature's finalized level at ``epoch``; 0 when not finalized."""
        if name == _MV:
            return self.metadata_version(epoch=epoch).feature_level
        level: int = self._finalized.get(name, 0, epoch=epoch)
        return level

    def is_elr_enabled(self, *, epoch: int = LATEST_EPOCH) -> bool:
        """eligible.leader.replicas.version >= 1 (Kafka's isElrFeatureEnabled)."""
        return self.feature_level(ELIGIBLE_LEADER_REPLICAS_VERSION.name, epoch=epoch) >= 1

    def is_controller_id(self, node_id: int) -> bool:
        return self.quorum_features.is_controller_id(node_id)

    def snapshot_records(self, epoch: int) -> list[ApiMessageAndVersion]:
        """The records rebuilding this state at ``epoch``: metadata.version first (a reader
        needs it before anything else), then the other features by name."""
        mv = self.metadata_version_or_none(epoch=epoch)
        if mv is None:
            return []
        out = [ApiMessageAndVersion(FeatureLevelRecord(name=_MV, feature_level=mv.feature_level), 0)]
        for name, level in sorted(self._finalized.to_dict(epoch).items()):
            out.append(ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0))
        return out

    # ------------------------------------------------------------------ replay

    def replay(self, record: FeatureLevelRecord, offset: int = -1) -> None:
        """Apply a FeatureLevelRecord.  A level outside this controller's supported range is
        fatal (ReplayError, Kafka's message): this software cannot run what the log says.
        kraft.version records are skipped (KAFKA-18979: the Raft log owns that level)."""
        name, level = record.name, int(record.feature_level)
        lo, hi = self.quorum_features.local_supported_feature(name)
        if not lo <= level <= hi:
            raise ReplayError(f"Tried to apply FeatureLevelRecord {_record_str(record)}, but this controller "
                              f"only supports versions {version_range_str(lo, hi)}")
        if name == _MV:
            try:
                mv = MetadataVersion.from_feature_level(level)
            except ValueError as exc:
                raise ReplayError(str(exc)) from None
            self._metadata_version.set(mv)
            log.info("Replayed a FeatureLevelRecord setting metadata.version to %s", mv)
        elif name == _KRAFT:
            pass
        elif level == 0:
            self._finalized.remove(name)
            log.info("Replayed a FeatureLevelRecord removing feature %s", name)
        else:
            self._finalized.put(name, level)
            log.info("Replayed a FeatureLevelRecord setting feature %s to %d", name, level)

    # ------------------------------------------------------------------ writes

    def update_features(self, updates: Mapping[str, int], upgrade_types: Mapping[str, UpgradeType | int],
                        validate_only: bool, cluster_support: ClusterFeatureSupportDescriber | None = None, *,
                        claimed_epoch: int = -1) -> ControllerResult[dict[str, ApiError | None]]:
        """Check and plan an UpdateFeatures request (Kafka's FeatureControlManager.updateFeatures).

        ``updates``: feature -> new level (0 removes a feature); ``upgrade_types``: feature ->
        UpgradeType (UPGRADE when absent); ``cluster_support``: overrides the describer
        given at construction; ``claimed_epoch``: the active controller's epoch, for a
        kraft.version upgrade.  Changes nothing: the records do, once replayed.  A kraft.version
        upgrade (outside validate-only) is started in the Raft layer at once and answered
        with a NoOpRecord to wait on, as Kafka does.
        """
        describer = cluster_support if cluster_support is not None else self.cluster_support
        records: list[ApiMessageAndVersion] = []
        proposed = dict(self._finalized.to_dict())
        proposed[_MV] = self.metadata_version().feature_level
        proposed.update(updates)
        response: dict[str, ApiError | None] = {}
        for name, level in updates.items():
            kind = UpgradeType.from_code(int(upgrade_types.get(name, UpgradeType.UPGRADE)))
            error = self._update_feature(name, int(level), kind, records, proposed, validate_only,
                                         claimed_epoch, describer)
            if error is not None:
                return ControllerResult.of([], {name: error})
            response[name] = None
        if validate_only:
            return ControllerResult.of([], response)
        return ControllerResult.atomic_of(records, response)

    def _update_feature(self, name: str, new_version: int, kind: UpgradeType, records: list[ApiMessageAndVersion],
                        proposed: Mapping[str, int], validate_only: bool, claimed_epoch: int,
                        describer: ClusterFeatureSupportDescriber) -> ApiError | None:
        if kind is UpgradeType.UNKNOWN:
            return _invalid_update_version(name, new_version, "The controller does not support the given upgrade type.")
        if name == _MV:
            current = self.metadata_version().feature_level
        elif name == _KRAFT:
            current = self.kraft_version_accessor.kraft_version()
        else:
            current = self._finalized.get(name, 0)
        if new_version < 0:
            return _invalid_update_version(name, new_version, "A feature version cannot be less than 0.")
        reason = self._reason_not_supported(name, new_version, describer)
        if reason is not None:
            return _invalid_update_version(name, new_version, reason)
        if new_version < current:
            if kind is UpgradeType.UPGRADE:
                return _invalid_update_version(
                    name, new_version, "Can't downgrade the version of this feature without setting the upgrade "
                                       "type to either safe or unsafe downgrade.")
        elif new_version > current and kind is not UpgradeType.UPGRADE:
            return _invalid_update_version(name, new_version, "Can't downgrade to a newer version.")

        if name == _MV:
            return self._update_metadata_version(new_version, kind is UpgradeType.UNSAFE_DOWNGRADE, records)
        if name == _KRAFT:
            return self._update_kraft_version(new_version, current, kind, records, proposed, validate_only,
                                              claimed_epoch)
        try:
            validate_version(feature_from_name(name).from_feature_level(new_version, True), proposed)
        except ValueError as exc:
            return _invalid_update_version(name, new_version, str(exc))
        records.append(ApiMessageAndVersion(FeatureLevelRecord(name=name, feature_level=new_version), 0))
        return None

    def _update_kraft_version(self, new_version: int, current: int, kind: UpgradeType,
                              records: list[ApiMessageAndVersion], proposed: Mapping[str, int],
                              validate_only: bool, claimed_epoch: int) -> ApiError | None:
        """kraft.version moves in the Raft log, not by a FeatureLevelRecord; it only goes up.

        Unlike Kafka (which leaves the check to the formatter), the dependency on
        metadata.version 3.9-IV0 is checked here too: a dynamic quorum at an older MV is
        a state Kafka's own tools refuse to create."""
        if kind is not UpgradeType.UPGRADE:
            if new_version != current:
                return _invalid_update_version(_KRAFT, new_version, "Can't downgrade the version of this feature.")
            return None
        try:
            validate_version(KRAFT_VERSION.from_feature_level(new_version, True), proposed)
            self.kraft_version_accessor.upgrade_kraft_version(claimed_epoch, new_version, validate_only)
        except ApiError as exc:
            return exc
        except ValueError as exc:
            return _invalid_update_version(_KRAFT, new_version, str(exc))
        # something to wait on: the RPC answers once this commits
        records.append(ApiMessageAndVersion(NoOpRecord(), 0))
        return None

    def _reason_not_supported(self, name: str, new_version: int,
                              describer: ClusterFeatureSupportDescriber) -> str | None:
        """Why some node cannot run ``name`` at ``new_version``: this controller, then every
        registered broker, then (from 3.7-IV0, when controllers register) every other
        registered controller -- and a voter that has not registered at all."""
        qf = self.quorum_features
        reason = qf.reason_not_locally_supported(name, new_version)
        if reason is not None:
            return reason
        brokers = 0
        for broker_id, supported in describer.broker_supported():
            reason = qf.reason_not_supported(new_version, f"Broker {broker_id}",
                                             supported.get(name, QuorumFeatures.DISABLED))
            if reason is not None:
                return reason
            brokers += 1
        controllers = 1
        note = ""
        if self.metadata_version().is_controller_registration_supported():
            found = {qf.node_id}
            for controller_id, supported in describer.controller_supported():
                if controller_id == qf.node_id:
                    continue  # checked above, against this software's own table
                reason = qf.reason_not_supported(new_version, f"Controller {controller_id}",
                                                 supported.get(name, QuorumFeatures.DISABLED))
                if reason is not None:
                    return reason
                found.add(controller_id)
                controllers += 1
            for voter in qf.quorum_node_ids:
                if voter not in found:
                    return f"controller {voter} has not registered, and may not support this feature"
        else:
            note = " Note: unable to verify controller support in the current MetadataVersion."
        log.info("Verified that %d broker(s) and %d controller(s) supported changing %s to feature level %d.%s",
                 brokers, controllers, name, new_version, note)
        return None

    def _update_metadata_version(self, new_level: int, allow_unsafe_downgrade: bool,
                                 records: list[ApiMessageAndVersion]) -> ApiError | None:
        """metadata.version only goes down across levels that did not change the metadata
        format (a "safe" downgrade); unsafe downgrades are not supported (KAFKA-13896)."""
        current = self.metadata_version()
        try:
            new = MetadataVersion.from_feature_level(new_level)
        except ValueError:
            return _invalid_metadata_version(
                new_level, f"Valid versions are from {MetadataVersion.MINIMUM_VERSION.feature_level} to "
                           f"{MetadataVersion.latest_testing().feature_level}.")
        if new < current:
            if not MetadataVersion.check_if_metadata_changed(current, new):
                log.warning("Downgrading metadata.version from %s to %s.", current, new)
            elif allow_unsafe_downgrade:
                return _unsupported_metadata_downgrade(
                    current, new, "Unsafe metadata downgrade is not supported in this version.")
            else:
                return _unsupported_metadata_downgrade(
                    current, new, "Refusing to perform the requested downgrade because it might delete metadata "
                                  "information.")
        else:
            log.warning("Upgrading metadata.version from %s to %s.", current, new)
        records.append(ApiMessageAndVersion(FeatureLevelRecord(name=_MV, feature_level=new_level), 0))
        return None


def _invalid_update_version(feature: str, version: int, message: str) -> ApiError:
    text = f"Invalid update version {version} for feature {feature}. {message}"
    log.warning(text)
    return ApiError(Errors.INVALID_UPDATE_VERSION, text)


def _invalid_metadata_version(version: int, message: str) -> ApiError:
    text = f"Invalid metadata.version {version}. {message}"
    log.warning(text)
    return ApiError(Errors.INVALID_UPDATE_VERSION, text)


def _unsupported_metadata_downgrade(current: MetadataVersion, target: MetadataVersion, message: str) -> ApiError:
    text = f"Unsupported metadata.version downgrade from {current.feature_level} to {target.feature_level}. {message}"
    log.warning(text)
    return ApiError(Errors.INVALID_UPDATE_VERSION, text)


def _record_str(record: FeatureLevelRecord) -> str:
    """Kafka's generated toString, which its replay error quotes."""
    return f"FeatureLevelRecord(name='{record.name}', featureLevel={record.feature_level})"
