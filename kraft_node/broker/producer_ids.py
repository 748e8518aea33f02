"""The broker's producer ids: Kafka's RPCProducerIdManager and the InitProducerId handler.

Why: an idempotent producer starts with InitProducerId and needs an id no other producer in the
cluster ever had, from whichever broker it asks.  The controller hands out disjoint blocks of
1,000 ids (AllocateProducerIds; ``kraft_node/metadata/controller/producer_ids.py`` writes a
``ProducerIdsRecord`` per block, so a new controller never grants one twice); each broker hands
out the ids of its block one by one, without a round trip per producer.

The rules (Kafka's ``RPCProducerIdManager``):

* ids come from the current block in order; when 90% of it is used (the id at
  ``first + 0.9 * size``), the next block is asked for, so it is usually there before the
  current one runs out;
* when the current block is used up, the prefetched block becomes current; if there is none yet,
  a request is sent (one at a time) and the caller gets COORDINATOR_LOAD_IN_PROGRESS, which
  clients retry (Kafka answers this rather than REQUEST_TIMED_OUT, which old clients treat as
  fatal);
* a failed AllocateProducerIds (STALE_BROKER_EPOCH, BROKER_ID_NOT_REGISTERED, any other error, a
  block that is not above the current one, or no answer before the deadline) is retried no
  sooner than 50 ms later (Kafka's ``RetryBackoffMs``), on the next id asked for.

InitProducerId (``handle_init_producer_id``), as Kafka's ``KafkaApis`` + ``TransactionCoordinator``:

* ``producer_id``/``producer_epoch``: both -1, or both set; one of them alone is INVALID_REQUEST;
* no transactional id: a new id with epoch 0 (also when the producer sends its old id and epoch,
  KIP-360's bump: Kafka "blindly" allocates a new id for non-transactional producers);
* an empty transactional id: INVALID_REQUEST; a timeout outside ``(0, transaction.max.timeout.ms]``:
  INVALID_TRANSACTION_TIMEOUT; any other transactional id: NOT_COORDINATOR -- kraft has no
  transaction coordinator (transactions are out of scope; FindCoordinator answers
  COORDINATOR_NOT_AVAILABLE), which is what Kafka answers from a broker that does not own the
  transactional id's ``__transaction_state`` partition;
* errors carry producer id -1 and epoch -1.

One difference from Kafka, on purpose: when no id is available because the block is on its way,
the handler waits for it (up to ``wait_for_block_ms``, 2 s by default) instead of answering
COORDINATOR_LOAD_IN_PROGRESS at once -- the first InitProducerId after a broker starts would
otherwise always fail once.  With ``wait_for_block_ms=0`` it answers as Kafka does.

Runs on the broker's asyncio loop (not thread safe).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.allocate_producer_ids import AllocateProducerIdsRequest
from kraft_node.protocol.generated.init_producer_id import InitProducerIdResponse

__all__ = ["ProducerIdsBlock", "RPCProducerIdManager", "ProducerIdUnavailableError", "handle_init_producer_id",
           "init_producer_id_handler", "PRODUCER_ID_BLOCK_SIZE", "PREFETCH_THRESHOLD",
           "DEFAULT_TRANSACTION_MAX_TIMEOUT_MS"]

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK_SIZE = 1000
#: Kafka's ``PidPrefetchThreshold``: ask for the next block when this share of the current one is used
PREFETCH_THRESHOLD = 0.90
#: Kafka's ``IterationLimit`` and ``RetryBackoffMs``
ITERATION_LIMIT = 3
RETRY_BACKOFF_MS = 50
#: Kafka's ``transaction.max.timeout.ms`` default (15 minutes)
DEFAULT_TRANSACTION_MAX_TIMEOUT_MS = 900_000
_INT64_MAX = 2**63 - 1
_NO_PRODUCER_ID = -1
_NO_PRODUCER_EPOCH = -1


class ControllerSender(Protocol):
    """What the manager needs of ``kraft_node.broker.controller_channel.ControllerChannel``."""

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any: ...


class ProducerIdUnavailableError(Exception):
    """No producer id now: COORDINATOR_LOAD_IN_PROGRESS (retriable), with Kafka's message."""

    error = Errors.COORDINATOR_LOAD_IN_PROGRESS

    def __init__(self, message: str = "Producer ID block is full. Waiting for next block") -> None:
        super().__init__(message)


class ProducerIdsBlock:
    """Ids ``[first, first + size)`` granted to ``assigned_broker_id``; ``claim_next_id`` hands them out."""

    __slots__ = ("assigned_broker_id", "first_producer_id", "size", "_next")

    def __init__(self, assigned_broker_id: int, first_producer_id: int, size: int) -> None:
        self.assigned_broker_id = assigned_broker_id
        self.first_producer_id = first_producer_id
        self.size = size
        self._next = first_producer_id

    @property
    def last_producer_id(self) -> int:
        return self.first_producer_id + self.size - 1

    def claim_next_id(self) -> int | None:
        """The next unused id, or None when the block is used up."""
        if self._next > self.last_producer_id:
            return None
        nid = self._next
        self._next += 1
        return nid

    @property
    def remaining(self) -> int:
        return self.last_producer_id - self._next + 1

    def __repr__(self) -> str:
        return (f"ProducerIdsBlock(assignedBrokerId={self.assigned_broker_id}, firstProducerId="
                f"{self.first_producer_id}, size={self.size}, next={self._next})")


EMPTY_BLOCK_FIRST = -1


class RPCProducerIdManager:
    """Producer ids from controller-granted blocks (see the module doc).

    ``channel``: the broker's channel to the active controller; ``broker_epoch``: returns the
    broker's current epoch (the lifecycle manager's; AllocateProducerIds is refused with
    STALE_BROKER_EPOCH for another); ``request_timeout_s``: the deadline of one AllocateProducerIds
    (the channel retries within it, across controller changes)."""

    def __init__(self, broker_id: int, channel: ControllerSender, broker_epoch: Callable[[], int], *,
                 request_timeout_s: float = 30.0, clock_ms: Callable[[], int] | None = None) -> None:
        self.broker_id = broker_id
        self._channel = channel
        self._broker_epoch = broker_epoch
        self.request_timeout_s = request_timeout_s
        self._clock_ms = clock_ms or (lambda: time.monotonic_ns() // 1_000_000)
        self._current = ProducerIdsBlock(-1, 0, 0)    # Kafka's EMPTY block: nothing to claim
        self._current_is_empty = True
        self.next_block: ProducerIdsBlock | None = None
        self._in_flight: asyncio.Task[None] | None = None
        self._backoff_deadline_ms: int | None = None
        self._block_arrived = asyncio.Event()
        self._closed = False
        #: counters for tests and metrics
        self.requests_sent = 0
        self.failed_responses = 0

    @property
    def has_valid_block(self) -> bool:
        return self.next_block is not None

    @property
    def current_block(self) -> ProducerIdsBlock | None:
        return None if self._current_is_empty else self._current

    @property
    def request_in_flight(self) -> bool:
        return self._in_flight is not None and not self._in_flight.done()

    def generate_producer_id(self) -> int:
        """The next producer id; raises :class:`ProducerIdUnavailableError` when none is available
        (a request for the next block is then on its way)."""
        iteration = 0
        while True:
            nid = self._current.claim_next_id()
            if nid is not None:
                block = self._current
                if nid == block.first_producer_id + int(block.size * PREFETCH_THRESHOLD):
                    self._maybe_request_next_block()
                return nid
            nxt = self.next_block
            if nxt is None:
                self._maybe_request_next_block()
                raise ProducerIdUnavailableError()
            self.next_block = None
            self._current, self._current_is_empty = nxt, False
            iteration += 1
            if iteration == ITERATION_LIMIT:
                raise ProducerIdUnavailableError()

    async def generate_producer_id_waiting(self, timeout_s: float) -> int:
        """:meth:`generate_producer_id`, waiting up to ``timeout_s`` for a block that is on its way."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            try:
                return self.generate_producer_id()
            except ProducerIdUnavailableError:
                left = deadline - loop.time()
                if left <= 0 or self._closed:
                    raise
                self._block_arrived.clear()
                if self.next_block is not None:
                    continue
                try:
                    await asyncio.wait_for(self._block_arrived.wait(), min(left, RETRY_BACKOFF_MS / 1000 * 2))
                except TimeoutError:
                    pass

    def _maybe_request_next_block(self) -> None:
        if self._closed:
            return
        deadline = self._backoff_deadline_ms
        if deadline is not None and self._clock_ms() < deadline:
            return
        if self.next_block is None and not self.request_in_flight:
            self._backoff_deadline_ms = None
            self.requests_sent += 1
            self._in_flight = asyncio.get_running_loop().create_task(self._send_request(),
                                                                   name=f"allocate-producer-ids-{self.broker_id}")

    async def _send_request(self) -> None:
        request = AllocateProducerIdsRequest(broker_id=self.broker_id, broker_epoch=self._broker_epoch())
        log.debug("[RPC ProducerId Manager %d] requesting the next producer id block", self.broker_id)
        try:
            response = await self._channel.send(request, timeout_s=self.request_timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - ControllerUnavailableError, a version mismatch...: back off
            log.warning("[RPC ProducerId Manager %d] AllocateProducerIds failed: %s", self.broker_id, exc)
            self._failed()
            return
        self.handle_allocate_producer_ids_response(response)

    def handle_allocate_producer_ids_response(self, response: Any) -> None:
        """Install the granted block as the next one, or back off (Kafka's checks)."""
        code = int(response.error_code)
        ok = False
        if code == Errors.NONE:
            start, length = int(response.producer_id_start), int(response.producer_id_len)
            if not self._current_is_empty and start < self._current.last_producer_id:
                log.error("[RPC ProducerId Manager %d] producer id block is not monotonic with the current block: "
                          "current=%r response start=%d len=%d", self.broker_id, self._current, start, length)
            elif start < 0 or length < 0 or start > _INT64_MAX - length:
                log.error("[RPC ProducerId Manager %d] producer id block includes an invalid id range: start=%d "
                          "len=%d", self.broker_id, start, length)
            else:
                self.next_block = ProducerIdsBlock(self.broker_id, start, length)
                ok = True
                self._block_arrived.set()
        elif code == Errors.STALE_BROKER_EPOCH:
            log.warning("[RPC ProducerId Manager %d] our broker epoch was stale, trying again", self.broker_id)
        elif code == Errors.BROKER_ID_NOT_REGISTERED:
            log.warning("[RPC ProducerId Manager %d] our broker id is not yet known by the controller, trying again",
                        self.broker_id)
        else:
            log.error("[RPC ProducerId Manager %d] unexpected error from the controller: %s", self.broker_id,
                      _error_name(code))
        if not ok:
            self._failed()

    def _failed(self) -> None:
        self.failed_responses += 1
        self._backoff_deadline_ms = self._clock_ms() + RETRY_BACKOFF_MS

    def start(self) -> None:
        """Ask for the first block now (optional: the first id asked for would)."""
        self._maybe_request_next_block()

    async def close(self) -> None:
        self._closed = True
        task, self._in_flight = self._in_flight, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass


def _error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"error code {code}"


def _error_response(code: Errors) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=int(code), producer_id=_NO_PRODUCER_ID,
                                  producer_epoch=_NO_PRODUCER_EPOCH)


async def handle_init_producer_id(manager: RPCProducerIdManager, request: Any, *,
                                  transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
                                  wait_for_block_ms: int = 2000) -> InitProducerIdResponse:
    """Answer an InitProducerId request (see the module doc for the rules)."""
    pid, epoch = int(request.producer_id), int(request.producer_epoch)
    if (pid == _NO_PRODUCER_ID) != (epoch == _NO_PRODUCER_EPOCH):
        return _error_response(Errors.INVALID_REQUEST)
    txn_id = request.transactional_id
    if txn_id is not None:
        if txn_id == "":
            return _error_response(Errors.INVALID_REQUEST)
        timeout = int(request.transaction_timeout_ms)
        if not 0 < timeout <= transaction_max_timeout_ms:
            return _error_response(Errors.INVALID_TRANSACTION_TIMEOUT)
        log.info("InitProducerId for transactional id %r refused with NOT_COORDINATOR: kraft has no transaction "
                 "coordinator", txn_id)
        return _error_response(Errors.NOT_COORDINATOR)
    try:
        new_id = await manager.generate_producer_id_waiting(max(0, wait_for_block_ms) / 1000)
    except ProducerIdUnavailableError:
        return _error_response(Errors.COORDINATOR_LOAD_IN_PROGRESS)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=new_id, producer_epoch=0)


def init_producer_id_handler(manager: RPCProducerIdManager, *,
                             transaction_max_timeout_ms: int = DEFAULT_TRANSACTION_MAX_TIMEOUT_MS,
                             wait_for_block_ms: int = 2000) -> Callable[[Any, Any], Awaitable[InitProducerIdResponse]]:
    """A ``KafkaServer`` handler ``(ctx, body) -> coroutine`` for ApiKeys.INIT_PRODUCER_ID."""
    def handler(_ctx: Any, body: Any) -> Awaitable[InitProducerIdResponse]:
        return handle_init_producer_id(manager, body, transaction_max_timeout_ms=transaction_max_timeout_ms,
                                       wait_for_block_ms=wait_for_block_ms)
    return handler
