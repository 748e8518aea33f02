"""The controller's benchmarks on real nodes (issue 21): three controllers on 127.0.0.1, each a
KraftNode with its QuorumController over the Raft driver (fsync on), brokers simulated over
the wire.

    python benchmarks/controller_tcp_bench.py heartbeats [--brokers 1000] [--connections 200]
                                                         [--depth 2] [--seconds 5] [--runs 3]
    python benchmarks/controller_tcp_bench.py register   [--brokers 1000] [--connections 200] [--runs 3]
    python benchmarks/controller_tcp_bench.py failover   [--reps 5] [--poll-ms 5]
    python benchmarks/controller_tcp_bench.py writes     [--inflight 2000] [--records-per-write 1] ...
    python benchmarks/controller_tcp_bench.py heartbeats-local [--brokers 1000] [--inflight 400] ...
    python benchmarks/controller_tcp_bench.py snapshot   [--brokers 10000] [--records-per-slice N] ...
        (node 1's loader writes a snapshot of its image in slices while the brokers heartbeat)
    (each takes --json F; the in-process figures they are compared with: bench_controller.py)

Diagnosis: ``--profile DIR`` (heartbeats: every node under cProfile, the active one's top
functions printed; writes: node 1 during the measured part); ``--py-spy FILE`` (the same
processes sampled by py-spy, which perturbs them far less).  What-if, measured without being
made: ``--what-if-gc-threshold A,B,C`` (the node processes' collector thresholds).  The
session-12 what-if of answers written once per loop iteration landed in the network server.

``rpc-local``: the controller's RPC path in this process with no sockets (frames into the
server's connection protocol, the scripted Raft of ``bench_controller.py`` below the real
QuorumController, answers to a fake transport): CPU per heartbeat, for A/B of the Python path
on a shared machine where wall-clock rates swing with the load.

Two setups:

* ``heartbeats``, ``register``, ``failover``: every node is a ``python -m
  kraft_node.server.start`` process (what an operator runs) and this process is the brokers:
  ``--connections`` TCP connections to the active controller (found with DescribeQuorum),
  each with up to ``--depth`` requests outstanding (a connection's requests are handled one
  at a time and answered in order, as Kafka's socket server does; the rest are read ahead).
  Brokers send what a Kafka 4 broker sends: BrokerRegistration v4 (one listener, one log dir,
  every supported feature), then BrokerHeartbeat v1 at their own registration offset (a
  broker that has read its RegisterBrokerRecord), again until one answers unfenced.  The
  steady-state heartbeats come from a lean client by default (``--client raw``: pre-encoded
  frames, answers compared by bytes), so the client's CPU stays off the controller's cores.
* ``writes``, ``heartbeats-local``, ``snapshot``: node 1 runs in this process (``KraftNode.from_config(controller=
  True)`` on this event loop, as in ``raft_tcp_bench.py``) with a short election timeout so
  it leads; nodes 2 and 3 are processes.  The load is offered to node 1's QuorumController
  directly (``append_write`` / ``register_broker`` / heartbeats), since no RPC writes a bare
  NoOpRecord; everything below the controller is the real node: the ControllerRunner's 2 ms
  slices on the asyncio loop, the RaftDriver, fsync, replication to the two others, which
  replay every record as standby controllers.  The controller's queue timing hook (the
  EventQueueTimeMs / EventQueueProcessingTimeMs source) is chained to record every event,
  by the controller's ``current_event`` name.

``failover``: kill -9 of the active controller, then from the signal: ``raft_committing_ms``
(the first DescribeQuorum answer from the new leader with a high watermark: Raft's failover,
measured as ``raft_failover_bench.py`` does) and ``controller_write_ms`` (the first write
answered by the new active controller: an AllocateProducerIds from a registered broker, sent
to every surviving node every ``--poll-ms``); target: controller <= Raft + 100 ms, same rep.

Controller settings are Kafka's defaults (session 9 s, heartbeat 2 s, no-op every 500 ms,
Raft linger 25 ms) unless a flag says otherwise; the JSON records what ran.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import io
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from array import array
from typing import Any, Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from kraft_node import event_loop  # noqa: E402
from kraft_node.network import KafkaConnection  # noqa: E402
from kraft_node.protocol.api_keys import ApiKeys  # noqa: E402
from kraft_node.protocol.errors import Errors  # noqa: E402
from kraft_node.protocol.framing import decode_response, encode_request, encode_response  # noqa: E402
from kraft_node.protocol.generated.allocate_producer_ids import AllocateProducerIdsRequest  # noqa: E402
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatResponse  # noqa: E402
from kraft_node.server.config import NodeConfig  # noqa: E402
from kraft_node.server.node import KraftNode  # noqa: E402
from kraft_node.server.start import freeze_startup_heap  # noqa: E402
from kraft_node.server.tools.storage import format_storage  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # benchmarks/ (also when loaded by path)
from _support import code_version, emit_json, free_ports  # noqa: E402
from bench_controller import (  # noqa: E402
    GcPauses,
    broker_features,
    heartbeat_request,
    ms_summary,
    no_op_writes,
    registration_request,
)
from raft_failover_bench import QuorumPoller, describe, wait_stable  # noqa: E402
from raft_tcp_bench import cpu_seconds  # noqa: E402

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
REGISTRATION_VERSION = 4
HEARTBEAT_VERSION = 1
ALLOCATE_PRODUCER_IDS_VERSION = 0
BROKER_HEARTBEAT_KEY = int(ApiKeys.BROKER_HEARTBEAT)


# ------------------------------------------------------------------ the cluster
def write_configs(base: str, *, voters: int = 3, lead: int | None = None, extra: dict | None = None) -> list[str]:
    """Formatted config files for ``voters`` static voters with controllers.  ``lead``: that
    node gets a 300 ms election timeout and the others 5 s, so it wins the first election
    (the in-process leader); else every Raft timeout is Kafka's default."""
    ports = free_ports(voters)
    quorum = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(voters))
    paths = []
    for i in range(voters):
        nid = i + 1
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d, exist_ok=True)
        props: dict[str, Any] = {
            "process.roles": "controller", "node.id": nid, "controller.quorum.voters": quorum,
            "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}", "controller.listener.names": "CONTROLLER",
            "log.dirs": os.path.join(d, "data")}
        if lead is not None:
            props["controller.quorum.election.timeout.ms"] = 300 if nid == lead else 5000
            props["controller.quorum.fetch.timeout.ms"] = 10000
        props.update(extra or {})
        p = os.path.join(d, "server.properties")
        with open(p, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        format_storage(NodeConfig.from_file(p), CLUSTER_ID, out=io.StringIO())
        paths.append(p)
    return paths


#: ``kraft-server-start`` run through this wrapper when profiled or patched; argv: the stats
#: file ("-" for none), then the node's args.  cProfile uses the wall clock by default (cheap
#: to read; the loop's idle waits land in ``asyncio.run``'s own time), the process CPU clock
#: with KRAFT_PROFILE_CPU=1 (exact, but each reading is a system call that slows the node
#: ~10x here).  KRAFT_BENCH_COALESCE_WRITES=1 is the what-if of a proposed change to
#: ``kraft_node/network/server.py`` (measured here, not made there): a connection's answers
#: are buffered and written once per loop iteration (``writelines``) instead of one send(2)
#: per answer.
_WRAPPED_START = """
import cProfile, os, runpy, sys, time
out = sys.argv[1]
sys.argv = ["kraft-server-start"] + sys.argv[2:]
if os.environ.get("KRAFT_BENCH_GC_THRESHOLD"):
    import gc
    gc.set_threshold(*(int(x) for x in os.environ["KRAFT_BENCH_GC_THRESHOLD"].split(",")))
prof = None
if out != "-":
    prof = cProfile.Profile(time.process_time if os.environ.get("KRAFT_PROFILE_CPU") else time.perf_counter)
    prof.enable()
try:
    runpy.run_module("kraft_node.server.start", run_name="__main__")
except SystemExit:
    pass
finally:
    if prof is not None:
        prof.disable()
        prof.dump_stats(out)
"""


class ProcNode:
    """One ``python -m kraft_node.server.start`` process (a controller node)."""

    def __init__(self, cfg_path: str, profile_dir: str | None = None):
        self.cfg_path = cfg_path
        cfg = NodeConfig.from_file(cfg_path)
        self.id = cfg.node_id
        self.port = cfg.controller_endpoint.port
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        #: run under cProfile, its stats written to this directory at a graceful stop
        self.profile_dir = profile_dir

    def profile_path(self) -> str | None:
        if self.profile_dir is None:
            return None
        return os.path.join(self.profile_dir, f"node{self.id}.{self.starts}.prof")

    def stderr_path(self) -> str:
        return os.path.join(os.path.dirname(self.cfg_path), f"stderr.{self.starts}")

    def start(self) -> None:
        self.starts += 1
        env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
        args = [self.cfg_path, "--log-level", "WARNING", "--exit-after-seconds", "3600"]
        if self.profile_dir is None and not os.environ.get("KRAFT_BENCH_GC_THRESHOLD"):
            cmd = [sys.executable, "-m", "kraft_node.server.start", *args]
        else:
            cmd = [sys.executable, "-c", _WRAPPED_START, str(self.profile_path() or "-"), *args]
        with open(self.stderr_path(), "w") as err:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, env=env)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def kill9(self) -> None:
        if self.alive:
            self.proc.kill()  # type: ignore[union-attr]
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
            try:
                self.proc.wait(10)  # type: ignore[union-attr]
            except subprocess.TimeoutExpired:
                self.kill9()

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            with open(self.stderr_path()) as f:
                return f.read()[-n:]
        except OSError:
            return ""


async def wait_serving(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 0.5)
            w.close()
            return
        except (OSError, asyncio.TimeoutError):
            await asyncio.sleep(0.02)
    raise SystemExit(f"nothing serves on port {port} after {timeout} s")


async def find_active(nodes: list[ProcNode], timeout: float = 30.0) -> ProcNode:
    """The Raft leader (= the active controller) once it reports a high watermark."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            if not n.alive:
                continue
            p = await describe(n)
            if p is not None and p.error_code == 0 and p.leader_id == n.id and p.high_watermark > 0:
                return n
        await asyncio.sleep(0.05)
    raise SystemExit("no active controller within 30 s:\n" + "\n".join(n.stderr_tail(1500) for n in nodes))


# ------------------------------------------------------------------ brokers over the wire
class Wire:
    """``connections`` TCP connections to one controller; requests go round robin, answers
    come back through callbacks (``KafkaConnection.send``: no task per request)."""

    def __init__(self, port: int, connections: int):
        self.port = port
        self.n = connections
        self.conns: list[KafkaConnection] = []

    async def open(self) -> None:
        self.conns = list(await asyncio.gather(*(KafkaConnection.open("127.0.0.1", self.port, timeout=5)
                                                 for _ in range(self.n))))

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self.conns), return_exceptions=True)


class WireBrokers:
    """``n`` brokers (ids ``first_id``..) speaking to the active controller over a Wire."""

    def __init__(self, wire: Wire, n: int, first_id: int = 0):
        self.wire = wire
        self.n = n
        self.first_id = first_id
        self.features = broker_features()
        self.epochs = [-1] * n

    def conn_of(self, i: int) -> KafkaConnection:
        return self.wire.conns[i % self.wire.n]

    async def register_and_unfence(self, timeout: float = 60.0) -> dict[str, Any]:
        """All register at once; each heartbeats as soon as it has its epoch, and again until
        it is answered unfenced.  Returns the time from the first request to the last broker
        unfenced."""
        loop = asyncio.get_running_loop()
        all_done = loop.create_future()
        remaining = [self.n]
        heartbeats = [0]
        errors: dict[str, int] = {}

        def fail(what: str) -> None:
            errors[what] = errors.get(what, 0) + 1
            if not all_done.done():
                all_done.set_exception(SystemExit(f"broker request failed: {what}"))

        def heartbeat(i: int) -> None:
            heartbeats[0] += 1
            req = heartbeat_request(self.first_id + i, self.epochs[i], self.epochs[i])
            self.conn_of(i).send(req, HEARTBEAT_VERSION, 30.0, lambda r, e, i=i: heartbeat_done(i, r, e))

        def heartbeat_done(i: int, resp: Any, exc: BaseException | None) -> None:
            if exc is not None or resp.error_code:
                fail(repr(exc) if exc is not None else Errors(resp.error_code).name)
                return
            if resp.is_fenced:
                heartbeat(i)
                return
            remaining[0] -= 1
            if remaining[0] == 0 and not all_done.done():
                all_done.set_result(None)

        def registered(i: int, resp: Any, exc: BaseException | None) -> None:
            if exc is not None or resp.error_code:
                fail(repr(exc) if exc is not None else Errors(resp.error_code).name)
                return
            self.epochs[i] = resp.broker_epoch
            heartbeat(i)

        t0 = time.perf_counter()
        for i in range(self.n):
            req = registration_request(self.first_id + i, self.features, CLUSTER_ID)
            self.conn_of(i).send(req, REGISTRATION_VERSION, 30.0, lambda r, e, i=i: registered(i, r, e))
        await asyncio.wait_for(all_done, timeout)
        wall = time.perf_counter() - t0
        return {"brokers": self.n, "connections": self.wire.n, "all_unfenced_s": round(wall, 4),
                "heartbeats_sent": heartbeats[0]}

    async def steady_heartbeats(self, seconds: float, depth: int, warmup: float = 1.0,
                                pids: tuple[int, ...] = ()) -> dict[str, Any]:
        """Closed loop: every connection keeps ``depth`` heartbeats outstanding (the next
        broker's in round robin when one is answered) for ``warmup`` + ``seconds``; counts the
        answers (no error, not fenced) in the measured part, and their round-trip times."""
        loop = asyncio.get_running_loop()
        reqs = [heartbeat_request(self.first_id + i, self.epochs[i], self.epochs[i]) for i in range(self.n)]
        state = {"ok": 0, "next": 0, "stop": False, "measuring": False}
        rtt_ns = array("q")
        bad: list[str] = []
        outstanding = [0]
        drained = loop.create_future()

        def send(conn: KafkaConnection) -> None:
            i = state["next"]
            state["next"] = (i + 1) % self.n
            outstanding[0] += 1
            t0 = time.perf_counter_ns()
            conn.send(reqs[i], HEARTBEAT_VERSION, 30.0, lambda r, e: answered(conn, t0, r, e))

        def answered(conn: KafkaConnection, t0: int, resp: Any, exc: BaseException | None) -> None:
            outstanding[0] -= 1
            if exc is not None or resp.error_code or resp.is_fenced:
                bad.append(repr(exc) if exc is not None else
                           (Errors(resp.error_code).name if resp.error_code else "fenced"))
            elif state["measuring"]:
                state["ok"] += 1
                rtt_ns.append(time.perf_counter_ns() - t0)
            if not state["stop"] and not bad:
                send(conn)
            elif outstanding[0] == 0 and not drained.done():
                drained.set_result(None)

        for conn in self.wire.conns:
            for _ in range(depth):
                send(conn)
        await asyncio.sleep(warmup)
        state["measuring"] = True
        cpu0 = [cpu_seconds([p]) for p in pids]
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        state["measuring"] = False
        wall = time.perf_counter() - t0
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(pids, cpu0)]
        state["stop"] = True
        await asyncio.wait_for(drained, 30)
        if bad:
            raise SystemExit(f"{len(bad)} heartbeats failed, e.g. {bad[:3]}")
        return {"heartbeats": state["ok"], "seconds": round(wall, 3),
                "heartbeats_per_s": round(state["ok"] / wall, 1),
                "rtt": ms_summary(rtt_ns), "cpu_seconds": cpu}


class _RawHeartbeats(asyncio.Protocol):
    """One connection of the lean steady-state client: pre-encoded BrokerHeartbeat frames
    written straight to the socket, answers checked byte for byte against the one expected
    answer (no error, caught up, not fenced, no throttle) and only decoded when they differ.
    Why: a client that builds and decodes message objects spends ~30 us of CPU per
    heartbeat on the same two cores as the controller it measures; real brokers run
    elsewhere.  Requests are answered in order, so the send times are a FIFO."""

    def __init__(self, load: "RawHeartbeatLoad"):
        self.load = load
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.sent_ns: collections.deque[int] = collections.deque()
        self.ready = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.ready.set_result(None)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self.load.stopping:
            self.load.bad.append(f"connection lost: {exc!r}")
            self.load.maybe_drained()

    def send(self) -> None:
        ld = self.load
        i = ld.next
        ld.next = i + 1 if i + 1 < len(ld.frames) else 0
        ld.outstanding += 1
        self.sent_ns.append(time.perf_counter_ns())
        self.transport.write(ld.frames[i])  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        ld = self.load
        pos = 0
        n = len(buf)
        while n - pos >= 4:
            size = int.from_bytes(buf[pos:pos + 4], "big")
            if n - pos - 4 < size:
                break
            t0 = self.sent_ns.popleft()
            ld.outstanding -= 1
            if buf[pos + 8:pos + 4 + size] != ld.expected:
                ld.bad.append(repr(decode_response(bytes(buf[pos + 4:pos + 4 + size]), BROKER_HEARTBEAT_KEY,
                                                   HEARTBEAT_VERSION)))
            elif ld.measuring:
                ld.ok += 1
                ld.rtt_ns.append(time.perf_counter_ns() - t0)
            pos += 4 + size
            if not ld.stopping and not ld.bad:
                self.send()
        del buf[:pos]
        ld.maybe_drained()


class RawHeartbeatLoad:
    """``connections`` lean connections (see :class:`_RawHeartbeats`), each keeping ``depth``
    heartbeats of registered brokers outstanding, round robin over the brokers."""

    def __init__(self, port: int, brokers: "WireBrokers", connections: int, depth: int):
        self.port = port
        self.depth = depth
        self.n_conns = connections
        self.frames = [bytes(encode_request(heartbeat_request(brokers.first_id + i, e, e), HEARTBEAT_VERSION, i,
                                            "bench"))
                       for i, e in enumerate(brokers.epochs)]
        ok = BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True, is_fenced=False,
                                     should_shut_down=False)
        self.expected = bytes(encode_response(ok, HEARTBEAT_VERSION, 0))[8:]  # after size and correlation id
        self.next = 0
        self.outstanding = 0
        self.ok = 0
        self.measuring = False
        self.stopping = False
        self.bad: list[str] = []
        self.rtt_ns = array("q")
        self.conns: list[_RawHeartbeats] = []
        self._drained: asyncio.Future | None = None

    def maybe_drained(self) -> None:
        if self._drained is not None and not self._drained.done() and (self.outstanding == 0 or self.bad):
            self._drained.set_result(None)

    async def run(self, seconds: float, warmup: float = 1.0, pids: tuple[int, ...] = (),
                  py_spy: str | None = None) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        for _ in range(self.n_conns):
            _t, proto = await loop.create_connection(lambda: _RawHeartbeats(self), "127.0.0.1", self.port)
            await proto.ready
            self.conns.append(proto)
        for c in self.conns:
            for _ in range(self.depth):
                c.send()
        await asyncio.sleep(warmup)
        self.measuring = True
        sampler = start_py_spy(pids[0], seconds, py_spy) if py_spy and pids else None
        cpu0 = [cpu_seconds([p]) for p in pids]
        t0 = time.perf_counter()
        await asyncio.sleep(seconds)
        self.measuring = False
        wall = time.perf_counter() - t0
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(pids, cpu0)]
        if sampler is not None:
            sampler.wait(timeout=60)
        self.stopping = True
        self._drained = loop.create_future()
        self.maybe_drained()
        await asyncio.wait_for(self._drained, 30)
        for c in self.conns:
            c.transport.close()  # type: ignore[union-attr]
        if self.bad:
            raise SystemExit(f"{len(self.bad)} heartbeats failed, e.g. {self.bad[:3]}")
        return {"heartbeats": self.ok, "seconds": round(wall, 3), "heartbeats_per_s": round(self.ok / wall, 1),
                "rtt": ms_summary(self.rtt_ns), "cpu_seconds": cpu, "client": "raw frames",
                "connections": self.n_conns, "depth": self.depth}


# ------------------------------------------------------------------ subprocess clusters
class ProcCluster:
    def __init__(self, base: str, extra: dict | None = None, profile_dir: str | None = None):
        self.paths = write_configs(base, extra=extra)
        self.nodes = [ProcNode(p, profile_dir) for p in self.paths]

    async def start(self) -> ProcNode:
        for n in self.nodes:
            n.start()
        for n in self.nodes:
            await wait_serving(n.port)
        return await find_active(self.nodes)

    def kill_all(self) -> None:
        for n in self.nodes:
            if n.profile_dir is not None:
                n.stop()  # graceful: cProfile writes its stats at exit
            n.kill9()


def start_py_spy(pid: int, seconds: float, path: str) -> subprocess.Popen:
    """Sample ``pid`` with py-spy for ``seconds`` (250 Hz, native frames off, without pausing it)
    into ``path`` as collapsed stacks (``--format raw``: one ``stack count`` line each), to be
    read with :func:`py_spy_top`.  A sampler perturbs the measured process far less than
    cProfile, which inflates call-heavy code ~3x."""
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--duration", str(max(1, int(seconds))),
                             "--rate", "250", "--nonblocking", "--format", "raw", "--output", path],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_perf_stat(pid: int, seconds: float) -> subprocess.Popen:
    """Count ``pid``'s user-space instructions for ``seconds`` with ``perf stat``: a figure
    that, unlike CPU time, hardly moves with the machine's load (another process on the
    sibling hyperthread slows each instruction, it does not add any)."""
    return subprocess.Popen(["perf", "stat", "-x,", "-e", "instructions:u", "-p", str(pid), "--", "sleep",
                             str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def read_perf_stat(proc: subprocess.Popen) -> int | None:
    _out, err = proc.communicate(timeout=60)
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and fields[2].startswith("instructions") and fields[0].isdigit():
            return int(fields[0])
    return None


def py_spy_top(path: str, n: int = 30) -> str:
    """Own ("self") and inclusive sample shares per function of a py-spy raw file."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            k = int(count)
            total += k
            frames = [re.sub(r":\d+\)$", ")", fr) for fr in stack.split(";")]
            own[frames[-1]] += k
            for fr in set(frames):
                incl[fr] += k
    lines = [f"{total} samples; own share, then inclusive share"]
    lines += [f"own {100 * c / total:5.1f}%  {fr}" for fr, c in own.most_common(n)]
    lines += [f"incl {100 * c / total:5.1f}%  {fr}" for fr, c in incl.most_common(n)]
    return "\n".join(lines)


def profile_top(path: str, n: int = 25) -> str:
    """The ``n`` costliest functions (own time) of a node's cProfile stats, as text."""
    import pstats
    out = io.StringIO()
    pstats.Stats(path, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


async def run_heartbeats(args: argparse.Namespace, base: str) -> dict[str, Any]:
    cluster = ProcCluster(base, profile_dir=args.profile)
    try:
        active = await cluster.start()
        wire = Wire(active.port, args.connections)
        await wire.open()
        try:
            brokers = WireBrokers(wire, args.brokers)
            setup = await brokers.register_and_unfence()
            pids = (active.pid, os.getpid())
            if args.client == "raw":
                load = RawHeartbeatLoad(active.port, brokers, args.connections, args.depth)
                res = await load.run(args.seconds, pids=pids, py_spy=args.py_spy)
            else:
                res = await brokers.steady_heartbeats(args.seconds, args.depth, pids=pids)
            res["cpu_seconds_of"] = ["active controller", "load generator (this process)"]
            res["setup_register_s"] = setup["all_unfenced_s"]
            res["active_controller"] = active.id
            return res
        finally:
            await wire.close()
    finally:
        cluster.kill_all()
        if args.profile:
            path = next(n.profile_path() for n in cluster.nodes if n.id == active.id)
            print(profile_top(str(path)), file=sys.stderr)
        if args.py_spy and os.path.exists(args.py_spy):
            print(py_spy_top(args.py_spy), file=sys.stderr)


async def run_register(args: argparse.Namespace, base: str) -> dict[str, Any]:
    cluster = ProcCluster(base)
    try:
        active = await cluster.start()
        await asyncio.sleep(1.0)  # past the activation and the first no-op writes
        wire = Wire(active.port, args.connections)
        await wire.open()
        try:
            res = await WireBrokers(wire, args.brokers).register_and_unfence()
            res["active_controller"] = active.id
            return res
        finally:
            await wire.close()
    finally:
        cluster.kill_all()


# ------------------------------------------------------------------ failover
class WritePoller:
    """Sends AllocateProducerIds (a write: one ProducerIdsRecord) for a registered broker to
    each node every ``interval`` s, one request outstanding per node, over persistent
    connections; records ``(monotonic time answered, node id, error code)``."""

    def __init__(self, nodes: list[ProcNode], broker_id: int, broker_epoch: int, interval: float):
        self.nodes = nodes
        self.request = AllocateProducerIdsRequest(broker_id=broker_id, broker_epoch=broker_epoch)
        self.interval = interval
        self.samples: list[tuple[float, int, int]] = []
        self._stopping = False
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._loop(n)) for n in self.nodes]

    async def stop(self) -> None:
        self._stopping = True
        await asyncio.wait(self._tasks, timeout=3.0)
        for t in self._tasks:
            t.cancel()

    async def _loop(self, node: ProcNode) -> None:
        conn = None
        next_t = time.monotonic()
        try:
            while not self._stopping:
                try:
                    if conn is None:
                        conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=0.5)
                    resp = await conn.request(self.request, ALLOCATE_PRODUCER_IDS_VERSION, timeout=2.0)
                    self.samples.append((time.monotonic(), node.id, resp.error_code))
                except asyncio.CancelledError:
                    raise
                except Exception:
                    if conn is not None:
                        try:
                            await conn.close()
                        except Exception:
                            pass
                    conn = None
                next_t += self.interval
                delay = next_t - time.monotonic()
                if delay < 0:
                    next_t, delay = time.monotonic(), 0
                await asyncio.sleep(delay)
        finally:
            if conn is not None:
                try:
                    await conn.close()
                except Exception:
                    pass


async def failover_once(nodes: list[ProcNode], broker: tuple[int, int], poll_s: float,
                        timeout: float = 15.0) -> dict[str, Any]:
    leader, _epoch, _hwm = await wait_stable(nodes)  # type: ignore[arg-type]
    await asyncio.sleep(random.uniform(0.3, 1.0))
    p = await describe(leader)
    if p is None or p.error_code or p.leader_id != leader.id:
        return {"skipped": "leadership moved before the signal"}
    epoch0 = p.leader_epoch
    others = [n for n in nodes if n is not leader]
    quorum = QuorumPoller(others, poll_s)  # type: ignore[arg-type]
    writes = WritePoller(others, broker[0], broker[1], poll_s)
    quorum.start()
    writes.start()
    await asyncio.sleep(3 * poll_s)
    t0 = time.monotonic()
    leader.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    committing = written = None
    new_leader = new_epoch = None
    errors_before: dict[str, int] = {}
    deadline = t0 + timeout
    seen_q = seen_w = 0
    while time.monotonic() < deadline and (committing is None or written is None):
        await asyncio.sleep(poll_s)
        samples_q = quorum.samples[seen_q:]
        seen_q += len(samples_q)
        for t, nid, err, lid, ep, hwm in samples_q:
            if committing is None and t >= t0 and ep > epoch0 and err == 0 and lid == nid and hwm >= 0:
                committing, new_leader, new_epoch = t, nid, ep
        samples_w = writes.samples[seen_w:]
        seen_w += len(samples_w)
        for t, nid, code in samples_w:
            if t < t0 or written is not None:
                continue
            if code == 0:
                written = (t, nid)
            else:
                name = Errors(code).name
                errors_before[name] = errors_before.get(name, 0) + 1
    await quorum.stop()
    await writes.stop()
    leader.kill9()

    def ms(t: float | None) -> float | None:
        return None if t is None else round((t - t0) * 1000, 1)
    res = {"old_leader": leader.id, "old_epoch": epoch0, "new_leader": new_leader, "new_epoch": new_epoch,
           "raft_committing_ms": ms(committing), "controller_write_ms": ms(written[0] if written else None),
           "controller_node": written[1] if written else None,
           "write_answers_before_success": errors_before}
    if committing is not None and written is not None:
        res["controller_minus_raft_ms"] = round((written[0] - committing) * 1000, 1)
    leader.start()  # back as a follower and standby controller
    await wait_serving(leader.port)
    return res


async def run_failover(args: argparse.Namespace, base: str) -> dict[str, Any]:
    cluster = ProcCluster(base)
    reps: list[dict[str, Any]] = []
    try:
        active = await cluster.start()
        wire = Wire(active.port, 1)
        await wire.open()
        try:
            brokers = WireBrokers(wire, 1, first_id=1)
            await brokers.register_and_unfence()
            broker = (1, brokers.epochs[0])
        finally:
            await wire.close()
        attempts = 0
        while len([r for r in reps if "skipped" not in r]) < args.reps and attempts < 2 * args.reps:
            attempts += 1
            r = await failover_once(cluster.nodes, broker, args.poll_ms / 1000)
            print(f"# failover: {r}", file=sys.stderr, flush=True)
            reps.append(r)
    finally:
        cluster.kill_all()
    done = [r for r in reps if "skipped" not in r]

    def summary(key: str) -> dict[str, Any] | None:
        xs = sorted(r[key] for r in done if r.get(key) is not None)
        if not xs:
            return None
        return {"n": len(xs), "median": round(statistics.median(xs), 1), "min": xs[0], "max": xs[-1]}
    within = [r["controller_minus_raft_ms"] <= 100 for r in done if "controller_minus_raft_ms" in r]
    return {"raft_committing_ms": summary("raft_committing_ms"),
            "controller_write_ms": summary("controller_write_ms"),
            "controller_minus_raft_ms": summary("controller_minus_raft_ms"),
            "reps_within_raft_plus_100ms": f"{sum(within)}/{len(done)}",
            "failed": sum(1 for r in done if r.get("controller_write_ms") is None), "reps": reps}


# ------------------------------------------------------------------ node 1 in this process
class EventLog:
    """The controller queue's timing hook, chained: every event's processing and queue time
    (ns) and its name (the controller's ``current_event``), in arrays of C integers (lists of
    samples would lengthen the GC pauses being measured)."""

    def __init__(self, controller_server: Any):
        self.ctl = controller_server.controller
        queue = controller_server.queue
        self._next = queue.on_event_timing
        queue.on_event_timing = self._hook
        self.names: dict[str, int] = {}
        self.clear()

    def clear(self) -> None:
        self.processing_ns = array("q")
        self.queue_ns = array("q")
        self.name_ids = array("H")

    def _hook(self, queue_ns: int, processing_ns: int) -> None:
        name = self.ctl.current_event
        i = self.names.get(name)
        if i is None:
            i = self.names[name] = len(self.names)
        self.processing_ns.append(processing_ns)
        self.queue_ns.append(queue_ns)
        self.name_ids.append(i)
        if self._next is not None:
            self._next(queue_ns, processing_ns)

    def by_name(self, predicate: Callable[[str], bool]) -> list[int]:
        ids = {i for n, i in self.names.items() if predicate(n)}
        return [ns for i, ns in zip(self.name_ids, self.processing_ns) if i in ids]

    def longest(self, k: int = 5) -> list[tuple[str, float]]:
        names = {i: n for n, i in self.names.items()}
        top = sorted(zip(self.processing_ns, self.name_ids), reverse=True)[:k]
        return [(names[i], round(ns / 1e6, 3)) for ns, i in top]


class LocalCluster:
    """Node 1 in this process (the leader), nodes 2..3 as processes."""

    def __init__(self, base: str, extra: dict | None = None):
        self.paths = write_configs(base, lead=1, extra=extra)
        self.procs = [ProcNode(p) for p in self.paths[1:]]
        self.node: KraftNode | None = None

    async def start(self) -> KraftNode:
        for p in self.procs:
            p.start()
        node = self.node = KraftNode.from_config(NodeConfig.from_file(self.paths[0]), controller=True)
        await node.start()
        freeze_startup_heap()  # as kraft-server-start does
        ctl = node.controller.controller
        deadline = time.monotonic() + 30
        while not (ctl.active and ctl.last_stable_offset >= 0
                   and ctl.offset_control.transaction_start_offset == -1):
            if time.monotonic() > deadline:
                raise SystemExit("node 1 did not become the active controller within 30 s")
            await asyncio.sleep(0.01)
        # every voter replicating (a voter that was not listening at the election hears of it later)
        driver = node.driver
        while True:
            st = driver.core.state
            ends = [rs.end_offset for vid, rs in st.voters.items() if vid != driver.node_id]
            if all(e is not None and e > ctl.last_stable_offset for e in ends):
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"not every voter replicates (end offsets {ends})")
            await asyncio.sleep(0.01)
        return node

    async def stop(self) -> None:
        if self.node is not None:
            await self.node.shutdown(3)
        for p in self.procs:
            p.stop()

    @property
    def pids(self) -> list[int]:
        return [os.getpid()] + [p.pid for p in self.procs if p.pid is not None]


async def run_writes(args: argparse.Namespace, base: str) -> dict[str, Any]:
    extra = {"controller.quorum.append.linger.ms": args.linger_ms} if args.linger_ms is not None else None
    cluster = LocalCluster(base, extra)
    try:
        node = await cluster.start()
        ctl = node.controller.controller
        events = EventLog(node.controller)
        op = no_op_writes(args.records_per_write)
        loop = asyncio.get_running_loop()
        state = {"outstanding": 0, "ok": 0, "measuring": False}
        lat_ns = array("q")
        bad: list[BaseException] = []
        slot = asyncio.Event()

        def done(t0: int, f: Any) -> None:
            state["outstanding"] -= 1
            exc = f.exception()
            if exc is not None:
                bad.append(exc)
            elif state["measuring"]:
                state["ok"] += 1
                lat_ns.append(time.perf_counter_ns() - t0)
            slot.set()

        async def offer(until: float) -> None:
            while loop.time() < until and not bad:
                while state["outstanding"] < args.inflight:
                    state["outstanding"] += 1
                    t0 = time.perf_counter_ns()
                    ctl.append_write("noOp", op).add_done_callback(lambda f, t0=t0: done(t0, f))
                slot.clear()
                try:
                    await asyncio.wait_for(slot.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass

        await offer(loop.time() + 1.0)  # warm-up
        events.clear()
        state["measuring"] = True
        cpu0 = [cpu_seconds([p]) for p in cluster.pids]
        prof = None
        if args.profile:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        sampler = start_py_spy(os.getpid(), args.seconds, args.py_spy) if args.py_spy else None
        t0 = time.perf_counter()
        await offer(loop.time() + args.seconds)
        state["measuring"] = False
        if sampler is not None:
            await asyncio.get_running_loop().run_in_executor(None, sampler.wait)
            print(py_spy_top(args.py_spy, 40), file=sys.stderr)
        if prof is not None:
            prof.disable()
            path = os.path.join(args.profile, "writes-node1.prof")
            prof.dump_stats(path)
            print(profile_top(path, 40), file=sys.stderr)
        wall = time.perf_counter() - t0
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(cluster.pids, cpu0)]
        deadline = time.monotonic() + 30
        while state["outstanding"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if bad:
            raise SystemExit(f"{len(bad)} no-op writes failed, e.g. {bad[0]!r}")
        writes = [ns for ns in events.by_name(lambda n: n == "noOp")]
        return {"writes": state["ok"], "seconds": round(wall, 3), "writes_per_s": round(state["ok"] / wall, 1),
                "records_per_write": args.records_per_write,
                "records_per_s": round(state["ok"] * args.records_per_write / wall, 1),
                "write_latency": ms_summary(lat_ns),
                "event_processing": ms_summary(events.processing_ns),
                "event_queue_time": ms_summary(events.queue_ns),
                "write_events": ms_summary(writes),
                "events_per_write": round(len(events.processing_ns) / max(1, len(writes)), 2),
                "longest_events": events.longest(),
                "runner_slices": node.controller.runner.slices,
                "cpu_seconds_by_node": cpu, "inflight": args.inflight,
                "linger_ms": node.config.quorum.append_linger_ms}
    finally:
        await cluster.stop()


async def register_local(ctl: Any, n: int) -> tuple[list[int], list[Any], float]:
    """Register ``n`` brokers through node 1's controller and unfence them (a heartbeat each
    at its registration offset); returns (epochs, their steady heartbeat requests, seconds)."""
    features = broker_features()
    t0 = time.perf_counter()
    futs = []
    for b in range(n):
        futs.append(ctl.register_broker(registration_request(b, features, ctl.cluster_id)))
        if b % 500 == 499:
            await asyncio.sleep(0)
    while not all(f.done() for f in futs):
        await asyncio.sleep(0.01)
    epochs = []
    for f in futs:
        if f.exception() is not None:
            raise SystemExit(f"registration failed: {f.exception()!r}")
        epochs.append(f.result().epoch)
    hbs = [heartbeat_request(b, epochs[b], epochs[b]) for b in range(n)]
    futs = []
    for b in range(n):
        ctl.track_broker_heartbeat(b, epochs[b])
        futs.append(ctl.process_broker_heartbeat(hbs[b]))
    while not all(f.done() for f in futs):
        await asyncio.sleep(0.01)
    if ctl.cluster_control.fenced_broker_count() != 0:
        raise SystemExit("brokers still fenced after their heartbeats")
    return epochs, hbs, time.perf_counter() - t0


async def run_heartbeats_local(args: argparse.Namespace, base: str) -> dict[str, Any]:
    """Steady-state heartbeats offered in this process to node 1's controller (the real
    driver and quorum underneath, no RPC layer): ``--inflight`` outstanding, each answer
    issuing the next broker's heartbeat."""
    cluster = LocalCluster(base)
    try:
        node = await cluster.start()
        ctl = node.controller.controller
        events = EventLog(node.controller)
        epochs, hbs, setup_s = await register_local(ctl, args.brokers)
        n = args.brokers
        state = {"ok": 0, "next": 0, "outstanding": 0, "measuring": False, "stop": False}
        bad: list[Any] = []
        track = ctl.track_broker_heartbeat
        process = ctl.process_broker_heartbeat

        def issue() -> None:
            b = state["next"]
            state["next"] = b + 1 if b + 1 < n else 0
            state["outstanding"] += 1
            track(b, epochs[b])
            process(hbs[b]).add_done_callback(done)

        def done(f: Any) -> None:
            state["outstanding"] -= 1
            exc = f.exception()
            if exc is not None or f.result().is_fenced:
                bad.append(exc if exc is not None else f.result())
            elif state["measuring"]:
                state["ok"] += 1
            if not state["stop"] and not bad:
                issue()

        for _ in range(args.inflight):
            issue()
        await asyncio.sleep(1.0)
        events.clear()
        pauses = GcPauses()
        state["measuring"] = True
        cpu0 = [cpu_seconds([p]) for p in cluster.pids]
        t0 = time.perf_counter()
        await asyncio.sleep(args.seconds)
        state["measuring"] = False
        wall = time.perf_counter() - t0
        cpu = [round(cpu_seconds([p]) - c, 2) for p, c in zip(cluster.pids, cpu0)]
        state["stop"] = True
        pauses.remove()
        deadline = time.monotonic() + 30
        while state["outstanding"] and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        if bad:
            raise SystemExit(f"{len(bad)} heartbeats failed, e.g. {bad[:3]}")
        return {"heartbeats": state["ok"], "seconds": round(wall, 3), "gc_pauses": pauses.summary(),
                "heartbeats_per_s": round(state["ok"] / wall, 1), "setup_register_s": round(setup_s, 3),
                "event_processing": ms_summary(events.processing_ns),
                "event_queue_time": ms_summary(events.queue_ns), "longest_events": events.longest(),
                "cpu_seconds_by_node": cpu, "inflight": args.inflight}
    finally:
        await cluster.stop()


async def run_snapshot(args: argparse.Namespace, base: str) -> dict[str, Any]:
    """10k brokers registered through node 1's controller (the real driver commits them), then a
    snapshot of node 1's latest image written by its metadata loader -- the SnapshotEmitter in
    slices on the loader's queue, as the SnapshotGenerator starts it (a node's QuorumController
    writes no snapshot) -- while the brokers keep heartbeating.  The figures: the longest event
    meanwhile on the loader's queue (the slices and the freeze) and on the controller's queue
    (what the slices delay: both queues run on the node's one asyncio loop)."""
    cluster = LocalCluster(base)
    try:
        node = await cluster.start()
        ctl = node.controller.controller
        metadata = node.metadata
        if metadata is None:
            raise SystemExit("node 1 runs no metadata loader")
        events = EventLog(node.controller)
        n = args.brokers
        failures: list[BaseException] = []

        def check(f: Any) -> None:
            if f.exception() is not None:
                failures.append(f.exception())

        epochs, hbs, setup_s = await register_local(ctl, n)
        deadline = time.monotonic() + 30
        while len(metadata.image().cluster.brokers) < n:
            if time.monotonic() > deadline:
                raise SystemExit(f"the loader's image has {len(metadata.image().cluster.brokers)} of {n} brokers "
                                 "after 30 s")
            await asyncio.sleep(0.01)
        emitter = metadata.snapshot_emitter
        if args.records_per_slice:
            emitter.records_per_slice = args.records_per_slice
        loader_queue = metadata.runner.queue
        slices_ns = array("q")
        chained = loader_queue.on_event_timing

        def on_loader_event(queue_ns: int, processing_ns: int) -> None:
            slices_ns.append(processing_ns)
            if chained is not None:
                chained(queue_ns, processing_ns)

        tg = time.perf_counter()
        gc.collect()  # the registrations' garbage; its length: a full collection of this heap
        full_collect_ms = (time.perf_counter() - tg) * 1000
        done: list[BaseException | None] = []
        # the image's own snapshot id: none exists at a fresh offset (no-ops advance it every 500 ms)
        while emitter.in_flight or not emitter.begin_emit(metadata.image(), done.append):
            if time.monotonic() > deadline + 10:
                raise SystemExit("the loader's snapshot emitter would not start within 10 s")
            await asyncio.sleep(0.005)
        image = metadata.image()
        events.clear()
        loader_queue.on_event_timing = on_loader_event
        pauses = GcPauses()
        t1 = time.perf_counter()
        b = 0
        beats = 0
        try:
            while not done:
                for _ in range(args.inflight):
                    ctl.track_broker_heartbeat(b, epochs[b])
                    ctl.process_broker_heartbeat(hbs[b]).add_done_callback(check)
                    b = (b + 1) % n
                beats += args.inflight
                await asyncio.sleep(0.001)
        finally:
            loader_queue.on_event_timing = chained
        wall = time.perf_counter() - t1
        pauses.remove()
        await asyncio.sleep(0.05)
        if done[0] is not None:
            raise SystemExit(f"the snapshot was abandoned: {done[0]!r}")
        if failures:
            raise SystemExit(f"a heartbeat failed during the snapshot: {failures[0]!r}")
        record = emitter.history[-1]
        sid = record.snapshot_id
        loader_ms = [round(ns / 1e6, 2) for ns in slices_ns]
        return {"brokers": n, "image_brokers": len(image.cluster.brokers), "setup_s": round(setup_s, 2),
                "snapshot": f"{sid.offset}-{sid.epoch}", "records": record.records, "slices": record.slices,
                "bytes": record.bytes, "records_per_slice": emitter.records_per_slice,
                "snapshot_wall_s": round(wall, 4), "heartbeats_meanwhile": beats,
                "max_event_ms": round(max(max(slices_ns, default=0), max(events.processing_ns, default=0)) / 1e6, 3),
                "loader_events": ms_summary(list(slices_ns)), "loader_event_ms": loader_ms,
                "controller_events": ms_summary(list(events.processing_ns)), "longest_events": events.longest(),
                "gc_pauses": pauses.summary(), "full_gc_collect_ms": round(full_collect_ms, 1)}
    finally:
        await cluster.stop()


# ------------------------------------------------------------------ the RPC path in process
class _FakeTransport:
    """What :class:`~kraft_node.network.server._ServerConnection` writes to: counts the
    writes and hands the answer frames to the closed-loop client."""

    def __init__(self, client: "_LocalClient") -> None:
        self.client = client
        self.writes = 0

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 0) if name == "peername" else default

    def write(self, data: Any) -> None:
        self.writes += 1
        self.client.received(bytes(data))

    def writelines(self, bufs: Any) -> None:
        self.writes += 1
        self.client.received(b"".join(bytes(b) for b in bufs))

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        self.client.load.bad.append("the server closed a connection")


class _LocalClient:
    """One in-process connection of the ``rpc-local`` load: ``depth`` heartbeats outstanding,
    each answer checked by bytes (as the TCP client does) and replaced by the next request."""

    def __init__(self, load: "_LocalLoad") -> None:
        self.load = load
        self.outbox: list[bytes] = []

    def received(self, data: bytes) -> None:
        ld = self.load
        pos, n = 0, len(data)
        while pos < n:
            size = int.from_bytes(data[pos:pos + 4], "big")
            if data[pos + 8:pos + 4 + size] != ld.expected:
                ld.bad.append(repr(decode_response(data[pos + 4:pos + 4 + size], BROKER_HEARTBEAT_KEY,
                                                   HEARTBEAT_VERSION)))
            ld.answered += 1
            pos += 4 + size
            if not ld.stopping:
                self.outbox.append(ld.next_frame())


class _LocalLoad:
    def __init__(self, frames: list[bytes], expected: bytes) -> None:
        self.frames = frames
        self.expected = expected
        self.i = 0
        self.answered = 0
        self.stopping = False
        self.bad: list[str] = []

    def next_frame(self) -> bytes:
        i = self.i
        self.i = i + 1 if i + 1 < len(self.frames) else 0
        return self.frames[i]


async def run_rpc_local(args: argparse.Namespace, base: str) -> dict[str, Any]:
    """The controller's whole per-request path in one process, without sockets: frames in
    through ``_ServerConnection.data_received`` (frame split, header and body decode, the
    handler), the heartbeat event on the real EventQueue and QuorumController over the
    scripted Raft of ``bench_controller.py`` (commits at once), the answer encoded and
    written to a fake transport, which gives the closed-loop client its next request.  One
    "tick" delivers each connection's pending requests as one chunk, runs the queue for at
    most the runner's 2 ms, then yields to the loop once (the server's deferred work).
    The figure is CPU per heartbeat (``time.process_time``): the Python cost that the TCP
    figure carries beside the kernel's, measurable on a shared machine."""
    from bench_controller import Brokers, ScriptedHarness

    from kraft_node.network.server import KafkaServer, _ServerConnection
    from kraft_node.server.controller_apis import ControllerApis
    h = ScriptedHarness()
    try:
        freeze_startup_heap()
        brokers = Brokers(h, args.brokers)
        brokers.register_and_unfence()
        apis = ControllerApis(h.controller, node_id=1, clock_ns=time.monotonic_ns)
        server = KafkaServer("127.0.0.1", 0, apis.handlers(), listener="CONTROLLER", listener_type="controller")
        frames = [bytes(encode_request(heartbeat_request(b, e, e), HEARTBEAT_VERSION, b, "bench"))
                  for b, e in enumerate(brokers.epochs)]
        ok = BrokerHeartbeatResponse(throttle_time_ms=0, error_code=0, is_caught_up=True, is_fenced=False,
                                     should_shut_down=False)
        load = _LocalLoad(frames, bytes(encode_response(ok, HEARTBEAT_VERSION, 0))[8:])
        clients = []
        for _ in range(args.connections):
            c = _LocalClient(load)
            conn = _ServerConnection(server)
            conn.connection_made(_FakeTransport(c))
            c.outbox = [load.next_frame() for _ in range(args.depth)]
            clients.append((c, conn))

        async def tick() -> None:
            for c, conn in clients:
                if c.outbox:
                    chunk = b"".join(c.outbox)
                    c.outbox = []
                    conn.data_received(chunk)
            h.queue.run_ready(budget_ns=2_000_000)
            await asyncio.sleep(0)

        async def run_for(seconds: float) -> tuple[int, float, float]:
            n0, c0, t0 = load.answered, time.process_time(), time.perf_counter()
            end = t0 + seconds
            while time.perf_counter() < end and not load.bad:
                await tick()
            return load.answered - n0, time.process_time() - c0, time.perf_counter() - t0

        await run_for(min(1.0, args.seconds / 4))
        writes0 = sum(conn.transport.writes for _, conn in clients)
        gc_before = gc.get_stats()
        counter = start_perf_stat(os.getpid(), args.seconds) if args.perf_stat else None
        prof = None
        if args.count_calls:
            import cProfile
            prof = cProfile.Profile()
            prof.enable()
        n, cpu, wall = await run_for(args.seconds)
        calls = None
        if prof is not None:
            prof.disable()
            calls = _call_counts(prof, n)
        gc_after = gc.get_stats()
        instructions = read_perf_stat(counter) if counter is not None else None
        writes = sum(conn.transport.writes for _, conn in clients) - writes0
        if load.bad:
            raise SystemExit(f"{len(load.bad)} heartbeats failed, e.g. {load.bad[:3]}")
        return {"heartbeats": n, "seconds": round(wall, 3), "heartbeats_per_s": round(n / wall, 1),
                "cpu_us_per_heartbeat": round(cpu / n * 1e6, 2),
                "instructions_per_heartbeat": round(instructions / n) if instructions else None,
                "transport_writes_per_heartbeat": round(writes / n, 3),
                "calls_per_heartbeat": calls,
                "gc_collections": [a["collections"] - b["collections"] for a, b in zip(gc_after, gc_before)],
                "connections": args.connections, "depth": args.depth}
    finally:
        h.close()


def _call_counts(prof: Any, n: int) -> dict[str, Any]:
    """Function calls per heartbeat during the measured window (cProfile's counts): Python
    functions, built-ins (``len``, ``dict.get``...), and the Python functions called at
    least once per 10 heartbeats.  A count does not move with the machine's load, so it shows
    a change in the path's work even where CPU time per heartbeat is too noisy to compare
    (the CPU figure of such a run is cProfile's, inflated: compare counts only)."""
    import pstats
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    python = builtin = 0
    top: list[tuple[float, str]] = []
    for (path, line, name), (_cc, ncalls, *_rest) in stats.items():
        if path == "~":
            builtin += ncalls
            continue
        python += ncalls
        if ncalls >= n / 10:
            top.append((round(ncalls / n, 2), f"{os.path.basename(path)}:{line} {name}"))
    top.sort(reverse=True)
    return {"python": round(python / n, 1), "builtin": round(builtin / n, 1), "python_functions": top}


# ------------------------------------------------------------------ main
SCENARIOS: dict[str, tuple[Callable[..., Any], str]] = {
    "heartbeats": (run_heartbeats, "heartbeats_per_s"),
    "heartbeats-local": (run_heartbeats_local, "heartbeats_per_s"),
    "rpc-local": (run_rpc_local, "cpu_us_per_heartbeat"),
    "register": (run_register, "all_unfenced_s"),
    "writes": (run_writes, "writes_per_s"),
    "snapshot": (run_snapshot, "max_event_ms"),
}

DEFAULT_BROKERS = {"heartbeats": 1000, "heartbeats-local": 1000, "rpc-local": 1000, "register": 1000, "writes": 0,
                   "snapshot": 10_000, "failover": 1}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=[*SCENARIOS, "failover"])
    ap.add_argument("--brokers", type=int, default=None, help="default: 1000 (snapshot: 10,000)")
    ap.add_argument("--connections", type=int, default=200, help="heartbeats/register: TCP connections")
    ap.add_argument("--depth", type=int, default=2, help="heartbeats: requests outstanding per connection")
    ap.add_argument("--client", choices=("raw", "objects"), default="raw",
                    help="heartbeats: pre-encoded frames checked by bytes (raw), or KafkaConnection with "
                         "message objects (objects)")
    ap.add_argument("--inflight", type=int, default=None,
                    help="writes: no-op writes outstanding (default 2000); heartbeats-local: heartbeats "
                         "outstanding (default 400); snapshot: heartbeats queued per ms (default 20)")
    ap.add_argument("--linger-ms", type=int, default=None, help="writes: controller.quorum.append.linger.ms")
    ap.add_argument("--records-per-slice", type=int, default=None,
                    help="snapshot: override the loader's snapshot emitter's")
    ap.add_argument("--records-per-write", type=int, default=1, help="writes: NoOpRecords per write")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=5, help="failover repetitions")
    ap.add_argument("--poll-ms", type=float, default=5.0, help="failover: poll interval")
    ap.add_argument("--dir", default=None, help="where the nodes' data goes (default: a temp dir)")
    ap.add_argument("--profile", default=None,
                    help="heartbeats: run the nodes under cProfile into this directory and print the active "
                         "one's top functions; writes: profile node 1 (this process) during the measured part")
    ap.add_argument("--py-spy", default=None,
                    help="heartbeats: sample the active controller (writes: node 1, this process) with py-spy during "
                         "the measured seconds into this file (collapsed stacks) and print its top functions")
    ap.add_argument("--count-calls", action="store_true",
                    help="rpc-local: function calls per heartbeat (cProfile counts; a load-independent figure "
                         "for A/B -- the CPU figure of such a run is inflated)")
    ap.add_argument("--perf-stat", action="store_true",
                    help="rpc-local: count this process's user-space instructions per heartbeat with perf stat")
    ap.add_argument("--what-if-gc-threshold", default=None, metavar="A,B,C",
                    help="heartbeats/register/failover: the node processes run with gc.set_threshold(A, B, C)")
    ap.add_argument("--keep", action="store_true", help="failover: keep the data dir (the nodes' logs)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.what_if_gc_threshold:
        os.environ["KRAFT_BENCH_GC_THRESHOLD"] = args.what_if_gc_threshold
    if args.brokers is None:
        args.brokers = DEFAULT_BROKERS[args.scenario]
    if args.inflight is None:
        args.inflight = {"writes": 2000, "heartbeats-local": 400, "snapshot": 20}.get(args.scenario, 0)
    load_before = os.getloadavg()
    setup = {"argv": sys.argv[1:], "scenario": args.scenario, "brokers": args.brokers, "voters": 3,
             "transport": "TCP loopback", "fsync": True, "event_loop": event_loop.EVENT_LOOP,
             "cpus": os.cpu_count(), "python": sys.version.split()[0], "code": code_version(),
             "what_if_gc_threshold": args.what_if_gc_threshold}
    if args.scenario == "failover":
        base = tempfile.mkdtemp(prefix="controller-failover-", dir=args.dir)
        try:
            result: dict[str, Any] = event_loop.run(run_failover(args, base))
        finally:
            if args.keep:
                print(f"# data and logs kept in {base}", file=sys.stderr)
            else:
                shutil.rmtree(base, ignore_errors=True)
        setup.update(loadavg_before=load_before, loadavg_after=os.getloadavg(), poll_ms=args.poll_ms)
        emit_json({"setup": setup, "result": result}, args.json)
        return
    fn, headline = SCENARIOS[args.scenario]
    run_repeated(fn, headline, args, f"controller-{args.scenario}-", setup, load_before)


def run_repeated(fn: Callable[..., Any], headline: str, args: argparse.Namespace, prefix: str,
                 setup: dict[str, Any], load_before: tuple[float, float, float]) -> None:
    """``args.runs`` runs of scenario ``fn(args, base)`` (each in a fresh temp dir under
    ``args.dir``), then one JSON document: the setup with the load averages, the headline's
    median / min / max, every run (``args.json`` also gets it)."""
    runs = []
    for i in range(args.runs):
        base = tempfile.mkdtemp(prefix=prefix, dir=args.dir)
        try:
            r = event_loop.run(fn(args, base))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print(f"# {args.scenario} run {i + 1}: {headline} = {r[headline]}", file=sys.stderr, flush=True)
        runs.append(r)
    xs = [r[headline] for r in runs]
    setup.update(loadavg_before=load_before, loadavg_after=os.getloadavg())
    emit_json({"setup": setup, "headline": headline, "median": statistics.median(xs), "min": min(xs),
               "max": max(xs), "runs": runs}, args.json)


if __name__ == "__main__":
    main()
