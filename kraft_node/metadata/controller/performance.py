"""Kafka's EventPerformanceMonitor: the controller's event-performance log.

Every event's processing time is counted; an event slower than
``controller.performance.always.log.threshold.ms`` (2 s) is logged at once, and once per
``controller.performance.sample.period.ms`` (60 s) a summary names the period's event count,
mean time and slowest event.  The same timings feed the EventQueueTimeMs and
EventQueueProcessingTimeMs histograms when metrics are on.
"""
from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("kraft.controller.performance")

NS_PER_MS = 1_000_000


class EventPerformanceMonitor:
    def __init__(self, clock_ns: Callable[[], int], *, sample_period_ms: int = 60_000,
                 always_log_threshold_ms: int = 2000, metrics: Any = None):
        self._clock_ns = clock_ns
        self.sample_period_ns = sample_period_ms * NS_PER_MS
        self.always_log_threshold_ns = always_log_threshold_ms * NS_PER_MS
        self.metrics = metrics
        self._period_start_ns = clock_ns()
        self._count = 0
        self._total_ns = 0
        self._slowest_name = ""
        self._slowest_ns = -1
        #: the summaries logged, newest last (the last few; for tests and operators' tools)
        self.summaries: list[str] = []

    def observe(self, name: str, queue_ns: int, processing_ns: int) -> None:
        m = self.metrics
        if m is not None:
            m.update_event_queue_time(queue_ns / NS_PER_MS)
            m.update_event_queue_processing_time(processing_ns / NS_PER_MS)
        self._count += 1
        self._total_ns += processing_ns
        if processing_ns > self._slowest_ns:
            self._slowest_ns, self._slowest_name = processing_ns, name
        if processing_ns >= self.always_log_threshold_ns:
            log.info("Exceptionally slow controller event %s took %d ms.", name, processing_ns // NS_PER_MS)
        now = self._clock_ns()
        if now - self._period_start_ns >= self.sample_period_ns:
            self._summarize(now)

    def _summarize(self, now_ns: int) -> None:
        period_ms = (now_ns - self._period_start_ns) // NS_PER_MS
        if self._count:
            msg = (f"In the last {period_ms} ms period, {self._count} controller events were completed, which "
                   f"took an average of {self._total_ns / self._count / NS_PER_MS:.2f} ms each. The slowest event "
                   f"was {self._slowest_name}, which took {self._slowest_ns / NS_PER_MS:.2f} ms.")
        else:
            msg = f"In the last {period_ms} ms period, there were no controller events completed."
        log.info(msg)
        self.summaries = (self.summaries + [msg])[-10:]
        self._period_start_ns = now_ns
        self._count = self._total_ns = 0
        self._slowest_name, self._slowest_ns = "", -1
