"""CPU of one acks=all replication cycle on the leader, in process (no sockets, no other process).

    python benchmarks/bench_acks_all_cycle.py [--cycles 3000] [--records 30] [--size 100] [--profile]

Why: on the shared 2-CPU machine the wall-clock latency of acks=all is mostly waiting for a
CPU (the leader, two followers, the controller and the load generator share two cores, so every
hop of the cycle queues behind the others).  What the broker code controls is the CPU each hop
costs, and that is what this measures, free of the machine's noise: the leader's share of a
cycle, from the Produce request's bytes to the Produce answer's bytes:

1. decode the Produce frame (v9, one 30-record batch of 100 B values, as librdkafka sends it),
   validate and append it, park it in the produce purgatory;
2. the two followers' parked Fetches (v15) are retried (the loop's queued wake-up) and their
   answers encoded;
3. each follower's next Fetch frame (at the new log end) is decoded and served: the follower
   state moves, the high watermark moves with the second one and the produce is answered (and
   encoded); the follower fetches park again.

Prints CPU microseconds per cycle (``time.thread_time``), the median and the minimum of
``--rounds`` rounds (on the shared machine the minimum is the steadier figure: thread time grows
when the other hyperthread is busy), and with ``--profile`` the top of a cProfile of the last
round.  The cycle includes encoding the followers' two Fetch requests (the bench's own, ~5%).
"""
from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from kraft_node.broker.log_manager import LogManager  # noqa: E402
from kraft_node.broker.metadata_cache import KRaftMetadataCache  # noqa: E402
from kraft_node.broker.partition_apis import PartitionApis  # noqa: E402
from kraft_node.broker.replica_manager import ReplicaManager  # noqa: E402
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage  # noqa: E402
from kraft_node.metadata.image.provenance import MetadataProvenance  # noqa: E402
from kraft_node.network.server import DEFERRED, RequestContext  # noqa: E402
from kraft_node.protocol.framing import decode_request, encode_request, encode_response  # noqa: E402
from kraft_node.protocol.generated.fetch import FetchRequest  # noqa: E402
from kraft_node.protocol.generated.produce import ProduceRequest  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402
from kraft_storage.record.builder import build_batch  # noqa: E402

TOPIC = "lat"
TOPIC_ID = Uuid(uuid.UUID("7f8e3b2a-1c4d-4e5f-8a9b-0c1d2e3f4a5b").bytes)
LEADER, FOLLOWERS = 1, (2, 3)
PRODUCE_VERSION, FETCH_VERSION = 9, 15


class _Ctx(RequestContext):
    """Keeps the encoded answer, as the network layer would write it."""

    def __init__(self, header: Any, version: int, sink: list[Any]) -> None:
        super().__init__(header=header, api_version=version, peer=("127.0.0.1", 1), listener="PLAINTEXT")
        self.sink = sink

    def respond(self, response: Any) -> None:
        self.sink.append(encode_response(response, self.api_version, self.header.correlation_id, chunks=True))


def _produce_frame(records: int, size: int, corr: int) -> bytes:
    value = os.urandom(size)
    batch = build_batch([(None, value)] * records, timestamp=int(time.time() * 1000))
    R = ProduceRequest
    body = R(acks=-1, timeout_ms=30_000, topic_data=[R.TopicProduceData(
        name=TOPIC, partition_data=[R.PartitionProduceData(index=0, records=batch)])])
    return encode_request(body, PRODUCE_VERSION, corr, "rdkafka")[4:]


def _fetch_frame(replica: int, offset: int, epoch: int, corr: int) -> bytes:
    R = FetchRequest
    body = R(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=10 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, replica_state=R.ReplicaState(replica_id=replica, replica_epoch=1),
             topics=[R.FetchTopic(topic=TOPIC, topic_id=TOPIC_ID, partitions=[R.FetchPartition(
                 partition=0, current_leader_epoch=0, fetch_offset=offset, last_fetched_epoch=epoch,
                 log_start_offset=0, partition_max_bytes=1 << 20)])])
    return encode_request(body, FETCH_VERSION, corr, f"ReplicaFetcherThread-0-{LEADER}")[4:]


async def _run(args: argparse.Namespace, base: str) -> list[float]:
    props = {"log.segment.delete.delay.ms": "0"}
    logs = LogManager([base], broker_props=props)
    logs.startup()
    rm = ReplicaManager(LEADER, logs, props=props)
    delta = MetadataDelta(MetadataImage.EMPTY)
    delta.replay(m.TopicRecord(name=TOPIC, topic_id=TOPIC_ID))
    delta.replay(m.PartitionRecord(partition_id=0, topic_id=TOPIC_ID, replicas=[1, 2, 3], isr=[1, 2, 3],
                                   removing_replicas=[], adding_replicas=[], leader=LEADER, leader_epoch=0,
                                   partition_epoch=0))
    image = delta.apply(MetadataProvenance(2, 1, 0, True))
    rm.apply_delta(delta, image)
    apis = PartitionApis(LEADER, KRaftMetadataCache(lambda: image), rm, props=props)
    part = rm.get_partition(_tp())
    assert part is not None and part.is_leader
    sink: list[Any] = []
    corr = 0

    def serve(frame: bytes) -> None:
        header, body = decode_request(frame)
        ctx = _Ctx(header, header.request_api_version, sink)
        handler = apis.handle_produce if header.request_api_key == 0 else apis.handle_fetch
        res = handler(ctx, body)
        if res is not DEFERRED:
            ctx.respond(res)

    async def loop_turn() -> None:
        await asyncio.sleep(0)

    # the followers start caught up and parked
    for f in FOLLOWERS:
        corr += 1
        serve(_fetch_frame(f, part.log_end_offset, 0, corr))
    await loop_turn()
    produce = [_produce_frame(args.records, args.size, i) for i in range(8)]
    rounds: list[float] = []
    prof = cProfile.Profile() if args.profile else None
    for r in range(args.rounds):
        if prof is not None and r == args.rounds - 1:
            prof.enable()
        t0 = time.thread_time()
        for i in range(args.cycles):
            sink.clear()
            serve(produce[i % len(produce)])
            await loop_turn()  # the queued follower fetches run and answer
            end = part.log_end_offset
            for f in FOLLOWERS:
                corr += 1
                serve(_fetch_frame(f, end, 0, corr))
            await loop_turn()
            if len(sink) != 3:  # two fetch answers and the produce answer
                raise SystemExit(f"cycle {i}: {len(sink)} answers, expected 3 (hw {part.high_watermark}, leo {end})")
        rounds.append((time.thread_time() - t0) / args.cycles * 1e6)
        if prof is not None and r == args.rounds - 1:
            prof.disable()
    await rm.shutdown()
    await logs.shutdown()
    if prof is not None:
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
    return rounds


def _tp() -> Any:
    from kraft_node.metadata.image.topics import TopicPartition
    return TopicPartition(TOPIC, 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--records", type=int, default=30)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kraft-acks-all-cycle-") as base:
        rounds = asyncio.run(_run(args, base))
    print(f"leader CPU per acks=all cycle ({args.records} x {args.size} B, 2 followers): "
          f"median {statistics.median(rounds):.1f} us, min {min(rounds):.1f} "
          f"(rounds: {', '.join(f'{x:.1f}' for x in rounds)}); "
          f"load {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
