"""The seed sweep (tests/raft/test_raft_sim.py) must really exercise KIP-853 membership changes.

About 40% of the seeds run a dynamic quorum (bootstrap snapshot, kraft.version 1) where an
admin adds and removes voters, and some observers auto-join, while the usual faults happen;
the invariant checker requires every committed voter change to be single-member.  These
tests prove the sweep reaches those paths, so its green result means something."""
from __future__ import annotations

from collections import Counter

from kraft_node.raft.messages import ReplicaKey
from kraft_node.raft.sim import cluster as cl
from kraft_node.raft.sim.invariants import SafetyViolation
from kraft_node.raft.sim.runner import run_seed
from kraft_node.raft.voters import VoterSet


def test_dynamic_seeds_commit_voter_changes_under_chaos():
    results = [run_seed(s) for s in range(60)]
    dynamic = [r for r in results if r.dynamic]
    assert len(dynamic) >= 10
    assert sum(r.voter_changes for r in dynamic) >= 10
    assert sum(1 for r in dynamic if r.voter_changes >= 2) >= 3


def test_membership_paths_are_reached():
    total: Counter = Counter()
    orig_crash = cl.SimNode.crash

    def crash(self):
        if self.alive:
            total.update(self.core.stats)
        orig_crash(self)

    cl.SimNode.crash = crash
    try:
        for s in range(80):
            run_seed(s)
    finally:
        cl.SimNode.crash = orig_crash
    for key in ("voter_change_add_committed", "voter_change_remove_committed", "auto_join_requests"):
        assert total[key] > 0, (key, total)


def test_checker_rejects_a_two_member_voter_change():
    """The new invariant can fail: feed it a committed set two changes away."""
    c = cl.Cluster(1, cl.SimConfig(voters=3, dynamic=True))
    two_away = VoterSet.of([ReplicaKey(1), ReplicaKey(7), ReplicaKey(8)])
    try:
        c.checker._on_committed_voters(10, two_away)
    except SafetyViolation as e:
        assert "more than one change" in str(e)
    else:
        raise AssertionError("a two-member change passed the checker")
