"""What every partition change of the controller goes through (the shared half of Kafka's
ReplicationControlManager write side): who may lead, the effective min ISR, and
``generate_leader_and_isr_updates``, the loop that turns "broker B leaves / joins / restarted"
into PartitionChangeRecords.

Why a module of its own: AlterPartition (:mod:`.alter_partition`), broker lifecycle changes
(:mod:`.leadership`), elections (:mod:`.elections`) and reassignment (:mod:`.reassignment`)
all build their records with the same :class:`PartitionChangeBuilder` configured the same way
(metadata.version, ELR on or off, the topic's effective min ISR, unclean election, the default
log directory of a new replica) and must agree on who is an acceptable leader.  Kafka repeats
that set-up in each method; here it is :meth:`PartitionChangeContext.builder`.

Invariants the callers rely on:

* nothing here changes state: records are built from the state as replayed so far, and only
  ``replay`` applies them (a partition is never read "as if" a record of the same result had
  been applied, except by a caller that merges it itself, as AlterPartition does);
* an acceptable leader is an active broker (registered, unfenced, not in controlled shutdown)
  whose log directory holding the partition is online, and that no unfinished broker change
  of :mod:`.leadership` is taking out of the partition (:meth:`PartitionChangeContext.excluded`);
* ``generate_leader_and_isr_updates`` with a ``limit`` stops after that many records and says
  whether it saw every partition, so a caller can bound one result and continue later from the
  state its records leave (the records of a pass are deltas against the replayed state; a later
  pass recomputes from scratch and never repeats a change already applied).

:class:`PartitionChangeOps` is the facade the controller wires: Kafka's method names in
snake_case, each returning a :class:`ControllerResult`.
"""
from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Protocol, Sequence

from kraft_node.metadata.configs.resources import ConfigResource
from kraft_node.metadata.configs.topic import MIN_IN_SYNC_REPLICAS_CONFIG
from kraft_node.metadata.controller.partition_change import Election, PartitionChangeBuilder
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    DirectoryId,
    PartitionRegistration,
    ReplicationControlManager,
    TopicControlInfo,
    TopicIdPartition,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH

if TYPE_CHECKING:
    from kraft_node.metadata.controller import alter_partition as _alter_partition
    from kraft_node.metadata.controller import elections as _elections
    from kraft_node.metadata.controller import leadership as _leadership
    from kraft_node.metadata.controller import reassignment as _reassignment
    from kraft_node.metadata.controller.cluster_control import ClusterControlManager

log = logging.getLogger("kraft.controller.replication")

#: The most PartitionChangeRecords one broker lifecycle result (a fencing, a controlled shutdown,
#: an unfencing, a registration's cleanup, an unregistration, offline directories) writes; the
#: rest follow in later results (KAFKA-13858: a broker leading 10k partitions, or a zone going
#: away, must not become one burst; Kafka writes one unbounded result, split into 10k-record
#: batches).  On a running controller the result also ends once building it has taken
#: :data:`RESULT_BUILD_BUDGET_NS` of the controller thread's CPU time (the server wires
#: ``PartitionChangeContext.clock_ns``), so it is the time budget that sizes the results there
#: and this count only caps them.
#:
#: Why both, and these values (BENCHMARKS.md, session 20; replication_bench ``shutdown``: a
#: broker leading 10k partitions and in 30k ISRs, 3 controllers): a fixed 200 a result kept
#: events short (24-26 ms) but cost ~1.4 ms per result on every node (a Raft batch, a loader
#: publish, the stale-broker task's 10 ms wait): 2.66 s quiet.  The event that writes a result
#: also encodes, replays and appends it: about 6-7x the building time there, so 10 ms of
#: building made events of 54-66 ms (1.69 s), 7 ms of 47-50 ms (1.82 s); 6 ms keeps them under
#: the 50 ms an event may take.  The simulator wires no clock, so there only the count bounds a
#: result (deterministically).
MAX_PARTITION_CHANGES_PER_RESULT = 2000

#: See :data:`MAX_PARTITION_CHANGES_PER_RESULT`: the time one lifecycle result may spend
#: building its partition changes (checked every :data:`BUDGET_CHECK_EVERY` changes).
RESULT_BUILD_BUDGET_NS = 6_000_000

#: How often (in changes made) a step reads the clock against its deadline.
BUDGET_CHECK_EVERY = 32


class ConfigReader(Protocol):
    """What the partition changes read from the ConfigurationControlManager: the effective
    topic configs (topic, then broker, then cluster default, then static default)."""

    def min_isr(self, topic_name: str, *, epoch: int = ...) -> int: ...

    def unclean_leader_election_enabled(self, topic_name: str, *, epoch: int = ...) -> bool: ...


class FeatureReader(Protocol):
    def metadata_version(self, *, epoch: int = ...) -> MetadataVersion: ...

    def is_elr_enabled(self, *, epoch: int = ...) -> bool: ...


class ExclusionSource(Protocol):
    """Brokers (or one broker's log directories) an unfinished lifecycle change is taking out
    of their partitions: they may not lead, nor join an ISR, until it is done or cancelled."""

    def excluded(self, broker_id: int, directory: Uuid | None) -> bool: ...


class _NoExclusions:
    def excluded(self, broker_id: int, directory: Uuid | None) -> bool:
        return False


class _DefaultDirs:
    """Kafka's KRaftClusterDescriber.defaultDir as the builder's DefaultDirProvider: the
    directory a replica new to a partition is placed in (MIGRATING before 3.7-IV2).  Callable,
    and with ``default_dir``, so either form of provider works."""

    def __init__(self, ctx: "PartitionChangeContext"):
        self._ctx = ctx

    def default_dir(self, broker_id: int) -> Uuid:
        if self._ctx.metadata_version().is_directory_assignment_supported():
            return self._ctx.cluster.default_dir(broker_id)
        return DirectoryId.MIGRATING

    def __call__(self, broker_id: int) -> Uuid:
        return self.default_dir(broker_id)


class PartitionChangeContext:
    """The managers a partition change reads, and the builder set-up they share."""

    def __init__(self, replication: ReplicationControlManager, cluster: "ClusterControlManager",
                 configs: ConfigReader, features: FeatureReader, *,
                 max_elections_per_imbalance: int | None = None,
                 max_partition_changes_per_result: int = MAX_PARTITION_CHANGES_PER_RESULT) -> None:
        """``max_elections_per_imbalance``: default the replication manager's (Kafka's 1,000)."""
        if max_elections_per_imbalance is None:
            max_elections_per_imbalance = int(replication.max_elections_per_imbalance)
        if max_elections_per_imbalance < 1 or max_partition_changes_per_result < 1:
            raise ValueError("max_elections_per_imbalance and max_partition_changes_per_result must be positive, "
                             f"not {max_elections_per_imbalance} and {max_partition_changes_per_result}")
        self.replication = replication
        self.cluster = cluster
        self.configs = configs
        self.features = features
        self.max_elections_per_imbalance = max_elections_per_imbalance
        self.max_partition_changes_per_result = max_partition_changes_per_result
        #: the clock (ns) a lifecycle result's building time is measured on and its budget
        #: (:data:`RESULT_BUILD_BUDGET_NS`); None (the default, and the simulator's): results
        #: bounded by count only.  The server sets the controller thread's CPU clock.
        self.clock_ns: Callable[[], int] | None = None
        self.result_build_budget_ns = RESULT_BUILD_BUDGET_NS
        #: set by the BrokerLifecycle that owns the unfinished changes
        self.exclusions: ExclusionSource = _NoExclusions()
        self.default_dirs = _DefaultDirs(self)
        #: inside :meth:`reading_once` (one write): what it read once
        #: (metadata.version, ELR, each topic's min ISR and unclean setting) -- nothing it
        #: reads changes inside one write (state changes only by replay)
        self._memo: dict[Any, Any] | None = None

    def result_deadline_ns(self, budget_ns: int | None = None) -> int | None:
        """When a result started now must stop building: after ``budget_ns`` (default: a
        lifecycle result's, :attr:`result_build_budget_ns`) of :attr:`clock_ns`; None when no
        clock is wired (the count alone bounds it)."""
        clock = self.clock_ns
        if clock is None:
            return None
        return clock() + (self.result_build_budget_ns if budget_ns is None else budget_ns)

    def past(self, deadline_ns: int | None) -> bool:
        """Whether the clock has reached ``deadline_ns`` (never, for None)."""
        clock = self.clock_ns
        return deadline_ns is not None and clock is not None and clock() >= deadline_ns

    # -- what the configuration says --------------------------------------------------------

    @contextlib.contextmanager
    def reading_once(self) -> Iterator[None]:
        """Within this block (one write: nothing it reads changes until its records are
        replayed), metadata.version, ELR and each topic's min ISR and unclean-election
        setting are read once.  Nests."""
        outer = self._memo
        if outer is None:
            self._memo = {}
        try:
            yield
        finally:
            self._memo = outer

    def _memoized(self, key: Any, compute: Callable[[], Any]) -> Any:
        memo = self._memo
        if memo is None:
            return compute()
        value = memo.get(key, memo)
        if value is memo:
            value = memo[key] = compute()
        return value

    def metadata_version(self) -> MetadataVersion:
        mv: MetadataVersion = self._memoized("mv", self.features.metadata_version)
        return mv

    def elr_enabled(self) -> bool:
        """Kafka 4.x's isElrEnabled: the replication manager's answer (the
        eligible.leader.replicas.version feature, unless its constructor overrides it), and a
        metadata.version whose records carry ELR fields (4.0-IV1)."""
        return bool(self._memoized(
            "elr", lambda: self.replication.is_elr_enabled() and self.metadata_version().is_elr_supported()))

    def unclean_enabled(self, topic_name: str) -> bool:
        return bool(self._memoized(("unclean", topic_name),
                                   lambda: self.configs.unclean_leader_election_enabled(topic_name)))

    def effective_min_isr(self, topic: TopicControlInfo, *, epoch: int = LATEST_EPOCH) -> int:
        """Kafka's getTopicEffectiveMinIsr: ``min.insync.replicas`` capped at the topic's
        replication factor (partition 0's replica count), so an over-large setting still lets
        a full ISR count as "enough"."""
        if epoch == LATEST_EPOCH:
            return int(self._memoized(("min_isr", topic.topic_id), lambda: self._effective_min_isr(topic, epoch)))
        return self._effective_min_isr(topic, epoch)

    def _effective_min_isr(self, topic: TopicControlInfo, epoch: int) -> int:
        configured = self._configured_min_isr(topic.name, epoch)
        first = topic.parts.get(0, epoch=epoch)
        if first is None:
            return configured
        return min(configured, len(first.replicas))

    def _configured_min_isr(self, topic_name: str, epoch: int) -> int:
        """The topic's ``min.insync.replicas``.  Inside :meth:`reading_once`, a topic without
        its own value shares one lookup with every other such topic: its value then comes from
        the broker, cluster and static levels alone.  (A zone's fencing touches ~200 topics a
        result, one partition each, and the full lookup cost ~30 us a topic, as much as building
        the change.)"""
        config = getattr(self.configs, "config", None)
        if self._memo is None or epoch != LATEST_EPOCH or config is None:
            return int(self.configs.min_isr(topic_name, epoch=epoch))
        if config(ConfigResource.topic(topic_name), MIN_IN_SYNC_REPLICAS_CONFIG) is not None:
            return int(self.configs.min_isr(topic_name, epoch=epoch))
        return int(self._memoized("min_isr_without_topic_value", lambda: self.configs.min_isr(topic_name)))

    # -- who may lead --------------------------------------------------------------------------

    def excluded(self, broker_id: int, directory: Uuid | None = None) -> bool:
        return self.exclusions.excluded(broker_id, directory)

    def leader_acceptor(self, partition: PartitionRegistration,
                        accept: Callable[[int], bool] | None = None) -> Callable[[int], bool]:
        """Kafka's LeaderAcceptor: ``accept(broker)`` (default: the broker is active) and the
        broker's directory holding this partition is online.  A broker that is not (yet) one
        of the partition's replicas -- a replica a reassignment adds -- has no directory to
        check (Kafka would throw here; only an unclean election among adding replicas can ask)."""
        cluster = self.cluster
        base = accept if accept is not None else cluster.is_active
        dirs = dict(zip(partition.replicas, partition.directories))

        def acceptable(broker_id: int) -> bool:
            if not base(broker_id):
                return False
            directory = dirs.get(broker_id)
            if self.excluded(broker_id, directory):
                return False
            return directory is None or cluster.has_online_dir(broker_id, directory)
        return acceptable

    def builder(self, topic: TopicControlInfo, partition_id: int, partition: PartitionRegistration, *,
                accept: Callable[[int], bool] | None = None,
                election: Election | None = None,
                acceptor: Callable[[int], bool] | None = None) -> PartitionChangeBuilder:
        """A PartitionChangeBuilder set up as every Kafka call site does: metadata.version,
        effective min ISR, ELR on/off, the default directory provider, and (if given) the
        election type.  ``acceptor``: a complete LeaderAcceptor (what :meth:`leader_acceptor`
        would make of ``accept``), for a caller that builds one more cheaply."""
        builder = PartitionChangeBuilder(partition, topic.topic_id, partition_id,
                                         acceptor if acceptor is not None else self.leader_acceptor(partition, accept),
                                         self.metadata_version(), self.effective_min_isr(topic))
        builder.set_eligible_leader_replicas_enabled(self.elr_enabled())
        builder.set_default_dir_provider(self.default_dirs)
        if election is not None:
            builder.set_election(election)
        return builder

    # -- the loop -----------------------------------------------------------------------------

    def partition_update(self, topic: TopicControlInfo, partition_id: int, partition: PartitionRegistration,
                         broker_to_remove: int, broker_to_add: int,
                         broker_with_unclean_shutdown: int) -> ApiMessageAndVersion | None:
        """One partition of Kafka's generateLeaderAndIsrUpdates: take ``broker_to_remove`` and
        ``broker_with_unclean_shutdown`` out of the ISR (the latter out of the ELR too), never
        accept either as leader, accept ``broker_to_add`` even while its registration still
        says fenced (unfencing), and elect (uncleanly where the topic allows it).  The record,
        or None if nothing changes."""
        cluster = self.cluster
        is_active = cluster.is_active
        excluded = self.exclusions.excluded
        replicas = partition.replicas
        directories = partition.directories

        def acceptable(r: int) -> bool:
            # leader_acceptor(partition, accept) with the accept below, in one closure and
            # without its replica -> directory dict: this runs for every partition a broker
            # lifecycle change touches (replicas are distinct, so index finds r's directory)
            if r == broker_to_remove or r == broker_with_unclean_shutdown:
                return False
            if r != broker_to_add and not is_active(r):
                return False
            if r in replicas:
                i = replicas.index(r)
                directory = directories[i] if i < len(directories) else None
            else:
                directory = None
            if excluded(r, directory):
                return False
            return directory is None or cluster.has_online_dir(r, directory)

        builder = self.builder(topic, partition_id, partition, acceptor=acceptable)
        if self.unclean_enabled(topic.name):
            builder.set_election(Election.UNCLEAN)
        if broker_with_unclean_shutdown != NO_LEADER:
            builder.set_unclean_shutdown_replicas([broker_with_unclean_shutdown])
        removed = (broker_to_remove, broker_with_unclean_shutdown)
        builder.set_target_isr([r for r in partition.isr if r not in removed])
        record: ApiMessageAndVersion | None = builder.build()
        return record

    def generate_leader_and_isr_updates(self, context: str, broker_to_remove: int, broker_to_add: int,
                                        broker_with_unclean_shutdown: int, records: list[ApiMessageAndVersion],
                                        partitions: Iterable[TopicIdPartition], limit: int | None = None) -> bool:
        """Kafka's generateLeaderAndIsrUpdates over ``partitions`` (see :meth:`partition_update`):
        appends at most ``limit`` records (None: no limit) and returns True iff every partition
        was examined.  RuntimeError for a partition the index names but the topic map does not
        have (corrupt state, as in Kafka)."""
        old_size = len(records)
        complete = True
        with self.reading_once():
            complete = self._generate(broker_to_remove, broker_to_add, broker_with_unclean_shutdown, records,
                                      partitions, limit)
        if len(records) != old_size:
            if log.isEnabledFor(logging.DEBUG):
                names = ", ".join(self.describe(r.message) for r in records[old_size:])
                log.debug("%s: changing partition(s): %s", context, names)
            else:
                log.info("%s: changing %d partition(s)", context, len(records) - old_size)
        return complete

    def _generate(self, broker_to_remove: int, broker_to_add: int, broker_with_unclean_shutdown: int,
                  records: list[ApiMessageAndVersion], partitions: Iterable[TopicIdPartition],
                  limit: int | None) -> bool:
        old_size = len(records)
        complete = True
        for tp in partitions:
            if limit is not None and len(records) - old_size >= limit:
                complete = False
                break
            topic = self.replication.topic(tp.topic_id)
            if topic is None:
                raise RuntimeError(f"Topic ID {tp.topic_id} existed in isrMembers, but not in the topics map.")
            partition = topic.parts.get(tp.partition_id)
            if partition is None:
                raise RuntimeError(f"Partition {tp} existed in isrMembers, but not in the partitions map.")
            record = self.partition_update(topic, tp.partition_id, partition, broker_to_remove, broker_to_add,
                                           broker_with_unclean_shutdown)
            if record is not None:
                records.append(record)
        return complete

    def describe(self, change: Any) -> str:
        """``topic-partition`` of a PartitionChangeRecord, for logs."""
        name = self.replication.topic_name(change.topic_id)
        return f"{name}-{change.partition_id}"


def partition_change_count(records: Sequence[ApiMessageAndVersion]) -> int:
    """How many PartitionChangeRecords ``records`` holds (what the per-result bound counts)."""
    return sum(1 for r in records if isinstance(r.message, m.PartitionChangeRecord))


class PartitionChangeOps:
    """The write side of partitions, as one object the controller wires (Kafka's
    ReplicationControlManager methods of the same names, in snake_case).  Each public method
    returns a ControllerResult (or, for the broker lifecycle hooks, appends to the records the
    ClusterControlManager is building); state changes only when the records are replayed.

    Construct it with the replay-side managers, then give it to the ClusterControlManager
    (``cluster.set_lifecycle(ops.lifecycle)``) so fencing, unfencing, controlled shutdown,
    registration of a new incarnation, unregistration and offline directories move partitions,
    and register :meth:`maybe_balance_partition_leaders` and :meth:`maybe_elect_unclean_leaders`
    as periodic tasks."""

    def __init__(self, replication: ReplicationControlManager, cluster: "ClusterControlManager",
                 configs: ConfigReader, features: FeatureReader, *,
                 max_elections_per_imbalance: int | None = None,
                 max_partition_changes_per_result: int = MAX_PARTITION_CHANGES_PER_RESULT) -> None:
        from kraft_node.metadata.controller.alter_partition import AlterPartitionManager
        from kraft_node.metadata.controller.elections import ElectionManager
        from kraft_node.metadata.controller.leadership import BrokerLifecycle
        from kraft_node.metadata.controller.reassignment import ReassignmentManager
        self.context = PartitionChangeContext(
            replication, cluster, configs, features, max_elections_per_imbalance=max_elections_per_imbalance,
            max_partition_changes_per_result=max_partition_changes_per_result)
        self.lifecycle: _leadership.BrokerLifecycle = BrokerLifecycle(self.context)
        self.alter_partitions: _alter_partition.AlterPartitionManager = AlterPartitionManager(self.context)
        self.elections: _elections.ElectionManager = ElectionManager(self.context)
        self.reassignments: _reassignment.ReassignmentManager = ReassignmentManager(self.context)

    # Each write reads the settings every partition's builder needs once (reading_once).

    # -- AlterPartition -------------------------------------------------------------------------
    def alter_partition(self, request: Any, version: int) -> ControllerResult[Any]:
        with self.context.reading_once():
            return self.alter_partitions.alter_partition(request, version)

    # -- elections ---------------------------------------------------------------------------------
    def elect_leaders(self, request: Any) -> ControllerResult[Any]:
        with self.context.reading_once():
            return self.elections.elect_leaders(request)

    def maybe_balance_partition_leaders(self) -> ControllerResult[bool]:
        with self.context.reading_once():
            return self.elections.maybe_balance_partition_leaders()

    def maybe_elect_unclean_leaders(self) -> ControllerResult[bool]:
        with self.context.reading_once():
            return self.elections.maybe_elect_unclean_leaders()

    def are_partition_leaders_imbalanced(self, *, epoch: int = LATEST_EPOCH) -> bool:
        return self.elections.are_partition_leaders_imbalanced(epoch=epoch)

    def are_some_partitions_leaderless(self, *, epoch: int = LATEST_EPOCH) -> bool:
        return self.elections.are_some_partitions_leaderless(epoch=epoch)

    # -- reassignment ------------------------------------------------------------------------------
    def alter_partition_reassignments(self, request: Any) -> ControllerResult[Any]:
        with self.context.reading_once():
            return self.reassignments.alter_partition_reassignments(request)

    def list_partition_reassignments(self, topics: Sequence[Any] | None, *, epoch: int = LATEST_EPOCH) -> Any:
        return self.reassignments.list_partition_reassignments(topics, epoch=epoch)

    # -- broker lifecycle (the ClusterControlManager calls these through ``lifecycle``) --------------
    def handle_broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        self.lifecycle.broker_fenced(broker_id, records)

    def handle_broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None:
        self.lifecycle.broker_unfenced(broker_id, broker_epoch, records)

    def handle_broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                             records: list[ApiMessageAndVersion]) -> None:
        self.lifecycle.broker_in_controlled_shutdown(broker_id, broker_epoch, records)

    def handle_broker_shutdown(self, broker_id: int, is_clean_shutdown: bool,
                               records: list[ApiMessageAndVersion]) -> None:
        self.lifecycle.broker_shutdown(broker_id, is_clean_shutdown, records)

    def handle_broker_unregistered(self, broker_id: int, broker_epoch: int,
                                   records: list[ApiMessageAndVersion]) -> None:
        self.lifecycle.broker_unregistered(broker_id, broker_epoch, records)

    def handle_directories_offline(self, broker_id: int, broker_epoch: int, offline_dirs: Sequence[Uuid],
                                   records: list[ApiMessageAndVersion]) -> None:
        self.lifecycle.directories_offline(broker_id, broker_epoch, offline_dirs, records)
