"""Multi-process clusters with brokers (issue 24), no tests here.

``ServerProcess`` runs one ``kraft-server-start CONFIG`` (the console script when it is on PATH,
else ``python -m kraft_node.server.start``) with its stderr in a file beside the config;
``BrokerCluster`` writes the configs with :func:`support.brokers.cluster_with_brokers` (controllers
1..c, brokers 101..) and starts, finds and stops the processes.  The wire helpers ask one node
with kraft's own client and the generated codecs (Metadata v12, DescribeCluster v1, DescribeQuorum),
so a test checks what a Kafka client would see without depending on a client library's caching.

Every wait has a deadline and fails with the tail of the processes' stderr; ``close`` kills
whatever still runs (SIGKILL to the process ids this helper started, nothing else).
"""
from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from kraft_node.network import KafkaConnection
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.metadata import MetadataRequest
from kraft_node.server.config import NodeConfig
from support.brokers import broker_port, cluster_with_brokers
from support.cluster import describe_leader as cluster_describe_leader

#: the repository (the processes run there with it on PYTHONPATH); not conftest's, so that
#: ``benchmarks/broker_bench.py`` can use this module outside pytest
REPO = Path(__file__).resolve().parents[2]

#: the line kraft-server-start logs once a node has started (a broker: once unfenced)
STARTED_MARK = " started as "
SERVING_MARK = "serving Kafka clients on"


def server_command() -> list[str]:
    script = shutil.which("kraft-server-start")
    return [script] if script else [sys.executable, "-m", "kraft_node.server.start"]


class ServerProcess:
    """One node process.  ``starts`` counts the starts; ``stderr.<n>`` holds start n's log."""

    def __init__(self, cfg_path: str, shutdown_timeout_s: float = 5.0):
        self.cfg_path = cfg_path
        self.cfg = NodeConfig.from_file(cfg_path)
        self.id = self.cfg.node_id
        self.is_broker = "broker" in self.cfg.roles
        self.is_controller = "controller" in self.cfg.roles
        self.controller_port = self.cfg.controller_endpoint.port if self.is_controller else None
        self.port = broker_port(cfg_path) if self.is_broker else None
        self.shutdown_timeout_s = shutdown_timeout_s
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.started_at = 0.0

    def __repr__(self) -> str:
        return f"{'broker' if self.is_broker else 'controller'} {self.id}"

    @property
    def dir(self) -> str:
        return os.path.dirname(self.cfg_path)

    @property
    def metadata_dir(self) -> str:
        return self.cfg.metadata_partition_dir

    def _stderr_path(self, n: int) -> str:
        return os.path.join(self.dir, f"stderr.{n}")

    def start(self) -> None:
        assert not self.alive, f"{self} is already running"
        self.starts += 1
        args = server_command() + [self.cfg_path, "--shutdown-timeout-seconds", str(self.shutdown_timeout_s)]
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        with open(self._stderr_path(self.starts), "w") as err:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                                         cwd=REPO, env=env)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log(self) -> str:
        """This start's stderr so far."""
        try:
            with open(self._stderr_path(self.starts)) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stderr_tail(self, n: int = 3000) -> str:
        return f"--- {self} (start {self.starts}) ---\n" + self.log()[-n:]

    def wait_started(self, timeout: float = 30.0) -> float:
        """Until this start logged that it started (a broker: unfenced and serving).  Returns the
        seconds from the process start to that moment (as seen by polling its log every 5 ms)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if STARTED_MARK in self.log():
                return time.monotonic() - self.started_at
            if not self.alive:
                raise AssertionError(f"{self} exited with {self.proc.returncode if self.proc else None} "
                                     f"before it started\n{self.stderr_tail()}")
            time.sleep(0.005)
        raise AssertionError(f"{self} did not start within {timeout}s\n{self.stderr_tail()}")

    def kill9(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def terminate(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise AssertionError(f"{self} did not exit within {timeout}s\n{self.stderr_tail()}") from None

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then the exit code (killed and an error after ``timeout``)."""
        if self.proc is None:
            return 0
        self.terminate()
        return self.wait_exit(timeout)


class BrokerCluster:
    """``controllers`` controller processes and ``brokers`` broker processes on 127.0.0.1."""

    def __init__(self, base: str, controllers: int = 3, brokers: int = 3, *, extra: dict | None = None,
                 broker_extra: dict | None = None, shutdown_timeout_s: float = 5.0):
        self.paths = cluster_with_brokers(base, controllers, brokers, extra=extra, broker_extra=broker_extra)
        self.nodes = {nid: ServerProcess(p, shutdown_timeout_s) for nid, p in self.paths.items()}
        self.controllers = [n for n in self.nodes.values() if n.is_controller]
        self.brokers = [n for n in self.nodes.values() if n.is_broker]

    def start(self, timeout: float = 60.0) -> None:
        for n in self.nodes.values():
            n.start()
        deadline = time.monotonic() + timeout
        for n in self.nodes.values():
            n.wait_started(max(0.1, deadline - time.monotonic()))

    def close(self) -> None:
        for n in self.nodes.values():
            n.kill9()

    def stderr(self) -> str:
        return "\n".join(n.stderr_tail() for n in self.nodes.values())

    def bootstrap(self, broker: ServerProcess) -> str:
        return f"127.0.0.1:{broker.port}"

    def active_controller(self, timeout: float = 20.0, exclude: ServerProcess | None = None) -> ServerProcess:
        """The controller that says it leads (DescribeQuorum answered without error by itself)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for n in self.controllers:
                if n.alive and n is not exclude and run(describe_leader(n.controller_port)) == n.id:
                    return n
            time.sleep(0.02)
        raise AssertionError(f"no active controller within {timeout}s\n{self.stderr()}")


def run(coro, timeout: float = 30.0):
    """Run ``coro`` on a fresh event loop, bounded by ``timeout``."""
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def describe_leader(port: int | None) -> int | None:
    """The leader id the controller on ``port`` reports if it is the leader itself, else None."""
    return None if port is None else await cluster_describe_leader(port)


async def metadata(port: int, topics: list[str] | None = None, version: int = 12, timeout: float = 5.0):
    """A Metadata answer from the broker on ``port`` (all topics when ``topics`` is None)."""
    req = MetadataRequest(topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t)
                                                              for t in topics])
    conn = await KafkaConnection.open("127.0.0.1", port, timeout=timeout)
    try:
        return await conn.request(req, version, timeout=timeout)
    finally:
        await conn.close()


async def describe_cluster(port: int, timeout: float = 5.0):
    conn = await KafkaConnection.open("127.0.0.1", port, timeout=timeout)
    try:
        return await conn.request(DescribeClusterRequest(), 1, timeout=timeout)
    finally:
        await conn.close()


def leaders(resp) -> dict[tuple[str, int], int]:
    """``(topic, partition) -> leader id`` of a Metadata answer."""
    return {(t.name, p.partition_index): p.leader_id for t in resp.topics for p in t.partitions}


def wait_until(check, timeout: float, what: str, interval: float = 0.05):
    """Call ``check`` until it returns something true; its last value or an AssertionError."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = check()
            if result:
                return result
        except Exception as exc:  # a node restarting refuses connections for a moment
            last_exc = exc
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout}s (last error: {last_exc!r})")
        time.sleep(interval)
