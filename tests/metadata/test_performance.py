"""The controller's event-performance log (Kafka's EventPerformanceMonitorTest re-stated)."""
from kraft_node.metadata.controller.performance import EventPerformanceMonitor

MS = 1_000_000


class FakeMetrics:
    def __init__(self):
        self.queue, self.processing = [], []

    def update_event_queue_time(self, ms):
        self.queue.append(ms)

    def update_event_queue_processing_time(self, ms):
        self.processing.append(ms)


def test_slow_events_are_logged_at_once(caplog):
    now = [0]
    mon = EventPerformanceMonitor(lambda: now[0], sample_period_ms=60_000, always_log_threshold_ms=2000)
    with caplog.at_level("INFO", logger="kraft.controller.performance"):
        mon.observe("fast", 0, 5 * MS)
        mon.observe("registerBroker", 0, 2500 * MS)
    msgs = [r.message for r in caplog.records]
    assert msgs == ["Exceptionally slow controller event registerBroker took 2500 ms."]


def test_a_summary_per_sample_period_names_the_slowest_event(caplog):
    now = [0]
    metrics = FakeMetrics()
    mon = EventPerformanceMonitor(lambda: now[0], sample_period_ms=100, always_log_threshold_ms=10_000,
                                  metrics=metrics)
    with caplog.at_level("INFO", logger="kraft.controller.performance"):
        mon.observe("a", 1 * MS, 2 * MS)
        mon.observe("b", 3 * MS, 4 * MS)
        now[0] = 150 * MS
        mon.observe("c", 0, 3 * MS)
    assert mon.summaries == ["In the last 150 ms period, 3 controller events were completed, which took an "
                             "average of 3.00 ms each. The slowest event was b, which took 4.00 ms."]
    assert metrics.queue == [1.0, 3.0, 0.0] and metrics.processing == [2.0, 4.0, 3.0]
    # the next period starts empty
    now[0] = 300 * MS
    mon.observe("d", 0, 1 * MS)
    assert mon.summaries[-1].startswith("In the last 150 ms period, 1 controller events were completed")
