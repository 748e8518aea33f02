"""Multi-process clusters for the tests (no tests here): ``Node`` runs one
``python -m kraft_node.server.start cfg`` process and collects the demo writer's ``ACK`` lines;
``find_leader`` asks each node over DescribeQuorum; ``wait_acks`` and ``check_acks_everywhere``
check that every acknowledged write is in every node's log at its offset."""
from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time

from conftest import REPO

from kraft_node.network import KafkaConnection
from kraft_node.raft.io.kafka_log import KafkaRaftLog
from kraft_node.server.config import NodeConfig
from kraft_node.server.tools import metadata_quorum


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
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        err = open(os.path.join(os.path.dirname(self.cfg_path), f"stderr.{self.starts}"), "w")
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, cwd=REPO, env=env, text=True)
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()

    def wait_serving(self, timeout=40.0):
        """Until the node accepts connections (its signal handlers are installed by then).
        Six nodes started at once take ~2 s of CPU each to import and open their logs: 12-13 s
        to listen on 2 cores at load 5, hence the 40 s bound."""
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


async def describe_leader(port) -> int | None:
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
            if n.alive and n is not exclude and asyncio.run(describe_leader(n.port)) == n.id:
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
