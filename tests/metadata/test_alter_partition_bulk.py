"""The bulk path of AlterPartition (``alter_partition_bulk.py``) against the full path
(``AlterPartitionManager._alter_one``: Kafka's validation, then the PartitionChangeBuilder): on
the same partition, request, broker states and settings, wherever the bulk path answers, both
give the same record byte for byte (or none) and the same answer field for field; and the
request answered through ``alter_slice`` (bulk where it can, full elsewhere) equals the full
path partition by partition.

Drawn at random: replicas, ISR, leader, ELR, last known ELR, reassignment lists, directories,
recovery state, epochs; brokers active, fenced, in controlled shutdown or unregistered, excluded
by an unfinished change (whole or for one directory), directories online or not; the
metadata.version (ISR-shrink epoch bumps before 3.6, directories from 3.7-IV2, ELR from
4.0-IV1), ELR on or off, min.insync.replicas, unclean election; and the request: v2 or v3, the
sender (mostly the leader), epochs (mostly the partition's), the ISR (mostly a valid one with
the leader, sometimes a duplicate, a non-replica or a negative id), the recovery state asked,
each member's broker epoch (registered, -1, or stale).  Also: the common case is really taken
by the bulk path (so the comparison is not only of the full path with itself).
"""
from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.partition_fakes import (
    BROKERS,
    OTHER_DIR,
    OWN_DIR,
    TOPIC_ID,
    VERSIONS,
    Broker,
    Cluster,
    Configs,
    Exclusions,
    Features,
    Replication,
    Topic,
    registered_epoch,
)

from kraft_node.metadata.controller.alter_partition import AlterPartitionManager
from kraft_node.metadata.controller.alter_partition_bulk import FALLBACK, BulkAlterPartition
from kraft_node.metadata.controller.partition_changes import PartitionChangeContext
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_storage.messages.runtime import Uuid

APR = AlterPartitionRequest
def context(world: dict[str, Any], topic: Topic) -> PartitionChangeContext:
    version = MetadataVersion.from_version_string(world["mv"])
    elr = world["elr"] and version.is_elr_supported()
    ctx = PartitionChangeContext(Replication(elr, topic), Cluster(world["brokers"]),  # type: ignore[arg-type]
                                 Configs(world["min_isr"], world["unclean"]), Features(version, elr),
                                 max_elections_per_imbalance=1000)
    ctx.exclusions = Exclusions(world["excluded"], world["excluded_dirs"])
    return ctx


@st.composite
def partitions(draw: Any, mv: str) -> PartitionRegistration:
    elr_records = MetadataVersion.from_version_string(mv).is_elr_supported()  # ELR state needs ELR records
    rf = draw(st.integers(1, 5))
    replicas = draw(st.permutations(BROKERS))[:rf]
    isr = [r for r in draw(st.permutations(replicas)) if draw(st.integers(0, 4)) > 0]
    leader = draw(st.sampled_from(isr + [NO_LEADER] + ([replicas[0]] if draw(st.integers(0, 9)) == 0 else [])))
    rest = [r for r in replicas if r not in isr]
    elr = [r for r in rest if draw(st.integers(0, 3)) == 0] if elr_records and draw(st.integers(0, 3)) == 0 else []
    last_known = draw(st.sampled_from([[], [], [], [], [], [replicas[0]], [r for r in rest if r not in elr]]))
    if not elr_records:
        last_known = []
    removing = [r for r in replicas if draw(st.integers(0, 20)) == 0]
    adding = [r for r in replicas if r not in removing and draw(st.integers(0, 20)) == 0]
    dir_kinds = [draw(st.sampled_from(["own"] * 6 + ["migrating", "unassigned", "lost", "other"])) for _ in replicas]
    dir_of = {"migrating": DirectoryId.MIGRATING, "unassigned": DirectoryId.UNASSIGNED, "lost": DirectoryId.LOST,
              "other": OTHER_DIR}
    directories = tuple(OWN_DIR[r] if k == "own" else dir_of[k] for r, k in zip(replicas, dir_kinds))
    if not MetadataVersion.from_version_string(mv).is_directory_assignment_supported():
        directories = ()  # records before 3.7-IV2 carry no directories
    elif draw(st.integers(0, 7)) == 0:
        directories = DirectoryId.migrating_tuple(len(replicas))
    elif draw(st.integers(0, 9)) == 0:
        directories = ()  # created before the upgrade to 3.7-IV2
    return PartitionRegistration(
        replicas=tuple(replicas), directories=directories, isr=tuple(isr), removing_replicas=tuple(removing),
        adding_replicas=tuple(adding), leader=leader,
        leader_recovery_state=draw(st.sampled_from([LeaderRecoveryState.RECOVERED] * 5
                                                   + [LeaderRecoveryState.RECOVERING])),
        leader_epoch=draw(st.integers(0, 50)), partition_epoch=draw(st.integers(0, 50)),
        elr=tuple(elr), last_known_elr=tuple(last_known))


@st.composite
def requests(draw: Any, p: PartitionRegistration, index: int, version: int) -> Any:
    """A request about partition ``index`` (registration ``p``): mostly what its leader would send."""
    replicas = list(p.replicas)
    leader = p.leader if p.leader >= 0 and draw(st.integers(0, 9)) > 0 else draw(st.sampled_from(BROKERS))
    members = [r for r in draw(st.permutations(replicas)) if r == leader or draw(st.integers(0, 3)) > 0]
    if leader not in members and draw(st.integers(0, 9)) > 0:
        members.insert(draw(st.integers(0, len(members))), leader)
    odd = draw(st.integers(0, 19))
    if odd == 0 and members:
        members.append(members[0])  # a duplicate
    elif odd == 1:
        members.append(draw(st.sampled_from([b for b in BROKERS if b not in replicas] or [-1])))
    elif odd == 2:
        members.append(-3)
    shift = st.sampled_from([0] * 12 + [-1, 1])
    leader_epoch = p.leader_epoch + draw(shift)
    partition_epoch = p.partition_epoch + draw(shift)
    recovery = draw(st.sampled_from([0] * 10 + [1, 2]))
    fields: dict[str, Any] = dict(partition_index=index, leader_epoch=leader_epoch, partition_epoch=partition_epoch,
                                  leader_recovery_state=recovery)
    if version >= 3:
        fields["new_isr_with_epochs"] = [
            APR.BrokerState(broker_id=b, broker_epoch=draw(st.sampled_from(
                [registered_epoch(b)] * 8 + [-1, registered_epoch(b) - 1]))) for b in members]
    else:
        fields["new_isr"] = members
    return leader, APR.PartitionData(**fields)


@st.composite
def worlds(draw: Any) -> dict[str, Any]:
    mv = draw(st.sampled_from(VERSIONS))
    brokers: dict[int, Broker] = {}
    for b in BROKERS:
        state = draw(st.sampled_from(["active"] * 6 + ["fenced", "shutting", "gone"]))
        dirs = draw(st.sampled_from([(), (OWN_DIR[b],), (OWN_DIR[b], OTHER_DIR)]))
        offline = frozenset(draw(st.sets(st.sampled_from([OWN_DIR[b], OTHER_DIR]), max_size=1))) \
            if draw(st.integers(0, 7)) == 0 else frozenset()
        brokers[b] = Broker(state, dirs, offline)
    excluded = set(draw(st.sets(st.sampled_from(BROKERS), max_size=2))) if draw(st.integers(0, 4)) == 0 else set()
    excluded_dirs = {b: OWN_DIR[b] for b in draw(st.sets(st.sampled_from(BROKERS), max_size=1))} \
        if draw(st.integers(0, 4)) == 0 else {}
    version = draw(st.sampled_from([2, 3]))
    parts = [draw(partitions(mv)) for _ in range(draw(st.integers(1, 3)))]
    reqs = [draw(requests(p, i, version)) for i, p in enumerate(parts)]
    return dict(mv=mv, elr=draw(st.booleans()), brokers=brokers, excluded=excluded, excluded_dirs=excluded_dirs,
                min_isr=draw(st.integers(1, 4)), unclean=draw(st.booleans()), version=version, parts=parts,
                reqs=reqs)


def fields(answer: Any) -> tuple[Any, ...]:
    return (answer.partition_index, int(answer.error_code), answer.leader_id, list(answer.isr),
            answer.leader_recovery_state, answer.leader_epoch, answer.partition_epoch)


def setup(world: dict[str, Any]) -> tuple[PartitionChangeContext, Topic, AlterPartitionManager]:
    topic = Topic("t", TOPIC_ID)
    for i, p in enumerate(world["parts"]):
        topic.parts[i] = p
    ctx = context(world, topic)
    return ctx, topic, AlterPartitionManager(ctx)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_bulk_answers_as_the_full_path(world: dict[str, Any]) -> None:
    ctx, topic, manager = setup(world)
    version = world["version"]
    with ctx.reading_once():
        for sender, data in world["reqs"]:
            full_records: list[Any] = []
            full = manager._alter_one(sender, topic, data, version, full_records)  # type: ignore[arg-type]
            bulk = BulkAlterPartition(ctx).change(sender, topic, data, version)  # type: ignore[arg-type]
            if bulk is FALLBACK:
                continue
            assert isinstance(bulk, tuple)
            record, answer = bulk
            assert [r.encode() for r in full_records] == ([] if record is None else [record.encode()])
            assert fields(answer) == fields(full)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds(), st.integers(1, 3))
def test_a_request_answers_as_partition_by_partition(world: dict[str, Any], max_cost: int) -> None:
    """``alter_slice`` over the request, in slices of any size, against the full path of each
    partition (each partition's answer is built from the state before the request's records,
    as one event builds them)."""
    ctx, topic, manager = setup(world)
    version = world["version"]
    sender = world["reqs"][0][0]
    request = APR(broker_id=sender, broker_epoch=registered_epoch(sender), topics=[
        APR.TopicData(topic_id=TOPIC_ID, partitions=[d for _, d in world["reqs"]]),
        APR.TopicData(topic_id=Uuid((0xEE << 64) | 1), partitions=[APR.PartitionData(partition_index=0)])])
    records: list[Any] = []
    answers: list[tuple[int, Any]] = []
    cursor: tuple[int, int] | None = (0, 0)
    while cursor is not None:
        cursor = manager.alter_slice(request, version, cursor, max_cost, records, answers)
    want_records: list[Any] = []
    with ctx.reading_once():
        want = [manager._alter_one(sender, topic, d, version, want_records)  # type: ignore[arg-type]
                for _, d in world["reqs"]]
    assert [r.encode() for r in records] == [r.encode() for r in want_records]
    assert [(t, fields(a)) for t, a in answers[:-1]] == [(0, fields(a)) for a in want]
    assert answers[-1][0] == 1 and int(answers[-1][1].error_code) == 100  # UNKNOWN_TOPIC_ID


def test_the_common_case_takes_the_bulk_path() -> None:
    """A follower caught up (ISR + it), a follower dropped (ISR - it), v2 and v3, each metadata
    version, ELR on and off: answered by the bulk path, as the full path would."""
    p = PartitionRegistration(replicas=(0, 1, 2), directories=(OWN_DIR[0], OWN_DIR[1], OWN_DIR[2]), isr=(0, 1),
                              removing_replicas=(), adding_replicas=(), leader=0,
                              leader_recovery_state=LeaderRecoveryState.RECOVERED, leader_epoch=4, partition_epoch=9,
                              elr=(), last_known_elr=())
    brokers = {b: Broker("active", (OWN_DIR[b],)) for b in BROKERS}
    taken = 0
    for mv in VERSIONS:
        for elr in (False, True):
            for version in (2, 3):
                for new_isr in ([0, 1, 2], [0], [2, 0, 1], [0, 1]):
                    world: dict[str, Any] = dict(mv=mv, elr=elr, brokers=brokers, excluded=set(), excluded_dirs={},
                                                 min_isr=1, unclean=False, parts=[p])
                    ctx, topic, manager = setup(world)
                    data = APR.PartitionData(partition_index=0, leader_epoch=4, partition_epoch=9,
                                             leader_recovery_state=0)
                    if version >= 3:
                        data.new_isr_with_epochs = [APR.BrokerState(broker_id=b, broker_epoch=registered_epoch(b))
                                                    for b in new_isr]
                    else:
                        data.new_isr = list(new_isr)
                    with ctx.reading_once():
                        bulk = BulkAlterPartition(ctx)
                        got = bulk.change(0, topic, data, version)  # type: ignore[arg-type]
                        full_records: list[Any] = []
                        full = manager._alter_one(0, topic, data, version, full_records)  # type: ignore[arg-type]
                    assert got is not FALLBACK and isinstance(got, tuple), (mv, elr, version, new_isr)
                    record, answer = got
                    assert [r.encode() for r in full_records] == ([] if record is None else [record.encode()])
                    assert fields(answer) == fields(full)
                    assert (record is None) == (new_isr == [0, 1])
                    if record is not None:
                        bump = MetadataVersion.from_version_string(mv).is_leader_epoch_bump_required_on_isr_shrink()
                        assert record.message.leader == (0 if bump and new_isr == [0] else -2)
                    taken += bulk.taken
    assert taken == len(VERSIONS) * 2 * 2 * 4
