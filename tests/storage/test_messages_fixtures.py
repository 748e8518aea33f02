"""Every record in every fixture log/checkpoint decodes to its typed message and re-encodes byte-identically.

The records come from ``support.messages.fixture_records()``, a deliberately tiny record-batch
walker (uncompressed v2 batches only) so these tests do not depend on the batch codec.
Batch header (61 bytes): baseOffset i64, batchLength i32, partitionLeaderEpoch
i32, magic i8, crc u32, attributes i16 (0x20 = control), lastOffsetDelta i32,
baseTimestamp i64, maxTimestamp i64, producerId i64, producerEpoch i16,
baseSequence i32, record count i32.  Record: varint length, i8 attributes,
varlong timestampDelta, varint offsetDelta, varint key length + key, varint
value length + value, varint header count + headers (zigzag varints).
"""
from __future__ import annotations

import collections
import json

import pytest
from conftest import FIXTURES
from support.messages import fixture_records

import kraft_storage._pure._messages_metadata as pure_md
from kraft_storage import accel
from kraft_storage.messages import control, dump, framing
from kraft_storage.messages.quorum_state import read_quorum_state, write_quorum_state

IMPLS = [pure_md]
if accel.native_available("_messages_metadata"):
    import kraft_storage._native._messages_metadata as native_md
    IMPLS.append(native_md)
IMPL_IDS = [m.__name__.split(".")[1] for m in IMPLS]


needs_fixtures = pytest.mark.usefixtures("fixtures_dir")  # fails, never skips, without the fixtures


@needs_fixtures
@pytest.mark.parametrize("impl", IMPLS, ids=IMPL_IDS)
def test_every_fixture_record_roundtrips(impl):
    seen = collections.Counter()
    for path, offset, is_control, key, value in fixture_records():
        if is_control:
            continue
        assert key is None, "metadata records have a null key"
        api_key, version, msg = impl.decode_metadata_record(value, offset)
        assert type(msg) is impl.METADATA_RECORD_TYPES[api_key]
        assert msg.API_KEY == api_key
        body = msg.write(version)
        assert framing.frame_header(api_key, version) + body == value, (path, offset)
        assert type(msg).read(body, version) == msg
        seen[(msg.NAME, version)] += 1
    # the fixtures' README lists these; make sure the walker really saw them
    for name in ("NoOpRecord", "PartitionRecord", "RegisterBrokerRecord", "TopicRecord", "ConfigRecord",
                 "FeatureLevelRecord", "PartitionChangeRecord", "BrokerRegistrationChangeRecord",
                 "ProducerIdsRecord", "RegisterControllerRecord", "ZkMigrationStateRecord",
                 "BeginTransactionRecord", "EndTransactionRecord"):
        assert any(n == name for n, _ in seen), name
    assert seen[("PartitionRecord", 2)] >= 1 and seen[("PartitionRecord", 0)] >= 148
    assert sum(seen.values()) > 8000


@needs_fixtures
def test_every_fixture_control_record_roundtrips():
    types = collections.Counter()
    for path, offset, is_control, key, value in fixture_records():
        if not is_control:
            continue
        ctype, msg = control.decode_control_record(key, value)
        types[ctype.name] += 1
        assert control.encode_control_key(ctype) == key
        assert control.encode_control_value(ctype, msg) == value, (path, offset)
        js = dump.control_json(key, value)
        assert js["type"] == ctype.name
        json.dumps(js)
    assert types["LEADER_CHANGE"] == 6 and types["SNAPSHOT_HEADER"] >= 8 and types["SNAPSHOT_FOOTER"] >= 8


@needs_fixtures
def test_fixture_values_in_json():
    """Spot-check decoded content against what the fixtures' README says."""
    pr = None
    for path, _offset, is_control, _key, value in fixture_records():
        if is_control:
            continue
        js = dump.metadata_json(value)
        json.dumps(js)
        if js["type"] == "PartitionRecord" and js["version"] == 2:
            pr = js
        if js["type"] == "FeatureLevelRecord" and "kafka-3.6.0" in str(path) and path.name == "bootstrap.checkpoint":
            assert js["data"] == {"Name": "metadata.version", "FeatureLevel": 14}
    assert pr is not None and pr["apiKey"] == 3
    assert set(pr["data"]) >= {"PartitionId", "TopicId", "Replicas", "Directories", "EligibleLeaderReplicas"}
    assert len(pr["data"]["TopicId"]) == 22


@needs_fixtures
def test_quorum_state_files_roundtrip_byte_identically():
    files = sorted(FIXTURES.rglob("quorum-state"))
    assert files
    for p in files:
        text = p.read_text(encoding="utf-8")
        data, version = read_quorum_state(text)
        assert version == 0 and data.leader_id == 1 and data.current_voters[0].voter_id == 1
        assert write_quorum_state(data, version) == text
