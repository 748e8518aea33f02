"""The Raft API a state machine sees (Kafka's RaftClient and RaftClient.Listener), and Ready.

Why a module of its own: the layers built on the quorum (the controller, the
metadata loader, the broker image) may import this and nothing of the core's
internals or of the I/O layer.  ``RaftClient`` is what such a state machine
drives (the TCP driver implements it); ``RaftListener`` is what it implements;
``Ready`` is what one ``RaftCore.poll`` hands its driver.

Appends name their epoch.  A state machine learns that it leads from
``handle_leader_change(LeaderAndEpoch(local id, epoch))``, prepares records
against the state of that epoch, and appends them *with that epoch*: the append
fails with ``NotLeaderError`` once the epoch is over, even if this node leads
again in a later one (Kafka's ``scheduleAppend``/``scheduleAtomicAppend``
throw ``NotLeaderException`` for a stale epoch).  A controller must never write
under an epoch it did not claim: records prepared for epoch 5 may be wrong in
epoch 7 (another leader in 6 may have changed the state they were based on).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Awaitable, Iterator, Protocol, Sequence

from kraft_node.raft.log import FlushJob
from kraft_node.raft.messages import Batch, LeaderAndEpoch, Outbound, SnapshotId
from kraft_node.raft.requests import NEVER
from kraft_node.raft.roles import ElectionState


class RaftListener(Protocol):
    """What the state machine (controller, broker image) implements.

    Calls arrive from ``RaftCore.poll`` in offset order: a snapshot load
    replaces everything before ``snapshot_id.offset``; each ``handle_commit``
    continues exactly where the previous call (or the snapshot) ended.
    """

    def handle_commit(self, batches: tuple[Batch, ...]) -> None: ...

    def handle_load_snapshot(self, reader: "SnapshotReader") -> None:
        """Replace the state with the snapshot ``reader.snapshot_id``: iterate ``reader``
        for its batches.  The reader is valid only during the call (the core closes it
        when the call returns); a listener that keeps nothing of it but the records it
        copied needs no cleanup."""

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


class SnapshotReader(Protocol):
    """A stored snapshot, read one batch at a time (Kafka's ``SnapshotReader``).

    Iterating yields the state machine's batches in order (the snapshot's control
    batches -- kraft.version, voters -- are the core's and are not among them), each
    decoded when reached, so a snapshot of any size loads in the memory of one batch
    plus what the listener keeps.  A damaged snapshot raises an error naming it (the
    file in a Kafka log) and the position of the bad batch.  In a ``KafkaRaftLog`` the
    records are the framed values a ``SnapshotWriter`` was given (Kafka metadata records).
    """

    snapshot_id: SnapshotId
    #: The append time of the last record the snapshot covers, None when the format does not say.
    last_contained_log_time_ms: int | None

    def __iter__(self) -> Iterator[Batch]: ...

    def close(self) -> None: ...


class SnapshotWriter(Protocol):
    """A snapshot being written by the state machine (Kafka's ``SnapshotWriter``)."""

    snapshot_id: SnapshotId

    def append(self, records: Sequence[bytes]) -> None:
        """Records that share one batch (in a Kafka log: framed metadata records)."""

    def freeze(self) -> None:
        """Complete it: durable and stored; the log prefix it covers is dropped."""

    def close(self) -> None:
        """Release it; before ``freeze()`` this aborts the snapshot."""


class RaftClient(Protocol):
    """What a state machine drives (Kafka's ``RaftClient``); ``RaftDriver`` implements it.

    Calls come from the driver's event loop thread; listener callbacks arrive there too.
    """

    def register_listener(self, listener: RaftListener) -> None:
        """Receive committed batches, snapshot loads and leader changes (in offset order)."""

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        """The leader and epoch this node knows now."""

    def append(self, records: Sequence[bytes], epoch: int, *, atomic: bool = True) -> Awaitable[int]:
        """Queue ``records`` as the leader of ``epoch``; resolves with the last offset once
        committed.  Raises ``NotLeaderError`` at once unless this node leads ``epoch``;
        ``BufferFullError`` / ``RecordBatchTooLargeError`` when the accumulator cannot take
        them.  ``atomic``: all in one batch (Kafka's ``scheduleAtomicAppend``), else they
        may be split over several (``scheduleAppend``)."""

    def create_snapshot(self, snapshot_id: SnapshotId, data: bytes | None = None, *,
                        last_contained_log_time_ms: int = 0) -> "SnapshotWriter | None":
        """The snapshot of the committed state before ``snapshot_id.offset``: without
        ``data`` a :class:`SnapshotWriter` (streamed to the log; on ``freeze()`` the log
        prefix it covers is dropped), with ``data`` those bytes stored at once."""

    def resign(self, epoch: int) -> None:
        """Give up leadership of ``epoch`` (no-op if this node does not lead it)."""


@dataclass
class Ready:
    """Work produced by the core since the previous ``poll``.

    ``messages``: send them (quorum state is already durable, see rule 1).
    ``quorum_state_writes``: the election states written, for observability.
    ``next_wakeup_ms``: call ``poll`` again no later than this (or when a
    message arrives).  ``shutdown_complete``: graceful shutdown finished
    (``shutdown_timed_out`` tells if it gave up waiting for a new leader).
    """
    messages: list[Outbound] = field(default_factory=list)
    quorum_state_writes: list[ElectionState] = field(default_factory=list)
    next_wakeup_ms: int = NEVER
    shutdown_complete: bool = False
    shutdown_timed_out: bool = False
    #: log flushes to run off the event loop (only when the core's flush policy asks for jobs,
    #: see flush.py): call ``job.run()`` on any thread, then ``RaftCore.handle_flush_done(job, now_ms)``.
    flush_jobs: list[FlushJob] = field(default_factory=list)
