"""Kafka's ClusterControlManager: the hard state of the cluster's membership.

Hard state is what the metadata log says and every controller replays identically: each
broker's registration (id, epoch, incarnation, listeners, supported features, rack, fenced,
in controlled shutdown, log directories), the offset of each broker's RegisterBrokerRecord,
each controller's registration, and which broker owns each log directory.  All of it lives
in timeline maps of the controller's ``SnapshotRegistry``, so a renounce reverts it with
everything else.

The soft state (heartbeats, sessions, controlled-shutdown offsets) is in
:mod:`~kraft_node.metadata.controller.heartbeats` and exists only while this controller is
active (:meth:`ClusterControlManager.activate` / :meth:`~ClusterControlManager.deactivate`).

The broker lifecycle this manager writes, and why:

* **Registration** (:meth:`~ClusterControlManager.register_broker`): a broker's epoch is the
  offset its RegisterBrokerRecord gets in the log, so epochs are unique, grow with time and
  compare with metadata offsets.  A new incarnation id means the broker process restarted
  (an unclean restart, as far as the controller knows): it gets a new epoch and starts
  fenced.  The same incarnation re-registering (a retried request) keeps its epoch and state.
  While the old epoch's session is live, another incarnation is refused (two processes with
  one id).
* **Unfencing**: a fenced broker is unfenced only once it reports a metadata offset at or past
  its own registration record, so it never serves from metadata that predates its
  registration.
* **Fencing**: on request (``want_fence``), on a granted shutdown, and when a session expires
  (:meth:`~ClusterControlManager.fence_stale_broker`).  Kafka fences one stale broker per run
  of that task, so each fencing is visible before the next; here every session found expired
  in one run is fenced together (a zone going dark is then one walk over the topics instead of
  one per broker, see ``leadership.py``), each broker's fence record still written only once
  its partition changes are.
* **Controlled shutdown**: a broker that leads partitions is marked in controlled shutdown
  (BrokerRegistrationChangeRecord) and told to shut down only when it leads nothing and every
  active broker has read past the batch that moved its leaderships.

What each transition does to partitions (ISRs, ELRs, leaders) is the replication side's: a
:class:`BrokerLifecycleHandler` (``lifecycle=`` or :meth:`ClusterControlManager.set_lifecycle`;
kraft's is ``leadership.BrokerLifecycle``) is called at each transition and writes the
partition changes around this manager's own records, in Kafka's order, bounded per result
(what does not fit is continued by :meth:`~ClusterControlManager.fence_stale_broker`'s runs
and by the broker's heartbeats).  Without one, only the registration records are written
(``has_leaderships`` then answers whether a broker still leads partitions, and
``broker_unclean_shutdown_handler`` may add the records that precede a new incarnation's
registration).  The registration record builders are public (``handle_broker_*``).

A new incarnation whose ``previous_broker_epoch`` (BrokerRegistration v3+, written by a broker
that shut down cleanly) equals the registered epoch restarted cleanly (Kafka's
``isCleanShutdown``); any other new incarnation is an unclean restart, as far as the
controller can tell.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from kraft_node.metadata.controller.errors import ApiError, ReplayError
from kraft_node.metadata.controller.heartbeats import (
    DEFAULT_SESSION_TIMEOUT_MS,
    BrokerControlState,
    BrokerHeartbeatManager,
    UsableBroker,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.metadata.versions import METADATA_VERSION_FEATURE_NAME, MetadataVersion
from kraft_node.protocol.errors import Errors
from kraft_storage.messages.metadata import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    RegisterControllerRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)
from kraft_storage.messages.runtime import Uuid
from kraft_storage.timeline import LATEST_EPOCH, TimelineHashMap

__all__ = [
    "ClusterControlManager", "BrokerRegistration", "ControllerRegistration", "Endpoint",
    "BrokerRegistrationReply", "BrokerHeartbeatReply", "DirectoryId", "SECURITY_PROTOCOLS", "BrokerLifecycleHandler",
]

log = logging.getLogger("kraft.controller.cluster")

#: Kafka's ``SecurityProtocol`` ids: a listener with any other id is refused.
SECURITY_PROTOCOLS: Mapping[int, str] = MappingProxyType(
    {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"})


class DirectoryId:
    """Kafka's reserved log directory ids (the first 100 Uuids are reserved, none is a real
    directory)."""

    #: a replica placed before directories were tracked (its directory is unknown, assumed online)
    MIGRATING = Uuid(0)
    #: a replica not yet assigned to a directory
    UNASSIGNED = Uuid(1)
    #: a replica whose directory is offline and unknown
    LOST = Uuid(2)

    @staticmethod
    def is_reserved(directory: Uuid) -> bool:
        return directory.most_significant_bits == 0 and 0 <= directory.least_significant_bits < 100

    @staticmethod
    def is_online(directory: Uuid, online: Sequence[Uuid]) -> bool:
        """Whether ``directory`` is online for a broker whose online directories are ``online``.
        An empty list means the broker registered before directories were tracked: every
        directory is assumed online (a broker halts when all its directories fail)."""
        if directory == DirectoryId.UNASSIGNED or directory == DirectoryId.MIGRATING:
            return True
        if directory == DirectoryId.LOST:
            return False
        return not online or directory in online


def _uuid_order(u: Uuid) -> tuple[int, int]:
    """Kafka's ``Uuid.compareTo``: the two signed 64-bit halves, most significant first."""
    return u.most_significant_bits, u.least_significant_bits


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A named listener and its security protocol (Kafka's ``common.Endpoint``; unlike
    :class:`kraft_node.raft.messages.Endpoint` it keeps the protocol, which registrations record)."""
    name: str
    security_protocol: int
    host: str
    port: int


def _endpoints(listeners: Iterable[Any], error: Callable[[str], Exception]) -> dict[str, Endpoint]:
    """Listeners (request or record entries) by name, first listener first (it is the one other
    nodes use).  ``error(message)`` builds what an unknown security protocol raises."""
    out: dict[str, Endpoint] = {}
    for listener in listeners:
        if listener.security_protocol not in SECURITY_PROTOCOLS:
            raise error(f"Unknown security protocol {listener.security_protocol} in listener {listener.name}")
        out[listener.name] = Endpoint(listener.name, listener.security_protocol, listener.host, listener.port)
    return out


@dataclass(frozen=True)
class BrokerRegistration:
    """One broker's registration, as of some offset (Kafka's ``metadata.BrokerRegistration``).
    Immutable: a change is a new object put in the timeline map, so a read at an older epoch
    keeps seeing the old one.  ``listeners`` keeps the registration's order (the first is the
    inter-broker listener); ``supported_features`` is ``{name: (min, max)}``; ``directories``
    are the broker's online log directories, sorted as Kafka sorts Uuids."""
    id: int
    epoch: int
    incarnation_id: Uuid
    listeners: Mapping[str, Endpoint]
    supported_features: Mapping[str, tuple[int, int]]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool = False
    directories: tuple[Uuid, ...] = ()

    @staticmethod
    def create(*, id: int, epoch: int, incarnation_id: Uuid, listeners: Iterable[Endpoint] = (),
               supported_features: Mapping[str, tuple[int, int]] | None = None, rack: str | None = None,
               fenced: bool = True, in_controlled_shutdown: bool = False, is_migrating_zk_broker: bool = False,
               directories: Iterable[Uuid] = ()) -> "BrokerRegistration":
        """A registration with its collections frozen and its directories sorted."""
        return BrokerRegistration(
            id, epoch, incarnation_id, MappingProxyType({e.name: e for e in listeners}),
            MappingProxyType(dict(supported_features or {})), rack, fenced, in_controlled_shutdown,
            is_migrating_zk_broker, tuple(sorted(directories, key=_uuid_order)))

    @staticmethod
    def from_record(record: RegisterBrokerRecord) -> "BrokerRegistration":
        """The registration a RegisterBrokerRecord describes; ReplayError if it names an
        unknown security protocol."""
        listeners = _endpoints(record.end_points, ReplayError)
        return BrokerRegistration.create(
            id=record.broker_id, epoch=record.broker_epoch, incarnation_id=record.incarnation_id,
            listeners=listeners.values(),
            supported_features={f.name: (f.min_supported_version, f.max_supported_version) for f in record.features},
            rack=record.rack, fenced=record.fenced, in_controlled_shutdown=record.in_controlled_shutdown,
            is_migrating_zk_broker=record.is_migrating_zk_broker, directories=record.log_dirs)

    def __hash__(self) -> int:
        return hash((self.id, self.epoch, self.incarnation_id))

    def clone_with(self, fenced: bool | None = None, in_controlled_shutdown: bool | None = None,
                   directories: Sequence[Uuid] | None = None) -> "BrokerRegistration":
        """This registration with the given changes (None: unchanged); ``self`` if nothing changes."""
        new_fenced = self.fenced if fenced is None else fenced
        new_ics = self.in_controlled_shutdown if in_controlled_shutdown is None else in_controlled_shutdown
        new_dirs = self.directories if directories is None else tuple(sorted(directories, key=_uuid_order))
        if (new_fenced, new_ics, new_dirs) == (self.fenced, self.in_controlled_shutdown, self.directories):
            return self
        return BrokerRegistration(self.id, self.epoch, self.incarnation_id, self.listeners,
                                  self.supported_features, self.rack, new_fenced, new_ics,
                                  self.is_migrating_zk_broker, new_dirs)

    def has_online_dir(self, directory: Uuid) -> bool:
        return DirectoryId.is_online(directory, self.directories)

    def directory_intersection(self, others: Iterable[Uuid]) -> list[Uuid]:
        """This broker's directories that are in ``others`` (in this broker's order)."""
        wanted = set(others)
        return [d for d in self.directories if d in wanted]

    def directory_difference(self, others: Iterable[Uuid]) -> list[Uuid]:
        """This broker's directories that are not in ``others``."""
        unwanted = set(others)
        return [d for d in self.directories if d not in unwanted]

    def to_record(self, metadata_version: MetadataVersion) -> ApiMessageAndVersion:
        """The RegisterBrokerRecord that recreates this registration (snapshots).  State the
        metadata version cannot carry is dropped with a warning (Kafka's loss handler)."""
        version = metadata_version.register_broker_record_version()
        record = RegisterBrokerRecord(
            broker_id=self.id, incarnation_id=self.incarnation_id, broker_epoch=self.epoch, rack=self.rack,
            fenced=self.fenced,
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                            security_protocol=e.security_protocol)
                        for e in self.listeners.values()],
            features=[RegisterBrokerRecord.BrokerFeature(name=n, min_supported_version=lo, max_supported_version=hi)
                      for n, (lo, hi) in self.supported_features.items()])
        if self.in_controlled_shutdown:
            if metadata_version.is_in_controlled_shutdown_state_supported():
                record.in_controlled_shutdown = True
            else:
                log.warning("Dropping the controlled-shutdown state of broker %d: metadata.version %s "
                            "cannot carry it.", self.id, metadata_version)
        if self.is_migrating_zk_broker:
            if metadata_version.is_migration_supported():
                record.is_migrating_zk_broker = True
            else:
                log.warning("Dropping the isMigratingZkBroker state of broker %d at metadata.version %s.",
                            self.id, metadata_version)
        if self.directories:
            if metadata_version.is_directory_assignment_supported():
                record.log_dirs = list(self.directories)
            else:
                log.warning("Dropping the log directories of broker %d: metadata.version %s cannot carry them.",
                            self.id, metadata_version)
        return ApiMessageAndVersion(record, version)


@dataclass(frozen=True)
class ControllerRegistration:
    """One controller's registration (Kafka's ``metadata.ControllerRegistration``): what
    feature levels it supports, so a feature upgrade can wait for every controller."""
    id: int
    incarnation_id: Uuid
    zk_migration_ready: bool
    listeners: Mapping[str, Endpoint]
    supported_features: Mapping[str, tuple[int, int]]

    @staticmethod
    def from_record(record: RegisterControllerRecord) -> "ControllerRegistration":
        listeners = _endpoints(record.end_points, ReplayError)
        return ControllerRegistration(
            record.controller_id, record.incarnation_id, record.zk_migration_ready, MappingProxyType(listeners),
            MappingProxyType({f.name: (f.min_supported_version, f.max_supported_version) for f in record.features}))

    def __hash__(self) -> int:
        return hash((self.id, self.incarnation_id))

    def to_record(self) -> ApiMessageAndVersion:
        return ApiMessageAndVersion(RegisterControllerRecord(
            controller_id=self.id, incarnation_id=self.incarnation_id, zk_migration_ready=self.zk_migration_ready,
            end_points=[RegisterControllerRecord.ControllerEndpoint(name=e.name, host=e.host, port=e.port,
                                                                    security_protocol=e.security_protocol)
                        for e in self.listeners.values()],
            features=[RegisterControllerRecord.ControllerFeature(name=n, min_supported_version=lo,
                                                                 max_supported_version=hi)
                      for n, (lo, hi) in self.supported_features.items()]), 0)


@dataclass(frozen=True, slots=True)
class BrokerRegistrationReply:
    """What a successful registration answers: the broker's epoch."""
    epoch: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatReply:
    """What a heartbeat answers (the BrokerHeartbeatResponse fields; ``in_controlled_shutdown``
    tells the controller to record the controlled shutdown offset once the batch is appended)."""
    is_caught_up: bool
    is_fenced: bool
    in_controlled_shutdown: bool
    should_shut_down: bool


#: BrokerHeartbeatReply for every combination of its flags, indexed by
#: ``is_caught_up << 3 | is_fenced << 2 | in_controlled_shutdown << 1 | should_shut_down``.
_HEARTBEAT_REPLIES: tuple[BrokerHeartbeatReply, ...] = tuple(
    BrokerHeartbeatReply(is_caught_up=bool(i & 8), is_fenced=bool(i & 4), in_controlled_shutdown=bool(i & 2),
                         should_shut_down=bool(i & 1))
    for i in range(16))
_FENCED = BrokerControlState.FENCED
_UNFENCED = BrokerControlState.UNFENCED
_CONTROLLED_SHUTDOWN = BrokerControlState.CONTROLLED_SHUTDOWN


class _FeatureControl(Protocol):
    def metadata_version(self, *, epoch: int = ...) -> MetadataVersion: ...


def _leads_nothing(_broker_id: int) -> bool:
    return False


def _no_shutdown_records(_broker_id: int, _records: list[ApiMessageAndVersion]) -> None:
    return None


class BrokerLifecycleHandler(Protocol):
    """What the replication side does when a broker changes state (Kafka's
    ReplicationControlManager.handleBroker* methods).  Each call appends to ``records`` --
    the partition changes, and this manager's own record for the transition (built with the
    public ``handle_broker_*`` methods) in Kafka's place -- within a bounded number of
    partition changes; what does not fit is continued by :meth:`continue_pending`.

    * ``broker_fenced``: out of every ISR, then the fence record (once complete);
      ``brokers_fenced`` the same for several brokers whose sessions expired together (a
      zone), their partition changes written topic by topic;
    * ``broker_unfenced``: the unfence record, then elections the broker makes possible;
    * ``broker_in_controlled_shutdown``: the in-controlled-shutdown record (if not already),
      then out of every ISR, leaderships first; ``broker_controlled_shutdown_heartbeat``
      continues that from a heartbeat that stays in controlled shutdown;
    * ``broker_shutdown``: a new incarnation registering (``is_clean_shutdown``: it proved a
      clean shutdown): the records before its RegisterBrokerRecord (may raise ApiError);
    * ``broker_unregistered``: out of every ISR, then the UnregisterBrokerRecord;
    * ``directories_offline``: out of the partitions in newly offline directories, then the
      registration change listing the online ones;
    * ``controlled_shutdown_in_progress``: the broker's controlled shutdown still has changes
      to write or to be seen (it must not be told to shut down yet);
    * ``take_controlled_shutdown_offset_raise``: once True if the controlled shutdown offset
      must move up to the current heartbeat's batch (leaderships moved after it was taken);
    * ``activate`` / ``deactivate``: the soft state follows the active role.
    """

    def broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None: ...

    def brokers_fenced(self, broker_ids: Sequence[int], records: list[ApiMessageAndVersion]) -> None: ...

    def broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None: ...

    def broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                      records: list[ApiMessageAndVersion]) -> None: ...

    def broker_controlled_shutdown_heartbeat(self, broker_id: int, broker_epoch: int,
                                             records: list[ApiMessageAndVersion]) -> None: ...

    def broker_shutdown(self, broker_id: int, is_clean_shutdown: bool,
                        records: list[ApiMessageAndVersion]) -> None: ...

    def broker_unregistered(self, broker_id: int, broker_epoch: int,
                            records: list[ApiMessageAndVersion]) -> None: ...

    def directories_offline(self, broker_id: int, broker_epoch: int, offline_dirs: Sequence[Uuid],
                            records: list[ApiMessageAndVersion]) -> None: ...

    def continue_pending(self, limit: int | None = None) -> ControllerResult[bool]: ...

    def controlled_shutdown_in_progress(self, broker_id: int) -> bool: ...

    def take_controlled_shutdown_offset_raise(self, broker_id: int) -> bool: ...

    def activate(self) -> None: ...

    def deactivate(self) -> None: ...


class _RegistrationRecordsOnly:
    """The lifecycle without a replication side: only this manager's records (and the
    constructor's ``broker_unclean_shutdown_handler`` before a new incarnation's registration)."""

    def __init__(self, cluster: "ClusterControlManager",
                 unclean_shutdown_handler: Callable[[int, list[ApiMessageAndVersion]], None]):
        self._cluster = cluster
        self._unclean_shutdown_handler = unclean_shutdown_handler

    def broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        self._cluster.handle_broker_fenced(broker_id, records)

    def brokers_fenced(self, broker_ids: Sequence[int], records: list[ApiMessageAndVersion]) -> None:
        for broker_id in broker_ids:
            self._cluster.handle_broker_fenced(broker_id, records)

    def broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None:
        self._cluster.handle_broker_unfenced(broker_id, broker_epoch, records)

    def broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                      records: list[ApiMessageAndVersion]) -> None:
        self._cluster.handle_broker_in_controlled_shutdown(broker_id, broker_epoch, records)

    def broker_controlled_shutdown_heartbeat(self, broker_id: int, broker_epoch: int,
                                             records: list[ApiMessageAndVersion]) -> None:
        return None

    def broker_shutdown(self, broker_id: int, is_clean_shutdown: bool, records: list[ApiMessageAndVersion]) -> None:
        self._unclean_shutdown_handler(broker_id, records)

    def broker_unregistered(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None:
        self._cluster.handle_broker_unregistered(broker_id, broker_epoch, records)

    def directories_offline(self, broker_id: int, broker_epoch: int, offline_dirs: Sequence[Uuid],
                            records: list[ApiMessageAndVersion]) -> None:
        self._cluster.handle_directories_offline(broker_id, broker_epoch, offline_dirs, records)

    def continue_pending(self, limit: int | None = None) -> ControllerResult[bool]:
        return ControllerResult.of([], False)

    def controlled_shutdown_in_progress(self, broker_id: int) -> bool:
        return False

    def take_controlled_shutdown_offset_raise(self, broker_id: int) -> bool:
        return False

    def activate(self) -> None:
        return None

    def deactivate(self) -> None:
        return None


# BrokerRegistrationChangeRecord field values (Kafka's BrokerRegistrationFencingChange and
# BrokerRegistrationInControlledShutdownChange): what each means for the registration.
_FENCING_CHANGE: Mapping[int, bool | None] = MappingProxyType({1: True, 0: None, -1: False})
_IN_CONTROLLED_SHUTDOWN_CHANGE: Mapping[int, bool | None] = MappingProxyType({0: None, 1: True})
_FENCE, _UNFENCE, _IN_CONTROLLED_SHUTDOWN = 1, -1, 1


#: The stale-broker task's back-pressure bound (records written but not committed): about two
#: bounded results of partition changes (up to 2,000 records each, see partition_changes.py) in
#: flight, no more.  With one (1,000 when results were 200-2,000 records) every result waited
#: for the previous one's commit: 30,000 changes took 1.8 s instead of 1.3-1.7 s (session 20).
DEFAULT_MAX_UNCOMMITTED_FOR_CONTINUATION = 4_000


class ClusterControlManager:
    """Broker and controller registrations, and the records that fence, unfence, shut down and
    unregister brokers.  See the module doc for the lifecycle.

    Invariants (at every registry epoch):

    * ``_register_offsets`` has exactly the keys of ``_brokers``; each value is at least the
      offset of that broker's RegisterBrokerRecord (a snapshot load gives the snapshot's offset);
    * ``_directory_owner`` maps each directory of each registration to that broker, and nothing
      else: no directory belongs to two brokers;
    * while active, every registered broker has a state in the heartbeat manager.

    The replication side: ``lifecycle`` (a :class:`BrokerLifecycleHandler`, also settable with
    :meth:`set_lifecycle`), and ``has_leaderships(broker_id)`` (default: leads nothing).
    Without a lifecycle, ``broker_unclean_shutdown_handler(broker_id, records)`` adds the
    records that precede a new incarnation's RegisterBrokerRecord (default: none)."""

    #: the record types :meth:`replay` applies (for the controller's replay table)
    RECORD_TYPES = (RegisterBrokerRecord, UnregisterBrokerRecord, FenceBrokerRecord, UnfenceBrokerRecord,
                    BrokerRegistrationChangeRecord, RegisterControllerRecord)

    def __init__(self, snapshot_registry: Any, *, cluster_id: str, feature_control: _FeatureControl,
                 clock_ms: Callable[[], int] = lambda: 0, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 has_leaderships: Callable[[int], bool] = _leads_nothing,
                 broker_unclean_shutdown_handler: Callable[[int, list[ApiMessageAndVersion]], None]
                 = _no_shutdown_records, lifecycle: BrokerLifecycleHandler | None = None) -> None:
        self._cluster_id = cluster_id
        self._feature_control = feature_control
        self._clock_ms = clock_ms
        self.session_timeout_ms = session_timeout_ms
        self._has_leaderships = has_leaderships
        self._lifecycle: BrokerLifecycleHandler = (
            lifecycle if lifecycle is not None else _RegistrationRecordsOnly(self, broker_unclean_shutdown_handler))
        self._brokers: Any = TimelineHashMap(snapshot_registry)           # id -> BrokerRegistration
        self._register_offsets: Any = TimelineHashMap(snapshot_registry)  # id -> offset
        #: the metadata.version last asked whether it assigns directories, and its answer
        #: (heartbeats ask every time; a version's answer never changes)
        self._directory_assignment_mv: MetadataVersion | None = None
        self._directory_assignment_supported = False
        self._controllers: Any = TimelineHashMap(snapshot_registry)       # id -> ControllerRegistration
        self._directory_owner: Any = TimelineHashMap(snapshot_registry)   # Uuid -> broker id
        self._heartbeat_manager: BrokerHeartbeatManager | None = None
        #: heartbeats that waited in the event queue past their deadline (Kafka's
        #: TimedOutBrokerHeartbeatCount); counts across activations
        self.timed_out_heartbeats = 0
        #: records written and not yet committed (the controller wires its offsets in; 0 when
        #: unknown): see :meth:`fence_stale_broker`
        self.uncommitted_records: Callable[[], int] = lambda: 0
        #: above this many uncommitted records the stale-broker task does not continue pending
        #: partition changes (they wait for the commits to catch up)
        self.max_uncommitted_for_continuation = DEFAULT_MAX_UNCOMMITTED_FOR_CONTINUATION

    @property
    def cluster_id(self) -> str:
        return self._cluster_id

    @property
    def lifecycle(self) -> BrokerLifecycleHandler:
        return self._lifecycle

    def set_lifecycle(self, lifecycle: BrokerLifecycleHandler) -> None:
        """Attach the replication side (it needs this manager to be built first).  If this
        manager is already active, the lifecycle is activated too."""
        self._lifecycle = lifecycle
        if self._heartbeat_manager is not None:
            lifecycle.activate()

    def _metadata_version(self) -> MetadataVersion:
        return self._feature_control.metadata_version()

    # -- active / standby ---------------------------------------------------------------------

    def activate(self, clock_ms: Callable[[], int] | None = None) -> None:
        """Become active: build the heartbeat manager and give every registered broker a fresh
        session, since a new controller cannot know when each broker last heartbeated (a live
        broker keeps it alive; a dead one is fenced one session timeout from now)."""
        if clock_ms is not None:
            self._clock_ms = clock_ms
        manager = BrokerHeartbeatManager(self._clock_ms, self.session_timeout_ms)
        now = self._clock_ms()
        for registration in self._brokers.values():
            manager.register(registration.id, registration.fenced)
            manager.tracker.update_contact_time(registration.id, registration.epoch, now)
        self._heartbeat_manager = manager
        self._lifecycle.activate()

    def deactivate(self) -> None:
        """Become a standby: the soft state is dropped (the next activation rebuilds it)."""
        self._heartbeat_manager = None
        self._lifecycle.deactivate()

    @property
    def active(self) -> bool:
        return self._heartbeat_manager is not None

    @property
    def heartbeat_manager(self) -> BrokerHeartbeatManager:
        """The heartbeat manager; RuntimeError on a standby."""
        if self._heartbeat_manager is None:
            raise RuntimeError("ClusterControlManager is not active.")
        return self._heartbeat_manager

    def track_broker_heartbeat(self, broker_id: int, broker_epoch: int) -> bool:
        """The RPC path's first step for a BrokerHeartbeat, before the heartbeat event is
        queued: record the contact time, so a busy event loop cannot get a live broker fenced.
        False on a standby (the caller answers NOT_CONTROLLER)."""
        manager = self._heartbeat_manager
        if manager is None:
            return False
        manager.tracker.update_contact_time(broker_id, broker_epoch)
        return True

    # -- broker registration ------------------------------------------------------------------

    def register_broker(self, request: Any, broker_epoch: int,
                        finalized_features: Mapping[str, int]) -> ControllerResult[BrokerRegistrationReply]:
        """Answer a BrokerRegistrationRequest.  ``broker_epoch``: the offset the controller will
        write the records at (the new epoch, if this is a new incarnation).
        ``finalized_features``: ``{name: level}`` of every finalized feature (kraft.version
        included), which the broker must support.  Raises ApiError with Kafka's codes and
        messages; the records are one atomic batch, the cleanup of a previous incarnation (if any)
        before its RegisterBrokerRecord."""
        manager = self.heartbeat_manager
        if request.cluster_id != self._cluster_id:
            raise ApiError(Errors.INCONSISTENT_CLUSTER_ID,
                           f"Expected cluster ID {self._cluster_id}, but got cluster ID {request.cluster_id}")
        broker_id = request.broker_id
        existing: BrokerRegistration | None = self._brokers.get(broker_id)
        prev_incarnation = existing.incarnation_id if existing is not None else None
        if existing is not None and request.incarnation_id != prev_incarnation \
                and manager.has_valid_session(broker_id, existing.epoch):
            raise ApiError(Errors.DUPLICATE_BROKER_REGISTRATION, "Another broker is registered with that broker id.")
        if request.is_migrating_zk_broker:
            raise ApiError(Errors.BROKER_ID_NOT_REGISTERED, "Controller does not support registering ZK brokers.")
        mv = self._metadata_version()
        if mv.is_directory_assignment_supported():
            self._check_directories(broker_id, request.log_dirs)
        listeners = _endpoints(request.listeners, lambda msg: ApiError(Errors.UNKNOWN_SERVER_ERROR, msg))

        features = self._registration_features(broker_id, request.features, finalized_features)
        record = RegisterBrokerRecord(
            broker_id=broker_id, is_migrating_zk_broker=False, incarnation_id=request.incarnation_id,
            rack=request.rack,
            end_points=[RegisterBrokerRecord.BrokerEndpoint(name=e.name, host=e.host, port=e.port,
                                                            security_protocol=e.security_protocol)
                        for e in listeners.values()],
            features=features)
        if mv.is_directory_assignment_supported():
            record.log_dirs = list(request.log_dirs)

        records: list[ApiMessageAndVersion] = []
        new_incarnation = request.incarnation_id != prev_incarnation
        if new_incarnation:
            # Clean only if the broker proves it: the epoch it shut down at is the registered one.
            is_clean = existing is not None and request.previous_broker_epoch == existing.epoch
            self._lifecycle.broker_shutdown(broker_id, is_clean, records)
            if existing is None:
                log.info("No previous registration found for broker %d. New incarnation ID is %s. Generated %d "
                         "record(s) to clean up previous incarnations. New broker epoch is %d.",
                         broker_id, request.incarnation_id, len(records), broker_epoch)
            else:
                log.info("Registering a new incarnation of broker %d. Previous incarnation ID was %s; new "
                         "incarnation ID is %s. Generated %d record(s) to clean up previous incarnations. "
                         "Broker epoch will become %d.", broker_id, prev_incarnation, request.incarnation_id,
                         len(records), broker_epoch)
            record.broker_epoch = broker_epoch
            record.fenced = True
        else:
            assert existing is not None
            log.info("Amending registration of broker %d, incarnation ID %s. Broker epoch remains %d.",
                     broker_id, request.incarnation_id, existing.epoch)
            record.fenced = existing.fenced
            record.in_controlled_shutdown = existing.in_controlled_shutdown
            record.broker_epoch = existing.epoch
        records.append(ApiMessageAndVersion(record, mv.register_broker_record_version()))

        if new_incarnation:
            # The old incarnation's soft state and session end here; the new one starts fenced.
            manager.remove(broker_id)
            if existing is not None:
                manager.remove_session(broker_id, existing.epoch)
        manager.register(broker_id, record.fenced)
        return ControllerResult.atomic_of(records, BrokerRegistrationReply(record.broker_epoch))

    def _check_directories(self, broker_id: int, log_dirs: Sequence[Uuid]) -> None:
        if not log_dirs:
            raise ApiError(Errors.INVALID_REGISTRATION, "No directories specified in request")
        if any(DirectoryId.is_reserved(d) for d in log_dirs):
            raise ApiError(Errors.INVALID_REGISTRATION, "Reserved directory ID in request")
        if len(set(log_dirs)) != len(log_dirs):
            raise ApiError(Errors.INVALID_REGISTRATION, "Duplicate directory ID in request")
        for directory in log_dirs:
            owner = self._directory_owner.get(directory)
            if owner is not None and owner != broker_id:
                raise ApiError(Errors.INVALID_REGISTRATION,
                               f"Broker {owner} is already registered with directory {directory}")

    def _registration_features(self, broker_id: int, requested: Sequence[Any],
                               finalized: Mapping[str, int]) -> list[RegisterBrokerRecord.BrokerFeature]:
        """The broker's features for its record, after checking that its range covers every
        finalized level.  A broker that does not list metadata.version supports only the
        minimum; one that does not list another finalized feature supports only level 0."""
        out = []
        unverified = dict(finalized)
        for feature in requested:
            out.append(self._registration_feature(broker_id, finalized, feature.name,
                                                  feature.min_supported_version, feature.max_supported_version))
            unverified.pop(feature.name, None)
        if not any(f.name == METADATA_VERSION_FEATURE_NAME for f in requested):
            lowest = MetadataVersion.MINIMUM_VERSION.feature_level
            out.append(self._registration_feature(broker_id, finalized, METADATA_VERSION_FEATURE_NAME, lowest, lowest))
            unverified.pop(METADATA_VERSION_FEATURE_NAME, None)
        for name, level in unverified.items():
            if level != 0:
                self._registration_feature(broker_id, finalized, name, 0, 0)
        return out

    @staticmethod
    def _registration_feature(broker_id: int, finalized: Mapping[str, int], name: str, lo: int,
                              hi: int) -> RegisterBrokerRecord.BrokerFeature:
        # A level not in the map is 0 ("not finalized"); for metadata.version, which is always
        # finalized, it can only mean the caller knows no better than the minimum.
        level = finalized.get(name, MetadataVersion.MINIMUM_VERSION.feature_level
                              if name == METADATA_VERSION_FEATURE_NAME else 0)
        if not lo <= level <= hi:
            raise ApiError(Errors.UNSUPPORTED_VERSION,
                           f"Unable to register because the broker does not support finalized version {level} of "
                           f"{name}. The broker wants a version between {lo} and {hi}, inclusive.")
        if name not in finalized:
            log.debug("Broker %d registered with version range (%d, %d] of feature %s, which the controller "
                      "does not know or has finalized at 0.", broker_id, lo, hi, name)
        return RegisterBrokerRecord.BrokerFeature(name=name, min_supported_version=lo, max_supported_version=hi)

    def register_controller(self, request: Any) -> ControllerResult[None]:
        """Answer a ControllerRegistrationRequest with a RegisterControllerRecord (needs
        metadata.version 3.7-IV0).  A controller registers each time it starts; the record
        replaces its previous registration."""
        mv = self._metadata_version()
        if not mv.is_controller_registration_supported():
            raise ApiError(Errors.UNSUPPORTED_VERSION,
                           "The current MetadataVersion is too old to support controller registrations.")
        listeners = _endpoints(request.listeners, lambda msg: ApiError(Errors.UNKNOWN_SERVER_ERROR, msg))
        record = RegisterControllerRecord(
            controller_id=request.controller_id, incarnation_id=request.incarnation_id, zk_migration_ready=False,
            end_points=[RegisterControllerRecord.ControllerEndpoint(name=e.name, host=e.host, port=e.port,
                                                                    security_protocol=e.security_protocol)
                        for e in listeners.values()],
            features=[RegisterControllerRecord.ControllerFeature(name=f.name,
                                                                 min_supported_version=f.min_supported_version,
                                                                 max_supported_version=f.max_supported_version)
                      for f in request.features])
        return ControllerResult.atomic_of(
            [ApiMessageAndVersion(record, mv.register_controller_record_version())], None)

    def unregister_broker(self, broker_id: int) -> ControllerResult[None]:
        """An operator's UnregisterBroker: remove the registration (the broker may register again)."""
        registration: BrokerRegistration | None = self._brokers.get(broker_id)
        if registration is None:
            raise ApiError(Errors.BROKER_ID_NOT_REGISTERED, f"Broker ID {broker_id} is not currently registered")
        records: list[ApiMessageAndVersion] = []
        self._lifecycle.broker_unregistered(broker_id, registration.epoch, records)
        return ControllerResult.of(records, None)

    def check_broker_epoch(self, broker_id: int, broker_epoch: int) -> None:
        """ApiError(STALE_BROKER_EPOCH) unless ``broker_id`` is registered at ``broker_epoch``:
        a request from a previous incarnation must not act for the current one."""
        registration: BrokerRegistration | None = self._brokers.get(broker_id)
        if registration is None:
            raise ApiError(Errors.STALE_BROKER_EPOCH, f"No broker registration found for broker id {broker_id}")
        if registration.epoch != broker_epoch:
            raise ApiError(Errors.STALE_BROKER_EPOCH,
                           f"Expected broker epoch {registration.epoch}, but got broker epoch {broker_epoch}")

    # -- heartbeats ---------------------------------------------------------------------------

    def process_broker_heartbeat(self, request: Any) -> ControllerResult[BrokerHeartbeatReply]:
        """The heartbeat event (on the controller loop, after :meth:`track_broker_heartbeat`):
        move the broker through the state machine and write the records of its transition.
        If the reply says ``in_controlled_shutdown``, the controller must call
        :meth:`update_controlled_shutdown_offset` with the end offset of the batch it appended."""
        records: list[ApiMessageAndVersion] = []
        reply = self.broker_heartbeat(request, records)
        return ControllerResult(records, reply, False)

    def broker_heartbeat(self, request: Any, records: list[ApiMessageAndVersion]) -> BrokerHeartbeatReply:
        """:meth:`process_broker_heartbeat` for the controller's heartbeat event: the records go
        into ``records`` (a non-atomic result's), the reply is returned (no result object per
        heartbeat)."""
        broker_id = request.broker_id
        broker_epoch = request.broker_epoch
        register_offset: int | None = self._register_offsets.get(broker_id)
        if register_offset is None:
            raise ApiError(Errors.STALE_BROKER_EPOCH,
                           f"Receive a heartbeat from broker {broker_id} before registration")
        registration: BrokerRegistration | None = self._brokers.get(broker_id)
        if registration is None or registration.epoch != broker_epoch:
            self.check_broker_epoch(broker_id, broker_epoch)  # raises, with Kafka's message
        manager = self._heartbeat_manager
        if manager is None:
            raise RuntimeError("ClusterControlManager is not active.")
        lifecycle = self._lifecycle
        states = manager.calculate_next_broker_state(
            broker_id, request, register_offset,
            lambda: self._has_leaderships(broker_id) or lifecycle.controlled_shutdown_in_progress(broker_id))
        nxt = states.next
        # the reply's flags (BrokerControlState's properties, spelled out: this runs per heartbeat)
        if nxt is _UNFENCED:
            fenced = in_controlled_shutdown = should_shut_down = False
        elif nxt is _FENCED:
            fenced, in_controlled_shutdown, should_shut_down = True, False, False
        elif nxt is _CONTROLLED_SHUTDOWN:
            fenced, in_controlled_shutdown, should_shut_down = False, True, False
        else:  # SHUTDOWN_NOW
            fenced, in_controlled_shutdown, should_shut_down = True, False, True
        if states.current is not nxt:
            if fenced:  # FENCED or SHUTDOWN_NOW
                lifecycle.broker_fenced(broker_id, records)
            elif nxt is _UNFENCED:
                lifecycle.broker_unfenced(broker_id, broker_epoch, records)
            else:  # CONTROLLED_SHUTDOWN
                lifecycle.broker_in_controlled_shutdown(broker_id, broker_epoch, records)
        elif in_controlled_shutdown:
            lifecycle.broker_controlled_shutdown_heartbeat(broker_id, broker_epoch, records)
        manager.touch(broker_id, fenced, request.current_metadata_offset)
        if should_shut_down:
            # The broker exits now: its session ends, so its next incarnation may register at once.
            manager.remove_session(broker_id, broker_epoch)
        mv = self._feature_control.metadata_version()  # (_metadata_version, without the call)
        if mv is not self._directory_assignment_mv:  # the answer per metadata.version, kept
            self._directory_assignment_mv = mv
            self._directory_assignment_supported = mv.is_directory_assignment_supported()
        if self._directory_assignment_supported:
            lifecycle.directories_offline(broker_id, broker_epoch, request.offline_log_dirs, records)
        # replies are immutable and few: one shared instance per combination of the four flags
        caught_up: bool = request.current_metadata_offset >= register_offset
        return _HEARTBEAT_REPLIES[caught_up << 3 | fenced << 2 | in_controlled_shutdown << 1 | should_shut_down]

    def update_controlled_shutdown_offset(self, broker_id: int, batch_end_offset: int) -> None:
        """After a heartbeat put ``broker_id`` in controlled shutdown: it may finish once every
        active broker has read up to ``batch_end_offset`` (the last offset of that batch).  Set
        once (later heartbeats keep the first batch's offset), unless the lifecycle moved more
        of its leaderships since: then it moves up to this batch."""
        if self._lifecycle.take_controlled_shutdown_offset_raise(broker_id):
            self.heartbeat_manager.raise_controlled_shutdown_offset(broker_id, batch_end_offset)
        else:
            self.heartbeat_manager.update_controlled_shutdown_offset(broker_id, batch_end_offset)

    def process_expired_broker_heartbeat(self, request: Any) -> None:
        """A heartbeat whose event timed out in the queue: no transitions (the controller is
        overloaded), but the broker's reported offset still counts and it is not fenced for the
        controller's slowness (its contact time was recorded on arrival)."""
        broker_id = request.broker_id
        self.check_broker_epoch(broker_id, request.broker_epoch)
        registration: BrokerRegistration = self._brokers.get(broker_id)
        self.heartbeat_manager.touch(broker_id, registration.fenced, request.current_metadata_offset)
        self.timed_out_heartbeats += 1
        log.error("The controller event queue is overloaded: timed out heartbeat from broker %d.", broker_id)

    def fence_stale_broker(self, now_ms: int | None = None) -> ControllerResult[bool]:
        """The periodic task: first continue the lifecycle's unfinished partition changes (one
        bounded result), then take every expired session and fence the brokers whose expired
        session is still their current, unfenced one -- together (``brokers_fenced``), so the
        brokers of a zone that went dark leave their partitions in one walk over the topics.
        The response is True if a session was removed or changes remain (run again now),
        False if neither."""
        manager = self.heartbeat_manager
        if self.uncommitted_records() > self.max_uncommitted_for_continuation:
            # Back-pressure: writing more changes than the quorum commits only lengthens the
            # queue in front of every heartbeat and registration (their answers wait for their
            # own commit), until a broker in the middle of a controlled shutdown, whose
            # heartbeats answer late, is fenced by its own session (measured, session 15: gaps
            # of 0.65-1.9 s between its heartbeats).  Heartbeats still carry the changes on.
            records: list[ApiMessageAndVersion] = []
            more = True
        else:
            pending = self._lifecycle.continue_pending()
            records = list(pending.records)
            more = bool(pending.response) or bool(records)
        expired = manager.tracker.remove_all_expired(now_ms)
        if not expired:
            return ControllerResult.of(records, more)
        to_fence: list[int] = []
        for broker_id, epoch in expired:
            registration: BrokerRegistration | None = self._brokers.get(broker_id)
            if registration is None:
                log.info("Removed the expired session of broker %d, epoch %d: the broker is not registered.",
                         broker_id, epoch)
            elif registration.epoch != epoch:
                log.info("Removed the expired session of broker %d, epoch %d: its current epoch is %d.",
                         broker_id, epoch, registration.epoch)
            elif manager.is_fenced(broker_id):
                log.debug("Removed the expired session of broker %d, epoch %d: it is already fenced.",
                          broker_id, epoch)
            else:
                log.info("Fencing broker %d, epoch %d, because its session has timed out.", broker_id, epoch)
                to_fence.append(broker_id)
        if len(to_fence) == 1:
            self._lifecycle.broker_fenced(to_fence[0], records)
        elif to_fence:
            self._lifecycle.brokers_fenced(to_fence, records)
        for broker_id in to_fence:
            manager.fence(broker_id)
        return ControllerResult.of(records, True)

    # -- the records of each transition (the replication manager adds partition changes) --------

    def handle_broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        registration: BrokerRegistration | None = self._brokers.get(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't find broker registration for broker {broker_id}")
        mv = self._metadata_version()
        if mv.is_broker_registration_change_record_supported():
            records.append(ApiMessageAndVersion(BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=registration.epoch, fenced=_FENCE),
                mv.broker_registration_change_record_version()))
        else:
            records.append(ApiMessageAndVersion(FenceBrokerRecord(id=broker_id, epoch=registration.epoch),
                                                mv.fence_broker_record_version()))

    def handle_broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None:
        mv = self._metadata_version()
        if mv.is_broker_registration_change_record_supported():
            records.append(ApiMessageAndVersion(BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=broker_epoch, fenced=_UNFENCE),
                mv.broker_registration_change_record_version()))
        else:
            records.append(ApiMessageAndVersion(UnfenceBrokerRecord(id=broker_id, epoch=broker_epoch),
                                                mv.fence_broker_record_version()))

    def handle_broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                             records: list[ApiMessageAndVersion]) -> None:
        mv = self._metadata_version()
        if mv.is_in_controlled_shutdown_state_supported() and not self.in_controlled_shutdown(broker_id):
            records.append(ApiMessageAndVersion(BrokerRegistrationChangeRecord(
                broker_id=broker_id, broker_epoch=broker_epoch, in_controlled_shutdown=_IN_CONTROLLED_SHUTDOWN),
                mv.broker_registration_change_record_version(in_controlled_shutdown=True)))

    def handle_broker_unregistered(self, broker_id: int, broker_epoch: int,
                                   records: list[ApiMessageAndVersion]) -> None:
        records.append(ApiMessageAndVersion(UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=broker_epoch), 0))

    def handle_directories_offline(self, broker_id: int, broker_epoch: int, offline_dirs: Sequence[Uuid],
                                   records: list[ApiMessageAndVersion]) -> None:
        """A heartbeat reported failed log directories: if any was online, record the broker's
        remaining online ones."""
        registration: BrokerRegistration = self._brokers.get(broker_id)
        if not registration.directory_intersection(offline_dirs):
            return
        online = registration.directory_difference(offline_dirs)
        records.append(ApiMessageAndVersion(BrokerRegistrationChangeRecord(
            broker_id=broker_id, broker_epoch=broker_epoch, log_dirs=online),
            self._metadata_version().broker_registration_change_record_version(log_dirs=True)))
        log.debug("Directories %s of broker %d went offline; online now: %s.",
                  registration.directory_intersection(offline_dirs), broker_id, online)

    # -- replay -------------------------------------------------------------------------------

    def replay(self, message: Any, offset: int) -> None:
        """Apply one record at ``offset``; ReplayError if it cannot be (fatal everywhere)."""
        if isinstance(message, RegisterBrokerRecord):
            self._replay_register_broker(message, offset)
        elif isinstance(message, BrokerRegistrationChangeRecord):
            if message.fenced not in _FENCING_CHANGE:
                raise ReplayError(f"Unable to replay {message!r}: unknown value for fenced field: "
                                  f"{message.fenced & 0xff:x}")
            if message.in_controlled_shutdown not in _IN_CONTROLLED_SHUTDOWN_CHANGE:
                raise ReplayError(f"Unable to replay {message!r}: unknown value for inControlledShutdown field: "
                                  f"{message.in_controlled_shutdown & 0xff:x}")
            # An empty LogDirs means "no change" (the field's default), as in Kafka.
            self._replay_registration_change(message, message.broker_id, message.broker_epoch,
                                             _FENCING_CHANGE[message.fenced],
                                             _IN_CONTROLLED_SHUTDOWN_CHANGE[message.in_controlled_shutdown],
                                             message.log_dirs or None)
        elif isinstance(message, FenceBrokerRecord):
            self._replay_registration_change(message, message.id, message.epoch, True, None, None)
        elif isinstance(message, UnfenceBrokerRecord):
            self._replay_registration_change(message, message.id, message.epoch, False, None, None)
        elif isinstance(message, UnregisterBrokerRecord):
            self._replay_unregister_broker(message)
        elif isinstance(message, RegisterControllerRecord):
            registration = ControllerRegistration.from_record(message)
            previous = self._controllers.put(message.controller_id, registration)
            log.info("Replayed RegisterControllerRecord of controller %d (incarnation %s)%s.",
                     message.controller_id, message.incarnation_id,
                     "" if previous is None else f"; the previous incarnation was {previous.incarnation_id}")
        else:
            raise ReplayError(f"ClusterControlManager cannot replay {type(message).__name__}")

    def _replay_register_broker(self, record: RegisterBrokerRecord, offset: int) -> None:
        registration = BrokerRegistration.from_record(record)
        broker_id = record.broker_id
        previous: BrokerRegistration | None = self._brokers.get(broker_id)
        self._update_directories(broker_id, previous.directories if previous is not None else (),
                                 registration.directories)
        self._brokers.put(broker_id, registration)
        self._register_offsets.put(broker_id, offset)
        manager = self._heartbeat_manager
        if manager is not None:
            if previous is not None:
                manager.remove(broker_id)
            manager.register(broker_id, record.fenced)
        if previous is None:
            log.info("Replayed the initial RegisterBrokerRecord of broker %d: %r", broker_id, record)
        elif previous.incarnation_id == record.incarnation_id:
            log.info("Replayed a RegisterBrokerRecord amending the registration of broker %d: %r", broker_id, record)
        else:
            log.info("Replayed a RegisterBrokerRecord of a new incarnation of broker %d: %r", broker_id, record)

    def _replay_unregister_broker(self, record: UnregisterBrokerRecord) -> None:
        broker_id = record.broker_id
        registration: BrokerRegistration | None = self._brokers.get(broker_id)
        if registration is None:
            raise ReplayError(f"Unable to replay {record!r}: no broker registration found for that id")
        if registration.epoch != record.broker_epoch:
            raise ReplayError(f"Unable to replay {record!r}: no broker registration with that epoch found")
        self._update_directories(broker_id, registration.directories, ())
        self._brokers.remove(broker_id)
        self._register_offsets.remove(broker_id)
        manager = self._heartbeat_manager
        if manager is not None:
            manager.remove(broker_id)
            manager.remove_session(broker_id, registration.epoch)
        log.info("Replayed %r", record)

    def _replay_registration_change(self, record: Any, broker_id: int, broker_epoch: int, fenced: bool | None,
                                    in_controlled_shutdown: bool | None, directories: Sequence[Uuid] | None) -> None:
        current: BrokerRegistration | None = self._brokers.get(broker_id)
        if current is None:
            raise ReplayError(f"Unable to replay {record!r}: no broker registration found for that id")
        if current.epoch != broker_epoch:
            raise ReplayError(f"Unable to replay {record!r}: no broker registration with that epoch found")
        changed = current.clone_with(fenced, in_controlled_shutdown, directories)
        if changed is current:
            log.info("Ignoring a no-op registration change for broker %d: %r", broker_id, record)
            return
        self._update_directories(broker_id, current.directories, changed.directories)
        self._brokers.put(broker_id, changed)
        if self._heartbeat_manager is not None:
            self._heartbeat_manager.register(broker_id, changed.fenced)
        log.info("Replayed %s modifying the registration of broker %d: %r", type(record).__name__, broker_id, record)

    def _update_directories(self, broker_id: int, removed: Sequence[Uuid], added: Sequence[Uuid]) -> None:
        owners = self._directory_owner
        for directory in removed:
            if owners.get(directory) != broker_id:
                raise ReplayError(f"BUG: directory {directory} not assigned to broker {broker_id}")
            owners.remove(directory)
        for directory in added:
            owner = owners.get(directory)
            if owner is not None and owner != broker_id:
                raise ReplayError(f"BUG: directory {directory} already assigned to broker {owner}")
            owners.put(directory, broker_id)

    # -- reads --------------------------------------------------------------------------------

    def registration(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> BrokerRegistration | None:
        registration: BrokerRegistration | None = self._brokers.get(broker_id, epoch=epoch)
        return registration

    def brokers(self, *, epoch: int = LATEST_EPOCH) -> dict[int, BrokerRegistration]:
        """Every broker registration, by id."""
        return dict(self._brokers.items(epoch))

    def register_broker_record_offset(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> int | None:
        """The offset of the broker's RegisterBrokerRecord (at least), or None if unregistered."""
        offset: int | None = self._register_offsets.get(broker_id, epoch=epoch)
        return offset

    def is_unfenced(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> bool:
        registration = self._brokers.get(broker_id, epoch=epoch)
        return registration is not None and not registration.fenced

    def in_controlled_shutdown(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> bool:
        registration = self._brokers.get(broker_id, epoch=epoch)
        return registration is not None and registration.in_controlled_shutdown

    def is_active(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> bool:
        """Unfenced and not in controlled shutdown (a candidate for leadership)."""
        registration = self._brokers.get(broker_id, epoch=epoch)
        return registration is not None and not registration.fenced and not registration.in_controlled_shutdown

    def fenced_broker_ids(self, *, epoch: int = LATEST_EPOCH) -> set[int]:
        return {r.id for r in self._brokers.values(epoch) if r.fenced}

    def controller_registration(self, controller_id: int, *,
                                epoch: int = LATEST_EPOCH) -> ControllerRegistration | None:
        registration: ControllerRegistration | None = self._controllers.get(controller_id, epoch=epoch)
        return registration

    def controllers(self, *, epoch: int = LATEST_EPOCH) -> dict[int, ControllerRegistration]:
        return dict(self._controllers.items(epoch))

    def has_online_dir(self, broker_id: int, directory: Uuid, *, epoch: int = LATEST_EPOCH) -> bool:
        """Whether ``directory`` is online on ``broker_id`` (False for an unregistered broker)."""
        registration = self._brokers.get(broker_id, epoch=epoch)
        return registration is not None and registration.has_online_dir(directory)

    def default_dir(self, broker_id: int, *, epoch: int = LATEST_EPOCH) -> Uuid:
        """The directory a new replica on ``broker_id`` goes to: its only directory; MIGRATING if
        it registered none; else UNASSIGNED (the broker chooses).  UNASSIGNED for an unknown
        broker, so the caller's own "not registered" error is the one reported."""
        registration: BrokerRegistration | None = self._brokers.get(broker_id, epoch=epoch)
        if registration is None:
            return DirectoryId.UNASSIGNED
        if not registration.directories:
            return DirectoryId.MIGRATING
        if len(registration.directories) == 1:
            return registration.directories[0]
        return DirectoryId.UNASSIGNED

    def usable_brokers(self) -> Iterator[UsableBroker]:
        """Brokers a replica may be placed on (active controller only)."""
        brokers = self._brokers
        return self.heartbeat_manager.usable_brokers(lambda broker_id: brokers.get(broker_id).rack)

    # -- ClusterFeatureSupportDescriber (features.py) ------------------------------------------

    def broker_supported(self) -> list[tuple[int, Mapping[str, tuple[int, int]]]]:
        """``(broker id, {feature: (min, max)})`` of every registered broker."""
        return [(r.id, r.supported_features) for r in self._brokers.values()]

    def controller_supported(self) -> list[tuple[int, Mapping[str, tuple[int, int]]]]:
        """``(controller id, {feature: (min, max)})`` of every registered controller; ApiError
        (UNSUPPORTED_VERSION) below 3.7-IV0, where controllers do not register (so what they
        support cannot be known)."""
        if not self._metadata_version().is_controller_registration_supported():
            raise ApiError(Errors.UNSUPPORTED_VERSION,
                           "The current MetadataVersion is too old to support controller registrations.")
        return [(r.id, r.supported_features) for r in self._controllers.values()]

    # -- metrics and snapshots ----------------------------------------------------------------

    def active_broker_count(self, *, epoch: int = LATEST_EPOCH) -> int:
        """Registered brokers that are not fenced (Kafka's ActiveBrokerCount)."""
        return sum(1 for r in self._brokers.values(epoch) if not r.fenced)

    def fenced_broker_count(self, *, epoch: int = LATEST_EPOCH) -> int:
        """Registered brokers that are fenced (Kafka's FencedBrokerCount)."""
        return sum(1 for r in self._brokers.values(epoch) if r.fenced)

    def snapshot_records(self, epoch: int) -> Iterator[ApiMessageAndVersion]:
        """The records that rebuild this state as of registry snapshot ``epoch``: controllers,
        then brokers, each in id order (a deterministic snapshot)."""
        mv = self._feature_control.metadata_version(epoch=epoch)
        for controller_id in sorted(self._controllers.keys(epoch)):
            yield self._controllers.get(controller_id, epoch=epoch).to_record()
        for broker_id in sorted(self._brokers.keys(epoch)):
            yield self._brokers.get(broker_id, epoch=epoch).to_record(mv)
