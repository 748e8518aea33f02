"""pytest-benchmark suite for KRaft snapshot files (issue 5 A; target: write and read >= 1 GB/s).

    python -m pytest benchmarks/bench_snapshot.py --benchmark-columns=median,iqr,rounds

Workload: SNAP_MB (default 128) MiB of framed metadata-like records whose
sizes are uniform in [40, 400) bytes (a TopicRecord is ~40, a
RegisterBrokerRecord ~600), given Arrow-style as the controller dumps an
image.  Each round writes a new snapshot in a temporary directory on the
repository's disk.  GB/s = snapshot file bytes / median time; divide
yourself: the file size is printed in ``extra_info``.

Groups:
* ``write``: ``create + append_framed + freeze`` (freeze fsyncs, renames,
  fsyncs the directory), and the same without freeze (encode + write(2) into
  the page cache; the writer is then aborted).  ``baseline_os_write``
  writes the finished file's bytes with plain ``os.write`` (the machine's
  page-cache ceiling: no encoding at all).
* ``read``: open (scan + CRC-32C of every batch + header/footer checks),
  open + columnar decode of every record, and a FetchSnapshot-style walk of
  the file in 1 MiB raw slices.
"""
import os
import shutil
import tempfile

import numpy as np
import pytest

from kraft_storage.snapshot import (
    RawSnapshotReader, RecordsSnapshotReader, RecordsSnapshotWriter, SnapshotId, snapshot_path)

MB = int(os.environ.get("SNAP_MB", "128"))
_rng = np.random.default_rng(5)
_n = MB * (1 << 20) // 220
LENS = _rng.integers(40, 400, _n)
OFFSETS = np.zeros(_n + 1, np.int64)
np.cumsum(LENS, out=OFFSETS[1:])
DATA = _rng.integers(0, 256, int(OFFSETS[-1]), dtype=np.uint8).tobytes()
ROOT = tempfile.mkdtemp(prefix="bench_snapshot_", dir=os.path.dirname(os.path.abspath(__file__)))
SID = SnapshotId(_n + 1000, 7)


def _write(log_dir, freeze=True):
    w = RecordsSnapshotWriter.create(log_dir, SID, last_contained_log_timestamp=1)
    w.append_framed((DATA, OFFSETS))
    if freeze:
        size = w.freeze()
    else:
        w._complete_batch()  # encode + write the last open batch too, so both variants write every record
        size = w.raw.size_in_bytes
    w.close()
    return size


@pytest.fixture(scope="module")
def snapshot_dir():
    d = os.path.join(ROOT, "read")
    os.makedirs(d, exist_ok=True)
    _write(d)
    yield d
    shutil.rmtree(ROOT, ignore_errors=True)


def _fresh_dir():
    d = tempfile.mkdtemp(dir=ROOT)
    return (d,), {}


def _cleanup(d):
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.benchmark(group="write")
def test_write_freeze(benchmark, snapshot_dir):
    dirs = []

    def setup():
        while dirs:
            _cleanup(dirs.pop())
        args, kw = _fresh_dir()
        dirs.append(args[0])
        return args, kw
    size = benchmark.pedantic(_write, setup=setup, rounds=7, iterations=1)
    benchmark.extra_info["bytes"] = size
    benchmark.extra_info["records"] = _n


@pytest.mark.benchmark(group="write")
def test_write_no_freeze(benchmark, snapshot_dir):
    d = os.path.join(ROOT, "nofreeze")
    os.makedirs(d, exist_ok=True)
    size = benchmark.pedantic(_write, args=(d, False), rounds=7, iterations=1)
    benchmark.extra_info["bytes"] = size


@pytest.mark.benchmark(group="write")
def test_baseline_os_write(benchmark, snapshot_dir):
    blob = snapshot_path(snapshot_dir, SID).read_bytes()
    path = os.path.join(ROOT, "baseline.bin")

    def run():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        mv = memoryview(blob)
        for i in range(0, len(blob), 8 << 20):
            os.write(fd, mv[i:i + (8 << 20)])
        os.close(fd)
    benchmark.pedantic(run, rounds=7, iterations=1)
    benchmark.extra_info["bytes"] = len(blob)


@pytest.mark.benchmark(group="read")
def test_read_open(benchmark, snapshot_dir):
    def run():
        with RecordsSnapshotReader.open(snapshot_dir, SID) as r:
            return r.records_count
    assert benchmark.pedantic(run, rounds=7, iterations=1) == _n
    benchmark.extra_info["bytes"] = os.path.getsize(snapshot_path(snapshot_dir, SID))


@pytest.mark.benchmark(group="read")
def test_read_columns(benchmark, snapshot_dir):
    def run():
        r = RecordsSnapshotReader.open(snapshot_dir, SID)
        n = len(r.records())
        r.close()
        return n
    assert benchmark.pedantic(run, rounds=7, iterations=1) == _n
    benchmark.extra_info["bytes"] = os.path.getsize(snapshot_path(snapshot_dir, SID))


@pytest.mark.benchmark(group="read")
def test_read_fetch_slices(benchmark, snapshot_dir):
    def run():
        total = 0
        with RawSnapshotReader.open(snapshot_dir, SID) as r:
            pos = 0
            while pos < r.size_in_bytes:
                pos += len(r.read(pos, 1 << 20))
            total = pos
        return total
    size = benchmark.pedantic(run, rounds=7, iterations=1)
    benchmark.extra_info["bytes"] = size
