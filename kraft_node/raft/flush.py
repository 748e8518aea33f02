"""How the core's appends become durable: the flush policy its driver injects.

Why a seam here: the core decides *what* must be durable before it is counted or
reported -- Kafka's rules: a voter flushes a fetched append before its next Fetch
reports it, the leader counts its own end offset only after its flush -- and reads
like Kafka's ``KafkaRaftClient``.  *How* a flush runs (an fsync in the poll, or a job
the driver runs off its loop, see ``Ready.flush_jobs``) and *when a job is worth its
thread hand-off* are tuning for a machine, measured in BENCHMARKS.md; they belong to
the driver, which passes a :class:`FlushPolicy` in :class:`CoreOptions` at
construction (the TCP driver's is ``kraft_node.raft.io.flush.RateFlush``).

The policy never weakens a rule: whatever it answers, an offset counts only once the
log says it is flushed (``flushed_end_offset``, or ``complete_flush`` of a job).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Callable, Protocol


class LeaderFlush(enum.Enum):
    """What the leader's poll does with appended, unflushed data."""
    #: fsync in this poll
    INLINE = "inline"
    #: begin a flush job (``log.begin_flush``) unless one is in flight; it covers what is
    #: appended meanwhile only when the next job begins
    JOB = "job"
    #: nothing in this poll: the driver polls again at once, after this poll's Fetch
    #: answers are on the wire (the followers write and fsync while the leader does)
    NEXT_POLL = "next_poll"


class FlushPolicy(Protocol):
    """Chooses how each flush runs; called by the core at the points it flushes."""

    #: a follower's flush after a fetched append runs as a job, and the Fetch that reports
    #: its end offset waits for it (``OutboundRequest.after_flush``)
    follower_jobs: bool

    def leader_appended(self, nbytes: int, now_ms: int) -> None:
        """The leader appended a batch of ``nbytes`` bytes."""

    def leader_flush(self, appended_now: bool, job_in_flight: bool, now_ms: int) -> LeaderFlush:
        """How the leader's poll flushes what is unflushed (``appended_now``: this poll
        appended batches; ``job_in_flight``: a flush job has not landed yet)."""

    def flush_started(self) -> None:
        """A leader flush began (in line, or as a job): what was appended is covered."""


class InlineFlush:
    """Every flush in line, as Kafka does -- but the leader's in the poll *after* the one
    that appended, so that poll's Fetch answers go out first and the followers' fsyncs
    overlap the leader's.  The default policy."""

    follower_jobs = False

    def leader_appended(self, nbytes: int, now_ms: int) -> None:
        pass

    def leader_flush(self, appended_now: bool, job_in_flight: bool, now_ms: int) -> LeaderFlush:
        return LeaderFlush.NEXT_POLL if appended_now else LeaderFlush.INLINE

    def flush_started(self) -> None:
        pass


class JobFlush:
    """Leader flushes as jobs (and followers' with ``follower_jobs``).

    ``min_bytes``: while fewer bytes than this were appended since the last flush began,
    the leader fsyncs in line instead (a job's hand-off costs a lone small append more
    than it saves); 0: always a job.  ``held_back``: the log's count of appended batches
    it holds back from the file (write-behind, ``KafkaRaftLog.pending_writes``): a poll
    that appended such batches leaves the job to the next poll, so its Fetch answers go
    out before the log writes them.  Subclasses refine :meth:`worth_a_job`.
    """

    def __init__(self, *, leader_jobs: bool = True, follower_jobs: bool = False, min_bytes: int = 0,
                 held_back: Callable[[], int] | None = None):
        self.leader_jobs = leader_jobs
        self.follower_jobs = follower_jobs
        self.min_bytes = min_bytes
        self.held_back = held_back
        self.unflushed_bytes = 0  # appended as leader since the last flush began

    def leader_appended(self, nbytes: int, now_ms: int) -> None:
        self.unflushed_bytes += nbytes

    def worth_a_job(self, now_ms: int) -> bool:
        return self.unflushed_bytes >= self.min_bytes

    def leader_flush(self, appended_now: bool, job_in_flight: bool, now_ms: int) -> LeaderFlush:
        if self.leader_jobs and (job_in_flight or self.worth_a_job(now_ms)):
            if appended_now and self.held_back is not None and self.held_back():
                return LeaderFlush.NEXT_POLL
            return LeaderFlush.JOB
        return LeaderFlush.NEXT_POLL if appended_now else LeaderFlush.INLINE

    def flush_started(self) -> None:
        self.unflushed_bytes = 0


@dataclass(frozen=True)
class CoreOptions:
    """How a driver runs the core, fixed at construction (Kafka's core has no such knobs:
    these are the driver's choices, none changes what is decided).

    ``flush``: the :class:`FlushPolicy` (default :class:`InlineFlush`).
    ``defer_listeners``: ``poll`` leaves listener delivery to ``poll_listeners``, which
    the driver calls once it has sent the poll's messages -- Kafka's poll order (the
    requests of pollCurrentState go out before pollListeners), so a follower's next
    Fetch, which the leader's commit waits for, does not wait for the listeners.
    """
    flush: FlushPolicy = field(default_factory=InlineFlush)
    defer_listeners: bool = False
