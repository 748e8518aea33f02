"""A full device (issue 19, item 7): every ENOSPC in the log is a DiskFullError that says
"No space left on device" and names the file, and a restart on a full file system is
an error, never a SIGBUS.  Each test mounts its own small tmpfs (the tests run as root)."""
from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest
from conftest import REPO

from kraft_storage.errors import KraftStorageError
from kraft_storage.fileio import atomic_write
from kraft_storage.log.config import LogConfig
from kraft_storage.log.errors import DiskFullError
from kraft_storage.log.log import KafkaLog
from kraft_storage.record import build_batch

CFG = LogConfig(segment_index_bytes=256 << 10, index_interval_bytes=0)


@pytest.fixture
def tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(mnt, leave=0):
    """Fill the file system; then free ``leave`` bytes (whole pages)."""
    with open(mnt / "filler", "wb") as f:
        chunk = b"\xff" * 65536
        while True:
            try:
                f.write(chunk)
                f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
        for size in (4096, 1):
            while True:
                try:
                    os.write(f.fileno(), b"\xff" * size)
                except OSError:
                    break
    if leave:
        os.truncate(mnt / "filler", os.path.getsize(mnt / "filler") - leave)


def batch(n=3, value=b"v" * 20):
    return build_batch([(None, value) for _ in range(n)], timestamp=1_700_000_000_000)


def assert_disk_full(exc, path):
    msg = str(exc)
    assert isinstance(exc, KraftStorageError) and "No space left on device" in msg and str(path) in msg, msg


def test_append_on_a_full_device(tmpfs):
    d = tmpfs / "t-0"
    log = KafkaLog.open(d, CFG)
    log.append_as_leader(batch(), 1)
    size = log.active_segment.size
    fill(tmpfs)
    with pytest.raises(DiskFullError) as ei:
        log.append_as_leader(batch(400), 1)  # ~10 KB: more pages than there are
    assert_disk_full(ei.value, log.active_segment.log_path)
    assert log.log_end_offset == 3 and os.path.getsize(log.active_segment.log_path) == size
    os.unlink(tmpfs / "filler")
    log.append_as_leader(batch(), 1)
    log.close()
    log = KafkaLog.open(d, CFG)
    assert log.load_report.clean_shutdown and log.log_end_offset == 6
    log.close()


def test_roll_then_append_on_a_full_device_changes_nothing(tmpfs):
    """A roll on a full device either fails naming the device and changes nothing, or makes the
    new segment with sparse indexes (Kafka's setLength: no blocks yet); the append that would
    need blocks then fails with DiskFullError and leaves the log as it was."""
    d = tmpfs / "t-0"
    log = KafkaLog.open(d, CFG)
    log.append_as_leader(batch(), 1)
    fill(tmpfs)
    before = sorted(os.listdir(d))
    end = log.log_end_offset
    try:
        log.roll()
    except DiskFullError as exc:
        assert_disk_full(exc, d)
        assert sorted(os.listdir(d)) == before and len(log.segments) == 1
    sizes = {n: os.path.getsize(d / n) for n in os.listdir(d)}
    with pytest.raises(DiskFullError) as ei:
        log.append_as_leader(batch(), 1)
    assert_disk_full(ei.value, d)
    assert log.log_end_offset == end
    assert {n: os.path.getsize(d / n) for n in os.listdir(d)} == sizes
    os.unlink(tmpfs / "filler")
    log.append_as_leader(batch(), 1)  # the active segment is still whole and active
    log.roll()
    log.append_as_leader(batch(), 1)
    assert log.log_end_offset == end + 6
    log.close()


def test_indexes_hold_blocks_only_for_what_is_written(tmpfs):
    """An index file has its whole length (sparse) but blocks only for the entries written and
    one reservation chunk ahead: thousands of partition logs do not each hold 20 MiB."""
    from kraft_storage.log.index import RESERVE_CHUNK
    d = tmpfs / "t-0"
    log = KafkaLog.open(d, CFG.replace(segment_index_bytes=10 << 20))
    log.append_as_leader(batch(), 1)
    for name in ("00000000000000000000.index", "00000000000000000000.timeindex"):
        st = os.stat(d / name)
        assert st.st_size >= (10 << 20) - 12
        assert st.st_blocks * 512 <= 2 * RESERVE_CHUNK, (name, st.st_blocks)
    log.close()


def test_open_of_a_new_log_on_a_full_device(tmpfs):
    """The open makes the segment with sparse indexes (as Kafka: no blocks yet) or fails
    leaving no segment behind; the first append then fails naming the device, and writes no
    partial batch."""
    fill(tmpfs, leave=8192)
    d = tmpfs / "t-0"
    try:
        log = KafkaLog.open(d, CFG)
    except DiskFullError as exc:
        assert_disk_full(exc, d)
        assert os.listdir(d) == []  # the failed open left no segment behind
        return
    with pytest.raises(DiskFullError) as ei:
        for _ in range(200):
            log.append_as_leader(batch(50, b"v" * 100), 1)
    assert_disk_full(ei.value, d)
    end = log.log_end_offset
    log.close()
    os.unlink(tmpfs / "filler")
    log = KafkaLog.open(d, CFG)
    assert log.log_end_offset == end and log.load_report.clean_shutdown
    log.close()


def test_checkpoint_write_on_a_full_device(tmpfs):
    fill(tmpfs)
    p = tmpfs / "leader-epoch-checkpoint"
    with pytest.raises(DiskFullError) as ei:
        atomic_write(str(p), b"0\n0\n")
    assert_disk_full(ei.value, p)
    assert not os.path.exists(str(p) + ".tmp")


def test_flush_and_close_on_a_full_device_report_disk_full(tmpfs, monkeypatch):
    """fdatasync's ENOSPC (real file systems with delayed allocation) is a DiskFullError;
    close then leaves no clean-shutdown marker (the data may not be on disk)."""
    d = tmpfs / "t-0"
    log = KafkaLog.open(d, CFG)
    log.append_as_leader(batch(), 1)
    path = log.active_segment.log_path

    def enospc(fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "fdatasync", enospc)
    with pytest.raises(DiskFullError) as ei:
        log.flush()
    assert_disk_full(ei.value, path)
    with pytest.raises(DiskFullError):
        log.close()
    monkeypatch.undo()
    assert ".kafka_cleanshutdown" not in os.listdir(d)
    log = KafkaLog.open(d, CFG)
    assert not log.load_report.clean_shutdown and log.log_end_offset == 3
    log.close()


RESTART = textwrap.dedent("""
    import sys
    sys.path.insert(0, sys.argv[2])
    from kraft_storage.errors import KraftStorageError
    from kraft_storage.log.config import LogConfig
    from kraft_storage.log.log import KafkaLog
    from kraft_storage.record import build_batch
    try:
        log = KafkaLog.open(sys.argv[1], LogConfig(segment_index_bytes=256 << 10, index_interval_bytes=0))
    except KraftStorageError as exc:
        print("open failed:", exc)
        sys.exit(3)
    try:
        for _ in range(50):
            log.append_as_leader(build_batch([(None, b"v")], timestamp=1), 1)
        log.close()
    except KraftStorageError as exc:
        print("append failed:", exc)
        sys.exit(3)
    print("opened")
""")


@pytest.mark.parametrize("clean", [True, False])
def test_restart_on_a_full_device_is_an_error_not_a_sigbus(tmpfs, clean):
    """The restart grows the active segment's indexes (and, unclean, rebuilds them by
    writing through the map into pages the full device cannot give: that was the SIGBUS)."""
    d = tmpfs / "t-0"
    log = KafkaLog.open(d, CFG.replace(index_interval_bytes=1 << 20))
    for _ in range(100):
        log.append_as_leader(batch(1), 1)
    log.close()  # the .index is trimmed to 0 bytes: its first entry will need a new page
    assert os.path.getsize(log.segments[0].offset_index.path) == 0
    if not clean:
        os.unlink(d / ".kafka_cleanshutdown")
    fill(tmpfs)
    before = {n: (d / n).read_bytes() for n in os.listdir(d)}
    r = subprocess.run([sys.executable, "-c", RESTART, str(d), str(REPO)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 3, (r.returncode, r.stdout, r.stderr)  # -7 would be SIGBUS
    assert "No space left on device" in r.stdout and str(d) in r.stdout
    if not clean:
        # the rebuild's blocks are reserved before the old entries are dropped: the failed
        # restart changed nothing
        assert r.stdout.startswith("open failed"), r.stdout
        assert {n: (d / n).read_bytes() for n in os.listdir(d)} == before
    else:
        # a clean restart needs no new blocks (the indexes grow sparse, as Kafka's): the first
        # append is what fails, and it writes nothing
        assert r.stdout.startswith("append failed"), r.stdout
        assert (d / "00000000000000000000.log").read_bytes() == before["00000000000000000000.log"]
    os.unlink(tmpfs / "filler")
    log = KafkaLog.open(d, CFG)
    assert log.log_end_offset == 100
    assert not log.load_report.clean_shutdown  # the restarted process died without a close
    log.close()
