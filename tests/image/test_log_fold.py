"""The log fold (``kraft_node.metadata.image.log_fold``) gives the image record-at-a-time replay gives.

The reference is ``MetadataDelta``: every record replayed one at a time into one delta over the
base image, then ``apply``.  The fold must give the same image when the log is folded whole, and
when it is cut into pieces folded on their own (each knows nothing of the state before it) and
composed in order -- at every split point, for several cuts, over the empty image and over an
image built from a prefix.  For a log with a record the image refuses, the fold must fail at the
same record (same offset, the reference's message).

Inputs: histories drawn from a model of the cluster (:func:`partition_history`: topics created,
removed and re-created under the same names, partitions replaced, and changes to every field of
a partition -- replicas with and without directories, MIGRATING directories, ELR, recovery
state -- plus configs, brokers, ClearElr), the shared valid histories of
``tests/support/metadata_history.py`` (ACLs, quotas, SCRAM, tokens, transactions), the generated
benchmark log, and every Kafka fixture.  The partition fold's two twins are compared directly
(same exported arrays, same errors).
"""
from __future__ import annotations

import importlib
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fixture_params
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.metadata_history import random_history, write_log

from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.image import log_fold as lf
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.provenance import MetadataProvenance
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.messages.runtime import Uuid
from kraft_storage.record import decode_records
from kraft_storage.tools import gen_metadata_log as gen

PROV = MetadataProvenance(10**6, 3, 1_700_000_000_000, True)
ZERO = Uuid(0)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def v(message: Any, version: int = 0) -> ApiMessageAndVersion:
    return ApiMessageAndVersion(message, version)


# ---------------------------------------------------------------------------------------------
# The two paths
# ---------------------------------------------------------------------------------------------

def one_at_a_time(records: list[ApiMessageAndVersion], offsets: list[int],
                  base: MetadataImage = MetadataImage.EMPTY) -> tuple[MetadataImage | None, tuple[Any, str] | None]:
    """The reference: (image, None), or (None, (offset of the refused record, its message))."""
    delta = MetadataDelta(base)
    for offset, record in zip(offsets, records):
        try:
            delta.replay(record.message)
        except Exception as exc:  # noqa: BLE001 - whatever the reference raises is what the fold must report
            return None, (offset, str(exc))
    try:
        return delta.apply(PROV), None
    except Exception as exc:  # noqa: BLE001 - TopicsDelta.apply refuses a name or id clash (no offset)
        return None, (None, str(exc))


def fold_pieces(records: list[ApiMessageAndVersion], offsets: list[int], cuts: list[int]) -> lf.PartialDelta:
    values = [r.encode() for r in records]
    bounds = [0, *sorted(set(cuts)), len(values)]
    pieces = [lf.fold_values(values[a:b], offsets[a:b]) for a, b in zip(bounds, bounds[1:])]
    return lf.compose_all(pieces)


def folded(records: list[ApiMessageAndVersion], offsets: list[int], cuts: list[int] = (),  # type: ignore[assignment]
           base: MetadataImage = MetadataImage.EMPTY) -> tuple[MetadataImage | None, tuple[Any, str] | None]:
    try:
        return fold_pieces(records, offsets, list(cuts)).apply(base, PROV), None
    except lf.LogFoldError as exc:
        return None, (exc.offset, exc.reason)


def assert_same(records: list[ApiMessageAndVersion], cuts: list[int] = (),  # type: ignore[assignment]
                base: MetadataImage = MetadataImage.EMPTY, offsets: list[int] | None = None) -> MetadataImage | None:
    offsets = list(range(100, 100 + len(records))) if offsets is None else offsets
    want, want_err = one_at_a_time(records, offsets, base)
    got, got_err = folded(records, offsets, cuts, base)
    if want_err is not None:
        assert got_err is not None, f"the fold took what the reference refused at {want_err}"
        if want_err[0] is None:   # refused by TopicsDelta.apply: the fold names the TopicRecord
            assert got_err[1] == want_err[1]
        else:
            assert got_err == want_err
        return None
    assert got_err is None, f"the fold refused {got_err}, the reference took everything"
    assert got == want
    for name in ("features", "cluster", "topics", "configs", "client_quotas", "producer_ids", "acls", "scram",
                 "delegation_tokens"):
        assert getattr(got, name) == getattr(want, name), name
    return got


# ---------------------------------------------------------------------------------------------
# A model of topics, partitions, configs and brokers
# ---------------------------------------------------------------------------------------------

@dataclass
class _Part:
    replicas: list[int]
    dirs: list[Uuid]            # [] when every directory is MIGRATING
    elr: list[int] = field(default_factory=list)


class _Model:
    """What the records so far left, so each next record can be valid (or wrong in one known way)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.topics: dict[Uuid, str] = {}
        self.parts: dict[tuple[Uuid, int], _Part] = {}
        self.nparts: dict[Uuid, int] = {}
        self.removed_names: set[str] = set()
        self.removed_ids: list[Uuid] = []
        self.brokers: dict[int, int] = {}
        self.next_name = 0

    def uuid(self) -> Uuid:
        return Uuid(self.rng.getrandbits(128) | (1 << 120))

    def replicas(self, n: int | None = None) -> list[int]:
        return self.rng.sample(range(6), n or self.rng.randrange(1, 5))

    def dirs_for(self, n: int, version: int) -> tuple[list[Uuid] | None, list[Uuid]]:
        """(directories to write or None, the normalized state they leave)."""
        if version == 0:
            return None, []
        kind = self.rng.random()
        if kind < 0.3:
            return [], []
        if kind < 0.5:
            return [ZERO] * n, []
        real = [self.uuid() for _ in range(n)]
        if self.rng.random() < 0.2 and n > 1:
            real[-1] = ZERO          # a real list with a MIGRATING entry stays real
        return real, real


def _partition_record(model: _Model, tid: Uuid, pid: int, version: int) -> ApiMessageAndVersion:
    rng = model.rng
    replicas = model.replicas()
    dirs, state = model.dirs_for(len(replicas), version)
    elr = rng.sample(replicas, rng.randrange(len(replicas) + 1)) if version >= 2 and rng.random() < 0.4 else []
    model.parts[(tid, pid)] = _Part(replicas, state, elr)
    fields: dict[str, Any] = dict(partition_id=pid, topic_id=tid, replicas=replicas,
                                  isr=replicas[:rng.randrange(1, len(replicas) + 1)],
                                  leader=rng.choice(replicas + [-1]), leader_epoch=rng.randrange(5),
                                  partition_epoch=rng.randrange(5), leader_recovery_state=rng.choice([0, 0, 1]))
    if dirs is not None:
        fields["directories"] = dirs
    if version >= 2:
        fields["eligible_leader_replicas"] = elr
        fields["last_known_elr"] = rng.sample(range(6), rng.randrange(2)) if rng.random() < 0.3 else []
    return v(m.PartitionRecord(**fields), version)


def _change(model: _Model, tid: Uuid, pid: int, version: int) -> ApiMessageAndVersion:
    rng = model.rng
    part = model.parts[(tid, pid)]
    fields: dict[str, Any] = dict(partition_id=pid, topic_id=tid)
    r = rng.random()
    if r < 0.15:   # new replicas, with directories that pair up (or MIGRATING ones)
        replicas = model.replicas()
        fields["replicas"] = replicas
        dirs, state = model.dirs_for(len(replicas), version)
        if dirs is None or (not dirs and part.dirs and len(part.dirs) != len(replicas)):
            if part.dirs and len(part.dirs) != len(replicas):
                replicas = fields["replicas"] = model.replicas(len(part.dirs))
            state = part.dirs
        else:
            fields["directories"] = dirs
        part.replicas = replicas
        part.dirs = state
    elif r < 0.25 and version >= 1:   # directories alone
        if rng.random() < 0.5:
            dirs = [model.uuid() for _ in part.replicas]
            part.dirs = dirs
        else:
            dirs = [ZERO] * rng.randrange(0, 5)
            part.dirs = []
        fields["directories"] = dirs
    elif r < 0.30:   # replicas alone, the count kept when the directories are real
        replicas = model.replicas(len(part.replicas) if part.dirs else None)
        fields["replicas"] = replicas
        part.replicas = replicas
    if rng.random() < 0.6:
        fields["isr"] = rng.sample(part.replicas, rng.randrange(1, len(part.replicas) + 1))
    fields["leader"] = rng.choice([-2, -2, -1] + part.replicas)
    if rng.random() < 0.2:
        fields["removing_replicas"] = rng.sample(part.replicas, rng.randrange(len(part.replicas) + 1))
    if rng.random() < 0.2:
        fields["adding_replicas"] = rng.sample(part.replicas, rng.randrange(len(part.replicas) + 1))
    if rng.random() < 0.2:
        fields["leader_recovery_state"] = rng.choice([-1, 0, 1])
    if version >= 2 and rng.random() < 0.3:
        elr = rng.sample(part.replicas, rng.randrange(len(part.replicas) + 1))
        fields["eligible_leader_replicas"] = elr
        part.elr = elr
    if version >= 2 and rng.random() < 0.2:
        fields["last_known_elr"] = rng.sample(range(6), rng.randrange(3))
    return v(m.PartitionChangeRecord(**fields), version)


def _event(model: _Model, offset: int) -> list[ApiMessageAndVersion]:
    rng = model.rng
    kind = rng.choice(["topic", "change", "change", "change", "change", "change", "replace", "remove", "config",
                       "config", "broker", "broker", "clear_elr", "noop", "feature"])
    live = sorted(model.topics, key=str)
    if kind == "topic" or not live:
        old = sorted(model.removed_names - set(model.topics.values()))   # names of removed topics, free again
        name = rng.choice(old) if old and rng.random() < 0.5 else f"t{model.next_name}"
        model.next_name += 1
        tid = model.uuid()
        model.topics[tid] = name
        n = rng.randrange(1, 5)
        model.nparts[tid] = n
        out = [v(m.TopicRecord(name=name, topic_id=tid))]
        out += [_partition_record(model, tid, p, rng.choice([0, 1, 2])) for p in range(n)]
        return out
    tid = rng.choice(live)
    if kind == "change":
        return [_change(model, tid, rng.randrange(model.nparts[tid]), rng.choice([0, 1, 2]))
                for _ in range(rng.randrange(1, 4))]
    if kind == "replace":
        pid = rng.randrange(model.nparts[tid] + 1)    # maybe a new partition
        model.nparts[tid] = max(model.nparts[tid], pid + 1)
        return [_partition_record(model, tid, pid, rng.choice([0, 1, 2]))]
    if kind == "remove":
        return _event_remove(model, tid)
    if kind == "config":
        target = rng.choice([(2, model.topics[tid]), (2, "gone"), (4, ""), (4, "1"), (99, "x"), (98, "x")])
        key = rng.choice(["retention.ms", "cleanup.policy"])
        value = None if rng.random() < 0.3 else str(rng.randrange(100))
        return [v(m.ConfigRecord(resource_type=target[0], resource_name=target[1], name=key, value=value))]
    if kind == "broker":
        bid = rng.randrange(4)
        if bid not in model.brokers or rng.random() < 0.2:
            model.brokers[bid] = offset
            return [v(m.RegisterBrokerRecord(
                broker_id=bid, incarnation_id=model.uuid(), broker_epoch=offset,
                end_points=[m.RegisterBrokerRecord.BrokerEndpoint(name="PLAINTEXT", host="h", port=9092 + bid,
                                                                  security_protocol=0)],
                features=[], rack=None, fenced=True, log_dirs=[model.uuid()]), 3)]
        epoch = model.brokers[bid]
        r = rng.random()
        if r < 0.1:
            del model.brokers[bid]
            return [v(m.UnregisterBrokerRecord(broker_id=bid, broker_epoch=epoch))]
        if r < 0.3:
            return [v((m.FenceBrokerRecord if rng.random() < 0.5 else m.UnfenceBrokerRecord)(id=bid, epoch=epoch))]
        dirs = [model.uuid() for _ in range(rng.randrange(3))] if rng.random() < 0.3 else []
        return [v(m.BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=epoch, fenced=rng.choice([-1, 0, 1]),
                                                   in_controlled_shutdown=rng.choice([0, 0, 1]), log_dirs=dirs), 2)]
    if kind == "clear_elr":
        for p in range(model.nparts.get(tid, 0)):
            model.parts[(tid, p)].elr = []
        return [v(m.ClearElrRecord(topic_name=model.topics[tid] if rng.random() < 0.7 else ""))]
    if kind == "feature":
        return [v(m.FeatureLevelRecord(name="metadata.version", feature_level=rng.choice([14, 21, 22])))]
    return [v(m.NoOpRecord())]


def partition_history(seed: int, events: int = 40) -> list[ApiMessageAndVersion]:
    """A valid history from the model (offsets are the positions + 100)."""
    model = _Model(random.Random(seed))
    out: list[ApiMessageAndVersion] = []
    for _ in range(events):
        out += _event(model, 100 + len(out))
    return out


def flatten(batches: list[Any]) -> tuple[list[ApiMessageAndVersion], list[int]]:
    """The metadata records of ``random_history`` batches with their offsets (a control batch
    takes one offset)."""
    records, offsets = [], []
    offset = 0
    for batch in batches:
        if batch.control:
            offset += 1
            continue
        for record in batch.records:
            records.append(record)
            offsets.append(offset)
            offset += 1
    return records, offsets


# ---------------------------------------------------------------------------------------------
# Fold = one at a time
# ---------------------------------------------------------------------------------------------

@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_history_folded_in_pieces_is_the_one_at_a_time_image(seed: int, data: Any) -> None:
    records = partition_history(seed)
    n = len(records)
    cuts = data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4), label="cuts")
    assert_same(records)
    assert_same(records, cuts)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1))
def test_every_split_point_of_a_history(seed: int) -> None:
    records = partition_history(seed, events=15)
    for cut in range(1, len(records)):
        assert_same(records, [cut])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_history_folded_over_an_image_of_its_prefix(seed: int, data: Any) -> None:
    records = partition_history(seed, events=50)
    n = len(records)
    split = data.draw(st.integers(0, n), label="split")
    cuts = data.draw(st.lists(st.integers(split + 1, max(split + 1, n - 1)), max_size=3), label="cuts")
    offsets = list(range(100, 100 + n))
    base, err = one_at_a_time(records[:split], offsets[:split])
    assert err is None
    assert base is not None
    assert_same(records[split:], [c - split for c in cuts], base, offsets[split:])


@pytest.mark.parametrize("seed", range(12))
def test_the_shared_valid_histories(seed: int) -> None:
    records, offsets = flatten(random_history(seed, events=150))
    rng = random.Random(seed)
    assert_same(records, offsets=offsets)
    cuts = sorted(rng.sample(range(1, len(records)), 5))
    assert_same(records, cuts, offsets=offsets)


def test_the_generated_benchmark_log(tmp_path: Path) -> None:
    (path,) = gen.write_log(str(tmp_path / "gen.log"), 30_000, seed=3, single_file=True, brokers=6,
                            initial_topics=20)
    cols = decode_records(open(path, "rb").read())
    control = cols.is_control()
    records, offsets = [], []
    for i in range(len(cols)):
        if not control[i]:
            _k, version, msg = decode_metadata_record(cols.value(i))
            records.append(v(msg, version))
            offsets.append(int(cols.offset[i]))
    want, err = one_at_a_time(records, offsets)
    assert err is None
    whole = lf.fold_log(path)
    assert whole.error is None and whole.records == len(cols)
    assert whole.provenance is not None and whole.provenance.last_contained_offset == int(cols.offset[-1])
    assert whole.apply(MetadataImage.EMPTY, PROV) == want
    # in chunks of a few batches: many pieces composed in order
    folder_pieces = []
    for chunk in lf.iter_chunks(path, chunk_records=4_000):
        folder = lf.LogFolder()
        folder.add_record_columns(chunk)
        folder_pieces.append(folder.finish())
    assert len(folder_pieces) > 5
    assert lf.compose_all(folder_pieces).apply(MetadataImage.EMPTY, PROV) == want


@pytest.mark.parametrize("path", fixture_params("*.log", "*.checkpoint"))
def test_every_kafka_fixture(path: Path) -> None:
    cols = decode_records(Path(path).read_bytes())
    control = cols.is_control()
    records, offsets = [], []
    for i in range(len(cols)):
        if not control[i]:
            _k, version, msg = decode_metadata_record(cols.value(i))
            records.append(v(msg, version))
            offsets.append(int(cols.offset[i]))
    want, err = one_at_a_time(records, offsets)
    got = lf.fold_log(path)
    if err is not None:
        with pytest.raises(lf.LogFoldError) as info:
            got.apply(MetadataImage.EMPTY, PROV)
        assert (info.value.offset, info.value.reason) == err
        return
    image = got.apply(MetadataImage.EMPTY, PROV)
    assert image == want
    assert not image.is_empty()
    rng = random.Random(str(path))
    if len(records) > 2:
        assert_same(records, sorted(rng.sample(range(1, len(records)), min(6, len(records) - 1))), offsets=offsets)


# ---------------------------------------------------------------------------------------------
# A refused record: same offset, same message
# ---------------------------------------------------------------------------------------------

WRONG = ["unknown_partition", "unknown_topic", "removed_topic", "remove_unknown", "remove_twice",
         "record_dirs", "replicas_vs_dirs", "dirs_vs_replicas", "change_recovery", "record_recovery",
         "partition_record_dirs", "partition_unknown_topic", "broker_epoch", "broker_unregistered", "broker_fenced",
         "fence_unknown"]


def _wrong(model: _Model, kind: str, offset: int) -> list[ApiMessageAndVersion] | None:
    """One record the image refuses (None when the model has nothing to break that way)."""
    rng = model.rng
    live = sorted(model.topics, key=str)
    if kind == "unknown_partition" and live:
        tid = rng.choice(live)
        return [v(m.PartitionChangeRecord(partition_id=model.nparts[tid] + rng.randrange(3), topic_id=tid, leader=1))]
    if kind == "unknown_topic":
        return [v(m.PartitionChangeRecord(partition_id=0, topic_id=model.uuid(), isr=[1]))]
    if kind == "removed_topic" and model.removed_ids:
        tid = rng.choice(model.removed_ids)
        if rng.random() < 0.5:
            return [v(m.PartitionChangeRecord(partition_id=0, topic_id=tid, isr=[1]))]
        return [v(m.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1))]
    if kind == "remove_unknown":
        return [v(m.RemoveTopicRecord(topic_id=model.uuid()))]
    if kind == "remove_twice" and live:
        tid = rng.choice(live)
        return _event_remove(model, tid) + [v(m.NoOpRecord()), v(m.RemoveTopicRecord(topic_id=tid))]
    parts = sorted(model.parts, key=lambda k: (str(k[0]), k[1]))
    if kind == "record_dirs" and parts:
        tid, pid = rng.choice(parts)
        return [v(m.PartitionChangeRecord(partition_id=pid, topic_id=tid, replicas=[1, 2],
                                          directories=[model.uuid()] * rng.choice([1, 3])), 1)]
    real = [k for k in parts if model.parts[k].dirs]
    if kind == "replicas_vs_dirs" and real:
        tid, pid = rng.choice(real)
        n = len(model.parts[(tid, pid)].dirs)
        return [v(m.PartitionChangeRecord(partition_id=pid, topic_id=tid, replicas=model.replicas(n % 4 + 1)), 1)]
    if kind == "dirs_vs_replicas" and parts:
        tid, pid = rng.choice(parts)
        n = len(model.parts[(tid, pid)].replicas)
        return [v(m.PartitionChangeRecord(partition_id=pid, topic_id=tid,
                                          directories=[model.uuid() for _ in range(n % 4 + 1)]), 1)]
    if kind == "change_recovery" and parts:
        tid, pid = rng.choice(parts)
        return [v(m.PartitionChangeRecord(partition_id=pid, topic_id=tid, leader_recovery_state=rng.choice([2, -5])))]
    if kind == "record_recovery" and live:
        tid = rng.choice(live)
        return [v(m.PartitionRecord(partition_id=0, topic_id=tid, replicas=[1], isr=[1], leader=1,
                                    leader_recovery_state=3))]
    if kind == "partition_record_dirs" and live:
        tid = rng.choice(live)
        return [v(m.PartitionRecord(partition_id=rng.randrange(4), topic_id=tid, replicas=[1, 2], isr=[1], leader=1,
                                    directories=[model.uuid()]), 1)]
    if kind == "partition_unknown_topic":
        return [v(m.PartitionRecord(partition_id=0, topic_id=model.uuid(), replicas=[1], isr=[1], leader=1))]
    if kind == "broker_epoch" and model.brokers:
        bid = rng.choice(sorted(model.brokers))
        return [v(m.BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=model.brokers[bid] + 1, fenced=1), 2)]
    if kind == "broker_unregistered":
        bid = next(b for b in range(10, 20) if b not in model.brokers)
        return [v(m.BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=5, fenced=-1), 2)]
    if kind == "broker_fenced" and model.brokers:
        bid = rng.choice(sorted(model.brokers))
        return [v(m.BrokerRegistrationChangeRecord(broker_id=bid, broker_epoch=model.brokers[bid], fenced=4), 2)]
    if kind == "fence_unknown":
        return [v(m.FenceBrokerRecord(id=77, epoch=1))]
    return None


def _event_remove(model: _Model, tid: Uuid) -> list[ApiMessageAndVersion]:
    model.removed_names.add(model.topics.pop(tid))
    model.removed_ids.append(tid)
    for p in range(model.nparts.pop(tid)):
        del model.parts[(tid, p)]
    return [v(m.RemoveTopicRecord(topic_id=tid))]


def history_with_error(seed: int, kind: str, events: int = 40) -> list[ApiMessageAndVersion]:
    """A model history with one refused record (of ``kind``) at a random place, valid records around it."""
    model = _Model(random.Random(seed))
    where = model.rng.randrange(events)
    out: list[ApiMessageAndVersion] = []
    for i in range(events):
        if i >= where:
            bad = _wrong(model, kind, 100 + len(out))
            if bad is not None:
                out += bad
                where = events
        out += _event(model, 100 + len(out))
    return out


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(WRONG), data=st.data())
def test_a_refused_record_is_reported_at_its_offset(seed: int, kind: str, data: Any) -> None:
    records = history_with_error(seed, kind)
    n = len(records)
    cuts = data.draw(st.lists(st.integers(1, max(1, n - 1)), max_size=4), label="cuts")
    assert_same(records)
    assert_same(records, cuts)


@pytest.mark.parametrize("kind", WRONG)
def test_each_refusal_is_reached(kind: str) -> None:
    """Every kind of refusal happens in some history (the property above tests something), at its
    offset, over the image of the prefix too (the refusal found while applying, not folding)."""
    for seed in range(40):
        records = history_with_error(seed, kind)
        offsets = list(range(100, 100 + len(records)))
        _img, err = one_at_a_time(records, offsets)
        if err is None:
            continue
        assert_same(records)
        split = next((i for i, o in enumerate(offsets) if o == err[0]), len(records) // 2)
        base, base_err = one_at_a_time(records[:split], offsets[:split])
        assert base_err is None and base is not None
        for cut in range(0, len(records) - split, max(1, (len(records) - split) // 5)):
            assert_same(records[split:], [cut] if cut else [], base, offsets[split:])
        return
    pytest.fail(f"no history refused a record of kind {kind}")


def test_an_unknown_record_type_stops_the_fold() -> None:
    values = [v(m.NoOpRecord()).encode(), bytes([1, 99, 0, 0]), v(m.NoOpRecord()).encode()]
    delta = lf.fold_values(values, [5, 6, 7])
    with pytest.raises(lf.LogFoldError) as info:
        delta.apply(MetadataImage.EMPTY, PROV)
    assert info.value.offset == 6
    assert "Unknown metadata record type" in str(info.value)


def test_a_body_that_does_not_decode_names_its_offset() -> None:
    good = v(m.PartitionChangeRecord(partition_id=0, topic_id=Uuid(5), isr=[1])).encode()
    bad = good[:-3]
    with pytest.raises(Exception) as info:
        lf.fold_values([v(m.NoOpRecord()).encode(), bad], [10, 11])
    assert "11" in str(info.value)


def test_a_topic_record_taking_a_live_name_is_refused_at_its_offset() -> None:
    """``TopicsDelta.apply`` refuses a topic created under a live topic's name (it has no offset to
    give: the fold names the TopicRecord's)."""
    x, y = Uuid(11), Uuid(12)
    records = [v(m.TopicRecord(name="a", topic_id=x)),
               v(m.PartitionRecord(partition_id=0, topic_id=x, replicas=[1], isr=[1], leader=1)),
               v(m.NoOpRecord()),
               v(m.TopicRecord(name="a", topic_id=y)),
               v(m.PartitionRecord(partition_id=0, topic_id=y, replicas=[2], isr=[2], leader=2))]
    offsets = [10, 11, 12, 13, 14]
    _img, want = one_at_a_time(records, offsets)
    assert want is not None and want[0] is None
    for cuts in ([], [1], [3], [4], [1, 2, 3]):
        _img, got = folded(records, offsets, cuts)
        assert got == (13, want[1])
    # over an image that has the name already
    base, err = one_at_a_time(records[:2], offsets[:2])
    assert err is None and base is not None
    _img, got = folded(records[3:], offsets[3:], [], base)
    assert got is not None and got[0] == 13 and "Topic name a is taken by topic id" in got[1]


# ---------------------------------------------------------------------------------------------
# Checks kept pending across pieces: the replicas/directories runs
# ---------------------------------------------------------------------------------------------

T1 = Uuid(0x1234)
D = [Uuid(0xD000 + i) for i in range(4)]


def _topic(dirs: list[Uuid] | None, replicas: list[int]) -> list[ApiMessageAndVersion]:
    fields: dict[str, Any] = dict(partition_id=0, topic_id=T1, replicas=replicas, isr=replicas, leader=replicas[0])
    if dirs is not None:
        fields["directories"] = dirs
    return [v(m.TopicRecord(name="runs", topic_id=T1)), v(m.PartitionRecord(**fields), 1)]


def _pcr(**fields: Any) -> ApiMessageAndVersion:
    return v(m.PartitionChangeRecord(partition_id=0, topic_id=T1, **fields), 1)


RUNS = {
    # replicas set before the directories: each such change is checked against the directories below
    "replicas, same count, then another count": (_topic(D[:2], [1, 2]),
                                                 [_pcr(replicas=[2, 3]), _pcr(isr=[2]), _pcr(replicas=[1, 2, 3])]),
    "replicas, another count at once": (_topic(D[:2], [1, 2]), [_pcr(replicas=[4]), _pcr(replicas=[1, 2])]),
    "replicas of any count over MIGRATING directories": (_topic([], [1, 2]),
                                                         [_pcr(replicas=[2, 3, 4]), _pcr(replicas=[1])]),
    "replicas, then directories that pair with them": (_topic(D[:2], [1, 2]),
                                                       [_pcr(replicas=[1, 2]), _pcr(directories=D[2:4]),
                                                        _pcr(replicas=[1, 2, 3])]),
    # directories set before the replicas: checked against the replicas below
    "directories, same count, then another count": (_topic([], [1, 2]),
                                                    [_pcr(directories=D[:2]), _pcr(directories=D[:3])]),
    "directories, another count at once": (_topic([], [1, 2, 3]), [_pcr(directories=D[:2])]),
    "MIGRATING directories of any count": (_topic(D[:2], [1, 2]), [_pcr(directories=[ZERO] * 3),
                                                                    _pcr(replicas=[5])]),
    "directories then replicas then directories": (_topic([], [1, 2]),
                                                   [_pcr(directories=D[:2]), _pcr(replicas=[3, 4]),
                                                    _pcr(directories=D[1:4])]),
    "both in one record, not pairing": (_topic([], [1, 2]), [_pcr(replicas=[1, 2], directories=D[:3])]),
    "both in one record, MIGRATING, not pairing": (_topic([], [1, 2]),
                                                   [_pcr(replicas=[1, 2], directories=[ZERO] * 3)]),
    "a PartitionRecord restates the partition": (_topic(D[:2], [1, 2]),
                                                 [_pcr(replicas=[3, 4]), v(m.PartitionRecord(
                                                     partition_id=0, topic_id=T1, replicas=[7], isr=[7], leader=7)),
                                                  _pcr(replicas=[1, 2, 3])]),
    "a refused change, then a PartitionRecord": (_topic(D[:2], [1, 2]),
                                                 [_pcr(replicas=[3, 4, 5]), v(m.PartitionRecord(
                                                     partition_id=0, topic_id=T1, replicas=[7], isr=[7], leader=7))]),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_a_pending_replicas_and_directories_check_at_every_cut(name: str) -> None:
    prefix, changes = RUNS[name]
    records = prefix + changes
    n = len(records)
    for cuts in [[]] + [[c] for c in range(1, n)] + [list(range(1, n))]:
        assert_same(records, cuts)
    base, err = one_at_a_time(prefix, [0, 1])
    assert err is None and base is not None
    for cuts in [[]] + [[c] for c in range(1, len(changes))]:
        assert_same(changes, cuts, base, list(range(2, 2 + len(changes))))


def test_the_runs_fail_where_the_reference_fails() -> None:
    """The scenarios above include refusals, at the record the reference names (so the pending
    runs are tested for failing, not only for passing)."""
    refused = []
    for name, (prefix, changes) in RUNS.items():
        _img, err = one_at_a_time(prefix + changes, list(range(len(prefix) + len(changes))))
        if err is not None:
            refused.append((name, err[0]))
    assert dict(refused) == {
        "replicas, same count, then another count": 4, "replicas, another count at once": 2,
        "replicas, then directories that pair with them": 4, "directories, same count, then another count": 3,
        "directories, another count at once": 2, "directories then replicas then directories": 4,
        "both in one record, not pairing": 2, "both in one record, MIGRATING, not pairing": 2,
        "a refused change, then a PartitionRecord": 2}


# ---------------------------------------------------------------------------------------------
# The partition fold's twins
# ---------------------------------------------------------------------------------------------

TWINS = {name: importlib.import_module(f"kraft_node.{name}._partition_fold") for name in ("_native", "_pure")}
_LISTS = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
          "last_known_elr")


def _frames(records: list[ApiMessageAndVersion]) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    from kraft_node.metadata.controller.replication_snapshot import frame_values
    f = frame_values([r.encode() for r in records])
    return f.data, f.body_pos, f.end, f.api_key, f.version


def _kernel_inputs(records: list[ApiMessageAndVersion], raw: bool) -> tuple[Any, ...]:
    """(offsets, topics, removes, partitions, changes, raw_changes) as log_fold builds them."""
    from kraft_storage.messages.columns import decode_bodies
    data, pos, end, keys, versions = _frames(records)
    cols = decode_bodies(data, pos, end, keys, versions)
    offsets = np.arange(1000, 1000 + len(records), dtype=np.int64)
    topics = removes = partitions = changes = raw_changes = None
    if m.TopicRecord.API_KEY in cols:
        t = cols[m.TopicRecord.API_KEY]
        topics = (t.rows, t["topic_id"].values, t["name"].offsets, t["name"].data)
    if m.RemoveTopicRecord.API_KEY in cols:
        t = cols[m.RemoveTopicRecord.API_KEY]
        removes = (t.rows, t["topic_id"].values)
    if m.PartitionRecord.API_KEY in cols:
        t = cols[m.PartitionRecord.API_KEY]
        partitions = (t.rows, t["partition_id"].values, t["topic_id"].values, t["leader"].values,
                      t["leader_epoch"].values, t["partition_epoch"].values, t["leader_recovery_state"].values,
                      *[x for name in _LISTS for x in (t[name].offsets, t[name].child.values)])
    if m.PartitionChangeRecord.API_KEY in cols:
        t = cols[m.PartitionChangeRecord.API_KEY]
        if raw:
            r = t.rows
            raw_changes = (data, r, pos[r], end[r], versions[r])
        else:
            changes = (t.rows, t["partition_id"].values, t["topic_id"].values, t["leader"].values,
                       t["leader_recovery_state"].values,
                       *[x for name in _LISTS for x in (t[name].offsets, t[name].child.values, t[name].valid)])
    return offsets, topics, removes, partitions, changes, raw_changes


def _assert_exports_equal(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert sorted(a) == sorted(b) == sorted(TWINS["_pure"].EXPORT_FIELDS)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from([None, *WRONG]), data=st.data())
def test_the_twins_fold_and_absorb_alike(seed: int, kind: str | None, data: Any) -> None:
    records = partition_history(seed, 25) if kind is None else history_with_error(seed, kind, 25)
    results = []
    for twin in TWINS.values():
        for raw in (False, True):
            fold = twin.PartitionFold()
            err = fold.fold(*_kernel_inputs(records, raw))
            results.append((err, fold.export(), fold.export(live_only=True), fold.entries, fold.incarnations))
    first = results[0]
    for other in results[1:]:
        assert other[0] == first[0] and other[3:] == first[3:]
        _assert_exports_equal(other[1], first[1])
        _assert_exports_equal(other[2], first[2])
    # pieces folded alone, then absorbed in order: the same in both twins
    n = len(records)
    cuts = sorted(set(data.draw(st.lists(st.integers(1, max(1, n - 1)), min_size=1, max_size=3), label="cuts")))
    bounds = [0, *cuts, n]
    composed = []
    for twin in TWINS.values():
        exports = []
        for a, b in zip(bounds, bounds[1:]):
            fold = twin.PartitionFold()
            fold.fold(*_kernel_inputs(records[a:b], True))
            exports.append(fold.export())
        state = twin.PartitionFold()
        errors = [state.absorb(x) for x in exports]
        composed.append((errors, state.export()))
    assert composed[0][0] == composed[1][0]
    _assert_exports_equal(composed[0][1], composed[1][1])


def _mutations(rng: random.Random, body: bytes) -> list[bytes]:
    out = [body[:k] for k in range(len(body))]                          # every truncation
    for _ in range(30):
        b = bytearray(body)
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    out.append(body + b"\x00")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_a_raw_change_body_is_read_as_the_columnar_decoder_reads_it(seed: int) -> None:
    """The kernel reads PartitionChangeRecord bodies in place: it must take exactly the bodies the
    generated columnar decoder takes, and read them the same (else it says E_UNDECODABLE and the
    decoder raises its own error)."""
    from kraft_storage.messages.columns import decode_bodies
    from kraft_storage.messages.runtime import MessageError
    rng = random.Random(seed)
    records = [r for r in partition_history(seed, 30) if r.message.API_KEY == m.PartitionChangeRecord.API_KEY]
    assert records
    tested = refused = 0
    for record in records[:8]:
        value = record.encode()
        header = value[:3]
        for body in _mutations(rng, value[3:]):
            data = header + body
            pos, end = np.array([3], np.int64), np.array([len(data)], np.int64)
            keys, versions = np.array([5], np.int16), np.array([record.version], np.int16)
            try:
                cols = decode_bodies(data, pos, end, keys, versions)
            except MessageError:
                cols = None
            for twin in TWINS.values():
                fold = twin.PartitionFold()
                err = fold.fold(np.array([7], np.int64), None, None, None, None,
                                (data, np.array([0]), pos, end, versions))
                if cols is None:
                    assert err is not None and err[2] == twin.E_UNDECODABLE
                    continue
                assert err is None or err[2] != twin.E_UNDECODABLE
                t = cols[5]
                by_columns = twin.PartitionFold()
                err2 = by_columns.fold(np.array([7], np.int64), None, None, None, (
                    t.rows, t["partition_id"].values, t["topic_id"].values, t["leader"].values,
                    t["leader_recovery_state"].values,
                    *[x for name in _LISTS for x in (t[name].offsets, t[name].child.values, t[name].valid)]))
                assert err == err2
                _assert_exports_equal(fold.export(), by_columns.export())
            tested += 1
            refused += cols is None
    assert tested > 100 and 0 < refused < tested


def test_a_partial_delta_pickles(tmp_path: Path) -> None:
    """What a Spark task returns: arrays, dicts and typed records, no Python object per partition."""
    records, offsets = flatten(random_history(7, events=200))
    delta = fold_pieces(records, offsets, [len(records) // 2])
    again = pickle.loads(pickle.dumps(delta))
    assert again.apply(MetadataImage.EMPTY, PROV) == delta.apply(MetadataImage.EMPTY, PROV)
    for piece in delta.pieces:
        if isinstance(piece, lf.FoldPiece):
            assert all(isinstance(a, np.ndarray) for a in piece.topics.values())


def test_untouched_topics_and_sub_images_are_shared() -> None:
    records = partition_history(11, 60)
    base, err = one_at_a_time(records, list(range(len(records))))
    assert err is None and base is not None
    some = sorted(base.topics.topics_by_id, key=str)[0]
    part = min(base.topics.topics_by_id[some].partitions)
    change = [v(m.PartitionChangeRecord(partition_id=part, topic_id=some, leader=-1))]
    new = fold_pieces(change, [10**5], []).apply(base, PROV)
    assert new.topics.topics_by_id[some] != base.topics.topics_by_id[some]
    for tid, topic in base.topics.topics_by_id.items():
        if tid != some:
            assert new.topics.topics_by_id[tid] is topic
    for name in ("features", "cluster", "configs", "client_quotas", "producer_ids", "acls", "scram",
                 "delegation_tokens"):
        assert getattr(new, name) is getattr(base, name), name
    assert new == one_at_a_time(change, [10**5], base)[0]


def test_a_log_of_several_segments(tmp_path: Path) -> None:
    batches = random_history(3, events=300)
    write_log(tmp_path, batches, records_per_segment=40)
    segments = sorted((tmp_path / "__cluster_metadata-0").glob("*.log"))
    assert len(segments) > 3
    records, offsets = flatten(batches)
    want, err = one_at_a_time(records, offsets)
    assert err is None
    for path in (tmp_path, tmp_path / "__cluster_metadata-0"):
        delta = lf.fold_log(path, chunk_records=50)
        assert delta.apply(MetadataImage.EMPTY, PROV) == want
    assert lf.replay_log(tmp_path).topics == want.topics
    with pytest.raises(FileNotFoundError):
        lf.fold_log(tmp_path / "nothing-here")


@pytest.mark.parametrize("kind", ["unknown_partition", "broker_epoch", "replicas_vs_dirs"])
def test_a_refusal_in_a_log_of_many_chunks(tmp_path: Path, kind: str) -> None:
    """fold_log stops at the refused record: chunks after it are not folded, and apply names it."""
    from support.metadata_history import Batch, leader_change
    for seed in range(40):
        records = history_with_error(seed, kind, events=60)
        offsets = list(range(1, 1 + len(records)))
        _img, want = one_at_a_time(records, offsets)
        if want is not None and want[0] > 20:
            break
    else:
        pytest.fail(f"no history refused a record of kind {kind} late enough")
    batches = [leader_change(1)] + [Batch(records[i:i + 3], False, 1) for i in range(0, len(records), 3)]
    write_log(tmp_path, batches, records_per_segment=25)
    delta = lf.fold_log(tmp_path, chunk_records=4)
    # when the refusal is decided while folding (the state it needs is in the same fold piece: no
    # ClearElr cut in between), the chunks after the refused one are not read
    if delta.error is not None:
        assert delta.error.offset == want[0]
        assert delta.records < len(records) + 1
    with pytest.raises(lf.LogFoldError) as info:
        delta.apply(MetadataImage.EMPTY, PROV)
    assert (info.value.offset, info.value.reason) == want


def test_the_spark_reader_batches_fold_alike(tmp_path: Path) -> None:
    """The image-apply stage (``ArrowApplier``) folds the Spark reader's replay columns into the
    image ``fold_log`` makes from the files."""
    from kraft_storage.spark import reader as kr
    (path,) = gen.write_log(str(tmp_path / "00000000000000000000.log"), 20_000, seed=9, single_file=True, brokers=5,
                            initial_topics=10)
    applier = lf.make_applier()
    columns = ("offset", "timestamp", "partition_leader_epoch", "record_type", "record_version", "value")
    batches = 0
    for batch in kr.read_arrow(path, kr.ReadOptions(columns=columns, batch_rows=3_000)):
        applier.apply(batch)
        batches += 1
    assert batches > 3
    image = applier.finish()
    want = lf.fold_log(path).apply()
    assert image == want
    assert image.provenance.last_contained_offset == want.provenance.last_contained_offset == 19_999


def test_splits_folded_as_spark_tasks_compose_to_the_whole_log(tmp_path: Path) -> None:
    """Issue 23's Spark design: each task folds its split (bytes of a segment) alone, the driver
    composes the partial deltas in offset order (after pickling them back)."""
    from kraft_storage.spark.files import plan_splits
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    gen.write_log(str(part / "00000000000000000000.log"), 40_000, seed=4, single_file=True, brokers=6,
                  initial_topics=15)
    splits = plan_splits(str(tmp_path), max_split_bytes=150_000)
    assert len(splits) > 5
    deltas = [pickle.loads(pickle.dumps(lf.fold_range(s.path, s.start, s.end, chunk_records=5_000)))
              for s in splits]
    whole = lf.fold_log(tmp_path)
    composed = lf.compose_all(deltas)
    assert composed.records == whole.records == 40_000
    assert composed.provenance == whole.provenance
    assert composed.apply() == whole.apply()
    # every relative piece holds no Python object per partition
    assert all(isinstance(x, np.ndarray) for d in deltas for p in d.pieces if isinstance(p, lf.FoldPiece)
               for x in p.topics.values())
