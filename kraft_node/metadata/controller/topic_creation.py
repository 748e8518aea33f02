"""Creating and deleting topics: the write side of Kafka's ReplicationControlManager for
CreateTopics, CreatePartitions and DeleteTopics, and its topic-id lookups.

Why a module of its own: ``replication_control.py`` holds the replay side (the state every
later operation reads); this is the part that turns requests into TopicRecord /
ConfigRecord / PartitionRecord / RemoveTopicRecord, without changing any state.
:class:`TopicCreationMixin` is mixed into ``ReplicationControlManager``, so the methods
read the manager's timeline state directly, as Kafka's do.

CreateTopics, in Kafka's order (4.x ``createTopics``); every check below a failed one is
skipped for that topic, the others go on:

0. a name given twice: INVALID_REQUEST "Duplicate topic name." (Kafka's ControllerApis does
   this before the controller; done here as well so that no caller can ever get two
   TopicRecords for one name into the log -- the RPC layer strips duplicates first);
1. the whole request: more than ``MAX_PARTITIONS_PER_BATCH`` (10,000) partitions, counting
   -1 as the default and a manual assignment by its length, raises
   ``ApiError(POLICY_VIOLATION, "Excessively large number of partitions per request.")`` --
   the request fails as a whole, as Kafka's PolicyViolationException does (KAFKA-17870, 4.0);
2. names (:func:`validate_new_topic_names`: Topic.validate, then a collision of '.'/'_' with an
   existing topic); 3. TOPIC_ALREADY_EXISTS (it overrides a name error); 4. null config
   values (INVALID_CONFIG); 5. per remaining topic, in request order: its configs through
   ``ConfigurationControlManager.incremental_alter_config(..., new_topic=True)``, then the
   assignment (manual, or placed by the replica placer) and its ISRs.

Records of a created topic, in this order: TopicRecord, its ConfigRecords, its
PartitionRecords by partition id.  A new partition's ISR is its replicas that are unfenced and
not in controlled shutdown (fenced and shutting-down brokers may be *placed*, as followers;
the placer never makes a fenced broker the first replica), its leader the first of them;
epochs 0, RECOVERED.  The result is atomic (Kafka's ``atomicOf``); ``validate_only`` builds the
same response and drops the records.

The record cap (Kafka's ``BoundedList`` of ``MAX_RECORDS_PER_USER_OP``): Kafka bounds the
operation's record list in the manager and the 10,001st add throws
BoundedListTooLongException, which QuorumController's event handler answers as
POLICY_VIOLATION "Unable to perform excessively large batch operation." for the whole
request.  Here the manager checks before it appends a topic's records and raises that
ApiError itself (the caller sees the same code and text; the QuorumController's own check of a
result's length stays as the backstop for every operation).

Performance (issue 22: 1,000 topics x 100 partitions x RF 3 on 100 brokers): one placement
per topic as Kafka does (the placer's ``place_columns`` when it has one: an int32 matrix, no
PartitionAssignment objects), broker liveness and default directories looked up once per
broker per operation (the state cannot change while a write runs: only replay mutates it),
and when every placed broker is active the ISR is the replica list itself.  The records are
built straight from the rows; ``PartitionRegistration.to_record`` is the reference they are
tested against.
"""
from __future__ import annotations

import logging
import os
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterable, Iterator, Mapping, Sequence

import numpy as np

from kraft_node.metadata.controller.cluster_control import DirectoryId
from kraft_node.metadata.controller.configuration_control import AlterConfigOp, ConfigResource
from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.result import (
    MAX_RECORDS_PER_USER_OP,
    ApiMessageAndVersion,
    ControllerResult,
    FramedRecord,
)
from kraft_node.metadata.placement import PlacementSpec
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.create_partitions import CreatePartitionsResponse
from kraft_node.protocol.generated.create_topics import CreateTopicsResponse
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import ZERO_UUID, Uuid
from kraft_storage.timeline import LATEST_EPOCH

if TYPE_CHECKING:
    from kraft_node.metadata.controller.cluster_control import ClusterControlManager
    from kraft_node.metadata.controller.configuration_control import ConfigurationControlManager
    from kraft_node.metadata.controller.features import FeatureControlManager

log = logging.getLogger("kraft.controller.replication")

#: Kafka's ``ReplicationControlManager.MAX_PARTITIONS_PER_BATCH``: the most partitions one
#: CreateTopics request may create.
MAX_PARTITIONS_PER_BATCH = 10_000
#: Kafka's ``Topic.MAX_NAME_LENGTH`` (in UTF-16 code units, as Java counts a String).
TOPIC_NAME_MAX_LENGTH = 249
#: ``Errors.X.message()`` texts that Kafka's ``new ApiError(X)`` carries.
UNKNOWN_TOPIC_OR_PARTITION_MESSAGE = "This server does not host this topic-partition."
UNKNOWN_TOPIC_ID_MESSAGE = "This server does not host this topic ID."
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")

CreatableTopic = Any          # CreateTopicsRequest.CreatableTopic
CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult
CreatePartitionsTopicResult = CreatePartitionsResponse.CreatePartitionsTopicResult


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------

def _java_length(name: str) -> int:
    """``String.length()``: UTF-16 code units (a character outside the BMP counts 2)."""
    return len(name) + sum(1 for c in name if ord(c) > 0xFFFF)


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a valid topic name (Kafka's ``Topic.detectInvalidTopic``), or None."""
    if not name:
        return "the empty string is not allowed"
    if name == ".":
        return "'.' is not allowed"
    if name == "..":
        return "'..' is not allowed"
    if _java_length(name) > TOPIC_NAME_MAX_LENGTH:
        return f"the length of '{name}' is longer than the max allowed length {TOPIC_NAME_MAX_LENGTH}"
    if not _LEGAL.issuperset(name):
        return f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def validate_topic_name(name: str) -> None:
    """ApiError(INVALID_TOPIC_EXCEPTION, "Topic name is invalid: ...") unless ``name`` is valid."""
    reason = topic_name_error(name)
    if reason is not None:
        raise ApiError(Errors.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")


def has_collision_chars(name: str) -> bool:
    """Whether a topic name has a character ('.' or '_') that metric names fold together."""
    return "." in name or "_" in name


def unify_collision_chars(name: str) -> str:
    return name.replace(".", "_")


def validate_new_topic_names(topic_errors: dict[str, ApiError], topics: Iterable[CreatableTopic],
                             topics_with_collision_chars: Callable[[str], Collection[str] | None]) -> None:
    """Kafka's ``validateNewTopicNames``: an invalid name, or one that collides with an existing
    topic once '.' and '_' are unified, gets INVALID_TOPIC_EXCEPTION in ``topic_errors``
    (names already there are skipped).  ``topics_with_collision_chars(normalized)``: the
    existing names that normalise to it (None or empty: none).  A colliding name is reported
    against the first of them in iteration order (Kafka: ``colliding.iterator().next()``)."""
    for topic in topics:
        name = topic.name
        if name in topic_errors:
            continue
        reason = topic_name_error(name)
        if reason is not None:
            topic_errors[name] = ApiError(Errors.INVALID_TOPIC_EXCEPTION, f"Topic name is invalid: {reason}")
        if has_collision_chars(name):
            colliding = topics_with_collision_chars(unify_collision_chars(name))
            if colliding:
                topic_errors[name] = ApiError(Errors.INVALID_TOPIC_EXCEPTION,
                                              f"Topic '{name}' collides with existing topic: {next(iter(colliding))}")


def compute_config_changes(topic_errors: dict[str, ApiError], topics: Iterable[CreatableTopic]
                           ) -> dict[ConfigResource, dict[str, tuple[Any, str]]]:
    """Kafka's ``computeConfigChanges``: each topic's configs as SET operations; a null value
    is INVALID_CONFIG "Null value not supported for topic configs: a,b" (names in request
    order).  A later duplicate key wins (Kafka's map put)."""
    changes: dict[ConfigResource, dict[str, tuple[Any, str]]] = {}
    for topic in topics:
        if topic.name in topic_errors or not topic.configs:
            continue
        configs: dict[str, tuple[Any, str]] = {}
        nulls: list[str] = []
        for config in topic.configs:
            if config.value is None:
                nulls.append(config.name)
            else:
                configs[config.name] = (AlterConfigOp.SET, config.value)
        if nulls:
            topic_errors[topic.name] = ApiError(Errors.INVALID_CONFIG,
                                                "Null value not supported for topic configs: " + ",".join(nulls))
        elif configs:
            changes[ConfigResource.topic(topic.name)] = configs
    return changes


def validate_total_number_of_partitions(topics: Iterable[CreatableTopic], default_num_partitions: int) -> None:
    """Kafka's ``validateTotalNumberOfPartitions``: at most MAX_PARTITIONS_PER_BATCH partitions
    in one request (-1 counts as the default, an invalid count as 0, a manual assignment by
    its length), else ApiError(POLICY_VIOLATION) for the whole request."""
    total = 0
    for topic in topics:
        if topic.assignments:
            total += len(topic.assignments)
        elif topic.num_partitions == -1:
            total += default_num_partitions
        elif topic.num_partitions > 0:
            total += topic.num_partitions
        if total > MAX_PARTITIONS_PER_BATCH:
            raise ApiError(Errors.POLICY_VIOLATION, "Excessively large number of partitions per request.")


class ExcessivelyLargeBatchError(ApiError):
    """An operation would produce more than MAX_RECORDS_PER_USER_OP records: Kafka's
    BoundedListTooLongException as QuorumController's event handler answers it.  It fails the
    whole operation (never one topic of it)."""

    def __init__(self) -> None:
        super().__init__(Errors.POLICY_VIOLATION, "Unable to perform excessively large batch operation.")


def random_topic_id(taken: Callable[[Uuid], bool] = lambda _u: False) -> Uuid:
    """Kafka's ``Uuid.randomUuid``: never ZERO or ONE (reserved), never one whose text starts
    with '-' (command-line tools would read it as an option).  Also never an id ``taken``
    reports in use (Kafka does not check; a clash would make the TopicRecord's replay replace
    another topic, so the 2^-122 chance is ruled out for the price of one lookup)."""
    while True:
        u = Uuid.random()
        # the text's first character is the URL-safe base64 digit of the first byte's top six
        # bits; 62 is '-' (the same test as ``str(u).startswith("-")``, without the encoding)
        if u.bytes[0] >> 2 != 62 and not taken(u):
            return u


# ---------------------------------------------------------------------------
# The cluster as the placer sees it
# ---------------------------------------------------------------------------

class KRaftClusterDescriber:
    """Kafka's ``ReplicationControlManager.KRaftClusterDescriber``: the usable brokers (unfenced
    or fenced, not shutting down) and each broker's default directory for a new replica --
    MIGRATING while the metadata.version cannot record directories (before 3.7-IV2)."""

    def __init__(self, cluster_control: "ClusterControlManager",
                 metadata_version: Callable[[], MetadataVersion]) -> None:
        self._cluster = cluster_control
        self._metadata_version = metadata_version

    def usable_brokers(self) -> Iterator[Any]:
        return self._cluster.usable_brokers()

    def default_dir(self, broker_id: int) -> Uuid:
        if self._metadata_version().is_directory_assignment_supported():
            return self._cluster.default_dir(broker_id)
        return DirectoryId.MIGRATING


class _WriteView:
    """What one write operation reads about brokers, each broker looked up once: whether it
    may be in a new ISR (registered, unfenced, not in controlled shutdown: Kafka's
    ``ClusterControlManager.isActive``), its default directory, and the usable brokers the
    placer walks for every topic (the view is itself the ClusterDescriber the placer gets).
    Valid for one operation only: state changes only by replay, which never runs inside a
    write, so every topic of a request sees what Kafka's per-call reads would."""

    __slots__ = ("_cluster", "_describer", "_active", "_dirs", "_usable", "metadata_version", "record_version",
                 "config_cache", "_excluded", "_every_usable_active")

    def __init__(self, cluster: "ClusterControlManager", describer: KRaftClusterDescriber,
                 metadata_version: MetadataVersion, excluded: Callable[[int], bool] | None = None) -> None:
        """``excluded``: brokers whose fencing or shutdown is still being written in bounded
        results (the partition-change side's soft state): not put in a new ISR meanwhile."""
        self._cluster = cluster
        self._excluded = excluded
        self._describer = describer
        self._active: dict[int, bool] = {}
        self._dirs: dict[int, Uuid] = {}
        self._usable: list[Any] | None = None
        self._every_usable_active: bool | None = None
        self.metadata_version = metadata_version
        self.record_version = metadata_version.partition_record_version()
        #: a created topic's effective configs, by its creation configs (CreateTopics)
        self.config_cache: dict[frozenset[tuple[str, str]], list[Any]] = {}

    def is_active(self, broker_id: int) -> bool:
        active = self._active.get(broker_id)
        if active is None:
            active = self._cluster.is_active(broker_id) and not (self._excluded is not None
                                                                 and self._excluded(broker_id))
            self._active[broker_id] = active
        return active

    def isr(self, replicas: Sequence[int]) -> list[int]:
        return [b for b in replicas if self.is_active(b)]

    def all_active(self, brokers: Iterable[int]) -> bool:
        is_active = self.is_active
        return all(is_active(b) for b in brokers)

    def every_usable_broker_active(self) -> bool:
        """Whether every broker the placer may use is active: then every placed row is its own
        ISR, with no per-broker check (the common case; asked once per operation)."""
        every = self._every_usable_active
        if every is None:
            every = self._every_usable_active = self.all_active(b.id for b in self.usable_brokers())
        return every

    def default_dir(self, broker_id: int) -> Uuid:
        d = self._dirs.get(broker_id)
        if d is None:
            d = self._dirs[broker_id] = self._describer.default_dir(broker_id)
        return d

    def usable_brokers(self) -> Iterator[Any]:
        if self._usable is None:
            self._usable = list(self._describer.usable_brokers())
        return iter(self._usable)


#: PartitionRecord's fields, which :func:`new_partition_records` sets one by one: a codegen
#: change to the record must show up here (tests/metadata/test_replication_topics.py checks it).
PARTITION_RECORD_SLOTS = ("partition_id", "topic_id", "replicas", "isr", "removing_replicas", "adding_replicas",
                          "leader", "leader_recovery_state", "leader_epoch", "partition_epoch", "directories",
                          "eligible_leader_replicas", "last_known_elr", "unknown_tagged_fields")
_new = object.__new__
_set = object.__setattr__
_objects = load("_bulk_objects", "kraft_node")
#: FramedRecord's slots as ``new_objects`` sets them (the ``message`` slot stays None: decoded on demand)
_FRAMED_SLOTS = ("version", "_value", "message")
_PARTITION_RECORD = m.PartitionRecord.API_KEY


def new_partition_records(topic_id: Uuid, start: int, rows: Sequence[list[int]], isrs: Sequence[list[int]],
                          view: _WriteView) -> list[ApiMessageAndVersion]:
    """PartitionRecords of new partitions ``start``, ``start+1``, ...: replicas ``rows[i]``
    placed in their default directories, ISR ``isrs[i]`` (non-empty), leader its first member,
    epochs 0, RECOVERED -- exactly ``PartitionRegistration(...).to_record(topic_id, pid, mv)``
    (no ELR fields: a new partition has none; directories from PartitionRecord v1 on; below
    3.7-IV2 the describer gives MIGRATING, which v0 leaves out).

    The hot loop of a big creation, so the records are written already encoded
    (:class:`FramedRecord`): the rows go into columns and the ``_bulk_objects`` kernel's
    ``encode_partition_rows`` (the image's snapshot writer uses it too) writes every value in
    one call; the controller appends and replays the values (the columnar replay), and
    ``message`` decodes one only when something asks for it.  Session 21: the generic encoder
    took ~2.5 us a PartitionRecord, ~21% of node 1's CPU in ``replication_bench.py create``.  A
    row the kernel does not write (a list of 127 or more replicas) gets a record object."""
    n = len(rows)
    if n == 0:
        return []
    version = view.record_version
    lengths = np.fromiter(map(len, rows), np.int32, n)
    replica_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(lengths, out=replica_offsets[1:])
    replicas = np.fromiter(chain.from_iterable(rows), np.int32, int(replica_offsets[-1]))
    isr_lengths = np.fromiter(map(len, isrs), np.int32, n)
    isr_offsets = np.zeros(n + 1, np.int32)
    np.cumsum(isr_lengths, out=isr_offsets[1:])
    isr = np.fromiter(chain.from_iterable(isrs), np.int32, int(isr_offsets[-1]))
    zeros = np.zeros(n, np.int32)
    no_lists = np.zeros(n + 1, np.int32)
    no_values = np.zeros(0, np.int32)
    if version >= 1:
        default_dir = view.default_dir
        brokers, which = np.unique(replicas, return_inverse=True)
        table = np.frombuffer(b"".join([default_dir(b).bytes for b in brokers.tolist()]), np.uint8).reshape(-1, 16)
        directories, dir_offsets = table[which], replica_offsets
    else:
        directories, dir_offsets = np.zeros((0, 16), np.uint8), no_lists
    columns = (np.arange(start, start + n, dtype=np.int32), isr[isr_offsets[:-1]], zeros, zeros,
               np.zeros(n, np.int8), replica_offsets, replicas, isr_offsets, isr, no_lists, no_values, no_lists,
               no_values, dir_offsets, directories, no_lists, no_lists)
    values: list[bytes | None] = _objects.encode_partition_rows(
        bytes((1, _PARTITION_RECORD, version)), columns, [0], [n], [topic_id.bytes], version)
    if None in values:
        objects = _partition_record_objects(topic_id, start, rows, isrs, view)
        return [objects[i] if v is None else FramedRecord(v, version) for i, v in enumerate(values)]
    records: list[ApiMessageAndVersion] = _objects.new_objects(FramedRecord, _FRAMED_SLOTS,
                                                               ([version] * n, values, [None] * n), True)
    return records


def _partition_record_objects(topic_id: Uuid, start: int, rows: Sequence[list[int]], isrs: Sequence[list[int]],
                              view: _WriteView) -> list[ApiMessageAndVersion]:
    """:func:`new_partition_records` as record objects, for the rows the kernel does not write.
    They are made the way the generated decoders make them (``object.__new__`` and every slot
    set, :data:`PARTITION_RECORD_SLOTS`), which costs half the keyword constructor; the
    directory of each broker is looked up once."""
    version = view.record_version
    cls = m.PartitionRecord
    amv_cls = ApiMessageAndVersion
    out: list[ApiMessageAndVersion] = []
    append = out.append
    with_dirs = version >= 1
    dirs: dict[int, Uuid] = {}
    if with_dirs:
        default_dir = view.default_dir
        for row in rows:
            for b in row:
                if b not in dirs:
                    dirs[b] = default_dir(b)
    pid = start
    for row, isr in zip(rows, isrs):
        r = _new(cls)
        r.partition_id = pid
        r.topic_id = topic_id
        r.replicas = row
        r.isr = isr
        r.removing_replicas = []
        r.adding_replicas = []
        r.leader = isr[0]
        r.leader_recovery_state = 0
        r.leader_epoch = 0
        r.partition_epoch = 0
        r.directories = [dirs[b] for b in row] if with_dirs else []
        r.eligible_leader_replicas = None
        r.last_known_elr = None
        r.unknown_tagged_fields = ()
        a = _new(amv_cls)
        _set(a, "message", r)
        _set(a, "version", version)
        append(a)
        pid += 1
    return out


# ---------------------------------------------------------------------------
# The mixin
# ---------------------------------------------------------------------------

class TopicCreationMixin:
    """CreateTopics, CreatePartitions, DeleteTopics and the topic-id lookups (Kafka's method
    names in snake_case).  Mixed into ``ReplicationControlManager``, whose constructor sets
    the attributes declared here."""

    # -- set by ReplicationControlManager.__init__ --------------------------------------
    topics_by_name: Any
    topics_by_id: Any
    topics_with_collision_chars: Any
    configuration_control: "ConfigurationControlManager"
    cluster_control: "ClusterControlManager | None"
    feature_control: "FeatureControlManager | None"
    _replica_placer: Any
    default_num_partitions: int
    default_replication_factor: int
    cluster_describer: KRaftClusterDescriber | None
    broker_excluded: "Callable[[int], bool] | None"

    @property
    def replica_placer(self) -> Any:
        """The ReplicaPlacer; when none was given, Kafka's default made on first use: a
        StripedReplicaPlacer over ``new Random()`` (a java.util.Random seeded at random)."""
        if self._replica_placer is None:
            from kraft_node.metadata.placement import JavaRandom, StripedReplicaPlacer
            self._replica_placer = StripedReplicaPlacer(JavaRandom(int.from_bytes(os.urandom(6), "big")))
        return self._replica_placer

    # -- helpers --------------------------------------------------------------------------
    def _write_view(self, what: str) -> _WriteView:
        cluster = self.cluster_control
        describer = self.cluster_describer
        if cluster is None or describer is None or self.feature_control is None:
            raise RuntimeError(f"ReplicationControlManager cannot {what}: it was built without "
                               "cluster_control and feature_control")
        return _WriteView(cluster, describer, self.feature_control.metadata_version(),
                          self.broker_excluded)

    def _colliding(self, normalized: str) -> Collection[str] | None:
        names = self.topics_with_collision_chars.get(normalized)
        return None if names is None else list(names)

    def _place(self, start: int, count: int, replication_factor: int, view: _WriteView) -> list[list[int]]:
        """Kafka's ``replicaPlacer.place(new PlacementSpec(start, count, rf), clusterDescriber)``
        as replica rows (the placer's columnar ``place_columns`` when it has one); ``view`` is
        the describer (the cluster as this operation reads it).  Raises the placer's
        InvalidReplicationFactorError."""
        spec = PlacementSpec(start, count, replication_factor)
        columns = getattr(self.replica_placer, "place_columns", None)
        if columns is not None:
            rows: list[list[int]] = columns(spec, view).tolist()
            return rows
        return [list(a.replicas) for a in self.replica_placer.place(spec, view).assignments]

    def validate_manual_partition_assignment(self, replicas: Sequence[int],
                                             replication_factor: int | None) -> None:
        """Kafka's ``validateManualPartitionAssignment``: a non-empty list of distinct
        registered brokers (checked in ascending id order, so the lowest offender is named),
        of ``replication_factor`` replicas when one is given.  ApiError(INVALID_REPLICA_ASSIGNMENT)."""
        if not replicas:
            raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                           "The manual partition assignment includes an empty replica list.")
        cluster = self.cluster_control
        if cluster is None:
            raise RuntimeError("ReplicationControlManager cannot validate an assignment: it was built "
                               "without cluster_control")
        prev: int | None = None
        for broker_id in sorted(replicas):
            if cluster.registration(broker_id) is None:
                raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                               f"The manual partition assignment includes broker {broker_id}, but no such "
                               "broker is registered.")
            if broker_id == prev:
                raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                               f"The manual partition assignment includes the broker {prev} more than once.")
            prev = broker_id
        if replication_factor is not None and len(replicas) != replication_factor:
            raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                           f"The manual partition assignment includes a partition with {len(replicas)} replica(s), "
                           "but this is not consistent with previous partitions, which have "
                           f"{replication_factor} replica(s).")

    # -- CreateTopics ----------------------------------------------------------------------
    def create_topics(self, request: Any, describable: Collection[str] | None = None
                      ) -> ControllerResult[CreateTopicsResponse]:
        """Kafka's ``createTopics`` (see the module doc for the order of checks).
        ``describable``: the topics whose configs, partition count and replication factor the
        caller may see (None: all); the others get TOPIC_AUTHORIZATION_FAILED as their
        topic_config_error_code, as Kafka answers.  Raises ApiError(POLICY_VIOLATION) when the
        request is too large as a whole."""
        view = self._write_view("create topics")
        topics = list(request.topics)
        topic_errors: dict[str, ApiError] = {}
        seen: set[str] = set()
        duplicates: set[str] = set()
        for topic in topics:
            if topic.name in seen:
                duplicates.add(topic.name)
                topic_errors[topic.name] = ApiError(Errors.INVALID_REQUEST, "Duplicate topic name.")
            seen.add(topic.name)
        validate_total_number_of_partitions((t for t in topics if t.name not in topic_errors),
                                            self.default_num_partitions)
        validate_new_topic_names(topic_errors, topics, self._colliding)
        for topic in topics:  # overrides a name error (an existing foo.bar "collides" with itself)
            if topic.name not in duplicates and self.topics_by_name.contains(topic.name):
                topic_errors[topic.name] = ApiError(Errors.TOPIC_ALREADY_EXISTS,
                                                    f"Topic '{topic.name}' already exists.")
        config_changes = compute_config_changes(topic_errors, topics)

        records: list[ApiMessageAndVersion] = []
        successes: dict[str, CreatableTopicResult] = {}
        for topic in topics:
            if topic.name in topic_errors:
                continue
            resource = ConfigResource.topic(topic.name)
            key_to_ops = config_changes.get(resource)
            config_records: list[ApiMessageAndVersion] = []
            if key_to_ops is not None:
                config_result = self.configuration_control.incremental_alter_config(resource, key_to_ops, True)
                error = config_result.response
                if error is not None and error.error != Errors.NONE:
                    topic_errors[topic.name] = error
                    continue
                config_records = config_result.records
            try:
                self._create_topic(topic, records, successes, config_records, view,
                                   describable is None or topic.name in describable)
            except ExcessivelyLargeBatchError:
                raise
            except ApiError as exc:
                topic_errors[topic.name] = exc

        response = CreateTopicsResponse(throttle_time_ms=0, topics=[])
        summary: list[str] = []
        for topic in topics:
            failed = topic_errors.get(topic.name)
            if failed is not None:
                response.topics.append(CreatableTopicResult(name=topic.name, error_code=int(failed.error),
                                                            error_message=failed.message))
                summary.append(f"{topic.name}: {failed.error.name} ({failed.message})")
            else:
                response.topics.append(successes[topic.name])
                summary.append(f"{topic.name}: SUCCESS")
        if request.validate_only:
            log.info("Validate-only CreateTopics result(s): %s", ", ".join(summary))
            return ControllerResult.atomic_of([], response)
        log.info("CreateTopics result(s): %s", ", ".join(summary))
        return ControllerResult.atomic_of(records, response)

    def _create_topic(self, topic: CreatableTopic, records: list[ApiMessageAndVersion],
                      successes: dict[str, CreatableTopicResult], config_records: list[ApiMessageAndVersion],
                      view: _WriteView, describable: bool) -> None:
        """Kafka's ``createTopic``: the records of one topic appended to ``records``, its result
        to ``successes``; ApiError for this topic only."""
        if topic.assignments:
            if topic.replication_factor != -1:
                raise ApiError(Errors.INVALID_REQUEST, "A manual partition assignment was specified, but "
                               "replication factor was not set to -1.")
            if topic.num_partitions != -1:
                raise ApiError(Errors.INVALID_REQUEST, "A manual partition assignment was specified, but "
                               "numPartitions was not set to -1.")
            by_index: dict[int, tuple[list[int], list[int]]] = {}
            replication_factor: int | None = None
            for assignment in topic.assignments:
                index = assignment.partition_index
                if index in by_index:
                    raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                   f"Found multiple manual partition assignments for partition {index}")
                replicas = list(assignment.broker_ids)
                self.validate_manual_partition_assignment(replicas, replication_factor)
                replication_factor = len(replicas)
                isr = view.isr(replicas)
                if not isr:
                    raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                   "All brokers specified in the manual partition assignment for partition "
                                   f"{index} are fenced or in controlled shutdown.")
                by_index[index] = (replicas, isr)
            for i in range(len(by_index)):
                if i not in by_index:
                    raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                   "partitions should be a consecutive 0-based integer sequence")
            rows = [by_index[i][0] for i in range(len(by_index))]
            isrs = [by_index[i][1] for i in range(len(by_index))]
        elif topic.replication_factor < -1 or topic.replication_factor == 0:
            raise ApiError(Errors.INVALID_REPLICATION_FACTOR,
                           "Replication factor must be larger than 0, or -1 to use the default value.")
        elif topic.num_partitions < -1 or topic.num_partitions == 0:
            raise ApiError(Errors.INVALID_PARTITIONS, "Number of partitions was set to an invalid non-positive value.")
        else:
            num_partitions = self.default_num_partitions if topic.num_partitions == -1 else topic.num_partitions
            rf = self.default_replication_factor if topic.replication_factor == -1 else topic.replication_factor
            rows = self._place_or_explain(0, num_partitions, rf, view)
            isrs = self._isrs_or_explain(rows, rf, view)

        # Kafka: context.applyPartitionChangeQuota(numPartitions) here -- controller mutation
        # quotas are not implemented by kraft (no quota manager); nothing is throttled.
        if len(records) + 1 + len(config_records) + len(rows) > MAX_RECORDS_PER_USER_OP:
            raise ExcessivelyLargeBatchError()
        topic_id = random_topic_id(self.topics_by_id.contains)
        result = CreatableTopicResult(name=topic.name, topic_id=topic_id, error_code=0, error_message=None)
        if describable:
            result.configs = self._effective_topic_configs(
                {c.name: c.value for c in topic.configs if c.value is not None}, view.config_cache)
            result.num_partitions = len(rows)
            result.replication_factor = len(rows[0])
            result.topic_config_error_code = int(Errors.NONE)
        else:
            result.topic_config_error_code = int(Errors.TOPIC_AUTHORIZATION_FAILED)
        successes[topic.name] = result
        records.append(ApiMessageAndVersion(m.TopicRecord(name=topic.name, topic_id=topic_id), 0))
        records.extend(config_records)
        records.extend(new_partition_records(topic_id, 0, rows, isrs, view))

    def _place_or_explain(self, start: int, count: int, replication_factor: int,
                          view: _WriteView) -> list[list[int]]:
        """Placement for CreateTopics: the placer's InvalidReplicationFactorError becomes
        "Unable to replicate the partition RF time(s): <the placer's reason>"."""
        try:
            return self._place(start, count, replication_factor, view)
        except ApiError as exc:
            if exc.error != Errors.INVALID_REPLICATION_FACTOR:
                raise
            raise ApiError(Errors.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {replication_factor} time(s): {exc.message}") from exc

    @staticmethod
    def _isrs_or_explain(rows: Sequence[list[int]], replication_factor: int, view: _WriteView) -> list[list[int]]:
        """Each placed partition's ISR (its active replicas); a partition with none fails the
        topic with INVALID_REPLICATION_FACTOR, as the placer would have (Kafka's message)."""
        if view.every_usable_broker_active() or view.all_active({b for row in rows for b in row}):
            return [list(row) for row in rows]  # (placed rows hold usable brokers only)
        isrs = [view.isr(row) for row in rows]
        if not all(isrs):
            raise ApiError(Errors.INVALID_REPLICATION_FACTOR,
                           f"Unable to replicate the partition {replication_factor} time(s): All brokers are "
                           "currently fenced or in controlled shutdown.")
        return isrs

    def _effective_topic_configs(self, creation_configs: Mapping[str, str],
                                 cache: dict[frozenset[tuple[str, str]], list[Any]]) -> list[Any]:
        """The CreatableTopicConfigs of a created topic (Kafka's ``computeEffectiveTopicConfigs``:
        every topic key resolved from the request, the dynamic cluster default, the static
        config and the definition's default; sorted by name; a sensitive value is null).
        Topics of one request with the same configs share one answer (``cache``): the state it
        is computed from cannot change inside the operation."""
        key = frozenset(creation_configs.items())
        out = cache.get(key)
        if out is None:
            entries = self.configuration_control.compute_effective_topic_configs(creation_configs)
            out = cache[key] = [CreateTopicsResponse.CreatableTopicConfigs(
                name=name, value=entries[name].describe_value, read_only=entries[name].is_read_only,
                config_source=int(entries[name].source), is_sensitive=entries[name].is_sensitive)
                for name in sorted(entries)]
        return list(out)

    # -- CreatePartitions --------------------------------------------------------------------
    def create_partitions(self, topics: Sequence[Any], *, validate_only: bool = False
                          ) -> ControllerResult[list[CreatePartitionsTopicResult]]:
        """Kafka's ``createPartitions``: one CreatePartitionsTopicResult per topic in order
        (error code and message; NONE with a null message on success); the records of every
        successful topic in one atomic result (none with ``validate_only``, Kafka's
        QuorumController ``withoutRecords``)."""
        view = self._write_view("create partitions")
        records: list[ApiMessageAndVersion] = []
        results: list[CreatePartitionsTopicResult] = []
        for topic in topics:
            error = Errors.NONE
            message: str | None = None
            try:
                self._create_partitions_of(topic, records, view)
            except ExcessivelyLargeBatchError:
                raise
            except ApiError as exc:
                error, message = exc.error, exc.message
            results.append(CreatePartitionsTopicResult(name=topic.name, error_code=int(error), error_message=message))
        return ControllerResult.atomic_of([] if validate_only else records, results)

    def _create_partitions_of(self, topic: Any, records: list[ApiMessageAndVersion], view: _WriteView) -> None:
        topic_id = self.topics_by_name.get(topic.name)
        info = None if topic_id is None else self.topics_by_id.get(topic_id)
        if info is None:
            raise ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        current = info.parts.size()
        if topic.count == current:
            raise ApiError(Errors.INVALID_PARTITIONS, f"Topic already has {current} partition(s).")
        if topic.count < current:
            raise ApiError(Errors.INVALID_PARTITIONS, f"The topic {topic.name} currently has {current} "
                           f"partition(s); {topic.count} would not be an increase.")
        additional = topic.count - current
        assignments = topic.assignments
        if assignments is not None and len(assignments) != additional:
            raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT, f"Attempted to add {additional} additional "
                           f"partition(s), but only {len(assignments)} assignment(s) were specified.")
        # Kafka: context.applyPartitionChangeQuota(additional) -- no mutation quotas in kraft.
        first = next(iter(info.parts.values()), None)
        if first is None:
            raise ApiError(Errors.UNKNOWN_SERVER_ERROR,
                           f"Invalid state: topic {topic.name} appears to have no partitions.")
        replication_factor = len(first.replicas)
        if assignments is not None:
            rows = []
            for i, assignment in enumerate(assignments):
                replicas = list(assignment.broker_ids)
                self.validate_manual_partition_assignment(replicas, replication_factor)
                if not view.isr(replicas):
                    raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                                   "All brokers specified in the manual partition assignment for partition "
                                   f"{current + i} are fenced or in controlled shutdown.")
                rows.append(replicas)
        else:
            # The placer's own error goes out as it is here (Kafka adds no prefix).
            rows = self._place(current, additional, replication_factor, view)
        isrs = self._isrs_or_explain(rows, replication_factor, view)
        if len(records) + len(rows) > MAX_RECORDS_PER_USER_OP:
            raise ExcessivelyLargeBatchError()
        records.extend(new_partition_records(topic_id, current, rows, isrs, view))

    # -- DeleteTopics ------------------------------------------------------------------------
    def delete_topics(self, ids: Collection[Uuid]) -> ControllerResult[dict[Uuid, ApiError]]:
        """Kafka's ``deleteTopics``: one RemoveTopicRecord per existing topic (its partitions
        and configs go with it on replay), all in one atomic result; an unknown id is
        UNKNOWN_TOPIC_ID with a null message.  ``{id: ApiError(NONE) or the error}``."""
        results: dict[Uuid, ApiError] = {}
        records: list[ApiMessageAndVersion] = []
        for topic_id in ids:
            if topic_id in results:
                continue
            if not self.topics_by_id.contains(topic_id):
                results[topic_id] = ApiError(Errors.UNKNOWN_TOPIC_ID, None)
                continue
            # Kafka: context.applyPartitionChangeQuota(numPartitions) -- no mutation quotas in kraft.
            if len(records) >= MAX_RECORDS_PER_USER_OP:
                raise ExcessivelyLargeBatchError()
            records.append(ApiMessageAndVersion(m.RemoveTopicRecord(topic_id=topic_id), 0))
            results[topic_id] = ApiError(Errors.NONE, None)
        return ControllerResult.atomic_of(records, results)

    # -- lookups ----------------------------------------------------------------------------
    def find_topic_ids(self, epoch: int, names: Iterable[str | None]) -> dict[str | None, Uuid | ApiError]:
        """Kafka's ``findTopicIds`` at registry epoch ``epoch``: each name's id, or
        UNKNOWN_TOPIC_OR_PARTITION; a null name is INVALID_REQUEST "Invalid null topic name."."""
        out: dict[str | None, Uuid | ApiError] = {}
        for name in names:
            if name is None:
                out[None] = ApiError(Errors.INVALID_REQUEST, "Invalid null topic name.")
                continue
            topic_id: Uuid | None = self.topics_by_name.get(name, epoch=epoch)
            out[name] = (ApiError(Errors.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC_OR_PARTITION_MESSAGE)
                         if topic_id is None else topic_id)
        return out

    def find_topic_names(self, epoch: int, ids: Iterable[Uuid | None]) -> dict[Uuid | None, str | ApiError]:
        """Kafka's ``findTopicNames`` at registry epoch ``epoch``: each id's name, or
        UNKNOWN_TOPIC_ID; a null or zero id is INVALID_REQUEST."""
        out: dict[Uuid | None, str | ApiError] = {}
        for topic_id in ids:
            if topic_id is None or topic_id == ZERO_UUID:
                shown = "null" if topic_id is None else str(topic_id)
                out[topic_id] = ApiError(Errors.INVALID_REQUEST, f"Attempt to find topic with invalid topicId {shown}")
                continue
            topic = self.topics_by_id.get(topic_id, epoch=epoch)
            out[topic_id] = (ApiError(Errors.UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_ID_MESSAGE)
                             if topic is None else topic.name)
        return out

    def find_all_topic_ids(self, epoch: int = LATEST_EPOCH) -> dict[str, Uuid]:
        """Kafka's ``findAllTopicIds``: name -> id of every topic at ``epoch``."""
        return dict(self.topics_by_name.items(epoch))
