"""``kraft-storage``: Kafka's ``kafka-storage.sh`` for kraft.

    kraft-storage random-uuid
    kraft-storage format --cluster-id ID --config server.properties
                         [--standalone | --initial-controllers LIST | --no-initial-controllers]
                         [--release-version 4.2] [--ignore-formatted]
    kraft-storage verify  (--config server.properties | --dir PARTITION_DIR)...
    kraft-storage recover (--config server.properties | --dir PARTITION_DIR)...

``verify`` is read-only: it checks every batch's CRC, the indexes, the leader epochs and
the offset contiguity of each partition directory (``kraft_storage.log.verify``), prints
a summary per directory and each problem, and exits 1 if there is any.  ``recover`` is
the explicit repair: under the log dirs' locks (so never under a running node) it runs
full recovery -- truncating at the first bad batch even in a cleanly shut down log, which
a node refuses to do on its own -- and prints every truncation, deleted segment and
rebuilt index.  Both take ``-c`` (every partition dir under the config's log dirs) or
``--dir`` (one partition dir), several times if need be.

``format`` does what Kafka 4.2's Formatter does:

* every log dir (``log.dirs`` plus ``metadata.log.dir``) gets a v1
  ``meta.properties`` with the cluster id, node id and a fresh directory id
  (for a dynamic voter, the directory id from ``--initial-controllers``);
* the metadata log dir gets the bootstrap metadata -- a FeatureLevelRecord
  for ``metadata.version`` first, then the release's other feature levels in
  name order:

  - static quorum (``controller.quorum.voters``): ``bootstrap.checkpoint`` in
    the metadata log dir, as every Kafka fixture we have shows;
  - dynamic quorum (``--standalone`` / ``--initial-controllers``, KIP-853):
    the bootstrap snapshot ``__cluster_metadata-0/00000000000000000000-0000000000.checkpoint``
    holding KRaftVersionRecord(1) and the VotersRecord before the features.

A directory that already has ``meta.properties`` is an error unless
``--ignore-formatted``; a mismatching cluster or node id always is.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

from kraft_node.metadata.versions import MetadataVersion
from kraft_node.metadata.versions import bootstrap_records as versions_bootstrap_records
from kraft_node.server.config import METADATA_TOPIC_DIR, ConfigError, NodeConfig, parse_voters
from kraft_storage.dirlock import DirLocks, lock_dirs
from kraft_storage.errors import KraftStorageError
from kraft_storage.messages.control import VotersRecord
from kraft_storage.messages.runtime import Uuid
from kraft_storage.meta_properties import (
    FILE_NAME,
    MetaProperties,
    MetaPropertiesError,
    read_meta_properties,
    write_meta_properties,
)

#: metadata.version feature levels by name ("3.9-IV0": 21), from Kafka's MetadataVersion table
#: (kraft_node.metadata.versions, shared with the controller).
METADATA_VERSIONS = {mv.name: mv.feature_level for mv in MetadataVersion.VERSIONS}
LATEST_PRODUCTION = MetadataVersion.LATEST_PRODUCTION.name


class FormatError(KraftStorageError):
    pass


def random_uuid() -> str:
    """A random Kafka Uuid whose base64 form does not start with '-' (as Kafka's randomUuid)."""
    while True:
        s = str(Uuid.random())
        if not s.startswith("-"):
            return s


def release_level(release: str) -> tuple[str, int]:
    """``"4.2"`` or ``"4.2-IV1"`` -> (name, metadata.version level)."""
    if release in METADATA_VERSIONS:
        return release, METADATA_VERSIONS[release]
    matches = [k for k in METADATA_VERSIONS if k.split("-")[0] == release]
    if not matches:
        raise FormatError(f"unknown release version {release!r} (known: "
                          f"{', '.join(sorted({k.split('-')[0] for k in METADATA_VERSIONS}))})")
    name = matches[-1]
    return name, METADATA_VERSIONS[name]


def bootstrap_records(level: int) -> list:
    """(FeatureLevelRecord, version 0) pairs: metadata.version first, then the release's other
    feature levels (each feature's default at that metadata.version) by name."""
    return versions_bootstrap_records(level)


def _voters_record(voters, listener: str) -> VotersRecord:
    R = VotersRecord
    out = []
    for v in voters:
        if v.directory_id is None:
            raise FormatError(f"--initial-controllers entry for node {v.id} has no directory id "
                              "(id@host:port:directoryId)")
        try:
            dir_id = Uuid(v.directory_id)
        except ValueError as exc:
            raise FormatError(f"--initial-controllers entry for node {v.id}: directory id {v.directory_id!r} "
                              f"is not a Uuid: {exc}") from None
        out.append(R.Voter(voter_id=v.id, voter_directory_id=dir_id,
                           endpoints=[R.Endpoint(name=listener, host=v.host, port=v.port)],
                           k_raft_version_feature=R.KRaftVersionFeature(min_supported_version=0,
                                                                        max_supported_version=1)))
    return R(version=0, voters=out)


def format_storage(cfg: NodeConfig, cluster_id: str, *, standalone: bool = False,
                   initial_controllers: str | None = None, no_initial_controllers: bool = False,
                   release_version: str = LATEST_PRODUCTION, ignore_formatted: bool = False,
                   out=sys.stdout, dir_locks: DirLocks | None = None) -> int:
    """Write ``meta.properties`` (and, in the metadata log dir, the bootstrap snapshot) in
    every unformatted log dir of ``cfg``, as Kafka's ``kafka-storage format`` does.  All
    arguments are checked before anything is written.

    Every log dir is locked (``.lock``, :mod:`kraft_storage.dirlock`) before it is read, so
    formatting the directory of a running node is refused (DirLockError) and changes
    nothing; ``dir_locks``: the caller already holds them (kraft-server-start's default
    config)."""
    try:
        Uuid(cluster_id)  # Kafka (since 3.3): a cluster id must be a base64 Uuid
    except ValueError as exc:
        raise FormatError(f"Cluster ID string {cluster_id} does not appear to be a valid UUID: {exc}") from None
    dynamic = standalone or initial_controllers is not None or no_initial_controllers
    if sum([standalone, initial_controllers is not None, no_initial_controllers]) > 1:
        raise FormatError("--standalone, --initial-controllers and --no-initial-controllers are mutually exclusive")
    if dynamic and cfg.voters:
        raise FormatError("--standalone, --initial-controllers and --no-initial-controllers need "
                          "controller.quorum.voters to be unset (use controller.quorum.bootstrap.servers)")
    if cfg.is_controller and not cfg.voters and not dynamic:
        raise FormatError("because controller.quorum.voters is not set on this controller, you must specify "
                          "one of --standalone, --initial-controllers, or --no-initial-controllers")
    name, level = release_level(release_version)
    if dynamic and level < METADATA_VERSIONS["3.9-IV0"]:
        # Kafka: kraft.version 1 (a dynamic quorum) needs metadata.version 3.9-IV0 or later
        raise FormatError(f"--standalone, --initial-controllers and --no-initial-controllers format a dynamic "
                          f"quorum (kraft.version 1), which needs metadata.version 3.9-IV0 or later, not {name}")
    listener = cfg.controller_listener_names[0]
    voters = None
    if standalone:
        ep = cfg.controller_endpoint
        if ep is None:
            raise FormatError("--standalone needs a controller listener")
        from kraft_node.server.config import Voter
        voters = [Voter(cfg.node_id, ep.host, ep.port, random_uuid())]
    elif initial_controllers is not None:
        voters = parse_voters(initial_controllers, "--initial-controllers", "command line")
    voters_record = _voters_record(voters, listener) if voters else None  # checks every directory id
    my_dir_id = next((v.directory_id for v in voters or () if v.id == cfg.node_id), None)

    own = lock_dirs(cfg.all_log_dirs, create=True) if dir_locks is None else None
    try:
        return _format_locked(cfg, cluster_id, dynamic, name, level, listener, voters, voters_record, my_dir_id,
                              ignore_formatted, out)
    finally:
        if own is not None:
            own.release()


def _format_locked(cfg, cluster_id, dynamic, name, level, listener, voters, voters_record, my_dir_id,
                   ignore_formatted, out) -> int:
    empty = []
    for d in cfg.all_log_dirs:
        if os.path.exists(os.path.join(d, FILE_NAME)):
            meta = read_meta_properties(d).meta
            if meta.cluster_id != cluster_id or meta.node_id != cfg.node_id:
                raise FormatError(f"log directory {d} belongs to cluster {meta.cluster_id} node {meta.node_id}, "
                                  f"not cluster {cluster_id} node {cfg.node_id}")
            if not ignore_formatted:
                raise FormatError(f"Log directory {d} is already formatted. Use --ignore-formatted to ignore "
                                  "this directory and format the others.")
        else:
            empty.append(d)
    if not empty:
        print("All of the log directories are already formatted.", file=out)
        return 0
    records = bootstrap_records(level)
    for d in empty:
        is_meta = os.path.abspath(d) == os.path.abspath(cfg.metadata_log_dir)
        os.makedirs(d, exist_ok=True)
        kind = "metadata directory" if is_meta else "data directory"
        if is_meta and voters is not None and my_dir_id is not None:
            kind = "dynamic metadata voter directory"
        elif is_meta and dynamic:
            kind = "dynamic metadata directory"
        print(f"Formatting {kind} {d} with metadata.version {name}.", file=out)
        if is_meta:
            _write_bootstrap(d, records, voters_record, dynamic)
        dir_id = my_dir_id if (is_meta and my_dir_id) else random_uuid()
        write_meta_properties(d, MetaProperties(1, cluster_id, cfg.node_id, dir_id))
    return 0


def _write_bootstrap(log_dir: str, records, voters_record, dynamic: bool) -> None:
    from kraft_storage.snapshot import BOOTSTRAP_SNAPSHOT_ID, RawSnapshotWriter, RecordsSnapshotWriter
    from kraft_storage.snapshot.records import write_bootstrap_checkpoint
    if not dynamic:
        write_bootstrap_checkpoint(log_dir, records)
        return
    import time
    part_dir = os.path.join(log_dir, METADATA_TOPIC_DIR)
    os.makedirs(part_dir, exist_ok=True)
    raw = RawSnapshotWriter(part_dir, BOOTSTRAP_SNAPSHOT_ID)
    with RecordsSnapshotWriter(raw, last_contained_log_timestamp=int(time.time() * 1000), kraft_version=1,
                               voters=voters_record) as w:
        w.append(records)
        w.freeze()


_PARTITION_DIR = re.compile(r"^.+-\d+$")


def partition_dirs(cfg: NodeConfig) -> list[str]:
    """The partition directories (``<topic>-<partition>``) under every log dir of ``cfg``."""
    out = []
    for d in cfg.all_log_dirs:
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            continue
        out += [os.path.join(d, n) for n in names if _PARTITION_DIR.match(n) and os.path.isdir(os.path.join(d, n))]
    return out


def _targets(args) -> tuple[list[str], list[str]]:
    """(partition dirs, log dirs to lock) named by ``-c`` and ``--dir`` options.  A partition
    dir's lock lives in its parent, the log dir (where kraft-server-start takes it)."""
    parts: list[str] = []
    lock = []
    for c in args.config or ():
        cfg = NodeConfig.from_file(c)
        found = partition_dirs(cfg)
        if not found:
            raise FormatError(f"{c}: no partition directory under {', '.join(cfg.all_log_dirs)} "
                              "(is it formatted, and has the node run?)")
        parts += found
        lock += cfg.all_log_dirs
    for d in args.dir or ():
        d = os.path.normpath(d)
        if not os.path.isdir(d):
            raise FormatError(f"--dir {d}: not a directory")
        parts.append(d)
        lock.append(os.path.dirname(os.path.abspath(d)))
    return parts, lock


def verify_command(args, out=sys.stdout) -> int:
    """``kraft-storage verify``: read-only; 0 when every directory is sound, 1 otherwise."""
    from kraft_storage.log.verify import verify_log_dir
    parts, _ = _targets(args)
    rc = 0
    for d in parts:
        try:
            report = verify_log_dir(d)
        except KraftStorageError as exc:
            print(f"{d}: {exc}", file=out)
            rc = 1
            continue
        text = report.summary()
        print(_prefixed(d, text), file=out)
        if not report.ok:
            rc = 1
            for problem in report.problems:
                if problem not in text:  # (the summary may list them already)
                    print(f"  - {problem}", file=out)
    return rc


def _prefixed(d: str, line: str) -> str:
    return line if line.startswith(d) else f"{d}: {line}"


def recover_command(args, out=sys.stdout) -> int:
    """``kraft-storage recover``: under the log dirs' locks (refused while a node runs on
    them), run full recovery on each partition dir and print what it dropped or rebuilt."""
    import logging

    from kraft_storage.log.verify import recover_log_dir
    parts, lock = _targets(args)
    # The storage layer also logs each drop at WARNING (kraft.storage.log); here the report
    # is the output, on stdout, so the log lines would only repeat it on stderr.
    storage_log = logging.getLogger("kraft.storage.log")
    level = storage_log.level
    storage_log.setLevel(logging.ERROR)
    try:
        with lock_dirs(lock):
            for d in parts:
                report = recover_log_dir(d)
                for line in report.describe():
                    print(_prefixed(d, line), file=out)
                print(_prefixed(d, report.summary()), file=out)
    finally:
        storage_log.setLevel(level)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kraft-storage",
                                description="Format, verify and recover kraft storage directories.")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("random-uuid", help="print a random cluster/directory id")
    for name, what in (("verify", "check CRCs, indexes, epochs and offset contiguity; read-only (exit 1 if "
                                  "anything is wrong)"),
                       ("recover", "run full recovery now: truncate at the first bad batch, rebuild indexes, "
                                   "and print what was dropped (refused while a node runs on the directory)")):
        v = sub.add_parser(name, help=what, description=what)
        v.add_argument("--config", "-c", action="append",
                       help="a server.properties: every partition directory under its log dirs")
        v.add_argument("--dir", "-d", action="append", help="a partition directory, e.g. .../__cluster_metadata-0")
    f = sub.add_parser("format", help="format the log directories of a node")
    f.add_argument("--config", "-c", required=True)
    f.add_argument("--cluster-id", "-t", required=True)
    f.add_argument("--release-version", "-r", default=LATEST_PRODUCTION)
    f.add_argument("--ignore-formatted", "-g", action="store_true")
    g = f.add_mutually_exclusive_group()
    g.add_argument("--standalone", "-s", action="store_true")
    g.add_argument("--initial-controllers", "-I")
    g.add_argument("--no-initial-controllers", "-N", action="store_true")
    args = p.parse_args(argv)
    if args.cmd == "random-uuid":
        print(random_uuid())
        return 0
    if args.cmd in ("verify", "recover") and not (args.config or args.dir):
        p.error(f"{args.cmd}: give --config server.properties or --dir <partition dir> (several allowed)")
    try:
        if args.cmd == "verify":
            return verify_command(args)
        if args.cmd == "recover":
            return recover_command(args)
        cfg = NodeConfig.from_file(args.config)
        return format_storage(cfg, args.cluster_id, standalone=args.standalone,
                              initial_controllers=args.initial_controllers,
                              no_initial_controllers=args.no_initial_controllers,
                              release_version=args.release_version, ignore_formatted=args.ignore_formatted)
    except (FormatError, ConfigError, MetaPropertiesError, KraftStorageError, ValueError) as exc:
        print(f"kraft-storage: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a log dir that cannot be made or written
        where = f" {exc.filename}" if exc.filename else ""
        verb = "cannot write" if args.cmd == "format" else f"{args.cmd} failed on"
        print(f"kraft-storage: {verb}{where}: {exc.strerror or exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
