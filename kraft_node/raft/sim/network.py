"""Virtual clock, event scheduler and a seeded faulty network.

Everything is ordered by ``(time_ms, sequence)``, so a seed replays exactly.
The network models a per-message random delay (which reorders messages),
loss, duplication and partitions (a set of blocked directed links).  A
message to a node that restarted since it was sent is dropped, like a
reset TCP connection.
"""
from __future__ import annotations

import heapq
import random
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable


class EventScheduler:
    """A priority queue of callbacks on a virtual millisecond clock."""

    def __init__(self) -> None:
        self.now = 0
        self._queue: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.events_run = 0
        self.max_events_at_one_time = 5000

    def at(self, time_ms: int, fn: Callable[[], None]) -> None:
        if time_ms < self.now:
            time_ms = self.now
        self._seq += 1
        heapq.heappush(self._queue, (time_ms, self._seq, fn))

    def run_until(self, end_ms: int, after_event: Callable[[], None] | None = None) -> None:
        q = self._queue
        same_time = 0
        while q and q[0][0] <= end_ms:
            t, _, fn = heapq.heappop(q)
            same_time = same_time + 1 if t == self.now else 0
            if same_time > self.max_events_at_one_time:
                # Virtual time must advance: a node re-polling at "now" forever is a bug.
                raise RuntimeError(f"livelock: more than {self.max_events_at_one_time} events at t={t}ms "
                                   f"(last: {fn})")
            self.now = t
            fn()
            self.events_run += 1
            if after_event is not None:
                after_event()
        self.now = max(self.now, end_ms)


@dataclass
class NetworkConfig:
    min_delay_ms: int = 1
    max_delay_ms: int = 20
    drop_probability: float = 0.0
    duplicate_probability: float = 0.0


@dataclass(frozen=True)
class Envelope:
    source: int
    destination: int
    dest_incarnation: int
    kind: str  # "request" | "response"
    correlation_id: int
    payload: Any


class Network:
    def __init__(self, scheduler: EventScheduler, rng: random.Random, config: NetworkConfig,
                 deliver: Callable[[Envelope], None]):
        self.scheduler = scheduler
        self.rng = rng
        self.config = config
        self.deliver = deliver
        self.blocked: set[tuple[int, int]] = set()
        self.sent = self.dropped = self.duplicated = 0

    def partition(self, groups: list[set[int]]) -> None:
        """Block every link between different groups (nodes in no group are unaffected)."""
        self.blocked.clear()
        for i, a in enumerate(groups):
            for b in groups[i + 1:]:
                for x in a:
                    for y in b:
                        self.blocked.add((x, y))
                        self.blocked.add((y, x))

    def isolate(self, node: int, others: list[int]) -> None:
        for o in others:
            if o != node:
                self.blocked.add((node, o))
                self.blocked.add((o, node))

    def heal(self) -> None:
        self.blocked.clear()

    def send(self, env: Envelope) -> None:
        self.sent += 1
        cfg = self.config
        if (env.source, env.destination) in self.blocked:
            self.dropped += 1
            return
        if cfg.drop_probability and self.rng.random() < cfg.drop_probability:
            self.dropped += 1
            return
        copies = 1
        if cfg.duplicate_probability and self.rng.random() < cfg.duplicate_probability:
            copies = 2
            self.duplicated += 1
        for _ in range(copies):
            delay = self.rng.randint(cfg.min_delay_ms, cfg.max_delay_ms)
            self.scheduler.at(self.scheduler.now + delay, partial(self._arrive, env))

    def _arrive(self, env: Envelope) -> None:
        # A partition that started while the message was in flight also drops it.
        if (env.source, env.destination) in self.blocked:
            self.dropped += 1
            return
        self.deliver(env)
