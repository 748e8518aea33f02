"""The replicated log as the consensus core needs it, and an in-memory implementation.

Contract of :class:`RaftLog` (the real segmented log in ``kraft_storage`` will
be adapted to it):

* Offsets are dense integers.  The log holds the half-open range
  ``[start_offset, end_offset)``.  Offsets below ``start_offset`` exist only
  inside a snapshot; ``start_offset`` always equals the end offset of a
  retained snapshot when it is non-zero.
* Every record belongs to a :class:`~kraft_node.raft.messages.Batch`; all
  records of a batch share its epoch; epochs never decrease along the log.
* Durability: ``append_*`` may buffer.  Only ``[start_offset,
  flushed_end_offset)`` survives a crash; ``flush()`` makes everything
  appended so far durable before it returns.  ``truncate_to``,
  ``truncate_fully_and_start_at``, ``create_snapshot`` and ``delete_before``
  are durable when they return (the core relies on it: a truncated suffix must
  never reappear after a restart, and a snapshot must exist before the log
  prefix it replaces is dropped).
* Ownership: batches passed in and returned are immutable values; the log may
  keep references to them.
* The core is the only writer.  It never appends below ``end_offset`` and never
  truncates below its high watermark.
"""
from __future__ import annotations

import bisect
from typing import Iterator, Protocol, Sequence

from kraft_node.raft.messages import Batch, OffsetAndEpoch, SnapshotId
from kraft_node.raft.snapshot import FramedSnapshotReader


class FlushJob(Protocol):
    """A flush begun by :meth:`RaftLog.begin_flush`; ``end_offset`` is what it makes durable."""
    end_offset: int

    def run(self) -> object: ...


class RawSnapshotSink(Protocol):
    """Bytes of a snapshot being received, in order (``kraft_storage.snapshot.RawSnapshotWriter``)."""

    @property
    def size_in_bytes(self) -> int: ...

    def append(self, data: bytes) -> int: ...

    def freeze(self) -> object: ...

    def close(self) -> None: ...


class StoredSnapshot(Protocol):
    """What :meth:`RaftLog.open_snapshot` returns: an ``api.SnapshotReader`` (the data
    batches, handed to listeners) that also gives the core the snapshot's control batches."""

    snapshot_id: SnapshotId
    last_contained_log_time_ms: int | None

    def __iter__(self) -> Iterator[Batch]: ...

    def control_batches(self) -> Iterator[Batch]:
        """The snapshot's leading control batches (KRaftVersion, Voters: one control record
        each), read without the data that follows."""

    def close(self) -> None: ...


class RaftLog(Protocol):
    @property
    def start_offset(self) -> int:
        """First offset held in the log (the latest prefix snapshot's end offset, or 0)."""

    @property
    def end_offset(self) -> int:
        """One past the last appended offset, flushed or not (the LEO)."""

    @property
    def flushed_end_offset(self) -> int:
        """End of the durable prefix: ``start_offset <= flushed_end_offset <= end_offset``."""

    @property
    def last_fetched_epoch(self) -> int:
        """Epoch of the last record; the log-start snapshot's epoch if empty; 0 if neither."""

    def append_as_leader(self, batch: Batch) -> Batch | None:
        """Append a batch built by the leader; ``batch.base_offset`` must equal ``end_offset``.
        May return the batch as stored (e.g. with its encoded bytes) for the core to keep."""

    def append_as_follower(self, batches: Sequence[Batch]) -> None:
        """Append batches copied from the leader; the first must start at ``end_offset``."""

    def read(self, start_offset: int, max_bytes: int) -> tuple[Batch, ...]:
        """Batches covering ``[start_offset, end_offset)``, at least one if any, about ``max_bytes``."""

    def truncate_to(self, offset: int) -> None:
        """Drop ``[offset, end_offset)``; ``offset >= start_offset``.  Durable on return."""

    def truncate_fully_and_start_at(self, snapshot_id: SnapshotId) -> None:
        """Drop the whole log; it restarts empty at ``snapshot_id.offset`` (a stored snapshot)."""

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """The end of ``epoch`` in this log: ``(offset, e)`` where ``e`` is the largest
        epoch ``<= epoch`` present and ``offset`` is where the next larger epoch starts
        (or ``end_offset``).  If no such epoch exists in the log, the log start
        position ``(start_offset, snapshot epoch or 0)``."""

    def flush(self) -> None:
        """Make ``[start_offset, end_offset)`` durable."""

    def begin_flush(self) -> "FlushJob | None":
        """Start making ``[start_offset, end_offset)`` durable off the caller's thread: a job
        whose ``run()`` (any thread) does the work, or None when nothing is unflushed.
        Called only when the core's flush policy asks for jobs (flush.py)."""

    def complete_flush(self, job: "FlushJob") -> bool:
        """The job ran: advance ``flushed_end_offset`` to its end and return True, or
        return False if a truncation since ``begin_flush`` voided it."""

    def update_high_watermark(self, offset: int) -> None:
        """Record the commit point (informational for the log, e.g. its recovery point)."""

    def latest_snapshot_id(self) -> SnapshotId | None: ...

    def open_snapshot(self, snapshot_id: SnapshotId) -> StoredSnapshot | None:
        """A reader of a stored snapshot (None if not stored), decoding one batch at a time;
        the caller closes it.  A damaged snapshot raises an error naming it and the position."""

    def read_snapshot_range(self, snapshot_id: SnapshotId, position: int,
                            max_bytes: int) -> tuple[int, bytes] | None:
        """``(size, chunk)`` of a stored snapshot: its size in bytes and up to ``max_bytes``
        from ``position`` (empty unless ``0 <= position < size``); None if not stored.
        Reads only that range: what the leader serves FetchSnapshot from."""

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        """Store a complete (frozen) snapshot covering offsets ``[0, snapshot_id.offset)``."""

    def create_raw_snapshot(self, snapshot_id: SnapshotId) -> "RawSnapshotSink":
        """A snapshot received in slices (a follower's FetchSnapshot transfer; Kafka's
        ``createNewSnapshotUnchecked``): not visible until ``freeze()`` (durable on return,
        then ``latest_snapshot_id`` may name it); ``close()`` before that aborts it."""

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        """Advance ``start_offset`` to a stored snapshot's offset, dropping older records."""


class MemoryFlushJob:
    """A flush of a :class:`MemoryRaftLog` up to ``end_offset`` (nothing to do off-loop)."""

    __slots__ = ("end_offset", "truncations", "done", "error")

    def __init__(self, end_offset: int, truncations: int):
        self.end_offset = end_offset
        self.truncations = truncations
        self.done = False
        self.error = None

    def run(self) -> "MemoryFlushJob":
        self.done = True
        return self


class MemorySnapshotWriter:
    """A snapshot of a :class:`MemoryRaftLog` received in slices: stored on ``freeze()``;
    dropped by ``close()`` before that, or by a crash (it was never in the log)."""

    def __init__(self, log: "MemoryRaftLog", snapshot_id: SnapshotId):
        self._log, self.snapshot_id = log, snapshot_id
        self._buf = bytearray()
        self._done = False

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    def append(self, data: bytes) -> int:
        if self._done:
            raise ValueError(f"snapshot {self.snapshot_id} writer is closed")
        self._buf += data
        return len(self._buf)

    def freeze(self) -> None:
        if self._done:
            raise ValueError(f"snapshot {self.snapshot_id} writer is closed")
        self._done = True
        self._log._snapshots[self.snapshot_id] = bytes(self._buf)

    def close(self) -> None:
        self._done = True


class MemoryRaftLog:
    """An in-memory :class:`RaftLog` that models unflushed data.

    The batches list is the log as the process sees it; ``flushed_end_offset``
    marks how much of it a crash keeps.  :meth:`after_crash` returns the log a
    restarted process would find.  Snapshots and truncations are durable at once.

    Invariant: ``_bases[i] == _batches[i].base_offset``, batches are contiguous
    from ``start_offset`` to ``end_offset`` and epochs are non-decreasing.
    """

    def __init__(self) -> None:
        self._batches: list[Batch] = []
        self._bases: list[int] = []
        self._start = 0
        self._end = 0
        self._flushed = 0
        self._truncations = 0
        self._snapshots: dict[SnapshotId, bytes] = {}
        self.high_watermark = 0
        self.flush_count = 0
        #: model KafkaRaftLog's write-behind: count leader appends in the last batch's epoch
        #: as pending until something writes them (no other effect: they are unflushed data).
        #: Not part of the RaftLog contract: the simulator's flush policy and driver use it
        #: as the TCP driver uses KafkaRaftLog's.
        self.write_behind = False
        self._pending = 0

    # ---- write-behind (see KafkaRaftLog; the simulator's, not the core's)
    @property
    def pending_writes(self) -> int:
        return self._pending

    def write_pending(self) -> None:
        self._pending = 0

    # ---- positions
    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        return self._end

    @property
    def flushed_end_offset(self) -> int:
        return self._flushed

    def _start_epoch(self) -> int:
        for sid in self._snapshots:
            if sid.offset == self._start:
                return sid.epoch
        return 0

    @property
    def last_fetched_epoch(self) -> int:
        if self._batches:
            return self._batches[-1].epoch
        return self._start_epoch()

    # ---- writes
    def _check_append(self, batch: Batch) -> None:
        if batch.base_offset != self._end:
            raise ValueError(f"append at offset {batch.base_offset} but log end offset is {self._end}")
        if not batch.records:
            raise ValueError(f"empty batch at offset {batch.base_offset}")
        if batch.epoch < self.last_fetched_epoch:
            raise ValueError(f"batch epoch {batch.epoch} at offset {batch.base_offset} is below "
                             f"the log's last epoch {self.last_fetched_epoch}")

    def _append(self, batch: Batch) -> None:
        self._check_append(batch)
        self._batches.append(batch)
        self._bases.append(batch.base_offset)
        self._end = batch.next_offset

    def append_as_leader(self, batch: Batch) -> None:
        same_epoch = bool(self._batches) and self._batches[-1].epoch == batch.epoch
        self._append(batch)
        self._pending = self._pending + 1 if self.write_behind and same_epoch else 0

    def append_as_follower(self, batches: Sequence[Batch]) -> None:
        self._pending = 0
        for b in batches:
            self._append(b)

    def flush(self) -> None:
        self._pending = 0
        self._flushed = self._end
        self.flush_count += 1

    def begin_flush(self) -> "MemoryFlushJob | None":
        """The split flush a driver runs off its loop (see ``KafkaLog.begin_flush``); the
        simulator completes it after a virtual delay, or loses it in a crash."""
        self._pending = 0
        if self._flushed >= self._end:
            return None
        return MemoryFlushJob(self._end, self._truncations)

    def complete_flush(self, job: "MemoryFlushJob") -> bool:
        if job.truncations != self._truncations or job.end_offset > self._end:
            return False  # truncated meanwhile: the bytes the job covered may be gone
        if job.end_offset > self._flushed:
            self._flushed = job.end_offset
            self.flush_count += 1
        return True

    def truncate_to(self, offset: int) -> None:
        if offset < self._start:
            raise ValueError(f"cannot truncate to {offset}, below log start offset {self._start}")
        if offset >= self._end:
            return
        self._pending = 0
        self._truncations += 1
        i = bisect.bisect_right(self._bases, offset) - 1
        keep = self._batches[:i]
        b = self._batches[i]
        if b.base_offset < offset:
            keep.append(Batch(b.base_offset, b.epoch, b.records[:offset - b.base_offset],
                              b.is_control, b.control, b.append_time_ms))
        self._batches = keep
        self._bases = [x.base_offset for x in keep]
        self._end = offset
        self._flushed = min(self._flushed, offset)

    def truncate_fully_and_start_at(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no stored snapshot {snapshot_id} to restart the log at")
        self._pending = 0
        self._truncations += 1
        self._batches = []
        self._bases = []
        self._start = self._end = self._flushed = snapshot_id.offset

    # ---- reads
    def read(self, start_offset: int, max_bytes: int) -> tuple[Batch, ...]:
        if start_offset < self._start or start_offset > self._end:
            raise ValueError(f"read at {start_offset} outside log [{self._start}, {self._end})")
        if start_offset == self._end:
            return ()
        i = bisect.bisect_right(self._bases, start_offset) - 1
        out: list[Batch] = []
        size = 0
        while i < len(self._batches):
            b = self._batches[i]
            if b.base_offset < start_offset:
                b = Batch(start_offset, b.epoch, b.records[start_offset - b.base_offset:],
                          b.is_control, b.control, b.append_time_ms)
            if out and size + b.size_in_bytes > max_bytes:
                break
            out.append(b)
            size += b.size_in_bytes
            i += 1
        return tuple(out)

    def batches(self) -> tuple[Batch, ...]:
        """All batches in the log (test/simulator helper)."""
        return tuple(self._batches)

    def entry_at(self, offset: int) -> tuple[int, bytes]:
        """``(epoch, record)`` at ``offset`` (simulator helper)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        b = self._batches[i]
        return b.epoch, b.records[offset - b.base_offset]

    def batch_at(self, offset: int) -> Batch:
        """The stored batch holding ``offset`` (simulator helper)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._batches[i]

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        # Batches are few enough per epoch that scanning epoch boundaries from the
        # end is cheap; most lookups ask for the latest epoch.
        found = None
        for idx in range(len(self._batches) - 1, -1, -1):
            b = self._batches[idx]
            if b.epoch <= epoch:
                found = b.epoch
                break
        if found is None:
            return OffsetAndEpoch(self._start, self._start_epoch())
        # end of `found` = base offset of the first batch with a larger epoch
        j = idx + 1
        end = self._batches[j].base_offset if j < len(self._batches) else self._end
        return OffsetAndEpoch(end, found)

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset

    # ---- snapshots
    def latest_snapshot_id(self) -> SnapshotId | None:
        return max(self._snapshots, key=lambda s: (s.offset, s.epoch)) if self._snapshots else None

    def earliest_snapshot_id(self) -> SnapshotId | None:
        return min(self._snapshots, key=lambda s: (s.offset, s.epoch)) if self._snapshots else None

    def read_snapshot(self, snapshot_id: SnapshotId) -> bytes | None:
        """A stored snapshot's bytes whole (test helper; not in the contract)."""
        return self._snapshots.get(snapshot_id)

    def open_snapshot(self, snapshot_id: SnapshotId) -> FramedSnapshotReader | None:
        data = self._snapshots.get(snapshot_id)
        if data is None:
            return None
        return FramedSnapshotReader(snapshot_id, data, f"memory snapshot ({snapshot_id.offset}, {snapshot_id.epoch})")

    def read_snapshot_range(self, snapshot_id: SnapshotId, position: int,
                            max_bytes: int) -> tuple[int, bytes] | None:
        data = self._snapshots.get(snapshot_id)
        if data is None:
            return None
        return len(data), (data[position:position + max_bytes] if 0 <= position < len(data) else b"")

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None:
        self._snapshots[snapshot_id] = bytes(data)

    def create_raw_snapshot(self, snapshot_id: SnapshotId) -> "MemorySnapshotWriter":
        return MemorySnapshotWriter(self, snapshot_id)

    def delete_before(self, snapshot_id: SnapshotId) -> None:
        if snapshot_id not in self._snapshots:
            raise ValueError(f"no stored snapshot {snapshot_id}")
        off = snapshot_id.offset
        if off <= self._start:
            return
        if off > self._end:
            raise ValueError(f"snapshot {snapshot_id} is beyond the log end offset {self._end}")
        i = bisect.bisect_right(self._bases, off) - 1
        rest = self._batches[i:] if i >= 0 else list(self._batches)
        if rest and rest[0].base_offset < off:
            b = rest[0]
            rest[0] = Batch(off, b.epoch, b.records[off - b.base_offset:], b.is_control, b.control,
                            b.append_time_ms)
            if not rest[0].records:
                rest.pop(0)
        self._batches = [b for b in rest if b.records]
        self._bases = [b.base_offset for b in self._batches]
        self._start = off
        self._flushed = max(self._flushed, off)
        # Older snapshots are no longer needed once the log starts at this one.
        for sid in [s for s in self._snapshots if s.offset < off]:
            del self._snapshots[sid]

    # ---- crash model
    def after_crash(self) -> "MemoryRaftLog":
        """The log a restarted process finds: everything past ``flushed_end_offset`` is lost."""
        new = MemoryRaftLog()
        new._snapshots = dict(self._snapshots)
        new._start = self._start
        keep = []
        for b in self._batches:
            if b.next_offset <= self._flushed:
                keep.append(b)
            elif b.base_offset < self._flushed:
                keep.append(Batch(b.base_offset, b.epoch, b.records[:self._flushed - b.base_offset],
                                  b.is_control, b.control, b.append_time_ms))
        new._batches = keep
        new._bases = [b.base_offset for b in keep]
        new._end = new._flushed = max(self._flushed, self._start)
        new.write_behind = self.write_behind
        return new
