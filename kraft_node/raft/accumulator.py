"""The leader's batch accumulator: turns appends into log batches.

Why: writing (and fsyncing) one batch per append would make every controller
write pay a flush.  The accumulator assigns offsets at append time, keeps
filling the current batch for up to ``append.linger.ms`` (or until it is
full) and hands complete batches to the leader's poll, which appends and
flushes them together.

Invariants:

* Offsets are assigned densely from ``next_offset``; a batch is never split
  once an append placed records in it, so an *atomic* append lands in exactly
  one batch (all or nothing), while a non-atomic one may span batches.
* At most ``max_number_of_batches`` batches (completed + the open one) are
  held; an append that would need more raises :class:`BufferFullError`
  without changing anything (backpressure).
* Control batches (LeaderChange) are always complete batches of their own
  and are drained immediately.
"""
from __future__ import annotations

from kraft_node.raft.errors import BufferFullError, NotLeaderError, RecordBatchTooLargeError
from kraft_node.raft.messages import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES, Batch, ControlMessage


def _rec_size(r: bytes) -> int:
    return len(r) + RECORD_OVERHEAD_BYTES


class BatchAccumulator:
    def __init__(self, epoch: int, base_offset: int, linger_ms: int, max_batch_size_bytes: int,
                 max_number_of_batches: int):
        self.epoch = epoch
        self.next_offset = base_offset
        self.linger_ms = linger_ms
        self.max_batch_size = max_batch_size_bytes
        self.max_batches = max_number_of_batches
        self._completed: list[Batch] = []
        self._open: list[bytes] = []
        self._open_base = base_offset
        self._open_size = BATCH_OVERHEAD_BYTES
        self._open_since: int | None = None
        self._force_drain = False

    # ---- appends
    def append(self, epoch: int, records: list[bytes] | tuple[bytes, ...], now_ms: int,
               atomic: bool = True) -> int:
        """Queue ``records`` (bytes-like; kept by reference until the batch is written, so
        the caller must not change them); returns the offset of the last one.

        Raises NotLeaderError for a wrong epoch, RecordBatchTooLargeError if an
        atomic append (or a single record) cannot fit one batch, BufferFullError
        when the batch limit is reached.
        """
        if epoch != self.epoch:
            raise NotLeaderError(f"append for epoch {epoch} but the leader epoch is {self.epoch}")
        if type(records) is not tuple:
            records = tuple(records)
        if not records:
            raise ValueError("append needs at least one record")
        n = len(records)
        total = sum(map(len, records)) + n * RECORD_OVERHEAD_BYTES
        cap = self.max_batch_size - BATCH_OVERHEAD_BYTES
        if atomic and total > cap:
            raise RecordBatchTooLargeError(f"{n} records of {total} bytes exceed "
                                           f"the batch size {self.max_batch_size}")
        if atomic:
            # One batch holds the whole append: the common (controller) case costs
            # O(1) Python work per append, not per record.
            full = bool(self._open) and self._open_size + total > self.max_batch_size
            if len(self._completed) + (2 if full else 1) > self.max_batches:  # as _plan counts
                raise BufferFullError(f"{len(self._completed)} batches queued (max {self.max_batches})")
            if full:
                self._complete_open()
            if not self._open:
                self._open_since = now_ms
            self._open.extend(records)
            self._open_size += total
            self.next_offset += n
            return self.next_offset - 1
        sizes = [_rec_size(r) for r in records]
        if max(sizes) > cap:
            raise RecordBatchTooLargeError(f"a record of {max(sizes)} bytes exceeds the batch size")
        # Plan the placement first so a refused append changes nothing.
        plan = self._plan(sizes, atomic)
        if len(self._completed) + plan > self.max_batches:
            raise BufferFullError(f"{len(self._completed)} batches queued (max {self.max_batches})")
        for r, s in zip(records, sizes):
            if self._open and self._open_size + s > self.max_batch_size:
                self._complete_open()
            if not self._open:
                self._open_since = now_ms
            self._open.append(r)
            self._open_size += s
        self.next_offset += len(records)
        return self.next_offset - 1

    def _plan(self, sizes: list[int], atomic: bool) -> int:
        """Number of batches (open one included) held after placing ``sizes``."""
        open_size = self._open_size
        has_open = bool(self._open)
        batches = 1 if has_open else 0
        if atomic:
            total = sum(sizes)
            if has_open and open_size + total > self.max_batch_size:
                return batches + 1
            return max(batches, 1)
        for s in sizes:
            if has_open and open_size + s > self.max_batch_size:
                batches += 1
                open_size = BATCH_OVERHEAD_BYTES
            elif not has_open:
                batches += 1
                has_open = True
            open_size += s
            has_open = True
        return batches

    def append_control(self, control: ControlMessage, payload: bytes, now_ms: int) -> int:
        """Complete the open batch and add a one-record control batch, drained at once."""
        self._complete_open()
        b = Batch(self.next_offset, self.epoch, (payload,), True, control, now_ms)
        self._completed.append(b)
        self.next_offset += 1
        self._open_base = self.next_offset
        self._force_drain = True
        return b.base_offset

    def _complete_open(self) -> None:
        if self._open:
            self._completed.append(Batch(self._open_base, self.epoch, tuple(self._open), False, None,
                                         self._open_since or 0))
            self._open_base += len(self._open)
        self._open = []
        self._open_size = BATCH_OVERHEAD_BYTES
        self._open_since = None

    # ---- draining
    def time_until_drain(self, now_ms: int) -> int:
        """ms until ``drain`` has something to return (0 = now)."""
        if self._completed or self._force_drain:
            return 0
        if self._open and self._open_since is not None:
            return max(0, self._open_since + self.linger_ms - now_ms)
        return 2 ** 62

    def drain(self, now_ms: int) -> list[Batch]:
        """Return ready batches in offset order (the open one too once it lingered enough)."""
        # (_open_since is set whenever _open is non-empty: no None test on the drain path)
        if self._open and (self._force_drain or self._open_since + self.linger_ms <= now_ms):  # type: ignore[operator]
            self._complete_open()
        out, self._completed = self._completed, []
        self._force_drain = False
        return out

    def num_batches(self) -> int:
        return len(self._completed) + (1 if self._open else 0)
