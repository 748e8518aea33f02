"""``kraft-server-start``: run one KRaft node (controller, broker, or both) until SIGTERM.

    kraft-server-start [server.properties] [--exit-after-seconds N]
                       [--demo-writer] [--writer-interval-ms MS] [--writer-batch N]

Without a file, the embedded default config is used (one combined broker and
controller: Kafka clients on 127.0.0.1:9092, the controller quorum on
127.0.0.1:9093, data under the temp dir); if that log dir is not formatted
yet it is formatted with a fresh cluster id first, so the command alone runs
a node on a fresh machine.  With a file, the log dirs must have been
formatted with ``kraft-storage format`` (same node id; the cluster id comes
from meta.properties).

Before anything in them is read or written, every log dir (``log.dirs`` and
``metadata.log.dir``) is locked for the process lifetime (Kafka's ``.lock``,
:mod:`kraft_storage.dirlock`): a second node on the same directories exits 1
with "log directory D is locked by another process (pid P)" and changes
nothing.  A start that fails after the log was opened (port in use, a bad
quorum-state or leader-epoch checkpoint, a corrupt batch in a clean log...)
closes it cleanly, so the directory is left byte for byte as it was (the clean
shutdown marker kept, the indexes trimmed) and the next start sees the same
problem instead of silently recovering past it.  How the metadata log was
loaded is logged once at start (what recovery dropped, at WARNING).

Role changes are logged to stderr ("node 1 became leader of epoch 3").  A node with
the broker role reports itself started only once the controller has unfenced it
(Kafka's BrokerServer start; bounded by ``initial.broker.registration.timeout.ms``,
after which the start fails with exit code 1 and says what it waited for).
SIGTERM or SIGINT starts a graceful shutdown: a broker first runs a controlled
shutdown (the controller moves its leaders away; bounded by
``--shutdown-timeout-seconds``, after which it stops anyway and says so), then a leader resigns with
EndQuorumEpoch and waits (up to ``--shutdown-timeout-seconds``) until a
successor is known, the log is closed cleanly, and the process exits 0.

``--demo-writer`` makes the node, whenever it leads, append numbered records
(``<node>-<pid>-<seq>``) and print each one once it is *committed* as
``ACK <offset> <value>`` on stdout -- a tiny state-machine client used by the
multi-process tests (every ACK line must survive any crash) and for demos.
SIGUSR1 stops the writer (the node keeps serving).
``--exit-after-seconds`` (or ``KRAFT_EXIT_AFTER_SECONDS``) stops the node
gracefully after that long.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys

from kraft_node import event_loop
from kraft_node.raft.errors import BufferFullError, NotLeaderError, RaftError
from kraft_node.raft.io.driver import FOLLOWER_FLUSH_MODES, LEADER_FLUSH_MODES, DriverError, RaftDriver, describe_error
from kraft_node.server.broker import BrokerStartError
from kraft_node.server.config import ConfigError, NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.dirlock import DirLocks, lock_dirs
from kraft_storage.errors import KraftStorageError

log = logging.getLogger("kraft.server")


def _describe(node_id: int, role: str, epoch: int, leader: int) -> str:
    if role == "Leader":
        return f"node {node_id} became leader of epoch {epoch}"
    if role == "Follower":
        return f"node {node_id} is following leader {leader} in epoch {epoch}"
    if role == "Resigned":
        return f"node {node_id} resigned as leader of epoch {epoch}"
    if role in ("Candidate", "Prospective"):
        return f"node {node_id} is {role.lower()} in epoch {epoch}"
    return f"node {node_id} is unattached in epoch {epoch}" + (f" (leader {leader})" if leader >= 0 else "")


def _maybe_format_default(cfg: NodeConfig, out, dir_locks: DirLocks) -> None:
    """Format the embedded default config's log dir on first use.  ``dir_locks``: the caller
    already holds the locks of ``cfg.all_log_dirs`` (taken before this looks at anything)."""
    from kraft_node.server.tools.storage import format_storage, random_uuid
    if os.path.exists(os.path.join(cfg.metadata_log_dir, "meta.properties")):
        return
    cid = random_uuid()
    print(f"No config file given and {cfg.metadata_log_dir} is not formatted: formatting it with the "
          f"embedded default config and the new cluster id {cid}.", file=out)
    format_storage(cfg, cid, out=out, dir_locks=dir_locks)


def log_load_report(where: str, report) -> None:
    """What opening the metadata log found and did (``KafkaLog.load_report``), once at start
    (issue 19: recovery is never silent about loss): the summary at INFO when the load
    changed nothing, else the summary and every truncation, deleted segment, rebuilt index
    and removed file (``describe()``) at WARNING.

    ``KafkaLog.open`` itself logs (logger ``kraft.storage.log``) each of those events at
    WARNING as it happens and then the summary whenever the shutdown was unclean or
    something changed; in those cases the lines are already in the log, and repeating them
    here only doubled every line of a routine crash restart.  So this adds the INFO summary
    of a clean load, which the storage layer does not log."""
    lines = report.describe()
    if lines or not report.clean_shutdown:
        return  # already logged by kraft.storage.log, see above
    log.info("%s", _prefixed(where, report.summary()))


def _prefixed(where: str, line: str) -> str:
    return line if where in line else f"{where}: {line}"


async def _demo_writer(driver: RaftDriver, interval_s: float, batch: int, stop: asyncio.Event) -> None:
    seq = 0
    prefix = f"{driver.node_id}-{os.getpid()}-"

    def done(values, fut):
        if fut.cancelled() or fut.exception() is not None:
            return
        last = fut.result()
        first = last - len(values) + 1
        sys.stdout.write("".join(f"ACK {first + i} {v}\n" for i, v in enumerate(values)))
        sys.stdout.flush()

    while not stop.is_set():
        lae = driver.leader_and_epoch
        if lae.leader_id == driver.node_id:
            values = [f"{prefix}{seq + i}" for i in range(batch)]
            try:
                fut = driver.append([v.encode() for v in values], lae.epoch)
            except (NotLeaderError, BufferFullError, RaftError):
                pass
            else:
                seq += batch
                fut.add_done_callback(lambda f, vs=values: done(vs, f))
        try:
            await asyncio.wait_for(stop.wait(), interval_s)
        except asyncio.TimeoutError:
            pass


def freeze_startup_heap() -> None:
    """Move every object alive now (modules, classes, the codecs, the node's state) out of
    the garbage collector's reach (``gc.freeze``).  Why: a full collection walks the whole
    heap, ~10 ms here, and lands on whatever commit is in flight (the bench's max commit
    latency was 8.6-17.7 ms with it, 3.0-4.0 ms without, lone appends, session 7).  Call
    it once the node has started, in a process that runs one node."""
    gc.collect()
    gc.freeze()


async def run(cfg: NodeConfig, *, exit_after: float | None = None, demo_writer: bool = False,
              writer_interval_ms: int = 1000, writer_batch: int = 1, shutdown_timeout: float = 5.0,
              leader_flush: str = "auto", follower_flush: str = "inline", dir_locks: DirLocks | None = None) -> int:
    """Run the node until SIGTERM/SIGINT, ``exit_after`` or a fatal error.  ``dir_locks``:
    the locks of ``cfg.all_log_dirs`` if the caller took them (``main`` does, before it reads
    anything); else the node takes them.  Whatever fails after the log is opened, the
    node is closed, so the directory is left as it was found (issue 19)."""
    from kraft_node.server.config import warn_unused_keys
    warn_unused_keys(cfg, log)  # once per start: Kafka's "were supplied but are not used yet"
    # The QuorumController runs on every controller node, except with --demo-writer, whose
    # opaque records no controller could replay (the Raft-only demo, like Kafka's TestRaftServer).
    node = KraftNode.from_config(cfg, leader_flush=leader_flush, follower_flush=follower_flush,
                                 dir_locks=dir_locks, controller=not demo_writer)
    driver = node.driver
    log_load_report(cfg.metadata_partition_dir, driver.log.load_report)
    driver.on_role_change(lambda role, epoch, leader: log.info("%s", _describe(cfg.node_id, role, epoch, leader)))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    writer_stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, writer_stop.set)  # tests: stop writing, keep serving
    # A failed start (port in use, a bad quorum-state...) closes what it opened (the node
    # does): closing the log cleanly keeps the clean-shutdown marker and trims the indexes.
    try:
        await node.start()
    except BrokerStartError as exc:
        log.critical("%s", exc)
        return 1
    freeze_startup_heap()
    kind = "a voter" if driver.is_voter else "an observer"
    where = f" on {node.endpoint}" if node.endpoint is not None else ""
    if node.broker is not None:
        where += ", serving Kafka clients on " + ", ".join(str(e) for e in node.broker.advertised_endpoints())
    quorum = "dynamic quorum, kraft.version 1" if driver.dynamic else "static quorum"
    log.info("node %d started as %s of cluster %s%s (%s, %s)", cfg.node_id, kind, driver.cluster_id, where,
             quorum, cfg.metadata_partition_dir)
    tasks = []
    if demo_writer:
        tasks.append(asyncio.create_task(_demo_writer(driver, writer_interval_ms / 1000, writer_batch,
                                                      writer_stop)))
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(driver.wait_closed_or_fatal())]
    await asyncio.wait(waiters, timeout=exit_after, return_when=asyncio.FIRST_COMPLETED)
    for w in waiters:
        w.cancel()
    stop.set()
    writer_stop.set()
    for t in tasks:
        await t
    if driver.fatal is not None:
        log.critical("node %d stopped after a fatal error: %s", cfg.node_id, describe_error(driver.fatal))
        await node.close()
        return 2
    log.info("node %d shutting down", cfg.node_id)
    ok = await node.shutdown(shutdown_timeout)
    log.info("node %d shut down%s", cfg.node_id, "" if ok else " (no successor was known in time)")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="kraft-server-start",
                                description="Run a KRaft node: a controller, a broker, or both.")
    p.add_argument("config", nargs="?", help="server.properties (default: the embedded single-node config)")
    p.add_argument("--exit-after-seconds", type=float, default=None,
                   help="stop gracefully after this many seconds (default: $KRAFT_EXIT_AFTER_SECONDS, else never)")
    p.add_argument("--shutdown-timeout-seconds", type=float, default=5.0)
    p.add_argument("--demo-writer", action="store_true",
                   help="when leader, append numbered records and print 'ACK <offset> <value>' once committed")
    p.add_argument("--writer-interval-ms", type=int, default=1000)
    p.add_argument("--writer-batch", type=int, default=1)
    p.add_argument("--log-level", default=os.environ.get("KRAFT_LOG_LEVEL", "INFO"))
    p.add_argument("--leader-flush", choices=LEADER_FLUSH_MODES, default="auto",
                   help="where the leader fsyncs (default auto: native AIO where the kernel allows it)")
    p.add_argument("--follower-flush", choices=FOLLOWER_FLUSH_MODES, default="inline",
                   help="where a follower fsyncs (default inline; aio measured slower on shared cores)")
    args = p.parse_args(argv)
    if args.exit_after_seconds is None and os.environ.get("KRAFT_EXIT_AFTER_SECONDS"):
        try:
            args.exit_after_seconds = float(os.environ["KRAFT_EXIT_AFTER_SECONDS"])
        except ValueError:
            p.error(f"KRAFT_EXIT_AFTER_SECONDS={os.environ['KRAFT_EXIT_AFTER_SECONDS']!r} is not a number of seconds")
    if args.exit_after_seconds is not None and not args.exit_after_seconds >= 0:
        p.error(f"--exit-after-seconds must be a number of seconds >= 0, not {args.exit_after_seconds}")
    if not args.shutdown_timeout_seconds >= 0:
        p.error(f"--shutdown-timeout-seconds must be >= 0, not {args.shutdown_timeout_seconds}")
    if args.writer_interval_ms < 1 or args.writer_batch < 1:
        p.error("--writer-interval-ms and --writer-batch must be at least 1")
    level = logging.getLevelName(args.log_level.upper())
    if not isinstance(level, int):
        p.error(f"--log-level (or KRAFT_LOG_LEVEL) {args.log_level!r} is not one of DEBUG, INFO, WARNING, ERROR, "
                "CRITICAL")
    logging.basicConfig(level=level, stream=sys.stderr, format="[%(asctime)s] %(levelname)s %(message)s")
    locks = None
    try:
        if args.config:
            cfg = NodeConfig.from_file(args.config)
        else:
            cfg = NodeConfig.default()
        # Every log dir is locked before anything in it is read or written, for the
        # process lifetime (Kafka's .lock; kraft_storage.dirlock).  The embedded default
        # config's dir is created here so that even its first format happens under the lock.
        locks = lock_dirs(cfg.all_log_dirs, create=not args.config)
        if not args.config:
            _maybe_format_default(cfg, sys.stderr, locks)
        return event_loop.run(run(cfg, exit_after=args.exit_after_seconds, demo_writer=args.demo_writer,
                               writer_interval_ms=args.writer_interval_ms, writer_batch=args.writer_batch,
                               shutdown_timeout=args.shutdown_timeout_seconds,
                               leader_flush=args.leader_flush, follower_flush=args.follower_flush,
                               dir_locks=locks))
    except (ConfigError, DriverError, KraftStorageError) as exc:
        print(f"kraft-server-start: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"kraft-server-start: {exc}", file=sys.stderr)
        return 1
    finally:
        if locks is not None:
            locks.release()


if __name__ == "__main__":
    sys.exit(main())
