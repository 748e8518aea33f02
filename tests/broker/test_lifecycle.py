"""The BrokerLifecycleManager (kraft_node/broker/lifecycle.py).

Kafka's BrokerLifecycleManagerTest re-stated with a fake channel (each request waits for the
answer the test gives it) and a virtual clock (timers fire only when the test advances it), so
every delay is checked exactly: testCreateAndClose, testCreateStartAndClose,
testSuccessfulRegistration, testRegistrationTimeout, testControlledShutdown,
testAlwaysSendsAccumulatedOfflineDirs, testRegistrationIncludesDirs and
testKraftJBODMetadataVersionUpdateEvent (re-registration on request).  Then kraft's own:
registration retried with Kafka's exponential backoff while no controller is active, catch-up
gating (fenced until the server says ready), the controlled-shutdown timeout, STALE_BROKER_EPOCH,
the metrics, bad input -- and the whole sequence against a real controller node over TCP.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import random
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.raft import CLUSTER_ID, cluster_properties

from kraft_node.broker.controller_channel import ControllerChannel, ControllerUnavailableError
from kraft_node.broker.lifecycle import (
    BrokerLifecycleManager,
    BrokerLifecycleShutdownError,
    BrokerState,
    ExponentialBackoff,
)
from kraft_node.metadata.versions import supported_features
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest, BrokerRegistrationResponse
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.messages.runtime import Uuid

LISTENERS = [("PLAINTEXT", "127.0.0.1", 9092, "PLAINTEXT"), ("SSL", "127.0.0.1", 9094, 1)]
FEATURES = {"metadata.version": (7, 21), "group.version": (0, 1)}
CLUSTER = "x2Yg4o4PRnSlN-c1QI1Dxw"


# ---------------------------------------------------------------------------- test doubles
class _Timer:
    def __init__(self, when: float, fn: Callable[[], None]):
        self.when, self.fn, self.cancelled = when, fn, False

    def cancel(self) -> None:
        self.cancelled = True


class VirtualClock:
    """Kafka's MockTime for the manager: time moves only in :meth:`advance`, which fires the
    due timers in order and lets the loop run the tasks they start after each."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()

    def monotonic(self) -> float:
        return self.now

    def call_later(self, delay_s: float, fn: Callable[[], None]) -> _Timer:
        timer = _Timer(self.now + delay_s, fn)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def pending(self) -> list[float]:
        """Delays (from now) of the timers not yet fired or cancelled."""
        return sorted(t.when - self.now for _w, _s, t in self._heap if not t.cancelled)

    async def advance(self, seconds: float = 0.0) -> None:
        target = self.now + seconds
        await settle()
        while self._heap and self._heap[0][0] <= target + 1e-12:
            when, _seq, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            self.now = max(self.now, when)
            timer.fn()
            await settle()
        self.now = target
        await settle()


async def settle() -> None:
    """Let every ready task and callback run (the manager's request tasks)."""
    for _ in range(20):
        await asyncio.sleep(0)


class Sent:
    def __init__(self, body: Any, timeout_s: float | None, future: asyncio.Future):
        self.body, self.timeout_s, self.future = body, timeout_s, future


class FakeChannel:
    """Kafka's MockNodeToControllerChannelManager: records each request; the test answers it
    (or fails it) with :meth:`answer`/:meth:`fail`."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any:
        fut = asyncio.get_running_loop().create_future()
        self.sent.append(Sent(body, timeout_s, fut))
        return await fut

    @property
    def outstanding(self) -> list[Sent]:
        return [s for s in self.sent if not s.future.done()]

    def next_request(self) -> Any:
        (only,) = self.outstanding
        return only.body

    async def answer(self, response: Any) -> Any:
        """Answer the one outstanding request; returns it."""
        (only,) = self.outstanding
        only.future.set_result(response)
        await settle()
        return only.body

    async def fail(self, exc: BaseException) -> Any:
        (only,) = self.outstanding
        only.future.set_exception(exc)
        await settle()
        return only.body


def registration_ok(epoch: int) -> BrokerRegistrationResponse:
    return BrokerRegistrationResponse(error_code=0, broker_epoch=epoch)


def heartbeat_ok(*, caught_up: bool = False, fenced: bool = True, shut_down: bool = False) -> BrokerHeartbeatResponse:
    return BrokerHeartbeatResponse(error_code=0, is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down)


class Context:
    """Kafka's RegistrationTestContext: a manager on a virtual clock with a fake channel."""

    def __init__(self, *, heartbeat_ms: int = 100, registration_timeout_ms: int = 300_000, offset: int = 0,
                 shutdown_hook: Callable[[], None] | None = None) -> None:
        self.clock = VirtualClock()
        self.channel = FakeChannel()
        self.offset = offset
        self.manager = BrokerLifecycleManager(
            1, heartbeat_interval_ms=heartbeat_ms, session_timeout_ms=9000,
            initial_registration_timeout_ms=registration_timeout_ms, clock=self.clock, rng=random.Random(7),
            shutdown_hook=shutdown_hook)

    def start(self, *, previous_epoch: int = -1, log_dirs=(), rack: str | None = None) -> None:
        self.manager.start(lambda: self.offset, self.channel, cluster_id=CLUSTER, listeners=LISTENERS,
                           features=FEATURES, rack=rack, log_dir_ids=log_dirs, previous_broker_epoch=previous_epoch)

    async def register(self, epoch: int = 1000) -> None:
        self.start()
        await settle()
        await self.channel.answer(registration_ok(epoch))
        await self.clock.advance(0)

    async def to_running(self) -> None:
        """Registered, caught up, unfenced: RUNNING."""
        await self.register()
        await self.channel.answer(heartbeat_ok(caught_up=True))
        await self.clock.advance(0.010)
        self.manager.set_ready_to_unfence()
        await self.clock.advance(0)
        await self.channel.answer(heartbeat_ok(caught_up=True, fenced=False))
        assert self.manager.state == BrokerState.RUNNING


def run(coro_fn: Callable[[], Any], timeout: float = 20.0) -> None:
    async def main():
        await asyncio.wait_for(coro_fn(), timeout)
    asyncio.run(main())


# ---------------------------------------------------------------------------- Kafka's sequence
def test_create_and_close():
    """testCreateAndClose: a manager never started closes cleanly; its futures end (the
    catch-up and unfence ones with BrokerLifecycleShutdownError, controlled shutdown unapproved)."""
    async def go():
        ctx = Context()
        m = ctx.manager
        assert m.state == BrokerState.NOT_RUNNING and m.broker_epoch == -1
        m.close()
        assert m.state == BrokerState.SHUTTING_DOWN
        assert m.controlled_shutdown.result() is False
        with pytest.raises(BrokerLifecycleShutdownError, match="closed"):
            m.initial_catch_up.result()
        assert ctx.channel.sent == []
    run(go)


def test_create_start_and_close():
    """testCreateStartAndClose: start -> STARTING with one registration on its way; close ->
    SHUTTING_DOWN, the request in flight is abandoned and nothing more is sent."""
    async def go():
        ctx = Context()
        m = ctx.manager
        ctx.start(log_dirs=[Uuid.from_string("uiUADXZWTPixVvp6UWFWnw")], rack="r1")
        await settle()
        assert m.state == BrokerState.STARTING
        req = ctx.channel.next_request()
        assert isinstance(req, BrokerRegistrationRequest)
        assert (req.broker_id, req.cluster_id, req.incarnation_id, req.rack) == (1, CLUSTER, m.incarnation_id, "r1")
        assert [(x.name, x.host, x.port, x.security_protocol) for x in req.listeners] == [
            ("PLAINTEXT", "127.0.0.1", 9092, 0), ("SSL", "127.0.0.1", 9094, 1)]
        assert {f.name: (f.min_supported_version, f.max_supported_version) for f in req.features} == FEATURES
        assert req.previous_broker_epoch == -1 and not req.is_migrating_zk_broker
        # KAFKA-14392: a lifecycle request times out after half a session
        assert ctx.channel.sent[0].timeout_s == pytest.approx(4.5)
        m.close()
        await settle()
        assert m.state == BrokerState.SHUTTING_DOWN
        assert ctx.channel.sent[0].future.cancelled()
        await ctx.clock.advance(600)
        assert len(ctx.channel.sent) == 1
    run(go)


def test_successful_registration_then_an_immediate_heartbeat():
    """testSuccessfulRegistration: the previous clean-shutdown epoch is sent; the accepted
    registration's epoch is the broker's; the first heartbeat goes at once, carrying it."""
    async def go():
        ctx = Context(offset=42)
        m = ctx.manager
        ctx.start(previous_epoch=10)
        await settle()
        assert ctx.channel.next_request().previous_broker_epoch == 10
        await ctx.channel.answer(registration_ok(1000))
        assert (m.broker_epoch, m.registered, m.state) == (1000, True, BrokerState.STARTING)
        await ctx.clock.advance(0)
        hb = ctx.channel.next_request()
        assert isinstance(hb, BrokerHeartbeatRequest)
        assert (hb.broker_id, hb.broker_epoch, hb.current_metadata_offset) == (1, 1000, 42)
        assert (hb.want_fence, hb.want_shut_down, hb.offline_log_dirs) == (True, False, [])
    run(go)


def test_registration_includes_sorted_log_dirs():
    """testRegistrationIncludesDirs: every log dir id, in one order whatever the input's."""
    async def go():
        ctx = Context()
        dirs = [Uuid.from_string(s) for s in ("ybdzUKmYSLK6oiIpI6CPlw", "ad5FLIeCTnaQdai5vOjeng")]
        ctx.start(log_dirs=dirs)
        await settle()
        sent = ctx.channel.next_request().log_dirs
        assert set(sent) == set(dirs) and sent == sorted(dirs, key=str)
    run(go)


def test_registration_timeout(caplog):
    """testRegistrationTimeout: a refused registration is logged with Kafka's words and sent
    again after the backoff (not before); when initial.broker.registration.timeout.ms passes
    without success the manager shuts down, the catch-up future fails, the epoch stays -1."""
    caplog.set_level(logging.INFO, logger="kraft_node.broker.lifecycle")

    async def go():
        ctx = Context()
        m = ctx.manager
        ctx.start()
        await settle()
        await ctx.channel.answer(BrokerRegistrationResponse(error_code=Errors.DUPLICATE_BROKER_REGISTRATION))
        assert "Unable to register broker 1 because the controller returned error DUPLICATE_BROKER_REGISTRATION" \
            in caplog.text
        # the first backoff is 100 ms +-2%
        await ctx.clock.advance(0.097)
        assert ctx.channel.outstanding == []
        await ctx.clock.advance(0.006)
        assert isinstance(ctx.channel.next_request(), BrokerRegistrationRequest)
        await ctx.channel.answer(BrokerRegistrationResponse(error_code=Errors.DUPLICATE_BROKER_REGISTRATION))
        await ctx.clock.advance(300)
        assert m.state == BrokerState.SHUTTING_DOWN
        assert m.broker_epoch == -1
        with pytest.raises(BrokerLifecycleShutdownError, match="unable to register"):
            m.initial_catch_up.result()
        assert "Shutting down because we were unable to register with the controller quorum." in caplog.text
    run(go)


def test_controlled_shutdown():
    """testControlledShutdown: caught up -> RECOVERY, unfenced -> RUNNING; controlled shutdown
    sends want_shut_down at once; "not yet" -> the next one 50 ms later; should_shut_down ->
    SHUTTING_DOWN and the future says approved."""
    async def go():
        ctx = Context()
        m = ctx.manager
        await ctx.register()
        await ctx.channel.answer(heartbeat_ok(caught_up=True))
        assert m.state == BrokerState.RECOVERY and m.initial_catch_up.done()
        await ctx.clock.advance(0.009)
        assert ctx.channel.outstanding == []  # STARTING's next heartbeat: 10 ms after the answer
        await ctx.clock.advance(0.001)
        await ctx.channel.answer(heartbeat_ok(caught_up=True, fenced=False))
        assert m.state == BrokerState.RUNNING and m.initial_unfenced.done()
        fut = m.begin_controlled_shutdown()
        assert m.state == BrokerState.PENDING_CONTROLLED_SHUTDOWN
        await ctx.clock.advance(0)
        assert ctx.channel.next_request().want_shut_down is True
        await ctx.channel.answer(heartbeat_ok(caught_up=True, fenced=False, shut_down=False))
        await ctx.clock.advance(0.049)
        assert ctx.channel.outstanding == []
        await ctx.clock.advance(0.001)
        assert ctx.channel.next_request().want_shut_down is True
        await ctx.channel.answer(heartbeat_ok(caught_up=True, fenced=True, shut_down=True))
        assert m.state == BrokerState.SHUTTING_DOWN
        assert fut.done() and fut.result() is True
        await ctx.clock.advance(60)
        assert ctx.channel.outstanding == []
    run(go)


def test_always_sends_accumulated_offline_dirs():
    """testAlwaysSendsAccumulatedOfflineDirs: every heartbeat carries every dir reported so far."""
    async def go():
        ctx = Context()
        m = ctx.manager
        await ctx.register()
        dirs = [Uuid.from_string(s) for s in ("h3sC4Yk-Q9-fd0ntJTocCA", "ej8Q9_d2Ri6FXNiTxKFiow",
                                              "1iF76HVNRPqC7Y4r6647eg")]

        async def next_heartbeat_dirs() -> set:
            while not ctx.channel.outstanding:
                await ctx.clock.advance(0.005)
            return set(str(d) for d in (await ctx.channel.answer(heartbeat_ok())).offline_log_dirs)
        assert await next_heartbeat_dirs() == set()
        for i, d in enumerate(dirs):
            m.propagate_directory_failure(d, 2**31 - 1)
            assert await next_heartbeat_dirs() == {str(x) for x in dirs[:i + 1]}
        assert m.offline_dirs == {d: True for d in dirs}
    run(go)


def test_an_offline_dir_not_acknowledged_in_time_calls_the_shutdown_hook(caplog):
    """log.dir.failure.timeout.ms: a dir no acknowledged heartbeat carried by then stops the broker."""
    calls = []

    async def go():
        ctx = Context(shutdown_hook=lambda: calls.append("stop"))
        m = ctx.manager
        await ctx.register()
        await ctx.channel.fail(ControllerUnavailableError("no controller"))
        d = Uuid.from_string("h3sC4Yk-Q9-fd0ntJTocCA")
        m.propagate_directory_failure(d, 1000)
        for _ in range(20):  # every heartbeat fails
            await ctx.clock.advance(0.1)
            for s in ctx.channel.outstanding:
                s.future.set_exception(ControllerUnavailableError("no controller"))
        assert calls == ["stop"]
        assert m.offline_dirs == {d: False}
        assert "couldn't communicate offline log dir h3sC4Yk-Q9-fd0ntJTocCA with controllers" in caplog.text
    run(go)


def test_reregistration_on_request_gets_a_new_epoch():
    """testKraftJBODMetadataVersionUpdateEvent: resend_broker_registration sends the same
    incarnation's registration again; heartbeats then carry the new epoch."""
    async def go():
        ctx = Context()
        m = ctx.manager
        await ctx.register(1000)
        assert ctx.channel.next_request().broker_epoch == 1000
        await ctx.channel.answer(heartbeat_ok())
        m.resend_broker_registration()
        await ctx.clock.advance(0)
        again = ctx.channel.next_request()
        assert isinstance(again, BrokerRegistrationRequest) and again.incarnation_id == m.incarnation_id
        await ctx.channel.answer(registration_ok(1200))
        await ctx.clock.advance(0)
        assert m.broker_epoch == 1200 and ctx.channel.next_request().broker_epoch == 1200
    run(go)


# ---------------------------------------------------------------------------- kraft's own
def test_registration_retries_with_exponential_backoff_while_no_controller_is_active(caplog):
    """The channel gives up (no active controller): the registration is retried after 100,
    200, 400... ms (2% jitter) capped at the session timeout; a success resets the backoff."""
    caplog.set_level(logging.INFO, logger="kraft_node.broker.lifecycle")

    async def go():
        ctx = Context(registration_timeout_ms=600_000)
        m = ctx.manager
        ctx.start()
        await settle()
        delays = []
        for _ in range(9):
            await ctx.channel.fail(ControllerUnavailableError("no active controller is known"))
            (delay,) = [d for d in ctx.clock.pending() if d < 500]  # the other timer is the registration's
            delays.append(delay)
            await ctx.clock.advance(delay)
            assert isinstance(ctx.channel.next_request(), BrokerRegistrationRequest)
        for i, d in enumerate(delays):
            assert min(0.1 * 2 ** i, 9.0) * 0.98 <= d <= min(0.1 * 2 ** i, 9.0) * 1.02, (i, delays)
        assert max(delays) <= 9.0 + 1e-9  # the cap is the session timeout, jitter or not
        assert "Unable to register the broker because the RPC got timed out before it could be sent" in caplog.text
        await ctx.channel.answer(registration_ok(5))
        assert m.registered and m.state == BrokerState.STARTING
        await ctx.clock.advance(0)
        await ctx.channel.fail(ControllerUnavailableError("controller 2 at 127.0.0.1:1: connection refused"))
        (delay,) = [d for d in ctx.clock.pending() if d < 500]
        assert 0.098 <= delay <= 0.102
    run(go)


def test_kafka_exponential_backoff_values():
    b = ExponentialBackoff(100, 2, 9000, 0.0)
    assert [b.backoff_ms(n) for n in range(9)] == [100, 200, 400, 800, 1600, 3200, 6400, 9000, 9000]
    assert ExponentialBackoff(100, 2, 50, 0.02).backoff_ms(5) == 50  # initial above max: max, no growth


def test_catch_up_gating_keeps_the_broker_fenced_until_ready():
    """Until the server calls set_ready_to_unfence every heartbeat asks to stay fenced, so the
    broker stays in RECOVERY however often the controller says caught up; once ready, the next
    heartbeat goes at once -- also when one was in flight then: its answer's reschedule is
    immediate -- and asks to be unfenced."""
    async def go():
        ctx = Context(heartbeat_ms=100)
        m = ctx.manager
        await ctx.register()
        await ctx.channel.answer(heartbeat_ok(caught_up=False))
        assert m.state == BrokerState.STARTING and not m.initial_catch_up.done()
        await ctx.clock.advance(0.010)
        await ctx.channel.answer(heartbeat_ok(caught_up=True))
        assert m.state == BrokerState.RECOVERY
        for _ in range(5):
            await ctx.clock.advance(0.100)
            hb = await ctx.channel.answer(heartbeat_ok(caught_up=True, fenced=True))
            assert hb.want_fence is True
        assert m.state == BrokerState.RECOVERY and not m.initial_unfenced.done()
        await ctx.clock.advance(0.100)
        assert ctx.channel.outstanding  # a heartbeat in flight ...
        unfenced = m.set_ready_to_unfence()  # ... when the loader passes the registration offset
        await ctx.clock.advance(0)
        hb = await ctx.channel.answer(heartbeat_ok(caught_up=True, fenced=True))
        assert hb.want_fence is True  # was built before
        await ctx.clock.advance(0)  # no 100 ms wait
        hb = await ctx.channel.answer(heartbeat_ok(caught_up=True, fenced=False))
        assert hb.want_fence is False
        assert m.state == BrokerState.RUNNING and unfenced.done() and unfenced is m.initial_unfenced
        # RUNNING: one heartbeat per interval, no sooner
        await ctx.clock.advance(0.099)
        assert ctx.channel.outstanding == []
        await ctx.clock.advance(0.001)
        assert ctx.channel.next_request().want_fence is False
    run(go)


def test_controlled_shutdown_timeout_stops_anyway_and_says_so(caplog):
    async def go():
        ctx = Context()
        m = ctx.manager
        await ctx.to_running()
        fut = m.begin_controlled_shutdown(timeout_ms=2000)
        m.begin_controlled_shutdown(timeout_ms=2000)  # a second SIGTERM: nothing new
        for _ in range(40):  # the controller keeps its leaders: never approves
            await ctx.clock.advance(0.05)
            for s in ctx.channel.outstanding:
                s.future.set_result(heartbeat_ok(caught_up=True, fenced=False, shut_down=False))
            if fut.done():
                break
        assert m.state == BrokerState.SHUTTING_DOWN
        assert fut.result() is False
        assert ctx.clock.now == pytest.approx(2.0 + 0.010, abs=0.06)
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert any("Timed out waiting for the controller to approve controlled shutdown after 2000 ms"
                   in r.getMessage() for r in warnings)
    run(go)


def test_controlled_shutdown_before_running_shuts_down_at_once(caplog):
    caplog.set_level(logging.INFO, logger="kraft_node.broker.lifecycle")

    async def go():
        ctx = Context()
        await ctx.register()
        fut = ctx.manager.begin_controlled_shutdown(timeout_ms=5000)
        assert ctx.manager.state == BrokerState.SHUTTING_DOWN and fut.result() is False
        assert "Skipping controlled shutdown because we are in state STARTING." in caplog.text
    run(go)


def test_stale_broker_epoch_is_logged_and_retried_not_reregistered(caplog):
    """STALE_BROKER_EPOCH (another incarnation took the id, or an operator unregistered it):
    Kafka's warning, then the heartbeat is retried after the backoff with the same epoch."""
    async def go():
        ctx = Context()
        m = ctx.manager
        await ctx.register(1000)
        await ctx.channel.answer(BrokerHeartbeatResponse(error_code=Errors.STALE_BROKER_EPOCH))
        assert "Broker 1 sent a heartbeat request but received error STALE_BROKER_EPOCH." in caplog.text
        await ctx.clock.advance(0.095)
        assert ctx.channel.outstanding == []
        await ctx.clock.advance(0.01)
        hb = ctx.channel.next_request()
        assert isinstance(hb, BrokerHeartbeatRequest) and hb.broker_epoch == 1000
        assert m.state == BrokerState.STARTING
    run(go)


def test_metrics_state_and_time_since_last_acknowledged_heartbeat():
    async def go():
        ctx = Context()
        m = ctx.manager
        assert m.state_value() == 0.0 and math.isnan(m.time_since_last_heartbeat_ack_ms())
        ctx.start()
        await settle()
        assert m.state_value() == 1.0
        await ctx.clock.advance(0.5)
        assert m.time_since_last_heartbeat_ack_ms() == pytest.approx(500)  # since start: none acknowledged
        await ctx.channel.answer(registration_ok(3))
        await ctx.clock.advance(0.25)
        await ctx.channel.answer(heartbeat_ok(caught_up=True))
        assert m.time_since_last_heartbeat_ack_ms() == pytest.approx(0)
        assert m.state_value() == float(BrokerState.RECOVERY) == 2.0
        await ctx.clock.advance(0.003)
        assert m.time_since_last_heartbeat_ack_ms() == pytest.approx(3)
        # a failed heartbeat is not an acknowledgement
        await ctx.clock.advance(0.007)
        await ctx.channel.fail(ControllerUnavailableError("gone"))
        assert m.time_since_last_heartbeat_ack_ms() == pytest.approx(10)
        assert [s.value for s in BrokerState] == [0, 1, 2, 3, 6, 7, 127]
    run(go)


def test_bad_input_is_refused_by_name():
    async def go():
        with pytest.raises(ValueError, match="broker.heartbeat.interval.ms must be positive"):
            BrokerLifecycleManager(1, heartbeat_interval_ms=0)
        ctx = Context()
        with pytest.raises(ValueError, match="listener PLAINTEXT: port 0 is not a bound port"):
            ctx.manager.start(lambda: 0, ctx.channel, cluster_id=CLUSTER, listeners=[("PLAINTEXT", "h", 0, 0)],
                              features={})
        with pytest.raises(ValueError, match="listener X: unknown security protocol 'TLS'"):
            ctx.manager.start(lambda: 0, ctx.channel, cluster_id=CLUSTER, listeners=[("X", "h", 1, "TLS")],
                              features={})
        with pytest.raises(ValueError, match="feature f: min supported 3 > max supported 1"):
            ctx.manager.start(lambda: 0, ctx.channel, cluster_id=CLUSTER, listeners=LISTENERS, features={"f": (3, 1)})
        assert ctx.manager.state == BrokerState.NOT_RUNNING
        ctx.start()
        with pytest.raises(RuntimeError, match="it was started already"):
            ctx.start()
        ctx.manager.close()
    run(go)


# ---------------------------------------------------------------------------- a real controller
def test_the_lifecycle_against_a_controller_node_over_tcp(tmp_path):
    """The manager with a ControllerChannel to a one-controller node over TCP, on the real
    clock: registered (epoch = the registration record's offset), caught up, fenced until ready,
    then unfenced in the controller's image; a controlled shutdown is approved (it leads nothing)
    and the controller fences it."""
    (path,) = cluster_properties(str(tmp_path), 1)

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(path), controller=True)
        await node.start()
        channel = ControllerChannel(node._active_controller_address, client_id="broker-7-heartbeat",
                                    retry_backoff_ms=20, request_timeout_ms=2000)
        manager = BrokerLifecycleManager(7, heartbeat_interval_ms=50, session_timeout_ms=3000)
        try:
            loader = node.metadata.loader
            manager.start(loader.last_applied_offset, channel, cluster_id=CLUSTER_ID,
                          listeners=[("PLAINTEXT", "127.0.0.1", 19092, "PLAINTEXT")],
                          features=supported_features(), rack="rack-a", log_dir_ids=[Uuid.random()])
            await asyncio.wait_for(asyncio.shield(manager.initial_catch_up), 15)
            assert manager.state == BrokerState.RECOVERY and manager.broker_epoch > 0
            await asyncio.sleep(0.3)  # a few heartbeats asking to stay fenced
            assert manager.state == BrokerState.RECOVERY
            assert node.metadata.image().cluster.brokers[7].fenced
            t0 = time.monotonic()
            await asyncio.wait_for(manager.set_ready_to_unfence(), 10)
            unfence_s = time.monotonic() - t0
            assert manager.state == BrokerState.RUNNING
            registration = node.metadata.image().cluster.brokers[7]
            deadline = time.monotonic() + 5
            while node.metadata.image().cluster.brokers[7].fenced:
                assert time.monotonic() < deadline, "the image never showed broker 7 unfenced"
                await asyncio.sleep(0.02)
            assert registration.epoch == manager.broker_epoch and registration.incarnation_id == manager.incarnation_id
            assert registration.rack == "rack-a"
            assert manager.time_since_last_heartbeat_ack_ms() < 1000
            approved = await asyncio.wait_for(manager.begin_controlled_shutdown(timeout_ms=5000), 10)
            assert approved is True and manager.state == BrokerState.SHUTTING_DOWN
            deadline = time.monotonic() + 5
            while not node.metadata.image().cluster.brokers[7].fenced:
                assert time.monotonic() < deadline, "the controller did not fence the broker that shut down"
                await asyncio.sleep(0.02)
            print(f"unfenced {unfence_s * 1000:.1f} ms after set_ready_to_unfence")
        finally:
            manager.close()
            await channel.close()
            await node.close()
    run(go, 60)


def test_a_restarted_broker_is_a_new_incarnation_refused_until_the_old_session_expires(tmp_path, caplog):
    """kill -9 of a RUNNING broker (its manager stops without a word), then a new process with
    the same id: the controller refuses the new incarnation while the old session lives
    (DUPLICATE_BROKER_REGISTRATION, logged with Kafka's words and retried with backoff), fences
    the old one when its session expires, then accepts the new one with a new, higher epoch."""
    caplog.set_level(logging.INFO, logger="kraft_node.broker.lifecycle")
    (path,) = cluster_properties(str(tmp_path), 1, extra={"broker.session.timeout.ms": "1500",
                                                          "broker.heartbeat.interval.ms": "100"})

    async def go():
        node = KraftNode.from_config(NodeConfig.from_file(path), controller=True)
        await node.start()
        channels, managers = [], []
        log_dir = Uuid.random()

        def broker() -> BrokerLifecycleManager:
            channel = ControllerChannel(node._active_controller_address, client_id="broker-7-heartbeat",
                                        retry_backoff_ms=20, request_timeout_ms=2000)
            manager = BrokerLifecycleManager(7, heartbeat_interval_ms=100, session_timeout_ms=1500)
            channels.append(channel)
            managers.append(manager)
            manager.start(node.metadata.loader.last_applied_offset, channel, cluster_id=CLUSTER_ID,
                          listeners=[("PLAINTEXT", "127.0.0.1", 19092, "PLAINTEXT")], features=supported_features(),
                          log_dir_ids=[log_dir])  # a restarted process keeps its log dir's id
            return manager

        try:
            first = broker()
            await asyncio.wait_for(asyncio.shield(first.initial_catch_up), 15)
            await asyncio.wait_for(first.set_ready_to_unfence(), 10)
            old_epoch, old_incarnation = first.broker_epoch, first.incarnation_id
            first.close()  # kill -9: no more heartbeats, no controlled shutdown
            killed_at = time.monotonic()

            second = broker()
            assert second.incarnation_id != old_incarnation
            await asyncio.wait_for(asyncio.shield(second.initial_catch_up), 15)
            registered_after = time.monotonic() - killed_at
            assert "because the controller returned error DUPLICATE_BROKER_REGISTRATION" in caplog.text
            assert second.broker_epoch > old_epoch
            assert registered_after > 0.5  # the old session (1.5 s) had to lapse first
            await asyncio.wait_for(second.set_ready_to_unfence(), 10)
            deadline = time.monotonic() + 5
            while True:
                reg = node.metadata.image().cluster.brokers[7]
                if reg.incarnation_id == second.incarnation_id and not reg.fenced:
                    break
                assert time.monotonic() < deadline, reg
                await asyncio.sleep(0.02)
            assert reg.epoch == second.broker_epoch
            print(f"new incarnation registered {registered_after * 1000:.0f} ms after the kill")
        finally:
            for m in managers:
                m.close()
            for c in channels:
                await c.close()
            await node.close()
    run(go, 60)
