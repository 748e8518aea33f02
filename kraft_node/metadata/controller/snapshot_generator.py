"""Snapshots of the controller's committed state (Kafka's ``metadata.log.max.*`` snapshot policy),
for a QuorumController that runs without a metadata loader.

Who uses it (issue 23 item 5): on a node, snapshots are written by the metadata loader's
SnapshotGenerator from the published image (``kraft_node/metadata/loader/publishers.py``), as Kafka
3.5+ does, and ``ControllerServer`` leaves the QuorumController without this generator.  It is kept
for the controller simulator (``sim.py``), whose controllers have no loader and whose seeds rely
on small-threshold snapshots to exercise standby snapshot loads, and for the unit tests and
benchmarks that drive a QuorumController alone (tests/metadata, bench_controller_snapshot.py).

When ``max_bytes_between_snapshots`` of records (Kafka's
``metadata.log.max.record.bytes.between.snapshots``, 20 MiB) have committed since the last
snapshot, or ``max_interval_ms`` (``metadata.log.max.snapshot.interval.ms``, 1 h) has passed
and there is something new, the controller writes a Kafka ``.checkpoint`` of its state at the
stable offset through the Raft snapshot API.  Freezing it drops the log prefix it covers,
so the metadata log stops growing without bound.

Why in slices: the state is read from a *frozen* registry snapshot (the stable offset's,
which :class:`OffsetControlManager` keeps while the writer holds it), so the controller goes
on writing while the snapshot is written; each slice -- at most ``records_per_slice``
(500) records, or ``slice_budget_ns`` (5 ms) of the queue's clock -- is one event on the
controller's queue, and the freeze (encoding the last batch, writing and fsyncing it) is an
event of its own, so no event holds the loop for long (measured: BENCHMARKS.md, the
10k-broker snapshot row).  Only
when no metadata transaction is open (the stable offset is then the committed offset, and
its epoch is known).  A snapshot load, or a fault, aborts a snapshot in progress.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Iterator

from kraft_node.metadata.controller.offset_control import snapshot_name
from kraft_node.raft.messages import SnapshotId

if TYPE_CHECKING:
    from kraft_node.metadata.controller.quorum_controller import QuorumController

log = logging.getLogger("kraft.controller.snapshots")

DEFAULT_MAX_BYTES = 20 * 1024 * 1024
DEFAULT_MAX_INTERVAL_MS = 60 * 60 * 1000


class SnapshotGenerator:
    def __init__(self, ctl: "QuorumController", *, max_bytes_between_snapshots: int = DEFAULT_MAX_BYTES,
                 max_interval_ms: int = DEFAULT_MAX_INTERVAL_MS, records_per_slice: int = 500,
                 slice_budget_ns: int = 5_000_000):
        self.ctl = ctl
        self.max_bytes = max_bytes_between_snapshots
        self.max_interval_ms = max_interval_ms
        self.records_per_slice = records_per_slice
        #: a slice also ends once this much of the queue's clock has passed (checked every 64
        #: records); the simulator's clock stands still within an event, so there only the
        #: record count ends a slice
        self.slice_budget_ns = slice_budget_ns
        #: every record is in the writer: the next slice event freezes (an event of its own)
        self._exhausted = False
        self.bytes_since_snapshot = 0
        self.last_snapshot_ms = ctl.clock_ms()
        #: the offset (exclusive) of the last snapshot written or loaded
        self.last_snapshot_offset = 0
        self._writer: Any = None
        self._records: Iterator[Any] | None = None
        self._frozen_epoch = -1
        self.snapshots_written = 0
        #: (snapshot id, records, slices) of each snapshot written, for logs and tests
        self.history: list[tuple[SnapshotId, int, int]] = []
        self._count = 0
        self._slices = 0

    @property
    def in_progress(self) -> bool:
        return self._writer is not None

    def committed(self, nbytes: int) -> None:
        """Records of ``nbytes`` committed: maybe start a snapshot."""
        self.bytes_since_snapshot += nbytes
        if self._writer is not None:
            return
        now = self.ctl.clock_ms()
        due = self.bytes_since_snapshot >= self.max_bytes or \
            (self.bytes_since_snapshot > 0 and now - self.last_snapshot_ms >= self.max_interval_ms)
        if due:
            self.maybe_begin(reason="bytes" if self.bytes_since_snapshot >= self.max_bytes else "interval")

    def maybe_begin(self, reason: str = "requested") -> bool:
        """Start a snapshot at the stable offset if one can be written now."""
        ctl = self.ctl
        oc = ctl.offset_control
        if self._writer is not None or oc.transaction_start_offset != -1:
            return False
        lso = oc.last_stable_offset
        if lso < 0 or lso + 1 <= self.last_snapshot_offset or lso != oc.last_committed_offset:
            return False
        sid = SnapshotId(lso + 1, oc.last_committed_epoch)
        try:
            writer = ctl.raft.create_snapshot(sid)
        except Exception as exc:  # the log moved (a newer snapshot), or the epoch is not in the log
            log.info("Not writing snapshot %s now: %s", snapshot_name(sid.offset, sid.epoch), exc)
            return False
        if writer is None:
            return False
        oc.retain_snapshot(lso)
        self._frozen_epoch = lso
        self._writer = writer
        self._records = iter(ctl.snapshot_records(lso))
        self._count = self._slices = 0
        self._exhausted = False
        log.info("Writing snapshot %s of the committed state (%s: %d bytes since the last one).",
                 snapshot_name(sid.offset, sid.epoch), reason, self.bytes_since_snapshot)
        self._schedule_slice()
        return True

    def _schedule_slice(self) -> None:
        from kraft_node.metadata.controller.quorum_controller import _ControlEvent
        self.ctl.queue.append(_ControlEvent(self.ctl, "writeSnapshotSlice", self._slice))

    def _slice(self) -> None:
        if self._writer is None or self._records is None:
            return
        try:
            if self._exhausted:
                # The freeze encodes the last (up to 8 MiB) batch, writes and fsyncs it: an
                # event of its own, not on top of a slice's worth of records.
                self._finish()
                return
            values = []
            now_ns = self.ctl.queue.now_ns
            deadline = now_ns() + self.slice_budget_ns
            for rec in self._records:
                values.append(rec.encode())
                if len(values) >= self.records_per_slice or (len(values) % 64 == 0 and now_ns() >= deadline):
                    break
            else:
                self._exhausted = True
            if values:
                self._writer.append(values)
                self._count += len(values)
                self._slices += 1
            self._schedule_slice()
        except BaseException:
            self.abort("a write failed")
            raise

    def _finish(self) -> None:
        w = self._writer
        sid = w.snapshot_id
        w.freeze()
        w.close()
        self._release()
        self.snapshots_written += 1
        self.history.append((sid, self._count, self._slices))
        self.last_snapshot_offset = sid.offset
        self.last_snapshot_ms = self.ctl.clock_ms()
        self.bytes_since_snapshot = 0
        log.info("Wrote snapshot %s: %d records in %d slices.", snapshot_name(sid.offset, sid.epoch),
                 self._count, self._slices)

    def _release(self) -> None:
        self._writer = None
        self._records = None
        self._exhausted = False
        if self._frozen_epoch >= 0:
            self.ctl.offset_control.release_snapshot(self._frozen_epoch)
        self._frozen_epoch = -1

    def abort(self, why: str) -> None:
        if self._writer is None:
            return
        sid = self._writer.snapshot_id
        log.warning("Aborting snapshot %s: %s.", snapshot_name(sid.offset, sid.epoch), why)
        try:
            self._writer.close()
        finally:
            self._release()

    def loaded(self, sid: SnapshotId, _timestamp_ms: int) -> None:
        """A Raft snapshot replaced the state (the registry was reset under any writer)."""
        if self._writer is not None:
            self._writer = None
            self._records = None
            self._frozen_epoch = -1
        self.last_snapshot_offset = sid.offset
        self.last_snapshot_ms = self.ctl.clock_ms()
        self.bytes_since_snapshot = 0
