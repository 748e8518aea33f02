"""1:1 translation between the core's Raft messages and Kafka's generated RPC classes.

The core's messages (:mod:`kraft_node.raft.messages`) flatten the single
``__cluster_metadata-0`` topic partition; on the wire it sits one level down
(``topics[0].partitions[0]``) with the topic named ``__cluster_metadata``
(Vote, BeginQuorumEpoch, EndQuorumEpoch, FetchSnapshot) or identified by the
fixed topic id ``AAAAAAAAAAAAAAAAAAAAAQ`` (Fetch v13+).

Versions sent (what Kafka 4.x's KafkaRaftClient uses): Vote v2 (PreVote),
BeginQuorumEpoch v1, EndQuorumEpoch v1 (PreferredCandidates), Fetch v17
(ReplicaState, LastFetchedEpoch, ReplicaDirectoryId), FetchSnapshot v1,
AddRaftVoter v1 (AckWhenCommitted), RemoveRaftVoter v0, UpdateRaftVoter v0
(KIP-853; these three address no topic partition: the quorum is implied).
Inbound requests are accepted at every version the generated classes know:
fields a version lacks take the core's defaults (e.g. PreVote false before
Vote v2, directory ids unknown before v1).

Records travel as Kafka v2 batch bytes (Fetch ``records``), encoded and
decoded by :mod:`kraft_node.raft.io.kafka_log` (a batch read from the log is
sent with its stored bytes; a received batch keeps its bytes for the log).

Conventions for "absent" values (Kafka's): directory id ``ZERO_UUID`` <->
``None``; Fetch ``divergingEpoch.epoch == -1`` <-> no divergence;
``snapshotId.epoch == -1`` or ``endOffset == -1`` <-> no snapshot.
"""
from __future__ import annotations

import uuid

from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated import add_raft_voter as g_add
from kraft_node.protocol.generated import begin_quorum_epoch as g_bqe
from kraft_node.protocol.generated import end_quorum_epoch as g_eqe
from kraft_node.protocol.generated import fetch as g_fetch
from kraft_node.protocol.generated import fetch_snapshot as g_fs
from kraft_node.protocol.generated import remove_raft_voter as g_remove
from kraft_node.protocol.generated import update_raft_voter as g_update
from kraft_node.protocol.generated import vote as g_vote
from kraft_node.raft import messages as m
from kraft_node.raft.errors import Errors
from kraft_node.raft.io.kafka_log import decode_raft_batches, encode_batches
from kraft_storage.messages.runtime import METADATA_TOPIC_ID, ZERO_UUID, Uuid

__all__ = ["VERSIONS", "WireError", "api_key_of", "request_to_wire", "request_from_wire",
           "response_to_wire", "response_from_wire", "error_response", "TOPIC", "PARTITION"]

TOPIC = m.CLUSTER_METADATA_TOPIC
PARTITION = m.CLUSTER_METADATA_PARTITION

#: API key -> version this node sends.  Fetch is v18 (KIP-1166): its tagged ``HighWatermark``
#: tells the leader what the fetcher already knows, so a Fetch from a replica whose high
#: watermark is behind the leader's is answered at once instead of parked.  At v17 the field
#: reads as "unknown feature" (Long.MAX_VALUE), so every Fetch with no new records was parked
#: until the next append or ``fetch.max.wait.ms``: an observer (a broker) that re-fetched just
#: after the high watermark moved learned it up to 500 ms late (issue 24's propagation lag,
#: measured p99 487 ms before this; Kafka 4.0's behaviour too, which KIP-1166 fixed).
VERSIONS = {
    ApiKeys.VOTE: 2,
    ApiKeys.BEGIN_QUORUM_EPOCH: 1,
    ApiKeys.END_QUORUM_EPOCH: 1,
    ApiKeys.FETCH: 18,
    ApiKeys.FETCH_SNAPSHOT: 1,
    ApiKeys.ADD_RAFT_VOTER: 1,
    ApiKeys.REMOVE_RAFT_VOTER: 0,
    ApiKeys.UPDATE_RAFT_VOTER: 0,
}

_REQ_KEYS = {m.VoteRequest: ApiKeys.VOTE, m.BeginQuorumEpochRequest: ApiKeys.BEGIN_QUORUM_EPOCH,
             m.EndQuorumEpochRequest: ApiKeys.END_QUORUM_EPOCH, m.FetchRequest: ApiKeys.FETCH,
             m.FetchSnapshotRequest: ApiKeys.FETCH_SNAPSHOT, m.AddRaftVoterRequest: ApiKeys.ADD_RAFT_VOTER,
             m.RemoveRaftVoterRequest: ApiKeys.REMOVE_RAFT_VOTER,
             m.UpdateRaftVoterRequest: ApiKeys.UPDATE_RAFT_VOTER}
_RESP_KEYS = {m.VoteResponse: ApiKeys.VOTE, m.BeginQuorumEpochResponse: ApiKeys.BEGIN_QUORUM_EPOCH,
              m.EndQuorumEpochResponse: ApiKeys.END_QUORUM_EPOCH, m.FetchResponse: ApiKeys.FETCH,
              m.FetchSnapshotResponse: ApiKeys.FETCH_SNAPSHOT, m.AddRaftVoterResponse: ApiKeys.ADD_RAFT_VOTER,
              m.RemoveRaftVoterResponse: ApiKeys.REMOVE_RAFT_VOTER,
              m.UpdateRaftVoterResponse: ApiKeys.UPDATE_RAFT_VOTER}


class WireError(ValueError):
    """An inbound message that does not address ``__cluster_metadata-0`` as a KRaft RPC must.

    ``error`` is the Kafka error code to answer with."""

    def __init__(self, message: str, error: int = Errors.INVALID_REQUEST):
        super().__init__(message)
        self.error = int(error)


def api_key_of(msg) -> int:
    t = type(msg)
    k = _REQ_KEYS.get(t) or _RESP_KEYS.get(t)
    if k is None:
        raise TypeError(f"not a Raft RPC message: {t.__name__}")
    return int(k)


def _uuid_out(u: uuid.UUID | None):
    return ZERO_UUID if u is None else Uuid(u.bytes)


def _uuid_in(u) -> uuid.UUID | None:
    if u is None or u == ZERO_UUID:
        return None
    return uuid.UUID(bytes=u.bytes)


def _only(items, what: str):
    if len(items) != 1:
        raise WireError(f"{what}: exactly one entry expected, got {len(items)}")
    return items[0]


def _named_partition(topics, name_attr: str, parts_attr: str, index_attr: str, what: str):
    t = _only(topics, f"{what} topics")
    if getattr(t, name_attr) != TOPIC:
        raise WireError(f"{what}: unknown topic {getattr(t, name_attr)!r}", 3)  # UNKNOWN_TOPIC_OR_PARTITION
    p = _only(getattr(t, parts_attr), f"{what} partitions")
    if getattr(p, index_attr) != PARTITION:
        raise WireError(f"{what}: unknown partition {getattr(p, index_attr)}", 3)
    return p


def _endpoints_out(cls, eps):
    return [cls(name=e.name, host=e.host, port=e.port) for e in eps]


def _endpoints_in(eps):
    return tuple(m.Endpoint(e.name, e.host, e.port) for e in eps or ())


def _nodes_out(cls, nodes):
    return [cls(node_id=n.node_id, host=n.host, port=n.port) for n in nodes]


def _nodes_in(nodes):
    return tuple(m.NodeEndpoint(n.node_id, n.host, n.port) for n in nodes or ())


# ---------------------------------------------------------------- requests
def request_to_wire(req) -> tuple[object, int]:
    """Core request -> (generated request body, version to send)."""
    if isinstance(req, m.FetchRequest):
        R = g_fetch.FetchRequest
        part = R.FetchPartition(partition=PARTITION, current_leader_epoch=req.current_leader_epoch,
                                fetch_offset=req.fetch_offset, last_fetched_epoch=req.last_fetched_epoch,
                                log_start_offset=req.log_start_offset,
                                partition_max_bytes=req.partition_max_bytes,
                                replica_directory_id=_uuid_out(req.replica_directory_id),
                                high_watermark=req.high_watermark)
        body = R(cluster_id=req.cluster_id,
                 replica_state=R.ReplicaState(replica_id=req.replica_id, replica_epoch=req.replica_epoch),
                 max_wait_ms=req.max_wait_ms, min_bytes=req.min_bytes, max_bytes=req.max_bytes,
                 topics=[R.FetchTopic(topic_id=METADATA_TOPIC_ID, partitions=[part])])
        return body, VERSIONS[ApiKeys.FETCH]
    if isinstance(req, m.VoteRequest):
        R = g_vote.VoteRequest
        part = R.PartitionData(partition_index=PARTITION, replica_epoch=req.replica_epoch,
                               replica_id=req.replica_id,
                               replica_directory_id=_uuid_out(req.replica_directory_id),
                               voter_directory_id=_uuid_out(req.voter_directory_id),
                               last_offset_epoch=req.last_offset_epoch, last_offset=req.last_offset,
                               pre_vote=req.pre_vote)
        return R(cluster_id=req.cluster_id, voter_id=req.voter_id,
                 topics=[R.TopicData(topic_name=TOPIC, partitions=[part])]), VERSIONS[ApiKeys.VOTE]
    if isinstance(req, m.BeginQuorumEpochRequest):
        R = g_bqe.BeginQuorumEpochRequest
        part = R.PartitionData(partition_index=PARTITION, voter_directory_id=_uuid_out(req.voter_directory_id),
                               leader_id=req.leader_id, leader_epoch=req.leader_epoch)
        return R(cluster_id=req.cluster_id, voter_id=req.voter_id,
                 topics=[R.TopicData(topic_name=TOPIC, partitions=[part])],
                 leader_endpoints=_endpoints_out(R.LeaderEndpoint, req.leader_endpoints)), \
            VERSIONS[ApiKeys.BEGIN_QUORUM_EPOCH]
    if isinstance(req, m.EndQuorumEpochRequest):
        R = g_eqe.EndQuorumEpochRequest
        part = R.PartitionData(partition_index=PARTITION, leader_id=req.leader_id, leader_epoch=req.leader_epoch,
                               preferred_successors=list(req.preferred_successors),
                               preferred_candidates=[R.ReplicaInfo(candidate_id=k.id,
                                                                   candidate_directory_id=_uuid_out(k.directory_id))
                                                     for k in req.preferred_candidates])
        return R(cluster_id=req.cluster_id, topics=[R.TopicData(topic_name=TOPIC, partitions=[part])],
                 leader_endpoints=_endpoints_out(R.LeaderEndpoint, req.leader_endpoints)), \
            VERSIONS[ApiKeys.END_QUORUM_EPOCH]
    if isinstance(req, m.FetchSnapshotRequest):
        R = g_fs.FetchSnapshotRequest
        part = R.PartitionSnapshot(partition=PARTITION, current_leader_epoch=req.current_leader_epoch,
                                   snapshot_id=R.SnapshotId(end_offset=req.snapshot_id.offset,
                                                            epoch=req.snapshot_id.epoch),
                                   position=req.position,
                                   replica_directory_id=_uuid_out(req.replica_directory_id))
        return R(cluster_id=req.cluster_id, replica_id=req.replica_id, max_bytes=req.max_bytes,
                 topics=[R.TopicSnapshot(name=TOPIC, partitions=[part])]), VERSIONS[ApiKeys.FETCH_SNAPSHOT]
    if isinstance(req, m.AddRaftVoterRequest):
        R = g_add.AddRaftVoterRequest
        return R(cluster_id=req.cluster_id, timeout_ms=req.timeout_ms, voter_id=req.voter_id,
                 voter_directory_id=_uuid_out(req.voter_directory_id),
                 listeners=_endpoints_out(R.Listener, req.listeners),
                 ack_when_committed=req.ack_when_committed), VERSIONS[ApiKeys.ADD_RAFT_VOTER]
    if isinstance(req, m.RemoveRaftVoterRequest):
        R = g_remove.RemoveRaftVoterRequest
        return R(cluster_id=req.cluster_id, voter_id=req.voter_id,
                 voter_directory_id=_uuid_out(req.voter_directory_id)), VERSIONS[ApiKeys.REMOVE_RAFT_VOTER]
    if isinstance(req, m.UpdateRaftVoterRequest):
        R = g_update.UpdateRaftVoterRequest
        return R(cluster_id=req.cluster_id, current_leader_epoch=req.current_leader_epoch, voter_id=req.voter_id,
                 voter_directory_id=_uuid_out(req.voter_directory_id),
                 listeners=_endpoints_out(R.Listener, req.listeners),
                 k_raft_version_feature=R.KRaftVersionFeature(min_supported_version=req.min_kraft_version,
                                                              max_supported_version=req.max_kraft_version)), \
            VERSIONS[ApiKeys.UPDATE_RAFT_VOTER]
    raise TypeError(f"not a Raft request: {type(req).__name__}")


def request_from_wire(body, version: int):
    """Generated request body (decoded at ``version``) -> core request; WireError if malformed."""
    if isinstance(body, g_fetch.FetchRequest):
        t = _only(body.topics, "Fetch topics")
        if version >= 13:
            if t.topic_id != METADATA_TOPIC_ID:
                raise WireError(f"Fetch: unknown topic id {t.topic_id}", 100)  # UNKNOWN_TOPIC_ID
        elif t.topic != TOPIC:
            raise WireError(f"Fetch: unknown topic {t.topic!r}", 3)
        p = _only(t.partitions, "Fetch partitions")
        if p.partition != PARTITION:
            raise WireError(f"Fetch: unknown partition {p.partition}", 3)
        if version >= 15:
            replica_id, replica_epoch = body.replica_state.replica_id, body.replica_state.replica_epoch
        else:
            replica_id, replica_epoch = body.replica_id, -1
        return m.FetchRequest(body.cluster_id, replica_id, body.max_wait_ms, p.current_leader_epoch,
                              p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
                              _uuid_in(p.replica_directory_id), p.high_watermark, body.min_bytes,
                              body.max_bytes, p.partition_max_bytes, replica_epoch)
    if isinstance(body, g_vote.VoteRequest):
        p = _named_partition(body.topics, "topic_name", "partitions", "partition_index", "Vote")
        return m.VoteRequest(body.cluster_id, body.voter_id, p.replica_epoch, p.replica_id,
                             _uuid_in(p.replica_directory_id), _uuid_in(p.voter_directory_id),
                             p.last_offset_epoch, p.last_offset, bool(p.pre_vote) if version >= 2 else False)
    if isinstance(body, g_bqe.BeginQuorumEpochRequest):
        p = _named_partition(body.topics, "topic_name", "partitions", "partition_index", "BeginQuorumEpoch")
        voter_id = body.voter_id if version >= 1 else -1
        return m.BeginQuorumEpochRequest(body.cluster_id, voter_id, _uuid_in(p.voter_directory_id),
                                         p.leader_id, p.leader_epoch, _endpoints_in(body.leader_endpoints))
    if isinstance(body, g_eqe.EndQuorumEpochRequest):
        p = _named_partition(body.topics, "topic_name", "partitions", "partition_index", "EndQuorumEpoch")
        if version >= 1:
            cands = tuple(m.ReplicaKey(c.candidate_id, _uuid_in(c.candidate_directory_id))
                          for c in p.preferred_candidates)
        else:
            cands = tuple(m.ReplicaKey(i, None) for i in p.preferred_successors)
        return m.EndQuorumEpochRequest(body.cluster_id, p.leader_id, p.leader_epoch, cands,
                                       _endpoints_in(body.leader_endpoints))
    if isinstance(body, g_fs.FetchSnapshotRequest):
        p = _named_partition(body.topics, "name", "partitions", "partition", "FetchSnapshot")
        return m.FetchSnapshotRequest(body.cluster_id, body.replica_id, body.max_bytes, p.current_leader_epoch,
                                      m.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                      p.position, _uuid_in(p.replica_directory_id))
    if isinstance(body, g_add.AddRaftVoterRequest):
        return m.AddRaftVoterRequest(body.cluster_id, body.timeout_ms, body.voter_id,
                                     _uuid_in(body.voter_directory_id), _endpoints_in(body.listeners),
                                     bool(body.ack_when_committed) if version >= 1 else True)
    if isinstance(body, g_remove.RemoveRaftVoterRequest):
        return m.RemoveRaftVoterRequest(body.cluster_id, body.voter_id, _uuid_in(body.voter_directory_id))
    if isinstance(body, g_update.UpdateRaftVoterRequest):
        f = body.k_raft_version_feature
        return m.UpdateRaftVoterRequest(body.cluster_id, body.current_leader_epoch, body.voter_id,
                                        _uuid_in(body.voter_directory_id), _endpoints_in(body.listeners),
                                        f.min_supported_version, f.max_supported_version)
    raise TypeError(f"not a Raft request: {type(body).__name__}")


# ---------------------------------------------------------------- responses
def response_to_wire(resp, leader_endpoint: m.NodeEndpoint | None = None):
    """Core response -> generated response body (encoded by the server at the request's version).

    ``leader_endpoint``: the leader's host/port for UpdateRaftVoter's ``CurrentLeader``
    (the core knows ids, the driver knows addresses)."""
    if isinstance(resp, m.FetchResponse):
        R = g_fetch.FetchResponse
        div = resp.diverging_epoch
        sid = resp.snapshot_id
        part = R.PartitionData(
            partition_index=PARTITION, error_code=resp.partition_error_code, high_watermark=resp.high_watermark,
            log_start_offset=resp.log_start_offset,
            diverging_epoch=R.EpochEndOffset(epoch=div.epoch, end_offset=div.end_offset) if div
            else R.EpochEndOffset(),
            current_leader=R.LeaderIdAndEpoch(leader_id=resp.current_leader.leader_id,
                                              leader_epoch=resp.current_leader.leader_epoch),
            snapshot_id=R.SnapshotId(end_offset=sid.offset, epoch=sid.epoch) if sid else R.SnapshotId(),
            records=encode_batches(resp.records) if resp.records else b"")
        return R(error_code=resp.error_code,
                 responses=[R.FetchableTopicResponse(topic=TOPIC, topic_id=METADATA_TOPIC_ID, partitions=[part])],
                 node_endpoints=[R.NodeEndpoint(node_id=n.node_id, host=n.host, port=n.port)
                                 for n in resp.node_endpoints])
    if isinstance(resp, m.VoteResponse):
        R = g_vote.VoteResponse
        part = R.PartitionData(partition_index=PARTITION, error_code=resp.partition_error_code,
                               leader_id=resp.leader_id, leader_epoch=resp.leader_epoch,
                               vote_granted=resp.vote_granted)
        return R(error_code=resp.error_code, topics=[R.TopicData(topic_name=TOPIC, partitions=[part])],
                 node_endpoints=_nodes_out(R.NodeEndpoint, resp.node_endpoints))
    if isinstance(resp, (m.BeginQuorumEpochResponse, m.EndQuorumEpochResponse)):
        R = g_bqe.BeginQuorumEpochResponse if isinstance(resp, m.BeginQuorumEpochResponse) \
            else g_eqe.EndQuorumEpochResponse
        part = R.PartitionData(partition_index=PARTITION, error_code=resp.partition_error_code,
                               leader_id=resp.leader_id, leader_epoch=resp.leader_epoch)
        return R(error_code=resp.error_code, topics=[R.TopicData(topic_name=TOPIC, partitions=[part])],
                 node_endpoints=_nodes_out(R.NodeEndpoint, resp.node_endpoints))
    if isinstance(resp, m.FetchSnapshotResponse):
        R = g_fs.FetchSnapshotResponse
        part = R.PartitionSnapshot(index=PARTITION, error_code=resp.partition_error_code,
                                   snapshot_id=R.SnapshotId(end_offset=resp.snapshot_id.offset,
                                                            epoch=resp.snapshot_id.epoch),
                                   current_leader=R.LeaderIdAndEpoch(leader_id=resp.current_leader.leader_id,
                                                                     leader_epoch=resp.current_leader.leader_epoch),
                                   size=resp.size, position=resp.position,
                                   unaligned_records=bytes(resp.unaligned_records))
        return R(error_code=resp.error_code, topics=[R.TopicSnapshot(name=TOPIC, partitions=[part])],
                 node_endpoints=_nodes_out(R.NodeEndpoint, resp.node_endpoints))
    if isinstance(resp, m.AddRaftVoterResponse):
        return g_add.AddRaftVoterResponse(error_code=resp.error_code, error_message=resp.error_message)
    if isinstance(resp, m.RemoveRaftVoterResponse):
        return g_remove.RemoveRaftVoterResponse(error_code=resp.error_code, error_message=resp.error_message)
    if isinstance(resp, m.UpdateRaftVoterResponse):
        R = g_update.UpdateRaftVoterResponse
        ep = leader_endpoint
        return R(error_code=resp.error_code,
                 current_leader=R.CurrentLeader(leader_id=resp.current_leader.leader_id,
                                                leader_epoch=resp.current_leader.leader_epoch,
                                                host=ep.host if ep is not None else "",
                                                port=ep.port if ep is not None else 0))
    raise TypeError(f"not a Raft response: {type(resp).__name__}")


def _response_partition(topics, name_attr, parts_attr, what):
    """The partition of a response, or None when the response carries only a top-level error."""
    if not topics:
        return None
    t = _only(topics, f"{what} topics")
    return _only(getattr(t, parts_attr), f"{what} partitions")


def response_from_wire(body):
    """Generated response body -> core response; WireError if it lacks the partition."""
    if isinstance(body, g_fetch.FetchResponse):
        p = _response_partition(body.responses, "topic_id", "partitions", "Fetch")
        if p is None:
            return m.FetchResponse(body.error_code, 0, -1, m.LeaderIdAndEpoch(-1, -1))
        div = p.diverging_epoch
        sid = p.snapshot_id
        recs = p.records
        return m.FetchResponse(
            body.error_code, p.error_code, p.high_watermark,
            m.LeaderIdAndEpoch(p.current_leader.leader_id, p.current_leader.leader_epoch), p.log_start_offset,
            m.EpochEndOffset(div.epoch, div.end_offset) if div is not None and div.epoch >= 0 else None,
            m.OffsetAndEpoch(sid.end_offset, sid.epoch)
            if sid is not None and sid.epoch >= 0 and sid.end_offset >= 0 else None,
            decode_raft_batches(recs, source="Fetch response") if recs else (),
            _nodes_in(body.node_endpoints))
    if isinstance(body, g_vote.VoteResponse):
        p = _response_partition(body.topics, "topic_name", "partitions", "Vote")
        if p is None:
            return m.VoteResponse(body.error_code, 0, -1, -1, False)
        return m.VoteResponse(body.error_code, p.error_code, p.leader_id, p.leader_epoch, bool(p.vote_granted),
                              _nodes_in(body.node_endpoints))
    if isinstance(body, (g_bqe.BeginQuorumEpochResponse, g_eqe.EndQuorumEpochResponse)):
        C = m.BeginQuorumEpochResponse if isinstance(body, g_bqe.BeginQuorumEpochResponse) \
            else m.EndQuorumEpochResponse
        p = _response_partition(body.topics, "topic_name", "partitions", C.__name__)
        if p is None:
            return C(body.error_code, 0, -1, -1)
        return C(body.error_code, p.error_code, p.leader_id, p.leader_epoch, _nodes_in(body.node_endpoints))
    if isinstance(body, g_fs.FetchSnapshotResponse):
        p = _response_partition(body.topics, "name", "partitions", "FetchSnapshot")
        if p is None:
            return m.FetchSnapshotResponse(body.error_code, 0, m.OffsetAndEpoch(-1, -1), m.LeaderIdAndEpoch(-1, -1))
        cl = p.current_leader
        return m.FetchSnapshotResponse(body.error_code, p.error_code,
                                       m.OffsetAndEpoch(p.snapshot_id.end_offset, p.snapshot_id.epoch),
                                       m.LeaderIdAndEpoch(cl.leader_id, cl.leader_epoch) if cl is not None
                                       else m.LeaderIdAndEpoch(-1, -1),
                                       p.size, p.position, bytes(p.unaligned_records or b""),
                                       _nodes_in(body.node_endpoints))
    if isinstance(body, g_add.AddRaftVoterResponse):
        return m.AddRaftVoterResponse(body.error_code, body.error_message)
    if isinstance(body, g_remove.RemoveRaftVoterResponse):
        return m.RemoveRaftVoterResponse(body.error_code, body.error_message)
    if isinstance(body, g_update.UpdateRaftVoterResponse):
        cl = body.current_leader
        return m.UpdateRaftVoterResponse(body.error_code, m.LeaderIdAndEpoch(cl.leader_id, cl.leader_epoch)
                                         if cl is not None else m.LeaderIdAndEpoch(-1, -1))
    raise TypeError(f"not a Raft response: {type(body).__name__}")


def error_response(api_key: int, error: int):
    """A core response of the API's type carrying only a top-level ``error`` (transport
    failures reported to the core, or answers to malformed requests)."""
    api_key = int(api_key)
    if api_key == ApiKeys.FETCH:
        return m.FetchResponse(int(error), 0, -1, m.LeaderIdAndEpoch(-1, -1))
    if api_key == ApiKeys.VOTE:
        return m.VoteResponse(int(error), 0, -1, -1, False)
    if api_key == ApiKeys.BEGIN_QUORUM_EPOCH:
        return m.BeginQuorumEpochResponse(int(error), 0, -1, -1)
    if api_key == ApiKeys.END_QUORUM_EPOCH:
        return m.EndQuorumEpochResponse(int(error), 0, -1, -1)
    if api_key == ApiKeys.FETCH_SNAPSHOT:
        return m.FetchSnapshotResponse(int(error), 0, m.OffsetAndEpoch(-1, -1), m.LeaderIdAndEpoch(-1, -1))
    if api_key == ApiKeys.ADD_RAFT_VOTER:
        return m.AddRaftVoterResponse(int(error))
    if api_key == ApiKeys.REMOVE_RAFT_VOTER:
        return m.RemoveRaftVoterResponse(int(error))
    if api_key == ApiKeys.UPDATE_RAFT_VOTER:
        return m.UpdateRaftVoterResponse(int(error))
    raise ValueError(f"api key {api_key} is not a Raft RPC")
