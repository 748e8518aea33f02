"""The core's value types and its RPC messages.

Every message is a small frozen dataclass mirroring one Kafka RPC version with
all fields a KRaft replica uses: Vote v2 (with PreVote), BeginQuorumEpoch v1,
EndQuorumEpoch v1, Fetch v17+ and FetchSnapshot v1.  Field names are the
schema names (``kafka-schemas/message/*.json``) in snake_case.  The RPCs carry
exactly one topic partition, ``__cluster_metadata-0``; the single
``TopicData/PartitionData`` level is flattened into the message, so the
top-level ``error_code`` is the response-level error and ``partition_error_code``
is the partition's.  A wire driver translates these 1:1 and fills in the
topic name/id and partition index.

Records travel as :class:`Batch` objects; the driver encodes them as Kafka
v2 record batches.  Records themselves are opaque ``bytes`` here.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Union

from kraft_node.raft.errors import Errors

CLUSTER_METADATA_TOPIC = "__cluster_metadata"
CLUSTER_METADATA_PARTITION = 0
#: Per-batch overhead of a v2 record batch header, used for size accounting.
BATCH_OVERHEAD_BYTES = 61
#: Approximate per-record overhead (length, attributes, deltas, key, headers).
RECORD_OVERHEAD_BYTES = 8


@dataclass(frozen=True, slots=True)
class ReplicaKey:
    """A replica's identity: node id plus optional log directory id (KIP-853).

    A re-formatted node keeps its id but gets a new directory id, so it is a
    different voter.  ``None`` means "unknown"/"any directory".
    """
    id: int
    directory_id: uuid.UUID | None = None

    def matches(self, other: "ReplicaKey") -> bool:
        """Same id, and directory ids equal where both are known."""
        if self.id != other.id:
            return False
        if self.directory_id is None or other.directory_id is None:
            return True
        return self.directory_id == other.directory_id


@dataclass(frozen=True, slots=True)
class OffsetAndEpoch:
    """A log position: ``offset`` with the epoch of the record just before it.

    Ordering (for log up-to-dateness) is by epoch first, then offset, as in
    Kafka's ``OffsetAndEpoch.compareTo``.  Snapshot ids are OffsetAndEpochs
    too: the snapshot holds offsets ``[0, offset)`` and ``epoch`` is the epoch
    of offset ``offset - 1``.
    """
    offset: int
    epoch: int

    def key(self) -> tuple[int, int]:
        return (self.epoch, self.offset)

    def at_least(self, other: "OffsetAndEpoch") -> bool:
        return (self.epoch, self.offset) >= (other.epoch, other.offset)


SnapshotId = OffsetAndEpoch


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A named listener's address: one advertised in Raft messages (LeaderEndpoints,
    Listeners, a VotersRecord entry) or one the node is configured with
    (``listeners=NAME://host:port``, :func:`kraft_node.server.config.parse_listeners`).
    One class for both, as Kafka's ``Endpoint``."""
    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class NodeEndpoint:
    """NodeEndpoints entry of a response: where ``node_id`` can be reached."""
    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class LeaderChangeMessage:
    """Payload of the LeaderChange control record written at each epoch start."""
    version: int
    leader_id: int
    voters: tuple[int, ...]
    granting_voters: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class VoterEntry:
    """One voter of a VotersRecord (KIP-853): key, listeners and supported kraft.version range."""
    key: ReplicaKey
    endpoints: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0
    max_kraft_version: int = 1


@dataclass(frozen=True, slots=True)
class VotersControl:
    """Payload of the KRAFT_VOTERS control record: the whole voter set from this offset on."""
    version: int
    voters: tuple[VoterEntry, ...]


@dataclass(frozen=True, slots=True)
class KRaftVersionControl:
    """Payload of the KRAFT_VERSION control record: the finalized kraft.version from this offset on."""
    version: int
    kraft_version: int


#: The decoded payload of a control batch (:attr:`Batch.control`).
ControlMessage = Union[LeaderChangeMessage, VotersControl, KRaftVersionControl]


@dataclass(frozen=True, slots=True)
class Batch:
    """A record batch as the core sees it.

    Offsets ``base_offset .. base_offset + len(records) - 1`` all carry the
    batch's ``epoch``.  A control batch holds exactly one record and its
    decoded ``control`` payload (LeaderChangeMessage, VotersControl or KRaftVersionControl).
    ``append_time_ms`` is the leader's clock when the batch was built.
    """
    base_offset: int
    epoch: int
    records: tuple[bytes, ...]
    is_control: bool = False
    control: ControlMessage | None = None
    append_time_ms: int = 0

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.records)

    @property
    def size_in_bytes(self) -> int:
        return BATCH_OVERHEAD_BYTES + sum(len(r) + RECORD_OVERHEAD_BYTES for r in self.records)


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """What ``handle_leader_change`` reports; ``leader_id`` is -1 when unknown."""
    leader_id: int
    epoch: int


# ---------------------------------------------------------------- Vote (52)
@dataclass(frozen=True, slots=True)
class VoteRequest:
    cluster_id: str | None
    voter_id: int
    replica_epoch: int
    replica_id: int
    replica_directory_id: uuid.UUID | None
    voter_directory_id: uuid.UUID | None
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class VoteResponse:
    error_code: int
    partition_error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool
    node_endpoints: tuple[NodeEndpoint, ...] = ()


# ---------------------------------------------------- BeginQuorumEpoch (53)
@dataclass(frozen=True, slots=True)
class BeginQuorumEpochRequest:
    cluster_id: str | None
    voter_id: int
    voter_directory_id: uuid.UUID | None
    leader_id: int
    leader_epoch: int
    leader_endpoints: tuple[Endpoint, ...] = ()


@dataclass(frozen=True, slots=True)
class BeginQuorumEpochResponse:
    error_code: int
    partition_error_code: int
    leader_id: int
    leader_epoch: int
    node_endpoints: tuple[NodeEndpoint, ...] = ()


# ------------------------------------------------------ EndQuorumEpoch (54)
@dataclass(frozen=True, slots=True)
class EndQuorumEpochRequest:
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    #: v1 field: voters ordered by descending fetch offset (most caught up first).
    preferred_candidates: tuple[ReplicaKey, ...]
    leader_endpoints: tuple[Endpoint, ...] = ()

    @property
    def preferred_successors(self) -> tuple[int, ...]:
        """The v0 field (ids only), derived for old-version drivers."""
        return tuple(k.id for k in self.preferred_candidates)


@dataclass(frozen=True, slots=True)
class EndQuorumEpochResponse:
    error_code: int
    partition_error_code: int
    leader_id: int
    leader_epoch: int
    node_endpoints: tuple[NodeEndpoint, ...] = ()


# --------------------------------------------------------------- Fetch (1)
@dataclass(frozen=True, slots=True)
class FetchRequest:
    cluster_id: str | None
    replica_id: int
    max_wait_ms: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int = -1
    replica_directory_id: uuid.UUID | None = None
    high_watermark: int = 2 ** 63 - 1
    min_bytes: int = 0
    max_bytes: int = 0x7FFFFFFF
    partition_max_bytes: int = 0x7FFFFFFF
    replica_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    epoch: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class LeaderIdAndEpoch:
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class FetchResponse:
    error_code: int
    partition_error_code: int
    high_watermark: int
    current_leader: LeaderIdAndEpoch
    log_start_offset: int = -1
    #: Set when the fetch position diverges from the leader's log.
    diverging_epoch: EpochEndOffset | None = None
    #: Set when the fetcher must load this snapshot (fetch offset below log start).
    snapshot_id: SnapshotId | None = None
    records: tuple[Batch, ...] = ()
    node_endpoints: tuple[NodeEndpoint, ...] = ()


# ------------------------------------------------------- FetchSnapshot (59)
@dataclass(frozen=True, slots=True)
class FetchSnapshotRequest:
    cluster_id: str | None
    replica_id: int
    max_bytes: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    replica_directory_id: uuid.UUID | None = None


@dataclass(frozen=True, slots=True)
class FetchSnapshotResponse:
    error_code: int
    partition_error_code: int
    snapshot_id: SnapshotId
    current_leader: LeaderIdAndEpoch
    size: int = -1
    position: int = -1
    unaligned_records: bytes = b""
    node_endpoints: tuple[NodeEndpoint, ...] = ()


# ------------------------------------------- Add/Remove/UpdateRaftVoter (80-82)
@dataclass(frozen=True, slots=True)
class AddRaftVoterRequest:
    cluster_id: str | None
    timeout_ms: int
    voter_id: int
    voter_directory_id: uuid.UUID | None
    listeners: tuple[Endpoint, ...] = ()
    #: v1: answer once the VotersRecord is committed (v0 behaves the same in this core).
    ack_when_committed: bool = True


@dataclass(frozen=True, slots=True)
class AddRaftVoterResponse:
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class RemoveRaftVoterRequest:
    cluster_id: str | None
    voter_id: int
    voter_directory_id: uuid.UUID | None


@dataclass(frozen=True, slots=True)
class RemoveRaftVoterResponse:
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateRaftVoterRequest:
    cluster_id: str | None
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: uuid.UUID | None
    listeners: tuple[Endpoint, ...] = ()
    min_kraft_version: int = 0
    max_kraft_version: int = 1


@dataclass(frozen=True, slots=True)
class UpdateRaftVoterResponse:
    error_code: int
    current_leader: LeaderIdAndEpoch = LeaderIdAndEpoch(-1, -1)


Request = Union[VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest,
                FetchRequest, FetchSnapshotRequest, AddRaftVoterRequest, RemoveRaftVoterRequest,
                UpdateRaftVoterRequest]
Response = Union[VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse,
                 FetchResponse, FetchSnapshotResponse, AddRaftVoterResponse, RemoveRaftVoterResponse,
                 UpdateRaftVoterResponse]


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """A request the driver must send to ``destination``.

    The driver delivers the matching response (or nothing) back with the same
    ``correlation_id``; the core tolerates loss, duplication and reordering.

    ``after_flush``: None, or a flush job of ``Ready.flush_jobs`` (this poll's or an
    earlier one's) that must complete before the request goes on the wire -- a Fetch
    reporting an end offset the job makes durable.  The driver may encode it meanwhile;
    it sends it only if ``RaftCore.handle_flush_done(job)`` returned True.
    """
    destination: int
    correlation_id: int
    request: Request
    created_ms: int
    after_flush: object = None


@dataclass(frozen=True, slots=True)
class OutboundResponse:
    """A response the driver must send back to ``destination`` for ``correlation_id``."""
    destination: int
    correlation_id: int
    response: Response


Outbound = Union[OutboundRequest, OutboundResponse]


def error_name(code: int) -> str:
    try:
        return Errors(code).name
    except ValueError:
        return f"UNKNOWN({code})"


__all__ = [n for n in dir()
           if not n.startswith("_") and n not in ("annotations", "uuid", "dataclass", "field", "Union")]
