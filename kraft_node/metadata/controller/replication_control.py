"""Kafka's ReplicationControlManager: topics, partitions, and the reverse indexes that make
per-broker questions cheap.  This module is the state and its replay; the write side of
CreateTopics / CreatePartitions / DeleteTopics and the topic-id lookups is mixed in from
:mod:`.topic_creation` (the constructor's keyword arguments wire it).

Why this shape: every write the next issue adds (CreateTopics, AlterPartition, fencing,
elections, reassignment) reads the state built here and must see it exactly as Kafka lays
it out, because the records it emits are deltas against it (a PartitionChangeRecord says
only what changes).  So the state mirrors Kafka's ``ReplicationControlManager``:

* ``topics_by_name``: name -> topic id; ``topics_by_id`` (Kafka's ``topics``): topic id ->
  :class:`TopicControlInfo`, whose ``parts`` map partition id -> :class:`PartitionRegistration`
  (an immutable value: a change replaces it, so a registry snapshot keeps the old one);
* :class:`BrokersToIsrs`: broker -> topic id -> partitions where the broker is in the ISR,
  each flagged when the broker also leads it; leaderless partitions sit under broker
  ``NO_LEADER`` (-1), so "partitions led by B", "has leaderships(B)" and "partitions with
  no leader" walk one broker's entry instead of every partition;
* :class:`BrokersToElrs`: the same for eligible leader replicas (KIP-966), without flags;
* ``reassigning_topics`` (topic id -> partitions with adding/removing replicas),
  ``imbalanced_partitions`` (leader is not the preferred replica),
  ``directories_to_partitions`` (log directory id -> :class:`DirectoryPartitions`, the
  partitions placed in it, grouped by topic),
  ``topics_with_collision_chars`` (``foo.bar``/``foo_bar`` both normalise to ``foo_bar``).

Invariants (checked by tests/metadata/test_replay_managers.py after every fixture replay):

* ``topics_by_name`` and ``topics_by_id`` are inverse maps of each other;
* for every partition P of topic T: T:P is in ``BrokersToIsrs`` under each ISR member
  (flagged for the member that is P's leader) and under ``NO_LEADER`` (flagged) iff P has
  no leader, and nowhere else; likewise ``BrokersToElrs`` under each ELR member;
* T:P is in ``imbalanced_partitions`` iff its leader is not ``replicas[0]``, in
  ``reassigning_topics[T]`` iff it has adding or removing replicas, and under every
  non-reserved directory id of its ``directories``.

All of it lives in timeline collections of the controller's ``SnapshotRegistry``: reads take
``epoch=`` (a committed offset) and ``revert_to_snapshot`` undoes uncommitted replays.

Where this deliberately differs from Kafka (the index is derived state; Kafka's leaves
stale entries that its readers happen to tolerate, ours are exact):

* ClearElrRecord also removes the cleared members from ``BrokersToElrs`` (Kafka's
  ``removeTopicElrs`` replaces the partitions but leaves the index entries behind);
* RemoveTopicRecord drops a partition's directory entries even when its ISR is empty
  (Kafka does it inside the loop over ISR members), and an index entry whose broker is left
  with no topic is removed rather than kept empty.

Replaying many new partitions: ``replay_partitions(records)`` gives the state replaying each
record gives, but indexes a run of new partitions of one topic with one write per broker and
per directory (what a topic creation writes); the QuorumController may hand it a batch's
consecutive PartitionRecords.

``snapshot_records(epoch)`` writes the state as Kafka's image writers do (per topic: its
TopicRecord, then its partitions), at the record versions Kafka uses for the
metadata.version in force: PartitionRecord v0 before 3.7-IV2, v1 (directories) from 3.7-IV2,
v2 (ELR) from 4.0-IV1 (``MetadataVersion.partition_record_version``).  The version comes
from the ``metadata_version`` argument, else the constructor's ``metadata_version(epoch)``
provider, else the newest (v2).  Order is sorted
(topics by name, partitions by id) so every replica writes the same bytes.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Iterator, NamedTuple, Sequence

from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager
from kraft_node.metadata.controller.errors import ReplayError
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.controller.topic_creation import (
    KRaftClusterDescriber,
    TopicCreationMixin,
    has_collision_chars,
    unify_collision_chars,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap, TimelineHashSet, TimelineLong

if TYPE_CHECKING:
    from kraft_node.metadata.controller.cluster_control import ClusterControlManager
    from kraft_node.metadata.controller.features import FeatureControlManager

log = logging.getLogger("kraft.controller.replication")
_change_replay = load("_change_replay", package="kraft_node")
_ATTN_LEADER, _ATTN_PREFERRED, _ATTN_UNCLEAN, _ATTN_FROM_ELR, _ATTN_ELR = (
    _change_replay.ATTN_LEADER, _change_replay.ATTN_PREFERRED, _change_replay.ATTN_UNCLEAN,
    _change_replay.ATTN_FROM_ELR, _change_replay.ATTN_ELR)

#: A partition with no leader (Kafka's LeaderConstants.NO_LEADER).
NO_LEADER = -1
#: PartitionChangeRecord.Leader meaning "the leader does not change" (NO_LEADER_CHANGE).
NO_LEADER_CHANGE = -2

#: A metadata.version provider: the version (or its feature level) in force at a registry
#: epoch; None when not known yet.
MetadataVersionAt = Callable[[int], MetadataVersion | int | None]


def as_metadata_version(value: MetadataVersion | int | None) -> MetadataVersion | None:
    """A MetadataVersion from a provider's answer: a feature level is looked up (ValueError,
    Kafka's message, for a level there is none of)."""
    if value is None or isinstance(value, MetadataVersion):
        return value
    return MetadataVersion.from_feature_level(value)


class UnwritableMetadataError(Exception):
    """State that the requested metadata.version has no record for (Kafka's
    UnwritableMetadataException, which the default image-writer loss handler throws).
    Raised by ``snapshot_records`` rather than writing a snapshot that silently drops it."""

    def __init__(self, metadata_version: MetadataVersion, loss: str):
        super().__init__("Metadata has been lost because the following could not be represented "
                         f"in metadata.version {metadata_version}: {loss}")
        self.metadata_version = metadata_version
        self.loss = loss


# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------

_EIGHT_ZEROS = bytes(8)


class DirectoryId:
    """Kafka's reserved log-directory ids (KIP-858).  The first 100 ids (most significant
    64 bits zero, least significant below 100, signed) are reserved and never name a real
    directory, so no partition is indexed under them."""

    #: The replica's directory is not known yet: a pre-3.7 record, or a broker still migrating.
    MIGRATING = Uuid(0)
    #: The replica is not assigned to a directory yet.
    UNASSIGNED = Uuid(1)
    #: The replica's directory is offline.
    LOST = Uuid(2)

    @staticmethod
    def reserved(uuid: Uuid) -> bool:
        """Most significant 64 bits zero and the least significant, signed, below 100 (a
        random id fails the first byte compare)."""
        raw = uuid.bytes
        return raw[:8] == _EIGHT_ZEROS and int.from_bytes(raw[8:], "big", signed=True) < 100

    @staticmethod
    def migrating_tuple(n: int) -> tuple[Uuid, ...]:
        return (DirectoryId.MIGRATING,) * n


class LeaderRecoveryState(enum.IntEnum):
    """Whether the leader came from an unclean election and is still recovering (KIP-704)."""
    RECOVERED = 0
    RECOVERING = 1

    @classmethod
    def of(cls, value: int) -> "LeaderRecoveryState":
        """The state for a record's byte; Kafka's error for any other value."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"Value {value} is not a valid leader recovery state") from None

    def change_to(self, value: int) -> "LeaderRecoveryState":
        """Apply a PartitionChangeRecord's byte: ``NO_CHANGE`` (-1) keeps this state."""
        return self if value == LEADER_RECOVERY_NO_CHANGE else LeaderRecoveryState.of(value)


#: PartitionChangeRecord.LeaderRecoveryState meaning "unchanged".
LEADER_RECOVERY_NO_CHANGE = -1
_RECOVERY_STATES = {s.value: s for s in LeaderRecoveryState}
_new_object = object.__new__
_set = object.__setattr__


class TopicIdPartition(NamedTuple):
    """A partition named by topic id (what the reverse indexes hold)."""
    topic_id: Uuid
    partition_id: int

    def __str__(self) -> str:
        return f"{self.topic_id}:{self.partition_id}"


class PartitionReplayError(ReplayError):
    """A record of :meth:`ReplicationControlManager.replay_partitions` that cannot be applied:
    ``index`` is its position in the records given (the ones before it were applied), so a
    caller can name its offset."""

    def __init__(self, message: str, index: int):
        super().__init__(message)
        self.index = index


class InvalidReplicaDirectoriesError(ValueError):
    """A record whose directories do not pair up with its replicas (Kafka's
    InvalidReplicaDirectoriesException)."""

    def __init__(self, record: Any):
        super().__init__(f"The lengths for replicas and directories do not match: {record!r}")


def _fmt(values: Iterable[Any]) -> str:
    """Java's ``Arrays.toString``: ``[1, 2]``, Uuids in their base64 form."""
    return "[" + ", ".join(str(v) for v in values) + "]"


def _directories_or_migrating(directories: tuple[Uuid, ...], n: int) -> tuple[Uuid, ...]:
    """Kafka's defaultToMigrating: no directories, or only MIGRATING ones, become ``n``
    MIGRATING entries, so a v0 record and a v1 record of a migrating broker compare equal."""
    if directories and directories[0] != DirectoryId.MIGRATING:
        return directories  # the common case, decided by one comparison
    if all(d == DirectoryId.MIGRATING for d in directories):
        return DirectoryId.migrating_tuple(n)
    return directories


@dataclass(frozen=True, slots=True)
class PartitionRegistration:
    """One partition's replication state (Kafka's PartitionRegistration): an immutable value.

    Invariants: ``directories`` has one entry per replica (MIGRATING when unknown);
    ``elr``/``last_known_elr`` are empty before ELR; ``partition_epoch`` grows by one with
    every PartitionChangeRecord, ``leader_epoch`` with every one that names a leader.
    Equality compares every field (a PartitionRecord equal to the current state is a no-op).
    """
    replicas: tuple[int, ...]
    directories: tuple[Uuid, ...]
    isr: tuple[int, ...]
    removing_replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    leader: int
    leader_recovery_state: LeaderRecoveryState
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.directories and len(self.directories) != len(self.replicas):
            raise ValueError("The lengths for replicas and directories do not match.")

    @classmethod
    def from_record(cls, record: Any) -> "PartitionRegistration":
        """The registration a PartitionRecord (any version) describes (ValueError for one
        whose directories do not pair up with its replicas, or an unknown recovery state).

        Built without the dataclass ``__init__`` (the checks it would run are made here
        first): replaying 100k new partitions is a creation benchmark's hot loop."""
        replicas = tuple(record.replicas)
        directories = tuple(record.directories or ())
        if directories and len(directories) != len(replicas):
            raise InvalidReplicaDirectoriesError(record)
        lrs = _RECOVERY_STATES.get(record.leader_recovery_state)
        if lrs is None:
            lrs = LeaderRecoveryState.of(record.leader_recovery_state)  # raises Kafka's ValueError
        elr = record.eligible_leader_replicas
        last_known_elr = record.last_known_elr
        new = _new_object(cls)
        _set(new, "replicas", replicas)
        _set(new, "directories", _directories_or_migrating(directories, len(replicas)))
        _set(new, "isr", tuple(record.isr))
        _set(new, "removing_replicas", tuple(record.removing_replicas))
        _set(new, "adding_replicas", tuple(record.adding_replicas))
        _set(new, "leader", record.leader)
        _set(new, "leader_recovery_state", lrs)
        _set(new, "leader_epoch", record.leader_epoch)
        _set(new, "partition_epoch", record.partition_epoch)
        _set(new, "elr", tuple(elr) if elr else ())
        _set(new, "last_known_elr", tuple(last_known_elr) if last_known_elr else ())
        return new

    def merge(self, change: Any) -> "PartitionRegistration":
        """This registration with a PartitionChangeRecord applied.

        Unset (null) fields keep their value; a leader of ``NO_LEADER_CHANGE`` keeps the
        leader and its epoch, any other leader (``NO_LEADER`` included) replaces it and bumps
        the leader epoch; the partition epoch always bumps.

        A change of the ISR and leader only (a broker lifecycle change's record, replayed by
        every controller and every node's loader) is merged without the dataclass checks,
        which only the other fields could fail; :meth:`merge_general` is the one way for all.
        """
        if _simple_change(change):
            return _merge_isr_leader(self, change)
        return self.merge_general(change)

    def merge_general(self, change: Any) -> "PartitionRegistration":
        """:meth:`merge` through the dataclass constructor, for any change."""
        replicas = self.replicas if change.replicas is None else tuple(change.replicas)
        if change.directories is None:
            directories = self.directories
        else:
            directories = tuple(change.directories)
            if change.replicas is not None and directories and len(directories) != len(change.replicas):
                raise InvalidReplicaDirectoriesError(change)
        if change.leader == NO_LEADER_CHANGE:
            leader, leader_epoch = self.leader, self.leader_epoch
        else:
            leader, leader_epoch = change.leader, self.leader_epoch + 1
        return PartitionRegistration(
            replicas=replicas,
            directories=_directories_or_migrating(directories, len(replicas)),
            isr=self.isr if change.isr is None else tuple(change.isr),
            removing_replicas=(self.removing_replicas if change.removing_replicas is None
                               else tuple(change.removing_replicas)),
            adding_replicas=self.adding_replicas if change.adding_replicas is None else tuple(change.adding_replicas),
            leader=leader,
            leader_recovery_state=self.leader_recovery_state.change_to(change.leader_recovery_state),
            leader_epoch=leader_epoch,
            partition_epoch=self.partition_epoch + 1,
            elr=self.elr if change.eligible_leader_replicas is None else tuple(change.eligible_leader_replicas),
            last_known_elr=self.last_known_elr if change.last_known_elr is None else tuple(change.last_known_elr),
        )

    def to_record(self, topic_id: Uuid, partition_id: int,
                  metadata_version: MetadataVersion | None = None) -> ApiMessageAndVersion:
        """The PartitionRecord that recreates this registration, as Kafka's image writer
        builds it for ``metadata_version`` (None: the newest): ELR fields only from 4.0-IV1
        and only when non-empty (they are tagged), directories only from 3.7-IV2.  Real
        directories below 3.7-IV2 cannot be written: :class:`UnwritableMetadataError`."""
        version = 2 if metadata_version is None else metadata_version.partition_record_version()
        fields: dict[str, Any] = dict(
            partition_id=partition_id, topic_id=topic_id, replicas=list(self.replicas), isr=list(self.isr),
            removing_replicas=list(self.removing_replicas), adding_replicas=list(self.adding_replicas),
            leader=self.leader, leader_recovery_state=int(self.leader_recovery_state),
            leader_epoch=self.leader_epoch, partition_epoch=self.partition_epoch)
        if version >= 2:
            if self.elr:
                fields["eligible_leader_replicas"] = list(self.elr)
            if self.last_known_elr:
                fields["last_known_elr"] = list(self.last_known_elr)
        if version >= 1:
            fields["directories"] = list(self.directories)
        elif any(d != DirectoryId.MIGRATING for d in self.directories):
            assert metadata_version is not None
            raise UnwritableMetadataError(metadata_version, "the directory assignment state of one or more replicas")
        return ApiMessageAndVersion(m.PartitionRecord(**fields), version)

    # -- questions the write side asks -------------------------------------------------
    @staticmethod
    def election_was_clean(new_leader: int, isr: Iterable[int]) -> bool:
        """A leader change is clean when there is no new leader or it was in the ISR."""
        return new_leader == NO_LEADER or new_leader in isr

    @property
    def has_leader(self) -> bool:
        return self.leader != NO_LEADER

    @property
    def preferred_replica(self) -> int:
        return self.replicas[0] if self.replicas else NO_LEADER

    @property
    def has_preferred_leader(self) -> bool:
        return self.leader == self.preferred_replica

    @property
    def is_reassigning(self) -> bool:
        """Kafka's isReassignmentInProgress: replicas are being added or removed."""
        return bool(self.removing_replicas or self.adding_replicas)

    def directory(self, replica: int) -> Uuid:
        """The log directory replica ``replica`` is placed in."""
        for r, d in zip(self.replicas, self.directories):
            if r == replica:
                return d
        raise ValueError(f"Replica {replica} is not assigned to this partition.")

    def has_same_assignment(self, other: "PartitionRegistration") -> bool:
        return (self.replicas, self.directories, self.adding_replicas, self.removing_replicas) == (
            other.replicas, other.directories, other.adding_replicas, other.removing_replicas)

    def diff(self, prev: "PartitionRegistration") -> str:
        """What changed from ``prev``, in Kafka's wording (for the replay log)."""
        parts = []
        for label, attr in (("replicas", "replicas"), ("directories", "directories"), ("isr", "isr"),
                            ("removingReplicas", "removing_replicas"), ("addingReplicas", "adding_replicas")):
            if getattr(self, attr) != getattr(prev, attr):
                parts.append(f"{label}: {_fmt(getattr(prev, attr))} -> {_fmt(getattr(self, attr))}")
        if self.leader != prev.leader:
            parts.append(f"leader: {prev.leader} -> {self.leader}")
        if self.leader_recovery_state != prev.leader_recovery_state:
            parts.append(f"leaderRecoveryState: {prev.leader_recovery_state.name} -> {self.leader_recovery_state.name}")
        if self.leader_epoch != prev.leader_epoch:
            parts.append(f"leaderEpoch: {prev.leader_epoch} -> {self.leader_epoch}")
        if self.elr != prev.elr:
            parts.append(f"elr: {_fmt(prev.elr)} -> {_fmt(self.elr)}")
        if self.last_known_elr != prev.last_known_elr:
            parts.append(f"lastKnownElr: {_fmt(prev.last_known_elr)} -> {_fmt(self.last_known_elr)}")
        if self.partition_epoch != prev.partition_epoch:
            parts.append(f"partitionEpoch: {prev.partition_epoch} -> {self.partition_epoch}")
        return ", ".join(parts)

    def __str__(self) -> str:
        return (f"PartitionRegistration(replicas={_fmt(self.replicas)}, directories={_fmt(self.directories)}, "
                f"isr={_fmt(self.isr)}, removingReplicas={_fmt(self.removing_replicas)}, "
                f"addingReplicas={_fmt(self.adding_replicas)}, elr={_fmt(self.elr)}, "
                f"lastKnownElr={_fmt(self.last_known_elr)}, leader={self.leader}, "
                f"leaderRecoveryState={self.leader_recovery_state.name}, leaderEpoch={self.leader_epoch}, "
                f"partitionEpoch={self.partition_epoch})")


def _simple_change(record: Any) -> bool:
    """Whether a PartitionChangeRecord changes at most the ISR and the leader (what a broker
    lifecycle change writes): replicas, directories, reassignment, ELR and recovery state
    unchanged."""
    return (record.replicas is None and record.directories is None and record.removing_replicas is None
            and record.adding_replicas is None and record.eligible_leader_replicas is None
            and record.last_known_elr is None and record.leader_recovery_state == LEADER_RECOVERY_NO_CHANGE)


def _merge_isr_leader(prev: PartitionRegistration, change: Any) -> PartitionRegistration:
    """``prev.merge(change)`` for a :func:`_simple_change` record, without the dataclass
    ``__init__`` (the fields are ``prev``'s, checked when it was made, but the ISR, leader and
    epochs)."""
    new = _new_object(PartitionRegistration)
    _set(new, "replicas", prev.replicas)
    _set(new, "directories", _directories_or_migrating(prev.directories, len(prev.replicas)))
    _set(new, "isr", prev.isr if change.isr is None else tuple(change.isr))
    _set(new, "removing_replicas", prev.removing_replicas)
    _set(new, "adding_replicas", prev.adding_replicas)
    if change.leader == NO_LEADER_CHANGE:
        _set(new, "leader", prev.leader)
        _set(new, "leader_epoch", prev.leader_epoch)
    else:
        _set(new, "leader", change.leader)
        _set(new, "leader_epoch", prev.leader_epoch + 1)
    _set(new, "leader_recovery_state", prev.leader_recovery_state)
    _set(new, "partition_epoch", prev.partition_epoch + 1)
    _set(new, "elr", prev.elr)
    _set(new, "last_known_elr", prev.last_known_elr)
    return new


#: Finds, merges and indexes runs of ISR/leader-only PartitionChangeRecords (the
#: ``_change_replay`` kernel: native, or its pure-Python twin under KRAFT_NO_EXTENSIONS).
_RUN_SCANNER = _change_replay.RunScanner(PartitionRegistration, DirectoryId.MIGRATING,
                                         m.PartitionChangeRecord.API_KEY)


class TopicControlInfo:
    """A topic: its name, id and partitions (a timeline map of its own, so a topic's
    partitions can be read at a registry epoch like everything else).  The object is
    created by a TopicRecord and never renamed; a re-created topic is a new object."""

    __slots__ = ("name", "topic_id", "parts")

    def __init__(self, name: str, topic_id: Uuid, registry: Any):
        self.name = name
        self.topic_id = topic_id
        self.parts = TimelineHashMap(registry)

    def num_partitions(self, *, epoch: int = LATEST_EPOCH) -> int:
        return int(self.parts.size(epoch))

    def partitions(self, *, epoch: int = LATEST_EPOCH) -> dict[int, PartitionRegistration]:
        return dict(self.parts.to_dict(epoch))

    def __repr__(self) -> str:
        return f"TopicControlInfo({self.name!r}, {self.topic_id})"


# ---------------------------------------------------------------------------
# Reverse indexes
# ---------------------------------------------------------------------------

#: The flag an index entry carries when the broker leads the partition (partition ids are
#: never negative, so the bit Kafka uses as the int's sign bit is free).
LEADER_FLAG = 1 << 31
_REPLICA_MASK = LEADER_FLAG - 1


def _java_int(value: int) -> int:
    """``value`` as Java prints an int (the leader flag makes it negative)."""
    return value - (1 << 32) if value & LEADER_FLAG else value


#: index key -> a Uuid of the same id, for the indexes' readers (see :func:`topic_key`).
#: Any Uuid of the bytes will do (Uuids are equal by value), so the cache may be cleared at
#: any time; it is bounded so that a process creating many topics does not keep them all.
_TOPIC_UUIDS: dict[str, Uuid] = {}
_MAX_TOPIC_UUIDS = 1 << 18


def topic_key(topic_id: Uuid) -> str:
    """The key under which the reverse indexes (:class:`BrokersToIsrs`, :class:`BrokersToElrs`,
    :class:`DirectoryPartitions`) file a topic: its id's 16 bytes as a 16-character latin-1
    str (one character per byte, so the mapping is one to one), not the Uuid.  Why: a Uuid's
    ``__hash__`` is a Python call, and a 1M-partition snapshot load puts about 6M (broker or
    directory, topic) entries.  The timeline map's bulk put takes its C fast path only for
    exact ints and strs (a str's hash is cached in the object, so the bulk load's one key
    object per topic is hashed once); bytes keys took the single-op path, key by key
    (benchmarks/results/s18/controller_snapshot_load.md).  Readers get Uuids back
    (:func:`topic_uuid`)."""
    key: str = topic_id.bytes.decode("latin-1")
    return key


def topic_uuid(key: str) -> Uuid:
    """A Uuid for an index key (the one :func:`remember_topic_uuids` was given, else a new one)."""
    found = _TOPIC_UUIDS.get(key)
    if found is None:
        if len(_TOPIC_UUIDS) >= _MAX_TOPIC_UUIDS:
            _TOPIC_UUIDS.clear()
        found = _TOPIC_UUIDS[key] = Uuid(key.encode("latin-1"))
    return found


def remember_topic_uuids(keys: list[str], topic_ids: list[Uuid]) -> None:
    """Cache these (key, Uuid) pairs for :func:`topic_uuid` (the bulk load's topics)."""
    if len(_TOPIC_UUIDS) + len(keys) > _MAX_TOPIC_UUIDS:
        _TOPIC_UUIDS.clear()
    _TOPIC_UUIDS.update(zip(keys, topic_ids))


def _with_uuids(items: list[tuple[str, Any]]) -> list[tuple[Uuid, Any]]:
    """``(key, value)`` pairs of an index map as ``(topic Uuid, value)``: in C when every key
    is cached, else key by key."""
    try:
        return list(zip(map(_TOPIC_UUIDS.__getitem__, [k for k, _v in items]), [v for _k, v in items]))
    except KeyError:
        return [(topic_uuid(k), v) for k, v in items]


class _BrokerIndex:
    """broker id -> topic -> tuple of index entries, as nested timeline maps (Kafka's
    ``TimelineHashMap<Integer, TimelineHashMap<Uuid, int[]>>``; the inner maps are keyed by
    :func:`topic_key`, the topic id's bytes, and every method takes and gives Uuids).  A broker
    with no entries left is removed, so the map's keys are exactly the brokers that hold
    something."""

    _what = "isrMembers"

    def __init__(self, registry: Any):
        self._registry = registry
        self._members = TimelineHashMap(registry)

    def _add(self, broker_id: int, topic_id: Uuid, entry: int) -> None:
        topic_map = self._members.get(broker_id)
        if topic_map is None:
            topic_map = TimelineHashMap(self._registry)
            self._members.put(broker_id, topic_map)
        key = topic_key(topic_id)
        topic_map.put(key, topic_map.get(key, ()) + (entry,))

    def add_entries(self, topic_id: Uuid, by_broker: dict[int, list[int]]) -> None:
        """Append each broker's new entries for ``topic_id`` (new partitions only: an entry
        already present would be doubled), one timeline write per broker."""
        members = self._members
        key = topic_key(topic_id)
        for broker_id, entries in by_broker.items():
            topic_map = members.get(broker_id)
            if topic_map is None:
                topic_map = TimelineHashMap(self._registry)
                members.put(broker_id, topic_map)
            topic_map.put(key, topic_map.get(key, ()) + tuple(entries))

    def _remove(self, broker_id: int, topic_id: Uuid, entry: int) -> None:
        topic_map = self._members.get(broker_id)
        if topic_map is None:
            raise ReplayError(f"Broker {broker_id} has no {self._what} entry, so we can't remove "
                              f"{topic_id}:{_java_int(entry)}")
        key = topic_key(topic_id)
        entries = topic_map.get(key)
        if entries is None:
            raise ReplayError(f"Broker {broker_id} has no entry in {self._what} for topic {topic_id}")
        try:
            i = entries.index(entry)  # entries are distinct; index and slices run in C
        except ValueError:
            raise ReplayError(f"Broker {broker_id} has no entry in {self._what} for {topic_id}:"
                              f"{_java_int(entry)}") from None
        rest = entries[:i] + entries[i + 1:]
        if rest:
            topic_map.put(key, rest)
        else:
            topic_map.remove(key)
            if topic_map.is_empty():
                self._members.remove(broker_id)

    def put_run_entries(self, topic_id: Uuid, finals: dict[int, tuple[int, ...]],
                        moved: Collection[int] = ()) -> None:
        """Write the ``finals`` and ``moved`` of a run (``_change_replay``'s ``RunScanner.scan``:
        each broker's entries for the topic once the run is applied, and the brokers whose entries
        of the topic empty and refill): one timeline write per broker (a broker
        left with no entries is removed, as :meth:`_remove` does; a broker in ``moved`` gets the
        topic at the end of its map, where the one-by-one replay's re-add puts it)."""
        members = self._members
        key = topic_key(topic_id)
        for broker_id, entries in finals.items():
            topic_map = members.get(broker_id)
            if broker_id in moved and topic_map is not None and topic_map.get(key) is not None:
                topic_map.remove(key)
            if entries:
                if topic_map is None:
                    topic_map = TimelineHashMap(self._registry)
                    members.put(broker_id, topic_map)
                topic_map.put(key, entries)
            elif topic_map is not None:
                topic_map.remove(key)
                if topic_map.is_empty():
                    members.remove(broker_id)

    def remove_topic_entry_for_broker(self, topic_id: Uuid, broker_id: int) -> None:
        """Forget ``broker_id``'s entries for a deleted topic."""
        topic_map = self._members.get(broker_id)
        if topic_map is not None:
            topic_map.remove(topic_key(topic_id))
            if topic_map.is_empty():
                self._members.remove(broker_id)

    def _iterate(self, broker_id: int, leaders_only: bool, epoch: int) -> Iterator[TopicIdPartition]:
        topic_map = self._members.get(broker_id, epoch=epoch)
        if topic_map is None:
            return
        # a list even at LATEST_EPOCH: the caller may replay while it walks the result
        for key, entries in list(topic_map.items(epoch)):
            topic_id = topic_uuid(key)
            for e in entries:
                if not leaders_only or e & LEADER_FLAG:
                    yield TopicIdPartition(topic_id, e & _REPLICA_MASK)

    def topic_entries(self, broker_id: int, topic_id: Uuid) -> tuple[int, ...]:
        """``broker_id``'s raw entries for one topic (empty if none), at the latest epoch: a
        zone's fencing reads them topic by topic for each of its brokers, so it never copies a
        whole broker's index."""
        topic_map = self._members.get(broker_id)
        return () if topic_map is None else tuple(topic_map.get(topic_key(topic_id), ()))

    def entries_by_topic(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> list[tuple[Uuid, tuple[int, ...]]]:
        """``(topic id, raw entries)`` of every topic ``broker_id`` has entries for: a copy
        taken in O(topics), not O(partitions).  It stays as of now however much is replayed
        later, because a replay replaces an entry tuple and never changes one (the broker
        lifecycle changes walk it across many events, see ``leadership.py``)."""
        topic_map = self._members.get(broker_id, epoch=epoch)
        return [] if topic_map is None else _with_uuids(list(topic_map.items(epoch)))

    def brokers(self, *, epoch: int = LATEST_EPOCH) -> list[int]:
        """The broker ids (NO_LEADER included) that have entries at ``epoch``."""
        return list(self._members.keys(epoch))

    def to_dict(self, *, epoch: int = LATEST_EPOCH) -> dict[int, dict[Uuid, frozenset[int]]]:
        """broker -> topic -> set of raw entries (partition id | LEADER_FLAG): for tests and
        diagnostics, order-free."""
        return {b: {topic_uuid(t): frozenset(es) for t, es in tm.items(epoch)}
                for b, tm in self._members.items(epoch)}


class BrokersToIsrs(_BrokerIndex):
    """Which partitions each broker is in the ISR of, and which it leads (Kafka's
    BrokersToIsrs).  A partition with no leader is also listed, flagged, under broker
    ``NO_LEADER``, which is how the controller finds the partitions an unfenced broker
    could lead without scanning every partition."""

    def update(self, topic_id: Uuid, partition_id: int, prev_isr: Iterable[int] | None,
               next_isr: Iterable[int] | None, prev_leader: int, next_leader: int) -> None:
        """Move ``topic_id:partition_id`` from its old (ISR, leader) to its new one.
        ``prev_isr`` None: the partition is new; ``next_isr`` None: it is going away."""
        prev = self._entries(partition_id, prev_isr, prev_leader)
        nxt = self._entries(partition_id, next_isr, next_leader)
        for broker_id, entry in prev.items():
            if nxt.get(broker_id) != entry:
                self._remove(broker_id, topic_id, entry)
        for broker_id, entry in nxt.items():
            if prev.get(broker_id) != entry:
                self._add(broker_id, topic_id, entry)

    @staticmethod
    def _entries(partition_id: int, isr: Iterable[int] | None, leader: int) -> dict[int, int]:
        if isr is None:
            return {}
        members = set(isr)
        if leader == NO_LEADER:
            members.add(NO_LEADER)
        return {b: partition_id | LEADER_FLAG if b == leader else partition_id for b in members}

    def partitions_with_broker_in_isr(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> Iterator[TopicIdPartition]:
        return self._iterate(broker_id, False, epoch)

    def partitions_led_by_broker(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> Iterator[TopicIdPartition]:
        return self._iterate(broker_id, True, epoch)

    def partitions_with_no_leader(self, *, epoch: int = LATEST_EPOCH) -> Iterator[TopicIdPartition]:
        return self._iterate(NO_LEADER, True, epoch)

    def has_leaderships(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> bool:
        return next(self._iterate(broker_id, True, epoch), None) is not None


class BrokersToElrs(_BrokerIndex):
    """Which partitions each broker is an eligible leader replica of (Kafka's BrokersToElrs);
    a broker is never in both a partition's ISR and its ELR."""

    _what = "elrMembers"

    def update(self, topic_id: Uuid, partition_id: int, prev_elr: Iterable[int] | None,
               next_elr: Iterable[int] | None) -> None:
        prev = set(prev_elr or ())
        nxt = set(next_elr or ())
        for broker_id in prev - nxt:
            self._remove(broker_id, topic_id, partition_id)
        for broker_id in nxt - prev:
            self._add(broker_id, topic_id, partition_id)

    def partitions_with_broker_in_elr(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> Iterator[TopicIdPartition]:
        return self._iterate(broker_id, False, epoch)


class DirectoryPartitions:
    """The partitions placed in one log directory (a value of ``directories_to_partitions``):
    topic (:func:`topic_key`) -> tuple of partition ids, as timeline state.  Kafka keeps a
    ``TimelineHashSet<TopicIdPartition>``; grouping by topic makes a creation cost one write per
    (directory, topic) instead of one per replica, and a topic deletion one per directory.
    Reads give the same set of :class:`TopicIdPartition` (``to_set``)."""

    __slots__ = ("_topics",)

    def __init__(self, registry: Any):
        self._topics = TimelineHashMap(registry)

    def add_many(self, topic_id: Uuid, partition_ids: Iterable[int]) -> None:
        """Add partitions of ``topic_id`` (ones already present are not added twice)."""
        key = topic_key(topic_id)
        current: tuple[int, ...] = self._topics.get(key, ())
        if current:
            present = set(current)
            new = tuple(p for p in partition_ids if p not in present)
        else:
            new = tuple(partition_ids)
        if new:
            self._topics.put(key, current + new)

    def add(self, tp: TopicIdPartition) -> None:
        self.add_many(tp.topic_id, (tp.partition_id,))

    def discard(self, tp: TopicIdPartition) -> None:
        key = topic_key(tp.topic_id)
        current: tuple[int, ...] | None = self._topics.get(key)
        if current is None or tp.partition_id not in current:
            return
        rest = tuple(p for p in current if p != tp.partition_id)
        if rest:
            self._topics.put(key, rest)
        else:
            self._topics.remove(key)

    def remove_topic(self, topic_id: Uuid) -> None:
        self._topics.remove(topic_key(topic_id))

    def is_empty(self, epoch: int = LATEST_EPOCH) -> bool:
        return bool(self._topics.is_empty(epoch))

    def to_set(self, epoch: int = LATEST_EPOCH) -> set[TopicIdPartition]:
        return {TopicIdPartition(t, p) for t, ps in _with_uuids(list(self._topics.items(epoch))) for p in ps}

    def __repr__(self) -> str:
        return f"DirectoryPartitions({sorted(map(str, self.to_set()))})"


# ---------------------------------------------------------------------------
# The manager
# ---------------------------------------------------------------------------

class ReplicationControlManager(TopicCreationMixin):
    """Topics and partitions: the state and its replay (see the module doc), and the write
    side of CreateTopics / CreatePartitions / DeleteTopics (:mod:`.topic_creation`)."""

    RECORD_TYPES: tuple[type, ...] = (m.TopicRecord, m.PartitionRecord, m.PartitionChangeRecord,
                                      m.RemoveTopicRecord, m.ClearElrRecord)
    #: Kafka's ``MAX_ELECTIONS_PER_IMBALANCE``: the most leader elections one balancing run makes.
    MAX_ELECTIONS_PER_IMBALANCE = 1_000

    def __init__(self, snapshot_registry: Any, configuration_control: ConfigurationControlManager, *,
                 metadata_version: MetadataVersionAt | None = None,
                 cluster_control: "ClusterControlManager | None" = None,
                 feature_control: "FeatureControlManager | None" = None,
                 replica_placer: Any = None,
                 default_num_partitions: int = 1,
                 default_replication_factor: int = 1,
                 max_elections_per_imbalance: int = MAX_ELECTIONS_PER_IMBALANCE,
                 eligible_leader_replicas_enabled: Callable[[], bool] | None = None) -> None:
        """``configuration_control``: a deleted topic's configs go with it (Kafka's builder
        requires it too).  ``metadata_version``: epoch -> the metadata.version (or its level)
        in force there (e.g. ``lambda e: features.metadata_version_or_none(epoch=e)``), which picks
        ``snapshot_records``' record versions; without it, or where it gives None, the
        newest versions are written (``feature_control``'s, when given and no provider is).

        The write side needs ``cluster_control`` (brokers: placement, liveness, directories) and
        ``feature_control`` (the metadata.version records are written at); without them only
        replay and reads work, and a write raises RuntimeError saying so.
        ``replica_placer``: Kafka's ReplicaPlacer (``place(spec, cluster)``, optionally the
        columnar ``place_columns``); default a StripedReplicaPlacer over a randomly seeded Java
        Random, made on first use.  ``default_num_partitions`` / ``default_replication_factor``:
        Kafka's ``num.partitions`` / ``default.replication.factor`` (both 1 by default, as in
        Kafka's server config; Kafka's bare Builder says 3 for the latter -- the tests' context
        passes 3), used for -1 in CreateTopics.  ``eligible_leader_replicas_enabled``: whether
        ELR is on (default: ``feature_control.is_elr_enabled()``, Kafka 4's
        ``isElrFeatureEnabled``).  Kafka's CreateTopicPolicy is not supported: there is no
        argument for one (the server refuses ``create.topic.policy.class.name`` by name)."""
        if default_num_partitions <= 0:
            raise ValueError(f"default_num_partitions must be positive, not {default_num_partitions}")
        if default_replication_factor <= 0:
            raise ValueError(f"default_replication_factor must be positive, not {default_replication_factor}")
        self.registry = snapshot_registry
        self.configuration_control = configuration_control
        if metadata_version is None and feature_control is not None:
            fc = feature_control
            metadata_version = lambda e: fc.metadata_version_or_none(epoch=e)  # noqa: E731
        self._metadata_version = metadata_version
        self.cluster_control = cluster_control
        self.feature_control = feature_control
        self._replica_placer = replica_placer
        self.default_num_partitions = default_num_partitions
        self.default_replication_factor = default_replication_factor
        self.max_elections_per_imbalance = max_elections_per_imbalance
        self._elr_enabled = eligible_leader_replicas_enabled
        #: leader changes to a broker outside the previous ISR (Kafka's UncleanLeaderElectionsPerSec
        #: counts these), and to one from the previous ELR (ElectionFromEligibleLeaderReplicasPerSec):
        #: timeline counters, so the metric reads them at the committed offset
        self.unclean_leader_elections = TimelineLong(snapshot_registry)
        self.elections_from_elr = TimelineLong(snapshot_registry)
        #: brokers the partition-change side is still fencing or shutting down in bounded
        #: results (PartitionChangeOps' soft state): no new ISR takes them meanwhile
        self.broker_excluded: Callable[[int], bool] | None = None
        self.cluster_describer = (None if cluster_control is None or feature_control is None else
                                  KRaftClusterDescriber(cluster_control, feature_control.metadata_version))
        self.topics_by_name = TimelineHashMap(snapshot_registry)
        #: normalised name -> TimelineHashSet of the topic names that normalise to it
        self.topics_with_collision_chars = TimelineHashMap(snapshot_registry)
        self.topics_by_id = TimelineHashMap(snapshot_registry)
        self.brokers_to_isrs = BrokersToIsrs(snapshot_registry)
        self.brokers_to_elrs = BrokersToElrs(snapshot_registry)
        #: topic id -> tuple of partition ids being reassigned
        self.reassigning_topics = TimelineHashMap(snapshot_registry)
        self.imbalanced_partitions = TimelineHashSet(snapshot_registry)
        #: directory id -> DirectoryPartitions (the partitions with a replica there)
        self.directories_to_partitions = TimelineHashMap(snapshot_registry)
        #: ISR/leader-only PartitionChangeRecords take the short replay (``_replay_simple_change``,
        #: ``replay_partition_changes``); False: every record goes through ``merge`` and the
        #: general index upkeep (the reference the tests compare the short paths with)
        self.fast_simple_changes = True
        self._replayers: dict[int, Callable[[Any], None]] = {
            m.TopicRecord.API_KEY: self._replay_topic,
            m.PartitionRecord.API_KEY: self._replay_partition,
            m.PartitionChangeRecord.API_KEY: self._replay_partition_change,
            m.RemoveTopicRecord.API_KEY: self._replay_remove_topic,
            m.ClearElrRecord.API_KEY: self._replay_clear_elr,
        }

    def is_elr_enabled(self) -> bool:
        """Whether eligible leader replicas (KIP-966) are maintained now."""
        if self._elr_enabled is not None:
            return self._elr_enabled()
        return self.feature_control is not None and self.feature_control.is_elr_enabled()

    # ------------------------------------------------------------------ replay
    def replay(self, message: Any, offset: int) -> None:
        """Apply one of ``RECORD_TYPES``.  A record that does not fit the state (unknown
        topic or partition, duplicate topic, impossible content) raises :class:`ReplayError`
        with Kafka's message, and is refused before anything is changed."""
        fn = self._replayers.get(message.API_KEY)
        if fn is None:
            raise ReplayError(f"ReplicationControlManager cannot replay {type(message).__name__}")
        try:
            fn(message)
        except ValueError as exc:  # a record with impossible content (directories, recovery state)
            raise ReplayError(str(exc)) from exc

    def _replay_topic(self, record: Any) -> None:
        existing = self.topics_by_name.get(record.name)
        if existing is not None:
            # A name is only reused after a RemoveTopicRecord.
            if existing == record.topic_id:
                raise ReplayError(f"Found duplicate TopicRecord for {record.name} with topic ID {record.topic_id}")
            raise ReplayError(f"Found duplicate TopicRecord for {record.name} with a different ID than before. "
                              f"Previous ID was {existing} and new ID is {record.topic_id}")
        other = self.topics_by_id.get(record.topic_id)
        if other is not None:
            # Kafka's replay would replace the other topic's partitions under the same id and
            # leave two names pointing at it; a corrupt log is named instead (stricter than Kafka)
            raise ReplayError(f"Found TopicRecord for {record.name} with topic ID {record.topic_id}, which is "
                              f"already the ID of topic {other.name}")
        self.topics_by_name.put(record.name, record.topic_id)
        if has_collision_chars(record.name):
            normalized = unify_collision_chars(record.name)
            names = self.topics_with_collision_chars.get(normalized)
            if names is None:
                names = TimelineHashSet(self.registry)
                self.topics_with_collision_chars.put(normalized, names)
            names.add(record.name)
        self.topics_by_id.put(record.topic_id, TopicControlInfo(record.name, record.topic_id, self.registry))
        log.info("Replayed TopicRecord for topic %s with topic ID %s.", record.name, record.topic_id)

    def _topic_for_partition(self, record: Any) -> TopicControlInfo:
        topic: TopicControlInfo | None = self.topics_by_id.get(record.topic_id)
        if topic is None:
            raise ReplayError(f"Tried to create partition {record.topic_id}:{record.partition_id}, "
                              "but no topic with that ID was found.")
        return topic

    def _replay_partition(self, record: Any) -> None:
        topic = self._topic_for_partition(record)
        new = PartitionRegistration.from_record(record)
        pid = record.partition_id
        prev = topic.parts.get(pid)
        if prev is None:
            if log.isEnabledFor(logging.INFO):
                log.info("Replayed PartitionRecord for new partition %s-%d with topic ID %s and %s.",
                         topic.name, pid, record.topic_id, new)
            self._add_new_partitions(topic, [pid], [new])
            return
        if new != prev:
            description = f"{topic.name}-{pid} with topic ID {record.topic_id}"
            log.info("Replayed PartitionRecord for existing partition %s and %s.", description, new)
            self._log_change(description, prev, new)
            self._put_partition(topic, pid, prev, new)
        self._track_preferred_leader(TopicIdPartition(topic.topic_id, pid), new)

    def replay_partitions(self, records: Sequence[Any]) -> None:
        """Replay PartitionRecords (each message as :meth:`replay` takes it) in order, with
        the same resulting state as replaying them one by one, but a run of records that
        create new partitions of one topic costs one index write per broker and directory
        instead of one per replica (the path a topic creation's records take).  A record that
        cannot be applied raises :class:`PartitionReplayError` (a ReplayError naming the record's
        index in ``records``) after every record before it was applied, as the one-by-one
        replay would.  New partitions are logged once per run at INFO (the
        partitions at DEBUG), where the one-by-one replay logs each at INFO."""
        i, n = 0, len(records)
        try:
            while i < n:
                record = records[i]
                if record.API_KEY != m.PartitionRecord.API_KEY:
                    raise ReplayError(f"replay_partitions takes PartitionRecords, not {type(record).__name__}")
                topic = self._topic_for_partition(record)
                parts = topic.parts
                pids: list[int] = []
                regs: list[PartitionRegistration] = []
                seen: set[int] = set()
                topic_id = record.topic_id
                failure: BaseException | None = None
                key = m.PartitionRecord.API_KEY
                from_record = PartitionRegistration.from_record
                contains = parts.contains
                while i < n:
                    record = records[i]
                    pid = record.partition_id
                    rec_topic = record.topic_id
                    if (record.API_KEY != key or (rec_topic is not topic_id and rec_topic != topic_id)
                            or pid in seen or contains(pid)):
                        break
                    try:
                        regs.append(from_record(record))
                    except ValueError as exc:
                        failure = exc
                        break
                    pids.append(pid)
                    seen.add(pid)
                    i += 1
                if pids:
                    self._add_new_partitions(topic, pids, regs)
                    log.info("Replayed %d PartitionRecord(s) for new partitions of %s with topic ID %s.",
                             len(pids), topic.name, topic_id)
                    if log.isEnabledFor(logging.DEBUG):
                        for pid, reg in zip(pids, regs):
                            log.debug("New partition %s-%d: %s", topic.name, pid, reg)
                if failure is not None:
                    raise ReplayError(str(failure)) from failure
                if not pids:
                    self.replay(records[i], -1)  # an existing partition, or a repeat in this run
                    i += 1
        except ReplayError as exc:
            raise PartitionReplayError(str(exc), i) from exc

    def _add_new_partitions(self, topic: TopicControlInfo, pids: list[int], regs: list[PartitionRegistration]) -> None:
        """Put partitions that do not exist yet, and index them: what ``_put_partition`` does
        for a partition without a previous registration, one index write per broker /
        directory for the lot.  (Directories are grouped by object first -- a creation's
        records share one Uuid object per directory -- so Uuid hashing, a Python-level call,
        runs once per group rather than once per replica.)"""
        topic_id = topic.topic_id
        topic.parts.put_many(pids, regs)
        isr_entries: dict[int, list[int]] = {}
        elr_entries: dict[int, list[int]] = {}
        by_dir: dict[int, tuple[Uuid, list[int]]] = {}
        reassigning: list[int] = []
        imbalanced: list[TopicIdPartition] = []
        for pid, reg in zip(pids, regs):
            leader = reg.leader
            isr = reg.isr
            if len(set(isr)) != len(isr):  # a repeated member is indexed once
                isr = tuple(dict.fromkeys(isr))
            for b in isr:
                entries = isr_entries.get(b)
                if entries is None:
                    entries = isr_entries[b] = []
                entries.append(pid | LEADER_FLAG if b == leader else pid)
            if leader == NO_LEADER:
                isr_entries.setdefault(NO_LEADER, []).append(pid | LEADER_FLAG)
            if reg.elr:
                for b in dict.fromkeys(reg.elr):
                    elr_entries.setdefault(b, []).append(pid)
                if set(reg.isr) & set(reg.elr):
                    log.error("%s-%d has overlapping ISR=%s and ELR=%s", topic.name, pid, _fmt(reg.isr),
                              _fmt(reg.elr))
            for d in reg.directories:
                group = by_dir.get(id(d))
                if group is None:
                    by_dir[id(d)] = (d, [pid])
                elif group[1][-1] != pid:  # a directory named twice by one partition counts once
                    group[1].append(pid)
            if reg.removing_replicas or reg.adding_replicas:
                reassigning.append(pid)
            if leader != (reg.replicas[0] if reg.replicas else NO_LEADER):
                imbalanced.append(TopicIdPartition(topic_id, pid))
        self.brokers_to_isrs.add_entries(topic_id, isr_entries)
        if elr_entries:
            self.brokers_to_elrs.add_entries(topic_id, elr_entries)
        registry = self.registry
        index = self.directories_to_partitions
        merged: dict[Uuid, list[int]] = {}  # equal directories held by different objects
        for d, dir_pids in by_dir.values():
            have = merged.get(d)
            if have is None:
                merged[d] = dir_pids
            else:  # one partition may name it through two objects: count it once
                merged[d] = list(dict.fromkeys(have + dir_pids))
        for d, dir_pids in merged.items():
            if DirectoryId.reserved(d):
                continue
            members = index.get(d)
            if members is None:
                members = DirectoryPartitions(registry)
                index.put(d, members)
            members.add_many(topic_id, dir_pids)
        if reassigning:
            self.reassigning_topics.put(topic_id, self.reassigning_topics.get(topic_id, ()) + tuple(reassigning))
        if imbalanced:
            self.imbalanced_partitions.add_many(imbalanced)

    def _replay_partition_change(self, record: Any) -> None:
        topic = self._topic_for_partition(record)
        pid = record.partition_id
        prev = topic.parts.get(pid)
        if prev is None:
            raise ReplayError(f"Tried to create partition {record.topic_id}:{pid}, "
                              "but no partition with that id was found.")
        if self.fast_simple_changes and _simple_change(record):
            self._replay_simple_change(topic, pid, prev, record)
            return
        new = prev.merge(record) if self.fast_simple_changes else prev.merge_general(record)
        self._put_partition(topic, pid, prev, new)
        if new.leader != prev.leader:
            self._count_election(prev, new)
        if not PartitionRegistration.election_was_clean(new.leader, prev.isr) or log.isEnabledFor(logging.DEBUG):
            # described only when logged: formatting the topic id cost ~5% of this replay
            self._log_change(f"{topic.name}-{pid} with topic ID {record.topic_id}", prev, new)
        self._track_preferred_leader(TopicIdPartition(topic.topic_id, pid), new)
        if record.removing_replicas is not None or record.adding_replicas is not None:
            log.info("Replayed partition assignment change %r for topic %s", record, topic.name)
        else:
            log.debug("Replayed partition change %r for topic %s", record, topic.name)

    def replay_partition_changes(self, records: Sequence[Any]) -> None:
        """Replay PartitionChangeRecords in order, with the state replaying them one by one
        would leave (the index tuples in the same order included), for the controller's
        ``register_bulk_replayer``.

        Why: a broker lifecycle change writes runs of records that only change a partition's
        ISR and leader (``lifecycle_bulk.py``), one per partition of a topic in a row.  One by
        one, each removes and appends its broker's index entry with a tuple rebuild and a
        timeline write per broker (~15 us a record on every controller).  Here a run of such
        records of one topic (distinct partitions) is merged first, then each (broker, topic)
        index tuple is rebuilt and written once; the run's scan, merge and index arithmetic are
        the ``_change_replay`` kernel's (native: ~6 -> ~2 us a record, session 21).  Records of
        any other shape (replicas, directories, reassignment, ELR, recovery state) and runs that
        would leave a broker with no entries at all before refilling them (one by one the
        broker leaves the index and comes back at its end) go one by one; a broker whose entries
        of the topic empty and refill while it keeps other topics gets the topic at the end of
        its map, as one by one.

        A record that cannot be applied raises :class:`PartitionReplayError` (its index in
        ``records``) after every record before it was applied, as the one-by-one replay would."""
        i, n = 0, len(records)
        key = m.PartitionChangeRecord.API_KEY
        try:
            while i < n:
                record = records[i]
                if record.API_KEY != key:
                    raise ReplayError(f"replay_partition_changes takes PartitionChangeRecords, "
                                      f"not {type(record).__name__}")
                done = (self._replay_simple_change_run(records, i)
                        if self.fast_simple_changes and _simple_change(record) else 0)
                if done:
                    i += done
                    continue
                self.replay(record, -1)
                i += 1
        except PartitionReplayError:
            raise
        except ReplayError as exc:
            raise PartitionReplayError(str(exc), i) from exc

    def _replay_simple_change_run(self, records: Sequence[Any], start: int) -> int:
        """Replay the run of ISR/leader-only changes of one topic from ``records[start]``:
        the number replayed, 0 (nothing done) when the run does not qualify or a record of it
        does not fit the state (the one-by-one replay then reports it).

        The run is found, merged and its index entries worked out by the ``_change_replay``
        kernel (native, or its pure twin: see ``kraft_node/_pure/_change_replay.py`` for what a
        run is and what it gives back), without changing anything; then the registrations
        are written in one ``put_many``, the few records that change the leader (or meet an
        ELR, or an unclean election) get the elections count, imbalanced set and log here, and
        each touched broker's index tuple is written once."""
        first = records[start]
        topic_id = first.topic_id
        if start + 1 >= len(records) or getattr(records[start + 1], "topic_id", None) != topic_id:
            return 0  # a run of one (a zone's fencing: one partition per topic in a row) goes one by one
        topic: TopicControlInfo | None = self.topics_by_id.get(topic_id)
        if topic is None:
            return 0
        parts = topic.parts
        index = self.brokers_to_isrs
        scanned = _RUN_SCANNER.scan(records, start, topic_id, parts, index._members, topic_key(topic_id))
        if scanned is None:
            return 0
        end, pids, prevs, news, finals, moved, attention = scanned
        j: int = end
        if finals is None:
            # a record does not fit the index, or the run empties a broker's index entirely
            # before refilling it: the run one by one (which names a failing record)
            for k in range(start, j):
                try:
                    self.replay(records[k], -1)
                except ReplayError as exc:
                    raise PartitionReplayError(str(exc), k) from exc
            return j - start
        # every record fits: apply (nothing above changed state)
        parts.put_many(pids, news)
        imbalanced = self.imbalanced_partitions
        debug = log.isEnabledFor(logging.DEBUG)
        if debug:  # every record described: the plain way
            for k in range(len(pids)):
                self._apply_simple_change_effects(topic, pids[k], prevs[k], news[k], True)
        else:
            # the kernel's flags say what the few records that need it need (see its module doc)
            for k, flags in attention:
                pid = pids[k]
                if flags & _ATTN_ELR:
                    new = news[k]
                    if len(set(new.isr) | set(new.elr)) != len(new.isr) + len(new.elr):
                        log.error("%s-%d has overlapping ISR=%s and ELR=%s", topic.name, pid, _fmt(new.isr),
                                  _fmt(new.elr))
                if flags & _ATTN_LEADER:
                    if flags & _ATTN_UNCLEAN:
                        self.unclean_leader_elections.increment()
                    if flags & _ATTN_FROM_ELR:
                        self.elections_from_elr.increment()
                    # the replicas are unchanged, so whether the partition is led by its preferred
                    # replica (the imbalanced set's rule) can change only with the leader
                    if flags & _ATTN_PREFERRED:
                        imbalanced.discard(TopicIdPartition(topic_id, pid))
                    else:
                        imbalanced.add(TopicIdPartition(topic_id, pid))
                if flags & _ATTN_UNCLEAN:
                    self._log_change(f"{topic.name}-{pid} with topic ID {topic_id}", prevs[k], news[k])
        index.put_run_entries(topic_id, finals, moved)
        if debug:
            for k in range(start, j):
                log.debug("Replayed partition change %r for topic %s", records[k], topic.name)
        return j - start

    def _apply_simple_change_effects(self, topic: TopicControlInfo, pid: int, prev: PartitionRegistration,
                                     new: PartitionRegistration, debug: bool) -> None:
        """What a bulk-replayed ISR/leader-only change does besides its registration and ISR
        index: the ISR/ELR overlap check, the election counters, the imbalanced set, the log."""
        if new.elr and len(set(new.isr) | set(new.elr)) != len(new.isr) + len(new.elr):
            log.error("%s-%d has overlapping ISR=%s and ELR=%s", topic.name, pid, _fmt(new.isr), _fmt(new.elr))
        if new.leader != prev.leader:
            self._count_election(prev, new)
            self._track_preferred_leader(TopicIdPartition(topic.topic_id, pid), new)
        if debug or not PartitionRegistration.election_was_clean(new.leader, prev.isr):
            self._log_change(f"{topic.name}-{pid} with topic ID {topic.topic_id}", prev, new)

    def _replay_simple_change(self, topic: TopicControlInfo, pid: int, prev: PartitionRegistration,
                              record: Any) -> None:
        """What ``_replay_partition_change`` does for a record that changes at most the ISR and
        leader (a zone's fencing: one partition per topic in a row, so no bulk run): the ELR,
        directory and reassignment indexes cannot change, and whether the partition is led by
        its preferred replica only with the leader; the merge skips the dataclass checks."""
        new = _merge_isr_leader(prev, record)
        topic.parts.put(pid, new)
        if new.elr and len(set(new.isr) | set(new.elr)) != len(new.isr) + len(new.elr):
            log.error("%s-%d has overlapping ISR=%s and ELR=%s", topic.name, pid, _fmt(new.isr), _fmt(new.elr))
        self.brokers_to_isrs.update(topic.topic_id, pid, prev.isr, new.isr, prev.leader, new.leader)
        if new.leader != prev.leader:
            self._count_election(prev, new)
            self._track_preferred_leader(TopicIdPartition(topic.topic_id, pid), new)
        if not PartitionRegistration.election_was_clean(new.leader, prev.isr) or log.isEnabledFor(logging.DEBUG):
            self._log_change(f"{topic.name}-{pid} with topic ID {record.topic_id}", prev, new)
            log.debug("Replayed partition change %r for topic %s", record, topic.name)

    def _count_election(self, prev: PartitionRegistration, new: PartitionRegistration) -> None:
        """Kafka's ControllerMetricsChanges.handlePartitionChange: a new leader not in the
        previous ISR is an unclean election; one from the previous ELR, an ELR election."""
        if not PartitionRegistration.election_was_clean(new.leader, prev.isr):
            self.unclean_leader_elections.increment()
        if new.leader >= 0 and new.leader in prev.elr and new.leader not in prev.isr:
            self.elections_from_elr.increment()

    def partition_count(self, *, epoch: int = LATEST_EPOCH) -> int:
        """Partitions of every topic (Kafka's GlobalPartitionCount)."""
        return sum(t.num_partitions(epoch=epoch) for t in self.topics_by_id.values(epoch))

    def _replay_remove_topic(self, record: Any) -> None:
        topic = self.topics_by_id.get(record.topic_id)
        if topic is None:
            raise ReplayError(f"Can't find topic with ID {record.topic_id} to remove.")
        self.topics_by_id.remove(record.topic_id)
        self.topics_by_name.remove(topic.name)
        if has_collision_chars(topic.name):
            normalized = unify_collision_chars(topic.name)
            colliding = self.topics_with_collision_chars.get(normalized)
            if colliding is not None:
                colliding.remove(topic.name)
                if colliding.is_empty():
                    self.topics_with_collision_chars.remove(normalized)
        self.reassigning_topics.remove(record.topic_id)
        self.configuration_control.delete_topic_configs(topic.name)
        # Each index entry of the topic goes once (a broker / directory is named by many of its
        # partitions); the imbalanced set holds exactly the partitions not led by their first replica.
        isr_members: set[int] = {NO_LEADER}
        elr_members: set[int] = set()
        directories: set[Uuid] = set()
        for pid, part in topic.parts.items():
            isr_members.update(part.isr)
            elr_members.update(part.elr)
            directories.update(part.directories)
            if not part.has_preferred_leader:
                self.imbalanced_partitions.discard(TopicIdPartition(topic.topic_id, pid))
        for broker_id in isr_members:
            self.brokers_to_isrs.remove_topic_entry_for_broker(topic.topic_id, broker_id)
        for broker_id in elr_members:
            self.brokers_to_elrs.remove_topic_entry_for_broker(topic.topic_id, broker_id)
        for d in directories:
            parts = self.directories_to_partitions.get(d)
            if parts is not None:
                parts.remove_topic(topic.topic_id)
                if parts.is_empty():
                    self.directories_to_partitions.remove(d)
        log.info("Replayed RemoveTopicRecord for topic %s with ID %s.", topic.name, record.topic_id)

    def _replay_clear_elr(self, record: Any) -> None:
        """An empty topic name clears every topic's ELR, else the named topic's."""
        if not record.topic_name:
            removed = sum(self._clear_topic_elrs(t) for t in list(self.topics_by_id.values()))
            log.info("Removed ELRs from %d partitions in all topics.", removed)
            return
        topic_id = self.topics_by_name.get(record.topic_name)
        if topic_id is None:
            raise ReplayError(f"Unable to find a topic named {record.topic_name} in order to clear its ELRs.")
        topic = self.topics_by_id.get(topic_id)
        if topic is None:
            raise ReplayError(f"Unable to find a topic with ID {topic_id} in order to clear its ELRs.")
        removed = self._clear_topic_elrs(topic)
        log.info("Removed ELRs from %d partitions of topic %s.", removed, record.topic_name)

    def _clear_topic_elrs(self, topic: TopicControlInfo) -> int:
        """Empty the ELR and last known ELR of every partition of ``topic`` that has one, as
        a PartitionChangeRecord setting both to [] would (so the partition epoch bumps)."""
        cleared = 0
        for pid, part in list(topic.parts.items()):
            if part.elr or part.last_known_elr:
                new = part.merge(m.PartitionChangeRecord(topic_id=topic.topic_id, partition_id=pid,
                                                         eligible_leader_replicas=[], last_known_elr=[]))
                topic.parts.put(pid, new)
                self.brokers_to_elrs.update(topic.topic_id, pid, part.elr, new.elr)
                cleared += 1
        return cleared

    # -- the derived state, kept in step with every partition change --------------------
    def _put_partition(self, topic: TopicControlInfo, pid: int, prev: PartitionRegistration | None,
                       new: PartitionRegistration) -> None:
        tp = TopicIdPartition(topic.topic_id, pid)
        topic.parts.put(pid, new)
        if len(set(new.isr) | set(new.elr)) != len(new.isr) + len(new.elr):
            log.error("%s-%d has overlapping ISR=%s and ELR=%s", topic.name, pid, _fmt(new.isr), _fmt(new.elr))
        self.brokers_to_isrs.update(topic.topic_id, pid, None if prev is None else prev.isr, new.isr,
                                    NO_LEADER if prev is None else prev.leader, new.leader)
        self.brokers_to_elrs.update(topic.topic_id, pid, None if prev is None else prev.elr, new.elr)
        self._update_directories(tp, () if prev is None else prev.directories, new.directories)
        was = prev is not None and prev.is_reassigning
        if was != new.is_reassigning:
            parts = self.reassigning_topics.get(topic.topic_id, ())
            if new.is_reassigning:
                self.reassigning_topics.put(topic.topic_id, parts + (pid,))
            else:
                rest = tuple(p for p in parts if p != pid)
                if rest:
                    self.reassigning_topics.put(topic.topic_id, rest)
                else:
                    self.reassigning_topics.remove(topic.topic_id)

    def _update_directories(self, tp: TopicIdPartition, prev: Sequence[Uuid], new: Sequence[Uuid]) -> None:
        """Index ``tp`` under its real (non-reserved) directories only."""
        if prev == new:
            # the common partition change (ISR, leader) keeps the directories: nothing to
            # move, and the sets below were ~20% of its replay
            return
        prev_dirs = {d for d in prev if not DirectoryId.reserved(d)}
        new_dirs = {d for d in new if not DirectoryId.reserved(d)}
        for d in prev_dirs - new_dirs:
            parts = self.directories_to_partitions.get(d)
            if parts is not None:
                parts.discard(tp)
                if parts.is_empty():
                    self.directories_to_partitions.remove(d)
        for d in new_dirs - prev_dirs:
            parts = self.directories_to_partitions.get(d)
            if parts is None:
                parts = DirectoryPartitions(self.registry)
                self.directories_to_partitions.put(d, parts)
            parts.add(tp)

    def _track_preferred_leader(self, tp: TopicIdPartition, part: PartitionRegistration) -> None:
        if part.has_preferred_leader:
            self.imbalanced_partitions.discard(tp)
        else:
            self.imbalanced_partitions.add(tp)

    @staticmethod
    def _log_change(description: str, prev: PartitionRegistration, new: PartitionRegistration) -> None:
        if not PartitionRegistration.election_was_clean(new.leader, prev.isr):
            log.info("UNCLEAN partition change for %s: %s", description, new.diff(prev))
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("partition change for %s: %s", description, new.diff(prev))

    # ------------------------------------------------------------------ reads
    def topic_id(self, name: str, *, epoch: int = LATEST_EPOCH) -> Uuid | None:
        topic_id: Uuid | None = self.topics_by_name.get(name, epoch=epoch)
        return topic_id

    def topic(self, topic_id: Uuid, *, epoch: int = LATEST_EPOCH) -> TopicControlInfo | None:
        topic: TopicControlInfo | None = self.topics_by_id.get(topic_id, epoch=epoch)
        return topic

    def topic_name(self, topic_id: Uuid, *, epoch: int = LATEST_EPOCH) -> str | None:
        topic = self.topics_by_id.get(topic_id, epoch=epoch)
        return None if topic is None else topic.name

    def topics(self, *, epoch: int = LATEST_EPOCH) -> dict[str, Uuid]:
        """name -> topic id of every topic at ``epoch``."""
        return dict(self.topics_by_name.to_dict(epoch))

    def partition(self, topic_id: Uuid, partition_id: int, *,
                  epoch: int = LATEST_EPOCH) -> PartitionRegistration | None:
        topic = self.topics_by_id.get(topic_id, epoch=epoch)
        return None if topic is None else topic.parts.get(partition_id, epoch=epoch)

    def partitions(self, topic_id: Uuid, *, epoch: int = LATEST_EPOCH) -> dict[int, PartitionRegistration]:
        """partition id -> registration of one topic (empty for an unknown topic)."""
        topic = self.topics_by_id.get(topic_id, epoch=epoch)
        return {} if topic is None else topic.partitions(epoch=epoch)

    def has_leaderships(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> bool:
        return self.brokers_to_isrs.has_leaderships(broker_id, epoch=epoch)

    def partitions_led_by_broker(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> list[TopicIdPartition]:
        return list(self.brokers_to_isrs.partitions_led_by_broker(broker_id, epoch=epoch))

    def partitions_with_broker_in_isr(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> list[TopicIdPartition]:
        return list(self.brokers_to_isrs.partitions_with_broker_in_isr(broker_id, epoch=epoch))

    def partitions_with_no_leader(self, *, epoch: int = LATEST_EPOCH) -> list[TopicIdPartition]:
        return list(self.brokers_to_isrs.partitions_with_no_leader(epoch=epoch))

    def partitions_with_broker_in_elr(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> list[TopicIdPartition]:
        return list(self.brokers_to_elrs.partitions_with_broker_in_elr(broker_id, epoch=epoch))

    def isr_entries_by_topic(self, broker_id: int) -> list[tuple[Uuid, tuple[int, ...]]]:
        """The ISR index of ``broker_id`` (``NO_LEADER``: the leaderless partitions) as
        ``(topic id, entries)``, an entry being ``partition id | LEADER_FLAG`` where the broker
        leads: what a fencing or a controlled shutdown walks (an O(topics) copy, see
        :meth:`_BrokerIndex.entries_by_topic`)."""
        return self.brokers_to_isrs.entries_by_topic(broker_id)

    def isr_topic_entries(self, broker_id: int, topic_id: Uuid) -> tuple[int, ...]:
        """The ISR index entries of ``broker_id`` for one topic (see :meth:`isr_entries_by_topic`)."""
        return self.brokers_to_isrs.topic_entries(broker_id, topic_id)

    def elr_entries_by_topic(self, broker_id: int) -> list[tuple[Uuid, tuple[int, ...]]]:
        """The ELR index of ``broker_id`` as ``(topic id, partition ids)`` (an O(topics) copy)."""
        return self.brokers_to_elrs.entries_by_topic(broker_id)

    def imbalanced(self, *, epoch: int = LATEST_EPOCH) -> set[TopicIdPartition]:
        """Partitions whose leader is not their preferred replica."""
        return set(self.imbalanced_partitions.to_set(epoch))

    def reassigning(self, *, epoch: int = LATEST_EPOCH) -> dict[Uuid, tuple[int, ...]]:
        """topic id -> partitions with a reassignment in progress."""
        return dict(self.reassigning_topics.to_dict(epoch))

    def partitions_in_directory(self, directory_id: Uuid, *, epoch: int = LATEST_EPOCH) -> set[TopicIdPartition]:
        parts = self.directories_to_partitions.get(directory_id, epoch=epoch)
        return set() if parts is None else set(parts.to_set(epoch))

    def colliding_topic_names(self, name: str, *, epoch: int = LATEST_EPOCH) -> set[str]:
        """Existing topics whose name normalises like ``name`` ('.' and '_' alike)."""
        names = self.topics_with_collision_chars.get(unify_collision_chars(name), epoch=epoch)
        return set() if names is None else set(names.to_set(epoch))

    # ------------------------------------------------------------------ snapshot
    def snapshot_records(self, epoch: int = LATEST_EPOCH, *,
                         metadata_version: MetadataVersion | None = None) -> Iterator[ApiMessageAndVersion]:
        """TopicRecord then its PartitionRecords, topic after topic, as of ``epoch``;
        ``metadata_version`` overrides the provider's.  The PartitionRecords are encoded in
        bulk (:mod:`.replication_snapshot`: the same bytes as ``to_record``)."""
        from kraft_node.metadata.controller.replication_snapshot import snapshot_records
        return snapshot_records(self, epoch, metadata_version=metadata_version)
