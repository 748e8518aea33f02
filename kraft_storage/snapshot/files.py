"""Snapshot files in a KRaft log directory: names, listing, deletion, cleanup.

A KRaft snapshot lives next to the segments of ``__cluster_metadata-0`` and is
named by its id, the offset *after* the last record it contains and the epoch
of that record::

    <end offset, 20 digits>-<epoch, 10 digits>.checkpoint      e.g.
    00000000000000046533-0000000004.checkpoint

A file goes through three names, so that a crash at any point leaves a state
that the next open can resolve without reading the file:

* ``<id>-<random>.checkpoint.part`` while it is written (never read; removed
  on open, :func:`clean_snapshot_dir`).  The random tail lets two writers of
  the same id coexist, as Kafka's ``Files.createTempFile`` does.
* ``<id>.checkpoint`` once frozen: fsynced, then atomically renamed, then the
  directory fsynced (:func:`kraft_storage.fileio.fsync_dir`), so the name appears only with
  complete content.
* ``<id>.checkpoint.deleted`` once the log no longer wants it: the rename is
  atomic, so a snapshot is either listed or not; the bytes are removed
  afterwards (or on the next open).

The id (0, 0) is the *bootstrap* snapshot (``kafka-storage format``
--standalone writes ``00000000000000000000-0000000000.checkpoint``).  Before
KIP-853 the bootstrap records lived in ``<log dir>/bootstrap.checkpoint``
(one level above the partition directory) with the same record layout: a
snapshot whose header says LastContainedLogTimestamp 0 and whose batches carry
partition leader epoch 0.  :data:`BOOTSTRAP_FILENAME` names that file.
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import NamedTuple

from kraft_storage.fileio import StrPath, fsync_dir

__all__ = [
    "SnapshotId", "SnapshotPath", "BOOTSTRAP_SNAPSHOT_ID", "BOOTSTRAP_FILENAME", "SUFFIX",
    "PARTIAL_SUFFIX", "DELETED_SUFFIX", "snapshot_filename", "snapshot_path", "parse_snapshot_path",
    "scan_snapshot_dir", "list_snapshots", "latest_snapshot", "create_temp_path", "mark_for_delete",
    "delete_snapshot", "clean_snapshot_dir", "open_snapshot_dir",
]

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
#: The pre-KIP-853 bootstrap file, in the log directory root.
BOOTSTRAP_FILENAME = "bootstrap.checkpoint"

OFFSET_WIDTH = 20
EPOCH_WIDTH = 10
_MAX_OFFSET = 2**63 - 1
_MAX_EPOCH = 2**31 - 1

# 20 digits, '-', 10 digits, then anything up to a known suffix (the .part
# files carry a random tail before their suffix, as Kafka's temp files do).
_NAME = re.compile(r"^(\d{20})-(\d{10})(.*)$", re.ASCII)


class SnapshotId(NamedTuple):
    """``(end_offset, epoch)``: the snapshot holds every record with offset < end_offset.

    Ordered by (end_offset, epoch) like Kafka's ``OffsetAndEpoch``.
    """
    end_offset: int
    epoch: int

    def validate(self) -> "SnapshotId":
        if not (0 <= self.end_offset <= _MAX_OFFSET):
            raise ValueError(f"snapshot end offset {self.end_offset} out of range")
        if not (0 <= self.epoch <= _MAX_EPOCH):
            raise ValueError(f"snapshot epoch {self.epoch} out of range")
        return self


#: The snapshot ``kafka-storage format`` writes before any log exists.
BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


class SnapshotPath(NamedTuple):
    """A file of the snapshot directory that looks like a snapshot, and in which state."""
    path: Path
    snapshot_id: SnapshotId
    partial: bool
    deleted: bool


def snapshot_filename(snapshot_id: SnapshotId, suffix: str = SUFFIX) -> str:
    """``00000000000000046533-0000000004.checkpoint`` for SnapshotId(46533, 4)."""
    sid = SnapshotId(*snapshot_id).validate()
    return f"{sid.end_offset:0{OFFSET_WIDTH}d}-{sid.epoch:0{EPOCH_WIDTH}d}{suffix}"


def snapshot_path(log_dir: StrPath, snapshot_id: SnapshotId, suffix: str = SUFFIX) -> Path:
    return Path(log_dir) / snapshot_filename(snapshot_id, suffix)


def parse_snapshot_path(path: StrPath) -> SnapshotPath | None:
    """The state of ``path`` if its name is a snapshot's, else None.

    Complete snapshots must be named exactly ``<20 digits>-<10 digits>.checkpoint``;
    ``.part`` files may carry a tail between the id and the suffix.
    """
    p = Path(path)
    m = _NAME.match(p.name)
    if m is None:
        return None
    offset, epoch, rest = int(m.group(1)), int(m.group(2)), m.group(3)
    if offset > _MAX_OFFSET or epoch > _MAX_EPOCH:
        return None
    sid = SnapshotId(offset, epoch)
    if rest == SUFFIX:
        return SnapshotPath(p, sid, False, False)
    if rest == DELETED_SUFFIX:
        return SnapshotPath(p, sid, False, True)
    if rest.endswith(PARTIAL_SUFFIX):
        return SnapshotPath(p, sid, True, False)
    return None


def scan_snapshot_dir(log_dir: StrPath) -> list[SnapshotPath]:
    """Every snapshot-like file of ``log_dir`` (any state), sorted by id then name."""
    out: list[SnapshotPath] = []
    try:
        entries = os.scandir(log_dir)
    except FileNotFoundError:
        return out
    with entries:
        for e in entries:
            sp = parse_snapshot_path(e.path)
            if sp is not None and e.is_file(follow_symlinks=False):
                out.append(sp)
    out.sort(key=lambda s: (s.snapshot_id, s.path.name))
    return out


def list_snapshots(log_dir: StrPath) -> list[SnapshotId]:
    """Ids of the complete (frozen, not deleted) snapshots of ``log_dir``, oldest first."""
    return [s.snapshot_id for s in scan_snapshot_dir(log_dir) if not (s.partial or s.deleted)]


def latest_snapshot(log_dir: StrPath) -> SnapshotId | None:
    """The greatest complete snapshot id, or None when there is none."""
    ids = list_snapshots(log_dir)
    return ids[-1] if ids else None


def create_temp_path(log_dir: StrPath, snapshot_id: SnapshotId) -> Path:
    """Create (exclusively) and return a fresh ``<id>-<random>.checkpoint.part`` file."""
    directory = Path(log_dir)
    directory.mkdir(parents=True, exist_ok=True)
    prefix = snapshot_filename(snapshot_id, "-")
    fd, name = tempfile.mkstemp(suffix=PARTIAL_SUFFIX, prefix=prefix, dir=directory)
    os.close(fd)
    return Path(name)


def mark_for_delete(log_dir: StrPath, snapshot_id: SnapshotId) -> Path:
    """Rename ``<id>.checkpoint`` to ``<id>.checkpoint.deleted`` (atomic); return the new path.

    After this the snapshot is no longer listed; :func:`delete_snapshot` or the
    next :func:`clean_snapshot_dir` removes the bytes.
    """
    src = snapshot_path(log_dir, snapshot_id)
    dst = snapshot_path(log_dir, snapshot_id, DELETED_SUFFIX)
    os.replace(src, dst)
    fsync_dir(log_dir)
    return dst


def delete_snapshot(log_dir: StrPath, snapshot_id: SnapshotId) -> bool:
    """Delete a snapshot: mark it ``.deleted`` then remove it.  True if anything was removed."""
    removed = False
    try:
        mark_for_delete(log_dir, snapshot_id)
    except FileNotFoundError:
        pass
    for suffix in (DELETED_SUFFIX, SUFFIX):
        try:
            os.unlink(snapshot_path(log_dir, snapshot_id, suffix))
            removed = True
        except FileNotFoundError:
            pass
    return removed


def clean_snapshot_dir(log_dir: StrPath) -> list[Path]:
    """Remove stray ``.part`` (unfinished writes) and ``.deleted`` files; return what was removed.

    Called when a log directory is opened: a ``.part`` file was never frozen
    (crash or abort) and a ``.deleted`` one was already given up; neither may
    be read.
    """
    removed: list[Path] = []
    for s in scan_snapshot_dir(log_dir):
        if s.partial or s.deleted:
            try:
                os.unlink(s.path)
                removed.append(s.path)
            except FileNotFoundError:
                pass
    if removed:
        fsync_dir(log_dir)
    return removed


def open_snapshot_dir(log_dir: StrPath) -> list[SnapshotId]:
    """What a log does when it opens ``log_dir``: clean up, then list the usable snapshots.

    Stray ``.part`` and ``.deleted`` files are removed first, so what is
    returned is exactly the set of frozen snapshots, oldest first.
    """
    clean_snapshot_dir(log_dir)
    return list_snapshots(log_dir)
