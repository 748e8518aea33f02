"""The broker's channel to the active controller (kraft_node/broker/controller_channel.py).

* Against three controller nodes over TCP: a BrokerRegistration goes to the active one (at
  the highest version both support); a stale view naming a standby gets NOT_CONTROLLER, and
  the channel drops that connection and asks again; when the active controller stops, the
  channel follows the new one (its requests meanwhile meet a refused connection and are retried)
  and the new controller knows the broker's epoch.
* Against a scripted server: ApiVersions once per connection; the version is the highest in
  both ranges, or the one given; no common version raises at once, naming both ranges;
  requests sent concurrently share one connection; NOT_CONTROLLER nested in a per-item result
  counts (Kafka's errorCounts); other errors are the caller's.
* Failure paths, each bounded in time: no controller known, a refused port, a server that
  never answers, and close() while a send waits -- each a ControllerUnavailableError saying
  which controller it tried last and why.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from support.controller import broker_heartbeat, broker_registration
from support.raft import CLUSTER_ID, cluster_properties, free_ports

from kraft_node.broker.controller_channel import (
    ControllerChannel,
    ControllerUnavailableError,
    UnsupportedControllerVersionError,
    response_has_error,
)
from kraft_node.network.server import DEFERRED, KafkaServer
from kraft_node.protocol.api_keys import ApiKeys, api_versions_response
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from kraft_node.protocol.generated.create_topics import CreateTopicsResponse
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode


def run(coro_fn: Callable[[], Any], timeout: float = 60.0) -> None:
    async def main():
        await asyncio.wait_for(coro_fn(), timeout)
    asyncio.run(main())


async def _until_active(nodes: list[KraftNode], timeout: float = 15.0) -> KraftNode:
    """The node whose controller is active with its bootstrap records committed."""
    deadline = time.monotonic() + timeout
    while True:
        for n in nodes:
            ctl = n.controller.controller
            if ctl.active and ctl.feature_control.metadata_version_or_none(epoch=ctl.last_stable_offset):
                return n
        assert time.monotonic() < deadline, "no controller became active"
        await asyncio.sleep(0.02)


# ---------------------------------------------------------------------------- a real quorum
def test_the_channel_follows_the_active_controller_of_a_quorum(tmp_path):
    paths = cluster_properties(str(tmp_path), 3)

    async def go():
        nodes = [KraftNode.from_config(NodeConfig.from_file(p), controller=True) for p in paths]
        for n in nodes:
            await n.start()
        channel = None
        try:
            leader = await _until_active(nodes)
            standbys = [n for n in nodes if n is not leader]
            view = standbys[0]  # the broker's view of the quorum: what one observer knows
            stale: list[tuple[int, str, int]] = []

            def active_controller():
                return stale.pop(0) if stale else view._active_controller_address()

            channel = ControllerChannel(active_controller, client_id="broker-7-heartbeat", retry_backoff_ms=20,
                                        request_timeout_ms=2000)
            reg = await channel.send(broker_registration(7, CLUSTER_ID), timeout_s=10)
            assert reg.error_code == 0 and reg.broker_epoch > 0
            assert channel.connected_to == (leader.node_id, "127.0.0.1", leader.port)
            assert channel.connections_opened == 1

            # a stale view names the other standby: NOT_CONTROLLER, then the active one
            other = standbys[1]
            stale.append((other.node_id, "127.0.0.1", other.port))
            hb = await channel.send(broker_heartbeat(7, reg.broker_epoch, reg.broker_epoch), timeout_s=10)
            assert hb.error_code == 0
            assert channel.not_controller_responses == 1
            assert channel.connections_opened == 3  # leader, the standby, the leader again
            assert channel.connected_to[0] == leader.node_id

            # the active controller stops: the next request finds the new one
            await leader.close()
            nodes.remove(leader)
            t0 = time.monotonic()
            hb = await channel.send(broker_heartbeat(7, reg.broker_epoch, reg.broker_epoch), timeout_s=20)
            failover_s = time.monotonic() - t0
            new_leader = await _until_active(nodes)
            assert hb.error_code == 0, Errors(hb.error_code).name  # the new controller knows epoch and broker
            assert channel.connected_to == (new_leader.node_id, "127.0.0.1", new_leader.port)
            assert new_leader is not leader
            assert channel.connections_opened >= 4
            print(f"failover: the heartbeat was answered by the new controller {failover_s * 1000:.0f} ms "
                  "after the old one stopped")
        finally:
            if channel is not None:
                await channel.close()
            for n in nodes:
                await n.close()
    run(go, 90)


# ---------------------------------------------------------------------------- a scripted server
class Scripted:
    """A KafkaServer answering ApiVersions with chosen ranges and BrokerHeartbeat with a
    scripted response; it counts what it saw."""

    def __init__(self, ranges: dict[int, tuple[int, int]] | None = None, heartbeat=None):
        self.ranges = ranges or {}
        self.api_versions_asked = 0
        self.heartbeat_versions: list[int] = []
        self.heartbeat = heartbeat or (lambda body: BrokerHeartbeatResponse(error_code=0, is_caught_up=True))
        self.server = KafkaServer("127.0.0.1", 0, {int(ApiKeys.API_VERSIONS): self._api_versions,
                                                   int(ApiKeys.BROKER_HEARTBEAT): self._heartbeat},
                                  listener="CONTROLLER", listener_type="controller")

    def _api_versions(self, ctx, body):
        self.api_versions_asked += 1
        resp = api_versions_response(ctx.api_version, "controller",
                                     only={int(ApiKeys.API_VERSIONS), int(ApiKeys.BROKER_HEARTBEAT)})
        for k in resp.api_keys:
            if k.api_key in self.ranges:
                k.min_version, k.max_version = self.ranges[k.api_key]
        return resp

    def _heartbeat(self, ctx, body):
        self.heartbeat_versions.append(ctx.api_version)
        return self.heartbeat(body)

    async def __aenter__(self):
        await self.server.start()
        return self

    async def __aexit__(self, *exc):
        await self.server.close()

    @property
    def address(self) -> tuple[int, str, int]:
        return (3000, "127.0.0.1", self.server.port)


def _hb() -> BrokerHeartbeatRequest:
    return broker_heartbeat(1, 10, 10)


def test_api_versions_once_per_connection_and_the_highest_common_version():
    async def go():
        async with Scripted({int(ApiKeys.BROKER_HEARTBEAT): (0, 0)}) as srv:
            channel = ControllerChannel(lambda: srv.address, client_id="t")
            try:
                await asyncio.gather(*(channel.send(_hb(), timeout_s=5) for _ in range(20)))
                await channel.send(_hb(), 1, timeout_s=5)  # a fixed version is sent as given
                assert srv.heartbeat_versions == [0] * 20 + [1]
                assert srv.api_versions_asked == 1
                assert channel.connections_opened == 1
            finally:
                await channel.close()
    run(go, 30)


def test_no_common_version_raises_at_once_naming_both_ranges():
    async def go():
        async with Scripted({int(ApiKeys.BROKER_HEARTBEAT): (5, 9)}) as srv:
            channel = ControllerChannel(lambda: srv.address, client_id="t")
            t0 = time.monotonic()
            with pytest.raises(UnsupportedControllerVersionError,
                               match=r"controller 3000 at 127.0.0.1:\d+ supports BrokerHeartbeat versions 5-9, "
                                     r"kraft 0-1: none in common"):
                await channel.send(_hb(), timeout_s=10)
            assert time.monotonic() - t0 < 2  # not retried until the deadline
            with pytest.raises(UnsupportedControllerVersionError, match="does not support BrokerRegistration"):
                await channel.send(broker_registration(1, CLUSTER_ID), timeout_s=10)
            await channel.close()
        with pytest.raises(ValueError, match="BrokerHeartbeat version 9 is outside kraft's range 0-1"):
            await ControllerChannel(lambda: None, client_id="t").send(_hb(), 9)
    run(go, 30)


def test_other_errors_are_returned_and_not_controller_is_retried():
    """STALE_BROKER_EPOCH is the caller's; NOT_CONTROLLER from a controller that keeps saying it
    is retried (a new connection each time) until the deadline, and then named."""
    answers = [Errors.STALE_BROKER_EPOCH, Errors.NOT_CONTROLLER, Errors.NOT_CONTROLLER, Errors.NONE]

    async def go():
        async with Scripted(heartbeat=lambda body: BrokerHeartbeatResponse(error_code=answers.pop(0))) as srv:
            channel = ControllerChannel(lambda: srv.address, client_id="t", retry_backoff_ms=10)
            assert (await channel.send(_hb(), timeout_s=5)).error_code == Errors.STALE_BROKER_EPOCH
            assert (await channel.send(_hb(), timeout_s=5)).error_code == 0
            assert channel.not_controller_responses == 2 and channel.connections_opened == 3
            srv.heartbeat = lambda body: BrokerHeartbeatResponse(error_code=Errors.NOT_CONTROLLER)
            with pytest.raises(ControllerUnavailableError,
                               match=r"BrokerHeartbeat got no answer from the active controller within 0.3s; "
                                     r"last: controller 3000 at 127.0.0.1:\d+ answered NOT_CONTROLLER"):
                await channel.send(_hb(), timeout_s=0.3)
            await channel.close()
    run(go, 30)


def test_restamp_chooses_each_attempt_and_none_stops_the_resends():
    """``restamp`` is asked before every attempt (the first included) and what it returns is what
    goes out; None sends nothing more and fails at once, naming the last answer -- forwarding's
    "no resend after the client's timeout" rests on it."""
    async def go():
        async with Scripted(heartbeat=lambda body: BrokerHeartbeatResponse(error_code=Errors.NOT_CONTROLLER)) as srv:
            seen: list[int] = []
            srv.heartbeat = lambda body: (seen.append(body.broker_epoch),
                                          BrokerHeartbeatResponse(error_code=Errors.NOT_CONTROLLER))[1]
            plan = [broker_heartbeat(1, 11, 10), broker_heartbeat(1, 12, 10), None, broker_heartbeat(1, 13, 10)]
            channel = ControllerChannel(lambda: srv.address, client_id="t", retry_backoff_ms=10)
            t0 = time.monotonic()
            with pytest.raises(ControllerUnavailableError,
                               match=r"BrokerHeartbeat not sent again: its own deadline has passed "
                                     r"\(last: controller 3000 at 127.0.0.1:\d+ answered NOT_CONTROLLER\)"):
                await channel.send(_hb(), timeout_s=30, restamp=lambda: plan.pop(0))
            assert time.monotonic() - t0 < 5  # not the 30 s deadline
            assert seen == [11, 12] and len(plan) == 1
            await channel.close()
    run(go, 30)


def test_not_controller_inside_a_result_counts():
    R = CreateTopicsResponse
    ok = R(topics=[R.CreatableTopicResult(name="a", error_code=0),
                   R.CreatableTopicResult(name="b", error_code=Errors.TOPIC_ALREADY_EXISTS)])
    assert not response_has_error(ok, Errors.NOT_CONTROLLER)
    assert response_has_error(ok, Errors.TOPIC_ALREADY_EXISTS)
    moved = R(topics=[R.CreatableTopicResult(name="a", error_code=Errors.NOT_CONTROLLER)])
    assert response_has_error(moved, Errors.NOT_CONTROLLER)
    assert response_has_error(BrokerHeartbeatResponse(error_code=Errors.NOT_CONTROLLER), Errors.NOT_CONTROLLER)


def test_it_waits_for_a_controller_to_be_known():
    """No controller known for 0.3 s, then one: the request is delivered; with a deadline
    shorter than the wait, the error says no controller was known."""
    async def go():
        async with Scripted() as srv:
            known_at = time.monotonic() + 0.3
            channel = ControllerChannel(lambda: srv.address if time.monotonic() >= known_at else None,
                                        client_id="t", retry_backoff_ms=20)
            with pytest.raises(ControllerUnavailableError, match="within 0.1s; last: no active controller is known"):
                await channel.send(_hb(), timeout_s=0.1)
            resp = await channel.send(_hb(), timeout_s=5)
            assert resp.error_code == 0 and time.monotonic() >= known_at
            await channel.close()
    run(go, 30)


def test_a_refused_or_silent_controller_is_named_at_the_deadline():
    async def go():
        (port,) = free_ports(1)
        channel = ControllerChannel(lambda: (2, "127.0.0.1", port), client_id="t", retry_backoff_ms=20)
        t0 = time.monotonic()
        with pytest.raises(ControllerUnavailableError,
                           match=rf"within 0.5s; last: controller 2 at 127.0.0.1:{port}: .*connection refused"):
            await channel.send(_hb(), timeout_s=0.5)
        assert time.monotonic() - t0 < 2
        await channel.close()

        # a controller that never answers: each attempt times out, then the deadline
        async with Scripted(heartbeat=lambda body: DEFERRED) as srv:
            channel = ControllerChannel(lambda: srv.address, client_id="t", request_timeout_ms=200)
            t0 = time.monotonic()
            with pytest.raises(ControllerUnavailableError, match=r"within 0.5s; last: controller 3000 at .*timed out"):
                await channel.send(_hb(), timeout_s=0.5)
            assert 0.45 < time.monotonic() - t0 < 2
            await channel.close()
    run(go, 30)


def test_close_ends_a_waiting_send_at_once():
    async def go():
        channel = ControllerChannel(lambda: None, client_id="t", retry_backoff_ms=1000)
        task = asyncio.ensure_future(channel.send(_hb(), timeout_s=30))
        await asyncio.sleep(0.05)
        t0 = time.monotonic()
        await channel.close()
        with pytest.raises(ControllerUnavailableError, match="the controller channel is closed"):
            await task
        assert time.monotonic() - t0 < 1
        with pytest.raises(ValueError, match="request_timeout_ms must be > 0"):
            ControllerChannel(lambda: None, client_id="t", request_timeout_ms=0)
    run(go, 30)
