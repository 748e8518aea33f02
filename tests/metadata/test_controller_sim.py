"""The QuorumController under deterministic simulation: controllers on the Raft simulator,
brokers talking to them through the controller's public API, faults, and the controller's
invariants checked after every simulator event (``kraft_node.metadata.controller.sim``).

Scenarios re-stated from Kafka's QuorumControllerTest on a faulty quorum: a fresh cluster's
log (testSnapshotSaveAndLoad's record list, at Kafka 4.2's bootstrap), fencing several
brokers (testFenceMultipleBrokers), and a crash of the active controller in the middle of a
write.  Topics: ReplicationControlManagerTest.testShrinkAndExpandIsr with the AlterPartitions
a simulated leader sends, and a zonal outage over Kafka's rack-aware placement.  Then the
seeded chaos runs (every seed names itself and how to rerun it; topics, AlterPartition and
zonal outages included), and mutation tests showing each invariant fails when the
controller breaks its rule (the partition invariants through bad records committed by the
controller's own write path).

``KRAFT_CONTROLLER_SIM_SEEDS`` overrides the number of chaos seeds (default 500).
"""
from __future__ import annotations

import logging
import os

import pytest

from kraft_node.metadata.controller.alter_partition import AlterPartitionManager
from kraft_node.metadata.controller.cluster_control import ClusterControlManager
from kraft_node.metadata.controller.heartbeats import BrokerHeartbeatTracker
from kraft_node.metadata.controller.offset_control import OffsetControlManager
from kraft_node.metadata.controller.purgatory import Purgatory
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.controller.sim import (
    BrokerNetworkConfig,
    ControllerSim,
    ControllerSimConfig,
    SimSettings,
    main,
    run_seed,
    state_digest,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.raft.sim.cluster import SimConfig
from kraft_node.raft.sim.invariants import SafetyViolation
from kraft_node.raft.sim.network import NetworkConfig
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH

SEEDS = int(os.environ.get("KRAFT_CONTROLLER_SIM_SEEDS", "500"))
CHUNK = 50

#: BrokerRegistrationChangeRecord.fenced (Kafka's BrokerRegistrationFencingChange)
FENCE, UNFENCE = 1, -1


@pytest.fixture(autouse=True)
def _quiet_controller_logs():
    """The chaos makes the controllers log thousands of lines; keep the test output readable."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def calm_sim(*, voters: int = 3, brokers: int = 3, seed: int = 1, session_ms: int = 1000,
             heartbeat_ms: int = 250, racks: int = 0, replication: bool = False) -> ControllerSim:
    """A cluster on a network with 1-5 ms delays and no loss, brokers on 1-3 ms links."""
    cfg = ControllerSimConfig(
        raft=SimConfig(voters=voters, network=NetworkConfig(min_delay_ms=1, max_delay_ms=5)),
        settings=SimSettings(broker_session_timeout_ms=session_ms, broker_heartbeat_interval_ms=heartbeat_ms),
        brokers=brokers,
        broker_network=BrokerNetworkConfig(min_delay_ms=1, max_delay_ms=3, request_timeout_ms=300),
        racks=racks, replication=replication)
    return ControllerSim(seed, cfg)


def run_until(csim: ControllerSim, what: str, cond, limit_ms: int = 10_000) -> None:
    end = csim.now + limit_ms
    while not cond():
        assert csim.now < end, f"not within {limit_ms} ms: {what}"
        csim.run_for(5)


def bootstrapped(csim: ControllerSim) -> bool:
    act = csim.active()
    return act is not None and act.feature_control.metadata_version_or_none(epoch=act.last_stable_offset) is not None


def unfenced(csim: ControllerSim, broker_id: int) -> bool:
    """The broker's current registration is unfenced in the active controller's committed state."""
    act = csim.active()
    b = csim.brokers[broker_id]
    if act is None or b.epoch < 0:
        return False
    reg = act.cluster_control.registration(broker_id, epoch=act.last_stable_offset)
    return reg is not None and reg.epoch == b.epoch and not reg.fenced


def fenced_in_committed_state(csim: ControllerSim, broker_id: int) -> bool:
    act = csim.active()
    reg = act.cluster_control.registration(broker_id, epoch=act.last_stable_offset) if act else None
    return reg is not None and reg.fenced


def start_broker(csim: ControllerSim, broker_id: int) -> None:
    csim.brokers[broker_id].start()
    run_until(csim, f"broker {broker_id} registered and unfenced",
              lambda: csim.brokers[broker_id].state == "running" and unfenced(csim, broker_id))


def records(csim: ControllerSim) -> list[tuple[int, int, object]]:
    """The committed log, NoOpRecords left out (the idle task writes them on a timer)."""
    return [(off, ver, rec) for off, ver, rec in csim.committed_records() if not isinstance(rec, m.NoOpRecord)]


# ---------------------------------------------------------------- a fresh cluster's log
def test_a_fresh_cluster_writes_kafkas_bootstrap_then_fenced_registrations_unfences_and_producer_ids():
    csim = calm_sim(voters=3, brokers=3)
    csim.start_all(brokers=False)
    run_until(csim, "an active controller with the bootstrap committed", lambda: bootstrapped(csim))
    for b in range(3):
        start_broker(csim, b)
    granted = []
    for b in (0, 1, 2, 0):
        broker = csim.brokers[b]
        before = broker.stats["pid_blocks"]
        broker.allocate_producer_ids()
        run_until(csim, f"a producer id block for broker {b}",
                  lambda broker=broker, before=before: broker.stats["pid_blocks"] > before)
        granted.append(b)
    csim.run_for(100)

    log = records(csim)
    got = [(type(r).__name__, v) for _, v, r in log]
    assert got == [
        ("BeginTransactionRecord", 0),
        *[("FeatureLevelRecord", 0)] * 6,
        ("EndTransactionRecord", 0),
        *[("RegisterBrokerRecord", 3), ("BrokerRegistrationChangeRecord", 0)] * 3,
        *[("ProducerIdsRecord", 0)] * 4,
    ], got

    # Kafka 4.2's bootstrap: metadata.version 4.2-IV1 first, then each feature's default at it,
    # by name, in one metadata transaction; kraft.version is Raft's, not a record.
    assert log[0][2].name == "Bootstrap records"
    assert [(r.name, r.feature_level) for _, _, r in log[1:7]] == [
        ("metadata.version", 29), ("eligible.leader.replicas.version", 1), ("group.version", 1),
        ("share.version", 1), ("streams.version", 1), ("transaction.version", 2)]

    # Each broker: its registration, fenced, at the offset that is its epoch; then its unfence.
    for i, b in enumerate(range(3)):
        (reg_off, _, reg), (_, _, change) = log[8 + 2 * i], log[9 + 2 * i]
        broker = csim.brokers[b]
        assert reg.broker_id == b and reg.broker_epoch == reg_off == broker.epoch
        assert reg.fenced is True and reg.in_controlled_shutdown is False and reg.is_migrating_zk_broker is False
        assert reg.incarnation_id == broker.incarnation_id and list(reg.log_dirs) == [broker.dir_id]
        assert [(e.name, e.host, e.port, e.security_protocol) for e in reg.end_points] == \
            [("PLAINTEXT", f"broker-{b}.sim", 9092, 0)]
        assert [f.name for f in reg.features] == sorted(f.name for f in reg.features)
        assert {f.name: (f.min_supported_version, f.max_supported_version) for f in reg.features}[
            "metadata.version"] == (7, 29)
        assert (change.broker_id, change.broker_epoch, change.fenced, change.in_controlled_shutdown) == \
            (b, broker.epoch, UNFENCE, 0)

    # Producer ids: a block of 1,000 per grant; the record names the next block's first id.
    assert [(r.broker_id, r.broker_epoch, r.next_producer_id) for _, _, r in log[14:]] == [
        (b, csim.brokers[b].epoch, 1000 * (k + 1)) for k, b in enumerate(granted)]
    assert sorted(csim.invariants.granted_blocks) == [0, 1000, 2000, 3000]

    # The idle task wrote NoOpRecords between them, and every controller holds the same state
    # (a NoOp changes nothing, so even the active one's latest state is the others').
    assert any(isinstance(r, m.NoOpRecord) for _, _, r in csim.committed_records())
    assert len(csim.live()) == 3 and all(c.last_stable_offset >= log[-1][0] for c in csim.live())
    assert len({state_digest(c, LATEST_EPOCH) for c in csim.live()}) == 1


# ---------------------------------------------------------------- fencing (testFenceMultipleBrokers)
def test_fencing_several_brokers_that_stop_heartbeating_keeps_the_live_one_unfenced():
    session_ms = 1000
    csim = calm_sim(voters=3, brokers=5, session_ms=session_ms)
    csim.start_all(brokers=False)
    run_until(csim, "an active controller", lambda: bootstrapped(csim))
    for b in range(5):
        csim.brokers[b].start()
    run_until(csim, "every broker registered", lambda: all(b.state == "running" for b in csim.brokers.values()))
    run_until(csim, "every broker unfenced", lambda: all(unfenced(csim, b) for b in range(5)))

    keep, fence = [0], [1, 2, 3, 4]
    csim.invariants.calm_since = csim.now  # the fencing deadline is checked after every event from here
    for b in fence:
        csim.brokers[b].stop()
    run_until(csim, "the stopped brokers fenced", lambda: all(fenced_in_committed_state(csim, b) for b in fence),
              limit_ms=3 * session_ms)
    csim.run_for(session_ms)  # and the heartbeating one is still unfenced a whole session later
    assert all(unfenced(csim, b) for b in keep)
    assert all(fenced_in_committed_state(csim, b) for b in fence)

    fences = [(r.broker_id, r.broker_epoch) for _, _, r in records(csim)
              if isinstance(r, m.BrokerRegistrationChangeRecord) and r.fenced == FENCE]
    assert sorted(fences) == [(b, csim.brokers[b].epoch) for b in fence]
    assert csim.invariants.stats["fences_checked"] == 4 and csim.invariants.stats["liveness_checks"] > 0


# ---------------------------------------------------------------- a crash mid-write
def _crash_active_on_registration(csim: ControllerSim, *, once_replicated: bool) -> dict:
    """Crash the active controller's node once it appends a RegisterBrokerRecord: at once
    (the record never leaves it), or once a follower's log holds it (the next leader
    commits it)."""
    act = csim.active_sim_controller()
    state: dict = {"node": act.node.id}
    original = act.raft.on_append

    def on_append(base: int, values: list[bytes]) -> None:
        original(base, values)
        if "offset" not in state and any(
                isinstance(decode_metadata_record(v, base + i)[2], m.RegisterBrokerRecord)
                for i, v in enumerate(values)):
            state["offset"] = base
            if not once_replicated:
                csim.scheduler.at(csim.now, lambda: csim.raft.crash(act.node.id))  # before Raft's poll sends it

    def after_event() -> None:
        if once_replicated and "offset" in state and "crashed" not in state:
            if any(n.alive and n.id != act.node.id and n.log.end_offset > state["offset"]
                   for n in csim.raft.nodes.values()):
                state["crashed"] = csim.now
                csim.raft.crash(act.node.id)

    act.raft.on_append = on_append
    csim.after_event_hooks.append(after_event)
    return state


@pytest.mark.parametrize("once_replicated", [False, True], ids=["lost-with-the-leader", "committed-by-the-next"])
def test_a_crash_of_the_active_controller_mid_write(once_replicated):
    csim = calm_sim(voters=3, brokers=1, seed=3)
    csim.start_all(brokers=False)
    run_until(csim, "an active controller", lambda: bootstrapped(csim))
    state = _crash_active_on_registration(csim, once_replicated=once_replicated)
    broker = csim.brokers[0]
    broker.start()
    run_until(csim, "the registration written", lambda: "offset" in state)
    if once_replicated:
        run_until(csim, "a follower holding the registration", lambda: "crashed" in state)
    csim.run_for(1)
    assert not csim.raft.nodes[state["node"]].alive and broker.state == "registering"  # no answer came
    csim.scheduler.at(csim.now + 500, lambda: csim.raft.restart(state["node"]))
    run_until(csim, "the broker registered and unfenced through another controller",
              lambda: broker.state == "running" and unfenced(csim, 0))

    regs = [(off, r) for off, _, r in records(csim) if isinstance(r, m.RegisterBrokerRecord)]
    assert all(r.incarnation_id == broker.incarnation_id for _, r in regs)
    if once_replicated:
        # the next leader committed the crashed one's record; the retry amended it (same epoch)
        assert broker.epoch == state["offset"] == regs[0][0]
        assert all(r.broker_epoch == broker.epoch for _, r in regs)
    else:
        # the record died with the leader's unflushed log; the retry registered afresh
        assert len(regs) == 1 and regs[0][0] == broker.epoch == regs[0][1].broker_epoch
    csim.run_for(1000)  # the crashed node came back and caught up: every controller agrees
    assert len(csim.live()) == 3 and len({state_digest(c, LATEST_EPOCH) for c in csim.live()}) == 1
    assert csim.invariants.stats["standby_checks"] > 0 and csim.invariants.stats["registrations_verified"] >= 1


# ---------------------------------------------------------------- controller bugs the simulator found
def test_the_active_controller_keeps_a_registry_snapshot_at_its_stable_offset_across_a_leader_change():
    """A sole controller restarts and claims the new epoch before Raft's LeaderChange record
    for it is delivered; when that control batch commits, the stable offset moves onto it.
    The active controller takes no registry snapshot there (only standbys do), and
    ``delete_snapshots_up_to`` drops the one below: committed reads then raise
    SnapshotNotFoundError and a renounce cannot revert.  Kafka moves no offsets on a control
    batch (``handleCommitBatchMetrics`` only)."""
    csim = calm_sim(voters=1, brokers=0)
    csim.start_all()
    run_until(csim, "an active controller", lambda: bootstrapped(csim))
    csim.raft.restart(1)
    csim.run_for(100)
    ctl = csim.active()
    assert ctl is not None and ctl.claim_epoch == 2
    assert ctl.registry.has_snapshot(ctl.last_stable_offset), list(ctl.registry.epochs())
    read = ctl.finalized_features()
    csim.run_for(5)
    assert read.done() and read.result()[0]["metadata.version"] == 29


def test_a_sole_controller_is_active_again_after_renouncing():
    """The controller renounces after an unexpected event error (Kafka's catch-all).  With a
    single voter, RaftCore ignores the resignation (``_poll_leader`` resigns only when other
    voters exist), so no new epoch starts, no leader change is delivered, and the controller
    never claims again: the cluster has no active controller for good.  Kafka's sole voter
    resigns and elects itself in the next epoch."""
    csim = calm_sim(voters=1, brokers=0)
    csim.start_all()
    run_until(csim, "an active controller", lambda: bootstrapped(csim))
    csim.run_for(600)  # past the LeaderChange commit (the bug above is not this test's)
    ctl = csim.active()
    epoch = ctl.claim_epoch
    ctl.renounce()
    run_until(csim, "a controller active in a later epoch",
              lambda: csim.active() is not None and csim.active().claim_epoch > epoch, limit_ms=5000)


# ---------------------------------------------------------------- topics, AlterPartition, zonal outages
def write(csim: ControllerSim, call, what: str, limit_ms: int = 5000):
    """A write through the active controller's public API, run until answered; its result."""
    future = call(csim.active())
    run_until(csim, what, future.done, limit_ms)
    return future.result()


def create_topic(csim: ControllerSim, name: str, *, assignments=(), partitions: int = -1, rf: int = -1,
                 configs: dict | None = None) -> Uuid:
    T = CreateTopicsRequest
    request = T(topics=[T.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=rf,
        assignments=[T.CreatableReplicaAssignment(partition_index=i, broker_ids=list(b))
                     for i, b in enumerate(assignments)],
        configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()])],
        timeout_ms=60_000, validate_only=False)
    result = write(csim, lambda c: c.create_topics(request, {name}), f"topic {name} created").topics[0]
    assert result.error_code == 0, result
    return result.topic_id


def committed_partitions(csim: ControllerSim, topic_id: Uuid) -> dict:
    act = csim.active()
    return act.replication_control.partitions(topic_id, epoch=act.last_stable_offset)


def started(csim: ControllerSim) -> None:
    csim.start_all(brokers=False)
    run_until(csim, "an active controller", lambda: bootstrapped(csim))
    for b in csim.brokers:
        start_broker(csim, b)


def test_a_leader_shrinks_the_isr_of_a_lagging_follower_and_expands_it_once_caught_up():
    """ReplicationControlManagerTest.testShrinkAndExpandIsr, with the AlterPartitions sent by
    the simulated leader: foo-0 on [0, 1, 2]; broker 2 pauses past the replica lag (200 ms)
    but within its session, so the leader, not the controller, takes it out of the ISR: ISR
    [0, 1]; back and caught up (100 ms live), it is added again: [0, 1, 2].  Each change bumps
    the partition epoch only (no leader epoch bump for ISR changes since 3.6-IV0, KAFKA-15021)."""
    csim = calm_sim(voters=3, brokers=3, replication=True)
    csim.config.replica_lag_ms, csim.config.caught_up_ms = 200, 100
    started(csim)
    foo = create_topic(csim, "foo", assignments=[[0, 1, 2]])
    p = committed_partitions(csim, foo)[0]
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (0, (0, 1, 2), 0, 0)
    csim.brokers[2].pause(600)  # < session 1000 - heartbeat 250: never fenced
    run_until(csim, "the ISR shrunk", lambda: committed_partitions(csim, foo)[0].isr == (0, 1), 2000)
    run_until(csim, "the ISR expanded", lambda: committed_partitions(csim, foo)[0].isr == (0, 1, 2), 2000)
    changes = [(r.isr, r.leader) for _, _, r in records(csim)
               if isinstance(r, m.PartitionChangeRecord) and r.topic_id == foo]
    assert changes == [([0, 1], -2), ([0, 1, 2], -2)]
    p = committed_partitions(csim, foo)[0]
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (0, 0, 2)
    assert unfenced(csim, 2) and csim.brokers[0].stats["isr_changes"] == 2
    assert csim.invariants.stats["partitions_checked"] > 0


def test_a_zonal_outage_keeps_every_partition_led_from_the_other_racks_and_heals():
    """Six brokers in three racks; a topic placed by the controller (Kafka's rack-aware
    StripedReplicaPlacer: with RF 3 and three racks, each partition has one replica per
    rack).  The whole of rack-0 crashes: its brokers are fenced and leave every ISR, and every
    partition keeps a leader from another rack.  They restart: registered again, unfenced, and
    the leaders add them back to every ISR."""
    csim = calm_sim(voters=3, brokers=6, racks=3, replication=True)
    started(csim)
    zones = create_topic(csim, "zones", partitions=6, rf=3)
    racks = {b.id: b.rack for b in csim.brokers.values()}
    assert all(sorted(racks[r] for r in p.replicas) == ["rack-0", "rack-1", "rack-2"]
               for p in committed_partitions(csim, zones).values())
    zone = [b for b in csim.brokers.values() if b.rack == "rack-0"]
    assert [b.id for b in zone] == [0, 3]
    for b in zone:
        b.crash()

    def out_of_service() -> bool:
        parts = committed_partitions(csim, zones).values()
        return all(fenced_in_committed_state(csim, b.id) for b in zone) and all(
            p.leader not in (0, 3, -1) and not {0, 3} & set(p.isr) for p in parts)
    run_until(csim, "rack-0 fenced and out of every ISR", out_of_service, 3000)
    csim.run_for(400)  # (down longer than a request can be in flight)
    for b in zone:
        b.start()
    run_until(csim, "every ISR whole again", lambda: all(unfenced(csim, b.id) for b in zone) and all(
        set(p.isr) == set(p.replicas) for p in committed_partitions(csim, zones).values()), 5000)


def _bogus_partition_write(csim: ControllerSim, record) -> None:
    """Commit ``record`` through the active controller's write path (a controller bug that
    writes it), then run on: the partition invariants must object."""
    version = MetadataVersion.latest_production().partition_change_record_version()
    act = csim.active()
    act.append_write("bogus", lambda: ControllerResult.of([ApiMessageAndVersion(record, version)], None))
    csim.run_for(500)


def _cluster_with_foo() -> tuple[ControllerSim, Uuid]:
    """Brokers 0-3, foo-0 on [0, 1, 2], broker 3 stopped and fenced."""
    csim = calm_sim(voters=3, brokers=4)
    started(csim)
    foo = create_topic(csim, "foo", assignments=[[0, 1, 2]])
    csim.brokers[3].stop()
    run_until(csim, "broker 3 fenced", lambda: fenced_in_committed_state(csim, 3), 3000)
    return csim, foo


@pytest.mark.parametrize("fields, violation", [
    ({"leader": 2, "isr": [0, 1]}, "is led by 2, outside its ISR"),
    ({"isr": [0, 1, 3]}, "has an ISR that is not a subset of its replicas"),
    ({"isr": [0, 1], "eligible_leader_replicas": [1]}, "has brokers in both its ISR and its ELR"),
    ({"replicas": [0, 1, 3], "isr": [0, 3], "directories": None}, "has broker 3, fenced, in its ISR"),
], ids=["leader-outside-isr", "isr-not-replicas", "elr-overlaps-isr", "fenced-in-isr"])
def test_the_partition_invariants_catch_a_bad_partition_change(fields, violation):
    csim, foo = _cluster_with_foo()
    if fields.get("directories", ()) is None:
        fields = dict(fields, directories=[csim.brokers[b].dir_id for b in fields["replicas"]])
    with pytest.raises(SafetyViolation, match=violation):
        _bogus_partition_write(csim, m.PartitionChangeRecord(topic_id=foo, partition_id=0, **fields))


def test_the_partition_invariants_catch_epochs_going_back():
    """A PartitionRecord for an existing partition replaces it (Kafka's replay does): one
    carrying older epochs than the committed history's is reported."""
    csim, foo = _cluster_with_foo()
    p = committed_partitions(csim, foo)[0]
    _bogus_partition_write(csim, m.PartitionChangeRecord(topic_id=foo, partition_id=0, isr=[0, 1]))
    assert committed_partitions(csim, foo)[0].partition_epoch == p.partition_epoch + 1
    with pytest.raises(SafetyViolation, match=r"\(leader epoch, partition epoch\) went from \(0, 1\) to \(0, 0\)"):
        _bogus_partition_write(csim, p.to_record(foo, 0).message)


# ---------------------------------------------------------------- seeded chaos
def _run_chunk(start: int, stop: int) -> list[str]:
    failures = []
    for seed in range(start, stop):
        try:
            run_seed(seed)
        except Exception as e:  # collect every failing seed of the chunk
            msg = str(e)
            if "--seeds" not in msg:
                msg += f" (rerun: python -m kraft_node.metadata.controller.sim --seeds {seed}:{seed + 1} --trace)"
            failures.append(f"seed {seed}: {type(e).__name__}: {msg}")
    return failures


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK), ids=lambda s: f"seeds{s}-{min(s + CHUNK, SEEDS) - 1}")
def test_chaos_seeds_keep_the_controller_invariants_and_converge(start):
    failures = _run_chunk(start, min(start + CHUNK, SEEDS))
    assert not failures, "\n".join(failures)


def test_a_seed_replays_identically():
    def outcome(seed):
        try:
            return run_seed(seed)
        except Exception as e:
            return f"{type(e).__name__}: {e}"
    assert outcome(4242) == outcome(4242)
    assert len({repr(outcome(s)) for s in range(3)}) == 3


def test_the_chaos_reaches_the_interesting_paths():
    """Across some seeds the chaos must fail controllers over, fence and unfence, restart and
    shut brokers down, grant producer ids, load controller snapshots and check standbys after
    a renounce; create, grow and delete topics and alter min.insync.replicas (some answers
    refused, some lost and retried), shrink and expand ISRs by AlterPartition (some refused as
    stale), take whole racks out, and check the partition invariants after fencings;
    otherwise the seed sweep would prove little."""
    sims: list[ControllerSim] = []
    results = []
    for s in range(40):
        try:
            results.append(run_seed(s, observe=sims.append))
        except Exception:  # noqa: BLE001 - the counters are what this test reads
            pass
    total: dict[str, int] = {}
    for csim in sims:
        for k, v in csim.invariants.stats.items():
            total[k] = total.get(k, 0) + v
        for b in csim.brokers.values():
            for k, v in b.stats.items():
                total["broker_" + k] = total.get("broker_" + k, 0) + v
        assert csim.admin is not None
        for k, v in csim.admin.stats.items():
            total["admin_" + k] = total.get("admin_" + k, 0) + v
        total["epochs"] = total.get("epochs", 0) + len(csim.raft.checker.leader_of_epoch)
        total["controlled_shutdowns"] = total.get("controlled_shutdowns", 0) + len(csim.invariants.fence_exempt)
    total["zonal_outages"] = sum(r.zonal_outages for r in results)
    total["partition_changes"] = sum(r.partition_changes for r in results)
    assert total["epochs"] > 1.5 * len(sims), total
    for key in ("fences_checked", "standby_checks", "registrations_verified", "writes_checked", "liveness_checks",
                "snapshot_loads", "broker_restarts", "broker_pid_blocks", "broker_not_controller", "broker_timeouts",
                "controlled_shutdowns", "partitions_checked", "fenced_brokers_checked", "topics_verified",
                "alters_verified", "broker_alter_partitions", "broker_isr_changes", "broker_isr_refreshes",
                "admin_topics_created", "admin_topics_deleted", "admin_partitions_created", "admin_configs_altered",
                "admin_refused", "admin_not_controller", "admin_timeouts", "zonal_outages", "partition_changes"):
        assert total[key] > 0, (key, total)
    assert total["admin_topics_created"] >= 2 * len(sims), total  # every seed gets topics


def test_the_command_line_replays_a_seed_with_its_trace(capsys):
    """``python -m kraft_node.metadata.controller.sim --seeds 11:12 --trace``: the seed's
    admin operations, AlterPartitions and its result, then the summary, exit status 0."""
    assert main(["--seeds", "11:12", "--trace"]) == 0
    out = capsys.readouterr().out
    assert "admin create topic-0" in out and "sends AlterPartition" in out and "RunResult(seed=11" in out
    assert '"failures": []' in out


# ---------------------------------------------------------------- the invariants catch real bugs (mutations)
# The one place these tests reach past the controller's public API: each patches one internal
# step to break one rule, and a violation of that rule must be reported within a few seeds.
def _first_violation(needle: str, seeds=range(30)) -> str:
    seen = []
    for s in seeds:
        try:
            run_seed(s)
        except Exception as e:  # other failures (a mutation breaks more than one rule) go on
            if needle in str(e):
                return str(e)
            seen.append(f"{s}: {e}"[:200])
    raise AssertionError(f"no seed reported {needle!r}; other failures: {seen}")


def test_the_checker_catches_a_purgatory_that_answers_before_commit(monkeypatch):
    monkeypatch.setattr(Purgatory, "add", lambda self, offset, complete: complete(None))
    assert "before its records up to offset" in _first_violation("answered a write")


def test_the_checker_catches_a_standby_that_skips_a_record(monkeypatch):
    replay = QuorumController.replay

    def skipping(self, message, offset):
        if not self.active and isinstance(message, m.BrokerRegistrationChangeRecord):
            return
        replay(self, message, offset)
    monkeypatch.setattr(QuorumController, "replay", skipping)
    _first_violation("differs from the one controller")


def test_the_checker_catches_a_fence_of_a_live_broker(monkeypatch):
    monkeypatch.setattr(BrokerHeartbeatTracker, "is_expired",
                        lambda self, t, now: now > t and t + self.session_timeout_ms // 4 < now)
    assert "within the session timeout" in _first_violation("but received its heartbeat")


def test_the_checker_catches_a_broker_left_unfenced(monkeypatch):
    monkeypatch.setattr(ClusterControlManager, "fence_stale_broker",
                        lambda self, now_ms=None: ControllerResult.of([], False))
    _first_violation("stopped heartbeating at")


def test_the_checker_catches_a_renounce_that_keeps_uncommitted_state(monkeypatch):
    def deactivate(self):
        self.next_write_offset = -1  # forgets to revert to the stable offset
    monkeypatch.setattr(OffsetControlManager, "deactivate", deactivate)
    _first_violation("standby controller", seeds=range(60))


def test_the_convergence_check_catches_isrs_that_never_recover(monkeypatch):
    """An AlterPartition answered as applied but never written: the leaders stop asking until
    their next metadata refresh, which shows the old ISR; after the heal the replicas the
    controller removed (fencing) never come back, and convergence fails naming a partition."""
    alter = AlterPartitionManager.alter_slice

    def unwritten(self, request, version, cursor, max_cost, records, answers, deadline_ns=None):
        return alter(self, request, version, cursor, max_cost, [], answers, deadline_ns)
    monkeypatch.setattr(AlterPartitionManager, "alter_slice", unwritten)
    assert "no convergence after healing" in _first_violation("has not recovered its whole ISR", seeds=range(12))


def test_the_checker_catches_an_alter_partition_answer_that_is_not_the_committed_partition(monkeypatch):
    """AlterPartition answers the partition as the record leaves it; one answering a leader
    epoch it never had is caught against the committed history (which the leader, trusting
    the answer, would otherwise only notice as a refusal later)."""
    alter = AlterPartitionManager.alter_slice

    def off_by_one(self, request, version, cursor, max_cost, records, answers, deadline_ns=None):
        start = len(answers)
        cursor = alter(self, request, version, cursor, max_cost, records, answers, deadline_ns)
        for _, p in answers[start:]:
            if p.error_code == 0:
                p.leader_epoch += 1
        return cursor
    monkeypatch.setattr(AlterPartitionManager, "alter_slice", off_by_one)
    message = _first_violation("was answered (leader, ISR, leader epoch, recovery state)")
    assert "but the committed partition then was" in message


def test_a_violation_names_its_seed_and_how_to_rerun_it(monkeypatch):
    monkeypatch.setattr(Purgatory, "add", lambda self, offset, complete: complete(None))
    with pytest.raises(SafetyViolation, match=r"seed=7 .*--seeds 7:8 --trace"):
        run_seed(7)
