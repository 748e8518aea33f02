"""kraft-dump-log's messages (issue 19, Deliver 8): a file that is not a segment is said to be
one, with the file, the byte position and what was found (no garbage base offset); the demo
writer's own records are opaque values, one line each, without a decode error per record."""
from __future__ import annotations

import json
import os

from support.server import run_cli, stopped_single_voter

from kraft_node.server.config import NodeConfig

DUMP = "kraft_storage.tools.dump_log"


def test_a_text_file_is_not_a_segment(tmp_path):
    p = tmp_path / "notes.log"
    p.write_text("hello, this is a text file and not a Kafka segment\n" * 3)
    r = run_cli(DUMP, p)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert lines == [f"kraft-dump-log: {p}: not a Kafka log segment or snapshot: no v2 record batch at byte "
                     "position 0: unsupported magic 32 (only record batch v2 is supported); found text "
                     "'hello, this is a text file and n'"], r.stderr
    assert "base offset" not in r.stderr  # it was a number made of the text's first 8 bytes


def test_random_and_zero_bytes(tmp_path):
    p = tmp_path / "random.log"
    p.write_bytes(bytes.fromhex("8cad604ceb83755ff43ea214ee998955") * 8)
    r = run_cli(DUMP, p)
    assert r.returncode == 1 and "not a Kafka log segment or snapshot" in r.stderr
    assert "found bytes 8c ad 60 4c eb 83 75 5f f4 3e a2 14 ee 99 89 55" in r.stderr, r.stderr
    assert "base offset" not in r.stderr
    z = tmp_path / "zeros.log"
    z.write_bytes(bytes(4096))
    r = run_cli(DUMP, z)
    assert r.returncode == 1 and "found zero bytes" in r.stderr and "4096 bytes to the end" in r.stderr, r.stderr


def test_demo_writer_records_are_opaque_values(tmp_path):
    path, acks = stopped_single_voter(str(tmp_path), acks=40)
    cfg = NodeConfig.from_file(path)
    d = cfg.metadata_partition_dir
    (seg,) = [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log")]
    r = run_cli(DUMP, seg)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""  # was: one "could not decode a record body" per batch
    payloads = [ln.split(" payload: ", 1)[1] for ln in r.stdout.splitlines()
                if ln.startswith("| offset:") and " payload: " in ln]
    values = [v for _, v in acks]
    for v in values:
        assert payloads.count(v) == 1, v  # one line per record, the value as written
    # --json: the value is there (base64), and no record carries a decodeError
    r = run_cli(DUMP, "--json", seg)
    assert r.returncode == 0 and r.stderr == ""
    recs = [rec for line in r.stdout.splitlines() for rec in json.loads(line)["records"]]
    assert not any("decodeError" in rec for rec in recs)
    assert any(rec.get("control") for rec in recs)  # control records are still decoded


def test_garbage_after_good_batches_names_the_position(tmp_path):
    path, _ = stopped_single_voter(str(tmp_path), acks=10)
    d = NodeConfig.from_file(path).metadata_partition_dir
    (seg,) = [os.path.join(d, n) for n in os.listdir(d) if n.endswith(".log")]
    size = os.path.getsize(seg)
    with open(seg, "ab") as f:
        f.write(b"GARBAGE-" * 8)
    r = run_cli(DUMP, "--batches-only", seg)
    assert r.returncode == 1
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"kraft-dump-log: {seg}: no valid record batch at byte position {size}, after "), line
    assert "found text 'GARBAGE-GARBAGE-" in line and "base offset" not in line, line
