"""Metadata logs written by the tests: a ``__cluster_metadata-0`` directory from record batches, and a
random but *valid* cluster history to fill it (for time travel, ``diff`` and the shell).

Why not ``kraft-gen-metadata-log``: its BrokerRegistrationChangeRecords carry the offset of the
change as the broker epoch (the registration's epoch is what Kafka's ClusterDelta checks), so no
image replays its logs; and it has no removals, ACLs, quotas, SCRAM, tokens or transactions,
which is exactly what ``diff`` must get right.  :func:`random_history` keeps a model of the
cluster so every record it writes is one a controller could have written at that point.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image.metadata_image import image_records
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.control import (
    ControlRecordType,
    LeaderChangeMessage,
    encode_control_key,
    encode_control_value,
)
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import build_batch
from kraft_storage.snapshot import RecordsSnapshotWriter, SnapshotId

T0 = 1_700_000_000_000


@dataclass
class Batch:
    """One batch of the log: metadata records, or (``control``) one LeaderChange."""
    records: list[ApiMessageAndVersion] = field(default_factory=list)
    control: bool = False
    epoch: int = 1


def leader_change(epoch: int) -> Batch:
    return Batch([], True, epoch)


def v(message: object, version: int = 0) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, version)


def write_log(directory: Path, batches: Sequence[Batch], *, base_offset: int = 0,
              records_per_segment: int | None = None) -> Path:
    """``directory/__cluster_metadata-0/<base>.log`` segments holding ``batches`` from ``base_offset``
    (a new segment after ``records_per_segment`` records, at a batch boundary)."""
    part = directory / "__cluster_metadata-0"
    part.mkdir(parents=True, exist_ok=True)
    offset = base_offset
    seg_start = base_offset
    chunks: list[bytes] = []

    def flush() -> None:
        if chunks:
            (part / f"{seg_start:020d}.log").write_bytes(b"".join(chunks))
            chunks.clear()

    for i, b in enumerate(batches):
        if records_per_segment is not None and offset - seg_start >= records_per_segment:
            flush()
            seg_start = offset
        ts = T0 + offset
        if b.control:
            key = encode_control_key(ControlRecordType.LEADER_CHANGE)
            body = LeaderChangeMessage(version=0, leader_id=1, voters=[], granting_voters=[])
            value = encode_control_value(ControlRecordType.LEADER_CHANGE, body)
            chunks.append(build_batch([(key, value)], base_offset=offset, partition_leader_epoch=b.epoch,
                                      is_control=True, timestamp=ts))
            offset += 1
            continue
        assert b.records, f"batch {i} is empty"
        chunks.append(build_batch([(None, r.encode()) for r in b.records], base_offset=offset,
                                  partition_leader_epoch=b.epoch, timestamp=ts))
        offset += len(b.records)
    flush()
    return part


def write_snapshot(directory: Path, image: object, end_offset: int, epoch: int, time_ms: int) -> Path:
    """The image written as ``<end_offset>-<epoch>.checkpoint`` in ``directory``."""
    writer = RecordsSnapshotWriter.create(directory, SnapshotId(end_offset, epoch),
                                          last_contained_log_timestamp=time_ms, clock=lambda: time_ms)
    with writer:
        writer.append_framed([r.encode() for r in image_records(image)])  # type: ignore[arg-type]
        writer.freeze()
    return directory / f"{end_offset:020d}-{epoch:010d}.checkpoint"


def bootstrap(mv: MetadataVersion = MetadataVersion.IBP_3_7_IV4) -> list[ApiMessageAndVersion]:
    return [v(m.FeatureLevelRecord(name="metadata.version", feature_level=mv.feature_level))]


def _endpoint(cls: type, port: int) -> object:
    return cls(name="PLAINTEXT", host="localhost", port=port, security_protocol=0)


class _Model:
    """The cluster as the records so far left it (what the next record may refer to)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.brokers: dict[int, int] = {}           # id -> epoch
        self.fenced: dict[int, bool] = {}
        self.controllers: set[int] = set()
        self.topics: dict[Uuid, tuple[str, int]] = {}  # id -> (name, partitions)
        self.isr: dict[tuple[Uuid, int], list[int]] = {}
        self.acls: set[Uuid] = set()
        self.quotas: set[tuple[str, str]] = set()
        self.scram: set[tuple[str, int]] = set()
        self.tokens: set[str] = set()
        self.configs: set[tuple[int, str, str]] = set()
        self.next_pid = 0
        self.serial = 0

    def uuid(self) -> Uuid:
        return Uuid(self.rng.getrandbits(128) | (1 << 100))

    def name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial}"


def _event(model: _Model, offset: int) -> list[ApiMessageAndVersion]:
    """The records of one random controller operation starting at ``offset`` (maybe none)."""
    rng = model.rng
    kind = rng.choice(["register", "register", "fence", "unregister", "controller", "topic", "topic", "change",
                       "change", "change", "remove", "config", "config", "acl", "quota", "pid", "scram", "token",
                       "feature", "noop"])
    if kind == "register":
        bid = rng.randrange(4)
        model.brokers[bid] = offset
        model.fenced[bid] = True
        return [v(m.RegisterBrokerRecord(
            broker_id=bid, incarnation_id=model.uuid(), broker_epoch=offset,
            end_points=[_endpoint(m.RegisterBrokerRecord.BrokerEndpoint, 9092 + bid)],
            features=[m.RegisterBrokerRecord.BrokerFeature(name="metadata.version", min_supported_version=1,
                                                           max_supported_version=21)],
            rack=rng.choice([None, "r1"]), fenced=True, log_dirs=[model.uuid()]), 3)]
    if kind == "fence" and model.brokers:
        bid = rng.choice(sorted(model.brokers))
        fenced = not model.fenced[bid]
        model.fenced[bid] = fenced
        return [v(m.BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=model.brokers[bid],
                                                   fenced=1 if fenced else -1), 1)]
    if kind == "unregister" and model.brokers:
        bid = rng.choice(sorted(model.brokers))
        epoch = model.brokers.pop(bid)
        return [v(m.UnregisterBrokerRecord(broker_id=bid, broker_epoch=epoch))]
    if kind == "controller":
        cid = rng.randrange(3000, 3003)
        model.controllers.add(cid)
        return [v(m.RegisterControllerRecord(
            controller_id=cid, incarnation_id=model.uuid(), zk_migration_ready=False,
            end_points=[_endpoint(m.RegisterControllerRecord.ControllerEndpoint, 9093)], features=[]))]
    if kind == "topic":
        live = {n for n, _ in model.topics.values()}
        name = rng.choice([n for n in ("alpha", "beta", "gamma", "delta") if n not in live] or [model.name("t")])
        tid = model.uuid()
        parts = rng.randrange(1, 4)
        model.topics[tid] = (name, parts)
        out = [v(m.TopicRecord(name=name, topic_id=tid))]
        for p in range(parts):
            replicas = rng.sample(range(4), 2)
            model.isr[(tid, p)] = list(replicas)
            out.append(v(m.PartitionRecord(partition_id=p, topic_id=tid, replicas=replicas, isr=list(replicas),
                                           leader=replicas[0], leader_epoch=0, partition_epoch=0,
                                           directories=[model.uuid(), model.uuid()]), 1))
        if rng.random() < 0.5:
            key = rng.choice(["retention.ms", "cleanup.policy"])
            model.configs.add((2, name, key))
            out.append(v(m.ConfigRecord(resource_type=2, resource_name=name, name=key, value=str(rng.randrange(9)))))
        return out
    if kind == "change" and model.topics:
        tid = rng.choice(sorted(model.topics, key=str))
        p = rng.randrange(model.topics[tid][1])
        isr = model.isr[(tid, p)]
        new_isr = isr[:1] if len(isr) > 1 else isr + [rng.choice([b for b in range(4) if b not in isr])]
        model.isr[(tid, p)] = new_isr
        return [v(m.PartitionChangeRecord(partition_id=p, topic_id=tid, isr=new_isr, leader=new_isr[0]), 1)]
    if kind == "remove" and model.topics:
        tid = rng.choice(sorted(model.topics, key=str))
        name, parts = model.topics.pop(tid)
        for p in range(parts):
            model.isr.pop((tid, p), None)
        model.configs = {c for c in model.configs if not (c[0] == 2 and c[1] == name)}
        return [v(m.RemoveTopicRecord(topic_id=tid))]
    if kind == "config":
        names = sorted({n for n, _ in model.topics.values()})
        target = rng.choice([(4, ""), (4, "1")] + [(2, n) for n in names])
        key = rng.choice(["retention.ms", "min.insync.replicas"])
        if (target[0], target[1], key) in model.configs and rng.random() < 0.4:
            model.configs.discard((target[0], target[1], key))
            return [v(m.ConfigRecord(resource_type=target[0], resource_name=target[1], name=key, value=None))]
        model.configs.add((target[0], target[1], key))
        return [v(m.ConfigRecord(resource_type=target[0], resource_name=target[1], name=key,
                                 value=str(rng.randrange(100))))]
    if kind == "acl":
        if model.acls and rng.random() < 0.4:
            acl_id = rng.choice(sorted(model.acls, key=str))
            model.acls.discard(acl_id)
            return [v(m.RemoveAccessControlEntryRecord(id=acl_id))]
        acl_id = model.uuid()
        model.acls.add(acl_id)
        return [v(m.AccessControlEntryRecord(id=acl_id, resource_type=2, resource_name=rng.choice(["a", "b"]),
                                             pattern_type=3, principal="User:alice", host="*", operation=3,
                                             permission_type=3))]
    if kind == "quota":
        entity = (rng.choice(["user", "client-id"]), rng.choice(["u1", "u2"]))
        data = [m.ClientQuotaRecord.EntityData(entity_type=entity[0], entity_name=entity[1])]
        if entity in model.quotas and rng.random() < 0.4:
            model.quotas.discard(entity)
            return [v(m.ClientQuotaRecord(entity=data, key="producer_byte_rate", value=0.0, remove=True))]
        model.quotas.add(entity)
        return [v(m.ClientQuotaRecord(entity=data, key="producer_byte_rate", value=float(rng.randrange(1, 10**8)),
                                      remove=False))]
    if kind == "pid":
        model.next_pid += 1000
        return [v(m.ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=model.next_pid))]
    if kind == "scram":
        key = (rng.choice(["alice", "bob"]), rng.choice([1, 2]))
        if key in model.scram and rng.random() < 0.4:
            model.scram.discard(key)
            return [v(m.RemoveUserScramCredentialRecord(name=key[0], mechanism=key[1]))]
        model.scram.add(key)
        return [v(m.UserScramCredentialRecord(name=key[0], mechanism=key[1], salt=rng.randbytes(8),
                                              stored_key=rng.randbytes(8), server_key=rng.randbytes(8),
                                              iterations=4096))]
    if kind == "token":
        if model.tokens and rng.random() < 0.4:
            token = rng.choice(sorted(model.tokens))
            model.tokens.discard(token)
            return [v(m.RemoveDelegationTokenRecord(token_id=token))]
        token = model.name("token")
        model.tokens.add(token)
        return [v(m.DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=["User:bob"],
                                          issue_timestamp=1, max_timestamp=2, expiration_timestamp=3,
                                          token_id=token))]
    if kind == "feature":
        return [v(m.FeatureLevelRecord(name="group.version", feature_level=rng.choice([0, 1])))]
    return [v(m.NoOpRecord())]


def random_history(seed: int, events: int = 200, *, transactions: bool = True) -> list[Batch]:
    """A valid history: a LeaderChange, the bootstrap (metadata.version), then ``events`` random
    operations, some inside transactions (ended, or aborted -- the model then forgets nothing,
    so an aborted transaction only ever holds records that were valid anyway), a leader change
    now and then (the epoch goes up)."""
    rng = random.Random(seed)
    model = _Model(rng)
    epoch = 1
    batches: list[Batch] = [leader_change(epoch), Batch(bootstrap(), False, epoch)]
    offset = 2
    for _ in range(events):
        r = rng.random()
        if r < 0.03:
            epoch += 1
            batches.append(leader_change(epoch))
            offset += 1
            continue
        if transactions and r < 0.10:
            # a transaction over a few batches; aborted ones hold only records that need no model
            # change (NoOps and ProducerIds ahead of the model), so the model stays true
            abort = rng.random() < 0.4
            batches.append(Batch([v(m.BeginTransactionRecord(name="t"))], False, epoch))
            offset += 1
            for _ in range(rng.randrange(1, 3)):
                if abort:
                    recs = [v(m.NoOpRecord()), v(m.ProducerIdsRecord(broker_id=1, broker_epoch=1,
                                                                     next_producer_id=10**9 + offset))]
                else:
                    recs = _event(model, offset) or [v(m.NoOpRecord())]
                batches.append(Batch(recs, False, epoch))
                offset += len(recs)
            end = m.AbortTransactionRecord(reason="test") if abort else m.EndTransactionRecord()
            batches.append(Batch([v(end)], False, epoch))
            offset += 1
            continue
        recs = _event(model, offset)
        if recs:
            batches.append(Batch(recs, False, epoch))
            offset += len(recs)
    return batches


def replayed(records: Iterable[ApiMessageAndVersion]) -> list[object]:
    return [r.message for r in records]
