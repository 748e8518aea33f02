"""Offline checks and explicit repair of a partition log directory: the library behind
``kraft-storage verify`` and ``kraft-storage recover``.

:func:`verify_log_dir` is read-only: it opens every file ``O_RDONLY``, maps nothing
writable, writes no byte and deletes no marker, so it can run on the directory of a
stopped node (or a copy) without changing what a later start will find.  It checks

* every batch: framing, magic, CRC-32C, offsets inside the segment's int32 range;
* offset contiguity: each batch starts right after the previous one, the first batch
  of a segment at the segment's base offset, each segment where the previous one
  ended (the metadata log is never compacted, so any hole is damage);
* the indexes against the batches: ``.index`` entries point at batch boundaries and
  name an offset the batch there holds or precedes, both columns increase;
  ``.timeindex`` timestamps increase, each names a batch whose max timestamp it is,
  and a sealed segment's last entry is its largest timestamp (what retention uses);
* leader epochs never decrease, and ``leader-epoch-checkpoint`` matches the epochs of
  the batches.

Problems name the file, the byte position and the offset.  Things that are expected
after an unclean shutdown (preallocated indexes, a torn tail an open will cut) are
listed as problems too, because a verify is asked for when something is wrong; the
summary says whether the log was shut down cleanly.

:func:`recover_log_dir` truncates explicitly: every segment is validated batch by
batch from offset 0 (as an unclean open with recovery point 0, corruption in a
cleanly shut down log included), then the log is closed cleanly.  Its
:class:`~kraft_storage.log.log.LoadReport` lists what was dropped.

Neither takes the directory lock: the CLI does (a verify of a running node's
directory may see a torn tail that is only an append in progress).
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kraft_storage.fileio import StrPath
from kraft_storage.log.checkpoint import CheckpointFileError
from kraft_storage.log.config import LogConfig
from kraft_storage.log.epoch_cache import LEADER_EPOCH_CHECKPOINT, read_checkpoint
from kraft_storage.log.errors import NotALogDirectory
from kraft_storage.log.index import OFFSET_ENTRY, TIME_ENTRY
from kraft_storage.log.log import CLEAN_SHUTDOWN_FILE, KafkaLog, LoadReport
from kraft_storage.log.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    scan_segment_file,
)

__all__ = ["VerifyReport", "recover_log_dir", "verify_log_dir"]


@dataclass
class VerifyReport:
    """What :func:`verify_log_dir` found.  ``ok`` when ``problems`` is empty."""
    directory: str
    clean_shutdown: bool = False
    problems: list[str] = field(default_factory=list)
    #: what an open repairs without losing data (a missing index or epoch checkpoint,
    #: an orphan index): reported, but the log is still ``ok``
    notes: list[str] = field(default_factory=list)
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    start_offset: int | None = None
    end_offset: int | None = None
    epochs: list[tuple[int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """Several lines: the verdict, the counts, then one line per problem."""
        verdict = "OK" if self.ok else f"{len(self.problems)} PROBLEM(S)"
        offsets = ("no batches" if self.start_offset is None
                   else f"offsets [{self.start_offset}, {self.end_offset})")
        how = "clean" if self.clean_shutdown else "unclean (or running)"
        counts = (f"  {how} shutdown; {self.segments} segment(s), {self.batches} batch(es), "
                  f"{self.records} record(s), {self.bytes} bytes, {offsets}")
        epochs = ", ".join(f"{e} from {o}" for e, o in self.epochs) or "none"
        lines = [f"{self.directory}: {verdict}", counts, f"  leader epochs: {epochs}"]
        lines += [f"  - {p}" for p in self.problems]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks: list[bytes] = []
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def verify_log_dir(path: StrPath) -> VerifyReport:
    """Check a partition log directory, reading only (see the module doc)."""
    d = os.fspath(path)
    if not os.path.isdir(d):
        raise NotALogDirectory(d, "it does not exist" if not os.path.exists(d) else "it is not a directory")
    rep = VerifyReport(d, clean_shutdown=os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE)))
    names = sorted(os.listdir(d))
    problems = rep.problems
    for n in names:
        if os.path.isdir(os.path.join(d, n)):
            problems.append(f"{n}: a directory inside a partition log directory")
    bases = []
    for n in names:
        if n.endswith(LOG_SUFFIX):
            stem = n[:-len(LOG_SUFFIX)]
            if len(stem) == 20 and stem.isdigit():
                bases.append(int(stem))
            else:
                problems.append(f"{n}: not a segment name (<20-digit base offset>.log)")
        elif n.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            stem = n.rsplit(".", 1)[0]
            if f"{stem}{LOG_SUFFIX}" not in names:
                rep.notes.append(f"{n}: an index without its .log segment (an open removes it)")
    bases.sort()
    rep.segments = len(bases)
    prev_next = None
    prev_name = None
    last_epoch = -1
    last_epoch_where = None
    epoch_changes: list[tuple[int, int]] = []
    for k, base in enumerate(bases):
        name = f"{base:020d}{LOG_SUFFIX}"
        p = os.path.join(d, name)
        final = k == len(bases) - 1
        cols: dict[str, list[np.ndarray]] = {c: [] for c in ("base_offset", "last", "position", "size", "max_timestamp",
                                "partition_leader_epoch")}

        def collect(h: np.ndarray, cols: dict[str, list[np.ndarray]] = cols) -> None:
            cols["base_offset"].append(h["base_offset"].astype(np.int64))
            cols["last"].append(h["base_offset"].astype(np.int64) + h["last_offset_delta"])
            cols["position"].append(h["position"].astype(np.int64))
            cols["size"].append(h["size"].astype(np.int64))
            cols["max_timestamp"].append(h["max_timestamp"].astype(np.int64))
            cols["partition_leader_epoch"].append(h["partition_leader_epoch"].astype(np.int64))

        fd = os.open(p, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            scan = scan_segment_file(fd, size, base, p, True, collect)
        finally:
            os.close(fd)
        c = {k2: (np.concatenate(v) if v else np.empty(0, np.int64)) for k2, v in cols.items()}
        rep.batches += scan.batches
        rep.records += scan.records
        rep.bytes += size
        if scan.valid_bytes < size:
            err = scan.error
            if err is not None:
                where = f"byte position {err.position}" + (
                    f", batch base offset {err.base_offset}" if err.base_offset is not None else "")
                problems.append(f"{name}: {where}: {err.reason}; {size - scan.valid_bytes} bytes from "
                                f"position {scan.valid_bytes} (offset {scan.next_offset}) on are unreadable")
            else:
                problems.append(f"{name}: byte position {scan.valid_bytes}: {size - scan.valid_bytes} "
                                f"trailing bytes after the last whole batch (offset {scan.last_offset})")
        # offsets: contiguous within the segment and across segments
        if prev_next is not None and base != prev_next:
            kind = "gap" if base > prev_next else "overlap"
            problems.append(f"{name}: segment base offset {base} does not continue {prev_name}, which ends "
                            f"before offset {prev_next} ({kind})")
        if prev_next is not None and scan.batches == 0 and not final:
            problems.append(f"{name}: an empty segment that is not the last one")
        nb = len(c["base_offset"])
        if nb:
            if c["base_offset"][0] != base:
                problems.append(f"{name}: byte position 0: the first batch starts at offset "
                                f"{int(c['base_offset'][0])}, not at the segment's base offset {base}")
            holes = np.flatnonzero(c["base_offset"][1:] != c["last"][:-1] + 1)
            for i in holes[:10]:
                problems.append(f"{name}: byte position {int(c['position'][i + 1])}: batch at offset "
                                f"{int(c['base_offset'][i + 1])} does not follow offset {int(c['last'][i])}")
            if len(holes) > 10:
                problems.append(f"{name}: ... and {len(holes) - 10} more offset discontinuities")
            if rep.start_offset is None:
                rep.start_offset = int(c["base_offset"][0])
            rep.end_offset = int(c["last"][-1]) + 1
            # leader epochs: never decrease; remember where each new one starts
            for i in range(nb):
                e = int(c["partition_leader_epoch"][i])
                if e < last_epoch:
                    problems.append(f"{name}: byte position {int(c['position'][i])}: batch at offset "
                                    f"{int(c['base_offset'][i])} has leader epoch {e}, older than epoch "
                                    f"{last_epoch} at offset {last_epoch_where}")
                elif e > last_epoch:
                    if e >= 0:
                        epoch_changes.append((e, int(c["base_offset"][i])))
                    last_epoch = e
                    last_epoch_where = int(c["base_offset"][i])
        elif rep.start_offset is None and final:
            rep.start_offset = rep.end_offset = base
        prev_next = scan.next_offset if nb else base
        prev_name = name
        sealed = not final or rep.clean_shutdown
        _verify_indexes(d, base, c, scan.valid_bytes, sealed, rep.clean_shutdown, problems, rep.notes)
    rep.epochs = epoch_changes
    _verify_epoch_checkpoint(d, epoch_changes, problems, rep.notes)
    return rep


def _verify_indexes(d: str, base: int, c: dict[str, np.ndarray], log_size: int, sealed: bool, clean: bool,
                    problems: list[str], notes: list[str]) -> None:
    for suffix, dtype in ((INDEX_SUFFIX, OFFSET_ENTRY), (TIME_INDEX_SUFFIX, TIME_ENTRY)):
        name = f"{base:020d}{suffix}"
        p = os.path.join(d, name)
        if not os.path.exists(p):
            if log_size:
                notes.append(f"{name}: missing (an open rebuilds it)")
            continue
        raw = _read(p)
        if len(raw) % dtype.itemsize:
            problems.append(f"{name}: {len(raw)} bytes is not a whole number of {dtype.itemsize}-byte entries")
            raw = raw[:len(raw) - len(raw) % dtype.itemsize]
        a = np.frombuffer(raw, dtype=dtype)
        if not sealed:
            # the active segment of a log that was not shut down cleanly: preallocated,
            # its valid entries are followed by zeros (an open rebuilds it anyway)
            nz: Sequence[int] | np.ndarray = (
                np.flatnonzero(a.view(np.uint8).reshape(len(a), dtype.itemsize).any(axis=1)) if len(a) else [])
            a = a[:int(nz[-1]) + 1] if len(nz) else a[:0]
        if suffix == INDEX_SUFFIX:
            _verify_offset_index(name, base, a, c, problems)
        else:
            _verify_time_index(name, base, a, c, sealed, problems)


def _verify_offset_index(name: str, base: int, a: np.ndarray, c: dict[str, np.ndarray],
                         problems: list[str]) -> None:
    rel = a["rel"].astype(np.int64)
    pos = a["pos"].astype(np.int64)
    if len(a) > 1 and (np.any(np.diff(rel) <= 0) or np.any(np.diff(pos) <= 0)):
        i = int(np.argmax((np.diff(rel) <= 0) | (np.diff(pos) <= 0))) + 1
        problems.append(f"{name}: entry {i} ({base + int(rel[i])}, position {int(pos[i])}) does not "
                        f"increase over entry {i - 1}")
        return
    positions = c["position"]
    for i in range(len(a)):
        off, p = base + int(rel[i]), int(pos[i])
        j = int(np.searchsorted(positions, p))
        if j >= len(positions) or positions[j] != p:
            problems.append(f"{name}: entry {i} points at byte position {p}, which is not the start of a batch "
                            f"of the segment (offset {off})")
            return
        if not c["base_offset"][j] <= off:
            problems.append(f"{name}: entry {i} maps offset {off} to byte position {p}, where the batch starts "
                            f"after it (at offset {int(c['base_offset'][j])})")
            return
        if len(c["last"]) and off > c["last"][-1]:
            problems.append(f"{name}: entry {i} names offset {off}, past the segment's last offset "
                            f"{int(c['last'][-1])}")
            return


def _verify_time_index(name: str, base: int, a: np.ndarray, c: dict[str, np.ndarray], sealed: bool,
                       problems: list[str]) -> None:
    ts = a["ts"].astype(np.int64)
    rel = a["rel"].astype(np.int64)
    if len(a) > 1 and (np.any(np.diff(ts) <= 0) or np.any(np.diff(rel) < 0)):
        i = int(np.argmax((np.diff(ts) <= 0) | (np.diff(rel) < 0))) + 1
        problems.append(f"{name}: entry {i} (timestamp {int(ts[i])}, offset {base + int(rel[i])}) does not "
                        f"increase over entry {i - 1}")
        return
    for i in range(len(a)):
        off = base + int(rel[i])
        j = int(np.searchsorted(c["last"], off))
        if j >= len(c["last"]) or c["base_offset"][j] > off:
            problems.append(f"{name}: entry {i} names offset {off}, which no batch of the segment holds")
            return
        if c["max_timestamp"][j] != ts[i]:
            problems.append(f"{name}: entry {i} says timestamp {int(ts[i])} at offset {off}, but that batch's "
                            f"max timestamp is {int(c['max_timestamp'][j])}")
            return
    if sealed and len(c["max_timestamp"]):
        largest = int(c["max_timestamp"].max())
        last = int(ts[-1]) if len(ts) else -1
        if largest >= 0 and last != largest:
            problems.append(f"{name}: the last entry's timestamp is {last} but the segment's largest timestamp "
                            f"is {largest} (no final entry: retention by time would misjudge the segment)")


def _verify_epoch_checkpoint(d: str, changes: list[tuple[int, int]], problems: list[str],
                             notes: list[str]) -> None:
    p = os.path.join(d, LEADER_EPOCH_CHECKPOINT)
    if not os.path.exists(p):
        if changes:
            notes.append(f"{LEADER_EPOCH_CHECKPOINT}: missing while the batches carry leader epochs "
                         f"(an open rebuilds it)")
        return
    try:
        cp = read_checkpoint(p)
    except CheckpointFileError as exc:
        problems.append(str(exc))
        return
    # The checkpoint may have lost its oldest entries (log start moved) and its first entry
    # may have been collapsed forward to the log start offset; the rest must be identical.
    want = [x for x in changes if not cp or x[0] >= cp[0][0]]
    good = len(cp) == len(want) and (not cp or (
        cp[0][0] == want[0][0] and cp[0][1] >= want[0][1]
        and (len(want) == 1 or cp[0][1] < want[1][1]) and cp[1:] == want[1:]))
    if not good:
        problems.append(f"{LEADER_EPOCH_CHECKPOINT}: says {cp} (epoch, start offset) but the batches give "
                        f"{changes}")


def recover_log_dir(path: StrPath, config: LogConfig | None = None) -> LoadReport:
    """Validate every segment from offset 0 and truncate at the first bad batch (also in
    a cleanly shut down log, and at a contiguity break), then close cleanly.  Returns
    the load report; its ``describe()`` lists what was dropped (logged at WARNING too)."""
    log = KafkaLog.open(path, config, create=False, recover_clean=True, full_recovery=True)
    report = log.load_report
    log.close()
    return report
