"""The metadata log generator: deterministic, exact sizes, valid and consistent records."""
from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from kraft_storage.messages.control import ControlRecordType, decode_control_record
from kraft_storage.messages.framing import decode_metadata_record
from kraft_storage.record import decode_records, scan_batches
from kraft_storage.tools import gen_metadata_log as gen


def _digest(paths) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(os.path.basename(p).encode())
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def test_deterministic_for_a_seed(tmp_path):
    a = gen.write_log(str(tmp_path / "a"), 30_000, seed=7)
    b = gen.write_log(str(tmp_path / "b"), 30_000, seed=7)
    c = gen.write_log(str(tmp_path / "c"), 30_000, seed=8)
    assert _digest(a) == _digest(b)
    assert _digest(a) != _digest(c)


@pytest.mark.parametrize("n", [1, 2, 5, 1777, 40_000])
def test_exact_record_count_and_contiguous_offsets(tmp_path, n):
    (path,) = gen.write_log(str(tmp_path / "x.log"), n, seed=3, single_file=True)
    cols = decode_records(open(path, "rb").read())
    assert len(cols) == n
    assert cols.offset.tolist() == list(range(n))
    assert (np.diff(cols.timestamp) >= 0).all()


def test_history_is_valid_and_consistent(tmp_path):
    n = 60_000
    (path,) = gen.write_log(str(tmp_path / "x.log"), n, seed=11, single_file=True, brokers=6,
                            initial_topics=20)
    buf = open(path, "rb").read()
    cols = decode_records(buf)
    control = cols.is_control()
    epochs = cols.batches["partition_leader_epoch"][cols.batch]
    assert (np.diff(epochs) >= 0).all()
    replicas: dict = {}
    topics = {}
    broker_epochs: dict = {}
    kinds = set()
    first_change = None
    for i in range(n):
        if control[i]:
            ctype, body = decode_control_record(cols.key(i), cols.value(i))
            assert ctype == ControlRecordType.LEADER_CHANGE
            continue
        _k, _v, msg = decode_metadata_record(cols.value(i))
        kinds.add(msg.NAME)
        if msg.NAME == "TopicRecord":
            topics[msg.topic_id] = msg.name
        elif msg.NAME == "PartitionRecord":
            assert msg.topic_id in topics
            assert len(set(msg.replicas)) == 3 and msg.isr == msg.replicas and msg.leader == msg.replicas[0]
            replicas[(msg.topic_id, msg.partition_id)] = set(msg.replicas)
        elif msg.NAME == "PartitionChangeRecord":
            first_change = first_change or i
            reps = replicas[(msg.topic_id, msg.partition_id)]  # the partition exists
            if msg.isr is not None:
                assert set(msg.isr) <= reps and len(msg.isr) >= 2
            if msg.leader != -2:
                assert msg.leader in reps
        elif msg.NAME == "RegisterBrokerRecord":
            assert 0 <= msg.broker_id < 6
            assert msg.broker_epoch == int(cols.offset[i])  # Kafka: the epoch is the record's offset
            broker_epochs[msg.broker_id] = msg.broker_epoch
        elif msg.NAME == "BrokerRegistrationChangeRecord":
            assert broker_epochs[msg.broker_id] == msg.broker_epoch  # the broker's current epoch
        elif msg.NAME == "ConfigRecord":
            assert msg.resource_name in topics.values()
    assert {"NoOpRecord", "PartitionChangeRecord", "PartitionRecord", "TopicRecord", "ConfigRecord",
            "RegisterBrokerRecord", "BrokerRegistrationChangeRecord", "FeatureLevelRecord"} <= kinds
    assert first_change is not None and first_change > 20


def test_segments_roll_at_the_size_limit(tmp_path):
    files = gen.write_log(str(tmp_path), 50_000, seed=2, segment_bytes=300_000)
    assert len(files) > 3
    expect_next = 0
    for p in files:
        name = os.path.basename(p)
        assert os.path.dirname(p).endswith("__cluster_metadata-0")
        buf = open(p, "rb").read()
        assert 0 < len(buf) <= 300_000
        scan = scan_batches(buf)
        assert scan.end == len(buf)
        assert int(name[:20]) == int(scan.base_offsets[0]) == expect_next
        expect_next = int(scan.last_offsets[-1]) + 1
    assert expect_next == 50_000


def test_elections_raise_the_epoch_with_a_leader_change(tmp_path):
    (path,) = gen.write_log(str(tmp_path / "x.log"), gen.CHUNK_RECORDS + 10_000, seed=2, single_file=True)
    scan = scan_batches(open(path, "rb").read())
    h = scan.headers
    ctl = (h["attributes"] & 0x20) != 0
    epochs = h["partition_leader_epoch"]
    assert ctl[0] and epochs[0] == 1
    rises = np.flatnonzero(np.diff(epochs) != 0) + 1
    assert (np.diff(epochs) >= 0).all()
    assert len(rises) >= 1  # seed 2 elects a new leader at the second chunk
    assert all(ctl[r] for r in rises)  # every new epoch starts with its LeaderChange batch


def test_cli(tmp_path, capsys):
    assert gen.main(["-n", "2e3", "--seed", "1", "-o", str(tmp_path)]) == 0
    assert "wrote 2000 records" in capsys.readouterr().out
    seg = tmp_path / "__cluster_metadata-0" / "00000000000000000000.log"
    assert len(decode_records(seg.read_bytes())) == 2000


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        gen.write_log(str(tmp_path), 0)
    with pytest.raises(ValueError):
        gen.Generator(brokers=2)
