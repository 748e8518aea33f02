"""``RaftDriver``: runs the deterministic :class:`RaftCore` for real, on one asyncio event loop.

This is kraft's KafkaRaftClientDriver: the core owns no clock, socket or
file handle, so the driver supplies them.

* **Storage**: :class:`KafkaRaftLog` over ``<metadata.log.dir>/__cluster_metadata-0``
  and :class:`FileQuorumStateStore` (``quorum-state`` in the same directory).
  Both are called synchronously by the core from inside the event loop, so an
  fsync blocks the loop, exactly like Kafka's single Raft I/O thread.
* **Clock**: ``time.monotonic()`` in ms for every core call (timeouts never
  jump with the wall clock); ``time.time()`` only for record timestamps and
  DescribeQuorum's wall-clock fields.
* **Inbound**: the node (:class:`kraft_node.server.node.KraftNode`) owns the
  listener and routes the API keys of :meth:`RaftDriver.handlers` here; the
  driver opens no server socket.  Each
  Vote/BeginQuorumEpoch/EndQuorumEpoch/Fetch/FetchSnapshot request is
  translated (:mod:`.wire`) and handed to ``core.handle_request`` under a fresh
  correlation id; the handler returns ``DEFERRED`` and the poll that yields the
  matching ``OutboundResponse`` answers it through ``ctx.respond`` -- for a
  Fetch parked in the leader's purgatory that is up to ``fetch_max_wait_ms``
  later.  No task or future per request: a commit is a chain of such hops.  DescribeQuorum is
  answered here from the core's state (only the leader answers it; others say
  NOT_LEADER_OR_FOLLOWER, like Kafka).
* **Outbound**: one :class:`KafkaConnection` per voter, opened on demand (a
  request on an open connection is written at once and its answer handed to
  the core from the socket callback); a
  failed connection is not retried before ``controller.quorum.retry.backoff.ms``.
  A request that fails (connection refused/lost, or no answer within
  ``controller.quorum.request.timeout.ms``) is reported to the core as a
  response of the right type with a top-level error (BROKER_NOT_AVAILABLE
  or REQUEST_TIMED_OUT), as Kafka's NetworkClient does; the core then backs
  off and retries.
* **Construction**: everything the driver needs is passed in (the quorum config,
  the local replica key, the static voters' and bootstrap servers' addresses, the
  listener it advertises, the TLS context for outbound connections, the flush
  options); reading ``server.properties`` and ``meta.properties`` is the node's job.
* **Polling**: after every inbound message and at ``Ready.next_wakeup_ms`` (a
  single re-armed ``call_at`` timer), the driver calls ``core.poll`` and sends
  what it returns.  The cluster id (from meta.properties) is passed to the
  core, which rejects RPCs of another cluster with INCONSISTENT_CLUSTER_ID.

State-machine API (in-process): :meth:`append` returns a future resolved with
the record's offset once it is committed *in the epoch it was appended in*
(or failed if another record commits at that offset), :meth:`register_listener`,
:meth:`resign`, :meth:`shutdown` (graceful: a leader resigns with
EndQuorumEpoch and waits until another leader is known).
"""
from __future__ import annotations

import asyncio
import bisect
import dataclasses
import itertools
import logging
import random
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

from kraft_node.network import ConnectionClosed, KafkaConnection, RequestTimeout
from kraft_node.network.server import DEFERRED
from kraft_node.protocol.api_keys import ApiKeys
from kraft_node.protocol.generated.describe_cluster import DescribeClusterRequest
from kraft_node.protocol.generated.describe_quorum import DescribeQuorumResponse
from kraft_node.raft.client import RaftCore
from kraft_node.raft.config import QuorumConfig
from kraft_node.raft.errors import Errors, NotLeaderError, RaftError
from kraft_node.raft.flush import CoreOptions, InlineFlush
from kraft_node.raft.io import wire
from kraft_node.raft.io.file_state import FileQuorumStateStore
from kraft_node.raft.io.flush import RateFlush
from kraft_node.raft.io.kafka_log import KafkaRaftLog, KafkaSnapshotControl, encode_control_value, is_records_snapshot
from kraft_node.raft.messages import (
    AddRaftVoterRequest,
    BeginQuorumEpochRequest,
    Endpoint,
    EndQuorumEpochRequest,
    FetchRequest,
    FetchSnapshotRequest,
    LeaderAndEpoch,
    NodeEndpoint,
    OutboundRequest,
    OutboundResponse,
    RemoveRaftVoterRequest,
    ReplicaKey,
    UpdateRaftVoterRequest,
    VoteRequest,
)
from kraft_node.raft.roles import LeaderState
from kraft_storage.errors import KraftStorageError
from kraft_storage.log.fdsync import native_aio_available, open_async_fdatasync
from kraft_storage.messages.runtime import ZERO_UUID, MessageError, Uuid

log = logging.getLogger("kraft.raft")

RAFT_APIS = (ApiKeys.VOTE, ApiKeys.BEGIN_QUORUM_EPOCH, ApiKeys.END_QUORUM_EPOCH, ApiKeys.FETCH,
             ApiKeys.FETCH_SNAPSHOT, ApiKeys.ADD_RAFT_VOTER, ApiKeys.REMOVE_RAFT_VOTER, ApiKeys.UPDATE_RAFT_VOTER)


#: First version of each Raft response with the NodeEndpoints field (Kafka's schemas).
_NODE_ENDPOINTS_SINCE = {int(ApiKeys.VOTE): 1, int(ApiKeys.BEGIN_QUORUM_EPOCH): 1, int(ApiKeys.END_QUORUM_EPOCH): 1,
                         int(ApiKeys.FETCH): 16, int(ApiKeys.FETCH_SNAPSHOT): 1}


_INCONSISTENT = int(Errors.INCONSISTENT_CLUSTER_ID)


def monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


def wall_ms() -> int:
    return int(time.time() * 1000)


#: RaftDriver(leader_flush=...): where the leader's fsync runs (see RaftDriver.__init__).
LEADER_FLUSH_MODES = ("auto", "inline", "thread", "aio")
#: RaftDriver(follower_flush=...): where a follower's fsync runs (see RaftDriver.__init__).
FOLLOWER_FLUSH_MODES = ("inline", "aio")
#: "auto" without native AIO: flushes of at least this many appended bytes go to the flush thread.
AUTO_THREAD_FLUSH_BYTES = 64 * 1024


class DriverError(KraftStorageError):
    """The node cannot start (unformatted or mismatching storage, bad config)."""


class VoterAddress(Protocol):
    """A static voter (``controller.quorum.voters``): where to reach it, and its directory id
    when KIP-853 gives one (``kraft_node.server.config.Voter`` is one)."""
    id: int
    host: str
    port: int
    directory_id: str | None


def describe_error(exc: BaseException) -> str:
    """One line for an operator: a storage error's own message; an OSError with its file
    name and strerror ("No space left on device"), never a repr or a traceback."""
    if isinstance(exc, OSError) and not isinstance(exc, KraftStorageError):
        where = f"{exc.filename}: " if exc.filename else ""
        return f"{where}{exc.strerror or exc}"
    text = str(exc)
    return text if text else type(exc).__name__


def _source_of(req) -> int:
    if isinstance(req, (VoteRequest, FetchRequest, FetchSnapshotRequest)):
        return req.replica_id
    if isinstance(req, (BeginQuorumEpochRequest, EndQuorumEpochRequest)):
        return req.leader_id
    if isinstance(req, UpdateRaftVoterRequest):
        return req.voter_id
    if isinstance(req, (AddRaftVoterRequest, RemoveRaftVoterRequest)):
        return -1  # an admin client (or an auto-joining observer): answered on its connection
    raise TypeError(type(req).__name__)


def dir_uuid(text: str | None) -> uuid.UUID | None:
    """A directory id as written in meta.properties or controller.quorum.voters; None for
    none or the zero Uuid."""
    if not text:
        return None
    u = Uuid(text)
    return None if u == ZERO_UUID else uuid.UUID(bytes=u.bytes)


@dataclass
class _Peer:
    node_id: int
    host: str
    port: int
    conn: KafkaConnection | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    last_failure_ms: int = -(2 ** 62)


class _PendingAppends:
    """Listener that resolves append futures when their offset commits (see :meth:`RaftDriver.append`)."""

    def __init__(self):
        self.offsets: list[int] = []               # sorted last offsets
        # (offset, epoch, future, time.monotonic() at append), same order
        self.entries: list[tuple[int, int, asyncio.Future, float]] = []
        self.committed_end = 0
        self.leader: LeaderAndEpoch | None = None
        #: metrics hook (RaftDriver.on_commit_latency): ms from append to commit, per append
        self.commit_latency: Callable[[float], None] | None = None

    def add(self, offset: int, epoch: int, fut: asyncio.Future) -> None:
        i = bisect.bisect_right(self.offsets, offset)
        self.offsets.insert(i, offset)
        self.entries.insert(i, (offset, epoch, fut, time.monotonic()))

    def handle_commit(self, batches) -> None:
        for b in batches:
            self.committed_end = b.next_offset
            k = 0
            while k < len(self.entries) and self.entries[k][0] < b.next_offset:
                off, epoch, fut, appended = self.entries[k]
                if not fut.done():
                    if off >= b.base_offset and b.epoch == epoch:
                        fut.set_result(off)
                        if self.commit_latency is not None:
                            self.commit_latency((time.monotonic() - appended) * 1000.0)
                    else:
                        fut.set_exception(NotLeaderError(
                            f"offset {off} was committed in epoch {b.epoch if off >= b.base_offset else '?'}, "
                            f"not in epoch {epoch} where it was appended"))
                k += 1
            if k:
                del self.entries[:k]
                del self.offsets[:k]

    def handle_load_snapshot(self, reader) -> None:
        self.committed_end = reader.snapshot_id.offset  # (its batches are not needed here)

    def handle_leader_change(self, leader: LeaderAndEpoch) -> None:
        self.leader = leader

    def fail_all(self, exc: Exception) -> None:
        for _, _, fut, _ in self.entries:
            if not fut.done():
                fut.set_exception(exc)
        self.entries.clear()
        self.offsets.clear()


class RaftDriver:
    """One KRaft quorum member (voter or observer) running over TCP.  See the module doc.

    ``quorum``: the ``controller.quorum.*`` settings.  ``local_key``: this replica (node id
    and, from meta.properties, its directory id).  ``partition_dir``: the metadata partition
    directory (``__cluster_metadata-0``), already formatted.  ``voters``: the static voters
    (empty for a dynamic quorum, whose voter set comes from the log).  ``bootstrap_servers``:
    ``(host, port)`` of ``controller.quorum.bootstrap.servers``.  ``listener``: the endpoint
    this node serves Raft RPCs on (the node routes them here; None for an observer without
    one), advertised to the quorum when ``advertise`` (a controller).  ``client_ssl_context``:
    TLS for outbound connections to the other voters (None for PLAINTEXT).
    ``leader_flush`` / ``follower_flush``: where the fsyncs run (see below)."""

    def __init__(self, quorum: QuorumConfig, local_key: ReplicaKey, *, cluster_id: str, partition_dir: str,
                 voters: Sequence[VoterAddress] = (), bootstrap_servers: Sequence[tuple[str, int]] = (),
                 listener: Endpoint | None = None, advertise: bool = True, client_ssl_context=None,
                 rng: random.Random | None = None, leader_flush: str = "auto", follower_flush: str = "inline"):
        try:
            self._init(quorum, local_key, cluster_id=cluster_id, partition_dir=partition_dir, voters=voters,
                       bootstrap_servers=bootstrap_servers, listener=listener, advertise=advertise,
                       client_ssl_context=client_ssl_context, rng=rng, leader_flush=leader_flush,
                       follower_flush=follower_flush)
        except BaseException:
            # Whatever failed after the log was opened (a bad snapshot, the voter set...):
            # close it cleanly, so the directory is left as it was found (issue 19).
            opened = self.__dict__.get("log")
            if opened is not None:
                try:
                    opened.close()
                except Exception as exc:  # noqa: BLE001 - the first error is the one to report
                    log.error("node %d: closing the log after a failed start failed too: %s",
                              local_key.id, exc)
            raise

    def _init(self, quorum: QuorumConfig, local_key: ReplicaKey, *, cluster_id: str, partition_dir: str,
              voters: Sequence[VoterAddress], bootstrap_servers: Sequence[tuple[str, int]],
              listener: Endpoint | None, advertise: bool, client_ssl_context, rng: random.Random | None,
              leader_flush: str, follower_flush: str):
        if leader_flush not in LEADER_FLUSH_MODES:
            raise DriverError(f"leader_flush must be one of {', '.join(LEADER_FLUSH_MODES)}, not {leader_flush!r}")
        if follower_flush not in FOLLOWER_FLUSH_MODES:
            raise DriverError(f"follower_flush must be one of {', '.join(FOLLOWER_FLUSH_MODES)}, "
                              f"not {follower_flush!r}")
        self.node_id = local_key.id
        self.cluster_id = cluster_id
        self.directory_id = local_key.directory_id
        self.quorum_config = quorum
        self.partition_dir = partition_dir
        self.voters = tuple(voters)
        self._client_ssl_context = client_ssl_context
        #: static quorum (kraft.version 0, controller.quorum.voters) or dynamic (KIP-853:
        #: the voter set comes from the bootstrap snapshot and VotersRecords in the log).
        self.dynamic = not self.voters
        #: the listener this node serves Raft RPCs on (routed here by the node)
        self.endpoint = listener
        self._listener_name = listener.name if listener is not None else "CONTROLLER"
        self.voter_keys = [ReplicaKey(v.id, dir_uuid(v.directory_id)) for v in self.voters]
        self.local_key = local_key
        pdir = partition_dir
        self.log = KafkaRaftLog(pdir)
        # Kafka writes quorum-state data_version 1 (votedDirectoryId, no currentVoters) once
        # kraft.version is 1, i.e. for every dynamic quorum (no 0 -> 1 upgrade here).
        self.store = FileQuorumStateStore(pdir, [v.id for v in self.voters], data_version=1 if self.dynamic else 0)
        #: bootstrap servers get Kafka's negative ids (-1, -2, ...) until their node id is known.
        self._bootstrap = {-(i + 1): hp for i, hp in enumerate(bootstrap_servers)}
        listeners = (listener,) if listener is not None and advertise else ()
        if leader_flush == "auto" and native_aio_available():
            leader_flush = "aio"
        self.leader_flush = leader_flush
        self.follower_flush = follower_flush
        # (why these modes and defaults: below)
        self.core = RaftCore(self.quorum_config, self.local_key, self.voter_keys, self.log, self.store,
                             rng or random.Random(), cluster_id=cluster_id,
                             snapshot_control=KafkaSnapshotControl(pdir), local_listeners=listeners,
                             bootstrap_ids=tuple(sorted(self._bootstrap, reverse=True)),
                             encode_control=encode_control_value,
                             options=CoreOptions(flush=self._flush_policy(leader_flush, follower_flush),
                                                 defer_listeners=True))  # poll_listeners() after the sends
        # Where the leader fsyncs.  "inline": on this loop, in the poll right after the one
        # that appended and answered the parked Fetches (the answers are on the wire first,
        # so the followers write and fsync while the leader does).  "thread": on one worker
        # thread (os.fdatasync releases the GIL) while the loop keeps answering.  "aio":
        # queued to the kernel with Linux native AIO (kraft_storage.log.fdsync), completion
        # read from an eventfd this loop watches: off the loop like the thread, without its
        # futex wake-up and GIL hand-offs.  "auto" (default): "aio" when this process runs
        # native code and the kernel allows native AIO; otherwise in line when less than
        # AUTO_THREAD_FLUSH_BYTES were appended since the last flush, else on the thread.
        # Measured (BENCHMARKS.md, 3 voters on 2 shared cores): session 4, a lone append
        # commits in 0.80-0.91 ms in line against 1.11-1.17 ms on the thread, saturation
        # 1.15-1.21M records/s on the thread against 0.94-0.99M in line; session 7, aio
        # against the in-line/thread rule in one run: lone append p50 0.83-0.85 vs 0.86-0.89
        # ms (p99 1.3 vs 1.7), saturation 1.02-1.23M vs 0.87-1.09M records/s.
        # Where a follower fsyncs.  "inline" (default): in the handler of the Fetch answer
        # that brought the records, before it builds its next Fetch.  "aio": queued like the
        # leader's "aio" flush, and the next Fetch -- it reports the new end offset, so it must
        # wait for the fsync -- is built and encoded while the fsync runs and written the
        # moment it lands (JobFlush.follower_jobs, OutboundRequest.after_flush,
        # _hold_request).  Measured (BENCHMARKS.md, session 8, 3 voters on 2 shared cores):
        # "aio" was slower, lone append p50 0.98-1.07 vs 0.80-0.86 ms, 1,000 appends/s
        # 1.07-1.17 vs 0.79-1.00 ms: the kernel runs an AIO fsync on a kworker thread, so each
        # follower fsync costs two more wake-ups (kworker, eventfd) on cores the three voters
        # already share, where the in-line fsync sleeps and wakes in the process itself.
        # Kept as an option for machines with a core per voter.
        #: id(flush job) -> requests held behind it: (connection, correlation id, frame) when
        #: encoded on an open connection, else the OutboundRequest itself.
        self._held: dict[int, list] = {}
        self._flush_executor = None
        self._flusher = None  # kraft_storage.log.fdsync flusher ("aio" mode), made on first use
        self._appends = _PendingAppends()
        self.core.register_listener(self._appends)
        self._peers = {v.id: _Peer(v.id, v.host, v.port) for v in self.voters if v.id != self.node_id}
        #: node id -> (host, port) learned from NodeEndpoints / leader endpoints in RPCs
        self._learned: dict[int, tuple[str, int]] = {}
        self._inbound: dict[int, object] = {}  # core correlation id -> RequestContext
        self._inbound_ids = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = None
        self._poll_soon = False
        self._role_seen = None
        self._voters_seen: tuple[int, ...] | None = None
        self._voter_set_obj = None
        self._role_callbacks: list[Callable[[str, int, int], None]] = []
        #: ("in", peer) / ("out", node id) already warned about a cluster-id mismatch
        self._cluster_warned: set = set()
        self._shutdown_started = False
        self._shutdown_done: asyncio.Event | None = None
        self._closed = False
        self.fatal: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.role_changes: list[tuple[str, int, int]] = []

    # ------------------------------------------------------------ lifecycle
    def handlers(self) -> dict[int, Callable]:
        """API key -> handler for the node's routing table: the Raft RPCs and DescribeQuorum."""
        handlers = {int(k): self._handle_raft for k in RAFT_APIS}
        handlers[int(ApiKeys.DESCRIBE_QUORUM)] = self._handle_describe_quorum
        return handlers

    async def start(self) -> None:
        """Initialize the core (the node has opened the listener that routes here).  If that
        fails (a bad quorum-state...) the log is closed cleanly before the error propagates:
        a failed start leaves the directory as it found it (issue 19)."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._shutdown_done = asyncio.Event()
        self.core.initialize(monotonic_ms())
        self._poll()

    def on_role_change(self, cb: Callable[[str, int, int], None]) -> None:
        """``cb(role, epoch, leader_id)`` after every change of role, epoch or leader."""
        self._role_callbacks.append(cb)

    def on_commit_latency(self, cb: Callable[[float], None] | None) -> None:
        """Metrics hook (kraft_node.metrics.RaftMetrics): ``cb(ms)`` for every append committed
        in its epoch, ``ms`` from :meth:`append` to the commit; None removes it."""
        self._appends.commit_latency = cb

    def register_listener(self, listener) -> None:
        self.core.register_listener(listener)
        self._schedule_poll()

    async def shutdown(self, timeout_s: float = 5.0) -> bool:
        """Graceful: a leader resigns (EndQuorumEpoch) and waits up to ``timeout_s`` for a
        successor to be known; then everything is closed.  True if it completed in time."""
        ok = True
        if not self._closed and self.fatal is None:
            if not self._shutdown_started:
                self._shutdown_started = True
                self.core.begin_shutdown(int(timeout_s * 1000), monotonic_ms())
                self._poll()
            try:
                await asyncio.wait_for(self._shutdown_done.wait(), timeout_s + 1.0)
            except asyncio.TimeoutError:
                ok = False
            ok = ok and not getattr(self, "_shutdown_timed_out", False)
        await self.close()
        return ok

    async def close(self) -> None:
        """Stop at once (no resignation); the log is closed cleanly."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        self._appends.fail_all(RaftError(f"node {self.node_id} shut down"))
        inbound, self._inbound = self._inbound, {}
        for ctx in inbound.values():  # parked requests get an error answer
            ctx.respond(wire.response_to_wire(wire.error_response(int(ctx.header.request_api_key),
                                                                  Errors.BROKER_NOT_AVAILABLE)))
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        for p in self._peers.values():
            if p.conn is not None:
                await p.conn.close()
        if self._flush_executor is not None:
            self._flush_executor.shutdown(wait=True)  # no fsync in flight when the log closes
        if self._flusher is not None:
            try:
                self.loop.remove_reader(self._flusher.fileno())
            except RuntimeError:  # the loop is already closed: nothing watches it any more
                pass
            self._flusher.close()  # (waits for the fsyncs in flight)
        try:
            self.log.close()
        except Exception as exc:  # noqa: BLE001 - best effort at close; the log recovers on open
            # One line, no traceback: the reason (a full disk, an I/O error) is what the
            # operator needs, and the fatal error that led here was already reported.
            log.error("node %d: closing the log cleanly failed (it will be recovered at the next start): %s",
                      self.node_id, describe_error(exc))

    async def wait_closed_or_fatal(self) -> None:
        while not self._closed and self.fatal is None:
            await asyncio.sleep(0.05)

    # ------------------------------------------------------------ state-machine API
    def append(self, records, epoch: int, *, atomic: bool = True) -> asyncio.Future:
        """Append ``records`` (bytes each) as the leader of ``epoch`` -- the epoch the caller
        claimed (from ``handle_leader_change`` or ``leader_and_epoch``), so records prepared
        in one epoch are never written in another (Kafka's ``scheduleAtomicAppend``; with
        ``atomic=False`` its ``scheduleAppend``).  The future resolves with the last offset
        once committed in that epoch.  Raises NotLeaderError (not the leader of ``epoch``,
        also when it leads a later one) / BufferFullError at once."""
        last = self.schedule_append(records, epoch, atomic)
        fut = self.loop.create_future()
        self._appends.add(last, epoch, fut)
        return fut

    def next_offset(self, epoch: int) -> int:
        """The offset the next append of the leader of ``epoch`` gets (``RaftCore.next_offset``)."""
        return self.core.next_offset(epoch)

    def schedule_append(self, records, epoch: int, atomic: bool = True) -> int:
        """:meth:`append` without the future (Kafka's ``scheduleAppend``): returns the last
        offset given; a state machine that tracks commits itself (the controller's
        purgatory, fed by ``handle_commit``) needs no future per append."""
        if self._closed:
            raise RaftError(f"node {self.node_id} is shut down")
        now = monotonic_ms()
        last = self.core.append(records, epoch, now, atomic)
        # Poll now only if the batch is due (linger 0, a full batch); else just make sure
        # a poll comes when it is (an earlier timer stays).  A poll per append cost a
        # fifth of the leader's time at saturation with linger 5.
        wait = self.core.time_until_drain(now)
        if wait <= 0:
            self._schedule_poll()
        else:
            self._arm_timer(now + wait, now)
        return last

    def create_snapshot(self, snapshot_id, data: bytes | None = None, *, last_contained_log_time_ms: int = 0):
        """Kafka's ``RaftClient.createSnapshot``, for the state machine that owns the data (the
        controller's snapshot generator): the snapshot of the committed state before
        ``snapshot_id.offset`` -- the record at ``offset - 1`` must be committed and in epoch
        ``snapshot_id.epoch`` (RaftError otherwise).  Without ``data``: a writer (Kafka records
        format, ``RaftCore.SnapshotWriter``) taking ``append(records)`` batch by batch, then
        ``freeze()`` -- which drops the log prefix it covers -- or ``close()`` to abort.  With
        ``data``: those bytes stored whole, at once; they must be a whole Kafka records
        snapshot (header batch, data batches, footer: what the writer produces), since
        listeners and followers read it back batch by batch (ValueError otherwise).  On this
        node's loop thread.  The raft-only server has no state of its own, so it never
        calls this; its log grows until a state machine does."""
        if self._closed:
            raise RaftError(f"node {self.node_id} is shut down")
        if data is not None and not is_records_snapshot(data):
            raise ValueError("snapshot data is not a Kafka records snapshot (no SnapshotHeader batch first): "
                             "write it with create_snapshot(snapshot_id) and the writer's append/freeze")
        return self.core.create_snapshot(snapshot_id, data, last_contained_log_time_ms=last_contained_log_time_ms)

    def resign(self, epoch: int) -> None:
        """Give up leadership of ``epoch`` (Kafka's ``RaftClient.resign``; no-op unless this
        node leads that epoch)."""
        self.core.resign(epoch)
        self._schedule_poll()

    @property
    def is_leader(self) -> bool:
        return self.core.is_leader

    @property
    def is_voter(self) -> bool:
        """In the voter set in effect now (it changes with VotersRecords in a dynamic quorum)."""
        return self.core.quorum.is_voter

    # ------------------------------------------------------------ addresses
    def voter_endpoints(self) -> dict[int, list[Endpoint]]:
        """Voter id -> its endpoints: from the voter set in effect (VotersRecord), else from
        controller.quorum.voters (static quorums carry no endpoints in the log)."""
        out: dict[int, list[Endpoint]] = {}
        static = {v.id: v for v in self.voters}
        for e in self.core.voter_set.entries:
            if e.endpoints:
                out[e.key.id] = list(e.endpoints)
            elif e.key.id in static:
                v = static[e.key.id]
                out[e.key.id] = [Endpoint(self._listener_name, v.host, v.port)]
        return out

    def address_of(self, node_id: int) -> tuple[str, int] | None:
        """Where to send RPCs for ``node_id``: a bootstrap server (negative ids), the voter
        set's endpoint on our controller listener, the static voters, or an address learned
        from a peer (NodeEndpoints, leader endpoints); None when unknown."""
        if node_id in self._bootstrap:
            return self._bootstrap[node_id]
        if node_id == self.node_id and self.endpoint is not None:
            return self.endpoint.host, self.endpoint.port
        e = self.core.voter_set.entry(node_id)
        if e is not None and e.endpoints:
            ep = next((x for x in e.endpoints if x.name == self._listener_name), e.endpoints[0])
            return ep.host, ep.port
        for v in self.voters:
            if v.id == node_id:
                return v.host, v.port
        return self._learned.get(node_id)

    def _peer(self, node_id: int) -> _Peer | None:
        addr = self.address_of(node_id)
        if addr is None:
            return None
        p = self._peers.get(node_id)
        if p is None or (p.host, p.port) != tuple(addr):
            if p is not None and p.conn is not None:
                self._spawn(p.conn.close())
            p = self._peers[node_id] = _Peer(node_id, addr[0], addr[1])
        return p

    def _learn(self, resp) -> None:
        for n in getattr(resp, "node_endpoints", ()) or ():
            if n.node_id >= 0 and n.host:
                self._learned[n.node_id] = (n.host, n.port)

    def _learn_leader_endpoints(self, req) -> None:
        eps = getattr(req, "leader_endpoints", ()) or ()
        if eps and getattr(req, "leader_id", -1) >= 0:
            ep = next((e for e in eps if e.name == self._listener_name), eps[0])
            self._learned[req.leader_id] = (ep.host, ep.port)

    def _leader_node_endpoint(self) -> NodeEndpoint | None:
        lid = self.core.leader_id
        if lid < 0:
            return None
        addr = self.address_of(lid)
        return NodeEndpoint(lid, addr[0], addr[1]) if addr is not None else None

    def _flush_policy(self, leader_flush: str, follower_flush: str):
        """The core's flush policy for these modes (kraft_node.raft.flush, io.flush): jobs
        for the leader unless "inline", for followers with "aio"; with "auto" (no native
        AIO) small flushes stay in line (RateFlush, AUTO_THREAD_FLUSH_BYTES); batches the
        log holds back (write-behind) defer the leader's job to the next poll."""
        if leader_flush == "inline" and follower_flush != "aio":
            return InlineFlush()
        log = self.log
        return RateFlush(leader_jobs=leader_flush != "inline", follower_jobs=follower_flush == "aio",
                         min_bytes=AUTO_THREAD_FLUSH_BYTES if leader_flush == "auto" else 0,
                         held_back=lambda: log.pending_writes)

    def _with_node_endpoints(self, resp, key: int, version: int):
        """Kafka adds the leader's endpoint (NodeEndpoints) to Raft responses, so a replica
        that knows no voter (an observer started from bootstrap servers) can reach it --
        only at versions that have the field (an older peer's response could not carry it)."""
        if not hasattr(resp, "node_endpoints") or resp.node_endpoints \
                or version < _NODE_ENDPOINTS_SINCE.get(key, 1 << 15):
            return resp
        ne = self._leader_node_endpoint()
        return resp if ne is None else dataclasses.replace(resp, node_endpoints=(ne,))

    @property
    def listener_name(self) -> str:
        """The name of the listener Raft RPCs are served on (the first controller listener)."""
        return self._listener_name

    @property
    def kraft_version(self) -> int:
        """The kraft.version in force (0: static voters; 1: voters in the log, KIP-853)."""
        return int(self.core.kraft_version)

    @property
    def leader_and_epoch(self) -> LeaderAndEpoch:
        return LeaderAndEpoch(self.core.leader_id, self.core.epoch)

    # ------------------------------------------------------------ polling
    def _schedule_poll(self) -> None:
        if not self._poll_soon and not self._closed and self.loop is not None:
            self._poll_soon = True
            self.loop.call_soon(self._poll)

    def _poll(self) -> None:
        self._poll_soon = False
        if self._closed or self.fatal is not None:
            return
        now = monotonic_ms()
        try:
            ready = self.core.poll(now)
        except Exception as exc:  # an invariant violation or storage failure: stop serving
            self._die(exc)
            return
        for job in ready.flush_jobs:
            self._start_flush(job)
        for msg in ready.messages:
            if isinstance(msg, OutboundResponse):
                ctx = self._inbound.pop(msg.correlation_id, None)
                if ctx is not None:
                    self._answer(ctx, msg.response)
            elif msg.after_flush is not None:
                self._hold_request(msg)
            else:
                self._send_request(msg)
        try:
            self.core.poll_listeners()  # after the requests are on the wire (CoreOptions.defer_listeners)
            # Write-behind: the leader batches this poll held back go to the file now that the
            # Fetch answers carrying them are on the wire (KafkaRaftLog.write_pending).
            self.log.write_pending()
        except Exception as exc:  # a listener or storage failure: stop serving
            self._die(exc)
            return
        self._note_role()
        if ready.shutdown_complete and self._shutdown_started and not self._shutdown_done.is_set():
            self._shutdown_timed_out = ready.shutdown_timed_out
            self._shutdown_done.set()
        self._arm_timer(ready.next_wakeup_ms, now)

    def _start_flush(self, job) -> None:
        """Hand ``job`` to the flush thread now, before this poll encodes its answers.

        Why not a task around ``run_in_executor``: the task would start the fsync only on
        a later loop turn, after every Fetch answer of this poll is encoded and written;
        measured, the leader's fsync then began ~0.3-0.5 ms after the append and was the
        last thing a lone commit waited for.  The thread needs the GIL only for the few
        bytecodes around ``os.fdatasync``."""
        # One flusher for both roles: with follower_flush="aio" a leader's jobs (leader_flush
        # "thread") go through it too, so a node never has two kinds of job in flight.
        if (self.leader_flush == "aio" or self.follower_flush == "aio") and hasattr(job, "fds"):
            if self._flusher is None:
                self._flusher = open_async_fdatasync()
                self.loop.add_reader(self._flusher.fileno(), self._flusher_ready)
            self._flusher.submit(job.fds, job)
            return
        if self._flush_executor is None:
            import concurrent.futures
            self._flush_executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"raft-flush-{self.node_id}")
        loop = self.loop

        def landed(_f, job=job):  # on the flush thread
            try:
                loop.call_soon_threadsafe(self._flush_landed, job)
            except RuntimeError:  # the loop is closed: the node is gone, nothing to tell
                pass
        self._flush_executor.submit(job.run).add_done_callback(landed)

    def _flusher_ready(self) -> None:
        for job, err in self._flusher.reap():
            job.finish(err)
            self._flush_landed(job)

    def _flush_landed(self, job) -> None:
        if self._closed or self.fatal is not None:
            return
        try:
            durable = self.core.handle_flush_done(job, monotonic_ms())
        except Exception as exc:  # an fsync failure: the log directory is unusable
            self._held.pop(id(job), None)
            self._die(exc)
            return
        self._release_held(job, durable)
        self._poll()

    def _hold_request(self, out: OutboundRequest) -> None:
        """Encode a request that must wait for its flush job (a follower's Fetch) now, while
        the fsync runs; :meth:`_release_held` writes it when the job lands.  Without an
        open connection the request is kept as it is and sent then."""
        entry = out
        peer = self._peer(out.destination)
        if peer is not None and peer.conn is not None and peer.conn.connected:
            held = self._transmit(peer, peer.conn, out, hold=True)
            if held is None:  # refused at once: the core hears of it on the next loop turn
                return
            entry = (peer.conn, *held)
        self._held.setdefault(id(out.after_flush), []).append(entry)

    def _release_held(self, job, durable: bool) -> None:
        for entry in self._held.pop(id(job), ()):
            if isinstance(entry, OutboundRequest):
                if durable:
                    self._send_request(entry)
                else:
                    self.loop.call_soon(self._deliver, entry, wire.error_response(
                        wire.api_key_of(entry.request), Errors.BROKER_NOT_AVAILABLE))
            elif durable:
                entry[0].write_held(entry[1], entry[2])
            else:  # the log was truncated under the fsync: that Fetch's offset is not durable
                entry[0].abandon(entry[1], ConnectionClosed("the flush this request waited for was overtaken "
                                                            "by a truncation"))

    def _arm_timer(self, wake_ms: int, now: int) -> None:
        # A timer due no later than wake_ms stays: at worst it polls early and re-arms.
        # (Every poll asks for a wake-up -- several per commit -- and moving the timer
        # each time, a cancel plus a call_later, was ~4% of the leader's time.)
        if self._timer is not None and self._timer_at <= wake_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = min(max(0, wake_ms - now), 3_600_000) / 1000.0
        self._timer_at = wake_ms
        self._timer = self.loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self._poll()

    def _note_role(self) -> None:
        vs = self.core.voter_set
        if vs is not self._voter_set_obj:  # (called after every poll: skip the work when unchanged)
            self._voter_set_obj = vs
            self._note_voters(tuple(sorted(vs.ids)))
        cur = (self.core.role, self.core.epoch, self.core.leader_id)
        if cur != self._role_seen:
            self._role_seen = cur
            self.role_changes.append(cur)
            for cb in self._role_callbacks:
                try:
                    cb(*cur)
                except Exception:  # noqa: BLE001 - a callback must not stop the node
                    log.exception("role change callback failed")

    def _note_voters(self, voters: tuple[int, ...]) -> None:
        if voters != self._voters_seen:
            if self._voters_seen is not None:
                log.info("node %d: the voter set is now %s (%s)", self.node_id, list(voters),
                         "a voter" if self.is_voter else "an observer")
            self._voters_seen = voters

    def _die(self, exc: BaseException) -> None:
        if isinstance(exc, (KraftStorageError, OSError)):  # a full disk, an I/O error: what and where
            log.critical("node %d: storage failure, stopping: %s", self.node_id, describe_error(exc))
        else:
            log.critical("node %d: fatal error in the raft core, stopping: %r", self.node_id, exc)
        self.fatal = exc
        if self._shutdown_done is not None:
            self._shutdown_done.set()

    def _spawn(self, coro) -> None:
        t = self.loop.create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------ inbound
    def _handle_raft(self, ctx, body):
        """Hand a Raft request to the core; its answer goes out from :meth:`_poll` (for a
        Fetch parked in the leader's purgatory, up to ``fetch_max_wait_ms`` later)."""
        key = int(ctx.header.request_api_key)
        if self._closed or self.fatal is not None:
            return wire.response_to_wire(wire.error_response(key, Errors.BROKER_NOT_AVAILABLE))
        try:
            req = wire.request_from_wire(body, ctx.api_version)
        except wire.WireError as exc:
            log.warning("node %d: bad %s from %s: %s", self.node_id, ApiKeys(key).name, ctx.peer, exc)
            return wire.response_to_wire(wire.error_response(key, exc.error))
        self._learn_leader_endpoints(req)
        theirs = getattr(req, "cluster_id", None)
        if theirs is not None and theirs != self.cluster_id:  # the core answers INCONSISTENT_CLUSTER_ID
            self._warn_cluster_mismatch(_source_of(req), ctx.peer, ApiKeys(key).name, theirs)
        corr = next(self._inbound_ids)
        self._inbound[corr] = ctx
        try:
            self.core.handle_request(_source_of(req), corr, req, monotonic_ms())
        except Exception as exc:
            self._inbound.pop(corr, None)
            self._die(exc)
            return wire.response_to_wire(wire.error_response(key, Errors.BROKER_NOT_AVAILABLE))
        self._poll()
        return DEFERRED

    def _answer(self, ctx, resp) -> None:
        key = int(ctx.header.request_api_key)
        ctx.respond(wire.response_to_wire(self._with_node_endpoints(resp, key, ctx.api_version),
                                          leader_endpoint=self._leader_node_endpoint()))

    # ------------------------------------------------------------ outbound
    async def _connection(self, peer: _Peer) -> KafkaConnection:
        if peer.conn is not None and peer.conn.connected:
            return peer.conn
        async with peer.lock:
            if peer.conn is not None and peer.conn.connected:
                return peer.conn
            if peer.conn is not None:
                await peer.conn.close()
                peer.conn = None
            now = monotonic_ms()
            backoff = self.quorum_config.retry_backoff_ms
            if now - peer.last_failure_ms < backoff:
                raise ConnectionClosed(f"node {peer.node_id}: reconnect backoff ({backoff} ms)")
            try:
                # TLS: the controller listener's protocol and settings (Kafka's controller client)
                peer.conn = await KafkaConnection.open(peer.host, peer.port,
                                                       timeout=self.quorum_config.request_timeout_ms / 1000,
                                                       client_id=f"raft-client-{self.node_id}",
                                                       ssl_context=self._client_ssl_context)
            except (OSError, asyncio.TimeoutError) as exc:
                peer.last_failure_ms = monotonic_ms()
                reason = getattr(exc, "reason", None)
                if reason in ("unresolved", "tls") and getattr(peer, "warned", None) != (peer.host, peer.port, reason):
                    # a misconfiguration the operator must see (once per peer address), not a peer that is down
                    peer.warned = (peer.host, peer.port, reason)
                    key = ("controller.quorum.bootstrap.servers" if peer.node_id < 0 else
                           "controller.quorum.voters" if any(v.id == peer.node_id for v in self.voters) else
                           "an endpoint learned from the quorum")
                    log.warning("node %d: cannot connect to node %d (address from %s): %s", self.node_id,
                                peer.node_id, key, exc)
                raise ConnectionClosed(f"cannot connect to node {peer.node_id}: {exc}") from None
            return peer.conn

    def _send_request(self, out: OutboundRequest) -> None:
        """Send one of the core's requests.  On an open connection this writes at once and
        the answer comes back through :meth:`_on_response` from the socket callback (no task
        per request); otherwise a task connects first.  Whatever happens, the core gets
        exactly one response, never from inside the poll that sent the request."""
        peer = self._peer(out.destination)
        if peer is None:
            self.loop.call_soon(self._deliver, out, wire.error_response(wire.api_key_of(out.request),
                                                                        Errors.BROKER_NOT_AVAILABLE))
        elif peer.conn is not None and peer.conn.connected:
            self._transmit(peer, peer.conn, out)
        else:
            self._spawn(self._connect_and_send(peer, out))

    async def _connect_and_send(self, peer: _Peer, out: OutboundRequest) -> None:
        try:
            conn = await self._connection(peer)
        except (ConnectionClosed, OSError) as exc:
            self._on_response(peer, out, None, exc)
            return
        self._transmit(peer, conn, out)

    def _transmit(self, peer: _Peer, conn: KafkaConnection, out: OutboundRequest, hold: bool = False):
        """Send ``out`` on ``conn``; with ``hold``, encode and register it only and return
        ``(correlation id, frame)`` for :meth:`KafkaConnection.write_held` (None if refused)."""
        timeout_ms = self.quorum_config.request_timeout_ms
        if isinstance(out.request, AddRaftVoterRequest):  # the leader answers once the change commits
            timeout_ms = max(timeout_ms, out.request.timeout_ms + 1000)
        try:
            body, version = wire.request_to_wire(out.request)
            return conn.send(body, version, timeout_ms / 1000,
                             lambda raw, exc: self._on_response(peer, out, raw, exc), hold=hold)
        except (ConnectionClosed, MessageError, KraftStorageError, ValueError) as exc:
            # (not from inside this poll: the core hears of the failure on the next loop turn)
            self.loop.call_soon(self._on_response, peer, out, None, exc)
            return None

    def _on_response(self, peer: _Peer, out: OutboundRequest, raw, exc: BaseException | None) -> None:
        key = wire.api_key_of(out.request)
        if exc is None:
            try:
                resp = wire.response_from_wire(raw)
                self._learn(resp)
            except (MessageError, KraftStorageError, ValueError) as e:
                exc = e
            else:
                if _INCONSISTENT in (getattr(resp, "error_code", 0), getattr(resp, "partition_error_code", 0)):
                    self._peer_rejected_cluster(peer, ApiKeys(key).name)
        if isinstance(exc, RequestTimeout):
            resp = wire.error_response(key, Errors.REQUEST_TIMED_OUT)
        elif exc is not None:
            log.debug("node %d: %s to node %d failed: %s", self.node_id, ApiKeys(key).name, peer.node_id, exc)
            peer.last_failure_ms = monotonic_ms()
            if peer.conn is not None and not peer.conn.connected:
                peer.conn = None
            resp = wire.error_response(key, Errors.BROKER_NOT_AVAILABLE)
        self._deliver(out, resp)

    # ------------------------------------------------------------ cluster-id mismatches
    # A voter formatted with another cluster id is refused by every peer (the core answers
    # INCONSISTENT_CLUSTER_ID) and loops between prospective and unattached forever; without
    # a word in the logs that was invisible (issue 19).  Both sides now say it at WARNING,
    # once per peer, with the two ids: the side that answers knows both from the request; the
    # side that is refused asks the peer (DescribeCluster, which every node serves) for its id.
    def _warn_cluster_mismatch(self, source: int, addr, api: str, theirs: str) -> None:
        who = f"node {source}" if source >= 0 else "a client"
        key = ("in", source if source >= 0 else addr)
        if key in self._cluster_warned:
            return
        self._cluster_warned.add(key)
        log.warning("node %d: %s from %s (%s) carries cluster id %s, but this node belongs to cluster %s: "
                    "answering INCONSISTENT_CLUSTER_ID (is one of them formatted with another cluster id? see "
                    "meta.properties in both metadata log dirs)", self.node_id, api, who, addr, theirs,
                    self.cluster_id)

    def _peer_rejected_cluster(self, peer: _Peer, api: str) -> None:
        key = ("out", peer.node_id)
        if key in self._cluster_warned:
            return
        self._cluster_warned.add(key)
        self._spawn(self._report_peer_cluster(peer, api))

    async def _report_peer_cluster(self, peer: _Peer, api: str) -> None:
        theirs = "unknown (DescribeCluster failed)"
        conn = peer.conn
        if conn is not None and conn.connected:
            try:
                resp = await conn.request(DescribeClusterRequest(endpoint_type=2), 1,
                                          timeout=self.quorum_config.request_timeout_ms / 1000)
                if resp.error_code == 0 and resp.cluster_id:
                    theirs = resp.cluster_id
            except Exception:  # noqa: BLE001 - the warning matters more than the peer's id
                pass
        log.warning("node %d: node %d at %s:%d refused our %s with INCONSISTENT_CLUSTER_ID: it belongs to "
                    "cluster %s, this node to cluster %s (is one of them formatted with another cluster id? "
                    "see meta.properties in both metadata log dirs)", self.node_id, peer.node_id, peer.host,
                    peer.port, api, theirs, self.cluster_id)

    def _deliver(self, out: OutboundRequest, resp) -> None:
        if self._closed or self.fatal is not None:
            return
        try:
            self.core.handle_response(out.destination, out.correlation_id, resp, monotonic_ms())
        except Exception as exc:
            self._die(exc)
            return
        self._poll()

    # ------------------------------------------------------------ DescribeQuorum
    async def _handle_describe_quorum(self, ctx, body):
        R = DescribeQuorumResponse
        st = self.core.state
        topic = wire.TOPIC
        if not isinstance(st, LeaderState):
            part = R.PartitionData(partition_index=0, error_code=int(Errors.NOT_LEADER_OR_FOLLOWER),
                                   error_message=None, leader_id=self.core.leader_id,
                                   leader_epoch=self.core.epoch, high_watermark=-1)
            ne = self._leader_node_endpoint()  # where the leader is, when known (Kafka's NodeEndpoints)
            nodes = [R.Node(node_id=ne.node_id, listeners=[R.Listener(name=self._listener_name, host=ne.host,
                                                                      port=ne.port)])] if ne is not None else []
            return R(topics=[R.TopicData(topic_name=topic, partitions=[part])], error_message=None, nodes=nodes)
        now, wall = monotonic_ms(), wall_ms()
        st.clear_inactive_observers(now)
        hwm = st.high_watermark if st.high_watermark is not None else -1

        def rstate(rs, is_local, with_directory=True):
            if is_local:
                end, fetch, caught = self.log.end_offset, wall, wall
            else:
                end = rs.end_offset if rs.end_offset is not None else -1
                fetch = wall - (now - rs.last_fetch_ms) if rs.last_fetch_ms >= 0 else -1
                # Kafka's lastCaughtUpTimestamp, kept by the core on every Fetch (ReplicaState)
                caught = wall - (now - rs.last_caught_up_ms) if rs.last_caught_up_ms >= 0 else -1
            return R.ReplicaState(replica_id=rs.key.id,
                                  replica_directory_id=Uuid(rs.key.directory_id.bytes)
                                  if rs.key.directory_id and with_directory else ZERO_UUID,
                                  log_end_offset=end, last_fetch_timestamp=fetch, last_caught_up_timestamp=caught)

        # static voters (kraft.version 0) have no directory id, as in Kafka
        voters = [rstate(rs, vid == self.node_id, self.dynamic) for vid, rs in sorted(st.voters.items())]
        observers = [rstate(rs, False) for _, rs in sorted(st.observers.items())]
        part = R.PartitionData(partition_index=0, error_code=0, error_message=None, leader_id=self.node_id,
                               leader_epoch=st.epoch, high_watermark=hwm, current_voters=voters,
                               observers=observers)
        nodes = [R.Node(node_id=vid, listeners=[R.Listener(name=e.name, host=e.host, port=e.port) for e in eps])
                 for vid, eps in sorted(self.voter_endpoints().items())]
        return R(error_code=0, error_message=None, topics=[R.TopicData(topic_name=topic, partitions=[part])],
                 nodes=nodes)
