"""RequestManager: one outstanding request per destination (Kafka's RequestManager.java).

Why it is its own module: it is the one piece of the core that keeps time for
outbound requests (timeouts, retry backoffs), and the core holds two of them --
Fetch/Vote/BeginQuorumEpoch/EndQuorumEpoch traffic and voter-change RPCs -- so
a joining observer keeps fetching while its AddRaftVoter waits for the commit.
Only one request per peer in flight is also what stops a follower appending the
same offsets twice: a response whose correlation id is not the outstanding one
is dropped.
"""
from __future__ import annotations

from kraft_node.raft.config import QuorumConfig

#: "No deadline": later than any clock the core is given.
NEVER = 2 ** 62


class RequestManager:
    """At most one outstanding request per destination, with timeout and retry backoff."""

    def __init__(self, config: QuorumConfig):
        self.config = config
        self.inflight: dict[int, tuple[int, int]] = {}  # dest -> (correlation id, sent ms)
        self.backoff_until: dict[int, int] = {}

    def is_ready(self, dest: int, now_ms: int) -> bool:
        inf = self.inflight.get(dest)
        if inf is not None:
            if now_ms - inf[1] < self.config.request_timeout_ms:
                return False
            del self.inflight[dest]
            self.backoff_until[dest] = now_ms + self.config.retry_backoff_ms
        return now_ms >= self.backoff_until.get(dest, 0)

    def has_inflight(self, dest: int) -> bool:
        return dest in self.inflight

    def on_send(self, dest: int, correlation_id: int, now_ms: int) -> None:
        self.inflight[dest] = (correlation_id, now_ms)

    def accept_response(self, dest: int, correlation_id: int) -> bool:
        inf = self.inflight.get(dest)
        if inf is None or inf[0] != correlation_id:
            return False
        del self.inflight[dest]
        return True

    def on_failure(self, dest: int, now_ms: int) -> None:
        self.backoff_until[dest] = now_ms + self.config.retry_backoff_ms

    def reset(self) -> None:
        self.inflight.clear()
        self.backoff_until.clear()

    def expire(self, now_ms: int) -> None:
        """Fail every request older than request.timeout.ms (it starts its retry backoff)."""
        for dest, (_, sent) in list(self.inflight.items()):
            if now_ms - sent >= self.config.request_timeout_ms:
                del self.inflight[dest]
                self.backoff_until[dest] = now_ms + self.config.retry_backoff_ms

    def next_deadline(self, now_ms: int) -> int:
        """Earliest future moment a request times out or a backoff ends."""
        d = NEVER
        for _, sent in self.inflight.values():
            d = min(d, sent + self.config.request_timeout_ms)
        for t in self.backoff_until.values():
            if t > now_ms:
                d = min(d, t)
        return d
