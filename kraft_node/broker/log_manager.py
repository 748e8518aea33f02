"""``LogManager``: the broker's partition logs in ``log.dirs`` (Kafka's ``LogManager``).

On-disk layout (Kafka's; one tree per log dir, next to ``meta.properties``)::

    <log dir>/
      meta.properties                      written by ``kraft-storage format``
      recovery-point-offset-checkpoint     "<topic> <partition> <offset>" lines (Kafka's text format:
      log-start-offset-checkpoint          version 0, entry count, entries; kraft_storage.log.checkpoint)
      replication-offset-checkpoint        (the high watermarks)
      .kafka_cleanshutdown                 {"version":0,"brokerEpoch":E}: every log of this dir closed
                                           cleanly (written last at shutdown, deleted once loaded)
      <topic>-<partition>/                 a KafkaLog: segments, indexes, leader-epoch-checkpoint,
                                           partition.metadata (the topic id)
      <topic>-<partition>.<uuid hex>-delete/   a deleted log, removed after ``file.delete.delay.ms``
      <topic>-<partition>.<uuid hex>-stray/    a log the image does not assign here: kept for the operator
      __cluster_metadata-0/                the Raft log: never touched here

Clean shutdown (Kafka's ``CleanShutdownFileHandler``): one marker per log dir, not one per
partition log.  Why: a per-log marker cost an unlink and a directory fsync at every open and a
write, fsync, rename and directory fsync at every close -- at 10k partition logs, tens of
thousands of fsyncs on the start and shutdown paths (session 18).  The marker is written only
when every log of that dir was closed cleanly (a failed close, or a log closed behind the
manager's back without its flush -- the ReplicaManager does that when a producer snapshot fails
-- leaves the dir unmarked: all its logs recover from their recovery points next time, which
costs the scan of their active segments).  Its ``brokerEpoch`` is what the broker registers as
``previousBrokerEpoch`` (KIP-966: the controller then knows the broker shut down cleanly); -1
unless every log dir had one.  A partition log's own marker left by an older kraft is removed
unread.

Why the checkpoints: a log opened without a clean shutdown is validated batch by
batch from its recovery point on (``KafkaLog.open(recovery_point=...)``); the recovery points
say how much is known flushed, so a crash costs the recovery of the unflushed tail only.  The
log start offsets survive DeleteRecords/retention, and the high watermarks let a restarted
leader answer consumers before its followers have fetched.  Every checkpoint file is replaced
atomically (``atomic_write``: temp file, fsync, rename, fsync of the directory), on a schedule
(``log.flush.offset.checkpoint.interval.ms``, ``log.flush.start.offset.checkpoint.interval.ms``,
``replica.high.watermark.checkpoint.interval.ms``) and at shutdown after every log is closed.

Placement: a new log goes to the log dir holding the fewest partition directories (Kafka's
``nextLogDirs`` without the JBOD directory assignment: the controller's directory for the
replica is not consulted yet).  Disk: a log's index files have their whole length sparse, as
Kafka's, and kraft_storage allocates their blocks 64 KiB ahead of the writes (a full device is a
DiskFullError naming the file, never a SIGBUS), so an open log costs no disk beyond what it
holds; a log that cannot be created (a full device) is named in the log and retried with the next
delta that touches it.  Creating one costs four fsyncs (the directory,
the first segment, ``partition.metadata``): the ReplicaManager opens new logs in worker threads,
in parallel.

Deletion (Kafka's ``asyncDelete``): the directory is renamed to ``<tp>.<uuid>-delete`` at
once (so a topic re-created with the same name gets a fresh directory), the log is closed, and
the renamed directory is removed after ``file.delete.delay.ms`` (the broker default
``log.segment.delete.delay.ms``, 60 s).  ``-delete`` directories found at start are removed
during the start (it runs off the event loop, in a worker thread).

Stray logs (Kafka 3.7+, ``LogManager`` with ``isStray``): a log found at start that the first
image does not assign to this broker (its topic is gone, was re-created with another id, or the
replica moved away while the broker was down) is closed and renamed to ``<tp>.<uuid>-stray``,
not deleted: an operator may still want its data.  ``-stray`` directories are skipped at start.

Threading: everything here runs on the broker's asyncio loop except the removal of deleted
directories (``shutil.rmtree`` in a worker thread).
"""
from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kraft_node.metadata.image.topics import TopicPartition
from kraft_storage.errors import KraftStorageError
from kraft_storage.fileio import atomic_write, fsync_dir
from kraft_storage.log.checkpoint import CheckpointFileError, format_checkpoint, parse_checkpoint
from kraft_storage.log.config import LONG_MAX, LogConfig
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE, KafkaLog
from kraft_storage.log.partition_metadata import PARTITION_METADATA, read_partition_metadata, write_partition_metadata

log = logging.getLogger("kraft.broker.logs")

__all__ = ["LogManager", "LogManagerSettings", "RECOVERY_POINT_CHECKPOINT", "LOG_START_OFFSET_CHECKPOINT",
           "REPLICATION_OFFSET_CHECKPOINT", "DELETE_DIR_SUFFIX", "parse_topic_partition_dir", "topic_log_config",
           "UNSUPPORTED_TOPIC_CONFIGS"]

def _read_clean_shutdown(log_dir: str) -> int | None:
    """The ``brokerEpoch`` of ``log_dir``'s clean-shutdown marker (-1 when it does not say or
    cannot be read: still a clean shutdown, Kafka's rule), None when there is no marker."""
    path = os.path.join(log_dir, CLEAN_SHUTDOWN_FILE)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        epoch = json.loads(raw).get("brokerEpoch", -1)
        return int(epoch)
    except (ValueError, AttributeError, TypeError):
        log.warning("%s: unreadable clean-shutdown marker %r: taken as a clean shutdown of an unknown broker epoch",
                    path, raw[:80])
        return -1


RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
DELETE_DIR_SUFFIX = "-delete"
STRAY_DIR_SUFFIX = "-stray"
METADATA_PARTITION_DIR = "__cluster_metadata-0"
_DELETE_DIR = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-delete$")
_STRAY_DIR = re.compile(r"^(.+)-(\d+)\.([0-9a-f]{32})-stray$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")

#: topic config -> (broker default key, LogConfig attribute, unit multiplier of the broker key)
_TOPIC_TO_LOG = {
    "segment.bytes": ("log.segment.bytes", "segment_bytes"),
    "segment.ms": ("log.roll.ms", "segment_ms"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "segment_jitter_ms"),
    "segment.index.bytes": ("log.index.size.max.bytes", "segment_index_bytes"),
    "index.interval.bytes": ("log.index.interval.bytes", "index_interval_bytes"),
    "retention.bytes": ("log.retention.bytes", "retention_bytes"),
    "retention.ms": ("log.retention.ms", "retention_ms"),
    "flush.messages": ("log.flush.interval.messages", "flush_messages"),
    "flush.ms": ("log.flush.interval.ms", "flush_ms"),
}
#: Topic configs read elsewhere (the Partition), so not warned about.
_USED_ELSEWHERE = frozenset({"min.insync.replicas", "max.message.bytes", "file.delete.delay.ms"})
#: Topic configs whose non-default values kraft does not implement yet: warned about by name
#: once per topic (the log behaves as with Kafka's default).
UNSUPPORTED_TOPIC_CONFIGS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "message.timestamp.type": "CreateTime",
    "unclean.leader.election.enable": "false",
    "preallocate": "false",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": str(LONG_MAX),
    "min.cleanable.dirty.ratio": "0.5",
    "delete.retention.ms": "86400000",
    "local.retention.ms": "-2",
    "local.retention.bytes": "-2",
    "remote.storage.enable": "false",
    "message.downconversion.enable": "true",
}


#: threads that open (at start) and close (at shutdown) the partition logs: their fsyncs overlap
OPEN_THREADS = 16
#: logs closed per pool task at shutdown
CLOSE_CHUNK = 64
#: topics whose LogConfig is cached (LogManager._config_for)
_CONFIG_CACHE_MAX = 100_000


@dataclass(frozen=True)
class LogPlan:
    """Where a partition's log is (``existing``) or will be created (``path`` in ``log_dir``)."""
    tp: TopicPartition
    topic_id: bytes
    path: str
    log_dir: str
    config: LogConfig
    existing: KafkaLog | None


def parse_topic_partition_dir(name: str) -> TopicPartition | None:
    """``orders-3`` -> TopicPartition('orders', 3); None for anything else (Kafka's
    ``UnifiedLog.parseTopicPartitionName`` for live logs)."""
    m = _PARTITION_DIR.match(name)
    if m is None or name.startswith("."):
        return None
    return TopicPartition(m.group(1), int(m.group(2)))


def _int_prop(props: Mapping[str, str], key: str, default: int, minimum: int | None = None) -> int:
    raw = props.get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}: expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{key}: must be at least {minimum}, got {value}")
    return value


def broker_log_defaults(props: Mapping[str, str]) -> dict[str, int]:
    """The broker's ``log.*`` defaults as topic-config values (``log.retention.hours`` and
    ``log.retention.minutes`` apply when ``log.retention.ms`` is unset, as in Kafka; same for
    ``log.roll.hours``)."""
    base = LogConfig()
    out: dict[str, int] = {}
    for topic_key, (broker_key, attr) in _TOPIC_TO_LOG.items():
        out[topic_key] = _int_prop(props, broker_key, getattr(base, attr))
    if "log.retention.ms" not in props:
        if "log.retention.minutes" in props:
            out["retention.ms"] = _int_prop(props, "log.retention.minutes", 0) * 60_000
        elif "log.retention.hours" in props:
            out["retention.ms"] = _int_prop(props, "log.retention.hours", 0) * 3_600_000
    if "log.roll.ms" not in props and "log.roll.hours" in props:
        out["segment.ms"] = _int_prop(props, "log.roll.hours", 0) * 3_600_000
    return out


def topic_log_config(topic: str, overrides: Mapping[str, str], defaults: Mapping[str, int],
                     warned: set[tuple[str, str]] | None = None) -> LogConfig:
    """The LogConfig of a topic: its overrides (from the image's configs) over the broker's
    defaults.  A topic config kraft does not implement with a non-default value is warned about
    by name (once per topic and key when ``warned`` is given)."""
    values = dict(defaults)
    for key, raw in overrides.items():
        if key in _TOPIC_TO_LOG:
            try:
                values[key] = int(raw)
            except ValueError:
                log.warning("topic %s: config %s=%r is not an integer; using %d", topic, key, raw, values[key])
            continue
        if key in _USED_ELSEWHERE:
            continue
        default = UNSUPPORTED_TOPIC_CONFIGS.get(key)
        if default is not None and raw.strip().lower() == default.lower():
            continue
        if warned is not None:
            if (topic, key) in warned:
                continue
            warned.add((topic, key))
        log.warning("topic %s: config %s=%s is not implemented by kraft's broker yet; the log behaves as with "
                    "Kafka's default%s", topic, key, raw, f" ({default})" if default is not None else "")
    # segment.bytes below LogConfig's floor would refuse the log: clamp, as a topic config was validated
    try:
        return LogConfig.from_properties(values)
    except ValueError as exc:
        log.warning("topic %s: invalid log config (%s); using the broker defaults", topic, exc)
        return LogConfig.from_properties(dict(defaults))


@dataclass(frozen=True)
class LogManagerSettings:
    """The broker keys the LogManager reads (Kafka's names and defaults)."""
    recovery_point_checkpoint_interval_ms: int = 60_000   # log.flush.offset.checkpoint.interval.ms
    start_offset_checkpoint_interval_ms: int = 60_000     # log.flush.start.offset.checkpoint.interval.ms
    high_watermark_checkpoint_interval_ms: int = 5_000    # replica.high.watermark.checkpoint.interval.ms
    flush_check_interval_ms: int = LONG_MAX               # log.flush.scheduler.interval.ms
    retention_check_interval_ms: int = 300_000            # log.retention.check.interval.ms
    file_delete_delay_ms: int = 60_000                    # log.segment.delete.delay.ms

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "LogManagerSettings":
        return cls(
            recovery_point_checkpoint_interval_ms=_int_prop(props, "log.flush.offset.checkpoint.interval.ms",
                                                            60_000, 1),
            start_offset_checkpoint_interval_ms=_int_prop(props, "log.flush.start.offset.checkpoint.interval.ms",
                                                          60_000, 1),
            high_watermark_checkpoint_interval_ms=_int_prop(props, "replica.high.watermark.checkpoint.interval.ms",
                                                            5_000, 1),
            flush_check_interval_ms=_int_prop(props, "log.flush.scheduler.interval.ms", LONG_MAX, 1),
            retention_check_interval_ms=_int_prop(props, "log.retention.check.interval.ms", 300_000, 1),
            file_delete_delay_ms=_int_prop(props, "log.segment.delete.delay.ms", 60_000, 0))


def _read_offsets(path: str) -> dict[TopicPartition, int]:
    """A ``<topic> <partition> <offset>`` checkpoint; a missing file is empty, a malformed one
    is logged and ignored (Kafka logs and recovers from offset 0: safe, only slower)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except FileNotFoundError:
        return {}
    try:
        rows = parse_checkpoint(text, path, 3)
        return {TopicPartition(t, int(p)): int(o) for t, p, o in rows}
    except (CheckpointFileError, ValueError) as exc:
        log.error("ignoring the malformed checkpoint %s (logs recover from their start): %s", path, exc)
        return {}


class LogManager:
    """Opens, creates, checkpoints and deletes the partition logs of ``log_dirs``.

    ``loaded`` after :meth:`startup`: every log found, by topic partition, with the topic id
    of its ``partition.metadata`` (None when missing).  The ReplicaManager takes the ones the
    image assigns to this broker and deletes the rest (stray logs)."""

    def __init__(self, log_dirs: Iterable[str], *, broker_props: Mapping[str, str] | None = None,
                 settings: LogManagerSettings | None = None, clock: Callable[[], int] | None = None) -> None:
        self.log_dirs = [os.path.abspath(d) for d in log_dirs]
        if not self.log_dirs:
            raise ValueError("log.dirs: at least one log directory is needed")
        props = dict(broker_props or {})
        self.settings = settings or LogManagerSettings.from_properties(props)
        self.defaults = broker_log_defaults(props)
        self._clock = clock or (lambda: int(time.time() * 1000))
        #: topic partition -> (log, its log dir)
        self.logs: dict[TopicPartition, KafkaLog] = {}
        #: where each log is (or is being created); changed only through _assign_dir/_forget_dir,
        #: which keep _dir_counts equal to the number of entries per log dir
        self._dir_of: dict[TopicPartition, str] = {}
        #: log dir -> partitions in ``_dir_of`` there (so placing a new log is O(log dirs), not
        #: O(partitions): counted afresh per log, creating 10k logs in one delta was quadratic)
        self._dir_counts: dict[str, int] = {d: 0 for d in self.log_dirs}
        #: the topic id of each log (from partition.metadata or the image)
        self.topic_ids: dict[TopicPartition, bytes | None] = {}
        self._warned: set[tuple[str, str]] = set()
        #: topic -> (its overrides, sorted; the LogConfig made from them): every partition of a
        #: topic shares one LogConfig (frozen), built once -- built per partition, it was half of
        #: the loop's cost of planning 10k new logs (40 of 100 us each)
        self._config_cache: dict[str, tuple[tuple[tuple[str, str], ...], LogConfig]] = {}
        #: partitions whose log could not be loaded at start -> why (left on disk as they were)
        self.failed: dict[TopicPartition, str] = {}
        self._tasks: list[asyncio.Task[None]] = []
        #: writes the checkpoint files off the loop, one at a time (see _write_all)
        self._checkpoint_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kraft-checkpoint")
        self._deletions: set[asyncio.Task[None]] = set()
        #: (recovery point, start offset) restored at start, for logs not yet handed out
        self._started = False
        self._closed = False
        #: the broker epoch of the last clean shutdown (every log dir marked), else -1 (startup sets it)
        self.previous_broker_epoch = -1
        #: high watermarks from replication-offset-checkpoint (read at start)
        self.checkpointed_high_watermarks: dict[TopicPartition, int] = {}
        #: the current high watermark of each partition (set by the ReplicaManager), checkpointed
        self.high_watermark_of: Callable[[TopicPartition], int | None] = lambda tp: None
        #: called after retention moved a log's start offset (the producer state follows)
        self.on_log_start_offset_changed: Callable[[TopicPartition, int], None] = lambda tp, offset: None

    # ------------------------------------------------------------------ start
    def startup(self) -> None:
        """Load every partition log in every log dir (Kafka's ``loadLogs``): recovery from the
        checkpointed recovery point when the log was not shut down cleanly.  Also removes the
        ``-delete`` directories left by a previous run (after the delete delay)."""
        found: list[tuple[TopicPartition, str, int, int, bool]] = []
        marked: list[str] = []
        epochs: list[int] = []
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            epoch = _read_clean_shutdown(d)
            clean = epoch is not None
            if clean:
                marked.append(d)
                epochs.append(epoch if epoch is not None else -1)
            recovery = _read_offsets(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
            starts = _read_offsets(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
            self.checkpointed_high_watermarks.update(_read_offsets(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)))
            for name in sorted(os.listdir(d)):
                path = os.path.join(d, name)
                if not os.path.isdir(path) or name == METADATA_PARTITION_DIR:
                    continue
                if _DELETE_DIR.match(name):
                    self._schedule_removal(path)
                    continue
                if _STRAY_DIR.match(name):
                    log.warning("skipping the stray log %s (not assigned to this broker; remove it by hand once "
                                "its data is not needed)", path)
                    continue
                tp = parse_topic_partition_dir(name)
                if tp is None:
                    continue
                if tp in self._dir_of:
                    raise RuntimeError(f"Duplicate log directories for {tp} are found in both "
                                       f"{self._dir_of[tp]} and {path}. It is likely because log directory "
                                       "failure happened while broker was replacing current replica with "
                                       "future replica. Recover broker from this failure by manually deleting "
                                       "one of the two directories for this partition.")
                self._assign_dir(tp, d)
                found.append((tp, path, recovery.get(tp, 0), starts.get(tp, 0), clean))
        # opened in parallel: a clean open costs an fsync, an unclean one the recovery of its tail
        with ThreadPoolExecutor(max_workers=OPEN_THREADS, thread_name_prefix="kraft-log-load") as pool:
            loaded = list(pool.map(self._load_one, found))
        for (tp, path, _rp, _so, _clean), (kl, topic_id, error) in zip(found, loaded):
            if kl is None:
                # Kafka takes the whole log dir offline; here only this partition is left out,
                # untouched, and refused by prepare_log until an operator repairs it
                # (``kraft-storage`` verify/recover) -- the other partitions are served
                self._forget_dir(tp)
                self.failed[tp] = f"{path}: {error}"
                log.error("could not load the log of %s from %s; this partition stays offline: %s", tp, path, error)
                continue
            self.logs[tp] = kl
            self.topic_ids[tp] = topic_id
        # every log of a marked dir is loaded: the markers go (a crash from here on recovers)
        for d in marked:
            os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))
            fsync_dir(d)
        self.previous_broker_epoch = min(epochs) if len(epochs) == len(self.log_dirs) and epochs else -1
        self._started = True
        if self.logs:
            log.info("loaded %d partition logs from %s (%s)", len(self.logs), ", ".join(self.log_dirs),
                     "after a clean shutdown" if len(marked) == len(self.log_dirs) else
                     f"clean shutdown marker in {len(marked)} of {len(self.log_dirs)} log dirs: the others' logs "
                     "recovered from their recovery points")

    def _load_one(self, item: tuple[TopicPartition, str, int, int, bool]
                  ) -> tuple[KafkaLog | None, bytes | None, BaseException | None]:
        """Any thread: open one log found at start (``(log, topic id, None)`` or ``(None, None, error)``)."""
        tp, path, recovery_point, start_offset, clean = item
        try:
            meta = os.path.join(path, PARTITION_METADATA)
            topic_id = read_partition_metadata(meta) if os.path.exists(meta) else None
            kl = KafkaLog.open(path, self._config_for(tp.topic, {}), recovery_point=recovery_point,
                               log_start_offset=start_offset, clock=self._clock, had_clean_shutdown=clean)
        except (KraftStorageError, OSError) as exc:
            return None, None, exc
        return kl, topic_id, None

    def start_background(self) -> None:
        """The periodic tasks on the running loop: checkpoints, flushes and retention."""
        s = self.settings
        loop = asyncio.get_running_loop()
        jobs: list[tuple[int, Callable[[], object]]] = [
            (s.recovery_point_checkpoint_interval_ms, lambda: self._checkpoint_off_loop(self._recovery_point_rows)),
            (s.start_offset_checkpoint_interval_ms, lambda: self._checkpoint_off_loop(self._log_start_offset_rows)),
            (s.high_watermark_checkpoint_interval_ms, lambda: self._checkpoint_off_loop(self._high_watermark_rows)),
            (s.retention_check_interval_ms, self.cleanup_logs),
        ]
        if s.flush_check_interval_ms != LONG_MAX:
            jobs.append((s.flush_check_interval_ms, self.flush_dirty_logs))
        for interval, job in jobs:
            self._tasks.append(loop.create_task(self._every(interval, job)))

    async def _every(self, interval_ms: int, job: Callable[[], object]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                res = job()
                if inspect.isawaitable(res):
                    await res
            except Exception:  # noqa: BLE001 - a failed checkpoint is retried at the next interval
                log.exception("log manager task %s failed", getattr(job, "__name__", job))

    # ------------------------------------------------------------------ logs
    def _config_for(self, topic: str, overrides: Mapping[str, str]) -> LogConfig:
        key = tuple(sorted(overrides.items())) if overrides else ()
        hit = self._config_cache.get(topic)
        if hit is not None and hit[0] == key:
            return hit[1]
        config = topic_log_config(topic, overrides, self.defaults, self._warned)
        if len(self._config_cache) >= _CONFIG_CACHE_MAX:
            self._config_cache.clear()  # topics come and go: bounded, rebuilt on demand
        self._config_cache[topic] = (key, config)
        return config

    def get_log(self, tp: TopicPartition) -> KafkaLog | None:
        return self.logs.get(tp)

    def _assign_dir(self, tp: TopicPartition, d: str) -> None:
        old = self._dir_of.get(tp)
        if old is not None:
            self._dir_counts[old] -= 1
        self._dir_of[tp] = d
        self._dir_counts[d] = self._dir_counts.get(d, 0) + 1

    def _forget_dir(self, tp: TopicPartition) -> str | None:
        d = self._dir_of.pop(tp, None)
        if d is not None:
            self._dir_counts[d] -= 1
        return d

    def _next_log_dir(self) -> str:
        """The log dir with the fewest partitions (the first listed on a tie)."""
        counts = self._dir_counts
        return min(self.log_dirs, key=lambda d: counts[d])

    def get_or_create_log(self, tp: TopicPartition, topic_id: bytes, overrides: Mapping[str, str]) -> KafkaLog:
        """The log of ``tp``, created (with its ``partition.metadata``) when missing (see
        :meth:`prepare_log`, :meth:`open_prepared` and :meth:`register` for the three steps, which
        the ReplicaManager runs with the opening in worker threads)."""
        plan = self.prepare_log(tp, topic_id, overrides)
        kl = self.open_prepared(plan)
        self.register(plan, kl)
        return kl

    def prepare_log(self, tp: TopicPartition, topic_id: bytes, overrides: Mapping[str, str]) -> "LogPlan":
        """On the loop: the existing log of ``tp`` (its ``partition.metadata`` completed), or where a
        new one goes.  A log whose ``partition.metadata`` names another topic id is refused: it
        belongs to a deleted topic of the same name (Kafka's InconsistentTopicIdException)."""
        if tp in self.failed:
            raise RuntimeError(f"the log of {tp} could not be loaded at start ({self.failed[tp]}); repair it "
                               "with kraft-storage and restart the broker")
        config = self._config_for(tp.topic, overrides)
        existing = self.logs.get(tp)
        if existing is not None:
            known = self.topic_ids.get(tp)
            if known is not None and known != topic_id:
                raise ValueError(f"Tried to assign topic ID {uuid.UUID(bytes=topic_id)} to log for topic partition "
                                 f"{tp}, but log already contained topic ID {uuid.UUID(bytes=known)}")
            if known is None:
                write_partition_metadata(existing.directory, topic_id)
                self.topic_ids[tp] = topic_id
            if config != existing.config:
                existing.config = config
            return LogPlan(tp, topic_id, existing.directory, self._dir_of[tp], config, existing)
        d = self._next_log_dir()
        self._assign_dir(tp, d)  # counted by _next_log_dir from now on
        return LogPlan(tp, topic_id, os.path.join(d, f"{tp.topic}-{tp.partition}"), d, config, None)

    def open_prepared(self, plan: "LogPlan") -> KafkaLog:
        """Any thread: open (create) the planned log.  Touches nothing of the manager's."""
        if plan.existing is not None:
            return plan.existing
        return KafkaLog.open(plan.path, plan.config, topic_id=plan.topic_id, clock=self._clock)

    def register(self, plan: "LogPlan", kl: KafkaLog | None) -> None:
        """On the loop: take the opened log in (None: opening failed, forget the plan)."""
        if plan.existing is not None:
            return
        if kl is None:
            if self._dir_of.get(plan.tp) == plan.log_dir and plan.tp not in self.logs:
                self._forget_dir(plan.tp)
            return
        self.logs[plan.tp] = kl
        self.topic_ids[plan.tp] = plan.topic_id
        log.info("created log for partition %s in %s with topic id %s", plan.tp, kl.directory,
                 uuid.UUID(bytes=plan.topic_id))

    def update_config(self, tp: TopicPartition, overrides: Mapping[str, str]) -> None:
        kl = self.logs.get(tp)
        if kl is None:
            return
        cfg = self._config_for(tp.topic, overrides)
        if cfg != kl.config:
            kl.config = cfg

    def async_delete(self, tp: TopicPartition) -> str | None:
        """Kafka's ``asyncDelete``: close the log, rename its directory to
        ``<tp>.<uuid>-delete`` and remove it after the delete delay.  Returns the new path."""
        target = self._close_and_rename(tp, DELETE_DIR_SUFFIX)
        if target is not None:
            log.info("log for partition %s is renamed to %s and is scheduled for deletion", tp, target)
            self._schedule_removal(target)
        return target

    def mark_stray(self, tp: TopicPartition) -> str | None:
        """Close the log of ``tp`` and rename its directory to ``<tp>.<uuid>-stray`` (kept)."""
        target = self._close_and_rename(tp, STRAY_DIR_SUFFIX)
        if target is not None:
            log.warning("log of %s marked stray and renamed to %s", tp, target)
        return target

    def _close_and_rename(self, tp: TopicPartition, suffix: str) -> str | None:
        """Forget ``tp``'s log, close it and rename its directory to ``<tp>.<uuid><suffix>``
        (the rename made durable); the new path, or None when there was no log."""
        kl = self.logs.pop(tp, None)
        d = self._forget_dir(tp)
        self.topic_ids.pop(tp, None)
        if kl is None or d is None:
            return None
        kl.close()
        target = os.path.join(d, f"{tp.topic}-{tp.partition}.{uuid.uuid4().hex}{suffix}")
        os.rename(kl.directory, target)
        fsync_dir(d)
        return target

    def _schedule_removal(self, path: str) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (a tool, a test): remove now
            shutil.rmtree(path, ignore_errors=True)
            return
        task = loop.create_task(self._remove_later(path, self.settings.file_delete_delay_ms))
        self._deletions.add(task)
        task.add_done_callback(self._deletions.discard)

    async def _remove_later(self, path: str, delay_ms: int) -> None:
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1000)
        await asyncio.to_thread(shutil.rmtree, path, True)
        log.info("deleted log directory %s", path)

    # ------------------------------------------------------------------ periodic work
    def logs_in_dir(self, log_dir: str) -> list[tuple[TopicPartition, KafkaLog]]:
        """The logs kept in ``log_dir`` (DescribeLogDirs)."""
        return [(tp, kl) for tp, kl in self.logs.items() if self._dir_of.get(tp) == log_dir]

    def _by_dir(self) -> dict[str, list[tuple[TopicPartition, KafkaLog]]]:
        out: dict[str, list[tuple[TopicPartition, KafkaLog]]] = {d: [] for d in self.log_dirs}
        for tp, kl in self.logs.items():
            out[self._dir_of[tp]].append((tp, kl))
        return out

    # The checkpoint files.  Their rows are taken on the loop (the logs' offsets are the loop's),
    # their formatting and atomic write (two fsyncs) run on one thread of their own
    # (_checkpoint_pool) when called from the loop: at 10,000-30,000 logs a periodic checkpoint
    # held the broker's loop for 0.1-0.5 s (session 19's profile), as long as its fsyncs took
    # on a busy disk.  One thread, so that two writes of one file never overlap and each lands
    # in the order it was taken (Kafka writes them on its scheduler thread).
    _Rows = list[tuple[str, list[tuple[TopicPartition, int]]]]

    @staticmethod
    def _write(path: str, rows: list[tuple[TopicPartition, int]]) -> None:
        rows.sort()
        atomic_write(path, format_checkpoint((tp.topic, tp.partition, off) for tp, off in rows))

    @classmethod
    def _write_all(cls, files: _Rows) -> None:
        for path, rows in files:
            cls._write(path, rows)

    def _recovery_point_rows(self) -> _Rows:
        return [(os.path.join(d, RECOVERY_POINT_CHECKPOINT), [(tp, kl.recovery_point) for tp, kl in logs])
                for d, logs in self._by_dir().items()]

    def _log_start_offset_rows(self) -> _Rows:
        """Kafka writes only the logs whose start offset is above their first segment's base;
        kraft writes every log's (the file stays small and the reading is the same)."""
        return [(os.path.join(d, LOG_START_OFFSET_CHECKPOINT), [(tp, kl.log_start_offset) for tp, kl in logs])
                for d, logs in self._by_dir().items()]

    def _high_watermark_rows(self) -> _Rows:
        out: LogManager._Rows = []
        for d, logs in self._by_dir().items():
            rows = []
            for tp, _kl in logs:
                hw = self.high_watermark_of(tp)
                if hw is None:
                    hw = self.checkpointed_high_watermarks.get(tp)
                if hw is not None:
                    rows.append((tp, hw))
            out.append((os.path.join(d, REPLICATION_OFFSET_CHECKPOINT), rows))
        return out

    def checkpoint_recovery_points(self) -> None:
        self._write_all(self._recovery_point_rows())

    def checkpoint_log_start_offsets(self) -> None:
        self._write_all(self._log_start_offset_rows())

    def checkpoint_high_watermarks(self) -> None:
        self._write_all(self._high_watermark_rows())

    async def _checkpoint_off_loop(self, rows_of: Callable[[], _Rows]) -> None:
        files = rows_of()
        await asyncio.get_running_loop().run_in_executor(self._checkpoint_pool, self._write_all, files)

    def flush_dirty_logs(self) -> None:
        for kl in list(self.logs.values()):
            kl.maybe_flush()

    def cleanup_logs(self) -> None:
        """Retention by ``retention.ms`` and ``retention.bytes``, only below the high watermark
        (Kafka deletes no segment a consumer could still be promised)."""
        for tp, kl in list(self.logs.items()):
            hw = self.high_watermark_of(tp)
            if hw is None:
                continue
            deleted = kl.delete_old_segments(max_offset=hw)
            if deleted:
                self.on_log_start_offset_changed(tp, kl.log_start_offset)
                log.info("partition %s: deleted %d segments by retention; log start offset now %d", tp,
                         len(deleted), kl.log_start_offset)

    # ------------------------------------------------------------------ stop
    async def shutdown(self, broker_epoch: int = -1) -> None:
        """Close every log (flush, trim), write all three checkpoints, then each log dir's
        clean-shutdown marker (``broker_epoch`` in it) if every log of that dir closed cleanly."""
        if self._closed:
            return
        self._closed = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        # a log the manager assigned but no longer holds was closed behind its back (the
        # ReplicaManager closes one uncleanly when its producer snapshot fails): its dir is unclean
        unclean = {d for tp, d in self._dir_of.items() if tp not in self.logs}
        # closed in parallel (each close flushes: an fsync or two), off the loop
        items = list(self.logs.items())
        loop = asyncio.get_running_loop()
        t0 = time.monotonic()

        def close(chunk: list[tuple[TopicPartition, KafkaLog]]) -> list[BaseException | None]:
            out: list[BaseException | None] = []
            for _tp, kl in chunk:
                try:
                    kl.close(marker=False)
                    out.append(None)
                except Exception as exc:  # noqa: BLE001 - named on the loop below
                    out.append(exc)
            return out
        # in chunks (a future per log cost the loop ~50 us each at 10,000 logs)
        chunks = [items[i:i + CLOSE_CHUNK] for i in range(0, len(items), CLOSE_CHUNK)]
        with ThreadPoolExecutor(max_workers=OPEN_THREADS, thread_name_prefix="kraft-log-close") as pool:
            done = await asyncio.gather(*(loop.run_in_executor(pool, close, c) for c in chunks))
        outcomes = [o for chunk_outcomes in done for o in chunk_outcomes]
        errors = 0
        for (tp, _kl), outcome in zip(items, outcomes):
            if isinstance(outcome, BaseException):
                # the other logs still close; this one's dir recovers at the next start
                errors += 1
                d = self._dir_of.get(tp)
                if d is not None:
                    unclean.add(d)
                log.error("closing the log of %s failed: %s", tp, outcome, exc_info=outcome)
        t1 = time.monotonic()
        if self._started:
            # (a checkpoint that cannot be written raises before any marker is); on the checkpoint
            # thread, after any periodic write still running there
            files = [self._recovery_point_rows(), self._log_start_offset_rows(), self._high_watermark_rows()]
            await loop.run_in_executor(self._checkpoint_pool, lambda: None)  # any periodic write is over
            # the three files at once: their fsyncs overlap (a busy disk took 0.5-1.2 s for the six in turn)
            with ThreadPoolExecutor(max_workers=len(files), thread_name_prefix="kraft-checkpoint-final") as pool:
                await asyncio.gather(*(loop.run_in_executor(pool, self._write_all, f) for f in files))
            for d in self.log_dirs:
                if d in unclean:
                    log.warning("no clean-shutdown marker in %s: a log of it was not closed cleanly; its logs "
                                "recover from their recovery points at the next start", d)
                    continue
                atomic_write(os.path.join(d, CLEAN_SHUTDOWN_FILE),
                             json.dumps({"version": 0, "brokerEpoch": broker_epoch}, separators=(",", ":")).encode())
        # the two phases of a controlled shutdown's tail (broker_bench.py shutdown reads this line)
        log.info("closed %d partition logs in %.3f s; checkpoints written in %.3f s", len(items), t1 - t0,
                 time.monotonic() - t1)
        self._checkpoint_pool.shutdown(wait=False)
        for t in list(self._deletions):
            t.cancel()
        if errors:
            log.error("%d partition logs were not closed cleanly; they recover at the next start", errors)
