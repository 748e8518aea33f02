"""The columnar load and the bulk write of topics and partitions (replication_snapshot) and
the ``_bulk_objects`` kernel under them.

What is checked:

* the kernel (native, when built, and its pure twin) against plain-Python oracles: objects from
  columns equal the dataclass's own, tuples equal slices, groups equal a dict fold, encoded
  PartitionRecords equal the typed encoder's bytes;
* the bulk writer: Kafka's PartitionRegistrationTest ``toRecord`` scenarios re-stated with their
  exact inputs, and any registration at any metadata.version gives the typed encoder's bytes
  (or its UnwritableMetadataError); ``snapshot_records`` equals the per-record writer;
* the columnar load: any run of PartitionRecords leaves exactly the state
  ``ReplicationControlManager.replay_partitions`` leaves for the typed records (registrations,
  every index entry in order, the snapshot bytes), and fails at the same record with the same
  message; whole batches (TopicRecords, configs, changes, removals between them) through a
  QuorumController give the per-record path's state and first failure; every Kafka fixture
  loads to the same state both ways; a snapshot written by the controller's generator loads
  back to the same records, and a bad record in it is named as the per-record path names it.
"""
from __future__ import annotations

import gc
import importlib
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fixture_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kraft_node.metadata.controller.replication_control as rc_module
import kraft_node.metadata.controller.replication_snapshot as rs
from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.replication_control import (
    LEADER_FLAG,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
    PartitionReplayError,
    ReplicationControlManager,
    UnwritableMetadataError,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.raft.io.kafka_log import KafkaSnapshotReader
from kraft_node.raft.messages import LeaderAndEpoch, SnapshotId
from kraft_storage.accel import native_available
from kraft_storage.messages import metadata as m
from kraft_storage.messages.columns import decode_bodies
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.record.constants import CONTROL_MASK
from kraft_storage.snapshot import RecordsSnapshotWriter
from kraft_storage.snapshot import SnapshotId as FileSnapshotId
from kraft_storage.timeline import SnapshotRegistry, TimelineHashMap

PURE = importlib.import_module("kraft_node._pure._bulk_objects")
#: the twin always; the native kernel too when it is built (each is checked against an oracle)
IMPLS = [PURE] + ([importlib.import_module("kraft_node._native._bulk_objects")]
                  if native_available("_bulk_objects", "kraft_node") else [])
IMPL_IDS = [i.__name__.split(".")[1] for i in IMPLS]
FIXTURES = fixture_params("*.log", "*.checkpoint")
PR_KEY = m.PartitionRecord.API_KEY


def mv(name: str) -> MetadataVersion:
    return MetadataVersion.from_version_string(name)


def uid(s: str) -> Uuid:
    return Uuid.from_string(s)


# ---------------------------------------------------------------------------
# State dumps: everything the replay side holds, index entries in their order
# ---------------------------------------------------------------------------

def dump(rc: ReplicationControlManager) -> dict[str, Any]:
    def key(t: Any) -> bytes:
        # the indexes file topics under their ids' bytes as a latin-1 str (replication_control.topic_key)
        # on every path
        assert type(t) is str and len(t) == 16, t
        return t.encode("latin-1")

    def raw(index: Any) -> dict[int, dict[bytes, tuple[int, ...]]]:
        return {b: {key(t): tuple(es) for t, es in tm.items()} for b, tm in index._members.items()}
    topics = {n: t.bytes for n, t in rc.topics_by_name.items()}
    return {
        "topics": topics,
        "ids": sorted((t.bytes, info.name) for t, info in rc.topics_by_id.items()),
        "parts": {n: sorted(rc.topics_by_id.get(t).parts.items()) for n, t in rc.topics_by_name.items()},
        "isr": raw(rc.brokers_to_isrs),
        "elr": raw(rc.brokers_to_elrs),
        # exact: a partition is listed once under a directory even when a record names it twice
        "dirs": {d.bytes: {key(t): tuple(ps) for t, ps in dp._topics.items()}
                 for d, dp in rc.directories_to_partitions.items()},
        "reassigning": {t.bytes: ps for t, ps in rc.reassigning_topics.items()},
        "imbalanced": sorted((tp.topic_id.bytes, tp.partition_id) for tp in rc.imbalanced_partitions.keys()),
        "collisions": {k: sorted(v.keys()) for k, v in rc.topics_with_collision_chars.items()},
    }


def snapshot_bytes(rc: ReplicationControlManager, version: MetadataVersion | None = None) -> list[bytes]:
    return [r.encode() for r in rc.snapshot_records(metadata_version=version)]


def typed_snapshot_bytes(rc: ReplicationControlManager, version: MetadataVersion | None = None) -> list[bytes]:
    """The per-record writer (``to_record`` then the typed encoder), as it was before the bulk one."""
    out = []
    for name, topic_id in sorted(rc.topics_by_name.items()):
        out.append(encode_metadata_record(m.TopicRecord(name=name, topic_id=topic_id), 0))
        for pid, part in sorted(rc.topics_by_id.get(topic_id).parts.items()):
            out.append(part.to_record(topic_id, pid, version).encode())
    return out


def manager() -> ReplicationControlManager:
    registry = SnapshotRegistry()
    return ReplicationControlManager(registry, ConfigurationControlManager(registry))


def table_of(values: list[bytes]) -> Any:
    fr = rs.frame_values(values)
    return decode_bodies(fr.data, fr.body_pos, fr.end, fr.api_key, fr.version, types=(PR_KEY,)).tables[PR_KEY]


# ---------------------------------------------------------------------------
# The kernel
# ---------------------------------------------------------------------------

REG_ARGS = dict(replicas=(1, 2, 3), directories=(DirectoryId.MIGRATING,) * 3, isr=(1, 2), removing_replicas=(3,),
                adding_replicas=(), leader=1, leader_recovery_state=LeaderRecoveryState.RECOVERING, leader_epoch=4,
                partition_epoch=9, elr=(3,), last_known_elr=())


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_new_objects_equal_the_dataclass_and_untrack_only_natively(impl):
    names = list(REG_ARGS)
    made = impl.new_objects(PartitionRegistration, names, [[v, v] for v in REG_ARGS.values()], True)
    assert made == [PartitionRegistration(**REG_ARGS)] * 2
    assert str(made[0]) == str(PartitionRegistration(**REG_ARGS))
    assert made[0] is not made[1]
    # only C can take an object out of the collector's lists; the twin leaves them tracked
    assert gc.is_tracked(made[0]) is (impl is PURE)


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_new_objects_refuses_what_it_cannot_fill(impl):
    names = list(REG_ARGS)
    cols = [[v] for v in REG_ARGS.values()]
    with pytest.raises(ValueError) as e:
        impl.new_objects(PartitionRegistration, names[:-1], cols[:-1])
    assert str(e.value) == "new_objects(PartitionRegistration): slots not given ['last_known_elr'], not slots []"
    with pytest.raises(ValueError) as e:
        impl.new_objects(PartitionRegistration, names, cols[:-1] + [[(), ()]])
    assert str(e.value) == "column 'last_known_elr' has 2 values, the first one 1"

    class Plain:
        pass
    with pytest.raises(ValueError) as e:
        impl.new_objects(Plain, [], [])
    assert str(e.value) == "Plain has no __slots__: its instances have a __dict__"


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_new_objects_fills_a_slot_a_property_shadows(impl):
    (rec,) = impl.new_objects(rs.FramedRecord, ["version", "_value", "message"], [[0], [b"\x01\x02\x00x"], [None]])
    assert rec.encode() == b"\x01\x02\x00x" and rec.version == 0


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@given(lens=st.lists(st.integers(0, 4), max_size=30), data=st.data())
def test_tuples_are_slices(impl, lens, data):
    values = data.draw(st.lists(st.integers(-5, 1000), min_size=sum(lens), max_size=sum(lens)))
    off = np.concatenate(([0], np.cumsum(lens))).astype(np.int32)
    got = impl.tuples(off, values, True)
    assert got == [tuple(values[a:b]) for a, b in zip(off[:-1], off[1:])]
    empty: tuple[int, ...] = ()
    assert all(t is empty for t in got if not t)  # the one empty tuple


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_tuples_refuse_bad_offsets(impl):
    for off in ([0, 3], [1, 0], [-1, 0]):
        with pytest.raises(ValueError) as e:
            impl.tuples(np.array(off), [1, 2])
        assert str(e.value) == "offsets must be non-decreasing positions within the 2 values"


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
@given(rows=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3), st.integers(0, 10**6)), max_size=60))
def test_group_by_key_is_a_fold_by_key_then_topic(impl, rows):
    keys = np.array([r[0] for r in rows], np.int64)
    topics = np.array([r[1] for r in rows], np.int64)
    entries = np.array([r[2] for r in rows], np.int64)
    objs = ["t0", "t1", "t2", "t3"]
    got = impl.group_by_key(keys, topics, entries, 6, objs, True)
    per_key: dict[int, list[tuple[int, int]]] = {}
    for k, t, e in rows:
        per_key.setdefault(k, []).append((t, e))
    if any([t for t, _e in v] != sorted(t for t, _e in v) for v in per_key.values()):
        assert got is None  # a key's topics go back: the caller groups another way
        return
    want: list[Any] = []
    for k in range(6):
        if k not in per_key:
            want.append(None)
            continue
        names: list[str] = []
        groups: list[list[int]] = []
        for t, e in per_key[k]:
            if not names or names[-1] != objs[t]:
                names.append(objs[t])
                groups.append([])
            groups[-1].append(e)
        want.append((names, [tuple(g) for g in groups]))
    assert got == want


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_group_by_key_refuses_indexes_out_of_range(impl):
    with pytest.raises(ValueError) as e:
        impl.group_by_key(np.array([2]), np.array([0]), np.array([7]), 2, ["t"])
    assert str(e.value) == "a key or topic index is out of range"


# ---------------------------------------------------------------------------
# The bulk writer
# ---------------------------------------------------------------------------

TOPIC = uid("OGdAI5nxT_m-ds3rJMqPLA")


@pytest.fixture(params=IMPLS, ids=IMPL_IDS)
def kernel(request, monkeypatch):
    monkeypatch.setattr(rs, "_objects", request.param)
    return request.param


@pytest.mark.parametrize("version", ["3.7-IV2", "4.0-IV1"])
def test_kafka_partition_registration_to_record(kernel, version):
    """PartitionRegistrationTest.testPartitionRegistrationToRecord (3.7-IV2, 4.0-IV1): ELR only
    from 4.0-IV1, directories from 3.7-IV2, reserved directory ids written as they are."""
    dirs = (DirectoryId.UNASSIGNED, uid("KBJBm9GVRAG9Ffe25odmmg"), DirectoryId.LOST, uid("7DZNT5qBS7yFF7VMMHS7kw"),
            uid("cJGPUZsMSEqbidOLYLOIXg"))
    reg = PartitionRegistration(replicas=(0, 1, 2, 3, 4), directories=dirs, isr=(0, 1), removing_replicas=(),
                                adding_replicas=(), leader=0, leader_recovery_state=LeaderRecoveryState.RECOVERED,
                                leader_epoch=0, partition_epoch=0, elr=(2, 3), last_known_elr=(4,))
    v = mv(version)
    expect = m.PartitionRecord(topic_id=TOPIC, partition_id=0, replicas=[0, 1, 2, 3, 4], isr=[0, 1], leader=0,
                               leader_recovery_state=0, leader_epoch=0, partition_epoch=0, directories=list(dirs))
    if v.is_elr_supported():
        expect.eligible_leader_replicas = [2, 3]
        expect.last_known_elr = [4]
    assert rs.encode_partition_records([TOPIC], [0], [reg], v) == [
        encode_metadata_record(expect, v.partition_record_version())]


def test_kafka_partition_registration_to_record_before_directories(kernel):
    """The same at 3.7-IV1 (PartitionRecord v0): Kafka's loss handler is told the directory
    assignment cannot be written; ours (the default one, as Kafka's default) raises."""
    v = mv("3.7-IV1")
    reg = PartitionRegistration(replicas=(0, 1), directories=(DirectoryId.UNASSIGNED, uid("KBJBm9GVRAG9Ffe25odmmg")),
                                isr=(0, 1), removing_replicas=(), adding_replicas=(), leader=0,
                                leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0, partition_epoch=0)
    with pytest.raises(UnwritableMetadataError) as e:
        rs.encode_partition_records([TOPIC], [0], [reg], v)
    assert str(e.value) == ("Metadata has been lost because the following could not be represented in "
                            "metadata.version 3.7-IV1: the directory assignment state of one or more replicas")


def test_kafka_partition_registration_to_record_elr_should_be_null_if_empty(kernel):
    """PartitionRegistrationTest.testPartitionRegistrationToRecord_ElrShouldBeNullIfEmpty."""
    v = mv("4.0-IV1")
    reg = PartitionRegistration(replicas=(0, 1, 2, 3, 4), directories=DirectoryId.migrating_tuple(5), isr=(0, 1),
                                removing_replicas=(), adding_replicas=(), leader=0,
                                leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0, partition_epoch=0)
    expect = m.PartitionRecord(topic_id=TOPIC, partition_id=0, replicas=[0, 1, 2, 3, 4], isr=[0, 1], leader=0,
                               leader_recovery_state=0, leader_epoch=0,
                               directories=list(DirectoryId.migrating_tuple(5)), partition_epoch=0)
    assert rs.encode_partition_records([TOPIC], [0], [reg], v) == [encode_metadata_record(expect, 2)]


def test_kafka_record_round_trip(kernel):
    """PartitionRegistrationTest.testRecordRoundTrip: 3.7-IV0 (PartitionRecord v0), topic
    OGdAI5nxT_m-ds3rJMqPLA partition 4, read back into an equal registration."""
    v = mv("3.7-IV0")
    reg = PartitionRegistration(replicas=(1, 2, 3), directories=DirectoryId.migrating_tuple(3), isr=(1, 2),
                                removing_replicas=(1,), adding_replicas=(), leader=1,
                                leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=0, partition_epoch=0)
    (value,) = rs.encode_partition_records([TOPIC], [4], [reg], v)
    _key, version, record = decode_metadata_record(value, 0)
    assert version == 0 and record.partition_id == 4 and record.topic_id == TOPIC
    assert PartitionRegistration.from_record(record) == reg


DIR_POOL = [DirectoryId.MIGRATING, DirectoryId.UNASSIGNED, DirectoryId.LOST, uid("KBJBm9GVRAG9Ffe25odmmg"),
            uid("7DZNT5qBS7yFF7VMMHS7kw")]
VERSIONS = [None] + [mv(s) for s in ("3.6-IV2", "3.7-IV2", "4.0-IV1")]


@st.composite
def registrations(draw: Any) -> PartitionRegistration:
    broker = st.integers(-1, 2**31 - 1) | st.integers(0, 9)
    short = st.lists(st.integers(0, 9), max_size=4).map(tuple)
    n = draw(st.sampled_from([0, 1, 3, 3, 3, 130]))
    replicas = tuple(draw(st.lists(broker, min_size=n, max_size=n)))
    dirs = tuple(draw(st.lists(st.sampled_from(DIR_POOL), min_size=n, max_size=n))) if draw(st.booleans()) \
        else DirectoryId.migrating_tuple(n)
    return PartitionRegistration(
        replicas=replicas, directories=dirs, isr=draw(short), removing_replicas=draw(short | st.just(())),
        adding_replicas=draw(st.just(()) | short), leader=draw(broker),
        leader_recovery_state=draw(st.sampled_from([LeaderRecoveryState.RECOVERED] * 3 + [
            LeaderRecoveryState.RECOVERING])),
        leader_epoch=draw(st.integers(-1, 2**31 - 1)), partition_epoch=draw(st.integers(-1, 2**31 - 1)),
        elr=draw(st.just(()) | short), last_known_elr=draw(st.just(()) | short))


@settings(max_examples=150, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(regs=st.lists(registrations(), min_size=1, max_size=12), version=st.sampled_from(VERSIONS),
       pid0=st.integers(0, 2**31 - 20))
def test_bulk_encoding_is_the_typed_encoding(kernel, regs, version, pid0):
    topic_ids = [TOPIC if i % 2 else uid("ePwTiSgFRvaKRBaUX3EcZQ") for i in range(len(regs))]
    pids = [pid0 + i for i in range(len(regs))]
    try:
        want = [r.to_record(t, p, version).encode() for t, p, r in zip(topic_ids, pids, regs)]
    except UnwritableMetadataError as exc:
        with pytest.raises(UnwritableMetadataError) as e:
            rs.encode_partition_records(topic_ids, pids, regs, version)
        assert str(e.value) == str(exc)
        return
    assert rs.encode_partition_records(topic_ids, pids, regs, version) == want


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_kernel_leaves_to_the_typed_encoder_what_it_does_not_write(impl):
    """None for: a value that is not a registration, a recovering leader (a tagged field),
    a non-empty ELR at v2, a list of 127, a real directory at v0, an int beyond int32."""
    ok = PartitionRegistration(**{**REG_ARGS, "leader_recovery_state": LeaderRecoveryState.RECOVERED, "elr": ()})
    cases = [object(), PartitionRegistration(**{**REG_ARGS, "elr": ()}),
             PartitionRegistration(**{**REG_ARGS, "leader_recovery_state": LeaderRecoveryState.RECOVERED}),
             PartitionRegistration(**{**REG_ARGS, "leader_recovery_state": LeaderRecoveryState.RECOVERED,
                                      "elr": (), "isr": tuple(range(127))}),
             PartitionRegistration(**{**REG_ARGS, "leader_recovery_state": LeaderRecoveryState.RECOVERED,
                                      "elr": (), "leader_epoch": 2**31})]
    got = impl.encode_partition_records(PartitionRegistration, bytes((1, 3, 2)), [0] * 6, [TOPIC.bytes] * 6,
                                        [ok, *cases], Uuid, 2)
    assert got[0] == ok.to_record(TOPIC, 0).encode() and got[1:] == [None] * 5
    real_dir = PartitionRegistration(**{**REG_ARGS, "leader_recovery_state": LeaderRecoveryState.RECOVERED,
                                        "elr": (), "directories": (DIR_POOL[3],) * 3})
    assert impl.encode_partition_records(PartitionRegistration, bytes((1, 3, 0)), [0], [TOPIC.bytes], [real_dir],
                                         Uuid, 0) == [None]


def test_framed_records_are_the_records():
    rc = manager()
    rc.replay(m.TopicRecord(name="foo", topic_id=TOPIC), 0)
    rc.replay(m.PartitionRecord(partition_id=0, topic_id=TOPIC, replicas=[1, 2], isr=[1], leader=1,
                                leader_epoch=0, partition_epoch=0), 1)
    topic_rec, part_rec = rc.snapshot_records()
    assert isinstance(part_rec, rs.FramedRecord) and part_rec.version == 2
    assert part_rec == rc.topic(TOPIC).parts.get(0).to_record(TOPIC, 0)
    assert part_rec.message.replicas == [1, 2] and "PartitionRecord" in repr(part_rec)
    assert topic_rec == ApiMessageAndVersion(m.TopicRecord(name="foo", topic_id=TOPIC), 0)


@pytest.mark.parametrize("version", VERSIONS, ids=str)
def test_snapshot_records_are_the_per_record_writers(kernel, version, monkeypatch):
    """Topics by name, partitions by id, across chunk boundaries (chunks of 7 here)."""
    monkeypatch.setattr(rs, "WRITE_CHUNK", 7)
    rc = manager()
    for t in range(5):
        topic_id = Uuid(bytes([t + 1]) * 16)
        rc.replay(m.TopicRecord(name=f"t{4 - t}", topic_id=topic_id), 0)
        rc.replay_partitions([m.PartitionRecord(
            partition_id=p, topic_id=topic_id, replicas=[p % 3, (p + 1) % 3], isr=[p % 3], leader=p % 3,
            leader_epoch=p, partition_epoch=p, leader_recovery_state=int(p == 4),
            eligible_leader_replicas=[2] if p == 5 else None) for p in reversed(range(t * 3))])
    assert snapshot_bytes(rc, version) == typed_snapshot_bytes(rc, version)


# ---------------------------------------------------------------------------
# The columnar load: PartitionRecord runs
# ---------------------------------------------------------------------------

TOPICS = [uid("Ktv3YkMQRe-MId4VkkrMyw"), uid("8auUWq8zQqe_99H_m2LAmw"), uid("4rtHTelWSSStAFMODOg3cQ")]
MISSING = uid("Id1WXzHURROilVxZWJNZlw")


@st.composite
def partition_record(draw: Any, topics: list[Uuid]) -> tuple[Any, int]:
    version = draw(st.sampled_from([0, 1, 2, 2]))
    broker = st.integers(-1, 6)
    replicas = draw(st.lists(broker, max_size=4))
    fields: dict[str, Any] = dict(
        partition_id=draw(st.integers(0, 6)), topic_id=draw(st.sampled_from(topics)), replicas=replicas,
        isr=draw(st.lists(broker, max_size=4)), leader=draw(st.sampled_from([-1, 7, *replicas])),
        leader_epoch=draw(st.integers(-1, 5)), partition_epoch=draw(st.integers(-1, 5)),
        leader_recovery_state=draw(st.sampled_from([0, 0, 0, 1, 5])),
        removing_replicas=draw(st.just([]) | st.lists(broker, max_size=2)),
        adding_replicas=draw(st.just([]) | st.lists(broker, max_size=2)))
    if version >= 1:
        n = len(replicas) if draw(st.integers(0, 9)) else draw(st.integers(0, 5))
        fields["directories"] = draw(st.lists(st.sampled_from(DIR_POOL), min_size=n, max_size=n))
    if version >= 2:
        fields["eligible_leader_replicas"] = draw(st.none() | st.lists(broker, max_size=3))
        fields["last_known_elr"] = draw(st.none() | st.lists(broker, max_size=2))
    return m.PartitionRecord(**fields), version


def two_managers(existing: list[tuple[Any, int]], topics: list[Uuid]) -> tuple[ReplicationControlManager, ...]:
    out = []
    for _ in range(2):
        rc = manager()
        for i, t in enumerate(topics):
            rc.replay(m.TopicRecord(name=f"topic.{i}" if i else "topic_0", topic_id=t), i)
        for rec, version in existing:  # partitions that exist before the run
            try:
                rc.replay(decode_metadata_record(encode_metadata_record(rec, version), 0)[2], -1)
            except ReplayError:
                pass
        out.append(rc)
    return tuple(out)


def columnar(rc: ReplicationControlManager, values: list[bytes]) -> None:
    rs.replay_partition_columns(rc, table_of(values), 0, len(values),
                                lambda k: decode_metadata_record(values[k], 0)[2])


def outcome(fn: Any) -> tuple[str, str, int] | None:
    try:
        fn()
    except PartitionReplayError as exc:
        return type(exc.__cause__ or exc).__name__, str(exc), exc.index
    return None


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_columnar_load_leaves_replay_partitions_state(data):
    """Any run of PartitionRecords -- new partitions of several topics (interleaved, repeated
    ids, partitions that exist, a topic that does not), duplicate ISR members, leaderless ones,
    ELRs, directories (reserved, v0 records without), reassignments, refused records -- leaves
    the state replay_partitions leaves, and fails at the same record with the same message."""
    topics = TOPICS[:data.draw(st.integers(1, 3))]
    existing = data.draw(st.lists(partition_record(topics), max_size=4))
    run = data.draw(st.lists(partition_record(topics + [MISSING] * data.draw(st.sampled_from([0, 0, 1]))),
                             min_size=1, max_size=25))
    values = [encode_metadata_record(rec, version) for rec, version in run]
    typed, col = two_managers(existing, topics)
    want = outcome(lambda: typed.replay_partitions([decode_metadata_record(v, 0)[2] for v in values]))
    got = outcome(lambda: columnar(col, values))
    assert got == want
    assert dump(col) == dump(typed)
    assert index_order(col) == index_order(typed)
    assert snapshot_bytes(col) == snapshot_bytes(typed)


@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_columnar_load_of_many_topics_with_each_kernel(impl, monkeypatch):
    """Three topics of 40 partitions, RF 3 over 9 brokers with a directory each (per topic one
    leaderless partition, one reassigning, one led by its second replica), with either kernel."""
    monkeypatch.setattr(rs, "_objects", impl)
    dirs = [Uuid(bytes([0, b + 1]) + bytes(14)) for b in range(9)]
    run = []
    for t in TOPICS:
        for p in range(40):
            reps = [(p + k) % 9 for k in range(3)]
            run.append((m.PartitionRecord(
                partition_id=p, topic_id=t, replicas=reps, isr=reps, leader=-1 if p == 7 else reps[p == 9],
                leader_epoch=0, partition_epoch=0, directories=[dirs[b] for b in reps],
                adding_replicas=[8] if p == 11 else []), 1))
    values = [encode_metadata_record(r, v) for r, v in run]
    typed, col = two_managers([], TOPICS)
    typed.replay_partitions([decode_metadata_record(v, 0)[2] for v in values])
    columnar(col, values)
    assert dump(col) == dump(typed)
    assert col.partitions_with_no_leader() == [tp for tp in typed.partitions_with_no_leader()]
    # leaderless partitions are not led by their first replica either
    assert len(col.imbalanced()) == 6 and set(col.reassigning()) == set(TOPICS)
    assert snapshot_bytes(col) == snapshot_bytes(typed)


@pytest.mark.parametrize("split", [1, 20, 39])
def test_a_topic_cut_by_a_call_boundary_extends_its_index_entries(split, monkeypatch):
    """The bulk load reads back only the topics that had partitions before the call (a topic
    a batch boundary cut in two): its second call must extend, not replace, that topic's ISR
    and directory entries, while the other topics' are put without a read.  Readers get the
    topic ids back as Uuids even when the key -> Uuid cache was emptied in between."""
    dirs = [Uuid(bytes([0, b + 1]) + bytes(14)) for b in range(9)]
    run = []
    for t in TOPICS:
        for p in range(40):
            reps = [(p + k) % 9 for k in range(3)]
            run.append((m.PartitionRecord(
                partition_id=p, topic_id=t, replicas=reps, isr=reps, leader=-1 if p == 7 else reps[0],
                leader_epoch=0, partition_epoch=0, directories=[dirs[b] for b in reps]), 1))
    values = [encode_metadata_record(r, v) for r, v in run]
    typed, col = two_managers([], TOPICS)
    typed.replay_partitions([decode_metadata_record(v, 0)[2] for v in values])
    cut = split  # the first topic is cut in two: partitions 0..split-1 in the first call
    first, second = values[:cut], values[cut:]
    columnar(col, first)
    rc_module._TOPIC_UUIDS.clear()
    columnar(col, second)
    assert dump(col) == dump(typed)
    rc_module._TOPIC_UUIDS.clear()
    monkeypatch.setattr(rc_module, "_MAX_TOPIC_UUIDS", 2)  # the cache is cleared while readers read
    for broker in range(9):
        got = col.partitions_with_broker_in_isr(broker)
        assert sorted((tp.topic_id.bytes, tp.partition_id) for tp in got) == sorted(
            (tp.topic_id.bytes, tp.partition_id) for tp in typed.partitions_with_broker_in_isr(broker))
        assert all(type(tp.topic_id) is Uuid for tp in got)
        entries = col.isr_entries_by_topic(broker)
        assert sorted((t.bytes, es) for t, es in entries) == sorted(
            (t.bytes, es) for t, es in typed.isr_entries_by_topic(broker))
        assert {type(t) for t, _es in entries} == {Uuid}
        assert col.partitions_in_directory(dirs[broker]) == typed.partitions_in_directory(dirs[broker])
    assert col.partitions_with_no_leader() == typed.partitions_with_no_leader()
    assert col.brokers_to_isrs.to_dict() == typed.brokers_to_isrs.to_dict()
    assert snapshot_bytes(col) == snapshot_bytes(typed)


# ---------------------------------------------------------------------------
# Whole batches through the QuorumController
# ---------------------------------------------------------------------------

class _Raft:
    """A Raft client that never leads; snapshots go to ``directory`` as Kafka .checkpoint files."""

    def __init__(self, directory: str = "") -> None:
        self.directory = directory
        self.listener: Any = None
        self.writers: list[Any] = []

    def register_listener(self, listener: Any) -> None:
        self.listener = listener

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(-1, 1)

    def resign(self, epoch: int) -> None:
        pass

    def create_snapshot(self, sid: SnapshotId) -> Any:
        raft = self

        class Writer:
            snapshot_id = sid

            def __init__(self) -> None:
                self.inner = RecordsSnapshotWriter.create(raft.directory, FileSnapshotId(sid.offset, sid.epoch))

            def append(self, records: Any) -> None:
                self.inner.append(records)

            def freeze(self) -> None:
                self.inner.freeze()

            def close(self) -> None:
                self.inner.close()
        w = Writer()
        self.writers.append(w)
        return w


def controller(directory: str = "") -> tuple[QuorumController, EventQueue, list[tuple[str, Any]]]:
    queue = EventQueue(clock_ns=lambda: 0)
    faults: list[tuple[str, Any]] = []

    def fatal(msg: str, exc: Any) -> BaseException:
        faults.append((msg, exc))
        return RuntimeError(msg)
    boot = BootstrapMetadata.from_records([ApiMessageAndVersion(m.FeatureLevelRecord(
        name="metadata.version", feature_level=MetadataVersion.latest_production().feature_level), 0)], "test")
    ctl = QuorumController(node_id=1, cluster_id="c", raft=_Raft(directory), queue=queue, clock_ms=lambda: 0,
                           bootstrap=boot, fatal_fault_handler=fatal)
    return ctl, queue, faults


def spy_columnar(monkeypatch: Any) -> list[int]:
    """Count the PartitionRecords the columnar path applies (so a test knows it ran)."""
    counted: list[int] = []
    real = rs.replay_partition_columns

    def spy(rc: Any, table: Any, lo: int, hi: int, typed: Any) -> None:
        counted.append(hi - lo)
        real(rc, table, lo, hi, typed)
    monkeypatch.setattr(rs, "replay_partition_columns", spy)
    return counted


def replay_both(values: list[bytes], offsets: list[int], monkeypatch: Any) -> tuple[Any, Any]:
    """The batch through the per-record path and through the columnar one (every window
    columnar): (outcome, snapshot values, state) of each.  The columnar one must have run
    when the batch has a PartitionRecord."""
    results = []
    counted = spy_columnar(monkeypatch)
    has_partitions = any(decode_metadata_record(v, 0)[0] == PR_KEY for v in values
                         if v[:2] == bytes((1, PR_KEY)))
    for minimum in (10**9, 1):
        monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", minimum)
        ctl, _q, _f = controller()
        ctl.replay(m.FeatureLevelRecord(name="metadata.version",
                                        feature_level=MetadataVersion.latest_production().feature_level), 0)
        try:
            rs.replay_framed_values(ctl, values, lambda i: offsets[i])
            failure = None
        except rs.RecordFailure as exc:
            # (a run's failure is a PartitionReplayError, a lone record's a ReplayError: one message)
            failure = (exc.index, isinstance(exc.cause, ReplayError), str(exc.cause), exc.decoding)
        results.append((failure, ctl.snapshot_values(2**63 - 1), dump(ctl.replication_control),
                        index_order(ctl.replication_control)))
        if minimum > 1:
            assert not counted
        elif has_partitions and failure is None:
            assert counted
    return results[0], results[1]


@st.composite
def batches(draw: Any) -> list[Any]:
    """TopicRecords (new, or a repeated name or id), PartitionRecords, and what may come
    between them: PartitionChangeRecords, ConfigRecords, RemoveTopicRecords."""
    names = ["a", "b.c", "b_c", "d"]
    out: list[Any] = []
    ids = TOPICS + [MISSING]
    for _ in range(draw(st.integers(1, 30))):
        kind = draw(st.sampled_from(["topic", "part", "part", "part", "part", "change", "config", "remove"]))
        if kind == "topic":
            out.append((m.TopicRecord(name=draw(st.sampled_from(names)), topic_id=draw(st.sampled_from(ids))), 0))
        elif kind == "part":
            out.append(draw(partition_record(ids)))
        elif kind == "change":
            out.append((m.PartitionChangeRecord(
                partition_id=draw(st.integers(0, 6)), topic_id=draw(st.sampled_from(ids)),
                isr=draw(st.none() | st.lists(st.integers(0, 6), max_size=3))), 0))
        elif kind == "config":
            out.append((m.ConfigRecord(resource_type=2, resource_name=draw(st.sampled_from(names)), name="retention.ms",
                                       value="1000"), 0))
        else:
            out.append((m.RemoveTopicRecord(topic_id=draw(st.sampled_from(ids))), 0))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches())
def test_batches_load_as_the_per_record_path_loads_them(batch, monkeypatch):
    """TopicRecords of a window go before its PartitionRecords only when that cannot change
    the outcome (new names and ids, no partition before its topic): state and first failure
    are the per-record path's."""
    values = [encode_metadata_record(rec, v) for rec, v in batch]
    typed, col = replay_both(values, list(range(100, 100 + len(values))), monkeypatch)
    assert col == typed


def test_a_windows_new_topics_are_put_as_their_records_replay(monkeypatch):
    """A window of TopicRecords (names that collide once '.' and '_' are unified, and one
    that does not) and their partitions: its TopicRecords go in bulk (one put_many per map),
    and leave the per-record path's state -- the collision index included."""
    hoisted: list[int] = []
    real = rs._Batch.new_topics

    def spy(self: Any, rows: list[int]) -> None:
        hoisted.append(len(rows))
        real(self, rows)
    monkeypatch.setattr(rs._Batch, "new_topics", spy)
    names = ["b.c", "b_c", "d"]
    recs: list[Any] = [(m.TopicRecord(name=n, topic_id=t), 0) for n, t in zip(names, TOPICS)]
    for t in TOPICS:
        recs += [(m.PartitionRecord(partition_id=p, topic_id=t, replicas=[p % 3, (p + 1) % 3], isr=[p % 3],
                                    leader=p % 3, leader_epoch=0, partition_epoch=0), 0) for p in range(4)]
    values = [encode_metadata_record(rec, v) for rec, v in recs]
    typed, col = replay_both(values, list(range(len(values))), monkeypatch)
    assert col == typed and typed[0] is None
    assert hoisted == [3]
    assert typed[2]["collisions"] == {"b_c": ["b.c", "b_c"]}


def test_a_value_that_does_not_decode_fails_the_batch_before_any_record_applies(monkeypatch):
    good = encode_metadata_record(m.TopicRecord(name="a", topic_id=TOPICS[0]), 0)
    part = encode_metadata_record(m.PartitionRecord(partition_id=0, topic_id=TOPICS[0], replicas=[1], isr=[1],
                                                    leader=1, leader_epoch=0, partition_epoch=0), 2)
    values = [good, part, part[:-3]]
    typed, col = replay_both(values, [0, 1, 2], monkeypatch)
    assert col == typed
    assert typed[0][0] == 2 and typed[0][3] is True and dump(controller()[0].replication_control) == typed[2]


@pytest.mark.usefixtures("fixtures_dir")
@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: "/".join(Path(p).parts[-3:]) if isinstance(p, Path) else p)
def test_kafka_fixtures_load_as_the_per_record_path_loads_them(path, monkeypatch):
    """Every record of a Kafka log segment or checkpoint as one batch (offsets its own)."""
    data = Path(path).read_bytes()
    headers = scan_batches(data, source=str(path)).headers
    headers = headers[(headers["attributes"] & CONTROL_MASK) == 0]
    cols = decode_record_columns(data, headers, source=str(path))
    values = [cols.value(i) for i in range(len(cols))]
    offsets = [int(o) for o in cols.offset]
    typed, col = replay_both(values, offsets, monkeypatch)
    assert col == typed
    assert typed[0] is None


# ---------------------------------------------------------------------------
# The controller's snapshot: written by the generator, loaded by the listener path
# ---------------------------------------------------------------------------

def build(ctl: QuorumController, topics: int, partitions: int) -> int:
    """Replay a state of ``topics`` x ``partitions`` (RF 3 over 9 brokers, a directory each)."""
    recs: list[Any] = [m.FeatureLevelRecord(name="metadata.version",
                                            feature_level=MetadataVersion.latest_production().feature_level)]
    dirs = [Uuid(bytes([9, b + 1]) + bytes(14)) for b in range(9)]
    for b in range(9):
        recs.append(m.RegisterBrokerRecord(broker_id=b, broker_epoch=b, incarnation_id=Uuid(bytes([b + 1]) * 16),
                                           rack=f"r{b % 3}", log_dirs=[dirs[b]], fenced=False))
    for t in range(topics):
        topic_id = Uuid(bytes([7, t % 256, t // 256]) + bytes(13))
        recs.append(m.TopicRecord(name=f"topic-{t:04d}", topic_id=topic_id))
        for p in range(partitions):
            reps = [(t + p + k) % 9 for k in range(3)]
            recs.append(m.PartitionRecord(partition_id=p, topic_id=topic_id, replicas=reps, isr=reps, leader=reps[0],
                                          leader_epoch=0, partition_epoch=0, directories=[dirs[b] for b in reps]))
    ctl.replay_many(recs, lambda i: i)
    ctl.offset_control.handle_commit_batch(len(recs) - 1, 1, 0)
    return len(recs)


def write_and_load(tmp_path: Path, topics: int, partitions: int) -> tuple[QuorumController, QuorumController,
                                                                          list[Any]]:
    ctl, queue, _faults = controller(str(tmp_path))
    build(ctl, topics, partitions)
    gen = ctl.snapshot_generator
    assert gen.maybe_begin(reason="test")
    while gen.in_progress:
        assert queue.run_ready() > 0
    sid = ctl.raft.writers[-1].snapshot_id
    loaded, lqueue, faults = controller(str(tmp_path))
    with KafkaSnapshotReader(str(tmp_path), sid) as reader:
        loaded._listener.handle_load_snapshot(reader)
        lqueue.run_ready()
    return ctl, loaded, faults


def test_a_generated_snapshot_loads_back_to_the_same_records(tmp_path, monkeypatch):
    """300 topics x 40 partitions: written by the generator in slices of at most 500 records
    (one event each), loaded through the Raft listener path with columnar windows (the batch
    is large enough: 12,000 PartitionRecords), the loaded controller's records are the writer's."""
    counted = spy_columnar(monkeypatch)
    ctl, loaded, faults = write_and_load(tmp_path, 300, 40)
    assert faults == [] and sum(counted) == 300 * 40
    _sid, records, slices = ctl.snapshot_generator.history[-1]
    assert records == 9 + 1 + 300 * 41 and slices >= records // 500
    assert loaded.snapshot_values(loaded.last_stable_offset) == ctl.snapshot_values(ctl.last_stable_offset)
    assert dump(loaded.replication_control) == dump(ctl.replication_control)
    assert rs.MIN_COLUMNAR_RECORDS <= 12_000


def load_batches(ctl: QuorumController, batches: list[list[bytes]], *, deferred: bool) -> tuple[int, int] | None:
    """The snapshot load's loop (QuorumController._handle_load_snapshot): every batch through
    ``replay_framed_values`` -- inside one ``deferred_indexes`` block when ``deferred`` -- until
    a record fails: then (batch, record) of the failure, caught inside the block as the load
    catches it (so what the earlier records deferred is put)."""
    with rs.deferred_indexes(ctl) if deferred else _nothing():
        for k, values in enumerate(batches):
            try:
                rs.replay_framed_values(ctl, values, lambda i: 99)
            except rs.RecordFailure as failure:
                return k, failure.index
    return None


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def fresh_controller() -> QuorumController:
    ctl, _q, _f = controller()
    ctl.replay(m.FeatureLevelRecord(name="metadata.version",
                                    feature_level=MetadataVersion.latest_production().feature_level), 0)
    return ctl


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batch=batches(), data=st.data())
def test_deferred_indexes_leave_the_per_record_state(batch, data, monkeypatch):
    """The records of ``batches()`` cut into several batches at random points and loaded with
    the indexes deferred to the end of the load (every window columnar): the per-record
    path's state and first failure -- whether a topic spans batches, comes back after another
    topic (the pending entries are put first), or a record that reads the indexes (a
    PartitionChangeRecord, a RemoveTopicRecord, a PartitionRecord replayed the typed way)
    comes after deferred entries."""
    values = [encode_metadata_record(rec, v) for rec, v in batch]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(values)), max_size=4)))
    pieces = [values[a:b] for a, b in zip([0, *cuts], [*cuts, len(values)])]
    pieces = [p for p in pieces if p]
    results = []
    for minimum, deferred in ((10**9, False), (1, True)):
        monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", minimum)
        ctl = fresh_controller()
        failure = load_batches(ctl, pieces, deferred=deferred)
        assert not rs._PENDING
        results.append((failure, ctl.snapshot_values(2**63 - 1), dump(ctl.replication_control),
                        index_order(ctl.replication_control)))
    assert results[1] == results[0]


def index_order(rc: ReplicationControlManager) -> list[Any]:
    """The reverse indexes as lists, in their iteration order (``dump`` compares dicts)."""
    def listed(members: Any) -> list[Any]:
        return [(k, list(tm.items())) for k, tm in members.items()]
    return [listed(rc.brokers_to_isrs._members), listed(rc.brokers_to_elrs._members),
            [(d, list(dp._topics.items())) for d, dp in rc.directories_to_partitions.items()]]


def test_deferred_indexes_flush_before_what_reads_them(monkeypatch):
    """Topic 0 in two batches around topic 1 (it comes back: the pending entries are put
    before its second part), then a PartitionChangeRecord moving topic 0's partition 3 out of
    broker 1's ISR (it reads the ISR index: put before it), then a RemoveTopicRecord of topic
    1: the per-record path's state, and the registry's snapshot at the load's end holds the
    indexes (a revert to it changes nothing)."""
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 4)
    dirs = [Uuid(bytes([5, b + 1]) + bytes(14)) for b in range(4)]

    def parts(t: int, pids: range) -> list[bytes]:
        return [encode_metadata_record(m.PartitionRecord(
            partition_id=p, topic_id=TOPICS[t], replicas=[p % 4, (p + 1) % 4], isr=[p % 4, (p + 1) % 4],
            leader=p % 4, leader_epoch=0, partition_epoch=0, directories=[dirs[p % 4], dirs[(p + 1) % 4]]), 1)
            for p in pids]
    topic = [encode_metadata_record(m.TopicRecord(name=f"t{t}", topic_id=TOPICS[t]), 0) for t in range(2)]
    change = encode_metadata_record(m.PartitionChangeRecord(partition_id=3, topic_id=TOPICS[0], isr=[0]), 0)
    remove = encode_metadata_record(m.RemoveTopicRecord(topic_id=TOPICS[1]), 0)
    pieces = [topic + parts(0, range(6)) + parts(1, range(8)), parts(0, range(6, 12)),
              [change] + parts(0, range(12, 16)), [remove]]
    flushes = []
    real = rs._PendingIndexes.flush

    def counted(self: Any, rc: Any) -> None:
        flushes.append(len(self.topic_keys))
        real(self, rc)
    monkeypatch.setattr(rs._PendingIndexes, "flush", counted)
    typed, deferred = fresh_controller(), fresh_controller()
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 10**9)
    assert load_batches(typed, pieces, deferred=False) is None
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 4)
    registry = deferred.offset_control.registry
    assert load_batches(deferred, pieces, deferred=True) is None
    # topic 0 came back after topic 1 (2 topics pending), the change read them (1), the removal (1),
    # the end of the block (nothing left)
    assert flushes == [2, 1, 1, 0]
    assert dump(deferred.replication_control) == dump(typed.replication_control)
    assert deferred.snapshot_values(2**63 - 1) == typed.snapshot_values(2**63 - 1)
    assert deferred.replication_control.partitions_with_broker_in_isr(1) == \
        typed.replication_control.partitions_with_broker_in_isr(1)
    registry.get_or_create_snapshot(500)
    registry.revert_to_snapshot(500)
    assert dump(deferred.replication_control) == dump(typed.replication_control)


def test_a_generated_snapshot_loads_with_deferred_indexes(tmp_path, monkeypatch):
    """300 topics x 40 partitions written by the generator, loaded as the controller's load
    event does (begin, the batches, end) with the indexes deferred over all batches (small
    batches: topics cut by batch boundaries): the writer's records and state, the indexes in
    the registry's snapshot at the load's end, and the collector back on after the block."""
    counted = spy_columnar(monkeypatch)
    monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", 64)
    ctl, queue, _faults = controller(str(tmp_path))
    build(ctl, 300, 40)
    gen = ctl.snapshot_generator
    assert gen.maybe_begin(reason="test")
    while gen.in_progress:
        assert queue.run_ready() > 0
    sid = ctl.raft.writers[-1].snapshot_id
    loaded, _lq, faults = controller(str(tmp_path))
    with KafkaSnapshotReader(str(tmp_path), sid) as reader:
        values = [v for b in reader if not b.is_control for v in b.records]
    batches_ = [values[i:i + 997] for i in range(0, len(values), 997)]  # cuts inside topics
    oc = loaded.offset_control
    oc.begin_load_snapshot(sid.offset, sid.epoch)
    assert gc.isenabled()
    assert load_batches(loaded, batches_, deferred=True) is None
    assert gc.isenabled()
    oc.end_load_snapshot(0)
    assert faults == [] and sum(counted) == 300 * 40
    assert loaded.snapshot_values(sid.offset - 1) == ctl.snapshot_values(ctl.last_stable_offset)
    assert dump(loaded.replication_control) == dump(ctl.replication_control)
    oc.registry.revert_to_snapshot(sid.offset - 1)  # the indexes were put before the snapshot
    assert dump(loaded.replication_control) == dump(ctl.replication_control)


def test_a_bad_record_in_a_snapshot_is_named_as_before(tmp_path, monkeypatch):
    """A snapshot whose PartitionRecord names no topic: the load fails naming the record's
    place in its batch, the same message whichever path applies the batch."""
    ctl, queue, _f = controller(str(tmp_path))
    build(ctl, 30, 40)
    lso = ctl.last_stable_offset
    values = ctl.snapshot_values(lso)
    bad_at = 10 + 41 * 20 + 5  # a partition of the 21st topic
    rec = decode_metadata_record(values[bad_at], 0)[2]
    rec.topic_id = MISSING
    values[bad_at] = encode_metadata_record(rec, 2)
    messages = []
    for minimum in (10**9, 64):
        monkeypatch.setattr(rs, "MIN_COLUMNAR_RECORDS", minimum)
        directory = tmp_path / f"min{minimum}"
        os.mkdir(directory)
        with RecordsSnapshotWriter.create(directory, FileSnapshotId(lso + 1, 1)) as w:
            w.append(values)
            w.freeze()
        loaded, lqueue, faults = controller(str(directory))
        with KafkaSnapshotReader(str(directory), SnapshotId(lso + 1, 1)) as reader:
            loaded._listener.handle_load_snapshot(reader)
            lqueue.run_ready()
        (msg, exc), = faults
        messages.append((msg, str(exc)))
    assert messages[0] == messages[1]
    assert messages[0][0] == (f"Unable to apply record from snapshot {lso + 1:020d}-{1:010d} on standby controller, "
                              f"which was {bad_at + 1} of {len(values)} record(s) in the batch with baseOffset 1.")
    assert messages[0][1] == (f"Tried to create partition {MISSING}:{rec.partition_id}, "
                              "but no topic with that ID was found.")


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.lists(st.integers(0, 3), max_size=4), st.lists(st.integers(0, 3), max_size=4)),
                     min_size=1, max_size=12), equal_all=st.booleans())
def test_isr_tuples_share_the_replicas_tuple_exactly_where_equal(rows, equal_all):
    """The load's ISR tuples equal the ISR lists, and are the replicas' tuple objects exactly
    where a row's ISR equals its replicas (a registration is immutable: sharing is safe)."""
    if equal_all:
        rows = [(r, list(r)) for r, _i in rows]
    recs = [m.PartitionRecord(partition_id=p, topic_id=TOPICS[0], replicas=r, isr=i, leader=-1)
            for p, (r, i) in enumerate(rows)]
    values = [encode_metadata_record(rec, 0) for rec in recs]
    cols = rs._PartitionColumns(table_of(values), 0, len(values))
    replicas = cols.replicas.tuples()
    isr = cols._isr_tuples(replicas)
    assert isr == [tuple(i) for _r, i in rows]
    for k, (r, i) in enumerate(rows):
        if r == i and r:
            assert isr[k] is replicas[k]
        elif r != i:
            assert isr[k] is not replicas[k]


@settings(max_examples=60, deadline=None)
@given(pool=st.lists(st.lists(st.integers(0, 11), min_size=1, max_size=3), min_size=1, max_size=6),
       picks=st.lists(st.tuples(st.integers(0, 5), st.sampled_from(["dirs", "v0", "reserved", "second"])),
                      min_size=64, max_size=160),
       width=st.sampled_from([None, 1, 3]))
def test_registrations_share_equal_replica_lists_and_keep_every_value(pool, picks, width):
    """Batches of 64+ rows drawn from a few replica lists (the shared-tuple path), or of one
    width (``width``), with directories per broker, v0 records without any, reserved ones, or
    a broker with a second directory (then a directory is not a function of the broker): every
    registration equals ``from_record``'s, and rows with equal replica lists share one tuple
    exactly when the batch takes the shared path."""
    if width is not None:
        pool = [(r * width)[:width] for r in pool]
    dirs = [Uuid(bytes([0, b + 1]) + bytes(14)) for b in range(12)]
    other = Uuid(bytes([1, 1]) + bytes(14))
    recs, versions = [], []
    for p, (k, mode) in enumerate(picks):
        reps = pool[k % len(pool)]
        if mode == "dirs":
            d = [dirs[b] for b in reps]
        elif mode == "reserved":
            d = [DirectoryId.UNASSIGNED] + [dirs[b] for b in reps[1:]]
        elif mode == "second":
            d = [other] + [dirs[b] for b in reps[1:]]
        else:
            d = []
        recs.append(m.PartitionRecord(partition_id=p, topic_id=TOPICS[0], replicas=reps, isr=reps[:1],
                                      leader=reps[0], directories=d))
        versions.append(0 if mode == "v0" else 1)
    values = [encode_metadata_record(rec, v) for rec, v in zip(recs, versions)]
    cols = rs._PartitionColumns(table_of(values), 0, len(values))
    regs = cols.registrations()
    want = [PartitionRegistration.from_record(decode_metadata_record(v, 0)[2]) for v in values]
    assert regs == want
    _replicas, groups_of, _groups = rs._PartitionColumns(table_of(values), 0, len(values))._replica_tuples()
    one_width = len({len(r) for r, _m in ((pool[k % len(pool)], mode) for k, mode in picks)}) == 1
    assert (groups_of is not None) == one_width
    if groups_of is not None:
        first: dict[tuple[int, ...], tuple[int, ...]] = {}
        for reg in regs:
            assert first.setdefault(reg.replicas, reg.replicas) is reg.replicas


@settings(max_examples=200, deadline=None)
@given(groups=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5),
                                 st.lists(st.integers(0, 40) | st.integers(0, 40).map(lambda p: p | LEADER_FLAG),
                                          min_size=1, max_size=3)), min_size=1, max_size=60),
       singles=st.booleans())
def test_put_index_puts_the_groups_and_shares_equal_one_entry_groups(groups, singles):
    """The index puts (``_put_index``: the timeline kernel's ``put_grouped``) leave each
    (map, topic) with its entries in entry order, whether the groups are one entry each
    (equal ones then share one tuple, across maps too) or longer."""
    if singles:
        groups = [(k, t, g[:1]) for k, t, g in groups]
    registry = SnapshotRegistry()
    maps = [TimelineHashMap(registry) for _ in range(4)]
    keys = [f"t{t}" for t in range(6)]
    dense = np.array([k for k, _t, g in groups for _e in g], np.int64)
    topic_of = np.array([t for _k, t, g in groups for _e in g], np.int64)
    entries = np.array([e for _k, _t, g in groups for e in g], np.int64)
    rs._put_index(maps, dense, topic_of, entries, keys, np.zeros(6, bool), False)
    want: list[dict[str, list[int]]] = [{} for _ in maps]
    for k, t, g in groups:
        want[k].setdefault(keys[t], []).extend(g)
    assert [tm.to_dict() for tm in maps] == [{key: tuple(v) for key, v in w.items()} for w in want]
    by_value: dict[tuple[int, ...], tuple[int, ...]] = {}
    for tm in maps:
        for value in tm.values():
            if len(value) == 1:
                assert by_value.setdefault(value, value) is value
