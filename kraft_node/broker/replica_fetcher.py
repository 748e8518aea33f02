"""Replica fetchers: how a follower copies its leaders' logs (Kafka's ``ReplicaFetcherManager``,
``AbstractFetcherThread``, ``ReplicaFetcherThread`` and ``RemoteLeaderEndPoint``, issue 25 item 2).

Why this shape: a broker follows many partitions led by few brokers.  One Fetch per source
broker that carries every partition it leads for us costs one round trip per leader instead of
one per partition, and the leader's long poll (``replica.fetch.wait.max.ms``) keeps an idle
follower from spinning.  Everything runs on the broker's asyncio loop: one task per fetcher, no
threads, so partition state is changed only between awaits and needs no lock.

Parts:

* :class:`ReplicaFetcherManager` -- fetchers keyed by ``(leader id, fetcher id)``; the fetcher id
  is Kafka's ``abs(31 * topic.hashCode() + partition) % num.replica.fetchers`` (Java's String
  hash, so a partition lands on the same fetcher index as in Kafka).  ``on_become_follower`` /
  ``on_become_leader`` are the ReplicaManager hooks; a fetcher left with no partitions is closed.
* :class:`ReplicaFetcher` -- one source broker: the fetch loop, the per-partition
  :class:`PartitionFetchState`, the error table, truncation and out-of-range recovery.
* :class:`ReplicaFetcherConfig` -- the ``replica.*`` settings, Kafka's names and defaults.

The fetch loop (one round, Kafka's ``doWork``):

1. partitions in the *truncating* state (a log with no leader epoch yet) are truncated to their
   fetch offset, which is their high watermark (Kafka's ``truncateToHighWatermark``);
2. every *ready* partition (fetching, not delayed) goes into one Fetch, at the highest version
   both sides support and at least 12 (diverging epochs, KIP-320): topic ids from v13, the
   follower's id and broker epoch in ``ReplicaState`` from v15.  Through a fetch session
   (KIP-227, :mod:`kraft_node.broker.fetch_session_handler`, one per fetcher): the first Fetch is
   full and opens a session on the leader; later ones name only the partitions whose request data
   changed and forget those no longer ready, and the answer holds only partitions with something
   new (records, a moved high watermark or log start offset, an error, a diverging epoch).  A
   partition left out of an answer keeps its state.  Session errors, a failed request or a new
   connection make the next Fetch full again; a leader with sessions off answers session id 0
   and every Fetch stays full;
3. each partition of the answer is applied only if its state still matches what was asked (same
   fetch offset and leader epoch, still ready): a partition removed or re-added meanwhile ignores
   a stale answer.  NONE appends the records (``append_as_follower``), then takes the leader's
   high watermark (capped at the local log end) and log start offset; a diverging epoch
   truncates instead (below); OFFSET_OUT_OF_RANGE asks the leader's end and start offsets with
   ListOffsets; FENCED_LEADER_EPOCH with our current epoch fails the partition (it waits for
   new metadata); other errors delay the partition by ``replica.fetch.backoff.ms``;
4. a Fetch that fails as a whole (connection lost, timeout) delays every partition.

Invariants:

* a partition is in at most one fetcher (the manager removes it before it adds it elsewhere);
* ``state.fetch_offset == partition.log.log_end_offset`` whenever records are appended (Kafka's
  "Offset mismatch" check; a violation fails the partition);
* NEVER below the high watermark: a truncation whose effective offset (the start of the batch
  holding the target, since the log drops a straddling batch whole) would be below the
  partition's high watermark is refused and the partition marked failed with an error naming
  both offsets and why the truncation was asked.  Kafka only logs a warning there; kraft refuses
  because records below the high watermark may have been acknowledged to producers;
* a failed partition is removed from its fetcher and listed in
  ``ReplicaFetcherManager.failed_partitions`` with the reason, until the partition is added again
  (new metadata) or removed.

Truncation by diverging epoch (Kafka's ``getOffsetTruncationState``): the leader answers epoch
``E`` ending at ``O``.  Locally ``end_offset_for_epoch(E)`` gives ``(e, o)``: if ``e == E`` the
target is ``min(o, O, LEO)``; if ``e != E`` (we never saw ``E``) it is ``min(o, LEO)`` and the
next fetch, with the new last fetched epoch, lets the leader say again; if the local cache knows
no epoch at or below ``E`` it is ``min(O, LEO)``.  An undefined answer (``O == -1``) truncates to
the fetch offset.

Out of range (Kafka's ``fetchOffsetAndTruncate``): if the leader's end offset is below ours we
truncate to it (unclean election; same high-watermark rule); otherwise we continue from
``max(leader start, our end)``, and if our end is below the leader's start the log is emptied and
restarts at the leader's start offset.

Not done here (said so, not faked): replication quotas (``leader.replication.throttled.rate``
and the throttled-replica lists), OffsetsForLeaderEpoch (not needed
with v12+: the fetch itself reports divergence), fetching from a future log directory
(ReplicaAlterLogDirsThread), tiered storage.
"""
from __future__ import annotations

import asyncio
import enum
import logging
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from kraft_node.broker.controller_channel import error_name
from kraft_node.broker.fetch_session_handler import SESSION_ERRORS, FetchSessionHandler
from kraft_node.broker.fetch_session_handler import PartitionData as SessionPartitionData
from kraft_node.broker.log.producer_state import append_replicated_as_follower
from kraft_node.metadata.image.topics import TopicPartition
from kraft_node.network.client import ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.protocol.api_keys import API_INFO, UNSUPPORTED_VERSION
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.api_versions import ApiVersionsRequest
from kraft_node.protocol.generated.fetch import FetchRequest
from kraft_node.protocol.generated.list_offsets import ListOffsetsRequest
from kraft_storage.errors import CorruptRecordError, KraftStorageError
from kraft_storage.log.log import KafkaLog
from kraft_storage.messages.runtime import ZERO_UUID, MessageError, Uuid
from kraft_storage.record.batch import CRC_SKIP, scan_batches

__all__ = ["ReplicaFetcherManager", "ReplicaFetcher", "ReplicaFetcherConfig", "PartitionFetchState", "FetchPhase",
           "FollowerPartition", "BrokerEndPoint", "TruncationBelowHighWatermark", "LeaderOffsetError",
           "fetcher_id_for", "java_string_hash", "offset_truncation_state", "ReplicaFetcherConfigError",
           "image_leader_endpoint", "wire_replication"]

log = logging.getLogger(__name__)

#: Fetch v12 brought diverging epochs (KIP-320 truncation on fetch): the least a follower uses.
MIN_REPLICA_FETCH_VERSION = 12
#: Fetch v13 names topics by id; v15 moves the follower id into ``ReplicaState`` with its broker epoch.
TOPIC_IDS_FETCH_VERSION = 13
REPLICA_STATE_FETCH_VERSION = 15
#: ListOffsets special timestamps (Kafka's ListOffsetsRequest.LATEST_TIMESTAMP / EARLIEST_TIMESTAMP).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
#: Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET in OffsetsForLeaderEpoch and diverging epochs.
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
CONNECT_TIMEOUT_S = 10.0


class ReplicaFetcherConfigError(ValueError):
    """A ``replica.*`` setting is malformed or inconsistent; the message names it."""


@dataclass(frozen=True)
class ReplicaFetcherConfig:
    """The follower's fetch settings, Kafka's names and defaults (KafkaConfig / ReplicationConfigs).

    ``replica.lag.time.max.ms`` is here too: Kafka requires ``replica.fetch.wait.max.ms`` to be
    below it (a follower long-polling longer than the lag bound would drop out of the ISR
    while idle), and the leader's ISR policy (:mod:`kraft_node.broker.isr_policy`) reads it."""
    num_replica_fetchers: int = 1
    replica_fetch_backoff_ms: int = 1000
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_response_max_bytes: int = 10 * 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_socket_timeout_ms: int = 30_000
    replica_lag_time_max_ms: int = 30_000

    #: Kafka key -> attribute
    KEYS = {
        "num.replica.fetchers": "num_replica_fetchers",
        "replica.fetch.backoff.ms": "replica_fetch_backoff_ms",
        "replica.fetch.max.bytes": "replica_fetch_max_bytes",
        "replica.fetch.response.max.bytes": "replica_fetch_response_max_bytes",
        "replica.fetch.wait.max.ms": "replica_fetch_wait_max_ms",
        "replica.fetch.min.bytes": "replica_fetch_min_bytes",
        "replica.socket.timeout.ms": "replica_socket_timeout_ms",
        "replica.lag.time.max.ms": "replica_lag_time_max_ms",
    }
    #: Kafka replication settings kraft does not implement: refused by name when set.
    UNSUPPORTED = ("leader.replication.throttled.rate", "follower.replication.throttled.rate",
                   "replica.socket.receive.buffer.bytes")

    def __post_init__(self) -> None:
        minimums = {"num.replica.fetchers": 1, "replica.fetch.backoff.ms": 0, "replica.fetch.max.bytes": 0,
                    "replica.fetch.response.max.bytes": 0, "replica.fetch.wait.max.ms": 0,
                    "replica.fetch.min.bytes": 1, "replica.socket.timeout.ms": 1, "replica.lag.time.max.ms": 1}
        for key, attr in self.KEYS.items():
            value = getattr(self, attr)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ReplicaFetcherConfigError(f"{key} must be an integer, not {value!r}")
            if value < minimums[key]:
                raise ReplicaFetcherConfigError(f"{key} must be at least {minimums[key]}, not {value}")
        # Kafka's KafkaConfig.validateValues, same words
        if self.replica_fetch_wait_max_ms > self.replica_socket_timeout_ms:
            raise ReplicaFetcherConfigError("replica.socket.timeout.ms should always be at least "
                                            "replica.fetch.wait.max.ms to prevent unnecessary socket timeouts")
        if self.replica_fetch_wait_max_ms > self.replica_lag_time_max_ms:
            raise ReplicaFetcherConfigError("replica.fetch.wait.max.ms should always be less than or equal to "
                                            "replica.lag.time.max.ms to prevent frequent changes in ISR")

    @classmethod
    def from_properties(cls, props: Mapping[str, str], *, source: str = "config") -> "ReplicaFetcherConfig":
        """Read the ``replica.*`` keys of a server.properties mapping.  A malformed value or a set
        replication setting kraft does not implement raises :class:`ReplicaFetcherConfigError`
        naming ``source`` and the key."""
        for key in cls.UNSUPPORTED:
            if key in props:
                raise ReplicaFetcherConfigError(f"{source}: {key} is not supported by kraft (replication quotas and "
                                                "replica selectors are not implemented); remove it")
        values: dict[str, int] = {}
        for key, attr in cls.KEYS.items():
            if key in props:
                text = str(props[key]).strip()
                try:
                    values[attr] = int(text)
                except ValueError:
                    raise ReplicaFetcherConfigError(f"{source}: {key}={text!r} is not an integer") from None
        try:
            return cls(**values)
        except ReplicaFetcherConfigError as exc:
            raise ReplicaFetcherConfigError(f"{source}: {exc}") from None


class FollowerPartition(Protocol):
    """What the fetcher needs of a follower partition (H3's ``Partition`` provides it).

    ``maybe_update_high_watermark_from_leader(hw)`` is given the leader's high watermark
    already capped at the local log end offset; the partition keeps it if it is higher than
    its own (and may wake fetches waiting on it)."""

    @property
    def log(self) -> KafkaLog: ...

    @property
    def leader_id(self) -> int: ...

    @property
    def leader_epoch(self) -> int: ...

    @property
    def topic_id(self) -> Uuid: ...

    @property
    def topic_partition(self) -> TopicPartition: ...

    @property
    def high_watermark(self) -> int: ...

    def maybe_update_high_watermark_from_leader(self, hw: int) -> Any: ...


class BrokerEndPoint(NamedTuple):
    """A source broker on the inter-broker listener (Kafka's ``BrokerEndPoint``)."""
    id: int
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.id} at {self.host}:{self.port}"


class FetchPhase(enum.Enum):
    """Kafka's ReplicaState of a fetch: truncating before fetching, or fetching."""
    TRUNCATING = "Truncating"
    FETCHING = "Fetching"


@dataclass(frozen=True)
class PartitionFetchState:
    """One partition in a fetcher (Kafka's ``PartitionFetchState``).  Immutable: every change
    is a new state, so a fetch answer can be checked against the state it was asked for.

    ``delay_until``: loop time before which the partition is not fetched (backoff after an
    error), or None.  ``lag``: leader high watermark minus our next offset after the last
    answer, None before the first one.  ``last_fetched_epoch``: the epoch of our last batch
    (the diverging-epoch check), None for a log with no epoch yet."""
    topic_id: Uuid
    fetch_offset: int
    lag: int | None
    current_leader_epoch: int
    phase: FetchPhase
    last_fetched_epoch: int | None
    delay_until: float | None = None

    def is_delayed(self, now: float) -> bool:
        return self.delay_until is not None and now < self.delay_until

    def is_ready_for_fetch(self, now: float) -> bool:
        return self.phase is FetchPhase.FETCHING and not self.is_delayed(now)

    def is_truncating(self, now: float) -> bool:
        return self.phase is FetchPhase.TRUNCATING and not self.is_delayed(now)

    @property
    def is_replica_in_sync(self) -> bool:
        return self.lag is not None and self.lag <= 0


class TruncationBelowHighWatermark(KraftStorageError):
    """A truncation would have removed records below the partition's high watermark."""


class LeaderOffsetError(Exception):
    """ListOffsets to the leader answered an error for the partition (``error`` is its code)."""

    def __init__(self, error: int, message: str) -> None:
        super().__init__(message)
        self.error = error


class OffsetTruncationState(NamedTuple):
    """Where to truncate, and whether that is final (Kafka's ``OffsetTruncationState``)."""
    offset: int
    truncation_completed: bool


def offset_truncation_state(log_: KafkaLog, fetch_offset: int, leader_epoch: int,
                            leader_end_offset: int) -> OffsetTruncationState:
    """The truncation offset for a leader's diverging epoch (see the module doc); pure but for
    reading ``log_``'s epoch cache and end offset."""
    replica_end = log_.log_end_offset
    if leader_end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(fetch_offset, True)
    if leader_epoch == UNDEFINED_EPOCH:
        return OffsetTruncationState(min(leader_end_offset, replica_end), True)
    local = log_.end_offset_for_epoch(leader_epoch)
    if local.epoch == UNDEFINED_EPOCH or local.end_offset == UNDEFINED_EPOCH_OFFSET:
        return OffsetTruncationState(min(leader_end_offset, replica_end), True)
    if local.epoch != leader_epoch:
        return OffsetTruncationState(min(local.end_offset, replica_end), False)
    return OffsetTruncationState(min(local.end_offset, leader_end_offset, replica_end), True)


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit wrap-around)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def fetcher_id_for(tp: TopicPartition, num_fetchers: int) -> int:
    """Kafka's ``AbstractFetcherManager.getFetcherId``: ``Utils.abs(31 * topic.hashCode + partition)
    % numFetchers`` in 32-bit arithmetic (``Utils.abs(Integer.MIN_VALUE)`` is 0)."""
    n = (31 * java_string_hash(tp.topic) + tp.partition) & 0xFFFFFFFF
    n = n - (1 << 32) if n >= 1 << 31 else n
    n = 0 if n == -(1 << 31) else abs(n)
    return n % num_fetchers


@dataclass
class FetcherStats:
    """Counts for Kafka's FetcherStats (RequestsPerSec, BytesPerSec) and the lag gauges."""
    requests: int = 0
    failed_requests: int = 0
    bytes: int = 0
    lag: dict[TopicPartition, int] = field(default_factory=dict)
    #: fetch session figures: full fetches sent, partitions named in requests / in answers
    full_fetches: int = 0
    partitions_sent: int = 0
    partitions_answered: int = 0


class _LeaderEndPoint:
    """The connection to the source broker (Kafka's ``RemoteLeaderEndPoint`` + blocking sender):
    one ``KafkaConnection``, reopened after a failure, and the API versions learnt from the
    leader once per connection."""

    def __init__(self, source: BrokerEndPoint, *, client_id: str, ssl_context: ssl.SSLContext | None,
                 request_timeout_s: float) -> None:
        self.source = source
        self.client_id = client_id
        self.ssl_context = ssl_context
        self.request_timeout_s = request_timeout_s
        self._conn: KafkaConnection | None = None
        self._versions: dict[int, tuple[int, int]] = {}
        self.connections_opened = 0

    async def connection(self) -> KafkaConnection:
        conn = self._conn
        if conn is not None and conn.connected:
            return conn
        await self.close()
        conn = KafkaConnection(self.source.host, self.source.port, client_id=self.client_id,
                               ssl_context=self.ssl_context)
        await conn.connect(CONNECT_TIMEOUT_S)
        try:
            self._versions = await self._api_versions(conn)
        except BaseException:
            await conn.close()
            raise
        self._conn = conn
        self.connections_opened += 1
        return conn

    async def _api_versions(self, conn: KafkaConnection) -> dict[int, tuple[int, int]]:
        top = ApiVersionsRequest.HIGHEST_VERSION
        resp = await conn.request(ApiVersionsRequest(client_software_name="kraft", client_software_version="1"),
                                  top, timeout=self.request_timeout_s)
        if resp.error_code == UNSUPPORTED_VERSION:
            resp = await conn.request(ApiVersionsRequest(), 0, timeout=self.request_timeout_s)
        if resp.error_code != 0:
            raise ConnectionClosed(f"ApiVersions to broker {self.source} answered {error_name(resp.error_code)}")
        return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in resp.api_keys}

    def version(self, api_key: int, lowest_needed: int | None = None) -> int:
        """The highest version of ``api_key`` both sides support (at least ``lowest_needed``)."""
        info = API_INFO[api_key]
        theirs = self._versions.get(api_key)
        low = max(info.lowest, lowest_needed or 0)
        if theirs is None:
            raise ConnectionClosed(f"broker {self.source} does not offer {info.name} (api key {api_key})")
        high = min(info.highest, theirs[1])
        if high < max(low, theirs[0]):
            need = f"v{low}+" if lowest_needed else f"v{info.lowest}-{info.highest}"
            raise ConnectionClosed(f"broker {self.source} supports {info.name} v{theirs[0]}-{theirs[1]}; "
                                   f"replication needs {need}")
        return high

    async def request(self, body: Any, version: int, timeout_s: float) -> Any:
        conn = await self.connection()
        try:
            return await conn.request(body, version, timeout=timeout_s)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()


#: the failures of one request that delay partitions rather than fail them
_REQUEST_ERRORS = (OSError, ConnectionError, RequestTimeout, MessageError, TimeoutError)


class ReplicaFetcher:
    """Fetches every partition this broker follows whose leader is ``source`` (one of
    ``num.replica.fetchers`` per leader).  See the module doc for the loop and the invariants.

    ``broker_epoch()``: this broker's epoch, sent in ``ReplicaState`` (v15+) so the leader can
    fence a stale incarnation.  ``on_failed(tp, reason)``: called when a partition is marked
    failed (after it is removed from this fetcher)."""

    def __init__(self, fetcher_id: int, source: BrokerEndPoint, *, broker_id: int,
                 broker_epoch: Callable[[], int], config: ReplicaFetcherConfig,
                 on_failed: Callable[[TopicPartition, str], None],
                 ssl_context: ssl.SSLContext | None = None, cluster_id: str | None = None,
                 on_updated: Callable[[TopicPartition], None] | None = None) -> None:
        self.fetcher_id = fetcher_id
        #: called after an append or a high watermark change (Kafka's completeDelayedFetchRequests:
        #: fetches parked on this follower, e.g. KIP-392 consumers, are re-run)
        self._on_updated = on_updated
        self.source = source
        self.broker_id = broker_id
        self.config = config
        self.cluster_id = cluster_id
        self._broker_epoch = broker_epoch
        self._on_failed = on_failed
        self.name = f"ReplicaFetcherThread-{fetcher_id}-{source.id}"
        self._prefix = f"[ReplicaFetcher replicaId={broker_id}, leaderId={source.id}, fetcherId={fetcher_id}] "
        self.leader = _LeaderEndPoint(source, client_id=self.name, ssl_context=ssl_context,
                                      request_timeout_s=config.replica_socket_timeout_ms / 1000)
        #: the fetch session with ``source`` (KIP-227); a new fetcher (new leader address) starts a new one
        self.session = FetchSessionHandler(source.id, self._prefix)
        #: ``leader.connections_opened`` when the session was last checked (a reconnect resets it)
        self._session_connection = 0
        #: insertion order is the fetch order; a partition moves to the end when its state changes
        self._states: dict[TopicPartition, PartitionFetchState] = {}
        self._partitions: dict[TopicPartition, FollowerPartition] = {}
        self._wakeup = asyncio.Event()
        #: partitions answered OFFSET_OUT_OF_RANGE in the last fetch, handled after it (ListOffsets awaits)
        self._out_of_range: list[tuple[TopicPartition, PartitionFetchState]] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.stats = FetcherStats()
        self.backoff_s = config.replica_fetch_backoff_ms / 1000
        #: rounds that raised something unexpected (Kafka: a dead thread); the loop goes on after a backoff
        self.unexpected_errors = 0

    # ------------------------------------------------------------------ partitions
    @property
    def partitions(self) -> set[TopicPartition]:
        return set(self._states)

    @property
    def partition_count(self) -> int:
        return len(self._states)

    def fetch_state(self, tp: TopicPartition) -> PartitionFetchState | None:
        return self._states.get(tp)

    def add_partitions(self, partitions: Iterable[FollowerPartition]) -> set[TopicPartition]:
        """Start fetching ``partitions`` (Kafka's ``addPartitions``).  A partition already here
        with the same leader epoch keeps its state; otherwise it starts at its log end offset if
        its log has a leader epoch, else at its high watermark, truncating there first."""
        added: set[TopicPartition] = set()
        for p in partitions:
            tp = p.topic_partition
            current = self._states.get(tp)
            self._partitions[tp] = p
            if current is not None and current.current_leader_epoch == p.leader_epoch:
                added.add(tp)
                continue
            log_ = p.log
            latest = log_.latest_epoch
            if latest is not None:
                state = PartitionFetchState(p.topic_id, log_.log_end_offset, None, p.leader_epoch,
                                            FetchPhase.FETCHING, latest)
            else:
                state = PartitionFetchState(p.topic_id, p.high_watermark, None, p.leader_epoch,
                                            FetchPhase.TRUNCATING, None)
            self._states.pop(tp, None)
            self._states[tp] = state
            added.add(tp)
        if added:
            self._wakeup.set()
        return added

    def remove_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, PartitionFetchState]:
        removed: dict[TopicPartition, PartitionFetchState] = {}
        for tp in tps:
            state = self._states.pop(tp, None)
            self._partitions.pop(tp, None)
            self.stats.lag.pop(tp, None)
            if state is not None:
                removed[tp] = state
        return removed

    def _update(self, tp: TopicPartition, state: PartitionFetchState) -> None:
        """Replace the state and move the partition to the end of the fetch order (fairness)."""
        self._states.pop(tp, None)
        self._states[tp] = state

    def _delay(self, tps: Iterable[TopicPartition], now: float) -> None:
        for tp in tps:
            state = self._states.get(tp)
            if state is not None and not state.is_delayed(now):
                self._update(tp, replace(state, delay_until=now + self.backoff_s))

    def _mark_failed(self, tp: TopicPartition, reason: str) -> None:
        log.error("%sPartition %s marked as failed: %s", self._prefix, tp, reason)
        self.remove_partitions([tp])
        self._on_failed(tp, reason)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def close(self) -> None:
        self._closed = True
        self._wakeup.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        await self.leader.close()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                await self.do_work()
            except asyncio.CancelledError:
                raise
            except Exception:
                # Kafka's thread would die and count in DeadThreadCount; this loop logs, counts,
                # backs every partition off and goes on
                self.unexpected_errors += 1
                log.exception("%sunexpected error in the fetch loop; backing off %gs", self._prefix, self.backoff_s)
                self._delay(list(self._states), loop.time())
                await asyncio.sleep(self.backoff_s)

    async def do_work(self) -> None:
        """One round: truncate partitions that must, then fetch (or wait if none is ready)."""
        self._maybe_truncate()
        await self._maybe_fetch()

    # ------------------------------------------------------------------ truncation
    def _maybe_truncate(self) -> None:
        now = asyncio.get_running_loop().time()
        for tp, state in list(self._states.items()):
            if not state.is_truncating(now):
                continue
            # no leader epoch in the log: truncate to the high watermark, the fetch offset
            if self._truncate(tp, state.fetch_offset, f"local high watermark {state.fetch_offset} (the log has no "
                                                      "leader epoch)"):
                self._update(tp, replace(state, phase=FetchPhase.FETCHING,
                                         last_fetched_epoch=self._partitions[tp].log.latest_epoch))

    def _truncate(self, tp: TopicPartition, offset: int, why: str) -> bool:
        """Truncate ``tp``'s log to ``offset`` unless that would go below its high watermark;
        False (the partition marked failed) when refused or when the log fails."""
        partition = self._partitions.get(tp)
        if partition is None:
            return False
        log_ = partition.log
        try:
            if offset < log_.log_end_offset:
                effective = offset
                if offset > log_.log_start_offset:
                    data = log_.read(offset, 0, min_one_batch=True)
                    if data.first_batch_offset is not None and data.first_batch_offset < offset:
                        effective = data.first_batch_offset  # the straddling batch goes whole
                hw = partition.high_watermark
                if effective < hw:
                    raise TruncationBelowHighWatermark(
                        f"refusing to truncate {tp} to offset {effective} (asked: {offset}), below its high "
                        f"watermark {hw}; the truncation came from {why}. Records below the high watermark may have "
                        "been acknowledged, so the partition stops fetching until new metadata re-adds it")
                log.info("%sTruncating partition %s to offset %d (%s)", self._prefix, tp, effective, why)
                log_.truncate_to(offset)
                _reload_producer_state(partition, log_)
            return True
        except TruncationBelowHighWatermark as exc:
            self._mark_failed(tp, str(exc))
        except Exception as exc:
            self._mark_failed(tp, f"failed to truncate {tp} at offset {offset}: {type(exc).__name__}: {exc}")
        return False

    def _truncate_on_fetch_response(self, tp: TopicPartition, epoch: int, end_offset: int) -> None:
        state = self._states.get(tp)
        partition = self._partitions.get(tp)
        if state is None or partition is None:
            return
        target = offset_truncation_state(partition.log, state.fetch_offset, epoch, end_offset)
        why = f"the leader's diverging epoch {epoch} ending at offset {end_offset}"
        if self._truncate(tp, target.offset, why):
            log_ = partition.log
            self._update(tp, replace(state, fetch_offset=log_.log_end_offset, phase=FetchPhase.FETCHING,
                                     last_fetched_epoch=log_.latest_epoch))

    # ------------------------------------------------------------------ fetch
    def _build_fetch(self, version: int,
                     now: float) -> tuple[Any, int, dict[TopicPartition, PartitionFetchState]] | None:
        """The Fetch for every ready partition, the version to send it at, and the states it asks
        for.  Through the fetch session (``self.session``): a full fetch names every ready
        partition; an incremental one only those whose request data changed, and forgets those
        no longer ready (removed, or delayed by a backoff) -- the leader reads the others from
        the data it kept.  The asked states are every ready partition either way."""
        ready = {tp: s for tp, s in self._states.items() if s.is_ready_for_fetch(now)}
        if not ready:
            return None
        if self.leader.connections_opened != self._session_connection:
            if self._session_connection and not self.session.next_metadata.is_full:
                # a new connection may reach a restarted leader: start again with a full fetch
                self.session.handle_error("the connection to the leader was reopened")
            self._session_connection = self.leader.connections_opened
        use_ids = version >= TOPIC_IDS_FETCH_VERSION and all(s.topic_id != ZERO_UUID for s in ready.values())
        if version >= TOPIC_IDS_FETCH_VERSION and not use_ids:
            version = MIN_REPLICA_FETCH_VERSION  # Kafka: v12 when a partition has no topic id
        cfg = self.config
        max_bytes = cfg.replica_fetch_max_bytes
        builder = self.session.new_builder()
        add = builder.add
        partitions = self._partitions
        for tp, s in ready.items():
            add(tp, SessionPartitionData(s.topic_id, s.fetch_offset, partitions[tp].log.log_start_offset, max_bytes,
                                         s.current_leader_epoch,
                                         -1 if s.last_fetched_epoch is None else s.last_fetched_epoch))
        data = builder.build()
        topics: dict[str, Any] = {}
        for tp, d in data.to_send.items():
            topic = topics.get(tp.topic)
            if topic is None:
                topic = topics[tp.topic] = FetchRequest.FetchTopic(topic=tp.topic, topic_id=d.topic_id)
            topic.partitions.append(FetchRequest.FetchPartition(
                partition=tp.partition, current_leader_epoch=d.current_leader_epoch, fetch_offset=d.fetch_offset,
                last_fetched_epoch=d.last_fetched_epoch, log_start_offset=d.log_start_offset,
                partition_max_bytes=d.max_bytes))
        forgotten: dict[tuple[str, Uuid], Any] = {}
        for topic_id, tp in data.forgotten(version):
            ft = forgotten.get((tp.topic, topic_id))
            if ft is None:
                ft = forgotten[(tp.topic, topic_id)] = FetchRequest.ForgottenTopic(topic=tp.topic, topic_id=topic_id)
            ft.partitions.append(tp.partition)
        meta = data.metadata
        request = FetchRequest(cluster_id=self.cluster_id, replica_id=self.broker_id,
                               max_wait_ms=cfg.replica_fetch_wait_max_ms, min_bytes=cfg.replica_fetch_min_bytes,
                               max_bytes=cfg.replica_fetch_response_max_bytes, isolation_level=0,
                               session_id=meta.session_id, session_epoch=meta.epoch, topics=list(topics.values()),
                               forgotten_topics_data=list(forgotten.values()))
        if version >= REPLICA_STATE_FETCH_VERSION:
            request.replica_state = FetchRequest.ReplicaState(replica_id=self.broker_id,
                                                              replica_epoch=self._broker_epoch())
            request.replica_id = -1
        self.stats.partitions_sent += len(data.to_send)
        if meta.is_full:
            self.stats.full_fetches += 1
        return request, version, ready

    async def _maybe_fetch(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        if not any(s.is_ready_for_fetch(now) for s in self._states.values()):
            await self._idle(now)
            return
        try:
            await self.leader.connection()
            version = self.leader.version(int(FetchRequest.API_KEY), MIN_REPLICA_FETCH_VERSION)
        except _REQUEST_ERRORS as exc:
            self.session.handle_error(exc)
            self._request_failed(f"cannot reach leader {self.source}: {exc}")
            return
        built = self._build_fetch(version, loop.time())
        if built is None:
            return
        request, version, asked = built
        timeout_s = (self.config.replica_socket_timeout_ms + self.config.replica_fetch_wait_max_ms) / 1000
        try:
            response = await self.leader.request(request, version, timeout_s)
        except _REQUEST_ERRORS as exc:
            self.session.handle_error(exc)
            self._request_failed(f"error in response for fetch request to leader {self.source}: {exc}")
            return
        self.stats.requests += 1
        self._process_fetch_response(response, version, asked)
        await self._handle_out_of_range()

    async def _idle(self, now: float) -> None:
        """Nothing to fetch: wait for a partition to be added or a delay to expire, at most the backoff."""
        delays = [s.delay_until for s in self._states.values() if s.delay_until is not None and s.delay_until > now]
        wait = min([self.backoff_s, *(d - now for d in delays)])
        self._wakeup.clear()
        try:
            await asyncio.wait_for(self._wakeup.wait(), max(wait, 0.001))
        except TimeoutError:
            pass

    def _request_failed(self, why: str) -> None:
        if self._closed:
            return
        self.stats.failed_requests += 1
        log.warning("%s%s; backing off %d partitions for %gs", self._prefix, why, len(self._states), self.backoff_s)
        self._delay(list(self._states), asyncio.get_running_loop().time())

    def _process_fetch_response(self, response: Any, version: int,
                                asked: dict[TopicPartition, PartitionFetchState]) -> None:
        now = asyncio.get_running_loop().time()
        with_error: list[TopicPartition] = []
        self._out_of_range = []
        code = int(response.error_code)
        answered = self.session.response_data(response, version) if code == 0 else {}
        if not self.session.handle_response(response, version, answered):
            if code == 0:
                return  # an answer that does not fit the session: not used; the next fetch is full
            if code in SESSION_ERRORS:
                # the session is gone (leader restarted, evicted) or out of step: a full fetch at once
                log.info("%sfetch session with leader %s answered %s; the next fetch is a full one", self._prefix,
                         self.source, error_name(code))
                return
            self._request_failed(f"leader {self.source} answered the fetch with {error_name(code)}")
            return
        self.stats.partitions_answered += len(answered)
        for tp, pd in answered.items():
            sent = asked.get(tp)
            current = self._states.get(tp)
            # apply only an answer to the state that asked: same offset and epoch, still ready
            if sent is None or current is None or current.fetch_offset != sent.fetch_offset or \
                    current.current_leader_epoch != sent.current_leader_epoch or \
                    not current.is_ready_for_fetch(now):
                continue
            if self._process_partition(tp, current, pd):
                with_error.append(tp)
        if with_error:
            self._delay(with_error, now)

    def _process_partition(self, tp: TopicPartition, state: PartitionFetchState, pd: Any) -> bool:
        """Apply one partition's answer; True if the partition must back off."""
        code = pd.error_code
        if code == Errors.NONE:
            diverging = pd.diverging_epoch
            if diverging is not None and (diverging.epoch >= 0 or diverging.end_offset >= 0):
                # truncate now; the watermarks come with the next fetch, after the truncation
                self._truncate_on_fetch_response(tp, diverging.epoch, diverging.end_offset)
                return False
            try:
                self._append(tp, state, pd)
            except CorruptRecordError as exc:
                # Kafka: log and retry; a torn or transient answer is fixed by the next fetch
                log.error("%sFound invalid messages during fetch for partition %s offset %d: %s", self._prefix,
                          tp, state.fetch_offset, exc)
                return True
            except Exception as exc:
                self._mark_failed(tp, f"unexpected error while processing data for partition {tp} at offset "
                                      f"{state.fetch_offset}: {type(exc).__name__}: {exc}")
            return False
        if code == Errors.OFFSET_OUT_OF_RANGE:
            self._out_of_range.append((tp, state))
            return False
        if code == Errors.FENCED_LEADER_EPOCH:
            return self._on_partition_fenced(tp, state.current_leader_epoch)
        if code == Errors.UNKNOWN_LEADER_EPOCH:
            log.debug("%sRemote broker has a smaller leader epoch for partition %s than this replica's current "
                      "leader epoch of %d.", self._prefix, tp, state.current_leader_epoch)
        elif code == Errors.NOT_LEADER_OR_FOLLOWER:
            log.debug("%sRemote broker is not the leader for partition %s, which could indicate that the partition "
                      "is being moved", self._prefix, tp)
        elif code in (Errors.UNKNOWN_TOPIC_OR_PARTITION, Errors.UNKNOWN_TOPIC_ID, Errors.INCONSISTENT_TOPIC_ID):
            log.warning("%sReceived %s from the leader for partition %s. This error may be returned transiently when "
                        "the partition is being created or deleted, but it is not expected to persist.",
                        self._prefix, error_name(code), tp)
        else:
            log.error("%sError for partition %s at offset %d: %s", self._prefix, tp, state.fetch_offset,
                      error_name(code))
        return True

    def _append(self, tp: TopicPartition, state: PartitionFetchState, pd: Any) -> None:
        partition = self._partitions[tp]
        log_ = partition.log
        if state.fetch_offset != log_.log_end_offset:
            raise RuntimeError(f"Offset mismatch for partition {tp}: fetched offset = {state.fetch_offset}, "
                               f"log end offset = {log_.log_end_offset}.")
        records = pd.records
        appended = 0
        last_offset = -1
        if records:
            view = memoryview(records) if not isinstance(records, memoryview) else records
            # whole batches only: a leader may cut the last one at the byte limit (KIP-74)
            whole = scan_batches(view, crc_mode=CRC_SKIP, allow_partial_tail=True).end
            if whole > 0:
                psm = getattr(partition, "producer_state", None)
                # the producers' state follows the leader's batches (a follower that becomes leader
                # deduplicates retries of what it replicated, Kafka's ProducerStateManager on followers)
                info = (append_replicated_as_follower(log_, psm, view[:whole]) if psm is not None
                        else log_.append_as_follower(view[:whole]))
                appended, last_offset = whole, info.last_offset
        hw = min(int(pd.high_watermark), log_.log_end_offset)
        hw_moved = bool(partition.maybe_update_high_watermark_from_leader(hw)) if hw >= 0 else False
        leader_start = int(pd.log_start_offset)
        if leader_start > log_.log_start_offset:
            # never past our high watermark or log end: the rest comes with later fetches
            new_start = min(leader_start, partition.high_watermark, log_.log_end_offset)
            if new_start > log_.log_start_offset:
                log_.advance_log_start_offset(new_start)
        next_offset = last_offset + 1 if appended else state.fetch_offset
        lag = max(0, int(pd.high_watermark) - next_offset)
        self.stats.lag[tp] = lag
        self.stats.bytes += appended
        if appended or state.lag is None:
            self._update(tp, replace(state, fetch_offset=next_offset, lag=lag, phase=FetchPhase.FETCHING,
                                     last_fetched_epoch=log_.latest_epoch if appended else state.last_fetched_epoch,
                                     delay_until=None))
        if (appended or hw_moved) and self._on_updated is not None:
            try:
                self._on_updated(tp)
            except Exception:
                log.exception("%sthe update hook failed for %s", self._prefix, tp)

    def _on_partition_fenced(self, tp: TopicPartition, request_epoch: int) -> bool:
        """Kafka's ``onPartitionFenced``: True to retry later, False when the partition failed."""
        state = self._states.get(tp)
        if state is None:
            return False
        if request_epoch == state.current_leader_epoch:
            self._mark_failed(tp, f"Partition {tp} has an older epoch ({state.current_leader_epoch}) than the current "
                                  "leader. Will await the new LeaderAndIsr state before resuming fetching.")
            return False
        log.info("%sPartition %s has a newer epoch (%d) than the current leader. Retry the partition later.",
                 self._prefix, tp, state.current_leader_epoch)
        return True

    # ------------------------------------------------------------------ out of range
    async def _handle_out_of_range(self) -> None:
        pending, self._out_of_range = self._out_of_range, []
        delayed: list[TopicPartition] = []
        for tp, state in pending:
            if not await self._handle_out_of_range_error(tp, state):
                delayed.append(tp)
        if delayed:
            self._delay(delayed, asyncio.get_running_loop().time())

    async def _handle_out_of_range_error(self, tp: TopicPartition, state: PartitionFetchState) -> bool:
        """Kafka's ``handleOutOfRangeError``: True when handled (or the partition failed)."""
        try:
            leader_end = await self._list_offset(tp, state, LATEST_TIMESTAMP)
            if self._states.get(tp) is not state:
                return True  # changed while we asked: the new state decides
            partition = self._partitions[tp]
            log_ = partition.log
            replica_end = log_.log_end_offset
            if leader_end < replica_end:
                log.warning("%sReset fetch offset for partition %s from %d to current leader's latest offset %d",
                            self._prefix, tp, replica_end, leader_end)
                if not self._truncate(tp, leader_end, f"the leader's latest offset {leader_end} (out of range)"):
                    return True
                self.stats.lag[tp] = 0
                self._update(tp, replace(state, fetch_offset=log_.log_end_offset, lag=0,
                                         phase=FetchPhase.FETCHING, last_fetched_epoch=log_.latest_epoch))
                return True
            leader_start = await self._list_offset(tp, state, EARLIEST_TIMESTAMP)
            if self._states.get(tp) is not state:
                return True
            offset_to_fetch = max(leader_start, replica_end)
            if leader_start > replica_end:
                log.warning("%sTruncate fully and reset fetch offset for partition %s from %d to the current "
                            "leader's start offset %d because the local replica's end offset is smaller than the "
                            "current leader's start offsets.", self._prefix, tp, replica_end, leader_start)
                log_.truncate_fully_and_start_at(leader_start)
                _reload_producer_state(partition, log_)
                partition.maybe_update_high_watermark_from_leader(leader_start)
            else:
                log.info("%sReset fetch offset for partition %s from %d to the current local replica's end offset %d",
                         self._prefix, tp, replica_end, offset_to_fetch)
            lag = leader_end - offset_to_fetch
            self.stats.lag[tp] = lag
            self._update(tp, replace(state, fetch_offset=offset_to_fetch, lag=lag, phase=FetchPhase.FETCHING,
                                     last_fetched_epoch=log_.latest_epoch))
            log.info("%sCurrent offset %d for partition %s is out of range, which typically implies a leader change. "
                     "Reset fetch offset to %d", self._prefix, state.fetch_offset, tp, offset_to_fetch)
            return True
        except LeaderOffsetError as exc:
            if exc.error == Errors.FENCED_LEADER_EPOCH:
                # failed (our epoch is the fenced one): handled; a newer epoch here: retry after the backoff
                return not self._on_partition_fenced(tp, state.current_leader_epoch)
            log.info("%sCould not fetch offset for %s due to error: %s", self._prefix, tp, exc)
            return False
        except _REQUEST_ERRORS as exc:
            log.info("%sCould not fetch offset for %s due to error: %s", self._prefix, tp, exc)
            return False
        except Exception as exc:
            log.error("%sError getting offset for partition %s: %s: %s", self._prefix, tp, type(exc).__name__, exc)
            return False

    async def _list_offset(self, tp: TopicPartition, state: PartitionFetchState, timestamp: int) -> int:
        """The leader's offset for ``timestamp`` (latest / earliest) by ListOffsets as a replica."""
        version = self.leader.version(int(ListOffsetsRequest.API_KEY))
        request = ListOffsetsRequest(replica_id=self.broker_id, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=tp.topic, partitions=[
                ListOffsetsRequest.ListOffsetsPartition(partition_index=tp.partition,
                                                        current_leader_epoch=state.current_leader_epoch,
                                                        timestamp=timestamp)])])
        response = await self.leader.request(request, version, self.config.replica_socket_timeout_ms / 1000)
        for topic in response.topics:
            if topic.name != tp.topic:
                continue
            for p in topic.partitions:
                if p.partition_index == tp.partition:
                    if p.error_code != 0:
                        raise LeaderOffsetError(p.error_code, f"ListOffsets for {tp} from leader {self.source} "
                                                              f"answered {error_name(p.error_code)}")
                    return int(p.offset)
        raise LeaderOffsetError(int(Errors.UNKNOWN_SERVER_ERROR),
                                f"ListOffsets answer from leader {self.source} does not name {tp}")


class ReplicaFetcherManager:
    """The broker's fetchers (Kafka's ``ReplicaFetcherManager``), keyed by ``(leader id, fetcher id)``.

    ``leader_endpoint(broker_id)`` resolves a leader to its inter-broker listener address from
    the latest image (None while the broker is not alive there: the partition is not fetched
    until the next metadata change re-adds it, as in Kafka).

    Metrics (when ``metrics`` is given; Kafka's names under ``kafka.server:type=ReplicaFetcherManager``
    with ``clientId=Replica`` folded away): ``MaxLag``, ``FailedPartitionsCount``, ``DeadThreadCount``;
    and ``kafka.server:type=FetcherStats`` ``RequestsPerSec`` / ``BytesPerSec`` as counters summed over
    the fetchers."""

    def __init__(self, *, broker_id: int, broker_epoch: Callable[[], int],
                 leader_endpoint: Callable[[int], tuple[str, int] | None], config: ReplicaFetcherConfig | None = None,
                 ssl_context: ssl.SSLContext | None = None, cluster_id: str | None = None,
                 metrics: Any = None, on_updated: Callable[[TopicPartition], None] | None = None) -> None:
        self.broker_id = broker_id
        #: ``(tp) -> None`` after a follower append or high watermark change (see ReplicaFetcher)
        self.on_updated = on_updated
        self.config = config or ReplicaFetcherConfig()
        self._broker_epoch = broker_epoch
        self._leader_endpoint = leader_endpoint
        self._ssl_context = ssl_context
        self._cluster_id = cluster_id
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        #: partitions marked failed, with the reason (Kafka's FailedPartitions)
        self.failed_partitions: dict[TopicPartition, str] = {}
        #: totals of fetchers already closed, so the counters stay monotonic
        self._closed_requests = 0
        self._closed_bytes = 0
        self._metrics: list[Any] = []
        #: fetchers being closed in the background
        self._closing: set[asyncio.Task[None]] = set()
        self._registry = metrics
        if metrics is not None:
            self._register_metrics(metrics)

    def _register_metrics(self, registry: Any) -> None:
        g = registry.callback_gauge
        self._metrics = [
            g("kafka.server", "ReplicaFetcherManager", "MaxLag",
              "Largest lag in records between a follower and its leader over all followed partitions", self.max_lag),
            g("kafka.server", "ReplicaFetcherManager", "FailedPartitionsCount",
              "Followed partitions marked failed", lambda: len(self.failed_partitions)),
            g("kafka.server", "ReplicaFetcherManager", "DeadThreadCount",
              "Fetchers whose task ended", lambda: sum(1 for f in self.fetchers.values() if not f.running)),
            registry.callback_counter("kafka.server", "FetcherStats", "RequestsPerSec",
                                      "Fetch requests sent by the replica fetchers", self.requests_sent),
            registry.callback_counter("kafka.server", "FetcherStats", "BytesPerSec",
                                      "Bytes appended by the replica fetchers", self.bytes_fetched),
        ]

    def max_lag(self) -> int:
        return max((lag for f in self.fetchers.values() for lag in f.stats.lag.values()), default=0)

    def requests_sent(self) -> int:
        return self._closed_requests + sum(f.stats.requests for f in self.fetchers.values())

    def bytes_fetched(self) -> int:
        return self._closed_bytes + sum(f.stats.bytes for f in self.fetchers.values())

    def fetcher_id(self, tp: TopicPartition) -> int:
        return fetcher_id_for(tp, self.config.num_replica_fetchers)

    def get_fetcher(self, tp: TopicPartition) -> ReplicaFetcher | None:
        for f in self.fetchers.values():
            if f.fetch_state(tp) is not None:
                return f
        return None

    def _failed(self, tp: TopicPartition, reason: str) -> None:
        self.failed_partitions[tp] = reason

    def _updated(self, tp: TopicPartition) -> None:
        if self.on_updated is not None:
            self.on_updated(tp)

    # ------------------------------------------------------------------ the ReplicaManager hooks
    # Synchronous, as the ReplicaManager calls its hooks while it applies a delta: a partition
    # leaves its fetcher before the delta's next step (a new leader appending to the log, a
    # deletion removing it), so no fetch answer can append to it afterwards.
    def on_become_follower(self, partitions: Iterable[FollowerPartition]) -> None:
        """Partitions this broker now follows (new leader or epoch): fetch them from their leader.
        A partition already fetched from the same leader at the same epoch is left as it is."""
        moved: list[FollowerPartition] = []
        for p in partitions:
            f = self.get_fetcher(p.topic_partition)
            state = f.fetch_state(p.topic_partition) if f is not None else None
            if f is not None and state is not None and f.source.id == p.leader_id and \
                    state.current_leader_epoch == p.leader_epoch:
                continue
            moved.append(p)
        if moved:
            self.remove_fetcher_for_partitions(p.topic_partition for p in moved)
            self.add_fetcher_for_partitions(moved)
        self.shutdown_idle_fetchers()

    def on_become_leader(self, partitions: Iterable[FollowerPartition]) -> None:
        """Partitions this broker now leads: stop fetching them."""
        self.remove_fetcher_for_partitions(p.topic_partition for p in partitions)
        self.shutdown_idle_fetchers()

    def on_delete(self, tps: Iterable[TopicPartition]) -> None:
        """Partitions whose logs are about to be deleted: stop fetching them first."""
        self.remove_fetcher_for_partitions(tps)
        self.shutdown_idle_fetchers()

    # ------------------------------------------------------------------ Kafka's manager API
    def add_fetcher_for_partitions(self, partitions: Iterable[FollowerPartition]) -> set[TopicPartition]:
        groups: dict[tuple[BrokerEndPoint, int], list[FollowerPartition]] = {}
        for p in partitions:
            tp = p.topic_partition
            if p.leader_id < 0:
                log.info("Unable to start fetching %s: it has no leader", tp)
                continue
            address = self._leader_endpoint(p.leader_id)
            if address is None:
                log.info("Unable to start fetching %s with topic ID %s from leader %d because it is not alive.",
                         tp, p.topic_id, p.leader_id)
                continue
            source = BrokerEndPoint(p.leader_id, address[0], int(address[1]))
            groups.setdefault((source, self.fetcher_id(tp)), []).append(p)
        added: set[TopicPartition] = set()
        for (source, fid), members in groups.items():
            key = (source.id, fid)
            fetcher = self.fetchers.get(key)
            if fetcher is not None and fetcher.source != source:
                self._close_fetcher(key)  # the leader moved to another address
                fetcher = None
            if fetcher is None:
                fetcher = ReplicaFetcher(fid, source, broker_id=self.broker_id, broker_epoch=self._broker_epoch,
                                         config=self.config, on_failed=self._failed, ssl_context=self._ssl_context,
                                         cluster_id=self._cluster_id, on_updated=self._updated)
                self.fetchers[key] = fetcher
                fetcher.start()
            for p in members:
                self.failed_partitions.pop(p.topic_partition, None)
            added |= fetcher.add_partitions(members)
            log.info("Added fetcher to broker %d for partitions %s", source.id,
                     sorted(str(p.topic_partition) for p in members))
        return added

    def remove_fetcher_for_partitions(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition,
                                                                                    PartitionFetchState]:
        tps = set(tps)
        removed: dict[TopicPartition, PartitionFetchState] = {}
        for f in self.fetchers.values():
            removed.update(f.remove_partitions(tps))
        for tp in tps:
            self.failed_partitions.pop(tp, None)
        if removed:
            log.info("Removed fetcher for partitions %s", sorted(str(tp) for tp in removed))
        return removed

    def shutdown_idle_fetchers(self) -> None:
        """Close the fetchers left with no partition (their tasks end in the background)."""
        for key in [k for k, f in self.fetchers.items() if f.partition_count == 0]:
            self._close_fetcher(key)

    def _close_fetcher(self, key: tuple[int, int]) -> None:
        fetcher = self.fetchers.pop(key)
        self._closed_requests += fetcher.stats.requests
        self._closed_bytes += fetcher.stats.bytes
        task = asyncio.get_running_loop().create_task(fetcher.close(), name=f"close {fetcher.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every fetcher (Kafka's ``closeAllFetchers``) and unregister the metrics."""
        for key in list(self.fetchers):
            self._close_fetcher(key)
        while self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)
        if self._registry is not None:
            for m in self._metrics:
                self._registry.unregister(m)
            self._metrics = []


def _reload_producer_state(partition: Any, log_: KafkaLog) -> None:
    """After a follower's truncation: the producer state drops what the log no longer has and is
    rebuilt from the log (Kafka's ``UnifiedLog.truncateTo`` -> ``rebuildProducerState``)."""
    psm = getattr(partition, "producer_state", None)
    if psm is not None:
        psm.truncate_and_reload(log_.log_start_offset, log_.log_end_offset)
        psm.rebuild(log_)


def image_leader_endpoint(current_image: Callable[[], Any], listener: str) -> Callable[[int], tuple[str, int] | None]:
    """``leader_endpoint`` for :class:`ReplicaFetcherManager` from the latest metadata image: the
    broker's address on the inter-broker ``listener`` (Kafka: ``newImage.cluster.broker(id).node(
    listener)``, fencing not looked at), or None when it is not registered or lacks the listener."""
    def endpoint(broker_id: int) -> tuple[str, int] | None:
        image = current_image()
        if image is None:
            return None
        reg = image.cluster.brokers.get(broker_id)
        ep = reg.listeners.get(listener) if reg is not None else None
        return None if ep is None else (str(ep.host), int(ep.port))
    return endpoint


def wire_replication(replica_manager: Any, fetchers: ReplicaFetcherManager,
                     alter_partition: Callable[[Any, list[int]], None] | None) -> None:
    """Plug the fetchers and the AlterPartition callable into the ReplicaManager's hooks
    (``on_become_follower``, ``on_become_leader``, ``on_delete``, ``alter_partition``), and the
    ReplicaManager's ``on_high_watermark_or_append`` into the fetchers (parked fetches re-run).  Call it
    before the first image is applied: a Partition takes ``alter_partition`` when it is made."""
    replica_manager.on_become_follower.append(fetchers.on_become_follower)
    replica_manager.on_become_leader.append(fetchers.on_become_leader)
    replica_manager.on_delete.append(fetchers.on_delete)
    replica_manager.alter_partition = alter_partition
    fetchers.on_updated = replica_manager.on_high_watermark_or_append
