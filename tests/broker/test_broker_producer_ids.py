"""The broker's producer ids (kraft_node/broker/producer_ids.py).

(Named test_broker_producer_ids.py: tests/metadata/test_producer_ids.py holds the controller's.)

* Kafka's ProducerIdManagerTest (RPC manager) against a scripted controller channel: ids in
  order across blocks, the prefetch at 90%, COORDINATOR_LOAD_IN_PROGRESS while the first block
  is on its way, one request at a time, the 50 ms backoff after an error, refused blocks.
* InitProducerId's rules (KafkaApis + TransactionCoordinator): INVALID_REQUEST,
  INVALID_TRANSACTION_TIMEOUT, NOT_COORDINATOR for transactional ids.
* Against a real in-process controller over TCP: a registered broker's InitProducerId handler,
  served by a KafkaServer and asked by a client, gets ids from AllocateProducerIds blocks; two
  brokers get disjoint blocks; an unregistered broker keeps getting COORDINATOR_LOAD_IN_PROGRESS.
"""
from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from support.controller import broker_registration, until_controller_active
from support.raft import CLUSTER_ID, cluster_properties

from kraft_node.broker.controller_channel import ControllerChannel
from kraft_node.broker.producer_ids import (
    PRODUCER_ID_BLOCK_SIZE,
    ProducerIdUnavailableError,
    RPCProducerIdManager,
    handle_init_producer_id,
    init_producer_id_handler,
)
from kraft_node.network.client import KafkaConnection
from kraft_node.network.server import KafkaServer
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.allocate_producer_ids import AllocateProducerIdsResponse
from kraft_node.protocol.generated.init_producer_id import InitProducerIdRequest
from kraft_node.server.config import NodeConfig
from kraft_node.server.node import KraftNode


def run(coro_fn: Callable[[], Any], timeout: float = 60.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro_fn(), timeout)
    asyncio.run(main())


class ScriptedController:
    """Answers AllocateProducerIds with consecutive blocks, or with the scripted errors first."""

    def __init__(self, errors: list[Errors] | None = None, delay_s: float = 0.0, size: int = PRODUCER_ID_BLOCK_SIZE):
        self.errors = list(errors or [])
        self.delay_s = delay_s
        self.size = size
        self.next_start = 0
        self.requests: list[Any] = []
        self.raise_next: Exception | None = None

    async def send(self, body: Any, version: int | None = None, *, timeout_s: float | None = None) -> Any:
        self.requests.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.raise_next is not None:
            exc, self.raise_next = self.raise_next, None
            raise exc
        if self.errors:
            return AllocateProducerIdsResponse(error_code=int(self.errors.pop(0)))
        start, self.next_start = self.next_start, self.next_start + self.size
        return AllocateProducerIdsResponse(error_code=0, producer_id_start=start, producer_id_len=self.size)


class FakeClock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


# ----------------------------------------------------------------- the manager (Kafka's ProducerIdManagerTest)
def test_ids_are_sequential_across_blocks() -> None:
    async def go() -> None:
        ctl = ScriptedController(size=10)
        m = RPCProducerIdManager(1, ctl, lambda: 5)
        with pytest.raises(ProducerIdUnavailableError) as e:
            m.generate_producer_id()
        assert str(e.value) == "Producer ID block is full. Waiting for next block"
        assert e.value.error == Errors.COORDINATOR_LOAD_IN_PROGRESS
        await settle()
        ids = []
        for _ in range(35):
            try:
                ids.append(m.generate_producer_id())
            except ProducerIdUnavailableError:  # pragma: no cover - the prefetch should prevent it
                pytest.fail(f"no id after {len(ids)}: the next block was not prefetched")
            await settle()
        assert ids == list(range(35))
        assert [(r.broker_id, r.broker_epoch) for r in ctl.requests] == [(1, 5)] * 4
        await m.close()
    run(go)


def test_prefetch_at_ninety_percent() -> None:
    async def go() -> None:
        ctl = ScriptedController()
        m = RPCProducerIdManager(1, ctl, lambda: 5)
        assert await m.generate_producer_id_waiting(1.0) == 0
        assert len(ctl.requests) == 1 and not m.has_valid_block
        for _ in range(899):
            m.generate_producer_id()
        await settle()
        assert len(ctl.requests) == 1  # the id at 900 not claimed yet
        assert m.generate_producer_id() == 900
        await settle()
        assert len(ctl.requests) == 2 and m.has_valid_block and m.next_block is not None
        assert m.next_block.first_producer_id == 1000
        for _ in range(99):
            m.generate_producer_id()
        assert m.generate_producer_id() == 1000  # the prefetched block takes over
        assert not m.has_valid_block
        await m.close()
    run(go)


def test_only_one_request_in_flight() -> None:
    async def go() -> None:
        ctl = ScriptedController(delay_s=0.05)
        m = RPCProducerIdManager(1, ctl, lambda: 5)
        for _ in range(10):
            with pytest.raises(ProducerIdUnavailableError):
                m.generate_producer_id()
        await asyncio.sleep(0.1)
        assert len(ctl.requests) == 1
        assert m.generate_producer_id() == 0
        await m.close()
    run(go)


@pytest.mark.parametrize("error", [Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED,
                                   Errors.UNKNOWN_SERVER_ERROR])
def test_retry_backoff_after_an_error(error: Errors) -> None:
    async def go() -> None:
        clock = FakeClock()
        ctl = ScriptedController(errors=[error])
        m = RPCProducerIdManager(1, ctl, lambda: 5, clock_ms=clock)
        with pytest.raises(ProducerIdUnavailableError):
            m.generate_producer_id()
        await settle()
        assert m.failed_responses == 1 and not m.has_valid_block
        clock.ms += 49
        with pytest.raises(ProducerIdUnavailableError):
            m.generate_producer_id()
        await settle()
        assert len(ctl.requests) == 1  # still backing off
        clock.ms += 1
        with pytest.raises(ProducerIdUnavailableError):
            m.generate_producer_id()
        await settle()
        assert len(ctl.requests) == 2 and m.generate_producer_id() == 0
        await m.close()
    run(go)


def test_channel_failure_backs_off() -> None:
    async def go() -> None:
        clock = FakeClock()
        ctl = ScriptedController()
        ctl.raise_next = TimeoutError("no controller answered")
        m = RPCProducerIdManager(1, ctl, lambda: 5, clock_ms=clock)
        with pytest.raises(ProducerIdUnavailableError):
            m.generate_producer_id()
        await settle()
        assert m.failed_responses == 1
        clock.ms += 50
        with pytest.raises(ProducerIdUnavailableError):
            m.generate_producer_id()
        await settle()
        assert m.generate_producer_id() == 0
        await m.close()
    run(go)


def test_bad_blocks_are_refused() -> None:
    async def go() -> None:
        m = RPCProducerIdManager(1, ScriptedController(), lambda: 5)
        m.handle_allocate_producer_ids_response(AllocateProducerIdsResponse(error_code=0, producer_id_start=-5,
                                                                            producer_id_len=10))
        assert not m.has_valid_block
        m.handle_allocate_producer_ids_response(AllocateProducerIdsResponse(error_code=0,
                                                                            producer_id_start=2**63 - 5,
                                                                            producer_id_len=10))
        assert not m.has_valid_block
        m.handle_allocate_producer_ids_response(AllocateProducerIdsResponse(error_code=0, producer_id_start=5000,
                                                                            producer_id_len=1000))
        assert m.generate_producer_id() == 5000
        m.handle_allocate_producer_ids_response(AllocateProducerIdsResponse(error_code=0, producer_id_start=1000,
                                                                            producer_id_len=1000))
        assert not m.has_valid_block  # not above the current block
        assert m.failed_responses == 3
        await m.close()
    run(go)


# ----------------------------------------------------------------- the InitProducerId rules
@pytest.mark.parametrize("fields, error", [
    ({"producer_id": 5, "producer_epoch": -1}, Errors.INVALID_REQUEST),
    ({"producer_id": -1, "producer_epoch": 3}, Errors.INVALID_REQUEST),
    ({"transactional_id": "", "transaction_timeout_ms": 1000}, Errors.INVALID_REQUEST),
    ({"transactional_id": "tx", "transaction_timeout_ms": 0}, Errors.INVALID_TRANSACTION_TIMEOUT),
    ({"transactional_id": "tx", "transaction_timeout_ms": 900_001}, Errors.INVALID_TRANSACTION_TIMEOUT),
    ({"transactional_id": "tx", "transaction_timeout_ms": 60_000}, Errors.NOT_COORDINATOR),
])
def test_init_producer_id_refusals(fields: dict[str, Any], error: Errors) -> None:
    async def go() -> None:
        ctl = ScriptedController()
        m = RPCProducerIdManager(1, ctl, lambda: 5)
        body = {"transactional_id": None, **fields}
        resp = await handle_init_producer_id(m, InitProducerIdRequest(**body))
        assert (Errors(resp.error_code), resp.producer_id, resp.producer_epoch) == (error, -1, -1)
        assert ctl.requests == []
        await m.close()
    run(go)


def test_init_producer_id_new_ids_and_kip360_bump() -> None:
    async def go() -> None:
        m = RPCProducerIdManager(1, ScriptedController(), lambda: 5)
        first = await handle_init_producer_id(m, InitProducerIdRequest(transactional_id=None))
        assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 0, 0)
        bump = await handle_init_producer_id(m, InitProducerIdRequest(transactional_id=None, producer_id=0,
                                                                      producer_epoch=0))
        assert (bump.error_code, bump.producer_id, bump.producer_epoch) == (0, 1, 0)  # a new id, as Kafka
        await m.close()
    run(go)


def test_init_producer_id_without_waiting_answers_load_in_progress() -> None:
    async def go() -> None:
        m = RPCProducerIdManager(1, ScriptedController(delay_s=0.05), lambda: 5)
        resp = await handle_init_producer_id(m, InitProducerIdRequest(transactional_id=None), wait_for_block_ms=0)
        assert Errors(resp.error_code) == Errors.COORDINATOR_LOAD_IN_PROGRESS and resp.producer_id == -1
        resp = await handle_init_producer_id(m, InitProducerIdRequest(transactional_id=None), wait_for_block_ms=1000)
        assert (resp.error_code, resp.producer_id) == (0, 0)
        await m.close()
    run(go)


# ----------------------------------------------------------------- against a real controller, over TCP
def test_init_producer_id_against_a_real_controller(tmp_path: Any) -> None:
    paths = cluster_properties(str(tmp_path), 1)

    async def go() -> None:
        node = KraftNode.from_config(NodeConfig.from_file(paths[0]), controller=True)
        await node.start()
        channels: list[ControllerChannel] = []
        managers: list[RPCProducerIdManager] = []
        server: KafkaServer | None = None
        client: KafkaConnection | None = None
        try:
            await until_controller_active(node)

            def channel(name: str) -> ControllerChannel:
                ch = ControllerChannel(node._active_controller_address, client_id=name, retry_backoff_ms=20,
                                       request_timeout_ms=5000)
                channels.append(ch)
                return ch

            reg7 = await channel("reg-7").send(broker_registration(7, CLUSTER_ID), timeout_s=10)
            reg8 = await channel("reg-8").send(broker_registration(8, CLUSTER_ID), timeout_s=10)
            assert reg7.error_code == 0 and reg8.error_code == 0
            m7 = RPCProducerIdManager(7, channel("broker-7-pids"), lambda: reg7.broker_epoch, request_timeout_s=10)
            m8 = RPCProducerIdManager(8, channel("broker-8-pids"), lambda: reg8.broker_epoch, request_timeout_s=10)
            stale = RPCProducerIdManager(9, channel("broker-9-pids"), lambda: 1, request_timeout_s=10)
            managers += [m7, m8, stale]

            server = KafkaServer("127.0.0.1", 0, {int(ApiKeys.INIT_PRODUCER_ID): init_producer_id_handler(m7)},
                                 listener="PLAINTEXT", listener_type="broker")
            port = await server.start()
            client = await KafkaConnection.open("127.0.0.1", port)
            ids = []
            for _ in range(PRODUCER_ID_BLOCK_SIZE + 5):
                resp = await client.request(InitProducerIdRequest(transactional_id=None), 4, timeout=10)
                assert resp.error_code == 0, Errors(resp.error_code).name
                assert resp.producer_epoch == 0
                ids.append(resp.producer_id)
            assert len(set(ids)) == len(ids)
            assert ids == sorted(ids)
            assert ids[PRODUCER_ID_BLOCK_SIZE] - ids[0] >= PRODUCER_ID_BLOCK_SIZE  # crossed into the next block

            other = [await m8.generate_producer_id_waiting(10) for _ in range(3)]
            assert not set(other) & set(ids)
            assert all(i % PRODUCER_ID_BLOCK_SIZE == 0 for i in (ids[0], other[0]))

            # a broker the controller does not know: STALE_BROKER_EPOCH, backoff, never an id
            with pytest.raises(ProducerIdUnavailableError):
                await stale.generate_producer_id_waiting(0.5)
            assert stale.failed_responses >= 1

            txn = await client.request(InitProducerIdRequest(transactional_id="tx-1", transaction_timeout_ms=60000),
                                       4, timeout=10)
            assert Errors(txn.error_code) == Errors.NOT_COORDINATOR
        finally:
            if client is not None:
                await client.close()
            if server is not None:
                await server.close()
            for m in managers:
                await m.close()
            for ch in channels:
                await ch.close()
            await node.close()
    run(go, 90)
