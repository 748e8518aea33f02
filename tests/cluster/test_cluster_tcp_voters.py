"""KIP-853 dynamic quorums over TCP, as Kafka's operators run them:

* node 1 formatted ``kraft-storage format --standalone`` starts alone and leads
  (its voter set comes from the bootstrap snapshot ``(0, 0)``) while it runs
  ``--demo-writer``;
* nodes 2 and 3, formatted ``--no-initial-controllers``, start from
  ``controller.quorum.bootstrap.servers`` as observers and catch up;
* ``kraft-metadata-quorum add-controller --config`` adds each of them while the
  writer runs; DescribeQuorum then shows 3 voters with directory ids and
  endpoints; ``remove-controller`` removes one;
* after a graceful stop, every acknowledged value is at its acknowledged offset
  in the log of every remaining voter.

Also: the tool's dry-run lines and config errors (no cluster needed).  Every
wait is bounded; processes are always killed in ``finally``.
"""
from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import time

from conftest import REPO
from support.cluster import Node, check_acks_everywhere, find_leader, wait_acks
from support.raft import CLUSTER_ID, free_ports

from kraft_node.network import KafkaConnection
from kraft_node.raft.io.file_state import FileQuorumStateStore
from kraft_node.server.config import NodeConfig
from kraft_node.server.tools import metadata_quorum
from kraft_node.server.tools.storage import format_storage
from kraft_storage.meta_properties import read_meta_properties

FAST = {
    "controller.quorum.election.timeout.ms": "500",
    "controller.quorum.fetch.timeout.ms": "1000",
    "controller.quorum.election.backoff.max.ms": "500",
    "controller.quorum.request.timeout.ms": "1000",
    "controller.quorum.append.linger.ms": "5",
}


def dynamic_cluster(base: str, n: int) -> list[str]:
    """server.properties for nodes 1..n with controller.quorum.bootstrap.servers = node 1;
    node 1 formatted --standalone, the others --no-initial-controllers."""
    ports = free_ports(n)
    paths = []
    for i in range(n):
        nid = i + 1
        d = os.path.join(base, f"node{nid}")
        os.makedirs(d, exist_ok=True)
        props = {"process.roles": "controller", "node.id": str(nid),
                 "controller.quorum.bootstrap.servers": f"127.0.0.1:{ports[0]}",
                 "listeners": f"CONTROLLER://127.0.0.1:{ports[i]}", "controller.listener.names": "CONTROLLER",
                 "log.dirs": os.path.join(d, "data"), **FAST}
        path = os.path.join(d, "server.properties")
        with open(path, "w") as f:
            f.write("".join(f"{k}={v}\n" for k, v in props.items()))
        cfg = NodeConfig.from_file(path)
        format_storage(cfg, CLUSTER_ID, standalone=(nid == 1), no_initial_controllers=(nid != 1), out=io.StringIO())
        paths.append(path)
    return paths


def tool(*args, timeout=40) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kraft_node.server.tools.metadata_quorum", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO))


async def _describe(port):
    conn = await KafkaConnection.open("127.0.0.1", port, timeout=2)
    try:
        q = await conn.request(metadata_quorum.describe_request(), 2, timeout=2)
    finally:
        await conn.close()
    return q


def describe(port):
    """(partition, {node id: [endpoint strings]}) from a DescribeQuorum v2 answered by the leader."""
    q = asyncio.run(_describe(port))
    p = q.topics[0].partitions[0]
    assert q.error_code == 0 and p.error_code == 0, (q.error_code, p.error_code)
    return p, {n.node_id: [metadata_quorum._endpoint(ep) for ep in n.listeners] for n in q.nodes}


def dir_id(node: Node) -> str:
    return read_meta_properties(node.cfg.metadata_log_dir).meta.directory_id


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = pred()
        except Exception:  # noqa: BLE001 - not ready yet
            v = None
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_standalone_then_add_two_controllers_and_remove_one_while_writing(tmp_path):
    paths = dynamic_cluster(str(tmp_path), 3)
    nodes = [Node(p, writer=True) for p in paths]
    n1, n2, n3 = nodes
    boot = f"127.0.0.1:{n1.port}"
    try:
        n1.start()
        n1.wait_serving()
        p, _ = wait_for(lambda: describe(n1.port), 15, "node 1 to lead alone")
        assert "started as a voter" in n1.stderr() and "dynamic quorum, kraft.version 1" in n1.stderr()
        assert p.leader_id == 1 and [v.replica_id for v in p.current_voters] == [1]
        # the quorum-state file of a kraft.version 1 quorum is data_version 1, as Kafka writes it
        data, version = FileQuorumStateStore(n1.cfg.metadata_partition_dir).read_data()
        assert version == 1 and data.leader_id == 1
        wait_acks(nodes, 20, timeout=15)

        n2.start()
        n3.start()
        n2.wait_serving()
        n3.wait_serving()
        wait_for(lambda: {o.replica_id for o in describe(n1.port)[0].observers} >= {2, 3}, 20,
                 "nodes 2 and 3 to fetch as observers")

        for n in (n2, n3):
            r = tool("--bootstrap-controller", boot, "--timeout", "30", "add-controller", "--config", n.cfg_path)
            assert r.returncode == 0, r.stderr + n1.stderr()[-3000:] + n.stderr()[-3000:]
            assert r.stdout == (f"Added controller {n.id} with directory id {dir_id(n)} and endpoints: "
                                f"CONTROLLER://127.0.0.1:{n.port}\n")
        before = sum(len(n.acks) for n in nodes)
        wait_acks(nodes, before + 20, timeout=15)  # the writer keeps going through the changes

        leader_port = n1.port
        assert "node 1: the voter set is now [1, 2, 3] (a voter)" in n1.stderr()
        assert "node 3: the voter set is now [1, 2, 3] (a voter)" in n3.stderr()
        p, eps = describe(leader_port)
        assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
        assert {v.replica_id: str(v.replica_directory_id) for v in p.current_voters} == \
            {n.id: dir_id(n) for n in nodes}
        assert eps == {n.id: [f"CONTROLLER://127.0.0.1:{n.port}"] for n in nodes}
        status = tool("--bootstrap-controller", boot, "describe", "--status")
        assert status.returncode == 0, status.stderr
        assert f'{{"id": 3, "directoryId": "{dir_id(n3)}", "endpoints": ["CONTROLLER://127.0.0.1:{n3.port}"]}}' \
            in status.stdout

        # Kafka's add-controller refuses a voter that is already there
        again = tool("--bootstrap-controller", boot, "--timeout", "5", "add-controller", "--config", n3.cfg_path)
        assert again.returncode == 1 and "DuplicateVoterException" in again.stderr

        r = tool("--bootstrap-controller", boot, "--timeout", "30", "remove-controller", "--controller-id", "3",
                 "--controller-directory-id", dir_id(n3))
        assert r.returncode == 0, r.stderr
        assert r.stdout == f"Removed  KRaft controller 3 with directory id {dir_id(n3)}\n"
        p, eps = describe(leader_port)
        assert sorted(v.replica_id for v in p.current_voters) == [1, 2]
        before = sum(len(n.acks) for n in nodes)
        wait_acks(nodes, before + 20, timeout=15)

        for n in nodes:
            n.signal(signal.SIGUSR1)
        time.sleep(2.0)  # the last ACKed records reach every voter
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
        acks = check_acks_everywhere([n1, n2])
        assert len(acks) >= 60
        # node 3 was a voter until removed: it still holds every record acknowledged before
        # its removal was committed (it keeps fetching as an observer, so usually all of them).
    finally:
        for n in nodes:
            n.kill9()


def test_add_and_remove_controller_dry_run_and_errors(tmp_path):
    paths = dynamic_cluster(str(tmp_path), 2)
    n2 = NodeConfig.from_file(paths[1])
    did = read_meta_properties(n2.metadata_log_dir).meta.directory_id
    r = tool("--bootstrap-controller", "127.0.0.1:1", "add-controller", "--config", paths[1], "--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (f"DRY RUN of adding controller 2 with directory id {did} and endpoints: "
                        f"CONTROLLER://127.0.0.1:{n2.controller_endpoint.port}\n")
    r = tool("--bootstrap-controller", "127.0.0.1:1", "--command-config", paths[1], "add-controller", "--dry-run")
    assert r.returncode == 0 and r.stdout.startswith("DRY RUN of adding controller 2")
    r = tool("--bootstrap-controller", "127.0.0.1:1", "remove-controller", "--controller-id", "2",
             "--controller-directory-id", did, "--dry-run")
    assert r.returncode == 0 and r.stdout == f"DRY RUN of removing  KRaft controller 2 with directory id {did}\n"
    r = tool("--bootstrap-controller", "127.0.0.1:1", "add-controller")
    assert r.returncode == 1 and "You must supply the configuration file of the controller" in r.stderr
    r = tool("--bootstrap-controller", "127.0.0.1:1", "remove-controller", "--controller-id", "-1",
             "--controller-directory-id", did)
    assert r.returncode == 1 and "Invalid negative --controller-id: -1" in r.stderr
    r = tool("--bootstrap-controller", "127.0.0.1:1", "remove-controller", "--controller-id", "2",
             "--controller-directory-id", "nope")
    assert r.returncode == 1 and "Failed to parse --controller-directory-id" in r.stderr
    broken = tmp_path / "broker.properties"
    broken.write_text("process.roles=broker\nnode.id=5\n")
    r = tool("--bootstrap-controller", "127.0.0.1:1", "add-controller", "--config", str(broken))
    assert r.returncode == 1 and "process.roles did not contain 'controller'" in r.stderr
    # nothing listens on port 1: a real add fails within the timeout, with a clear message
    r = tool("--bootstrap-controller", "127.0.0.1:1", "--timeout", "1", "add-controller", "--config", paths[1])
    assert r.returncode == 1 and "timed out" in r.stderr


def _auto_join_cluster(tmp_path):
    """Node 1 standalone, nodes 2 and 3 with controller.quorum.auto.join.enable: started, and
    all three voters once 2 and 3 joined (the caller stops them)."""
    paths = dynamic_cluster(str(tmp_path), 3)
    for path in paths[1:]:
        with open(path, "a") as f:
            f.write("controller.quorum.auto.join.enable=true\n")
    nodes = [Node(p, writer=True) for p in paths]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        wait_for(lambda: sorted(v.replica_id for v in describe(nodes[0].port)[0].current_voters) == [1, 2, 3],
                 30, "nodes 2 and 3 to join as voters")
    except BaseException:
        for n in nodes:
            n.kill9()
        raise
    return nodes


def test_auto_join_observers_become_voters_and_the_quorum_survives_restarts(tmp_path):
    """``controller.quorum.auto.join.enable=true``: observers started from bootstrap servers
    send AddRaftVoter themselves.  Then every node restarts: the voter set comes back from
    the log (VotersRecords after the bootstrap snapshot), a non-leader answers DescribeQuorum
    with NOT_LEADER_OR_FOLLOWER and the leader's endpoint, and no ACK is lost."""
    nodes = _auto_join_cluster(tmp_path)
    try:
        wait_acks(nodes, 30, timeout=15)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()

        def leader_port():
            for n in nodes:
                try:
                    p, _ = describe(n.port)
                    return n.port if p.leader_id == n.id else None
                except AssertionError:
                    continue
            return None
        port = wait_for(leader_port, 20, "a leader after the restart")
        p, eps = describe(port)
        assert sorted(v.replica_id for v in p.current_voters) == [1, 2, 3]
        other = next(n for n in nodes if n.port != port)
        q = wait_for(lambda: (lambda q: q if q.topics[0].partitions[0].leader_id == p.leader_id else None)(
            asyncio.run(_describe(other.port))), 10, "the follower to know the leader")
        assert q.topics[0].partitions[0].error_code == 6  # NOT_LEADER_OR_FOLLOWER
        assert [(nd.node_id, nd.listeners[0].port) for nd in q.nodes] == [(p.leader_id, port)]
        before = sum(len(n.acks) for n in nodes)
        wait_acks(nodes, before + 20, timeout=15)
        for n in nodes:
            n.signal(signal.SIGUSR1)
        time.sleep(2.0)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
        check_acks_everywhere(nodes)
    finally:
        for n in nodes:
            n.kill9()


def test_kill_leader_of_a_dynamic_quorum_loses_no_acknowledged_write(tmp_path):
    """kill -9 of the leader, twice, in a 3-voter quorum built by auto-join from a standalone
    node: the survivors elect a leader from the voter set in their logs, the killed node
    comes back as a voter, and every ACK is in every node's log."""
    paths = dynamic_cluster(str(tmp_path), 3)
    for path in paths[1:]:
        with open(path, "a") as f:
            f.write("controller.quorum.auto.join.enable=true\n")
    nodes = [Node(p, writer=True) for p in paths]
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        wait_for(lambda: sorted(v.replica_id for v in describe(nodes[0].port)[0].current_voters) == [1, 2, 3], 30,
                 "nodes 2 and 3 to join as voters")
        for _ in range(2):
            leader = find_leader(nodes)
            wait_acks(nodes, sum(len(n.acks) for n in nodes) + 20, timeout=15)
            leader.kill9()
            new = find_leader(nodes, exclude=leader, timeout=20)
            assert new is not leader
            leader.start()
            leader.wait_serving()
        wait_acks(nodes, sum(len(n.acks) for n in nodes) + 20, timeout=15)
        for n in nodes:
            n.signal(signal.SIGUSR1)
        time.sleep(2.0)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
        assert len(check_acks_everywhere(nodes)) >= 40
    finally:
        for n in nodes:
            n.kill9()


def test_removing_the_leader_hands_over_to_the_remaining_voters(tmp_path):
    """remove-controller of the leader itself (node 1, the standalone founder): it leads until
    the VotersRecord without it commits, then resigns; nodes 2 and 3 elect a leader that keeps
    writing, and node 1 stays on as an observer.  No ACK is lost."""
    nodes = _auto_join_cluster(tmp_path)
    n1 = nodes[0]
    try:
        wait_acks(nodes, 20, timeout=15)
        r = tool("--bootstrap-controller", f"127.0.0.1:{n1.port}", "--timeout", "30", "remove-controller",
                 "--controller-id", "1", "--controller-directory-id", dir_id(n1))
        assert r.returncode == 0, r.stderr + n1.stderr()[-3000:]
        new = find_leader(nodes[1:], timeout=20)
        p, _ = describe(new.port)
        assert sorted(v.replica_id for v in p.current_voters) == [2, 3]
        wait_for(lambda: 1 in {o.replica_id for o in describe(new.port)[0].observers}, 15,
                 "node 1 to fetch as an observer")
        before = sum(len(n.acks) for n in nodes[1:])
        wait_acks(nodes[1:], before + 20, timeout=15)
        for n in nodes:
            n.signal(signal.SIGUSR1)
        time.sleep(2.0)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
        check_acks_everywhere(nodes)
    finally:
        for n in nodes:
            n.kill9()


def test_voter_moved_to_another_port_updates_its_endpoint(tmp_path):
    """A voter restarted on another port (its listeners changed in server.properties) still
    finds the leader through the voter set, sends UpdateRaftVoter, and the leader's
    DescribeQuorum then shows the new endpoint (a new VotersRecord, KIP-853)."""
    paths = dynamic_cluster(str(tmp_path), 3)
    for path in paths[1:]:
        with open(path, "a") as f:
            f.write("controller.quorum.auto.join.enable=true\n")
    nodes = [Node(p, writer=False) for p in paths]
    n1, n2, n3 = nodes
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        wait_for(lambda: sorted(v.replica_id for v in describe(n1.port)[0].current_voters) == [1, 2, 3], 30,
                 "nodes 2 and 3 to join as voters")
        assert n3.stop() == 0, n3.stderr()[-3000:]
        (new_port,) = free_ports(1)
        text = open(n3.cfg_path).read().replace(f"CONTROLLER://127.0.0.1:{n3.port}", f"CONTROLLER://127.0.0.1:{new_port}")
        with open(n3.cfg_path, "w") as f:
            f.write(text)
        moved = Node(n3.cfg_path, writer=False)
        moved.starts = n3.starts
        nodes[2] = moved
        moved.start()
        moved.wait_serving()
        leader = find_leader(nodes, timeout=15)
        wait_for(lambda: describe(leader.port)[1].get(3) == [f"CONTROLLER://127.0.0.1:{new_port}"], 20,
                 "the leader to record node 3's new endpoint")
        assert sorted(v.replica_id for v in describe(leader.port)[0].current_voters) == [1, 2, 3]
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
    finally:
        for n in nodes + [n3]:
            n.kill9()
