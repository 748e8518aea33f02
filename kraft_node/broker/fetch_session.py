"""Incremental fetch sessions (KIP-227): Kafka's ``FetchSessionCache`` and fetch contexts.

Why: a consumer or follower with many partitions sends every partition in every Fetch, and
the leader answers every partition, even idle ones.  With a session the broker remembers the
partitions (and their last request data); a fetch then carries only the partitions whose
request data changed (or that are forgotten), and the answer only the partitions with
something new.

Request metadata (``session_id``, ``session_epoch``; Fetch v7+, Kafka's ``FetchMetadata``):

* epoch -1 (FINAL): a full fetch that wants no session (a given ``session_id`` is closed);
* epoch 0 (INITIAL): a full fetch; a given ``session_id`` is closed and a new session is
  created when the cache has room (``max.incremental.fetch.session.cache.slots``, Kafka's
  default 1000; 0 turns sessions off): the answer carries its id, else id 0 (sessionless);
* epoch > 0: an incremental fetch of session ``session_id`` at that epoch: the request's
  partitions are added or updated, the forgotten ones removed; an unknown id is
  FETCH_SESSION_ID_NOT_FOUND, another epoch than the session's INVALID_FETCH_SESSION_EPOCH, a
  session made with topic ids used by a request without them (or the reverse)
  FETCH_SESSION_TOPIC_ID_ERROR; a session left without partitions is closed (sessionless
  answer).  The epoch moves on when the context is made, as in Kafka, so a repeated request is
  refused.

An incremental answer holds a partition only when it has records, an error, a diverging epoch
or a preferred read replica, or when its high watermark or log start offset differs from what
the session last sent (Kafka's ``CachedPartition.maybeUpdateResponseData``), or (kraft, not in
Kafka) when a follower's request named it again with new request data -- the follower may have
dropped its last answer, so its watermarks are sent again once; a partition that
returned records moves to the end of the session's order, so the next answers serve the others
first when ``max_bytes`` runs out.

Eviction (Kafka's ``FetchSessionCacheShard.tryEvict``): a new session may replace the session
used least recently when that one is idle for more than 120 s; otherwise the "least valuable"
evictable one -- ordered by (privileged, size, id); sessions of followers are privileged -- if
it is not more valuable than the new one.  A session is evictable by any new session once it is
older than 120 s, and by a follower's (privileged) new session at once unless it is privileged
itself.  Decision: one shard (Kafka shards the cache for lock contention across request
threads; here every fetch runs on the broker's one event loop).
"""
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kraft_node.protocol.errors import Errors

__all__ = ["FetchSessionCache", "FetchContext", "CachedPartition", "FetchSession", "INITIAL_EPOCH", "FINAL_EPOCH",
           "INVALID_SESSION_ID", "DEFAULT_MAX_SESSION_SLOTS", "SESSION_EVICTION_MS", "next_epoch",
           "max_session_slots_from_properties"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
MAX_SLOTS_KEY = "max.incremental.fetch.session.cache.slots"
DEFAULT_MAX_SESSION_SLOTS = 1000
#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
SESSION_EVICTION_MS = 120_000
_INT_MAX = 2**31 - 1

#: a partition's key in a session: (topic id, partition) with topic ids (v13+), else (topic name, partition)
PartitionKey = tuple[Any, int]


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: FINAL stays FINAL; the epoch wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT_MAX else epoch + 1


def max_session_slots_from_properties(props: dict[str, str], source: str = "config") -> int:
    raw = props.get(MAX_SLOTS_KEY)
    if raw is None or not raw.strip():
        return DEFAULT_MAX_SESSION_SLOTS
    try:
        value = int(raw.strip())
    except ValueError:
        raise ValueError(f"{source}: {MAX_SLOTS_KEY}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"{source}: {MAX_SLOTS_KEY}={value} must be at least 0")
    return value


@dataclass
class CachedPartition:
    """A partition of a session: its latest request data (``request``: the request's
    FetchPartition) and what the session last answered for it."""
    topic: str | None
    topic_id: Any
    partition: int
    request: Any
    high_watermark: int = -1
    log_start_offset: int = -1

    def must_respond(self, pd: Any, update: bool) -> bool:
        """Whether answer ``pd`` for this partition goes into an incremental answer; with
        ``update``, remember what it says."""
        must = len(pd.records) > 0 if pd.records is not None else False
        if self.high_watermark != pd.high_watermark:
            must = True
            if update:
                self.high_watermark = pd.high_watermark
        if self.log_start_offset != pd.log_start_offset:
            must = True
            if update:
                self.log_start_offset = pd.log_start_offset
        if pd.preferred_read_replica >= 0:
            must = True
        if pd.error_code != 0:
            # forget the high watermark so that the partition is sent again once the error is gone
            if update:
                self.high_watermark = -1
            must = True
        diverging = getattr(pd, "diverging_epoch", None)
        if diverging is not None and diverging.epoch >= 0:
            must = True
        return must


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool
    partitions: dict[PartitionKey, CachedPartition]
    uses_topic_ids: bool
    creation_ms: int
    last_used_ms: int
    epoch: int
    #: size when last touched (-1: not in the cache); evictable flags as of the last touch
    cached_size: int = -1
    evictable_by_all: bool = False
    evictable_by_privileged: bool = False

    def evictable_key(self) -> tuple[bool, int, int]:
        return (self.privileged, self.cached_size, self.id)


@dataclass
class FetchContext:
    """What one Fetch reads and how its answer is shaped (Kafka's ``FetchContext`` kinds:
    ``error``, ``sessionless``, ``full``, ``incremental``)."""
    kind: str
    #: the partitions to read, in order: (topic name from the request or None, topic id, request data)
    items: list[tuple[str | None, Any, Any]] = field(default_factory=list)
    error: Errors = Errors.NONE
    session: FetchSession | None = None
    uses_topic_ids: bool = False
    privileged: bool = False
    expected_epoch: int = 0
    #: (incremental) the session's CachedPartition of each item, in the same order: what the session
    #: last answered, which lets the leader skip building an answer the session would drop
    cached: list[CachedPartition] = field(default_factory=list)


class FetchSessionCache:
    """Kafka's ``FetchManager`` + ``FetchSessionCacheShard`` (see the module doc)."""

    def __init__(self, max_entries: int = DEFAULT_MAX_SESSION_SLOTS, *, eviction_ms: int = SESSION_EVICTION_MS,
                 clock_ms: Callable[[], int], rng: random.Random | None = None) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._clock_ms = clock_ms
        self._rng = rng or random.Random()
        self.sessions: dict[int, FetchSession] = {}
        #: Kafka's IncrementalFetchSessionEvictionsPerSec total
        self.evictions = 0

    # ------------------------------------------------------------------ cache
    @property
    def total_partitions(self) -> int:
        return sum(s.cached_size for s in self.sessions.values())

    def _new_session_id(self) -> int:
        while True:
            sid = self._rng.randint(1, _INT_MAX - 1)
            if sid not in self.sessions:
                return sid

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def touch(self, session: FetchSession, now: int) -> None:
        session.last_used_ms = now
        session.cached_size = len(session.partitions)
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        least = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < least.evictable_key():
            return False
        self.remove(least.id)
        self.evictions += 1
        return True

    def maybe_create_session(self, privileged: bool, partitions: dict[PartitionKey, CachedPartition],
                             uses_topic_ids: bool) -> int:
        """A new session of ``partitions`` if the cache has room (or room can be made); its id,
        else INVALID_SESSION_ID."""
        now = self._clock_ms()
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_session_id(), privileged, partitions, uses_topic_ids, now, now,
                               next_epoch(INITIAL_EPOCH))
        self.sessions[session.id] = session
        self.touch(session, now)
        return session.id

    # ------------------------------------------------------------------ contexts
    def new_context(self, version: int, session_id: int, epoch: int, is_follower: bool,
                    items: Sequence[tuple[str | None, Any, Any]],
                    forgotten: Iterable[tuple[str | None, Any, int]]) -> FetchContext:
        """Kafka's ``FetchManager.newContext`` for a request's metadata, its partitions
        (``items``: (topic name, topic id, request data)) and its forgotten partitions."""
        uses_ids = version >= 13
        if version < 7:  # no sessions before v7 (Kafka's FetchMetadata.LEGACY)
            return FetchContext("sessionless", list(items))
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return FetchContext("sessionless", list(items))
            return FetchContext("full", list(items), uses_topic_ids=uses_ids, privileged=is_follower)
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext("error", error=Errors.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext("error", error=Errors.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_ids:
            return FetchContext("error", error=Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        for name, topic_id, req in items:
            key = _key(uses_ids, name, topic_id, int(req.partition))
            cached = session.partitions.get(key)
            if cached is None:
                session.partitions[key] = CachedPartition(name, topic_id, int(req.partition), req)
            else:
                cached.request = req
                if session.privileged:
                    # a follower named it again, its position moved (kraft, not in Kafka): answer
                    # it once more even if its watermarks did not move, since the follower may
                    # have dropped the last answer (one for a state that changed meanwhile, or a
                    # diverging epoch, whose high watermark it does not take); else its high
                    # watermark could stay stale until the leader's moves again
                    cached.high_watermark = -1
        for name, topic_id, partition in forgotten:
            session.partitions.pop(_key(uses_ids, name, topic_id, partition), None)
        if not session.partitions:
            self.remove(session.id)
            return FetchContext("sessionless", list(items))
        self.touch(session, self._clock_ms())
        session.epoch = next_epoch(session.epoch)
        in_order = list(session.partitions.values())
        return FetchContext("incremental", [(c.topic, c.topic_id, c.request) for c in in_order],
                            session=session, uses_topic_ids=uses_ids, expected_epoch=session.epoch, cached=in_order)

    def finish(self, ctx: FetchContext, answers: list[tuple[str | None, Any, Any]]) -> tuple[Errors, int, list[int]]:
        """The answer's (top-level error, session id, indexes of ``answers`` to send) for
        ``answers`` -- one (topic name, topic id, PartitionData) per item of ``ctx`` -- and the
        session's bookkeeping (Kafka's ``updateAndGenerateResponseData``).  In an incremental
        context a PartitionData of None stands for an answer the leader did not build because
        it holds nothing the session does not have (no records, no error, no diverging epoch,
        the high watermark and log start offset the session last sent: see ``_read_fetch`` in
        partition_apis.py): ``must_respond`` would drop it and change nothing, so it is skipped."""
        everything = list(range(len(answers)))
        if ctx.kind == "error":
            return ctx.error, INVALID_SESSION_ID, []
        if ctx.kind == "sessionless":
            return Errors.NONE, INVALID_SESSION_ID, everything
        if ctx.kind == "full":
            partitions: dict[PartitionKey, CachedPartition] = {}
            for (name, topic_id, req), (_n, _t, pd) in zip(ctx.items, answers):
                partitions[_key(ctx.uses_topic_ids, name, topic_id, int(req.partition))] = CachedPartition(
                    name, topic_id, int(req.partition), req, int(pd.high_watermark), int(pd.log_start_offset))
            return Errors.NONE, self.maybe_create_session(ctx.privileged, partitions, ctx.uses_topic_ids), everything
        session = ctx.session
        assert session is not None
        if session.epoch != ctx.expected_epoch or self.sessions.get(session.id) is not session:
            # another request of the session came in between (a duplicate): Kafka's answer
            return Errors.INVALID_FETCH_SESSION_EPOCH, session.id, []
        keep = []
        for i, ((name, topic_id, req), (_n, _t, pd)) in enumerate(zip(ctx.items, answers)):
            if pd is None:
                continue
            key = _key(ctx.uses_topic_ids, name, topic_id, int(req.partition))
            cached = session.partitions.get(key)
            if cached is None:
                continue
            if cached.must_respond(pd, True):
                keep.append(i)
                if pd.records is not None and len(pd.records) > 0:  # to the end: the others go first next time
                    session.partitions[key] = session.partitions.pop(key)
        return Errors.NONE, session.id, keep


def _key(uses_topic_ids: bool, name: str | None, topic_id: Any, partition: int) -> PartitionKey:
    return (topic_id, partition) if uses_topic_ids else (name, partition)
