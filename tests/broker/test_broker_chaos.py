"""Multi-process chaos with brokers (issue 24, Tests), bounded in time.

Three controllers and three brokers run as ``kraft-server-start`` processes on 127.0.0.1.  For
``CHAOS_SECONDS`` a seeded loop kills (SIGKILL) or stops (SIGTERM) one node at a time -- a broker
or a controller, the active controller included -- and starts it again, while a client thread
creates topics and deletes some of them through whichever broker answers, retrying each request
until it gets a definite answer.  Afterwards, with every node running again:

* every topic whose creation was acknowledged and whose deletion was not is in every broker's
  Metadata, once (one name, one topic id), and no acknowledged deletion came back;
* every broker's Metadata equals the active controller's image (topic ids, partitions, leaders,
  replicas, ISR; the alive brokers);
* no live broker stays fenced;
* then every node is stopped with SIGTERM (exit 0) and the images in all six metadata logs are
  equal at the highest offset they all hold (``MetadataHistory``, what ``kraft-metadata-shell
  --directory D --at-offset N`` shows).

The client speaks the wire protocol with kraft's own connection and the generated codecs
(CreateTopics v7, DeleteTopics v6), so every answer's error code is seen as sent.
"""
from __future__ import annotations

import asyncio
import random
import threading
import time

import pytest
from support.broker_cluster import BrokerCluster, ServerProcess, metadata, run, wait_until

from kraft_node.metadata.image.time_travel import MetadataHistory
from kraft_node.network import KafkaConnection
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest
from kraft_node.protocol.generated.delete_topics import DeleteTopicsRequest

CHAOS_SECONDS = 40.0
SEED = 24
#: each request is bounded; a retried one may have been applied by an attempt whose answer was lost
REQUEST_TIMEOUT_S = 6.0


class TopicClient:
    """Creates ``chaos-<n>`` topics (2 partitions, RF 2: placeable while one broker is down) and
    deletes about a third of them, one request at a time, in a thread with its own loop."""

    def __init__(self, ports: list[int], seed: int):
        self.ports = ports
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.created: set[str] = set()   # acknowledged creations
        self.deleted: set[str] = set()   # acknowledged deletions
        self.anomalies: list[str] = []   # requests that never got a definite answer
        self.redone: list[str] = []      # acknowledged as "already done" (see _decide)
        self.requests = 0
        self.errors: dict[str, int] = {}
        self.thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)

    def _note(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    async def _send(self, body, version: int):
        """One request to a random broker; None when no answer came (closed, refused, timed out)."""
        port = self.rng.choice(self.ports)
        self.requests += 1
        try:
            conn = await KafkaConnection.open("127.0.0.1", port, timeout=2)
        except (OSError, asyncio.TimeoutError) as exc:
            self._note(type(exc).__name__)
            return None
        try:
            return await conn.request(body, version, timeout=REQUEST_TIMEOUT_S)
        except Exception as exc:  # the broker died under the request, or it timed out
            self._note(type(exc).__name__)
            return None
        finally:
            await conn.close()

    async def _decide(self, name: str, make, version: int, done_code: int, result_of) -> bool:
        """Send until a definite answer; True if acknowledged.  ``done_code``: the code that means
        "already done" (TOPIC_ALREADY_EXISTS for a create, UNKNOWN_TOPIC_OR_PARTITION for a delete).
        It is an acknowledgement too: the names are this client's alone, so only an earlier attempt of
        the same request can have done it -- ours, whose answer was lost, or the broker's own resend
        after its controller connection broke (Kafka's controller channel resends too, and a Raft
        leader's uncommitted append may be committed by its successor).  Counted in ``redone``.
        A broker's resend never starts after the request's ``timeout_ms`` (5 s, less than
        ``REQUEST_TIMEOUT_S``: :mod:`kraft_node.broker.forwarding`, "The client's deadline"), so a
        topic deleted after its creation was acknowledged cannot be created again by a late resend."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            resp = await self._send(make(), version)
            code = None if resp is None else result_of(resp)
            if code == 0:
                return True
            if code == done_code:
                self.redone.append(name)
                return True
            if code is not None:  # REQUEST_TIMED_OUT, NOT_CONTROLLER, INVALID_REPLICATION_FACTOR while fenced...
                self._note(Errors(code).name)
            await asyncio.sleep(0.05)
        self.anomalies.append(f"{name}: no definite answer within 60 s")
        return False

    async def _main(self) -> None:
        CT, DT = CreateTopicsRequest, DeleteTopicsRequest
        n = 0
        while not self.stop.is_set():
            if self.created - self.deleted and self.rng.random() < 0.35:
                name = self.rng.choice(sorted(self.created - self.deleted))
                ok = await self._decide(
                    name, lambda name=name: DT(topics=[DT.DeleteTopicState(name=name)], timeout_ms=5000), 6,
                    Errors.UNKNOWN_TOPIC_OR_PARTITION.value, lambda r: r.responses[0].error_code)
                if ok:
                    self.deleted.add(name)
            else:
                n += 1
                name = f"chaos-{n}"
                ok = await self._decide(
                    name, lambda name=name: CT(topics=[CT.CreatableTopic(name=name, num_partitions=2,
                                                                         replication_factor=2)], timeout_ms=5000), 7,
                    Errors.TOPIC_ALREADY_EXISTS.value, lambda r: r.topics[0].error_code)
                if ok:
                    self.created.add(name)


def metadata_view(resp) -> dict:
    """A Metadata answer as comparable data: alive brokers, and per topic name its id and partitions."""
    topics = {}
    for t in resp.topics:
        assert t.name not in topics, f"topic {t.name} listed twice"
        topics[t.name] = (str(t.topic_id), {p.partition_index: (p.leader_id, tuple(p.replica_nodes), tuple(p.isr_nodes))
                                            for p in t.partitions})
    return {"brokers": sorted(b.node_id for b in resp.brokers), "topics": topics}


def image_view(image) -> dict:
    topics = {}
    for name, t in image.topics.topics_by_name.items():
        topics[name] = (str(t.topic_id), {i: (p.leader, tuple(p.replicas), tuple(p.isr))
                                          for i, p in t.partitions.items()})
    alive = sorted(b for b, reg in image.cluster.brokers.items() if not reg.fenced)
    return {"brokers": alive, "topics": topics}


def chaos_round(c: BrokerCluster, rng: random.Random, events: list[str]) -> None:
    """Kill or stop one node (the active controller a third of the time), then start it again."""
    pick = rng.random()
    if pick < 0.33:
        victim: ServerProcess = c.active_controller(timeout=30)
    elif pick < 0.5:
        victim = rng.choice(c.controllers)
    else:
        victim = rng.choice(c.brokers)
    how = "kill -9" if rng.random() < 0.6 else "SIGTERM"
    if how == "kill -9":
        victim.kill9()
    else:
        code = victim.stop(30)
        assert code == 0, f"{victim} exited {code} after SIGTERM\n{victim.stderr_tail()}"
    events.append(f"{how} {victim}")
    time.sleep(rng.uniform(0.2, 2.5))  # down for a while: sessions expire, elections happen
    victim.start()
    victim.wait_started(90)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_chaos_brokers_and_controllers_killed_while_topics_come_and_go(tmp_path):
    rng = random.Random(SEED)
    c = BrokerCluster(str(tmp_path), controllers=3, brokers=3, shutdown_timeout_s=3.0)
    events: list[str] = []
    client = TopicClient([b.port for b in c.brokers], SEED)
    try:
        c.start(timeout=90)
        client.thread.start()
        t_end = time.monotonic() + CHAOS_SECONDS
        while time.monotonic() < t_end:
            chaos_round(c, rng, events)
            time.sleep(rng.uniform(0.2, 1.0))
        client.stop.set()
        client.thread.join(90)
        assert not client.thread.is_alive(), "the client did not finish its last request in time"
        for n in c.nodes.values():
            assert n.alive, f"{n} is not running after the chaos\n{n.stderr_tail()}"
        summary = (f"{len(events)} rounds {events}; {client.requests} requests, {len(client.created)} created, "
                   f"{len(client.deleted)} deleted, {len(client.redone)} already done, errors {client.errors}")
        print("\nchaos: " + summary)
        assert not client.anomalies, (client.anomalies, summary)
        assert len(events) >= 4 and len(client.created) >= 20, summary

        expected = client.created - client.deleted
        ctl_dir = c.active_controller(timeout=30).metadata_dir

        def converged():
            want = image_view(MetadataHistory.open(ctl_dir).load().image)
            views = [metadata_view(run(metadata(b.port))) for b in c.brokers]
            return all(v == want for v in views) and want

        # every broker answers what the controller's image holds (topics, leaders, ISR, alive brokers)
        want = wait_until(converged, 30, "every broker's Metadata equal to the controller's image", interval=0.2)
        assert want["brokers"] == [101, 102, 103], f"a live broker stays fenced: {want['brokers']}"
        names = set(want["topics"])
        assert expected <= names, f"acknowledged topics missing: {sorted(expected - names)[:10]}; {summary}"
        assert not names & client.deleted, f"deleted topics came back: {sorted(names & client.deleted)[:10]}"
        assert len({tid for tid, _ in want["topics"].values()}) == len(names), "one topic id under two names"

        # stop everything (brokers first: their controlled shutdowns need the controllers)
        for n in c.brokers + c.controllers:
            assert n.stop(30) == 0, n.stderr_tail()
    finally:
        client.stop.set()
        c.close()

    histories = {n.id: MetadataHistory.open(n.metadata_dir) for n in c.nodes.values()}
    common = min(h.latest_offset() for h in histories.values())
    images = {nid: h.load(common).image for nid, h in histories.items()}
    reference = images[c.controllers[0].id]
    assert reference.offset > 0
    for nid, image in images.items():
        assert image == reference, f"node {nid}'s image at offset {common} differs from node {c.controllers[0].id}'s"
    final = image_view(reference)
    assert (client.created - client.deleted) <= set(final["topics"])
