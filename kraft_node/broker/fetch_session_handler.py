"""The requesting side of incremental fetch sessions (KIP-227): Kafka's client ``FetchSessionHandler``.

Why: a follower fetching 10,000 partitions from one leader would otherwise name all 10,000 in
every Fetch and get all 10,000 back, even when nothing moved; decoding that request and
building an answer per partition dominates the leader (issue 24/25, the 10k broker shutdown).
With a session the leader remembers the partitions and their last request data
(:mod:`kraft_node.broker.fetch_session`), so a fetch names only what changed and the answer
holds only what changed.

Pure state, no I/O: one handler per source broker (a :class:`~kraft_node.broker.replica_fetcher.
ReplicaFetcher`).  Each round the fetcher adds every partition it wants to a
:class:`FetchRequestBuilder` and sends what :meth:`FetchRequestBuilder.build` says; the answer
(or the failure) goes back through :meth:`FetchSessionHandler.handle_response` /
:meth:`FetchSessionHandler.handle_error`.

Request metadata (``session_id``, ``session_epoch``; Kafka's ``FetchMetadata``):

* ``(0, 0)`` INITIAL: a full fetch asking for a new session; the answer's ``session_id`` is the
  new session, or 0 when the leader made none (sessions off, cache full): stay sessionless, every
  fetch full;
* ``(id, 0)``: a full fetch that closes session ``id`` and asks for a new one (after an error);
* ``(id, 1..)``: an incremental fetch; the epoch moves on with each answered request (wrapping
  from 2**31-1 to 1);
* ``(id, -1)``: a full fetch that closes ``id`` and wants no new session (``notify_close``).

What an incremental request carries (``build``), comparing the wanted partitions with the
session's (the data last sent per partition: :class:`PartitionData`, compared whole):

* ``to_send``: partitions new to the session, then those whose data changed (fetch offset, log
  start offset, byte limit, leader epoch, last fetched epoch, topic id);
* ``to_forget``: session partitions not wanted this time (removed, or delayed by a backoff: the
  leader then stops reading and parking on them);
* ``to_replace``: partitions whose topic id changed (a topic re-created under the same name): sent
  again and, from Fetch v13 (ids), the old id forgotten as well.

Answers are checked before use: a full answer must hold exactly the session's partitions, an
incremental one only session partitions, and (v13+) only topic ids the session knows; otherwise
the answer is not used and the next fetch is full (closing the session).  A top-level error
resets: FETCH_SESSION_ID_NOT_FOUND (e.g. the leader restarted) to INITIAL, any other to a full
fetch that closes the session.  A partition missing from an incremental answer simply had
nothing new: its fetch state stays as it was, and it is read again by the next fetch (the
leader keeps reading every session partition), so no partition drops out of fetching.

Decisions: request data is a small immutable :class:`PartitionData` (the fields Kafka's
``FetchRequest.PartitionData.equals`` compares), so the per-round comparison of 10,000
partitions is a tuple compare; the fetcher builds wire objects only for ``to_send``.  The
builder of Kafka's replica fetcher does not copy the session map (``copySessionPartitions``
false): neither does this one (``session_partitions`` is the live map; read it before the next
build).
"""
from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from kraft_node.broker.controller_channel import error_name
from kraft_node.broker.fetch_session import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

__all__ = ["FetchMetadata", "INITIAL", "PartitionData", "FetchRequestData", "FetchRequestBuilder",
           "FetchSessionHandler", "find_missing", "TOPIC_IDS_FETCH_VERSION", "SESSION_ERRORS"]

log = logging.getLogger(__name__)

#: from Fetch v13 topics are named by id (requests, answers and forgotten lists)
TOPIC_IDS_FETCH_VERSION = 13
#: top-level errors that only say the session is gone or out of step: the next fetch is full
SESSION_ERRORS = frozenset({int(Errors.FETCH_SESSION_ID_NOT_FOUND), int(Errors.INVALID_FETCH_SESSION_EPOCH),
                            int(Errors.FETCH_SESSION_TOPIC_ID_ERROR)})


class FetchMetadata(NamedTuple):
    """The session id and epoch a request carries (Kafka's ``FetchMetadata``)."""
    session_id: int
    epoch: int

    @property
    def is_full(self) -> bool:
        """A full fetch (INITIAL or FINAL epoch) names every wanted partition."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def next_close_existing(self) -> "FetchMetadata":
        """A full fetch that closes this session and wants no other."""
        return FetchMetadata(self.session_id, FINAL_EPOCH)

    def next_close_existing_attempt_new(self) -> "FetchMetadata":
        """A full fetch that closes this session and asks for a new one."""
        return FetchMetadata(self.session_id, INITIAL_EPOCH)

    def next_incremental(self) -> "FetchMetadata":
        return FetchMetadata(self.session_id, next_epoch(self.epoch))

    @staticmethod
    def new_incremental(session_id: int) -> "FetchMetadata":
        """The first incremental fetch of a session the leader just made (epoch 1)."""
        return FetchMetadata(session_id, next_epoch(INITIAL_EPOCH))

    def __str__(self) -> str:
        return f"(sessionId={self.session_id}, epoch={'INITIAL' if self.epoch == 0 else self.epoch})"


INITIAL = FetchMetadata(INVALID_SESSION_ID, INITIAL_EPOCH)


class PartitionData(NamedTuple):
    """One partition's request data; two are equal when a leader would read the same."""
    topic_id: Uuid
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    current_leader_epoch: int
    last_fetched_epoch: int


#: a partition in a forget list: (topic id, topic partition)
TopicIdPartition = tuple[Uuid, TopicPartition]


@dataclass
class FetchRequestData:
    """What one fetch carries (Kafka's ``FetchSessionHandler.FetchRequestData``)."""
    #: partitions whose data goes in the request (all of them in a full fetch)
    to_send: dict[TopicPartition, PartitionData]
    #: session partitions to drop (incremental fetches only)
    to_forget: list[TopicIdPartition]
    #: partitions whose topic id changed: the old (id, partition), forgotten from v13
    to_replace: list[TopicIdPartition]
    #: every partition of the session after this request (live map: see the module doc)
    session_partitions: Mapping[TopicPartition, PartitionData]
    metadata: FetchMetadata
    #: every partition has a topic id, so the request may use them (Fetch v13+)
    can_use_topic_ids: bool

    def forgotten(self, version: int) -> list[TopicIdPartition]:
        """The request's ``forgotten_topics_data`` at ``version``: replaced partitions are
        forgotten under their old id only when topics are named by id."""
        if version >= TOPIC_IDS_FETCH_VERSION and self.to_replace:
            return self.to_forget + self.to_replace
        return self.to_forget


def find_missing(to_find: Iterable[Any], to_search: Any) -> list[Any]:
    """The items of ``to_find`` (in order) that ``to_search`` does not contain."""
    return [x for x in to_find if x not in to_search]


class FetchRequestBuilder:
    """The partitions wanted by the next fetch, in fetch order (``add``), turned into that
    fetch's :class:`FetchRequestData` by ``build`` -- once: the build moves the session on."""

    def __init__(self, handler: "FetchSessionHandler") -> None:
        self._handler = handler
        self._next: dict[TopicPartition, PartitionData] | None = {}
        self._topic_names: dict[Uuid, str] = {}
        self._without_ids = 0

    def add(self, tp: TopicPartition, data: PartitionData) -> None:
        nxt = self._next
        if nxt is None:
            raise RuntimeError("FetchRequestBuilder.add after build: a builder makes one request")
        nxt[tp] = data
        if data.topic_id == ZERO_UUID:
            self._without_ids += 1
        elif data.topic_id not in self._topic_names:
            self._topic_names[data.topic_id] = tp.topic

    def build(self) -> FetchRequestData:
        nxt = self._next
        if nxt is None:
            raise RuntimeError("FetchRequestBuilder.build called twice: a builder makes one request")
        self._next = None
        h = self._handler
        can_use_ids = self._without_ids == 0
        meta = h.next_metadata
        if meta.is_full:
            h.session_partitions = nxt
            h.session_topic_names = self._topic_names if can_use_ids else {}
            return FetchRequestData(dict(nxt), [], [], nxt, meta, can_use_ids)
        session = h.session_partitions
        removed: list[TopicIdPartition] = []
        replaced: list[TopicIdPartition] = []
        changed: list[tuple[TopicPartition, PartitionData]] = []
        pop = nxt.pop
        for tp, prev in session.items():
            data = pop(tp, None)
            if data is None:
                removed.append((prev.topic_id, tp))
                if prev.topic_id == ZERO_UUID:
                    can_use_ids = False  # forgetting it needs its name: no ids in this request
            elif data != prev:
                if data.topic_id != prev.topic_id and prev.topic_id != ZERO_UUID and data.topic_id != ZERO_UUID:
                    replaced.append((prev.topic_id, tp))
                changed.append((tp, data))
        for _tid, tp in removed:
            del session[tp]
        # what is left of ``nxt`` is new to the session: sent first, then the changed ones
        to_send = nxt
        for tp, data in nxt.items():
            session[tp] = data
        for tp, data in changed:
            session[tp] = data
            to_send[tp] = data
        h.session_topic_names = self._topic_names if can_use_ids else {}
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%sbuilt incremental fetch %s for node %d: %d sent (%d new), %d forgotten, %d replaced, of %d",
                      h.log_prefix, meta, h.node, len(to_send), len(to_send) - len(changed), len(removed),
                      len(replaced), len(session))
        return FetchRequestData(to_send, removed, replaced, session, meta, can_use_ids)


class FetchSessionHandler:
    """The session with one source broker ``node`` (see the module doc)."""

    def __init__(self, node: int, log_prefix: str = "") -> None:
        self.node = node
        self.log_prefix = log_prefix
        #: the metadata of the next request
        self.next_metadata: FetchMetadata = INITIAL
        #: the session's partitions and the data last sent for each, in fetch order
        self.session_partitions: dict[TopicPartition, PartitionData] = {}
        #: topic id -> name for the session's topics (empty when the session does not use ids)
        self.session_topic_names: dict[Uuid, str] = {}

    @property
    def session_id(self) -> int:
        return self.next_metadata.session_id

    def new_builder(self) -> FetchRequestBuilder:
        return FetchRequestBuilder(self)

    # ------------------------------------------------------------------ answers
    def response_data(self, response: Any, version: int) -> dict[TopicPartition, Any]:
        """The answer's partitions by topic partition: names from the answer before v13, from
        the session's topic ids from v13 (a topic id the session does not know is left out, and
        :meth:`handle_response` rejects the answer for it)."""
        out: dict[TopicPartition, Any] = {}
        by_id = version >= TOPIC_IDS_FETCH_VERSION
        names = self.session_topic_names
        for topic in response.responses:
            name = names.get(topic.topic_id) if by_id else topic.topic
            if name is None:
                continue
            for pd in topic.partitions:
                out[TopicPartition(name, int(pd.partition_index))] = pd
        return out

    def _verify(self, full: bool, partitions: Mapping[TopicPartition, Any], response: Any, version: int) -> str | None:
        """None when the answer's partitions fit the session, else what is wrong."""
        problems = []
        if full:
            omitted = find_missing(self.session_partitions, partitions)
            if omitted:
                problems.append(f"omittedPartitions=({', '.join(map(str, omitted[:10]))}"
                                f"{', ...' if len(omitted) > 10 else ''})")
        extra = find_missing(partitions, self.session_partitions)
        if extra:
            problems.append(f"extraPartitions=({', '.join(map(str, extra[:10]))}{', ...' if len(extra) > 10 else ''})")
        if version >= TOPIC_IDS_FETCH_VERSION:
            extra_ids = find_missing(dict.fromkeys(t.topic_id for t in response.responses), self.session_topic_names)
            if extra_ids:
                problems.append(f"extraIds=({', '.join(map(str, extra_ids))})")
        return ", ".join(problems) if problems else None

    def handle_response(self, response: Any, version: int,
                        partitions: Mapping[TopicPartition, Any] | None = None) -> bool:
        """Move the session on by the answer to the last built request; True when the answer
        may be used.  ``partitions``: :meth:`response_data` of it, when the caller has it."""
        meta = self.next_metadata
        error = int(response.error_code)
        if error != 0:
            log.info("%sNode %d was unable to process the fetch request with %s: %s.", self.log_prefix, self.node,
                     meta, error_name(error))
            if error == Errors.FETCH_SESSION_ID_NOT_FOUND:
                self.next_metadata = INITIAL
            else:
                self.next_metadata = meta.next_close_existing_attempt_new()
            return False
        if partitions is None:
            partitions = self.response_data(response, version)
        session_id = int(response.session_id)
        if meta.is_full:
            if not partitions and int(response.throttle_time_ms) > 0:
                # KIP-219: a throttled full fetch is answered empty; not an error, but no data either
                log.debug("%sNode %d answered an empty full fetch: throttled for %d ms", self.log_prefix, self.node,
                          int(response.throttle_time_ms))
                self.next_metadata = INITIAL
                return False
            problem = self._verify(True, partitions, response, version)
            if problem is not None:
                log.info("%sNode %d sent an invalid full fetch response with %s", self.log_prefix, self.node, problem)
                self.next_metadata = INITIAL
                return False
            if session_id == INVALID_SESSION_ID:
                self.next_metadata = INITIAL  # no session (sessions off or no room): the next fetch is full too
            else:
                log.debug("%sNode %d created fetch session %d with %d partitions", self.log_prefix, self.node,
                          session_id, len(partitions))
                self.next_metadata = FetchMetadata.new_incremental(session_id)
            return True
        problem = self._verify(False, partitions, response, version)
        if problem is not None:
            log.info("%sNode %d sent an invalid incremental fetch response with %s", self.log_prefix, self.node,
                     problem)
            self.next_metadata = meta.next_close_existing_attempt_new()
            return False
        if session_id == INVALID_SESSION_ID:
            # the leader closed the session (e.g. it was left empty): start again with a full fetch
            log.debug("%sNode %d closed fetch session %d", self.log_prefix, self.node, meta.session_id)
            self.next_metadata = INITIAL
        else:
            self.next_metadata = meta.next_incremental()
        return True

    def handle_error(self, error: BaseException | str | None = None) -> None:
        """The request failed to be sent or answered (connection lost, timeout): the next fetch
        is full, closing the session and asking for a new one."""
        log.info("%sError sending fetch request %s to node %d: %s", self.log_prefix, self.next_metadata, self.node,
                 error)
        self.next_metadata = self.next_metadata.next_close_existing_attempt_new()

    def notify_close(self) -> None:
        """The next fetch closes the session and opens none."""
        self.next_metadata = self.next_metadata.next_close_existing()
