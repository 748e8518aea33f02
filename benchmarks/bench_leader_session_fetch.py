"""The leader's CPU per idle follower session fetch, in process (no sockets, no other brokers).

Why: ``bench_follower_fetch_idle.py`` measures whole processes over a window, which mixes the
leader's cost per fetch with how many fetches the followers manage to send (a faster leader
answers sooner and gets more).  This isolates the per-fetch cost: a leader (broker 1) of
``--partitions`` partitions, replicas [1, 2, 3], one record each, both followers caught up with
sessions open; then rounds of one incremental fetch per follower (nothing changed: empty
request), each parked for ``--max-wait-ms`` and answered at its expiry.  Prints the median main
thread CPU (``time.thread_time``) per fetch over ``--rounds`` rounds.

Usage: ``python benchmarks/bench_leader_session_fetch.py --partitions 10000``; compare code
versions by running it from a worktree of each (``PYTHONPATH=<tree>``), alternating.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
import uuid
from typing import Any

from kraft_node.broker.fetch_session import FetchSessionCache
from kraft_node.broker.log_manager import LogManager
from kraft_node.broker.metadata_cache import KRaftMetadataCache
from kraft_node.broker.partition_apis import PartitionApis
from kraft_node.broker.replica_manager import ReplicaManager
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.network.server import DEFERRED, RequestContext
from kraft_node.protocol.generated.fetch import FetchRequest
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record.builder import build_batch

TOPIC_ID = Uuid(uuid.UUID("0b7a3c1e-2d4f-4a6b-9c8d-1e2f3a4b5c6d").bytes)
VERSION = 15


class Answer(RequestContext):
    def __init__(self) -> None:
        super().__init__(header=None, api_version=VERSION, peer=("127.0.0.1", 1), listener="PLAINTEXT")
        self.response: Any = None

    def respond(self, response: Any) -> None:
        self.response = response


def _fetch(replica: int, session_id: int, epoch: int, offsets: dict[int, int] | None, max_wait_ms: int) -> Any:
    R = FetchRequest
    topics = [] if offsets is None else [R.FetchTopic(topic_id=TOPIC_ID, partitions=[
        R.FetchPartition(partition=i, fetch_offset=o, last_fetched_epoch=0, current_leader_epoch=0,
                         log_start_offset=0, partition_max_bytes=1 << 20) for i, o in offsets.items()])]
    return R(replica_id=-1, replica_state=R.ReplicaState(replica_id=replica, replica_epoch=100 + replica),
             max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, session_id=session_id, session_epoch=epoch,
             topics=topics, forgotten_topics_data=[])


async def main(n: int, rounds: int, max_wait_ms: int) -> None:
    d = tempfile.mkdtemp(prefix="leader-session-fetch-")
    now = [1_000_000]
    props = {"log.segment.delete.delay.ms": "0"}
    logs = LogManager([d], broker_props=props, clock=lambda: now[0])
    logs.startup()
    rm = ReplicaManager(1, logs, props=props, clock_ms=lambda: now[0])
    rm.alter_partition = lambda p, isr: None
    image = [MetadataImage.EMPTY]
    apis = PartitionApis(1, KRaftMetadataCache(lambda: image[0]), rm, props=props, clock_ms=lambda: now[0])
    apis.fetch_sessions = FetchSessionCache(10, clock_ms=lambda: now[0], rng=random.Random(1))
    delta = MetadataDelta(image[0])
    for b in (1, 2, 3):
        delta.replay(m.RegisterBrokerRecord(broker_id=b, broker_epoch=100 + b, incarnation_id=Uuid(b + 100),
                                            end_points=[], features=[], rack=None, fenced=False, log_dirs=[]))
    delta.replay(m.TopicRecord(name="t", topic_id=TOPIC_ID))
    for i in range(n):
        delta.replay(m.PartitionRecord(partition_id=i, topic_id=TOPIC_ID, replicas=[1, 2, 3], isr=[1, 2, 3],
                                       removing_replicas=[], adding_replicas=[], leader=1, leader_epoch=0,
                                       partition_epoch=0))
    image[0] = delta.apply(MetadataProvenance(1, 1, 0, True))
    rm.apply_delta(delta, image[0])
    tps = [TopicPartition("t", i) for i in range(n)]
    while sum(rm.get_partition(tp) is not None for tp in tps) < n:
        await asyncio.sleep(0.1)
    for tp in tps:
        rm.get_partition(tp).append_records_to_leader(build_batch([(b"k", b"v")]), 1, 1)
    sessions = {}
    for f in (2, 3):  # full fetches from 0 (the records), then the positions at the log end
        resp = apis.handle_fetch(Answer(), _fetch(f, 0, 0, {i: 0 for i in range(n)}, 0))
        sid = resp.session_id
        resp = apis.handle_fetch(Answer(), _fetch(f, sid, 1, {i: 1 for i in range(n)}, 0))
        assert resp.error_code == 0
        sessions[f] = [sid, 2]
    per_fetch = []
    for rnd in range(rounds + 1):  # (round 0: follower 2's session learns the high watermarks 3's fetch moved)
        t = time.thread_time()
        answers = []
        for f in (2, 3):
            sid, epoch = sessions[f]
            a = Answer()
            r = apis.handle_fetch(a, _fetch(f, sid, epoch, None, max_wait_ms))
            if r is not DEFERRED:
                a.response = r
            answers.append(a)
            sessions[f][1] += 1
        while any(a.response is None for a in answers):
            await asyncio.sleep(0.001)
        if rnd:
            per_fetch.append((time.thread_time() - t) / 2)
            bad = [a.response for a in answers if a.response.error_code != 0 or a.response.responses]
            assert not bad, f"round {rnd}: an idle fetch answered {str(bad[0])[:300]}"
    print(f"partitions {n}, {rounds} rounds, max_wait_ms {max_wait_ms}: median CPU per idle follower fetch "
          f"{statistics.median(per_fetch) * 1000:.1f} ms (min {min(per_fetch) * 1000:.1f}); load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    await rm.shutdown()
    await logs.shutdown()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--partitions", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--max-wait-ms", type=int, default=5)
    args = p.parse_args()
    asyncio.run(main(args.partitions, args.rounds, args.max_wait_ms))
