"""Listener delivery: committed batches, snapshots and leader changes, in offset order.

Kafka's ``pollListeners`` and its ``ListenerContext``: each registered listener
has a next offset; a snapshot load replaces everything before its offset, each
``handle_commit`` continues where the previous one ended, and a leader's listener
gets the prior epochs' data before its own ``handle_leader_change``.  Each
delivery ends by trimming the recent batches (``_trim_recent``, see
:mod:`kraft_node.raft.fetch_serving`) that every listener and voter now has.  ``ListenerDelivery`` is a part of
:class:`~kraft_node.raft.client.RaftCore`, split out by seam.
"""
from __future__ import annotations

import bisect
import itertools
from operator import attrgetter
from typing import TYPE_CHECKING, Iterable

from kraft_node.raft.api import RaftListener
from kraft_node.raft.errors import InvariantViolation, RaftError
from kraft_node.raft.messages import Batch, LeaderAndEpoch, SnapshotId
from kraft_node.raft.roles import LeaderState, Role

if TYPE_CHECKING:
    from kraft_node.raft.config import QuorumConfig
    from kraft_node.raft.log import RaftLog
    from kraft_node.raft.quorum_state import QuorumState

_next_offset = attrgetter("next_offset")


class ListenerContext:
    def __init__(self, listener: RaftListener):
        self.listener = listener
        self.next_offset = 0
        self.last_fired: LeaderAndEpoch | None = None


class ListenerDelivery:
    """Listener delivery of :class:`RaftCore` (a mixin: see the module doc)."""

    # This part's state (RaftCore.__init__ sets it) and what it uses of the core's, declared
    # for the type checker only (annotations: nothing at run time).
    _listeners: list[ListenerContext]
    #: what _poll_listeners last handed out: (state, (hwm, log start, latest snapshot, listeners))
    _listeners_seen: tuple[Role, tuple[int | None, int, SnapshotId | None, int]] | None
    _initialized: bool
    _recent_batches: list[Batch]
    config: QuorumConfig
    quorum: QuorumState
    log: RaftLog
    local_id: int

    if TYPE_CHECKING:
        def _trim_recent(self, st: Role) -> None: ...

    def poll_listeners(self) -> None:
        """Deliver committed data, snapshots and leader changes to the listeners (what
        ``poll`` does last unless ``CoreOptions.defer_listeners``); in offset order, as in ``poll``."""
        if not self._initialized:
            raise RaftError("initialize() must be called before poll_listeners()")
        self._poll_listeners()

    def _poll_listeners(self) -> None:
        st = self.quorum.state
        hwm = st.high_watermark
        # Nothing a listener could be owed changed since the last poll (same state object,
        # high watermark, log start and snapshot, same listeners): skip the walk.  Every
        # poll ends here, several per commit, so this is on the commit path.
        seen = (hwm, self.log.start_offset, self.log.latest_snapshot_id(), len(self._listeners))
        prev = self._listeners_seen
        if prev is None or prev[0] is not st or prev[1] != seen:
            self._walk_listeners(st, hwm)
            self._listeners_seen = (st, seen)
        if self._recent_batches:
            self._trim_recent(st)

    def _walk_listeners(self, st: Role, hwm: int | None) -> None:
        for ctx in self._listeners:
            snap = self.log.latest_snapshot_id()
            if snap is not None and ctx.next_offset < self.log.start_offset:
                reader = self.log.open_snapshot(snap)
                if reader is None:
                    raise RaftError(f"the latest snapshot {snap} is not stored")
                try:
                    ctx.listener.handle_load_snapshot(reader)  # it iterates the batches itself
                finally:
                    reader.close()
                ctx.next_offset = snap.offset
            if isinstance(st, LeaderState):
                # Prior-epoch data first, then the leader change, then this epoch's data:
                # the listener knows everything committed before it acts as leader.
                self._deliver(ctx, min(hwm, st.epoch_start_offset) if hwm is not None else None)
                current = LeaderAndEpoch(self.local_id, st.epoch)
                if ctx.last_fired != current and ctx.next_offset >= st.epoch_start_offset:
                    ctx.last_fired = current
                    ctx.listener.handle_leader_change(current)
                if ctx.last_fired == current:
                    self._deliver(ctx, hwm)
            else:
                current = LeaderAndEpoch(self.quorum.leader_id, st.epoch)
                if ctx.last_fired != current:
                    ctx.last_fired = current
                    ctx.listener.handle_leader_change(current)
                self._deliver(ctx, hwm)

    def _deliver(self, ctx: ListenerContext, upto: int | None) -> None:
        """Hand ``[ctx.next_offset, upto)`` to the listener, one ``handle_commit`` per
        chunk of about fetch.max.bytes (the leader's own batches come from memory)."""
        while upto is not None and ctx.next_offset < upto:
            pos = ctx.next_offset
            recent = self._recent_batches
            i = bisect.bisect_right(recent, pos, key=_next_offset)  # first batch ending past pos
            source: Iterable[Batch]
            if i < len(recent) and recent[i].base_offset <= pos:
                source = itertools.islice(recent, i, None)  # batches still in memory: no re-read
            else:
                source = self.log.read(pos, self.config.fetch_max_bytes)
            out: list[Batch] = []
            for b in source:
                if b.base_offset >= upto:
                    break
                if b.next_offset <= pos:
                    continue
                n = b.next_offset - b.base_offset  # not len(b.records): that would decode a RawBatch
                lo = pos - b.base_offset if b.base_offset < pos else 0
                hi = min(n, upto - b.base_offset)
                if lo != 0 or hi != n:
                    b = Batch(b.base_offset + lo, b.epoch, b.records[lo:hi], b.is_control, b.control,
                              b.append_time_ms)
                if b.base_offset != pos:
                    raise InvariantViolation(f"node {self.local_id}: gap in committed data at {pos}")
                out.append(b)
                pos = b.next_offset
            if not out:
                raise InvariantViolation(f"node {self.local_id}: committed offset {pos} below {upto} "
                                         f"is missing from the log")
            ctx.next_offset = pos
            ctx.listener.handle_commit(tuple(out))
