"""Snapshots: file naming/lifecycle, raw writer/reader, records writer/reader, Kafka fixtures.

The codec kernels underneath (scan/encode of batches) run in whichever mode
the process is in; ``test_fixture_reproduction_in_pure_mode`` re-runs the
byte-identity check in a subprocess with the pure-Python twins, so both
implementations are exercised by this file.
"""
from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, fixture_files, fixture_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_storage.errors import CorruptRecordError, KraftStorageError
from kraft_storage.messages.control import VotersRecord
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.record import HEADER_SIZE, build_batch
from kraft_storage.snapshot import (
    BOOTSTRAP_SNAPSHOT_ID,
    MAX_BATCH_SIZE_BYTES,
    RawSnapshotReader,
    RawSnapshotWriter,
    RecordsSnapshotReader,
    RecordsSnapshotWriter,
    SnapshotBatchTooLarge,
    SnapshotError,
    SnapshotId,
    SnapshotPositionOutOfRange,
    clean_snapshot_dir,
    delete_snapshot,
    latest_snapshot,
    list_snapshots,
    mark_for_delete,
    open_snapshot_dir,
    parse_snapshot_path,
    read_bootstrap_checkpoint,
    scan_snapshot_dir,
    snapshot_filename,
    snapshot_path,
    write_bootstrap_checkpoint,
)
from kraft_storage.snapshot.records import record_sizes

CHECKPOINTS = fixture_files("*.checkpoint")
CHECKPOINT_PARAMS = fixture_params("*.checkpoint")


def _checkpoint_id(p) -> str:
    return f"{p.parent.parent.name if p.parent.name.startswith('__') else p.parent.name}/{p.name}"
HSETTINGS = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def _sid_of(path: Path) -> SnapshotId:
    return BOOTSTRAP_SNAPSHOT_ID if path.name == "bootstrap.checkpoint" else parse_snapshot_path(path).snapshot_id


def _clock(times):
    it = iter(times)
    return lambda: next(it)


def _batch_times(r: RecordsSnapshotReader) -> list[int]:
    """Clock readings Kafka made: header batch, each data batch, footer batch."""
    return ([int(r.control_batches[0]["base_timestamp"])] + [int(t) for t in r.batches["base_timestamp"]]
            + [int(r.control_batches[1]["base_timestamp"])])


# ---------------------------------------------------------------------------
# names, listing, deletion, cleanup
# ---------------------------------------------------------------------------

def test_filename_layout():
    assert snapshot_filename(SnapshotId(46533, 4)) == "00000000000000046533-0000000004.checkpoint"
    assert snapshot_filename(BOOTSTRAP_SNAPSHOT_ID) == "00000000000000000000-0000000000.checkpoint"
    assert snapshot_filename(SnapshotId(2**63 - 1, 2**31 - 1)) == "9223372036854775807-2147483647.checkpoint".rjust(
        len("9223372036854775807-2147483647.checkpoint") + 1, "0")
    with pytest.raises(ValueError):
        snapshot_filename(SnapshotId(-1, 0))
    with pytest.raises(ValueError):
        snapshot_filename(SnapshotId(0, 2**31))


@given(st.integers(0, 2**63 - 1), st.integers(0, 2**31 - 1))
def test_filename_roundtrip(offset, epoch):
    sid = SnapshotId(offset, epoch)
    p = parse_snapshot_path(Path("/x") / snapshot_filename(sid))
    assert p.snapshot_id == sid and not p.partial and not p.deleted
    d = parse_snapshot_path(Path(snapshot_filename(sid, ".checkpoint.deleted")))
    assert d.snapshot_id == sid and d.deleted and not d.partial
    t = parse_snapshot_path(Path(snapshot_filename(sid, "-12345abc.checkpoint.part")))
    assert t.snapshot_id == sid and t.partial and not t.deleted


@pytest.mark.parametrize("name", [
    "00000000000000046533-0000000004.log", "0000000000000004653-0000000004.checkpoint",
    "00000000000000046533_0000000004.checkpoint", "00000000000000046533-000000004.checkpoint",
    "00000000000000046533-0000000004.checkpointx", "bootstrap.checkpoint", "leader-epoch-checkpoint",
    "99999999999999999999-0000000004.checkpoint", "00000000000000046533-9999999999.checkpoint",
    "00000000000000046533-0000000004-x.checkpoint",
])
def test_parse_rejects(name):
    assert parse_snapshot_path(Path(name)) is None


def test_ordering_by_offset_then_epoch():
    ids = [SnapshotId(10, 3), SnapshotId(9, 7), SnapshotId(10, 2), BOOTSTRAP_SNAPSHOT_ID]
    assert sorted(ids) == [SnapshotId(0, 0), SnapshotId(9, 7), SnapshotId(10, 2), SnapshotId(10, 3)]


def _touch(d: Path, name: str, data: bytes = b"x") -> Path:
    p = d / name
    p.write_bytes(data)
    return p


def test_list_latest_delete_clean(tmp_path):
    assert list_snapshots(tmp_path / "missing") == [] and latest_snapshot(tmp_path) is None
    for sid in [SnapshotId(100, 2), SnapshotId(50, 1), SnapshotId(100, 1)]:
        _touch(tmp_path, snapshot_filename(sid))
    part = _touch(tmp_path, snapshot_filename(SnapshotId(200, 3), "-777.checkpoint.part"))
    gone = _touch(tmp_path, snapshot_filename(SnapshotId(150, 3), ".checkpoint.deleted"))
    _touch(tmp_path, "00000000000000000000.log")
    _touch(tmp_path, "quorum-state")
    assert list_snapshots(tmp_path) == [SnapshotId(50, 1), SnapshotId(100, 1), SnapshotId(100, 2)]
    assert latest_snapshot(tmp_path) == SnapshotId(100, 2)
    assert len(scan_snapshot_dir(tmp_path)) == 5

    dpath = mark_for_delete(tmp_path, SnapshotId(100, 2))
    assert dpath.name.endswith(".checkpoint.deleted") and dpath.exists()
    assert latest_snapshot(tmp_path) == SnapshotId(100, 1)
    assert delete_snapshot(tmp_path, SnapshotId(100, 2))  # removes the .deleted leftover
    assert not dpath.exists()
    assert delete_snapshot(tmp_path, SnapshotId(50, 1))
    assert not snapshot_path(tmp_path, SnapshotId(50, 1)).exists()
    assert delete_snapshot(tmp_path, SnapshotId(50, 1)) is False

    removed = clean_snapshot_dir(tmp_path)
    assert sorted(removed) == sorted([part, gone])
    assert not part.exists() and not gone.exists()
    assert (tmp_path / "quorum-state").exists() and (tmp_path / "00000000000000000000.log").exists()
    assert list_snapshots(tmp_path) == [SnapshotId(100, 1)]


# ---------------------------------------------------------------------------
# raw writer / reader
# ---------------------------------------------------------------------------

def test_crash_mid_write_then_open(tmp_path):
    """A writer that never finished (process died) leaves a .part that the next open removes."""
    w = RawSnapshotWriter(tmp_path, SnapshotId(30, 2))
    w.append(b"half a batch")
    os.close(w._fd)  # simulate the crash: no close(), no freeze()
    w._closed = True
    done = RawSnapshotWriter(tmp_path, SnapshotId(20, 2))
    done.append(b"ok")
    done.freeze()
    assert w.part_path.exists()
    assert open_snapshot_dir(tmp_path) == [SnapshotId(20, 2)]
    assert not w.part_path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [snapshot_filename(SnapshotId(20, 2))]


def test_raw_writer_freeze(tmp_path):
    sid = SnapshotId(10, 1)
    w = RawSnapshotWriter(tmp_path, sid)
    assert w.part_path.name.startswith(snapshot_filename(sid, "-")) and w.part_path.name.endswith(".part")
    assert list_snapshots(tmp_path) == []
    w.append(b"abc")
    w.append(bytearray(b"de"))
    w.append(memoryview(np.arange(3, dtype=np.uint8)))
    assert w.size_in_bytes == 8
    path = w.freeze()
    assert path == snapshot_path(tmp_path, sid) and w.is_frozen
    assert path.read_bytes() == b"abcde\x00\x01\x02"
    assert not w.part_path.exists()
    with pytest.raises(SnapshotError, match="frozen"):
        w.append(b"x")
    with pytest.raises(SnapshotError, match="frozen"):
        w.freeze()
    w.close()
    assert path.exists() and list_snapshots(tmp_path) == [sid]


def test_raw_writer_abort(tmp_path):
    sid = SnapshotId(10, 1)
    with RawSnapshotWriter(tmp_path, sid) as w:
        w.append(b"partial")
        assert w.part_path.exists()
    assert not w.part_path.exists() and list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError):
        with RawSnapshotWriter(tmp_path, sid) as w2:
            w2.append(b"x")
            raise RuntimeError("transfer failed")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SnapshotError, match="closed"):
        w2.append(b"y")


def test_two_writers_same_id(tmp_path):
    sid = SnapshotId(7, 7)
    a, b = RawSnapshotWriter(tmp_path, sid), RawSnapshotWriter(tmp_path, sid)
    assert a.part_path != b.part_path
    a.append(b"a")
    b.append(b"bb")
    b.freeze()
    a.close()
    assert snapshot_path(tmp_path, sid).read_bytes() == b"bb"


def test_raw_reader(tmp_path):
    sid = SnapshotId(5, 2)
    data = bytes(range(256)) * 10
    w = RawSnapshotWriter(tmp_path, sid)
    w.append(data)
    w.freeze()
    with RawSnapshotReader.open(tmp_path, sid) as r:
        assert r.size_in_bytes == len(data) and r.snapshot_id == sid
        assert r.read(0, 100) == data[:100]
        assert r.read(2500, 1000) == data[2500:]
        assert r.read(3, 0) == b""
        for bad in (-1, len(data), len(data) + 5):
            with pytest.raises(SnapshotPositionOutOfRange):
                r.read(bad, 10)
        assert bytes(r.buffer) == data
    with pytest.raises(SnapshotError):
        r.read(0, 1)
    with pytest.raises(SnapshotError, match="no snapshot"):
        RawSnapshotReader.open(tmp_path, SnapshotId(6, 2))


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@HSETTINGS
@given(chunks=st.lists(st.integers(1, 5000), min_size=1, max_size=40))
def test_fetch_snapshot_transfer(tmp_path_factory, chunks):
    """A follower rebuilds the leader's file from FetchSnapshot slices of any sizes (cut mid-batch)."""
    src = max(CHECKPOINTS, key=lambda p: p.stat().st_size)
    leader = RawSnapshotReader(src)
    d = tmp_path_factory.mktemp("follower")
    w = RawSnapshotWriter(d, leader.snapshot_id)
    pos, i = 0, 0
    while pos < leader.size_in_bytes:
        piece = leader.read(pos, chunks[i % len(chunks)])
        w.append(piece)
        pos += len(piece)
        i += 1
    w.freeze()
    leader.close()
    assert snapshot_path(d, leader.snapshot_id).read_bytes() == src.read_bytes()
    with RecordsSnapshotReader.open(d, leader.snapshot_id) as r:
        assert r.records_count > 0


# ---------------------------------------------------------------------------
# Kafka fixtures: read completely, reproduce byte for byte
# ---------------------------------------------------------------------------

@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@pytest.mark.parametrize("path", CHECKPOINT_PARAMS, ids=_checkpoint_id)
def test_fixture_read_completely(path):
    sid = _sid_of(path)
    with RecordsSnapshotReader(path, snapshot_id=sid) as r:
        assert r.snapshot_id == sid
        h = np.concatenate([r.control_batches[:1], r.batches, r.control_batches[1:]])
        assert int(h[-1]["position"] + h[-1]["size"]) == path.stat().st_size
        assert list(h["base_offset"]) == [0] + list(np.cumsum(h["records_count"])[:-1])
        assert set(h["partition_leader_epoch"].tolist()) == {sid.epoch}
        if sid == BOOTSTRAP_SNAPSHOT_ID:
            assert r.last_contained_log_timestamp == 0
        else:
            assert r.last_contained_log_timestamp > 0
        assert r.kraft_version == 0 and r.voters is None and r.footer.version == 0
        cols = r.records()
        assert len(cols) == r.records_count == int(r.batches["records_count"].sum())
        assert (cols.key_len == -1).all()
        per_batch = [c for _, c in r.iter_batches()]
        assert sum(len(c) for c in per_batch) == len(cols)
        msgs = list(r.metadata_records())
        assert len(msgs) == len(cols) and [m[0] for m in msgs] == cols.offset.tolist()
        assert {type(m[3]).__name__ for m in msgs} >= {"FeatureLevelRecord"}


def _reproduce(path: Path, d: Path, mode: str) -> bytes:
    sid = _sid_of(path)
    with RecordsSnapshotReader(path, snapshot_id=sid) as r:
        w = RecordsSnapshotWriter.create(d, sid, last_contained_log_timestamp=r.last_contained_log_timestamp,
                                         clock=_clock(_batch_times(r)))
        if mode == "framed":
            for _, cols in r.iter_batches():
                w.append([cols.value(i) for i in range(len(cols))])
        elif mode == "messages":
            for _, cols in r.iter_batches():
                recs = []
                for i in range(len(cols)):
                    _, version, msg = decode_metadata_record(cols.value(i))
                    recs.append((msg, version))
                w.append(recs)
        else:
            w.append_framed(r.values())
        w.freeze()
    return snapshot_path(d, sid).read_bytes()


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@pytest.mark.parametrize("mode", ["framed", "messages", "bulk"])
@pytest.mark.parametrize("path", CHECKPOINT_PARAMS, ids=_checkpoint_id)
def test_fixture_byte_identical(path, mode, tmp_path):
    assert _reproduce(path, tmp_path, mode) == path.read_bytes()


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
def test_fixture_reproduction_in_pure_mode(tmp_path):
    """The same byte-identity check with the pure-Python kernels (other process, forced twins)."""
    code = (
        "import sys, tempfile; from pathlib import Path\n"
        "from kraft_storage import accel; assert not accel.WANT_NATIVE\n"
        "sys.path[:0] = sys.argv[2:]  # tests/ (conftest) and this file's folder\n"
        "from test_snapshot import CHECKPOINTS, _reproduce\n"
        "for p in CHECKPOINTS:\n"
        "    for m in ('framed', 'bulk'):\n"
        "        d = Path(tempfile.mkdtemp(dir=sys.argv[1]))\n"
        "        assert _reproduce(p, d, m) == p.read_bytes(), (p, m)\n"
        "print('ok', len(CHECKPOINTS))\n")
    env = dict(os.environ, KRAFT_NO_EXTENSIONS="1")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(REPO / "tests"),
                          str(REPO / "tests" / "storage")], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"ok {len(CHECKPOINTS)}"


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
def test_bootstrap_checkpoint_roundtrip(tmp_path):
    src = next(p for p in CHECKPOINTS if p.name == "bootstrap.checkpoint")
    with read_bootstrap_checkpoint(src.parent) as r:
        assert r.snapshot_id == BOOTSTRAP_SNAPSHOT_ID
        values = r.values()
        times = _batch_times(r)
    data, off = values
    dest = write_bootstrap_checkpoint(tmp_path, [data[off[i]:off[i + 1]] for i in range(len(off) - 1)],
                                      clock=_clock(times))
    assert dest == tmp_path / "bootstrap.checkpoint"
    assert dest.read_bytes() == src.read_bytes()
    assert [p.name for p in tmp_path.iterdir()] == ["bootstrap.checkpoint"]  # no .part left


# ---------------------------------------------------------------------------
# records writer: layout and batch boundaries
# ---------------------------------------------------------------------------

def _value(n: int, seed: int) -> bytes:
    return bytes([1, 20, 0]) + bytes((seed + j) & 0xFF for j in range(n))  # NoOpRecord-like frame


def test_header_with_kraft_version_and_voters(tmp_path):
    sid = SnapshotId(1000, 5)
    voters = VotersRecord(version=0, voters=[VotersRecord.Voter(
        voter_id=1, endpoints=[VotersRecord.Endpoint(name="CONTROLLER", host="c1", port=9093)],
        k_raft_version_feature=VotersRecord.KRaftVersionFeature(min_supported_version=0, max_supported_version=1))])
    with RecordsSnapshotWriter.create(tmp_path, sid, last_contained_log_timestamp=123, kraft_version=1,
                                      voters=voters, clock=_clock([10, 11, 12])) as w:
        w.append([_value(5, 1), _value(6, 2)])
        assert w.next_offset == 5 and w.last_contained_log_offset == 999
        size = w.freeze()
    with RecordsSnapshotReader.open(tmp_path, sid) as r:
        assert r.size_in_bytes == size
        assert r.kraft_version == 1 and r.voters == voters
        assert r.last_contained_log_timestamp == 123
        assert int(r.control_batches[0]["records_count"]) == 3
        assert r.batches["base_offset"].tolist() == [3]
        assert r.control_batches["base_offset"].tolist() == [0, 5]
        assert r.control_batches["base_timestamp"].tolist() == [10, 12]
        assert r.batches["base_timestamp"].tolist() == [11]
        assert r.records().offset.tolist() == [3, 4]
    with pytest.raises(SnapshotError, match="voter"):
        RecordsSnapshotWriter.create(tmp_path, SnapshotId(1, 1), kraft_version=0, voters=voters)
    assert list_snapshots(tmp_path) == [sid]  # the failed create left nothing behind
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_close_without_freeze_aborts(tmp_path):
    with RecordsSnapshotWriter.create(tmp_path, SnapshotId(3, 1)) as w:
        w.append([_value(10, 0)])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SnapshotError, match="frozen"):
        w2 = RecordsSnapshotWriter.create(tmp_path, SnapshotId(3, 1))
        w2.freeze()
        w2.append([_value(1, 0)])


def test_append_keeps_records_together_and_bounds(tmp_path):
    max_size = 300
    w = RecordsSnapshotWriter.create(tmp_path, SnapshotId(9, 1), max_batch_size=max_size, clock=lambda: 7)
    w.append([_value(50, i) for i in range(3)])     # 61 + 3*60 = 241
    w.append([_value(50, 9)])                        # 241 + 60 = 301 > 300: new batch
    w.append([_value(10, 1), _value(10, 2)])         # fits with the previous
    with pytest.raises(SnapshotBatchTooLarge):
        w.append([_value(300, 0)])
    w.append([_value(50, i) for i in range(2)])
    w.freeze()
    with RecordsSnapshotReader.open(tmp_path, SnapshotId(9, 1)) as r:
        assert r.batches["records_count"].tolist() == [3, 5]
        assert (r.batches["size"] <= max_size).all()
        assert r.batches["size"].tolist()[0] == 241


def _zz_varint_len(v: int) -> int:
    z = (v << 1) ^ (v >> 63)
    n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


@given(st.integers(0, 2**20), st.integers(0, 2**30))
def test_record_sizes_oracle(value_len, delta):
    body = 1 + _zz_varint_len(0) + _zz_varint_len(delta) + _zz_varint_len(-1) + _zz_varint_len(value_len) \
        + value_len + _zz_varint_len(0)
    assert int(record_sizes(np.array([value_len]), np.array([delta]))[0]) == _zz_varint_len(body) + body


@given(st.integers(0, 2**28), st.integers(0, 3000))
def test_delta_varint_sizes_are_the_varint_sizes_of_a_range(first, count):
    """The writer's shortcut for consecutive offset deltas == per-element sizes."""
    from kraft_storage.snapshot.records import _delta_varint_sizes, _varint_size
    expect = [_zz_varint_len(d) for d in range(first, first + count)]
    assert _delta_varint_sizes(first, count).tolist() == expect
    xs = np.arange(first, first + count, dtype=np.int64)
    assert _varint_size(xs).tolist() == expect
    assert _varint_size(xs, first + count).tolist() == expect


@pytest.mark.parametrize("n,vlen", [(70, 70), (9000, 0), (3, 9000), (2, 70000)])
def test_record_sizes_match_encoder(n, vlen):
    """Sum of record_sizes + header == what the batch encoder really writes (crossing varint widths)."""
    b = build_batch([(None, b"x" * vlen, 0)] * n, timestamp=0)
    assert len(b) == HEADER_SIZE + int(record_sizes(np.full(n, vlen), np.arange(n)).sum())


@HSETTINGS
@given(lens=st.lists(st.integers(0, 700), min_size=1, max_size=120),
       max_size=st.integers(HEADER_SIZE + 720, 4000),
       groups=st.lists(st.integers(1, 6), min_size=1, max_size=10))
def test_bulk_equals_singleton_appends(tmp_path_factory, lens, max_size, groups):
    """append_framed == one append per record; batches are greedy and bounded."""
    values = [_value(n, i) for i, n in enumerate(lens)]
    d = tmp_path_factory.mktemp("s")
    a = RecordsSnapshotWriter.create(d / "a", SnapshotId(len(values) + 1, 2), max_batch_size=max_size, clock=lambda: 5)
    for v in values:
        a.append([v])
    a.freeze()
    b = RecordsSnapshotWriter.create(d / "b", SnapshotId(len(values) + 1, 2), max_batch_size=max_size, clock=lambda: 5)
    # split the bulk input into several calls, mixing list and Arrow forms
    i, gi = 0, 0
    while i < len(values):
        k = groups[gi % len(groups)] * 7
        chunk = values[i:i + k]
        if gi % 2:
            b.append_framed(chunk)
        else:
            off = np.zeros(len(chunk) + 1, np.int64)
            np.cumsum([len(v) for v in chunk], out=off[1:])
            buf = bytearray(b"".join(chunk))
            b.append_framed((buf, off))
            buf[:] = b"\xee" * len(buf)  # caller reuses its buffer: pending records were copied
        i += k
        gi += 1
    b.freeze()
    sid = SnapshotId(len(values) + 1, 2)
    raw_a = snapshot_path(d / "a", sid).read_bytes()
    assert snapshot_path(d / "b", sid).read_bytes() == raw_a
    with RecordsSnapshotReader.open(d / "a", sid) as r:
        sizes = r.batches["size"].astype(int)
        assert (sizes <= max_size).all()
        # greedy: the first record of each next batch would not have fit
        counts = r.batches["records_count"].astype(int)
        starts = np.cumsum(counts)[:-1]
        for bi, s in enumerate(starts):
            extra = int(record_sizes(np.array([len(values[s])]), np.array([counts[bi]]))[0])
            assert sizes[bi] + extra > max_size
        assert [r.records().value(j) for j in range(len(values))] == values


def test_bulk_too_large_record(tmp_path):
    w = RecordsSnapshotWriter.create(tmp_path, SnapshotId(4, 1), max_batch_size=200)
    with pytest.raises(SnapshotBatchTooLarge, match="record 2"):
        w.append_framed([_value(10, 0), _value(10, 1), _value(500, 2)])
    w.close()


def test_default_batch_size_is_kafkas():
    assert MAX_BATCH_SIZE_BYTES == 8 * 1024 * 1024


# ---------------------------------------------------------------------------
# reader: layout checks and damaged files
# ---------------------------------------------------------------------------

def _ctl(ctype: int, value: bytes, base: int, epoch: int = 1) -> bytes:
    return build_batch([(struct.pack(">hh", 0, ctype), value, 1)], base_offset=base,
                       partition_leader_epoch=epoch, is_control=True)


HEADER_VALUE = b"\x00\x00" + struct.pack(">q", 0) + b"\x00"
FOOTER_VALUE = b"\x00\x00\x00"


_RAW_SID = SnapshotId(9, 1)


def _write_raw(d: Path, data: bytes, sid: SnapshotId = _RAW_SID) -> Path:
    w = RawSnapshotWriter(d, sid)
    w.append(data)
    return w.freeze()


@pytest.mark.parametrize("layout,match", [
    ("data,footer", "first batch is not a control batch"),
    ("header,data", "last batch is not a control batch"),
    ("header", "needs a header batch and a footer batch"),
    ("", "found 0 batch"),
    ("footer,data,footer", "first record is not a SnapshotHeader"),
    ("header,data,header", "last batch is not a single SnapshotFooter"),
    ("header,footer,data,footer", "control batch inside the data section"),
    ("header,leader,footer", "control batch inside the data section"),
])
def test_reader_layout_errors(tmp_path, layout, match):
    parts, off = [], 0
    for kind in filter(None, layout.split(",")):
        if kind == "data":
            parts.append(build_batch([(None, _value(5, 0), 1)], base_offset=off, partition_leader_epoch=1))
        else:
            ctype, val = {"header": (3, HEADER_VALUE), "footer": (4, FOOTER_VALUE),
                          "leader": (2, b"\x00\x01\x00\x00\x00\x01\x01\x01\x00")}[kind]
            parts.append(_ctl(ctype, val, off))
        off += 1
    path = _write_raw(tmp_path, b"".join(parts))
    with pytest.raises(SnapshotError, match=match) as ei:
        RecordsSnapshotReader(path)
    assert path.name in str(ei.value)


def test_reader_rejects_foreign_control_in_header_batch(tmp_path):
    hdr = build_batch([(struct.pack(">hh", 0, 3), HEADER_VALUE, 1), (struct.pack(">hh", 0, 4), FOOTER_VALUE, 1)],
                      partition_leader_epoch=1, is_control=True)
    path = _write_raw(tmp_path, hdr + _ctl(4, FOOTER_VALUE, 2))
    with pytest.raises(SnapshotError, match="SNAPSHOT_FOOTER control record in the snapshot header batch"):
        RecordsSnapshotReader(path)


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
def test_truncated_and_flipped_fixture(tmp_path):
    src = max(CHECKPOINTS, key=lambda p: p.stat().st_size).read_bytes()
    path = _write_raw(tmp_path, src[:-10])
    with pytest.raises(CorruptRecordError) as ei:
        RecordsSnapshotReader(path)
    assert path.name in str(ei.value)
    bad = bytearray(src)
    bad[200] ^= 0x40
    path2 = _write_raw(tmp_path, bytes(bad), SnapshotId(10, 1))
    with pytest.raises(CorruptRecordError, match="(?i)crc"):
        RecordsSnapshotReader(path2)
    RecordsSnapshotReader(path2, verify_crc=False).close()  # CRC not checked: the layout is still valid


@pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures
@HSETTINGS
@given(data=st.data())
def test_damaged_files_raise_clean_errors(tmp_path_factory, data):
    """Any truncation or byte change either reads fine or raises a KraftStorageError (never crashes)."""
    src = bytearray(data.draw(st.sampled_from([p.read_bytes() for p in CHECKPOINTS[:4]])))
    if data.draw(st.booleans()):
        src = src[:data.draw(st.integers(0, len(src)))]
    for _ in range(data.draw(st.integers(0, 4))):
        if src:
            src[data.draw(st.integers(0, len(src) - 1))] = data.draw(st.integers(0, 255))
    d = tmp_path_factory.mktemp("dmg")
    path = _write_raw(d, bytes(src))
    crc = data.draw(st.booleans())
    try:
        r = RecordsSnapshotReader(path, verify_crc=crc)
    except KraftStorageError:
        return
    try:
        cols = r.records()
        assert len(cols) == r.records_count
        list(r.iter_batches())
    except KraftStorageError:
        pass
    finally:
        r.close()


def test_compressed_snapshot_roundtrip(tmp_path):
    sid = SnapshotId(50, 3)
    values = [_value(30, i) for i in range(40)]
    with RecordsSnapshotWriter.create(tmp_path, sid, compression="gzip", max_batch_size=1000) as w:
        w.append_framed(values)
        w.freeze()
    with RecordsSnapshotReader.open(tmp_path, sid) as r:
        assert (r.batches["attributes"] & 7 == 1).all() and len(r.batches) > 1
        cols = r.records()
        assert [cols.value(i) for i in range(len(cols))] == values
        assert r.records().offset.tolist() == list(range(1, 41))
