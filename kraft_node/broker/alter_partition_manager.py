"""ISR changes from partition leaders to the active controller (Kafka's
``DefaultAlterPartitionManager``, issue 25 item 3).

Why a manager and not one request per change: a leader of many partitions changes many ISRs at
once (a follower dies: every partition it followed shrinks).  The manager queues each change,
keeps at most one request in flight for the whole broker, and sends everything queued meanwhile
as the next batch, so a burst of N changes costs a few AlterPartition round trips, not N.

API::

    manager = AlterPartitionManager(channel, broker_id=1, broker_epoch=lambda: lifecycle.broker_epoch)
    future = manager.submit(TopicIdPartition(topic_id, TopicPartition("t", 0)), leader_and_isr)
    committed = await future           # isr_policy.LeaderAndIsr as the controller answered it
    # or AlterPartitionError(error) / OperationNotAttemptedError
    await manager.close()

Invariants:

* one queued or in-flight change per partition (keyed by topic NAME and partition, as Kafka does,
  so a re-created topic's change cannot overtake the old one's): a second ``submit`` for a
  partition that has one fails at once with :class:`OperationNotAttemptedError` ("Failed to
  enqueue ISR change state ... for partition ...");
* one AlterPartition in flight at a time; each carries every queued change, grouped by topic id
  (v2+: topic ids; v3: the ISR with broker epochs, sent unless the controller refuses v3, then v2);
* a change leaves the queue only when its answer arrives: a partition missing from an answer is
  sent again ("was sent but not included in the response");
* top-level errors (STALE_BROKER_EPOCH, NOT_CONTROLLER exhausted, no controller, a version
  mismatch, CLUSTER_AUTHORIZATION_FAILED) fail nothing: the whole batch is retried after 50 ms,
  forever (Kafka: ``retryTimeoutMs = Long.MaxValue``) -- the leader's pending state is replaced
  by new metadata if the partition moves meanwhile, and the answer is then ignored by the leader;
* per-partition errors complete that change's future with :class:`AlterPartitionError`; what the
  leader does with it is :func:`kraft_node.broker.isr_policy.alter_partition_error_action`.

NOT_CONTROLLER is handled by the :class:`~kraft_node.broker.controller_channel.ControllerChannel`
(it reconnects to the new active controller and resends).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kraft_node.broker.controller_channel import (
    ControllerChannelError,
    UnsupportedControllerVersionError,
    error_name,
)
from kraft_node.broker.isr_policy import (
    RECOVERED,
    RECOVERING,
    AlterPartitionErrorAction,
    LeaderAndIsr,
    alter_partition_error_action,
)
from kraft_node.metadata.image.topics import TopicIdPartition, TopicPartition
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_storage.messages.runtime import ZERO_UUID, Uuid

__all__ = ["AlterPartitionManager", "AlterPartitionError", "OperationNotAttemptedError", "AlterPartitionItem",
           "ControllerSender", "RETRY_BACKOFF_MS", "LeaderPartition", "partition_alter_callback"]

log = logging.getLogger(__name__)

#: Kafka retries a batch that met a top-level error after 50 ms
RETRY_BACKOFF_MS = 50


class ControllerSender(Protocol):
    """What the manager needs of the controller channel (``ControllerChannel.send``)."""

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any: ...


class AlterPartitionError(Exception):
    """The controller refused one partition's change; ``error`` is the code (an :class:`Errors`)."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


class OperationNotAttemptedError(AlterPartitionError):
    """The change was not sent: another one for the partition is queued or in flight."""

    def __init__(self, message: str) -> None:
        super().__init__(int(Errors.OPERATION_NOT_ATTEMPTED), message)


@dataclass
class AlterPartitionItem:
    topic_id_partition: TopicIdPartition
    leader_and_isr: LeaderAndIsr
    future: asyncio.Future[LeaderAndIsr]

    @property
    def topic_partition(self) -> TopicPartition:
        return self.topic_id_partition.topic_partition


class AlterPartitionManager:
    """See the module doc.  ``broker_epoch()`` is read when each request is built (the epoch of
    the broker's current registration).  ``request_timeout_s``: the bound on one send through the
    channel (its own retries included) before the batch is retried."""

    def __init__(self, channel: ControllerSender, *, broker_id: int, broker_epoch: Callable[[], int],
                 retry_backoff_ms: int = RETRY_BACKOFF_MS, request_timeout_s: float = 30.0) -> None:
        self._channel = channel
        self.broker_id = broker_id
        self._broker_epoch = broker_epoch
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_s = request_timeout_s
        #: the AlterPartition version sent: v3 (ISR with broker epochs, KIP-903) until a controller
        #: refuses it, then v2
        self.version = AlterPartitionRequest.HIGHEST_VERSION
        #: queued and in-flight changes, by topic name and partition (insertion order)
        self.unsent: dict[TopicPartition, AlterPartitionItem] = {}
        self._inflight = False
        self._task: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False
        #: counters for tests and metrics
        self.requests_sent = 0
        self.top_level_errors = 0

    @property
    def inflight(self) -> bool:
        return self._inflight

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, topic_id_partition: TopicIdPartition,
               leader_and_isr: LeaderAndIsr) -> asyncio.Future[LeaderAndIsr]:
        """Queue a change; the future completes with the controller's answer (see the module doc)."""
        fut: asyncio.Future[LeaderAndIsr] = asyncio.get_running_loop().create_future()
        tp = topic_id_partition.topic_partition
        if self._closed:
            fut.set_exception(OperationNotAttemptedError(
                f"Failed to enqueue ISR change state {leader_and_isr} for partition {tp}: the manager is closed"))
            return fut
        if tp in self.unsent:
            fut.set_exception(OperationNotAttemptedError(
                f"Failed to enqueue ISR change state {leader_and_isr} for partition {tp}"))
            return fut
        if topic_id_partition.topic_id == ZERO_UUID:
            fut.set_exception(AlterPartitionError(int(Errors.INVALID_REQUEST), (
                f"ISR change for {tp} has no topic id; AlterPartition v2+ names topics by id")))
            return fut
        self.unsent[tp] = AlterPartitionItem(topic_id_partition, leader_and_isr, fut)
        self.maybe_propagate_isr_changes()
        return fut

    def maybe_propagate_isr_changes(self) -> None:
        """Send everything queued, unless a request is in flight (its answer sends the rest)."""
        if self._closed or self._inflight or not self.unsent:
            return
        self._inflight = True
        items = list(self.unsent.values())
        self._task = asyncio.get_running_loop().create_task(self._send(items), name="alter-partition")

    def build_request(self, items: list[AlterPartitionItem], broker_epoch: int, version: int) -> Any:
        """One AlterPartition for ``items`` at ``version``, grouped by topic id.  The codec writes
        only the ISR field of its version (v2 ``NewIsr``, v3 ``NewIsrWithEpochs``; the other must
        stay empty), as Kafka's ``AlterPartitionRequest.Builder.build(version)`` converts it."""
        topics: dict[Uuid, Any] = {}
        for item in items:
            tid = item.topic_id_partition.topic_id
            topic = topics.get(tid)
            if topic is None:
                topic = topics[tid] = AlterPartitionRequest.TopicData(topic_id=tid)
            lai = item.leader_and_isr
            topic.partitions.append(AlterPartitionRequest.PartitionData(
                partition_index=item.topic_partition.partition, leader_epoch=lai.leader_epoch,
                new_isr=[b for b, _e in lai.isr_with_epochs] if version < 3 else [],
                new_isr_with_epochs=[AlterPartitionRequest.BrokerState(broker_id=b, broker_epoch=e)
                                     for b, e in lai.isr_with_epochs] if version >= 3 else [],
                leader_recovery_state=lai.leader_recovery_state, partition_epoch=lai.partition_epoch))
        return AlterPartitionRequest(broker_id=self.broker_id, broker_epoch=broker_epoch, topics=list(topics.values()))

    async def _send(self, items: list[AlterPartitionItem]) -> None:
        error = int(Errors.NONE)
        try:
            broker_epoch = self._broker_epoch()
            self.requests_sent += 1
            try:
                try:
                    response = await self._channel.send(self.build_request(items, broker_epoch, self.version),
                                                        self.version, timeout_s=self.request_timeout_s)
                except UnsupportedControllerVersionError as exc:
                    if self.version <= AlterPartitionRequest.LOWEST_VERSION:
                        raise
                    log.info("AlterPartition v%d refused (%s); using v%d from now on", self.version, exc,
                             AlterPartitionRequest.LOWEST_VERSION)
                    self.version = AlterPartitionRequest.LOWEST_VERSION
                    response = await self._channel.send(self.build_request(items, broker_epoch, self.version),
                                                        self.version, timeout_s=self.request_timeout_s)
            except ControllerChannelError as exc:
                log.warning("AlterPartition for %d partitions not answered: %s; retrying", len(items), exc)
                error = int(Errors.NETWORK_EXCEPTION)
            else:
                error = self._handle_response(response, broker_epoch, items)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("AlterPartition for %d partitions failed unexpectedly; retrying", len(items))
            error = int(Errors.UNKNOWN_SERVER_ERROR)
        finally:
            self._inflight = False
            self._task = None
        if error == Errors.NONE:
            self.maybe_propagate_isr_changes()
        else:
            self.top_level_errors += 1
            self._retry = asyncio.get_running_loop().call_later(self.retry_backoff_s, self._retry_now)

    def _retry_now(self) -> None:
        self._retry = None
        self.maybe_propagate_isr_changes()

    def _handle_response(self, response: Any, sent_broker_epoch: int, items: list[AlterPartitionItem]) -> int:
        """Complete the futures of the answered items; returns the top-level error code."""
        code = int(response.error_code)
        if code == Errors.STALE_BROKER_EPOCH:
            log.warning("Broker had a stale broker epoch (%d), retrying.", sent_broker_epoch)
            return code
        if code == Errors.CLUSTER_AUTHORIZATION_FAILED:
            log.error("Broker is not authorized to send AlterPartition to controller")
            return code
        if code != Errors.NONE:
            log.warning("Controller returned an unexpected top-level error when handling AlterPartition request: %s",
                        error_name(code))
            return code
        names = {item.topic_id_partition.topic_id: item.topic_partition.topic for item in items}
        answers: dict[TopicPartition, LeaderAndIsr | AlterPartitionError] = {}
        for topic in response.topics:
            name = names.get(topic.topic_id)
            if not name:
                log.error("Received an unexpected topic %s in the alter partition response, ignoring it.",
                          topic.topic_id)
                continue
            for p in topic.partitions:
                tp = TopicPartition(name, int(p.partition_index))
                if p.error_code != Errors.NONE:
                    answers[tp] = AlterPartitionError(int(p.error_code), (
                        f"AlterPartition for {tp} failed: {error_name(int(p.error_code))}"))
                elif p.leader_recovery_state not in (RECOVERED, RECOVERING):
                    log.error("Controller returned an invalid leader recovery state (%d) for %s",
                              p.leader_recovery_state, tp)
                    answers[tp] = AlterPartitionError(int(Errors.UNKNOWN_SERVER_ERROR), (
                        f"AlterPartition for {tp}: invalid leader recovery state {p.leader_recovery_state}"))
                else:
                    answers[tp] = LeaderAndIsr(int(p.leader_id), int(p.leader_epoch),
                                               tuple((int(b), -1) for b in p.isr), int(p.leader_recovery_state),
                                               int(p.partition_epoch))
        for item in items:
            tp = item.topic_partition
            answer = answers.get(tp)
            if answer is None:
                log.warning("Partition %s was sent but not included in the response", item.topic_id_partition)
                continue
            # out of the queue first, so the future's callback may submit the next change
            if self.unsent.get(tp) is item:
                del self.unsent[tp]
            if item.future.done():
                continue
            if isinstance(answer, AlterPartitionError):
                item.future.set_exception(answer)
            else:
                item.future.set_result(answer)
        return code

    async def close(self) -> None:
        """Stop sending; queued and in-flight changes fail with OperationNotAttemptedError."""
        self._closed = True
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        for tp, item in list(self.unsent.items()):
            if not item.future.done():
                item.future.set_exception(OperationNotAttemptedError(
                    f"ISR change state {item.leader_and_isr} for partition {tp} not sent: the manager is closed"))
        self.unsent.clear()


class LeaderPartition(Protocol):
    """What :func:`partition_alter_callback` needs of a leader ``Partition`` (H3's partition.py)."""

    @property
    def topic_id(self) -> Uuid: ...

    @property
    def topic_partition(self) -> TopicPartition: ...

    @property
    def local_broker_id(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def partition_epoch(self) -> int: ...

    @property
    def pending_isr(self) -> tuple[int, ...] | None: ...

    def on_alter_partition_failed(self) -> None: ...

    def replica_broker_epoch(self, broker_id: int) -> int: ...


def partition_alter_callback(manager: AlterPartitionManager, *,
                             broker_epoch: Callable[[], int]) -> Callable[[Any, list[int]], None]:
    """The ``alter_partition(partition, new_isr)`` callable a leader Partition is given: submit
    the change and act on the answer as Kafka's ``Partition.submitAlterPartition`` does.

    The Partition keeps the change pending (``pending_isr``) until the image carries the new ISR.
    Here: an answer for a change the partition no longer has pending (new metadata overtook it)
    is ignored; a success that changed nothing (the same partition epoch: the controller had that
    ISR already) clears the pending change, since no image will; errors follow
    :func:`~kraft_node.broker.isr_policy.alter_partition_error_action` -- reset (clear the pending
    change), await metadata (stay pending), or retry (submit the same change again).  Our own
    broker epoch goes with our id in the ISR, each follower's what its fetches carried, or -1
    (Kafka's ``addBrokerEpochToIsr``; the controller checks them, KIP-903)."""
    def alter(partition: LeaderPartition, new_isr: list[int]) -> None:
        me = partition.local_broker_id
        change = LeaderAndIsr(me, partition.leader_epoch,
                              tuple((b, broker_epoch() if b == me else partition.replica_broker_epoch(b))
                                    for b in new_isr), RECOVERED,
                              partition.partition_epoch)
        wanted = tuple(new_isr)
        future = manager.submit(TopicIdPartition(partition.topic_id, partition.topic_partition), change)

        def still_pending() -> bool:
            return partition.pending_isr == wanted and partition.leader_epoch == change.leader_epoch and \
                partition.partition_epoch == change.partition_epoch

        def done(f: asyncio.Future[LeaderAndIsr]) -> None:
            # read first: an ignored failure must still be retrieved, or asyncio logs it at ERROR
            exc = None if f.cancelled() else f.exception()
            if not still_pending():
                log.debug("Ignoring the AlterPartition answer for %s: its state changed meanwhile",
                          partition.topic_partition)
                return
            if f.cancelled() or exc is not None:
                code = exc.error if isinstance(exc, AlterPartitionError) else int(Errors.UNKNOWN_SERVER_ERROR)
                action, why = alter_partition_error_action(code)
                log.info("Failed to alter partition %s to ISR %s since %s", partition.topic_partition,
                         list(wanted), why)
                if action is AlterPartitionErrorAction.RETRY and not manager.closed:
                    alter(partition, new_isr)
                elif action is AlterPartitionErrorAction.RESET_TO_COMMITTED or manager.closed:
                    partition.on_alter_partition_failed()
                return
            result = f.result()
            if result.leader_epoch == change.leader_epoch and result.partition_epoch == change.partition_epoch:
                partition.on_alter_partition_failed()   # nothing changed: no image will clear it

        future.add_done_callback(done)

    return alter
