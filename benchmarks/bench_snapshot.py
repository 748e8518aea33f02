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
  page-cache ceiling: no encoding at all), ``baseline_os_write_fsync`` the
  same plus fsync (the device's bare bandwidth for this file).
* ``write-tmpfs``: the writer with freeze and the bare write+fsync on tmpfs
  (``/dev/shm``, or ``SNAP_TMPFS``): no device, so the writer's own speed.

Or, for all four write figures from one run with the same bytes as JSON
(median of ``--rounds``; rounds alternate the variants so load drifts hit
them alike)::

    python benchmarks/bench_snapshot.py [--mb 128] [--rounds 7]
* ``read``: open (scan + CRC-32C of every batch + header/footer checks),
  open + columnar decode of every record, and a FetchSnapshot-style walk of
  the file in 1 MiB raw slices.
"""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pytest

from kraft_storage.snapshot import (
    RawSnapshotReader,
    RecordsSnapshotReader,
    RecordsSnapshotWriter,
    SnapshotId,
    snapshot_path,
)

if __name__ == "__main__" and "--mb" in sys.argv:
    os.environ["SNAP_MB"] = sys.argv[sys.argv.index("--mb") + 1]
MB = int(os.environ.get("SNAP_MB", "128"))
TMPFS = os.environ.get("SNAP_TMPFS", "/dev/shm")
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


def _bare_write(path, blob, fsync=True):
    """write(2) ``blob`` in 8 MiB pieces (+ fsync): no encoding at all."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        mv = memoryview(blob)
        for i in range(0, len(blob), 8 << 20):
            os.write(fd, mv[i:i + (8 << 20)])
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


@pytest.mark.benchmark(group="write")
def test_baseline_os_write_fsync(benchmark, snapshot_dir):
    blob = snapshot_path(snapshot_dir, SID).read_bytes()
    path = os.path.join(ROOT, "baseline_fsync.bin")
    benchmark.pedantic(_bare_write, args=(path, blob), rounds=7, iterations=1)
    benchmark.extra_info["bytes"] = len(blob)


@pytest.fixture(scope="module")
def tmpfs_root():
    if not os.path.isdir(TMPFS):
        pytest.skip(f"no tmpfs at {TMPFS}")
    d = tempfile.mkdtemp(prefix="bench_snapshot_", dir=TMPFS)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.mark.benchmark(group="write-tmpfs")
def test_write_freeze_tmpfs(benchmark, tmpfs_root):
    dirs = []

    def setup():
        while dirs:
            _cleanup(dirs.pop())
        dirs.append(tempfile.mkdtemp(dir=tmpfs_root))
        return (dirs[-1],), {}
    size = benchmark.pedantic(_write, setup=setup, rounds=7, iterations=1)
    benchmark.extra_info["bytes"] = size


@pytest.mark.benchmark(group="write-tmpfs")
def test_baseline_os_write_fsync_tmpfs(benchmark, snapshot_dir, tmpfs_root):
    blob = snapshot_path(snapshot_dir, SID).read_bytes()
    path = os.path.join(tmpfs_root, "baseline.bin")
    benchmark.pedantic(_bare_write, args=(path, blob), rounds=7, iterations=1)
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


def main():
    """All four write figures in one run, same bytes, as JSON."""
    import argparse
    import json
    import statistics
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=MB)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    disk_root = ROOT
    tmp_root = tempfile.mkdtemp(prefix="bench_snapshot_", dir=TMPFS)
    try:
        ref = os.path.join(disk_root, "ref")
        os.makedirs(ref)
        size = _write(ref)
        blob = snapshot_path(ref, SID).read_bytes()
        variants = {
            "writer_disk": lambda d: _write(d),
            "bare_write_fsync_disk": lambda d: _bare_write(os.path.join(d, "bare.bin"), blob),
            "writer_tmpfs": lambda d: _write(d),
            "bare_write_fsync_tmpfs": lambda d: _bare_write(os.path.join(d, "bare.bin"), blob),
        }
        times = {k: [] for k in variants}
        for _ in range(args.rounds):
            for name, fn in variants.items():
                d = tempfile.mkdtemp(dir=tmp_root if name.endswith("tmpfs") else disk_root)
                t0 = time.perf_counter()
                fn(d)
                times[name].append(time.perf_counter() - t0)
                shutil.rmtree(d, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        out = {
            "bytes": size, "records": _n, "rounds": args.rounds,
            "disk_dir": disk_root, "tmpfs_dir": tmp_root,
            "load_average": os.getloadavg(),
            "median_ms": {k: round(v * 1e3, 1) for k, v in med.items()},
            "min_ms": {k: round(min(v) * 1e3, 1) for k, v in times.items()},
            "gb_per_s": {k: round(size / v / 1e9, 3) for k, v in med.items()},
            "writer_vs_bare_disk": round(med["bare_write_fsync_disk"] / med["writer_disk"], 3),
            "writer_vs_bare_tmpfs": round(med["bare_write_fsync_tmpfs"] / med["writer_tmpfs"], 3),
        }
        print(json.dumps(out, indent=1))
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
        shutil.rmtree(ROOT, ignore_errors=True)


if __name__ == "__main__":
    main()
