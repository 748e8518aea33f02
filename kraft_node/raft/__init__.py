"""KRaft consensus: a deterministic core (no I/O, no clock, no entropy of its own).

``RaftCore`` (client.py, with its parts fetch_serving.py, voter_changes.py and
listeners.py, and requests.py) is the replica; api.py what a state machine and a
driver see; ``QuorumState`` (quorum_state.py) the
role gatekeeper; roles.py the six roles; accumulator.py the leader's batch
builder; log.py the log contract plus an in-memory log; messages.py the RPC
dataclasses; ``sim/`` a seeded discrete-event simulator that runs the core.
"""
from kraft_node.raft.api import RaftListener, Ready
from kraft_node.raft.client import RaftCore
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.errors import (
    BufferFullError,
    Errors,
    InvariantViolation,
    NotLeaderError,
    RaftError,
    RecordBatchTooLargeError,
)
from kraft_node.raft.log import MemoryRaftLog, RaftLog
from kraft_node.raft.messages import Batch, LeaderAndEpoch, OffsetAndEpoch, ReplicaKey, SnapshotId
from kraft_node.raft.quorum_state import MemoryQuorumStateStore, QuorumStateStore
from kraft_node.raft.roles import ElectionState

__all__ = ["RaftCore", "RaftListener", "Ready", "QuorumConfig", "Errors", "RaftError", "NotLeaderError",
           "BufferFullError", "RecordBatchTooLargeError", "InvariantViolation", "MemoryRaftLog", "RaftLog",
           "Batch", "LeaderAndEpoch", "OffsetAndEpoch", "ReplicaKey", "SnapshotId",
           "MemoryQuorumStateStore", "QuorumStateStore", "ElectionState"]
