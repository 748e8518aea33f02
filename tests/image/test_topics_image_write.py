"""TopicsImage.write from the image's columns (issue 23 item 5; issue 22's 1M-partition snapshot).

``TopicsImage.write`` encodes the PartitionRecords of a topic whose partitions are all rows of a
PartitionBlock straight from the block's columns (the ``_bulk_objects`` kernel's
``encode_partition_rows``), and the rest (overrides, tagged fields, losses) the per-partition way.
The oracle here is the plain per-partition writer -- each topic by name, its TopicRecord, then
``reg.to_record(...)`` per partition by id with Kafka's loss rules -- and what is pinned down:

* the same bytes and the same losses (text, count, order) on generated images that have
  directories (none, MIGRATING, real, mixed), ELR and last known ELR, removing and adding
  replicas, RECOVERING leaders, lists of 127+ entries, non-dense partition ids, topics with
  overrides and added partitions, compacted and dict-backed topics -- at every metadata.version;
* without a loss handler the first loss raises Kafka's UnwritableMetadataError and nothing of
  that chunk is written;
* both twins of the kernel give the same values, and the kernel's input checks name what is wrong;
* the chunks come out as records the snapshot emitter can cut at any record (the records are
  FramedRecords: ``encode()`` is the bytes, ``message`` decodes them).
"""
from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

import kraft_node._pure._bulk_objects as pure_objects
from kraft_node.metadata.controller.replication_control import (
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
    UnwritableMetadataError,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image import bulk
from kraft_node.metadata.image import topics as topics_module
from kraft_node.metadata.image.partition_block import PartitionBlock
from kraft_node.metadata.image.topics import (
    DIRECTORY_LOSS,
    ELR_LOSS,
    WRITE_CHUNK,
    TopicDelta,
    TopicImage,
    TopicPartitions,
    TopicsDelta,
    TopicsImage,
)
from kraft_node.metadata.image.writer import ImageWriterOptions, RecordListWriter
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage import accel
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import Uuid

VERSIONS = MetadataVersion.VERSIONS
REAL_DIRS = [Uuid(bytes([7, d + 1]) + bytes(13) + b"\x01") for d in range(4)]
SPECIAL_DIRS = [DirectoryId.MIGRATING, DirectoryId.UNASSIGNED, DirectoryId.LOST]


def uid(n: int) -> Uuid:
    return Uuid(n.to_bytes(4, "big") + bytes(11) + b"\x05")


def random_partition(rng: random.Random, tid: Uuid, pid: int, *, plain: float = 0.6) -> m.PartitionRecord:
    """A PartitionRecord (v2 fields); ``plain``: the share that has nothing unusual."""
    odd = rng.random() >= plain
    kind = rng.randrange(7) if odd else -1
    n = 130 if kind == 6 else rng.choice((1, 3, 3, 3, 5))  # 127+ entries: the typed encoder's
    replicas = rng.sample(range(200), n)
    fields: dict[str, Any] = dict(partition_id=pid, topic_id=tid, replicas=replicas,
                                  isr=replicas[:rng.randint(1, n)], leader=replicas[0],
                                  leader_epoch=rng.randint(0, 1 << 20), partition_epoch=rng.randint(0, 1 << 20))
    if not odd or kind == 6:
        fields["directories"] = rng.choice(([], [DirectoryId.MIGRATING] * n))
        return m.PartitionRecord(**fields)
    if kind == 0:
        fields["directories"] = [rng.choice(REAL_DIRS + SPECIAL_DIRS) for _ in range(n)]
    elif kind == 1:
        fields["eligible_leader_replicas"] = replicas[1:2] or [9]
        fields["last_known_elr"] = rng.choice(([], [replicas[0]]))
    elif kind == 2:
        fields["last_known_elr"] = [replicas[-1]]
    elif kind == 3:
        fields["leader_recovery_state"] = LeaderRecoveryState.RECOVERING
    elif kind == 4:
        fields["removing_replicas"] = replicas[-1:]
        fields["adding_replicas"] = [300, 301]
        fields["directories"] = [REAL_DIRS[0]] * n
    else:
        fields["directories"] = [DirectoryId.MIGRATING] * n
        fields["leader"] = -1
    return m.PartitionRecord(**fields)


def generated_values(rng: random.Random, topics: int, *, plain: float = 0.6, dense: bool = True) -> list[bytes]:
    """Framed TopicRecords and PartitionRecords (v2), topics in a shuffled name order."""
    out: list[bytes] = []
    names = [f"topic-{t:05d}" + ("" if t % 7 else "-é" * (t % 3)) for t in range(topics)]
    rng.shuffle(names)
    for t, name in enumerate(names):
        tid = uid(t + 1)
        out.append(encode_metadata_record(m.TopicRecord(name=name, topic_id=tid), 0))
        count = rng.choice((0, 1, 3, 10, 10, 30))
        pids = list(range(count)) if dense else sorted(rng.sample(range(3 * count + 1), count))
        for pid in pids:
            out.append(encode_metadata_record(random_partition(rng, tid, pid, plain=plain), 2))
    return out


def with_overrides(rng: random.Random, image: TopicsImage, share: float = 0.3) -> TopicsImage:
    """``image`` after a delta changing some partitions and adding others (overrides, extra ids)."""
    delta = TopicsDelta(image)
    for topic in list(image.topics_by_id.values()):
        if rng.random() >= share:
            continue
        pids = list(topic.partitions)
        for pid in rng.sample(pids, min(len(pids), 2)):
            delta.replay(m.PartitionChangeRecord(partition_id=pid, topic_id=topic.topic_id, leader=-1,
                                                 isr=[], eligible_leader_replicas=rng.choice((None, [1]))))
        delta.replay(random_partition(rng, topic.topic_id, 1000 + len(pids)))
    return delta.apply()


def make_reg(replicas: tuple[int, ...] = (1,), *, directories: tuple[Uuid, ...] | None = None,
        elr: tuple[int, ...] = ()) -> PartitionRegistration:
    return PartitionRegistration(
        replicas=replicas, isr=replicas, leader=replicas[0], removing_replicas=(), adding_replicas=(),
        directories=DirectoryId.migrating_tuple(len(replicas)) if directories is None else directories,
        leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=3, partition_epoch=4, elr=elr)


def reference_write(image: TopicsImage, options: ImageWriterOptions) -> tuple[list[bytes], list[str]]:
    """The per-partition writer: every topic by name, its TopicRecord, then each partition's
    ``to_record`` by partition id, with the losses Kafka reports (directories below 3.7-IV2)
    and the ELR loss (below 4.0-IV1), once per partition."""
    mv = options.metadata_version
    version = mv.partition_record_version()
    out: list[bytes] = []
    losses: list[str] = []
    for name in sorted(image.topic_ids_by_name):
        topic = image.topics_by_name[name]
        out.append(encode_metadata_record(m.TopicRecord(name=name, topic_id=topic.topic_id), 0))
        for pid in sorted(topic.partitions):
            reg = topic.partitions[pid]
            if version == 0 and any(d != DirectoryId.MIGRATING for d in reg.directories):
                losses.append(DIRECTORY_LOSS)
                reg = PartitionRegistration(**{**_fields(reg),
                                               "directories": DirectoryId.migrating_tuple(len(reg.replicas))})
            if version < 2 and (reg.elr or reg.last_known_elr):
                losses.append(ELR_LOSS)
            out.append(reg.to_record(topic.topic_id, pid, mv).encode())
    return out, losses


def _fields(reg: PartitionRegistration) -> dict[str, Any]:
    return {f: getattr(reg, f) for f in ("replicas", "directories", "isr", "removing_replicas", "adding_replicas",
                                         "leader", "leader_recovery_state", "leader_epoch", "partition_epoch",
                                         "elr", "last_known_elr")}


def written(image: TopicsImage | TopicImage, mv: MetadataVersion) -> tuple[list[ApiMessageAndVersion], list[str]]:
    losses: list[str] = []
    writer = RecordListWriter()
    image.write(writer, ImageWriterOptions(mv, losses.append))
    return writer.records, losses


def assert_written_as_reference(image: TopicsImage, mv: MetadataVersion) -> None:
    records, losses = written(image, mv)
    want, want_losses = reference_write(image, ImageWriterOptions(mv))
    got = [r.encode() for r in records]
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert a == b, f"record {i} at {mv}: {decode_metadata_record(a, 0)} != {decode_metadata_record(b, 0)}"
    assert losses == want_losses
    for record, value in zip(records, want):  # the version each record says it is
        assert record.version == decode_metadata_record(value, 0)[1]


def block_image(seed: int, topics: int, **kw: Any) -> TopicsImage:
    image = bulk.fold_topics(generated_values(random.Random(seed), topics, **kw)).image
    assert any(t.partitions.block is not None for t in image.topics_by_id.values())
    return image


# ---------------------------------------------------------------------------------------------
# the same bytes and losses as the per-partition writer
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mv", VERSIONS, ids=str)
def test_block_image_written_as_the_per_partition_writer_at_every_version(mv: MetadataVersion) -> None:
    image = block_image(1, 150)
    assert_written_as_reference(image, mv)


@pytest.mark.parametrize("mv", [VERSIONS[0], MetadataVersion.IBP_3_7_IV2, MetadataVersion.IBP_4_0_IV1, VERSIONS[-1]],
                         ids=str)
@pytest.mark.parametrize("seed", [2, 3, 4])
def test_overrides_compacted_and_dict_backed_topics_as_the_per_partition_writer(mv: MetadataVersion,
                                                                               seed: int) -> None:
    rng = random.Random(seed)
    image = block_image(seed, 120, dense=seed != 3)
    changed = with_overrides(rng, image)
    assert any(t.partitions.overrides for t in changed.topics_by_id.values())
    assert_written_as_reference(changed, mv)
    assert_written_as_reference(changed.compacted(), mv)
    plain = TopicsImage.of(TopicImage(t.name, t.topic_id, dict(t.partitions.items()))
                           for t in changed.topics_by_id.values())
    assert_written_as_reference(plain, mv)
    assert [r.encode() for r in written(plain, mv)[0]] == [r.encode() for r in written(changed, mv)[0]]


def test_plain_image_has_no_loss_and_comes_from_the_kernel_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """An image of plain partitions never takes the per-partition way (no registration made)."""
    image = block_image(5, 300, plain=1.1)

    def no_registrations(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a registration was made for a plain block row")

    monkeypatch.setattr(PartitionBlock, "registrations_at", no_registrations)
    monkeypatch.setattr(PartitionBlock, "registration", no_registrations)
    for mv in (VERSIONS[0], MetadataVersion.IBP_3_7_IV2, VERSIONS[-1]):
        monkeypatch.undo()
        want, want_losses = reference_write(image, ImageWriterOptions(mv))
        monkeypatch.setattr(PartitionBlock, "registrations_at", no_registrations)
        monkeypatch.setattr(PartitionBlock, "registration", no_registrations)
        records, losses = written(image, mv)
        assert [r.encode() for r in records] == want
        assert losses == want_losses == []


def test_topic_write_and_chunk_boundaries() -> None:
    """A topic written alone, and an image whose topics straddle many chunks."""
    image = block_image(6, 40)
    for topic in image.topics_by_id.values():
        records, _losses = written(topic, VERSIONS[-1])
        single = TopicsImage.of([topic])
        assert [r.encode() for r in records] == reference_write(single, ImageWriterOptions(VERSIONS[-1]))[0]
    big = block_image(7, 3 * WRITE_CHUNK // 10, plain=0.95)
    assert big.num_partitions() > 2 * WRITE_CHUNK
    assert_written_as_reference(big, VERSIONS[-1])


def test_long_and_unicode_topic_names() -> None:
    """TopicRecord values written by hand: a name whose compact length takes two varint bytes."""
    names = ["a", "x" * 126, "y" * 127, "z" * 249, "ü" * 100, "t-\u4e2d"]
    topics = [TopicImage(n, uid(i + 1), {0: make_reg()})
              for i, n in enumerate(names)]
    assert_written_as_reference(TopicsImage.of(topics), VERSIONS[-1])


# ---------------------------------------------------------------------------------------------
# losses with no handler
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mv, loss", [(VERSIONS[0], DIRECTORY_LOSS), (MetadataVersion.IBP_3_7_IV2, ELR_LOSS)],
                         ids=str)
def test_a_loss_without_handler_raises_before_its_chunk_is_written(mv: MetadataVersion, loss: str) -> None:
    rng = random.Random(8)
    plain_topics = [TopicImage(f"a{i}", uid(i + 1), TopicPartitions(block=PartitionBlock.from_registrations(
        [0], [make_reg()]))) for i in range(3)]
    directories = (REAL_DIRS[0],) if loss == DIRECTORY_LOSS else (DirectoryId.MIGRATING,)
    elr = (1,) if loss == ELR_LOSS else ()
    lossy = make_reg(directories=directories, elr=elr)
    block = PartitionBlock.from_registrations([0, 1], [plain_topics[0].partitions[0], lossy])
    topics = plain_topics + [TopicImage("b", uid(99), TopicPartitions(block=block))]
    rng.shuffle(topics)
    writer = RecordListWriter()
    with pytest.raises(UnwritableMetadataError) as info:
        TopicsImage.of(topics).write(writer, ImageWriterOptions(mv))
    assert str(info.value) == (f"Metadata has been lost because the following could not be represented in "
                               f"metadata.version {mv}: {loss}")
    assert writer.records == []


# ---------------------------------------------------------------------------------------------
# the kernel: twins, input checks
# ---------------------------------------------------------------------------------------------

def _columns(block: PartitionBlock) -> tuple[Any, ...]:
    return tuple(getattr(block, n) for n in pure_objects.PARTITION_ROW_COLUMNS)


def _twins() -> list[Any]:
    native = accel.load("_bulk_objects", "kraft_node")
    return [pure_objects] if native is pure_objects else [pure_objects, native]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_kernel_twins_agree_and_match_the_typed_encoder(version: int) -> None:
    image = block_image(9, 60, dense=False)
    blocks = {id(t.partitions.block): t.partitions.block for t in image.topics_by_id.values()
              if t.partitions.block is not None}
    tops = sorted(image.topics_by_id.values(), key=lambda t: t.partitions.start)
    mv = next(v for v in VERSIONS if v.partition_record_version() == version)
    for block in blocks.values():
        mine = [t for t in tops if t.partitions.block is block]
        args = (bytes((1, 3, version)), _columns(block), [t.partitions.start for t in mine],
                [t.partitions.stop for t in mine], [t.topic_id.bytes for t in mine], version)
        results = [twin.encode_partition_rows(*args) for twin in _twins()]
        assert all(r == results[0] for r in results)
        marks = [("topic", k) for k in range(len(mine))]
        with_prefixes = [twin.encode_partition_rows(*args, marks) for twin in _twins()]
        assert all(r == with_prefixes[0] for r in with_prefixes)
        expect: list[Any] = []
        at = 0
        for k, t in enumerate(mine):
            expect.append(marks[k])
            expect += results[0][at:at + len(t.partitions)]
            at += len(t.partitions)
        assert with_prefixes[0] == expect
        flat = [(t, p, r) for t in mine for p, r in t.partitions.items()]
        assert len(flat) == len(results[0])
        assert None in results[0] and any(v is not None for v in results[0])
        for (t, p, reg), value in zip(flat, results[0]):
            if value is not None:
                assert value == reg.to_record(t.topic_id, p, mv).encode()
            else:  # only a row with a tagged field, a loss, or a list of 127+
                assert (reg.leader_recovery_state != 0 or reg.elr or reg.last_known_elr or len(reg.replicas) > 126
                        or (version == 0 and any(d != DirectoryId.MIGRATING for d in reg.directories)))


def test_kernel_refuses_bad_input_naming_it() -> None:
    block = PartitionBlock.from_registrations([0, 1], [make_reg((1, 2))] * 2)
    cols = _columns(block)
    header = bytes((1, 3, 2))
    for twin in _twins():
        with pytest.raises(ValueError, match="span 0 is rows 1..3, outside 0..2"):
            twin.encode_partition_rows(header, cols, [1], [3], [bytes(16)], 2)
        with pytest.raises(ValueError, match="topic id 0 is not 16 bytes"):
            twin.encode_partition_rows(header, cols, [0], [2], [bytes(15)], 2)
        with pytest.raises(ValueError, match="same length"):
            twin.encode_partition_rows(header, cols, [0], [2], [], 2)
        with pytest.raises(ValueError, match="same length"):
            twin.encode_partition_rows(header, cols, [0], [2], [bytes(16)], 2, [])
        with pytest.raises(ValueError, match="3 frame bytes"):
            twin.encode_partition_rows(b"\x01", cols, [0], [2], [bytes(16)], 2)
        bad = list(cols)
        bad[5] = np.array([0, 2, 9], np.int32)  # replicas offsets past the values
        with pytest.raises(ValueError, match=r"row 1: replicas offsets 2..9 outside 0..4"):
            twin.encode_partition_rows(header, tuple(bad), [0], [2], [bytes(16)], 2)
        bad = list(cols)
        bad[1] = np.array([1], np.int32)
        with pytest.raises(ValueError, match="leader has 1 rows, partition_id 2"):
            twin.encode_partition_rows(header, tuple(bad), [0], [2], [bytes(16)], 2)
        bad = list(cols)
        bad[14] = np.zeros((2, 8), np.uint8)
        with pytest.raises(ValueError, match="directories must be uint8"):
            twin.encode_partition_rows(header, tuple(bad), [0], [2], [bytes(16)], 2)


# ---------------------------------------------------------------------------------------------
# what the emitter gets
# ---------------------------------------------------------------------------------------------

def test_records_are_framed_and_decode_on_demand() -> None:
    image = block_image(10, 20, plain=1.1)
    records, _ = written(image, VERSIONS[-1])
    name = sorted(image.topic_ids_by_name)[0]
    first = records[0]
    assert first.version == 0
    assert first == ApiMessageAndVersion(m.TopicRecord(name=name, topic_id=image.topic_ids_by_name[name]), 0)
    assert first.message.name == name
    part = records[1]
    assert part.version == 2 and part.message.topic_id == image.topic_ids_by_name[name]


def test_a_chunk_comes_out_record_by_record() -> None:
    """The writer's ``write`` is called once per record, in order, and may stop the walk between
    any two records (the emitter's slice boundary): what was written is a prefix."""
    image = block_image(11, 400, plain=0.9)
    want = [r.encode() for r in written(image, VERSIONS[-1])[0]]

    class Stop(Exception):
        pass

    class Writer:
        def __init__(self, stop_at: int) -> None:
            self.stop_at = stop_at
            self.seen: list[bytes] = []

        def write(self, record: ApiMessageAndVersion) -> None:
            self.seen.append(record.encode())
            if len(self.seen) == self.stop_at:
                raise Stop()

        def close(self, complete: bool) -> None:
            pass

    for stop_at in (1, 17, WRITE_CHUNK - 1, WRITE_CHUNK + 5, len(want) - 1):
        writer = Writer(stop_at)
        with pytest.raises(Stop):
            image.write(writer, ImageWriterOptions(VERSIONS[-1]))
        seen = writer.seen
        assert seen == want[:stop_at]


def test_topic_delta_apply_keeps_write_in_step() -> None:
    """A topic's partitions changed through TopicDelta (overrides on a block) are written as the
    changed registrations, not the block rows under them."""
    image = block_image(12, 30, plain=1.1)
    topic = next(t for t in image.topics_by_id.values() if len(t.partitions) >= 3)
    delta = TopicDelta(topic)
    delta.replay(m.PartitionChangeRecord(partition_id=1, topic_id=topic.topic_id, leader=-1, isr=[]))
    changed = delta.apply()
    assert changed.partitions.block is topic.partitions.block and changed.partitions.overrides
    records, _ = written(changed, VERSIONS[-1])
    assert records[2].message.leader == -1
    assert records[2].message.partition_epoch == topic.partitions[1].partition_epoch + 1
    assert [r.encode() for r in records] == reference_write(TopicsImage.of([changed]),
                                                          ImageWriterOptions(VERSIONS[-1]))[0]


def test_module_uses_the_kernel_in_process() -> None:
    """The writer calls the kernel of this process (native when built): the twin names match."""
    assert topics_module._objects.PARTITION_ROW_COLUMNS == pure_objects.PARTITION_ROW_COLUMNS
