"""The bulk path of broker lifecycle changes (``lifecycle_bulk.py``) against the
PartitionChangeBuilder (``PartitionChangeContext.partition_update``): on the same partition,
broker states and settings both give the same record, byte for byte, or both None.

The state is drawn at random: replicas, ISR, leader, ELR, last known ELR, reassignment lists,
directories (the broker's own, MIGRATING, UNASSIGNED, LOST, one the broker does not have),
recovery state; brokers active, fenced, in controlled shutdown or unregistered, excluded by an
unfinished change (whole or for one directory), with directories online or not; the
metadata.version (ISR-shrink epoch bumps before 3.6, directories from 3.7-IV2, ELR from
4.0-IV1), ELR on or off, min.insync.replicas and unclean election per topic; and the change:
a broker taken out (fencing, controlled shutdown), an unclean restart, or an unfencing.
Also: the common cases really are taken by the bulk path (no fallback), so the comparison is
not only of the builder with itself.
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
)

from kraft_node.metadata.controller.lifecycle_bulk import FALLBACK, BulkLifecycleChanges
from kraft_node.metadata.controller.partition_changes import PartitionChangeContext
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages.runtime import Uuid


def context(mv: str, elr: bool, brokers: dict[int, Broker], excluded: set[int], excluded_dirs: dict[int, Uuid],
            min_isr: int, unclean: bool) -> PartitionChangeContext:
    version = MetadataVersion.from_version_string(mv)
    ctx = PartitionChangeContext(Replication(elr), Cluster(brokers), Configs(min_isr, unclean),  # type: ignore
                                 Features(version, elr), max_elections_per_imbalance=1000)
    ctx.exclusions = Exclusions(excluded, excluded_dirs)
    return ctx


@st.composite
def worlds(draw: Any) -> dict[str, Any]:
    mv = draw(st.sampled_from(VERSIONS))
    elr_records = MetadataVersion.from_version_string(mv).is_elr_supported()  # ELR state needs ELR records
    brokers: dict[int, Broker] = {}
    for b in BROKERS:
        state = draw(st.sampled_from(["active", "active", "active", "fenced", "shutting", "gone"]))
        dirs = draw(st.sampled_from([(), (OWN_DIR[b],), (OWN_DIR[b], OTHER_DIR)]))
        offline = frozenset(draw(st.sets(st.sampled_from([OWN_DIR[b], OTHER_DIR]), max_size=1))) \
            if draw(st.integers(0, 5)) == 0 else frozenset()
        brokers[b] = Broker(state, dirs, offline)
    excluded = set(draw(st.sets(st.sampled_from(BROKERS), max_size=2))) if draw(st.booleans()) else set()
    excluded_dirs = {b: OWN_DIR[b] for b in draw(st.sets(st.sampled_from(BROKERS), max_size=1))}

    rf = draw(st.integers(1, 5))
    replicas = draw(st.permutations(BROKERS))[:rf]
    isr = [r for r in draw(st.permutations(replicas)) if draw(st.integers(0, 4)) > 0]
    leader = draw(st.sampled_from(isr + [NO_LEADER] + ([replicas[0]] if draw(st.integers(0, 9)) == 0 else [])))
    rest = [r for r in replicas if r not in isr]
    elr = [r for r in rest if draw(st.integers(0, 3)) == 0] if elr_records else []
    last_known = draw(st.sampled_from([[], [], [], [replicas[0]], [NO_LEADER], [r for r in rest if r not in elr]]))
    if not elr_records:
        last_known = []
    removing = [r for r in replicas if draw(st.integers(0, 12)) == 0]
    adding = [r for r in replicas if r not in removing and draw(st.integers(0, 12)) == 0]
    dir_kinds = [draw(st.sampled_from(["own", "own", "own", "migrating", "unassigned", "lost", "other"]))
                 for _ in replicas]
    dir_of = {"migrating": DirectoryId.MIGRATING, "unassigned": DirectoryId.UNASSIGNED, "lost": DirectoryId.LOST,
              "other": OTHER_DIR}
    directories = tuple(OWN_DIR[r] if k == "own" else dir_of[k] for r, k in zip(replicas, dir_kinds))
    if draw(st.integers(0, 5)) == 0:
        directories = DirectoryId.migrating_tuple(len(replicas))
    partition = PartitionRegistration(
        replicas=tuple(replicas), directories=directories, isr=tuple(isr), removing_replicas=tuple(removing),
        adding_replicas=tuple(adding), leader=leader,
        leader_recovery_state=draw(st.sampled_from(list(LeaderRecoveryState))),
        leader_epoch=draw(st.integers(0, 50)), partition_epoch=draw(st.integers(0, 50)),
        elr=tuple(elr), last_known_elr=tuple(last_known))

    kind = draw(st.sampled_from(["remove", "remove", "remove", "unclean", "add"]))
    target = draw(st.sampled_from(isr + replicas if isr else replicas))
    remove, add, unclean_b = NO_LEADER, NO_LEADER, NO_LEADER
    if kind == "remove":
        remove = target
    elif kind == "unclean":
        unclean_b = target
    else:
        add = target
    return dict(mv=mv, elr=draw(st.booleans()), brokers=brokers, excluded=excluded,
                excluded_dirs=excluded_dirs, min_isr=draw(st.integers(1, 4)), unclean=draw(st.booleans()),
                partition=partition, change=(remove, add, unclean_b))


def _compare(world: dict[str, Any]) -> Any:
    elr = world["elr"] and MetadataVersion.from_version_string(world["mv"]).is_elr_supported()
    ctx = context(world["mv"], elr, world["brokers"], world["excluded"], world["excluded_dirs"], world["min_isr"],
                  world["unclean"])
    topic = Topic("t", TOPIC_ID)
    partition = world["partition"]
    topic.parts[0] = partition
    topic.parts[3] = partition
    remove, add, unclean_b = world["change"]
    with ctx.reading_once():
        expected = ctx.partition_update(topic, 3, partition, remove, add, unclean_b)  # type: ignore[arg-type]
        bulk = BulkLifecycleChanges(ctx, remove, add, unclean_b)
        fast = bulk.change(topic, 3, partition)  # type: ignore[arg-type]
        via_update = bulk.update(topic, 3, partition)  # type: ignore[arg-type]
    if fast is not FALLBACK:
        if expected is None:
            assert fast is None
        else:
            assert fast is not None and not isinstance(fast, type(FALLBACK))
            assert fast.version == expected.version
            assert fast.encode() == expected.encode(), (fast, expected)
    if expected is None:
        assert via_update is None
    else:
        assert via_update is not None and via_update.encode() == expected.encode()
    return fast


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_bulk_change_equals_the_builder(world: dict[str, Any]) -> None:
    _compare(world)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds().filter(lambda w: w["change"][1] == NO_LEADER and not w["partition"].removing_replicas
                       and not w["partition"].adding_replicas and not w["partition"].elr
                       and not w["partition"].last_known_elr and len(w["partition"].isr) >= 2
                       and (w["change"][0] in w["partition"].isr or w["change"][2] in w["partition"].isr)))
def test_bulk_takes_the_common_cases_it_can(world: dict[str, Any]) -> None:
    """Where a clean leader is left in the new ISR (and the min ISR holds with ELR), the bulk
    path answers itself -- and equals the builder."""
    partition = world["partition"]
    remove, _, unclean_b = world["change"]
    new_isr = [r for r in partition.isr if r not in (remove, unclean_b)]
    fast = _compare(world)
    if fast is FALLBACK:
        elr = world["elr"] and MetadataVersion.from_version_string(world["mv"]).is_elr_supported()
        ctx = context(world["mv"], elr, world["brokers"], world["excluded"], world["excluded_dirs"],
                      world["min_isr"], world["unclean"])
        cluster, excl = ctx.cluster, ctx.exclusions
        clean = [r for r in partition.replicas if r in new_isr and cluster.is_active(r)
                 and not excl.excluded(r, partition.directories[partition.replicas.index(r)])
                 and cluster.has_online_dir(r, partition.directories[partition.replicas.index(r)])]
        assert not clean or (elr and len(new_isr) < min(world["min_isr"], len(partition.replicas)))


def test_controlled_shutdown_shape_needs_no_builder() -> None:
    """The benchmark's shape: RF 3, all in the ISR, broker 0 leaving (leader of a third)."""
    brokers = {b: Broker("active", (OWN_DIR[b],)) for b in range(3)}
    brokers[0].state = "shutting"
    for mv, elr in (("3.7-IV2", False), ("4.0-IV1", True), ("3.5-IV2", False)):
        ctx = context(mv, elr, brokers, set(), {}, 2, False)
        topic = Topic("t", TOPIC_ID)
        items = []
        for pid in range(30):
            replicas = tuple((pid + k) % 3 for k in range(3))
            reg = PartitionRegistration(replicas, tuple(OWN_DIR[r] for r in replicas), replicas, (), (),
                                        replicas[0], LeaderRecoveryState.RECOVERED, 5, 9)
            topic.parts[pid] = reg
            items.append((topic, pid, reg))
        with ctx.reading_once():
            bulk = BulkLifecycleChanges(ctx, 0, NO_LEADER, NO_LEADER)
            got = bulk.changes(items)  # type: ignore[arg-type]
            want = [ctx.partition_update(t, pid, p, 0, NO_LEADER, NO_LEADER) for t, pid, p in items]  # type: ignore
        assert bulk.fallbacks == 0
        assert [g.encode() if g else None for g in got] == [w.encode() if w else None for w in want]
        led = [r for r in got if r is not None and r.message.leader != -2]
        # every partition broker 0 led moves (to the next replica); before 3.6 every shrink names a leader
        assert len(led) == (30 if mv == "3.5-IV2" else 10)


def test_min_isr_shared_lookup_keeps_a_topic_value() -> None:
    """Within one write, topics without their own min.insync.replicas share one lookup (the
    zone's fencing touches hundreds of topics a result); a topic with its own keeps it, in
    either order."""
    from support.replication import ReplicationControlTestContext

    from kraft_node.metadata.controller.partition_changes import PartitionChangeOps
    rc_ctx = ReplicationControlTestContext()
    rc_ctx.register_brokers(0, 1, 2)
    rc_ctx.unfence_brokers(0, 1, 2)
    for name in ("a", "b", "c"):
        rc_ctx.create_test_topic(name, [[0, 1, 2]])
    rc_ctx.alter_topic_config("b", "min.insync.replicas", "2")
    ops = PartitionChangeOps(rc_ctx.replication_control, rc_ctx.cluster_control, rc_ctx.configuration_control,
                             rc_ctx.feature_control)
    rc = rc_ctx.replication_control
    topics = {n: rc.topic(rc.topic_id(n)) for n in ("a", "b", "c")}  # type: ignore[arg-type]
    for order in (("a", "b", "c"), ("b", "c", "a")):
        with ops.context.reading_once():
            got = {n: ops.context.effective_min_isr(topics[n]) for n in order}  # type: ignore[arg-type]
        assert got == {"a": 1, "b": 2, "c": 1}
    rc_ctx.alter_topic_config("a", "min.insync.replicas", "3")
    with ops.context.reading_once():
        got = {n: ops.context.effective_min_isr(topics[n]) for n in ("c", "a", "b")}  # type: ignore[arg-type]
    assert got == {"a": 3, "b": 2, "c": 1}
