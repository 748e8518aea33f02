"""metadata.version and the other finalized features (Kafka's ``MetadataVersion``,
``Feature`` and its ``FeatureVersion`` enums in server-common).

Why one module: the storage tool (which levels a new cluster starts at), the controller
(which record versions it writes, which feature updates it accepts) and the broker (what
it advertises) must agree on the same table, or a record written under one reading is
replayed under another.

* :class:`MetadataVersion` -- the ``metadata.version`` levels a KRaft cluster can run,
  3.3-IV3 (level 7, Kafka 4.x's minimum) to 4.2-IV1 (level 29).  Ordered by level.  Its
  predicates say what the cluster may write at that level (``is_elr_supported()``,
  ``register_broker_record_version()``...); a level is a promise every node can read it.
* :class:`Feature` and :class:`FeatureVersion` -- ``kraft.version``, ``transaction.version``,
  ``group.version``, ``eligible.leader.replicas.version``, ``share.version`` and
  ``streams.version``: each level's bootstrap metadata.version (the first MV that turns it
  on by default when formatting) and its dependencies on other features.
* :func:`supported_features` -- the ``{name: (min, max)}`` a kraft node advertises in its
  registration and that its controller accepts in a FeatureLevelRecord.
* :func:`bootstrap_records` -- the FeatureLevelRecords ``kraft-storage format`` writes.

Invariants: feature levels are unique and increasing along ``MetadataVersion.VERSIONS``;
a feature's default level never depends on a feature (or MV) that is not at least at its
own default for the same MV (checked at import, as Kafka's
``validateDefaultValueAndLatestProductionValue``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Iterator, Mapping

from kraft_storage.messages.metadata import FeatureLevelRecord

__all__ = [
    "METADATA_VERSION_FEATURE_NAME", "MetadataVersion", "FeatureVersion", "Feature",
    "KRAFT_VERSION", "TRANSACTION_VERSION", "GROUP_VERSION", "ELIGIBLE_LEADER_REPLICAS_VERSION",
    "SHARE_VERSION", "STREAMS_VERSION", "PRODUCTION_FEATURES", "feature_from_name", "validate_version",
    "supported_features", "default_feature_levels", "bootstrap_records", "version_range_str",
]

#: The feature name metadata.version is finalized under (Kafka's ``MetadataVersion.FEATURE_NAME``).
METADATA_VERSION_FEATURE_NAME = "metadata.version"


class MetadataVersion:
    """One metadata.version level.  Instances are the class attributes ``IBP_3_3_IV3`` ...
    ``IBP_4_2_IV1`` (the only instances there are: compare with ``is`` or ``==``).

    ``did_metadata_change_flag``: this level changed the metadata format, so a downgrade
    across it could lose information (Kafka refuses such a "safe" downgrade)."""

    __slots__ = ("feature_level", "release", "sub_version", "name", "_changed")

    FEATURE_NAME: ClassVar[str] = METADATA_VERSION_FEATURE_NAME

    # The table (filled in below the class); ClassVar declarations give type checkers the names.
    IBP_3_3_IV3: ClassVar[MetadataVersion]
    IBP_3_4_IV0: ClassVar[MetadataVersion]
    IBP_3_5_IV0: ClassVar[MetadataVersion]
    IBP_3_5_IV1: ClassVar[MetadataVersion]
    IBP_3_5_IV2: ClassVar[MetadataVersion]
    IBP_3_6_IV0: ClassVar[MetadataVersion]
    IBP_3_6_IV1: ClassVar[MetadataVersion]
    IBP_3_6_IV2: ClassVar[MetadataVersion]
    IBP_3_7_IV0: ClassVar[MetadataVersion]
    IBP_3_7_IV1: ClassVar[MetadataVersion]
    IBP_3_7_IV2: ClassVar[MetadataVersion]
    IBP_3_7_IV3: ClassVar[MetadataVersion]
    IBP_3_7_IV4: ClassVar[MetadataVersion]
    IBP_3_8_IV0: ClassVar[MetadataVersion]
    IBP_3_9_IV0: ClassVar[MetadataVersion]
    IBP_4_0_IV0: ClassVar[MetadataVersion]
    IBP_4_0_IV1: ClassVar[MetadataVersion]
    IBP_4_0_IV2: ClassVar[MetadataVersion]
    IBP_4_0_IV3: ClassVar[MetadataVersion]
    IBP_4_1_IV0: ClassVar[MetadataVersion]
    IBP_4_1_IV1: ClassVar[MetadataVersion]
    IBP_4_2_IV0: ClassVar[MetadataVersion]
    IBP_4_2_IV1: ClassVar[MetadataVersion]

    #: Every level, oldest first.
    VERSIONS: ClassVar[tuple[MetadataVersion, ...]]
    #: The oldest level a Kafka 4.x cluster may run (and the oldest a controller accepts).
    MINIMUM_VERSION: ClassVar[MetadataVersion]
    #: The newest level a production cluster may be formatted at or upgraded to.
    LATEST_PRODUCTION: ClassVar[MetadataVersion]

    feature_level: int
    release: str
    sub_version: str
    name: str
    _changed: bool

    def __init__(self, feature_level: int, release: str, sub_version: str, did_metadata_change: bool):
        self.feature_level = feature_level
        self.release = release
        self.sub_version = sub_version
        self.name = f"{release}-{sub_version}"
        self._changed = did_metadata_change

    # -- identity and order ------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"MetadataVersion.IBP_{self.release.replace('.', '_')}_{self.sub_version}"

    def __str__(self) -> str:
        return self.name

    def __lt__(self, other: MetadataVersion) -> bool:
        return self.feature_level < other.feature_level

    def __le__(self, other: MetadataVersion) -> bool:
        return self.feature_level <= other.feature_level

    def __gt__(self, other: MetadataVersion) -> bool:
        return self.feature_level > other.feature_level

    def __ge__(self, other: MetadataVersion) -> bool:
        return self.feature_level >= other.feature_level

    def __reduce__(self) -> tuple[object, tuple[int]]:
        # Unpickle to the one instance of the level, so `is` keeps working across copies.
        return MetadataVersion.from_feature_level, (self.feature_level,)

    def is_at_least(self, other: MetadataVersion) -> bool:
        return self.feature_level >= other.feature_level

    def is_less_than(self, other: MetadataVersion) -> bool:
        return self.feature_level < other.feature_level

    def version(self) -> str:
        """``"3.9-IV0"`` (Kafka's ``version()``; the same as ``name`` and ``str()``)."""
        return self.name

    def short_version(self) -> str:
        """``"3.9"``: the release this level belongs to."""
        return self.release

    def feature_name(self) -> str:
        return METADATA_VERSION_FEATURE_NAME

    def is_production(self) -> bool:
        return self <= MetadataVersion.LATEST_PRODUCTION

    def previous(self) -> MetadataVersion | None:
        i = _INDEX[self.feature_level]
        return MetadataVersion.VERSIONS[i - 1] if i > 0 else None

    def did_metadata_change(self, since: MetadataVersion | None = None) -> bool:
        """Without ``since``: whether this level itself changed the metadata format.
        With ``since``: whether any level between the two (excluding the lower one, as it
        is where a downgrade lands) changed it -- Kafka's ``checkIfMetadataChanged``: a
        downgrade from ``self`` to ``since`` (or the reverse upgrade) is safe only when False."""
        if since is None:
            return self._changed
        return MetadataVersion.check_if_metadata_changed(self, since)

    @staticmethod
    def check_if_metadata_changed(source: MetadataVersion, target: MetadataVersion) -> bool:
        if source is target:
            return False
        high, low = (source, target) if source > target else (target, source)
        return any(v._changed for v in MetadataVersion.VERSIONS
                   if low.feature_level < v.feature_level <= high.feature_level)

    # -- look-ups -----------------------------------------------------------------------------

    @staticmethod
    def from_feature_level(level: int) -> MetadataVersion:
        """The version at ``level``; ValueError (Kafka's message) if there is none."""
        try:
            return MetadataVersion.VERSIONS[_INDEX[level]]
        except (KeyError, TypeError):
            raise ValueError(
                f"No MetadataVersion with feature level {level}. Valid feature levels are from "
                f"{MetadataVersion.MINIMUM_VERSION.feature_level} to "
                f"{MetadataVersion.latest_testing().feature_level}.") from None

    @staticmethod
    def from_version_string(version: str, unstable_feature_versions_enabled: bool = False) -> MetadataVersion:
        """``"3.9-IV0"``, or a release ``"3.9"`` (its newest production level), or a longer
        ``"3.9.1"`` (only the first two parts count).  ValueError (Kafka's message) if unknown,
        or beyond LATEST_PRODUCTION unless ``unstable_feature_versions_enabled``."""
        parts = version.split(".")
        key = version if len(parts) <= 2 else ".".join(parts[:2])
        mv = _BY_VERSION_STRING.get(key)
        if mv is None or (not unstable_feature_versions_enabled and not mv.is_production()):
            last = MetadataVersion.latest_testing() if unstable_feature_versions_enabled \
                else MetadataVersion.LATEST_PRODUCTION
            raise ValueError(f"Unknown metadata.version '{version}'. Supported metadata.version are: "
                             f"{MetadataVersion.metadata_versions_to_string(MetadataVersion.MINIMUM_VERSION, last)}")
        return mv

    @staticmethod
    def metadata_versions_to_string(first: MetadataVersion, last: MetadataVersion) -> str:
        return ", ".join(str(v) for v in MetadataVersion.VERSIONS if first <= v <= last)

    @staticmethod
    def latest_testing() -> MetadataVersion:
        return MetadataVersion.VERSIONS[-1]

    @staticmethod
    def latest_production() -> MetadataVersion:
        return MetadataVersion.LATEST_PRODUCTION

    # -- what a level allows (Kafka's predicates; at or above 3.3-IV3 some are always true,
    #    kept so callers read as Kafka's code does) ---------------------------------------------

    def is_leader_recovery_supported(self) -> bool:
        return True  # 3.2-IV0

    def is_no_op_record_supported(self) -> bool:
        return True  # 3.3-IV1

    def is_broker_registration_change_record_supported(self) -> bool:
        """BrokerRegistrationChangeRecord replaces Fence/UnfenceBrokerRecord (3.3-IV2)."""
        return True

    def is_in_controlled_shutdown_state_supported(self) -> bool:
        return True  # 3.3-IV3

    def is_migration_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_4_IV0

    def is_api_forwarding_enabled(self) -> bool:
        return self >= MetadataVersion.IBP_3_4_IV0

    def is_scram_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_5_IV2

    def is_leader_epoch_bump_required_on_isr_shrink(self) -> bool:
        return self < MetadataVersion.IBP_3_6_IV0

    def is_metadata_transaction_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_6_IV1

    def is_delegation_token_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_6_IV2

    def is_controller_registration_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_7_IV0

    def is_directory_assignment_supported(self) -> bool:
        return self >= MetadataVersion.IBP_3_7_IV2

    def is_elr_supported(self) -> bool:
        """The MV can carry ELR fields (PartitionRecord v2).  Whether ELR is *on* is the
        ``eligible.leader.replicas.version`` feature (FeatureControlManager.is_elr_enabled)."""
        return self >= MetadataVersion.IBP_4_0_IV1

    def is_kraft_supported(self) -> bool:
        return self.feature_level > 0

    def register_broker_record_version(self) -> int:
        if self.is_directory_assignment_supported():
            return 3  # LogDirs
        if self.is_migration_supported():
            return 2  # IsMigratingZkBroker
        return 1      # InControlledShutdown (3.3-IV3, the minimum)

    def register_controller_record_version(self) -> int:
        if not self.is_controller_registration_supported():
            raise RuntimeError(f"Controller registration is not supported in MetadataVersion {self}")
        return 0

    def fence_broker_record_version(self) -> int:
        """FenceBrokerRecord/UnfenceBrokerRecord have only version 0.  From 3.3-IV2 (so at
        every level here) Kafka writes BrokerRegistrationChangeRecord instead of them."""
        return 0

    def broker_registration_change_record_version(self, *, in_controlled_shutdown: bool = False,
                                                  log_dirs: bool = False) -> int:
        """The version a BrokerRegistrationChangeRecord needs for the fields it sets:
        0 (fencing only), 1 (InControlledShutdown), 2 (LogDirs; needs 3.7-IV2)."""
        if log_dirs:
            if not self.is_directory_assignment_supported():
                raise RuntimeError(f"Directory assignment is not supported in MetadataVersion {self}")
            return 2
        return 1 if in_controlled_shutdown else 0

    def partition_record_version(self) -> int:
        if self.is_elr_supported():
            return 2
        if self.is_directory_assignment_supported():
            return 1
        return 0

    def partition_change_record_version(self) -> int:
        if self.is_elr_supported():
            return 2
        if self.is_directory_assignment_supported():
            return 1
        return 0

    def producer_ids_record_version(self) -> int:
        return 0

    def fetch_request_version(self) -> int:
        if self >= MetadataVersion.IBP_4_1_IV1:
            return 18
        if self >= MetadataVersion.IBP_3_9_IV0:
            return 17
        if self >= MetadataVersion.IBP_3_7_IV4:
            return 16
        if self >= MetadataVersion.IBP_3_5_IV1:
            return 15
        if self >= MetadataVersion.IBP_3_5_IV0:
            return 14
        return 13

    def list_offset_request_version(self) -> int:
        if self >= MetadataVersion.IBP_4_2_IV1:
            return 11
        if self >= MetadataVersion.IBP_4_0_IV3:
            return 10
        if self >= MetadataVersion.IBP_3_9_IV0:
            return 9
        if self >= MetadataVersion.IBP_3_5_IV0:
            return 8
        return 7


# (level, release, sub-version, did the metadata format change), as Kafka's enum.
_TABLE = (
    (7, "3.3", "IV3", True), (8, "3.4", "IV0", True), (9, "3.5", "IV0", False), (10, "3.5", "IV1", False),
    (11, "3.5", "IV2", True), (12, "3.6", "IV0", False), (13, "3.6", "IV1", True), (14, "3.6", "IV2", True),
    (15, "3.7", "IV0", True), (16, "3.7", "IV1", False), (17, "3.7", "IV2", True), (18, "3.7", "IV3", False),
    (19, "3.7", "IV4", False), (20, "3.8", "IV0", False), (21, "3.9", "IV0", False), (22, "4.0", "IV0", False),
    (23, "4.0", "IV1", True), (24, "4.0", "IV2", False), (25, "4.0", "IV3", False), (26, "4.1", "IV0", False),
    (27, "4.1", "IV1", False), (28, "4.2", "IV0", False), (29, "4.2", "IV1", False),
)


def _build_table() -> None:
    versions = []
    for level, release, sub, changed in _TABLE:
        mv = MetadataVersion(level, release, sub, changed)
        setattr(MetadataVersion, f"IBP_{release.replace('.', '_')}_{sub}", mv)
        versions.append(mv)
    MetadataVersion.VERSIONS = tuple(versions)
    MetadataVersion.MINIMUM_VERSION = MetadataVersion.IBP_3_3_IV3
    MetadataVersion.LATEST_PRODUCTION = MetadataVersion.IBP_4_2_IV1


_build_table()
_INDEX: dict[int, int] = {mv.feature_level: i for i, mv in enumerate(MetadataVersion.VERSIONS)}


def _version_strings() -> dict[str, MetadataVersion]:
    out = {mv.name: mv for mv in MetadataVersion.VERSIONS}
    for mv in MetadataVersion.VERSIONS:  # a bare release: its newest production level
        if mv.is_production():
            out[mv.release] = mv
    return out


_BY_VERSION_STRING = _version_strings()


# -- the other features ---------------------------------------------------------------------------

@dataclass(frozen=True)
class FeatureVersion:
    """One level of a feature.  ``bootstrap_metadata_version``: formatting at this MV or
    later finalizes this level by default.  ``dependencies``: ``{feature: minimum level}``
    that must be finalized for this level to be set (metadata.version among them)."""
    feature_name: str
    feature_level: int
    bootstrap_metadata_version: MetadataVersion
    dependencies: Mapping[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.feature_name}={self.feature_level}"


@dataclass(frozen=True)
class Feature:
    """A feature other than metadata.version (Kafka's ``Feature`` enum entry).
    ``versions``: every level from 0 up, in order; ``latest_production``: the highest level
    a production cluster may finalize."""
    name: str
    versions: tuple[FeatureVersion, ...]
    latest_production: int

    def feature_name(self) -> str:
        return self.name

    def minimum_production(self) -> int:
        return self.versions[0].feature_level

    def latest_testing(self) -> int:
        return self.versions[-1].feature_level

    def supported_version_range(self) -> tuple[int, int]:
        return self.minimum_production(), self.latest_testing()

    def is_production_ready(self, level: int) -> bool:
        return level <= self.latest_production

    def from_feature_level(self, level: int, allow_unstable_feature_versions: bool = False) -> FeatureVersion:
        for v in self.versions:
            if v.feature_level == level and (allow_unstable_feature_versions or level <= self.latest_production):
                return v
        raise ValueError(f"No feature:{self.name} with feature level {level}")

    def default_version(self, metadata_version: MetadataVersion) -> FeatureVersion:
        """The highest level whose bootstrap MV is at or below ``metadata_version``."""
        chosen = self.versions[0]
        for v in self.versions:
            if v.bootstrap_metadata_version > metadata_version:
                break
            chosen = v
        return chosen

    def default_level(self, metadata_version: MetadataVersion) -> int:
        return self.default_version(metadata_version).feature_level


def _feature(name: str, levels: list[tuple[MetadataVersion, Mapping[str, int]]], latest_production: int) -> Feature:
    versions = tuple(FeatureVersion(name, i, mv, dict(deps)) for i, (mv, deps) in enumerate(levels))
    return Feature(name, versions, latest_production)


MV = MetadataVersion
_MIN = MV.MINIMUM_VERSION
_MV_KEY = METADATA_VERSION_FEATURE_NAME

#: KIP-853: level 1 is the dynamic quorum (voters in the log).  Not a FeatureLevelRecord:
#: it lives in the Raft log's KRaftVersionRecord; the controller asks the Raft layer.
KRAFT_VERSION = _feature("kraft.version", [
    (_MIN, {}),
    (MV.IBP_3_9_IV0, {_MV_KEY: MV.IBP_3_9_IV0.feature_level}),
], latest_production=1)
#: KIP-890: 1 flexible transaction state records, 2 an epoch bump per transaction.
TRANSACTION_VERSION = _feature("transaction.version", [
    (_MIN, {}), (MV.IBP_4_0_IV2, {}), (MV.IBP_4_0_IV2, {}),
], latest_production=2)
#: KIP-848: the consumer rebalance protocol.
GROUP_VERSION = _feature("group.version", [(_MIN, {}), (MV.IBP_4_0_IV0, {})], latest_production=1)
#: KIP-966: eligible leader replicas (needs the ELR fields of PartitionRecord v2, MV 4.0-IV1).
ELIGIBLE_LEADER_REPLICAS_VERSION = _feature("eligible.leader.replicas.version", [
    (_MIN, {}), (MV.IBP_4_1_IV0, {_MV_KEY: MV.IBP_4_0_IV1.feature_level}),
], latest_production=1)
#: KIP-932: share groups (preview in 4.1, production in 4.2).
SHARE_VERSION = _feature("share.version", [
    (_MIN, {}), (MV.IBP_4_2_IV0, {_MV_KEY: MV.IBP_4_1_IV1.feature_level}),
], latest_production=1)
#: KIP-1071: streams groups (production in 4.2).
STREAMS_VERSION = _feature("streams.version", [(_MIN, {}), (MV.IBP_4_2_IV1, {})], latest_production=1)

#: Every feature besides metadata.version, in Kafka's order.
PRODUCTION_FEATURES: tuple[Feature, ...] = (
    KRAFT_VERSION, TRANSACTION_VERSION, GROUP_VERSION, ELIGIBLE_LEADER_REPLICAS_VERSION, SHARE_VERSION,
    STREAMS_VERSION,
)
_FEATURES_BY_NAME = {f.name: f for f in PRODUCTION_FEATURES}


def feature_from_name(name: str) -> Feature:
    try:
        return _FEATURES_BY_NAME[name]
    except KeyError:
        raise ValueError(f"Feature {name} not found.") from None


def validate_version(feature: FeatureVersion, features: Mapping[str, int]) -> None:
    """Raise ValueError (Kafka's ``Feature.validateVersion`` message) if ``feature`` cannot be
    set given the other finalized (or proposed) levels in ``features``: a level above 0
    needs metadata.version 3.3-IV0 (level 4) to be written at all, and each dependency at
    least at its level."""
    mv = features.get(_MV_KEY)
    if feature.feature_level >= 1 and (mv is None or mv < 4):
        raise ValueError(f"{feature.feature_name} could not be set to {feature.feature_level} because it "
                         f"depends on metadata.version=4 (3.3-IV0)")
    for dep, level in feature.dependencies.items():
        have = features.get(dep)
        if have is None or have < level:
            raise ValueError(f"{feature.feature_name} could not be set to {feature.feature_level} because it "
                             f"depends on {dep} level {level}")


def supported_features(enable_unstable: bool = False) -> dict[str, tuple[int, int]]:
    """``{name: (min, max)}`` this software supports -- what a kraft controller or broker
    advertises at registration and what a controller accepts (Kafka's
    ``QuorumFeatures.defaultSupportedFeatureMap``).  A feature whose max is 0 is omitted:
    not advertising a feature means supporting only level 0."""
    top = MetadataVersion.latest_testing() if enable_unstable else MetadataVersion.LATEST_PRODUCTION
    out = {_MV_KEY: (MetadataVersion.MINIMUM_VERSION.feature_level, top.feature_level)}
    for f in PRODUCTION_FEATURES:
        hi = f.latest_testing() if enable_unstable else f.latest_production
        if hi > 0:
            out[f.name] = (f.minimum_production(), hi)
    return out


def default_feature_levels(metadata_version: MetadataVersion, *, include_kraft_version: bool = False
                           ) -> dict[str, int]:
    """The non-zero default level of every feature at ``metadata_version`` (what formatting
    at that MV finalizes).  kraft.version is left out unless asked for: it is not a
    FeatureLevelRecord, it is chosen by the quorum's bootstrap (static or dynamic)."""
    out = {}
    for f in PRODUCTION_FEATURES:
        if f is KRAFT_VERSION and not include_kraft_version:
            continue
        level = f.default_level(metadata_version)
        if level > 0:
            out[f.name] = level
    return out


def bootstrap_records(metadata_version: MetadataVersion | int) -> list[tuple[FeatureLevelRecord, int]]:
    """The bootstrap metadata ``kraft-storage format`` writes, as (record, version 0) pairs:
    metadata.version first, then the other features' default levels in name order (the
    order Kafka 4.x's Formatter writes them in its bootstrap.checkpoint)."""
    mv = metadata_version if isinstance(metadata_version, MetadataVersion) \
        else MetadataVersion.from_feature_level(metadata_version)
    recs = [(FeatureLevelRecord(name=_MV_KEY, feature_level=mv.feature_level), 0)]
    recs += [(FeatureLevelRecord(name=n, feature_level=v), 0)
             for n, v in sorted(default_feature_levels(mv).items())]
    return recs


def version_range_str(lo: int, hi: int) -> str:
    """Kafka's ``VersionRange.toString``: ``"3"``, ``"1-5"`` or ``"1+"`` (max 32767)."""
    if lo == hi:
        return str(lo)
    if hi == 32767:
        return f"{lo}+"
    return f"{lo}-{hi}"


def _check_defaults() -> Iterator[str]:
    """Kafka's ``validateDefaultValueAndLatestProductionValue``: what a default or the latest
    production level depends on must itself be on by default / production ready."""
    for f in PRODUCTION_FEATURES:
        latest = f.from_feature_level(f.latest_production, True)
        if f.latest_production < f.default_level(MetadataVersion.LATEST_PRODUCTION):
            yield f"{f.name}: latest production below its default"
        for dep, level in latest.dependencies.items():
            if dep == _MV_KEY:
                if level > MetadataVersion.LATEST_PRODUCTION.feature_level:
                    yield f"{f.name}: latest production depends on a non-production MV"
            elif not feature_from_name(dep).is_production_ready(level):
                yield f"{f.name}: latest production depends on {dep} {level}, not production ready"
        for mv in MetadataVersion.VERSIONS:
            d = f.default_version(mv)
            for dep, level in d.dependencies.items():
                if dep == _MV_KEY:
                    if level > d.bootstrap_metadata_version.feature_level:
                        yield f"{f.name}: default at {mv} depends on MV level {level} above its bootstrap MV"
                elif level > feature_from_name(dep).default_level(mv):
                    yield f"{f.name}: default at {mv} depends on {dep} {level} above its default"


_problems = list(_check_defaults())
if _problems:  # a table edit broke an invariant: fail at import, not at format time
    raise AssertionError("; ".join(_problems))
del MV
