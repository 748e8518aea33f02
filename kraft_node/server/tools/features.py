"""``kraft-features``: Kafka's ``kafka-features.sh`` (FeatureCommand).

    kraft-features (--bootstrap-server H:P | --bootstrap-controller H:P) [--command-config F] describe
    kraft-features ... upgrade [--metadata 3.9 | --release-version 3.9-IV0 | --feature f=v ...] [--dry-run]
    kraft-features ... downgrade [...same...] [--unsafe] [--dry-run]
    kraft-features ... disable --feature f ... [--unsafe] [--dry-run]
    kraft-features ... version-mapping [--release-version V]
    kraft-features ... feature-dependencies --feature f=v ...

``describe`` reads the bootstrap node's ApiVersions answer (supported and finalized features,
and the finalized epoch) and prints Kafka's line per supported feature, by name:
``Feature: metadata.version\\tSupportedMinVersion: 3.3-IV3\\tSupportedMaxVersion: ...\\t
FinalizedVersionLevel: ...\\tEpoch: N`` (metadata.version levels as release strings).
The changes send UpdateFeatures to the active controller (through a broker with
``--bootstrap-server``) and print one line per feature, ``metadata.version was upgraded to
21.`` / ``... can be upgraded to 21.`` (dry run) / ``Could not upgrade f to 5. <why>``, then
``N out of M operation(s) failed.`` on stderr and exit 1 when any failed.
"""
from __future__ import annotations

import sys
from typing import Any, Sequence

from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME, PRODUCTION_FEATURES, MetadataVersion
from kraft_node.protocol.generated.update_features import UpdateFeaturesRequest
from kraft_node.server.tools.admin import (
    AdminClient,
    AdminError,
    ToolArgumentParser,
    error_message,
    load_settings,
    run,
    tool_main,
)

PROG = "kraft-features"
#: UpdateFeatures' upgradeType (v1+)
UPGRADE, SAFE_DOWNGRADE, UNSAFE_DOWNGRADE = 1, 2, 3


def _parser() -> ToolArgumentParser:
    p = ToolArgumentParser(prog=PROG, description="This tool manages feature flags in Kafka.")
    p.add_argument("--bootstrap-server", help="A comma-separated list of host:port pairs to use for establishing "
                                              "the connection to the Kafka cluster.")
    p.add_argument("--bootstrap-controller", help="A comma-separated list of host:port pairs to use for "
                                                  "establishing the connection to the KRaft quorum.")
    p.add_argument("--command-config", help="Property file containing configs to be passed to Admin Client.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ToolArgumentParser)
    sub.add_parser("describe", help="Describes the current active feature flags.")
    for name, text in (("upgrade", "Upgrade one or more feature flags."),
                       ("downgrade", "Downgrade one or more feature flags.")):
        s = sub.add_parser(name, help=text)
        s.add_argument("--metadata", help=f"DEPRECATED -- The level to which we should {name} the metadata. "
                                          "For example, 3.3-IV3.")
        s.add_argument("--release-version", help=f"The release version to {name} all features to. For example, "
                                                 "3.9-IV0.")
        s.add_argument("--feature", action="append", help="A feature change, in feature=level format. For example: "
                                                          "`metadata.version=5`.")
        if name == "downgrade":
            s.add_argument("--unsafe", action="store_true",
                           help="Perform this downgrade even if it may irreversibly destroy metadata.")
        s.add_argument("--dry-run", action="store_true", help=f"Validate this {name}, but do not perform it.")
    d = sub.add_parser("disable", help="Disable one or more feature flags. This is the same as downgrading the "
                                       "version to zero.")
    d.add_argument("--feature", action="append", help="A feature flag to disable.")
    d.add_argument("--unsafe", action="store_true", help="Disable this feature flag even if it may irreversibly "
                                                          "destroy metadata.")
    d.add_argument("--dry-run", action="store_true", help="Perform a dry-run of this disable operation.")
    m = sub.add_parser("version-mapping", help="Look up the corresponding features for a given metadata version.")
    m.add_argument("--release-version", help="The release version to use for the corresponding feature mapping.")
    f = sub.add_parser("feature-dependencies", help="Look up dependencies for a given feature version.")
    f.add_argument("--feature", action="append", required=True,
                   help="The feature and version to look up dependencies for, in feature=version format.")
    return p


def level_to_string(feature: str, level: int) -> str:
    """A metadata.version level as its release string (``7`` -> ``3.3-IV3``), other levels as numbers."""
    if feature == METADATA_VERSION_FEATURE_NAME:
        try:
            return MetadataVersion.from_feature_level(level).name
        except ValueError:
            return f"UNKNOWN {level}"
    return str(level)


def describe_lines(resp: Any) -> list[str]:
    finalized = {f.name: f.max_version_level for f in resp.finalized_features}
    epoch = str(resp.finalized_features_epoch) if resp.finalized_features_epoch >= 0 else "-"
    return [f"Feature: {f.name}\tSupportedMinVersion: {level_to_string(f.name, f.min_version)}"
            f"\tSupportedMaxVersion: {level_to_string(f.name, f.max_version)}"
            f"\tFinalizedVersionLevel: {level_to_string(f.name, finalized.get(f.name, 0))}\tEpoch: {epoch}"
            for f in sorted(resp.supported_features, key=lambda f: f.name)]


def parse_name_and_level(text: str) -> tuple[str, int]:
    """``"f=3"`` -> ``("f", 3)``, with Kafka's messages."""
    name, eq, level = text.partition("=")
    if not eq:
        raise AdminError(f"Can't parse feature=level string {text}: equals sign not found.")
    name, level = name.strip(), level.strip()
    try:
        value = int(level)
        if not -32768 <= value <= 32767:
            raise ValueError
    except ValueError:
        raise AdminError(f"Can't parse feature=level string {text}: unable to parse {level} as a short.") from None
    return name, value


def _mv_list() -> str:
    return MetadataVersion.metadata_versions_to_string(MetadataVersion.MINIMUM_VERSION,
                                                       MetadataVersion.LATEST_PRODUCTION)


def _metadata_version(text: str) -> MetadataVersion:
    try:
        return MetadataVersion.from_version_string(text)
    except ValueError:
        raise AdminError(f"Unknown metadata.version {text}. Supported metadata.version are {_mv_list()}") from None


def planned_updates(ns: Any, out: list[str]) -> tuple[str, dict[str, int], int]:
    """``(op, {feature: level}, upgrade type)`` from the command line (Kafka's
    handleUpgradeOrDowngrade / handleDisable); deprecation notes go to ``out``."""
    op = ns.command
    utype = UPGRADE if op == "upgrade" else (UNSAFE_DOWNGRADE if ns.unsafe else SAFE_DOWNGRADE)
    updates: dict[str, int] = {}
    if op == "disable":
        for f in ns.feature or ():
            if f in updates:
                raise AdminError(f"Feature {f} was specified more than once.")
            updates[f] = 0
        return op, updates, utype
    if ns.release_version is not None and (ns.metadata is not None or ns.feature):
        raise AdminError("Can not specify `release-version` with other feature flags.")
    if ns.release_version is not None:
        mv = _metadata_version(ns.release_version)
        updates[METADATA_VERSION_FEATURE_NAME] = mv.feature_level
        for feat in PRODUCTION_FEATURES:
            level = feat.default_level(mv)
            if utype != UPGRADE or level > 0:  # never ask to upgrade a feature to 0
                updates[feat.name] = level
        return op, updates, utype
    if ns.metadata is not None:
        out.append(" `metadata` flag is deprecated and may be removed in a future release.")
        updates[METADATA_VERSION_FEATURE_NAME] = _metadata_version(ns.metadata).feature_level
    for text in ns.feature or ():
        name, level = parse_name_and_level(text)
        if name in updates:
            raise AdminError(f"Feature {name} was specified more than once.")
        updates[name] = level
    return op, updates, utype


async def update(admin: AdminClient, op: str, updates: dict[str, int], utype: int, dry_run: bool) -> list[str]:
    """Send the updates; one line per feature (by name) as Kafka's FeatureCommand.update prints."""
    if not updates:
        raise AdminError(f"You must specify at least one feature to {op}")
    U = UpdateFeaturesRequest
    timeout_ms = int(admin.settings.request_timeout_s * 1000)

    def make(version: int) -> Any:
        if dry_run and version == 0:
            raise AdminError("validateOnly (--dry-run) needs UpdateFeatures v1, the node speaks v0 only")
        keys = [U.FeatureUpdateKey(feature=f, max_version_level=lvl,
                                   **({"allow_downgrade": utype != UPGRADE} if version == 0 else
                                      {"upgrade_type": utype}))
                for f, lvl in sorted(updates.items())]
        return UpdateFeaturesRequest(timeout_ms=timeout_ms, feature_updates=keys,
                                     **({"validate_only": dry_run} if version else {}))

    resp = await admin.call(make, UpdateFeaturesRequest.API_KEY, "controller")
    per_feature = {r.feature: (r.error_code, r.error_message) for r in resp.results}
    lines, failures = [], 0
    for feature in sorted(updates):
        if resp.error_code:
            code, message = resp.error_code, resp.error_message
        else:
            code, message = per_feature.get(feature, (0, None))
        level = updates[feature]
        what = f"disable {feature}" if op == "disable" else f"{op} {feature} to {level}"
        if code:
            failures += 1
            lines.append(f"{'Can not' if dry_run else 'Could not'} {what}. {error_message(code, message)}")
        else:
            obj = "disabled." if op == "disable" else f"{op}d to {level}."
            lines.append(f"{feature}{' can be ' if dry_run else ' was '}{obj}")
    for line in lines:
        print(line)
    if failures:
        raise AdminError(f"{failures} out of {len(updates)} operation(s) failed.")
    return []


def version_mapping(release: str | None) -> list[str]:
    text = release or MetadataVersion.LATEST_PRODUCTION.name
    try:
        mv = MetadataVersion.from_version_string(text)
    except ValueError:
        raise AdminError(f"Unknown release version '{text}'. Supported versions are: "
                         f"{MetadataVersion.MINIMUM_VERSION} to {MetadataVersion.LATEST_PRODUCTION}") from None
    return [f"metadata.version={mv.feature_level} ({text})"] + \
        [f"{f.name}={f.default_level(mv)}" for f in PRODUCTION_FEATURES]


def feature_dependencies(features: Sequence[str]) -> list[str]:
    by_name = {f.name: f for f in PRODUCTION_FEATURES}
    out = []
    for text in features:
        name, level = parse_name_and_level(text)
        if name == METADATA_VERSION_FEATURE_NAME:
            try:
                mv = MetadataVersion.from_feature_level(level)
            except ValueError:
                raise AdminError(f"Unknown metadata.version {level}") from None
            out.append(f"{name}={level} ({mv.name}) has no dependencies.")
            continue
        feat = by_name.get(name)
        if feat is None:
            raise AdminError(f"Unknown feature: {name}")
        try:
            version = feat.from_feature_level(level, True)
        except ValueError as exc:
            raise AdminError(str(exc)) from None
        if not version.dependencies:
            out.append(f"{name}={level} has no dependencies.")
            continue
        out.append(f"{name}={level} requires:")
        for dep, dep_level in version.dependencies.items():
            if dep == METADATA_VERSION_FEATURE_NAME:
                out.append(f"    {dep}={dep_level} ({MetadataVersion.from_feature_level(dep_level).name})")
            else:
                out.append(f"    {dep}={dep_level}")
    return out


async def _describe(admin: AdminClient) -> list[str]:
    return describe_lines(await admin.api_versions())


def _main(argv: list[str]) -> int:
    ns = _parser().parse_args(argv)
    settings = load_settings(ns.bootstrap_server, ns.bootstrap_controller, ns.command_config,
                             lambda s: print(s, file=sys.stderr))
    if ns.command == "version-mapping":
        lines = version_mapping(ns.release_version)
    elif ns.command == "feature-dependencies":
        lines = feature_dependencies(ns.feature)
    elif ns.command == "describe":
        lines = run(_describe, settings)
    else:
        notes: list[str] = []
        op, updates, utype = planned_updates(ns, notes)
        for line in notes:
            print(line)
        lines = run(lambda admin: update(admin, op, updates, utype, ns.dry_run), settings)
    for line in lines:
        print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return tool_main(PROG, argv, _main)


if __name__ == "__main__":
    sys.exit(main())
