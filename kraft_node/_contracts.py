"""The contract of each twin pair: what ``kraft_node._native.X`` and ``kraft_node._pure.X`` both provide.

The Raft hot path's codecs (the request/response headers and Fetch) are
generated twice by ``codegen``: a Cython build and its pure-Python twin (the
kernels ``_placement`` and ``_bulk_objects`` are written twice by hand), each pair
chosen once per process by ``kraft_storage.accel.load(name,
package="kraft_node")``.  As for the storage kernels (``kraft_storage/_contracts.py``,
whose module doc says why these are ``typing.Protocol`` classes and not
``.pyi`` stubs: one contract per *pair*, checked at run time by
``tests/storage/test_twin_contracts.py`` against both twins), each pair's API is a
Protocol the module satisfies.  An annotation ``type[P]`` is a message class
following ``P``; a message's fields and nested struct classes come from
Kafka's schema, so the test requires the twins to agree with each other on
them (constructor keywords and defaults, nested classes, class constants).

``TWINS`` maps each codec module name to its Protocol.
"""
from __future__ import annotations

from typing import Any, Protocol

from kraft_storage.messages.runtime import GeneratedMessage

__all__ = ["TWINS", "BulkObjectsKernel", "ChangeReplayKernel", "ImageBulkKernel", "MetadataEncodeKernel",
           "PartitionFoldKernel", "PartitionFoldLike", "PlacementKernel", "RpcFetchCodec", "RpcHeadersCodec",
           "RunScannerLike", "TopicMapLike", "TopicMapMutationLike", "TopicPlanLike", "TopicsMapKernel"]


class ApiMessage(GeneratedMessage, Protocol):
    """A request or response body of one API."""

    API_KEY: int


class RpcHeadersCodec(Protocol):
    """``_rpc_headers``: request header v1/v2 and response header v0/v1 (caller: ``kraft_node.protocol.headers``)."""

    @property
    def RequestHeader(self) -> type[GeneratedMessage]:
        """api key, api version, correlation id, client id."""

    @property
    def ResponseHeader(self) -> type[GeneratedMessage]:
        """correlation id."""


class RpcFetchCodec(Protocol):
    """``_rpc_fetch``: the Fetch API, apiKey 1 (caller: ``kraft_node.protocol.generated.fetch``)."""

    @property
    def FetchRequest(self) -> type[ApiMessage]:
        """A Fetch request (nested: FetchTopic, FetchPartition, ForgottenTopic, ReplicaState)."""

    @property
    def FetchResponse(self) -> type[ApiMessage]:
        """A Fetch response (nested: FetchableTopicResponse, PartitionData, EpochEndOffset, ...)."""


#: codec module name (``kraft_node._native.<name>`` / ``kraft_node._pure.<name>``) -> its contract.
class PlacementKernel(Protocol):
    """``_placement``: the striped replica placer's per-partition loop over a flat rack list
    (caller: ``kraft_node.metadata.placement.striped``; layout in ``kraft_node/_pure/_placement.py``)."""

    def place_partitions(self, out: Any, brokers: Any, starts: Any, cursors: Any, rack_names: Any,
                         map_order: Any, rack_state: Any, rng: Any) -> None:
        """Place ``out.shape[0]`` partitions of ``out.shape[1]`` replicas; update the state arrays."""


class BulkObjectsKernel(Protocol):
    """``_bulk_objects``: Python objects and tuples made in bulk from columns, index groups,
    and PartitionRecord values encoded from registrations (caller:
    ``kraft_node.metadata.controller.replication_snapshot``; layout in ``kraft_node/_pure/_bulk_objects.py``)."""

    def slot_names(self, cls: type) -> list[str]:
        """Every slot of ``cls``, base classes first."""

    def new_objects(self, cls: type, names: Any, columns: Any, untrack: bool = False) -> list[Any]:
        """Instances of ``cls`` whose slot ``names[j]`` is ``columns[j][i]`` (no ``__init__``)."""

    def tuples(self, offsets: Any, values: list[Any], untrack: bool = False) -> list[tuple[Any, ...]]:
        """``tuple(values[offsets[i]:offsets[i + 1]])`` for each i."""

    def encode_partition_records(self, cls: type, header: bytes, pids: Any, topic_ids: Any, regs: Any,
                                 uuid_cls: type, version: int) -> list[bytes | None]:
        """Each registration's PartitionRecord value, or None where the typed encoder must write it."""

    def group_by_key(self, keys: Any, topics: Any, entries: Any, nkeys: int, topic_objs: list[Any],
                     untrack: bool = False) -> Any:
        """Entries grouped by key then topic, or None when a key's topics are not in order."""

    def encode_partition_rows(self, header: bytes, columns: Any, starts: Any, stops: Any, topic_ids: list[bytes],
                              version: int, prefixes: list[Any] | None = None) -> list[Any]:
        """Each row's PartitionRecord value from a PartitionBlock's columns, span by span (each
        after its prefix when given), or None where the caller must write it another way
        (caller: ``kraft_node.metadata.image.topics``)."""


class RunScannerLike(Protocol):
    """Finds, merges and indexes a run of ISR/leader-only PartitionChangeRecords (contract in
    ``kraft_node/_pure/_change_replay.py``)."""

    @property
    def registration_cls(self) -> type:
        """The registration class the scanner makes (its slots are the eleven fields)."""

    @property
    def migrating(self) -> Any:
        """The MIGRATING directory id (directories normalised as the merge does)."""

    @property
    def change_api_key(self) -> int:
        """PartitionChangeRecord's api key."""

    def __init__(self, registration_cls: type, migrating: Any, change_api_key: int) -> None:
        """A scanner for ``registration_cls`` (ValueError unless its slots are exactly the fields)."""

    def scan(self, records: Any, start: int, topic_id: Any, parts: Any, members: Any, key: Any) -> Any:
        """The run from ``records[start]``: None (fewer than two records), or (end, pids, previous
        and new registrations, each touched broker's final entries or None, moved brokers, the
        positions the caller must look at)."""


class ChangeReplayKernel(Protocol):
    """``_change_replay``: the controller's replay of runs of ISR/leader-only partition changes
    (caller: ``kraft_node.metadata.controller.replication_control``; contract in
    ``kraft_node/_pure/_change_replay.py``)."""

    LEADER_FLAG: int
    """The index entry's bit for "this broker leads the partition" (1 << 31)."""
    MAX_ISR: int
    """The most ISR members a record or registration of a run may have."""
    ENCODE_MAX_ISR: int
    """The most ISR members ``encode_changes`` writes."""
    ATTN_LEADER: int
    """``attention`` flag: the record changes the leader."""
    ATTN_PREFERRED: int
    """``attention`` flag: the new leader is the preferred replica."""
    ATTN_UNCLEAN: int
    """``attention`` flag: the new leader is neither -1 nor in the previous ISR."""
    ATTN_FROM_ELR: int
    """``attention`` flag: the new leader comes from the previous ELR."""
    ATTN_ELR: int
    """``attention`` flag: the partition has an ELR."""

    @property
    def RunScanner(self) -> type[RunScannerLike]:
        """The scanner."""

    def encode_changes(self, messages: Any, change_cls: Any, header: bytes) -> list[bytes | None]:
        """Each ISR/leader-only PartitionChangeRecord's framed value (``header`` + body), None for
        any other message."""

    def encode_records(self, records: list[Any], start: int, record_cls: Any, encoded_cls: Any, change_cls: Any,
                       headers: tuple[bytes | None, ...]) -> int:
        """In place, the records of ``records[start:]`` whose message ``encode_changes`` writes made
        ``encoded_cls`` ones carrying the value; how many."""


class ImageBulkKernel(Protocol):
    """``_image_bulk``: record values joined into one buffer for the columnar decoder (caller:
    ``kraft_node.metadata.image.bulk``; contract in ``kraft_node/_pure/_image_bulk.py``)."""

    def join_values(self, values: Any) -> tuple[bytes, Any, Any]:
        """``(data, value_pos int64[n], value_len int32[n])`` of a list or tuple of bytes-like values."""


class MetadataEncodeKernel(Protocol):
    """``_metadata_encode``: a partition block's rows as MetadataResponsePartition bytes (caller:
    ``kraft_node.broker.metadata_encoding``; contract in ``kraft_node/_pure/_metadata_encode.py``)."""

    LEADER_NOT_AVAILABLE: int
    """Kafka's error code 5 (a leader not registered, or without the listener before v6)."""
    REPLICA_NOT_AVAILABLE: int
    """Kafka's error code 9 (v0: a replica or ISR member left out)."""
    LISTENER_NOT_FOUND: int
    """Kafka's error code 72 (v6+: a leader registered without the listener)."""

    def encode_metadata_partitions(self, version: int, partition_id: Any, leader: Any, leader_epoch: Any,
                                   replicas: Any, replicas_offsets: Any, isr: Any, isr_offsets: Any, broker_ids: Any,
                                   broker_usable: Any, broker_has_listener: Any,
                                   offline_extra: Any = None) -> tuple[bytes, Any]:
        """``(buffer, row_offsets int64[n + 1])`` of every row at ``version``."""

    def assemble_topics(self, prefixes: Any, buffers: Any, which: Any, starts: Any, stops: Any,
                        suffix: bytes) -> list[bytes]:
        """Topic ``i``'s bytes: ``prefixes[i] + buffers[which[i]][starts[i]:stops[i]] + suffix``."""

    def join_slices(self, buffers: Any, which: Any, starts: Any, stops: Any) -> bytes:
        """``buffers[which[i]][starts[i]:stops[i]]`` for every ``i``, concatenated (the all-topics
        answer from the previous answer's prefixes and suffixes and the blocks' new rows)."""


class PartitionFoldLike(Protocol):
    """A partition fold's state (layout and rules in ``kraft_node/_pure/_partition_fold.py``)."""

    @property
    def entries(self) -> int:
        """Partitions held (of every incarnation)."""

    @property
    def incarnations(self) -> int:
        """Topic incarnations held."""

    def __init__(self) -> None:
        """An empty fold."""

    def fold(self, offsets: Any, topics: Any, removes: Any, partitions: Any, changes: Any,
             raw_changes: Any = None) -> tuple[int, int, int, bytes, int, int] | None:
        """Fold four record tables in row order; None, or the first error (offset, row, code, topic id,
        partition id, detail)."""

    def absorb(self, other: Any) -> tuple[int, int, int, bytes, int, int] | None:
        """Fold an exported piece on top of this state; the lowest-offset error found, or None."""

    def export(self, live_only: bool = False) -> dict[str, Any]:
        """The state as numpy arrays (``EXPORT_FIELDS``)."""


class PartitionFoldKernel(Protocol):
    """``_partition_fold``: topic and partition records folded in log order into a composable partial
    delta (caller: ``kraft_node.metadata.image.log_fold``; layout in ``kraft_node/_pure/_partition_fold.py``)."""

    LIST_FIELDS: tuple[str, ...]
    """List fields of an entry, in the order of their ``list_set`` bits (PartitionBlock's list columns)."""
    NO_LEADER_CHANGE: int
    """PartitionChangeRecord's leader meaning "unchanged" (-2)."""
    F_ABSOLUTE: int
    """``flags`` bit: the entry's state is whole (a PartitionRecord was folded), not relative."""
    F_LEADER: int
    """``flags`` bit: a change named a leader."""
    INC_BASE: int
    """``inc_kind``: a topic incarnation of the state below the piece."""
    INC_CREATED: int
    """``inc_kind``: a topic incarnation created by a TopicRecord of the piece."""
    LIVE: int
    """``inc_state``: the incarnation is live."""
    REMOVED: int
    """``inc_state``: a RemoveTopicRecord removed it."""
    SUPERSEDED: int
    """``inc_state``: a later TopicRecord replaced it."""
    K_PARTITION: int
    """``inc_first_kind``: a PartitionRecord first required the BASE incarnation."""
    K_CHANGE: int
    """``inc_first_kind``: a PartitionChangeRecord first required it."""
    K_REMOVE: int
    """``inc_first_kind``: a RemoveTopicRecord first required it."""
    E_UNKNOWN_TOPIC: int
    """Error: a PartitionRecord/PartitionChangeRecord for a topic that is not there."""
    E_UNKNOWN_PARTITION: int
    """Error: a PartitionChangeRecord for a partition that is not there."""
    E_REMOVE_UNKNOWN_TOPIC: int
    """Error: a RemoveTopicRecord for a topic that is not there."""
    E_RECORD_DIRECTORIES: int
    """Error: a record's own directories and replicas differ in count."""
    E_RECOVERY_STATE: int
    """Error: a leader recovery state other than 0, 1 (or -1 in a change)."""
    E_DIRECTORIES: int
    """Error: the merged registration's directories and replicas differ in count."""
    E_UNDECODABLE: int
    """Error: a raw PartitionChangeRecord body the generated decoder would refuse."""
    EXPORT_FIELDS: dict[str, str]
    """The arrays of ``export`` (and what ``absorb`` takes) with their dtypes."""

    @property
    def PartitionFold(self) -> type[PartitionFoldLike]:
        """The fold state class."""


class TopicMapLike(Protocol):
    """An immutable map keyed by exact ``str`` or ``Uuid`` (topic names or ids); writes give new maps."""

    def __init__(self, items: Any = None) -> None:
        """``items``: a mapping or (key, value) pairs (a later pair of a key wins); TypeError for another key type."""

    def __getitem__(self, key: Any) -> Any:
        """The value (KeyError when absent; a key of another type is absent)."""

    def __contains__(self, key: Any) -> bool:
        """Whether the key is there."""

    def __len__(self) -> int:
        """The number of keys."""

    def __iter__(self) -> Any:
        """The keys, in an unspecified order."""

    def get(self, key: Any, default: Any = None) -> Any:
        """The value, or ``default``."""

    def keys(self) -> Any:
        """The keys (iterable again, with a length)."""

    def values(self) -> Any:
        """The values."""

    def items(self) -> Any:
        """The (key, value) pairs."""

    def set(self, key: Any, value: Any) -> Any:
        """A map with key -> value (this map itself when that value object is there already)."""

    def delete(self, key: Any) -> Any:
        """A map without the key (KeyError when absent)."""

    def update(self, items: Any) -> Any:
        """A map with each pair of ``items`` put in."""

    def mutate(self) -> Any:
        """A TopicMapMutation starting from this map."""


class TopicMapMutationLike(Protocol):
    """A TopicMap being changed in place (``immutables.MapMutation``'s API)."""

    def __init__(self, base: Any = None) -> None:
        """Starting from the TopicMap ``base`` (None: empty)."""

    def get(self, key: Any, default: Any = None) -> Any:
        """The value, or ``default``."""

    def __getitem__(self, key: Any) -> Any:
        """The value (KeyError when absent)."""

    def __contains__(self, key: Any) -> bool:
        """Whether the key is there."""

    def __len__(self) -> int:
        """The number of keys."""

    def set(self, key: Any, value: Any) -> None:
        """Put key -> value (ValueError once finished)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        """``set``."""

    def __delitem__(self, key: Any) -> None:
        """Remove the key (KeyError when absent, ValueError once finished)."""

    def update(self, items: Any) -> None:
        """Put each pair of ``items``."""

    def finish(self) -> Any:
        """The TopicMap as it stands; the mutation refuses changes from then on."""

    def __enter__(self) -> Any:
        """The mutation."""

    def __exit__(self, *exc: object) -> Any:
        """``finish()``."""


class TopicPlanLike(Protocol):
    """The classes ``apply_topics_delta`` reads and makes, checked once (ValueError otherwise)."""

    def __init__(self, delta_cls: Any, topic_cls: Any, partitions_cls: Any, empty_partitions: Any,
                 compact_min: int, compact: Any, error_cls: Any) -> None:
        """TopicDelta, TopicImage, TopicPartitions, the empty partitions, the compaction threshold,
        the compaction function and the error a name or id conflict raises."""


class TopicsMapKernel(Protocol):
    """``_topics_map``: the topics image's persistent maps and its delta's apply (caller:
    ``kraft_node.metadata.image.topic_map`` / ``topics``; contract in ``kraft_node/_pure/_topics_map.py``)."""

    DELTA_SLOTS: tuple[str, ...]
    """The slots of a topic delta the apply reads."""
    TOPIC_SLOTS: tuple[str, ...]
    """Every slot of a topic image."""
    PARTITIONS_SLOTS: tuple[str, ...]
    """Every slot of a topic's partitions."""

    @property
    def TopicMap(self) -> type[TopicMapLike]:
        """The persistent map."""

    @property
    def TopicMapMutation(self) -> type[TopicMapMutationLike]:
        """A map being changed."""

    @property
    def TopicPlan(self) -> type[TopicPlanLike]:
        """What the apply reads and makes."""

    def apply_topics_delta(self, changed: Any, deleted: Any, created: Any, by_id: Any, ids_by_name: Any,
                           plan: Any) -> tuple[Any, Any]:
        """A topics delta applied to an image's two maps (topic id -> topic, name -> topic id)."""


TWINS: dict[str, type] = {
    "_placement": PlacementKernel,
    "_bulk_objects": BulkObjectsKernel,
    "_change_replay": ChangeReplayKernel,
    "_image_bulk": ImageBulkKernel,
    "_metadata_encode": MetadataEncodeKernel,
    "_partition_fold": PartitionFoldKernel,
    "_topics_map": TopicsMapKernel,
    "_rpc_headers": RpcHeadersCodec,
    "_rpc_fetch": RpcFetchCodec,
}
