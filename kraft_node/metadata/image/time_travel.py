"""Time travel over a metadata log: the image as of any offset, and the records between two images.

Kafka's tools show the metadata as it is *now* (the shell) or as raw records (the dump tool).
Operators debugging an incident want the cluster as it was at offset N, and what changed
between two offsets, in the terms of the metadata itself.  This module gives both, read-only
(files are mapped read-only; nothing is written, no marker is touched):

* :class:`MetadataHistory` -- the snapshots and log segments of a ``__cluster_metadata-0``
  directory (or of one ``.checkpoint`` / ``.log`` file).  :meth:`MetadataHistory.load` gives the
  image as of offset N: the newest snapshot whose last offset is at or below N, then the log
  records after it up to and including N (the record at N is in the image).  Control records
  take offsets and change nothing.
* :func:`image_at` -- the same in one call.
* :func:`diff` -- the records that turn one image into another: replayed into a
  ``MetadataDelta`` over the first image, they give an image equal to the second.

Transactions (KIP-868's Begin/End/AbortTransactionRecord) are respected as Kafka's loader
respects them: a transaction's records reach the image only with its EndTransactionRecord, an
aborted one never does.  If N falls inside a transaction, the image is the one before the
transaction began (its provenance says which offset that is) and :attr:`LoadedImage.notes`
says so: a reader never sees half of an atomic change.

Errors (:class:`MetadataHistoryError`) are one line naming the file and the byte position or
offset: no such file, a corrupt batch, an offset past the end of the log, an offset below the
log start with no snapshot to start from, a record that does not decode or replay.  A partial
batch at the very end of the last segment (a write torn by a crash) is not an error: Kafka's
readers stop there too; it is mentioned in the notes.

Why records are replayed one at a time here: time travel stops at arbitrary offsets, inside
batches and inside transactions, and it reads logs of operator-sized histories.  The bulk
columnar path (``image.bulk``) is for loading whole snapshots fast; a long catch-up could
start from it, but exactness at every offset is what this module is for.
"""
from __future__ import annotations

import mmap
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage, image_records
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME
from kraft_storage.errors import KraftStorageError
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.record.constants import CONTROL_MASK
from kraft_storage.snapshot import BOOTSTRAP_FILENAME, BOOTSTRAP_SNAPSHOT_ID, RecordsSnapshotReader, parse_snapshot_path

__all__ = [
    "DiffError", "LoadedImage", "MetadataHistory", "MetadataHistoryError", "SnapshotFile", "SegmentFile", "diff",
    "image_at",
]

#: The metadata partition's directory inside a log directory.
METADATA_PARTITION_DIR = "__cluster_metadata-0"
_SEGMENT_NAME = re.compile(r"^(\d{20})\.log$", re.ASCII)
#: batches decoded per call when reading a log (bounds the memory of one decode)
_BATCHES_PER_DECODE = 512

_BEGIN = m.BeginTransactionRecord.API_KEY
_END = m.EndTransactionRecord.API_KEY
_ABORT = m.AbortTransactionRecord.API_KEY


class MetadataHistoryError(ValueError):
    """A metadata log or snapshot that cannot be read as asked; the message is one line naming
    the file, position or offset."""


class DiffError(ValueError):
    """Two images whose difference no sequence of metadata records expresses (e.g. going back to
    before a controller registered: no record unregisters a controller)."""


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SnapshotFile:
    """A ``.checkpoint``: it holds the state as of ``end_offset - 1`` (Kafka's snapshot id)."""
    path: Path
    end_offset: int
    epoch: int

    @property
    def last_offset(self) -> int:
        return self.end_offset - 1


@dataclass
class SegmentFile:
    """A ``.log`` segment, scanned on first use (its batch headers, CRC-checked)."""
    path: Path
    name_base_offset: int | None
    _buf: Any = field(default=None, repr=False)
    _headers: np.ndarray | None = field(default=None, repr=False)
    torn_tail_at: int | None = None

    def headers(self, *, last: bool) -> np.ndarray:
        """Every whole batch's header row.  A partial batch at the end is allowed only in the
        last segment (``last``): a torn final write; anywhere else it is damage."""
        if self._headers is None:
            self._buf = _map(self.path)
            try:
                scan = scan_batches(self._buf, raise_on_error=False, source=str(self.path))
            except KraftStorageError as exc:
                raise MetadataHistoryError(f"{self.path}: {exc}") from None
            if scan.error is not None:
                if scan.truncated and last:
                    self.torn_tail_at = scan.end
                else:
                    raise MetadataHistoryError(_scan_error(self.path, self._buf, scan.error, len(scan.headers)))
            self._headers = scan.headers
        return self._headers

    @property
    def buffer(self) -> Any:
        return self._buf


def _map(path: Path) -> Any:
    """The file mapped read-only (bytes for an empty file); a clear error if it cannot be opened."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return b""
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except OSError as exc:
        raise MetadataHistoryError(f"{path}: {exc.strerror or exc}") from None


def _scan_error(path: Path, buf: Any, exc: Any, good: int) -> str:
    """The scan's error in one line: file, byte position, how many good batches came before; the
    batch base offset only when the header there looks like a batch's (magic 2), since from
    random bytes it is a garbage number."""
    pos = getattr(exc, "position", -1)
    where = f"byte position {pos}" if pos is not None and pos >= 0 else "an unknown position"
    base = getattr(exc, "base_offset", None)
    if base is not None and pos is not None and 0 <= pos and pos + 16 < len(buf) and buf[pos + 16] == 2:
        where += f" (batch base offset {base})"
    reason = getattr(exc, "reason", str(exc))
    if good == 0 and (pos is None or pos <= 0):
        return f"{path}: not a Kafka log segment or snapshot: no valid record batch at byte position 0: {reason}"
    return f"{path}: corrupt record batch at {where}, after {good} good batch(es): {reason}"


# ---------------------------------------------------------------------------------------------
# The image as of an offset
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LoadedImage:
    """The image as of ``offset`` (its provenance gives the last offset whose records are in it:
    lower than ``offset`` when ``offset`` is inside a transaction), and what the reader should be
    told (an open transaction left out, a torn tail ignored)."""
    offset: int
    image: MetadataImage
    notes: tuple[str, ...] = ()


class _Replayer:
    """Committed records folded into a delta, a transaction's records held until it ends.

    Invariant: ``delta`` holds exactly the committed records after ``base`` (an applied image),
    ``pending`` the records of the open transaction (None: no transaction), and ``committed``
    the (offset, epoch, time, batch-aligned) of the last committed record -- what an image taken
    now says it contains (kept as a tuple: a provenance object per record cost a fifth of the
    replay time)."""

    def __init__(self, base: MetadataImage, position: int) -> None:
        self.base = base
        self.delta = MetadataDelta(base)
        self.dirty = False
        self.pending: list[tuple[int, Any]] | None = None
        self.txn_begin = -1
        p = base.provenance
        self.committed = (p.last_contained_offset, p.last_contained_epoch, p.last_contained_log_time_ms,
                          p.is_offset_batch_aligned)
        #: the next offset to read
        self.position = position

    def replay(self, where: Path, offset: int, epoch: int, time_ms: int, aligned: bool, message: Any) -> None:
        key = message.API_KEY
        if key == _BEGIN:
            if self.pending is not None:
                raise MetadataHistoryError(
                    f"{where}: offset {offset}: Encountered BeginTransactionRecord while already in a transaction "
                    f"(begun at offset {self.txn_begin})")
            self.pending = []
            self.txn_begin = offset
            return
        if key == _END or key == _ABORT:
            if self.pending is None:
                name = "EndTransactionRecord" if key == _END else "AbortTransactionRecord"
                raise MetadataHistoryError(
                    f"{where}: offset {offset}: Encountered {name} without having seen a BeginTransactionRecord")
            if key == _END:
                for o, msg in self.pending:
                    self._fold(where, o, msg)
            self.pending = None
            self.committed = (offset, epoch, time_ms, aligned)
            return
        if self.pending is not None:
            self.pending.append((offset, message))
            return
        self._fold(where, offset, message)
        self.committed = (offset, epoch, time_ms, aligned)

    def _fold(self, where: Path, offset: int, message: Any) -> None:
        try:
            self.delta.replay(message)
        except Exception as exc:  # noqa: BLE001 - any replay failure becomes a located one-line error
            raise MetadataHistoryError(
                f"{where}: offset {offset}: cannot replay {type(message).__name__}: {exc}") from None
        self.dirty = True

    def commit(self, offset: int, epoch: int, time_ms: int, aligned: bool) -> None:
        """A control record outside any transaction was read: the image now contains its offset."""
        if self.pending is None:
            self.committed = (offset, epoch, time_ms, aligned)

    def image(self) -> MetadataImage:
        """The committed image (the open transaction left out); the delta restarts over it."""
        provenance = MetadataProvenance(*self.committed)
        if not self.dirty and provenance == self.base.provenance:
            return self.base
        img = self.delta.apply(provenance)
        self.base, self.delta, self.dirty = img, MetadataDelta(img), False
        return img


class MetadataHistory:
    """The snapshots and log segments metadata can be read from (read-only).

    Made by :meth:`open` from a ``__cluster_metadata-0`` directory, its parent log directory, a
    ``.checkpoint`` file or a ``.log`` segment.  Offsets are the log's: a snapshot named
    ``<E>-<epoch>.checkpoint`` is the state as of offset E - 1.
    """

    def __init__(self, name: str, snapshots: Sequence[SnapshotFile], segments: Sequence[SegmentFile]) -> None:
        if not snapshots and not segments:
            raise MetadataHistoryError(f"{name}: no metadata snapshot (.checkpoint) or log segment (.log) found")
        self.name = name
        self.snapshots = sorted(snapshots, key=lambda s: (s.end_offset, s.epoch))
        self.segments = list(segments)
        self._bounds: tuple[int, int] | None = None

    # -- opening ------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> MetadataHistory:
        p = Path(path)
        if not p.exists():
            raise MetadataHistoryError(f"{p}: no such file or directory")
        if p.is_dir():
            return cls.from_directory(p)
        return cls.from_file(p)

    @classmethod
    def from_directory(cls, directory: Path) -> MetadataHistory:
        """``directory`` is ``__cluster_metadata-0`` (or holds it).  Complete snapshots only
        (``.part`` and ``.deleted`` files are a writer's or a cleaner's business); segments by
        their 20-digit names."""
        d = directory / METADATA_PARTITION_DIR if (directory / METADATA_PARTITION_DIR).is_dir() else directory
        try:
            entries = sorted(os.listdir(d))
        except OSError as exc:
            raise MetadataHistoryError(f"{d}: {exc.strerror or exc}") from None
        snapshots: list[SnapshotFile] = []
        segments: list[SegmentFile] = []
        for entry in entries:
            full = d / entry
            sp = parse_snapshot_path(full)
            if sp is not None:
                if not sp.partial and not sp.deleted and full.is_file():
                    snapshots.append(SnapshotFile(full, sp.snapshot_id.end_offset, sp.snapshot_id.epoch))
                continue
            match = _SEGMENT_NAME.match(entry)
            if match is not None and full.is_file():
                segments.append(SegmentFile(full, int(match.group(1))))
        segments.sort(key=lambda s: s.name_base_offset or 0)
        if not snapshots and not segments:
            raise MetadataHistoryError(
                f"{directory}: no metadata log here: neither {METADATA_PARTITION_DIR}/ nor .log segments "
                f"or .checkpoint snapshots")
        return cls(str(d), snapshots, segments)

    @classmethod
    def from_file(cls, path: Path) -> MetadataHistory:
        """One snapshot (``.checkpoint``) or one segment (any other file of record batches, as
        Kafka's shell takes either)."""
        if path.name.endswith(".checkpoint"):
            sp = parse_snapshot_path(path)
            if sp is not None:
                return cls(str(path), [SnapshotFile(path, sp.snapshot_id.end_offset, sp.snapshot_id.epoch)], [])
            if path.name == BOOTSTRAP_FILENAME:
                sid = BOOTSTRAP_SNAPSHOT_ID
                return cls(str(path), [SnapshotFile(path, sid.end_offset, sid.epoch)], [])
            # a snapshot under another name: its offsets are unknown, read it as a log (Kafka's shell does)
        match = _SEGMENT_NAME.match(path.name)
        return cls(str(path), [], [SegmentFile(path, int(match.group(1)) if match else None)])

    # -- bounds -------------------------------------------------------------------------------

    def log_bounds(self) -> tuple[int, int] | None:
        """(log start offset, log end offset) of the segments, or None without segments."""
        if not self.segments:
            return None
        if self._bounds is None:
            start: int | None = None
            end: int | None = None
            for i, seg in enumerate(self.segments):
                h = seg.headers(last=i == len(self.segments) - 1)
                if len(h) == 0:
                    continue
                if start is None:
                    start = int(h["base_offset"][0])
                end = int(h["base_offset"][-1]) + int(h["last_offset_delta"][-1]) + 1
            if start is None or end is None:
                base = self.segments[0].name_base_offset or 0
                start = end = base
            self._bounds = (start, end)
        return self._bounds

    def latest_offset(self) -> int:
        """The last offset anything here states: the log's last record, or the newest snapshot's."""
        candidates = [s.last_offset for s in self.snapshots]
        bounds = self.log_bounds()
        if bounds is not None and bounds[1] > bounds[0]:
            candidates.append(bounds[1] - 1)
        return max(candidates) if candidates else -1

    # -- loading ------------------------------------------------------------------------------

    def load(self, offset: int | None = None) -> LoadedImage:
        """The image as of ``offset`` (default: the latest)."""
        return self.load_many([offset])[0]

    def load_many(self, offsets: Sequence[int | None]) -> list[LoadedImage]:
        """The images as of each offset, read in one forward pass where possible (a later offset
        continues from the earlier one unless a newer snapshot is a shorter way)."""
        latest = self.latest_offset()
        wanted = [latest if o is None else o for o in offsets]
        for o in wanted:
            self._check_offset(o, latest)
        results: dict[int, LoadedImage] = {}
        replayer: _Replayer | None = None
        for target in sorted(set(wanted)):
            snap = self._snapshot_at_or_below(target)
            if replayer is None or (snap is not None and snap.end_offset > replayer.position) \
                    or replayer.position > target + 1:
                replayer = self._start(target, snap)
            notes = self._advance(replayer, target)
            image = replayer.image()
            if replayer.pending is not None:
                notes.append(f"offset {target} is inside a metadata transaction begun at offset "
                             f"{replayer.txn_begin} that has not ended by then: its records are not shown "
                             f"(the image is as of offset {image.provenance.last_contained_offset})")
            results[target] = LoadedImage(target, image, tuple(notes))
        return [results[o] for o in wanted]

    def _check_offset(self, offset: int, latest: int) -> None:
        """A clear error unless a snapshot is at ``offset`` or the log covers everything from the
        newest snapshot at or below it (or from offset 0) through ``offset``."""
        snap = self._snapshot_at_or_below(offset)
        if snap is not None and snap.last_offset == offset:
            return  # (offset -1 too: a bootstrap snapshot, 0-0, is the state before any record)
        if offset < 0:
            raise MetadataHistoryError(f"offset {offset} is negative")
        if offset > latest:
            raise MetadataHistoryError(
                f"offset {offset} is beyond the end of {self.name}: its last offset is {latest}")
        start = snap.end_offset if snap is not None else 0
        bounds = self.log_bounds()
        if bounds is None or bounds[1] <= bounds[0]:
            have = ", ".join(str(s.last_offset) for s in self.snapshots)
            raise MetadataHistoryError(
                f"offset {offset} is not in {self.name}: it has no log records, only snapshot(s) at offset(s) {have}")
        log_start, log_end = bounds
        if log_start > start:
            if snap is None and offset < log_start:
                raise MetadataHistoryError(
                    f"offset {offset} is below the log start offset {log_start} of {self.name} and no snapshot "
                    f"is at or below it")
            if snap is None:
                raise MetadataHistoryError(
                    f"offset {offset} cannot be read: the log of {self.name} starts at offset {log_start}, not 0, "
                    f"and no snapshot is at or below offset {offset} to start from")
            raise MetadataHistoryError(
                f"offset {offset}: the log of {self.name} starts at offset {log_start}, after the newest snapshot "
                f"at or below it (offset {snap.last_offset}): offsets {snap.end_offset}..{log_start - 1} are missing")
        if offset >= log_end:
            later = [s.last_offset for s in self.snapshots if s.last_offset > offset]
            after = f"; the next snapshot is at offset {later[0]}" if later else ""
            raise MetadataHistoryError(
                f"offset {offset} is past the end of the log of {self.name} (its last offset is {log_end - 1}){after}")

    def _snapshot_at_or_below(self, offset: int) -> SnapshotFile | None:
        best: SnapshotFile | None = None
        for s in self.snapshots:
            if s.last_offset <= offset:
                best = s
        return best

    def _start(self, target: int, snap: SnapshotFile | None) -> _Replayer:
        if snap is None:
            return _Replayer(MetadataImage.EMPTY, 0)
        return _Replayer(load_snapshot(snap), snap.end_offset)

    def _advance(self, r: _Replayer, target: int) -> list[str]:
        """Read the log from ``r.position`` through ``target``."""
        notes: list[str] = []
        if r.position > target:
            return notes
        for i, seg in enumerate(self.segments):
            last_segment = i == len(self.segments) - 1
            h = seg.headers(last=last_segment)
            if len(h) == 0:
                continue
            seg_last = int(h["base_offset"][-1]) + int(h["last_offset_delta"][-1])
            if seg_last < r.position:
                continue
            if int(h["base_offset"][0]) > target:
                break
            self._advance_segment(r, seg, h, target)
            if last_segment and seg.torn_tail_at is not None and seg_last <= target:
                notes.append(f"{seg.path}: a partial batch at byte position {seg.torn_tail_at} "
                             f"(a torn write at the end of the log) was ignored")
            if r.position > target:
                break
        return notes

    def _advance_segment(self, r: _Replayer, seg: SegmentFile, h: np.ndarray, target: int) -> None:
        """Replay the records of ``seg`` from ``r.position`` through ``target``.  The per-record loop
        works on Python lists taken once per decoded chunk (numpy scalar and structured-row access
        per record cost as much as the replay itself)."""
        base = h["base_offset"].astype(np.int64)
        last = base + h["last_offset_delta"]
        lo = int(np.searchsorted(last, r.position, side="left"))
        hi = int(np.searchsorted(base, target, side="right"))
        path = seg.path
        for start in range(lo, hi, _BATCHES_PER_DECODE):
            rows = h[start:min(hi, start + _BATCHES_PER_DECODE)]
            try:
                cols = decode_record_columns(seg.buffer, rows, source=str(path))
            except KraftStorageError as exc:
                raise MetadataHistoryError(f"{path}: {exc}") from None
            epochs = rows["partition_leader_epoch"].tolist()
            times = rows["max_timestamp"].tolist()
            batch_last = (rows["base_offset"].astype(np.int64) + rows["last_offset_delta"]).tolist()
            control = ((rows["attributes"] & CONTROL_MASK) != 0).tolist()
            data = memoryview(cols.data).cast("B") if len(cols) else memoryview(b"")
            for off, b, pos, n in zip(cols.offset.tolist(), cols.batch.tolist(), cols.value_pos.tolist(),
                                      cols.value_len.tolist()):
                if off < r.position:
                    continue
                if off > target:
                    return
                if off != r.position:
                    raise MetadataHistoryError(
                        f"{path}: expected offset {r.position} next, found offset {off} (the metadata log has a gap)")
                r.position = off + 1
                if control[b]:
                    r.commit(off, epochs[b], times[b], off == batch_last[b])
                    continue
                if n < 0:
                    raise MetadataHistoryError(f"{path}: offset {off}: a metadata record with a null value")
                try:
                    message = decode_metadata_record(data[pos:pos + n], off)[2]
                except Exception as exc:  # noqa: BLE001 - any decode failure becomes a located error
                    raise MetadataHistoryError(f"{path}: offset {off}: not a metadata record: {exc}") from None
                r.replay(path, off, epochs[b], times[b], off == batch_last[b], message)


def load_snapshot(snap: SnapshotFile) -> MetadataImage:
    """A snapshot file as an image (every record replayed into a delta over the empty image,
    then ``finish_snapshot``), with the snapshot's provenance."""
    try:
        reader = RecordsSnapshotReader(snap.path, verify_crc=True)
    except (KraftStorageError, OSError) as exc:
        raise MetadataHistoryError(f"{snap.path}: {exc}") from None
    try:
        delta = MetadataDelta(MetadataImage.EMPTY)
        cols = reader.records()
        for j in range(len(cols)):
            off = int(cols.offset[j])
            value = cols.value(j)
            if value is None:
                raise MetadataHistoryError(f"{snap.path}: snapshot record {off}: a null value")
            try:
                _, _, message = decode_metadata_record(value, off)
                delta.replay(message)
            except MetadataHistoryError:
                raise
            except Exception as exc:  # noqa: BLE001
                raise MetadataHistoryError(f"{snap.path}: snapshot record {off}: {exc}") from None
        delta.finish_snapshot()
        return delta.apply(MetadataProvenance(snap.last_offset, snap.epoch, reader.last_contained_log_timestamp,
                                              True))
    finally:
        reader.close()


def image_at(directory: str | os.PathLike[str], offset: int | None = None) -> MetadataImage:
    """The image as of ``offset`` (default: the latest) of a metadata log directory or file."""
    return MetadataHistory.open(directory).load(offset).image


# ---------------------------------------------------------------------------------------------
# diff
# ---------------------------------------------------------------------------------------------

def _key(record: ApiMessageAndVersion) -> tuple[Any, ...]:
    """What a snapshot record is about (two records with the same key: the later one wins)."""
    msg = record.message
    k = msg.API_KEY
    if k == m.FeatureLevelRecord.API_KEY:
        return (k, msg.name)
    if k == m.RegisterBrokerRecord.API_KEY:
        return (k, msg.broker_id)
    if k == m.RegisterControllerRecord.API_KEY:
        return (k, msg.controller_id)
    if k == m.TopicRecord.API_KEY:
        return (k, msg.topic_id)
    if k == m.PartitionRecord.API_KEY:
        return (k, msg.topic_id, msg.partition_id)
    if k == m.ConfigRecord.API_KEY:
        return (k, msg.resource_type, msg.resource_name, msg.name)
    if k == m.ClientQuotaRecord.API_KEY:
        return (k, tuple(sorted((e.entity_type, e.entity_name or "", e.entity_name is None) for e in msg.entity)),
                msg.key)
    if k == m.ProducerIdsRecord.API_KEY:
        return (k,)
    if k == m.AccessControlEntryRecord.API_KEY:
        return (k, msg.id)
    if k == m.UserScramCredentialRecord.API_KEY:
        return (k, msg.name, msg.mechanism)
    if k == m.DelegationTokenRecord.API_KEY:
        return (k, msg.token_id)
    if k == m.ZkMigrationStateRecord.API_KEY:
        return (k,)
    raise DiffError(f"diff does not know what a {type(msg).__name__} written by an image is about")


def _state_records(image: MetadataImage) -> dict[tuple[Any, ...], ApiMessageAndVersion]:
    """The image's snapshot records by key, in the order the image writes them.  An image with no
    metadata.version yet (before the bootstrap records) states no features (the writer would
    state the default level it was asked to write at)."""
    out: dict[tuple[Any, ...], ApiMessageAndVersion] = {}
    no_features = image.features.is_empty()
    for r in image_records(image):
        if r.message.API_KEY == m.ZkMigrationStateRecord.API_KEY:
            continue  # an image ignores it on replay: nothing to carry
        if no_features and r.message.API_KEY == m.FeatureLevelRecord.API_KEY:
            continue
        out[_key(r)] = r
    return out


def _v0(message: Any) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, 0)


def diff(image_a: MetadataImage, image_b: MetadataImage) -> list[ApiMessageAndVersion]:
    """The records that turn ``image_a`` into ``image_b``: replaying them, in order, into a
    ``MetadataDelta`` over ``image_a`` and applying it gives an image equal to ``image_b``
    (provenance aside: that is the caller's to give).

    Both images are written as snapshot records (each at its own metadata.version, so nothing is
    lost; a loss would raise) and compared key by key: a key only ``image_b`` states, or states
    differently, gets ``image_b``'s record; a key only ``image_a`` states gets the record that
    removes it.  Ordered so one delta takes them: features (metadata.version first), brokers and
    controllers, topic removals before topic creations (a name can move to a new topic id), a new
    topic's TopicRecord before its partitions, configs after the topic removals (removing a topic
    drops its configs), then quotas, producer ids, ACLs, SCRAM credentials and delegation tokens.

    A topic that lost partitions or changed its name under the same id has no record for that:
    it is removed and created again with ``image_b``'s partitions and configs.  DiffError when no
    record can express the change: a controller registration or the metadata.version gone (going
    back to before they were written).
    """
    a = _state_records(image_a)
    b = _state_records(image_b)
    out: list[ApiMessageAndVersion] = []

    def changed(k: tuple[Any, ...]) -> bool:
        ra = a.get(k)
        return ra is None or ra.message != b[k].message

    b_keys = list(b)
    by_type: dict[int, list[tuple[Any, ...]]] = {}
    for k in b_keys:
        by_type.setdefault(k[0], []).append(k)
    a_by_type: dict[int, list[tuple[Any, ...]]] = {}
    for k in a:
        a_by_type.setdefault(k[0], []).append(k)

    def sets(api_key: int) -> list[ApiMessageAndVersion]:
        return [b[k] for k in by_type.get(api_key, ()) if changed(k)]

    def gone(api_key: int) -> list[tuple[Any, ...]]:
        return [k for k in a_by_type.get(api_key, ()) if k not in b]

    # features: metadata.version first (b writes it first), removals as level 0
    fl = m.FeatureLevelRecord.API_KEY
    for k in gone(fl):
        if k[1] == METADATA_VERSION_FEATURE_NAME:
            raise DiffError("the second image has no metadata.version while the first has one: "
                            "no record removes metadata.version")
    out.extend(sets(fl))
    out.extend(_v0(m.FeatureLevelRecord(name=k[1], feature_level=0)) for k in gone(fl))

    # brokers and controllers
    for k in gone(m.RegisterBrokerRecord.API_KEY):
        epoch = a[k].message.broker_epoch
        out.append(_v0(m.UnregisterBrokerRecord(broker_id=k[1], broker_epoch=epoch)))
    out.extend(sets(m.RegisterBrokerRecord.API_KEY))
    controllers_gone = gone(m.RegisterControllerRecord.API_KEY)
    if controllers_gone:
        ids = ", ".join(str(k[1]) for k in controllers_gone)
        raise DiffError(f"controller(s) {ids} are registered in the first image but not in the second: "
                        "no metadata record unregisters a controller")
    out.extend(sets(m.RegisterControllerRecord.API_KEY))

    # topics
    tk, pk = m.TopicRecord.API_KEY, m.PartitionRecord.API_KEY
    a_parts: dict[Any, set[tuple[Any, ...]]] = {}
    for k in a_by_type.get(pk, ()):
        a_parts.setdefault(k[1], set()).add(k)
    b_parts: dict[Any, list[tuple[Any, ...]]] = {}
    for k in by_type.get(pk, ()):
        b_parts.setdefault(k[1], []).append(k)
    recreate: set[Any] = set()
    for k in by_type.get(tk, ()):
        ka = a.get(k)
        if ka is not None and (ka.message.name != b[k].message.name
                               or any(p not in b for p in a_parts.get(k[1], ()))):
            recreate.add(k[1])
    removed_names: set[str] = set()
    for k in a_by_type.get(tk, ()):
        if k not in b or k[1] in recreate:
            out.append(_v0(m.RemoveTopicRecord(topic_id=k[1])))
            removed_names.add(a[k].message.name)
    for k in by_type.get(tk, ()):
        fresh = k not in a or k[1] in recreate
        if fresh:
            out.append(b[k])
        for p in b_parts.get(k[1], ()):
            if fresh or changed(p):
                out.append(b[p])

    # configs: a removed topic's configs went with it (RemoveTopicRecord), so they are re-stated
    ck = m.ConfigRecord.API_KEY
    topic_type = 2  # ConfigResource.Type.TOPIC

    def wiped(k: tuple[Any, ...]) -> bool:
        return k[1] == topic_type and k[2] in removed_names

    for k in gone(ck):
        if not wiped(k):
            out.append(_v0(m.ConfigRecord(resource_type=k[1], resource_name=k[2], name=k[3], value=None)))
    out.extend(b[k] for k in by_type.get(ck, ()) if wiped(k) or changed(k))

    # client quotas
    qk = m.ClientQuotaRecord.API_KEY
    for k in gone(qk):
        msg = a[k].message
        out.append(_v0(m.ClientQuotaRecord(entity=msg.entity, key=msg.key, value=0.0, remove=True)))
    out.extend(sets(qk))

    # producer ids: a record sets the next id; back to none is the empty image's -1
    pid = m.ProducerIdsRecord.API_KEY
    if (pid,) in b:
        out.extend(sets(pid))
    elif (pid,) in a:
        out.append(_v0(m.ProducerIdsRecord(broker_id=-1, broker_epoch=-1, next_producer_id=-1)))

    # ACLs, SCRAM credentials, delegation tokens
    for k in gone(m.AccessControlEntryRecord.API_KEY):
        out.append(_v0(m.RemoveAccessControlEntryRecord(id=k[1])))
    out.extend(sets(m.AccessControlEntryRecord.API_KEY))
    for k in gone(m.UserScramCredentialRecord.API_KEY):
        out.append(_v0(m.RemoveUserScramCredentialRecord(name=k[1], mechanism=k[2])))
    out.extend(sets(m.UserScramCredentialRecord.API_KEY))
    for k in gone(m.DelegationTokenRecord.API_KEY):
        out.append(_v0(m.RemoveDelegationTokenRecord(token_id=k[1])))
    out.extend(sets(m.DelegationTokenRecord.API_KEY))
    return out


def records_json(record: ApiMessageAndVersion) -> dict[str, Any]:
    """A record as ``kraft-dump-log --json`` shows a metadata record: type, apiKey, version, data."""
    msg = record.message
    data: dict[str, Any] = msg.to_dict(record.version)
    return {"type": msg.NAME, "apiKey": msg.API_KEY, "version": record.version, "data": data}


def iter_offsets(history: MetadataHistory) -> Iterator[int]:
    """Every offset the history can load (snapshot offsets, then the log's), ascending; for tests
    and tools that walk a whole history."""
    seen: set[int] = set()
    for s in history.snapshots:
        seen.add(s.last_offset)
    bounds = history.log_bounds()
    if bounds is not None:
        seen.update(range(bounds[0], bounds[1]))
    yield from sorted(seen)
