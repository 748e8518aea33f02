"""Kafka's DeferredEventQueue: the controller's purgatory.

A write's answer waits here, keyed by the offset of its last record, until the stable
offset reaches it (``complete_up_to``); a renounce fails everything still waiting
(``fail_all`` with NOT_CONTROLLER).  Offsets are added in non-decreasing order (the active
controller appends in order), so the queue is a deque and completion pops from the left.
"""
from __future__ import annotations

from collections import deque
from typing import Callable


class Purgatory:
    def __init__(self) -> None:
        #: (offset, complete(exc or None)) in offset order
        self._waiting: deque[tuple[int, Callable[[BaseException | None], None]]] = deque()

    def add(self, offset: int, complete: Callable[[BaseException | None], None]) -> None:
        if self._waiting and offset < self._waiting[-1][0]:
            raise RuntimeError(f"There is already a deferred event with offset {self._waiting[-1][0]}. "
                               f"We should not add one with an offset of {offset} which is lower than that.")
        self._waiting.append((offset, complete))

    def complete_up_to(self, offset: int) -> int:
        """Complete every waiter at or below ``offset``; returns how many."""
        n = 0
        w = self._waiting
        while w and w[0][0] <= offset:
            _, complete = w.popleft()
            complete(None)
            n += 1
        return n

    def fail_all(self, exc: BaseException) -> None:
        w = self._waiting
        while w:
            _, complete = w.popleft()
            complete(exc)

    def highest_pending_offset(self) -> int | None:
        return self._waiting[-1][0] if self._waiting else None

    def __len__(self) -> int:
        return len(self._waiting)
