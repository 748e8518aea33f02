"""Topic creation in the controller (issue 22 target: >= 200k partitions/s end to end), in
process: ``ReplicationControlManager.create_topics`` (validation, placement, ISRs, records)
and the replay of what it wrote (TopicRecords, then each topic's PartitionRecords).

    python benchmarks/bench_topic_creation.py [--topics 1000] [--partitions 100] [--rf 3]
        [--brokers 100] [--racks 3] [--topics-per-request 99] [--replay bulk|records]
        [--gc on|off|freeze] [--runs 3] [--json F]

The workload: ``--brokers`` registered and unfenced brokers in ``--racks`` racks (one log
directory each), then ``--topics`` topics of ``--partitions`` partitions and ``--rf``
replicas, created ``--topics-per-request`` at a time (99 x 100 partitions + 99 TopicRecords =
9,999 records: the most one request may write, MAX_RECORDS_PER_USER_OP), each result replayed
before the next request, as the controller does.  ``--replay bulk`` replays a request's
PartitionRecords with ``replay_partitions`` (one index write per broker and directory per
topic); ``records`` replays them one ``replay`` call each (the QuorumController's per-record
path today).  The placer is Kafka's StripedReplicaPlacer (its columnar ``place_columns``).

``--gc``: ``on`` (default) leaves Python's collector as a node runs it; ``off`` disables it
for the timed part (what-if: the collector's share); ``freeze`` calls ``gc.freeze()`` after
each request's replay (what-if: a controller that moves its committed state out of the
collector's generations, as ``kraft-server-start`` does once at start).

What is timed: ``create`` (create_topics calls), ``replay`` (replays), ``total`` (both); a
partition count over ``total`` is the end-to-end rate.  Not timed: registering the brokers,
encoding the records (the Raft append's cost, measured by the controller benchmarks).
Every result is checked (no error) and the state at the end (every partition present, its
ISR its replicas, every index entry counted).

Prints one JSON document: setup (load before/after, commit, implementations), each run, the
medians.
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _support import code_version, emit_json  # noqa: E402

from kraft_node.metadata.controller.cluster_control import ClusterControlManager  # noqa: E402
from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager  # noqa: E402
from kraft_node.metadata.controller.features import FeatureControlManager  # noqa: E402
from kraft_node.metadata.controller.replication_control import ReplicationControlManager  # noqa: E402
from kraft_node.metadata.placement import JavaRandom, StripedReplicaPlacer  # noqa: E402
from kraft_node.metadata.versions import MetadataVersion  # noqa: E402
from kraft_node.protocol.generated.broker_heartbeat import BrokerHeartbeatRequest  # noqa: E402
from kraft_node.protocol.generated.create_topics import CreateTopicsRequest  # noqa: E402
from kraft_storage import accel  # noqa: E402
from kraft_storage.messages import metadata as m  # noqa: E402
from kraft_storage.messages.runtime import Uuid  # noqa: E402
from kraft_storage.timeline import IMPLEMENTATION, SnapshotRegistry  # noqa: E402


class Cluster:
    """The managers on one registry, brokers registered and unfenced."""

    def __init__(self, brokers: int, racks: int, seed: int) -> None:
        self.registry = SnapshotRegistry()
        self.features = FeatureControlManager(self.registry)
        self.features.replay(m.FeatureLevelRecord(name="metadata.version",
                                                  feature_level=MetadataVersion.latest_production().feature_level))
        self.configs = ConfigurationControlManager(self.registry)
        self.cluster = ClusterControlManager(self.registry, cluster_id="fPZv1VBsRFmnlRvmGcOW9w",
                                             feature_control=self.features, clock_ms=lambda: 0)
        self.replication = ReplicationControlManager(
            self.registry, self.configs, cluster_control=self.cluster, feature_control=self.features,
            replica_placer=StripedReplicaPlacer(JavaRandom(seed)), default_replication_factor=3)
        self.cluster.activate()
        self.offset = 0
        for b in range(brokers):
            self.cluster.replay(m.RegisterBrokerRecord(
                broker_id=b, broker_epoch=100 + b, rack=f"rack{b % racks}", log_dirs=[Uuid.random()],
                end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="localhost", port=9092 + b,
                                                                  security_protocol=0)], fenced=True), self.offset)
            self.offset += 1
        for b in range(brokers):
            result = self.cluster.process_broker_heartbeat(BrokerHeartbeatRequest(
                broker_id=b, broker_epoch=100 + b, current_metadata_offset=self.offset, want_fence=False,
                want_shut_down=False))
            for r in result.records:
                self.cluster.replay(r.message, self.offset)
                self.offset += 1
        assert self.cluster.active_broker_count() == brokers


def requests(topics: int, partitions: int, rf: int, per_request: int, run: int) -> list[Any]:
    T = CreateTopicsRequest
    names = [f"run{run}-topic-{i:05d}" for i in range(topics)]
    return [T(topics=[T.CreatableTopic(name=n, num_partitions=partitions, replication_factor=rf)
                      for n in names[i:i + per_request]], timeout_ms=60000)
            for i in range(0, topics, per_request)]


def replay_bulk(rc: ReplicationControlManager, records: list[Any]) -> None:
    run: list[Any] = []
    for r in records:
        msg = r.message
        if msg.API_KEY == m.PartitionRecord.API_KEY:
            run.append(msg)
            continue
        if run:
            rc.replay_partitions(run)
            run = []
        rc.replay(msg, -1)
    if run:
        rc.replay_partitions(run)


def replay_records(rc: ReplicationControlManager, records: list[Any]) -> None:
    for r in records:
        rc.replay(r.message, -1)


def one_run(args: argparse.Namespace, run: int) -> dict[str, Any]:
    cluster = Cluster(args.brokers, args.racks, seed=run)
    rc = cluster.replication
    reqs = requests(args.topics, args.partitions, args.rf, args.topics_per_request, run)
    replay = replay_bulk if args.replay == "bulk" else replay_records
    create_s = replay_s = 0.0
    n_records = 0
    gc.collect()
    if args.gc == "off":
        gc.disable()
    for req in reqs:
        t0 = time.perf_counter()
        result = rc.create_topics(req)
        t1 = time.perf_counter()
        replay(rc, result.records)
        t2 = time.perf_counter()
        create_s += t1 - t0
        replay_s += t2 - t1
        n_records += len(result.records)
        bad = [t for t in result.response.topics if t.error_code != 0]
        assert not bad, bad[:3]
        if args.gc == "freeze":
            gc.freeze()
    gc.enable()
    gc.unfreeze()
    partitions = args.topics * args.partitions
    # the state is what was asked for
    topics = rc.topics()
    assert len(topics) == args.topics
    count = sum(rc.topic(t).num_partitions() for t in topics.values())
    assert count == partitions, count
    isr_entries = sum(len(ps) for tm in rc.brokers_to_isrs.to_dict().values() for ps in tm.values())
    assert isr_entries == partitions * args.rf, isr_entries
    total = create_s + replay_s
    return {"create_s": round(create_s, 4), "replay_s": round(replay_s, 4), "total_s": round(total, 4),
            "records": n_records, "partitions": partitions,
            "partitions_per_s": round(partitions / total), "create_partitions_per_s": round(partitions / create_s),
            "replay_partitions_per_s": round(partitions / replay_s)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=100)
    p.add_argument("--rf", type=int, default=3)
    p.add_argument("--brokers", type=int, default=100)
    p.add_argument("--racks", type=int, default=3)
    p.add_argument("--topics-per-request", type=int, default=99)
    p.add_argument("--replay", choices=("bulk", "records"), default="bulk")
    p.add_argument("--gc", choices=("on", "off", "freeze"), default="on")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--json")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    runs = [one_run(args, i) for i in range(args.runs)]
    doc = {
        "benchmark": "topic_creation",
        "setup": {"args": vars(args), "load_before": load_before, "load_after": os.getloadavg(),
                  "python": platform.python_version(), "timeline": IMPLEMENTATION,
                  "fallbacks": dict(accel.FALLBACKS), "code": code_version()},
        "runs": runs,
        "median": {k: statistics.median(r[k] for r in runs)
                   for k in ("create_s", "replay_s", "total_s", "partitions_per_s", "create_partitions_per_s",
                             "replay_partitions_per_s")},
    }
    emit_json(doc, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
