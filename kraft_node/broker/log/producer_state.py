"""Kafka's ProducerStateManager: per-partition state of idempotent producers, and its snapshot files.

Why: an idempotent producer retries a batch it got no answer for, so the partition leader must
recognise a batch it has already appended (and answer with the offsets it got the first time)
and refuse one that skips ahead (a lost batch) or comes from a fenced, older producer epoch.
Kafka keeps, per producer id, the epoch, the metadata of its last 5 batches (sequence range,
offsets, timestamp) and decides from them; ``ProducerStateEntry`` and ``ProducerAppendInfo``
here are those.  The state must survive a restart, or a retry after a broker restart would be
appended twice: it is written to ``<offset>.snapshot`` files at segment roll and on close, and
loaded from the latest valid one, then rebuilt from the log after it.

The rules (Kafka's ``ProducerAppendInfo``), for a batch of producer ``pid`` with epoch ``e`` and
sequences ``[first, last]``:

* duplicate (leader, client data): the entry's epoch is ``e`` and one of the 5 cached batches
  has exactly ``[first, last]`` -> not appended again; the response carries the cached offsets
  (Kafka 3.x answers NONE, not DUPLICATE_SEQUENCE_NUMBER);
* ``e`` below the entry's epoch -> INVALID_PRODUCER_EPOCH (Kafka >= 2.7 answers this, not
  PRODUCER_FENCED, on Produce); on the replication path it is only logged;
* client data, ``e`` newer than the entry's: ``first`` must be 0 unless the entry has no epoch;
* client data, same epoch: ``first`` must follow the last sequence (``2^31-1`` wraps to 0),
  except when the entry has no epoch (its batches were removed, e.g. by retention) -- then any
  sequence is accepted.  A producer with no entry (never seen or expired) starts anywhere: Kafka
  3.x no longer answers UNKNOWN_PRODUCER_ID on Produce (KIP-360);
* otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.

Snapshot file (Kafka's ``ProducerSnapshot`` message v1, big-endian, not flexible)::

    0  version      int16   = 1
    2  crc          uint32  CRC-32C of bytes [6, end)
    6  count        int32   number of entries
    10 entries      count x 46 bytes:
         producerId i64 | epoch i16 | lastSequence i32 | lastOffset i64 | offsetDelta i32 |
         timestamp i64 | coordinatorEpoch i32 | currentTxnFirstOffset i64 (-1: none)

File name: the map end offset (the next offset not yet covered) zero-padded to 20 digits, then
``.snapshot`` (Kafka's ``LogFileUtils.producerSnapshotFile``).  Invariant: a snapshot named
``N`` holds the state of every batch below offset ``N``.  Files are written to a ``.tmp`` name,
fsynced and renamed, so a crash leaves either the old set of snapshots or the new one.

One ProducerStateManager per partition log, used under the partition's lock (not thread safe).
Transactions are out of scope: ``currentTxnFirstOffset`` and ``coordinatorEpoch`` are kept
(read from and written to snapshots as Kafka does) but no transaction is ever started here.
"""
from __future__ import annotations

import enum
import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from kraft_node.protocol.errors import Errors
from kraft_storage.crc32c import crc32c
from kraft_storage.errors import CorruptRecordError
from kraft_storage.record.batch import CRC_SKIP, scan_batches
from kraft_storage.record.constants import CONTROL_MASK, TRANSACTIONAL_MASK

if TYPE_CHECKING:
    from kraft_node.broker.log.validator import ValidationResult
    from kraft_storage.log.log import AppendInfo, KafkaLog

__all__ = ["AppendOrigin", "BatchMetadata", "CorruptSnapshotError", "ProducerAppendInfo", "ProducerStateEntry",
           "ProducerStateError", "ProducerStateManager", "ProducerStateManagerConfig", "SNAPSHOT_SUFFIX",
           "NUM_BATCHES_TO_RETAIN", "read_snapshot", "write_snapshot", "snapshot_path", "decrement_sequence",
           "LeaderAppend", "append_validated_as_leader", "append_replicated_as_follower"]

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_INT32_MAX = 2**31 - 1
_NO_PRODUCER_EPOCH = -1
_NO_SEQUENCE = -1
_NO_TIMESTAMP = -1
#: Kafka's ``producer.id.expiration.ms`` default: one day
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000

_VERSION_AND_CRC = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = 6  # the CRC covers everything from here on
assert _ENTRY.size == 46


def decrement_sequence(sequence: int, decrement: int) -> int:
    """Kafka's ``DefaultRecordBatch.decrementSequence``: sequences wrap at 2^31-1."""
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


class AppendOrigin(enum.Enum):
    """Who appends: a client through Produce (fully validated) or a replica fetcher / log
    recovery (epochs and sequences already validated by the leader)."""
    CLIENT = "client"
    REPLICATION = "replication"


class ProducerStateError(Exception):
    """A batch refused by the producer state: ``error`` is the partition's error code
    (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE), ``message`` Kafka's text."""

    def __init__(self, error: Errors, message: str) -> None:
        self.error = error
        self.message = message
        super().__init__(f"{error.name}: {message}")


class CorruptSnapshotError(Exception):
    """A producer snapshot file cannot be read; the message names the file and what is wrong."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"producer snapshot {path}: {reason}")


class BatchMetadata(NamedTuple):
    """One cached batch of a producer (Kafka's BatchMetadata)."""
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class ProducerStateEntry:
    """The state of one producer id: epoch, the last (up to 5) batches, lowest sequence first."""

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batch_metadata")

    def __init__(self, producer_id: int, producer_epoch: int = _NO_PRODUCER_EPOCH, coordinator_epoch: int = -1,
                 last_timestamp: int = _NO_TIMESTAMP, current_txn_first_offset: int | None = None,
                 first_batch: BatchMetadata | None = None) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(maxlen=NUM_BATCHES_TO_RETAIN)
        if first_batch is not None:
            self.batch_metadata.append(first_batch)

    @property
    def is_empty(self) -> bool:
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else _NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else _NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def copy_without_batches(self) -> ProducerStateEntry:
        """Kafka's ``withProducerIdAndBatchMetadata(id, empty)``: the epochs and times, no batches."""
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset)

    def maybe_update_producer_epoch(self, producer_epoch: int) -> bool:
        """A new epoch forgets the cached batches (their sequences belong to the old epoch)."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch
            return True
        return False

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int, offset_delta: int,
                  timestamp: int) -> None:
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def update(self, nxt: ProducerStateEntry) -> None:
        """Take ``nxt``'s epoch, batches (appended after ours) and times (Kafka's ``update``)."""
        self.maybe_update_producer_epoch(nxt.producer_epoch)
        self.batch_metadata.extend(nxt.batch_metadata)
        self.coordinator_epoch = nxt.coordinator_epoch
        self.current_txn_first_offset = nxt.current_txn_first_offset
        self.last_timestamp = nxt.last_timestamp

    def find_duplicate_batch(self, producer_epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this sequence range in this epoch, if any."""
        if producer_epoch != self.producer_epoch:
            return None
        for b in self.batch_metadata:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return (self.producer_id, self.producer_epoch, self.coordinator_epoch, self.last_timestamp,
                self.current_txn_first_offset, list(self.batch_metadata)) == (
            other.producer_id, other.producer_epoch, other.coordinator_epoch, other.last_timestamp,
            other.current_txn_first_offset, list(other.batch_metadata))

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producerId={self.producer_id}, producerEpoch={self.producer_epoch}, "
                f"currentTxnFirstOffset={self.current_txn_first_offset}, coordinatorEpoch={self.coordinator_epoch}, "
                f"lastTimestamp={self.last_timestamp}, batchMetadata={list(self.batch_metadata)})")


class ProducerAppendInfo:
    """The checks and the new state for one producer's batches in one append (Kafka's
    ProducerAppendInfo).  Built by :meth:`ProducerStateManager.prepare_update`; once the data is in
    the log, :meth:`ProducerStateManager.update` makes the new state current."""

    __slots__ = ("topic_partition", "producer_id", "current_entry", "origin", "updated_entry")

    def __init__(self, topic_partition: str, producer_id: int, current_entry: ProducerStateEntry,
                 origin: AppendOrigin) -> None:
        self.topic_partition = topic_partition
        self.producer_id = producer_id
        self.current_entry = current_entry
        self.origin = origin
        self.updated_entry = current_entry.copy_without_batches()

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        if producer_epoch < self.updated_entry.producer_epoch:
            message = (f"Epoch of producer {self.producer_id} at offset {offset} in {self.topic_partition} is "
                       f"{producer_epoch}, which is smaller than the last seen epoch "
                       f"{self.updated_entry.producer_epoch}")
            if self.origin == AppendOrigin.REPLICATION:
                log.warning(message)
            else:
                raise ProducerStateError(Errors.INVALID_PRODUCER_EPOCH, message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated_entry, self.current_entry
        if producer_epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != _NO_PRODUCER_EPOCH:
                # (Kafka's message has no space before "at offset"; kept as Kafka prints it)
                raise ProducerStateError(
                    Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"Invalid sequence number for new epoch of producer {self.producer_id}at offset {offset} in "
                    f"partition {self.topic_partition}: {producer_epoch} (request epoch), {first_seq} (seq. number), "
                    f"{updated.producer_epoch} (current producer epoch)")
            return
        if not updated.is_empty:
            current_last = updated.last_seq
        elif producer_epoch == current.producer_epoch:
            current_last = current.last_seq
        else:
            current_last = _NO_SEQUENCE
        in_sequence = first_seq == current_last + 1 or (first_seq == 0 and current_last == _INT32_MAX)
        if not (current.producer_epoch == _NO_PRODUCER_EPOCH or in_sequence):
            raise ProducerStateError(
                Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"Out of order sequence number for producer {self.producer_id} at offset {offset} in partition "
                f"{self.topic_partition}: {first_seq} (incoming seq. number), {current_last} "
                "(current end sequence number)")

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        """Check one data batch (epoch; sequence for client data) and add it to the new state."""
        self._check_producer_epoch(epoch, first_offset)
        if self.origin == AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        self.updated_entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if self.updated_entry.current_txn_first_offset is not None and not is_transactional:
            raise ProducerStateError(
                Errors.INVALID_TXN_STATE,
                f"Expected transactional write from producer {self.producer_id} at offset {first_offset} in "
                f"partition {self.topic_partition}")
        if self.updated_entry.current_txn_first_offset is None and is_transactional:
            self.updated_entry.current_txn_first_offset = first_offset

    def to_entry(self) -> ProducerStateEntry:
        return self.updated_entry

    def __repr__(self) -> str:
        e = self.updated_entry
        return (f"ProducerAppendInfo(producerId={self.producer_id}, producerEpoch={e.producer_epoch}, "
                f"firstSequence={e.first_seq}, lastSequence={e.last_seq}, lastTimestamp={e.last_timestamp})")


@dataclass(frozen=True, slots=True)
class ProducerStateManagerConfig:
    """``producer.id.expiration.ms``: a producer with no write for this long is forgotten (Kafka's
    default: one day).  (``transactional.id.expiration.ms`` is the transaction coordinator's, which
    kraft does not have; it does not apply to partitions.)"""
    producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS

    def __post_init__(self) -> None:
        if self.producer_id_expiration_ms < 1:
            raise ValueError(f"producer.id.expiration.ms must be >= 1, not {self.producer_id_expiration_ms}")


# ------------------------------------------------------------------ snapshot files
def snapshot_path(log_dir: str, offset: int) -> str:
    """``<log_dir>/<offset as 20 digits>.snapshot``."""
    return os.path.join(log_dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")


def _offset_from_name(name: str) -> int | None:
    stem = name[:-len(SNAPSHOT_SUFFIX)] if name.endswith(SNAPSHOT_SUFFIX) else ""
    return int(stem) if stem.isdigit() else None


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """The bytes of a snapshot file holding ``entries`` (in producer id order)."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = bytearray(_COUNT.pack(len(ordered)))
    for e in ordered:
        body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_seq, e.last_data_offset, e.last_offset_delta,
                            e.last_timestamp, e.coordinator_epoch,
                            -1 if e.current_txn_first_offset is None else e.current_txn_first_offset)
    return _VERSION_AND_CRC.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)


def decode_snapshot(data: bytes, path: str = "<bytes>") -> list[ProducerStateEntry]:
    """Parse a snapshot file's bytes; raises :class:`CorruptSnapshotError` naming ``path``."""
    if len(data) < 2:
        raise CorruptSnapshotError(path, f"Snapshot failed schema validation: {len(data)} bytes, no version")
    (version,) = struct.unpack_from(">h", data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(path, f"Snapshot contained an unknown file version {version}")
    if len(data) < _ENTRIES_OFFSET + _COUNT.size:
        raise CorruptSnapshotError(path, f"Snapshot failed schema validation: {len(data)} bytes, "
                                         f"shorter than the {_ENTRIES_OFFSET + _COUNT.size}-byte header")
    _v, stored = _VERSION_AND_CRC.unpack_from(data, 0)
    (count,) = _COUNT.unpack_from(data, _ENTRIES_OFFSET)
    if count < 0:
        raise CorruptSnapshotError(path, f"Snapshot failed schema validation: entry count {count}")
    need = _ENTRIES_OFFSET + _COUNT.size + count * _ENTRY.size
    if len(data) < need:
        raise CorruptSnapshotError(path, f"Snapshot failed schema validation: {count} entries need {need} bytes, "
                                         f"the file has {len(data)}")
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if computed != stored:
        raise CorruptSnapshotError(path, f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. "
                                         f"Computed crc: {computed}")
    out = []
    pos = _ENTRIES_OFFSET + _COUNT.size
    for pid, epoch, last_seq, last_offset, delta, ts, coord, txn_first in _ENTRY.iter_unpack(data[pos:need]):
        batch = BatchMetadata(last_seq, last_offset, delta, ts) if last_offset >= 0 else None
        out.append(ProducerStateEntry(pid, epoch, coord, ts, txn_first if txn_first >= 0 else None, batch))
    return out


def read_snapshot(path: str) -> list[ProducerStateEntry]:
    """Kafka's ``readSnapshot``: the entries of a snapshot file (CorruptSnapshotError if bad)."""
    with open(path, "rb") as f:
        data = f.read()
    return decode_snapshot(data, path)


def write_snapshot(path: str, entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write a snapshot file atomically: a ``.tmp`` file, fsynced when ``sync``, renamed over ``path``
    (and the directory fsynced, so the name survives a crash)."""
    data = encode_snapshot(entries)
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class ProducerStateManager:
    """The producers of one partition: ``producers`` (producer id -> entry), the map end offset
    (the first offset not yet applied), and the snapshot files of ``log_dir``.

    Produce path (leader), under the partition lock, after the validator passed:
    :func:`append_validated_as_leader` (``check_leader_append``, the append, ``on_segment_roll``
    if it rolled, ``complete_append``).

    Followers and recovery: :meth:`apply_replicated` with the appended bytes, :meth:`rebuild`
    from the log on open, :meth:`truncate_and_reload` after a log truncation."""

    def __init__(self, log_dir: str, topic_partition: str, config: ProducerStateManagerConfig | None = None,
                 clock: Callable[[], int] = _now_ms) -> None:
        self.log_dir = str(log_dir)
        self.topic_partition = topic_partition
        self.config = config or ProducerStateManagerConfig()
        self._clock = clock
        self.producers: dict[int, ProducerStateEntry] = {}
        self._last_map_offset = 0
        self._last_snap_offset = 0
        self._snapshots: dict[int, str] = self._load_snapshot_names()

    # ------------------------------------------------------------ snapshots on disk
    def _load_snapshot_names(self) -> dict[int, str]:
        out: dict[int, str] = {}
        try:
            names = os.listdir(self.log_dir)
        except FileNotFoundError:
            return out
        for name in names:
            path = os.path.join(self.log_dir, name)
            if name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                log.info("[ProducerStateManager partition=%s] removing the unfinished snapshot %s",
                         self.topic_partition, path)
                _unlink(path)
                continue
            off = _offset_from_name(name)
            if off is not None and os.path.isfile(path):
                out[off] = path
        return out

    @property
    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def latest_snapshot_offset(self) -> int | None:
        return max(self._snapshots) if self._snapshots else None

    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots) if self._snapshots else None

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None:
            _unlink(path)

    def take_snapshot(self, sync: bool = True) -> str | None:
        """Write the state at the map end offset, unless a snapshot at that offset or later was the
        last one taken; returns the file written."""
        if self._last_map_offset <= self._last_snap_offset:
            return None
        path = snapshot_path(self.log_dir, self._last_map_offset)
        start = time.monotonic()
        write_snapshot(path, self.producers.values(), sync)
        log.info("[ProducerStateManager partition=%s] wrote producer snapshot at offset %d with %d producer ids "
                 "in %.1f ms", self.topic_partition, self._last_map_offset, len(self.producers),
                 (time.monotonic() - start) * 1000)
        self._snapshots[self._last_map_offset] = path
        self._last_snap_offset = self._last_map_offset
        return path

    def on_segment_roll(self, new_segment_base_offset: int) -> str | None:
        """The log rolled to a segment starting at ``new_segment_base_offset``: snapshot the state
        as of that offset (Kafka's ``UnifiedLog.roll``).  Call it before applying the batch whose
        append caused the roll, when the map end offset is the new segment's base."""
        if new_segment_base_offset != self._last_map_offset:
            log.warning("[ProducerStateManager partition=%s] segment rolled at %d but producer state is at %d: "
                        "snapshot taken at %d", self.topic_partition, new_segment_base_offset,
                        self._last_map_offset, max(new_segment_base_offset, self._last_map_offset))
        self.update_map_end_offset(max(new_segment_base_offset, self._last_map_offset))
        return self.take_snapshot()

    def delete_snapshots_before(self, offset: int) -> None:
        """Remove the snapshot files below ``offset`` (segments deleted by retention)."""
        for off in [o for o in self._snapshots if o < offset]:
            self._remove_and_delete_snapshot(off)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Kafka's ``removeStraySnapshots``: delete snapshots with no segment of that base offset,
        but keep the highest stray one if it is above every segment (a clean-shutdown snapshot)."""
        bases = set(segment_base_offsets)
        self._snapshots = self._load_snapshot_names()
        strays = sorted(o for o in self._snapshots if o not in bases)
        for off in strays[:-1]:
            self._remove_and_delete_snapshot(off)
        if strays and bases and strays[-1] < max(bases):
            self._remove_and_delete_snapshot(strays[-1])

    # ------------------------------------------------------------ state
    def map_end_offset(self) -> int:
        return self._last_map_offset

    def update_map_end_offset(self, offset: int) -> None:
        self._last_map_offset = offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def active_producers(self) -> dict[int, ProducerStateEntry]:
        return dict(self.producers)

    @property
    def producer_id_count(self) -> int:
        return len(self.producers)

    def is_empty(self) -> bool:
        return not self.producers

    def _is_expired(self, now_ms: int, entry: ProducerStateEntry) -> bool:
        return entry.current_txn_first_offset is None and \
            now_ms - entry.last_timestamp >= self.config.producer_id_expiration_ms

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms``; returns how many.  (Kafka runs it
        every ``producer.id.expiration.check.interval.ms``, 10 minutes by default.)"""
        now = self._clock() if now_ms is None else now_ms
        expired = [pid for pid, e in self.producers.items() if self._is_expired(now, e)]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        current = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(self.topic_partition, producer_id, current, origin)

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Make an append's new producer state current (after the data is in the log)."""
        pid = append_info.producer_id
        if pid < 0:
            raise ValueError(f"invalid producer id {pid} passed to update for partition {self.topic_partition}")
        new = append_info.to_entry()
        current = self.producers.get(pid)
        if current is not None:
            current.update(new)
        else:
            self.producers[pid] = new

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry

    # ------------------------------------------------------------ the produce path
    def check_leader_append(self, result: ValidationResult, first_offset: int
                            ) -> BatchMetadata | ProducerAppendInfo | None:
        """Kafka's ``analyzeAndValidateProducerState`` for one validated client batch that would be
        appended at ``first_offset``: None if the batch has no producer id; the cached
        :class:`BatchMetadata` if it is a retry of a batch already in the log (do not append it;
        answer with its offsets); else the :class:`ProducerAppendInfo` to pass to
        :meth:`complete_append` once the batch is in the log.  Raises :class:`ProducerStateError`
        (OUT_OF_ORDER_SEQUENCE_NUMBER, INVALID_PRODUCER_EPOCH)."""
        pid = result.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if entry is not None:
            dup = entry.find_duplicate_batch(result.producer_epoch, result.base_sequence, result.last_sequence)
            if dup is not None:
                return dup
        info = self.prepare_update(pid, AppendOrigin.CLIENT)
        info.append_data_batch(result.producer_epoch, result.base_sequence, result.last_sequence,
                               result.max_timestamp, first_offset, first_offset + result.last_offset_delta,
                               result.is_transactional)
        return info

    def complete_append(self, info: ProducerAppendInfo | None, next_offset: int) -> None:
        """After an append that ends before ``next_offset``: apply ``info`` (if any) and move the
        map end offset."""
        if info is not None:
            self.update(info)
        self._last_map_offset = next_offset

    def apply_replicated(self, records: Any, origin: AppendOrigin = AppendOrigin.REPLICATION) -> int:
        """Apply the batches in ``records`` (whole batches with their final offsets, e.g. what a
        follower appended or a segment read back) without sequence checks, and move the map end
        offset past them.  Returns the number of producer batches applied.  Control batches (only
        transaction markers, which kraft never writes) move no producer state."""
        scan = scan_batches(records, crc_mode=CRC_SKIP, allow_partial_tail=True)
        return self._apply_headers(scan.headers, origin)

    def _apply_headers(self, headers: np.ndarray, origin: AppendOrigin) -> int:
        if not len(headers):
            return 0
        infos: dict[int, ProducerAppendInfo] = {}
        applied = 0
        rows = zip(headers["producer_id"].tolist(), headers["producer_epoch"].tolist(),
                   headers["base_sequence"].tolist(), headers["last_offset_delta"].tolist(),
                   headers["base_offset"].tolist(), headers["max_timestamp"].tolist(),
                   headers["attributes"].tolist())
        for pid, epoch, base_seq, lod, base, max_ts, attrs in rows:
            if pid < 0 or attrs & CONTROL_MASK:
                continue
            info = infos.get(pid)
            if info is None:
                info = infos[pid] = self.prepare_update(pid, origin)
            last_seq = _last_sequence(base_seq, lod)
            info.append_data_batch(epoch, base_seq, last_seq, max_ts, base, base + lod,
                                   bool(attrs & TRANSACTIONAL_MASK))
            applied += 1
        for info in infos.values():
            self.update(info)
        self._last_map_offset = int(headers["base_offset"][-1]) + int(headers["last_offset_delta"][-1]) + 1
        return applied

    # ------------------------------------------------------------ load, truncate
    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        """The latest readable snapshot becomes the state; an unreadable one is logged (naming the
        file and the problem), deleted, and the next older one tried."""
        while self._snapshots:
            off = max(self._snapshots)
            path = self._snapshots[off]
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as exc:
                reason = exc.reason if isinstance(exc, CorruptSnapshotError) else str(exc)
                log.warning("[ProducerStateManager partition=%s] failed to load producer snapshot %s: %s; it is "
                            "deleted and the state rebuilt from the log", self.topic_partition, path, reason)
                self._remove_and_delete_snapshot(off)
                continue
            for e in entries:
                if not self._is_expired(now_ms, e):
                    self.load_producer_entry(e)
            self._last_snap_offset = self._last_map_offset = off
            return
        self._last_snap_offset = self._last_map_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int | None = None) -> None:
        """Kafka's ``truncateAndReload``: drop snapshots outside ``(log_start, log_end]``; if the state
        is not exactly at ``log_end_offset``, reload it from the latest snapshot left (the caller then
        replays the log after :meth:`map_end_offset`, see :meth:`rebuild`)."""
        now = self._clock() if now_ms is None else now_ms
        for off in list(self._snapshots):
            if off > log_end_offset or off <= log_start_offset:
                self._remove_and_delete_snapshot(off)
        if log_end_offset != self._last_map_offset:
            self.producers.clear()
            self._load_from_snapshot(log_start_offset, now)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        if self._last_map_offset < log_start_offset:
            self._last_map_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = latest if latest is not None else log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything (state and snapshot files): the log restarts at ``offset``."""
        self.producers.clear()
        for off in list(self._snapshots):
            self._remove_and_delete_snapshot(off)
        self._last_snap_offset = 0
        self._last_map_offset = offset

    def truncate_fully_and_reload_snapshots(self) -> None:
        """Forget the state and re-list the snapshot files on disk (Kafka's method of the name)."""
        log.info("[ProducerStateManager partition=%s] reloading the producer state snapshots", self.topic_partition)
        self.truncate_fully_and_start_at(0)
        self._snapshots = self._load_snapshot_names()

    def rebuild(self, log_: KafkaLog, *, now_ms: int | None = None, reload_from_clean_shutdown: bool = False,
                read_chunk_bytes: int = 8 << 20) -> None:
        """Kafka's ``rebuildProducerState`` on log open or after a truncation: reload the latest
        snapshot at or below the log end, replay the log's batches after it (no sequence checks),
        and snapshot the result at the log end offset.  A clean shutdown with no snapshot at all
        (a log never written by an idempotent producer, or from before snapshots) skips the scan."""
        now = self._clock() if now_ms is None else now_ms
        start, end = log_.log_start_offset, log_.log_end_offset
        if self.latest_snapshot_offset() is None and reload_from_clean_shutdown:
            self._last_map_offset = end
            self.take_snapshot()
            return
        empty_before = self.is_empty() and self._last_map_offset >= end
        self.truncate_and_reload(start, end, now)
        if end > self._last_map_offset and not empty_before:
            offset = max(self._last_map_offset, start)
            self._last_map_offset = offset
            for chunk in _read_log(log_, offset, end, read_chunk_bytes):
                try:
                    scan = scan_batches(chunk, crc_mode=CRC_SKIP)
                except CorruptRecordError as exc:
                    raise CorruptRecordError(f"rebuilding producer state of {self.topic_partition}: {exc.reason}",
                                             exc.position, exc.base_offset, exc.source) from None
                self._apply_headers(scan.headers[scan.headers["base_offset"] < end], AppendOrigin.REPLICATION)
        self._last_map_offset = end
        self.take_snapshot()

    def __repr__(self) -> str:
        return (f"ProducerStateManager(partition={self.topic_partition}, producers={len(self.producers)}, "
                f"mapEndOffset={self._last_map_offset}, snapshots={self.snapshot_offsets})")


class LeaderAppend(NamedTuple):
    """Where a validated client batch is: its offsets, and whether it was a retry of a batch
    already in the log (``duplicate``: nothing was written, ``info`` is None)."""
    first_offset: int
    last_offset: int
    duplicate: bool
    info: AppendInfo | None


def append_validated_as_leader(log_: KafkaLog, psm: ProducerStateManager, result: ValidationResult,
                               leader_epoch: int) -> LeaderAppend:
    """The leader's append of one validated batch with its producer-state bookkeeping, in Kafka's
    order: the duplicate and sequence checks (ProducerStateError before anything is written), the
    append, a snapshot if the append rolled the segment (the state as of the new segment's base,
    before this batch), then the new state.  Call it under the partition's lock."""
    check = psm.check_leader_append(result, log_.log_end_offset)
    if isinstance(check, BatchMetadata):
        return LeaderAppend(check.first_offset, check.last_offset, True, None)
    before = log_.active_segment.base_offset
    info = log_.append_as_leader(result.records, leader_epoch)
    if info.segment_base_offset != before:
        psm.on_segment_roll(info.segment_base_offset)
    psm.complete_append(check, info.last_offset + 1)
    return LeaderAppend(info.first_offset, info.last_offset, False, info)


def append_replicated_as_follower(log_: KafkaLog, psm: ProducerStateManager, records: Any) -> AppendInfo:
    """A follower's append of fetched batches with the producer-state bookkeeping: a snapshot if
    the append rolled the segment, then the batches' producers (no sequence checks: the leader
    made them).  The log's errors (OutOfOrderAppend, corrupt data) propagate, nothing applied."""
    before = log_.active_segment.base_offset
    info = log_.append_as_follower(records)
    if info.segment_base_offset != before:
        psm.on_segment_roll(info.segment_base_offset)
    psm.apply_replicated(records)
    return info


def _read_log(log_: KafkaLog, offset: int, end: int, chunk: int) -> Iterator[bytes]:
    """The log's bytes from ``offset`` to ``end`` in whole-batch chunks (one segment at most each)."""
    while offset < end:
        data = log_.read(offset, chunk, max_offset=end)
        raw = data.tobytes()
        if not raw:
            return
        scan = scan_batches(raw, crc_mode=CRC_SKIP, allow_partial_tail=True)
        if not len(scan.headers):
            return
        yield raw
        nxt = int(scan.headers["base_offset"][-1]) + int(scan.headers["last_offset_delta"][-1]) + 1
        if nxt <= offset:
            return
        offset = nxt


def _last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    if base_sequence < 0:
        return -1
    if base_sequence > _INT32_MAX - last_offset_delta:
        return last_offset_delta - (_INT32_MAX - base_sequence) - 1
    return base_sequence + last_offset_delta


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
