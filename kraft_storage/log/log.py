"""``KafkaLog``: a partition's segmented log directory, Kafka's layout and semantics.

A directory such as ``__cluster_metadata-0/`` holds::

    00000000000000000000.log          segments: record batches back to back
    00000000000000000000.index        sparse offset index (see .index)
    00000000000000000000.timeindex    time index
    leader-epoch-checkpoint           epoch -> start offset (see .epoch_cache)
    partition.metadata                topic id (see .partition_metadata)
    .kafka_cleanshutdown              present only while the log is cleanly closed

Other files (Kafka's producer-state ``.snapshot``, KRaft ``.checkpoint``
snapshots, ``quorum-state``) are left alone.

Concurrency: one writer thread calls the mutating methods; any number of
reader threads call :meth:`read` and the offset queries.  An append writes
the bytes, then publishes the segment size, then the log end offset, so a
reader never sees a partial batch.  Structural changes (roll, truncation,
deletion) and the offset lookup of a read hold ``_lock``; byte copies of a
:class:`FetchData` happen outside it and detect a truncation that raced
with them.

Durability: with ``flush.messages=1`` every append is fdatasync'd before it
returns, so an acknowledged append survives a kill -9 (or power loss, if the
disk honours flushes).  A new segment file's directory entry is fsync'd when
the segment is created.

Clean shutdown marker: Kafka's ``LogManager`` keeps one
``.kafka_cleanshutdown`` per log *directory* (the parent of the partition
directories), JSON ``{"version":0,"brokerEpoch":N}``, deleted when the logs
are loaded and written back after they are all closed.  Without a log
manager, each ``KafkaLog`` keeps that same file inside its own partition
directory; a LogManager should move it up one level.  When it is present at
open, the segments are trusted (only the indexes are sanity-checked and the
batches after each segment's last index entry are CRC-checked); when absent,
every segment from the one holding the recovery point onwards is validated
batch by batch.

Opening is careful with what it finds (issue 19):

* The marker is deleted only once the load succeeded; a failed open closes the
  segments it opened (indexes back to their size), removes the files it created,
  and leaves every other byte as it was.  ``close()`` after a successful open
  writes the same marker back, so open + close of a clean log is byte-identical.
* Corruption in a clean log is not a torn write: a bad batch raises
  :class:`CorruptCleanLogError` instead of being cut (a missing or corrupt index
  is rebuilt, as Kafka does, after checking the batches).  ``recover_clean=True``
  (repair tools: :func:`kraft_storage.log.verify.recover_log_dir`) cuts instead.
* Segments must be contiguous (each starts at the previous one's next offset; an
  empty segment that is not the last is refused too): the metadata log is never
  compacted, so a gap or overlap means files were removed or renamed by hand.
* Every truncation, deleted segment, rebuilt index and removed file is logged at
  WARNING on ``kraft.storage.log``, counted in :data:`RECOVERY_COUNTERS` and
  listed in :attr:`KafkaLog.load_report` (``describe()``, ``summary()``).
* A full device is a :class:`DiskFullError` ("No space left on device", with the
  file), never a SIGBUS: index space is reserved with ``posix_fallocate`` before
  it is mapped.
"""
from __future__ import annotations

import bisect
import json
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Self, cast

import numpy as np

from kraft_storage.accel import load
from kraft_storage.errors import CorruptRecordError, KraftStorageError
from kraft_storage.fileio import StrPath, atomic_write, disk_full, fsync_dir
from kraft_storage.log.config import LONG_MAX, LogConfig
from kraft_storage.log.epoch_cache import LEADER_EPOCH_CHECKPOINT, LeaderEpochCache
from kraft_storage.log.errors import (
    CorruptCleanLogError,
    LogClosed,
    NotALogDirectory,
    OffsetOutOfRange,
    RecordBatchTooLargeError,
    SegmentBaseOffsetMismatch,
    SegmentContiguityError,
)
from kraft_storage.log.index import IndexCorrupt
from kraft_storage.log.partition_metadata import PARTITION_METADATA, write_partition_metadata
from kraft_storage.log.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, LogSegment, RecoveryReport
from kraft_storage.record.batch import CRC_SKIP, CRC_VERIFY, scan_batches

if TYPE_CHECKING:
    from kraft_storage._contracts import LogAppendKernel
    from kraft_storage.log.segment import FileHandle

_appendk = cast("LogAppendKernel", load("_logappend"))

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_STALE_SUFFIXES = (".deleted", ".cleaned", ".tmp")
_LEADER = _appendk.MODE_LEADER
_FOLLOWER = _appendk.MODE_FOLLOWER
#: page size for posix_fadvise ranges (LogConfig.page_cache_retain_bytes)
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class EpochEnd(NamedTuple):
    """Answer of :meth:`KafkaLog.end_offset_for_epoch`: the greatest epoch not above the one
    asked and the offset where it ends (-1, -1 when unknown).  (Not the Raft messages'
    ``EpochEndOffset``, the Fetch response's diverging epoch, named by Kafka's schema: the
    storage layer cannot import it, and a lookup answer is a tuple, compared as one.)"""
    epoch: int
    end_offset: int


class AppendInfo(NamedTuple):
    """Where an append went.  (A NamedTuple, not a frozen dataclass: it is built on
    every append, and a frozen dataclass costs ~1.5 us to construct, a tenth of
    a small append's budget.)"""
    first_offset: int
    last_offset: int
    batches: int
    records: int
    bytes: int
    segment_base_offset: int
    position: int
    max_timestamp: int
    flushed: bool


#: Process-wide counts of what log loads did to data on disk: "truncations" (segments
#: cut), "truncated_bytes", "deleted_segments", "rebuilt_indexes", "removed_files".
#: Only ever incremented.  The metrics registry of a later issue exports it (as
#: kraft_log_recovery_<key>_total); until then, tests and tools read it here.
RECOVERY_COUNTERS: Counter[str] = Counter()

_logger = logging.getLogger("kraft.storage.log")


@dataclass
class LoadReport:
    """What :meth:`KafkaLog.open` found and did.

    ``events`` holds one line per action that changed or dropped something (each
    was also logged at WARNING on logger ``kraft.storage.log``); :meth:`describe`
    returns them and :meth:`summary` is the one line a node logs at start."""
    clean_shutdown: bool
    recovered: list[RecoveryReport] = field(default_factory=list)
    rebuilt_indexes: list[int] = field(default_factory=list)
    deleted_segments: list[int] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    directory: str = ""
    events: list[str] = field(default_factory=list)
    segments: int = 0
    start_offset: int = 0
    end_offset: int = 0
    #: the directory did not exist: this open created the log (nothing to recover, nothing logged)
    created: bool = False

    def describe(self) -> list[str]:
        """One human line per truncation, deleted segment, rebuilt index and removed
        file (empty when the load changed nothing)."""
        return list(self.events)

    def summary(self) -> str:
        """One line: how the log was shut down, its segments and offsets, and what the load did."""
        how = "a clean shutdown" if self.clean_shutdown else "an unclean shutdown"
        seg = "segment" if self.segments == 1 else "segments"
        line = (f"{self.directory}: log loaded after {how}: {self.segments} {seg}, offsets "
                f"[{self.start_offset}, {self.end_offset})")
        if self.recovered:
            line += f"; {len(self.recovered)} segment(s) validated batch by batch"
        dropped = self.dropped
        if dropped:
            first = min(r.first_dropped_offset for r in dropped)  # type: ignore[type-var]  # set when bytes were dropped
            line += (f"; DROPPED {self.truncated_bytes} bytes from offset {first} in {len(dropped)} "
                     f"segment(s)")
        else:
            line += "; nothing dropped"
        line += (f"; deleted {len(self.deleted_segments)} segment(s), rebuilt the indexes of "
                 f"{len(self.rebuilt_indexes)}, removed {len(self.removed_files)} file(s)")
        return line

    @property
    def truncated_bytes(self) -> int:
        return sum(r.truncated_bytes for r in self.recovered)

    @property
    def dropped(self) -> list[RecoveryReport]:
        return [r for r in self.recovered if r.truncated_bytes]


class LogTruncatedDuringRead(KraftStorageError):
    """The segment was truncated between locating a fetch's bytes and copying them: fetch again."""


class FetchData:
    """The answer to a read: whole batches as a slice of a segment file.

    ``fd``/``position``/``length`` can be handed to ``os.sendfile``; the
    object keeps the segment's file open while it lives, even if the
    segment is deleted meanwhile.  :meth:`tobytes` copies the bytes out.
    """
    __slots__ = ("fetch_offset", "segment_base_offset", "position", "length", "log_start_offset",
                 "log_end_offset", "first_batch_offset", "_handle", "_segment", "_generation")

    # None only for an empty answer (length 0), which every reader below checks first
    _handle: FileHandle
    _segment: LogSegment

    def __init__(self, fetch_offset: int, segment: LogSegment | None, position: int, length: int,
                 log_start_offset: int, log_end_offset: int, first_batch_offset: int | None) -> None:
        self.fetch_offset = fetch_offset
        self.segment_base_offset = segment.base_offset if segment is not None else fetch_offset
        self.position = position
        self.length = length
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.first_batch_offset = first_batch_offset
        self._segment = segment  # type: ignore[assignment]  # see the class annotations
        self._handle = segment.handle if segment is not None else None  # type: ignore[assignment]  # (idem)
        self._generation = segment.generation if segment is not None else 0

    @property
    def fd(self) -> int:
        return self._handle.fd if self._handle is not None else -1

    @property
    def path(self) -> str | None:
        return self._handle.path if self._handle is not None else None

    def __len__(self) -> int:
        return self.length

    def tobytes(self) -> bytes:
        if self.length == 0:
            return b""
        data = os.pread(self._handle.fd, self.length, self.position)
        if len(data) != self.length or self._segment.generation != self._generation:
            raise LogTruncatedDuringRead(
                f"{self._handle.path}: truncated while reading [{self.position}, "
                f"{self.position + self.length}); fetch offset {self.fetch_offset} again")
        return data

    def view(self) -> memoryview:
        return memoryview(self.tobytes())

    def sendfile(self, out_fd: int) -> int:
        """Send the slice to a socket/file with ``os.sendfile``; returns bytes sent."""
        sent = 0
        while sent < self.length:
            n = os.sendfile(out_fd, self._handle.fd, self.position + sent, self.length - sent)
            if n == 0:
                raise LogTruncatedDuringRead(f"{self._handle.path}: file ended during sendfile")
            sent += n
        return sent

    def __repr__(self) -> str:
        return (f"FetchData(fetch_offset={self.fetch_offset}, segment={self.segment_base_offset}, "
                f"position={self.position}, length={self.length}, log=[{self.log_start_offset}, "
                f"{self.log_end_offset}))")


def _first_batch_offset(path: str) -> int | None:
    """The base offset of the first batch of a segment file (None when it has no whole
    batch header: an empty file, or one that recovery will judge)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        hdr = os.pread(fd, 17, 0)
    finally:
        os.close(fd)
    if len(hdr) < 17 or hdr[16] != 2:  # not a v2 batch: let the CRC/format checks speak
        return None
    return int.from_bytes(hdr[:8], "big", signed=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


class KafkaLog:
    """A partition log directory (see the module doc).  Use :meth:`open`."""

    def __init__(self, directory: str, config: LogConfig, clock: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
        self._lock = threading.RLock()
        self._truncations = 0  # bumped by every truncation; a FlushJob begun before one is void
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._start = 0
        self._end = 0
        self.recovery_point = 0
        self._unflushed_records = 0
        self._last_flush_ms = clock()
        self._closed = False
        self._marker_epoch = -1  # brokerEpoch of the clean-shutdown marker found at open
        self._appender = _appendk.Appender()  # scratch of the append kernel (one writer)
        self.epoch_cache: LeaderEpochCache
        self.load_report: LoadReport

    # ------------------------------------------------------------------ open
    @classmethod
    def open(cls, directory: StrPath, config: LogConfig | None = None, *, create: bool = True,
             recovery_point: int = 0, log_start_offset: int = 0, topic_id: bytes | None = None,
             clock: Callable[[], int] | None = None, recover_clean: bool = False,
             full_recovery: bool = False, had_clean_shutdown: bool | None = None) -> "KafkaLog":
        """Open (and recover if needed) the log in ``directory``.

        ``had_clean_shutdown``: None (a log on its own: the Raft log, the tools) -- the log's
        own ``.kafka_cleanshutdown`` in ``directory`` says, and is deleted once the load
        succeeded; True/False -- the caller knows (Kafka's LogManager: one marker per log dir,
        read once for all its logs), and a marker in ``directory`` (a kraft before session 18
        wrote one per partition log) is removed without being trusted.

        ``recovery_point``: offsets below it are known flushed (Kafka keeps it
        in ``recovery-point-offset-checkpoint`` in the parent directory); on an
        unclean open, segments from the one holding it onwards are validated.
        ``log_start_offset``: the checkpointed log start offset, if any.

        Clean log (marker present): corruption of a batch is refused with
        :class:`CorruptCleanLogError` unless ``recover_clean`` (repair tools), which
        truncates at it as an unclean open would, and also cuts the log at a
        segment-contiguity gap instead of raising :class:`SegmentContiguityError`.
        ``full_recovery``: validate every segment from offset 0 whatever the marker
        says (``kraft-storage recover``).

        A failed open changes nothing that was sound: the segments opened so far are
        closed with their indexes trimmed as on a clean close, index files it created
        are removed, and the clean-shutdown marker is left as it was (it is deleted
        only once the load succeeded).  What the load found and did is in
        :attr:`load_report` (logged at WARNING, counted in :data:`RECOVERY_COUNTERS`).
        """
        d = os.fspath(directory)
        config = config or LogConfig()
        log = cls(d, config, clock or _now_ms)
        try:
            log._load(create, recovery_point, log_start_offset, topic_id, recover_clean, full_recovery,
                      had_clean_shutdown)
        except OSError as exc:
            err = disk_full(exc, getattr(exc, "filename", None) or d, "opening the log")
            if err is not None:
                raise err from exc
            raise
        return log

    def _check_directory(self, create: bool) -> tuple[list[tuple[str, str]], bool]:
        """Refuse what is not a partition log directory; return the leftover files to
        remove once the load succeeded (``.deleted``/``.cleaned``/``.tmp``), and whether
        the directory was created here."""
        d = self.directory
        if os.path.exists(d) and not os.path.isdir(d):
            raise NotALogDirectory(d, "it is a file")
        created = False
        if not os.path.exists(d):
            if not create:
                raise NotALogDirectory(d, "it does not exist")
            os.makedirs(d)
            fsync_dir(os.path.dirname(os.path.abspath(d)))
            created = True
        stale: list[tuple[str, str]] = []
        subdirs: list[str] = []
        for name in sorted(os.listdir(d)):
            p = os.path.join(d, name)
            if os.path.isdir(p):
                subdirs.append(name)
                continue
            if name.endswith(_STALE_SUFFIXES) and name != LEADER_EPOCH_CHECKPOINT:
                stale.append((name, "leftover of an interrupted delete, clean or atomic write"))
                continue
            if name.endswith(".swap"):
                raise NotALogDirectory(d, f"{name}: an interrupted log-cleaner swap file; kraft does "
                                          "not write these and will not guess how to finish it")
            if name.endswith((LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)) and not _SEGMENT_FILE.match(name):
                raise NotALogDirectory(d, f"{name}: segment files are named <20-digit base offset>"
                                          f"{os.path.splitext(name)[1]}")
        if subdirs:
            raise NotALogDirectory(d, f"it contains directories ({', '.join(subdirs[:5])}); a partition "
                                      "log directory holds only files. Did you pass the parent log dir?")
        return stale, created

    def _event(self, counter: str, amount: int, message: str) -> None:
        """A recovery action: logged at WARNING, counted, listed in the load report."""
        self.load_report.events.append(message)
        RECOVERY_COUNTERS[counter] += amount
        _logger.warning("%s", message)

    def _load(self, create: bool, recovery_point: int, log_start_offset: int, topic_id: bytes | None,
              recover_clean: bool = False, full_recovery: bool = False,
              had_clean_shutdown: bool | None = None) -> None:
        d = self.directory
        stale, created = self._check_directory(create)
        report = LoadReport(clean_shutdown=False, directory=d, created=created)
        self.load_report = report
        marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        own_marker = os.path.exists(marker)
        report.clean_shutdown = clean = own_marker if had_clean_shutdown is None else had_clean_shutdown
        if own_marker and had_clean_shutdown is None:
            try:
                with open(marker, "rb") as f:
                    self._marker_epoch = int(json.loads(f.read()).get("brokerEpoch", -1))
            except (ValueError, AttributeError, TypeError, OSError):
                self._marker_epoch = -1
        epoch_file_missing = not os.path.exists(os.path.join(d, LEADER_EPOCH_CHECKPOINT))
        self.epoch_cache = LeaderEpochCache.load(d)  # a bad checkpoint raises here: nothing opened yet
        segments: list[LogSegment] = []
        try:
            self._load_segments(segments, clean, stale, recovery_point, log_start_offset, epoch_file_missing,
                                recover_clean, full_recovery)
        except BaseException:
            self._abandon(segments)
            raise
        # The load succeeded: now (and only now) change what a failed load must not.
        for name, why in stale:
            try:
                size = os.path.getsize(os.path.join(d, name))
                os.unlink(os.path.join(d, name))
            except FileNotFoundError:
                continue
            self._event("removed_files", 1, f"{d}: removed {name}, {size} bytes ({why})")
            report.removed_files.append(name)
        if topic_id is not None and not os.path.exists(os.path.join(d, PARTITION_METADATA)):
            write_partition_metadata(d, topic_id)
        if own_marker:
            os.unlink(marker)
            fsync_dir(d)
        elif stale:
            fsync_dir(d)
        report.segments = len(self._segments)
        report.start_offset, report.end_offset = self._start, self._end
        # a log created just now has nothing to recover: no "unclean shutdown" line for it (a
        # broker creating 10,000 partitions logged 10,000 of them)
        if report.events or not (clean or created):
            _logger.log(logging.WARNING if report.events else logging.INFO, "%s", report.summary())

    def _abandon(self, segments: list[LogSegment]) -> None:
        """A failed load: close what it opened as a clean close would (indexes trimmed
        to their valid entries) and remove the files it created."""
        for seg in segments:
            for idx in (seg.offset_index, seg.time_index):
                try:
                    # trim only what the load grew (the active segment's preallocation, a
                    # rebuild): an index it did not touch keeps every byte, even a bad one
                    grown = idx.is_open and idx.file_size() != idx.opened_size
                    idx.close(trim=grown and not idx.created)
                    if idx.created:
                        os.unlink(idx.path)
                except OSError:  # best effort: the load's own error is the one to report
                    _logger.exception("%s: closing an index after a failed open", idx.path)
            if seg.created_log:
                try:
                    os.unlink(seg.log_path)
                except OSError:
                    pass
        self._segments = []
        self._closed = True

    def _load_segments(self, segments: list[LogSegment], clean: bool, stale: list[tuple[str, str]],
                       recovery_point: int, log_start_offset: int, epoch_file_missing: bool,
                       recover_clean: bool, full_recovery: bool) -> None:
        d = self.directory
        report = self.load_report
        cache = self.epoch_cache
        names = set(os.listdir(d))
        bases = sorted(int(n[:20]) for n in names if n.endswith(LOG_SUFFIX))
        for n in sorted(names):  # an index without its .log is garbage (Kafka deletes it too)
            m = _SEGMENT_FILE.match(n)
            if m and m.group(2) != "log" and f"{m.group(1)}.log" not in names:
                stale.append((n, "an index without its .log segment"))

        def assign_epochs(h: np.ndarray) -> None:
            ep = h["partition_leader_epoch"]
            latest = cache.latest_epoch
            prev = np.maximum.accumulate(np.concatenate(([-1 if latest is None else latest], ep)))[:-1]
            for i in np.flatnonzero((ep >= 0) & (ep > prev)):
                cache.assign(int(ep[i]), int(h["base_offset"][i]))

        if full_recovery:
            first_recover = 0
        elif not clean and bases:
            first_recover = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
        else:
            first_recover = len(bases)
        refuse_corruption = clean and not recover_clean and not full_recovery
        cfg = self.config
        for i, base in enumerate(bases):
            last = i == len(bases) - 1
            name = f"{base:020d}{LOG_SUFFIX}"
            if segments:
                prev = segments[-1]
                if base != prev.next_offset:
                    # Why refused: the metadata log is never compacted, so the next segment
                    # must start where the previous one ends.  An empty segment that is not
                    # the last one is refused the same way: kraft never leaves one (roll()
                    # of an empty segment is a no-op, recovery deletes what follows a cut),
                    # so it means files were moved by hand.
                    err = SegmentContiguityError(
                        d, os.path.basename(prev.log_path),
                        prev.next_offset,  # type: ignore[arg-type]  # known: the segment was read or recovered
                        name, base)
                    if not recover_clean:
                        raise err
                    self._delete_segment_files(bases[i:], f"after a contiguity break: {err}")
                    break
            first = _first_batch_offset(os.path.join(d, name))
            if first is not None and first != base:
                err = SegmentBaseOffsetMismatch(d, name, base, first)
                if not recover_clean:
                    raise err
                self._delete_segment_files(bases[i:], f"after a contiguity break: {err}")
                break
            prefix = os.path.join(d, f"{base:020d}")
            had_indexes = os.path.exists(prefix + INDEX_SUFFIX) and os.path.exists(prefix + TIME_INDEX_SUFFIX)
            seg = LogSegment(d, base, index_interval_bytes=cfg.index_interval_bytes,
                             max_index_size=cfg.segment_index_bytes, preallocate=False,
                             created_ms=self._clock())
            segments.append(seg)
            need_recover = i >= first_recover
            rebuild_reason = None
            if not need_recover:
                try:
                    if not had_indexes and seg.size > 0:
                        raise IndexCorrupt("missing index file")
                    seg.check_indexes()
                except IndexCorrupt as exc:
                    rebuild_reason = str(exc)
                if rebuild_reason is None:
                    try:
                        seg.read_next_offset()  # verifies the CRCs of the batches after the last index entry
                    except CorruptRecordError as exc:
                        if refuse_corruption:
                            raise CorruptCleanLogError(d, seg.log_path, exc.position, exc.base_offset,
                                                       exc.reason) from None
                        rebuild_reason = f"corrupt batch after the last index entry: {exc}"
                if rebuild_reason is not None:
                    need_recover = True
                    if refuse_corruption:
                        # A clean log's index may be rebuilt (Kafka does), its batches may not
                        # be cut: check them, reading only, before anything is rewritten.
                        scan = seg.validate()
                        if scan.valid_bytes < scan.file_size:
                            bad = scan.error
                            raise CorruptCleanLogError(
                                d, seg.log_path, scan.valid_bytes if bad is None else bad.position,
                                None if bad is None else bad.base_offset,
                                "trailing bytes" if bad is None else bad.reason)
                    report.rebuilt_indexes.append(base)
                    self._event("rebuilt_indexes", 1, f"{d}: rebuilding the indexes of {name} "
                                                      f"(base offset {base}): {rebuild_reason}")
                elif epoch_file_missing and seg.size:
                    self._scan_epochs(seg, assign_epochs)
            if need_recover:
                rep = seg.recover(on_batches=assign_epochs)
                report.recovered.append(rep)
                if rep.truncated_bytes:
                    dropped = (f"offsets {rep.first_dropped_offset} to {rep.last_dropped_offset}"
                               if rep.last_dropped_offset is not None
                               else f"offsets from {rep.first_dropped_offset}")
                    self._event("truncations", 1,
                                f"{d}: truncated {name} at byte {rep.valid_bytes}, dropping "
                                f"{rep.truncated_bytes} bytes ({dropped}): {rep.reason}")
                    RECOVERY_COUNTERS["truncated_bytes"] += rep.truncated_bytes
                else:
                    _logger.info("%s: recovered %s: %d batches, offsets [%d, %d), nothing dropped",
                                 d, name, rep.batches, base, rep.next_offset)
                if not last:
                    seg.on_become_inactive()
                if rep.truncated_bytes and not last:
                    # corruption inside a non-final segment: everything after it is unreachable
                    self._delete_segment_files(bases[i + 1:], f"after the truncation of {name} at "
                                                              f"offset {rep.next_offset}")
                    break
        if not segments:
            seg = LogSegment(d, log_start_offset, index_interval_bytes=cfg.index_interval_bytes,
                             max_index_size=cfg.segment_index_bytes, new=True, created_ms=self._clock())
            seg.created_log = True
            segments.append(seg)
            fsync_dir(d)
        active = segments[-1]
        active.offset_index.resize(cfg.segment_index_bytes)
        active.time_index.resize(cfg.segment_index_bytes)
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._end = active.next_offset if active.next_offset is not None else active.base_offset
        if report.recovered:
            recovered = {r.segment for r in report.recovered}
            for s in segments:  # make the rebuilt indexes and truncations durable
                if s.log_path in recovered:
                    s.flush()
        self._start = max(log_start_offset, segments[0].base_offset)
        if self._start > self._end:
            self._start = self._end
        # start first, then end: when the log is empty at its start (start == end) the
        # collapsed entry at ``start`` is dropped, the state the live log reached when
        # truncate_to emptied it (Kafka's loader does end first and keeps that entry)
        cache.truncate_from_start(self._start)
        cache.truncate_from_end(self._end)
        # Kafka's LogLoader rule: only a clean shutdown proves the whole log flushed.  After an
        # unclean one the recovery point stays where it was checkpointed (capped at the end): the
        # tail was scanned, not fsynced -- a process crash leaves it in the page cache, where the
        # scan finds it intact -- and moving the point past it would let a checkpoint written
        # before the next flush skip its recovery after an OS crash.  The next flush moves it.
        self.recovery_point = self._end if clean else min(max(recovery_point, 0), self._end)

    def _delete_segment_files(self, bases: list[int], why: str) -> None:
        """Delete whole segments at load, newest first (a crash midway leaves a contiguous prefix)."""
        d = self.directory
        for b in reversed(bases):
            size = 0
            for suf in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
                p = os.path.join(d, f"{b:020d}{suf}")
                try:
                    if suf == LOG_SUFFIX:
                        size = os.path.getsize(p)
                    os.unlink(p)
                except FileNotFoundError:
                    pass
            self.load_report.deleted_segments.append(b)
            self._event("deleted_segments", 1, f"{d}: deleted segment {b:020d}{LOG_SUFFIX} (base offset {b}, "
                                               f"{size} bytes) {why}")
        self.load_report.deleted_segments.sort()
        fsync_dir(d)

    @staticmethod
    def _scan_epochs(seg: LogSegment, assign: Callable[[np.ndarray], None]) -> None:
        import mmap
        mm = mmap.mmap(seg.fd, seg.size, access=mmap.ACCESS_READ)
        try:
            assign(scan_batches(mm, 0, seg.size, crc_mode=CRC_SKIP).headers)
        finally:
            mm.close()

    # ------------------------------------------------------------- queries
    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self._end

    @property
    def latest_epoch(self) -> int | None:
        return self.epoch_cache.latest_epoch

    @property
    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch in the log (KafkaMetadataLog's ``lastFetchedEpoch``; 0 when empty)."""
        e = self.epoch_cache.latest_epoch
        return 0 if e is None else e

    def end_offset_for_epoch(self, epoch: int) -> EpochEnd:
        """Kafka's ``endOffsetForEpoch``; see :meth:`LeaderEpochCache.end_offset_for_epoch`."""
        return EpochEnd(*self.epoch_cache.end_offset_for_epoch(epoch, self._end))

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosed(f"{self.directory}: the log is closed")

    # -------------------------------------------------------------- append
    def append_as_leader(self, records: Any, leader_epoch: int) -> AppendInfo:
        """Append batches as the leader: assign offsets from the log end, stamp ``leader_epoch``.

        The caller's buffer is not modified: the rewritten 16-byte header
        prefixes (baseOffset, batchLength, partitionLeaderEpoch; none is under
        the CRC) are written with ``pwritev`` next to views of the rest."""
        self._check_open()
        if leader_epoch < 0:
            raise ValueError(f"leader epoch {leader_epoch} must be >= 0")
        latest = self.epoch_cache.latest_epoch
        if latest is not None and leader_epoch < latest:
            raise ValueError(f"leader epoch {leader_epoch} is older than the log's latest epoch {latest}")
        return self._append_records(records, _LEADER, leader_epoch, -1 if latest is None else latest)

    def append_as_follower(self, records: Any) -> AppendInfo:
        """Append batches replicated from the leader, offsets and epochs as given.

        The first batch must start at the log end offset and each batch must
        start right after the previous one, and no batch may carry an epoch
        older than one already in the log (OutOfOrderAppend otherwise)."""
        self._check_open()
        latest = self.epoch_cache.latest_epoch
        return self._append_records(records, _FOLLOWER, -1, -1 if latest is None else latest)

    def _append_records(self, records: Any, mode: int, leader_epoch: int, latest: int) -> AppendInfo:
        """The whole append in two kernel calls (see ``kraft_storage._pure._logappend``):
        scan (validate, stamp offsets/epoch), maybe roll, write (bytes, index
        entries), then the epoch cache, the log end offset and the flush policy."""
        ap = self._appender
        cfg = self.config
        ap.scan(records, mode, self._end, leader_epoch, latest,
                CRC_VERIFY if cfg.verify_crc else CRC_SKIP)
        try:
            nbytes, last, max_ts = ap.nbytes, ap.last_offset, ap.max_timestamp
            if nbytes > cfg.segment_bytes:  # Kafka's UnifiedLog.append: refused, nothing written
                raise RecordBatchTooLargeError(nbytes, self.directory, cfg.segment_bytes)
            seg = self._segments[-1]
            if seg.should_roll(nbytes, max_ts, last, self._clock(), cfg.segment_bytes, cfg.segment_ms,
                               cfg.segment_jitter_ms):
                seg = self.roll()
            position = seg.append_scanned(ap)
        finally:
            ap.release()
        for epoch, start_offset in ap.epochs:
            self.epoch_cache.assign(epoch, start_offset)
        self._end = last + 1  # publish
        records = ap.records
        self._unflushed_records += records
        flushed = False
        if self._unflushed_records >= cfg.flush_messages or \
                (cfg.flush_ms != LONG_MAX and self._clock() - self._last_flush_ms >= cfg.flush_ms):
            self.flush()
            flushed = True
        return AppendInfo(ap.first_offset, last, ap.batches, records, nbytes, seg.base_offset, position,
                          max_ts, flushed)

    # ---------------------------------------------------------------- roll
    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset."""
        self._check_open()
        with self._lock:
            active = self._segments[-1]
            if active.size == 0:
                return active
            # the new segment first: if it cannot be created (a full device), the active
            # segment is untouched and the log stays usable
            seg = LogSegment(self.directory, self._end, index_interval_bytes=self.config.index_interval_bytes,
                             max_index_size=self.config.segment_index_bytes, new=True,
                             created_ms=self._clock())
            active.on_become_inactive()
            active.flush()  # Kafka flushes a rolled segment (asynchronously) up to the new base
            fsync_dir(self.directory)
            self._segments = self._segments + [seg]
            self._bases = self._bases + [seg.base_offset]
            return seg

    # --------------------------------------------------------------- flush
    def flush(self) -> None:
        """fdatasync every segment holding offsets at or past the recovery point."""
        self._check_open()
        end = self._end
        if self.recovery_point >= end and self._unflushed_records == 0:
            # nothing past the recovery point (Kafka's ``flush`` skips then too): a close of an
            # idle log, thousands of them at a broker's shutdown, costs no fdatasync
            self._last_flush_ms = self._clock()
            return
        i = max(bisect.bisect_right(self._bases, self.recovery_point) - 1, 0)
        segs = self._segments[i:]
        for seg in segs:
            seg.flush(indexes=seg is not segs[-1])
        self.recovery_point = max(self.recovery_point, end)
        self._unflushed_records = 0
        self._last_flush_ms = self._clock()
        if segs:
            self._drop_flushed_pages(segs[-1], segs[-1].size)

    def begin_flush(self) -> "FlushJob":
        """Start a flush whose fsyncs may run on another thread (see :class:`FlushJob`).

        Why: an fdatasync takes 0.2-2 ms here, during which a single-threaded
        event loop (the Raft I/O loop) could be answering Fetches.  The job
        holds duplicates of the file descriptors of every segment at or past
        the recovery point, so a segment closed meanwhile (a truncation, a
        deletion) cannot make it sync a reused descriptor.  Call
        :meth:`FlushJob.run` on any thread, then :meth:`complete_flush` on the
        log's own thread; only then does the recovery point move."""
        self._check_open()
        with self._lock:
            i = max(bisect.bisect_right(self._bases, self.recovery_point) - 1, 0)
            segs = self._segments[i:]
            fds = [os.dup(seg.handle.fd) for seg in segs]
            job = FlushJob(self._end, self._truncations, fds)
            if segs:
                job.last_segment = (segs[-1], segs[-1].size)
            return job

    def complete_flush(self, job: "FlushJob") -> bool:
        """Advance the recovery point to the job's end offset if it still means what it
        meant when the job began (no truncation since).  Returns whether it did."""
        if job.error is not None:
            err = disk_full(job.error, self.directory, "flushing the segments")
            if err is not None:
                raise err from job.error
            raise job.error
        if not job.done:
            raise ValueError("complete_flush() before the flush job ran")
        if job.truncations != self._truncations or job.end_offset > self._end:
            return False
        self.recovery_point = max(self.recovery_point, job.end_offset)
        if job.end_offset == self._end:
            self._unflushed_records = 0
        self._last_flush_ms = self._clock()
        if job.last_segment is not None:
            self._drop_flushed_pages(*job.last_segment)
        return True

    def _drop_flushed_pages(self, last: LogSegment, flushed_size: int) -> None:
        """``config.page_cache_retain_bytes`` (see :class:`LogConfig`): drop the page cache
        of flushed data older than the retained tail.  ``last`` is the newest segment a
        flush covered, durable up to ``flushed_size``; segments before it are durable
        whole.  Each segment remembers how far it was dropped (``cache_dropped_to``,
        page-aligned), so a byte range is advised once.  Only clean (flushed) pages are
        named, so this changes what is cached, never what is stored."""
        keep = self.config.page_cache_retain_bytes
        if keep < 0 or last not in self._segments:
            return
        i = self._segments.index(last)
        flushed = flushed_size
        while True:
            seg = self._segments[i]
            upto = (flushed - keep) & ~(_PAGE - 1) if flushed > keep else 0
            done = min(seg.cache_dropped_to, seg.size)  # (a truncation may have cut below it)
            if upto > done:
                try:
                    os.posix_fadvise(seg.handle.fd, done, upto - done, os.POSIX_FADV_DONTNEED)
                except OSError:  # advice only: a file system that refuses it keeps its cache
                    return
                seg.cache_dropped_to = upto
            elif keep == 0:
                # Dropped whole already, so are the segments before it: the pass that
                # dropped this one whole went on to them.
                return
            keep = max(0, keep - flushed)
            if i == 0:
                return
            i -= 1
            flushed = self._segments[i].size

    def maybe_flush(self) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush (call from a timer)."""
        cfg = self.config
        if cfg.flush_ms != LONG_MAX and self._end > self.recovery_point and \
                self._clock() - self._last_flush_ms >= cfg.flush_ms:
            self.flush()
            return True
        return False

    # ---------------------------------------------------------------- read
    def read(self, fetch_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchData:
        """Whole batches starting with the one that holds ``fetch_offset``.

        At most ``max_bytes`` bytes, but at least the first batch when
        ``min_one_batch`` (Kafka's ``minOneMessage``).  ``max_offset``
        (exclusive, e.g. the high watermark) stops before the first batch
        that starts at or after it.  Data comes from one segment; the next
        read continues from the next offset.  ``fetch_offset`` equal to the
        log end offset gives an empty result; outside
        ``[log_start_offset, log_end_offset]`` raises OffsetOutOfRange."""
        if max_bytes < 0:
            raise ValueError("max_bytes must be >= 0")
        with self._lock:
            self._check_open()
            start, end = self._start, self._end
            if fetch_offset < start or fetch_offset > end:
                raise OffsetOutOfRange(fetch_offset, start, end)
            bound = end if max_offset is None else min(max_offset, end)
            if fetch_offset >= bound:
                seg = self._segments[-1]
                return FetchData(fetch_offset, seg, seg.size, 0, start, end, None)
            i = bisect.bisect_right(self._bases, fetch_offset) - 1
            segs = self._segments
            for j in range(max(i, 0), len(segs)):
                seg = segs[j]
                found = seg.find_offset(fetch_offset)
                if found is not None:
                    break
            else:
                seg = segs[-1]
                return FetchData(fetch_offset, seg, seg.size, 0, start, end, None)
            pos, base, _last, size = found
            if base >= bound:
                return FetchData(fetch_offset, seg, pos, 0, start, end, None)
            stop_limit = seg.size
            if bound < end:
                k = bisect.bisect_right(self._bases, bound) - 1
                if segs[k] is seg:
                    f2 = seg.find_offset(bound)
                    if f2 is not None:
                        stop_limit = f2[0] if f2[1] >= bound else f2[0] + f2[3]
            stop = seg.boundary_before(pos, min(stop_limit, pos + max_bytes))
            if stop <= pos:
                stop = pos + size if min_one_batch else pos
            return FetchData(fetch_offset, seg, pos, stop - pos, start, end, base)

    def read_bytes(self, fetch_offset: int, max_bytes: int, **kw: Any) -> bytes:
        return self.read(fetch_offset, max_bytes, **kw).tobytes()

    # ------------------------------------------------------------ truncate
    def truncate_to(self, offset: int) -> bool:
        """Drop every batch holding an offset >= ``offset`` (with its index and epoch entries).

        A batch that straddles ``offset`` is dropped whole, so the new log end
        offset is <= ``offset`` (equal when ``offset`` is a batch boundary).
        Returns False when there was nothing to drop."""
        self._check_open()
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._lock:
            if offset >= self._end:
                return False
            self._truncations += 1
            if offset < self._start:
                self.truncate_fully_and_start_at(offset)
                return True
            keep = [s for s in self._segments if s.base_offset <= offset] or self._segments[:1]
            drop = self._segments[len(keep):]
            self._segments = keep
            self._bases = [s.base_offset for s in keep]
            for s in drop:
                s.generation += 1
                s.delete()
            active = keep[-1]
            active.truncate_to(offset, self._clock())
            new_end = active.next_offset
            if new_end is None:
                new_end = active.read_next_offset()
            active.offset_index.resize(self.config.segment_index_bytes)
            active.time_index.resize(self.config.segment_index_bytes)
            self._end = new_end
            if self._end < self._start:
                # the dropped batch straddled the log start offset: nothing readable is left
                self.truncate_fully_and_start_at(self._start)
                return True
            self.epoch_cache.truncate_from_end(self._end)
            self.recovery_point = min(self.recovery_point, self._end)
            if drop:
                fsync_dir(self.directory)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at ``offset`` (installing a snapshot)."""
        self._check_open()
        if offset < 0:
            raise ValueError("offset must be >= 0")
        with self._lock:
            self._truncations += 1
            old = self._segments
            for s in old:
                s.generation += 1
                s.delete()
            seg = LogSegment(self.directory, offset, index_interval_bytes=self.config.index_interval_bytes,
                             max_index_size=self.config.segment_index_bytes, new=True,
                             created_ms=self._clock())
            fsync_dir(self.directory)
            self._segments = [seg]
            self._bases = [offset]
            self._start = self._end = offset
            self.recovery_point = offset
            self.epoch_cache.clear()

    # ----------------------------------------------------------- retention
    def advance_log_start_offset(self, offset: int) -> bool:
        """Move the log start offset forward (never past the end) and delete
        the segments that lie wholly before it."""
        self._check_open()
        with self._lock:
            if offset > self._end:
                raise OffsetOutOfRange(offset, self._start, self._end, what="new log start offset")
            if offset <= self._start:
                return False
            self._start = offset
            self.epoch_cache.truncate_from_start(offset)
            self._delete_while(lambda seg, nxt: nxt.base_offset <= self._start, upper=self._end)
            return True

    def delete_old_segments(self, max_offset: int | None = None, *, now_ms: int | None = None,
                            retention_bytes: int | None = None, retention_ms: int | None = None) -> list[int]:
        """Delete whole old segments by ``retention.ms`` then ``retention.bytes``.

        A segment is deleted only if every offset in it is below
        ``max_offset`` (default: the log end offset) -- for KRaft, the latest
        snapshot's end offset -- and never the active segment.  Returns the
        deleted base offsets; the log start offset moves to the first kept one."""
        self._check_open()
        cfg = self.config
        rms = cfg.retention_ms if retention_ms is None else retention_ms
        rbytes = cfg.retention_bytes if retention_bytes is None else retention_bytes
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            upper = self._end if max_offset is None else min(max_offset, self._end)
            deleted: list[int] = []
            if rms >= 0:
                deleted += self._delete_while(lambda seg, nxt: now - seg.largest_timestamp > rms, upper)
            if rbytes >= 0:
                diff = [self.size_in_bytes() - rbytes]

                def by_size(seg: LogSegment, nxt: LogSegment) -> bool:
                    if diff[0] - seg.size >= 0:
                        diff[0] -= seg.size
                        return True
                    return False
                deleted += self._delete_while(by_size, upper)
            return deleted

    def _delete_while(self, predicate: Callable[[LogSegment, LogSegment], bool], upper: int) -> list[int]:
        segs = self._segments
        k = 0
        while k < len(segs) - 1 and segs[k + 1].base_offset <= upper and predicate(segs[k], segs[k + 1]):
            k += 1
        if k == 0:
            return []
        gone = segs[:k]
        self._segments = segs[k:]
        self._bases = self._bases[k:]
        self._start = max(self._start, self._segments[0].base_offset)
        self.epoch_cache.truncate_from_start(self._start)
        for s in gone:
            s.delete()
        fsync_dir(self.directory)
        return [s.base_offset for s in gone]

    # --------------------------------------------------------------- close
    def close(self, *, broker_epoch: int | None = None, marker: bool = True) -> None:
        """Flush, trim the indexes (after the final time-index entry), and leave the
        clean-shutdown marker (``marker=False``: not this log's own -- the caller writes one
        for its whole log dir once every log in it closed, as Kafka's LogManager does).

        ``broker_epoch`` (the marker's ``brokerEpoch``) defaults to the one the marker
        had at open (-1 if none), so that open + close of a cleanly shut down log
        leaves every file byte-identical (a node whose start failed closes the log
        it opened).  If flushing fails (a full disk), the files are still closed but
        no marker is written: the next open recovers; the error is raised."""
        if self._closed:
            return
        epoch = self._marker_epoch if broker_epoch is None else broker_epoch
        with self._lock:
            try:
                self.flush()
            except BaseException:
                for s in self._segments:
                    try:
                        s.close(trim=True)
                    except OSError:  # the flush's error is the one to report
                        _logger.warning("%s: closing after a failed flush", s.log_path, exc_info=True)
                self._closed = True
                raise
            try:
                for s in self._segments:
                    s.close(trim=True)
            finally:
                self._closed = True
            if not marker:
                return
            atomic_write(os.path.join(self.directory, CLEAN_SHUTDOWN_FILE),
                         json.dumps({"version": 0, "brokerEpoch": epoch}, separators=(",", ":")).encode())

    def close_uncleanly(self) -> None:
        """Drop the log without flushing, trimming or the marker (tests: a crash)."""
        with self._lock:
            for s in self._segments:
                s.close(trim=False)
            self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"KafkaLog({self.directory!r}, start={self._start}, end={self._end}, "
                f"segments={len(self._segments)})")


class FlushJob:
    """The fsync half of :meth:`KafkaLog.begin_flush`, runnable on any thread.

    Invariant: ``end_offset`` is durable once ``run`` returned without error,
    because every byte below it was written (``os.write`` returned) before the
    job was made and each descriptor is fdatasync'd after that.  The job owns
    its duplicated descriptors and closes them when it runs (or is dropped).
    """

    __slots__ = ("end_offset", "truncations", "_fds", "done", "error", "last_segment")

    def __init__(self, end_offset: int, truncations: int, fds: list[int]) -> None:
        self.end_offset = end_offset
        self.truncations = truncations
        self._fds = fds
        self.done = False
        self.error: BaseException | None = None
        #: (newest segment covered, its size when the job began): what the job makes durable
        self.last_segment: tuple[LogSegment, int] | None = None

    def run(self) -> "FlushJob":
        """fdatasync every descriptor here, on the calling thread."""
        err: OSError | None = None
        try:
            for fd in self._fds:
                os.fdatasync(fd)
        except OSError as exc:
            err = exc
        return self.finish(err)

    @property
    def fds(self) -> tuple[int, ...]:
        """The descriptors to fdatasync, for a caller that runs the fsyncs itself (an
        :class:`~kraft_storage.log.fdsync` flusher); they stay open until :meth:`finish`."""
        return tuple(self._fds)

    def finish(self, error: BaseException | None) -> "FlushJob":
        """Record that the fsyncs of :attr:`fds` are over (``error``: the first failure)
        and close the descriptors."""
        fds, self._fds = self._fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self.error = error
        self.done = True
        return self

    def __del__(self) -> None:
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
