"""Multi-process KRaft clusters on 127.0.0.1: ``python -m kraft_node.server.start cfg`` per node.

* 3 and 5 voters plus an observer elect a leader, replicate, answer
  ``kraft-metadata-quorum describe --status``, and exit 0 on SIGTERM.
* kill -9 of the leader in a loop while every node runs ``--demo-writer``
  (the leader appends numbered records and prints ``ACK <offset> <value>``
  once committed): afterwards every acknowledged value is in every node's
  log, at its acknowledged offset.

Every wait is bounded; processes are always killed in ``finally``.
"""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_raft_driver_support import CLUSTER_ID, cluster_properties  # noqa: E402

from kraft_node.network import KafkaConnection  # noqa: E402
from kraft_node.raft.io.kafka_log import KafkaRaftLog  # noqa: E402
from kraft_node.server.config import NodeConfig  # noqa: E402
from kraft_node.server.tools import metadata_quorum  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Node:
    def __init__(self, cfg_path: str, writer: bool):
        self.cfg_path = cfg_path
        self.cfg = NodeConfig.from_file(cfg_path)
        self.id = self.cfg.node_id
        self.port = self.cfg.controller_endpoint.port
        self.writer = writer
        self.proc: subprocess.Popen | None = None
        self.acks: list[tuple[int, str]] = []
        self.starts = 0

    def start(self):
        self.starts += 1
        self.term_sent = False
        args = [sys.executable, "-m", "kraft_node.server.start", self.cfg_path, "--shutdown-timeout-seconds", "3"]
        if self.writer:
            args += ["--demo-writer", "--writer-interval-ms", "10", "--writer-batch", "5"]
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        err = open(os.path.join(os.path.dirname(self.cfg_path), f"stderr.{self.starts}"), "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env, text=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def wait_serving(self, timeout=15.0):
        """Until the node accepts connections (its signal handlers are installed by then)."""
        import socket
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"node {self.id} is not serving after {timeout}s")

    def _read(self, proc):
        for line in proc.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "ACK":
                self.acks.append((int(parts[1]), parts[2]))

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig):
        if self.alive:
            self.proc.send_signal(sig)
            if sig == signal.SIGTERM:
                self.term_sent = True

    def kill9(self):
        if self.alive:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout=15) -> int:
        if self.proc is None:
            return 0
        if self.alive and not self.term_sent:  # a second SIGTERM during exit would kill it
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"node {self.id} did not exit within {timeout}s after SIGTERM") from None

    def stderr(self):
        d = os.path.dirname(self.cfg_path)
        return "".join(open(os.path.join(d, f"stderr.{i}")).read() for i in range(1, self.starts + 1))


async def _describe_leader(port) -> int | None:
    """Node id of the leader if the node on ``port`` is the leader (DescribeQuorum succeeds)."""
    try:
        conn = await KafkaConnection.open("127.0.0.1", port, timeout=1)
    except OSError:
        return None
    try:
        q = await conn.request(metadata_quorum.describe_request(), 2, timeout=1)
        p = q.topics[0].partitions[0]
        return p.leader_id if q.error_code == 0 and p.error_code == 0 else None
    except Exception:
        return None
    finally:
        await conn.close()


def find_leader(nodes, exclude=None, timeout=15.0) -> Node:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            if n.alive and n is not exclude and asyncio.run(_describe_leader(n.port)) == n.id:
                return n
        time.sleep(0.02)
    raise AssertionError(f"no leader within {timeout}s\n" + "\n".join(n.stderr()[-2000:] for n in nodes))


def read_log(node: Node) -> dict[int, bytes]:
    log = KafkaRaftLog(node.cfg.metadata_partition_dir)
    out = {}
    pos = log.start_offset
    while pos < log.end_offset:
        bs = log.read(pos, 1 << 22)
        for b in bs:
            if not b.is_control:
                for i, r in enumerate(b.records):
                    out[b.base_offset + i] = r
        pos = bs[-1].next_offset
    log.close()
    return out


def quorum_status(port) -> str:
    r = subprocess.run([sys.executable, "-m", "kraft_node.server.tools.metadata_quorum", "--bootstrap-controller",
                        f"127.0.0.1:{port}", "describe", "--status"], capture_output=True, text=True, timeout=20,
                       cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 0, r.stderr
    return r.stdout


def wait_acks(nodes, more_than: int, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(len(n.acks) for n in nodes) > more_than:
            return
        time.sleep(0.02)
    raise AssertionError(f"no new acknowledged writes within {timeout}s")


def check_acks_everywhere(nodes):
    acks = {}
    for n in nodes:
        for off, val in n.acks:
            assert acks.setdefault(off, val) == val, f"two values acknowledged at offset {off}"
    assert acks, "nothing was acknowledged"
    for n in nodes:
        log = read_log(n)
        missing = [(o, v) for o, v in acks.items() if log.get(o) != v.encode()]
        assert not missing, f"node {n.id} lost {len(missing)} acknowledged records, e.g. {missing[:3]}"
    return acks


@pytest.mark.parametrize("voters", [3, 5])
def test_voters_and_observer_replicate_and_stop_gracefully(tmp_path, voters):
    paths = cluster_properties(str(tmp_path), voters, observers=1)
    nodes = [Node(p, writer=True) for p in paths]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        leader = find_leader(nodes)
        wait_acks(nodes, 50)
        deadline = time.monotonic() + 10
        while True:
            status = quorum_status(leader.port)
            if f'"id": {voters + 1}' in status.split("CurrentObservers:")[1] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert f"ClusterId:              {CLUSTER_ID}" in status
        assert f"LeaderId:               {leader.id}" in status
        assert f'"id": {voters + 1}' in status.split("CurrentObservers:")[1], status
        hwm = int(status.split("HighWatermark:")[1].split()[0])
        assert hwm > 50
        for n in nodes:
            n.signal(signal.SIGUSR1)
        time.sleep(1.5)  # let the last commits reach every follower and the observer
        # graceful resignation: SIGTERM the leader, a successor must take over quickly
        t0 = time.monotonic()
        leader.signal(signal.SIGTERM)
        new = find_leader(nodes, exclude=leader, timeout=10)
        handover = time.monotonic() - t0
        assert leader.stop() == 0, leader.stderr()[-3000:]
        assert "resigned as leader" in leader.stderr()
        for n in nodes:
            if n is not leader:
                assert n.stop() == 0, n.stderr()[-3000:]
        check_acks_everywhere(nodes)
        print(f"\n{voters} voters: leader {leader.id} -> {new.id} after SIGTERM in {handover * 1000:.0f} ms")
        assert handover < 3.0
    finally:
        for n in nodes:
            n.kill9()


@pytest.mark.parametrize("voters", [3, 5])
def test_kill_leader_in_a_loop_loses_no_acknowledged_write(tmp_path, voters):
    paths = cluster_properties(str(tmp_path), voters, observers=1)
    nodes = [Node(p, writer=True) for p in paths]
    failovers = []
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        for _ in range(3):
            leader = find_leader(nodes)
            wait_acks(nodes, sum(len(n.acks) for n in nodes) + 30)
            t0 = time.monotonic()
            leader.kill9()
            new = find_leader(nodes, exclude=leader, timeout=15)
            failovers.append(time.monotonic() - t0)
            assert new is not leader
            leader.start()  # the killed node comes back and catches up
            leader.wait_serving()
        wait_acks(nodes, sum(len(n.acks) for n in nodes) + 30)
        for n in nodes:
            n.signal(signal.SIGUSR1)
        time.sleep(2.0)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
        acks = check_acks_everywhere(nodes)
        print(f"\n{voters} voters: {len(acks)} acknowledged records survived 3 leader kills; failover times (s): "
              + ", ".join(f"{f:.2f}" for f in failovers))
        assert max(failovers) < 10, failovers
    finally:
        for n in nodes:
            n.kill9()


def test_server_start_without_config_formats_and_runs_the_default_node(tmp_path):
    """``kraft-server-start`` alone: the embedded config (127.0.0.1:19093, data under the
    temp dir -- here TMPDIR=tmp_path) is formatted on first use, the node leads, exits 0."""
    import socket
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", 19093))
    except OSError:
        pytest.skip("port 19093 of the embedded default config is in use on this machine")
    finally:
        s.close()
    env = dict(os.environ, PYTHONPATH=REPO, TMPDIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "kraft_node.server.start", "--exit-after-seconds", "2"],
                       capture_output=True, text=True, timeout=30, cwd=REPO, env=env)
    assert r.returncode == 0, r.stderr
    assert "formatting it with the embedded default config" in r.stderr
    assert "node 1 became leader of epoch 1" in r.stderr
    assert os.path.exists(tmp_path / "kraft-default-node-1" / "meta.properties")
    # second start: already formatted, no new cluster id, epoch moves on (a restarted leader
    # starts Resigned and waits one election timeout, 1-2 s by default, before leading again)
    r2 = subprocess.run([sys.executable, "-m", "kraft_node.server.start", "--exit-after-seconds", "4"],
                        capture_output=True, text=True, timeout=30, cwd=REPO, env=env)
    assert r2.returncode == 0, r2.stderr
    import re
    assert "formatting it" not in r2.stderr
    assert re.search(r"node 1 became leader of epoch ([2-9]|\d\d)", r2.stderr), r2.stderr


def test_server_refuses_unformatted_storage(tmp_path):
    paths = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(paths[0])
    os.remove(os.path.join(cfg.metadata_log_dir, "meta.properties"))
    r = subprocess.run([sys.executable, "-m", "kraft_node.server.start", paths[0]], capture_output=True, text=True,
                       timeout=30, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))
    assert r.returncode == 1 and "kraft-storage format" in r.stderr


def test_startup_heap_is_frozen_out_of_the_collectors_reach():
    """kraft-server-start freezes what is alive once the node started (``gc.freeze``), so
    a full collection no longer walks modules and codecs in the middle of a commit."""
    import gc

    from kraft_node.server.start import freeze_startup_heap
    before = gc.get_freeze_count()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > before
        assert gc.get_count()[0] < 10  # the young generation was emptied first
    finally:
        gc.unfreeze()
