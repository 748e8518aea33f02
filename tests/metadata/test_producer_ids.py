"""ProducerIdControlManager: ProducerIdControlManagerTest's scenarios, plus the timeline
(committed reads, revert), the int64 boundary and the snapshot records.

The cluster control manager is a stand-in holding brokers 0..3 registered at epoch 100 and
raising Kafka's StaleBrokerEpochException messages, as ClusterControlManager.checkBrokerEpoch.
"""
from __future__ import annotations

import pytest

from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.producer_ids import (
    EMPTY_BLOCK,
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdControlManager,
    ProducerIdsBlock,
)
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.metadata import ProducerIdsRecord, decode_metadata_record
from kraft_storage.timeline import SnapshotRegistry

LONG_MAX = 2**63 - 1


class FakeClusterControl:
    def __init__(self, epochs: dict[int, int]) -> None:
        self.epochs = epochs
        self.calls: list[tuple[int, int]] = []

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        self.calls.append((broker_id, broker_epoch))
        registered = self.epochs.get(broker_id)
        if registered is None:
            raise ApiError(Errors.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if registered != broker_epoch:
            raise ApiError(Errors.STALE_BROKER_EPOCH,
                           f"Expected broker epoch {registered}, but got broker epoch {broker_epoch}")


@pytest.fixture
def registry() -> SnapshotRegistry:
    return SnapshotRegistry()


@pytest.fixture
def cluster() -> FakeClusterControl:
    return FakeClusterControl({i: 100 for i in range(4)})


@pytest.fixture
def manager(registry, cluster) -> ProducerIdControlManager:
    return ProducerIdControlManager(registry, cluster)


def replay_ids(manager: ProducerIdControlManager, broker_id: int, next_producer_id: int,
               broker_epoch: int = 100) -> None:
    manager.replay(ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                     next_producer_id=next_producer_id), 0)


def generate_and_replay(manager: ProducerIdControlManager, broker_id: int, broker_epoch: int,
                        offset: int = 0) -> ProducerIdsBlock:
    result = manager.generate_next_producer_id(broker_id, broker_epoch)
    for record in result.records:
        manager.replay(record.message, offset)
    return result.response


def test_initial_result(manager, cluster):
    result = manager.generate_next_producer_id(1, 100)
    assert cluster.calls == [(1, 100)]
    assert result.response == ProducerIdsBlock(1, 0, 1000)
    assert result.response.first_producer_id == 0 and result.response.size == 1000
    (record,) = result.records
    assert record.version == 0
    assert record.message == ProducerIdsRecord(broker_id=1, broker_epoch=100, next_producer_id=1000)
    assert not result.atomic
    assert manager.next_producer_block() == EMPTY_BLOCK, "generating changes nothing until replay"
    api_key, version, decoded = decode_metadata_record(record.encode())
    assert (api_key, version, decoded) == (ProducerIdsRecord.API_KEY, 0, record.message)


def test_monotonic(manager):
    replay_ids(manager, 1, 42)
    assert manager.generate_next_producer_id(1, 100).response.first_producer_id == 42

    with pytest.raises(ReplayError) as info:
        replay_ids(manager, 1, 40)
    assert str(info.value) == (
        "Next Producer ID from replayed record (40) is not greater than current next Producer ID "
        "in block (ProducerIdsBlock(assignedBrokerId=1, firstProducerId=42, size=1000))")
    with pytest.raises(ReplayError, match=r"record \(42\) is not greater"):
        replay_ids(manager, 2, 42)
    assert manager.generate_next_producer_id(3, 100).response.first_producer_id == 42

    replay_ids(manager, 1, 50)  # a gap is fine
    assert manager.generate_next_producer_id(1, 100).response.first_producer_id == 50


def test_first_record_may_start_anywhere(manager):
    """Before any grant (EMPTY), a record is taken whatever its value, as Kafka does for a
    log whose first id came from elsewhere."""
    replay_ids(manager, 2, 0)
    assert manager.next_producer_block() == ProducerIdsBlock(2, 0, 1000)
    with pytest.raises(ReplayError):
        replay_ids(manager, 2, 0)


def test_unknown_broker_or_epoch(manager):
    with pytest.raises(ApiError) as info:
        manager.generate_next_producer_id(99, 0)
    assert info.value.error is Errors.STALE_BROKER_EPOCH
    assert info.value.message == "No broker registration found for broker id 99"
    with pytest.raises(ApiError) as info:
        manager.generate_next_producer_id(1, 99)
    assert info.value.error is Errors.STALE_BROKER_EPOCH
    assert info.value.message == "Expected broker epoch 100, but got broker epoch 99"


def test_broker_epoch_is_checked_before_exhaustion(manager):
    replay_ids(manager, 1, LONG_MAX - 1)
    with pytest.raises(ApiError) as info:
        manager.generate_next_producer_id(1, 7)
    assert info.value.error is Errors.STALE_BROKER_EPOCH


def test_max_value(manager):
    replay_ids(manager, 1, LONG_MAX - 1)
    with pytest.raises(ApiError) as info:
        manager.generate_next_producer_id(1, 100)
    assert info.value.error is Errors.UNKNOWN_SERVER_ERROR
    assert info.value.message == ("Exhausted all producerIds as the next block's end producerId "
                                  "has exceeded the int64 type limit")


def test_last_block_that_fits_int64(manager):
    replay_ids(manager, 1, LONG_MAX - PRODUCER_ID_BLOCK_SIZE)
    block = generate_and_replay(manager, 1, 100)
    assert block.last_producer_id == LONG_MAX - 1
    assert manager.next_producer_block().first_producer_id == LONG_MAX
    with pytest.raises(ApiError, match="Exhausted all producerIds"):
        manager.generate_next_producer_id(1, 100)


def test_generate_producer_ids(manager):
    for i in range(100):
        generate_and_replay(manager, i % 4, 100)
    assert manager.next_producer_block() == ProducerIdsBlock(3, 100_000, 1000)
    assert manager.broker_epoch() == 100


def test_committed_reads_and_revert(registry, manager):
    first = generate_and_replay(manager, 0, 100, offset=1)
    registry.get_or_create_snapshot(1)
    second = generate_and_replay(manager, 1, 100, offset=2)
    assert (first.first_producer_id, second.first_producer_id) == (0, 1000)
    assert manager.next_producer_block(epoch=1) == ProducerIdsBlock(0, 1000, 1000)
    assert manager.next_producer_block() == ProducerIdsBlock(1, 2000, 1000)
    registry.revert_to_snapshot(1)
    assert manager.next_producer_block() == ProducerIdsBlock(0, 1000, 1000)
    assert generate_and_replay(manager, 2, 100).first_producer_id == 1000, "the reverted grant is given again"


def test_snapshot_records_rebuild_the_state(registry, cluster, manager):
    assert manager.snapshot_records() == []
    generate_and_replay(manager, 2, 100)
    registry.get_or_create_snapshot(5)
    generate_and_replay(manager, 3, 100)
    (at5,) = manager.snapshot_records(5)  # positional: QuorumController.register_snapshot_source calls fn(epoch)
    assert at5.version == 0
    assert at5.message == ProducerIdsRecord(broker_id=2, broker_epoch=100, next_producer_id=1000)
    rebuilt = ProducerIdControlManager(SnapshotRegistry(), cluster)
    for record in manager.snapshot_records():
        rebuilt.replay(record.message, 10)
    assert rebuilt.next_producer_block() == manager.next_producer_block() == ProducerIdsBlock(3, 2000, 1000)
    assert rebuilt.broker_epoch() == 100


def test_block_arithmetic_and_text():
    block = ProducerIdsBlock(3, 100_000, 1000)
    assert block.last_producer_id == 100_999
    assert block.next_block_first_id == 101_000
    assert str(block) == "ProducerIdsBlock(assignedBrokerId=3, firstProducerId=100000, size=1000)"
    assert ProducerIdsBlock.EMPTY is EMPTY_BLOCK
    assert EMPTY_BLOCK == ProducerIdsBlock(-1, 0, 0)
