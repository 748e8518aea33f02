"""Benchmarks of the pure-Python KRaft core, driven by the simulator.

* ``test_bench_sim_seed``: chaos seeds 6 (5 voters + 1 observer, ~2,300 events)
  and 8 (3 voters + 1 observer), 10 s chaos + 20 s heal of virtual time each:
  the unit of the CI seed sweep.
* ``test_bench_commit_throughput``: a fault-free 3-voter quorum committing
  1,000 appends of 10 records each (wall time of the whole pipeline: accumulator,
  log, fetch long-poll, HWM, listeners).

Run: ``python -m pytest benchmarks/bench_raft_sim.py --benchmark-only``.
Quote medians; the machine is shared and noisy.
"""
from __future__ import annotations

import pytest

from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.sim.cluster import Cluster, SimConfig
from kraft_node.raft.sim.network import NetworkConfig
from kraft_node.raft.sim.runner import run_seed


@pytest.mark.parametrize("seed", [6, 8])
def test_bench_sim_seed(benchmark, seed):
    result = benchmark.pedantic(run_seed, args=(seed,), rounds=10, iterations=1)
    benchmark.extra_info["events"] = result.events


def _commit_run(appends: int = 1000, per_append: int = 10) -> int:
    c = Cluster(1, SimConfig(voters=3, network=NetworkConfig(min_delay_ms=1, max_delay_ms=1),
                             quorum=QuorumConfig(append_linger_ms=5)))
    c.start_all()
    c.run_for(3000)
    done = 0
    while done < appends:
        if c.client_append(per_append):
            done += 1
        c.run_for(2)
    c.run_for(1000)
    assert len(c.acked) == appends * per_append
    return len(c.acked)


def test_bench_commit_throughput(benchmark):
    n = benchmark.pedantic(_commit_run, rounds=5, iterations=1)
    benchmark.extra_info["records"] = n
