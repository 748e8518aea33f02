"""AlterPartition from partition leaders (kraft_node/broker/alter_partition_manager.py) and the
leader's ISR rules (kraft_node/broker/isr_policy.py).

Kafka scenarios re-stated:

* AlterPartitionManagerTest (DefaultAlterPartitionManager): testBasic (one request, broker id and
  epoch, topic ids, ISR with broker epochs at v3), testOverwriteWithinBatch (a second change for a
  partition with one queued fails with OperationNotAttempted "Failed to enqueue ISR change state
  ... for partition ..."), testSingleBatch (the first submit sends a batch of one; nine more wait
  for its answer; the answer omits partition 0, which stays queued; the next request carries all
  ten), testTopLevelError / testRetryOnErrorResponse (STALE_BROKER_EPOCH,
  CLUSTER_AUTHORIZATION_FAILED, UNKNOWN_SERVER_ERROR and an unanswered request are retried, the
  futures stay pending; the broker epoch is read again for the retry), testPartitionError (each
  per-partition error completes only that future, with that error), invalid leader recovery state
  -> UNKNOWN_SERVER_ERROR; NOT_CONTROLLER through the real ControllerChannel over TCP.
* Against a real controller node: a batch of two shrinks committed (partition epoch + 1), then
  INVALID_UPDATE_VERSION (stale partition epoch), FENCED_LEADER_EPOCH (stale leader epoch) and
  INELIGIBLE_REPLICA (a follower named with a wrong broker epoch).
* PartitionTest / ReplicaTest rules: caught-up time, stale fetch epochs, out-of-sync replicas
  (stuck and slow followers, none while a change is in flight), the expansion condition, the
  maximal ISR for the high watermark, min.insync.replicas, the answers to ignore, and
  Partition.handleAlterPartitionError's actions.
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from support.controller import broker_heartbeat, broker_registration, until_controller_active
from support.raft import cluster_properties

from kraft_node.broker.alter_partition_manager import (
    AlterPartitionError,
    AlterPartitionItem,
    AlterPartitionManager,
    OperationNotAttemptedError,
    partition_alter_callback,
)
from kraft_node.broker.controller_channel import (
    ControllerChannel,
    ControllerUnavailableError,
    UnsupportedControllerVersionError,
)
from kraft_node.broker.isr_policy import (
    AlterPartitionErrorAction,
    CommittedPartitionState,
    LeaderAndIsr,
    ReplicaState,
    StaleFetchStateError,
    alter_partition_error_action,
    committed_state_after,
    is_caught_up,
    is_follower_in_sync,
    is_replica_isr_eligible,
    leader_high_watermark,
    out_of_sync_replicas,
    prepare_isr_expand,
    prepare_isr_shrink,
    reset_replica_state,
    update_fetch_state,
)
from kraft_node.metadata.image.topics import TopicIdPartition, TopicPartition
from kraft_node.network import KafkaConnection
from kraft_node.network.server import KafkaServer
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode
from kraft_storage.messages.runtime import Uuid

AP = AlterPartitionResponse


def run(coro_fn: Callable[[], Any], timeout: float = 30.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro_fn(), timeout)
    asyncio.run(main())


class FakeChannel:
    """A controller channel whose answers the test gives, one request at a time."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.pending: asyncio.Queue[asyncio.Future[Any]] = asyncio.Queue()

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any:
        self.requests.append(body)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.pending.put(fut)
        return await fut

    async def answer(self, response: Any = None, *, exc: BaseException | None = None) -> Any:
        fut = await asyncio.wait_for(self.pending.get(), 5)
        req = self.requests[-1]
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(response if not callable(response) else response(req))
        await asyncio.sleep(0)
        return req

    def idle(self) -> bool:
        return self.pending.empty()


def lai(isr: list[int], leader: int = 1, epoch: int = 5, pepoch: int = 10) -> LeaderAndIsr:
    return LeaderAndIsr(leader, epoch, tuple((b, 100 + b) for b in isr), 0, pepoch)


def tip(topic_id: Uuid, name: str = "foo", p: int = 0) -> TopicIdPartition:
    return TopicIdPartition(topic_id, TopicPartition(name, p))


def ok_for_all(req: Any, skip: set[int] = frozenset(), errors: dict[int, int] | None = None) -> Any:
    """Answer every partition of ``req`` as committed (partition epoch + 1), except ``skip``."""
    errors = errors or {}
    topics = []
    for t in req.topics:
        parts = []
        for p in t.partitions:
            if p.partition_index in skip:
                continue
            code = errors.get(p.partition_index, 0)
            parts.append(AP.PartitionData(partition_index=p.partition_index, error_code=code, leader_id=1,
                                          leader_epoch=p.leader_epoch,
                                          isr=[b.broker_id for b in p.new_isr_with_epochs],
                                          partition_epoch=p.partition_epoch + 1))
        topics.append(AP.TopicData(topic_id=t.topic_id, partitions=parts))
    return AP(topics=topics)


# ------------------------------------------------------------------------------ the manager
def test_basic_request_shape_and_answer():
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 77)
        tid = Uuid.random()
        fut = mgr.submit(tip(tid), lai([1, 2, 3]))
        req = await ch.answer(ok_for_all)
        assert (req.broker_id, req.broker_epoch) == (1, 77)
        (t,) = req.topics
        (p,) = t.partitions
        assert t.topic_id == tid
        assert (p.partition_index, p.leader_epoch, p.partition_epoch, p.leader_recovery_state) == (0, 5, 10, 0)
        assert [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs] == [(1, 101), (2, 102), (3, 103)]
        assert req.topics[0].partitions[0].new_isr == []                # v3: only the ISR with epochs
        item = AlterPartitionItem(tip(tid), lai([1, 2, 3]), asyncio.get_running_loop().create_future())
        v2 = mgr.build_request([item], 77, 2)
        bp = AlterPartitionRequest.read(v2.write(2), 2).topics[0].partitions[0]
        assert list(bp.new_isr) == [1, 2, 3] and bp.new_isr_with_epochs == []
        bp = AlterPartitionRequest.read(req.write(3), 3).topics[0].partitions[0]
        assert [(b.broker_id, b.broker_epoch) for b in bp.new_isr_with_epochs] == [(1, 101), (2, 102), (3, 103)]
        result = await asyncio.wait_for(fut, 1)
        assert result == LeaderAndIsr(1, 5, ((1, -1), (2, -1), (3, -1)), 0, 11)
        assert result.isr == frozenset({1, 2, 3})
        assert not mgr.unsent and not mgr.inflight
        await mgr.close()
    run(go)


def test_overwrite_within_batch_is_refused():
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 1)
        tid = Uuid.random()
        first = mgr.submit(tip(tid), lai([1, 2]))
        second = mgr.submit(tip(tid), lai([1]))
        with pytest.raises(OperationNotAttemptedError, match=r"Failed to enqueue ISR change state .* for partition "
                                                            r"foo-0$"):
            await second
        assert second.exception().error == Errors.OPERATION_NOT_ATTEMPTED
        await ch.answer(ok_for_all)
        await first
        third = mgr.submit(tip(tid), lai([1], pepoch=11))     # allowed once the first is answered
        await ch.answer(ok_for_all)
        assert (await third).partition_epoch == 12
        await mgr.close()
    run(go)


def test_single_batch_and_partitions_missing_from_the_answer(caplog):
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 1)
        tid = Uuid.random()
        futs = [mgr.submit(tip(tid, p=0), lai([1, 2]))]
        await asyncio.sleep(0)
        futs += [mgr.submit(tip(tid, p=i), lai([1, 2])) for i in range(1, 10)]
        with caplog.at_level(logging.WARNING, logger="kraft_node.broker.alter_partition_manager"):
            first = await ch.answer(lambda req: ok_for_all(req, skip={0}))        # a batch of one, unanswered
        assert [p.partition_index for p in first.topics[0].partitions] == [0]
        assert "was sent but not included in the response" in caplog.text
        assert not futs[0].done()
        second = await ch.answer(ok_for_all)
        assert sorted(p.partition_index for p in second.topics[0].partitions) == list(range(10))
        assert [f.result().partition_epoch for f in futs] == [11] * 10
        assert len(ch.requests) == 2 and ch.idle()
        await mgr.close()
    run(go)


@pytest.mark.parametrize("error", [Errors.STALE_BROKER_EPOCH, Errors.CLUSTER_AUTHORIZATION_FAILED,
                                   Errors.UNKNOWN_SERVER_ERROR, "unavailable"])
def test_top_level_errors_retry_the_whole_batch(error, caplog):
    async def go() -> None:
        ch = FakeChannel()
        epochs = iter([7, 8, 9])
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: next(epochs), retry_backoff_ms=20)
        tid = Uuid.random()
        fut = mgr.submit(tip(tid), lai([1, 2]))
        loop = asyncio.get_running_loop()
        with caplog.at_level(logging.INFO, logger="kraft_node.broker.alter_partition_manager"):
            if error == "unavailable":
                await ch.answer(exc=ControllerUnavailableError("AlterPartition got no answer"))
            else:
                await ch.answer(AP(error_code=int(error)))
            t0 = loop.time()
            assert not fut.done() and mgr.unsent
            retried = await ch.answer(ok_for_all)
        assert loop.time() - t0 >= 0.015                        # after the backoff
        assert retried.broker_epoch == 8                        # read again
        assert (await fut).partition_epoch == 11
        expected = {Errors.STALE_BROKER_EPOCH: "Broker had a stale broker epoch (7), retrying.",
                    Errors.CLUSTER_AUTHORIZATION_FAILED: "Broker is not authorized to send AlterPartition to "
                                                         "controller",
                    Errors.UNKNOWN_SERVER_ERROR: "Controller returned an unexpected top-level error when handling "
                                                 "AlterPartition request: UNKNOWN_SERVER_ERROR",
                    "unavailable": "not answered: AlterPartition got no answer; retrying"}[error]
        assert expected in caplog.text
        assert mgr.top_level_errors == 1
        await mgr.close()
    run(go)


def test_partition_errors_complete_only_their_future():
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 1)
        tid = Uuid.random()
        errors = {1: Errors.INVALID_UPDATE_VERSION, 2: Errors.FENCED_LEADER_EPOCH, 3: Errors.UNKNOWN_TOPIC_OR_PARTITION,
                  4: Errors.INELIGIBLE_REPLICA, 5: Errors.NEW_LEADER_ELECTED, 6: Errors.OPERATION_NOT_ATTEMPTED,
                  7: Errors.INVALID_REQUEST, 8: Errors.UNKNOWN_TOPIC_ID}
        futs = {i: mgr.submit(tip(tid, p=i), lai([1])) for i in range(9)}
        await ch.answer(lambda req: ok_for_all(req, skip=set(range(1, 9))))    # first batch: p0 only
        await ch.answer(lambda req: ok_for_all(req, errors={k: int(v) for k, v in errors.items()}))
        assert futs[0].result().partition_epoch == 11
        for i, e in errors.items():
            exc = futs[i].exception()
            assert isinstance(exc, AlterPartitionError) and exc.error == e
            assert f"AlterPartition for foo-{i} failed: {e.name}" == str(exc)
        await mgr.close()
    run(go)


def test_invalid_leader_recovery_state_is_unknown_server_error():
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 1)
        tid = Uuid.random()
        fut = mgr.submit(tip(tid), lai([1]))

        def bad(req: Any) -> Any:
            resp = ok_for_all(req)
            resp.topics[0].partitions[0].leader_recovery_state = 7
            return resp
        await ch.answer(bad)
        assert fut.exception().error == Errors.UNKNOWN_SERVER_ERROR
        await mgr.close()
    run(go)


def test_close_fails_what_is_queued_and_no_topic_id_is_refused():
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 1)
        no_id = mgr.submit(TopicIdPartition(Uuid(bytes(16)), TopicPartition("old", 0)), lai([1]))
        assert no_id.exception().error == Errors.INVALID_REQUEST
        assert "has no topic id" in str(no_id.exception())
        fut = mgr.submit(tip(Uuid.random()), lai([1]))
        await asyncio.sleep(0)
        await mgr.close()
        assert isinstance(fut.exception(), OperationNotAttemptedError)
        late = mgr.submit(tip(Uuid.random()), lai([1]))
        assert "the manager is closed" in str(late.exception())
    run(go)


def test_not_controller_is_retried_by_the_channel_over_tcp():
    """A scripted controller over TCP: the first answer is NOT_CONTROLLER at the top level; the
    channel reconnects and resends; the manager sees only the good answer."""
    async def go() -> None:
        seen: list[Any] = []

        def handler(ctx: Any, req: Any) -> Any:
            seen.append((ctx.api_version, req))
            if len(seen) == 1:
                return AP(error_code=int(Errors.NOT_CONTROLLER))
            return ok_for_all(req)
        server = KafkaServer("127.0.0.1", 0, {int(ApiKeys.ALTER_PARTITION): handler}, listener="CONTROLLER",
                             listener_type="controller")
        port = await server.start()
        channel = ControllerChannel(lambda: (9, "127.0.0.1", port), client_id="broker-1-alter-partition",
                                    retry_backoff_ms=10, request_timeout_ms=2000)
        mgr = AlterPartitionManager(channel, broker_id=1, broker_epoch=lambda: 3)
        try:
            fut = mgr.submit(tip(Uuid.random()), lai([1, 2]))
            assert (await asyncio.wait_for(fut, 5)).partition_epoch == 11
            assert [v for v, _r in seen] == [3, 3] and channel.not_controller_responses == 1
        finally:
            await mgr.close()
            await channel.close()
            await server.close()
    run(go)


def test_against_a_real_controller(tmp_path):
    (path,) = cluster_properties(str(tmp_path), 1)
    cfg = NodeConfig.from_file(path)
    CT = CreateTopicsRequest

    async def go() -> None:
        node = KraftNode.from_config(cfg, controller=True)
        await node.start()
        channel = None
        mgr = None
        try:
            await until_controller_active(node)
            ctl = node.controller.controller
            conn = await KafkaConnection.open("127.0.0.1", node.port, timeout=5)
            epochs: dict[int, int] = {}
            for b in (0, 1, 2):
                reg = await conn.request(broker_registration(b, ctl.cluster_id, port=9092 + b), 4, timeout=5)
                epochs[b] = reg.broker_epoch
                for _ in range(500):
                    hb = await conn.request(broker_heartbeat(b, reg.broker_epoch, reg.broker_epoch), 1, timeout=5)
                    if not hb.is_fenced:
                        break
                    await asyncio.sleep(0.02)
            r = await conn.request(CT(topics=[CT.CreatableTopic(name="foo", num_partitions=2, replication_factor=3)],
                                      timeout_ms=5000), 7, timeout=5)
            assert r.topics[0].error_code == 0
            await conn.close()
            rc = ctl.replication_control
            tid = rc.topic_id("foo", epoch=ctl.committed_epoch())
            parts = rc.partitions(tid, epoch=ctl.committed_epoch())
            leader = parts[0].leader
            channel = ControllerChannel(lambda: (cfg.node_id, "127.0.0.1", node.port),
                                        client_id=f"broker-{leader}-alter-partition", request_timeout_ms=5000)
            mgr = AlterPartitionManager(channel, broker_id=leader, broker_epoch=lambda: epochs[leader])

            def shrink(p: int, pepoch_delta: int = 0, epoch_delta: int = 0,
                       isr: list[tuple[int, int]] | None = None) -> LeaderAndIsr:
                reg = rc.partition(tid, p, epoch=ctl.committed_epoch())
                assert reg.leader == leader or p != 0
                kept = isr or [(b, epochs[b]) for b in reg.isr if b == reg.leader or b == reg.replicas[-1]]
                return LeaderAndIsr(reg.leader, reg.leader_epoch + epoch_delta, tuple(kept), 0,
                                    reg.partition_epoch + pepoch_delta)

            # partition 1 may be led by another broker: only partitions this broker leads are sent
            mine = [p for p, reg in parts.items() if reg.leader == leader]
            before = {p: rc.partition(tid, p, epoch=ctl.committed_epoch()) for p in mine}
            futs = {p: mgr.submit(tip(tid, p=p), shrink(p)) for p in mine}
            results = {p: await asyncio.wait_for(f, 10) for p, f in futs.items()}
            for p, res in results.items():
                after = rc.partition(tid, p, epoch=ctl.committed_epoch())
                assert sorted(after.isr) == sorted(res.isr) and len(after.isr) == 2
                assert res.partition_epoch == after.partition_epoch == before[p].partition_epoch + 1
                state = committed_state_after(res, leader_epoch=before[p].leader_epoch,
                                              partition_epoch=before[p].partition_epoch)
                assert state == CommittedPartitionState(frozenset(after.isr), 0)

            stale = mgr.submit(tip(tid, p=0), shrink(0, pepoch_delta=-1))
            with pytest.raises(AlterPartitionError) as info:
                await asyncio.wait_for(stale, 10)
            assert info.value.error == Errors.INVALID_UPDATE_VERSION

            fenced = mgr.submit(tip(tid, p=0), shrink(0, epoch_delta=-1))
            with pytest.raises(AlterPartitionError) as info:
                await asyncio.wait_for(fenced, 10)
            assert info.value.error == Errors.FENCED_LEADER_EPOCH

            reg = rc.partition(tid, 0, epoch=ctl.committed_epoch())
            outsider = next(b for b in reg.replicas if b not in reg.isr)
            wrong = [(b, epochs[b]) for b in reg.isr] + [(outsider, epochs[outsider] + 1000)]
            ineligible = mgr.submit(tip(tid, p=0), shrink(0, isr=wrong))
            with pytest.raises(AlterPartitionError) as info:
                await asyncio.wait_for(ineligible, 10)
            assert info.value.error == Errors.INELIGIBLE_REPLICA
            assert alter_partition_error_action(info.value.error)[0] is AlterPartitionErrorAction.RESET_TO_COMMITTED
        finally:
            if mgr is not None:
                await mgr.close()
            if channel is not None:
                await channel.close()
            await node.close()
    run(go, timeout=60)


# ------------------------------------------------------------------------------ the ISR rules
def test_fetch_state_caught_up_times():
    s = ReplicaState()
    # the fetch reaches the leader's end: caught up at the fetch time
    s = update_fetch_state(s, fetch_offset=10, log_start_offset=0, fetch_time_ms=1000, leader_end_offset=10,
                           broker_epoch=5, cached_broker_epoch=5)
    assert (s.log_end_offset, s.last_caught_up_time_ms, s.broker_epoch) == (10, 1000, 5)
    # behind the leader's end now (15), but at what it was at the previous fetch (10): caught up as of then
    s = update_fetch_state(s, fetch_offset=12, log_start_offset=0, fetch_time_ms=2000, leader_end_offset=15,
                           broker_epoch=5, cached_broker_epoch=5)
    assert s.last_caught_up_time_ms == 1000 and s.last_fetch_leader_log_end_offset == 15
    s2 = update_fetch_state(s, fetch_offset=15, log_start_offset=0, fetch_time_ms=3000, leader_end_offset=20,
                            broker_epoch=5, cached_broker_epoch=5)
    assert s2.last_caught_up_time_ms == 2000
    s3 = update_fetch_state(s, fetch_offset=13, log_start_offset=0, fetch_time_ms=3000, leader_end_offset=20,
                            broker_epoch=5, cached_broker_epoch=5)
    assert s3.last_caught_up_time_ms == 1000
    with pytest.raises(StaleFetchStateError, match=r"^Received stale fetch state update. broker epoch=4 vs "
                                                   r"expected=5$"):
        update_fetch_state(s, fetch_offset=1, log_start_offset=0, fetch_time_ms=1, leader_end_offset=1,
                           broker_epoch=4, cached_broker_epoch=5)
    # -1 skips the check
    update_fetch_state(s, fetch_offset=1, log_start_offset=0, fetch_time_ms=1, leader_end_offset=1,
                       broker_epoch=-1, cached_broker_epoch=5)
    assert is_caught_up(s3, 13, 10**9, 1) and not is_caught_up(s3, 20, 1000 + 30_001, 30_000)
    assert is_caught_up(s3, 20, 1000 + 30_000, 30_000)
    r = reset_replica_state(s3, now_ms=50, leader_end_offset=20, is_new_leader=True, is_follower_in_sync=True)
    assert (r.log_end_offset, r.last_caught_up_time_ms, r.broker_epoch) == (-1, 50, None)
    r = reset_replica_state(s3, now_ms=50, leader_end_offset=20, is_new_leader=False, is_follower_in_sync=False)
    assert (r.log_end_offset, r.last_caught_up_time_ms, r.last_fetch_time_ms) == (13, 0, 0)


def test_out_of_sync_replicas_stuck_and_slow():
    committed = CommittedPartitionState(frozenset({1, 2, 3}))
    lag = 10_000
    replicas = {2: ReplicaState(log_end_offset=100, last_caught_up_time_ms=0),        # stuck since 0
                3: ReplicaState(log_end_offset=90, last_caught_up_time_ms=5_000)}     # slow but recent
    assert out_of_sync_replicas(committed, 1, replicas, 100, 14_000, lag) == frozenset()   # 2 at the end, 3 recent
    assert out_of_sync_replicas(committed, 1, replicas, 100, 20_000, lag) == frozenset({3})  # 3: 15 s ago
    assert out_of_sync_replicas(committed, 1, replicas, 110, 20_000, lag) == frozenset({2, 3})
    assert out_of_sync_replicas(committed, 1, replicas, 110, 14_000, lag) == frozenset({2})
    assert out_of_sync_replicas(committed, 1, {}, 110, 0, lag) == frozenset({2, 3})       # no state: out
    pending = prepare_isr_shrink(committed, {2}, local_broker_id=1, local_broker_epoch=7, leader_epoch=3,
                                 partition_epoch=4, replicas=replicas)
    assert out_of_sync_replicas(pending, 1, replicas, 110, 20_000, lag) == frozenset()    # in flight: none


def test_expansion_condition_and_eligibility():
    assert is_follower_in_sync(100, 100, 50)
    assert not is_follower_in_sync(99, 100, 50)              # below the high watermark
    assert not is_follower_in_sync(100, 90, 120)             # not into the leader's epoch yet
    assert not is_follower_in_sync(100, 90, None)
    rs = ReplicaState(broker_epoch=9)
    assert is_replica_isr_eligible(rs, cached_broker_epoch=9, fenced=False, in_controlled_shutdown=False)
    assert not is_replica_isr_eligible(rs, cached_broker_epoch=10, fenced=False, in_controlled_shutdown=False)
    assert not is_replica_isr_eligible(rs, cached_broker_epoch=9, fenced=True, in_controlled_shutdown=False)
    assert not is_replica_isr_eligible(rs, cached_broker_epoch=9, fenced=False, in_controlled_shutdown=True)
    assert not is_replica_isr_eligible(None, cached_broker_epoch=9, fenced=False, in_controlled_shutdown=False)
    assert is_replica_isr_eligible(ReplicaState(broker_epoch=-1), cached_broker_epoch=9, fenced=False,
                                   in_controlled_shutdown=False)


def test_pending_states_and_the_maximal_isr_for_the_high_watermark():
    committed = CommittedPartitionState(frozenset({1, 2}))
    replicas = {2: ReplicaState(log_end_offset=80, broker_epoch=22, last_caught_up_time_ms=0),
                3: ReplicaState(log_end_offset=60, broker_epoch=33, last_caught_up_time_ms=0)}
    expand = prepare_isr_expand(committed, 3, local_broker_id=1, local_broker_epoch=11, leader_epoch=4,
                                partition_epoch=9, replicas=replicas)
    assert expand.isr == {1, 2} and expand.maximal_isr == {1, 2, 3} and expand.is_inflight
    assert expand.sent == LeaderAndIsr(1, 4, ((1, 11), (2, 22), (3, 33)), 0, 9)
    shrink = prepare_isr_shrink(committed, {2}, local_broker_id=1, local_broker_epoch=11, leader_epoch=4,
                                partition_epoch=9, replicas=replicas)
    assert shrink.isr == {1, 2} and shrink.maximal_isr == {1, 2}          # not shrunk before the commit
    assert shrink.sent.isr == {1}

    def never(_b: int) -> bool:
        return False
    kw: dict[str, Any] = dict(leader_end_offset=100, replicas=replicas, now_ms=10**6, max_lag_ms=1000,
                              eligible=never)
    assert leader_high_watermark(state=committed, **kw) == 80
    assert leader_high_watermark(state=expand, **kw) == 60                # the joining replica counts at once
    assert leader_high_watermark(state=shrink, **kw) == 80                # the leaving one still counts
    assert leader_high_watermark(state=CommittedPartitionState(frozenset({1})), **kw) == 100
    assert leader_high_watermark(state=committed, min_insync_replicas=3, **kw) is None     # under min ISR
    # a caught-up eligible replica outside the ISR holds the high watermark back (it is about to join)
    caught = dict(kw, now_ms=500, eligible=lambda b: b == 3)
    assert leader_high_watermark(state=committed, **caught) == 60


def test_answers_to_ignore_and_error_actions():
    res = LeaderAndIsr(1, 4, ((1, -1),), 0, 10)
    assert committed_state_after(res, leader_epoch=4, partition_epoch=9) == CommittedPartitionState(frozenset({1}))
    assert committed_state_after(res, leader_epoch=4, partition_epoch=10) is not None     # same: no-op commit
    assert committed_state_after(res, leader_epoch=5, partition_epoch=9) is None          # stale leader epoch
    assert committed_state_after(res, leader_epoch=4, partition_epoch=11) is None         # newer metadata
    A = AlterPartitionErrorAction
    expected = {Errors.OPERATION_NOT_ATTEMPTED: A.RESET_TO_COMMITTED, Errors.INELIGIBLE_REPLICA: A.RESET_TO_COMMITTED,
                Errors.UNKNOWN_TOPIC_OR_PARTITION: A.AWAIT_METADATA, Errors.UNKNOWN_TOPIC_ID: A.AWAIT_METADATA,
                Errors.FENCED_LEADER_EPOCH: A.AWAIT_METADATA, Errors.INVALID_UPDATE_VERSION: A.AWAIT_METADATA,
                Errors.INVALID_REQUEST: A.AWAIT_METADATA, Errors.NEW_LEADER_ELECTED: A.AWAIT_METADATA,
                Errors.NETWORK_EXCEPTION: A.RETRY, Errors.UNKNOWN_SERVER_ERROR: A.RETRY}
    for error, action in expected.items():
        assert alter_partition_error_action(error)[0] is action, error
    assert "the partition epoch is invalid" in alter_partition_error_action(Errors.INVALID_UPDATE_VERSION)[1]
    assert alter_partition_error_action(Errors.NETWORK_EXCEPTION)[1] == "unexpected NETWORK_EXCEPTION. Retrying"


def test_a_controller_without_v3_gets_v2():
    async def go() -> None:
        class V2Only(FakeChannel):
            async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any:
                if version == 3:
                    raise UnsupportedControllerVersionError("controller 9 supports AlterPartition versions 2-2")
                self.versions.append(version)
                return await super().send(body, version, timeout_s=timeout_s)
        ch = V2Only()
        ch.versions = []  # type: ignore[attr-defined]
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 1)
        fut = mgr.submit(tip(Uuid.random()), lai([1, 2]))
        req = await ch.answer(lambda r: ok_for_all_v2(r))
        assert list(req.topics[0].partitions[0].new_isr) == [1, 2] and mgr.version == 2
        assert (await fut).isr == {1, 2}
        assert ch.versions == [2]  # type: ignore[attr-defined]
        await mgr.close()
    run(go)


def ok_for_all_v2(req: Any) -> Any:
    return AP(topics=[AP.TopicData(topic_id=t.topic_id, partitions=[
        AP.PartitionData(partition_index=p.partition_index, leader_id=1, leader_epoch=p.leader_epoch,
                         isr=list(p.new_isr), partition_epoch=p.partition_epoch + 1) for p in t.partitions])
        for t in req.topics])


# ------------------------------------------------------------------------------ the Partition side
class FakeLeaderPartition:
    """The members of H3's Partition that partition_alter_callback uses."""

    def __init__(self, topic_id: Uuid) -> None:
        self.topic_id = topic_id
        self.topic_partition = TopicPartition("foo", 0)
        self.local_broker_id = 1
        self.leader_epoch = 5
        self.partition_epoch = 10
        self.pending_isr: tuple[int, ...] | None = None
        self.cleared = 0

    def propose(self, alter: Callable[[Any, list[int]], None], isr: list[int]) -> None:
        self.pending_isr = tuple(isr)              # as Partition._propose_isr does
        alter(self, isr)

    def on_alter_partition_failed(self) -> None:
        self.cleared += 1
        self.pending_isr = None

    def replica_broker_epoch(self, broker_id: int) -> int:
        return {3: 42}.get(broker_id, -1)  # follower 3's fetches carried epoch 42; 2 has not fetched


@pytest.mark.parametrize("answer,cleared,pending", [
    ("commit", 0, True),                                    # the image will carry it
    ("noop", 1, False),                                     # same partition epoch: no image will come
    (Errors.INELIGIBLE_REPLICA, 1, False),                  # reset to the committed state
    (Errors.OPERATION_NOT_ATTEMPTED, 1, False),
    (Errors.FENCED_LEADER_EPOCH, 0, True),                  # await new metadata
    (Errors.INVALID_UPDATE_VERSION, 0, True),
])
def test_partition_callback_acts_on_the_answer(answer, cleared, pending):
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 77)
        part = FakeLeaderPartition(Uuid.random())
        alter = partition_alter_callback(mgr, broker_epoch=lambda: 77)
        part.propose(alter, [1, 2, 3])

        def respond(req: Any) -> Any:
            resp = ok_for_all(req, errors={} if isinstance(answer, str) else {0: int(answer)})
            if answer == "noop":
                resp.topics[0].partitions[0].partition_epoch = 10
            return resp
        req = await ch.answer(respond)
        p = req.topics[0].partitions[0]
        # ours, then each follower's as its fetches carried it (Kafka's addBrokerEpochToIsr)
        assert [(b.broker_id, b.broker_epoch) for b in p.new_isr_with_epochs] == [(1, 77), (2, -1), (3, 42)]
        assert (p.leader_epoch, p.partition_epoch) == (5, 10)
        await asyncio.sleep(0)
        assert part.cleared == cleared and (part.pending_isr is not None) == pending
        await mgr.close()
    run(go)


def test_partition_callback_retries_unexpected_errors_and_ignores_overtaken_answers():
    async def go() -> None:
        ch = FakeChannel()
        mgr = AlterPartitionManager(ch, broker_id=1, broker_epoch=lambda: 77)
        part = FakeLeaderPartition(Uuid.random())
        alter = partition_alter_callback(mgr, broker_epoch=lambda: 77)
        part.propose(alter, [1, 2])
        await ch.answer(lambda req: ok_for_all(req, errors={0: int(Errors.UNKNOWN_SERVER_ERROR)}))
        await asyncio.sleep(0)
        again = await ch.answer(ok_for_all)                    # the same change, sent again
        assert [b.broker_id for b in again.topics[0].partitions[0].new_isr_with_epochs] == [1, 2]
        assert part.pending_isr == (1, 2) and part.cleared == 0
        # new metadata replaced the state before the answer came: the answer is ignored
        part.pending_isr = None
        part.propose(alter, [1])
        part.partition_epoch = 12
        await ch.answer(lambda req: ok_for_all(req, errors={0: int(Errors.INELIGIBLE_REPLICA)}))
        await asyncio.sleep(0)
        assert part.pending_isr == (1,) and part.cleared == 0
        assert ch.idle()
        await mgr.close()
    run(go)
