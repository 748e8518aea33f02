"""The controller in the node: the EventQueue runner on the asyncio loop, the assembly in
KraftNode, and the controller RPCs over the wire on one controller.

* The runner gives the loop back between slices of at most ~2 ms, so a callback queued on
  the loop while a long backlog of controller events waits runs long before the backlog is
  done; deferred events run at their deadline from a timer; events queued before the loop
  runs are run at start; nothing runs after close.
* One controller node (``KraftNode.from_config(controller=True)``): it elects itself and
  writes the bootstrap records; a broker registers over the wire, heartbeats until it is
  unfenced, gets producer id blocks, is unregistered; UpdateFeatures and ControllerRegistration
  answer with Kafka's messages; DescribeCluster answers as a CONTROLLER endpoint
  (Kafka's MISMATCHED_ENDPOINT_TYPE message when asked for brokers); ApiVersions carries the
  supported and finalized features with their epoch.
* A standby answers NOT_CONTROLLER naming the active node, and serves the replayed features.
* A log of opaque (demo writer) records runs Raft only; ``kraft-server-start`` writes the
  bootstrap records, and a committed record no controller may apply stops it with one line
  (exit 2).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time

from support.controller import broker_heartbeat, broker_registration, until_controller_active
from support.raft import CLUSTER_ID, cluster_properties
from support.server import run_cli, run_server

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import supported_features
from kraft_node.network import KafkaConnection
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.allocate_producer_ids import AllocateProducerIdsRequest
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
from kraft_node.protocol.generated.controller_registration import ControllerRegistrationRequest
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.unregister_broker import UnregisterBrokerRequest
from kraft_node.protocol.generated.update_features import UpdateFeaturesRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.controller import RUN_BUDGET_NS, ControllerRunner
from kraft_node.server.node import KraftNode
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

#: the RPCs a controller node adds to its routing table
CONTROLLER_APIS = {int(k) for k in (ApiKeys.BROKER_REGISTRATION, ApiKeys.BROKER_HEARTBEAT,
                                    ApiKeys.CONTROLLER_REGISTRATION, ApiKeys.UNREGISTER_BROKER,
                                    ApiKeys.ALLOCATE_PRODUCER_IDS,
                                    ApiKeys.UPDATE_FEATURES, ApiKeys.API_VERSIONS)}


class _Spin:
    """An event that holds the loop for ``ms`` milliseconds (a slow controller event)."""

    def __init__(self, ms: float, log: list, name: str):
        self.ms, self.log, self.name = ms, log, name

    def run(self) -> None:
        end = time.monotonic() + self.ms / 1000
        while time.monotonic() < end:
            pass
        self.log.append(self.name)

    def handle_exception(self, exc: BaseException) -> None:
        self.log.append((self.name, type(exc).__name__))


def test_the_runner_yields_to_the_loop_between_slices():
    """60 events of 0.2 ms (12 ms of work) queued at once: a callback put on the loop after
    them runs after at most one slice (~2 ms), not after the 12 ms -- Kafka's controller has
    its own thread; here the network and Raft share the loop with it."""
    order: list = []

    async def go():
        runner = ControllerRunner()
        runner.start()
        for i in range(60):
            runner.queue.append(_Spin(0.2, order, i))
        asyncio.get_running_loop().call_soon(lambda: order.append("network"))
        while not runner.queue.is_empty():
            await asyncio.sleep(0.001)
        runner.close()
        return runner

    runner = asyncio.run(asyncio.wait_for(go(), 10))
    assert sorted(x for x in order if x != "network") == list(range(60))
    ran_before = order.index("network")
    # one slice: the budget's worth of events plus the one that crossed it
    assert 0 < ran_before <= RUN_BUDGET_NS // 200_000 + 1, order
    assert runner.slices >= 60 * 200_000 // RUN_BUDGET_NS, runner.slices


def test_deferred_events_run_at_their_deadline_from_a_timer():
    order: list = []

    async def go():
        runner = ControllerRunner()
        runner.start()
        t0 = time.monotonic_ns()
        seen: dict = {}

        class At:
            def __init__(self, name):
                self.name = name

            def run(self):
                seen[self.name] = time.monotonic_ns() - t0
                order.append(self.name)

            def handle_exception(self, exc):
                order.append((self.name, type(exc).__name__))

        runner.queue.schedule_deferred("late", t0 + 120_000_000, At("late"))
        runner.queue.schedule_deferred("early", t0 + 40_000_000, At("early"))
        runner.queue.schedule_deferred("dropped", t0 + 60_000_000, At("dropped"))
        runner.queue.cancel_deferred("dropped")
        await asyncio.sleep(0.25)
        runner.close()
        return seen

    seen = asyncio.run(asyncio.wait_for(go(), 10))
    assert order == ["early", "late"]
    assert 40_000_000 <= seen["early"] < 100_000_000, seen
    assert 120_000_000 <= seen["late"] < 200_000_000, seen


def test_events_queued_before_start_run_at_start_and_none_after_close():
    order: list = []
    runner = ControllerRunner()
    runner.queue.append(_Spin(0, order, "early"))  # the node is being built: no loop yet

    async def go():
        runner.start()
        await asyncio.sleep(0.01)
        assert order == ["early"]
        runner.queue.schedule_deferred("t", time.monotonic_ns() + 20_000_000, _Spin(0, order, "deferred"))
        runner.close()  # Kafka's close: a deferred event still waiting is rejected, not run
        runner.queue.append(_Spin(0, order, "after"))
        await asyncio.sleep(0.05)

    asyncio.run(asyncio.wait_for(go(), 10))
    assert order == ["early", ("deferred", "EventQueueClosedError"), ("after", "EventQueueClosedError")]
    assert runner.queue.closed


# ---------------------------------------------------------------------------- one controller node

def _registration(broker_id: int, cluster_id: str = CLUSTER_ID) -> BrokerRegistrationRequest:
    return broker_registration(broker_id, cluster_id)


_heartbeat = broker_heartbeat


@contextlib.asynccontextmanager
async def _connection(port: int):
    conn = await KafkaConnection.open("127.0.0.1", port, timeout=5)
    try:
        yield conn
    finally:
        await conn.close()




def test_a_controller_node_registers_unfences_and_serves_a_broker_over_the_wire(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)
    E = Errors

    async def go():
        node = KraftNode.from_config(cfg, controller=True)
        assert node.controller is not None
        assert CONTROLLER_APIS <= set(node.routes)
        await node.start()
        try:
            await until_controller_active(node)
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            try:
                # registration: a new incarnation gets the offset of its record as its epoch
                reg = await conn.request(_registration(7), 4, timeout=5)
                assert (reg.error_code, reg.throttle_time_ms) == (0, 0)
                epoch = reg.broker_epoch
                assert epoch > 0
                bad = await conn.request(_registration(8, cluster_id="7Hh2sM8tR0qHkq5R3gqUZA"), 4, timeout=5)
                assert (bad.error_code, bad.broker_epoch) == (E.INCONSISTENT_CLUSTER_ID, -1)

                # heartbeats: fenced until it reports its own registration record, then unfenced
                hb = await conn.request(_heartbeat(7, epoch, epoch - 1), 1, timeout=5)
                assert (hb.error_code, hb.is_fenced, hb.is_caught_up, hb.should_shut_down) == (0, True, False, False)
                hb = await conn.request(_heartbeat(7, epoch, epoch), 1, timeout=5)
                assert (hb.error_code, hb.is_fenced, hb.is_caught_up) == (0, False, True)
                hb = await conn.request(_heartbeat(7, epoch, epoch + 1), 1, timeout=5)
                assert (hb.error_code, hb.is_fenced) == (0, False)
                stale = await conn.request(_heartbeat(7, epoch + 1, epoch), 1, timeout=5)
                assert stale.error_code == E.STALE_BROKER_EPOCH
                unknown = await conn.request(_heartbeat(99, 1, epoch), 1, timeout=5)
                assert unknown.error_code == E.STALE_BROKER_EPOCH
                # the contact time was recorded by the handler for the live session
                tracker = node.controller.controller.cluster_control.heartbeat_manager.tracker
                assert tracker.contact_time(7, epoch) is not None

                # producer ids: consecutive blocks of 1,000, only for the registered epoch
                blocks = []
                for _ in range(2):
                    p = await conn.request(AllocateProducerIdsRequest(broker_id=7, broker_epoch=epoch), 0, timeout=5)
                    assert p.error_code == 0
                    blocks.append((p.producer_id_start, p.producer_id_len))
                assert blocks == [(0, 1000), (1000, 1000)]
                p = await conn.request(AllocateProducerIdsRequest(broker_id=7, broker_epoch=epoch - 1), 0, timeout=5)
                assert p.error_code == E.STALE_BROKER_EPOCH

                # an operator unregisters a broker: its epoch is no longer accepted
                reg9 = await conn.request(_registration(9), 4, timeout=5)
                assert reg9.error_code == 0
                un = await conn.request(UnregisterBrokerRequest(broker_id=9), 0, timeout=5)
                assert (un.error_code, un.error_message) == (0, None)
                un = await conn.request(UnregisterBrokerRequest(broker_id=9), 0, timeout=5)
                assert un.error_code == E.BROKER_ID_NOT_REGISTERED
                hb = await conn.request(_heartbeat(9, reg9.broker_epoch, reg9.broker_epoch), 1, timeout=5)
                assert hb.error_code == E.STALE_BROKER_EPOCH

                # ControllerRegistration (KIP-919) of some controller 5
                CR = ControllerRegistrationRequest
                cr = await conn.request(CR(controller_id=5, incarnation_id=Uuid.random(), listeners=[
                    CR.Listener(name="CONTROLLER", host="127.0.0.1", port=node.port, security_protocol=0)],
                    features=[CR.Feature(name=n, min_supported_version=lo, max_supported_version=hi)
                              for n, (lo, hi) in sorted(supported_features().items())]), 0, timeout=5)
                assert (cr.error_code, cr.error_message) == (0, None)

                # UpdateFeatures: one error for the request, in Kafka's words; per-feature
                # results only up to v1
                U = UpdateFeaturesRequest
                down = U(feature_updates=[U.FeatureUpdateKey(feature="metadata.version", max_version_level=7,
                                                             upgrade_type=1)], validate_only=True)
                uf = await conn.request(down, 1, timeout=5)
                assert uf.error_code == E.INVALID_UPDATE_VERSION
                assert uf.error_message == (
                    "The update failed for all features since the following feature had an error: Invalid update "
                    "version 7 for feature metadata.version. Can't downgrade the version of this feature without "
                    "setting the upgrade type to either safe or unsafe downgrade.")
                assert uf.results == []
                same = U(feature_updates=[U.FeatureUpdateKey(feature="group.version", max_version_level=1,
                                                             upgrade_type=1)], validate_only=True)
                uf = await conn.request(same, 1, timeout=5)
                assert (uf.error_code, uf.error_message) == (0, None)
                assert [(r.feature, r.error_code, r.error_message) for r in uf.results] == [
                    ("group.version", 0, "NONE")]
                uf = await conn.request(same, 2, timeout=5)
                assert (uf.error_code, uf.results) == (0, [])

                # DescribeCluster: a CONTROLLER endpoint
                dc = await conn.request(DescribeClusterRequest(endpoint_type=1), 1, timeout=5)
                assert (dc.error_code, dc.error_message) == (
                    E.MISMATCHED_ENDPOINT_TYPE,
                    "The request was sent to an endpoint of type CONTROLLER, but we wanted an endpoint of type BROKER")
                dc = await conn.request(DescribeClusterRequest(), 0, timeout=5)  # v0 means brokers
                assert dc.error_code == E.INVALID_REQUEST and "wanted an endpoint of type BROKER" in dc.error_message
                dc = await conn.request(DescribeClusterRequest(endpoint_type=3), 1, timeout=5)
                assert (dc.error_code, dc.error_message) == (E.UNSUPPORTED_ENDPOINT_TYPE, "Unsupported endpoint type 3")
                dc = await conn.request(DescribeClusterRequest(endpoint_type=2), 1, timeout=5)
                assert (dc.error_code, dc.endpoint_type, dc.cluster_id, dc.controller_id) == (0, 2, CLUSTER_ID, 1)
                assert [(b.broker_id, b.port) for b in dc.brokers] == [(1, node.port)]

                # ApiVersions: the table's APIs, the supported features (min 0 ones from v4 only,
                # KAFKA-17492) and the finalized ones at the committed offset they were read at
                av = await conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                        4, timeout=5)
                assert av.error_code == 0
                assert {k.api_key for k in av.api_keys} == set(node.routes) | {int(ApiKeys.API_VERSIONS)}
                assert {(f.name, f.min_version, f.max_version) for f in av.supported_features} == {
                    (n, lo, hi) for n, (lo, hi) in supported_features().items()}
                finalized = {f.name: (f.min_version_level, f.max_version_level) for f in av.finalized_features}
                levels = node.controller.controller.feature_control.finalized_features()
                assert finalized == {n: (lvl, lvl) for n, lvl in levels.items() if lvl}
                assert finalized["metadata.version"] == (29, 29)
                assert epoch < av.finalized_features_epoch <= node.controller.controller.last_stable_offset
                av3 = await conn.request(ApiVersionsRequest(client_software_name="t", client_software_version="1"),
                                         3, timeout=5)
                assert [f.name for f in av3.supported_features] == ["metadata.version"]
                assert av3.finalized_features == av.finalized_features
            finally:
                await conn.close()
        finally:
            await node.close()
        assert node.controller.queue.closed

    asyncio.run(asyncio.wait_for(go(), 60))


def test_a_standby_answers_not_controller_naming_the_active_one(tmp_path):
    paths = cluster_properties(str(tmp_path), 2)

    async def go():
        nodes = [KraftNode.from_config(NodeConfig.from_file(p), controller=True) for p in paths]
        for n in nodes:
            await n.start()
        try:
            deadline = time.monotonic() + 15
            while not any(n.controller.controller.active for n in nodes):
                assert time.monotonic() < deadline, "no active controller"
                await asyncio.sleep(0.02)
            active = next(n for n in nodes if n.controller.controller.active)
            standby = next(n for n in nodes if n is not active)
            await until_controller_active(active)
            conn = await KafkaConnection.open("127.0.0.1", standby.port, timeout=5)
            try:
                reg = await conn.request(_registration(3), 4, timeout=5)
                assert (reg.error_code, reg.broker_epoch) == (Errors.NOT_CONTROLLER, -1)
                hb = await conn.request(_heartbeat(3, 5, 5), 1, timeout=5)
                assert hb.error_code == Errors.NOT_CONTROLLER
                CR = ControllerRegistrationRequest
                cr = await conn.request(CR(controller_id=standby.node_id, incarnation_id=Uuid.random()), 0, timeout=5)
                assert (cr.error_code, cr.error_message) == (
                    Errors.NOT_CONTROLLER, f"The active controller appears to be node {active.node_id}.")
                # both controllers registered themselves with the active one (KIP-919), with
                # their incarnation and bound listener ...
                cc = active.controller.controller.cluster_control
                deadline = time.monotonic() + 15
                while set(cc.controllers()) != {1, 2}:
                    assert time.monotonic() < deadline, cc.controllers()
                    await asyncio.sleep(0.05)
                for n in nodes:
                    reg = cc.controllers()[n.node_id]
                    assert reg.incarnation_id == n.controller.registration.incarnation_id
                    assert [(e.name, e.port) for e in reg.listeners.values()] == [("CONTROLLER", n.port)]
                # ... so a feature change can be checked against every voter
                async with _connection(active.port) as ac:
                    U = UpdateFeaturesRequest
                    same = U(feature_updates=[U.FeatureUpdateKey(feature="group.version", max_version_level=1,
                                                                 upgrade_type=1)], validate_only=True)
                    uf = await ac.request(same, 2, timeout=5)
                    assert (uf.error_code, uf.error_message) == (0, None)
                # the standby replays what the active one commits: same finalized features
                deadline = time.monotonic() + 10
                while True:
                    av = await conn.request(ApiVersionsRequest(), 4, timeout=5)
                    if av.finalized_features_epoch >= 0 and av.finalized_features:
                        break
                    assert time.monotonic() < deadline, av
                    await asyncio.sleep(0.05)
                assert {f.name for f in av.finalized_features} >= {"metadata.version"}
            finally:
                await conn.close()
        finally:
            for n in nodes:
                await n.close()

    asyncio.run(asyncio.wait_for(go(), 60))


def test_a_log_of_opaque_records_runs_raft_only(tmp_path, caplog):
    """A log the demo writer filled (records that are not metadata record frames): the node
    runs Raft only even when asked for the controller, and says so once."""
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)

    async def write_opaque():
        node = KraftNode.from_config(cfg)  # Raft only
        await node.start()
        try:
            d = node.driver
            deadline = time.monotonic() + 15
            while not d.is_leader:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await d.append([b"1-123-0", b"1-123-1"], d.leader_and_epoch.epoch)
        finally:
            await node.close()

    asyncio.run(asyncio.wait_for(write_opaque(), 30))
    with caplog.at_level(logging.INFO, logger="kraft.server"):
        node = KraftNode.from_config(cfg, controller=True)
    try:
        assert node.controller is None
        assert not CONTROLLER_APIS & set(node.routes)
        said = [r.getMessage() for r in caplog.records if "running Raft only" in r.getMessage()]
        assert len(said) == 1 and cfg.metadata_partition_dir in said[0]
    finally:
        asyncio.run(node.close())


def test_kraft_server_start_writes_the_bootstrap_records_and_a_replay_fault_stops_it(tmp_path):
    """``kraft-server-start`` runs the controller: the single voter leads and writes the
    bootstrap records in a metadata transaction (kraft-dump-log shows them), then exits 0 on
    its own.  A committed record no controller may apply (a ZK migration state) is a fatal
    fault: the restarted node logs it once and exits 2, without a traceback."""
    (path,) = cluster_properties(str(tmp_path), 1, extra={"metadata.max.idle.interval.ms": "0"})
    cfg = NodeConfig.from_file(path)
    r = run_server(path, "--exit-after-seconds", "3", timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    seg = next(os.path.join(cfg.metadata_partition_dir, n) for n in sorted(os.listdir(cfg.metadata_partition_dir))
               if n.endswith(".log"))
    dump = run_cli("kraft_storage.tools.dump_log", seg)
    assert dump.returncode == 0, dump.stderr
    payloads = [json.loads(ln.split(" payload: ", 1)[1]) for ln in dump.stdout.splitlines() if " payload: " in ln]
    types = [p["type"] for p in payloads]
    assert types[0] == "BeginTransactionRecord" and "EndTransactionRecord" in types, types
    mv = [p["data"] for p in payloads if p["type"] == "FeatureLevelRecord" and p["data"]["Name"] == "metadata.version"]
    assert mv == [{"Name": "metadata.version", "FeatureLevel": 29}]

    # append a record the controller must refuse, with a Raft-only node
    async def poison():
        node = KraftNode.from_config(cfg)
        await node.start()
        try:
            d = node.driver
            deadline = time.monotonic() + 15
            while not d.is_leader:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            bad = ApiMessageAndVersion(m.ZkMigrationStateRecord(zk_migration_state=1), 0).encode()
            await d.append([bad], d.leader_and_epoch.epoch)
        finally:
            await node.close()

    asyncio.run(asyncio.wait_for(poison(), 30))
    r = run_server(path, "--exit-after-seconds", "10", timeout=60)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    fault = [ln for ln in r.stderr.splitlines() if "fatal controller fault" in ln]
    assert len(fault) == 1 and " CRITICAL " in fault[0], r.stderr[-3000:]
    assert "Cannot load ZkMigrationState 1 because ZK migration is no longer supported." in fault[0]
