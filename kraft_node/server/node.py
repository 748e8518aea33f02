"""``KraftNode``: one node -- its config, its directory locks, its listener and the routing table.

The node is what a process runs (``kraft-server-start``).  It

* checks the storage it was given: the log dirs are locked (Kafka's ``.lock``) before
  anything in them is read, and the metadata log dir's ``meta.properties`` must be
  formatted for this node id, every other log dir's for the same cluster and node;
* builds the Raft driver (:class:`kraft_node.raft.io.driver.RaftDriver`) from the
  :class:`NodeConfig` -- the driver itself never sees the config file;
* owns the listener (a :class:`KafkaServer` on the controller listener, with its TLS
  context) and the routing table ``api_key -> handler``: the driver registers the Raft
  RPCs and DescribeQuorum; the node answers DescribeCluster; the controller and the broker
  will register theirs here.  ApiVersions is answered from the same table (the keys with a
  handler, plus ApiVersions).

Failed starts close what they opened, in reverse order, so the directory is left byte for
byte as it was found and the locks are free again (issue 19).
"""
from __future__ import annotations

import logging
import os
import random
from typing import Callable

from kraft_node.network import KafkaServer
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated.describe_cluster import DescribeClusterResponse
from kraft_node.raft.io.driver import DriverError, RaftDriver, dir_uuid
from kraft_node.raft.messages import Endpoint, ReplicaKey
from kraft_node.server.config import NodeConfig
from kraft_storage.dirlock import DirLocks, lock_dirs
from kraft_storage.errors import KraftStorageError
from kraft_storage.meta_properties import read_meta_properties

log = logging.getLogger("kraft.server")


class KraftNode:
    """One KRaft node: the Raft driver behind the node's listener.  See the module doc."""

    def __init__(self, config: NodeConfig, driver: RaftDriver, *, dir_locks: DirLocks | None = None):
        self.config = config
        self.driver = driver
        self.node_id = config.node_id
        self.cluster_id = driver.cluster_id
        #: the log dirs' locks when this node took them (from_config), released by close()
        self._dir_locks = dir_locks
        #: api key -> handler: what the listener serves, and what ApiVersions advertises
        self.routes: dict[int, Callable] = {}
        self.server: KafkaServer | None = None
        self.register(driver.handlers())
        self.register({int(ApiKeys.DESCRIBE_CLUSTER): self._handle_describe_cluster})
        self._closed = False

    # ------------------------------------------------------------ construction from a config
    @classmethod
    def from_config(cls, config: NodeConfig, *, dir_locks: DirLocks | None = None,
                    rng: random.Random | None = None, leader_flush: str = "auto",
                    follower_flush: str = "inline") -> "KraftNode":
        """Lock the log dirs, check the metadata log dir's meta.properties (formatted, same
        node id), build the driver and the node.

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
        except BaseException:
            if own is not None:
                own.release()
            raise
        return cls(config, driver, dir_locks=own)

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
            await self.driver.start()
        except BaseException:
            await self.close()
            raise

    @property
    def port(self) -> int | None:
        """The listener's bound port (None without a listener or before :meth:`start`)."""
        return self.server.port if self.server is not None else None

    @property
    def endpoint(self):
        return self.config.controller_endpoint

    @property
    def fatal(self) -> BaseException | None:
        return self.driver.fatal

    async def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Graceful: the driver resigns if it leads and waits up to ``timeout_s`` for a
        successor; then everything is closed.  True if it completed in time."""
        try:
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
            await self.driver.close()
        finally:
            try:
                if self.server is not None:
                    await self.server.close()
            finally:
                if self._dir_locks is not None:
                    self._dir_locks.release()

    async def wait_closed_or_fatal(self) -> None:
        await self.driver.wait_closed_or_fatal()

    # ------------------------------------------------------------ node-level RPCs
    async def _handle_describe_cluster(self, ctx, body):
        R = DescribeClusterResponse
        d = self.driver
        brokers = []
        for vid, eps in sorted(d.voter_endpoints().items()):
            ep = next((e for e in eps if e.name == d.listener_name), eps[0])
            brokers.append(R.DescribeClusterBroker(broker_id=vid, host=ep.host, port=ep.port, rack=None))
        return R(error_code=0, error_message=None, endpoint_type=2, cluster_id=self.cluster_id,
                 controller_id=d.leader_and_epoch.leader_id, brokers=brokers)


def _check_meta_properties(config: NodeConfig):
    """(cluster id, directory id) of a metadata log dir formatted for this node; DriverError
    when it is not, or when another log dir belongs to another cluster or node."""
    try:
        meta = read_meta_properties(config.metadata_log_dir).meta
    except KraftStorageError as exc:
        raise DriverError(f"{exc}") from None
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
