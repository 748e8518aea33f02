"""kraft-dump-log: JSON Lines fields, decoded bodies, damage handling, the example log."""
import base64
import io
import json
import subprocess
import sys

import pytest
from conftest import batch_params

from kraft_storage.record import decode_records, scan_batches
from kraft_storage.tools import dump_log


def run(args):
    out, err = io.StringIO(), io.StringIO()
    rc = 0
    for path in args:
        rc |= dump_log.dump_file(path, True, out, err)
    return rc, [json.loads(line) for line in out.getvalue().splitlines()], err.getvalue()


@pytest.mark.parametrize("path", batch_params(), ids=lambda p: "/".join(p.parts[-3:]))
def test_json_matches_the_codec(path):
    rc, lines, err = run([str(path)])
    assert rc == 0 and err == ""
    data = path.read_bytes()
    scan = scan_batches(data)
    assert len(lines) == len(scan)
    assert list(lines[0]) == list(dump_log.BATCH_FIELDS)
    cols = decode_records(data)
    recs = [r for line in lines for r in line["records"]]
    assert [r["offset"] for r in recs] == cols.offset.tolist()
    assert [None if r["value"] is None else base64.b64decode(r["value"]) for r in recs] == cols.values()
    for line, h in zip(lines, scan.headers):
        assert line["position"] == h["position"] and line["size"] == h["size"] and line["crcValid"]
    # Every record of Kafka's metadata files decodes (issue 3's decoders).
    for r in recs:
        assert ("metadata" in r) or ("control" in r), r


def test_corrupt_file_prints_good_batches_then_fails(tmp_path, fixtures_dir):
    src = fixtures_dir / "kafka-4.2-mv29-combined-single-node" / "bootstrap.checkpoint"
    data = src.read_bytes()
    bad = tmp_path / "bad.checkpoint"
    bad.write_bytes(data[:-10])  # tear the last batch
    rc, lines, err = run([str(bad)])
    assert rc == 1
    assert [line["baseOffset"] for line in lines] == [0, 1]
    assert "truncated batch" in err and "position 336" in err and str(bad) in err


def test_crc_mismatch_is_reported(tmp_path, fixtures_dir):
    data = bytearray((fixtures_dir / "kafka-4.2-mv29-combined-single-node" / "bootstrap.checkpoint").read_bytes())
    data[100] ^= 1
    p = tmp_path / "crc.checkpoint"
    p.write_bytes(bytes(data))
    rc, lines, err = run([str(p)])
    assert rc == 1 and len(lines) == 3
    assert [line["crcValid"] for line in lines] == [True, False, True]
    assert lines[1]["records"] == [] and "CRC mismatch" in err


def test_missing_file_is_a_clear_error(tmp_path):
    rc, lines, err = run([str(tmp_path / "nope.log")])
    assert rc == 1 and lines == [] and "nope.log" in err


def test_cli_example_and_human_output():
    out = subprocess.run([sys.executable, "-m", "kraft_storage.tools.dump_log", "--example"],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("Dumping ") and "baseOffset: 0 lastOffset: 1 count: 2" in out
    assert '"type":"TopicRecord"' in out and "isvalid: true" in out
    js = subprocess.run([sys.executable, "-m", "kraft_storage.tools.dump_log", "--example", "--json"],
                        capture_output=True, text=True, check=True).stdout.splitlines()
    types = [r["metadata"]["type"] for line in js for r in json.loads(line)["records"]]
    assert types[:3] == ["FeatureLevelRecord", "FeatureLevelRecord", "RegisterBrokerRecord"]
    assert types.count("PartitionRecord") == 6
