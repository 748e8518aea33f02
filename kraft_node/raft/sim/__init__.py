"""Deterministic simulator for the KRaft core: seeded network faults, crashes, invariants."""
from kraft_node.raft.sim.cluster import Cluster, SimConfig, SimNode
from kraft_node.raft.sim.invariants import InvariantChecker, SafetyViolation
from kraft_node.raft.sim.network import EventScheduler, Network, NetworkConfig

__all__ = ["Cluster", "SimConfig", "SimNode", "InvariantChecker", "SafetyViolation", "EventScheduler",
           "Network", "NetworkConfig"]
# run_seed lives in kraft_node.raft.sim.runner (not imported here so `python -m` runs it cleanly).
