"""The ``_change_replay`` kernel (runs of ISR/leader-only PartitionChangeRecords, see
``kraft_node/_pure/_change_replay.py``): the native ``RunScanner`` against its pure twin, and
``ReplicationControlManager`` state replayed through each against the one-by-one replay.

* kernel level: hypothesis builds a topic's partitions (ISRs with repeats, leaders in and out of
  the ISR, leaderless, ELRs, MIGRATING / real / no directories), an ISR index that matches them,
  sometimes damaged (an entry missing) and with other topics for some brokers, and records mixing
  simple changes with every shape a run must stop at (another topic, an equal topic id held by
  another Uuid object, a repeated or unknown or non-int partition, a non-null list field, a
  recovery state, a leader or member outside Java's int, a broker not in the index yet).  Both
  twins must give the same end, partitions, previous registrations (the same objects), new
  registrations (equal, field by field), final index tuples in the same broker order, moved
  brokers and attention positions.
* manager level: the same records replayed by ``replay_partition_changes`` with the native
  kernel, with the twin, and one by one through ``merge`` and the general index upkeep leave
  the same partitions, ISR index (order included), imbalanced set and counters, and a record
  that does not fit is named at the same index.
"""
from __future__ import annotations

import importlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.replication import ReplicationControlTestContext, creatable_topic, create_topics_request, find_result

from kraft_node.metadata.controller import replication_control as rcm
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
    PartitionReplayError,
)
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

PURE = importlib.import_module("kraft_node._pure._change_replay")
NATIVE = importlib.import_module("kraft_node._native._change_replay")
FLAG = PURE.LEADER_FLAG
TOPIC = Uuid((3 << 64) | 11)
OTHER = Uuid((4 << 64) | 12)
KEY = rcm.topic_key(TOPIC)
CHANGE = m.PartitionChangeRecord.API_KEY
BROKERS = list(range(6))


def _scanner(mod: Any) -> Any:
    return mod.RunScanner(PartitionRegistration, DirectoryId.MIGRATING, CHANGE)


@st.composite
def registrations(draw: Any) -> PartitionRegistration:
    rf = draw(st.integers(1, 4))
    replicas = tuple(draw(st.permutations(BROKERS))[:rf])
    isr = tuple(r for r in replicas if draw(st.integers(0, 3)))
    if isr and draw(st.integers(0, 15)) == 0:
        isr = isr + isr[:1]  # a repeated member: indexed once
    leader = draw(st.sampled_from([NO_LEADER, *isr, *replicas]))
    dirs = draw(st.sampled_from(["migrating", "real", "none", "mixed"]))
    directories: tuple[Uuid, ...]
    if dirs == "migrating":
        directories = DirectoryId.migrating_tuple(rf)
    elif dirs == "real":
        directories = tuple(Uuid((9 << 64) | (r + 1)) for r in replicas)
    elif dirs == "mixed":
        directories = (DirectoryId.MIGRATING,) + tuple(Uuid((9 << 64) | (r + 1)) for r in replicas[1:])
    else:
        directories = ()
    elr = tuple(r for r in replicas if r not in isr)[:draw(st.integers(0, 1))]
    return PartitionRegistration(replicas, directories, isr, (), (), leader,
                                 draw(st.sampled_from(list(LeaderRecoveryState))), draw(st.integers(0, 5)),
                                 draw(st.integers(0, 5)), elr=elr)


def _index(parts: dict[int, PartitionRegistration]) -> dict[int, dict[str, tuple[int, ...]]]:
    """broker -> {topic key: entries}, as the one-by-one replay builds it (partition order)."""
    members: dict[int, dict[str, tuple[int, ...]]] = {}
    for pid, reg in parts.items():
        for b, e in PURE._entries(pid, reg.isr, reg.leader).items():
            tm = members.setdefault(b, {})
            tm[KEY] = tm.get(KEY, ()) + (e,)
    return members


@st.composite
def records(draw: Any, parts: dict[int, PartitionRegistration]) -> list[Any]:
    """Mostly a run: distinct partitions in some order, each record a simple change from its
    replicas (now and then broker 7, which no index holds); now and then a record a run stops at."""
    npart = len(parts)
    order = list(draw(st.permutations(range(npart))))
    out = []
    for _ in range(draw(st.integers(1, 3))):  # the order again: repeats
        for pid in order[:draw(st.integers(1, npart))]:
            replicas = list(parts[pid].replicas)
            pool = replicas + ([7] if draw(st.integers(0, 9)) == 0 else [])
            fields: dict[str, Any] = {}
            if draw(st.integers(0, 4)):
                fields["isr"] = [b for b in draw(st.permutations(pool)) if draw(st.integers(0, 2))]
                if fields["isr"] and draw(st.integers(0, 20)) == 0:
                    fields["isr"].append(fields["isr"][0])
            fields["leader"] = draw(st.sampled_from([NO_LEADER_CHANGE, NO_LEADER, *pool]))
            topic: Any = TOPIC
            rec_pid: Any = pid
            odd = draw(st.integers(0, 40))
            if odd == 0:
                fields[draw(st.sampled_from(["eligible_leader_replicas", "last_known_elr", "replicas",
                                             "removing_replicas", "adding_replicas", "directories"]))] = []
            elif odd == 1:
                fields["leader_recovery_state"] = 0
            elif odd == 2:
                topic = OTHER
            elif odd in (3, 4, 5):
                topic = Uuid(TOPIC.bytes)  # equal, another object
            elif odd == 6:
                fields["leader"] = 1 << 40
            elif odd == 7 and fields.get("isr"):
                fields["isr"] = fields["isr"] + [-(1 << 35)]
            elif odd == 8:
                rec_pid = draw(st.sampled_from([float(pid), -1, npart]))  # npart: a partition nobody has
            out.append(m.PartitionChangeRecord(topic_id=topic, partition_id=rec_pid, **fields))
    return out


def _same_registration(a: Any, b: Any) -> bool:
    return a == b and all(type(getattr(a, f)) is type(getattr(b, f)) for f in PURE._FIELDS)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_native_scan_equals_the_twin(data: Any) -> None:
    npart = data.draw(st.integers(1, 8))
    parts = {pid: data.draw(registrations()) for pid in range(npart)}
    members = _index(parts)
    damage = data.draw(st.integers(0, 5))
    if damage == 0 and members:  # an entry missing: the bulk path must refuse (finals None)
        b = data.draw(st.sampled_from(sorted(members)))
        entries = members[b][KEY]
        members[b][KEY] = entries[1:]
        if not members[b][KEY]:
            del members[b][KEY]
    elif damage == 1:  # other topics for some brokers: an emptied entry moves instead of failing
        for b in BROKERS[: data.draw(st.integers(1, 6))]:
            members.setdefault(b, {})["other"] = (1,)
    elif damage == 2 and members:  # this topic's entries out of partition order
        for b in members:
            if KEY in members[b]:
                members[b][KEY] = tuple(data.draw(st.permutations(list(members[b][KEY]))))
    recs = data.draw(records(parts))
    start = data.draw(st.sampled_from([0, 0, 0, len(recs) // 2, len(recs) - 1]))
    topic_id = recs[start].topic_id
    want = _scanner(PURE).scan(recs, start, topic_id, parts, members, KEY)
    got = _scanner(NATIVE).scan(recs, start, topic_id, parts, members, KEY)
    if want is None:
        assert got is None
        return
    assert got is not None
    (end, pids, prevs, news, finals, moved, attention) = want
    (g_end, g_pids, g_prevs, g_news, g_finals, g_moved, g_attention) = got
    assert (g_end, g_pids, g_attention, g_moved) == (end, pids, attention, moved)
    assert all(a is b for a, b in zip(g_prevs, prevs)) and len(g_prevs) == len(prevs)
    assert len(g_news) == len(news) and all(_same_registration(a, b) for a, b in zip(g_news, news))
    if finals is None:
        assert g_finals is None
    else:
        assert g_finals is not None and list(g_finals.items()) == list(finals.items())


def test_the_scanner_refuses_a_class_it_cannot_make() -> None:
    for mod in (PURE, NATIVE):
        with pytest.raises(ValueError, match="__slots__ are exactly"):
            mod.RunScanner(LeaderRecoveryState, DirectoryId.MIGRATING, CHANGE)


def test_a_shutdown_run_walks_every_record_natively() -> None:
    """Broker 0 leaves the ISR of 200 partitions of a topic it leads a third of: one run, the
    leader changes flagged for attention, broker 0 gone from the index."""
    parts = {p: PartitionRegistration(tuple((p + k) % 3 for k in range(3)), DirectoryId.migrating_tuple(3),
                                      tuple((p + k) % 3 for k in range(3)), (), (), p % 3,
                                      LeaderRecoveryState.RECOVERED, 4, 7) for p in range(200)}
    members = _index(parts)
    recs = []
    for p, reg in parts.items():
        isr = [b for b in reg.isr if b != 0]
        recs.append(m.PartitionChangeRecord(topic_id=Uuid(TOPIC.bytes), partition_id=p, isr=isr,
                                            leader=isr[0] if reg.leader == 0 else NO_LEADER_CHANGE))
    for mod in (PURE, NATIVE):
        end, pids, _prevs, news, finals, moved, attention = _scanner(mod).scan(recs, 0, TOPIC, parts, members, KEY)
        assert end == 200 and pids == list(range(200)) and moved == set()
        # the leader moves from broker 0 (the preferred replica) to broker 1: not preferred any more
        assert attention == [(p, mod.ATTN_LEADER) for p in range(200) if p % 3 == 0]
        assert finals[0] == ()
        assert sorted(finals[1]) == sorted([p | FLAG for p in range(200) if p % 3 in (0, 1)]
                                           + [p for p in range(200) if p % 3 == 2])
        assert news[0].leader == 1 and news[0].leader_epoch == 5 and news[0].partition_epoch == 8
        assert news[1].leader == 1 and news[1].leader_epoch == 4


# -- the manager, through each kernel ------------------------------------------------------------

def _world(layout: list[list[list[int]]]) -> tuple[ReplicationControlTestContext, list[Uuid], list[Any]]:
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(*BROKERS)
    ctx.unfence_brokers(*BROKERS)
    ids, creation = [], []
    for t, assignment in enumerate(layout):
        result = ctx.replication_control.create_topics(
            create_topics_request(creatable_topic(f"t{t}", assignments=assignment)), {f"t{t}"})
        topic = find_result(result.response, f"t{t}")
        assert topic.error_code == 0, topic.error_message
        ids.append(topic.topic_id)
        ctx.replay(result.records)
        creation.append(result.records)
    return ctx, ids, creation


def _replica(layout: list[list[list[int]]], creation: list[Any]) -> ReplicationControlTestContext:
    ctx = ReplicationControlTestContext()
    ctx.register_brokers(*BROKERS)
    ctx.unfence_brokers(*BROKERS)
    for recs in creation:
        ctx.replay(recs)
    return ctx


def _state(ctx: ReplicationControlTestContext) -> Any:
    rc = ctx.replication_control
    return ({tid: list(t.parts.items()) for tid, t in rc.topics_by_id.items()},
            [(b, list(tm.items())) for b, tm in rc.brokers_to_isrs._members.items()],
            list(rc.imbalanced_partitions), rc.unclean_leader_elections.get(), rc.elections_from_elr.get())


@st.composite
def lifecycle(draw: Any) -> tuple[list[list[list[int]]], list[tuple[int, int, dict[str, Any]]]]:
    """Topics, then the changes a broker's shutdown writes (runs of a topic's partitions in
    order), mixed with stray changes of any partition."""
    layout = []
    for _ in range(draw(st.integers(1, 3))):
        rf = draw(st.integers(1, 4))  # one replication factor per topic
        layout.append([list(draw(st.permutations(BROKERS))[:rf]) for _ in range(draw(st.integers(1, 12)))])
    gone = draw(st.sampled_from(BROKERS))
    changes = []
    for t, assignment in enumerate(layout):
        for pid, replicas in enumerate(assignment):
            if draw(st.integers(0, 4)) == 0:
                isr = [r for r in draw(st.permutations(replicas)) if draw(st.booleans())]
                changes.append((t, pid, {"isr": isr, "leader": draw(st.sampled_from([NO_LEADER_CHANGE, NO_LEADER,
                                                                                      *replicas]))}))
            elif gone in replicas:
                isr = [r for r in replicas if r != gone]
                leader = (isr[0] if isr else NO_LEADER) if replicas[0] == gone else NO_LEADER_CHANGE
                changes.append((t, pid, {"isr": isr, "leader": leader}))
    if draw(st.integers(0, 3)) == 0 and changes:  # a record of a partition nobody has
        at = draw(st.integers(0, len(changes)))
        changes.insert(at, (0, 99, {"isr": [1], "leader": 1}))
    return layout, changes


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(lifecycle())
def test_the_manager_state_is_the_same_through_either_kernel_and_one_by_one(
        monkeypatch: pytest.MonkeyPatch, scenario: Any) -> None:
    layout, changes = scenario
    base, ids, creation = _world(layout)
    recs = [m.PartitionChangeRecord(topic_id=ids[t], partition_id=p, **f) for t, p, f in changes]
    outcomes = []
    for how in ("one", "pure", "native", "native, logging at DEBUG"):
        ctx = base if how == "one" else _replica(layout, creation)
        rc = ctx.replication_control
        error: int | None = None
        with monkeypatch.context() as patch:
            if "DEBUG" in how:  # the apply takes its plain way for every record
                patch.setattr(rcm.log, "isEnabledFor", lambda level: True)
            if how == "one":
                rc.fast_simple_changes = False
                for i, r in enumerate(recs):
                    try:
                        rc.replay(r, -1)
                    except rcm.ReplayError:
                        error = i
                        break
            else:
                patch.setattr(rcm, "_RUN_SCANNER", _scanner(PURE if how == "pure" else NATIVE))
                try:
                    rc.replay_partition_changes(recs)
                except PartitionReplayError as exc:
                    error = exc.index
        outcomes.append((error, _state(ctx)))
    assert outcomes[1] == outcomes[0]
    assert outcomes[2] == outcomes[0]
    assert outcomes[3] == outcomes[0]


# -- encoding --------------------------------------------------------------------------------------

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


@st.composite
def change_messages(draw: Any) -> Any:
    """PartitionChangeRecords, mostly ISR/leader-only, now and then any other shape."""
    fields: dict[str, Any] = {"partition_id": draw(st.one_of(INT32, st.sampled_from([0, 1 << 31, -(1 << 31) - 1])))}
    fields["topic_id"] = draw(st.sampled_from([TOPIC, OTHER, Uuid(0), Uuid((1 << 128) - 1)]))
    if draw(st.integers(0, 3)):
        fields["isr"] = draw(st.lists(st.one_of(st.integers(-2, 9), INT32), max_size=draw(st.sampled_from([4, 200]))))
    fields["leader"] = draw(st.one_of(st.sampled_from([NO_LEADER_CHANGE, NO_LEADER, 0, 5]), INT32))
    odd = draw(st.integers(0, 12))
    if odd == 0:
        fields[draw(st.sampled_from(["replicas", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
                                     "last_known_elr"]))] = [1]
    elif odd == 1:
        fields["directories"] = [Uuid(5)]
    elif odd == 2:
        fields["leader_recovery_state"] = draw(st.sampled_from([0, 1]))
    elif odd == 3:
        fields["leader"] = 1 << 31  # not an int32: the generated writer refuses it, the encoder leaves it
    msg = m.PartitionChangeRecord(**fields)
    if odd == 4:
        msg = m.PartitionRecord(partition_id=1, topic_id=TOPIC, replicas=[1], isr=[1], leader=1)
    return msg


def _generic(msg: Any, version: int) -> bytes | None:
    from kraft_node.metadata.controller.result import ApiMessageAndVersion
    try:
        return ApiMessageAndVersion(msg, version).encode()
    except Exception:  # noqa: BLE001 -- a value the writer refuses
        return None


@settings(max_examples=400, deadline=None)
@given(st.lists(change_messages(), max_size=12), st.sampled_from([0, 1, 2]))
def test_encode_changes_writes_the_generated_bytes_in_both_twins(msgs: list[Any], version: int) -> None:
    from kraft_storage.messages.framing import frame_header
    header = frame_header(CHANGE, version)
    want = PURE.encode_changes(msgs, m.PartitionChangeRecord, header)
    assert NATIVE.encode_changes(msgs, m.PartitionChangeRecord, header) == want
    for msg, value in zip(msgs, want):
        simple = (type(msg) is m.PartitionChangeRecord and msg.leader_recovery_state == -1
                  and all(getattr(msg, f) is None for f in PURE._NULL_FIELDS)
                  and all(-(1 << 31) <= v < (1 << 31) for v in [msg.partition_id, msg.leader, *(msg.isr or [])]))
        assert (value is not None) == simple
        if value is not None:
            assert value == _generic(msg, version)


def test_encode_changes_leaves_what_it_does_not_write() -> None:
    from kraft_storage.messages.framing import frame_header
    big = m.PartitionChangeRecord(topic_id=TOPIC, partition_id=1, isr=list(range(PURE.ENCODE_MAX_ISR + 1)), leader=1)
    alien = m.PartitionChangeRecord(topic_id=TOPIC, partition_id=1, isr=[1], leader=1)
    alien.unknown_tagged_fields = [(9, b"x")]
    for mod in (PURE, NATIVE):
        assert mod.encode_changes([big, alien, "x"], m.PartitionChangeRecord, frame_header(CHANGE, 1)) == [None] * 3


def test_a_step_encodes_its_records_once_and_they_equal_the_plain_ones() -> None:
    """The lifecycle's steps swap their ISR/leader-only records for EncodedChanges: equal to the
    ApiMessageAndVersion of the same message either way round, the same bytes, the rest untouched."""
    from kraft_node.metadata.controller.leadership import EncodedChange, encode_changes
    from kraft_node.metadata.controller.result import ApiMessageAndVersion
    plain = [ApiMessageAndVersion(m.PartitionChangeRecord(topic_id=TOPIC, partition_id=p, isr=[1, 2],
                                                          leader=1 if p % 2 else NO_LEADER_CHANGE), 1)
             for p in range(5)]
    other = ApiMessageAndVersion(m.PartitionChangeRecord(topic_id=TOPIC, partition_id=9, replicas=[1]), 1)
    fence = ApiMessageAndVersion(m.FenceBrokerRecord(id=1, epoch=2), 0)
    records = [fence, *plain, other]
    want = [r.encode() for r in records]
    encode_changes(records, 1)
    assert records[0] is fence and records[-1] is other
    assert all(type(r) is EncodedChange for r in records[1:-1])
    assert [r.encode() for r in records] == want
    assert records == [fence, *plain, other] and [fence, *plain, other] == records
    assert records[1] != plain[2] and plain[2] != records[1]
    assert records[1].message is plain[0].message


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(change_messages(), st.sampled_from([0, 1, 2, 3, -1]), st.integers(0, 5)), max_size=10),
       st.integers(0, 3))
def test_encode_records_swaps_the_same_records_in_both_twins(items: list[Any], start: int) -> None:
    """In place: exactly the ApiMessageAndVersions whose message the encoder writes at a version with
    a header become EncodedChanges, the same in both twins, with the generated writer's bytes."""
    from kraft_node.metadata.controller.leadership import _ENCODED_HEADERS, EncodedChange
    from kraft_node.metadata.controller.result import ApiMessageAndVersion, FramedRecord
    plain = []
    for msg, version, kind in items:
        if kind == 0 and version in (0, 1, 2) and _generic(msg, version) is not None:
            plain.append(FramedRecord(_generic(msg, version), version))  # type: ignore[arg-type]
        else:
            plain.append(ApiMessageAndVersion(msg, version))
    outs = []
    for mod in (PURE, NATIVE):
        records = list(plain)
        n = mod.encode_records(records, start, ApiMessageAndVersion, EncodedChange, m.PartitionChangeRecord,
                               _ENCODED_HEADERS)
        outs.append((n, [type(r) for r in records]))
        for k, (before, after) in enumerate(zip(plain, records)):
            if k < start or type(before) is not ApiMessageAndVersion:
                assert after is before
            elif type(after) is EncodedChange:
                assert after.message is before.message and after.version is before.version
                assert after.encode() == _generic(before.message, before.version)
            else:
                assert after is before
                assert (before.version not in (0, 1, 2)
                        or PURE.encode_changes([before.message], m.PartitionChangeRecord,
                                               _ENCODED_HEADERS[before.version]) == [None])
        assert n == sum(type(r) is EncodedChange for r in records)
    assert outs[0] == outs[1]
