"""Every generated message round-trips in every version with hypothesis-generated values.

Strategies are derived from each class's ``_JSON`` table (field kinds, the
versions a field exists in, the versions it may be null in), so new schemas are
covered without touching this file.  Metadata records run against both the
native and the pure implementation, which must also agree byte for byte.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.messages import cases, is_flexible, message_strategy

import kraft_storage._pure._messages_metadata as pure_md
from kraft_node.protocol import headers
from kraft_node.protocol.api_keys import API_INFO
from kraft_storage import accel
from kraft_storage.messages import _control_gen, _quorum_state_gen
from kraft_storage.messages.runtime import MessageError

native_md = None
if accel.native_available("_messages_metadata"):
    import kraft_storage._native._messages_metadata as native_md

def check_roundtrip(cls, v, obj):
    data = obj.write(v)
    back = cls.read(data, v)
    assert back == obj
    assert back.write(v) == data
    assert cls.from_dict(obj.to_dict(v), v) == obj
    return data


SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))

RPC_CLASSES = [c for i in API_INFO.values() for c in (i.request, i.response)]
OTHER = [headers.RequestHeader, headers.ResponseHeader, _quorum_state_gen.QuorumStateData,
         *(getattr(_control_gen, n) for n in _control_gen.__all__)]


@pytest.mark.parametrize("cls,v", cases(pure_md.METADATA_RECORD_TYPES.values()))
@SETTINGS
@given(data=st.data())
def test_metadata_records_roundtrip(cls, v, data):
    obj = data.draw(message_strategy(cls, v, is_flexible(cls, v)))
    raw = check_roundtrip(cls, v, obj)
    if native_md is not None:
        ncls = native_md.METADATA_RECORD_TYPES[cls.API_KEY]
        nobj = ncls.from_dict(obj.to_dict(v), v)
        nobj.unknown_tagged_fields = obj.unknown_tagged_fields
        assert nobj.write(v) == raw
        assert ncls.read(raw, v).to_dict(v) == obj.to_dict(v)
        framed = bytes([1, cls.API_KEY, v]) + raw
        k, ver, got = native_md.decode_metadata_record(framed)
        assert (k, ver) == (cls.API_KEY, v) and got.to_dict(v) == obj.to_dict(v)
        assert pure_md.decode_metadata_record(framed)[2] == obj


@pytest.mark.parametrize("cls,v", cases(RPC_CLASSES + OTHER))
@SETTINGS
@given(data=st.data())
def test_rpc_and_data_messages_roundtrip(cls, v, data):
    obj = data.draw(message_strategy(cls, v, is_flexible(cls, v)))
    check_roundtrip(cls, v, obj)


def test_tagged_field_written_only_when_not_default():
    P = pure_md.PartitionRecord
    base = P(replicas=[1], isr=[1])
    plain = base.write(2)
    assert plain[-1] == 0  # empty tagged section
    withtag = P(replicas=[1], isr=[1], leader_recovery_state=1, eligible_leader_replicas=[1]).write(2)
    assert len(withtag) > len(plain)
    back = P.read(withtag, 2)
    assert back.leader_recovery_state == 1 and back.eligible_leader_replicas == [1]
    # ELR is tag 1 only from v2; at v1 a non-default value of this non-ignorable field is refused
    with pytest.raises(MessageError, match="EligibleLeaderReplicas"):
        P(eligible_leader_replicas=[1]).write(1)


def test_unknown_tags_kept_in_order_among_known_ones():
    P = pure_md.PartitionRecord
    obj = P(leader_recovery_state=1, unknown_tagged_fields=((5, b"\x07"),))
    data = obj.write(2)
    back = P.read(data, 2)
    assert back.unknown_tagged_fields == ((5, b"\x07"),) and back.leader_recovery_state == 1
    with pytest.raises(MessageError, match="collides"):
        P(unknown_tagged_fields=((0, b"\x01"),)).write(2)


def test_ignorable_field_is_dropped_and_non_ignorable_refused():
    from kraft_node.protocol.generated.fetch import FetchRequest
    # MaxBytes (3+) is ignorable, RackId (11+) too; ReplicaId (0-14) is not, but is absent in v15+
    FetchRequest(rack_id="r1").write(10)
    with pytest.raises(MessageError, match="ReplicaId"):
        FetchRequest(replica_id=5).write(15)
    RB = pure_md.RegisterBrokerRecord
    with pytest.raises(MessageError, match="IsMigratingZkBroker"):
        RB(is_migrating_zk_broker=True).write(1)


def test_defaults_follow_schema():
    assert pure_md.PartitionRecord().leader == -1
    assert pure_md.RegisterBrokerRecord().fenced is True
    from kraft_node.protocol.generated.fetch import FetchRequest
    assert FetchRequest().max_bytes == 0x7FFFFFFF and FetchRequest().cluster_id is None
    # mutable defaults are fresh per instance
    a, b = pure_md.PartitionRecord(), pure_md.PartitionRecord()
    a.replicas.append(1)
    assert b.replicas == []


def test_nullability_enforced_on_write():
    with pytest.raises(MessageError, match="Replicas"):
        pure_md.PartitionRecord(replicas=None).write(0)
    with pytest.raises(MessageError, match="Host"):
        pure_md.RegisterBrokerRecord(end_points=[pure_md.RegisterBrokerRecord.BrokerEndpoint(host=None)]).write(0)
    with pytest.raises(MessageError, match="PartitionId"):
        pure_md.PartitionRecord(partition_id=1 << 40).write(0)
