"""Leader epoch cache: Kafka's semantics and the checkpoint file, byte for byte."""
from __future__ import annotations

import pytest
from conftest import fixture_files, fixture_params
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_storage.log.checkpoint import CheckpointFileError
from kraft_storage.log.epoch_cache import LeaderEpochCache, format_entries, read_checkpoint
from kraft_storage.log.partition_metadata import (
    METADATA_TOPIC_ID,
    PartitionMetadataError,
    format_partition_metadata,
    read_partition_metadata,
)

EPOCH_FILES = fixture_files("leader-epoch-checkpoint")
PM_FILES = fixture_files("partition.metadata")


def test_fixture_files_present():
    assert len(EPOCH_FILES) == 5 and len(PM_FILES) == 5


@pytest.mark.parametrize("path", fixture_params("leader-epoch-checkpoint"), ids=lambda p: p.parent.parent.name)
def test_fixture_checkpoint_round_trips(path, tmp_path):
    raw = path.read_bytes()
    entries = read_checkpoint(str(path))
    assert entries and format_entries(entries) == raw
    # written through the cache (temp file + rename) it is still identical
    c = LeaderEpochCache(str(tmp_path / "leader-epoch-checkpoint"), entries)
    c.flush()
    assert (tmp_path / "leader-epoch-checkpoint").read_bytes() == raw
    assert not (tmp_path / "leader-epoch-checkpoint.tmp").exists()


def test_known_fixture_entries():
    p = [f for f in EPOCH_FILES if "3.6.0-combined" in str(f)][0]
    assert read_checkpoint(str(p)) == [(1, 0), (2, 298), (3, 354), (5, 711), (6, 712)]


@pytest.mark.parametrize("path", fixture_params("partition.metadata"), ids=lambda p: p.parent.parent.name)
def test_partition_metadata_round_trips(path):
    assert read_partition_metadata(str(path)) == METADATA_TOPIC_ID
    assert format_partition_metadata(METADATA_TOPIC_ID) == path.read_bytes()


def test_partition_metadata_errors(tmp_path):
    p = tmp_path / "partition.metadata"
    p.write_bytes(b"version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    with pytest.raises(PartitionMetadataError, match="version"):
        read_partition_metadata(str(p))
    p.write_bytes(b"version: 0\ntopic_id: AAAA")
    with pytest.raises(PartitionMetadataError, match="16-byte"):
        read_partition_metadata(str(p))


@pytest.mark.parametrize("text,match", [
    (b"1\n0\n", "version"), (b"0\n2\n1 0\n", "says 2"), (b"0\n1\n1\n", "fields"),
    (b"0\n2\n3 10\n2 20\n", "not increasing"), (b"0\n", "truncated"), (b"0\n1\nx 1\n", "integers")])
def test_bad_checkpoints(tmp_path, text, match):
    p = tmp_path / "leader-epoch-checkpoint"
    p.write_bytes(text)
    with pytest.raises(CheckpointFileError, match=match):
        read_checkpoint(str(p))


def test_end_offset_for_epoch_kafka_cases():
    c = LeaderEpochCache(None, [(1, 0), (2, 298), (3, 354), (5, 711), (6, 712)])
    leo = 3072
    assert c.end_offset_for_epoch(6, leo) == (6, 3072)      # latest epoch: the log end
    assert c.end_offset_for_epoch(3, leo) == (3, 711)       # next epoch's start
    assert c.end_offset_for_epoch(4, leo) == (3, 711)       # unknown epoch: the floor one
    assert c.end_offset_for_epoch(0, leo) == (0, 0)         # older than all: first start offset
    assert c.end_offset_for_epoch(7, leo) == (-1, -1)       # newer than all
    assert c.end_offset_for_epoch(-1, leo) == (-1, -1)      # UNDEFINED
    assert LeaderEpochCache(None).end_offset_for_epoch(1, 5) == (-1, -1)


def test_assign_and_truncate(tmp_path):
    path = tmp_path / "leader-epoch-checkpoint"
    c = LeaderEpochCache(str(path))
    assert c.assign(1, 0) and not c.assign(1, 5)    # same epoch, later offset: no change
    assert c.assign(3, 10) and c.assign(4, 20)
    assert c.assign(2, 15)                          # a new entry drops conflicting later ones
    assert c.entries() == [(1, 0), (2, 15)]
    assert path.read_bytes() == b"0\n2\n1 0\n2 15\n"
    c.assign(5, 30)
    c.assign(6, 40)
    assert c.truncate_from_end(30) and c.entries() == [(1, 0), (2, 15)]
    assert not c.truncate_from_end(100)
    assert c.truncate_from_start(20) and c.entries() == [(2, 20)]
    assert read_checkpoint(str(path)) == [(2, 20)]
    c.clear()
    assert c.entries() == [] and path.read_bytes() == b"0\n0\n"
    with pytest.raises(ValueError):
        c.assign(-1, 0)


def _model_assign(model, e, o):
    if model and not (e != model[-1][0] or o < model[-1][1]):
        return
    while model and (model[-1][0] >= e or model[-1][1] >= o):
        model.pop()
    model.append((e, o))


@settings(max_examples=100, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["assign", "end", "start"]), st.integers(0, 20),
                              st.integers(0, 200)), max_size=40))
def test_cache_keeps_increasing_invariant(ops):
    c = LeaderEpochCache(None)
    model: list = []
    for op, e, o in ops:
        if op == "assign":
            c.assign(e, o)
            _model_assign(model, e, o)
        elif op == "end":
            c.truncate_from_end(o)
            if model and model[-1][1] >= o:
                model = [x for x in model if x[1] < o]
        else:
            c.truncate_from_start(o)
            before = [x for x in model if x[1] <= o]
            if before:
                model = [(before[-1][0], o)] + [x for x in model if x[1] > o]
        got = c.entries()
        assert got == model
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in zip(got, got[1:]))
