"""The TCP driver's flush policy: flush jobs, and the rate rule that keeps small ones in line.

Why here and not in the core: which flushes leave the event loop is tuning for this
machine (BENCHMARKS.md, sessions 4, 7 and 9); the core only asks its
:class:`~kraft_node.raft.flush.FlushPolicy` how to flush and counts an offset once the
log says it is durable either way.
"""
from __future__ import annotations

from typing import Callable

from kraft_node.raft.flush import JobFlush

#: Width of the leader's append-rate buckets: ``min_bytes`` appended within about two
#: buckets counts as a steady stream.
FLUSH_RATE_BUCKET_MS = 10


class RateFlush(JobFlush):
    """:class:`JobFlush` whose in-line threshold also looks at the append rate.

    With ``min_bytes`` (the driver's ``leader_flush="auto"`` without native AIO: 64 KiB)
    a leader flush is fsync'd in line while fewer than ``min_bytes`` were appended since
    the last flush *and* within the last two rate buckets.  A job costs a thread
    hand-off that a lone small append feels (its commit waits for it); a big flush, or a
    steady stream of small ones (linger 0 under load: each poll would block the loop for
    an fsync of a few KB), gains from leaving the loop free.
    """

    def __init__(self, *, leader_jobs: bool = True, follower_jobs: bool = False, min_bytes: int = 0,
                 held_back: Callable[[], int] | None = None):
        super().__init__(leader_jobs=leader_jobs, follower_jobs=follower_jobs, min_bytes=min_bytes,
                         held_back=held_back)
        self._rate_bucket = (0, 0, 0)  # (bucket start ms, bytes in it, bytes in the one before)

    def leader_appended(self, nbytes: int, now_ms: int) -> None:
        self.unflushed_bytes += nbytes
        start, cur, prev = self._rate_bucket
        if now_ms >= start + FLUSH_RATE_BUCKET_MS:
            # a new bucket; the one before it counts only if it was the previous one
            prev = cur if now_ms < start + 2 * FLUSH_RATE_BUCKET_MS else 0
            start, cur = now_ms, 0
        self._rate_bucket = (start, cur + nbytes, prev)

    def recent_append_bytes(self, now_ms: int) -> int:
        """Bytes the leader appended in the current and the previous rate bucket."""
        start, cur, prev = self._rate_bucket
        if now_ms >= start + 2 * FLUSH_RATE_BUCKET_MS:
            return 0
        if now_ms >= start + FLUSH_RATE_BUCKET_MS:
            return cur
        return cur + prev

    def worth_a_job(self, now_ms: int) -> bool:
        return self.unflushed_bytes >= self.min_bytes or self.recent_append_bytes(now_ms) >= self.min_bytes
