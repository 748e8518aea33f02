"""Partition logs of a stopped broker process, read with ``kraft_storage`` (issue 25's tests).

A test that kills and restarts brokers checks replication at the bytes: it stops every broker,
then opens each replica's ``<log.dir>/<topic>-<partition>`` with :class:`KafkaLog` (which closes
it cleanly again, as the broker would) and reads the high watermarks the broker checkpointed at
shutdown (``replication-offset-checkpoint``, Kafka's format: version 0, a count, then
``topic partition offset`` lines).  Never call these on a running broker: opening a log
recovers it and rewrites its clean-shutdown marker.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from kraft_storage.log.checkpoint import parse_checkpoint
from kraft_storage.log.log import KafkaLog
from kraft_storage.record.batch import iter_batches
from kraft_storage.record.columns import decode_records


@dataclass
class PartitionLog:
    """One replica's log: the raw batches from the log start offset to the end, and per record
    its offset and value; per batch its base offset, next offset and leader epoch."""
    raw: bytes
    offsets: list[int]
    values: list[bytes]
    batches: list[tuple[int, int, int]]   # (base_offset, next_offset, partition_leader_epoch)
    log_start_offset: int
    log_end_offset: int

    def prefix(self, offset: int) -> bytes:
        """The raw bytes of the batches that end at or before ``offset`` (a high watermark falls on a
        batch boundary on every replica: the leader advances it to a follower's fetch offset)."""
        size = 0
        for (base, nxt, _), length in zip(self.batches, self._lengths()):
            if nxt > offset:
                assert base >= offset, f"offset {offset} falls inside the batch [{base}, {nxt})"
                break
            size += length
        return self.raw[:size]

    def producer_batches(self) -> list[tuple[int, int, int, int, int]]:
        """``(producer_id, producer_epoch, base_sequence, base_offset, records)`` of every batch
        written by an idempotent producer, in log order."""
        return [(b.producer_id, b.producer_epoch, b.base_sequence, b.base_offset, b.next_offset - b.base_offset)
                for b in iter_batches(self.raw, verify_crc=False) if b.producer_id >= 0]

    def batch_at(self, offset: int) -> tuple[int, int, int]:
        """``(producer_id, producer_epoch, base_sequence)`` of the batch holding ``offset``."""
        for b in iter_batches(self.raw, verify_crc=False):
            if b.base_offset <= offset < b.next_offset:
                return b.producer_id, b.producer_epoch, b.base_sequence
        raise KeyError(f"no batch holds offset {offset}")

    def describe(self, offset: int) -> str:
        """The batch holding ``offset``: its offsets, leader epoch and producer (id, epoch, base
        sequence), for a failure message that says whether two copies of a record came from one
        producer batch (a broker that missed a retry) or from two (the client resent it)."""
        for b in iter_batches(self.raw, verify_crc=False):
            if b.base_offset <= offset < b.next_offset:
                return (f"batch [{b.base_offset}, {b.next_offset}) leader epoch {b.partition_leader_epoch} "
                        f"producer {b.producer_id}/{b.producer_epoch} seq {b.base_sequence}")
        return f"no batch holds offset {offset}"

    def _lengths(self) -> list[int]:
        return [b.size_in_bytes for b in iter_batches(self.raw)]


def read_partition_log(log_dir: str, topic: str, partition: int) -> PartitionLog:
    raw = bytearray()
    with KafkaLog.open(os.path.join(log_dir, f"{topic}-{partition}"), create=False) as log:
        start, end = log.log_start_offset, log.log_end_offset
        offset = start
        while offset < end:
            data = log.read_bytes(offset, 1 << 22)
            raw += data
            offset = list(iter_batches(data))[-1].next_offset
    data = bytes(raw)
    cols = decode_records(data)
    batches = [(b.base_offset, b.next_offset, b.partition_leader_epoch) for b in iter_batches(data)]
    return PartitionLog(data, [int(o) for o in cols.offset], [v or b"" for v in cols.values()], batches, start, end)


def high_watermarks(log_dir: str) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> high watermark`` from the broker's ``replication-offset-checkpoint``."""
    path = os.path.join(log_dir, "replication-offset-checkpoint")
    with open(path) as f:
        return {(t, int(p)): int(o) for t, p, o in parse_checkpoint(f.read(), path, fields=3)}
