"""Leader fetch serving: Fetch and FetchSnapshot answers, the purgatory, the recent batches.

The leader's side of replication (Kafka's ``handleFetchRequest`` /
``tryCompleteFetchRequest`` with its fetch purgatory, and
``handleFetchSnapshotRequest``): a Fetch is validated against the log (diverging
epoch, snapshot needed), answered with data, or parked until data or a new high
watermark arrives or its max wait passes.  The leader answers from the batches it
still holds in memory (``_recent_batches``) when it can, instead of reading its
log back.  ``LeaderFetchServing`` is a part of
:class:`~kraft_node.raft.client.RaftCore`, split out by seam: its methods run on
the core's state and are called by its dispatch and poll.
"""
from __future__ import annotations

import bisect
from collections import Counter
from operator import attrgetter
from typing import TYPE_CHECKING

from kraft_node.raft.errors import Errors
from kraft_node.raft.messages import (
    Batch,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    LeaderIdAndEpoch,
    OffsetAndEpoch,
    ReplicaKey,
    Response,
    SnapshotId,
)
from kraft_node.raft.requests import NEVER
from kraft_node.raft.roles import LeaderState, Role

if TYPE_CHECKING:
    from kraft_node.raft.config import QuorumConfig
    from kraft_node.raft.listeners import ListenerContext
    from kraft_node.raft.log import RaftLog
    from kraft_node.raft.quorum_state import QuorumState

NONE = Errors.NONE
_next_offset = attrgetter("next_offset")

#: The leader keeps the batches it wrote in memory (``RaftCore._recent_batches``) until every
#: listener has them *and* every voter has fetched them, so a follower that is behind the
#: high watermark (with 3 voters one of the two always is under load) is answered from
#: memory instead of reading the log back; beyond this many bytes the oldest go anyway (a
#: dead or slow voter then reads from the log).  Measured (BENCHMARKS.md, session 8): the
#: leader spent ~16% of its time at saturation in ``pread`` for that follower's Fetches.
RECENT_BATCHES_MAX_BYTES = 16 << 20


class LeaderFetchServing:
    """Fetch/FetchSnapshot serving of :class:`RaftCore` (a mixin: see the module doc)."""

    # This part's state (RaftCore.__init__ sets it) and what it uses of the core's, declared
    # for the type checker only (annotations: nothing at run time).
    _purgatory: list[tuple[int, int, FetchRequest, int]]  # source, correlation id, request, deadline
    _recent_batches: list[Batch]
    _recent_bytes: int
    config: QuorumConfig
    quorum: QuorumState
    log: RaftLog
    stats: Counter[str]
    _listeners: list[ListenerContext]

    if TYPE_CHECKING:
        def log_end(self) -> OffsetAndEpoch: ...

        def _cluster_ok(self, cluster_id: str | None) -> bool: ...

        def _leader_and_epoch(self) -> LeaderIdAndEpoch: ...

        def _respond(self, dest: int, corr: int, response: Response) -> None: ...

        def _on_leader_hwm_update(self, now_ms: int) -> None: ...

    def _validate_leader_only(self, request_epoch: int) -> Errors:
        if request_epoch < self.quorum.epoch:
            return Errors.FENCED_LEADER_EPOCH
        if request_epoch > self.quorum.epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
        if not isinstance(self.quorum.state, LeaderState):
            return Errors.NOT_LEADER_OR_FOLLOWER
        return NONE

    def _handle_fetch_request(self, source: int, corr: int, req: FetchRequest, now_ms: int) -> None:
        if not self._cluster_ok(req.cluster_id):
            self._respond(source, corr, FetchResponse(int(Errors.INCONSISTENT_CLUSTER_ID), 0, -1,
                                                      self._leader_and_epoch()))
            return
        if req.max_wait_ms < 0 or req.fetch_offset < 0 or req.last_fetched_epoch < 0 \
                or req.last_fetched_epoch > req.current_leader_epoch:
            self._respond(source, corr, FetchResponse(0, int(Errors.INVALID_REQUEST), -1,
                                                      self._leader_and_epoch()))
            return
        resp = self._try_complete_fetch(source, req, now_ms)
        leader_hwm = resp.high_watermark
        if resp.partition_error_code != NONE or resp.records or resp.diverging_epoch is not None \
                or resp.snapshot_id is not None or req.max_wait_ms <= 0 \
                or (leader_hwm >= 0 and req.high_watermark < leader_hwm):
            self._respond(source, corr, resp)
        else:
            # Long poll: answer when data or a new HWM arrives, or at max wait.
            self._purgatory.append((source, corr, req, now_ms + req.max_wait_ms))
            self.stats["fetches_parked"] += 1

    def _try_complete_fetch(self, source: int, req: FetchRequest, now_ms: int) -> FetchResponse:
        err = self._validate_leader_only(req.current_leader_epoch)
        if err != NONE:
            return FetchResponse(0, int(err), -1, self._leader_and_epoch())
        st: LeaderState = self.quorum.state  # type: ignore[assignment]  # (checked just above)
        log = self.log
        # Invariant kept by create_snapshot/_install_snapshot: when the log start is
        # above 0, the latest snapshot ends exactly at the log start.
        latest = log.latest_snapshot_id()
        diverging: EpochEndOffset | None
        snapshot_id: SnapshotId | None
        diverging = snapshot_id = None
        records: tuple[Batch, ...] = ()
        fo, fe = req.fetch_offset, req.last_fetched_epoch
        if fo == 0 and latest is not None and latest.offset > 0:
            snapshot_id = latest
        elif latest is not None and log.start_offset > 0 and (
                fo < log.start_offset or (fo == log.start_offset and fe != latest.epoch)
                or fe < latest.epoch):
            snapshot_id = latest
        else:
            end = log.end_offset_for_epoch(fe)
            if end.epoch != fe or end.offset < fo:
                diverging = EpochEndOffset(end.epoch, end.offset)
            elif fo > log.end_offset:
                diverging = EpochEndOffset(*self.log_end().key())
            else:
                if fo < log.end_offset:  # (a follower at the end -- most Fetches -- reads nothing)
                    limit = min(req.max_bytes, self.config.fetch_max_bytes)
                    records = self._read_recent(fo, limit) or log.read(fo, limit)
                if st.update_replica_state(ReplicaKey(req.replica_id, req.replica_directory_id), now_ms, fo):
                    self._on_leader_hwm_update(now_ms)
        hwm = st.high_watermark if st.high_watermark is not None else -1
        return FetchResponse(0, 0, hwm, self._leader_and_epoch(), log.start_offset, diverging,
                             snapshot_id, tuple(records))

    def _read_recent(self, offset: int, max_bytes: int) -> tuple[Batch, ...]:
        """Serve a Fetch from the batches this leader wrote and still holds in memory (a
        suffix of its log): whole batches from the one *starting* at ``offset``, at least
        one, then while ``max_bytes`` allows -- what ``log.read`` returns, without reading
        the log back.  Empty when ``offset`` is not a batch start in that suffix."""
        recent = self._recent_batches
        if not recent or offset < recent[0].base_offset or offset >= recent[-1].next_offset:
            return ()
        lo, hi = 0, len(recent) - 1
        while lo < hi:  # the batch holding offset (bases are increasing)
            mid = (lo + hi + 1) // 2
            if recent[mid].base_offset <= offset:
                lo = mid
            else:
                hi = mid - 1
        if recent[lo].base_offset != offset:
            return ()
        out = [recent[lo]]
        size = recent[lo].size_in_bytes
        for b in recent[lo + 1:]:
            size += b.size_in_bytes
            if size > max_bytes:
                break
            out.append(b)
        return tuple(out)

    def _complete_purgatory(self, now_ms: int, force: bool) -> None:
        if not self._purgatory:
            return
        keep: list[tuple[int, int, FetchRequest, int]] = []
        parked, self._purgatory = self._purgatory, []
        for src, corr, req, deadline in parked:
            if force or now_ms >= deadline:
                self._respond(src, corr, self._try_complete_fetch(src, req, now_ms))
            else:
                keep.append((src, corr, req, deadline))
        self._purgatory.extend(keep)

    def _handle_fetch_snapshot_request(self, source: int, req: FetchSnapshotRequest,
                                       now_ms: int) -> FetchSnapshotResponse:
        def resp(err: Errors, size: int = -1, pos: int = -1, data: bytes = b"",
                 top: Errors = NONE) -> FetchSnapshotResponse:
            return FetchSnapshotResponse(int(top), int(err), req.snapshot_id, self._leader_and_epoch(),
                                         size, pos, data)
        if not self._cluster_ok(req.cluster_id):
            return resp(NONE, top=Errors.INCONSISTENT_CLUSTER_ID)
        err = self._validate_leader_only(req.current_leader_epoch)
        if err != NONE:
            return resp(err)
        n = max(1, min(req.max_bytes, self.config.fetch_snapshot_max_bytes))
        # Only the requested range is read (a snapshot may be ~100 MB at a million partitions).
        got = self.log.read_snapshot_range(req.snapshot_id, req.position, n)
        if got is None:
            return resp(Errors.SNAPSHOT_NOT_FOUND)
        size, chunk = got
        if req.position < 0 or req.position > size or (req.position == size and size > 0):
            return resp(Errors.POSITION_OUT_OF_RANGE)
        st: LeaderState = self.quorum.state  # type: ignore[assignment]  # (_validate_leader_only)
        st._update_check_quorum(source, now_ms)
        return resp(NONE, size, req.position, chunk)

    def _trim_recent(self, st: Role) -> None:
        """After a listener delivery: drop the recent batches every listener has and (on a
        leader) every voter has fetched past, then the oldest over the byte cap."""
        recent = self._recent_batches
        low = min((c.next_offset for c in self._listeners), default=NEVER)
        if isinstance(st, LeaderState):  # and what a voter has still to fetch
            for rs in st.voters.values():
                if rs is not st.local and rs.end_offset is not None and rs.end_offset < low:
                    low = rs.end_offset
        if recent[0].next_offset <= low:  # drop what all have (offset order: a prefix)
            self._drop_recent(bisect.bisect_right(recent, low, key=_next_offset))
        if self._recent_bytes > RECENT_BATCHES_MAX_BYTES:
            self._drop_recent_over_cap(low)

    def _clear_recent(self) -> None:
        self._recent_batches = []
        self._recent_bytes = 0

    def _drop_recent(self, n: int) -> None:
        recent = self._recent_batches
        self._recent_bytes -= sum(b.size_in_bytes for b in recent[:n])
        del recent[:n]

    def _drop_recent_over_cap(self, low: int) -> None:
        """Over RECENT_BATCHES_MAX_BYTES: drop the oldest batches no listener still needs
        (a lagging voter then reads the log); a listener's are kept whatever their size."""
        recent = self._recent_batches
        listeners_low = min((c.next_offset for c in self._listeners), default=NEVER)
        n, size = 0, self._recent_bytes
        while n < len(recent) and size > RECENT_BATCHES_MAX_BYTES and recent[n].next_offset <= listeners_low:
            size -= recent[n].size_in_bytes
            n += 1
        if n:
            self._drop_recent(n)
