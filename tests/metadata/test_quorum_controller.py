"""QuorumController's write path on a scripted Raft client: write, then commit, then answer.

The Raft client here is a fake whose commits the test releases by hand, so each rule is
checked at the exact moment it matters (Kafka's QuorumControllerTest re-states the same
rules on a mock Raft; the simulator tests run them under faults).
"""
from __future__ import annotations

import pytest
from support.controller import ScriptedRaft

from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.errors import ApiError, NotControllerError, ReplayError
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_node.raft.messages import Batch, LeaderAndEpoch
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap


class FeatureStub:
    """Just enough of a manager for these tests: feature levels in a timeline map."""

    def __init__(self, ctl: QuorumController) -> None:
        self.levels = TimelineHashMap(ctl.registry)
        ctl.register_replayer(m.FeatureLevelRecord, self.replay)
        ctl.register_snapshot_source(lambda e: [ApiMessageAndVersion(m.FeatureLevelRecord(name=k, feature_level=v), 0)
                                                for k, v in sorted(self.levels.items(epoch=e))])

    def replay(self, rec, offset) -> None:
        if rec.feature_level < 0:
            raise ReplayError(f"negative level at {offset}")
        self.levels[rec.name] = rec.feature_level


def bootstrap(level: int = 29) -> BootstrapMetadata:
    return BootstrapMetadata.from_records(
        [ApiMessageAndVersion(m.FeatureLevelRecord(name="metadata.version", feature_level=level), 0)], "test")


@pytest.fixture
def env():
    now = [0]
    raft = ScriptedRaft()
    queue = EventQueue(clock_ns=lambda: now[0] * 1_000_000)
    faults = []

    def fatal(msg, exc):
        faults.append((msg, exc))
        return RuntimeError(msg)

    stubs = {}

    def install(ctl):
        stubs["features"] = FeatureStub(ctl)

    ctl = QuorumController(node_id=1, cluster_id="c", raft=raft, queue=queue, clock_ms=lambda: now[0],
                           bootstrap=bootstrap(), fatal_fault_handler=fatal, managers=install)
    return ctl, raft, queue, stubs, faults, now


def level_write(name: str, level: int, response="ok", atomic=False):
    rec = ApiMessageAndVersion(m.FeatureLevelRecord(name=name, feature_level=level), 0)
    return lambda: ControllerResult([rec], response, atomic)


def activate(ctl, raft, queue):
    raft.elect(1, 1)
    queue.run_ready()
    raft.commit()
    queue.run_ready()
    assert ctl.active


def decoded_log(raft):
    return [type(decode_metadata_record(v)[2]).__name__ for _o, _e, v in raft.log]


def test_activation_on_an_empty_log_writes_the_bootstrap_transaction(env):
    ctl, raft, queue, stubs, faults, _ = env
    raft.elect(1, 1)
    queue.run_ready()
    assert ctl.active
    # MV 29 supports metadata transactions: Begin, the records, End (Kafka's golden log)
    assert decoded_log(raft) == ["BeginTransactionRecord", "FeatureLevelRecord", "EndTransactionRecord"]
    # replayed at once, but not stable until committed
    assert stubs["features"].levels.get("metadata.version") == 29
    assert ctl.last_stable_offset == -1
    raft.commit()
    queue.run_ready()
    assert ctl.last_stable_offset == 2
    assert stubs["features"].levels.get("metadata.version", epoch=ctl.last_stable_offset) == 29
    assert not faults


def test_old_metadata_version_bootstrap_is_one_atomic_batch(env):
    ctl, raft, queue, *_ = env
    ctl.bootstrap = bootstrap(level=12)  # 3.6-IV0: no metadata transactions
    raft.elect(1, 1)
    queue.run_ready()
    assert decoded_log(raft) == ["FeatureLevelRecord"]
    assert raft.batches == [(0, 1, True)]


def test_a_write_is_answered_only_when_committed(env):
    ctl, raft, queue, stubs, *_ = env
    activate(ctl, raft, queue)
    fut = ctl.append_write("w", level_write("x", 1))
    queue.run_ready()
    assert not fut.done()
    assert stubs["features"].levels.get("x") == 1  # applied in memory at once
    assert stubs["features"].levels.get("x", epoch=ctl.last_stable_offset) is None  # not committed
    raft.commit()
    queue.run_ready()
    assert fut.done() and fut.result() == "ok"


def test_a_write_without_records_waits_for_pending_writes(env):
    ctl, raft, queue, *_ = env
    activate(ctl, raft, queue)
    w = ctl.append_write("w", level_write("x", 1))
    r = ctl.append_write("noop", lambda: ControllerResult([], "read"))
    queue.run_ready()
    assert not w.done() and not r.done()
    raft.commit()
    queue.run_ready()
    assert w.result() == "ok" and r.result() == "read"
    r2 = ctl.append_write("noop2", lambda: ControllerResult([], "now"))
    queue.run_ready()
    assert r2.result() == "now"


def test_reads_see_committed_state_only(env):
    ctl, raft, queue, stubs, *_ = env
    activate(ctl, raft, queue)
    ctl.append_write("w", level_write("x", 1))
    queue.run_ready()
    read = ctl.append_read("r", lambda e: stubs["features"].levels.get("x", epoch=e))
    queue.run_ready()
    assert read.result() is None
    raft.commit()
    queue.run_ready()
    read = ctl.append_read("r", lambda e: stubs["features"].levels.get("x", epoch=e))
    queue.run_ready()
    assert read.result() == 1


def test_a_standby_answers_not_controller_naming_the_active_one(env):
    ctl, raft, queue, *_ = env
    raft.elect(2, 1)
    queue.run_ready()
    fut = ctl.append_write("w", level_write("x", 1))
    queue.run_ready()
    exc = fut.exception()
    assert isinstance(exc, NotControllerError)
    assert exc.message == "The active controller appears to be node 2."
    raft.leader = LeaderAndEpoch(-1, 2)
    fut = ctl.append_write("w", level_write("x", 1))
    queue.run_ready()
    assert fut.exception().message == "No controller appears to be active."


def test_losing_leadership_fails_the_purgatory_and_reverts_uncommitted_state(env):
    ctl, raft, queue, stubs, *_ = env
    activate(ctl, raft, queue)
    committed = ctl.append_write("a", level_write("a", 1))
    queue.run_ready()
    raft.commit()
    queue.run_ready()
    pending = ctl.append_write("b", level_write("b", 2))
    queue.run_ready()
    assert stubs["features"].levels.get("b") == 2
    raft.elect(2, 2)
    queue.run_ready()
    assert committed.result() == "ok"
    assert isinstance(pending.exception(), NotControllerError)
    assert not ctl.active and raft.resigned == [1]
    # reverted to the last stable offset: the uncommitted write is gone, the committed one stays
    assert stubs["features"].levels.get("b") is None
    assert stubs["features"].levels.get("a") == 1


def test_standby_replays_committed_batches(env):
    ctl, raft, queue, stubs, *_ = env
    raft.leader = LeaderAndEpoch(2, 1)
    value = ApiMessageAndVersion(m.FeatureLevelRecord(name="metadata.version", feature_level=29), 0).encode()
    raft.listener.handle_commit((Batch(0, 1, (value,)),))
    assert stubs["features"].levels.get("metadata.version") is None  # only enqueued by the callback
    queue.run_ready()
    assert stubs["features"].levels.get("metadata.version") == 29
    assert ctl.last_stable_offset == 0


def test_a_replay_error_on_a_standby_is_fatal_never_skipped(env):
    ctl, raft, queue, stubs, faults, _ = env
    bad = ApiMessageAndVersion(m.FeatureLevelRecord(name="x", feature_level=-1), 0).encode()
    good = ApiMessageAndVersion(m.FeatureLevelRecord(name="y", feature_level=1), 0).encode()
    raft.listener.handle_commit((Batch(0, 1, (bad, good)),))
    queue.run_ready()
    assert faults and "Unable to apply record at offset 0 on standby controller" in faults[0][0]
    assert isinstance(faults[0][1], ReplayError)
    assert stubs["features"].levels.get("y") is None  # nothing after the bad record was applied
    # and the controller stays stopped: later commits are not applied either
    raft.listener.handle_commit((Batch(2, 1, (good,)),))
    queue.run_ready()
    assert stubs["features"].levels.get("y") is None


def test_a_replay_error_on_the_active_controller_is_fatal_before_the_append(env):
    ctl, raft, queue, stubs, faults, _ = env
    activate(ctl, raft, queue)
    end = raft.end
    fut = ctl.append_write("bad", level_write("x", -1))
    queue.run_ready()
    assert faults and "on active controller" in faults[0][0]
    assert raft.end == end  # never handed to Raft
    assert fut.exception().error == Errors.UNKNOWN_SERVER_ERROR


def test_excessively_large_operations_are_refused(env):
    ctl, raft, queue, *_ = env
    activate(ctl, raft, queue)
    recs = [ApiMessageAndVersion(m.NoOpRecord(), 0)] * 10_001
    fut = ctl.append_write("big", lambda: ControllerResult(recs, None, False))
    queue.run_ready()
    exc = fut.exception()
    assert isinstance(exc, ApiError) and exc.error == Errors.POLICY_VIOLATION
    assert exc.message == "Unable to perform excessively large batch operation."


def test_non_atomic_results_are_split_into_batches_of_at_most_10000(env):
    ctl, raft, queue, *_ = env
    activate(ctl, raft, queue)
    before = len(raft.batches)
    recs = [ApiMessageAndVersion(m.NoOpRecord(), 0)] * 10_000
    ctl.append_write("w", lambda: ControllerResult(recs, None, False))
    queue.run_ready()
    assert raft.batches[before:] == [(raft.batches[before][0], 10_000, False)]


def test_a_queued_event_times_out_with_request_timed_out(env):
    ctl, raft, queue, stubs, faults, now = env
    activate(ctl, raft, queue)
    fut = ctl.append_write("late", level_write("x", 1), deadline_ns=5 * 1_000_000)
    now[0] = 10
    queue.run_ready()
    assert fut.exception().error == Errors.REQUEST_TIMED_OUT
    assert stubs["features"].levels.get("x") is None


def test_a_dangling_transaction_is_aborted_at_activation(env):
    ctl, raft, queue, stubs, *_ = env
    # a predecessor wrote Begin + a record, committed, and crashed before End
    begin = ApiMessageAndVersion(m.BeginTransactionRecord(name="t"), 0).encode()
    inner = ApiMessageAndVersion(m.FeatureLevelRecord(name="metadata.version", feature_level=29), 0).encode()
    raft.leader = LeaderAndEpoch(2, 1)
    raft.listener.handle_commit((Batch(0, 1, (begin, inner)),))
    queue.run_ready()
    assert ctl.last_stable_offset == -1  # the open transaction is not stable
    raft.end = raft.delivered = 2
    raft.elect(1, 2)
    queue.run_ready()
    names = decoded_log(raft)
    # the stable state has no metadata.version: abort, then re-append the bootstrap records
    assert names[:2] == ["AbortTransactionRecord", "BeginTransactionRecord"]
    assert names[-1] == "EndTransactionRecord"
    raft.commit()
    queue.run_ready()
    assert stubs["features"].levels.get("metadata.version", epoch=ctl.last_stable_offset) == 29
    assert ctl.offset_control.transaction_start_offset == -1


def test_only_replay_mutates(env):
    ctl, raft, queue, stubs, *_ = env
    activate(ctl, raft, queue)
    seen = []

    def op():
        seen.append(stubs["features"].levels.get("z"))
        return ControllerResult([ApiMessageAndVersion(m.FeatureLevelRecord(name="z", feature_level=3), 0)], None)
    ctl.append_write("w", op)
    queue.run_ready()
    assert seen == [None] and stubs["features"].levels.get("z", epoch=LATEST_EPOCH) == 3


def test_a_standby_never_exposes_half_a_transaction(env):
    ctl, raft, queue, stubs, *_ = env
    raft.leader = LeaderAndEpoch(2, 1)
    enc = lambda msg: ApiMessageAndVersion(msg, 0).encode()  # noqa: E731
    raft.listener.handle_commit((Batch(0, 1, (enc(m.FeatureLevelRecord(name="a", feature_level=1)),)),))
    raft.listener.handle_commit((Batch(1, 1, (enc(m.BeginTransactionRecord(name="t")),
                                              enc(m.FeatureLevelRecord(name="b", feature_level=1)))),))
    queue.run_ready()
    # the transaction's first batch is committed but not stable: reads stop before it
    assert ctl.last_stable_offset == 0
    read = ctl.append_read("r", lambda e: (stubs["features"].levels.get("a", epoch=e),
                                           stubs["features"].levels.get("b", epoch=e)))
    queue.run_ready()
    assert read.result() == (1, None)
    raft.listener.handle_commit((Batch(3, 1, (enc(m.FeatureLevelRecord(name="c", feature_level=1)),
                                              enc(m.EndTransactionRecord()))),))
    queue.run_ready()
    assert ctl.last_stable_offset == 4
    read = ctl.append_read("r", lambda e: sorted(stubs["features"].levels.items(epoch=e)))
    queue.run_ready()
    assert read.result() == [("a", 1), ("b", 1), ("c", 1)]


def test_an_aborted_transaction_is_reverted_on_a_standby(env):
    ctl, raft, queue, stubs, *_ = env
    raft.leader = LeaderAndEpoch(2, 1)
    enc = lambda msg: ApiMessageAndVersion(msg, 0).encode()  # noqa: E731
    raft.listener.handle_commit((Batch(0, 1, (enc(m.FeatureLevelRecord(name="a", feature_level=1)),
                                              enc(m.BeginTransactionRecord(name="t")),
                                              enc(m.FeatureLevelRecord(name="b", feature_level=1)))),))
    raft.listener.handle_commit((Batch(3, 1, (enc(m.AbortTransactionRecord(reason="x")),)),))
    queue.run_ready()
    assert stubs["features"].levels.get("b") is None  # the transaction's records are gone
    assert stubs["features"].levels.get("a") == 1
    assert ctl.last_stable_offset == 3 and ctl.offset_control.transaction_start_offset == -1


class FakeWriter:
    def __init__(self, sid):
        self.snapshot_id = sid
        self.batches = []
        self.frozen = self.closed = False

    def append(self, records):
        self.batches.append(list(records))

    def freeze(self):
        self.frozen = True

    def close(self):
        self.closed = True


def test_snapshots_are_written_from_a_frozen_state_in_slices(env):
    ctl, raft, queue, stubs, *_ = env
    writers = []
    raft.create_snapshot = lambda sid: writers.append(FakeWriter(sid)) or writers[-1]
    activate(ctl, raft, queue)
    for i in range(25):
        ctl.append_write("w", level_write(f"f{i:02}", 1))
    queue.run_ready()
    raft.commit()
    queue.run_ready()
    gen = ctl.snapshot_generator
    assert gen is None  # the test installer has none: build one with tiny slices
    from kraft_node.metadata.controller.snapshot_generator import SnapshotGenerator
    gen = ctl.snapshot_generator = SnapshotGenerator(ctl, max_bytes_between_snapshots=1, records_per_slice=10)
    lso = ctl.last_stable_offset
    assert gen.maybe_begin()
    # a write lands between slices: the snapshot still holds the state at the frozen offset
    ctl.append_write("late", level_write("zz-late", 1))
    queue.run_ready()
    raft.commit()
    queue.run_ready()
    w = writers[0]  # (a second one follows: 1 byte is already "enough" for this generator)
    assert w.frozen and w.snapshot_id.offset == lso + 1
    names = [decode_metadata_record(v)[2].name for b in w.batches for v in b]
    assert "zz-late" not in names and len(names) == 26  # metadata.version + 25
    assert [len(b) for b in w.batches] == [10, 10, 6]
    assert gen.history[0][1:] == (26, 3)
    assert not ctl.offset_control._retained  # released


def test_kraft_version_is_the_raft_layers_and_is_not_changed_at_run_time():
    """kraft.version lives in the Raft log's control records: the controller reports the Raft
    layer's level, and an UpdateFeatures that would change it is refused with a message
    saying why (kraft's Raft layer does not upgrade it at run time)."""
    from kraft_node.metadata.controller.features import UpgradeType
    now = [0]
    raft = ScriptedRaft()
    raft.kraft_version = 0
    queue = EventQueue(clock_ns=lambda: now[0] * 1_000_000)
    ctl = QuorumController(node_id=1, cluster_id="c", raft=raft, queue=queue, clock_ms=lambda: now[0],
                           bootstrap=bootstrap())
    activate(ctl, raft, queue)
    assert ctl._kraft_version() == 0
    fut = ctl.update_features({"kraft.version": 1}, {"kraft.version": UpgradeType.UPGRADE}, False)
    queue.run_ready()
    raft.commit()
    queue.run_ready()
    err = fut.result()["kraft.version"]
    assert isinstance(err, ApiError) and err.error == Errors.INVALID_UPDATE_VERSION
    assert "kraft.version cannot be changed from 0 to 1 at run time" in err.message


def test_the_stable_offset_stops_at_an_append_end_when_raft_splits_an_append(env):
    """A committed batch may end inside one of the controller's appends (Raft splits a
    non-atomic append at its byte limit): the stable offset then stops at the last append end
    at or below it, where the registry has a snapshot, so reads and a renounce still work."""
    ctl, raft, queue, stubs, *_ = env
    activate(ctl, raft, queue)
    lso = ctl.last_stable_offset
    ctl.append_write("w", lambda: ControllerResult(
        [ApiMessageAndVersion(m.FeatureLevelRecord(name=f"s{i}", feature_level=1), 0) for i in range(4)], "ok"))
    queue.run_ready()
    base = raft.batches[-1][0]
    # Raft committed only the first two records of the four (its first batch of the split)
    recs = tuple(v for off, _e, v in raft.log if base <= off < base + 2)
    raft.listener.handle_commit((Batch(base, 1, recs),))
    queue.run_ready()
    assert ctl.last_stable_offset == lso  # no append ended at base + 1
    read = ctl.append_read("r", lambda e: stubs["features"].levels.get("s0", epoch=e))
    queue.run_ready()
    assert read.result() is None
    raft.listener.handle_commit((Batch(base + 2, 1, tuple(v for off, _e, v in raft.log if off >= base + 2)),))
    queue.run_ready()
    assert ctl.last_stable_offset == base + 3


def _controller(node_id: int, raft: ScriptedRaft, queue: EventQueue) -> QuorumController:
    from kraft_node.metadata.controller.sim import default_bootstrap
    return QuorumController(node_id=node_id, cluster_id="c", raft=raft, queue=queue, clock_ms=lambda: 0,
                            bootstrap=default_bootstrap())


def _settle(raft: ScriptedRaft, queue: EventQueue) -> None:
    queue.run_ready()
    raft.commit()
    queue.run_ready()


def test_a_big_creation_is_replayed_from_its_committed_bytes_on_the_leader_as_on_a_standby():
    """A write of >= MIN_COLUMNAR_RECORDS PartitionRecords is replayed on the active controller
    from the values it hands to Raft, through the columnar path standbys take; a standby fed the
    same batches reaches the same state at the same offset, which holds every partition."""
    from support.controller import broker_heartbeat, broker_registration

    from kraft_node.metadata.controller import replication_snapshot
    from kraft_node.metadata.controller.sim import state_digest
    from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
    raft, queue = ScriptedRaft(), EventQueue(clock_ns=lambda: 0)
    leader = _controller(1, raft, queue)
    activate(leader, raft, queue)
    reg = leader.register_broker(broker_registration(0, "c"))
    _settle(raft, queue)
    epoch = reg.result().epoch
    leader.track_broker_heartbeat(0, epoch)
    leader.process_broker_heartbeat(broker_heartbeat(0, epoch, epoch))
    _settle(raft, queue)
    calls = []
    real = replication_snapshot.replay_partition_columns
    replication_snapshot.replay_partition_columns = lambda *a, **k: (calls.append(a[2:4]), real(*a, **k))[1]
    try:
        T = CreateTopicsRequest
        n = 2 * replication_snapshot.MIN_COLUMNAR_RECORDS
        created = leader.create_topics(T(topics=[T.CreatableTopic(name="big", num_partitions=n, replication_factor=1)]))
        _settle(raft, queue)
        assert created.result().topics[0].error_code == 0
        assert calls, "the leader did not take the columnar path"
        # a standby fed the same log, batch by batch
        sraft, squeue = ScriptedRaft(), EventQueue(clock_ns=lambda: 0)
        standby = _controller(2, sraft, squeue)
        sraft.leader = LeaderAndEpoch(1, 1)
        for base, count, _atomic in raft.batches:
            values = tuple(v for off, _e, v in raft.log if base <= off < base + count)
            sraft.listener.handle_commit((Batch(base, 1, values),))
        squeue.run_ready()
    finally:
        replication_snapshot.replay_partition_columns = real
    at = leader.committed_epoch()
    assert standby.committed_epoch() == at
    assert state_digest(leader, at) == state_digest(standby, at)
    rc = leader.replication_control
    parts = rc.partitions(rc.topic_id("big", epoch=at), epoch=at)
    assert len(parts) == n and all(p.replicas == (0,) and p.isr == (0,) and p.leader == 0 for p in parts.values())
