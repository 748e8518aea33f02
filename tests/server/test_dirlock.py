"""Log-directory locks (issue 19, Deliver 1): Kafka's ``.lock`` in every log dir, taken before
anything is read or written by every command that writes; a second process gets a one-line
error naming the directory and the holder's pid, and changes nothing."""
from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from support.cluster import Node
from support.raft import CLUSTER_ID, cluster_properties, free_ports
from support.server import ENV, dir_differences, run_cli, run_server, snapshot_dir

from kraft_node.server.config import NodeConfig
from kraft_node.server.tools.storage import format_storage
from kraft_storage.dirlock import LOCK_FILE, DirLock, DirLockError, lock_dirs, lock_holder


def test_second_lock_is_refused_with_the_holders_pid(tmp_path):
    lk = DirLock.acquire(str(tmp_path))
    try:
        assert lock_holder(str(tmp_path)) == os.getpid()
        # flock belongs to the open file description: a second open in this process conflicts too
        with pytest.raises(DirLockError) as ei:
            DirLock.acquire(str(tmp_path))
        msg = str(ei.value)
        assert msg == (f"log directory {tmp_path} is locked by another process (pid {os.getpid()}): "
                       "is another kraft node running on it?")
        assert ei.value.pid == os.getpid() and ei.value.directory == str(tmp_path)
    finally:
        lk.release()
    again = DirLock.acquire(str(tmp_path))  # released: free again
    again.release()
    assert os.path.exists(tmp_path / LOCK_FILE)  # the file stays, as Kafka's does


def test_lock_dirs_is_all_or_none(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    held = DirLock.acquire(str(b))
    try:
        with pytest.raises(DirLockError, match=f"log directory {b} is locked"):
            lock_dirs([str(a), str(b)])
        DirLock.acquire(str(a)).release()  # a was released when b failed
    finally:
        held.release()
    locks = lock_dirs([str(a), str(a) + "/", str(b), str(tmp_path / "missing")])
    try:
        assert locks.directories == [str(a), str(b)]  # duplicates once; a missing dir is skipped
        assert not os.path.exists(tmp_path / "missing")
    finally:
        locks.release()


def test_a_killed_holder_releases_the_lock(tmp_path):
    code = ("import sys, time; from kraft_storage.dirlock import DirLock; lk = DirLock.acquire(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(60)")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                         cwd=REPO, env=ENV)
    try:
        assert p.stdout.readline().strip() == "locked"
        with pytest.raises(DirLockError, match=rf"\(pid {p.pid}\)"):
            DirLock.acquire(str(tmp_path))
        p.kill()
        p.wait(10)
        DirLock.acquire(str(tmp_path)).release()  # kill -9 released it
    finally:
        p.kill()
        p.wait(10)


def test_second_server_on_the_same_log_dir_is_refused_and_changes_nothing(tmp_path):
    """The issue's repro: two kraft-server-start whose configs differ only in the port, on
    the same log.dirs.  The second exits 1 with the lock error, the first keeps leading."""
    # The first node runs the controller: no idle NoOpRecords, so once its own first records
    # are written (below) its log holds still while the second start is refused.
    (path,) = cluster_properties(str(tmp_path), 1, extra={"metadata.max.idle.interval.ms": "0"})
    node = Node(path, writer=False)
    try:
        node.start()
        node.wait_serving()
        deadline = time.monotonic() + 15
        while "became leader" not in node.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "became leader" in node.stderr(), node.stderr()
        time.sleep(0.3)
        data_dir = NodeConfig.from_file(path).metadata_log_dir
        before = snapshot_dir(data_dir)
        # the node's own first writes (the bootstrap records, its controller registration) are
        # done once the directory holds still for a second
        deadline = time.monotonic() + 15
        while True:
            time.sleep(1.0)
            now = snapshot_dir(data_dir)
            if now == before or time.monotonic() > deadline:
                break
            before = now
        (other_port,) = free_ports(1)
        text = open(path).read()
        port = NodeConfig.from_file(path).controller_endpoint.port
        other = tmp_path / "other.properties"
        other.write_text(text.replace(f"127.0.0.1:{port}", f"127.0.0.1:{other_port}"))
        r = run_server(str(other), "--exit-after-seconds", "5", timeout=30)
        assert r.returncode == 1, r.stderr
        lines = r.stderr.strip().splitlines()
        assert lines == [f"kraft-server-start: log directory {data_dir} is locked by another process "
                         f"(pid {node.proc.pid}): is another kraft node running on it?"], r.stderr
        assert dir_differences(before, snapshot_dir(data_dir)) == []
        # format and recover are refused too
        r = run_cli("kraft_node.server.tools.storage", "format", "-c", str(other), "-t", CLUSTER_ID, "-g")
        assert r.returncode == 1 and f"(pid {node.proc.pid})" in r.stderr, r.stderr
        assert dir_differences(before, snapshot_dir(data_dir)) == []
        assert node.alive
        assert node.stop() == 0, node.stderr()[-3000:]
    finally:
        node.kill9()
    # once the node is gone the directory is free again
    r = run_server(path, "--exit-after-seconds", "0.5", timeout=30)
    assert r.returncode == 0, r.stderr


def test_format_locks_before_it_reads(tmp_path, capsys):
    cfgp = tmp_path / "server.properties"
    (port,) = free_ports(1)
    cfgp.write_text(f"process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@127.0.0.1:{port}\n"
                    f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
                    f"log.dirs={tmp_path}/a\nmetadata.log.dir={tmp_path}/m\n")
    cfg = NodeConfig.from_file(str(cfgp))
    (tmp_path / "m").mkdir()
    held = DirLock.acquire(str(tmp_path / "m"))
    try:
        from kraft_node.server.tools.storage import main
        assert main(["format", "-c", str(cfgp), "-t", CLUSTER_ID]) == 1
        err = capsys.readouterr().err.strip()
        assert err == (f"kraft-storage: log directory {tmp_path}/m is locked by another process "
                       f"(pid {os.getpid()}): is another kraft node running on it?")
        assert sorted(os.listdir(tmp_path / "m")) == [LOCK_FILE]  # nothing written
        assert not os.path.exists(tmp_path / "a" / "meta.properties")  # all or none
    finally:
        held.release()
    # Kafka's format tolerates .lock, and so does kraft's: the locked dir formats fine now
    assert format_storage(cfg, CLUSTER_ID, out=io.StringIO()) == 0
    assert sorted(os.listdir(tmp_path / "m")) == [LOCK_FILE, "bootstrap.checkpoint", "meta.properties"]
    DirLock.acquire(str(tmp_path / "m")).release()  # format released its locks


def test_node_takes_and_releases_the_locks(tmp_path):
    import asyncio

    from kraft_node.server.node import KraftNode
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def go():
        n = KraftNode.from_config(cfg)
        try:
            with pytest.raises(DirLockError, match="is locked by another process"):
                KraftNode.from_config(cfg)
        finally:
            await n.close()
        await KraftNode.from_config(cfg).close()  # free again after close
    asyncio.run(go())


def test_default_config_locks_before_it_formats(tmp_path):
    """kraft-server-start without a config formats the embedded default's dir on first use:
    under the lock, so a second one started at the same moment cannot format it too."""
    d = tmp_path / "kraft-default-node-1"
    d.mkdir()
    held = DirLock.acquire(str(d))
    try:
        r = subprocess.run([sys.executable, "-m", "kraft_node.server.start", "--exit-after-seconds", "1"],
                           capture_output=True, text=True, timeout=30, cwd=REPO, env=dict(ENV, TMPDIR=str(tmp_path)))
    finally:
        held.release()
    assert r.returncode == 1
    assert r.stderr.strip() == (f"kraft-server-start: log directory {d} is locked by another process "
                                f"(pid {os.getpid()}): is another kraft node running on it?")
    assert os.listdir(d) == [LOCK_FILE]  # not formatted


def test_lock_file_is_in_every_log_dir_of_a_running_node(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1, extra={})
    cfg = NodeConfig.from_file(path)
    node = Node(path, writer=False)
    try:
        node.start()
        node.wait_serving()
        for d in cfg.all_log_dirs:
            assert lock_holder(d) == node.proc.pid
            with pytest.raises(DirLockError):
                DirLock.acquire(d)
        node.signal(signal.SIGTERM)
        assert node.stop() == 0
    finally:
        node.kill9()
    for d in cfg.all_log_dirs:
        DirLock.acquire(d).release()
