"""Time travel: the image as of any offset of a metadata log (snapshots + segments, transactions
respected), and ``diff(a, b)`` -- replayed over ``a`` it gives ``b``, on Kafka's fixtures and on
generated histories, for random pairs of offsets in both directions."""
from __future__ import annotations

import shutil
from functools import lru_cache
from pathlib import Path

import pytest
from conftest import fixture_params
from hypothesis import given, settings
from hypothesis import strategies as st
from support.metadata_history import Batch, bootstrap, leader_change, random_history, v, write_log, write_snapshot

from kraft_node.metadata.configs.resources import ConfigResource
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.time_travel import (
    DiffError,
    LoadedImage,
    MetadataHistory,
    MetadataHistoryError,
    diff,
    image_at,
    iter_offsets,
    records_json,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

FIXTURE_DIRS = fixture_params("__cluster_metadata-0")


def apply_diff(a: MetadataImage, b: MetadataImage) -> MetadataImage:
    delta = MetadataDelta(a)
    delta.replay_all(diff(a, b))
    return delta.apply(b.provenance)


def inexpressible(a: MetadataImage, b: MetadataImage) -> bool:
    """What diff documents it cannot do: a controller or the metadata.version gone."""
    return bool(set(a.cluster.controllers) - set(b.cluster.controllers)) or (
        a.metadata_version() is not None and b.metadata_version() is None)


def check_diff(a: MetadataImage, b: MetadataImage) -> None:
    if inexpressible(a, b):
        with pytest.raises(DiffError):
            diff(a, b)
    else:
        assert apply_diff(a, b) == b


def replay_from_empty(batches: list[Batch], upto: int | None = None) -> MetadataImage:
    """The image a straightforward reader gets: every committed record, in order (a model of
    transactions independent of time_travel's)."""
    delta = MetadataDelta(MetadataImage.EMPTY)
    offset = 0
    pending: list[object] | None = None
    for b in batches:
        if b.control:
            offset += 1
            continue
        for r in b.records:
            if upto is not None and offset > upto:
                return delta.apply(MetadataImage.EMPTY.provenance)
            key = r.message.API_KEY
            if key == m.BeginTransactionRecord.API_KEY:
                pending = []
            elif key == m.EndTransactionRecord.API_KEY:
                assert pending is not None
                delta.replay_all(pending)
                pending = None
            elif key == m.AbortTransactionRecord.API_KEY:
                pending = None
            elif pending is not None:
                pending.append(r.message)
            else:
                delta.replay(r.message)
            offset += 1
    return delta.apply(MetadataImage.EMPTY.provenance)


def same_state(a: MetadataImage, b: MetadataImage) -> bool:
    """Equal images, provenance aside."""
    return MetadataDelta(a).apply(b.provenance) == b


# ---------------------------------------------------------------------------------------------
# Kafka's fixtures
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def fixture_images(directory: str) -> tuple[LoadedImage, ...]:
    history = MetadataHistory.open(directory)
    return tuple(history.load_many(list(iter_offsets(history))))


@pytest.mark.parametrize("directory", FIXTURE_DIRS, ids=lambda p: Path(p).parent.name)
def test_every_fixture_loads_at_every_offset(directory):
    images = fixture_images(str(directory))
    assert images, directory
    last = images[-1]
    assert last.image == image_at(directory)
    assert last.image.provenance.last_contained_offset == last.offset
    # each offset's image states what the log says it does: its provenance is that offset
    # unless a transaction is open there
    for li in images:
        if not li.notes:
            assert li.image.provenance.last_contained_offset == li.offset
        else:
            assert li.image.provenance.last_contained_offset < li.offset
            assert "inside a metadata transaction" in li.notes[0]


def test_fixture_37_history(fixtures_dir):
    """The 3.7 log: the bootstrap transaction (offsets 1..3) is invisible until its end, the
    controller registers, topics appear; the image at the end is what Kafka's shell shows."""
    d = fixtures_dir / "kafka-3.7.0-combined-single-node"
    h = MetadataHistory.open(d)
    assert h.log_bounds() == (0, 4929)
    at = {li.offset: li for li in h.load_many([0, 1, 2, 3, 4, 4928])}
    assert at[0].image.is_empty() and at[0].notes == ()
    for o in (1, 2, 3):
        assert at[o].image.is_empty() and at[o].image.provenance.last_contained_offset == 0
        assert at[o].notes == (f"offset {o} is inside a metadata transaction begun at offset 1 that has not "
                               f"ended by then: its records are not shown (the image is as of offset 0)",)
    assert at[4].image.metadata_version() == MetadataVersion.IBP_3_7_IV4
    final = at[4928].image
    assert sorted(final.topics.topics_by_name) == [
        "Retry.TestTopicPatient", "TestTopicPatient", "__consumer_offsets",
        "batch2.work.notification.SHR_PROD.persistence", "subscription.matching.SHR_PROD.persistence"]
    assert final.topics.num_partitions() == 54
    assert list(final.cluster.brokers) == [1] and list(final.cluster.controllers) == [1]
    assert final.producer_ids.next_producer_id == 1000
    assert final.provenance.last_contained_epoch == 1 and final.provenance.is_offset_batch_aligned


@pytest.mark.parametrize("directory", FIXTURE_DIRS, ids=lambda p: Path(p).parent.name)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_diff_between_random_offsets_of_a_fixture(directory, data):
    images = fixture_images(str(directory))
    a = data.draw(st.sampled_from(images), label="from")
    b = data.draw(st.sampled_from(images), label="to")
    check_diff(a.image, b.image)


def test_diff_between_fixtures(fixtures_dir):
    """Every fixture's final image to every other's (and to and from the empty image): unrelated
    clusters, so everything differs -- topics removed and created, configs, features, brokers."""
    images = [image_at(d) for d in sorted(fixtures_dir.glob("*/__cluster_metadata-0"))] + [MetadataImage.EMPTY]
    assert len(images) >= 6
    for a in images:
        for b in images:
            check_diff(a, b)
    assert diff(images[0], images[0]) == []


def test_snapshot_fixture_is_its_offset_only(fixtures_dir):
    d = fixtures_dir / "kafka-4.2-mv29-combined-single-node"
    h = MetadataHistory.open(d)
    assert [s.last_offset for s in h.snapshots] == [46532] and h.log_bounds() is None
    img = h.load().image
    assert img.provenance.last_contained_offset == 46532 and img.provenance.last_contained_epoch == 4
    with pytest.raises(MetadataHistoryError, match=r"offset 100 is not in .*only snapshot\(s\) at offset\(s\) 46532"):
        h.load(100)
    with pytest.raises(MetadataHistoryError, match="offset 46533 is beyond the end of .*its last offset is 46532"):
        h.load(46533)


# ---------------------------------------------------------------------------------------------
# Generated histories
# ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """seed -> (its batches, the image at every offset, the directory), made once per module."""
    cache: dict[int, tuple[list[Batch], tuple[LoadedImage, ...], str]] = {}

    def get(seed: int) -> tuple[list[Batch], tuple[LoadedImage, ...], str]:
        if seed not in cache:
            d = tmp_path_factory.mktemp(f"history-{seed}")
            batches = random_history(seed, 250)
            write_log(d, batches, records_per_segment=90)
            h = MetadataHistory.open(d)
            cache[seed] = (batches, tuple(h.load_many(list(iter_offsets(h)))), str(d))
        return cache[seed]
    return get


@pytest.mark.parametrize("seed", range(4))
def test_generated_history_matches_a_plain_replay(generated, seed):
    batches, images, d = generated(seed)
    assert len(MetadataHistory.open(d).segments) > 2
    for li in images[:: max(1, len(images) // 25)] + (images[-1],):
        assert same_state(replay_from_empty(batches, li.offset), li.image), li.offset


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 3), data=st.data())
def test_diff_between_random_offsets_of_a_generated_history(generated, seed, data):
    _, images, _ = generated(seed)
    a = data.draw(st.sampled_from(images), label="from")
    b = data.draw(st.sampled_from(images), label="to")
    check_diff(a.image, b.image)
    if a.offset <= b.offset:  # forward in time is always expressible
        assert apply_diff(a.image, b.image) == b.image


def test_load_many_equals_separate_loads(generated):
    _, images, d = generated(0)
    h = MetadataHistory.open(d)
    picks = [images[i].offset for i in (3, 40, 41, 200, len(images) - 1)]
    for offset, li in zip(picks, h.load_many(list(reversed(picks)))[::-1]):
        assert li == MetadataHistory.open(d).load(offset)
    assert h.load_many([None])[0].offset == images[-1].offset


def test_snapshot_plus_log_equals_log_alone(generated, tmp_path):
    """A snapshot in the directory is a shortcut, never a different answer."""
    batches, images, d = generated(1)
    with_snap = tmp_path / "snap"
    shutil.copytree(d, with_snap)
    middle = images[len(images) // 2]
    p = middle.image.provenance
    write_snapshot(with_snap / "__cluster_metadata-0", middle.image, p.last_contained_offset + 1,
                   p.last_contained_epoch, p.last_contained_log_time_ms)
    h = MetadataHistory.open(with_snap)
    assert [s.last_offset for s in h.snapshots] == [p.last_contained_offset]
    for li in images[len(images) // 2:: 7]:
        assert h.load(li.offset).image == li.image, li.offset
    # offsets before the snapshot still come from the log
    assert h.load(images[5].offset).image == images[5].image


def test_log_starting_after_a_snapshot(tmp_path):
    """The usual shape after Kafka deleted old segments: a snapshot, the log from its end offset."""
    batches = [leader_change(1), Batch(bootstrap(), False, 1),
               Batch([v(m.TopicRecord(name="a", topic_id=Uuid(7)))], False, 1),
               Batch([v(m.PartitionRecord(partition_id=0, topic_id=Uuid(7), replicas=[1], isr=[1], leader=1))],
                     False, 1)]
    full = tmp_path / "full"
    write_log(full, batches)
    snap_image = MetadataHistory.open(full).load(2).image
    cut = tmp_path / "cut"
    write_log(cut, batches[3:], base_offset=3)
    write_snapshot(cut / "__cluster_metadata-0", snap_image, 3, 1, snap_image.provenance.last_contained_log_time_ms)
    h = MetadataHistory.open(cut)
    assert h.log_bounds() == (3, 4)
    assert h.load(3).image == MetadataHistory.open(full).load(3).image
    assert h.load(2).image == snap_image
    with pytest.raises(MetadataHistoryError, match="offset 1 is below the log start offset 3 of .* and no snapshot"):
        h.load(1)


# ---------------------------------------------------------------------------------------------
# Transactions
# ---------------------------------------------------------------------------------------------

def txn_log(tmp_path: Path, end: object) -> MetadataHistory:
    batches = [
        leader_change(1),                                                       # 0
        Batch(bootstrap(), False, 1),                                           # 1
        Batch([v(m.BeginTransactionRecord(name="x")),                           # 2
               v(m.TopicRecord(name="t", topic_id=Uuid(9)))], False, 1),        # 3
        Batch([v(m.PartitionRecord(partition_id=0, topic_id=Uuid(9), replicas=[1], isr=[1],
                                   leader=1))], False, 2),                      # 4
        Batch([v(end)], False, 2),                                              # 5
        Batch([v(m.NoOpRecord())], False, 2),                                   # 6
    ]
    write_log(tmp_path, batches)
    return MetadataHistory.open(tmp_path)


def test_transaction_shows_only_once_ended(tmp_path):
    h = txn_log(tmp_path, m.EndTransactionRecord())
    at = {li.offset: li for li in h.load_many([1, 2, 3, 4, 5, 6])}
    for o in (2, 3, 4):
        assert at[o].image.topics.is_empty()
        assert at[o].image.provenance.last_contained_offset == 1, o
        assert "begun at offset 2" in at[o].notes[0]
    assert list(at[5].image.topics.topics_by_name) == ["t"] and at[5].notes == ()
    assert at[5].image.provenance.last_contained_offset == 5 and at[5].image.provenance.last_contained_epoch == 2
    assert at[6].image.topics == at[5].image.topics


def test_aborted_transaction_never_shows(tmp_path):
    h = txn_log(tmp_path, m.AbortTransactionRecord(reason="no"))
    assert h.load(6).image.topics.is_empty()
    assert h.load(5).image.provenance.last_contained_offset == 5


def test_unbalanced_transaction_records_are_errors(tmp_path):
    write_log(tmp_path, [Batch(bootstrap() + [v(m.EndTransactionRecord())], False, 1)])
    with pytest.raises(MetadataHistoryError, match="offset 1: Encountered EndTransactionRecord without having seen a "
                                                   "BeginTransactionRecord"):
        MetadataHistory.open(tmp_path).load()
    nested = tmp_path / "nested"
    write_log(nested, [Batch([v(m.BeginTransactionRecord(name="a")), v(m.BeginTransactionRecord(name="b"))])])
    with pytest.raises(MetadataHistoryError, match="offset 1: Encountered BeginTransactionRecord while already in a "
                                                   "transaction"):
        MetadataHistory.open(nested).load()


# ---------------------------------------------------------------------------------------------
# Bad input: one clear line naming the file and where
# ---------------------------------------------------------------------------------------------

def small_log(tmp_path: Path) -> Path:
    write_log(tmp_path, [leader_change(1), Batch(bootstrap(), False, 1), Batch([v(m.NoOpRecord())] * 3, False, 1)])
    return tmp_path / "__cluster_metadata-0" / f"{0:020d}.log"


def test_missing_and_empty_sources(tmp_path):
    with pytest.raises(MetadataHistoryError, match=r"nope: no such file or directory"):
        MetadataHistory.open(tmp_path / "nope")
    with pytest.raises(MetadataHistoryError, match=r"no metadata log here"):
        MetadataHistory.open(tmp_path)


def test_corrupt_segment_names_file_and_position(tmp_path):
    seg = small_log(tmp_path)
    data = bytearray(seg.read_bytes())
    data[-5] ^= 0xFF  # inside the last batch: its CRC no longer matches
    seg.write_bytes(bytes(data))
    with pytest.raises(MetadataHistoryError) as e:
        MetadataHistory.open(tmp_path).load()
    msg = str(e.value)
    assert str(seg) in msg and "corrupt record batch at byte position" in msg and "\n" not in msg


def test_not_a_segment(tmp_path):
    f = tmp_path / "x.log"
    f.write_bytes(b"hello, this is not a Kafka log at all........................................")
    with pytest.raises(MetadataHistoryError, match="not a Kafka log segment or snapshot"):
        MetadataHistory.open(f).load()


def test_torn_tail_of_the_last_segment_is_ignored_with_a_note(tmp_path):
    seg = small_log(tmp_path)
    whole = seg.read_bytes()
    seg.write_bytes(whole + whole[:40])  # the start of a batch after the last whole one
    li = MetadataHistory.open(tmp_path).load()
    assert li.offset == 4 and any("partial batch at byte position" in n for n in li.notes)


def test_offsets_out_of_range(tmp_path):
    small_log(tmp_path)
    h = MetadataHistory.open(tmp_path)
    with pytest.raises(MetadataHistoryError, match=r"offset 5 is beyond the end of .*: its last offset is 4"):
        h.load(5)
    with pytest.raises(MetadataHistoryError, match="offset -1 is negative"):
        h.load(-1)
    later = tmp_path / "later"
    write_log(later, [Batch([v(m.NoOpRecord())], False, 1)], base_offset=100)
    with pytest.raises(MetadataHistoryError, match="offset 99 is below the log start offset 100 of .* and no snapshot"):
        MetadataHistory.open(later).load(99)


def test_gap_between_segments(tmp_path):
    small_log(tmp_path)
    write_log(tmp_path / "other", [Batch([v(m.NoOpRecord())], False, 1)], base_offset=10)
    shutil.copy(tmp_path / "other" / "__cluster_metadata-0" / f"{10:020d}.log",
                tmp_path / "__cluster_metadata-0" / f"{10:020d}.log")
    with pytest.raises(MetadataHistoryError, match="expected offset 5 next, found offset 10"):
        MetadataHistory.open(tmp_path).load(10)


def test_unreplayable_record_names_its_offset(tmp_path):
    write_log(tmp_path, [Batch(bootstrap() + [v(m.RemoveTopicRecord(topic_id=Uuid(5)))], False, 1)])
    with pytest.raises(MetadataHistoryError, match=r"offset 1: cannot replay RemoveTopicRecord: .*no such topic"):
        MetadataHistory.open(tmp_path).load()


# ---------------------------------------------------------------------------------------------
# diff: the records it picks
# ---------------------------------------------------------------------------------------------

def build(*records: object, base: MetadataImage = MetadataImage.EMPTY) -> MetadataImage:
    delta = MetadataDelta(base)
    delta.replay_all(records)
    return delta.apply(base.provenance)


BASE = build(*(r.message for r in bootstrap()))
T1, T2 = Uuid(101), Uuid(102)


def part(tid: Uuid, p: int, leader: int = 1) -> object:
    return m.PartitionRecord(partition_id=p, topic_id=tid, replicas=[1, 2], isr=[1, 2], leader=leader,
                             directories=[Uuid(500), Uuid(501)])


def names(records: list) -> list[str]:
    return [type(r.message).__name__ for r in records]


def test_diff_recreated_topic_name_restates_configs():
    a = build(m.TopicRecord(name="x", topic_id=T1), part(T1, 0),
              m.ConfigRecord(resource_type=2, resource_name="x", name="retention.ms", value="5"), base=BASE)
    b = build(m.TopicRecord(name="x", topic_id=T2), part(T2, 0),
              m.ConfigRecord(resource_type=2, resource_name="x", name="retention.ms", value="5"), base=BASE)
    records = diff(a, b)
    assert names(records) == ["RemoveTopicRecord", "TopicRecord", "PartitionRecord", "ConfigRecord"]
    assert apply_diff(a, b) == b
    assert dict(b.configs.config_map_for_resource(ConfigResource.topic("x"))) == {"retention.ms": "5"}


def test_diff_changed_partition_only():
    a = build(m.TopicRecord(name="x", topic_id=T1), part(T1, 0), part(T1, 1), base=BASE)
    b = build(m.PartitionChangeRecord(partition_id=1, topic_id=T1, leader=2), base=a)
    records = diff(a, b)
    assert names(records) == ["PartitionRecord"] and records[0].message.partition_id == 1
    assert apply_diff(a, b) == b


def test_diff_back_across_added_partitions_recreates_the_topic():
    a = build(m.TopicRecord(name="x", topic_id=T1), part(T1, 0), part(T1, 1), base=BASE)
    b = build(m.TopicRecord(name="x", topic_id=T1), part(T1, 0), base=BASE)
    assert names(diff(a, b)) == ["RemoveTopicRecord", "TopicRecord", "PartitionRecord"]
    assert apply_diff(a, b) == b


def test_diff_removals():
    acl = Uuid(77)
    a = build(m.RegisterBrokerRecord(broker_id=4, broker_epoch=9, incarnation_id=Uuid(3)),
              m.AccessControlEntryRecord(id=acl, resource_type=2, resource_name="a", pattern_type=3,
                                         principal="User:a", host="*", operation=3, permission_type=3),
              m.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=1000),
              m.FeatureLevelRecord(name="group.version", feature_level=1),
              m.ConfigRecord(resource_type=4, resource_name="", name="k", value="v"),
              m.UserScramCredentialRecord(name="u", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v",
                                          iterations=4096),
              m.DelegationTokenRecord(owner="User:a", requester="User:a", renewers=[], issue_timestamp=1,
                                      max_timestamp=2, expiration_timestamp=3, token_id="tok"),
              m.ClientQuotaRecord(entity=[m.ClientQuotaRecord.EntityData(entity_type="user", entity_name=None)],
                                  key="k", value=1.0, remove=False), base=BASE)
    records = diff(a, BASE)
    assert names(records) == ["FeatureLevelRecord", "UnregisterBrokerRecord", "ConfigRecord", "ClientQuotaRecord",
                              "ProducerIdsRecord", "RemoveAccessControlEntryRecord",
                              "RemoveUserScramCredentialRecord", "RemoveDelegationTokenRecord"]
    assert records[1].message.broker_epoch == 9 and records[0].message.feature_level == 0
    assert apply_diff(a, BASE) == BASE
    assert apply_diff(BASE, a) == a


def test_diff_cannot_unregister_a_controller_or_drop_the_metadata_version():
    a = build(m.RegisterControllerRecord(controller_id=3000, incarnation_id=Uuid(8)), base=BASE)
    with pytest.raises(DiffError, match=r"controller\(s\) 3000 are registered in the first image"):
        diff(a, BASE)
    with pytest.raises(DiffError, match="no record removes metadata.version"):
        diff(BASE, MetadataImage.EMPTY)
    assert apply_diff(MetadataImage.EMPTY, a) == a


def test_records_json_is_dump_log_shape():
    r = diff(MetadataImage.EMPTY, build(m.TopicRecord(name="x", topic_id=T1), base=BASE))
    js = [records_json(x) for x in r]
    assert js[0] == {"type": "FeatureLevelRecord", "apiKey": 12, "version": 0,
                     "data": {"Name": "metadata.version", "FeatureLevel": MetadataVersion.IBP_3_7_IV4.feature_level}}
    assert js[1]["type"] == "TopicRecord" and js[1]["data"]["TopicId"] == str(T1)

