"""The ``_metadata_encode`` kernel pair: the native loop and its numpy twin give the same bytes
and row offsets for any partition block -- every Metadata version, brokers unregistered, fenced
or without the listener, leaders missing, replicas in offline directories -- and both refuse a
list too long for a one-byte compact count.  (The bytes themselves are checked against the
generated encoder in tests/broker/test_broker_apis.py, with whichever twin the process uses.)"""
from __future__ import annotations

import importlib
import random

import numpy as np
import pytest

from kraft_node.protocol.errors import Errors

native = importlib.import_module("kraft_node._native._metadata_encode")
pure = importlib.import_module("kraft_node._pure._metadata_encode")


def _lists(rng: random.Random, n: int, pool: list[int], max_len: int, base: int) -> tuple[np.ndarray, np.ndarray]:
    lens = [rng.randint(0, max_len) for _ in range(n)]
    vals = [rng.choice(pool) for _ in range(sum(lens) + base)]
    offsets = np.concatenate(([base], base + np.cumsum(lens))).astype(np.int32)
    return np.array(vals, dtype=np.int32), offsets


def _block(rng: random.Random, n: int) -> dict:
    pool = list(range(-1, 12))  # -1 and 8..11: never registered
    reps, ro = _lists(rng, n, pool, 4, rng.randint(0, 3))
    isr, io = _lists(rng, n, pool, 3, rng.randint(0, 3))
    ids = np.array(sorted(rng.sample(range(0, 8), rng.randint(0, 8))), dtype=np.int32)
    return dict(partition_id=np.array(rng.sample(range(10_000), n), dtype=np.int32),
                leader=np.array([rng.choice(pool) for _ in range(n)], dtype=np.int32),
                leader_epoch=np.array([rng.randint(0, 2**31 - 1) for _ in range(n)], dtype=np.int32),
                replicas=reps, replicas_offsets=ro, isr=isr, isr_offsets=io, broker_ids=ids,
                broker_usable=np.array([rng.random() < 0.7 for _ in ids], dtype=np.uint8),
                broker_has_listener=np.array([rng.random() < 0.85 for _ in ids], dtype=np.uint8),
                offline_extra=(None if rng.random() < 0.5 else
                               np.array([rng.random() < 0.2 for _ in range(int(ro[-1] - ro[0]))], dtype=np.uint8)))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("version", [0, 1, 4, 5, 6, 7, 8, 9, 12, 13])
def test_native_and_numpy_twins_give_the_same_bytes(seed: int, version: int) -> None:
    rng = random.Random(seed * 100 + version)
    cols = _block(rng, rng.choice([1, 2, 7, 60]))
    got_native = native.encode_metadata_partitions(version, **cols)
    got_pure = pure.encode_metadata_partitions(version, **cols)
    assert got_native[0] == got_pure[0]
    assert got_native[1].dtype == got_pure[1].dtype == np.int64
    assert got_native[1].tolist() == got_pure[1].tolist()
    assert got_native[1][0] == 0 and got_native[1][-1] == len(got_native[0])


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shift", [65_530, 1_000_000, -20])
def test_broker_ids_outside_the_lookup_table_give_the_same_bytes(seed: int, shift: int) -> None:
    """The native loop finds brokers in a table by id when the ids are in 0 .. 2**16 - 1, by a
    binary search otherwise (big or negative ids, ids straddling the bound): the same bytes."""
    rng = random.Random(seed)
    cols = _block(rng, 40)
    for name in ("replicas", "isr", "leader", "broker_ids"):
        cols[name] = (cols[name].astype(np.int64) + shift).astype(np.int32)
    for version in (0, 5, 12):
        assert native.encode_metadata_partitions(version, **cols)[0] == \
            pure.encode_metadata_partitions(version, **cols)[0]


def test_an_empty_block_and_the_error_codes() -> None:
    empty = dict(partition_id=np.zeros(0, np.int32), leader=np.zeros(0, np.int32),
                 leader_epoch=np.zeros(0, np.int32), replicas=np.zeros(0, np.int32),
                 replicas_offsets=np.zeros(1, np.int32), isr=np.zeros(0, np.int32), isr_offsets=np.zeros(1, np.int32),
                 broker_ids=np.zeros(0, np.int32), broker_usable=np.zeros(0, np.uint8),
                 broker_has_listener=np.zeros(0, np.uint8))
    for k in (native, pure):
        data, offsets = k.encode_metadata_partitions(12, **empty)
        assert data == b"" and offsets.tolist() == [0]
        assert (k.LEADER_NOT_AVAILABLE, k.REPLICA_NOT_AVAILABLE, k.LISTENER_NOT_FOUND) == (
            Errors.LEADER_NOT_AVAILABLE, Errors.REPLICA_NOT_AVAILABLE, Errors.LISTENER_NOT_FOUND)


@pytest.mark.parametrize("version", [8, 9])
def test_a_list_of_127_replicas_needs_the_generated_encoder_from_v9(version: int) -> None:
    ids = np.arange(200, dtype=np.int32)
    cols = dict(partition_id=np.array([0], np.int32), leader=np.array([0], np.int32),
                leader_epoch=np.array([1], np.int32), replicas=ids[:127].copy(),
                replicas_offsets=np.array([0, 127], np.int32), isr=np.array([0], np.int32),
                isr_offsets=np.array([0, 1], np.int32), broker_ids=ids, broker_usable=np.ones(200, np.uint8),
                broker_has_listener=np.ones(200, np.uint8))
    if version >= 9:
        for k in (native, pure):
            with pytest.raises(ValueError, match="127 or more"):
                k.encode_metadata_partitions(version, **cols)
    else:
        assert native.encode_metadata_partitions(version, **cols)[0] == pure.encode_metadata_partitions(
            version, **cols)[0]


def test_bad_columns_are_refused_by_name() -> None:
    cols = dict(partition_id=np.array([0, 1], np.int32), leader=np.array([0], np.int32),
                leader_epoch=np.array([1, 1], np.int32), replicas=np.zeros(0, np.int32),
                replicas_offsets=np.zeros(3, np.int32), isr=np.zeros(0, np.int32), isr_offsets=np.zeros(3, np.int32),
                broker_ids=np.zeros(0, np.int32), broker_usable=np.zeros(0, np.uint8),
                broker_has_listener=np.zeros(0, np.uint8))
    with pytest.raises(ValueError, match="different lengths"):
        native.encode_metadata_partitions(12, **cols)
    cols["leader"] = np.array([0, 0], np.int32)
    cols["replicas_offsets"] = np.array([0, 5, 9], np.int32)
    with pytest.raises(ValueError, match="outside their arrays"):
        native.encode_metadata_partitions(12, **cols)


def test_assemble_topics_twins_agree_and_refuse_slices_outside_the_buffers() -> None:
    rng = random.Random(7)
    buffers = [bytes(rng.randrange(256) for _ in range(300)), b"", bytes(range(40))]
    n = 50
    which = np.array([rng.choice([0, 2]) for _ in range(n)], dtype=np.int32)
    starts, stops = [], []
    for w in which.tolist():
        a = rng.randint(0, len(buffers[w]))
        starts.append(a)
        stops.append(rng.randint(a, len(buffers[w])))
    prefixes = [bytes([i]) * rng.randint(0, 5) for i in range(n)]
    args = (prefixes, buffers, which, np.array(starts, np.int64), np.array(stops, np.int64), b"\x00\x01")
    got = native.assemble_topics(*args)
    assert got == pure.assemble_topics(*args)
    assert got[3] == prefixes[3] + buffers[which[3]][starts[3]:stops[3]] + b"\x00\x01"
    for bad in ((np.array([1], np.int32), [0], [1]), (np.array([3], np.int32), [0], [0]),
                (np.array([0], np.int32), [5], [4])):
        for k in (native, pure):
            with pytest.raises(IndexError, match="topic 0"):
                k.assemble_topics([b"p"], buffers, bad[0], np.array(bad[1], np.int64), np.array(bad[2], np.int64),
                                  b"")


@pytest.mark.parametrize("seed", range(4))
def test_join_slices_twins_agree_and_refuse_bad_slices(seed: int) -> None:
    """``join_slices``: the slices in order, empty ones and repeated buffers included; both twins
    refuse a slice outside its buffer or a buffer index out of range (naming the slice), a
    non-bytes buffer, and arrays of different lengths -- before copying anything."""
    rng = random.Random(seed)
    buffers = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 400))) for _ in range(rng.randint(1, 5))]
    m = rng.randint(0, 60)
    which = np.array([rng.randrange(len(buffers)) for _ in range(m)], dtype=np.int32)
    starts, stops = [], []
    for w in which.tolist():
        a = rng.randint(0, len(buffers[w]))
        starts.append(a)
        stops.append(rng.randint(a, len(buffers[w])))
    args = (buffers, which, np.array(starts, np.int64), np.array(stops, np.int64))
    want = b"".join(buffers[w][a:b] for w, a, b in zip(which.tolist(), starts, stops))
    assert native.join_slices(*args) == want == pure.join_slices(*args)
    # consecutive pieces of one buffer (the twin merges them into runs), empty ones between
    whole = bytes(rng.randrange(256) for _ in range(300))
    cuts = sorted(rng.sample(range(1, 300), 20))
    edges = [0, *cuts, 300]
    pieces = [(1, x, y) for x, y in zip(edges, edges[1:])] + [(0, 0, 0)]
    pieces = [p for q in pieces for p in (q, (1, q[2], q[2]))]
    w, a, b = (np.array(c, dtype=t) for c, t in zip(zip(*pieces), (np.int32, np.int64, np.int64)))
    assert native.join_slices([b"", whole], w, a, b) == whole == pure.join_slices([b"", whole], w, a, b)
    one = [b"abcdef"]
    for w, a, b in ((1, 0, 1), (-1, 0, 0), (0, 4, 3), (0, 0, 7), (0, -1, 2)):
        for k in (native, pure):
            with pytest.raises(IndexError, match="slice 1"):
                k.join_slices(one, np.array([0, w], np.int32), np.array([0, a], np.int64), np.array([1, b], np.int64))
    for k in (native, pure):
        with pytest.raises(TypeError, match="buffer 0 is a bytearray"):
            k.join_slices([bytearray(b"x")], np.zeros(1, np.int32), np.zeros(1, np.int64), np.ones(1, np.int64))
        with pytest.raises(ValueError, match="different lengths"):
            k.join_slices(one, np.zeros(2, np.int32), np.zeros(1, np.int64), np.ones(1, np.int64))
