"""AlterPartition answered over bounded write events (``AlterPartitionManager.submit``,
``AlterPartitionWrite``) on a real QuorumController and its managers, over a scripted Raft
whose commits the test releases, one event at a time:

* a request of more partitions than one event may take is written slice by slice, each slice
  its own Raft append, and answered once, after the last slice commits, in request order;
* a write queued while a request is half done runs between its slices, and a partition it
  changed is judged on its new state by the later slice (INVALID_UPDATE_VERSION), as a
  separate request would be;
* a failover after the first slice committed answers NOT_CONTROLLER for the partitions left;
  a failover before the first slice commits fails the whole request (as one event would);
* a sender whose registration changed between slices gets STALE_BROKER_EPOCH for the rest;
* what refuses the whole request (stale broker epoch, unsupported version) still does.
"""
from __future__ import annotations

from typing import Any

import pytest
from support.controller import ScriptedRaft, broker_heartbeat, broker_registration
from support.replication import creatable_topic, create_topics_request

from kraft_node.metadata.controller.alter_partition import AlterPartitionManager
from kraft_node.metadata.controller.bootstrap import BootstrapMetadata
from kraft_node.metadata.controller.errors import ApiError, NotControllerError
from kraft_node.metadata.controller.events import EventQueue
from kraft_node.metadata.controller.quorum_controller import QuorumController
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.versions import MetadataVersion, bootstrap_records
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

APR = AlterPartitionRequest
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
PARTITIONS = 30


class Env:
    def __init__(self) -> None:
        self.raft = ScriptedRaft(truncate_on_lost_leadership=True)
        self.queue = EventQueue(clock_ns=lambda: 0)  # a clock that stands still: slices bounded by cost alone
        records = [ApiMessageAndVersion(r, v) for r, v in bootstrap_records(MetadataVersion.LATEST_PRODUCTION)]
        self.ctl = QuorumController(node_id=1, cluster_id=CLUSTER_ID, raft=self.raft, queue=self.queue,
                                    clock_ms=lambda: 0, bootstrap=BootstrapMetadata.from_records(records, "test"))
        self.raft.elect(1, 1)
        self.settle()
        assert self.ctl.active
        self.epochs: dict[int, int] = {}
        self.topic_id = ZERO_UUID  # the fixture's topic
        self.manager: AlterPartitionManager = self.ctl.partition_ops.alter_partitions

    def settle(self) -> None:
        """Run and commit until nothing is left to do."""
        for _ in range(1000):
            ran = self.queue.run_ready()
            before = self.raft.delivered
            self.raft.commit()
            if not ran and self.raft.delivered == before:
                return
        raise AssertionError("the controller did not settle")

    def wait(self, future: Any) -> Any:
        self.settle()
        assert future.done()
        return future.result()

    def register(self, broker_id: int) -> None:
        self.epochs[broker_id] = self.wait(self.ctl.register_broker(broker_registration(broker_id, CLUSTER_ID))).epoch

    def unfence(self, broker_id: int) -> None:
        reply = self.wait(self.ctl.process_broker_heartbeat(
            broker_heartbeat(broker_id, self.epochs[broker_id], self.ctl.last_stable_offset)))
        assert not reply.is_fenced

    def partition(self, pid: int) -> Any:
        topic = self.ctl.replication_control.topic(self.topic_id)
        assert topic is not None
        return topic.parts.get(pid)

    def expand(self, pids: range | list[int], broker_epoch: int | None = None) -> Any:
        """Broker 0's AlterPartition adding broker 2 back to the ISR of ``pids``."""
        parts = []
        for pid in pids:
            p = self.partition(pid)
            parts.append(APR.PartitionData(
                partition_index=pid, leader_epoch=p.leader_epoch, partition_epoch=p.partition_epoch,
                leader_recovery_state=0,
                new_isr_with_epochs=[APR.BrokerState(broker_id=b, broker_epoch=self.epochs[b]) for b in (0, 1, 2)]))
        return APR(broker_id=0, broker_epoch=self.epochs[0] if broker_epoch is None else broker_epoch,
                   topics=[APR.TopicData(topic_id=self.topic_id, partitions=parts)])


@pytest.fixture
def env() -> Env:
    """Brokers 0-2; topic foo of 30 partitions on [0, 1, 2] created while 2 was fenced (ISR
    [0, 1], leader 0); then 2 unfenced.  Each write event takes at most 10 partitions."""
    e = Env()
    for b in (0, 1, 2):
        e.register(b)
    e.unfence(0)
    e.unfence(1)
    response = e.wait(e.ctl.create_topics(create_topics_request(
        creatable_topic("foo", assignments=[[0, 1, 2]] * PARTITIONS)), {"foo"}))
    assert response.topics[0].error_code == 0
    e.topic_id = response.topics[0].topic_id
    e.unfence(2)
    assert all(e.partition(p).isr == (0, 1) and e.partition(p).leader == 0 for p in range(PARTITIONS))
    e.manager.max_cost_per_event = 10
    return e


def answers(response: Any) -> dict[int, Errors]:
    (topic,) = response.topics
    return {p.partition_index: Errors(p.error_code) for p in topic.partitions}


def test_a_large_request_is_written_in_slices_and_answered_once_after_the_last_commits(env: Env) -> None:
    fut = env.manager.submit(env.ctl, env.expand(range(PARTITIONS)), 3)
    appends = len(env.raft.batches)
    assert env.queue.run_ready(max_events=1) == 1  # the first slice
    assert len(env.raft.batches) == appends + 1 and env.raft.batches[-1][1] == 10
    assert env.partition(9).isr == (0, 1, 2) and env.partition(10).isr == (0, 1)  # the rest waits
    env.raft.commit()
    env.queue.run_ready(max_events=1)  # the commit event: slice 1 is committed, the request is not answered
    assert not fut.done()
    env.settle()
    response = fut.result()
    assert [b[1] for b in env.raft.batches[appends:]] == [10, 10, 10]
    (topic,) = response.topics
    assert [p.partition_index for p in topic.partitions] == list(range(PARTITIONS))
    for p in topic.partitions:
        assert p.error_code == 0 and list(p.isr) == [0, 1, 2] and p.leader_id == 0
        now = env.partition(p.partition_index)
        assert (p.leader_epoch, p.partition_epoch) == (now.leader_epoch, now.partition_epoch)
        assert now.isr == (0, 1, 2)


def test_a_write_between_slices_runs_first_and_the_later_slice_judges_the_new_state(env: Env) -> None:
    big = env.manager.submit(env.ctl, env.expand(range(PARTITIONS)), 3)
    env.queue.run_ready(max_events=1)  # slice 1 (0-9) written; slice 2 queued
    other = env.manager.submit(env.ctl, env.expand([25]), 3)  # queued behind slice 2
    env.queue.run_ready(max_events=1)  # slice 2 (10-19); slice 3 queued behind the other request
    env.queue.run_ready(max_events=1)  # the other request: partition 25 now has ISR [0, 1, 2]
    assert env.partition(25).isr == (0, 1, 2) and env.partition(26).isr == (0, 1)
    env.settle()
    assert answers(other.result()) == {25: Errors.NONE}
    got = answers(big.result())
    assert got[25] is Errors.INVALID_UPDATE_VERSION  # its partition epoch moved on under the request
    assert all(code is Errors.NONE for pid, code in got.items() if pid != 25)
    assert list(got) == list(range(PARTITIONS))
    assert all(env.partition(p).isr == (0, 1, 2) for p in range(PARTITIONS))


def test_a_failover_after_the_first_slice_answers_not_controller_for_the_rest(env: Env) -> None:
    fut = env.manager.submit(env.ctl, env.expand(range(PARTITIONS)), 3)
    env.queue.run_ready(max_events=1)  # slice 1 written
    env.raft.commit()
    env.queue.run_ready(max_events=1)  # slice 1 committed
    env.raft.elect(2, 2)  # another controller leads: queued behind slice 2
    env.queue.run_ready(max_events=1)  # slice 2 written (not to be committed)
    env.settle()  # the leader change: renounce; slice 3 runs on an inactive controller
    assert not env.ctl.active
    got = answers(fut.result())
    assert list(got) == list(range(PARTITIONS))
    assert all(got[p] is Errors.NONE for p in range(10))
    assert all(got[p] is Errors.NOT_CONTROLLER for p in range(10, PARTITIONS))
    assert env.partition(9).isr == (0, 1, 2) and env.partition(10).isr == (0, 1)  # slice 2 reverted


def test_a_failover_before_the_first_slice_commits_fails_the_whole_request(env: Env) -> None:
    fut = env.manager.submit(env.ctl, env.expand(range(PARTITIONS)), 3)
    env.queue.run_ready(max_events=1)  # slice 1 written, not committed
    env.raft.elect(2, 2)
    env.settle()
    assert isinstance(fut.exception(), NotControllerError)
    assert env.partition(0).isr == (0, 1)


def test_a_sender_registered_again_between_slices_gets_stale_broker_epoch_for_the_rest(env: Env) -> None:
    fut = env.manager.submit(env.ctl, env.expand(range(PARTITIONS)), 3)
    env.queue.run_ready(max_events=1)  # slice 1 written; slice 2 queued
    again = env.ctl.register_broker(broker_registration(0, CLUSTER_ID))  # a new incarnation, behind slice 2
    env.queue.run_ready(max_events=1)  # slice 2; slice 3 queued behind the registration
    env.settle()
    assert again.result().epoch != env.epochs[0]
    got = answers(fut.result())
    assert all(got[p] is Errors.NONE for p in range(20))
    assert all(got[p] is Errors.STALE_BROKER_EPOCH for p in range(20, PARTITIONS))


def test_what_refuses_the_whole_request_still_does(env: Env) -> None:
    stale = env.manager.submit(env.ctl, env.expand(range(PARTITIONS), broker_epoch=env.epochs[0] - 1), 3)
    old = env.manager.submit(env.ctl, env.expand(range(PARTITIONS)), 1)
    env.settle()
    assert isinstance(stale.exception(), ApiError) and stale.exception().error is Errors.STALE_BROKER_EPOCH
    assert isinstance(old.exception(), ApiError) and old.exception().error is Errors.UNSUPPORTED_VERSION
    assert all(env.partition(p).isr == (0, 1) for p in range(PARTITIONS))


def test_unknown_topics_and_partitions_are_answered_in_request_order_across_slices(env: Env) -> None:
    request = env.expand(range(PARTITIONS))
    unknown = Uuid((0xEE << 64) | 5)
    request.topics.insert(0, APR.TopicData(topic_id=unknown, partitions=[
        APR.PartitionData(partition_index=i) for i in range(7)]))
    request.topics[1].partitions.append(APR.PartitionData(partition_index=99, leader_epoch=0, partition_epoch=0))
    fut = env.manager.submit(env.ctl, request, 3)
    env.settle()
    response = fut.result()
    assert [t.topic_id for t in response.topics] == [unknown, env.topic_id]
    assert [(p.partition_index, p.error_code) for p in response.topics[0].partitions] == \
        [(i, int(Errors.UNKNOWN_TOPIC_ID)) for i in range(7)]
    tail = [(p.partition_index, Errors(p.error_code)) for p in response.topics[1].partitions]
    assert tail == [(p, Errors.NONE) for p in range(PARTITIONS)] + [(99, Errors.UNKNOWN_TOPIC_OR_PARTITION)]
