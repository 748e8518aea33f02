"""The Raft API a state machine sees (Kafka's RaftClient.Listener and the driver's Ready).

Why a module of its own: the layers built on the quorum (the controller, the
metadata loader, the broker image) may import this and nothing of the core's
internals or of the I/O layer.  ``RaftListener`` is what a state machine
implements; ``Ready`` is what one ``RaftCore.poll`` hands its driver.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

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

    def handle_load_snapshot(self, snapshot_id: SnapshotId, data: bytes) -> None: ...

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None: ...


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
    #: leader log flushes to run off the event loop (only with ``RaftCore.async_leader_flush``):
    #: call ``job.run()`` on any thread, then ``RaftCore.handle_flush_done(job, now_ms)``.
    flush_jobs: list = field(default_factory=list)
