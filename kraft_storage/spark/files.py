"""Finding Kafka files under a path and cutting them into read splits.

No Spark here: this is what the Spark driver runs to plan partitions, and
what the single-process reader and the benchmarks use too.

Which files are Kafka files (by name, then checked by content):

* log segments ``<20-digit base offset>.log`` (the base offset is the first
  offset the segment may hold: it prunes offset filters without I/O),
* KRaft snapshots ``<20-digit end offset>-<10-digit epoch>.checkpoint`` and
  the ``bootstrap.checkpoint`` that ``kafka-storage format`` writes.

A directory is searched recursively, so a partition directory
(``__cluster_metadata-0/``), a whole ``log.dirs`` folder, or a folder of
checkpoints all work.  A named file must be one of the above; anything else
is a :class:`NotKafkaFileError` that says what was expected.  Every file's
first bytes must look like a v2 record batch (magic 2 at byte 16), so a
random file renamed ``.log`` is refused at planning time, not halfway
through a job.

A split is ``[start, end)`` of one file with ``start`` and ``end`` at batch
boundaries.  Small files are one split; a file bigger than
``max_split_bytes`` is walked once (batch headers only, no CRC: a cheap pass
over the headers, the executors verify the CRCs) and cut at the first batch
boundary at or after every multiple of ``max_split_bytes``.  Each split
knows the offset range it can hold (exact for cut files, from the file
names otherwise) so offset filters drop whole splits before any task runs.
"""
from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass

import numpy as np

from kraft_storage.errors import KraftStorageError
from kraft_storage.record import CRC_SKIP, scan_batches

SEGMENT_RE = re.compile(r"^(\d{20})\.log$")
SNAPSHOT_RE = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
BOOTSTRAP_NAME = "bootstrap.checkpoint"

#: A Spark partition reads at most about this many bytes of a segment.
DEFAULT_MAX_SPLIT_BYTES = 128 * 1024 * 1024

NO_OFFSET_LIMIT = 2**63 - 1


class NotKafkaFileError(KraftStorageError, ValueError):
    """A path given to the reader is not a Kafka log segment or checkpoint (or holds none)."""


@dataclass(frozen=True)
class KafkaFile:
    path: str
    kind: str          # "log" or "checkpoint"
    size: int
    min_offset: int    # lowest offset the file can hold
    max_offset: int    # highest offset it can hold (NO_OFFSET_LIMIT when unknown)


@dataclass(frozen=True)
class Split:
    """One read task: bytes [start, end) of ``path``, holding offsets in [min_offset, max_offset]."""
    path: str
    kind: str
    start: int
    end: int
    min_offset: int
    max_offset: int

    @property
    def size(self) -> int:
        return self.end - self.start


def kind_of(name: str) -> str | None:
    if SEGMENT_RE.match(name):
        return "log"
    if SNAPSHOT_RE.match(name) or name == BOOTSTRAP_NAME:
        return "checkpoint"
    return None


def _check_content(path: str, size: int) -> None:
    if size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(17)
    if len(head) < 17 or head[16] != 2:
        what = f"magic byte {head[16]}" if len(head) >= 17 else f"only {len(head)} bytes"
        raise NotKafkaFileError(
            f"{path} is named like a Kafka file but does not start with a v2 record batch "
            f"({what}; expected magic 2 at byte 16)")


def find_files(paths: str | list[str], kinds: tuple[str, ...] = ("log", "checkpoint")) -> list[KafkaFile]:
    """Every Kafka file under ``paths``, sorted by directory then base offset.

    Raises NotKafkaFileError for a named file that is not a Kafka file, or a
    directory that holds none; FileNotFoundError for a missing path.
    """
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p] if "," in paths and not os.path.exists(paths) else [paths]
    found: list[tuple[str, str]] = []
    for p in paths:
        if not os.path.exists(p):
            raise FileNotFoundError(f"no such file or directory: {p}")
        if os.path.isdir(p):
            n_before = len(found)
            for root, dirs, names in os.walk(p):
                dirs.sort()
                found.extend((os.path.join(root, n), k) for n in names if (k := kind_of(n)) in kinds)
            if len(found) == n_before:
                raise NotKafkaFileError(
                    f"{p} holds no Kafka {' or '.join(kinds)} files (looked for "
                    "<20-digit offset>.log segments and *.checkpoint snapshots, recursively)")
        else:
            k = kind_of(os.path.basename(p))
            if k is None:
                raise NotKafkaFileError(
                    f"{p} is not a Kafka log segment or checkpoint (expected a name like "
                    "00000000000000000000.log, 00000000000000001234-0000000005.checkpoint "
                    "or bootstrap.checkpoint)")
            if k in kinds:
                found.append((p, k))
    out = []
    by_dir: dict[str, list[tuple[int, str, str]]] = {}
    for path, k in dict.fromkeys(found):
        name = os.path.basename(path)
        base = int(name[:20]) if k == "log" else 0
        by_dir.setdefault(os.path.dirname(path), []).append((base, path, k))
    for d in sorted(by_dir):
        entries = sorted(by_dir[d], key=lambda e: (e[2] != "log", e[0], e[1]))
        log_bases = [b for b, _p, k in entries if k == "log"]
        for base, path, k in entries:
            size = os.path.getsize(path)
            _check_content(path, size)
            if k == "log":
                later = [b for b in log_bases if b > base]
                hi = later[0] - 1 if later else NO_OFFSET_LIMIT
                out.append(KafkaFile(path, k, size, base, hi))
            else:
                out.append(KafkaFile(path, k, size, 0, NO_OFFSET_LIMIT))
    return out


def split_file(f: KafkaFile, max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES) -> list[Split]:
    """Cut one file at batch boundaries into splits of about ``max_split_bytes``."""
    if f.size == 0:
        return []
    if f.size <= max_split_bytes:
        return [Split(f.path, f.kind, 0, f.size, f.min_offset, f.max_offset)]
    with open(f.path, "rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        scan = scan_batches(mm, crc_mode=CRC_SKIP, allow_partial_tail=True, source=f.path)
        h = scan.headers
        pos = h["position"].copy()
        first = h["base_offset"].copy()
        last = first + h["last_offset_delta"]
        end = scan.end
        del h, scan
    if len(pos) == 0:
        return [Split(f.path, f.kind, 0, f.size, f.min_offset, f.max_offset)]
    targets = np.arange(max_split_bytes, end, max_split_bytes, dtype=np.int64)
    cuts = np.unique(np.searchsorted(pos, targets))  # index of the first batch of each later split
    cuts = cuts[(cuts > 0) & (cuts < len(pos))]
    bounds = np.concatenate([[0], cuts, [len(pos)]])
    out = []
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        s = int(pos[a])
        e = int(pos[b]) if b < len(pos) else f.size  # the last split keeps any tail, to report it
        out.append(Split(f.path, f.kind, s, e, int(first[a:b].min()), int(last[a:b].max())))
    return out


def plan_splits(paths, *, kinds=("log", "checkpoint"), max_split_bytes: int = DEFAULT_MAX_SPLIT_BYTES,
                min_offset: int | None = None, max_offset: int | None = None) -> list[Split]:
    """Splits of every Kafka file under ``paths`` that can hold an offset in [min, max]."""
    lo = -(2**63) if min_offset is None else min_offset
    hi = NO_OFFSET_LIMIT if max_offset is None else max_offset
    out = []
    for f in find_files(paths, kinds):
        if f.max_offset < lo or f.min_offset > hi:
            continue
        out.extend(s for s in split_file(f, max_split_bytes) if s.max_offset >= lo and s.min_offset <= hi)
    return out
