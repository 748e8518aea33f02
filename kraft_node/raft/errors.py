"""Kafka protocol error codes used by the Raft RPCs, and the core's own exceptions.

The numeric values are Kafka's (``org.apache.kafka.common.protocol.Errors``) so a
wire driver can copy ``error_code`` fields straight into the generated codecs.
Only the codes the KRaft RPCs can carry are listed.
"""
from __future__ import annotations

from enum import IntEnum


class Errors(IntEnum):
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    UNSUPPORTED_VERSION = 35
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    INCONSISTENT_VOTER_SET = 94
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


class RaftError(Exception):
    """Base class of the exceptions raised by the consensus core."""


class NotLeaderError(RaftError):
    """An append or leader-only call was made on a replica that is not the leader of that epoch."""


class BufferFullError(RaftError):
    """The leader's accumulator already holds its maximum number of batches.

    This is backpressure, not a failure: the caller retries after the next
    poll has written the queued batches to the log.
    """


class RecordBatchTooLargeError(RaftError):
    """An atomic append does not fit in one batch of ``max_batch_size_bytes``."""


class IllegalTransitionError(RaftError):
    """A role change that Kafka's QuorumState forbids was attempted (always a bug)."""


class InvariantViolation(RaftError):
    """The core detected a broken safety invariant (e.g. truncation below the high watermark)."""
