"""Kafka's OffsetControlManager: the controller's three offsets, its registry snapshots,
and metadata transactions (KIP-868).

Offsets (all -1 until known):

* ``next_write_offset`` -- where the active controller's next record goes; -1 on a standby
  (``active`` is ``next_write_offset != -1``);
* ``last_committed_offset`` / ``last_committed_epoch`` -- the last record the Raft high
  watermark covers and the controller has seen committed;
* ``last_stable_offset`` -- what readers may see: the committed offset, held back to just
  before an open transaction (``min(transaction_start_offset - 1, last_committed_offset)``),
  so no reader ever sees half a transaction.

Registry snapshot invariants (``SnapshotRegistry`` epochs are offsets; a snapshot at E holds
the state after the record at E):

* there is always a snapshot at ``last_stable_offset`` -- the state a renounce reverts to
  (:meth:`deactivate`) and the one committed reads use;
* the active controller takes one at the last offset of every append it schedules
  (:meth:`handle_schedule_append`), so any prefix of uncommitted appends can be reverted; a
  committed batch that ends between two of them (Raft split an append) moves the stable
  offset only to the last one at or below it;
* snapshots below the stable offset are deleted as it advances (nothing can revert there);
* ``BeginTransactionRecord`` at offset O takes one at O - 1; ``AbortTransactionRecord``
  reverts to it, which undoes exactly the transaction's records.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

from kraft_node.metadata.controller.errors import ReplayError

log = logging.getLogger("kraft.controller.offsets")


def snapshot_name(offset: int, epoch: int) -> str:
    """Kafka's snapshot file stem for ``(offset, epoch)``: ``%020d-%010d``."""
    return f"{offset:020d}-{epoch:010d}"


class OffsetControlManager:
    def __init__(self, registry: Any, *, metrics: Any = None, clock_ms: Callable[[], int] = lambda: 0):
        self.registry = registry
        self.metrics = metrics
        self._clock_ms = clock_ms
        #: (offset, epoch) of the snapshot being loaded, None otherwise
        self.current_snapshot_id: tuple[int, int] | None = None
        self.last_committed_offset = -1
        self.last_committed_epoch = -1
        self.last_stable_offset = -1
        self.transaction_start_offset = -1
        self.next_write_offset = -1
        #: timestamp of the last applied record (metrics: LastAppliedRecordTimestamp / LagMs)
        self.last_applied_timestamp = -1
        #: registry snapshot epochs held by snapshot writers -> holders
        self._retained: dict[int, int] = {}
        registry.idempotent_create_snapshot(-1)
        self._metric("set_active", False)

    def _metric(self, name: str, *args: Any) -> None:
        if self.metrics is not None:
            getattr(self.metrics, name)(*args)

    @property
    def active(self) -> bool:
        return self.next_write_offset != -1

    @property
    def last_applied_offset(self) -> int:
        """The last offset replayed into memory: the last scheduled write on the active
        controller, the committed offset on a standby."""
        return self.next_write_offset - 1 if self.active else self.last_committed_offset

    # ---------------------------------------------------------------- leadership
    def activate(self, next_write_offset: int) -> None:
        """Become active with appends starting at ``next_write_offset``; takes the snapshot
        at the stable offset a later :meth:`deactivate` reverts to."""
        if self.active:
            raise RuntimeError("Can't activate already active OffsetControlManager.")
        if next_write_offset < 0:
            raise RuntimeError(f"Invalid negative newNextWriteOffset {next_write_offset}.")
        self.registry.idempotent_create_snapshot(self.last_stable_offset)
        self.next_write_offset = next_write_offset
        self._metric("set_active", True)

    def deactivate(self) -> None:
        """Stop being active: revert every collection to the last stable offset (the
        appended-but-uncommitted records, and an open transaction's, disappear)."""
        if not self.active:
            raise RuntimeError("Can't deactivate inactive OffsetControlManager.")
        self._metric("set_active", False)
        self.next_write_offset = -1
        if not self.registry.has_snapshot(self.last_stable_offset):
            raise RuntimeError(f"Unable to reset to last stable offset {self.last_stable_offset}. "
                               "No in-memory snapshot found for this offset.")
        self.registry.revert_to_snapshot(self.last_stable_offset)
        # Reverting to the stable offset also drops a transaction that began after it.
        if self.transaction_start_offset > self.last_stable_offset:
            self.transaction_start_offset = -1
        self._metric("set_last_applied", self.last_stable_offset, self.last_applied_timestamp)

    # ---------------------------------------------------------------- offsets
    def handle_schedule_append(self, last_offset: int) -> None:
        """The active controller replayed and scheduled records up to ``last_offset``."""
        self.next_write_offset = last_offset + 1
        self.registry.idempotent_create_snapshot(last_offset)
        self.last_applied_timestamp = self._clock_ms()
        self._metric("set_last_applied", last_offset, self.last_applied_timestamp)

    def handle_commit_batch(self, last_offset: int, epoch: int, append_time_ms: int) -> None:
        """A batch ending at ``last_offset`` committed (replayed first on a standby)."""
        self.last_committed_offset = last_offset
        self.last_committed_epoch = epoch
        self._maybe_advance_last_stable_offset()
        self._metric("set_last_committed", last_offset)
        if not self.active:
            self.last_applied_timestamp = append_time_ms
            self._metric("set_last_applied", last_offset, append_time_ms)

    def _maybe_advance_last_stable_offset(self) -> None:
        if self.transaction_start_offset == -1:
            new = self.last_committed_offset
        else:
            new = min(self.transaction_start_offset - 1, self.last_committed_offset)
        if self.active and not self.registry.has_snapshot(new):
            # The active controller has registry snapshots only where its appends ended; a
            # committed batch may end inside one (Raft may split a non-atomic append), so the
            # stable offset stops at the last append end at or below it -- reads stay
            # committed and a renounce can always revert there.
            new = max((e for e in self.registry.epochs() if e <= new), default=self.last_stable_offset)
        if self.last_stable_offset < new:
            self.last_stable_offset = new
            floor = min(self._retained) if self._retained else new
            self.registry.delete_snapshots_up_to(min(new, floor))
            if not self.active:
                self.registry.idempotent_create_snapshot(new)

    # ---------------------------------------------------------------- snapshots
    def retain_snapshot(self, epoch: int) -> None:
        """Keep the registry snapshot at ``epoch`` (a stable offset) while a snapshot writer
        reads from it: the stable offset moving on must not delete it."""
        self._retained[epoch] = self._retained.get(epoch, 0) + 1

    def release_snapshot(self, epoch: int) -> None:
        n = self._retained.get(epoch, 0) - 1
        if n <= 0:
            self._retained.pop(epoch, None)
        else:
            self._retained[epoch] = n

    def begin_load_snapshot(self, offset: int, epoch: int) -> None:
        """A Raft snapshot replaces everything: wipe the registry and the offsets."""
        if self.current_snapshot_id is not None:
            raise RuntimeError(f"Can't begin reading snapshot for {snapshot_name(offset, epoch)}, because we are "
                               f"already reading {snapshot_name(*self.current_snapshot_id)}")
        self.current_snapshot_id = (offset, epoch)
        log.info("Starting to load snapshot %s. Previous lastCommittedOffset was %d. Previous "
                 "transactionStartOffset was %d.", snapshot_name(offset, epoch), self.last_committed_offset,
                 self.transaction_start_offset)
        self.registry.reset()
        self._retained.clear()
        self.last_committed_offset = self.last_committed_epoch = self.last_stable_offset = -1
        self.transaction_start_offset = self.next_write_offset = -1

    def end_load_snapshot(self, timestamp_ms: int) -> None:
        """The snapshot ``(offset, epoch)`` holds the state up to offset - 1 (its records
        carry no offsets of their own): the committed and stable offsets become offset - 1."""
        if self.current_snapshot_id is None:
            raise RuntimeError("Can't end loading snapshot, because there is no current snapshot.")
        offset, epoch = self.current_snapshot_id
        log.info("Successfully loaded snapshot %s.", snapshot_name(offset, epoch))
        last = offset - 1
        self.registry.idempotent_create_snapshot(last)
        self.last_committed_offset = self.last_stable_offset = last
        self.last_committed_epoch = epoch
        self.transaction_start_offset = self.next_write_offset = -1
        self.last_applied_timestamp = timestamp_ms
        self._metric("set_last_committed", last)
        self._metric("set_last_applied", last, timestamp_ms)
        self.current_snapshot_id = None

    # ---------------------------------------------------------------- transactions
    def replay_begin_transaction(self, offset: int) -> None:
        if self.current_snapshot_id is not None:
            raise ReplayError("BeginTransactionRecord cannot appear within a snapshot.")
        if self.transaction_start_offset != -1:
            raise ReplayError(f"Can't replay a BeginTransactionRecord at {offset} because the transaction at "
                              f"{self.transaction_start_offset} was never closed.")
        self.registry.idempotent_create_snapshot(offset - 1)
        self.transaction_start_offset = offset
        log.info("Replayed BeginTransactionRecord at offset %d.", offset)

    def replay_end_transaction(self, offset: int) -> None:
        if self.current_snapshot_id is not None:
            raise ReplayError("EndTransactionRecord cannot appear within a snapshot.")
        if self.transaction_start_offset == -1:
            raise ReplayError(f"Can't replay an EndTransactionRecord at {offset} because there is no open "
                              "transaction.")
        self.transaction_start_offset = -1
        log.info("Replayed EndTransactionRecord at offset %d.", offset)

    def replay_abort_transaction(self, offset: int) -> None:
        if self.current_snapshot_id is not None:
            raise ReplayError("AbortTransactionRecord cannot appear within a snapshot.")
        if self.transaction_start_offset == -1:
            raise ReplayError(f"Can't replay an AbortTransactionRecord at {offset} because there is no open "
                              "transaction.")
        before = self.transaction_start_offset - 1
        self.registry.revert_to_snapshot(before)
        self.transaction_start_offset = -1
        log.info("Replayed AbortTransactionRecord at offset %d. Reverted to offset %d.", offset, before)
