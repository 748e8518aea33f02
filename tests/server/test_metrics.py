"""kraft_node.metrics: Kafka's controller and raft metrics under one naming scheme, one
registry per node, scraped over HTTP from the node's event loop.

The controller scenarios re-state Kafka's QuorumControllerMetricsTest (the metric names,
and that close() removes them; a histogram update; the last-applied gauges and counts);
the raft ones read a real single-voter RaftDriver."""
from __future__ import annotations

import asyncio
import math
import os
from types import SimpleNamespace

import pytest
from support.raft import cluster_properties, free_ports

from kraft_node.metrics import (
    RAFT_STATES,
    ControllerMetrics,
    MetricsRegistry,
    NodeMetrics,
    RaftMetrics,
    SampledStat,
    StorageRecoveryMetrics,
    metric_name,
)
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.log.config import LogConfig
from kraft_storage.log.log import RECOVERY_COUNTERS, KafkaLog
from kraft_storage.record import build_batch

KC = "kafka_controller_KafkaController_"
CEM = "kafka_controller_ControllerEventManager_"
RAFT = "kafka_server_raft_metrics_"


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def http(host, port, method="GET", path="/metrics", accept=None):
    """One HTTP/1.1 request; returns (status code, headers, body)."""
    reader, writer = await asyncio.open_connection(host, port)
    extra = f"Accept: {accept}\r\n" if accept else ""
    writer.write(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode())
    await writer.drain()
    raw = await reader.read()  # the server closes the connection after one answer
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


def samples(text: bytes) -> dict[str, float]:
    """Sample line -> value from the text format (comments skipped)."""
    out = {}
    for line in text.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


# ------------------------------------------------------------------ names
def test_the_name_is_kafkas_object_name_with_its_case():
    assert metric_name("kafka.controller", "KafkaController", "ActiveControllerCount") == \
        "kafka_controller_KafkaController_ActiveControllerCount"
    assert metric_name("kafka.server", "raft-metrics", "commit-latency-avg") == \
        "kafka_server_raft_metrics_commit_latency_avg"


# ------------------------------------------------------------------ controller
CONTROLLER_NAMES = {KC + n for n in (
    "ActiveControllerCount", "LastAppliedRecordOffset", "LastCommittedRecordOffset", "LastAppliedRecordTimestamp",
    "LastAppliedRecordLagMs", "TimedOutBrokerHeartbeatCount", "EventQueueOperationsStartedCount",
    "EventQueueOperationsTimedOutCount", "NewActiveControllersCount", "ActiveBrokerCount", "FencedBrokerCount")} | {
    CEM + "EventQueueTimeMs", CEM + "EventQueueProcessingTimeMs"}


def test_controller_metric_names_and_close_removes_them():
    reg = MetricsRegistry()
    m = ControllerMetrics(reg)
    assert reg.names() == CONTROLLER_NAMES
    m.close()
    assert reg.names() == set()
    m.close()  # idempotent
    ControllerMetrics(reg)  # the names are free again: a new controller on the same registry
    assert reg.names() == CONTROLLER_NAMES


def test_a_name_is_registered_once_per_registry():
    reg = MetricsRegistry()
    ControllerMetrics(reg)
    with pytest.raises(ValueError, match="Duplicated"):
        ControllerMetrics(reg)


@pytest.mark.parametrize("update,name", [("update_event_queue_time", "EventQueueTimeMs"),
                                         ("update_event_queue_processing_time", "EventQueueProcessingTimeMs")])
def test_event_queue_histograms_in_ms(update, name):
    reg = MetricsRegistry()
    m = ControllerMetrics(reg)
    getattr(m, update)(1000)
    assert reg.value(CEM + name + "_count") == 1 and reg.value(CEM + name + "_sum") == 1000
    assert reg.value(CEM + name + "_bucket", {"le": "500.0"}) == 0
    assert reg.value(CEM + name + "_bucket", {"le": "1000.0"}) == 1
    getattr(m, update)(0.3)
    assert reg.value(CEM + name + "_count") == 2 and reg.value(CEM + name + "_bucket", {"le": "0.5"}) == 1


def test_last_applied_record_metrics_and_counts():
    now = [1000]
    reg = MetricsRegistry()
    m = ControllerMetrics(reg, wall_clock=lambda: now[0])
    assert reg.value(KC + "ActiveControllerCount") == 0 and reg.value(KC + "LastAppliedRecordOffset") == 0
    m.set_last_applied(100, 500)
    m.set_last_committed(50)
    m.set_active(True)
    for _ in range(2):
        m.inc_timed_out_heartbeats()
    for _ in range(3):
        m.inc_operations_started()
    for _ in range(4):
        m.inc_operations_timed_out()
    for _ in range(5):
        m.inc_new_active_controllers()
    assert reg.value(KC + "LastAppliedRecordOffset") == 100
    assert reg.value(KC + "LastAppliedRecordTimestamp") == 500
    assert reg.value(KC + "LastAppliedRecordLagMs") == 1000 - 500
    assert reg.value(KC + "LastCommittedRecordOffset") == 50
    assert reg.value(KC + "ActiveControllerCount") == 1 and m.active
    assert reg.value(KC + "TimedOutBrokerHeartbeatCount") == 2
    assert reg.value(KC + "EventQueueOperationsStartedCount") == 3
    assert reg.value(KC + "EventQueueOperationsTimedOutCount") == 4
    assert reg.value(KC + "NewActiveControllersCount") == 5
    now[0] = 4000  # the lag is read at scrape time
    assert reg.value(KC + "LastAppliedRecordLagMs") == 3500
    m.set_active(False)
    assert reg.value(KC + "ActiveControllerCount") == 0


def test_broker_counts_are_read_at_scrape_time():
    class Cluster:
        active, fenced = 0, 0
    cluster = Cluster()
    reg = MetricsRegistry()
    m = ControllerMetrics(reg)
    assert reg.value(KC + "ActiveBrokerCount") == 0 and reg.value(KC + "FencedBrokerCount") == 0
    m.track_broker_counts(lambda: cluster.active, lambda: cluster.fenced)
    cluster.active, cluster.fenced = 3, 1
    assert reg.value(KC + "ActiveBrokerCount") == 3 and reg.value(KC + "FencedBrokerCount") == 1
    cluster.active = 4
    assert reg.value(KC + "ActiveBrokerCount") == 4


def test_a_failing_callback_reads_nan_and_the_scrape_goes_on(caplog):
    reg = MetricsRegistry()
    m = ControllerMetrics(reg)

    def broken():
        raise KeyError("gone")
    m.track_broker_counts(broken, lambda: 2)
    body, _ = reg.exposition()
    values = samples(body)
    assert math.isnan(values[KC + "ActiveBrokerCount"]) and values[KC + "FencedBrokerCount"] == 2
    reg.exposition()
    warned = [r for r in caplog.records if "ActiveBrokerCount" in r.getMessage()]
    assert len(warned) == 1  # once, not per scrape


# ------------------------------------------------------------------ endpoint
def test_scrape_over_http_and_two_registries_are_separate():
    host = "127.0.0.1"

    async def go():
        regs = [MetricsRegistry(), MetricsRegistry()]
        ms = [ControllerMetrics(r) for r in regs]
        ms[0].set_active(True)
        ms[0].set_last_applied(7, 0)
        ms[1].set_last_applied(9, 0)
        ms[1].update_event_queue_time(3)
        StorageRecoveryMetrics(regs[1])
        ports = free_ports(2)
        for r, p in zip(regs, ports):
            assert await r.start_http_server(host, p) == (host, p) == r.address
        try:
            got = [await http(host, p) for p in ports]
            assert [g[0] for g in got] == [200, 200]
            assert all(g[1]["content-type"].startswith("text/plain; version=0.0.4") for g in got)
            a, b = samples(got[0][2]), samples(got[1][2])
            assert a[KC + "ActiveControllerCount"] == 1 and b[KC + "ActiveControllerCount"] == 0
            assert a[KC + "LastAppliedRecordOffset"] == 7 and b[KC + "LastAppliedRecordOffset"] == 9
            assert a[CEM + "EventQueueTimeMs_count"] == 0 and b[CEM + "EventQueueTimeMs_count"] == 1
            # the recovery counters were registered on the second registry only
            assert "kraft_log_recovery_truncations_total" in b
            assert not any(k.startswith("kraft_") for k in a)
            assert b"# TYPE kafka_controller_ControllerEventManager_EventQueueTimeMs histogram" in got[1][2]
            assert int(got[0][1]["content-length"]) == len(got[0][2])

            status, _, body = await http(host, ports[0], path="/")
            assert status == 200 and samples(body)[KC + "ActiveControllerCount"] == 1
            status, headers, body = await http(host, ports[0], method="HEAD")
            assert status == 200 and body == b"" and int(headers["content-length"]) > 0
            status, _, body = await http(host, ports[0], path="/nope")
            assert status == 404 and b"/metrics" in body
            status, headers, _ = await http(host, ports[0], method="POST")
            assert status == 405 and headers["allow"] == "GET, HEAD"
            status, headers, body = await http(host, ports[0], accept="application/openmetrics-text; version=1.0.0")
            assert status == 200 and headers["content-type"].startswith("application/openmetrics-text")
            assert body.endswith(b"# EOF\n")
            with pytest.raises(RuntimeError, match="already listening"):
                await regs[0].start_http_server(host, 0)
        finally:
            for r in regs:
                await r.stop()
        assert regs[0].address is None
        with pytest.raises(OSError):
            await asyncio.open_connection(host, ports[0])
        await regs[0].stop()  # stopping a stopped endpoint is a no-op

    run(go())


def test_port_zero_takes_a_free_port_and_a_busy_port_is_an_oserror():
    async def go():
        a, b = MetricsRegistry(), MetricsRegistry()
        host, port = await a.start_http_server("127.0.0.1", 0)
        try:
            assert port > 0
            status, _, _ = await http(host, port)
            assert status == 200
            with pytest.raises(OSError):
                await b.start_http_server("127.0.0.1", port)
            assert b.address is None
        finally:
            await a.stop()
    run(go())


def test_a_client_that_sends_nothing_does_not_block_others():
    async def go():
        reg = MetricsRegistry()
        ControllerMetrics(reg).set_active(True)
        host, port = await reg.start_http_server("127.0.0.1", 0)
        try:
            idle_reader, idle_writer = await asyncio.open_connection(host, port)
            idle_writer.write(b"GET /metr")  # an incomplete request, never finished
            await idle_writer.drain()
            status, _, body = await http(host, port)
            assert status == 200 and samples(body)[KC + "ActiveControllerCount"] == 1
        finally:
            await reg.stop()  # closes the idle connection too
        assert await asyncio.wait_for(idle_reader.read(), 5) == b""
        idle_writer.close()
    run(go())


# ------------------------------------------------------------------ windowed stats
def test_sampled_stat_avg_and_max_over_kafkas_window():
    now = [0.0]
    s = SampledStat(lambda: now[0], samples=2, window_ms=1000)
    assert math.isnan(s.avg()) and math.isnan(s.max())
    s.record(2)
    s.record(4)
    assert s.avg() == 3 and s.max() == 4
    now[0] = 1500  # a second sample starts; the first is still live
    s.record(9)
    assert s.avg() == 5 and s.max() == 9
    now[0] = 2100  # the first sample (started at 0) is older than 2 windows: dropped
    assert s.avg() == 9 and s.max() == 9
    now[0] = 3600  # both gone
    assert math.isnan(s.avg()) and math.isnan(s.max())
    with pytest.raises(ValueError):
        SampledStat(lambda: 0.0, samples=0)


# ------------------------------------------------------------------ raft
class _State:
    def __init__(self, name, voted=None):
        self.name = name
        self.voted_key = voted


class _Key:
    def __init__(self, id_):
        self.id = id_


class _Core:
    def __init__(self, state):
        self.state = state
        self.leader_id, self.epoch, self.high_watermark = -1, 0, None
        self.voter_set = SimpleNamespace(ids=(1, 2, 3))

    def log_end(self):
        return SimpleNamespace(offset=0, epoch=0)


class _Driver:
    """What RaftMetrics reads of a RaftDriver, for the state mapping."""

    def __init__(self, state, voter=True):
        self.core = _Core(state)
        self.is_voter = voter
        self.node_id = 1
        self.role_cbs = []
        self.latency_cb = "unset"

    def address_of(self, node_id):
        return ("h", 1) if node_id == 2 else None

    def on_role_change(self, cb):
        self.role_cbs.append(cb)

    def on_commit_latency(self, cb):
        self.latency_cb = cb


@pytest.mark.parametrize("state,voter,expected,vote", [
    (_State("Leader"), True, "leader", 1),
    (_State("Candidate"), True, "candidate", 1),
    (_State("Prospective"), True, "prospective", -1),
    (_State("Prospective", _Key(3)), True, "voted", 3),
    (_State("Unattached", _Key(2)), True, "voted", 2),
    (_State("Unattached"), True, "unattached", -1),
    (_State("Follower"), True, "follower", -1),
    (_State("Follower"), False, "observer", -1),
    (_State("Resigned"), True, "unattached", -1),  # as Kafka's gauge reads it
])
def test_raft_current_state_and_vote(state, voter, expected, vote):
    reg = MetricsRegistry()
    RaftMetrics(reg, _Driver(state, voter))
    for s in RAFT_STATES:
        assert reg.value(RAFT + "current_state", {"state": s}) == (1 if s == expected else 0), s
    assert reg.value(RAFT + "current_vote") == vote
    assert reg.value(RAFT + "high_watermark") == -1  # unknown
    assert reg.value(RAFT + "number_unknown_voter_connections") == 1  # voter 3 (2 is known, 1 is us)


def test_election_latency_runs_from_the_first_election_state_to_a_known_leader():
    now = [0.0]
    d = _Driver(_State("Unattached"))
    reg = MetricsRegistry()
    m = RaftMetrics(reg, d, clock_ms=lambda: now[0])
    (cb,) = d.role_cbs
    cb("Unattached", 1, -1)
    cb("Prospective", 1, -1)
    now[0] = 40
    cb("Candidate", 2, -1)  # still the same election
    now[0] = 100
    cb("Leader", 2, 1)
    now[0] = 200
    cb("Follower", 3, 2)  # no election in progress: nothing recorded
    cb("Candidate", 4, -1)
    now[0] = 260
    cb("Follower", 4, 3)
    assert m.election_latency.avg() == 80 and m.election_latency.max() == 100
    assert reg.value(RAFT + "election_latency_max") == 100


def test_raft_metrics_of_a_running_single_voter(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(path))
        await node.start()
        d = node.driver
        reg = MetricsRegistry()
        m = RaftMetrics(reg, d)
        try:
            for _ in range(500):
                if d.is_leader and d.core.high_watermark is not None:
                    break
                await asyncio.sleep(0.01)
            assert math.isnan(reg.value(RAFT + "commit_latency_avg"))
            epoch = d.leader_and_epoch.epoch
            offsets = [await d.append([b"r%d" % i], epoch) for i in range(5)]
            host, port = await reg.start_http_server("127.0.0.1", 0)
            status, _, body = await http(host, port)
            assert status == 200
            v = samples(body)
            assert v[RAFT + 'current_state{state="leader"}'] == 1
            assert v[RAFT + 'current_state{state="follower"}'] == 0
            assert v[RAFT + "current_leader"] == d.node_id == v[RAFT + "current_vote"]
            assert v[RAFT + "current_epoch"] == epoch
            assert v[RAFT + "high_watermark"] == d.core.high_watermark >= offsets[-1] + 1
            assert v[RAFT + "log_end_offset"] == d.log.end_offset and v[RAFT + "log_end_epoch"] == epoch
            assert v[RAFT + "number_unknown_voter_connections"] == 0
            assert 0 < v[RAFT + "commit_latency_avg"] <= v[RAFT + "commit_latency_max"] < 10_000
            m.close()
            assert not any(n.startswith(RAFT) for n in reg.names())
            await d.append([b"after"], epoch)  # no longer observed, and nothing breaks
            assert m.commit_latency.avg() == pytest.approx(v[RAFT + "commit_latency_avg"])
        finally:
            await reg.stop()
            await node.close()
    run(go())


# ------------------------------------------------------------------ storage recovery
def test_recovery_counters_are_exported(tmp_path):
    reg = MetricsRegistry()
    StorageRecoveryMetrics(reg)
    before = {k: reg.value(f"kraft_log_recovery_{k}_total") for k in ("truncations", "truncated_bytes")}
    assert before == {k: RECOVERY_COUNTERS.get(k, 0) for k in before}
    for k in ("deleted_segments", "rebuilt_indexes", "removed_files"):
        assert reg.value(f"kraft_log_recovery_{k}_total") is not None  # exported even at 0
    # a torn tail: written, not shut down cleanly, garbage after the last batch
    d = tmp_path / "t-0"
    log = KafkaLog.open(d, LogConfig())
    log.append_as_leader(build_batch([(None, b"v")], timestamp=1_700_000_000_000), 1)
    log.close_uncleanly()
    (seg,) = [n for n in os.listdir(d) if n.endswith(".log")]
    with open(d / seg, "ab") as f:
        f.write(b"\x00" * 26)
    KafkaLog.open(d, LogConfig()).close()
    assert reg.value("kraft_log_recovery_truncations_total") == before["truncations"] + 1
    assert reg.value("kraft_log_recovery_truncated_bytes_total") == before["truncated_bytes"] + 26


# ------------------------------------------------------------------ a node's metrics
def test_node_metrics_served_on_the_configured_listener(tmp_path):
    (port,) = free_ports(1)
    (path,) = cluster_properties(str(tmp_path), 1, extra={"kraft.metrics.listener": f"127.0.0.1:{port}"})
    cfg = NodeConfig.from_file(path)
    assert cfg.metrics_listener == ("127.0.0.1", port)

    async def go():
        node = KraftNode.from_config(cfg)  # the node builds and serves its NodeMetrics itself
        await node.start()
        metrics = node.metrics
        controller = ControllerMetrics(metrics.registry)  # what the controller adds on the node's registry
        controller.set_active(True)
        try:
            assert node.metrics_address == ("127.0.0.1", port)
            status, _, body = await http("127.0.0.1", port)
            v = samples(body)
            assert status == 200 and v[KC + "ActiveControllerCount"] == 1
            assert v[RAFT + "current_leader"] in (-1, 1) and "kraft_log_recovery_truncations_total" in v
        finally:
            await node.close()
            await metrics.close()  # idempotent
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", port)
        assert not any(n.startswith(RAFT) for n in metrics.registry.names())

    run(go())


def test_node_metrics_without_a_listener_serve_nothing():
    async def go():
        metrics = NodeMetrics()
        assert await metrics.start(None) is None and metrics.registry.address is None
        assert metrics.raft is None and "kraft_log_recovery_truncations" in metrics.registry.names()
        await metrics.close()
    run(go())


def test_loop_histogram_exposes_what_prometheus_histogram_does():
    """The controller's lock-free histogram: the same buckets (le, cumulative), sum and count as
    prometheus_client's Histogram for the same observations, bounds included."""
    from kraft_node.metrics import MS_BUCKETS, MetricsRegistry
    reg = MetricsRegistry()
    ref = reg.histogram("kafka.controller", "T", "Ref", "d")
    fast = reg.loop_histogram("kafka.controller", "T", "Fast", "d")
    values = [0.0, 0.1, 0.1000001, 0.3, 1, 2.5, 7, 99.9, 100, 1e6, *MS_BUCKETS]
    for v in values:
        ref.observe(v)
        fast.observe(v)

    def samples(suffix: str) -> dict:
        return {(s.name.rsplit("_", 1)[-1], tuple(sorted(s.labels.items()))): s.value
                for f in reg.registry.collect() if f.name.endswith(suffix) for s in f.samples
                if not s.name.endswith("_created")}
    got, want = samples("Fast"), samples("Ref")
    assert got == want and got[("count", ())] == len(values)
    assert got[("bucket", (("le", "0.1"),))] == 3  # 0.0 and the two 0.1s: a bound counts in its bucket
