"""The leader epoch cache (Kafka's ``LeaderEpochFileCache``) and its ``leader-epoch-checkpoint`` file.

Why it exists: a follower that reconnects asks the leader "where does my
last epoch end in *your* log?" (``end_offset_for_epoch``) and truncates to
that, instead of to its high watermark.  The cache is the list of
``(epoch, start_offset)`` pairs: the first offset written in each epoch.

Invariant: both columns strictly increase.  ``assign`` keeps it by removing
any entry whose epoch or start offset is >= the new one's before adding it
(a new leader epoch supersedes whatever a deposed leader wrote).

File (``leader-epoch-checkpoint``, Kafka's checkpoint text format, see
:mod:`.checkpoint`)::

    0
    2
    1 0
    3 354

Each change is written through a temp file, fsync and atomic rename.
"""
from __future__ import annotations

import bisect
import os
import threading
from collections.abc import Iterable

from kraft_storage.fileio import atomic_write
from kraft_storage.log.checkpoint import CheckpointFileError, format_checkpoint, parse_checkpoint

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


def read_checkpoint(path: str) -> list[tuple[int, int]]:
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise CheckpointFileError(f"{path}: not a text checkpoint file") from None
    out = []
    for i, (e, o) in enumerate(parse_checkpoint(text, path, 2), start=3):
        try:
            out.append((int(e), int(o)))
        except ValueError:
            raise CheckpointFileError(f"{path}: line {i}: epoch and offset must be integers") from None
    for (e0, o0), (e1, o1) in zip(out, out[1:]):
        if not (e1 > e0 and o1 >= o0):
            raise CheckpointFileError(f"{path}: entries are not increasing: ({e0}, {o0}) then ({e1}, {o1})")
    return out


def format_entries(entries: Iterable[tuple[int, int]]) -> bytes:
    return format_checkpoint(entries)


class LeaderEpochCache:
    """Epoch -> start offset map backed by a checkpoint file (or memory only when ``path`` is None)."""

    def __init__(self, path: str | None, entries: Iterable[tuple[int, int]] = (), *, sync: bool = True) -> None:
        self.path = path
        self.sync = sync
        self._lock = threading.Lock()
        self._epochs: list[int] = []
        self._starts: list[int] = []
        for e, o in entries:
            self._epochs.append(int(e))
            self._starts.append(int(o))

    @classmethod
    def load(cls, directory: str, *, sync: bool = True) -> "LeaderEpochCache":
        """Load ``<directory>/leader-epoch-checkpoint`` (empty cache if it does not exist)."""
        path = os.path.join(directory, LEADER_EPOCH_CHECKPOINT)
        entries = read_checkpoint(path) if os.path.exists(path) else []
        return cls(path, entries, sync=sync)

    # ---- queries ----
    def entries(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(zip(self._epochs, self._starts))

    def __len__(self) -> int:
        return len(self._epochs)

    @property
    def latest_epoch(self) -> int | None:
        with self._lock:
            return self._epochs[-1] if self._epochs else None

    @property
    def earliest_entry(self) -> tuple[int, int] | None:
        with self._lock:
            return (self._epochs[0], self._starts[0]) if self._epochs else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """Epoch of the entry with the largest start offset <= ``offset``."""
        with self._lock:
            i = bisect.bisect_right(self._starts, offset) - 1
            return self._epochs[i] if i >= 0 else None

    def end_offset_for_epoch(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's ``endOffsetFor``: (largest known epoch <= ``epoch``, end offset of it).

        * ``epoch`` is UNDEFINED, or larger than every known epoch (and not
          the latest): ``(-1, -1)``.
        * ``epoch`` is the latest epoch: ``(epoch, log_end_offset)``.
        * otherwise the end offset is the start offset of the first epoch
          after ``epoch``; the epoch returned is the largest known epoch <=
          ``epoch``, or ``epoch`` itself when it is older than every entry.
        """
        with self._lock:
            if epoch == UNDEFINED_EPOCH:
                return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            if self._epochs and self._epochs[-1] == epoch:
                return (epoch, log_end_offset)
            hi = bisect.bisect_right(self._epochs, epoch)  # first epoch > requested
            if hi == len(self._epochs):
                return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
            if hi == 0:
                return (epoch, self._starts[0])
            return (self._epochs[hi - 1], self._starts[hi])

    # ---- updates ----
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed (and was written)."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"leader epoch {epoch} / start offset {start_offset} must be >= 0")
        with self._lock:
            if self._epochs and not (epoch != self._epochs[-1] or start_offset < self._starts[-1]):
                return False
            while self._epochs and (self._epochs[-1] >= epoch or self._starts[-1] >= start_offset):
                self._epochs.pop()
                self._starts.pop()
            self._epochs.append(epoch)
            self._starts.append(start_offset)
            self._flush_locked()
            return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log was truncated there)."""
        with self._lock:
            if end_offset < 0 or not self._starts or self._starts[-1] < end_offset:
                return False
            k = bisect.bisect_left(self._starts, end_offset)
            del self._epochs[k:], self._starts[k:]
            self._flush_locked()
            return True

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: entries wholly before it collapse into one
        entry (the epoch in force at ``start_offset``) that starts there."""
        with self._lock:
            k = bisect.bisect_right(self._starts, start_offset)  # entries with start <= start_offset
            if k == 0:
                return False
            keep_epoch = self._epochs[k - 1]
            if k == 1 and self._starts[0] == start_offset:
                return False
            del self._epochs[:k], self._starts[:k]
            self._epochs.insert(0, keep_epoch)
            self._starts.insert(0, start_offset)
            self._flush_locked()
            return True

    def clear(self) -> None:
        with self._lock:
            self._epochs.clear()
            self._starts.clear()
            self._flush_locked()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        if self.path is not None:
            atomic_write(self.path, format_entries(zip(self._epochs, self._starts)), sync=self.sync)
