"""A small, deterministic example metadata log, built with kraft's own encoders.

``kraft-dump-log --example`` writes it to a temporary
``__cluster_metadata-0/00000000000000000000.log`` and dumps it, so a fresh
install has something real to look at with no Kafka around.  The records
(feature levels, a broker registration, topics and partitions, no-ops) are
typed messages from the generated codecs, framed as Kafka frames metadata
records, in record batch v2 -- the same path the controller will use.
"""
from __future__ import annotations

import os

from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import encode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import build_batch

BASE_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def example_records() -> list[list]:
    """Batches of (message, version) pairs, as a controller would commit them."""
    topics = [("orders", 3), ("payments", 2), ("audit", 1)]
    batches: list[list] = [[(m.FeatureLevelRecord(name="metadata.version", feature_level=29), 0),
                            (m.FeatureLevelRecord(name="kraft.version", feature_level=0), 0)]]
    batches.append([(m.RegisterBrokerRecord(broker_id=1, incarnation_id=Uuid(0x1234), broker_epoch=2,
                                            rack=None, fenced=True), 3)])
    for i, (name, parts) in enumerate(topics):
        tid = Uuid(0xABCDEF00 + i)
        batch = [(m.TopicRecord(name=name, topic_id=tid), 0)]
        for p in range(parts):
            batch.append((m.PartitionRecord(partition_id=p, topic_id=tid, replicas=[1], isr=[1],
                                            removing_replicas=[], adding_replicas=[], leader=1,
                                            leader_epoch=0, partition_epoch=0,
                                            directories=[Uuid(0x77)]), 2))
        batches.append(batch)
    batches.append([(m.NoOpRecord(), 0)])
    return batches


def example_log_bytes() -> bytes:
    out = bytearray()
    offset = 0
    for i, batch in enumerate(example_records()):
        values = [(None, encode_metadata_record(msg, ver), BASE_TIME_MS + 500 * i) for msg, ver in batch]
        out += build_batch(values, base_offset=offset, partition_leader_epoch=1)
        offset += len(values)
    return bytes(out)


def write_example_log(directory: str) -> str:
    """Write the example segment under ``directory``; return its path."""
    d = os.path.join(directory, "__cluster_metadata-0")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "00000000000000000000.log")
    with open(path, "wb") as f:
        f.write(example_log_bytes())
    return path
