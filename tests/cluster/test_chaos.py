"""A bounded chaos run (issue 19, Tests): 3 voters started from the CLI on 127.0.0.1, every
one with ``--demo-writer``; the leader is killed with SIGKILL or frozen with SIGSTOP (long
enough for the others to elect a successor), then SIGCONT, in a seeded loop; mid-run a
second ``kraft-server-start`` is started on the directory of a running node (it must exit
non-zero with the lock error and change nothing).  At the end every acknowledged write
(``ACK <offset> <value>`` on a writer's stdout) is in every node's log exactly once, at its
acknowledged offset, and each writer's acknowledged values are in the order it wrote them.

Bounded: ~60-90 s of wall time, a hard pytest timeout, every wait has a deadline, every
process is killed in ``finally``.
"""
from __future__ import annotations

import random
import signal
import time

import pytest
from support.cluster import Node, find_leader, wait_acks
from support.raft import cluster_properties, free_ports
from support.server import dir_differences, run_server, snapshot_dir

from kraft_node.raft.io.kafka_log import KafkaRaftLog

CHAOS_SECONDS = 40.0
SEED = 19


def log_records(node: Node) -> list[tuple[int, bytes]]:
    """Every data record in the node's log, (offset, value), in offset order."""
    log = KafkaRaftLog(node.cfg.metadata_partition_dir)
    out = []
    try:
        pos = log.start_offset
        while pos < log.end_offset:
            bs = log.read(pos, 1 << 22)
            for b in bs:
                if not b.is_control:
                    out.extend((b.base_offset + i, r) for i, r in enumerate(b.records))
            pos = bs[-1].next_offset
    finally:
        log.close()
    return out


def second_process_is_refused(node: Node, tmp_path) -> None:
    """Start another kraft-server-start on ``node``'s log dir (its config with another port)
    while ``node`` runs.  The node is frozen meanwhile (SIGSTOP: it keeps its lock), so its
    directory is still and a byte comparison can show that the refused start wrote nothing."""
    (port,) = free_ports(1)
    other = tmp_path / f"intruder-{node.id}.properties"
    other.write_text(open(node.cfg_path).read().replace(f"127.0.0.1:{node.port}", f"127.0.0.1:{port}"))
    d = node.cfg.metadata_log_dir
    node.signal(signal.SIGSTOP)
    try:
        before = snapshot_dir(d)
        r = run_server(str(other), "--demo-writer", "--exit-after-seconds", "5", timeout=30)
        after = snapshot_dir(d)
    finally:
        node.signal(signal.SIGCONT)
    assert r.returncode == 1, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"kraft-server-start: log directory {d} is locked by another process (pid {node.proc.pid}): "
        "is another kraft node running on it?"], r.stderr
    assert dir_differences(before, after) == []


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_chaos_kill_and_stop_the_leader_with_an_intruder(tmp_path):
    rng = random.Random(SEED)
    paths = cluster_properties(str(tmp_path), 3)
    nodes = [Node(p, writer=True) for p in paths]
    events = []
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()
        t_end = time.monotonic() + CHAOS_SECONDS
        rounds = 0
        intruded = False
        while time.monotonic() < t_end or not intruded:
            rounds += 1
            leader = find_leader(nodes, timeout=20)
            wait_acks(nodes, sum(len(n.acks) for n in nodes) + rng.randint(5, 40), timeout=20)
            if rounds == 3 or (not intruded and time.monotonic() >= t_end):
                victim = next(n for n in nodes if n is not leader and n.alive)
                second_process_is_refused(victim, tmp_path)
                intruded = True
                events.append(f"intruder on node {victim.id}")
                continue
            if rng.random() < 0.5:
                leader.kill9()
                find_leader(nodes, exclude=leader, timeout=20)
                leader.start()
                leader.wait_serving()
                events.append(f"kill -9 node {leader.id}")
            else:
                leader.signal(signal.SIGSTOP)
                try:
                    find_leader(nodes, exclude=leader, timeout=20)
                    time.sleep(rng.uniform(0.2, 1.0))  # the new leader commits while the old one sleeps
                finally:
                    leader.signal(signal.SIGCONT)
                events.append(f"SIGSTOP node {leader.id}")
        wait_acks(nodes, sum(len(n.acks) for n in nodes) + 20, timeout=20)
        for n in nodes:
            n.signal(signal.SIGUSR1)  # stop writing; let the followers catch up
        time.sleep(2.0)
        for n in nodes:
            assert n.stop() == 0, n.stderr()[-3000:]
    finally:
        for n in nodes:
            n.kill9()

    acks: dict[int, str] = {}
    for n in nodes:
        for off, val in n.acks:
            assert acks.setdefault(off, val) == val, f"two values acknowledged at offset {off}"
    assert len(acks) > 200, f"only {len(acks)} acknowledged writes: {events}"
    assert len({v for v in acks.values()}) == len(acks), "one value acknowledged at two offsets"
    for n in nodes:
        recs = log_records(n)
        at = dict(recs)
        missing = [(o, v) for o, v in acks.items() if at.get(o) != v.encode()]
        assert not missing, f"node {n.id} lacks {len(missing)} acknowledged writes, e.g. {missing[:3]}; {events}"
        counts: dict[bytes, int] = {}
        for _, v in recs:
            counts[v] = counts.get(v, 0) + 1
        dup = [v for v in acks.values() if counts[v.encode()] != 1]
        assert not dup, f"node {n.id} holds acknowledged values more than once: {dup[:3]}"
    # in order: each writer's (node-pid) acknowledged sequence numbers grow with the offset
    by_writer: dict[str, list[tuple[int, int]]] = {}
    for off, val in acks.items():
        prefix, seq = val.rsplit("-", 1)
        by_writer.setdefault(prefix, []).append((off, int(seq)))
    for prefix, pairs in by_writer.items():
        seqs = [s for _, s in sorted(pairs)]
        assert seqs == sorted(seqs), f"writer {prefix} acknowledged out of order"
    kills = sum(e.startswith("kill") for e in events)
    stops = sum(e.startswith("SIGSTOP") for e in events)
    print(f"\nchaos: {rounds} rounds, {kills} kill -9, {stops} SIGSTOP, {len(acks)} acknowledged writes, "
          f"{len(by_writer)} writers; {events}")
    assert kills and stops and intruded, events
