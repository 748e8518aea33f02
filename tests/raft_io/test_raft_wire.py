"""wire.py: every core Raft message survives core -> generated RPC -> bytes -> generated RPC -> core."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated import fetch as g_fetch
from kraft_node.protocol.generated import vote as g_vote
from kraft_node.raft import messages as m
from kraft_node.raft.io import wire
from kraft_storage.messages.runtime import METADATA_TOPIC_ID

i32 = st.integers(-1, 2 ** 31 - 1)
i64 = st.integers(-1, 2 ** 62)
dir_ids = st.one_of(st.none(), st.uuids())
cluster = st.one_of(st.none(), st.text("abcdefghijklmnopqrstuvwxyzABCDEF0123456789_-", min_size=1, max_size=22))
keys = st.builds(m.ReplicaKey, st.integers(0, 2 ** 31 - 1), dir_ids)
host = st.text("abc.0123456789", min_size=1, max_size=12)
port = st.integers(0, 65535)
nodes = st.lists(st.builds(m.NodeEndpoint, st.integers(0, 1000), host, port), max_size=3).map(tuple)
leader = st.builds(m.LeaderIdAndEpoch, i32, i32)
sids = st.builds(m.OffsetAndEpoch, st.integers(0, 2 ** 62), st.integers(0, 2 ** 31 - 1))
err = st.sampled_from([0, 6, 74, 75, 94, 98, 99, 104, 125])

requests = st.one_of(
    st.builds(m.VoteRequest, cluster, i32, i32, st.integers(0, 2 ** 31 - 1), dir_ids, dir_ids, i32, i64, st.booleans()),
    st.builds(m.BeginQuorumEpochRequest, cluster, i32, dir_ids, i32, i32,
              st.lists(st.builds(m.Endpoint, st.just("CONTROLLER"), host, port), max_size=2).map(tuple)),
    st.builds(m.EndQuorumEpochRequest, cluster, i32, i32, st.lists(keys, max_size=4).map(tuple),
              st.lists(st.builds(m.Endpoint, st.just("CONTROLLER"), host, port), max_size=2).map(tuple)),
    st.builds(m.FetchRequest, cluster, i32, i32, i32, i64, i32, i64, dir_ids, st.just(2 ** 63 - 1), i32, i32, i32,
              i64),
    st.builds(m.FetchSnapshotRequest, cluster, i32, i32, i32, sids, i64, dir_ids),
    st.builds(m.AddRaftVoterRequest, cluster, i32, i32, dir_ids,
              st.lists(st.builds(m.Endpoint, st.just("CONTROLLER"), host, port), max_size=2).map(tuple),
              st.booleans()),
    st.builds(m.RemoveRaftVoterRequest, cluster, i32, dir_ids),
    st.builds(m.UpdateRaftVoterRequest, cluster, i32, i32, dir_ids,
              st.lists(st.builds(m.Endpoint, st.just("CONTROLLER"), host, port), max_size=2).map(tuple),
              st.integers(0, 3), st.integers(0, 3)),
)


def _bytes_roundtrip(body, version, cls):
    return cls.read(body.write(version), version)


@settings(max_examples=300, deadline=None)
@given(requests)
def test_request_roundtrip(req):
    body, version = wire.request_to_wire(req)
    assert version == wire.VERSIONS[wire.api_key_of(req)]
    back = wire.request_from_wire(_bytes_roundtrip(body, version, type(body)), version)
    assert back == req


batches = st.lists(st.tuples(st.integers(1, 3), st.lists(st.binary(max_size=30), min_size=1, max_size=4)),
                   max_size=3)


def _mk_batches(spec, base):
    out = []
    epoch = 1
    for bump, recs in spec:
        epoch += bump
        out.append(m.Batch(base, epoch, tuple(recs)))
        base += len(recs)
    return tuple(out)


responses = st.one_of(
    st.builds(m.VoteResponse, err, err, i32, i32, st.booleans(), nodes),
    st.builds(m.BeginQuorumEpochResponse, err, err, i32, i32, nodes),
    st.builds(m.EndQuorumEpochResponse, err, err, i32, i32, nodes),
    st.builds(m.FetchSnapshotResponse, err, err, sids, leader, i64, i64, st.binary(max_size=50), nodes),
    st.builds(m.AddRaftVoterResponse, err, st.one_of(st.none(), st.text(max_size=20))),
    st.builds(m.RemoveRaftVoterResponse, err, st.one_of(st.none(), st.text(max_size=20))),
    st.builds(m.UpdateRaftVoterResponse, err, leader),
)


@settings(max_examples=300, deadline=None)
@given(responses)
def test_response_roundtrip(resp):
    key = wire.api_key_of(resp)
    body = wire.response_to_wire(resp)
    back = wire.response_from_wire(_bytes_roundtrip(body, wire.VERSIONS[key], type(body)))
    assert back == resp


@settings(max_examples=150, deadline=None)
@given(err, err, i64, leader, i64,
       st.one_of(st.none(), st.builds(m.EpochEndOffset, st.integers(0, 2 ** 31 - 1), st.integers(0, 2 ** 62))),
       st.one_of(st.none(), sids), batches, st.integers(0, 1000), nodes)
def test_fetch_response_roundtrip(e1, e2, hwm, cl, lso, div, sid, spec, base, nds):
    recs = _mk_batches(spec, base)
    if div is not None or sid is not None:
        recs = ()
    nds = tuple(m.NodeEndpoint(n.node_id, n.host, n.port) for n in nds)
    resp = m.FetchResponse(e1, e2, hwm, cl, lso, div, sid, recs, nds)
    body = wire.response_to_wire(resp)
    back = wire.response_from_wire(_bytes_roundtrip(body, 17, g_fetch.FetchResponse))
    assert (back.error_code, back.partition_error_code, back.high_watermark, back.current_leader,
            back.log_start_offset, back.diverging_epoch, back.snapshot_id, back.node_endpoints) == \
           (e1, e2, hwm, cl, lso, div, sid, nds)
    assert [(b.base_offset, b.epoch, b.records, b.is_control) for b in back.records] == \
           [(b.base_offset, b.epoch, b.records, b.is_control) for b in recs]


def test_fetch_request_uses_metadata_topic_id_and_replica_state():
    req = m.FetchRequest("c", 3, 500, 7, 10, 6, 0, None, 9)
    body, v = wire.request_to_wire(req)
    assert v == 18
    assert body.topics[0].topic_id == METADATA_TOPIC_ID and str(METADATA_TOPIC_ID) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert body.replica_state.replica_id == 3
    assert body.topics[0].partitions[0].last_fetched_epoch == 6


def test_fetch_carries_the_fetchers_high_watermark_to_the_leader():
    """KIP-1166 (Fetch v18): the fetcher's known high watermark crosses the wire, so the leader
    answers at once a Fetch whose high watermark is behind its own instead of parking it (at
    v17 it reads as Long.MAX_VALUE, "not supported": issue 24's 500 ms propagation stalls)."""
    for hwm in (-1, 0, 41):
        body, v = wire.request_to_wire(m.FetchRequest("c", 3, 500, 7, 10, 6, 0, None, hwm))
        back = wire.request_from_wire(_bytes_roundtrip(body, v, g_fetch.FetchRequest), v)
        assert back.high_watermark == hwm
    body, _ = wire.request_to_wire(m.FetchRequest("c", 3, 500, 7, 10, 6, 0, None, 41))
    assert wire.request_from_wire(_bytes_roundtrip(body, 17, g_fetch.FetchRequest), 17).high_watermark == 2 ** 63 - 1


def test_control_batch_travels_as_leader_change():
    lc = m.LeaderChangeMessage(0, 2, (1, 2, 3), (2, 3))
    resp = m.FetchResponse(0, 0, 5, m.LeaderIdAndEpoch(2, 4), 0, None, None,
                           (m.Batch(0, 4, (b"ignored",), True, lc),))
    back = wire.response_from_wire(_bytes_roundtrip(wire.response_to_wire(resp), 17, g_fetch.FetchResponse))
    (b,) = back.records
    assert b.is_control and b.control == lc


def test_old_versions_are_accepted():
    # Vote v0: no PreVote, no directory ids
    R = g_vote.VoteRequest
    body = R(cluster_id="c", topics=[R.TopicData(topic_name="__cluster_metadata", partitions=[
        R.PartitionData(partition_index=0, replica_epoch=3, replica_id=1, last_offset_epoch=2, last_offset=9)])])
    req = wire.request_from_wire(_bytes_roundtrip(body, 0, R), 0)
    assert req == m.VoteRequest("c", -1, 3, 1, None, None, 2, 9, False)


def test_wrong_topic_is_rejected_with_kafka_error():
    R = g_vote.VoteRequest
    body = R(cluster_id="c", topics=[R.TopicData(topic_name="other", partitions=[R.PartitionData()])])
    with pytest.raises(wire.WireError) as ei:
        wire.request_from_wire(body, 2)
    assert ei.value.error == 3
    with pytest.raises(wire.WireError):
        wire.request_from_wire(R(cluster_id="c", topics=[]), 2)


@pytest.mark.parametrize("key", [ApiKeys.VOTE, ApiKeys.BEGIN_QUORUM_EPOCH, ApiKeys.END_QUORUM_EPOCH,
                                 ApiKeys.FETCH, ApiKeys.FETCH_SNAPSHOT, ApiKeys.ADD_RAFT_VOTER,
                                 ApiKeys.REMOVE_RAFT_VOTER, ApiKeys.UPDATE_RAFT_VOTER])
def test_error_response_types(key):
    r = wire.error_response(key, 8)
    assert r.error_code == 8 and wire.api_key_of(r) == key
    body = wire.response_to_wire(r)
    assert wire.response_from_wire(_bytes_roundtrip(body, wire.VERSIONS[key], type(body))).error_code == 8


def test_add_raft_voter_v0_has_no_ack_when_committed_and_update_carries_leader_endpoint():
    from kraft_node.protocol.generated import add_raft_voter as g_add
    req = m.AddRaftVoterRequest("c", 30000, 2, None, (m.Endpoint("CONTROLLER", "h", 1),), False)
    body, v = wire.request_to_wire(req)
    assert v == 1
    body.ack_when_committed = True  # the only value v0 can carry
    back = wire.request_from_wire(_bytes_roundtrip(body, 0, g_add.AddRaftVoterRequest), 0)
    assert back.ack_when_committed is True  # v0 always acks on commit
    r = wire.response_to_wire(m.UpdateRaftVoterResponse(6, m.LeaderIdAndEpoch(1, 3)),
                              leader_endpoint=m.NodeEndpoint(1, "127.0.0.1", 9093))
    assert (r.current_leader.leader_id, r.current_leader.host, r.current_leader.port) == (1, "127.0.0.1", 9093)


def test_voters_control_batch_travels_in_fetch():
    import uuid
    vc = m.VotersControl(0, (m.VoterEntry(m.ReplicaKey(1, uuid.uuid4()), (m.Endpoint("CONTROLLER", "h", 9),)),))
    resp = m.FetchResponse(0, 0, 5, m.LeaderIdAndEpoch(2, 4), 0, None, None,
                           (m.Batch(0, 4, (b"ignored",), True, vc),))
    back = wire.response_from_wire(_bytes_roundtrip(wire.response_to_wire(resp), 17, g_fetch.FetchResponse))
    (b,) = back.records
    assert b.is_control and b.control == vc
