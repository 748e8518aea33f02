"""The replay side of the controller's topic, partition, config, ACL, SCRAM, delegation-token
and client-quota state (issue 21): Kafka-written logs and snapshots replay into it, it reads
at registry epochs and reverts, its snapshot records rebuild it, and it refuses the records
Kafka refuses, with Kafka's messages.

Scenarios re-stated from Kafka's ReplicationControlManagerTest, PartitionRegistrationTest,
BrokersToIsrsTest, ConfigurationControlManagerTest, AclControlManagerTest and
ClientQuotaControlManagerTest, plus the Kafka fixtures (../shared/kafka-fixtures): every
.log and .checkpoint is replayed and compared with an independent fold of what
``kraft-dump-log --json`` prints for it.
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from conftest import MISSING_FIXTURES, fixture_params

from kraft_node.metadata.controller.configuration_control import (
    ConfigResource,
    ConfigResourceType,
    ConfigurationControlManager,
)
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.replication_control import (
    LEADER_FLAG,
    NO_LEADER,
    NO_LEADER_CHANGE,
    BrokersToIsrs,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
    ReplicationControlManager,
    TopicIdPartition,
    UnwritableMetadataError,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.security_control import (
    AclControlManager,
    AclOperation,
    ClientQuotaControlManager,
    ClientQuotaEntity,
    DelegationTokenControlManager,
    ScramControlManager,
    ScramMechanism,
    StandardAcl,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_record_columns, scan_batches
from kraft_storage.record.constants import CONTROL_MASK
from kraft_storage.snapshot import RecordsSnapshotReader
from kraft_storage.timeline import LATEST_EPOCH, SnapshotRegistry
from kraft_storage.tools import dump_log

FIXTURE_FILES = fixture_params("*.log", "*.checkpoint")
LOG_37 = "kafka-3.7.0-combined-single-node/__cluster_metadata-0/00000000000000000000.log"
SNAP_36 = "kafka-3.6.0-cp7.6.0-snapshot/__cluster_metadata-0/00000000000000014926-0000000001.checkpoint"
SNAP_42 = "kafka-4.2-mv29-combined-single-node/__cluster_metadata-0/00000000000000046533-0000000004.checkpoint"

#: Record types other managers replay (cluster, features, producer ids, the controller itself).
OTHER_MANAGERS = {m.RegisterBrokerRecord, m.UnregisterBrokerRecord, m.FenceBrokerRecord, m.UnfenceBrokerRecord,
                  m.BrokerRegistrationChangeRecord, m.RegisterControllerRecord, m.FeatureLevelRecord,
                  m.ProducerIdsRecord, m.NoOpRecord, m.ZkMigrationStateRecord, m.BeginTransactionRecord,
                  m.EndTransactionRecord, m.AbortTransactionRecord}


def mv(level: int) -> MetadataVersion:
    return MetadataVersion.from_feature_level(level)


def _id(s: str) -> Uuid:
    return Uuid.from_string(s)


FOO = _id("Ktv3YkMQRe-MId4VkkrMyw")
BAR = _id("8auUWq8zQqe_99H_m2LAmw")
DIR1, DIR2, DIR3 = _id("FbRuu7CeQtq5YFreEzg16g"), _id("4rtHTelWSSStAFMODOg3cQ"), _id("Id1WXzHURROilVxZWJNZlw")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

def metadata_records(path: Path) -> list[tuple[int, Any]]:
    """(offset, message) of every metadata record of a segment or checkpoint, control
    batches skipped, through the storage layer's public batch codec."""
    data = path.read_bytes()
    headers = scan_batches(data, source=str(path)).headers
    headers = headers[(headers["attributes"] & CONTROL_MASK) == 0]
    cols = decode_record_columns(data, headers, source=str(path))
    out = []
    for i in range(len(cols)):
        offset = int(cols.offset[i])
        out.append((offset, decode_metadata_record(cols.value(i), offset)[2]))
    return out


class Controller:
    """The managers of this issue on one registry, wired as the QuorumController wires them."""

    def __init__(self, metadata_version: Any = None) -> None:
        r = self.registry = SnapshotRegistry()
        self.configs = ConfigurationControlManager(r)
        self.replication = ReplicationControlManager(r, self.configs, metadata_version=metadata_version)
        self.acls = AclControlManager(r)
        self.scram = ScramControlManager(r, metadata_version=metadata_version)
        self.tokens = DelegationTokenControlManager(r, metadata_version=metadata_version)
        self.quotas = ClientQuotaControlManager(r)
        self.managers = [self.replication, self.configs, self.acls, self.scram, self.tokens, self.quotas]
        self.replayers = {t.API_KEY: mgr.replay for mgr in self.managers for t in mgr.RECORD_TYPES}

    def replay(self, message: Any, offset: int) -> None:
        fn = self.replayers.get(message.API_KEY)
        if fn is None:
            assert type(message) in OTHER_MANAGERS, f"nobody replays {type(message).__name__}"
            return
        fn(message, offset)

    def replay_all(self, records: list[tuple[int, Any]], upto: int = LATEST_EPOCH) -> "Controller":
        for offset, message in records:
            if offset <= upto:
                self.replay(message, offset)
        return self

    def snapshot_records(self, epoch: int = LATEST_EPOCH, **kw: Any) -> list[ApiMessageAndVersion]:
        return [r for mgr in self.managers for r in mgr.snapshot_records(epoch, **kw)]

    def state(self, epoch: int = LATEST_EPOCH) -> dict[str, Any]:
        """Everything the managers hold, as plain comparable values."""
        rc = self.replication
        topics = rc.topics(epoch=epoch)
        return dict(
            topics=topics,
            partitions={(t, p): reg for t in topics.values() for p, reg in rc.partitions(t, epoch=epoch).items()},
            isr_index=rc.brokers_to_isrs.to_dict(epoch=epoch),
            elr_index=rc.brokers_to_elrs.to_dict(epoch=epoch),
            imbalanced=rc.imbalanced(epoch=epoch),
            reassigning={t: sorted(ps) for t, ps in rc.reassigning(epoch=epoch).items()},
            directories={d: s.to_set(epoch) for d, s in rc.directories_to_partitions.items(epoch)},
            collisions={n: s.to_set(epoch) for n, s in rc.topics_with_collision_chars.items(epoch)},
            configs=self.configs.all_configs(epoch=epoch),
            acls=self.acls.acls(epoch=epoch),
            existing_acls=self.acls.existing_acls.to_set(epoch),
            scram=self.scram.all_credentials(epoch=epoch),
            tokens=self.tokens.tokens(epoch=epoch),
            quotas=self.quotas.all_quotas(epoch=epoch),
        )


def check_invariants(ctl: Controller, epoch: int = LATEST_EPOCH) -> None:
    """Every derived index of ReplicationControlManager equals what its partitions imply."""
    s = ctl.state(epoch)
    rc = ctl.replication
    for name, topic_id in s["topics"].items():
        assert rc.topic_name(topic_id, epoch=epoch) == name
    assert len(rc.topics_by_id.to_dict(epoch)) == len(s["topics"])
    isr: dict[int, dict[Uuid, set[int]]] = {}
    elr: dict[int, dict[Uuid, set[int]]] = {}
    imbalanced, reassigning, dirs = set(), {}, {}
    for (t, p), reg in s["partitions"].items():
        members = list(reg.isr) + ([NO_LEADER] if reg.leader == NO_LEADER else [])
        for b in members:
            isr.setdefault(b, {}).setdefault(t, set()).add(p | LEADER_FLAG if b == reg.leader else p)
        for b in reg.elr:
            elr.setdefault(b, {}).setdefault(t, set()).add(p)
        if reg.leader != (reg.replicas[0] if reg.replicas else NO_LEADER):
            imbalanced.add(TopicIdPartition(t, p))
        if reg.removing_replicas or reg.adding_replicas:
            reassigning.setdefault(t, []).append(p)
        for d in reg.directories:
            if not DirectoryId.reserved(d):
                dirs.setdefault(d, set()).add(TopicIdPartition(t, p))
    assert s["isr_index"] == {b: {t: frozenset(ps) for t, ps in tm.items()} for b, tm in isr.items()}
    assert s["elr_index"] == {b: {t: frozenset(ps) for t, ps in tm.items()} for b, tm in elr.items()}
    assert s["imbalanced"] == imbalanced
    assert s["reassigning"] == {t: sorted(ps) for t, ps in reassigning.items()}
    assert s["directories"] == dirs
    collisions: dict[str, set[str]] = {}
    for name in s["topics"]:
        if "." in name or "_" in name:
            collisions.setdefault(name.replace(".", "_"), set()).add(name)
    assert s["collisions"] == collisions


def dump_model(path: Path) -> tuple[dict[str, str], dict[tuple[str, int], dict[str, Any]], dict]:
    """What ``kraft-dump-log --json`` shows, folded by the rules of the record schemas alone
    (topics by name, partitions by (topic id, partition), configs by resource): a model
    independent of the managers, in the dump's own JSON terms."""
    out, err = io.StringIO(), io.StringIO()
    assert dump_log.dump_file(str(path), True, out, err) == 0, err.getvalue()
    topics: dict[str, str] = {}
    parts: dict[tuple[str, int], dict[str, Any]] = {}
    configs: dict[tuple[int, str], dict[str, str]] = {}
    for line in out.getvalue().splitlines():
        for rec in json.loads(line)["records"]:
            md = rec.get("metadata")
            if md is None:
                continue
            kind, d = md["type"], md["data"]
            if kind == "TopicRecord":
                topics[d["Name"]] = d["TopicId"]
            elif kind == "RemoveTopicRecord":
                name = next(n for n, i in topics.items() if i == d["TopicId"])
                del topics[name]
                configs.pop((2, name), None)
                parts = {k: v for k, v in parts.items() if k[0] != d["TopicId"]}
            elif kind == "PartitionRecord":
                dirs = d.get("Directories") or []
                parts[(d["TopicId"], d["PartitionId"])] = dict(
                    replicas=d["Replicas"], isr=d["Isr"], removing=d["RemovingReplicas"], adding=d["AddingReplicas"],
                    leader=d["Leader"], lrs=d["LeaderRecoveryState"], leader_epoch=d["LeaderEpoch"],
                    partition_epoch=d["PartitionEpoch"],
                    directories=dirs or [str(DirectoryId.MIGRATING)] * len(d["Replicas"]),
                    elr=d.get("EligibleLeaderReplicas") or [], last_known_elr=d.get("LastKnownElr") or [])
            elif kind == "PartitionChangeRecord":
                p = parts[(d["TopicId"], d["PartitionId"])]
                for field, key in (("isr", "Isr"), ("replicas", "Replicas"), ("removing", "RemovingReplicas"),
                                   ("adding", "AddingReplicas"), ("directories", "Directories"),
                                   ("elr", "EligibleLeaderReplicas"), ("last_known_elr", "LastKnownElr")):
                    if d.get(key) is not None:
                        p[field] = d[key]
                if d["Leader"] != -2:
                    p["leader"], p["leader_epoch"] = d["Leader"], p["leader_epoch"] + 1
                if d["LeaderRecoveryState"] != -1:
                    p["lrs"] = d["LeaderRecoveryState"]
                p["partition_epoch"] += 1
            elif kind == "ConfigRecord":
                c = configs.setdefault((d["ResourceType"], d["ResourceName"]), {})
                if d["Value"] is None:
                    c.pop(d["Name"], None)
                else:
                    c[d["Name"]] = d["Value"]
    return topics, parts, {k: v for k, v in configs.items() if v}


def as_dump(reg: PartitionRegistration) -> dict[str, Any]:
    return dict(replicas=list(reg.replicas), isr=list(reg.isr), removing=list(reg.removing_replicas),
                adding=list(reg.adding_replicas), leader=reg.leader, lrs=int(reg.leader_recovery_state),
                leader_epoch=reg.leader_epoch, partition_epoch=reg.partition_epoch,
                directories=[str(d) for d in reg.directories], elr=list(reg.elr),
                last_known_elr=list(reg.last_known_elr))


def fixture_id(p: Any) -> str:
    return p if p == MISSING_FIXTURES else "/".join(Path(p).parts[-3:])


# -- record builders ------------------------------------------------------------------

def topic(name: str, topic_id: Uuid) -> Any:
    return m.TopicRecord(name=name, topic_id=topic_id)


def partition(topic_id: Uuid, pid: int, replicas: list[int], isr: list[int] | None = None, leader: int | None = None,
              **kw: Any) -> Any:
    isr = replicas if isr is None else isr
    fields: dict[str, Any] = dict(leader_recovery_state=0, leader_epoch=0, partition_epoch=0)
    fields.update(kw)
    return m.PartitionRecord(topic_id=topic_id, partition_id=pid, replicas=replicas, isr=isr,
                             leader=replicas[0] if leader is None else leader, **fields)


def change(topic_id: Uuid, pid: int, **kw: Any) -> Any:
    return m.PartitionChangeRecord(topic_id=topic_id, partition_id=pid, **kw)


def config(rtype: int, rname: str, name: str, value: str | None) -> Any:
    return m.ConfigRecord(resource_type=rtype, resource_name=rname, name=name, value=value)


def acl_record(acl_id: Uuid, resource: str = "foo", operation: int = 3, principal: str = "User:alice") -> Any:
    return m.AccessControlEntryRecord(id=acl_id, resource_type=2, resource_name=resource, pattern_type=3,
                                      principal=principal, host="*", operation=operation, permission_type=3)


def scram(name: str, mechanism: int = 1, iterations: int = 4096) -> Any:
    return m.UserScramCredentialRecord(name=name, mechanism=mechanism, salt=b"salt", stored_key=b"stored",
                                       server_key=b"server", iterations=iterations)


def token(token_id: str, expiration: int = 2000) -> Any:
    return m.DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=["User:bob"],
                                   issue_timestamp=1000, max_timestamp=5000, expiration_timestamp=expiration,
                                   token_id=token_id)


def quota(entity: dict[str, str | None], key: str, value: float = 0.0, remove: bool = False) -> Any:
    data = [m.ClientQuotaRecord.EntityData(entity_type=t, entity_name=n) for t, n in entity.items()]
    return m.ClientQuotaRecord(entity=data, key=key, value=value, remove=remove)


def rich_records() -> list[tuple[int, Any]]:
    """One of everything: a reassignment, ELR, a leaderless partition, an imbalanced one,
    colliding names, a removed topic, deleted keys, ACLs, SCRAM, tokens, quotas."""
    gone = _id("Oi7nvb8KQPyaGEqr4JtCRw")
    recs = [
        topic("foo.bar", FOO), topic("foo_bar", BAR), topic("gone", gone),
        partition(FOO, 0, [1, 2, 3], directories=[DIR1, DIR2, DIR3]),
        partition(FOO, 1, [2, 3, 1], isr=[2, 3], leader=3, directories=[DIR2, DIR3, DIR1]),
        partition(BAR, 0, [3, 1], eligible_leader_replicas=[1], last_known_elr=[2], isr=[3]),
        partition(gone, 0, [1]),
        change(FOO, 0, replicas=[1, 2, 3, 4], adding_replicas=[4], removing_replicas=[3],
               directories=[DIR1, DIR2, DIR3, DirectoryId.UNASSIGNED]),
        change(FOO, 1, leader=NO_LEADER, isr=[2]),
        m.RemoveTopicRecord(topic_id=gone),
        config(2, "foo.bar", "retention.ms", "1000"), config(2, "foo.bar", "cleanup.policy", "compact"),
        config(2, "foo.bar", "cleanup.policy", None), config(4, "", "min.insync.replicas", "2"),
        acl_record(_id("NSmkU0ieQuy2IHN59Ce0Bw")), acl_record(_id("Y8N9gnSKSLKKFCioX2laGA"), operation=4),
        scram("alice"), scram("alice", mechanism=2), scram("bob"),
        token("t1"), token("t2"), token("t1", expiration=3000),
        quota({"user": "alice"}, "producer_byte_rate", 1024.0),
        quota({"user": "alice", "client-id": None}, "consumer_byte_rate", 2048.0),
        quota({"client-id": None, "user": "alice"}, "request_percentage", 50.0),
    ]
    return list(enumerate(recs))


# ---------------------------------------------------------------------------
# The Kafka fixtures
# ---------------------------------------------------------------------------

def test_every_record_type_has_one_owner():
    """Ours and the other managers' record types partition the whole metadata schema, so
    no record of a Kafka log falls through the controller's replay switch."""
    ctl = Controller()
    ours = [t for mgr in ctl.managers for t in mgr.RECORD_TYPES]
    assert len(ours) == len(set(ours))
    assert not set(ours) & OTHER_MANAGERS
    assert set(ours) | OTHER_MANAGERS == set(m.METADATA_RECORD_TYPES.values())


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_id)
def test_fixture_replays_to_what_the_dump_shows(path):
    records = metadata_records(path)
    ctl = Controller().replay_all(records)
    topics, parts, configs = dump_model(path)
    rc = ctl.replication
    assert {n: str(i) for n, i in rc.topics().items()} == topics
    got = {(str(t), p): as_dump(reg) for (t, p), reg in ctl.state()["partitions"].items()}
    assert got == parts
    assert {(int(r.type), r.name): c for r, c in ctl.configs.all_configs().items()} == configs
    check_invariants(ctl)


@pytest.mark.usefixtures("fixtures_dir")
def test_kafka_37_log_content(fixtures_dir):
    """Anchors read off kraft-dump-log for the 3.7 log: five topics, 54 partitions that the
    broker's controlled shutdown left leaderless (leader -1, epochs bumped once), three
    topic configs of __consumer_offsets."""
    ctl = Controller().replay_all(metadata_records(fixtures_dir / LOG_37))
    rc = ctl.replication
    assert rc.topics() == {
        "__consumer_offsets": _id("gSnfpEbtQfSDpxM2lhEn9A"),
        "batch2.work.notification.SHR_PROD.persistence": _id("306J_pu4Tiybgh3rvq-3HQ"),
        "subscription.matching.SHR_PROD.persistence": _id("shr_LbhQRi20mLSqvU22rA"),
        "TestTopicPatient": _id("B3_HiNPgSQ6oxG9ZZ6ED5A"),
        "Retry.TestTopicPatient": _id("_g4of-T3Rq-jr09kDxtjFA"),
    }
    offsets = rc.topic(_id("gSnfpEbtQfSDpxM2lhEn9A"))
    assert offsets is not None and offsets.num_partitions() == 50
    every = [reg for t in rc.topics().values() for reg in rc.partitions(t).values()]
    assert len(every) == 54
    want = PartitionRegistration((1,), (_id("XHhkr4tkSsD900pOQ8pPfg"),), (1,), (), (), NO_LEADER,
                                 LeaderRecoveryState.RECOVERED, 1, 1)
    assert set(every) == {want}
    assert not rc.has_leaderships(1)
    assert len(rc.partitions_with_no_leader()) == 54 and len(rc.partitions_with_broker_in_isr(1)) == 54
    assert len(rc.imbalanced()) == 54
    assert ctl.configs.configs(ConfigResource.topic("__consumer_offsets")) == {
        "compression.type": "producer", "cleanup.policy": "compact", "segment.bytes": "104857600"}
    assert rc.partitions_in_directory(_id("XHhkr4tkSsD900pOQ8pPfg")) == {
        TopicIdPartition(t, p) for t in rc.topics().values() for p in rc.partitions(t)}


@pytest.mark.usefixtures("fixtures_dir")
def test_kafka_snapshot_content(fixtures_dir):
    ctl = Controller().replay_all(metadata_records(fixtures_dir / SNAP_36))
    s = ctl.state()
    assert len(s["topics"]) == 60 and len(s["partitions"]) == 148
    assert sum(len(c) for c in s["configs"].values()) == 375
    assert {r.type for r in s["configs"]} == {ConfigResourceType.TOPIC}
    assert ctl.replication.has_leaderships(1) and not ctl.replication.partitions_with_no_leader()
    # pre-3.7: no directories in the records, every replica MIGRATING, nothing indexed
    assert all(set(reg.directories) == {DirectoryId.MIGRATING} for reg in s["partitions"].values())
    assert s["directories"] == {}

    ctl = Controller().replay_all(metadata_records(fixtures_dir / SNAP_42))
    tid = _id("YNY5hm01SZ-bAGeCLAGqWA")
    assert ctl.replication.topics() == {"test-topic": tid}
    assert ctl.replication.partition(tid, 0) == PartitionRegistration(
        (1,), (_id("Teb3PFb009qvAZgMDEFH4g"),), (1,), (), (), 1, LeaderRecoveryState.RECOVERING, 2, 3)
    assert ctl.configs.configs(ConfigResource.broker("")) == {"min.insync.replicas": "1"}


@pytest.mark.usefixtures("fixtures_dir")
def test_kafka_37_log_reads_at_epochs_and_reverts(fixtures_dir):
    """State read at a registry snapshot equals a fresh replay of the records up to it, and
    reverting to it brings the current state back there."""
    records = metadata_records(fixtures_dir / LOG_37)
    marks = [415, 419, 470, 4871, 4874, records[-1][0]]
    ctl = Controller()
    for offset, message in records:
        ctl.replay(message, offset)
        if offset in marks:
            ctl.registry.get_or_create_snapshot(offset)
    prefix = {o: Controller().replay_all(records, upto=o).state() for o in marks}
    for o in marks:
        assert ctl.state(o) == prefix[o], o
        check_invariants(ctl, o)
    rc = ctl.replication
    assert rc.topics(epoch=415) == {} and rc.topic_id("__consumer_offsets", epoch=419) is not None
    assert len(rc.partitions_led_by_broker(1, epoch=4871)) == 54 and rc.has_leaderships(1, epoch=4871)
    assert len(rc.partitions_with_no_leader(epoch=4874)) == 3
    assert not rc.has_leaderships(1, epoch=marks[-1])
    for o in reversed(marks):
        ctl.registry.revert_to_snapshot(o)
        assert ctl.state() == prefix[o], o


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=fixture_id)
def test_snapshot_records_rebuild_the_state(path):
    ctl = Controller().replay_all(metadata_records(path))
    fresh = Controller().replay_all(list(enumerate(r.message for r in ctl.snapshot_records())))
    assert fresh.state() == ctl.state()


@pytest.mark.usefixtures("fixtures_dir")
@pytest.mark.parametrize("name, level, provide", [(SNAP_36, 14, int), (SNAP_42, 29, mv)])
def test_snapshot_records_match_kafkas_snapshot(fixtures_dir, name, level, provide):
    """Written at the metadata.version of a Kafka snapshot, our records for its topics,
    partitions and configs are Kafka's own, byte for byte (PartitionRecord v0 at 3.6-IV2,
    v2 at 4.2-IV1); only the order may differ (Kafka's follows its hash maps).  The
    provider may answer with a MetadataVersion or its feature level."""
    kafka = [msg for _o, msg in metadata_records(fixtures_dir / name)
             if msg.API_KEY in (m.TopicRecord.API_KEY, m.PartitionRecord.API_KEY, m.ConfigRecord.API_KEY)]
    ctl = Controller(metadata_version=lambda _epoch: provide(level)).replay_all(list(enumerate(kafka)))
    ours = ctl.snapshot_records()
    want_pr = 0 if level == 14 else 2
    assert {r.version for r in ours if r.message.API_KEY == m.PartitionRecord.API_KEY} == {want_pr}
    with RecordsSnapshotReader(fixtures_dir / name) as reader:
        values, offs = reader.values()
        kafka_values = sorted(bytes(values[offs[i]:offs[i + 1]]) for i in range(len(offs) - 1)
                              if decode_metadata_record(bytes(values[offs[i]:offs[i + 1]]), 0)[0] in (2, 3, 4))
    assert sorted(r.encode() for r in ours) == kafka_values


@pytest.mark.usefixtures("fixtures_dir")
def test_snapshot_records_at_an_older_epoch_and_metadata_version(fixtures_dir):
    records = metadata_records(fixtures_dir / LOG_37)
    ctl = Controller()
    for offset, message in records:
        ctl.replay(message, offset)
        if offset == 4871:
            ctl.registry.get_or_create_snapshot(offset)
    at = ctl.snapshot_records(4871, metadata_version=mv(19))  # 3.7-IV4, the log's own
    assert {r.version for r in at if r.message.API_KEY == m.PartitionRecord.API_KEY} == {1}
    fresh = Controller().replay_all(list(enumerate(r.message for r in at)))
    assert fresh.state() == Controller().replay_all(records, upto=4871).state()
    # real directories cannot be written before 3.7-IV2: Kafka's loss, not a silent drop
    with pytest.raises(UnwritableMetadataError) as e:
        ctl.snapshot_records(4871, metadata_version=mv(14))
    assert str(e.value) == ("Metadata has been lost because the following could not be represented in "
                            "metadata.version 3.6-IV2: the directory assignment state of one or more replicas")


# ---------------------------------------------------------------------------
# Synthetic state: everything the fixtures do not hold
# ---------------------------------------------------------------------------

def test_rich_state_invariants_snapshot_and_revert():
    records = rich_records()
    ctl = Controller()
    ctl.registry.get_or_create_snapshot(-1)
    for offset, message in records:
        ctl.replay(message, offset)
        ctl.registry.get_or_create_snapshot(offset)
        check_invariants(ctl)
    rc = ctl.replication
    assert rc.reassigning() == {FOO: (0,)}
    assert rc.partitions_with_broker_in_elr(1) == [TopicIdPartition(BAR, 0)]
    assert rc.partitions_with_no_leader() == [TopicIdPartition(FOO, 1)]
    assert rc.colliding_topic_names("foo.bar") == {"foo.bar", "foo_bar"}
    assert rc.partitions_in_directory(DIR3) == {TopicIdPartition(FOO, 0), TopicIdPartition(FOO, 1)}
    assert ctl.configs.configs(ConfigResource.topic("foo.bar")) == {"retention.ms": "1000"}
    assert ctl.tokens.token("t1").expiration_timestamp == 3000
    assert ctl.quotas.quotas(ClientQuotaEntity({"user": "alice", "client-id": None})) == {
        "consumer_byte_rate": 2048.0, "request_percentage": 50.0}
    for offset in range(len(records)):
        fresh = Controller().replay_all(list(enumerate(r.message for r in ctl.snapshot_records(offset))))
        assert fresh.state() == Controller().replay_all(records, upto=offset).state() == ctl.state(offset)
    for offset in reversed(range(-1, len(records))):
        ctl.registry.revert_to_snapshot(offset)
        assert ctl.state() == Controller().replay_all(records, upto=offset).state()
    assert ctl.state() == Controller().state()


def test_snapshot_records_are_deterministic():
    """Two replicas that replayed the same records write the same snapshot bytes."""
    records = rich_records()
    a = Controller().replay_all(records)
    b = Controller().replay_all(list(reversed(records[:3])) + records[3:])
    assert [r.encode() for r in a.snapshot_records()] == [r.encode() for r in b.snapshot_records()]
    kinds = [type(r.message).__name__ for r in a.replication.snapshot_records()]
    assert kinds == ["TopicRecord", "PartitionRecord", "PartitionRecord", "TopicRecord", "PartitionRecord"]


# ---------------------------------------------------------------------------
# ReplicationControlManager: Kafka's replay rules and errors
# ---------------------------------------------------------------------------

def replay_error(ctl: Controller, message: Any) -> str:
    """The ReplayError ``message`` raises, checking it changed nothing."""
    before = ctl.state()
    with pytest.raises(ReplayError) as e:
        ctl.replay(message, 0)
    assert ctl.state() == before
    return str(e.value)


def test_duplicate_topic_record():
    ctl = Controller()
    ctl.replay(topic("foo", FOO), 0)
    assert replay_error(ctl, topic("foo", FOO)) == (
        "Found duplicate TopicRecord for foo with topic ID Ktv3YkMQRe-MId4VkkrMyw")
    assert replay_error(ctl, topic("foo", BAR)) == (
        "Found duplicate TopicRecord for foo with a different ID than before. "
        "Previous ID was Ktv3YkMQRe-MId4VkkrMyw and new ID is 8auUWq8zQqe_99H_m2LAmw")
    # a second name for an existing topic id (found by hypothesis: the columnar and per-record
    # loads disagreed on such a log) is named, not silently merged as Kafka's replay would
    assert replay_error(ctl, topic("bar", FOO)) == (
        "Found TopicRecord for bar with topic ID Ktv3YkMQRe-MId4VkkrMyw, which is already the ID of topic foo")


def test_partition_records_need_their_topic_and_partition():
    ctl = Controller()
    assert replay_error(ctl, partition(FOO, 0, [1])) == (
        "Tried to create partition Ktv3YkMQRe-MId4VkkrMyw:0, but no topic with that ID was found.")
    assert replay_error(ctl, change(FOO, 0, isr=[1])) == (
        "Tried to create partition Ktv3YkMQRe-MId4VkkrMyw:0, but no topic with that ID was found.")
    ctl.replay(topic("foo", FOO), 0)
    assert replay_error(ctl, change(FOO, 3, isr=[1])) == (
        "Tried to create partition Ktv3YkMQRe-MId4VkkrMyw:3, but no partition with that id was found.")
    assert replay_error(ctl, m.RemoveTopicRecord(topic_id=BAR)) == (
        "Can't find topic with ID 8auUWq8zQqe_99H_m2LAmw to remove.")
    assert replay_error(ctl, m.ClearElrRecord(topic_name="bar")) == (
        "Unable to find a topic named bar in order to clear its ELRs.")


def test_records_with_impossible_content():
    ctl = Controller()
    ctl.replay(topic("foo", FOO), 0)
    bad = partition(FOO, 0, [1, 2], directories=[DIR1])
    assert replay_error(ctl, bad) == f"The lengths for replicas and directories do not match: {bad!r}"
    assert replay_error(ctl, partition(FOO, 0, [1], leader_recovery_state=5)) == (
        "Value 5 is not a valid leader recovery state")
    ctl.replay(partition(FOO, 0, [1, 2], directories=[DIR1, DIR2]), 1)
    bad = change(FOO, 0, replicas=[1, 2, 3], directories=[DIR1])
    assert replay_error(ctl, bad) == f"The lengths for replicas and directories do not match: {bad!r}"
    # more replicas, real directories kept: they no longer pair up
    assert replay_error(ctl, change(FOO, 0, replicas=[1, 2, 3])) == (
        "The lengths for replicas and directories do not match.")
    assert replay_error(ctl, change(FOO, 0, leader_recovery_state=7)) == "Value 7 is not a valid leader recovery state"


def test_partition_change_semantics():
    """Unset fields keep their value; leader -2 is no change, -1 no leader; the leader epoch
    bumps with a named leader, the partition epoch with every change."""
    ctl = Controller()
    rc = ctl.replication
    ctl.replay(topic("foo", FOO), 0)
    ctl.replay(partition(FOO, 0, [1, 2, 3], leader_epoch=5, partition_epoch=7), 1)
    ctl.replay(change(FOO, 0, isr=[1, 2]), 2)
    p = rc.partition(FOO, 0)
    assert (p.isr, p.leader, p.leader_epoch, p.partition_epoch, p.replicas) == ((1, 2), 1, 5, 8, (1, 2, 3))
    assert change(FOO, 0).leader == NO_LEADER_CHANGE
    ctl.replay(change(FOO, 0, leader=NO_LEADER), 3)
    p = rc.partition(FOO, 0)
    assert (p.leader, p.leader_epoch, p.partition_epoch) == (NO_LEADER, 6, 9)
    assert rc.partitions_with_no_leader() == [TopicIdPartition(FOO, 0)] and not rc.has_leaderships(1)
    assert rc.imbalanced() == {TopicIdPartition(FOO, 0)}
    ctl.replay(change(FOO, 0, leader=2, leader_recovery_state=1), 4)
    p = rc.partition(FOO, 0)
    assert (p.leader, p.leader_epoch, p.leader_recovery_state) == (2, 7, LeaderRecoveryState.RECOVERING)
    assert rc.partitions_led_by_broker(2) == [TopicIdPartition(FOO, 0)] and rc.partitions_with_no_leader() == []
    ctl.replay(change(FOO, 0, isr=[1, 2, 3], leader_recovery_state=-1), 5)
    assert rc.partition(FOO, 0).leader_recovery_state == LeaderRecoveryState.RECOVERING
    ctl.replay(change(FOO, 0, leader=1, leader_recovery_state=0), 6)
    assert rc.imbalanced() == set() and rc.partition(FOO, 0).partition_epoch == 12
    assert sorted(rc.partitions_with_broker_in_isr(3)) == [TopicIdPartition(FOO, 0)]
    check_invariants(ctl)


def test_partition_record_for_an_existing_partition_replaces_it():
    ctl = Controller()
    ctl.replay(topic("foo", FOO), 0)
    ctl.replay(partition(FOO, 0, [1, 2]), 1)
    ctl.replay(partition(FOO, 0, [1, 2]), 2)  # equal: nothing changes
    assert ctl.replication.partition(FOO, 0).partition_epoch == 0
    ctl.replay(partition(FOO, 0, [2, 1], isr=[2], partition_epoch=4, leader_epoch=3), 3)
    assert ctl.replication.partition(FOO, 0).isr == (2,)
    assert ctl.replication.partitions_with_broker_in_isr(1) == []
    check_invariants(ctl)


def test_reassignment_tracking():
    ctl = Controller()
    rc = ctl.replication
    ctl.replay(topic("foo", FOO), 0)
    for p in range(3):
        ctl.replay(partition(FOO, p, [1, 2, 3], directories=[DIR1, DIR2, DIR3]), p + 1)
    ctl.replay(change(FOO, 0, replicas=[1, 2, 3, 4], adding_replicas=[4], removing_replicas=[3],
                      directories=[DIR1, DIR2, DIR3, DirectoryId.UNASSIGNED]), 4)
    ctl.replay(change(FOO, 2, replicas=[1, 2, 3, 4], adding_replicas=[4],
                      directories=[DIR1, DIR2, DIR3, DirectoryId.UNASSIGNED]), 5)
    assert sorted(rc.reassigning()[FOO]) == [0, 2]
    ctl.replay(change(FOO, 0, replicas=[1, 2, 4], isr=[1, 2, 4], adding_replicas=[], removing_replicas=[],
                      directories=[DIR1, DIR2, DIR1]), 6)
    assert rc.reassigning() == {FOO: (2,)}
    assert TopicIdPartition(FOO, 0) not in rc.partitions_in_directory(DIR3)
    ctl.replay(change(FOO, 2, adding_replicas=[]), 7)
    assert rc.reassigning() == {}
    check_invariants(ctl)


def test_remove_topic_clears_everything_it_owned():
    """Kafka's testEligibleLeaderReplicas_DeleteTopic and more: the topic's configs, ISR/ELR
    index entries, directories and imbalance go with it, and its name can be reused."""
    ctl = Controller()
    rc = ctl.replication
    ctl.replay(topic("foo.bar", FOO), 0)
    ctl.replay(partition(FOO, 0, [0, 1, 2], isr=[0], eligible_leader_replicas=[1, 2],
                         directories=[DIR1, DIR2, DIR3]), 1)
    ctl.replay(partition(FOO, 1, [0, 1], isr=[], leader=NO_LEADER, directories=[DIR1, DIR2]), 2)
    ctl.replay(config(2, "foo.bar", "min.insync.replicas", "2"), 3)
    ctl.replay(config(4, "", "min.insync.replicas", "1"), 4)
    assert rc.partitions_with_broker_in_elr(1) == [TopicIdPartition(FOO, 0)]
    ctl.replay(m.RemoveTopicRecord(topic_id=FOO), 5)
    s = ctl.state()
    assert s["topics"] == {} and s["partitions"] == {} and s["isr_index"] == {} and s["elr_index"] == {}
    assert s["directories"] == {} and s["imbalanced"] == set() and s["collisions"] == {}
    assert s["configs"] == {ConfigResource.broker(""): {"min.insync.replicas": "1"}}
    ctl.replay(topic("foo.bar", BAR), 6)
    assert rc.topic_id("foo.bar") == BAR and rc.partitions(BAR) == {}
    check_invariants(ctl)


def test_clear_elr_for_one_topic_and_for_all():
    ctl = Controller()
    rc = ctl.replication
    ctl.replay(topic("foo", FOO), 0)
    ctl.replay(topic("bar", BAR), 1)
    ctl.replay(partition(FOO, 0, [0, 1, 2], isr=[0], eligible_leader_replicas=[1], last_known_elr=[2]), 2)
    ctl.replay(partition(FOO, 1, [0, 1], isr=[0, 1]), 3)
    ctl.replay(partition(BAR, 0, [1, 2], isr=[1], eligible_leader_replicas=[2]), 4)
    ctl.replay(m.ClearElrRecord(topic_name="foo"), 5)
    p = rc.partition(FOO, 0)
    assert (p.elr, p.last_known_elr, p.partition_epoch) == ((), (), 1)
    assert rc.partition(FOO, 1).partition_epoch == 0  # had no ELR: untouched
    assert rc.partition(BAR, 0).elr == (2,)
    assert rc.partitions_with_broker_in_elr(1) == [] and rc.partitions_with_broker_in_elr(2) == [
        TopicIdPartition(BAR, 0)]
    ctl.replay(m.ClearElrRecord(topic_name=""), 6)
    assert rc.partition(BAR, 0).elr == () and rc.partition(BAR, 0).partition_epoch == 1
    assert rc.partition(FOO, 0).partition_epoch == 1
    assert ctl.state()["elr_index"] == {}
    check_invariants(ctl)


def test_collision_chars():
    ctl = Controller()
    rc = ctl.replication
    ctl.replay(topic("foo.bar", FOO), 0)
    ctl.replay(topic("foo_bar", BAR), 1)
    assert rc.colliding_topic_names("foo_bar") == {"foo.bar", "foo_bar"} == rc.colliding_topic_names("foo.bar")
    ctl.replay(m.RemoveTopicRecord(topic_id=FOO), 2)
    assert rc.colliding_topic_names("foo.bar") == {"foo_bar"}
    ctl.replay(m.RemoveTopicRecord(topic_id=BAR), 3)
    assert rc.colliding_topic_names("foo.bar") == set() and ctl.state()["collisions"] == {}


def test_replication_manager_refuses_other_records():
    ctl = Controller()
    with pytest.raises(ReplayError, match="cannot replay ConfigRecord"):
        ctl.replication.replay(config(2, "foo", "a", "b"), 0)


# ---------------------------------------------------------------------------
# PartitionRegistration (Kafka's PartitionRegistrationTest)
# ---------------------------------------------------------------------------

def registration(replicas, isr, leader, leader_epoch=0, partition_epoch=0, directories=None, **kw):
    directories = directories or (DirectoryId.UNASSIGNED,) * len(replicas)
    return PartitionRegistration(tuple(replicas), tuple(directories), tuple(isr), tuple(kw.pop("removing", ())),
                                 tuple(kw.pop("adding", ())), leader, LeaderRecoveryState.RECOVERED, leader_epoch,
                                 partition_epoch, **kw)


def test_election_was_clean():
    assert PartitionRegistration.election_was_clean(1, [1, 2])
    assert not PartitionRegistration.election_was_clean(1, [0, 2])
    assert not PartitionRegistration.election_was_clean(1, [])
    assert PartitionRegistration.election_was_clean(3, [1, 2, 3, 4, 5, 6])
    assert PartitionRegistration.election_was_clean(NO_LEADER, [])


def test_merge_and_diff():
    a = registration([1, 2, 3], [1, 2], 1)
    b = registration([1, 2, 3], [3], 3, 1, 1)
    c = registration([1, 2, 3], [1], 1, 0, 1, elr=(2,), last_known_elr=(3,))
    assert a.merge(change(FOO, 0, leader=3, isr=[3])) == b
    assert b.diff(a) == "isr: [1, 2] -> [3], leader: 1 -> 3, leaderEpoch: 0 -> 1, partitionEpoch: 0 -> 1"
    assert c.diff(a) == "isr: [1, 2] -> [1], elr: [] -> [2], lastKnownElr: [] -> [3], partitionEpoch: 0 -> 1"


def test_merge_with_reassignment_data():
    p0 = registration([1, 2, 3], [1, 2, 3], 1, 100, 200, directories=[DIR1, DIR2, DIR3])
    p1 = p0.merge(change(FOO, 0, removing_replicas=[3], adding_replicas=[4], replicas=[1, 2, 3, 4],
                         directories=[DIR1, DIR2, DIR3, DirectoryId.UNASSIGNED]))
    assert p1 == registration([1, 2, 3, 4], [1, 2, 3], 1, 100, 201, removing=[3], adding=[4],
                              directories=[DIR1, DIR2, DIR3, DirectoryId.UNASSIGNED])
    assert p1.is_reassigning
    p2 = p1.merge(change(FOO, 0, isr=[1, 2, 4], removing_replicas=[], adding_replicas=[], replicas=[1, 2, 4],
                         directories=[DIR1, DIR2, DirectoryId.UNASSIGNED]))
    assert p2 == registration([1, 2, 4], [1, 2, 4], 1, 100, 202, directories=[DIR1, DIR2, DirectoryId.UNASSIGNED])
    assert not p2.is_reassigning and not p2.has_same_assignment(p1)


def test_migrating_directories_and_directory_lookup():
    reg = PartitionRegistration.from_record(partition(FOO, 0, [0, 1]))
    assert reg.directories == (DirectoryId.MIGRATING, DirectoryId.MIGRATING)
    # a migrating partition that grows stays migrating (more MIGRATING entries)
    assert reg.merge(change(FOO, 0, replicas=[0, 1, 2])).directories == (DirectoryId.MIGRATING,) * 3
    reg = registration([3, 2, 1], [1, 2, 3], 1, directories=[DIR1, DIR2, DIR3])
    assert (reg.directory(1), reg.directory(2), reg.directory(3)) == (DIR3, DIR2, DIR1)
    with pytest.raises(ValueError, match="Replica 4 is not assigned to this partition."):
        reg.directory(4)
    assert DirectoryId.reserved(DirectoryId.LOST) and DirectoryId.reserved(Uuid(99))
    assert not DirectoryId.reserved(Uuid(100)) and not DirectoryId.reserved(DIR1)


@pytest.mark.parametrize("level, version", [(14, 0), (17, 1), (22, 1), (23, 2), (None, 2)])
def test_to_record_per_metadata_version(level, version):
    version_at = None if level is None else mv(level)
    dirs = (DirectoryId.UNASSIGNED, _id("KBJBm9GVRAG9Ffe25odmmg"), DirectoryId.LOST,
            _id("7DZNT5qBS7yFF7VMMHS7kw"), _id("cJGPUZsMSEqbidOLYLOIXg"))
    reg = PartitionRegistration((0, 1, 2, 3, 4), dirs, (0, 1), (), (), 0, LeaderRecoveryState.RECOVERED, 0, 0,
                                elr=(2, 3), last_known_elr=(4,))
    want = dict(topic_id=FOO, partition_id=0, replicas=[0, 1, 2, 3, 4], isr=[0, 1], leader=0,
                leader_recovery_state=0, leader_epoch=0, partition_epoch=0)
    if version >= 2:
        want.update(eligible_leader_replicas=[2, 3], last_known_elr=[4])
    if version >= 1:
        want.update(directories=list(dirs))
        assert reg.to_record(FOO, 0, version_at) == ApiMessageAndVersion(m.PartitionRecord(**want), version)
    else:
        with pytest.raises(UnwritableMetadataError, match="the directory assignment state of one or more replicas"):
            reg.to_record(FOO, 0, version_at)
        migrating = PartitionRegistration((0, 1), (DirectoryId.MIGRATING,) * 2, (0, 1), (), (), 0,
                                          LeaderRecoveryState.RECOVERED, 0, 0, elr=(1,))
        rec = migrating.to_record(FOO, 0, version_at)
        assert rec.version == 0 and rec.message.eligible_leader_replicas is None  # ELR silently not written
        assert PartitionRegistration.from_record(rec.message) == registration(
            [0, 1], [0, 1], 0, directories=[DirectoryId.MIGRATING] * 2)


def test_to_record_leaves_empty_elr_null():
    reg = PartitionRegistration((0, 1), (DirectoryId.MIGRATING,) * 2, (0, 1), (), (), 0,
                                LeaderRecoveryState.RECOVERED, 0, 0)
    rec = reg.to_record(FOO, 0, mv(23))
    assert rec.version == 2 and rec.message.eligible_leader_replicas is None and rec.message.last_known_elr is None
    assert rec.message.directories == [DirectoryId.MIGRATING] * 2
    assert PartitionRegistration.from_record(rec.message) == reg


# ---------------------------------------------------------------------------
# BrokersToIsrs (Kafka's BrokersToIsrsTest)
# ---------------------------------------------------------------------------

T0, T1 = _id("z5XgH_fQSAK3-RYoF2ymgw"), _id("U52uRe20RsGI0RvpcTx33Q")


def test_brokers_to_isrs_iterator():
    b = BrokersToIsrs(SnapshotRegistry())
    assert set(b.partitions_with_broker_in_isr(1)) == set()
    b.update(T0, 0, None, [1, 2, 3], -1, 1)
    b.update(T1, 1, None, [2, 3, 4], -1, 4)
    assert set(b.partitions_with_broker_in_isr(1)) == {TopicIdPartition(T0, 0)}
    assert set(b.partitions_with_broker_in_isr(2)) == {TopicIdPartition(T0, 0), TopicIdPartition(T1, 1)}
    assert set(b.partitions_with_broker_in_isr(4)) == {TopicIdPartition(T1, 1)}
    assert set(b.partitions_with_broker_in_isr(5)) == set()
    b.update(T1, 2, None, [3, 2, 1], -1, 3)
    assert set(b.partitions_with_broker_in_isr(2)) == {TopicIdPartition(T0, 0), TopicIdPartition(T1, 1),
                                                       TopicIdPartition(T1, 2)}


def test_brokers_to_isrs_leaders_only():
    b = BrokersToIsrs(SnapshotRegistry())
    b.update(T0, 0, None, [1, 2, 3], -1, 1)
    b.update(T1, 1, None, [2, 3, 4], -1, 4)
    assert set(b.partitions_led_by_broker(1)) == {TopicIdPartition(T0, 0)}
    assert set(b.partitions_led_by_broker(2)) == set()
    assert set(b.partitions_led_by_broker(4)) == {TopicIdPartition(T1, 1)}
    b.update(T0, 0, [1, 2, 3], [1, 2, 3], 1, 2)
    assert set(b.partitions_led_by_broker(1)) == set() and not b.has_leaderships(1)
    assert set(b.partitions_led_by_broker(2)) == {TopicIdPartition(T0, 0)} and b.has_leaderships(2)


def test_brokers_to_isrs_no_leader_and_epochs():
    registry = SnapshotRegistry()
    b = BrokersToIsrs(registry)
    b.update(T0, 2, None, [1, 2, 3], -1, 3)
    registry.get_or_create_snapshot(10)
    assert set(b.partitions_led_by_broker(3)) == {TopicIdPartition(T0, 2)}
    assert set(b.partitions_with_no_leader()) == set()
    b.update(T0, 2, [1, 2, 3], [1, 2, 3], 3, -1)
    assert set(b.partitions_with_no_leader()) == {TopicIdPartition(T0, 2)}
    assert set(b.partitions_led_by_broker(3, epoch=10)) == {TopicIdPartition(T0, 2)}
    assert set(b.partitions_with_no_leader(epoch=10)) == set()
    with pytest.raises(ReplayError, match="Broker 7 has no isrMembers entry, so we can't remove"):
        b.update(T0, 2, [7], [1], 7, 1)


# ---------------------------------------------------------------------------
# ConfigurationControlManager (Kafka's ConfigurationControlManagerTest.testReplay)
# ---------------------------------------------------------------------------

def test_config_replay():
    ctl = Controller()
    c = ctl.configs
    broker0, mytopic = ConfigResource.broker("0"), ConfigResource.topic("mytopic")
    assert c.configs(broker0) == {}
    ctl.replay(config(4, "0", "foo.bar", "1,2"), 0)
    assert c.configs(broker0) == {"foo.bar": "1,2"}
    ctl.replay(config(4, "0", "foo.bar", None), 1)
    assert c.configs(broker0) == {} and c.resources() == []
    ctl.replay(config(4, "0", "never.set", None), 2)  # deleting an absent key: nothing
    assert c.resources() == []
    ctl.replay(config(2, "mytopic", "abc", "x,y,z"), 3)
    ctl.replay(config(2, "mytopic", "def", "blah"), 4)
    assert c.configs(mytopic) == {"abc": "x,y,z", "def": "blah"} and c.config(mytopic, "abc") == "x,y,z"
    assert str(mytopic) == "ConfigResource(type=TOPIC, name='mytopic')"


def test_config_epochs_revert_and_unknown_type():
    ctl = Controller()
    c, r = ctl.configs, ctl.registry
    ctl.replay(config(2, "t", "a", "1"), 0)
    r.get_or_create_snapshot(0)
    ctl.replay(config(2, "t", "a", "2"), 1)
    ctl.replay(config(2, "t", "b", "3"), 2)
    ctl.replay(config(99, "x", "k", "v"), 3)  # a type Kafka does not define: UNKNOWN, kept
    assert c.configs(ConfigResource.topic("t"), epoch=0) == {"a": "1"}
    assert c.config(ConfigResource.topic("t"), "b", epoch=0) is None
    assert c.configs(ConfigResource(ConfigResourceType.UNKNOWN, "x")) == {"k": "v"}
    assert [r.message.resource_type for r in c.snapshot_records()] == [0, 2, 2]
    r.revert_to_snapshot(0)
    assert c.all_configs() == {ConfigResource.topic("t"): {"a": "1"}}


# ---------------------------------------------------------------------------
# ACLs, SCRAM, delegation tokens, client quotas
# ---------------------------------------------------------------------------

ACL1, ACL2 = _id("NSmkU0ieQuy2IHN59Ce0Bw"), _id("Y8N9gnSKSLKKFCioX2laGA")


def test_acls_add_delete_and_load_snapshot():
    ctl = Controller()
    acls = ctl.acls
    ctl.registry.get_or_create_snapshot(-1)
    ctl.replay(acl_record(ACL1), 0)
    ctl.replay(acl_record(ACL2, operation=99), 1)  # an operation Kafka does not define
    assert acls.acl(ACL2).operation == AclOperation.UNKNOWN
    assert acls.contains_acl(StandardAcl.from_record(acl_record(ACL1)))
    assert [r.message for r in acls.snapshot_records()] == [acl_record(ACL1), acl_record(ACL2, operation=0)]
    ctl.replay(m.RemoveAccessControlEntryRecord(id=ACL1), 2)
    assert list(acls.acls()) == [ACL2]
    gone = m.RemoveAccessControlEntryRecord(id=ACL1)
    assert replay_error(ctl, gone) == f"Unable to replay {gone!r}: no acl with that ID found."
    ctl.registry.revert_to_snapshot(-1)
    assert acls.acls() == {} and acls.existing_acls.to_set() == set()
    assert str(StandardAcl.from_record(acl_record(ACL1))) == (
        "StandardAcl(resourceType=TOPIC, resourceName=foo, patternType=LITERAL, principal=User:alice, "
        "host=*, operation=READ, permissionType=ALLOW)")


def test_scram_credentials():
    ctl = Controller()
    s = ctl.scram
    ctl.replay(scram("alice"), 0)
    ctl.replay(scram("alice", iterations=8192), 1)
    ctl.replay(scram("alice", mechanism=2), 2)
    assert s.credential("alice", ScramMechanism.SCRAM_SHA_256).iterations == 8192
    assert "8192" not in repr(s.credential("alice", ScramMechanism.SCRAM_SHA_256))
    ctl.replay(m.RemoveUserScramCredentialRecord(name="alice", mechanism=1), 3)
    assert list(s.all_credentials()) == [("alice", ScramMechanism.SCRAM_SHA_512)]
    assert replay_error(ctl, m.RemoveUserScramCredentialRecord(name="bob", mechanism=1)) == (
        "Unable to find credential to delete: ScramCredentialKey(username=bob, mechanism=SCRAM_SHA_256)")
    with pytest.raises(UnwritableMetadataError) as e:
        list(s.snapshot_records(metadata_version=mv(10)))
    assert str(e.value) == ("Metadata has been lost because the following could not be represented in "
                            "metadata.version 3.5-IV1: ScramImage({SCRAM_SHA_512:alice},{})")
    assert len(list(s.snapshot_records(metadata_version=mv(11)))) == 1
    assert list(ScramControlManager(SnapshotRegistry()).snapshot_records(metadata_version=mv(10))) == []


def test_delegation_tokens():
    ctl = Controller()
    t = ctl.tokens
    ctl.replay(token("t1"), 0)
    ctl.replay(token("t1", expiration=4000), 1)  # a renewal replaces the token
    ctl.replay(token("t2"), 2)
    assert t.token("t1").expiration_timestamp == 4000 and t.token("t1").renewers == ("User:bob",)
    ctl.replay(m.RemoveDelegationTokenRecord(token_id="t2"), 3)
    ctl.replay(m.RemoveDelegationTokenRecord(token_id="never"), 4)  # not an error, as in Kafka
    assert list(t.tokens()) == ["t1"]
    with pytest.raises(UnwritableMetadataError, match=r"metadata.version 3.6-IV1: DelegationTokenImage\(t1\)"):
        list(t.snapshot_records(metadata_version=mv(13)))
    assert [r.message for r in t.snapshot_records(metadata_version=mv(14))] == [token("t1", expiration=4000)]


def test_client_quotas():
    ctl = Controller()
    q = ctl.quotas
    alice = ClientQuotaEntity({"user": "alice"})
    alice_default_client = ClientQuotaEntity({"client-id": None, "user": "alice"})
    ctl.replay(quota({"user": "alice"}, "producer_byte_rate", 1000.0), 0)
    ctl.replay(quota({"user": "alice"}, "producer_byte_rate", 2000.0), 1)
    ctl.replay(quota({"user": "alice", "client-id": None}, "consumer_byte_rate", 10.0), 2)
    assert q.quotas(alice) == {"producer_byte_rate": 2000.0}
    assert q.quotas(alice_default_client) == {"consumer_byte_rate": 10.0}
    ctl.replay(quota({"user": "alice"}, "producer_byte_rate", remove=True), 3)
    ctl.replay(quota({"user": "bob"}, "producer_byte_rate", remove=True), 4)  # nothing to remove
    assert q.all_quotas() == {alice_default_client: {"consumer_byte_rate": 10.0}}
    assert repr(alice_default_client) == "ClientQuotaEntity(entries={client-id=None, user=alice})"
    (rec,) = list(q.snapshot_records())
    assert ClientQuotaEntity.from_record(rec.message) == alice_default_client


def test_security_managers_refuse_other_records():
    ctl = Controller()
    for mgr in (ctl.acls, ctl.scram, ctl.tokens, ctl.quotas, ctl.configs):
        with pytest.raises(ReplayError, match="cannot replay TopicRecord"):
            mgr.replay(topic("foo", FOO), 0)
