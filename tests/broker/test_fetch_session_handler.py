"""The follower/client side of fetch sessions (kraft_node/broker/fetch_session_handler.py).

Kafka's ``FetchSessionHandlerTest`` scenarios re-stated (each at Fetch v12, names, and v13+, ids):

* testFindMissing: the items of one set missing from another, in order.
* testSessionless: a full fetch answered with session id 0 leaves the next fetch full (INITIAL).
* testIncrementals: after a session is made, a fetch that adds one partition and changes another
  sends only those two (the new one first); INVALID_FETCH_SESSION_EPOCH makes the next fetch
  full, closing the session (same id, epoch 0) and naming every partition.
* testDoubleBuild: a builder builds once.
* testIncrementalPartitionRemoval: partitions not wanted any more are forgotten and not sent;
  FETCH_SESSION_ID_NOT_FOUND makes the next fetch INITIAL (id 0, epoch 0).
* testVerifyFullFetchResponsePartitions(+WithTopicIds): a full answer with partitions the session
  lacks is "extra", one without some of the session's is "omitted"; unknown topic ids "extraIds".
* testTopLevelErrorResetsMetadata: any other top-level error closes the session on the next fetch.

kraft's own: a topic id replaced under the same name (forgotten under the old id from v13), the
epoch wrap, handle_error / notify_close, a throttled empty full answer, an incremental answer
closing the session, and a randomized run against the leader's real FetchSessionCache: whatever
the follower wants, adds, drops or changes, and however sessions are lost, the leader reads
exactly the wanted partitions with their latest data -- none is silently dropped.
"""
from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest

from kraft_node.broker.fetch_session import FetchSessionCache
from kraft_node.broker.fetch_session_handler import (
    INITIAL,
    FetchMetadata,
    FetchSessionHandler,
    PartitionData,
    find_missing,
)
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.fetch import FetchResponse
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

VERSIONS = (12, 18)


def tp(topic: str, p: int) -> TopicPartition:
    return TopicPartition(topic, p)


class Ids:
    """Topic ids per name, only for versions that use them (Kafka's addTopicId)."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.ids: dict[str, Uuid] = {}

    def __call__(self, topic: str) -> Uuid:
        if self.version < 13:
            return ZERO_UUID
        return self.ids.setdefault(topic, Uuid.random())


def data(tid: Uuid, fetch_offset: int, log_start: int, max_bytes: int, epoch: int = -1) -> PartitionData:
    return PartitionData(tid, fetch_offset, log_start, max_bytes, epoch, -1)


def response(ids: Ids, parts: list[tuple[str, int, int]], *, session_id: int = 0, error: int = 0,
             throttle: int = 0, topic_id: dict[str, Uuid] | None = None) -> Any:
    """A FetchResponse of (topic, partition, high watermark) entries."""
    topics: list[Any] = []
    for topic, p, hw in parts:
        tid = (topic_id or {}).get(topic) or ids(topic)
        pd = FetchResponse.PartitionData(partition_index=p, high_watermark=hw, last_stable_offset=hw,
                                         log_start_offset=0)
        if topics and topics[-1].topic == topic:
            topics[-1].partitions.append(pd)
        else:
            topics.append(FetchResponse.FetchableTopicResponse(topic=topic, topic_id=tid, partitions=[pd]))
    return FetchResponse(throttle_time_ms=throttle, error_code=error, session_id=session_id, responses=topics)


def build(handler: FetchSessionHandler, wanted: dict[TopicPartition, PartitionData]) -> Any:
    builder = handler.new_builder()
    for k, v in wanted.items():
        builder.add(k, v)
    return builder.build()


def test_find_missing():
    f0, f1, b0, b1, z0, z1 = tp("foo", 0), tp("foo", 1), tp("bar", 0), tp("bar", 1), tp("baz", 0), tp("baz", 1)
    assert find_missing([f0], {f0}) == []
    assert find_missing([f0], {f1}) == [f0]
    assert find_missing([f0, f1], {z0}) == [f0, f1]
    assert find_missing([f0, f1, b0, b1], {b0, z0, z1}) == [f0, f1, b1]
    assert find_missing([f0, f1, b0, b1, z1], {f0, f1, b0, b1, z0, z1}) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_sessionless(version):
    ids = Ids(version)
    h = FetchSessionHandler(1)
    want = {tp("foo", 0): data(ids("foo"), 0, 100, 200), tp("foo", 1): data(ids("foo"), 10, 110, 210)}
    d = build(h, want)
    assert d.to_send == want and dict(d.session_partitions) == want and list(d.to_send) == list(want)
    assert d.metadata == INITIAL and d.metadata.is_full
    assert h.handle_response(response(ids, [("foo", 0, 0), ("foo", 1, 0)]), version)
    # session id 0 answered: no session, the next fetch is full again
    d2 = build(h, {tp("foo", 0): want[tp("foo", 0)]})
    assert d2.metadata == INITIAL and d2.to_send == {tp("foo", 0): want[tp("foo", 0)]} and d2.to_forget == []


@pytest.mark.parametrize("version", VERSIONS)
def test_incrementals(version):
    ids = Ids(version)
    h = FetchSessionHandler(1)
    foo0, foo1, bar0 = tp("foo", 0), tp("foo", 1), tp("bar", 0)
    d = build(h, {foo0: data(ids("foo"), 0, 100, 200), foo1: data(ids("foo"), 10, 110, 210)})
    assert d.metadata == INITIAL
    assert h.handle_response(response(ids, [("foo", 0, 10), ("foo", 1, 10)], session_id=123), version)
    assert h.next_metadata == FetchMetadata(123, 1)

    # adds bar-0 and changes foo-1: only those two are sent, the new one first
    want2 = {foo0: data(ids("foo"), 0, 100, 200), foo1: data(ids("foo"), 10, 120, 210),
             bar0: data(ids("bar"), 20, 200, 200)}
    d2 = build(h, want2)
    assert not d2.metadata.is_full and d2.metadata == FetchMetadata(123, 1)
    assert list(d2.session_partitions.items()) == list(want2.items())
    assert list(d2.to_send.items()) == [(bar0, want2[bar0]), (foo1, want2[foo1])]
    assert d2.to_forget == [] and d2.to_replace == []
    assert h.handle_response(response(ids, [("foo", 1, 20)], session_id=123), version)
    assert h.next_metadata == FetchMetadata(123, 2)

    # INVALID_FETCH_SESSION_EPOCH: the next fetch is full and closes the session (same id, epoch 0)
    assert not h.handle_response(response(ids, [], error=int(Errors.INVALID_FETCH_SESSION_EPOCH)), version)
    d4 = build(h, want2)
    assert d4.metadata.is_full and d4.metadata == FetchMetadata(123, 0)
    assert d4.to_send == want2 and dict(d4.session_partitions) == want2


def test_double_build():
    h = FetchSessionHandler(1)
    b = h.new_builder()
    b.add(tp("foo", 0), data(Uuid.random(), 0, 100, 200))
    b.build()
    with pytest.raises(RuntimeError, match="build called twice"):
        b.build()
    with pytest.raises(RuntimeError, match="add after build"):
        b.add(tp("foo", 1), data(Uuid.random(), 0, 100, 200))


@pytest.mark.parametrize("version", VERSIONS)
def test_incremental_partition_removal(version):
    ids = Ids(version)
    h = FetchSessionHandler(1)
    foo0, foo1, bar0 = tp("foo", 0), tp("foo", 1), tp("bar", 0)
    want = {foo0: data(ids("foo"), 0, 100, 200), foo1: data(ids("foo"), 10, 110, 210),
            bar0: data(ids("bar"), 20, 120, 220)}
    d = build(h, want)
    assert d.metadata.is_full
    assert h.handle_response(response(ids, [("foo", 0, 10), ("foo", 1, 10), ("bar", 0, 10)], session_id=123),
                             version)
    # two partitions removed: forgotten, nothing sent
    d2 = build(h, {foo1: want[foo1]})
    assert d2.metadata == FetchMetadata(123, 1)
    assert dict(d2.session_partitions) == {foo1: want[foo1]} and d2.to_send == {}
    assert sorted(d2.to_forget, key=str) == sorted([(ids("foo"), foo0), (ids("bar"), bar0)], key=str)
    # FETCH_SESSION_ID_NOT_FOUND: the session is gone; the next fetch is INITIAL (no id to close)
    assert not h.handle_response(response(ids, [], error=int(Errors.FETCH_SESSION_ID_NOT_FOUND)), version)
    d3 = build(h, {foo0: want[foo0]})
    assert d3.metadata == INITIAL and d3.to_send == {foo0: want[foo0]} and dict(d3.session_partitions) == d3.to_send


@pytest.mark.parametrize("version", VERSIONS)
def test_verify_full_fetch_response_partitions(version):
    ids = Ids(version)
    h = FetchSessionHandler(1)
    three = [("foo", 0, 10), ("foo", 1, 10), ("bar", 0, 10)]
    resp = response(ids, three)
    issue = h._verify(True, h.response_data(resp, version), resp, version)
    # no session yet: at v12 the partitions are extra; from v13 their ids are unknown too
    assert issue is not None and "extra" in issue and "omitted" not in issue
    build(h, {tp("foo", 0): data(ids("foo"), 0, 100, 200), tp("foo", 1): data(ids("foo"), 10, 110, 210),
              tp("bar", 0): data(ids("bar"), 20, 120, 220)})
    resp2 = response(ids, three)
    assert h._verify(True, h.response_data(resp2, version), resp2, version) is None
    resp3 = response(ids, three[:2])
    issue3 = h._verify(True, h.response_data(resp3, version), resp3, version)
    assert issue3 is not None and "extra" not in issue3 and f"omittedPartitions=({tp('bar', 0)})" in issue3
    # an invalid full answer is not used, and the next fetch is INITIAL again
    assert not h.handle_response(resp3, version)
    assert h.next_metadata == INITIAL


def test_verify_full_fetch_response_partitions_with_topic_ids():
    version = 18
    ids = Ids(version)
    extra_id = Uuid.random()
    h = FetchSessionHandler(1)
    resp1 = response(ids, [("foo", 0, 10), ("extra2", 1, 10), ("bar", 0, 10)], topic_id={"extra2": extra_id})
    issue = h._verify(True, h.response_data(resp1, version), resp1, version)
    assert "extraIds=" in issue and "omitted" not in issue
    build(h, {tp("foo", 0): data(ids("foo"), 0, 100, 200), tp("bar", 0): data(ids("bar"), 20, 120, 220)})
    resp2 = response(ids, [("foo", 0, 10), ("extra2", 1, 10), ("bar", 0, 10)], topic_id={"extra2": extra_id})
    issue2 = h._verify(True, h.response_data(resp2, version), resp2, version)
    # extra2's id is unknown to the session: its partitions cannot even be named, only the id is extra
    assert "extraPartitions" not in issue2 and "extraIds=" in issue2 and "omitted" not in issue2
    resp3 = response(ids, [("foo", 0, 10), ("bar", 0, 10)])
    assert h._verify(True, h.response_data(resp3, version), resp3, version) is None


def test_top_level_error_resets_metadata():
    version = 18
    ids = Ids(version)
    h = FetchSessionHandler(1)
    build(h, {tp("foo", 0): data(ids("foo"), 0, 100, 200), tp("foo", 1): data(ids("foo"), 10, 110, 210)})
    assert h.handle_response(response(ids, [("foo", 0, 10), ("foo", 1, 10)], session_id=123), version)
    d2 = build(h, {tp("unknown", 0): data(ids("unknown"), 0, 100, 200)})
    assert d2.metadata == FetchMetadata(123, 1)
    bad = response(ids, [("unknown", 0, -1)], session_id=123, error=int(Errors.UNKNOWN_TOPIC_ID))
    assert not h.handle_response(bad, version)
    # a new epoch: the next request closes the session and asks for another
    d3 = h.new_builder().build()
    assert d3.metadata == FetchMetadata(123, 0)


# ------------------------------------------------------------------------------- kraft's own
def test_a_replaced_topic_id_is_sent_and_the_old_id_forgotten_from_v13():
    h = FetchSessionHandler(1)
    old, new, other = Uuid.random(), Uuid.random(), Uuid.random()
    t0, o0 = tp("t", 0), tp("o", 0)
    build(h, {t0: data(old, 5, 0, 100), o0: data(other, 1, 0, 100)})
    assert h.handle_response(response(Ids(18), [("t", 0, 5), ("o", 0, 1)], session_id=9,
                                      topic_id={"t": old, "o": other}), 18)
    assert h.session_topic_names == {old: "t", other: "o"}
    d = build(h, {t0: data(new, 0, 0, 100), o0: data(other, 1, 0, 100)})
    assert d.to_send == {t0: data(new, 0, 0, 100)} and d.to_forget == [] and d.to_replace == [(old, t0)]
    assert d.forgotten(13) == [(old, t0)] and d.forgotten(12) == []   # by name the key is the same
    assert h.session_topic_names == {new: "t", other: "o"}


def test_metadata_transitions_and_epoch_wrap():
    assert FetchMetadata.new_incremental(7) == FetchMetadata(7, 1)
    assert FetchMetadata(7, 2**31 - 1).next_incremental() == FetchMetadata(7, 1)
    assert FetchMetadata(7, 4).next_close_existing_attempt_new() == FetchMetadata(7, 0)
    assert FetchMetadata(7, 4).next_close_existing() == FetchMetadata(7, -1)
    assert FetchMetadata(7, -1).is_full and FetchMetadata(7, 0).is_full and not FetchMetadata(7, 1).is_full
    h = FetchSessionHandler(1)
    build(h, {tp("t", 0): data(ZERO_UUID, 0, 0, 1)})
    assert h.handle_response(response(Ids(12), [("t", 0, 0)], session_id=5), 12)
    h.handle_error(TimeoutError("lost"))
    assert h.next_metadata == FetchMetadata(5, 0)
    h.notify_close()
    assert h.next_metadata == FetchMetadata(5, -1)


def test_a_throttled_empty_full_answer_and_an_incremental_answer_closing_the_session():
    ids = Ids(12)
    h = FetchSessionHandler(1)
    want = {tp("t", 0): data(ZERO_UUID, 0, 0, 1), tp("t", 1): data(ZERO_UUID, 0, 0, 1)}
    build(h, want)
    assert not h.handle_response(response(ids, [], throttle=100), 12)   # KIP-219: no data, stay INITIAL
    assert h.next_metadata == INITIAL
    build(h, want)
    assert h.handle_response(response(ids, [("t", 0, 1), ("t", 1, 1)], session_id=3), 12)
    build(h, want)
    # an incremental answer may hold a subset; with session id 0 the leader closed the session
    assert h.handle_response(response(ids, [("t", 1, 2)], session_id=0), 12)
    assert h.next_metadata == INITIAL
    d = build(h, want)
    assert d.metadata.is_full and d.to_send == want
    # an incremental answer naming a partition the session lacks is not used; the session is closed next
    assert h.handle_response(response(ids, [("t", 0, 1), ("t", 1, 1)], session_id=4), 12)
    build(h, want)
    assert not h.handle_response(response(ids, [("x", 0, 1)], session_id=4), 12)
    assert h.next_metadata == FetchMetadata(4, 0)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("seed", range(6))
def test_the_leader_always_reads_exactly_the_wanted_partitions(version, seed):
    """A randomized run of handler and the leader's FetchSessionCache: each round the follower
    wants a random subset (some partitions added, some dropped, some moved on); sometimes the
    leader loses the session, sometimes a request fails before it reaches the leader.  After
    each answered request the leader reads exactly the wanted partitions at the wanted offsets."""
    rng = random.Random(seed)
    clock = [0]
    cache = FetchSessionCache(2, clock_ms=lambda: clock[0])
    h = FetchSessionHandler(1)
    topics = {name: (Uuid.random() if version >= 13 else ZERO_UUID) for name in ("a", "b", "c")}
    universe = [tp(name, p) for name in topics for p in range(4)]
    offsets = {k: 0 for k in universe}
    full_rounds = 0
    for _round in range(150):
        clock[0] += 100
        for k in universe:
            if rng.random() < 0.2:
                offsets[k] += rng.randint(1, 5)
        wanted = {k: data(topics[k.topic], offsets[k], 0, 1000) for k in universe if rng.random() < 0.8}
        if not wanted:
            continue
        d = build(h, wanted)
        if rng.random() < 0.05:
            h.handle_error("lost in transit")   # never reached the leader
            continue
        if rng.random() < 0.05:
            cache.sessions.clear()              # the leader restarted
        full_rounds += d.metadata.is_full
        items = [(k.topic, v.topic_id, SimpleNamespace(partition=k.partition, fetch_offset=v.fetch_offset))
                 for k, v in d.to_send.items()]
        ctx = cache.new_context(version, d.metadata.session_id, d.metadata.epoch, True, items,
                                [(k.topic, tid, k.partition) for tid, k in d.forgotten(version)])
        if ctx.kind == "error":
            assert ctx.error == Errors.FETCH_SESSION_ID_NOT_FOUND
            assert not h.handle_response(SimpleNamespace(error_code=int(ctx.error), session_id=0, responses=[],
                                                         throttle_time_ms=0), version)
            continue
        read = {tp(name, int(r.partition)): int(r.fetch_offset) for name, _tid, r in ctx.items}
        assert read == {k: v.fetch_offset for k, v in wanted.items()}, "the leader reads what is wanted"
        answers = []
        for name, tid, r in ctx.items:
            pd = FetchResponse.PartitionData(partition_index=int(r.partition), high_watermark=rng.randint(0, 3),
                                             log_start_offset=0, records=b"")
            answers.append((name, tid, pd))
        err, sid, keep = cache.finish(ctx, answers)
        topics_out: list[Any] = []
        for i in keep:
            name, tid, pd = answers[i]
            topics_out.append(FetchResponse.FetchableTopicResponse(topic=name, topic_id=tid, partitions=[pd]))
        resp = FetchResponse(error_code=int(err), session_id=sid, responses=topics_out)
        assert h.handle_response(resp, version)
        if ctx.kind == "incremental":
            assert h.next_metadata.session_id == sid and not h.next_metadata.is_full
    assert 1 <= full_rounds < 60   # sessions were used, and re-made after losses
