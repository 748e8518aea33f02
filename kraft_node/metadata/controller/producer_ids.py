"""Producer id blocks (Kafka's ``ProducerIdControlManager`` and ``ProducerIdsBlock``).

Why the controller hands out producer ids: idempotent and transactional producers need ids
unique across the cluster, and brokers must not talk to each other to get them.  So a
broker asks the active controller (AllocateProducerIds) for a block of
:data:`PRODUCER_ID_BLOCK_SIZE` ids and hands them out locally; the controller records each
grant as a ``ProducerIdsRecord`` carrying the *next* block's first id.  Because the grant is
a committed record, a new active controller continues after the last block any controller
granted, and no id is handed out twice.

Invariants:

* ``next_producer_block().first_producer_id`` only grows: :meth:`ProducerIdControlManager.replay`
  refuses a record that does not move it forward (fatal, as every controller must agree).
  Gaps are fine (a record may skip ahead).
* :meth:`~ProducerIdControlManager.generate_next_producer_id` changes nothing; the block it
  answers is reserved only once its record is replayed (and answered only after it commits).
* The last id of a block fits an int64; past that the controller answers UNKNOWN_SERVER_ERROR.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, TypeAlias

from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.metadata import ProducerIdsRecord
from kraft_storage.timeline import LATEST_EPOCH, TimelineLong, TimelineObject

SnapshotRegistryLike: TypeAlias = Any  # a kraft_storage.timeline.SnapshotRegistry (native or pure)

__all__ = [
    "PRODUCER_ID_BLOCK_SIZE", "PRODUCER_IDS_RECORD_VERSION", "EMPTY_BLOCK", "BrokerEpochChecker",
    "ProducerIdsBlock", "ProducerIdControlManager",
]

log = logging.getLogger(__name__)

#: Ids per block (Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``).
PRODUCER_ID_BLOCK_SIZE = 1000

#: ``ProducerIdsRecord`` has one version.
PRODUCER_IDS_RECORD_VERSION = 0

_INT64_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ProducerIdsBlock:
    """A range of producer ids, ``first_producer_id`` to ``last_producer_id`` inclusive,
    granted to ``assigned_broker_id``.  Immutable (Kafka's block also carries a claim
    counter for the broker side; the controller never claims ids one by one)."""

    EMPTY: ClassVar[ProducerIdsBlock]

    assigned_broker_id: int
    first_producer_id: int
    size: int

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    @property
    def next_block_first_id(self) -> int:
        return self.first_producer_id + self.size

    def __str__(self) -> str:
        # Kafka's toString: it appears in the replay error operators read.
        return (f"ProducerIdsBlock(assignedBrokerId={self.assigned_broker_id}, "
                f"firstProducerId={self.first_producer_id}, size={self.size})")


#: No block granted yet (Kafka's ``ProducerIdsBlock.EMPTY``): the first grant starts at id 0.
EMPTY_BLOCK = ProducerIdsBlock(-1, 0, 0)
ProducerIdsBlock.EMPTY = EMPTY_BLOCK


class BrokerEpochChecker(Protocol):
    """What this manager needs of the ClusterControlManager."""

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        """Raise ``ApiError(STALE_BROKER_EPOCH, ...)`` unless ``broker_id`` is registered at
        ``broker_epoch``."""


class ProducerIdControlManager:
    """Grants producer id blocks to brokers; state is the next block to grant and the
    epoch of the broker the last record was written for, both timeline values so a
    revert to a snapshot forgets uncommitted grants."""

    def __init__(self, snapshot_registry: SnapshotRegistryLike, cluster_control: BrokerEpochChecker) -> None:
        self._cluster_control = cluster_control
        self._next_producer_block = TimelineObject(snapshot_registry, EMPTY_BLOCK)
        self._broker_epoch = TimelineLong(snapshot_registry)

    def generate_next_producer_id(self, broker_id: int, broker_epoch: int) -> ControllerResult[ProducerIdsBlock]:
        """The next block for ``broker_id`` and the record that reserves it.

        Raises ``ApiError(STALE_BROKER_EPOCH)`` (from the cluster control manager) if the
        broker is not registered at ``broker_epoch``, and ``ApiError(UNKNOWN_SERVER_ERROR)``
        once a block would end past the int64 range."""
        self._cluster_control.check_broker_epoch(broker_id, broker_epoch)
        first = self._next_producer_block.get().first_producer_id
        if first > _INT64_MAX - PRODUCER_ID_BLOCK_SIZE:
            raise ApiError(Errors.UNKNOWN_SERVER_ERROR,
                           "Exhausted all producerIds as the next block's end producerId "
                           "has exceeded the int64 type limit")
        block = ProducerIdsBlock(broker_id, first, PRODUCER_ID_BLOCK_SIZE)
        record = ProducerIdsRecord(broker_id=broker_id, broker_epoch=broker_epoch,
                                   next_producer_id=block.next_block_first_id)
        return ControllerResult.of([ApiMessageAndVersion(record, PRODUCER_IDS_RECORD_VERSION)], block)

    def next_producer_block(self, *, epoch: int = LATEST_EPOCH) -> ProducerIdsBlock:
        """The block the next grant would start (as of ``epoch``); ``EMPTY_BLOCK`` before any."""
        block: ProducerIdsBlock = self._next_producer_block.get(epoch)
        return block

    def broker_epoch(self, *, epoch: int = LATEST_EPOCH) -> int:
        """The broker epoch in the last replayed record (0 before any)."""
        value: int = self._broker_epoch.get(epoch)
        return value

    def replay(self, record: ProducerIdsRecord, offset: int = -1) -> None:
        """Apply a ``ProducerIdsRecord``: the next grant starts at its ``next_producer_id``.

        A record that does not move the next id forward raises :class:`ReplayError` (Kafka's
        message), except before the first grant, when any value is taken (a log may start
        with an id chosen elsewhere, e.g. one migrated from ZooKeeper)."""
        current: ProducerIdsBlock = self._next_producer_block.get()
        if current != EMPTY_BLOCK and record.next_producer_id <= current.first_producer_id:
            raise ReplayError(
                f"Next Producer ID from replayed record ({record.next_producer_id}) is not greater "
                f"than current next Producer ID in block ({current})")
        log.info("Replaying ProducerIdsRecord %r at offset %d", record, offset)
        self._next_producer_block.set(
            ProducerIdsBlock(record.broker_id, record.next_producer_id, PRODUCER_ID_BLOCK_SIZE))
        self._broker_epoch.set(record.broker_epoch)

    def snapshot_records(self, epoch: int = LATEST_EPOCH) -> list[ApiMessageAndVersion]:
        """The records that rebuild this state (for a metadata snapshot at ``epoch``): one
        ``ProducerIdsRecord``, or none before the first grant."""
        block: ProducerIdsBlock = self._next_producer_block.get(epoch)
        if block == EMPTY_BLOCK:
            return []
        record = ProducerIdsRecord(broker_id=block.assigned_broker_id,
                                   broker_epoch=self._broker_epoch.get(epoch),
                                   next_producer_id=block.first_producer_id)
        return [ApiMessageAndVersion(record, PRODUCER_IDS_RECORD_VERSION)]
