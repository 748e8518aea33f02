"""PartitionBlock: the columnar table of partitions under TopicsImage.

What is checked: a block built from the generated columnar decoder's PartitionRecord columns
(whole, and sliced so that its offsets do not start at 0) reads back every row as exactly the
registration ``PartitionRegistration.from_record`` makes of the typed record (every version,
directories and ELR included; Kafka's fixtures too); ``from_registrations`` round trips;
``check`` names the bad row and column for each kind of bad input; the constructor refuses
wrong dtypes and shapes; the arrays are not copied and are made read-only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import fixture_params
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.metadata.controller.replication_control import (
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_node.metadata.controller.replication_snapshot import frame_values
from kraft_node.metadata.image.partition_block import LIST_COLUMNS, SCALAR_COLUMNS, PartitionBlock
from kraft_storage.messages import metadata as m
from kraft_storage.messages.columns import decode_bodies
from kraft_storage.messages.columns import decode_record_columns as decode_metadata_columns
from kraft_storage.messages.framing import decode_metadata_record, encode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.record.constants import CONTROL_MASK

TOPIC = Uuid.from_string("ThIaNwRnSM2Nt9Mx1v0RvA")
DIR1 = Uuid.from_string("c7QfSi6xSIGQVh3Qd5RJxA")
DIR2 = Uuid.from_string("rWaCHejCRRiptDMvW5Xw0g")


def partition_record(pid: int, **fields: object) -> m.PartitionRecord:
    base: dict[str, object] = dict(partition_id=pid, topic_id=TOPIC, replicas=[1, 2, 3], isr=[1, 2, 3], leader=1,
                                   leader_epoch=pid + 1, partition_epoch=2 * pid)
    base.update(fields)
    return m.PartitionRecord(**base)


#: (record, version): every shape a PartitionRecord has (v0 without directories, v1 real / migrating /
#: mixed / reserved directories, v2 with ELR, a recovering leader, reassignment lists, no replicas)
RECORDS = [
    (partition_record(0), 0),
    (partition_record(1, directories=[DIR1, DIR2, DIR1]), 1),
    (partition_record(2, directories=[DirectoryId.MIGRATING] * 3), 1),
    (partition_record(3, directories=[DIR1, DirectoryId.MIGRATING, DirectoryId.LOST]), 1),
    (partition_record(4, replicas=[4, 5, 6, 7], isr=[4], removing_replicas=[7], adding_replicas=[6],
                      directories=[DIR1, DIR2, DirectoryId.UNASSIGNED, DIR2], leader_recovery_state=1), 2),
    (partition_record(5, isr=[], leader=-1, eligible_leader_replicas=[2, 3], last_known_elr=[1],
                      directories=[DIR2, DIR1, DIR2]), 2),
    (partition_record(6, replicas=[], isr=[], leader=-1), 2),
    (partition_record(7, eligible_leader_replicas=[], last_known_elr=[]), 2),
]


def decode(records: list[tuple[m.PartitionRecord, int]]):
    """The PartitionRecord table of the columnar decode of ``records``."""
    f = frame_values([encode_metadata_record(r, v) for r, v in records])
    return decode_bodies(f.data, f.body_pos, f.end, f.api_key, f.version)[m.PartitionRecord.API_KEY]


def expected(records: list[tuple[m.PartitionRecord, int]]) -> list[PartitionRegistration]:
    """What the typed path makes: decode each record's bytes, then from_record."""
    return [PartitionRegistration.from_record(decode_metadata_record(encode_metadata_record(r, v))[2])
            for r, v in records]


def test_from_columns_reads_every_row_as_from_record() -> None:
    table = decode(RECORDS)
    block = PartitionBlock.from_columns(table)
    block.check([(0, len(block))])
    assert len(block) == len(RECORDS)
    assert block.registrations() == expected(RECORDS)
    assert [block.registration(i) for i in range(len(block))] == expected(RECORDS)
    assert [p for p, _ in block.iter_rows(chunk=3)] == list(range(len(RECORDS)))
    assert [r for _, r in block.iter_rows(chunk=3)] == expected(RECORDS)


def test_rows_without_directories_read_as_migrating() -> None:
    block = PartitionBlock.from_columns(decode(RECORDS[:1]))
    assert len(block.directories) == 0
    assert block.registration(0).directories == (DirectoryId.MIGRATING,) * 3


@pytest.mark.parametrize("lo,hi", [(0, 0), (0, 1), (2, 5), (3, 8), (7, 8), (8, 8)])
def test_a_slice_keeps_the_decodes_offsets(lo: int, hi: int) -> None:
    """Rows lo..hi of a bigger decode: the offsets are the decode's own (not rebased), the value
    arrays are the decode's (not copied), and the rows still read back exactly."""
    table = decode(RECORDS)
    block = PartitionBlock.from_columns(table, lo, hi)
    block.check([(0, len(block))])
    assert len(block) == hi - lo
    replicas = table["replicas"]
    assert block.replicas is replicas.child.values
    assert block.replicas_offsets[0] == replicas.offsets[lo]
    if lo > 0:
        assert block.replicas_offsets[0] > 0
    assert block.registrations() == expected(RECORDS[lo:hi])
    # nbytes counts each buffer once, the shared value arrays whole
    whole = PartitionBlock.from_columns(table)
    assert block.nbytes <= whole.nbytes


def test_from_columns_refuses_rows_outside_the_table() -> None:
    table = decode(RECORDS)
    with pytest.raises(ValueError, match="rows 3..99 outside a table of 8"):
        PartitionBlock.from_columns(table, 3, 99)


def test_from_registrations_round_trip_and_migrating_rows_stored_empty() -> None:
    regs = expected(RECORDS)
    pids = [r.partition_id for r, _ in RECORDS]
    block = PartitionBlock.from_registrations(pids, regs)
    block.check([(0, len(block))])
    assert block.registrations() == regs
    assert block.partition_id.tolist() == pids
    dirs = np.diff(block.directories_offsets).tolist()
    # rows whose directories are all MIGRATING (v0, or v1 stating MIGRATING) keep none; others one per replica
    assert dirs == [0, 3, 0, 3, 4, 3, 0, 0]
    assert PartitionBlock.from_registrations([], []).registrations() == []


def test_from_registrations_needs_one_id_per_registration() -> None:
    with pytest.raises(ValueError, match="2 partition ids for 1 registrations"):
        PartitionBlock.from_registrations([0, 1], expected(RECORDS[:1]))


def test_row_of_dense_and_sparse() -> None:
    regs = expected(RECORDS[:4])
    dense = PartitionBlock.from_registrations([0, 1, 2, 3], regs)
    assert [dense.row_of(p) for p in (0, 3, 4, -1)] == [0, 3, -1, -1]
    sparse = PartitionBlock.from_registrations([0, 5, 9, 2, 7], expected(RECORDS[:5]))  # two topics: 0..3, 3..5
    assert [sparse.row_of(p, 0, 3) for p in (0, 5, 9, 1, 2, 10)] == [0, 1, 2, -1, -1, -1]
    assert [sparse.row_of(p, 3, 5) for p in (2, 7, 0, 5, 9)] == [3, 4, -1, -1, -1]


def test_block_is_immutable_and_not_copied() -> None:
    table = decode(RECORDS)
    block = PartitionBlock.from_columns(table)
    assert np.shares_memory(block.leader, table["leader"].values)
    with pytest.raises(ValueError):
        block.leader[0] = 7
    with pytest.raises(AttributeError, match="immutable"):
        block.leader = np.zeros(8, np.int32)  # type: ignore[misc]


def good_columns(n: int = 3) -> dict[str, np.ndarray]:
    block = PartitionBlock.from_registrations(list(range(n)), expected(RECORDS[1:1 + n]))
    return {name: np.array(getattr(block, name)) for name in PartitionBlock.__slots__[:-1]}


@pytest.mark.parametrize("column,value,message", [
    ("leader", np.zeros(3, np.int64), "column leader: expected dtype int32, got int64"),
    ("leader", np.zeros(4, np.int32), r"column leader: expected shape \(3,\), got \(4,\)"),
    ("partition_id", [0, 1, 2], "column partition_id: expected a 1-d numpy array, got list"),
    ("leader_recovery_state", np.zeros(3, np.int32), "column leader_recovery_state: expected dtype int8"),
    ("isr_offsets", np.zeros(3, np.int32), r"column isr_offsets: expected shape \(4,\)"),
    ("isr", np.zeros((2, 2), np.int32), "column isr: expected a 1-d array"),
    ("directories", np.zeros((2, 8), np.uint8), r"column directories: expected uint8\[k, 16\]"),
    ("directories", np.zeros((2, 16), np.int8), "column directories: expected dtype uint8"),
])
def test_constructor_names_the_bad_column(column: str, value: object, message: str) -> None:
    cols = good_columns()
    cols[column] = value  # type: ignore[assignment]
    with pytest.raises(ValueError, match=message):
        PartitionBlock(**cols)


def test_check_names_the_bad_row() -> None:
    def bad(change, message, ranges=None):
        cols = good_columns()
        change(cols)
        block = PartitionBlock(**cols)
        with pytest.raises(ValueError, match=message):
            block.check(ranges)

    def neg_pid(c): c["partition_id"][1] = -4
    bad(neg_pid, "row 1: partition_id -4 is negative")

    def lrs(c): c["leader_recovery_state"][2] = 5
    bad(lrs, "row 2: leader_recovery_state 5 is not a valid leader recovery state")

    def backwards(c): c["isr_offsets"][1:] = [5, 2, 6]
    bad(backwards, r"row 1: isr_offsets go backwards \(5 -> 2\)")

    def past(c): c["replicas_offsets"][-1] = 99
    bad(past, "column replicas: offsets end at 99, past its")

    def negative_start(c): c["adding_offsets"][0] = -1
    bad(negative_start, "column adding_offsets: first offset -1 is negative")

    def dirs(c):
        c["replicas_offsets"][1:] += 1
        c["replicas"] = np.append(c["replicas"], np.int32(9))
    bad(dirs, r"row 0: 3 directories for 4 replicas \(The lengths for replicas and directories do not match.\)")

    cols = good_columns()
    cols["partition_id"][:] = [0, 2, 2]
    block = PartitionBlock(**cols)
    block.check()  # no ranges: the ids are not checked
    with pytest.raises(ValueError, match="row 2: partition_id 2 does not follow 2 in rows 0..3"):
        block.check([(0, 3)])
    block.check([(0, 2), (2, 3)])  # two topics: each increasing
    with pytest.raises(ValueError, match="range 2..7 outside 0..3"):
        block.check([(2, 7)])


def test_registrations_at_any_rows() -> None:
    block = PartitionBlock.from_columns(decode(RECORDS), 1, 8)
    one_by_one = [block.registration(i) for i in range(len(block))]
    rows = [6, 0, 3, 3, 5, 1]
    assert block.registrations_at(np.array(rows)) == [one_by_one[r] for r in rows]
    assert block.registrations_at(np.zeros(0, np.int64)) == []
    assert block.registrations(2, 5) == one_by_one[2:5]
    with pytest.raises(IndexError, match="rows out of range"):
        block.registrations_at(np.array([0, 7]))
    with pytest.raises(ValueError, match="rows must be 1-d"):
        block.registrations_at(np.zeros((2, 2), np.int64))


def test_an_unchecked_bad_recovery_state_is_not_read_as_another() -> None:
    cols = good_columns()
    cols["leader_recovery_state"][1] = -1
    block = PartitionBlock(**cols)
    with pytest.raises(ValueError, match="leader_recovery_state other than 0 or 1"):
        block.registrations()


def test_row_index_out_of_range() -> None:
    block = PartitionBlock.from_registrations([0], expected(RECORDS[:1]))
    with pytest.raises(IndexError, match="row 1 out of range"):
        block.registration(1)
    with pytest.raises(IndexError, match="rows 0..2 out of range"):
        block.registrations(0, 2)


def test_layout_constants_match_the_slots() -> None:
    names = set(PartitionBlock.__slots__[:-1])
    assert names == set(SCALAR_COLUMNS) | set(LIST_COLUMNS) | {f"{n}_offsets" for n in LIST_COLUMNS}


replica_ids = st.lists(st.integers(0, 50), max_size=6, unique=True)


@st.composite
def random_records(draw):
    out = []
    for pid in range(draw(st.integers(0, 12))):
        replicas = draw(replica_ids)
        version = draw(st.integers(0, 2))
        fields: dict[str, object] = dict(
            replicas=replicas, isr=draw(st.lists(st.sampled_from(replicas), unique=True)) if replicas else [],
            removing_replicas=draw(replica_ids), adding_replicas=draw(replica_ids),
            leader=draw(st.integers(-1, 50)), leader_recovery_state=draw(st.integers(0, 1)),
            leader_epoch=draw(st.integers(-1, 2**31 - 1)), partition_epoch=draw(st.integers(-1, 2**31 - 1)))
        if version >= 1:
            fields["directories"] = [draw(st.sampled_from([DIR1, DIR2, DirectoryId.MIGRATING, DirectoryId.LOST]))
                                     for _ in replicas]
        if version >= 2:
            fields["eligible_leader_replicas"] = draw(replica_ids)
            fields["last_known_elr"] = draw(replica_ids)
        out.append((partition_record(pid, **fields), version))
    return out


@settings(max_examples=150, deadline=None)
@given(random_records(), st.data())
def test_random_records_read_back_exactly(records, data) -> None:
    table = decode(records) if records else None
    n = len(records)
    lo = data.draw(st.integers(0, n))
    hi = data.draw(st.integers(lo, n))
    if table is None:
        return
    block = PartitionBlock.from_columns(table, lo, hi)
    block.check([(0, len(block))])
    regs = expected(records[lo:hi])
    assert block.registrations() == regs
    assert [block.registration(i) for i in range(len(block))] == regs
    if regs:
        rows = data.draw(st.lists(st.integers(0, len(regs) - 1), max_size=10))
        assert block.registrations_at(np.array(rows, np.int64)) == [regs[r] for r in rows]
    again = PartitionBlock.from_registrations(block.partition_id.tolist(), regs)
    assert again.registrations() == regs


@pytest.mark.parametrize("path", fixture_params("*.log", "*.checkpoint"))
def test_kafka_fixture_partition_records(path) -> None:
    """Every PartitionRecord of a Kafka log segment or checkpoint, decoded as columns into one block,
    reads back as the typed decode's from_record."""
    data = Path(path).read_bytes()
    headers = scan_batches(data, source=str(path)).headers
    headers = headers[(headers["attributes"] & CONTROL_MASK) == 0]
    cols = decode_record_columns(data, headers, source=str(path))
    meta = decode_metadata_columns(cols)
    key = m.PartitionRecord.API_KEY
    if key not in meta:
        # a file with no partitions (a log segment of only registrations, say): nothing to compare
        assert all(decode_metadata_record(cols.value(i))[0] != key for i in range(len(cols)) if cols.value(i))
        return
    table = meta[key]
    block = PartitionBlock.from_columns(table)
    block.check()
    typed = [PartitionRegistration.from_record(decode_metadata_record(cols.value(int(r)))[2]) for r in table.rows]
    assert block.registrations() == typed
    assert len(typed) > 0
    assert all(r.leader_recovery_state in (LeaderRecoveryState.RECOVERED, LeaderRecoveryState.RECOVERING)
               for r in typed)
