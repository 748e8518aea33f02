"""Disk full at the node (issue 19, Deliver 7): the fail-stop on ENOSPC says "No space left on
device" with the path, in one line, and prints no traceback; a restart on the full device
is an error, never a SIGBUS.  On a small tmpfs mounted inside the test (needs root, as CI)."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest
from support.raft import cluster_properties
from support.server import run_server

from kraft_node.server.config import NodeConfig


@pytest.fixture
def small_tmpfs(tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.fail("this test mounts a tmpfs: run it as root (CI does)", pytrace=False)
    # room for the metadata log's two 10 MiB index files (reserved before they are mmap'd)
    # and a few MiB of records
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=26m", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    assert r.returncode == 0, f"mount -t tmpfs failed: {r.stderr}"
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_disk_full_fail_stop_says_no_space_left_with_the_path(small_tmpfs):
    (path,) = cluster_properties(small_tmpfs, 1)
    cfg = NodeConfig.from_file(path)
    r = run_server(path, "--demo-writer", "--writer-interval-ms", "1", "--writer-batch", "2000",
                   "--exit-after-seconds", "60", timeout=120)
    assert r.returncode == 2, r.stderr[-3000:]  # the fail-stop, not a crash, not a clean exit
    assert "Traceback" not in r.stderr, r.stderr[-5000:]
    full = [ln for ln in r.stderr.splitlines() if "No space left on device" in ln]
    assert full, r.stderr[-3000:]
    assert any(cfg.metadata_partition_dir in ln for ln in full), "\n".join(full)
    assert any("CRITICAL" in ln for ln in full), r.stderr[-3000:]
    # a restart on the full device: an error that says so, never a SIGBUS (an mmap'd index
    # on pages the device could not give)
    r2 = run_server(path, "--exit-after-seconds", "1", timeout=60)
    assert r2.returncode not in (-signal.SIGBUS, 128 + signal.SIGBUS), r2.stderr[-3000:]
    assert "Traceback" not in r2.stderr, r2.stderr[-5000:]
    if r2.returncode != 0:
        assert "No space left on device" in r2.stderr, r2.stderr[-3000:]
