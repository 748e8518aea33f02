"""``BrokerServer``: the broker half of a node (Kafka's ``BrokerServer``), assembled from the
broker's parts in ``kraft_node/broker/``.

What a broker is here (issue 24): a member of ``__cluster_metadata`` (a Raft observer on a
broker-only node, a voter on a combined one) whose MetadataLoader publishes images into the
metadata cache; it registers with the active controller, heartbeats, and answers Kafka
clients on its own listeners from that cache; admin writes are forwarded to the active
controller inside Envelopes.  Partition data (issue 25): the :class:`LogManager` keeps the
partition logs in ``log.dirs`` (Kafka's layout and checkpoints), the :class:`ReplicaManager`
makes this broker the leader or a follower of its partitions from each published image, and
Produce, Fetch, ListOffsets and FindCoordinator are served from them
(``kraft_node/broker/partition_apis.py``); InitProducerId hands out producer ids from blocks the
controller grants (``kraft_node/broker/producer_ids.py``), for idempotent producers.
Replication between brokers: a :class:`ReplicaFetcherManager` (one fetcher per leader, on the
inter-broker listener) follows the partitions this broker follows, and the leaders' ISR changes
go to the controller through the :class:`AlterPartitionManager`; both plug into the
ReplicaManager's hooks (``wire_replication``) before the first image is applied.

Start order (Kafka's ``BrokerServer.startup``, each wait bounded by
``initial.broker.registration.timeout.ms``):

0. load the partition logs (recovering the ones not shut down cleanly from their checkpointed
   recovery points) and install the ReplicaManager's publisher, so the first image makes the
   partitions leaders/followers before any client is served;
1. bind every broker listener without serving (the registration carries the bound ports;
   port 0 becomes the bound port in the advertised endpoints);
2. start the :class:`BrokerLifecycleManager`: register with the active controller (retried
   with backoff while none is known), then heartbeat;
3. wait for the controller to say the broker has caught up to its registration offset, and
   for the loader's first published image;
4. ``set_ready_to_unfence``: the next heartbeats ask to be unfenced; wait until the
   controller has unfenced the broker;
5. serve clients on the broker listeners.  Only then does the node report itself started.

Stop (``shutdown``): with ``controlled.shutdown.enable`` (Kafka's default) a RUNNING broker
asks the controller to move its leaders away and waits, up to the shutdown budget, until the
controller says it may go; after the budget it stops anyway and says so (WARNING).  Then the parked produce and fetch
requests are answered, every partition log is closed cleanly (flushed, clean-shutdown marker)
and the recovery-point, log-start-offset and high-watermark checkpoints are written.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import socket
import time
from collections.abc import Callable
from typing import Any

from kraft_node.broker.alter_partition_manager import AlterPartitionManager, partition_alter_callback
from kraft_node.broker.apis import BrokerApis
from kraft_node.broker.controller_channel import ControllerChannel
from kraft_node.broker.forwarding import ForwardingManager
from kraft_node.broker.lifecycle import BrokerLifecycleManager, BrokerLifecycleShutdownError, BrokerState
from kraft_node.broker.log_manager import LogManager
from kraft_node.broker.metadata_cache import KRaftMetadataCache
from kraft_node.broker.partition_apis import PartitionApis
from kraft_node.broker.producer_ids import RPCProducerIdManager, init_producer_id_handler
from kraft_node.broker.registration_tracker import BrokerRegistrationTracker
from kraft_node.broker.replica_fetcher import (
    ReplicaFetcherConfig,
    ReplicaFetcherManager,
    image_leader_endpoint,
    wire_replication,
)
from kraft_node.broker.replica_manager import ReplicaManager, ReplicaManagerPublisher
from kraft_node.metadata.versions import supported_features
from kraft_node.network import KafkaServer
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.raft.messages import Endpoint
from kraft_node.server.config import NodeConfig
from kraft_node.server.metadata import NodeMetadata
from kraft_storage.messages.runtime import Uuid

log = logging.getLogger("kraft.broker")

__all__ = ["BrokerServer", "BrokerStartError"]

#: the API keys by name (ApiKeys is built at run time: mypy cannot see its members)
_KEYS: Any = ApiKeys
#: How often a starting broker looks for the loader's first image (it is published on the same
#: loop; this only bounds how late the start notices it).
_FIRST_IMAGE_POLL_S = 0.01


class BrokerStartError(RuntimeError):
    """The broker could not register, catch up or be unfenced in time (or was stopped first)."""


class BrokerServer:
    """The broker role of one node.  Built by ``KraftNode.from_config`` when ``process.roles``
    has ``broker``; :meth:`start` after the Raft driver runs, :meth:`shutdown` before it stops.

    ``active_controller``: ``() -> (node id, host, port)`` of the active controller's controller
    listener, or None while none is known (the node reads it from the Raft driver: the leader
    of ``__cluster_metadata`` is the active controller, Kafka's RaftControllerNodeProvider)."""

    def __init__(self, config: NodeConfig, metadata: NodeMetadata, *, cluster_id: str,
                 log_dir_ids: list[Uuid], active_controller: Callable[[], tuple[int, str, int] | None],
                 registry: Any = None) -> None:
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = cluster_id
        self.metadata = metadata
        self.log_dir_ids = list(log_dir_ids)
        self._active_controller = active_controller
        self._registry = registry
        self.cache = KRaftMetadataCache(metadata.cache.current_image)
        #: one listener per broker listener name, bound in :meth:`start`
        self.servers: dict[str, KafkaServer] = {}
        self.lifecycle: BrokerLifecycleManager | None = None
        self.forwarding: ForwardingManager | None = None
        self._channels: list[ControllerChannel] = []
        self._serving = False
        self._closed = False
        self._metrics_closers: list[Callable[[], None]] = []
        #: the partition logs and replicas (issue 25), made in :meth:`start`
        self.log_manager: LogManager | None = None
        self.replica_manager: ReplicaManager | None = None
        self.partition_apis: PartitionApis | None = None
        self.producer_ids: RPCProducerIdManager | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.alter_partitions: AlterPartitionManager | None = None

    # ------------------------------------------------------------------ addresses
    def bound_port(self, listener: str) -> int | None:
        server = self.servers.get(listener.upper())
        return server.port if server is not None else None

    def advertised_endpoints(self) -> list[Endpoint]:
        """The advertised broker listeners with bound ports for port 0 and the host name for an
        empty host (Kafka's ``withWildcardHostnamesResolved().withEphemeralPortsCorrected``)."""
        out = []
        for e in self.config.advertised_listeners:
            port = e.port
            if port == 0 and e.name in self.servers:
                port = self.servers[e.name].port
            host = e.host or socket.getfqdn()
            out.append(Endpoint(e.name, host, port))
        return out

    @property
    def state(self) -> BrokerState:
        return self.lifecycle.state if self.lifecycle is not None else BrokerState.NOT_RUNNING

    # ------------------------------------------------------------------ start
    async def bind(self) -> None:
        """Bind every broker listener (not serving yet).  Separate from :meth:`start` so a port
        in use fails the node's start before the Raft driver runs."""
        cfg = self.config
        for ep in cfg.broker_listeners:
            server = KafkaServer(ep.host, ep.port, {}, listener=ep.name, listener_type="broker",
                                 ssl_context=cfg.server_ssl_context(ep.name))
            await server.start(serving=False)
            self.servers[ep.name] = server

    async def start(self) -> None:
        """Register, catch up, be unfenced, then serve (see the module doc).  Raises
        :class:`BrokerStartError` when that does not happen within
        ``initial.broker.registration.timeout.ms``; the caller closes the node."""
        cfg = self.config
        settings = cfg.broker_settings
        client_ssl = cfg.client_ssl_context()
        heartbeat_channel = ControllerChannel(self._active_controller, client_id=f"broker-{self.node_id}-heartbeat",
                                              ssl_context=client_ssl)
        forwarding_channel = ControllerChannel(self._active_controller,
                                               client_id=f"broker-{self.node_id}-forwarding", ssl_context=client_ssl)
        self._channels = [heartbeat_channel, forwarding_channel]
        self.forwarding = ForwardingManager(forwarding_channel, node_id=self.node_id,
                                            client_id=f"broker-{self.node_id}-forwarding")
        features = supported_features()
        # the partition logs before anything is served (Kafka's LogManager.startup), and the
        # ReplicaManager's publisher before the first image is awaited below
        self.log_manager = LogManager(cfg.log_dirs, broker_props=cfg.props)
        await asyncio.to_thread(self.log_manager.startup)
        self.replica_manager = ReplicaManager(self.node_id, self.log_manager, props=cfg.props)

        def broker_epoch() -> int:
            return self.lifecycle.broker_epoch if self.lifecycle is not None else -1
        # replication (before the first image: a Partition takes alter_partition when it is made)
        inter_broker = cfg.inter_broker_listener_name or next(iter(self.servers))
        self.fetchers = ReplicaFetcherManager(
            broker_id=self.node_id, broker_epoch=broker_epoch, cluster_id=self.cluster_id, metrics=self._registry,
            config=ReplicaFetcherConfig.from_properties(cfg.props, source=cfg.source),
            ssl_context=cfg.listener_client_ssl_context(inter_broker),
            leader_endpoint=image_leader_endpoint(self.metadata.cache.current_image, inter_broker))
        alter_channel = ControllerChannel(self._active_controller, client_id=f"broker-{self.node_id}-alter-partition",
                                          ssl_context=client_ssl)
        self._channels.append(alter_channel)
        self.alter_partitions = AlterPartitionManager(alter_channel, broker_id=self.node_id, broker_epoch=broker_epoch)
        wire_replication(self.replica_manager, self.fetchers,
                         partition_alter_callback(self.alter_partitions, broker_epoch=broker_epoch))
        self.metadata.loader.install_publishers([ReplicaManagerPublisher(self.replica_manager)])
        self.log_manager.start_background()
        self.replica_manager.start()
        partition_apis = self.partition_apis = PartitionApis(self.node_id, self.cache, self.replica_manager,
                                                             props=cfg.props)
        # idempotent producers: ids in blocks from the controller (AllocateProducerIds), H4's manager
        producer_ids_channel = ControllerChannel(self._active_controller,
                                                 client_id=f"broker-{self.node_id}-producer-ids",
                                                 ssl_context=client_ssl)
        self._channels.append(producer_ids_channel)
        self.producer_ids = RPCProducerIdManager(
            self.node_id, producer_ids_channel,
            lambda: self.lifecycle.broker_epoch if self.lifecycle is not None else -1)
        data_handlers = {**partition_apis.handlers(),
                         int(_KEYS.INIT_PRODUCER_ID): init_producer_id_handler(self.producer_ids)}
        auto_create = self._auto_create if settings.auto_create_topics_enable else None
        for name, server in self.servers.items():
            apis = BrokerApis(self.node_id, self.cluster_id, self.cache, name, cfg.props, features,
                              self.forwarding.forwarding_handlers(), auto_create=auto_create,
                              partition_handlers=data_handlers)
            server.handlers = apis.handlers()
        controller = cfg.controller_settings
        self.lifecycle = BrokerLifecycleManager(
            self.node_id, heartbeat_interval_ms=controller.broker_heartbeat_interval_ms,
            session_timeout_ms=controller.broker_session_timeout_ms,
            initial_registration_timeout_ms=settings.initial_registration_timeout_ms)
        self._track_metrics()
        loader = self.metadata.loader
        # re-register when a metadata.version upgrade needs the directories this registration lacks
        loader.install_publishers([BrokerRegistrationTracker(self.node_id, self.lifecycle.resend_broker_registration)])
        listeners = [(e.name, e.host, e.port, cfg.security_protocol(e.name)) for e in self.advertised_endpoints()]
        self.lifecycle.start(loader.last_applied_offset, heartbeat_channel, cluster_id=self.cluster_id,
                             listeners=listeners, features=features, rack=settings.rack,
                             log_dir_ids=self.log_dir_ids,
                             previous_broker_epoch=self.log_manager.previous_broker_epoch)
        deadline = time.monotonic() + settings.initial_registration_timeout_ms / 1000
        await self._wait("the controller to acknowledge that we are caught up", self.lifecycle.initial_catch_up,
                         deadline)
        await self._wait("the initial broker metadata update to be published", self._first_image(), deadline)
        await self._wait("the replica manager to apply the first metadata image", self._replicas_ready(), deadline)
        await self._wait("the broker to be unfenced", self.lifecycle.set_ready_to_unfence(), deadline)
        for server in self.servers.values():
            await server.start_serving()
        self._serving = True
        log.info("broker %d: unfenced with broker epoch %d; serving clients on %s", self.node_id,
                 self.lifecycle.broker_epoch, ", ".join(str(e) for e in self.advertised_endpoints()))

    async def _first_image(self) -> None:
        cache = self.metadata.cache
        while not cache.has_image:
            await asyncio.sleep(_FIRST_IMAGE_POLL_S)

    async def _replicas_ready(self) -> None:
        """Kafka's first-publish future of the BrokerMetadataPublisher: the partitions are made
        leaders and followers from the first image before any client is served."""
        rm = self.replica_manager
        while rm is not None and not rm.first_image_applied:
            await asyncio.sleep(_FIRST_IMAGE_POLL_S)

    async def _wait(self, what: str, awaitable: Any, deadline: float) -> None:
        """Kafka's ``FutureUtils.waitWithLogging``: log the wait, bound it by the start deadline."""
        log.info("broker %d: waiting for %s", self.node_id, what)
        remaining = deadline - time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(awaitable) if isinstance(awaitable, asyncio.Future)
                                   else awaitable, max(0.0, remaining))
        except asyncio.TimeoutError:
            timeout_ms = self.config.broker_settings.initial_registration_timeout_ms
            raise BrokerStartError(f"broker {self.node_id}: timed out after {timeout_ms} ms "
                                   f"(initial.broker.registration.timeout.ms) waiting for {what}") from None
        except BrokerLifecycleShutdownError as exc:
            raise BrokerStartError(f"broker {self.node_id}: stopped while waiting for {what}: {exc}") from None
        log.info("broker %d: finished waiting for %s", self.node_id, what)

    def _auto_create(self, names: list[str]) -> None:
        """Metadata's auto-creation hook: a CreateTopics to the controller with the cluster's
        defaults (``num.partitions``, ``default.replication.factor``), fire and forget."""
        if self.forwarding is None:
            return
        settings = self.config.controller_settings
        self.forwarding.auto_create_topics(names, settings.num_partitions, settings.default_replication_factor)

    def _track_metrics(self) -> None:
        """The broker lifecycle gauges: Kafka's ``kafka.server:type=KafkaServer,name=BrokerState``
        (the BrokerState byte value) and kraft's ``...name=TimeSinceLastHeartbeatAckMs`` (Kafka
        shows the same age on the controller side per broker; a broker that lost its controller
        sees it grow here).  Issue 25's partition metrics: ``ReplicaManager`` PartitionCount,
        LeaderCount, UnderReplicatedPartitions, IsrShrinksPerSec and IsrExpandsPerSec, and
        ``BrokerTopicMetrics`` TotalProduceRequestsPerSec, TotalFetchRequestsPerSec, BytesInPerSec,
        BytesOutPerSec and MessagesInPerSec: Kafka's meters under Kafka's names, exposed as counters
        (``_total``, the meter's Count) whose rate is the meter's (the names scheme of
        ``kraft_node/metrics.py``, as the controller's ``UncleanLeaderElectionsPerSec``)."""
        registry = self._registry
        lifecycle = self.lifecycle
        if registry is None or lifecycle is None:
            return
        gauges = [registry.callback_gauge("kafka.server", "KafkaServer", "BrokerState",
                                          "The broker's state (Kafka's BrokerState value).", lifecycle.state_value),
                  registry.callback_gauge("kafka.server", "KafkaServer", "TimeSinceLastHeartbeatAckMs",
                                          "Milliseconds since the controller last acknowledged a heartbeat.",
                                          lifecycle.time_since_last_heartbeat_ack_ms)]
        rm, data = self.replica_manager, self.partition_apis
        collectors: list[Any] = []
        if rm is not None:
            gauges += [registry.callback_gauge("kafka.server", "ReplicaManager", "PartitionCount",
                                               "Partitions with a replica on this broker.", rm.partition_count),
                       registry.callback_gauge("kafka.server", "ReplicaManager", "LeaderCount",
                                               "Partitions this broker leads.", rm.leader_count),
                       registry.callback_gauge("kafka.server", "ReplicaManager", "UnderReplicatedPartitions",
                                               "Partitions led here whose ISR is smaller than their replicas.",
                                               rm.under_replicated_partitions)]
            r = rm
            collectors += [registry.callback_counter("kafka.server", "ReplicaManager", "IsrShrinksPerSec",
                                                     "Committed ISR shrinks of partitions led here.",
                                                     lambda: r.isr_shrinks),
                           registry.callback_counter("kafka.server", "ReplicaManager", "IsrExpandsPerSec",
                                                     "Committed ISR expansions of partitions led here.",
                                                     lambda: r.isr_expands)]
        if data is not None:
            d = data
            for name, doc, fn in (
                    ("TotalProduceRequestsPerSec", "Produce requests received.", lambda: d.produce_requests),
                    ("TotalFetchRequestsPerSec", "Fetch requests received.", lambda: d.fetch_requests),
                    ("BytesInPerSec", "Bytes appended by Produce.", lambda: d.bytes_in),
                    ("BytesOutPerSec", "Record bytes sent by Fetch.", lambda: d.bytes_out),
                    ("MessagesInPerSec", "Records appended by Produce.", lambda: d.messages_in)):
                collectors.append(registry.callback_counter("kafka.server", "BrokerTopicMetrics", name, doc, fn))
        self._metrics_closers = [functools.partial(registry.unregister, g) for g in [*gauges, *collectors]]

    # ------------------------------------------------------------------ stop
    async def shutdown(self, timeout_s: float) -> bool:
        """Controlled shutdown (when enabled and RUNNING), bounded by ``timeout_s``; then
        :meth:`close`.  True if the controller approved it (or none was needed)."""
        approved = True
        lifecycle = self.lifecycle
        try:
            if lifecycle is not None and self.config.broker_settings.controlled_shutdown_enable \
                    and lifecycle.state == BrokerState.RUNNING:
                # the manager's own timer ends the wait (and logs it at WARNING); the outer bound
                # only guards against a manager that never completes its future
                fut = lifecycle.begin_controlled_shutdown(timeout_ms=max(1, int(timeout_s * 1000)))
                try:
                    approved = bool(await asyncio.wait_for(asyncio.shield(fut), timeout_s + 1))
                except asyncio.TimeoutError:
                    approved = False
                    log.error("broker %d: timed out after %.1f s waiting for the controller to approve the "
                              "controlled shutdown; stopping anyway", self.node_id, timeout_s)
        finally:
            await self.close()
        return approved

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.lifecycle is not None:
            self.lifecycle.close()
        for close in self._metrics_closers:
            close()
        for server in self.servers.values():
            await server.close()
        if self.forwarding is not None:
            await self.forwarding.close()
        if self.producer_ids is not None:
            await self.producer_ids.close()
        # the fetchers before the logs close (no append into a closed log), the AlterPartition
        # manager before its channel
        if self.fetchers is not None:
            await self.fetchers.close()
        if self.alter_partitions is not None:
            await self.alter_partitions.close()
        for channel in self._channels:
            await channel.close()
        if self.replica_manager is not None:
            await self.replica_manager.shutdown()
        if self.log_manager is not None:
            # the log dirs' clean-shutdown markers carry the epoch this incarnation registered with:
            # the next one sends it as previousBrokerEpoch, so the controller knows it was clean (KIP-966)
            await self.log_manager.shutdown(self.lifecycle.broker_epoch if self.lifecycle is not None else -1)
