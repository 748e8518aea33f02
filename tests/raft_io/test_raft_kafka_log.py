"""KafkaRaftLog: the RaftLog contract over Kafka's on-disk log, checked against MemoryRaftLog.

The in-memory log is the model: any sequence of appends (leader and follower),
truncations, snapshots and reopenings must leave both logs answering every
query identically.  Plus byte-level checks that the files are what Kafka writes.
"""
from __future__ import annotations

import io
import os
import uuid as _uuid

import pytest
from conftest import fixture_params
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kraft_node.raft.io.kafka_log import (
    KafkaRaftLog,
    KafkaSnapshotControl,
    RawBatch,
    decode_kraft_version,
    decode_leader_change,
    decode_raft_batches,
    decode_voters,
    encode_batches,
    encode_control_value,
    encode_kraft_version,
    encode_leader_change,
    encode_voters,
)
from kraft_node.raft.log import MemoryRaftLog
from kraft_node.raft.messages import (
    Batch,
    Endpoint,
    KRaftVersionControl,
    LeaderChangeMessage,
    OffsetAndEpoch,
    ReplicaKey,
    VoterEntry,
    VotersControl,
)
from kraft_node.raft.voters import VoterSet
from kraft_storage.messages.control import ControlRecordType, KRaftVersionRecord, VotersRecord, decode_control_record
from kraft_storage.record import iter_batches
from kraft_storage.snapshot import RawSnapshotWriter, RecordsSnapshotReader, RecordsSnapshotWriter
from kraft_storage.snapshot import SnapshotId as FileSnapshotId


def _lc(leader=1):
    return LeaderChangeMessage(0, leader, (1, 2, 3), (leader, 2))


def _flat(log, start):
    out = []
    for b in log.read(start, 1 << 40) if start < log.end_offset else ():
        for i, r in enumerate(b.records):
            out.append((b.base_offset + i, b.epoch, bytes(r), b.is_control))
    return out


def test_files_are_kafka_batches(tmp_path):
    d = tmp_path / "__cluster_metadata-0"
    log = KafkaRaftLog(str(d))
    log.append_as_leader(Batch(0, 3, (b"placeholder",), True, _lc(2)))
    log.append_as_leader(Batch(1, 3, (b"r1", b"r2")))
    log.flush()
    log.close()
    data = (d / "00000000000000000000.log").read_bytes()
    batches = list(iter_batches(data))
    assert [b.base_offset for b in batches] == [0, 1]
    ctl, rec = batches
    assert ctl.is_control and ctl.header_row()["partition_leader_epoch"] == 3
    (r,) = ctl.records()
    ctype, body = decode_control_record(r.key, r.value)
    assert ctype == ControlRecordType.LEADER_CHANGE
    assert body.leader_id == 2 and [v.voter_id for v in body.voters] == [1, 2, 3]
    assert [v.voter_id for v in body.granting_voters] == [2, 2]
    assert not rec.is_control and rec.header_row()["partition_leader_epoch"] == 3
    assert [(x.key, x.value) for x in rec.records()] == [(None, b"r1"), (None, b"r2")]
    assert open(d / "partition.metadata").read().strip().endswith("AAAAAAAAAAAAAAAAAAAAAQ")


def test_leader_change_codec_roundtrip():
    m = LeaderChangeMessage(0, 7, (1, 5, 7), (5, 7))
    assert decode_leader_change(encode_leader_change(m)) == m


def test_raw_bytes_are_reused_and_follower_appends_identical_bytes(tmp_path):
    a = KafkaRaftLog(str(tmp_path / "a"))
    a.append_as_leader(Batch(0, 1, (b"x", b"y")))
    a.append_as_leader(Batch(2, 2, (b"z",)))
    got = a.read(0, 1 << 20)
    assert all(isinstance(b, RawBatch) for b in got)
    wire = encode_batches(got)
    b = KafkaRaftLog(str(tmp_path / "b"))
    b.append_as_follower(decode_raft_batches(wire))
    a.flush()
    b.flush()
    assert (tmp_path / "a" / "00000000000000000000.log").read_bytes() == \
           (tmp_path / "b" / "00000000000000000000.log").read_bytes()


def test_corrupt_fetch_records_raise_clear_error():
    wire = bytearray(encode_batches((Batch(0, 1, (b"abc",)),)))
    wire[-1] ^= 0xFF
    with pytest.raises(Exception, match="(?i)crc"):
        decode_raft_batches(bytes(wire))


def test_truncate_inside_a_batch_is_exact_and_durable(tmp_path):
    d = str(tmp_path / "p")
    log = KafkaRaftLog(d)
    log.append_as_leader(Batch(0, 1, (b"a", b"b", b"c", b"d")))
    log.append_as_leader(Batch(4, 2, (b"e",)))
    log.flush()
    log.truncate_to(2)
    assert log.end_offset == 2 and log.flushed_end_offset == 2
    assert log.end_offset_for_epoch(2) == OffsetAndEpoch(2, 1)
    log.close_uncleanly()
    again = KafkaRaftLog(d)
    assert _flat(again, 0) == [(0, 1, b"a", False), (1, 1, b"b", False)]


def test_snapshot_survives_reopen_and_sets_log_start(tmp_path):
    d = str(tmp_path / "p")
    log = KafkaRaftLog(d)
    log.append_as_leader(Batch(0, 1, (b"a", b"b", b"c")))
    log.append_as_leader(Batch(3, 4, (b"d", b"e")))
    log.flush()
    sid = OffsetAndEpoch(4, 4)
    log.create_snapshot(sid, b"SNAPSHOT-BYTES")
    log.delete_before(sid)
    assert log.start_offset == 4 and log.read(4, 100)[0].records == (b"e",)
    assert os.path.exists(os.path.join(d, "00000000000000000004-0000000004.checkpoint"))
    log.close()
    again = KafkaRaftLog(d)
    assert again.start_offset == 4 and again.latest_snapshot_id() == sid
    assert again.read_snapshot(sid) == b"SNAPSHOT-BYTES"
    # FetchSnapshot serving reads ranges: (size, chunk), empty outside, None when absent
    assert again.read_snapshot_range(sid, 9, 3) == (14, b"BYT")
    assert again.read_snapshot_range(sid, 12, 100) == (14, b"ES")
    assert again.read_snapshot_range(sid, 14, 5) == (14, b"") and again.read_snapshot_range(sid, -1, 5) == (14, b"")
    assert again.read_snapshot_range(OffsetAndEpoch(3, 4), 0, 5) is None
    assert again.end_offset_for_epoch(3) == OffsetAndEpoch(4, 4)  # before every entry: log start
    # a snapshot beyond the log end: truncate fully
    s2 = OffsetAndEpoch(10, 5)
    again.create_snapshot(s2, b"later")
    again.truncate_fully_and_start_at(s2)
    assert (again.start_offset, again.end_offset, again.last_fetched_epoch) == (10, 10, 5)


@pytest.mark.parametrize("src", fixture_params("__cluster_metadata-0"), ids=lambda p: str(p).split("/")[-2])
def test_opens_kafka_fixture_metadata_logs(tmp_path, src):
    import shutil
    dst = tmp_path / "__cluster_metadata-0"
    shutil.copytree(src, dst)
    log = KafkaRaftLog(str(dst))
    snap = log.latest_snapshot_id()
    if snap is not None:
        assert log.start_offset >= snap.offset or log.start_offset == 0
        assert log.read_snapshot(snap)[:0] == b""
    # Read everything the way the listener does; control batches decode to LeaderChange.
    pos = log.start_offset
    n = 0
    while pos < log.end_offset:
        bs = log.read(pos, 1 << 20)
        for b in bs:
            if b.is_control and b.control is not None:
                assert b.control.leader_id >= 0
            n += len(b.records)
        pos = bs[-1].next_offset
    assert pos == log.end_offset
    assert log.last_fetched_epoch >= 0


# ---------------------------------------------------------------- model-based property test
ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(1, 5), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("truncate"), st.integers(0, 30)),
    st.tuples(st.just("flush")),
    st.tuples(st.just("snapshot"), st.integers(0, 30)),
    st.tuples(st.just("reopen")),
    st.tuples(st.just("write")),
    st.tuples(st.just("crash")),
), max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
@example([("append", 3, 0, False), ("snapshot", 0), ("truncate", 1)])  # batch straddles start and cut
@example([("append", 1, 0, False), ("append", 2, 0, False), ("flush",), ("append", 1, 0, False),
          ("append", 1, 1, True), ("append", 2, 0, False), ("crash",)])
def test_matches_memory_model(tmp_path_factory, script):
    """KafkaRaftLog (with write-behind, the default) against MemoryRaftLog after every
    step: positions, epochs, contents.  A crash (unclean close, reopen) keeps what was
    written to the file and loses only what write-behind still held -- never flushed data."""
    d = str(tmp_path_factory.mktemp("log") / "__cluster_metadata-0")
    real = KafkaRaftLog(d)
    model = MemoryRaftLog()
    epoch = 1
    seq = 0
    for op in script:
        if op[0] == "append":
            _, n, bump, control = op
            epoch += bump
            if control:
                b = Batch(model.end_offset, epoch, (encode_leader_change(_lc()),), True, _lc())
            else:
                recs = tuple(f"v{seq + i}".encode() for i in range(n))
                seq += n
                b = Batch(model.end_offset, epoch, recs)
            model.append_as_leader(b)
            real.append_as_leader(b)
        elif op[0] == "truncate":
            off = model.start_offset + op[1] % (model.end_offset - model.start_offset + 1)
            model.truncate_to(off)
            real.truncate_to(off)
        elif op[0] == "flush":
            model.flush()
            real.flush()
        elif op[0] == "snapshot":
            if model.end_offset <= model.start_offset:
                continue
            off = model.start_offset + 1 + op[1] % (model.end_offset - model.start_offset)
            e = next(b.epoch for b in model.batches() if b.base_offset <= off - 1 < b.next_offset)
            sid = OffsetAndEpoch(off, e)
            for log in (model, real):
                log.create_snapshot(sid, b"snap%d" % off)
                log.delete_before(sid)
        elif op[0] == "reopen":
            # a clean close keeps everything; the model flushes likewise
            model.flush()
            real.close()
            real = KafkaRaftLog(d)
        elif op[0] == "write":
            real.write_pending()
            assert real.pending_writes == 0
        elif op[0] == "crash":
            written = real._log.log_end_offset  # in the file (page cache): survives the process
            assert model.flushed_end_offset <= real.flushed_end_offset <= written <= real.end_offset
            assert (real.end_offset > written) == (real.pending_writes > 0)
            real.close_uncleanly()
            real = KafkaRaftLog(d)
            assert real.end_offset == written
            if written < model.end_offset:
                model.truncate_to(written)
            model.flush()
        assert (real.start_offset, real.end_offset) == (model.start_offset, model.end_offset)
        assert real.last_fetched_epoch == model.last_fetched_epoch
        for e in range(0, epoch + 2):
            assert real.end_offset_for_epoch(e) == model.end_offset_for_epoch(e), e
        assert _flat(real, real.start_offset) == [
            (o, e, r, c) for (o, e, r, c) in _flat(model, model.start_offset)]
        assert real.latest_snapshot_id() == model.latest_snapshot_id()
    real.close()


def test_records_decode_lazily_once_per_read_group(monkeypatch):
    from kraft_node.raft.io import kafka_log as kafka_log_mod
    from kraft_node.raft.io.kafka_log import _RECORDS
    wire = encode_batches((Batch(0, 1, (b"a", b"b")), Batch(2, 1, (b"x",), True, _lc()),
                           Batch(3, 2, (b"c",)), Batch(4, 2, (b"d", b"e", b"f"))))
    bs = decode_raft_batches(wire)
    assert [(b.base_offset, b.next_offset, b.last_offset) for b in bs] == [(0, 2, 1), (2, 3, 2), (3, 4, 3),
                                                                         (4, 7, 6)]
    data = [b for b in bs if not b.is_control]
    assert all(_RECORDS.__get__(b) is None for b in data)  # nothing decoded yet
    assert bs[1].control == _lc() and bs[1].is_control
    calls = []
    real_decode = kafka_log_mod.decode_records
    monkeypatch.setattr(kafka_log_mod, "decode_records", lambda *a, **k: calls.append(1) or real_decode(*a, **k))
    assert data[1].records == (b"c",)
    assert [b.records for b in data] == [(b"a", b"b"), (b"c",), (b"d", b"e", b"f")]
    assert len(calls) == 1  # one decode for the whole group
    assert encode_batches(bs) == wire  # re-sent byte for byte
    sliced = Batch(data[2].base_offset + 1, data[2].epoch, data[2].records[1:])
    assert decode_raft_batches(encode_batches((sliced,)))[0].records == (b"e", b"f")


def test_decoded_batches_leave_no_garbage_for_the_cycle_collector():
    """A follower decodes every Fetch answer; batches nobody reads the records of (a node
    without a listener that needs them) must be freed by reference counting alone.  With
    a batch <-> decode-group cycle each answer left garbage: ~5 gen-0 passes a second in
    each follower at 1,000 appends/s (session 9)."""
    import gc
    wire = encode_batches((Batch(0, 1, (b"a", b"b")), Batch(2, 1, (b"x",), True, _lc()), Batch(3, 2, (b"c",))))
    gc.collect()
    gc.disable()
    try:
        for touch in (False, True):
            for _ in range(20):
                bs = decode_raft_batches(wire)
                if touch:
                    assert bs[2].records == (b"c",)
                del bs
            assert gc.collect() == 0, f"cyclic garbage left (records touched: {touch})"
    finally:
        gc.enable()


# ------------------------------------------------------------------ KIP-853 control records and snapshots

_ids = st.integers(0, 2 ** 31 - 1)
_entries = st.lists(st.builds(
    lambda i, d, eps, lo: VoterEntry(ReplicaKey(i, d), tuple(eps), lo, lo + 1),
    _ids, st.one_of(st.none(), st.uuids()),
    st.lists(st.builds(Endpoint, st.sampled_from(["CONTROLLER", "C2"]), st.text("abc.1", min_size=1, max_size=9),
                       st.integers(0, 65535)), max_size=2),
    st.integers(0, 3)), min_size=1, max_size=5, unique_by=lambda e: e.key.id)


@settings(max_examples=200, deadline=None)
@given(_entries)
def test_voters_record_roundtrip(entries):
    msg = VotersControl(0, tuple(entries))
    raw = encode_voters(msg)
    assert decode_voters(raw) == msg
    body = VotersRecord.read(raw, 0)  # the generated schema class reads exactly what we wrote
    assert [v.voter_id for v in body.voters] == [e.key.id for e in entries]


def test_kraft_version_record_roundtrip():
    raw = encode_kraft_version(KRaftVersionControl(0, 1))
    assert KRaftVersionRecord.read(raw, 0).k_raft_version == 1
    assert decode_kraft_version(raw) == KRaftVersionControl(0, 1)
    with pytest.raises(ValueError):
        encode_control_value(object())


def test_voters_and_kraft_version_batches_in_the_log(tmp_path):
    """Control batches of type 6 and 5 are written as Kafka does and come back as controls."""
    d = str(tmp_path / "__cluster_metadata-0")
    log = KafkaRaftLog(d)
    voters = VotersControl(0, (VoterEntry(ReplicaKey(1, _uuid.uuid4()), (Endpoint("CONTROLLER", "h", 9093),)),
                               VoterEntry(ReplicaKey(2, _uuid.uuid4()), ())))
    kv = KRaftVersionControl(0, 1)
    log.append_as_leader(Batch(0, 1, (encode_control_value(kv),), True, kv))
    log.append_as_leader(Batch(1, 1, (encode_control_value(voters),), True, voters))
    log.append_as_leader(Batch(2, 1, (b"data",)))
    log.flush()
    log.close()
    log = KafkaRaftLog(d)
    got = log.read(0, 1 << 20)
    assert [b.control for b in got] == [kv, voters, None]
    assert got[1].records == (encode_voters(voters),)
    cols_types = [decode_control_record(*_kv(b.raw))[0] for b in got[:2]]
    assert cols_types == [ControlRecordType.KRAFT_VERSION, ControlRecordType.KRAFT_VOTERS]
    log.close()


def _kv(raw):
    from kraft_storage.record import decode_records
    cols = decode_records(raw)
    return cols.key(0), cols.value(0)


def _voter_set(n=2):
    return VoterSet.of([VoterEntry(ReplicaKey(i, _uuid.uuid4()), (Endpoint("CONTROLLER", "127.0.0.1", 9000 + i),))
                        for i in range(1, n + 1)])


def test_snapshot_control_reads_the_format_standalone_bootstrap(tmp_path):
    """The (0, 0) snapshot written by kraft-storage format --standalone gives kraft.version 1
    and the one voter, with its directory id and endpoint."""
    from kraft_node.server.config import NodeConfig
    from kraft_node.server.tools.storage import format_storage
    from kraft_storage.meta_properties import read_meta_properties
    p = tmp_path / "server.properties"
    p.write_text("process.roles=controller\nnode.id=1\ncontroller.quorum.bootstrap.servers=127.0.0.1:9093\n"
                 "listeners=CONTROLLER://127.0.0.1:9093\ncontroller.listener.names=CONTROLLER\n"
                 f"log.dirs={tmp_path}/m\n")
    cfg = NodeConfig.from_file(str(p))
    format_storage(cfg, "MkU3OEVBNTcwNTJENDM2Qg", standalone=True, out=io.StringIO())
    log = KafkaRaftLog(cfg.metadata_partition_dir)
    sid = log.latest_snapshot_id()
    assert sid == OffsetAndEpoch(0, 0)
    kv, voters = KafkaSnapshotControl().read(log.read_snapshot(sid))
    meta = read_meta_properties(cfg.metadata_log_dir).meta
    assert kv == 1
    (e,) = voters.entries
    assert e.key == ReplicaKey(1, _uuid.UUID(bytes=Uuid(meta.directory_id).bytes))
    assert e.endpoints == (Endpoint("CONTROLLER", "127.0.0.1", 9093),)
    log.close()


from kraft_storage.messages.runtime import Uuid  # noqa: E402


def test_snapshot_control_write_rebuilds_header_and_rebases_data(tmp_path):
    """Rewriting a records snapshot puts KRaftVersion + Voters after the header and shifts the
    data batches' base offsets; Kafka's own reader accepts the result."""
    raw = RawSnapshotWriter(str(tmp_path), FileSnapshotId(10, 2))
    from kraft_storage.messages.metadata import FeatureLevelRecord
    with RecordsSnapshotWriter(raw, last_contained_log_timestamp=123) as w:
        w.append([(FeatureLevelRecord(name="metadata.version", feature_level=20), 0)])
        w.freeze()
    from kraft_storage.snapshot import RawSnapshotReader
    with RawSnapshotReader.open(str(tmp_path), FileSnapshotId(10, 2)) as r:
        data = bytes(r.buffer)
    codec = KafkaSnapshotControl()
    assert codec.read(data) == (0, None)
    assert codec.read(codec.write(data, 0, None)) == (0, None)
    vs = _voter_set(3)
    out = codec.write(data, 1, vs)
    assert codec.read(out) == (1, vs)
    d2 = tmp_path / "o"
    d2.mkdir()
    raw2 = RawSnapshotWriter(str(d2), FileSnapshotId(10, 2))
    raw2.append(out)
    raw2.freeze()
    raw2.close()
    rd = RecordsSnapshotReader.open(str(d2), FileSnapshotId(10, 2))
    assert rd.kraft_version == 1 and rd.header.last_contained_log_timestamp == 123
    assert [v.voter_id for v in rd.voters.voters] == [1, 2, 3]
    assert int(rd.batches["base_offset"][0]) == 3  # header, kraft.version, voters before it
    assert rd.records_count == 1
    rd.close()
    # rewriting again with fewer control records shifts back
    back = codec.write(out, 0, None)
    assert codec.read(back) == (0, None)


def test_snapshot_control_opaque_payload():
    codec = KafkaSnapshotControl()
    assert codec.read(b"x" * 100) == (0, None)
    assert codec.write(b"x" * 100, 0, None) == b"x" * 100
    vs = _voter_set(1)
    out = codec.write(b"x" * 100, 1, vs)
    assert out.endswith(b"x" * 100) and codec.read(out) == (1, vs)


_voter_sets = _entries.map(lambda es: VoterSet.of(es))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.binary(max_size=40), max_size=6), st.integers(0, 1), st.one_of(st.none(), _voter_sets),
       st.integers(0, 1), st.one_of(st.none(), _voter_sets))
def test_snapshot_control_write_read_properties(tmp_path, values, kv1, vs1, kv2, vs2):
    """Any records snapshot, rewritten with any control state (twice, so that the header batch
    grows and shrinks): read() gives back the last state written, and the data records and
    their order survive with contiguous offsets after the header batch."""
    from kraft_storage.messages.metadata import FeatureLevelRecord
    from kraft_storage.record import decode_records, scan_batches
    d = tmp_path / f"s{len(os.listdir(tmp_path))}"
    d.mkdir()
    raw = RawSnapshotWriter(str(d), FileSnapshotId(7, 1))
    with RecordsSnapshotWriter(raw, last_contained_log_timestamp=5) as w:
        for i, v in enumerate(values):
            w.append([(FeatureLevelRecord(name=f"f{i}", feature_level=len(v)), 0)])
        w.freeze()
    from kraft_storage.snapshot import RawSnapshotReader
    with RawSnapshotReader.open(str(d), FileSnapshotId(7, 1)) as r:
        data = bytes(r.buffer)
    codec = KafkaSnapshotControl()
    out = codec.write(codec.write(data, kv1, vs1), kv2, vs2)
    assert codec.read(out) == (kv2, vs2)
    h = scan_batches(out).headers  # CRCs still valid after re-basing
    bases = h["base_offset"].tolist()
    counts = h["records_count"].tolist()
    assert all(bases[i] + counts[i] == bases[i + 1] for i in range(len(bases) - 1))
    assert counts[0] == 1 + (kv2 > 0) + (vs2 is not None)
    before = decode_records(data)
    after = decode_records(out)
    n_data_before = len(before) - 2  # header + footer (kraft.version 0 snapshot)
    assert len(after) - counts[0] - 1 == n_data_before
    assert [bytes(after.value(i)) for i in range(counts[0], counts[0] + n_data_before)] == \
        [bytes(before.value(i)) for i in range(1, 1 + n_data_before)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=10),
       st.one_of(st.none(), st.tuples(st.integers(0, 10_000), st.integers(1, 255))),
       st.integers(0, 3))
def test_small_fetch_answers_decode_exactly_as_the_full_scan(shape, flip, cut):
    """decode_raft_batches walks a few batches without numpy (_small_scan); whatever the input
    -- valid, a flipped byte, a torn tail, more batches than the quick walk takes -- the
    batches, or the error and its message, are those of the scan_batches path."""
    import kraft_node.raft.io.kafka_log as kl
    from kraft_storage.errors import KraftStorageError
    off = 0
    parts = []
    for n in shape:
        b = Batch(off, 3, tuple(b"v%d" % i for i in range(n)), append_time_ms=7)
        parts.append(kl.encode_batch(b))
        off += n
    data = bytearray(b"".join(parts))
    if flip is not None:
        data[flip[0] % len(data)] ^= flip[1]
    data = bytes(data[:len(data) - cut])

    def outcome():
        try:
            return [(b.base_offset, b.epoch, b.raw, b.append_time_ms, b.is_control, b.records)
                    for b in kl.decode_raft_batches(data)]
        except KraftStorageError as exc:
            return (type(exc).__name__, str(exc))

    quick = outcome()
    original = kl._small_scan
    kl._small_scan = lambda _data: None
    try:
        full = outcome()
    finally:
        kl._small_scan = original
    assert quick == full


def test_metadata_log_keeps_only_its_newest_flushed_bytes_in_the_page_cache(tmp_path, monkeypatch):
    """KafkaRaftLog's default config drops flushed data older than PAGE_CACHE_RETAIN_BYTES
    from the page cache (LogConfig.page_cache_retain_bytes); what is read back is unchanged."""
    import kraft_node.raft.io.kafka_log as kl
    import kraft_storage.log.log as logmod
    monkeypatch.setattr(kl, "PAGE_CACHE_RETAIN_BYTES", 8192)
    advised = []
    real = os.posix_fadvise
    monkeypatch.setattr(logmod.os, "posix_fadvise",
                        lambda fd, off, n, adv: (advised.append((off, n, adv)), real(fd, off, n, adv))[1])
    log = KafkaRaftLog(str(tmp_path / "__cluster_metadata-0"))
    values = [b"r%d-" % i + b"x" * 200 for i in range(200)]
    for i in range(0, 200, 10):
        log.append_as_leader(Batch(i, 1, tuple(values[i:i + 10])))
        log.flush()
    size = os.path.getsize(tmp_path / "__cluster_metadata-0" / "00000000000000000000.log")
    assert advised and all(adv == os.POSIX_FADV_DONTNEED for _, _, adv in advised)
    assert sum(n for _, n, _ in advised) == (size - 8192) // 4096 * 4096
    got = [r for b in log.read(0, 1 << 20) for r in b.records]
    assert got == values
    log.close()


def test_snapshot_writer_of_the_core_writes_kafka_records_snapshots(tmp_path):
    """RaftCore.create_snapshot(id) over a KafkaRaftLog: Kafka's RecordsSnapshotWriter
    (header, the state machine's records in batches, footer), streamed to a .part file,
    published on freeze() with the log prefix dropped; what a Kafka reader opens."""
    import random

    from kraft_node.raft.client import RaftCore
    from kraft_node.raft.config import QuorumConfig
    from kraft_node.raft.io.kafka_log import KafkaSnapshotControl
    from kraft_node.raft.messages import ReplicaKey
    from kraft_node.raft.quorum_state import MemoryQuorumStateStore
    from kraft_storage.snapshot import RecordsSnapshotReader
    from kraft_storage.snapshot import SnapshotId as FileSnapshotId
    d = str(tmp_path / "__cluster_metadata-0")
    log = KafkaRaftLog(d)
    core = RaftCore(QuorumConfig(), ReplicaKey(1, None), [ReplicaKey(1, None)], log, MemoryQuorumStateStore(),
                    random.Random(1), snapshot_control=KafkaSnapshotControl())
    now = 0
    core.initialize(now)
    core.poll(now)
    for i in range(3):
        core.append([b"r%d" % i], core.epoch, now)
        now += 10
        core.poll(now)
    now += 10
    core.poll(now)
    assert core.high_watermark == log.end_offset
    sid = OffsetAndEpoch(core.high_watermark, core.epoch)
    w = core.create_snapshot(sid, last_contained_log_time_ms=1234)
    w.append([b"\x01value-1", b"\x01value-2"])
    w.append([b"\x01value-3"])
    assert log.latest_snapshot_id() is None
    assert [p.name for p in (tmp_path / "__cluster_metadata-0").iterdir() if p.name.endswith(".part")]
    w.freeze()
    assert log.latest_snapshot_id() == sid and log.start_offset == sid.offset
    with RecordsSnapshotReader.open(d, FileSnapshotId(sid.offset, sid.epoch)) as r:
        assert r.header.last_contained_log_timestamp == 1234
        cols = r.records()
        assert [bytes(cols.value(i)) for i in range(len(cols))] == [b"\x01value-1", b"\x01value-2", b"\x01value-3"]
    assert KafkaSnapshotControl().read(log.read_snapshot(sid)) == (0, None)
    log.close()


class _SnapshotLoads:
    """A listener copying what each snapshot load hands it; keeps the reader to show it is
    closed once the call returns."""

    def __init__(self):
        self.loads = []
        self.readers = []

    def handle_load_snapshot(self, reader):
        self.readers.append(reader)
        self.loads.append((reader.snapshot_id, reader.last_contained_log_time_ms,
                           [(b.base_offset, b.records) for b in reader]))

    def handle_commit(self, batches):
        pass

    def handle_leader_change(self, leader):
        pass


def _single_voter_core(log):
    import random

    from kraft_node.raft.client import RaftCore
    from kraft_node.raft.config import QuorumConfig
    from kraft_node.raft.messages import ReplicaKey
    from kraft_node.raft.quorum_state import MemoryQuorumStateStore
    return RaftCore(QuorumConfig(), ReplicaKey(1, None), [ReplicaKey(1, None)], log, MemoryQuorumStateStore(),
                    random.Random(1), snapshot_control=KafkaSnapshotControl())


def test_listener_streams_a_kafka_snapshot_larger_than_any_read(tmp_path):
    """A snapshot larger than the log's largest read (MAX_READ_BYTES) and than one batch
    reaches a restarted node's listener through the reader: every record, in order, in
    contiguous batches, with the header's timestamp; the reader is closed after the call."""
    from kraft_node.raft.io.kafka_log import MAX_READ_BYTES
    d = str(tmp_path / "__cluster_metadata-0")
    log = KafkaRaftLog(d)
    core = _single_voter_core(log)
    now = 0
    core.initialize(now)
    core.poll(now)
    core.append([b"r"], core.epoch, now)
    for _ in range(3):
        now += 10
        core.poll(now)
    sid = OffsetAndEpoch(core.high_watermark, core.epoch)
    w = core.create_snapshot(sid, last_contained_log_time_ms=4321)
    expected = []
    for i in range(20):  # 20 x 4 x 256 KiB = 20 MiB: three 8 MiB batches
        records = [bytes([i, j]) * (128 * 1024) for j in range(4)]
        w.append(records)
        expected += records
    w.freeze()
    path = os.path.join(d, "%020d-%010d.checkpoint" % (sid.offset, sid.epoch))
    assert os.path.getsize(path) > MAX_READ_BYTES
    log.close()

    log = KafkaRaftLog(d)
    core = _single_voter_core(log)
    seen = _SnapshotLoads()
    core.register_listener(seen)
    core.initialize(now)
    core.poll(now)
    ((got_sid, ts, batches),) = seen.loads
    assert got_sid == sid and ts == 4321
    assert len(batches) >= 3
    assert [r for _, records in batches for r in records] == expected
    for (base, records), (nxt, _) in zip(batches, batches[1:]):
        assert nxt == base + len(records)  # contiguous offsets inside the snapshot
    with pytest.raises(ValueError, match="closed"):
        next(iter(seen.readers[0]))
    log.close()


def test_corrupt_kafka_snapshot_fails_naming_the_file_and_position(tmp_path):
    """A damaged byte in a data batch: the reader fails with the file and the batch's position."""
    from kraft_storage.errors import CorruptRecordError
    from kraft_storage.snapshot import RecordsSnapshotWriter
    d = str(tmp_path / "p")
    log = KafkaRaftLog(d)
    sid = OffsetAndEpoch(5, 2)
    w = RecordsSnapshotWriter(log.create_raw_snapshot(sid), max_batch_size=300, kraft_version=1)
    for i in range(10):
        w.append([b"v%03d" % i * 20])
    w.freeze()
    with log.open_snapshot(sid) as r:  # intact: control state and five data batches
        assert [b.control.kraft_version for b in r.control_batches()] == [1]
        assert [(b.base_offset, len(b.records)) for b in r] == [(2, 2), (4, 2), (6, 2), (8, 2), (10, 2)]
    path = os.path.join(d, "%020d-%010d.checkpoint" % (sid.offset, sid.epoch))
    data = bytearray(open(path, "rb").read())
    data[700] ^= 0xFF
    with open(path, "wb") as f:
        f.write(data)
    with log.open_snapshot(sid) as r:
        with pytest.raises(CorruptRecordError, match=r"CRC mismatch.*checkpoint, position \d+"):
            list(r)
    log.close()
