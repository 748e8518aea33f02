"""``KraftNode``: one node -- its config, its directory locks, its listener and the routing table.

The node is what a process runs (``kraft-server-start``).  It

* checks the storage it was given: the log dirs are locked (Kafka's ``.lock``) before
  anything in them is read, and the metadata log dir's ``meta.properties`` must be
  formatted for this node id, every other log dir's for the same cluster and node;
* builds the Raft driver (:class:`kraft_node.raft.io.driver.RaftDriver`) from the
  :class:`NodeConfig` -- the driver itself never sees the config file;
* owns the listener (a :class:`KafkaServer` on the controller listener, with its TLS
  context) and the routing table ``api_key -> handler``: the driver registers the Raft
  RPCs and DescribeQuorum; the node answers DescribeCluster (as a CONTROLLER endpoint); the
  controller registers its RPCs (:class:`~kraft_node.server.controller.ControllerServer`),
  the broker will register theirs here.  ApiVersions is answered from the same table (the
  keys with a handler, plus ApiVersions), with the supported and finalized features when
  the node runs a controller;
* runs the QuorumController when asked to (``from_config(controller=True)``, what
  ``kraft-server-start`` does) and ``process.roles`` has ``controller``: built before the
  driver starts, so its Raft listener sees the first poll, and closed before the driver.
  A fatal controller fault stops the driver (``fatal``), so the node stops leading.  The
  controller registers itself with the active controller (KIP-919) once the
  metadata.version allows it.

Why ``controller`` is an option: a KraftNode is also the Raft-only node the tests and the
demo writer run (``--demo-writer`` appends opaque records, as Kafka's TestRaftServer does
on its own topic); a controller would have to refuse them as a fatal fault.  For the same
reason a log that already holds such records (the first data record is not a metadata
record frame) runs Raft only even with ``controller=True``, and says so once at INFO.

Failed starts close what they opened, in reverse order, so the directory is left byte for
byte as it was found and the locks are free again (issue 19).
"""
from __future__ import annotations

import logging
import os
import random
import re
from typing import Callable

from kraft_node.metrics import ControllerMetrics, NodeMetrics
from kraft_node.network import KafkaServer
from kraft_node.network.envelope import envelope_handler
from kraft_node.network.server import DEFERRED
from kraft_node.protocol.api_keys import ApiKeys, answer_api_versions
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.describe_cluster import DescribeClusterResponse
from kraft_node.raft.io.driver import DriverError, RaftDriver, dir_uuid
from kraft_node.raft.messages import Endpoint, ReplicaKey
from kraft_node.server.broker import BrokerServer
from kraft_node.server.config import NodeConfig
from kraft_node.server.controller import ControllerRegistrationManager, ControllerServer, NodeControllerSettings
from kraft_node.server.metadata import NodeMetadata
from kraft_storage.dirlock import DirLocks, lock_dirs
from kraft_storage.errors import KraftStorageError
from kraft_storage.meta_properties import is_kafka_uuid, read_meta_properties

log = logging.getLogger("kraft.server")


class KraftNode:
    """One KRaft node: the Raft driver behind the node's listener.  See the module doc."""

    def __init__(self, config: NodeConfig, driver: RaftDriver, *, dir_locks: DirLocks | None = None,
                 controller: ControllerServer | None = None, metrics: NodeMetrics | None = None,
                 metadata: NodeMetadata | None = None, log_dir_ids: list | None = None):
        self.config = config
        self.driver = driver
        self.node_id = config.node_id
        self.cluster_id = driver.cluster_id
        #: the log dirs' locks when this node took them (from_config), released by close()
        self._dir_locks = dir_locks
        #: api key -> handler: what the listener serves, and what ApiVersions advertises
        self.routes: dict[int, Callable] = {}
        self.server: KafkaServer | None = None
        #: the QuorumController and its RPCs, when this node runs one
        self.controller = controller
        #: the node's metrics registry (Raft, storage recovery, controller), served on
        #: ``kraft.metrics.listener`` when set; ``metrics_address`` is the bound address
        self.metrics = metrics if metrics is not None else NodeMetrics(driver)
        self.metrics_address: tuple[str, int] | None = None
        #: the metadata loader and its publishers (the image), when the node runs the metadata system
        self.metadata = metadata
        if metadata is not None:
            metadata.set_on_fatal(self._controller_fault)
        self.register(driver.handlers())
        self.register({int(ApiKeys.DESCRIBE_CLUSTER): self._handle_describe_cluster})
        if controller is not None:
            controller.on_fatal = self._controller_fault
            controller.registration = ControllerRegistrationManager(
                node_id=self.node_id, controller=controller.controller, listeners=self._controller_listeners,
                active_address=self._active_controller_address, ssl_context=config.client_ssl_context())
            self.register(controller.handlers())
            self.register({int(ApiKeys.API_VERSIONS): self._handle_api_versions})
            # brokers forward their clients' admin writes inside Envelopes (KIP-590); the inner
            # request is served by this same table
            self.register({int(ApiKeys.ENVELOPE): envelope_handler(self.routes)})
        #: the broker role (its listeners, lifecycle and client APIs), when this node runs the
        #: metadata system and ``process.roles`` has ``broker``
        self.broker: BrokerServer | None = None
        if metadata is not None and config.is_broker:
            self.broker = BrokerServer(config, metadata, cluster_id=self.cluster_id, log_dir_ids=log_dir_ids or [],
                                       active_controller=self._active_controller_address,
                                       registry=self.metrics.registry)
        self._closed = False

    # ------------------------------------------------------------ construction from a config
    @classmethod
    def from_config(cls, config: NodeConfig, *, dir_locks: DirLocks | None = None,
                    rng: random.Random | None = None, leader_flush: str = "auto",
                    follower_flush: str = "inline", controller: bool = False) -> "KraftNode":
        """Lock the log dirs, check the metadata log dir's meta.properties (formatted, same
        node id), build the driver and the node.

        ``controller``: also run the QuorumController if ``process.roles`` has ``controller``
        and the log is a metadata log (see the module doc); its bootstrap metadata is read
        from the metadata log dir here, so a directory without it fails the start at once.

        ``dir_locks``: the caller already holds the locks of ``config.all_log_dirs`` and
        releases them itself (``kraft-server-start`` takes them before anything else).
        Without it the node takes them here, before it reads anything, and releases them
        in :meth:`close` -- or at once if building the node fails."""
        own = None
        if dir_locks is None:
            own = lock_dirs(config.all_log_dirs)
        try:
            cluster_id, directory_id = _check_meta_properties(config)
            ep = config.controller_endpoint
            if config.is_controller and ep is None:
                raise DriverError(f"{config.source}: controller {config.node_id} needs a controller listener")
            if config.voters and any(v.id == config.node_id for v in config.voters) and ep is None:
                raise DriverError(f"{config.source}: voter {config.node_id} needs a controller listener")
            # TLS: the listener's server side, and the controller listener's client side for the
            # driver's connections to other voters (Kafka's controller client); both checked
            # here, before the log is opened.
            if ep is not None:
                config.server_ssl_context(ep.name)
            client_ssl = config.client_ssl_context()
            listener = Endpoint(config.controller_listener_names[0], ep.host, ep.port) if ep is not None else None
            driver = RaftDriver(config.quorum, ReplicaKey(config.node_id, directory_id), cluster_id=cluster_id,
                                partition_dir=config.metadata_partition_dir, voters=config.voters,
                                bootstrap_servers=config.bootstrap_servers, listener=listener,
                                advertise=config.is_controller, client_ssl_context=client_ssl, rng=rng,
                                leader_flush=leader_flush, follower_flush=follower_flush)
            ctl = None
            metadata = None
            metrics = NodeMetrics(driver)
            if controller:
                try:
                    if _holds_opaque_records(driver.log):
                        log.info("node %d: %s holds records that are not metadata records (written by "
                                 "--demo-writer); running Raft only, without the controller", config.node_id,
                                 config.metadata_partition_dir)
                    else:
                        if config.is_controller:
                            ctl = _build_controller(config, driver, ControllerMetrics(metrics.registry))
                        # after the controller: the loader is the driver's second listener
                        settings = config.controller_settings
                        metadata = NodeMetadata(
                            driver, metrics.registry, node_id=config.node_id, is_controller=config.is_controller,
                            is_broker="broker" in config.roles,
                            max_bytes_between_snapshots=settings.metadata_log_max_record_bytes_between_snapshots,
                            max_snapshot_interval_ms=settings.metadata_log_max_snapshot_interval_ms)
                except BaseException:
                    driver.log.close()  # the driver opened it; nothing else is running yet
                    raise
        except BaseException:
            if own is not None:
                own.release()
            raise
        return cls(config, driver, dir_locks=own, controller=ctl, metrics=metrics, metadata=metadata,
                   log_dir_ids=_log_dir_ids(config))

    def register(self, handlers: dict[int, Callable]) -> None:
        """Add ``api key -> handler`` routes before :meth:`start` (the listener serves, and
        ApiVersions advertises, the table as it is then); a key has one owner."""
        if self.server is not None:
            raise RuntimeError("routes are registered before the node starts")
        for key, handler in handlers.items():
            if int(key) in self.routes:
                raise ValueError(f"API key {ApiKeys(int(key)).name} already has a handler")
            self.routes[int(key)] = handler

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Listen, then start the driver.  If that fails (the port is in use, a bad
        quorum-state...) everything opened so far is closed -- the log cleanly, the locks
        released -- before the error propagates (issue 19)."""
        try:
            ep = self.config.controller_endpoint
            if ep is not None:
                self.server = KafkaServer(ep.host, ep.port, self.routes, listener=ep.name,
                                          listener_type="controller",
                                          ssl_context=self.config.server_ssl_context(ep.name))
                await self.server.start()
            if self.broker is not None:
                await self.broker.bind()  # a port in use fails the start before Raft runs
            if self.controller is not None:
                self.controller.start()  # on this loop, before the driver's first poll
            if self.metadata is not None:
                self.metadata.start()
            await self.driver.start()
            if self.broker is not None:
                # register, catch up, be unfenced, then serve clients (bounded by
                # initial.broker.registration.timeout.ms); the node is not started before that
                await self.broker.start()
            self.metrics_address = await self.metrics.start(self.config.metrics_listener)
            if self.metrics_address is not None:
                log.info("node %d: metrics on http://%s:%d/metrics", self.node_id, *self.metrics_address)
        except BaseException:
            await self.close()
            raise

    def _controller_listeners(self) -> list[tuple[str, str, int, str]]:
        """``(name, host, port, security protocol)`` of each controller listener, the bound port
        for the one this node listens on (what the controller registers, KIP-919)."""
        out = []
        for e in self.config.listeners:
            if e.name not in self.config.controller_listener_names:
                continue
            port = self.port if self.port is not None and e == self.config.controller_endpoint else e.port
            out.append((e.name, e.host, port, self.config.security_protocol(e.name)))
        return out

    def _active_controller_address(self) -> tuple[int, str, int] | None:
        """(node id, host, port) of the Raft leader, the active controller, or None."""
        leader = self.driver.leader_and_epoch.leader_id
        if leader is None or leader < 0:
            return None
        address = self.driver.address_of(leader)
        return None if address is None else (leader, address[0], address[1])

    @property
    def port(self) -> int | None:
        """The listener's bound port (None without a listener or before :meth:`start`)."""
        return self.server.port if self.server is not None else None

    @property
    def endpoint(self):
        return self.config.controller_endpoint

    @property
    def fatal(self) -> BaseException | None:
        """The error that stopped the node: the driver's, or the controller's fault (which
        stops the driver too)."""
        return self.driver.fatal

    def _controller_fault(self, exc: BaseException) -> None:
        """The controller's fatal path (already logged): stop the Raft driver with ``exc`` --
        it polls no more and answers nothing, so another voter takes over -- and let whoever
        waits on :meth:`wait_closed_or_fatal` (``kraft-server-start``) close the node."""
        if self.metadata is not None:
            # Kafka's SharedServer: no snapshot from a node whose state may be wrong
            self.metadata.disable_snapshots("quorum controller fatal fault")
        if self.driver.fatal is None:
            self.driver.fatal = exc

    async def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Graceful: the controller stops first (its queued events run while Raft is still
        open: Kafka closes the controller before the Raft client), then the driver resigns
        if it leads and waits up to ``timeout_s`` for a successor; then everything is
        closed.  True if it completed in time."""
        try:
            if self.broker is not None:
                # Kafka stops the broker before the controller: its controlled shutdown needs
                # the active controller (maybe this node's) to move its leaders away
                await self.broker.shutdown(timeout_s)
            if self.controller is not None:
                self.controller.close()
            return await self.driver.shutdown(timeout_s)
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop at once: the driver (parked requests answered with an error, the log closed
        cleanly), then the listener, then the locks."""
        if self._closed:
            return
        self._closed = True
        try:
            try:
                if self.broker is not None:
                    await self.broker.close()
                if self.controller is not None:
                    self.controller.close()  # queued events run while Raft is still open
                    await self.controller.wait_closed()
            finally:
                await self.driver.close()
        finally:
            try:
                try:
                    if self.metadata is not None:
                        self.metadata.close()
                    await self.metrics.close()
                finally:
                    if self.server is not None:
                        await self.server.close()
            finally:
                if self._dir_locks is not None:
                    self._dir_locks.release()

    async def wait_closed_or_fatal(self) -> None:
        await self.driver.wait_closed_or_fatal()

    # ------------------------------------------------------------ node-level RPCs
    def _handle_describe_cluster(self, ctx, body):
        """Kafka's controller answer (ControllerApis.handleDescribeCluster): this listener is a
        CONTROLLER endpoint, so it lists the controllers (the voters and their endpoints on
        this listener) and the Raft leader as the controller id (-1 when that node is not in
        the list).  Asked for brokers (endpoint type 1, which is also what a v0 request
        means) it answers MISMATCHED_ENDPOINT_TYPE (INVALID_REQUEST at v0) and an unknown type
        UNSUPPORTED_ENDPOINT_TYPE, with Kafka's messages (and the other fields at their
        defaults, as Kafka leaves them)."""
        R = DescribeClusterResponse
        wanted = int(body.endpoint_type)
        if wanted not in _ENDPOINT_TYPES:
            code = Errors.INVALID_REQUEST if ctx.api_version == 0 else Errors.UNSUPPORTED_ENDPOINT_TYPE
            return R(error_code=int(code), error_message=f"Unsupported endpoint type {wanted}")
        if wanted != _CONTROLLER_ENDPOINT:
            code = Errors.INVALID_REQUEST if ctx.api_version == 0 else Errors.MISMATCHED_ENDPOINT_TYPE
            return R(error_code=int(code),
                     error_message=(f"The request was sent to an endpoint of type "
                                    f"{_ENDPOINT_TYPES[_CONTROLLER_ENDPOINT]}, but we wanted an endpoint of "
                                    f"type {_ENDPOINT_TYPES[wanted]}"))
        d = self.driver
        brokers = []
        for vid, eps in sorted(d.voter_endpoints().items()):
            ep = next((e for e in eps if e.name == d.listener_name), eps[0])
            brokers.append(R.DescribeClusterBroker(broker_id=vid, host=ep.host, port=ep.port, rack=None))
        leader = d.leader_and_epoch.leader_id
        if leader is None or all(b.broker_id != leader for b in brokers):
            leader = -1
        return R(error_code=0, error_message=None, endpoint_type=_CONTROLLER_ENDPOINT, cluster_id=self.cluster_id,
                 controller_id=leader, brokers=brokers)

    def _handle_api_versions(self, ctx, body):
        """ApiVersions of a node that runs a controller: the table's APIs, plus (from v3) the
        features this software supports and the cluster's finalized features with their epoch
        (the committed offset they were read at), read through the controller as Kafka's
        controller reads its published image.  If the controller cannot answer (it is shutting
        down) the finalized features are left out, epoch -1 (Kafka's "unknown")."""
        assert self.controller is not None
        version = ctx.api_version
        only = {int(k) for k in self.routes} | {int(ApiKeys.API_VERSIONS)}
        # KAFKA-17492: before v4, features whose minimum is 0 confuse older clients
        supported = [(n, lo, hi) for n, (lo, hi) in sorted(self.controller.supported_features().items())
                     if not (version < 4 and lo == 0)]

        def answer(finalized: dict[str, int], epoch: int) -> None:
            resp, v = answer_api_versions(body, version, "controller", only=only, supported_features=supported,
                                          finalized_features=[(n, lvl, lvl) for n, lvl in sorted(finalized.items())
                                                              if lvl != 0],
                                          finalized_features_epoch=epoch)
            ctx.respond(resp)

        self.controller.read_finalized_features(answer)
        return DEFERRED


#: DescribeCluster endpoint types (Kafka's EndpointType): id -> name
_ENDPOINT_TYPES = {1: "BROKER", 2: "CONTROLLER"}
_CONTROLLER_ENDPOINT = 2


def _build_controller(config: NodeConfig, driver: RaftDriver,
                      metrics: ControllerMetrics | None = None) -> ControllerServer | None:
    """The node's controller (the caller has checked that the metadata log holds only
    metadata records: a Raft-only log runs no controller, see the module doc)."""
    settings = NodeControllerSettings(config.controller_settings, [v.id for v in config.voters],
                                      static_config=config.props)
    server = ControllerServer(node_id=config.node_id, cluster_id=driver.cluster_id, raft=driver,
                              metadata_log_dir=config.metadata_log_dir, settings=settings, metrics=metrics)
    if metrics is not None:
        ctl = server.controller
        cluster = ctl.cluster_control
        metrics.track_broker_counts(cluster.active_broker_count, cluster.fenced_broker_count)
        rc = ctl.replication_control

        def committed(fn):
            return lambda: fn(epoch=ctl.committed_epoch())
        metrics.track_partition_metrics(
            topics=committed(lambda epoch: len(rc.topics(epoch=epoch))),
            partitions=committed(rc.partition_count),
            offline=committed(lambda epoch: len(rc.partitions_with_no_leader(epoch=epoch))),
            imbalanced=committed(lambda epoch: len(rc.imbalanced(epoch=epoch))),
            unclean_elections=committed(lambda epoch: rc.unclean_leader_elections.get(epoch)),
            elr_elections=committed(lambda epoch: rc.elections_from_elr.get(epoch)))
    return server


#: How far into the log :func:`_holds_opaque_records` looks for the first data batch.
_OPAQUE_SCAN_BYTES = 1 << 20


def _holds_opaque_records(raft_log) -> bool:
    """True if the first data record of the log is not a metadata record frame (whose first
    byte is frame version 1, the rule kraft-dump-log uses too).  A log with a snapshot is a
    metadata log (only a controller writes snapshots; the bootstrap snapshot holds features).
    Only the first data batch is looked at: a log is written by one kind of state machine."""
    if raft_log.latest_snapshot_id() is not None:
        return False
    pos, end = raft_log.start_offset, raft_log.end_offset
    scanned = 0
    while pos < end and scanned < _OPAQUE_SCAN_BYTES:
        batches = raft_log.read(pos, 64 * 1024)
        if not batches:
            return False
        for b in batches:
            if not b.is_control and b.records:
                value = b.records[0]
                return not (len(value) > 0 and value[0] == 1)
            scanned += b.size_in_bytes if hasattr(b, "size_in_bytes") else 0
        pos = batches[-1].next_offset
    return False


def _check_meta_properties(config: NodeConfig):
    """(cluster id, directory id) of a metadata log dir formatted for this node; DriverError
    when it is not, or when another log dir belongs to another cluster or node."""
    try:
        meta = read_meta_properties(config.metadata_log_dir, check_cluster_id=False).meta
        legacy_ok = _existing_cluster_metadata(config) and _LEGACY_CLUSTER_ID.fullmatch(meta.cluster_id or "")
        if meta.cluster_id and not legacy_ok:
            meta.check_cluster_id(os.path.join(config.metadata_log_dir, "meta.properties"))
    except KraftStorageError as exc:
        raise DriverError(f"{exc}") from None
    if meta.cluster_id and not is_kafka_uuid(meta.cluster_id):
        # An existing cluster keeps its identity (issue 21, "start on a Kafka-written
        # directory"): Kafka reads cluster.id as any string, and some images wrote ids that are
        # not Uuids (bitnami's KAFKA_KRAFT_CLUSTER_ID: kafka-fixtures' 3.7.0 sample).  Only a
        # directory that already holds this cluster's metadata log is accepted so; a freshly
        # formatted one must have a Uuid (a typo there is refused, issue 19), and even an
        # existing one only an id of letters, digits, '-' and '_' (what such tools write;
        # ``garbage!`` is damage, not an identity).
        log.warning("%s/meta.properties: cluster.id %r is not a Kafka base64 Uuid; accepted because %s already "
                    "holds this cluster's metadata log (kraft-storage format writes only Uuids)",
                    config.metadata_log_dir, meta.cluster_id, config.metadata_partition_dir)
    if meta.node_id != config.node_id:
        raise DriverError(f"{config.metadata_log_dir}/meta.properties belongs to node {meta.node_id}, "
                          f"but {config.source} says node.id={config.node_id}")
    if not meta.cluster_id:
        raise DriverError(f"{config.metadata_log_dir}/meta.properties has no cluster.id")
    for d in config.all_log_dirs:
        if os.path.abspath(d) == os.path.abspath(config.metadata_log_dir):
            continue
        if os.path.exists(os.path.join(d, "meta.properties")):
            other = read_meta_properties(d).meta
            if other.cluster_id != meta.cluster_id or other.node_id != meta.node_id:
                raise DriverError(f"log directory {d} belongs to cluster {other.cluster_id} node "
                                  f"{other.node_id}, not cluster {meta.cluster_id} node {meta.node_id}")
    return meta.cluster_id, dir_uuid(meta.directory_id)


def _log_dir_ids(config: NodeConfig) -> list:
    """The directory ids (meta.properties ``directory.id``) of the node's log dirs, what a broker
    registers with (KIP-858); dirs without one are left out."""
    from kraft_storage.messages.runtime import Uuid
    out = []
    for d in config.log_dirs:
        try:
            meta = read_meta_properties(d, check_cluster_id=False).meta
        except KraftStorageError:
            continue
        if meta.directory_id:
            out.append(Uuid.from_string(meta.directory_id) if isinstance(meta.directory_id, str) else meta.directory_id)
    return out


#: the cluster ids other tools wrote that an existing cluster may keep (see _check_meta_properties)
_LEGACY_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _existing_cluster_metadata(config: NodeConfig) -> bool:
    """The metadata partition dir holds a log segment or a snapshot other than the (0, 0)
    bootstrap one: this node has been part of a running cluster."""
    try:
        names = os.listdir(config.metadata_partition_dir)
    except FileNotFoundError:
        return False
    return any(n.endswith(".log") or (n.endswith(".checkpoint") and not n.startswith("00000000000000000000-"))
               for n in names)
