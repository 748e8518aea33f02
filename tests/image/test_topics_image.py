"""TopicsImage / TopicsDelta over columnar partition blocks.

Kafka's TopicsImageTest re-stated (IMAGE1, DELTA1_RECORDS, IMAGE2, the localChanges and ClearElr
tests, create-then-delete, the name/id views, the 4.1 election counters), the image written at
older metadata.versions with its losses, the errors, structural sharing (unchanged topics and
the block shared by identity), block-backed == dict-backed, and property tests: random record
sequences give the same image whatever the delta boundaries, equal to a plain-dict oracle, and
every intermediate image written as records and read back is itself.
"""
from __future__ import annotations

import dataclasses
import gc
import importlib
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.images import check_all_intermediate_images, image_records, replay_all

import kraft_node._pure._topics_map as pure_kernel
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_control import (
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
    UnwritableMetadataError,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image import topic_map
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.topics import (
    COMPACT_MIN_OVERRIDES,
    DIRECTORY_LOSS,
    ELR_LOSS,
    PartitionInfo,
    TopicDelta,
    TopicIdPartition,
    TopicImage,
    TopicPartition,
    TopicPartitions,
    TopicsByName,
    TopicsDelta,
    TopicsImage,
)
from kraft_node.metadata.image.writer import ImageWriterOptions, RecordListWriter
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

RECOVERED = LeaderRecoveryState.RECOVERED


def reg(replicas: Sequence[int], isr: Sequence[int], leader: int, leader_epoch: int, partition_epoch: int, *,
        removing: Sequence[int] = (), adding: Sequence[int] = (), directories: Sequence[Uuid] | None = None,
        elr: Sequence[int] = (), last_known_elr: Sequence[int] = (),
        lrs: LeaderRecoveryState = RECOVERED) -> PartitionRegistration:
    dirs = tuple(directories) if directories is not None else DirectoryId.migrating_tuple(len(replicas))
    return PartitionRegistration(replicas=tuple(replicas), directories=dirs, isr=tuple(isr),
                                 removing_replicas=tuple(removing), adding_replicas=tuple(adding), leader=leader,
                                 leader_recovery_state=lrs, leader_epoch=leader_epoch,
                                 partition_epoch=partition_epoch, elr=tuple(elr), last_known_elr=tuple(last_known_elr))


def topic(name: str, topic_id: Uuid, *partitions: PartitionRegistration) -> TopicImage:
    return TopicImage(name, topic_id, dict(enumerate(partitions)))


def amv(message: Any, version: int = 0) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, version)


_dir_counter = iter(range(1000, 1 << 30))


def random_dirs(n: int) -> tuple[Uuid, ...]:
    return tuple(Uuid(next(_dir_counter) << 64) for _ in range(n))


def new_partition(replicas: Sequence[int]) -> PartitionRegistration:
    """Kafka's newPartition: every replica in a (distinct) real directory, leader the first."""
    return reg(replicas, replicas, replicas[0], 1, 1, directories=random_dirs(len(replicas)))


FOO_UUID = Uuid.from_string("ThIaNwRnSM2Nt9Mx1v0RvA")
FOO_UUID2 = Uuid.from_string("9d3lha5qv8DoIl93jf8pbX")
BAR_UUID = Uuid.from_string("f62ptyETTjet8SL5ZeREiw")
BAZ_UUID = Uuid.from_string("tgHBnRglT5W_RlENnuG5vg")
BAM_UUID = Uuid.from_string("b66ybsWIQoygs01vdjH07A")
BAM_UUID2 = Uuid.from_string("yd6Sq3a9aK1G8snlKv7ag5")
ZOO_UUID = Uuid.from_string("0hHJ3X5ZQ-CFfQ5xgpj90w")

TOPIC_IMAGES1 = [
    topic("foo", FOO_UUID, reg([2, 3, 4], [2, 3], 2, 1, 345), reg([3, 4, 5], [3, 4, 5], 3, 4, 684),
          reg([2, 4, 5], [2, 4, 5], 2, 10, 84)),
    topic("bar", BAR_UUID, reg([0, 1, 2, 3, 4], [0, 1, 2, 3], 0, 1, 345, removing=[1], adding=[3, 4])),
]
IMAGE1 = TopicsImage.of(TOPIC_IMAGES1)

DELTA1_RECORDS = [
    amv(m.RemoveTopicRecord(topic_id=FOO_UUID)),                                    # remove topic
    amv(m.PartitionChangeRecord(topic_id=BAR_UUID, partition_id=0, leader=1), 2),   # change topic
    amv(m.TopicRecord(name="baz", topic_id=BAZ_UUID)),                              # add topic
    amv(m.PartitionRecord(partition_id=0, topic_id=BAZ_UUID, replicas=[1, 2, 3, 4], isr=[3, 4],
                          removing_replicas=[2], adding_replicas=[1], leader=3, leader_epoch=2,
                          partition_epoch=1), 2),
    amv(m.TopicRecord(name="foo", topic_id=FOO_UUID2)),                             # re-add with another id
    amv(m.TopicRecord(name="bam", topic_id=BAM_UUID)),                              # add then remove
    amv(m.RemoveTopicRecord(topic_id=BAM_UUID)),
]

IMAGE2 = TopicsImage.of([
    topic("foo", FOO_UUID2),
    topic("bar", BAR_UUID, reg([0, 1, 2, 3, 4], [0, 1, 2, 3], 1, 2, 346, removing=[1], adding=[3, 4])),
    topic("baz", BAZ_UUID, reg([1, 2, 3, 4], [3, 4], 3, 2, 1, removing=[2], adding=[1])),
])


def new_partition_record(topic_id: Uuid, pid: int, replicas: list[int]) -> ApiMessageAndVersion:
    return amv(m.PartitionRecord(partition_id=pid, topic_id=topic_id, replicas=replicas, isr=replicas,
                                 leader=replicas[0], leader_epoch=1, partition_epoch=1), 2)


def check_to_image(image: TopicsImage, records: list[ApiMessageAndVersion] | None = None) -> None:
    """Kafka's testToImage: from the empty image, every split of the records ends at ``image``."""
    if records is None:
        records = image_records(image)
    check_all_intermediate_images(TopicsImage.EMPTY, TopicsDelta, image, records)


def both_backings(image: TopicsImage) -> list[TopicsImage]:
    """The image as built (dict-backed topics) and compacted into one block."""
    compact = image.compacted()
    assert compact == image and image == compact
    return [image, compact]


# ---------------------------------------------------------------------------------------------
# Kafka's TopicsImageTest
# ---------------------------------------------------------------------------------------------

def test_empty_image_round_trip() -> None:
    check_to_image(TopicsImage.EMPTY)
    assert TopicsImage.EMPTY.is_empty()
    assert not IMAGE1.is_empty()


@pytest.mark.parametrize("image", [IMAGE1, IMAGE2], ids=["image1", "image2"])
def test_image_round_trip(image: TopicsImage) -> None:
    check_to_image(image)
    check_to_image(image.compacted())


@pytest.mark.parametrize("backing", ["dict", "block"])
def test_apply_delta1(backing: str) -> None:
    base = IMAGE1 if backing == "dict" else IMAGE1.compacted()
    delta = replay_all(TopicsDelta(base), DELTA1_RECORDS)
    assert delta.apply() == IMAGE2
    assert delta.deleted_topic_ids() == {FOO_UUID}
    assert delta.created_topic_ids() == {BAZ_UUID, FOO_UUID2}
    assert delta.topic_was_deleted("foo") and not delta.topic_was_deleted("bar")
    assert not delta.topic_was_deleted("baz")
    # the image's records plus the delta's, from empty, also give IMAGE2
    check_to_image(IMAGE2, image_records(base) + DELTA1_RECORDS)


def test_remove_topic_returns_its_name() -> None:
    delta = TopicsDelta(IMAGE1)
    names = [delta.replay(r.message) for r in DELTA1_RECORDS]
    assert names == ["foo", None, None, None, None, None, "bam"]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 40), changed=st.sets(st.integers(0, 45)), asked=st.lists(st.integers(-2, 50), max_size=30))
def test_get_many_is_get_of_each(n: int, changed: set[int], asked: list[int]) -> None:
    """TopicPartitions.get_many (the loader's bulk lookup of previous states) equals get() per id:
    block rows, overrides on top of them, partitions added past the block, absent ids."""
    base = TopicImage("t", Uuid.random(), {p: reg([p % 5, (p + 1) % 5], [p % 5], p % 5, p, p) for p in range(n)})
    parts = base.partitions.compacted()  # one block
    overlay = {p: reg([9], [9], 9, 100 + p, 100 + p) for p in changed}
    parts = parts.with_changes(overlay, added=[p for p in changed if p >= n])
    asked_all = asked + sorted(changed)
    assert parts.get_many(asked_all) == [parts.get(p) for p in asked_all]
    assert parts.get_many([]) == []


def test_basic_local_changes() -> None:
    local = 3
    records = list(DELTA1_RECORDS) + [
        amv(m.TopicRecord(name="bam", topic_id=BAM_UUID2)),
        new_partition_record(BAM_UUID2, 0, [0, 1, 2]),
        new_partition_record(BAM_UUID2, 1, [0, 1, local]),
        amv(m.PartitionRecord(partition_id=1, topic_id=BAZ_UUID, replicas=[4, 2, local], isr=[4, 2, local],
                              leader=4, leader_epoch=2, partition_epoch=1), 2),
    ]
    for base in both_backings(IMAGE1):
        delta = replay_all(TopicsDelta(base), records)
        changes = delta.local_changes(local)
        assert set(changes.elected_leaders) == {TopicPartition("baz", 0)}
        assert set(changes.leaders) == {TopicPartition("baz", 0)}
        assert set(changes.followers) == {TopicPartition("baz", 1), TopicPartition("bar", 0), TopicPartition("bam", 1)}
        # foo was deleted (broker 3 hosted foo-0 and foo-1)
        assert changes.deletes == {TopicPartition("foo", 0), TopicPartition("foo", 1)}
        assert changes.topic_ids == {"baz": BAZ_UUID, "bar": BAR_UUID, "bam": BAM_UUID2}
        assert changes.leaders[TopicPartition("baz", 0)] == PartitionInfo(BAZ_UUID, delta.apply().get_partition(
            BAZ_UUID, 0))
        check_to_image(delta.apply(), image_records(base) + records)


def test_delete_after_changes() -> None:
    local = 3
    image = TopicsImage.of([topic("zoo", ZOO_UUID, new_partition([local, 1, 2]))])
    records = [amv(m.PartitionChangeRecord(topic_id=ZOO_UUID, partition_id=0, leader=1), 2),
               amv(m.RemoveTopicRecord(topic_id=ZOO_UUID))]
    for base in both_backings(image):
        delta = replay_all(TopicsDelta(base), records)
        changes = delta.local_changes(local)
        assert changes.deletes == {TopicPartition("zoo", 0)}
        assert changes.elected_leaders == {} and changes.leaders == {} and changes.followers == {}
        final = delta.apply()
        assert final.is_empty()
        check_to_image(final, image_records(base) + records)


def test_updated_leaders() -> None:
    local = 3
    image = TopicsImage.of([topic("zoo", ZOO_UUID, new_partition([local, 1, 2]))])
    for base in both_backings(image):
        delta = replay_all(TopicsDelta(base), [
            amv(m.PartitionChangeRecord(topic_id=ZOO_UUID, partition_id=0, isr=[local, 1]), 2)])
        changes = delta.local_changes(local)
        assert changes.deletes == set() and changes.elected_leaders == {} and changes.followers == {}
        assert set(changes.leaders) == {TopicPartition("zoo", 0)}
        assert changes.directory_ids == {}  # the directory did not change


def test_local_reassignment_changes() -> None:
    local = 3
    image = TopicsImage.of([topic("zoo", ZOO_UUID, new_partition([0, 1, local]), new_partition([local, 1, 2]),
                                  new_partition([0, 1, local]), new_partition([local, 1, 2]),
                                  new_partition([0, 1, 2]), new_partition([0, 1, 2]))])

    def change(pid: int, **fields: Any) -> ApiMessageAndVersion:
        return amv(m.PartitionChangeRecord(topic_id=ZOO_UUID, partition_id=pid, **fields), 2)

    records = [
        change(0, leader=local),                                          # follower -> leader
        change(1, leader=1),                                              # leader -> follower
        change(2, isr=[0, 1, 2], replicas=[0, 1, 2]),                     # follower -> removed
        change(3, leader=0, isr=[0, 1, 2], replicas=[0, 1, 2]),           # leader -> removed
        change(4, leader=local, isr=[local, 1, 2], replicas=[local, 1, 2]),  # not a replica -> leader
        change(5, isr=[0, 1, local], replicas=[0, 1, local]),             # not a replica -> follower
    ]
    for base in both_backings(image):
        delta = replay_all(TopicsDelta(base), records)
        changes = delta.local_changes(local)
        zoo = [TopicPartition("zoo", p) for p in range(6)]
        assert changes.deletes == {zoo[2], zoo[3]}
        assert set(changes.elected_leaders) == {zoo[0], zoo[4]}
        assert set(changes.leaders) == {zoo[0], zoo[4]}
        assert set(changes.followers) == {zoo[1], zoo[5]}
        # replicas given without directories keep the old ones: only where the local broker was not
        # a replica before is there no entry (Kafka asks the previous registration first)
        assert changes.directory_ids == {}
        check_to_image(delta.apply(), image_records(base) + records)


def test_local_changes_directories() -> None:
    local = 3
    d1, d2 = random_dirs(2)
    image = TopicsImage.of([topic("zoo", ZOO_UUID, reg([local, 1], [local, 1], local, 1, 1, directories=[d1, d2]))])
    records = [
        amv(m.PartitionChangeRecord(topic_id=ZOO_UUID, partition_id=0, replicas=[local, 1], directories=[d2, d2]), 2),
        amv(m.PartitionRecord(partition_id=1, topic_id=ZOO_UUID, replicas=[1, local], isr=[1, local], leader=1,
                              directories=[d1, d1]), 2),
    ]
    for base in both_backings(image):
        changes = replay_all(TopicsDelta(base), records).local_changes(local)
        assert changes.directory_ids == {TopicIdPartition(ZOO_UUID, TopicPartition("zoo", 0)): d2,
                                         TopicIdPartition(ZOO_UUID, TopicPartition("zoo", 1)): d1}
        assert changes.topic_ids == {"zoo": ZOO_UUID}


def test_clear_elr_records() -> None:
    foo_id, bar_id = ZOO_UUID, BAR_UUID
    image = TopicsImage.of([topic("foo", foo_id, new_partition([0, 1, 2, 3]))])
    delta = replay_all(TopicsDelta(image), [amv(m.PartitionChangeRecord(
        topic_id=foo_id, partition_id=0, isr=[0, 1], eligible_leader_replicas=[2], last_known_elr=[3]), 2)])
    image = delta.apply()
    foo0 = image.get_partition(foo_id, 0)
    assert foo0 is not None and foo0.elr == (2,) and foo0.last_known_elr == (3,)
    # the clear works on the existing topic (foo) and on a topic created in the same delta (bar)
    records = [
        amv(m.TopicRecord(topic_id=bar_id, name="bar")),
        amv(m.PartitionRecord(topic_id=bar_id, partition_id=0, leader=0, isr=[1], eligible_leader_replicas=[2],
                              last_known_elr=[3]), 2),
        amv(m.ClearElrRecord(topic_name="bar")),
        amv(m.ClearElrRecord()),
    ]
    for base in both_backings(image):
        after = replay_all(TopicsDelta(base), records).apply()
        for tid in (foo_id, bar_id):
            p = after.get_partition(tid, 0)
            assert p is not None and p.elr == () and p.last_known_elr == ()
        # clearing is a change: the partition epoch bumps, once for each (bar-0, created at the default
        # epoch -1, is cleared by name; the clear of all finds nothing left on it)
        assert after.get_partition(foo_id, 0).partition_epoch == foo0.partition_epoch + 1  # type: ignore[union-attr]
        assert after.get_partition(bar_id, 0).partition_epoch == 0  # type: ignore[union-attr]


@pytest.mark.parametrize("image", [TopicsImage.EMPTY, IMAGE1], ids=["empty", "image1"])
def test_clear_elr_record_on_non_existing_topic(image: TopicsImage) -> None:
    with pytest.raises(ReplayError, match="^Unable to clear elr for topic with name non-exist: no such topic found.$"):
        TopicsDelta(image).replay(m.ClearElrRecord(topic_name="non-exist"))


@pytest.mark.parametrize("named", [False, True], ids=["all", "by-name"])
def test_clear_elr_records_for_deleted_topics(named: bool) -> None:
    """Kafka's testClearElrRecords_All_ForDeletedTopics / _Single_ForDeletedTopics: foo deleted and
    re-created, bar created, deleted and re-created, in one delta: the clear applies to the new topics,
    and no deleted topic comes back."""
    foo_id2, bar_id, bar_id2 = Uuid(11 << 64), BAR_UUID, Uuid(12 << 64)
    image = TopicsImage.of([topic("foo", ZOO_UUID, new_partition([0, 1, 2, 3]))])
    image = replay_all(TopicsDelta(image), [amv(m.PartitionRecord(topic_id=ZOO_UUID, partition_id=0, leader=0,
                                                                  isr=[1, 2, 3]), 2)]).apply()
    clears = ([amv(m.ClearElrRecord(topic_name="foo")), amv(m.ClearElrRecord(topic_name="bar"))] if named
              else [amv(m.ClearElrRecord())])
    records = [
        amv(m.RemoveTopicRecord(topic_id=ZOO_UUID)),
        amv(m.TopicRecord(topic_id=foo_id2, name="foo")),
        amv(m.PartitionRecord(topic_id=foo_id2, partition_id=0, isr=[0, 1], eligible_leader_replicas=[2],
                              last_known_elr=[3]), 2),
        amv(m.TopicRecord(topic_id=bar_id, name="bar")),
        amv(m.PartitionRecord(topic_id=bar_id, partition_id=0, leader=0, isr=[1, 2, 3]), 2),
        amv(m.RemoveTopicRecord(topic_id=bar_id)),
        amv(m.TopicRecord(topic_id=bar_id2, name="bar")),
        amv(m.PartitionRecord(topic_id=bar_id2, partition_id=0, leader=0, isr=[1], eligible_leader_replicas=[2],
                              last_known_elr=[3]), 2),
        *clears,
    ]
    for base in both_backings(image):
        after = replay_all(TopicsDelta(base), records).apply()
        assert len(after.topics_by_id) == 2 and len(after.topics_by_name) == 2
        assert set(after.topics_by_id) == {foo_id2, bar_id2}
        for tid in (foo_id2, bar_id2):
            p = after.get_partition(tid, 0)
            assert p is not None and p.elr == () and p.last_known_elr == ()


def test_clear_elr_of_a_deleted_topic_by_name_is_skipped() -> None:
    """Kafka 4.x: the image's topic of that name was deleted by this delta and nothing took the
    name: the clear does nothing (and does not bring the topic back)."""
    image = TopicsImage.of([topic("foo", ZOO_UUID, reg([0, 1], [0], 0, 1, 1, elr=[1]))])
    delta = replay_all(TopicsDelta(image), [amv(m.RemoveTopicRecord(topic_id=ZOO_UUID)),
                                            amv(m.ClearElrRecord(topic_name="foo"))])
    assert delta.apply().is_empty()


def test_clear_elr_all_touches_only_topics_with_an_elr() -> None:
    image = TopicsImage.of([topic("a", Uuid(1 << 64), reg([0, 1], [0], 0, 1, 1, elr=[1])),
                            topic("b", Uuid(2 << 64), reg([0, 1], [0, 1], 0, 1, 1)),
                            topic("c", Uuid(3 << 64), reg([0, 1], [0], 0, 1, 1), reg([1, 2], [1], 1, 1, 5,
                                                                                      last_known_elr=[2]))])
    for base in both_backings(image):
        delta = replay_all(TopicsDelta(base), [amv(m.ClearElrRecord())])
        assert set(delta.changed_topics()) == {Uuid(1 << 64), Uuid(3 << 64)}
        after = delta.apply()
        assert after.get_topic(Uuid(2 << 64)) is base.get_topic(Uuid(2 << 64))
        assert after.get_partition(Uuid(3 << 64), 1) == reg([1, 2], [1], 1, 1, 6)
        assert after.get_partition(Uuid(3 << 64), 0) == reg([0, 1], [0], 0, 1, 1)
    # nothing to clear anywhere: the image itself comes back
    plain = TopicsImage.of([topic("b", Uuid(2 << 64), reg([0, 1], [0, 1], 0, 1, 1))]).compacted()
    assert replay_all(TopicsDelta(plain), [amv(m.ClearElrRecord())]).apply() is plain


def test_topics_delta_create_then_delete() -> None:
    delta = TopicsDelta(TopicsImage.EMPTY)
    delta.replay(m.TopicRecord(name="test", topic_id=FOO_UUID))
    assert FOO_UUID in delta.created_topic_ids()
    assert FOO_UUID not in delta.deleted_topic_ids()
    assert delta.replay(m.RemoveTopicRecord(topic_id=FOO_UUID)) == "test"
    assert FOO_UUID not in delta.deleted_topic_ids()
    assert FOO_UUID not in delta.created_topic_ids()
    assert delta.apply() is TopicsImage.EMPTY


def test_topic_name_to_id_view() -> None:
    view = IMAGE1.topic_name_to_id_view()
    assert "foo" in view and view["foo"] == FOO_UUID and view["bar"] == BAR_UUID
    assert "baz" not in view and view.get("baz") is None
    assert set(view.values()) == {FOO_UUID, BAR_UUID}
    with pytest.raises(TypeError):
        view["foo"] = BAR_UUID  # type: ignore[index]


def test_topic_id_to_name_view() -> None:
    view = IMAGE1.topic_id_to_name_view()
    assert FOO_UUID in view and view[FOO_UUID] == "foo" and view[BAR_UUID] == "bar"
    assert BAZ_UUID not in view and view.get(BAZ_UUID) is None
    assert set(view.values()) == {"foo", "bar"}
    assert view.get("zar") is None  # type: ignore[call-overload]
    with pytest.raises(TypeError):
        del view[FOO_UUID]  # type: ignore[attr-defined]


def test_partition_replicas() -> None:
    assert TopicsImage.EMPTY.partition_replicas(FOO_UUID, 0) == []
    image = TopicsImage.of([topic("foo", FOO_UUID, new_partition([0, 1, 2]))])
    assert image.partition_replicas(FOO_UUID, 0) == [0, 1, 2]
    assert image.partition_replicas(FOO_UUID, 1) == []
    assert image.get_partition(BAR_UUID, 0) is None


def test_election_stats_with_empty_image() -> None:
    delta = TopicDelta(TopicImage("topic", Uuid(5 << 64)))
    delta.replay(m.PartitionRecord(partition_id=0, leader=0, isr=[0, 1], replicas=[0, 1, 2]))
    delta.replay(m.PartitionChangeRecord(partition_id=0, leader=2, isr=[2], leader_recovery_state=1))
    assert delta.partition_to_unclean_leader_election_count()[0] == 1
    delta.replay(m.PartitionChangeRecord(partition_id=0, isr=[1, 2], leader_recovery_state=0))
    assert delta.partition_to_unclean_leader_election_count()[0] == 1
    delta.replay(m.PartitionChangeRecord(partition_id=0, leader=0, isr=[0], leader_recovery_state=1))
    assert delta.partition_to_unclean_leader_election_count()[0] == 2
    delta.replay(m.PartitionChangeRecord(partition_id=0, leader=1, isr=[1], leader_recovery_state=1))
    assert delta.partition_to_unclean_leader_election_count()[0] == 3
    assert delta.partition_to_elr_election_count() == {}
    delta.replay(m.PartitionRecord(partition_id=1, leader=0, isr=[0, 1], replicas=[0, 1, 2]))
    delta.replay(m.PartitionChangeRecord(partition_id=1, leader=-1, isr=[], eligible_leader_replicas=[0, 1]))
    assert delta.partition_to_elr_election_count() == {}
    delta.replay(m.PartitionChangeRecord(partition_id=1, leader=1, isr=[1], eligible_leader_replicas=[0, 1]))
    assert delta.partition_to_elr_election_count()[1] == 1


def test_election_stats_with_non_empty_image() -> None:
    image = TopicImage("topic", Uuid(5 << 64), {
        0: PartitionRegistration.from_record(m.PartitionRecord(partition_id=0, leader=0, isr=[0, 1],
                                                               replicas=[0, 1, 2])),
        1: PartitionRegistration.from_record(m.PartitionRecord(partition_id=1, leader=-1, isr=[],
                                                               eligible_leader_replicas=[0, 1], replicas=[0, 1, 2])),
    })
    for img in (image, TopicsImage.of([image]).compacted().get_topic(Uuid(5 << 64))):
        assert img is not None
        delta = TopicDelta(img)
        delta.replay(m.PartitionRecord(partition_id=0, leader=2, isr=[2], replicas=[0, 1, 2],
                                       leader_recovery_state=1))
        assert delta.partition_to_unclean_leader_election_count()[0] == 1
        assert delta.partition_to_elr_election_count() == {}
        delta.replay(m.PartitionChangeRecord(partition_id=1, leader=1, isr=[1], eligible_leader_replicas=[0, 1]))
        assert delta.partition_to_elr_election_count()[1] == 1
        assert delta.new_partitions() == {}
        assert not delta.has_partitions_with_assignment_changes()


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def test_change_to_an_unknown_partition() -> None:
    for base in both_backings(IMAGE1):
        with pytest.raises(ReplayError, match=f"^Unable to find partition {BAR_UUID}:1$"):
            TopicsDelta(base).replay(m.PartitionChangeRecord(topic_id=BAR_UUID, partition_id=1, leader=1))
        with pytest.raises(ReplayError, match=f"^Unable to find partition {BAZ_UUID}:0$"):
            TopicsDelta(base).replay(m.PartitionChangeRecord(topic_id=BAZ_UUID, partition_id=0, leader=1))


def test_partition_of_an_unknown_or_deleted_topic() -> None:
    unknown = f"Unable to find topic with id {BAZ_UUID} for PartitionRecord of partition 0"
    with pytest.raises(ReplayError, match=unknown):
        TopicsDelta(IMAGE1).replay(m.PartitionRecord(topic_id=BAZ_UUID, partition_id=0))
    delta = TopicsDelta(IMAGE1)
    delta.replay(m.RemoveTopicRecord(topic_id=FOO_UUID))
    with pytest.raises(ReplayError, match=f"Unable to find topic with id {FOO_UUID}"):
        delta.replay(m.PartitionRecord(topic_id=FOO_UUID, partition_id=0))
    with pytest.raises(ReplayError, match=f"Unable to find partition {FOO_UUID}:0"):
        delta.replay(m.PartitionChangeRecord(topic_id=FOO_UUID, partition_id=0))


def test_remove_an_unknown_topic() -> None:
    delta = TopicsDelta(IMAGE1)
    with pytest.raises(ReplayError, match=f"^Unable to delete topic with id {BAZ_UUID}: no such topic found.$"):
        delta.replay(m.RemoveTopicRecord(topic_id=BAZ_UUID))
    delta.replay(m.RemoveTopicRecord(topic_id=FOO_UUID))
    with pytest.raises(ReplayError, match="no such topic found"):
        delta.replay(m.RemoveTopicRecord(topic_id=FOO_UUID))


def test_bad_partition_record_names_the_partition() -> None:
    delta = TopicsDelta(IMAGE1)
    with pytest.raises(ReplayError, match="PartitionRecord for bar-7 .*The lengths for replicas and directories"):
        delta.replay(m.PartitionRecord(topic_id=BAR_UUID, partition_id=7, replicas=[1, 2], directories=[Uuid(9)]))
    with pytest.raises(ReplayError, match="PartitionChangeRecord for bar-0 .*Value 7 is not a valid leader recovery"):
        delta.replay(m.PartitionChangeRecord(topic_id=BAR_UUID, partition_id=0, leader_recovery_state=7))
    with pytest.raises(ReplayError, match="TopicsDelta cannot replay ConfigRecord"):
        delta.replay(m.ConfigRecord())


def test_topic_name_collision() -> None:
    """A TopicRecord taking a live topic's name under another id (or renaming an id) is refused at
    apply, naming both; Kafka would leave its two maps disagreeing.  Names that only collide once
    '.' and '_' are unified (foo.bar / foo_bar) are distinct topics to the image (the controller
    refuses creating them)."""
    delta = replay_all(TopicsDelta(IMAGE1), [amv(m.TopicRecord(name="foo", topic_id=BAZ_UUID))])
    with pytest.raises(ReplayError, match=f"Topic name foo is taken by topic id {FOO_UUID}"):
        delta.apply()
    delta = replay_all(TopicsDelta(IMAGE1), [amv(m.TopicRecord(name="zoo", topic_id=FOO_UUID))])
    with pytest.raises(ReplayError, match=f"Topic id {FOO_UUID} is topic foo: a TopicRecord cannot rename it to zoo"):
        delta.apply()
    # two new topics of one name in one delta (no removal between)
    delta = replay_all(TopicsDelta(TopicsImage.EMPTY), [amv(m.TopicRecord(name="x", topic_id=BAZ_UUID)),
                                                        amv(m.TopicRecord(name="x", topic_id=BAM_UUID))])
    with pytest.raises(ReplayError, match="Topic name x is taken"):
        delta.apply()
    # the same with enough topics for the mutation path
    many = [amv(m.TopicRecord(name=f"t{i}", topic_id=Uuid((i + 100) << 64))) for i in range(10)]
    delta = replay_all(TopicsDelta(IMAGE1), [*many, amv(m.TopicRecord(name="bar", topic_id=BAZ_UUID))])
    with pytest.raises(ReplayError, match="Topic name bar is taken"):
        delta.apply()
    ok = replay_all(TopicsDelta(IMAGE1), [amv(m.TopicRecord(name="foo.bar", topic_id=BAZ_UUID)),
                                          amv(m.TopicRecord(name="foo_bar", topic_id=BAM_UUID))]).apply()
    assert ok.get_topic_by_name("foo.bar").topic_id == BAZ_UUID  # type: ignore[union-attr]
    assert ok.get_topic_by_name("foo_bar").topic_id == BAM_UUID  # type: ignore[union-attr]
    # re-creating a name after removing its topic is fine, in either order of ids
    again = replay_all(TopicsDelta(IMAGE1), [amv(m.RemoveTopicRecord(topic_id=BAR_UUID)),
                                             amv(m.TopicRecord(name="bar", topic_id=BAZ_UUID))]).apply()
    assert again.get_topic_by_name("bar").topic_id == BAZ_UUID  # type: ignore[union-attr]
    assert again.get_topic(BAR_UUID) is None


def test_topic_image_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="name 7 is not a str"):
        TopicImage(7, FOO_UUID)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="topic id 'x' is not a Uuid"):
        TopicImage("foo", "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partition id -1 is not a non-negative int"):
        TopicImage("foo", FOO_UUID, {-1: new_partition([1])})
    with pytest.raises(ValueError, match="partition 0 is a tuple"):
        TopicImage("foo", FOO_UUID, {0: (1, 2)})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="topic name foo is given twice"):
        TopicsImage.of([topic("foo", FOO_UUID), topic("foo", BAR_UUID)])
    with pytest.raises(ValueError, match=f"topic id {FOO_UUID} is given twice"):
        TopicsImage.of([topic("foo", FOO_UUID), topic("bar", FOO_UUID)])


# ---------------------------------------------------------------------------------------------
# Snapshots
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("backing", ["dict", "block"])
def test_finish_snapshot_removes_what_the_snapshot_does_not_restate(backing: str) -> None:
    base = IMAGE1 if backing == "dict" else IMAGE1.compacted()
    snapshot = image_records(IMAGE2)  # foo under a new id, bar changed, baz new
    delta = replay_all(TopicsDelta(base), snapshot)
    delta.finish_snapshot()
    assert delta.deleted_topic_ids() == {FOO_UUID}
    assert delta.apply() == IMAGE2
    # a snapshot restating the same image gives an equal image
    delta = replay_all(TopicsDelta(base), image_records(base))
    delta.finish_snapshot()
    assert delta.deleted_topic_ids() == set()
    assert delta.apply() == base
    # an empty snapshot empties it
    delta = TopicsDelta(base)
    delta.finish_snapshot()
    assert delta.apply().is_empty()


# ---------------------------------------------------------------------------------------------
# Writing at older metadata.versions
# ---------------------------------------------------------------------------------------------

D1, D2, D3 = random_dirs(3)
WRITE_IMAGE = TopicsImage.of([
    topic("real", FOO_UUID, reg([1, 2], [1, 2], 1, 3, 4, directories=[D1, D2]),
          reg([2, 3], [2], 2, 1, 1, directories=[DirectoryId.MIGRATING, D3])),
    topic("migrating", BAR_UUID, reg([1, 2, 3], [1, 2], 1, 1, 1)),
    topic("elr", BAZ_UUID, reg([1, 2, 3], [1], 1, 5, 9, elr=[2], last_known_elr=[3], directories=[D1, D2, D3],
                               lrs=LeaderRecoveryState.RECOVERING)),
])


def expected_records(image: TopicsImage, mv: MetadataVersion) -> list[ApiMessageAndVersion]:
    """What the controller's writer writes for these registrations (``to_record``), topics by name
    and partitions by id, with real directories replaced by MIGRATING below 3.7-IV2 (the loss)."""
    out = []
    for name in sorted(image.topics_by_name.keys()):
        t = image.topics_by_name[name]
        out.append(amv(m.TopicRecord(name=t.name, topic_id=t.topic_id)))
        for pid, r in t.partitions.items():
            if not mv.is_directory_assignment_supported():
                r = dataclasses.replace(r, directories=DirectoryId.migrating_tuple(len(r.replicas)))
            out.append(r.to_record(t.topic_id, pid, mv))
    return out


@pytest.mark.parametrize("mv,losses", [
    (MetadataVersion.LATEST_PRODUCTION, []),
    (MetadataVersion.IBP_4_0_IV1, []),
    (MetadataVersion.IBP_3_9_IV0, [ELR_LOSS]),
    (MetadataVersion.IBP_3_7_IV2, [ELR_LOSS]),
    (MetadataVersion.IBP_3_7_IV1, [DIRECTORY_LOSS, DIRECTORY_LOSS, DIRECTORY_LOSS, ELR_LOSS]),
    (MetadataVersion.IBP_3_3_IV3, [DIRECTORY_LOSS, DIRECTORY_LOSS, DIRECTORY_LOSS, ELR_LOSS]),
], ids=lambda v: str(v) if isinstance(v, MetadataVersion) else "")
def test_write_at_older_metadata_versions(mv: MetadataVersion, losses: list[str]) -> None:
    for image in both_backings(WRITE_IMAGE):
        found: list[str] = []
        records = image_records(image, mv, found.append)
        assert sorted(found) == sorted(losses)
        version = mv.partition_record_version()
        assert [r.version for r in records if r.message.API_KEY == m.PartitionRecord.API_KEY] == [version] * 4
        assert records == expected_records(image, mv)
        assert [r.encode() for r in records] == [r.encode() for r in expected_records(image, mv)]
        if not losses:
            assert replay_all(TopicsDelta(TopicsImage.EMPTY), records).apply() == image
        else:
            with pytest.raises(UnwritableMetadataError, match=(
                    f"^Metadata has been lost because the following could not be represented in metadata.version "
                    f"{mv}: {losses[0]}$")):
                image.write(RecordListWriter(), ImageWriterOptions(mv))


def test_write_order_is_by_name_then_partition() -> None:
    parts = {5: new_partition([1]), 0: new_partition([2]), 3: new_partition([3])}
    image = TopicsImage.of([TopicImage("b", BAR_UUID, parts), TopicImage("a", FOO_UUID, {1: new_partition([4])})])
    for img in both_backings(image):
        records = image_records(img)
        assert [(type(r.message).__name__, getattr(r.message, "name", None), getattr(r.message, "partition_id", None))
                for r in records] == [
            ("TopicRecord", "a", None), ("PartitionRecord", None, 1),
            ("TopicRecord", "b", None), ("PartitionRecord", None, 0), ("PartitionRecord", None, 3),
            ("PartitionRecord", None, 5)]


def test_write_crosses_chunks() -> None:
    """More partitions than one bulk encoding call takes: the records are still per topic, in order."""
    topics = [TopicImage(f"t{i:03d}", Uuid((i + 1) << 64), {p: new_partition([p % 5, (p + 1) % 5]) for p in range(30)})
              for i in range(100)]
    image = TopicsImage.of(topics)
    writer = RecordListWriter()
    image.write(writer, ImageWriterOptions(MetadataVersion.LATEST_PRODUCTION))
    assert len(writer.records) == 100 * 31
    assert writer.records == expected_records(image, MetadataVersion.LATEST_PRODUCTION)
    assert replay_all(TopicsDelta(TopicsImage.EMPTY), writer.records).apply() == image


def test_write_a_block_backed_image_with_overrides() -> None:
    """Block rows of many topics made in one call per chunk, merged with each topic's overrides
    and new partitions, in partition-id order; two blocks in one image."""
    image = big_image(topics=700, partitions=5)
    other = TopicsImage.of([TopicImage(f"other-{t}", Uuid((t + 5000) << 64),
                                       {p: new_partition([p, p + 1]) for p in (0, 3, 8)})
                            for t in range(40)]).compacted()
    for t in other.topics_by_id.values():
        image = image.including(t)
    records = [amv(m.PartitionChangeRecord(topic_id=Uuid(3 << 64), partition_id=1, isr=[1]), 2),
               amv(m.PartitionRecord(topic_id=Uuid(3 << 64), partition_id=7, replicas=[1], isr=[1], leader=1), 2),
               amv(m.PartitionRecord(topic_id=Uuid(5003 << 64), partition_id=5, replicas=[2], isr=[2], leader=2), 2)]
    image = replay_all(TopicsDelta(image), records).apply()
    for mv in (MetadataVersion.LATEST_PRODUCTION, MetadataVersion.IBP_3_7_IV1):
        losses: list[str] = []
        written = image_records(image, mv, losses.append)
        assert written == expected_records(image, mv)
        assert len(losses) == (3 * 40 if mv == MetadataVersion.IBP_3_7_IV1 else 0)
    assert replay_all(TopicsDelta(TopicsImage.EMPTY), image_records(image)).apply() == image


# ---------------------------------------------------------------------------------------------
# Structural sharing and the two backings
# ---------------------------------------------------------------------------------------------

def big_image(topics: int = 200, partitions: int = 4) -> TopicsImage:
    return TopicsImage.of([TopicImage(f"topic-{t}", Uuid((t + 1) << 64),
                                      {p: reg([p % 7, (p + 1) % 7, (p + 2) % 7], [p % 7, (p + 1) % 7], p % 7, 1, t)
                                       for p in range(partitions)})
                           for t in range(topics)]).compacted()


def test_apply_shares_unchanged_topics_and_the_block() -> None:
    image = big_image()
    t5 = Uuid(6 << 64)
    block = image.get_topic(t5).partitions.block  # type: ignore[union-attr]
    assert block is not None
    delta = replay_all(TopicsDelta(image), [amv(m.PartitionChangeRecord(topic_id=t5, partition_id=2, isr=[2]), 2)])
    after = delta.apply()
    changed = after.get_topic(t5)
    assert changed is not None and changed is not image.get_topic(t5)
    assert changed.partitions.block is block                       # the block is shared, not copied
    assert dict(changed.partitions.overrides) == {2: image.get_partition(t5, 2).merge(  # type: ignore[union-attr]
        m.PartitionChangeRecord(topic_id=t5, partition_id=2, isr=[2]))}
    assert after.get_topic_by_name("topic-5") is changed
    assert after.topic_ids_by_name is image.topic_ids_by_name  # no topic created or deleted: not written
    for tid, t in image.topics_by_id.items():
        if tid != t5:
            assert after.topics_by_id[tid] is t and after.topics_by_name[t.name] is t
    # a delta that changes nothing gives the image itself
    assert TopicsDelta(image).apply() is image
    assert replay_all(TopicsDelta(image), [amv(m.ClearElrRecord())]).apply() is image
    # applying again gives an equal image, the image applied from is untouched
    assert delta.apply() == after
    assert image.get_partition(t5, 2).isr == (2, 3)  # type: ignore[union-attr]


def test_zonal_outage_on_a_block_backed_image() -> None:
    """Kafka's zonal outage benchmark's delta, small: every partition with broker 0 in its ISR gets a
    PartitionRecord without it; many topics change, each keeps its block."""
    image = big_image(topics=300, partitions=5)
    records = []
    for t in image.topics_by_id.values():
        for pid in t.partitions.partitions_with_replica(0):
            r = t.partitions[pid]
            if 0 in r.isr:
                isr = [b for b in r.isr if b != 0] or [r.replicas[-1]]
                records.append(amv(m.PartitionRecord(topic_id=t.topic_id, partition_id=pid, replicas=list(r.replicas),
                                                     isr=isr, leader=isr[0], leader_epoch=r.leader_epoch + 1,
                                                     partition_epoch=r.partition_epoch + 1), 2))
    delta = replay_all(TopicsDelta(image), records)
    after = delta.apply()
    changed = {r.message.topic_id for r in records}
    assert len(changed) > 4  # the pipelined path
    assert after.topic_ids_by_name is image.topic_ids_by_name
    for tid, t in after.topics_by_id.items():
        if tid in changed:
            assert t.partitions.block is image.topics_by_id[tid].partitions.block
            assert all(0 not in r.isr for r in t.partitions.values())
        else:
            assert t is image.topics_by_id[tid]
    assert after == replay_all(TopicsDelta(image.compacted()), records).apply()
    check_dict = TopicsImage.of([TopicImage(t.name, t.topic_id, dict(t.partitions.items()))
                                 for t in image.topics_by_id.values()])
    assert after == replay_all(TopicsDelta(check_dict), records).apply()


def test_block_backed_equals_dict_backed() -> None:
    regs = {0: new_partition([1, 2]), 1: reg([2, 3], [2], 2, 4, 5, elr=[3]), 2: reg([3], [3], 3, 1, 1)}
    as_dict = TopicPartitions(regs)
    block = PartitionBlock.from_registrations([0, 1, 2], [regs[0], regs[1], regs[2]])
    as_block = TopicPartitions(block=block)
    assert as_dict == as_block and as_block == as_dict
    assert as_block == regs and regs == as_block
    assert TopicImage("t", FOO_UUID, as_dict) == TopicImage("t", FOO_UUID, as_block)
    assert TopicImage("t", FOO_UUID, as_dict) != TopicImage("u", FOO_UUID, as_block)
    assert TopicImage("t", FOO_UUID, as_dict) != TopicImage("t", BAR_UUID, as_block)
    assert hash(TopicImage("t", FOO_UUID, as_dict)) == hash(TopicImage("t", FOO_UUID, as_block))
    changed = as_block.with_changes({1: regs[0]})
    assert changed != as_block and changed == {**regs, 1: regs[0]}
    assert as_block != TopicPartitions({0: regs[0], 1: regs[1]})
    assert list(as_block.items()) == sorted(regs.items())


def test_topic_partitions_reads() -> None:
    regs = [new_partition([1, 2]), new_partition([2, 3]), new_partition([3, 1]), new_partition([4, 1])]
    # a sparse block (ids 0, 4, 9) inside a bigger block: rows 1..4
    block = PartitionBlock.from_registrations([7, 0, 4, 9], regs)
    parts = TopicPartitions(block=block, start=1, stop=4)
    assert len(parts) == 3 and list(parts) == [0, 4, 9]
    assert parts[4] == regs[2] and parts.get(5) is None and 9 in parts and 7 not in parts and "x" not in parts
    with pytest.raises(KeyError):
        parts[7]
    new = new_partition([5, 6])
    more = parts.with_changes({2: new, 4: regs[0]}, added=[2])
    assert list(more) == [0, 2, 4, 9] and len(more) == 4
    assert list(more.items()) == [(0, regs[1]), (2, new), (4, regs[0]), (9, regs[3])]
    assert list(more.values()) == [regs[1], new, regs[0], regs[3]]
    assert more.partitions_with_replica(1) == [4, 9]   # 4 is now regs[0] = [1, 2] (an override)
    assert more.partitions_with_replica(6) == [2]      # a new partition
    assert more.partitions_with_replica(3) == [0]      # 4 ([3, 1] in the block) is overridden
    assert parts.partitions_with_replica(3) == [0, 4]
    assert parts.partitions_with_replica(7) == []
    assert parts == {0: regs[1], 4: regs[2], 9: regs[3]}
    with pytest.raises(ValueError, match="rows 2..9 outside a block of 4"):
        TopicPartitions(block=block, start=2, stop=9)
    with pytest.raises(ValueError, match="start/stop given without a block"):
        TopicPartitions(start=1, stop=2)
    assert "3 partitions" not in repr(parts) and "TopicPartitions({0:" in repr(parts)


def test_many_overrides_are_compacted_into_a_block() -> None:
    n = 2 * COMPACT_MIN_OVERRIDES + 10
    regs = {p: new_partition([p % 3, (p + 1) % 3]) for p in range(n)}
    parts = TopicPartitions.EMPTY.with_changes(regs, added=regs)
    assert parts.block is not None and len(parts.overrides) == 0 and parts == regs
    small = TopicPartitions.EMPTY.with_changes({0: regs[0]}, added=[0])
    assert small.block is None and dict(small.overrides) == {0: regs[0]}
    # a block-backed topic keeps overrides until they pass half its rows (and COMPACT_MIN_OVERRIDES)
    half = {p: regs[(p + 1) % n] for p in range(n // 2)}
    kept = parts.with_changes(half)
    assert kept.block is parts.block and len(kept.overrides) == n // 2
    folded = kept.with_changes({n - 1: regs[0]})
    assert folded.block is not parts.block and len(folded.overrides) == 0
    assert folded == {**regs, **half, n - 1: regs[0]}


def test_a_topic_with_no_partitions() -> None:
    image = TopicsImage.of([TopicImage("empty", FOO_UUID)])
    assert len(image.get_topic(FOO_UUID).partitions) == 0  # type: ignore[union-attr]
    assert image.compacted() == image
    check_to_image(image)


# ---------------------------------------------------------------------------------------------
# Properties: random record sequences
# ---------------------------------------------------------------------------------------------

NAMES = ["a", "b", "c", "a.b", "a_b", "longer-topic-name"]
DIRS = [DirectoryId.MIGRATING, Uuid(0xA1 << 64), Uuid(0xA2 << 64), DirectoryId.LOST]


@st.composite
def record_sequences(draw: Any) -> list[ApiMessageAndVersion]:
    """A valid sequence of topic records: creations (with partitions), partition records and
    changes, removals, ELR clears (by name and all)."""
    live: dict[Uuid, tuple[str, dict[int, int]]] = {}   # id -> (name, pid -> replica count)
    next_id = 1
    out: list[ApiMessageAndVersion] = []
    brokers = st.integers(0, 5)
    for _ in range(draw(st.integers(1, 30))):
        op = draw(st.sampled_from(["create", "partition", "change", "change", "remove", "clear"]))
        free = [n for n in NAMES if n not in {nm for nm, _ in live.values()}]
        if op == "create" or not live:
            if not free:
                continue
            name = draw(st.sampled_from(free))
            tid = Uuid(next_id << 64 | draw(st.integers(0, 1 << 40)))
            next_id += 1
            live[tid] = (name, {})
            out.append(amv(m.TopicRecord(name=name, topic_id=tid)))
            op = "partition"
        tid = draw(st.sampled_from(sorted(live, key=lambda u: u.bytes)))
        name, parts = live[tid]
        if op == "partition":
            pid = draw(st.sampled_from(sorted(parts) + [len(parts)])) if parts else 0
            replicas = draw(st.lists(brokers, min_size=1, max_size=4, unique=True))
            dirs = draw(st.none() | st.lists(st.sampled_from(DIRS), min_size=len(replicas), max_size=len(replicas)))
            isr = draw(st.lists(st.sampled_from(replicas), unique=True))
            fields: dict[str, Any] = dict(topic_id=tid, partition_id=pid, replicas=replicas, isr=isr,
                                          leader=isr[0] if isr else -1, leader_epoch=draw(st.integers(0, 9)),
                                          partition_epoch=draw(st.integers(0, 9)),
                                          leader_recovery_state=draw(st.integers(0, 1)),
                                          removing_replicas=draw(st.lists(st.sampled_from(replicas), unique=True)))
            if dirs is not None:
                fields["directories"] = dirs
            if draw(st.booleans()):
                fields["eligible_leader_replicas"] = draw(st.lists(brokers, max_size=2, unique=True))
                fields["last_known_elr"] = draw(st.lists(brokers, max_size=1, unique=True))
            parts[pid] = len(replicas)
            out.append(amv(m.PartitionRecord(**fields), 2))
        elif op == "change" and parts:
            pid = draw(st.sampled_from(sorted(parts)))
            fields = dict(topic_id=tid, partition_id=pid, leader=draw(st.sampled_from([-2, -2, -1, 0, 1, 2])))
            if draw(st.booleans()):
                fields["isr"] = draw(st.lists(brokers, max_size=3, unique=True))
            if draw(st.booleans()):
                replicas = draw(st.lists(brokers, min_size=1, max_size=4, unique=True))
                fields["replicas"] = replicas
                fields["directories"] = draw(st.lists(st.sampled_from(DIRS), min_size=len(replicas),
                                                      max_size=len(replicas)))
                parts[pid] = len(replicas)
            if draw(st.booleans()):
                fields["eligible_leader_replicas"] = draw(st.lists(brokers, max_size=2, unique=True))
            if draw(st.booleans()):
                fields["last_known_elr"] = draw(st.lists(brokers, max_size=1, unique=True))
            fields["leader_recovery_state"] = draw(st.sampled_from([-1, -1, 0, 1]))
            out.append(amv(m.PartitionChangeRecord(**fields), 2))
        elif op == "remove":
            del live[tid]
            out.append(amv(m.RemoveTopicRecord(topic_id=tid)))
        elif op == "clear":
            out.append(amv(m.ClearElrRecord(topic_name=draw(st.sampled_from(["", name])))))
    return out


def oracle(records: Sequence[ApiMessageAndVersion], base: TopicsImage = TopicsImage.EMPTY) -> TopicsImage:
    """The image the records describe, built with plain dicts and PartitionRegistration's own
    from_record / merge (no delta logic)."""
    topics: dict[Uuid, tuple[str, dict[int, PartitionRegistration]]] = {
        t.topic_id: (t.name, dict(t.partitions.items())) for t in base.topics_by_id.values()}
    clear = m.PartitionChangeRecord(leader=-2, eligible_leader_replicas=[], last_known_elr=[])
    for record in records:
        r = record.message
        if isinstance(r, m.TopicRecord):
            topics[r.topic_id] = (r.name, {})
        elif isinstance(r, m.PartitionRecord):
            topics[r.topic_id][1][r.partition_id] = PartitionRegistration.from_record(r)
        elif isinstance(r, m.PartitionChangeRecord):
            parts = topics[r.topic_id][1]
            parts[r.partition_id] = parts[r.partition_id].merge(r)
        elif isinstance(r, m.RemoveTopicRecord):
            del topics[r.topic_id]
        elif isinstance(r, m.ClearElrRecord):
            for name, parts in topics.values():
                if r.topic_name in ("", name):
                    for pid, p in parts.items():
                        if p.elr or p.last_known_elr:
                            parts[pid] = p.merge(clear)
    return TopicsImage.of([TopicImage(name, tid, parts) for tid, (name, parts) in topics.items()])


def apply_in_batches(base: TopicsImage, records: Sequence[ApiMessageAndVersion], cuts: list[int]) -> TopicsImage:
    image = base
    bounds = [0, *sorted(set(cuts)), len(records)]
    for a, b in zip(bounds, bounds[1:]):
        image = replay_all(TopicsDelta(image), records[a:b]).apply()
        check_name_map(image)
    return image


def check_name_map(image: TopicsImage) -> None:
    """The name map is exactly name -> id of the id map's topics."""
    assert dict(image.topic_ids_by_name.items()) == {t.name: t.topic_id for t in image.topics_by_id.values()}


@settings(max_examples=120, deadline=None)
@given(record_sequences(), st.data())
def test_delta_boundaries_do_not_matter(records: list[ApiMessageAndVersion], data: Any) -> None:
    expected = oracle(records)
    one = replay_all(TopicsDelta(TopicsImage.EMPTY), records).apply()
    assert one == expected
    check_name_map(one)
    cuts = data.draw(st.lists(st.integers(0, len(records)), max_size=6))
    assert apply_in_batches(TopicsImage.EMPTY, records, cuts) == expected
    # from a block-backed image of the first part: the same end
    split = data.draw(st.integers(0, len(records)))
    first = replay_all(TopicsDelta(TopicsImage.EMPTY), records[:split]).apply()
    rest = records[split:]
    compact = first.compacted()
    assert compact == first
    assert replay_all(TopicsDelta(compact), rest).apply() == expected
    assert apply_in_batches(compact, rest, cuts=[c - split for c in cuts if c >= split]) == expected


@settings(max_examples=60, deadline=None)
@given(record_sequences(), st.data())
def test_every_intermediate_image_writes_and_reads_back(records: list[ApiMessageAndVersion], data: Any) -> None:
    """Kafka's all-intermediate-images property, on generated records: the image after any prefix,
    written as a snapshot (at the newest version) and read back, is itself -- and so is its
    compacted twin's snapshot; the final image's records from empty in any batches give it."""
    split = data.draw(st.integers(0, len(records)))
    image = replay_all(TopicsDelta(TopicsImage.EMPTY), records[:split]).apply()
    written = image_records(image)
    assert image_records(image.compacted()) == written
    back = replay_all(TopicsDelta(TopicsImage.EMPTY), written).apply()
    assert back == image
    # as a snapshot over a different image: finish_snapshot leaves exactly the snapshot's topics
    final = oracle(records)
    delta = replay_all(TopicsDelta(final), written)
    delta.finish_snapshot()
    assert delta.apply() == image
    cuts = data.draw(st.lists(st.integers(0, len(written)), max_size=4))
    assert apply_in_batches(TopicsImage.EMPTY, written, cuts) == image


@settings(max_examples=60, deadline=None)
@given(record_sequences(), st.data())
def test_local_changes_match_the_images(records: list[ApiMessageAndVersion], data: Any) -> None:
    """local_changes of a delta against its base and result: a partition the broker left is a
    delete, one it leads (with a new partition epoch) a leader, and so on -- on both backings."""
    split = data.draw(st.integers(0, len(records)))
    base = replay_all(TopicsDelta(TopicsImage.EMPTY), records[:split]).apply()
    broker = data.draw(st.integers(0, 5))
    results = []
    for b in both_backings(base):
        delta = replay_all(TopicsDelta(b), records[split:])
        after = delta.apply()
        changes = delta.local_changes(broker)
        results.append(changes)
        for tp in changes.deletes:
            was = base.get_topic_by_name(tp.topic)
            assert was is not None and broker in was.partitions[tp.partition].replicas
            now = after.get_topic_by_name(tp.topic)
            assert now is None or now.topic_id != was.topic_id or broker not in now.partitions[tp.partition].replicas
        for tp, info in {**changes.leaders, **changes.followers}.items():
            now = after.get_partition(info.topic_id, tp.partition)
            assert now == info.partition and broker in now.replicas
            assert (now.leader == broker) == (tp in changes.leaders)
        assert set(changes.elected_leaders) <= set(changes.leaders)
    assert results[0] == results[1]


# ---------------------------------------------------------------------------------------------
# The kernel's apply: both twins, the name map and its view
# ---------------------------------------------------------------------------------------------

#: The native twin is built in either mode; the image uses the one accel chose.
NATIVE_KERNEL: ModuleType = importlib.import_module("kraft_node._native._topics_map")
KERNELS = [pure_kernel, NATIVE_KERNEL]


def kernel_apply(kernel: ModuleType, delta: TopicsDelta) -> tuple[dict[Uuid, TopicImage], dict[str, Uuid]]:
    """``delta`` applied by ``kernel`` to maps of that twin made from the delta's image."""
    plan = kernel.TopicPlan(TopicDelta, TopicImage, TopicPartitions, TopicPartitions.EMPTY, COMPACT_MIN_OVERRIDES,
                            TopicPartitions.compacted, ReplayError)
    image = delta.image
    by_id = kernel.TopicMap(image.topics_by_id.items())
    names = kernel.TopicMap(image.topic_ids_by_name.items())
    new_ids, new_names = kernel.apply_topics_delta(delta._changed, delta._deleted, delta._created_ids, by_id, names,
                                                   plan)
    return dict(new_ids.items()), dict(new_names.items())


@settings(max_examples=100, deadline=None)
@given(record_sequences(), st.data())
def test_both_kernels_apply_a_delta_alike(records: list[ApiMessageAndVersion], data: Any) -> None:
    """The twins' apply on the same delta: equal topics, the base's unchanged topics shared by
    both, the same name map; and what TopicsDelta.apply gives."""
    split = data.draw(st.integers(0, len(records)))
    base = replay_all(TopicsDelta(TopicsImage.EMPTY), records[:split]).apply()
    if data.draw(st.booleans()):
        base = base.compacted()
    delta = replay_all(TopicsDelta(base), records[split:])
    (pure_ids, pure_names), (native_ids, native_names) = [kernel_apply(k, delta) for k in KERNELS]
    assert pure_ids == native_ids and pure_names == native_names
    after = delta.apply()
    assert dict(after.topics_by_id.items()) == pure_ids and dict(after.topic_ids_by_name.items()) == pure_names
    for tid, t in base.topics_by_id.items():
        if tid not in delta.changed_topics() and tid not in delta.deleted_topic_ids():
            assert pure_ids[tid] is t and native_ids[tid] is t and after.topics_by_id[tid] is t


@pytest.mark.parametrize("kernel", KERNELS, ids=["pure", "native"])
def test_a_kernel_refuses_what_is_not_a_delta(kernel: ModuleType) -> None:
    plan = kernel.TopicPlan(TopicDelta, TopicImage, TopicPartitions, TopicPartitions.EMPTY, 4,
                            TopicPartitions.compacted, ReplayError)
    ids, names = kernel.TopicMap(), kernel.TopicMap()
    assert kernel.apply_topics_delta({}, set(), set(), ids, names, plan) == (ids, names)
    assert kernel.apply_topics_delta({}, set(), set(), ids, names, plan)[0] is ids
    with pytest.raises(TypeError, match="apply_topics_delta: changed is a list, not a dict"):
        kernel.apply_topics_delta([], set(), set(), ids, names, plan)
    with pytest.raises(TypeError, match="apply_topics_delta: a delta is a str, not a TopicDelta"):
        kernel.apply_topics_delta({FOO_UUID: "x"}, set(), set(), ids, names, plan)
    delta = TopicDelta(IMAGE1.topics_by_id[FOO_UUID])
    delta._changes = []  # type: ignore[assignment]
    with pytest.raises(TypeError, match="apply_topics_delta: a delta's changes is a list, not a dict"):
        kernel.apply_topics_delta({FOO_UUID: delta}, set(), set(), ids, names, plan)
    with pytest.raises(ValueError, match="deleted topic id .* is not in by_id"):
        kernel.apply_topics_delta({}, {FOO_UUID}, set(), ids, names, plan)
    with pytest.raises(ValueError, match="slots not found"):
        kernel.TopicPlan(TopicDelta, TopicPartitions, TopicPartitions, TopicPartitions.EMPTY, 4,
                         TopicPartitions.compacted, ReplayError)
    with pytest.raises(ValueError, match="compact_min"):
        kernel.TopicPlan(TopicDelta, TopicImage, TopicPartitions, TopicPartitions.EMPTY, -1,
                         TopicPartitions.compacted, ReplayError)
    with pytest.raises(ValueError, match="the empty partitions are a dict"):
        kernel.TopicPlan(TopicDelta, TopicImage, TopicPartitions, {}, 4, TopicPartitions.compacted, ReplayError)


def test_a_delta_past_half_a_topic_compacts_it() -> None:
    """Overrides reaching COMPACT_MIN_OVERRIDES and half a topic's block rows are folded into a
    new block, in a big apply (the kernel) as in a small one; a created topic with that many
    partitions gets a block too."""
    n = 2 * COMPACT_MIN_OVERRIDES
    image = big_image(topics=6, partitions=n)
    records = [amv(m.PartitionChangeRecord(topic_id=t.topic_id, partition_id=p, isr=[(p + 1) % 7]), 2)
               for t in list(image.topics_by_id.values())[:5] for p in range(n // 2 + 1)]
    new_id = Uuid(77 << 64)
    records += [amv(m.TopicRecord(name="created", topic_id=new_id))]
    records += [new_partition_record(new_id, p, [p % 5, (p + 1) % 5]) for p in range(COMPACT_MIN_OVERRIDES)]
    after = replay_all(TopicsDelta(image), records).apply()
    assert after == oracle(records, image)
    for t in list(after.topics_by_id.values()):
        parts = t.partitions
        if t.topic_id == new_id or parts.block is not image.topics_by_id[t.topic_id].partitions.block:
            assert parts.block is not None and len(parts.overrides) == 0
    assert sum(t.partitions.block is image.topics_by_id[t.topic_id].partitions.block
               for t in after.topics_by_id.values() if t.topic_id != new_id) == 1
    assert after.topics_by_id[new_id].partitions.block is not None


def test_topics_by_name_is_a_view_of_both_maps() -> None:
    view = IMAGE1.topics_by_name
    assert isinstance(view, TopicsByName)
    assert view["foo"] is IMAGE1.topics_by_id[FOO_UUID] and view.get("foo") is IMAGE1.get_topic_by_name("foo")
    assert view.get("nope") is None and view.get("nope", 3) == 3 and "nope" not in view
    assert sorted(view) == sorted(t.name for t in IMAGE1.topics_by_id.values()) == sorted(view.keys())
    assert len(view) == len(IMAGE1.topics_by_id)
    assert dict(view.items()) == {t.name: t for t in IMAGE1.topics_by_id.values()}
    assert IMAGE1.topic_ids_by_name["foo"] == FOO_UUID
    with pytest.raises(KeyError):
        view["nope"]


def test_callers_of_kafkas_layout_keep_working() -> None:
    """What bulk loaders written for name -> TopicImage maps do: ``topics_by_name.update`` and
    ``topics_by_name.mutate()`` take (name, TopicImage) and give the name -> id map the
    constructor takes; a name -> TopicImage map given to the constructor is converted."""
    extra = TopicImage("extra", Uuid(99 << 64))
    by_id = IMAGE1.topics_by_id.set(extra.topic_id, extra)
    updated = TopicsImage(by_id, IMAGE1.topics_by_name.update([("extra", extra)]))
    assert updated == IMAGE1.including(extra)
    check_name_map(updated)
    with IMAGE1.topics_by_id.mutate() as ids, IMAGE1.topics_by_name.mutate() as names:
        foo = names.get("foo")
        assert foo is IMAGE1.get_topic_by_name("foo") and "foo" in names and len(names) == len(IMAGE1.topics_by_id)
        del ids[foo.topic_id]
        del names["foo"]
        assert names.get("foo") is None and "foo" not in names
        ids[extra.topic_id] = extra
        names["extra"] = extra
        assert names.get("extra") is extra and names["extra"] is extra
        with pytest.raises(KeyError):
            names["foo"]
    mutated = TopicsImage(ids.finish(), names.finish())
    check_name_map(mutated)
    assert mutated.get_topic_by_name("extra") is extra and mutated.get_topic_by_name("foo") is None
    # Kafka's layout given to the constructor: converted (and equal)
    legacy = TopicsImage(dict(IMAGE1.topics_by_id.items()), {t.name: t for t in IMAGE1.topics_by_id.values()})
    assert legacy == IMAGE1
    assert TopicsImage(IMAGE1.topics_by_id, IMAGE1.topics_by_name) == IMAGE1
    with pytest.raises(ValueError, match="the name map's values are topic ids, not int"):
        TopicsImage(IMAGE1.topics_by_id, {"foo": 1})
    with pytest.raises(ValueError, match="topics_by_id must be a mapping"):
        TopicsImage([], {})  # type: ignore[arg-type]


def test_of_refuses_a_name_or_an_id_given_twice() -> None:
    a = TopicImage("a", FOO_UUID)
    with pytest.raises(ValueError, match="topic id .* is given twice"):
        TopicsImage.of([a, TopicImage("b", FOO_UUID)])
    with pytest.raises(ValueError, match="topic name a is given twice"):
        TopicsImage.of([a, TopicImage("a", BAR_UUID)])
    assert len(TopicsImage.of([a, TopicImage("b", BAR_UUID)]).topics_by_id) == 2


def test_a_big_apply_makes_untracked_objects() -> None:
    """The native kernel takes the objects it makes out of the cyclic collector (the pure twin
    cannot): with 100k topics in the heap, collections would otherwise walk them all."""
    image = big_image(topics=40, partitions=3)
    records = [amv(m.PartitionChangeRecord(topic_id=t.topic_id, partition_id=0, isr=[t.partitions[0].replicas[0]]),
                   2) for t in image.topics_by_id.values()]
    after = replay_all(TopicsDelta(image), records).apply()
    changed = [t for t in after.topics_by_id.values() if t is not image.topics_by_id[t.topic_id]]
    assert len(changed) == 40
    native = topic_map.TopicMap is NATIVE_KERNEL.TopicMap
    assert all(gc.is_tracked(t) != native and gc.is_tracked(t.partitions) != native for t in changed)
