"""Deterministic simulator for the KRaft core: seeded network faults, crashes, invariants."""
from kraft_node.raft.sim.cluster import Cluster, SimConfig, SimNode
from kraft_node.raft.sim.invariants import InvariantChecker, SafetyViolation
from kraft_node.raft.sim.network import EventScheduler, Network, NetworkConfig
from kraft_node.raft.sim.runner import run_seed

__all__ = ["Cluster", "SimConfig", "SimNode", "InvariantChecker", "SafetyViolation", "EventScheduler",
           "Network", "NetworkConfig", "run_seed"]
