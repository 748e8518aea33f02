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

import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import REPO
from support.cluster import Node, check_acks_everywhere, find_leader, quorum_status, wait_acks
from support.raft import CLUSTER_ID, cluster_properties

from kraft_node.server.config import NodeConfig


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
    """``kraft-server-start`` alone: the embedded config (a combined broker and controller:
    Kafka clients on 127.0.0.1:9092, the controller on 127.0.0.1:9093, data under the temp dir
    -- here TMPDIR=tmp_path) is formatted on first use, the node leads, is unfenced as a
    broker, answers kafka-python's admin client at once, and exits 0 on SIGTERM."""
    import re
    import signal
    import socket

    from kafka.admin import KafkaAdminClient, NewTopic
    for port in (9092, 9093):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            pytest.fail(f"port {port} of the embedded default config is in use on this machine")
        finally:
            s.close()
    env = dict(os.environ, PYTHONPATH=REPO, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-m", "kraft_node.server.start"], stderr=subprocess.PIPE, text=True,
                            cwd=REPO, env=env)
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 30
        while not any("serving Kafka clients on PLAINTEXT://127.0.0.1:9092" in ln for ln in lines):
            assert time.monotonic() < deadline and proc.poll() is None, "".join(lines)
            lines.append(proc.stderr.readline())
        admin = KafkaAdminClient(bootstrap_servers="127.0.0.1:9092", request_timeout_ms=10_000)
        try:
            admin.create_topics([NewTopic("first", 2, 1)], timeout_ms=10_000)
            assert "first" in admin.list_topics()
        finally:
            admin.close()
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = "".join(lines) + rest
    assert proc.returncode == 0, err
    assert "formatting it with the embedded default config" in err
    assert "node 1 became leader of epoch 1" in err
    assert os.path.exists(tmp_path / "kraft-default-node-1" / "meta.properties")
    # second start: already formatted, no new cluster id, epoch moves on (a restarted leader
    # starts Resigned and waits one election timeout, 1-2 s by default, before leading again)
    r2 = subprocess.run([sys.executable, "-m", "kraft_node.server.start", "--exit-after-seconds", "4"],
                        capture_output=True, text=True, timeout=30, cwd=REPO, env=env)
    assert r2.returncode == 0, r2.stderr
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
