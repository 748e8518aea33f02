"""Seeded random scenarios: chaos, then heal, then check safety and progress.

``run_seed(seed)`` derives everything from the seed: cluster shape (1/3/5
voters, maybe an observer), network faults (delay spread, loss, duplication),
and a chaos schedule of client appends, crashes that lose unflushed data,
restarts, graceful shutdowns, partitions, snapshots and forced resignations.
Invariants are checked after every event.  After the chaos phase the network
heals, every node restarts, and the run must converge: one leader, every
node caught up, every acknowledged append committed, and a fresh append
acknowledged.

Command line (prints JSON)::

    python -m kraft_node.raft.sim.runner --seeds 0:200 [--chaos-ms 10000]
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

from kraft_node.raft.client import RaftCore
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.messages import AddRaftVoterRequest, RemoveRaftVoterRequest
from kraft_node.raft.sim.cluster import Cluster, SimConfig, SimNode
from kraft_node.raft.sim.network import NetworkConfig


def _core(n: SimNode) -> RaftCore:
    """The core of a node that is alive (a crashed node has none)."""
    core = n.core
    assert core is not None, f"node {n.id} is not running"
    return core


@dataclass
class RunResult:
    seed: int
    voters: int
    observers: int
    dynamic: bool
    voter_changes: int
    events: int
    virtual_ms: int
    committed: int
    acked: int
    max_epoch: int
    crashes: int
    snapshots: int
    messages: int
    dropped: int


def random_sim_config(rng: random.Random) -> SimConfig:
    voters = rng.choice([1, 3, 3, 3, 5, 5])
    observers = rng.choice([0, 0, 1])
    # Delays up to 1.5 s exceed the election timeout: messages then arrive from
    # epochs long gone, heavily reordered.
    net = NetworkConfig(min_delay_ms=1, max_delay_ms=rng.choice([5, 20, 60, 60, 1500]),
                        drop_probability=rng.choice([0.0, 0.01, 0.05, 0.1, 0.3]),
                        duplicate_probability=rng.choice([0.0, 0.02, 0.05, 0.2]))
    quorum = QuorumConfig(fetch_snapshot_max_bytes=rng.choice([64, 512, 1 << 20]),
                          max_number_of_batches=rng.choice([2, 10]),
                          max_batch_size_bytes=rng.choice([512, 8 << 20]))
    dynamic = rng.random() < 0.4
    if dynamic:
        # KIP-853 voter keys need directory ids; keep spare nodes to add.
        observers = rng.choice([1, 2, 2])
    return SimConfig(voters=voters, observers=observers, quorum=quorum, network=net,
                     with_directory_ids=dynamic or rng.random() < 0.7,
                     crash_after_vote_probability=rng.choice([0.0, 0.0, 0.3]),
                     dynamic=dynamic, auto_join=rng.choice([0, 0, 1]) if dynamic else 0,
                     async_leader_flush=rng.random() < 0.5)


def membership_step(c: Cluster, rng: random.Random) -> None:
    """An admin asks a node (usually the newest leader) to add or remove one voter."""
    leaders = c.leaders()
    alive = [n for n in c.nodes.values() if n.alive]
    if not alive:
        return
    target = max(leaders, key=lambda x: _core(x).epoch) if leaders and rng.random() < 0.85 else rng.choice(alive)
    voters = _core(target).voter_set
    outside = [i for i in c.nodes if i not in voters.ids]
    if outside and (rng.random() < 0.5 or len(voters.ids) == 1):
        nid = rng.choice(outside)
        key = c.keys[nid]
        c.admin_send(target.id, AddRaftVoterRequest(c.cluster_id, rng.choice([500, 3000]), key.id,
                                                    key.directory_id))
    else:
        vid = rng.choice(sorted(voters.ids))
        key = voters.keys()[vid]
        c.admin_send(target.id, RemoveRaftVoterRequest(c.cluster_id, key.id, key.directory_id))


def run_seed(seed: int, chaos_ms: int = 10_000, heal_ms: int = 20_000,
             trace: Callable[[str], object] | None = None) -> RunResult:
    """Run one seeded scenario; ``trace`` (e.g. ``print``) receives every role change."""
    rng = random.Random(seed * 7919 + 17)
    cfg = random_sim_config(rng)
    # (from the seed, not rng: the chaos schedule stays as it was)
    if cfg.async_leader_flush:
        cfg = replace(cfg, async_flush_min_bytes=(0, 150, 1 << 20)[seed % 3])
    cfg = replace(cfg, defer_listeners=(seed // 3) % 2 == 1, async_follower_flush=(seed // 5) % 2 == 1,
                  write_behind=(seed // 7) % 2 == 1)
    c = Cluster(seed, cfg)
    c.checker.trace = trace
    if trace is not None:
        trace(f"seed {seed}: {cfg}")
    sched = c.scheduler
    stats = {"crashes": 0, "snapshots": 0}
    ids = list(c.nodes)

    def restart_if_dead(nid: int) -> None:
        if not c.nodes[nid].alive:
            c.nodes[nid].start()

    def crash_counted(nid: int) -> None:
        c.crash(nid)
        stats["crashes"] += 1

    def chaos_step() -> None:
        now = sched.now
        if now >= chaos_ms:
            return
        r = rng.random()
        if r < 0.55:
            c.client_append(rng.randint(1, 4))
        elif r < 0.60:
            nid = rng.choice(ids)
            if c.nodes[nid].alive:
                c.crash(nid)
                stats["crashes"] += 1
                sched.at(now + rng.randint(50, 3000), partial(restart_if_dead, nid))
        elif r < 0.62:
            nid = rng.choice(ids)
            c.shutdown_gracefully(nid, timeout_ms=rng.choice([500, 3000]))
            sched.at(now + rng.randint(500, 4000), partial(restart_if_dead, nid))
        elif r < 0.66:
            if rng.random() < 0.5:
                c.network.isolate(rng.choice(ids), ids)
            else:
                shuffled = ids[:]
                rng.shuffle(shuffled)
                cut = rng.randint(1, len(shuffled))
                c.network.partition([set(shuffled[:cut]), set(shuffled[cut:])])
            sched.at(now + rng.randint(100, 3000), c.network.heal)
        elif r < 0.74:
            if c.maybe_snapshot(rng.choice(ids)):
                stats["snapshots"] += 1
        elif r < 0.75:
            for n in c.leaders():
                core = _core(n)
                core.resign(core.epoch)
                n.poll()
        elif r < 0.78:
            # Crash storm: bounce a voter almost at once, many times, which lands
            # crashes between a durable write and the messages that follow it.
            for k in range(rng.randint(2, 6)):
                nid = rng.choice(c.voter_ids)
                t = now + k * rng.randint(1, 40)
                sched.at(t, partial(crash_counted, nid))
                sched.at(t + rng.randint(1, 30), partial(restart_if_dead, nid))
        elif r < 0.92 and c.sim.dynamic:
            membership_step(c, rng)
        sched.at(now + rng.randint(20, 250), chaos_step)

    c.start_all()
    sched.at(rng.randint(0, 100), chaos_step)
    c.run_until(chaos_ms)

    # Heal: perfect network, everyone up, then the quorum must converge.
    c.network.heal()
    c.network.config = NetworkConfig(min_delay_ms=1, max_delay_ms=5)
    for nid in ids:
        n = c.nodes[nid]
        if not n.alive:
            n.start()
        elif n.shutting_down:
            n.crash()
            n.start()
    c.run_for(heal_ms // 2)
    # A final append must be acknowledged once things settle.
    before = len(c.acked)
    for _ in range(50):
        if c.client_append(1):
            break
        c.run_for(100)
    c.run_until(chaos_ms + heal_ms)
    if len(c.acked) <= before:
        c.checker.fail(f"no append acknowledged after healing (leaders {[n.id for n in c.leaders()]})")
    c.checker.final_check()
    changes = len(c.checker.committed_voter_sets) - 1
    return RunResult(seed, cfg.voters, cfg.observers, cfg.dynamic, changes, sched.events_run, sched.now,
                     len(c.checker.committed), len(c.acked), max(c.checker.leader_of_epoch, default=0),
                     stats["crashes"], stats["snapshots"], c.network.sent, c.network.dropped)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:100", help="start:stop range of seeds")
    ap.add_argument("--chaos-ms", type=int, default=10_000)
    ap.add_argument("--heal-ms", type=int, default=20_000)
    ap.add_argument("--trace", action="store_true", help="print every role change (use with one seed)")
    args = ap.parse_args(argv)
    a, b = (int(x) for x in args.seeds.split(":"))
    if args.trace:
        for s in range(a, b):
            print(run_seed(s, args.chaos_ms, args.heal_ms, trace=print))
        return 0
    t0 = time.perf_counter()
    failures = []
    events = 0
    for s in range(a, b):
        try:
            r = run_seed(s, args.chaos_ms, args.heal_ms)
            events += r.events
        except Exception as e:  # report every failing seed, keep going
            failures.append({"seed": s, "error": f"{type(e).__name__}: {e}"})
    wall = time.perf_counter() - t0
    print(json.dumps({"seeds": b - a, "failures": failures, "wall_s": round(wall, 2),
                      "events": events, "events_per_s": round(events / wall)}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
