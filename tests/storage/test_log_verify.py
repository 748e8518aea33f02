"""kraft_storage.log.verify: verify_log_dir is read-only and finds damage with file and
position; recover_log_dir truncates explicitly and says what it dropped (issue 19, item 3)."""
from __future__ import annotations

import hashlib
import os
import shutil

import pytest
from conftest import FIXTURES

from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import NotALogDirectory
from kraft_storage.log.log import KafkaLog
from kraft_storage.log.verify import recover_log_dir, verify_log_dir
from kraft_storage.record import build_batch

CFG = LogConfig(segment_bytes=1500, index_interval_bytes=200)
FIXTURE_LOGS = sorted(p.parent for p in FIXTURES.glob("*/__cluster_metadata-0/00000000000000000000.log"))


def batch(n=3, ts=1_700_000_000_000):
    return build_batch([(None, b"value-%d" % i) for i in range(n)], timestamp=ts)


def snapshot(d):
    """Every file's bytes, size and mtime: a read-only verify changes none of them."""
    out = {}
    for n in sorted(os.listdir(d)):
        st = os.stat(d / n)
        out[n] = (hashlib.sha256((d / n).read_bytes()).hexdigest(), st.st_size, st.st_mtime_ns)
    return out


def make_log(d, clean=True, batches=45):
    log = KafkaLog.open(d, CFG)
    for i in range(batches):
        log.append_as_leader(batch(ts=1_700_000_000_000 + (i * 7919) % 1000), 1 + i // 20)
    bases = [s.base_offset for s in log.segments]
    end = log.log_end_offset
    log.close() if clean else log.close_uncleanly()
    return bases, end


@pytest.mark.parametrize("clean", [True, False])
def test_a_sound_log_verifies_ok(tmp_path, clean):
    d = tmp_path / "t-0"
    bases, end = make_log(d, clean)
    before = snapshot(d)
    rep = verify_log_dir(d)
    assert rep.ok, rep.summary()
    assert (rep.segments, rep.batches, rep.records) == (len(bases), 45, 135)
    assert (rep.start_offset, rep.end_offset) == (0, end) and rep.clean_shutdown == clean
    assert rep.epochs == [(1, 0), (2, 60), (3, 120)]
    assert "OK" in rep.summary().splitlines()[0]
    assert snapshot(d) == before


@pytest.mark.parametrize("src", FIXTURE_LOGS, ids=lambda p: p.parent.name)
def test_kafka_written_logs_verify_ok(src, tmp_path):
    d = tmp_path / "x"
    shutil.copytree(src, d)
    rep = verify_log_dir(d)
    assert rep.ok, rep.summary()
    assert rep.batches > 0 and any("missing (an open rebuilds it)" in n for n in rep.notes)
    KafkaLog.open(d).close()  # indexes rebuilt by kraft, marker written
    rep = verify_log_dir(d)
    assert rep.ok and rep.clean_shutdown and not rep.notes, rep.summary()


def test_flipped_byte_is_reported_with_file_and_position_and_changes_nothing(tmp_path):
    d = tmp_path / "t-0"
    bases, _end = make_log(d)
    p = d / f"{bases[1]:020d}.log"
    data = bytearray(p.read_bytes())
    at = len(data) // 2 + 40
    data[at] ^= 0x20
    p.write_bytes(bytes(data))
    before = snapshot(d)
    rep = verify_log_dir(d)
    assert not rep.ok
    crc = [x for x in rep.problems if "CRC" in x]
    assert len(crc) == 1 and crc[0].startswith(f"{bases[1]:020d}.log: byte position ")
    pos = int(crc[0].split("byte position ")[1].split(",")[0])
    assert pos <= at < pos + 200 and "batch base offset" in crc[0]
    assert "PROBLEM" in rep.summary() and crc[0] in rep.summary()
    assert snapshot(d) == before


def test_recover_truncates_and_reports_the_dropped_offsets(tmp_path):
    d = tmp_path / "t-0"
    bases, _end = make_log(d)
    p = d / f"{bases[1]:020d}.log"
    data = bytearray(p.read_bytes())
    data[len(data) // 2 + 40] ^= 0x20
    p.write_bytes(bytes(data))
    bad = next(x for x in verify_log_dir(d).problems if "CRC" in x)
    first_bad = int(bad.split("batch base offset ")[1].split(":")[0].split(")")[0])
    rep = recover_log_dir(d)
    text = "\n".join(rep.describe())
    assert f"{bases[1]:020d}.log" in text and f"offsets {first_bad} to {bases[2] - 1}" in text
    assert all(f"{b:020d}.log" in text for b in bases[2:])  # the later segments went too
    assert sorted(rep.deleted_segments) == bases[2:]
    after = verify_log_dir(d)
    assert after.ok, after.summary()
    assert after.end_offset == first_bad and after.clean_shutdown
    log = KafkaLog.open(d, CFG)
    assert log.load_report.clean_shutdown and log.log_end_offset == first_bad
    log.close()


def test_recover_of_a_sound_log_drops_nothing(tmp_path):
    d = tmp_path / "t-0"
    _bases, end = make_log(d, clean=False)
    rep = recover_log_dir(d)
    assert rep.describe() == [] and rep.end_offset == end
    assert verify_log_dir(d).ok


def test_gap_and_overlap_are_reported(tmp_path):
    d = tmp_path / "t-0"
    bases, _end = make_log(d)
    for suf in (".log", ".index", ".timeindex"):
        (d / f"{bases[1]:020d}{suf}").unlink()
    rep = verify_log_dir(d)
    assert any(f"{bases[2]:020d}.log" in x and f"{bases[0]:020d}.log" in x and "gap" in x for x in rep.problems)


def test_index_and_epoch_checkpoint_damage_are_reported(tmp_path):
    d = tmp_path / "t-0"
    bases, _end = make_log(d)
    idx = d / f"{bases[0]:020d}.index"
    raw = bytearray(idx.read_bytes())
    raw[4:8] = (5).to_bytes(4, "big")  # the first entry's position: not a batch boundary
    idx.write_bytes(bytes(raw))
    (d / "leader-epoch-checkpoint").write_bytes(b"0\n2\n1 0\n3 120\n")
    rep = verify_log_dir(d)
    assert any(x.startswith(f"{bases[0]:020d}.index: entry 0 points at byte position 5") for x in rep.problems)
    assert any(x.startswith("leader-epoch-checkpoint: says [(1, 0), (3, 120)]") for x in rep.problems)


def test_missing_final_time_index_entry_is_reported(tmp_path):
    d = tmp_path / "t-0"
    bases, _end = make_log(d)
    ti = d / f"{bases[0]:020d}.timeindex"
    ti.write_bytes(ti.read_bytes()[:-12])  # as the versions before the fix left it
    rep = verify_log_dir(d)
    assert any(x.startswith(f"{bases[0]:020d}.timeindex: the last entry's timestamp") for x in rep.problems)


def test_not_a_directory(tmp_path):
    with pytest.raises(NotALogDirectory):
        verify_log_dir(tmp_path / "nope")
    with pytest.raises(NotALogDirectory):
        recover_log_dir(tmp_path / "nope")
