"""Three controllers as processes (``kraft-server-start``, 127.0.0.1), 100 brokers simulated by
one asyncio client speaking the wire protocol, and kill -9 of the active controller.

The brokers do what Kafka's BrokerLifecycleManager does: find the active controller, register
(BrokerRegistration), then heartbeat every ``HEARTBEAT_MS`` reporting the committed metadata
offset (the high watermark DescribeQuorum shows), following NOT_CONTROLLER and lost
connections to whichever controller is active now.

What must hold across the failover:

* every broker is registered and unfenced before the kill, and every heartbeat answered after
  it says "not fenced" -- none is fenced wrongly, though no heartbeat reached any controller
  while the new one was being elected (the new active controller starts every registered
  broker with a fresh session, and the heartbeats continue);
* the registrations survive with the same broker epochs: every broker keeps heartbeating
  with the epoch its registration gave it, and the new controller accepts it (a lost or
  re-numbered registration answers STALE_BROKER_EPOCH);
* afterwards the surviving logs hold exactly one RegisterBrokerRecord per broker, with that
  epoch, and no record fencing any broker;
* topics created before the kill are on the new controller (creating them again is
  TOPIC_ALREADY_EXISTS), it creates more, and each topic is in the logs once with its
  partitions (issue 22).

Every wait is bounded; processes are killed in ``finally``.
"""
from __future__ import annotations

import asyncio
import time

import pytest
from support.cluster import Node, read_log
from support.raft import CLUSTER_ID, cluster_properties

from kraft_node.metadata.versions import supported_features
from kraft_node.network import KafkaConnection
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest
from kraft_node.protocol.generated.broker_registration import BrokerRegistrationRequest
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.server.tools import metadata_quorum
from kraft_storage.messages import metadata as m
from kraft_storage.messages.metadata import decode_metadata_record
from kraft_storage.messages.runtime import Uuid

pytestmark = pytest.mark.timeout(240)

BROKERS = 100
FIRST_BROKER_ID = 1000
SESSION_TIMEOUT_MS = 3000
HEARTBEAT_MS = 500
TOPICS, PARTITIONS = 20, 10
CONTROLLER_SETTINGS = {"broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                       "broker.heartbeat.interval.ms": str(HEARTBEAT_MS)}


class ActiveController:
    """Which controller is active: the Raft leader, as DescribeQuorum on each node says.
    Shared by the brokers, so a failover is looked up once, not 100 times."""

    def __init__(self, ports: dict[int, int]):
        self.ports = ports
        self.node: int | None = None
        self.high_watermark = 0
        self._lookup: asyncio.Task | None = None

    async def find(self, stale: int | None = None) -> int:
        """The active node id; ``stale``: the node the caller just failed with."""
        if self.node is not None and self.node != stale:
            return self.node
        if self._lookup is None or self._lookup.done():
            self.node = None
            self._lookup = asyncio.ensure_future(self._find())
        return await asyncio.shield(self._lookup)

    async def _find(self) -> int:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for nid, port in self.ports.items():
                if await self._describe(nid, port):
                    self.node = nid
                    return nid
            await asyncio.sleep(0.05)
        raise AssertionError("no active controller within 30 s")

    async def _describe(self, nid: int, port: int) -> bool:
        try:
            conn = await KafkaConnection.open("127.0.0.1", port, timeout=1)
        except OSError:
            return False
        try:
            q = await conn.request(metadata_quorum.describe_request(), 2, timeout=1)
            p = q.topics[0].partitions[0]
            if q.error_code == 0 and p.error_code == 0 and p.leader_id == nid:
                self.high_watermark = max(self.high_watermark, p.high_watermark)
                return True
            return False
        except Exception:
            return False
        finally:
            await conn.close()

    async def refresh_high_watermark(self) -> None:
        nid = self.node
        if nid is not None:
            await self._describe(nid, self.ports[nid])


class Broker:
    """One simulated broker: its own connection to the active controller, its registration
    (epoch) and what its heartbeats were answered."""

    def __init__(self, broker_id: int, active: ActiveController):
        self.id = broker_id
        self.active = active
        self.incarnation = Uuid.random()
        self.log_dir = Uuid.random()
        self.epoch = -1
        self.conn: KafkaConnection | None = None
        self.conn_node: int | None = None
        self.unfenced = False
        #: (monotonic time, error code, is_fenced, answering node) of every heartbeat answer
        self.answers: list[tuple[float, int, bool, int | None]] = []
        self.errors: dict[int, int] = {}

    async def call(self, request, version: int):
        """Send ``request`` to the active controller; retry on NOT_CONTROLLER and lost
        connections (what a broker's channel manager does).  Returns the answer."""
        stale = None
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            nid = await self.active.find(stale)
            try:
                if self.conn is None or self.conn_node != nid or not self.conn.connected:
                    if self.conn is not None:
                        await self.conn.close()
                    self.conn = await KafkaConnection.open("127.0.0.1", self.active.ports[nid], timeout=2)
                    self.conn_node = nid
                resp = await self.conn.request(request, version, timeout=5)
            except (OSError, ConnectionError, TimeoutError):
                self.errors[-2] = self.errors.get(-2, 0) + 1
                stale = nid
                await asyncio.sleep(0.05)
                continue
            code = getattr(resp, "error_code", None)
            if code is None:  # CreateTopics: per-topic codes (NOT_CONTROLLER gives it to every one)
                code = resp.topics[0].error_code if resp.topics else 0
            if code == Errors.NOT_CONTROLLER:
                self.errors[code] = self.errors.get(code, 0) + 1
                stale = nid
                await asyncio.sleep(0.05)
                continue
            return resp
        raise AssertionError(f"broker {self.id}: no answer within 40 s")

    async def register(self) -> None:
        R = BrokerRegistrationRequest
        req = R(broker_id=self.id, cluster_id=CLUSTER_ID, incarnation_id=self.incarnation,
                listeners=[R.Listener(name="PLAINTEXT", host="127.0.0.1", port=9092, security_protocol=0)],
                features=[R.Feature(name=n, min_supported_version=a, max_supported_version=b)
                          for n, (a, b) in sorted(supported_features().items())],
                rack=None, log_dirs=[self.log_dir])
        resp = await self.call(req, 4)
        assert resp.error_code == 0, (self.id, Errors(resp.error_code).name)
        self.epoch = resp.broker_epoch

    async def heartbeat(self) -> None:
        req = BrokerHeartbeatRequest(broker_id=self.id, broker_epoch=self.epoch,
                                     current_metadata_offset=max(0, self.active.high_watermark - 1),
                                     want_fence=False, want_shut_down=False)
        resp = await self.call(req, 1)
        self.answers.append((time.monotonic(), resp.error_code, resp.is_fenced, self.conn_node))
        if resp.error_code == 0 and not resp.is_fenced:
            self.unfenced = True

    async def heartbeat_forever(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            t0 = time.monotonic()
            await self.heartbeat()
            try:
                await asyncio.wait_for(stop.wait(), max(0.0, HEARTBEAT_MS / 1000 - (time.monotonic() - t0)))
            except asyncio.TimeoutError:
                pass

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


async def _create_topics(broker: "Broker", names: list[str]) -> dict[str, Errors]:
    """CreateTopics (v7) of ``names`` (PARTITIONS partitions, RF 3) through the active
    controller, as an admin client would send it; {name: error}."""
    T = CreateTopicsRequest
    req = T(topics=[T.CreatableTopic(name=n, num_partitions=PARTITIONS, replication_factor=3) for n in names],
            timeout_ms=20_000)
    resp = await broker.call(req, 7)
    return {t.name: Errors(t.error_code) for t in resp.topics}


async def _wait(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        await asyncio.sleep(0.05)


def test_brokers_stay_registered_and_unfenced_across_a_kill_9_of_the_active_controller(tmp_path):
    paths = cluster_properties(str(tmp_path), 3, extra=CONTROLLER_SETTINGS)
    nodes = [Node(p, writer=False) for p in paths]
    by_id = {n.id: n for n in nodes}
    report: dict = {}
    try:
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_serving()

        async def scenario():
            active = ActiveController({n.id: n.port for n in nodes})
            brokers = [Broker(FIRST_BROKER_ID + i, active) for i in range(BROKERS)]
            stop = asyncio.Event()
            try:
                first = await active.find()
                await asyncio.gather(*(b.register() for b in brokers))
                assert len({b.epoch for b in brokers}) == BROKERS  # each a new registration offset
                epochs = {b.id: b.epoch for b in brokers}
                await active.refresh_high_watermark()
                beating = [asyncio.ensure_future(b.heartbeat_forever(stop)) for b in brokers]

                async def follow_hwm():
                    while not stop.is_set():
                        await active.refresh_high_watermark()
                        await asyncio.sleep(0.2)
                hwm = asyncio.ensure_future(follow_hwm())
                await _wait(lambda: all(b.unfenced for b in brokers), 30, "every broker unfenced")
                unfenced_at = time.monotonic()
                # topics before the kill (issue 22): 20 x 10 partitions, RF 3, committed
                created = await _create_topics(brokers[0], [f"before-{i}" for i in range(TOPICS)])
                assert created == {f"before-{i}": Errors.NONE for i in range(TOPICS)}
                await asyncio.sleep(HEARTBEAT_MS / 1000 * 2)

                killed = by_id[first]
                t_kill = time.monotonic()
                await asyncio.get_running_loop().run_in_executor(None, killed.kill9)
                new = await active.find(stale=first)
                assert new != first
                # the heartbeats go on through the failover; after it, every broker is answered
                # by the new controller, with the epoch it registered with
                await _wait(lambda: all(any(n == new and code == 0 for _t, code, _f, n in b.answers) for b in brokers),
                            30, "every broker heard from the new active controller")
                failover_s = max(min(t for t, code, _f, n in b.answers if n == new and code == 0)
                                 for b in brokers) - t_kill
                # the new controller has the topics (a second creation is TOPIC_ALREADY_EXISTS)
                # and creates more
                again = await _create_topics(brokers[1], [f"before-{i}" for i in range(TOPICS)])
                assert set(again.values()) == {Errors.TOPIC_ALREADY_EXISTS}, again
                created = await _create_topics(brokers[1], [f"after-{i}" for i in range(TOPICS)])
                assert set(created.values()) == {Errors.NONE}, created
                # two more session timeouts: a broker fenced by the new controller would show it
                await asyncio.sleep(2 * SESSION_TIMEOUT_MS / 1000)
                stop.set()
                t_end = time.monotonic()
                await asyncio.gather(*beating, hwm)
                report.update(first=first, new=new, failover_s=failover_s, epochs=epochs)
                for b in brokers:
                    assert b.epoch == epochs[b.id]
                    after = [(code, fenced) for t, code, fenced, _n in b.answers if t > unfenced_at]
                    bad = [(Errors(code).name, fenced) for code, fenced in after if code != 0 or fenced]
                    assert not bad, f"broker {b.id} after it was unfenced: {bad[:5]}"
                    # the heartbeats went on: from the new controller's first answer, no session
                    # window without contact (else a fence would have been right), up to the end
                    seen = [t for t, code, _f, n in b.answers if n == new and code == 0]
                    gaps = [later - earlier for earlier, later in zip(seen, seen[1:])]
                    assert seen[-1] > t_end - SESSION_TIMEOUT_MS / 1000, (b.id, t_end - seen[-1])
                    assert max(gaps, default=0) < SESSION_TIMEOUT_MS / 1000, (b.id, max(gaps))
            finally:
                stop.set()
                for b in brokers:
                    await b.close()

        asyncio.run(asyncio.wait_for(scenario(), 150))
        survivors = [n for n in nodes if n.alive]
        assert len(survivors) == 2
        for n in survivors:
            assert n.stop() == 0, n.stderr()[-3000:]
        for n in survivors:
            registered: dict[int, list[int]] = {}
            fenced = []
            topics: dict[str, int] = {}
            partitions: dict[object, int] = {}
            for off, value in sorted(read_log(n).items()):
                msg = decode_metadata_record(value, off)[2]
                if isinstance(msg, m.TopicRecord):
                    topics[msg.name] = topics.get(msg.name, 0) + 1
                elif isinstance(msg, m.PartitionRecord):
                    partitions[msg.topic_id] = partitions.get(msg.topic_id, 0) + 1
                elif isinstance(msg, m.RegisterBrokerRecord):
                    registered.setdefault(msg.broker_id, []).append(msg.broker_epoch)
                elif isinstance(msg, m.BrokerRegistrationChangeRecord) and msg.fenced == 1:
                    fenced.append((off, msg.broker_id))
                elif isinstance(msg, m.FenceBrokerRecord):
                    fenced.append((off, msg.id))
            assert registered == {bid: [e] for bid, e in report["epochs"].items()}, f"node {n.id}"
            assert fenced == [], f"node {n.id} fenced brokers: {fenced[:5]}"
            # each topic written once, with its partitions, whichever controller wrote it
            assert topics == {f"{w}-{i}": 1 for w in ("before", "after") for i in range(TOPICS)}, f"node {n.id}"
            assert sorted(partitions.values()) == [PARTITIONS] * (2 * TOPICS), f"node {n.id}"
            assert "fatal" not in n.stderr().lower(), n.stderr()[-3000:]
        print(f"\n{BROKERS} brokers: active controller {report['first']} killed, {report['new']} took over; "
              f"every broker heard from it within {report['failover_s']:.2f} s, none fenced")
    finally:
        for n in nodes:
            n.kill9()
