"""kraft-dump-log on .index / .timeindex files, and --verify-index-only."""
from __future__ import annotations

import io
import shutil

from conftest import FIXTURES

from kraft_storage.log.log import KafkaLog
from kraft_storage.tools.dump_log import dump_index, main

SRC = FIXTURES / "kafka-3.7.0-combined-single-node" / "__cluster_metadata-0"


def _log_dir(tmp_path):
    d = tmp_path / "__cluster_metadata-0"
    shutil.copytree(SRC, d)
    for p in d.iterdir():
        p.chmod(0o644)
    log = KafkaLog.open(d)
    want = [log.active_segment.offset_index.entry(i) for i in range(log.active_segment.offset_index.entries)]
    twant = [log.active_segment.time_index.entry(i) for i in range(log.active_segment.time_index.entries)]
    log.close()
    return d, want, twant


def test_dump_index_prints_entries(tmp_path):
    d, want, twant = _log_dir(tmp_path)
    out = io.StringIO()
    assert dump_index(str(d / "00000000000000000000.index"), out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Dumping ")
    assert lines[1:] == [f"offset: {o} position: {p}" for o, p in want]
    out = io.StringIO()
    assert dump_index(str(d / "00000000000000000000.timeindex"), out=out) == 0
    assert out.getvalue().splitlines()[1:] == [f"timestamp: {t} offset: {o}" for t, o in twant]


def test_verify_index_only(tmp_path, capsys):
    d, want, _ = _log_dir(tmp_path)
    idx = d / "00000000000000000000.index"
    assert main(["--verify-index-only", str(idx), str(d / "00000000000000000000.timeindex")]) == 0
    assert capsys.readouterr().out == ""
    b = bytearray(idx.read_bytes())
    b[8 * 3 + 7] ^= 0x10  # entry 3 now points into the middle of a batch
    idx.write_bytes(bytes(b))
    assert main(["--verify-index-only", str(idx)]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"Mismatches in :{idx}\n") and f"Index offset: {want[3][0]}, log offset: none" in out
    b[8 * 3:8 * 4] = b[8 * 1:8 * 2]  # a repeated entry: not monotonic
    idx.write_bytes(bytes(b))
    assert main(["--verify-index-only", str(idx)]) == 1
    assert "Indexes not monotonic in :" in capsys.readouterr().out


def test_timeindex_mismatch(tmp_path, capsys):
    d, _, twant = _log_dir(tmp_path)
    ti = d / "00000000000000000000.timeindex"
    b = bytearray(ti.read_bytes())
    b[12 * 2 + 7] ^= 1
    ti.write_bytes(bytes(b))
    assert main(["--verify-index-only", str(ti)]) == 1
    assert "Found timestamp mismatch in :" in capsys.readouterr().out
