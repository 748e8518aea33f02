"""The loader's columnar replay of ISR/leader-only PartitionChangeRecord runs equals record at a time.

Two batch loaders get the same batches over the same image: one with ``fast_changes`` off (every
record through ``MetadataDelta.replay``: the definition), one with it on.  Every publication must
match: the image, the manifest, the topics delta (changed topics in order, each topic's
partition changes in order, election counts) and ``local_changes`` of every broker; and a fault
must be reported at the same offset with the same message.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.change_runs import change_runs
from kraft_node.metadata.image.metadata_image import MetadataImage
from kraft_node.metadata.loader import MetadataBatchLoader, RecordingFaultHandler
from kraft_node.metadata.loader.batch_loader import CHANGE_RUN_MIN
from kraft_node.raft.messages import Batch, LeaderAndEpoch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

LEADER_AND_EPOCH = LeaderAndEpoch(1, 3)
BROKERS = list(range(8))
DIR_A = Uuid(bytes(range(1, 17)))
DIR_B = Uuid(bytes(range(2, 18)))


def tid(i: int) -> Uuid:
    return Uuid(bytes([7, i + 1]) + bytes(14))


def enc(msg: object) -> bytes:
    return ApiMessageAndVersion(msg, m.PartitionChangeRecord.HIGHEST_VERSION
                                if isinstance(msg, m.PartitionChangeRecord) else _version(msg)).encode()


def _version(msg: object) -> int:
    if isinstance(msg, m.PartitionRecord):
        return 2
    return 0


class Updater:
    def __init__(self) -> None:
        self.published: list[tuple[object, MetadataImage, object]] = []

    def __call__(self, delta, image, manifest) -> None:
        self.published.append((delta, image, manifest))


def partition_record(t: int, p: int, rng: random.Random, elr: bool) -> m.PartitionRecord:
    replicas = rng.sample(BROKERS, 3)
    fields = dict(partition_id=p, topic_id=tid(t), replicas=replicas, isr=list(replicas), leader=replicas[0],
                  leader_epoch=rng.randrange(3), partition_epoch=rng.randrange(5))
    if rng.random() < 0.3:
        fields["directories"] = [rng.choice((DIR_A, DIR_B)) for _ in replicas]
    if elr:
        fields["eligible_leader_replicas"] = [replicas[1]]
        fields["isr"] = [replicas[0]]
    return m.PartitionRecord(**fields)


def base_image(seed: int) -> tuple[MetadataImage, dict[int, int]]:
    """Topics 0-3 in a block (a batch big enough for the bulk path), topics 4-5 record at a time
    (dict-backed partitions); partition counts returned."""
    rng = random.Random(seed)
    counts = {0: 200, 1: 150, 2: 100, 3: 80, 4: 20, 5: 7}
    big: list[bytes] = []
    for t in range(4):
        big.append(enc(m.TopicRecord(name=f"t{t}", topic_id=tid(t))))
        big += [enc(partition_record(t, p, rng, elr=(t == 3 and p % 5 == 0))) for p in range(counts[t])]
    small: list[bytes] = []
    for t in (4, 5):
        small.append(enc(m.TopicRecord(name=f"t{t}", topic_id=tid(t))))
        small += [enc(partition_record(t, p, rng, elr=(p % 3 == 0))) for p in range(counts[t])]
    up = Updater()
    loader = MetadataBatchLoader(clock_ns=lambda: 0, fault_handler=RecordingFaultHandler("test"), callback=up)
    loader.load_batch(Batch(0, 1, tuple(big)), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH)
    loader.load_batch(Batch(len(big), 1, tuple(small)), LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH)
    image = up.published[-1][1]
    assert image.topics.get_topic(tid(0)).partitions.block is not None
    assert image.topics.get_topic(tid(4)).partitions.block is None
    return image, counts


def simple_change(t: int, p: int, rng: random.Random) -> m.PartitionChangeRecord:
    isr = None if rng.random() < 0.3 else rng.sample(BROKERS, rng.randrange(0, 4))
    leader = rng.choice((-2, -2, -1, *BROKERS))
    return m.PartitionChangeRecord(partition_id=p, topic_id=tid(t), isr=isr, leader=leader)


def other_record(rng: random.Random, counts: dict[int, int], fresh: list[int]) -> list[object]:
    kind = rng.randrange(8)
    t = rng.randrange(6)
    p = rng.randrange(counts[t])
    if kind == 0:  # not simple: an ELR
        return [m.PartitionChangeRecord(partition_id=p, topic_id=tid(t), leader=-2,
                                        eligible_leader_replicas=[rng.choice(BROKERS)])]
    if kind == 1:  # a new topic, then changes of it
        n = fresh[0]
        fresh[0] += 1
        return [m.TopicRecord(name=f"n{n}", topic_id=tid(n)), partition_record(n, 0, rng, False)]
    if kind == 2:
        return [m.PartitionRecord(partition_id=p, topic_id=tid(t), replicas=[1, 2], isr=[1], leader=1)]
    if kind == 3:
        return [m.RemoveTopicRecord(topic_id=tid(t))]
    if kind == 4:  # a partition nobody has: a fault
        return [m.PartitionChangeRecord(partition_id=counts[t] + 5, topic_id=tid(t), leader=1)]
    if kind == 5:
        return [m.BeginTransactionRecord(name="x")]
    if kind == 6:
        return [m.EndTransactionRecord()]
    return [m.ClearElrRecord(topic_name=f"t{t}")]


def history(seed: int, counts: dict[int, int], batches: int, others: float) -> list[Batch]:
    rng = random.Random(seed)
    fresh = [100]
    out: list[Batch] = []
    offset = 10_000
    for _ in range(batches):
        values: list[bytes] = []
        size = rng.choice((5, 20, 70, 200))
        while len(values) < size:
            if rng.random() < others:
                values += [enc(r) for r in other_record(rng, counts, fresh)]
            else:
                t = rng.randrange(6)
                # hot partitions: several changes of one partition in a run
                p = rng.randrange(min(counts[t], rng.choice((3, 1000))))
                values.append(enc(simple_change(t, p, rng)))
        out.append(Batch(offset, 2, tuple(values), append_time_ms=offset))
        offset += len(values)
    return out


def replay(image: MetadataImage, batches: list[Batch], fast: bool, commit_every: int):
    up = Updater()
    faults = RecordingFaultHandler("test")
    loader = MetadataBatchLoader(clock_ns=lambda: 0, fault_handler=faults, callback=up)
    loader.fast_changes = fast
    loader.reset_to_image(image, seen_record=True)
    for i, b in enumerate(batches):
        loader.load_batch(b, LEADER_AND_EPOCH)
        if (i + 1) % commit_every == 0:
            loader.maybe_flush_batches(LEADER_AND_EPOCH)
    loader.maybe_flush_batches(LEADER_AND_EPOCH)
    return up.published, loader.failure, loader.transaction_state


def topics_delta_view(delta) -> object:
    td = delta.topics_delta
    if td is None:
        return None
    topics = []
    for t, d in td.changed_topics().items():
        changes = d.partition_changes()
        topics.append((t, list(changes.items()), list(d.new_partitions()),
                       list(d.partition_to_unclean_leader_election_count().items()),
                       list(d.partition_to_elr_election_count().items())))
    return topics, td.deleted_topic_ids(), td.created_topic_ids()


def assert_same(a, b) -> None:
    pub_a, fail_a, txn_a = a
    pub_b, fail_b, txn_b = b
    assert fail_a == fail_b
    assert txn_a == txn_b
    assert len(pub_a) == len(pub_b)
    for (da, ia, ma), (db, ib, mb) in zip(pub_a, pub_b):
        assert ia == ib
        assert ia.topics == ib.topics
        assert ma == mb
        assert topics_delta_view(da) == topics_delta_view(db)
        if da.topics_delta is not None:
            for broker in BROKERS:
                assert da.topics_delta.local_changes(broker) == db.topics_delta.local_changes(broker)


@pytest.fixture(scope="module")
def image_and_counts():
    return base_image(11)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), others=st.sampled_from((0.0, 0.02, 0.1)),
       commit_every=st.sampled_from((1, 2, 5)))
def test_fast_equals_record_at_a_time(image_and_counts, seed: int, others: float, commit_every: int) -> None:
    image, counts = image_and_counts
    batches = history(seed, counts, 6, others)
    slow = replay(image, batches, False, commit_every)
    fast = replay(image, batches, True, commit_every)
    assert_same(slow, fast)


def test_shutdown_shape_takes_the_columnar_path(image_and_counts) -> None:
    """Only simple changes: the runs are found (so the fast path is what the equality covers)."""
    image, counts = image_and_counts
    batches = history(5, counts, 3, 0.0)
    big = [b for b in batches if len(b.records) >= CHANGE_RUN_MIN]
    assert big
    for b in big:
        found = change_runs(b.records, CHANGE_RUN_MIN)
        assert found is not None and found[1] == [(0, len(b.records), 0, len(b.records))]
    assert_same(replay(image, batches, False, 1), replay(image, batches, True, 1))
    published = replay(image, batches, True, 1)[0]
    assert any(len(d.topics_delta.changed_topics()) for d, _i, _m in published)


def test_unknown_partition_fails_at_its_offset(image_and_counts) -> None:
    image, counts = image_and_counts
    rng = random.Random(3)
    values = [enc(simple_change(0, p, rng)) for p in range(90)]
    values[17] = enc(m.PartitionChangeRecord(partition_id=9999, topic_id=tid(0), leader=-2, isr=[1]))
    values += [enc(simple_change(1, p, rng)) for p in range(70)]
    batches = [Batch(500, 2, tuple(values))]
    slow = replay(image, batches, False, 1)
    fast = replay(image, batches, True, 1)
    assert fast[1] == (517, "Error loading metadata log record from offset 517")
    assert_same(slow, fast)


def test_epochs_and_counts_of_a_hot_partition(image_and_counts) -> None:
    """Many changes of one partition in one run: epochs grow per record, the ELR count per
    record whose leader is in the ELR."""
    image, _counts = image_and_counts
    before = image.topics.get_partition(tid(3), 0)
    assert before.elr
    elr_leader = before.elr[0]
    values = [enc(m.PartitionChangeRecord(partition_id=0, topic_id=tid(3), leader=elr_leader if i % 4 == 0 else -2,
                                          isr=[elr_leader] if i % 2 else None)) for i in range(100)]
    assert len(values) >= CHANGE_RUN_MIN
    fast = replay(image, [Batch(700, 2, tuple(values))], True, 1)
    assert_same(replay(image, [Batch(700, 2, tuple(values))], False, 1), fast)
    delta, after_image, _ = fast[0][-1]
    after = after_image.topics.get_partition(tid(3), 0)
    assert after.partition_epoch == before.partition_epoch + 100
    assert after.leader_epoch == before.leader_epoch + 25
    assert after.isr == (elr_leader,)
    assert delta.topics_delta.changed_topic(tid(3)).partition_to_elr_election_count() == {0: 25}


def test_big_batch_of_changes_skips_the_bulk_fold(image_and_counts) -> None:
    """A batch of >= BULK_MIN_RECORDS mostly simple changes takes the columnar runs (published at
    the end of the commit), not bulk_delta (published at once); the image is the same."""
    image, counts = image_and_counts
    rng = random.Random(9)
    values = [enc(simple_change(t, p, rng)) for t in range(4) for p in range(counts[t])] * 2
    values.insert(100, enc(m.PartitionChangeRecord(partition_id=0, topic_id=tid(4), leader=-2,
                                                   eligible_leader_replicas=[1])))
    assert len(values) >= 512
    batches = [Batch(900, 2, tuple(values))]
    fast = replay(image, batches, True, 1)
    slow = replay(image, batches, False, 1)
    assert fast[1] is None and slow[1] is None
    assert fast[0][-1][1] == slow[0][-1][1]
    delta = fast[0][-1][0]
    assert delta.topics_delta is not None and len(delta.topics_delta.changed_topics()) == 5
    # record at a time (fast_changes off and the bulk fold not taken) gives the same delta
    loader_delta = replay_record_at_a_time(image, batches)
    assert topics_delta_view(loader_delta) == topics_delta_view(delta)


def replay_record_at_a_time(image: MetadataImage, batches: list[Batch]):
    from kraft_node.metadata.image.metadata_image import MetadataDelta
    delta = MetadataDelta(image)
    for b in batches:
        for value in b.records:
            delta.replay(m.decode_metadata_record(value, 0)[2])
    return delta
