"""Synthetic clusters as metadata images, for the broker's tests and benchmarks.

Why in the package: the benchmark (``benchmarks/bench_broker_metadata.py``) and the tests need
the same cluster shapes, and both must build them the way a broker does -- from records, through
the loader's paths -- not by constructing images by hand: :func:`sample_records` writes the
records a controller would (RegisterBrokerRecord, FeatureLevelRecord, TopicRecord,
PartitionRecord, ConfigRecord), :func:`sample_image` folds them like a snapshot load
(``bulk_delta``: partitions in columnar blocks, as on a restarted broker) or one record at a
time (``bulk=False``: partitions as registrations, as after live deltas).

Layout: brokers ``0 .. brokers - 1`` each with listener ``listener`` on 127.0.0.1:9092+id and
rack ``rack-<id % 3>``; topic ``t<i>`` (zero-padded) with ``partitions`` partitions, replicas
``(p + i + k) % brokers`` for k < rf, leader the first, ISR all, epochs 0.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.bulk import bulk_delta
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

__all__ = ["sample_records", "sample_image", "broker_record", "topic_uuid", "apply_records"]

_PLAINTEXT = 0


def topic_uuid(i: int) -> Uuid:
    """A fixed, valid topic id for topic number ``i`` (never zero or a reserved id)."""
    return Uuid((0x5EED << 96) | (i + 1))


def broker_record(broker_id: int, *, listener: str = "PLAINTEXT", fenced: bool = False, port: int | None = None,
                  rack: str | None = None, extra_listeners: Sequence[str] = ()) -> Any:
    eps = [m.RegisterBrokerRecord.BrokerEndpoint(name=n, host="127.0.0.1", port=(port or 9092 + broker_id) + i,
                                                 security_protocol=_PLAINTEXT)
           for i, n in enumerate([listener, *extra_listeners])]
    return m.RegisterBrokerRecord(
        broker_id=broker_id, incarnation_id=Uuid((0xB0 << 96) | (broker_id + 1)),
        broker_epoch=100 + broker_id, end_points=eps, rack=rack, fenced=fenced)


def sample_records(*, brokers: int = 3, topics: int = 10, partitions: int = 3, rf: int = 3,
                   listener: str = "PLAINTEXT", fenced: Sequence[int] = ()) -> list[ApiMessageAndVersion]:
    mv = MetadataVersion.LATEST_PRODUCTION
    out = [ApiMessageAndVersion(m.FeatureLevelRecord(name="metadata.version", feature_level=mv.feature_level), 0)]
    for b in range(brokers):
        out.append(ApiMessageAndVersion(broker_record(b, listener=listener, fenced=b in fenced,
                                                      rack=f"rack-{b % 3}"), mv.register_broker_record_version()))
    width = len(str(max(topics - 1, 0)))
    pv = mv.partition_record_version()
    for i in range(topics):
        tid = topic_uuid(i)
        out.append(ApiMessageAndVersion(m.TopicRecord(name=f"t{i:0{width}d}", topic_id=tid), 0))
        for p in range(partitions):
            replicas = [(p + i + k) % brokers for k in range(min(rf, brokers))]
            out.append(ApiMessageAndVersion(m.PartitionRecord(
                partition_id=p, topic_id=tid, replicas=replicas, isr=replicas, leader=replicas[0],
                leader_epoch=0, partition_epoch=0), pv))
    return out


def apply_records(image: MetadataImage, records: Sequence[Any], offset: int | None = None) -> MetadataImage:
    """``image`` with ``records`` (messages or ApiMessageAndVersion) replayed one at a time."""
    delta = MetadataDelta(image)
    for r in records:
        delta.replay(r.message if isinstance(r, ApiMessageAndVersion) else r)
    last = image.provenance.last_contained_offset + len(records) if offset is None else offset
    return delta.apply(MetadataProvenance(last, 1, 0))


def sample_image(*, bulk: bool = True, **shape: Any) -> MetadataImage:
    """The image of :func:`sample_records` (``shape``: its keywords)."""
    records = sample_records(**shape)
    if not bulk:
        return apply_records(MetadataImage.EMPTY, records, len(records) - 1)
    delta = bulk_delta([r.encode() for r in records], MetadataImage.EMPTY, snapshot=True)
    return delta.apply(MetadataProvenance(len(records) - 1, 1, 0))
