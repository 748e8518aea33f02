"""``ReplicaManager``: the broker's local partitions, driven by the metadata image (Kafka's
``ReplicaManager.applyDelta`` and its purgatories).

Each published delta goes through :class:`ReplicaManagerPublisher` (a loader publisher,
installed by ``BrokerServer`` before the broker serves): the local replica changes of the delta
(``TopicsDelta.local_changes(broker_id)``: deletes, leaders, followers) are applied in Kafka's
order -- deletes first (the logs are renamed ``-delete`` and removed later), then leaders, then
followers.  The first update a publisher gets states the whole image; when the loader folded
the topics (``delta.replaced_topics`` set, ``delta.topics_delta`` None) there is no per-topic
delta, so the local changes are computed by diffing the previous TopicsImage with the new one
(:func:`diff_local_changes`).  On that first update, logs found on disk that the image does not
assign to this broker are stray: renamed ``-stray`` and kept (Kafka 3.7+).

Topic configs come from the image (``ConfigResource(TOPIC, name)``) over the broker's
``log.*`` defaults; ``min.insync.replicas`` and ``max.message.bytes`` likewise over the broker's
``min.insync.replicas`` and ``message.max.bytes``.

Purgatories (Kafka's ``DelayedProduce`` / ``DelayedFetch``), on the broker's asyncio loop:

* an acks=all produce waits until every partition's high watermark passed its last appended
  offset (or the leader moved, or the ISR fell below ``min.insync.replicas``:
  NOT_ENOUGH_REPLICAS_AFTER_APPEND), bounded by the request's ``timeout_ms``
  (REQUEST_TIMED_OUT).  It is checked whenever a watched partition's high watermark moves;
* a fetch that found fewer than ``min_bytes`` waits up to ``max_wait_ms`` and is re-run when a
  watched partition is appended to or its high watermark moves (or it becomes stale: a
  leadership change wakes it too).  A woken fetch is first asked ``may_complete()`` (Kafka's
  ``DelayedFetch.tryComplete`` compares offsets before reading): a follower's fetch is not
  re-read for a high watermark move, a consumer's not for an append below the high watermark.

Hooks for the follower side (H5):

* ``on_become_follower``: callables ``(partitions: list[Partition]) -> None`` called after each
  delta with the partitions that became followers or changed leader/epoch (the fetcher manager
  adds or restarts their fetchers);
* ``on_become_leader``: same for new leaderships (the fetcher manager removes their fetchers);
* ``on_delete``: ``(topic partitions) -> None`` before their logs are deleted;
* ``alter_partition``: ``(partition, new_isr) -> None``, handed to every leader Partition
  (ISR changes go to the controller through it; see partition.py).
"""
from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

from kraft_node.broker.isr_policy import is_broker_epoch_isr_eligible
from kraft_node.broker.log.producer_state import ProducerStateManagerConfig
from kraft_node.broker.log_manager import LogManager, LogPlan
from kraft_node.broker.partition import AlterPartitionCallback, Partition
from kraft_node.broker.replica_selector import RackAwareReplicaSelector, replica_selector_from_properties
from kraft_node.metadata.configs.resources import ConfigResource, ConfigResourceType
from kraft_node.metadata.controller.replication_control import PartitionRegistration
from kraft_node.metadata.image.metadata_image import MetadataDelta, MetadataImage
from kraft_node.metadata.image.topics import (
    LocalReplicaChanges,
    PartitionInfo,
    TopicIdPartition,
    TopicPartition,
    TopicsImage,
)
from kraft_node.metadata.loader.manifest import LoaderManifest
from kraft_node.metadata.loader.publisher import MetadataPublisher
from kraft_node.protocol.errors import Errors
from kraft_node.raft.messages import LeaderAndEpoch

log = logging.getLogger("kraft.broker.replicas")

__all__ = ["ReplicaManager", "ReplicaManagerPublisher", "diff_local_changes", "PartitionsHook"]

PartitionsHook = Callable[[list[Partition]], None]

#: Kafka's defaults
DEFAULT_MIN_INSYNC_REPLICAS = 1
DEFAULT_MESSAGE_MAX_BYTES = 1048588
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30_000
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
#: threads that open and create partition logs (their fsyncs overlap)
OPEN_LOG_THREADS = 16
#: at most this many new logs are opened while the loop waits; more are opened in the background
OPEN_LOG_INLINE = 64
#: logs per background job (one pool task each; a chunk's partitions change together when open)
OPEN_LOG_CHUNK = 32
DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_MS = 600_000
_NO_TOPICS = TopicsImage.of([])


def _int(props: Mapping[str, str], key: str, default: int, minimum: int) -> int:
    raw = props.get(key)
    if raw is None or not str(raw).strip():
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{key}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"{key}: must be at least {minimum}, got {value}")
    return value


def diff_local_changes(old: TopicsImage, new: TopicsImage, broker_id: int) -> LocalReplicaChanges:
    """The local replica changes from ``old`` to ``new`` as ``TopicsDelta.local_changes``
    would report them (for a delta that replaced the topics image whole)."""
    out = LocalReplicaChanges(set(), {}, {}, {}, {}, {})
    for topic in new.topics_by_id.values():
        prev_topic = old.get_topic(topic.topic_id)
        for pid in topic.partitions.partitions_with_replica(broker_id):
            reg = topic.partitions[pid]
            prev: PartitionRegistration | None = \
                prev_topic.partitions.get(pid) if prev_topic is not None else None
            if prev is not None and prev.partition_epoch == reg.partition_epoch and broker_id in prev.replicas:
                continue
            tp = TopicPartition(topic.name, pid)
            info = PartitionInfo(topic.topic_id, reg)
            if reg.leader == broker_id:
                out.leaders[tp] = info
                if prev is None or prev.leader_epoch != reg.leader_epoch:
                    out.elected_leaders[tp] = info
            else:
                out.followers[tp] = info
            out.topic_ids.setdefault(topic.name, topic.topic_id)
            if prev is None or (broker_id in prev.replicas
                                and prev.directory(broker_id) != reg.directory(broker_id)):
                out.directory_ids[TopicIdPartition(topic.topic_id, tp)] = reg.directory(broker_id)
    for topic in old.topics_by_id.values():
        now = new.get_topic(topic.topic_id)
        for pid in topic.partitions.partitions_with_replica(broker_id):
            cur: PartitionRegistration | None = now.partitions.get(pid) if now is not None else None
            if cur is None or broker_id not in cur.replicas:
                out.deletes.add(TopicPartition(topic.name, pid))
    return out


_OpenJob = tuple[LogPlan, PartitionInfo, int]  # (the plan, the partition, its checkpointed high watermark)


class _Step(NamedTuple):
    """One published delta, as the ReplicaManager applies it (see ReplicaManager.apply_delta)."""

    changes: LocalReplicaChanges | None
    image: MetadataImage
    first: bool
    configs_changed: bool


class _DelayedProduce:
    """An acks=all produce waiting for the high watermarks, or a DeleteRecords waiting for the
    low watermarks (see the module doc).  ``check(partition, requirement)``: the partition's
    error once it is done with it, None while it must wait."""

    __slots__ = ("required", "check", "done", "callback", "timer", "finished")

    def __init__(self, required: Mapping[TopicPartition, Any],
                 check: Callable[[Partition, Any], Errors | None],
                 callback: Callable[[dict[TopicPartition, Errors]], None]) -> None:
        #: tp -> what its check needs (acks=all: (required offset, min.insync.replicas))
        self.required = required
        self.check = check
        self.done: dict[TopicPartition, Errors] = {}
        self.callback = callback
        self.timer: asyncio.TimerHandle | None = None
        self.finished = False


class _DelayedFetch:
    """A fetch waiting for data: ``retry(force)`` re-runs it and answers when it has enough
    (or ``force``: the wait is over); returns whether it answered."""

    __slots__ = ("partitions", "retry", "may_complete", "timer", "finished", "running", "queued")

    def __init__(self, partitions: list[TopicPartition], retry: Callable[[bool], bool],
                 may_complete: Callable[[], bool] | None = None) -> None:
        self.partitions = partitions
        self.retry = retry
        #: a cheap check before a woken retry (False: nothing it depends on changed, skip the read)
        self.may_complete = may_complete
        self.timer: asyncio.TimerHandle | None = None
        self.finished = False
        #: its retry is on the stack (a retry that wakes its own partitions must not re-enter)
        self.running = False
        #: a retry is queued for the end of this loop iteration (ReplicaManager._queue_fetch)
        self.queued = False


class ReplicaManager:
    """The broker's partitions (see the module doc)."""

    def __init__(self, broker_id: int, log_manager: LogManager, *, props: Mapping[str, str] | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.broker_id = broker_id
        self.log_manager = log_manager
        props = dict(props or {})
        self.default_min_insync_replicas = _int(props, "min.insync.replicas", DEFAULT_MIN_INSYNC_REPLICAS, 1)
        self.default_max_message_bytes = _int(props, "message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES, 0)
        self.replica_lag_time_max_ms = _int(props, "replica.lag.time.max.ms", DEFAULT_REPLICA_LAG_TIME_MAX_MS, 1)
        #: KIP-392's ``replica.selector.class`` (None: consumers read from leaders only, Kafka's default)
        self.replica_selector: RackAwareReplicaSelector | None = replica_selector_from_properties(props)
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.partitions: dict[TopicPartition, Partition] = {}
        self.image: MetadataImage | None = None
        self.on_become_leader: list[PartitionsHook] = []
        self.on_become_follower: list[PartitionsHook] = []
        self.on_delete: list[Callable[[set[TopicPartition]], None]] = []
        self.alter_partition: AlterPartitionCallback | None = None
        #: committed ISR changes of partitions led here (metrics)
        self.isr_shrinks = 0
        self.isr_expands = 0
        self._produce_waiters: dict[TopicPartition, list[_DelayedProduce]] = {}
        self._fetch_waiters: dict[TopicPartition, list[_DelayedFetch]] = {}
        #: parked fetches woken since the loop last ran them (each once: _run_queued_fetches)
        self._queued_fetches: list[_DelayedFetch] = []
        self._shrink_task: asyncio.Task[None] | None = None
        #: opens and creates partition logs in parallel (see _materialize)
        self._pool = ThreadPoolExecutor(max_workers=OPEN_LOG_THREADS, thread_name_prefix="kraft-log-open")
        self._expire_task: asyncio.Task[None] | None = None
        self.producer_state_config = ProducerStateManagerConfig(
            producer_id_expiration_ms=_int(props, "producer.id.expiration.ms", DEFAULT_PRODUCER_ID_EXPIRATION_MS, 1))
        self.producer_id_expiration_check_interval_ms = _int(
            props, "producer.id.expiration.check.interval.ms", DEFAULT_PRODUCER_ID_EXPIRATION_CHECK_MS, 1)
        self._closed = False
        #: the newest image published to apply_delta (``image`` is the newest one applied)
        self._published: MetadataImage | None = None
        #: deltas waiting for a background batch of logs (see _materialize), oldest first
        self._backlog: deque[_Step] = deque()
        #: logs of the background batch not opened yet, and its chunks' futures
        self._opening = 0
        self._open_futures: set[asyncio.Future[list[Partition | BaseException]]] = set()
        self._first_applied = False
        log_manager.high_watermark_of = self._high_watermark_of
        log_manager.on_log_start_offset_changed = self._on_log_start_offset_changed

    def _on_log_start_offset_changed(self, tp: TopicPartition, log_start_offset: int) -> None:
        """Retention moved a log's start: its producer state forgets what is before it and the
        snapshot files below it go (H4's ProducerStateManager steps)."""
        p = self.partitions.get(tp)
        if p is not None:
            p.producer_state.on_log_start_offset_incremented(log_start_offset)
            p.producer_state.delete_snapshots_before(log_start_offset)

    def _high_watermark_of(self, tp: TopicPartition) -> int | None:
        p = self.partitions.get(tp)
        return p.high_watermark if p is not None else None

    # ------------------------------------------------------------------ lookups
    def isr_eligible(self, broker_id: int, fetched_broker_epoch: int | None = -1) -> bool:
        """Kafka's ``Partition.isReplicaIsrEligible`` (KIP-841, KIP-903) from the image applied
        last: a follower may join an ISR when it is registered, not fenced, not in controlled
        shutdown, and its fetches carried its registered epoch or -1 (a fetch version without
        one); ``fetched_broker_epoch`` None (it has not fetched) is not eligible.  With no image
        yet every follower is (the controller checks again)."""
        image = self.image
        if image is None:
            return True
        registration = image.cluster.broker(broker_id)
        if registration is None or registration.fenced or registration.in_controlled_shutdown:
            return False
        return is_broker_epoch_isr_eligible(fetched_broker_epoch, registration.epoch)

    def alive_broker_epoch(self, broker_id: int) -> int | None:
        """Kafka's ``getAliveBrokerEpoch``: the broker's epoch in the image applied last, None when
        it is not registered or is fenced (or no image is applied yet)."""
        image = self.image
        registration = None if image is None else image.cluster.broker(broker_id)
        return None if registration is None or registration.fenced else registration.epoch

    def get_partition(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def topic_config(self, topic: str) -> Mapping[str, str]:
        image = self.image
        if image is None:
            return {}
        return image.configs.config_map_for_resource(ConfigResource(ConfigResourceType.TOPIC, topic))

    def min_insync_replicas(self, topic: str) -> int:
        raw = self.topic_config(topic).get("min.insync.replicas")
        try:
            return int(raw) if raw is not None else self.default_min_insync_replicas
        except ValueError:
            return self.default_min_insync_replicas

    def max_message_bytes(self, topic: str) -> int:
        raw = self.topic_config(topic).get("max.message.bytes")
        try:
            return int(raw) if raw is not None else self.default_max_message_bytes
        except ValueError:
            return self.default_max_message_bytes

    # ------------------------------------------------------------------ metrics
    def partition_count(self) -> int:
        return len(self.partitions)

    def leader_count(self) -> int:
        return sum(1 for p in self.partitions.values() if p.is_leader)

    def under_replicated_partitions(self) -> int:
        """Kafka's UnderReplicatedPartitions: partitions led here whose ISR is smaller than
        their replica set."""
        return sum(1 for p in self.partitions.values() if p.is_leader and len(p.isr) < len(p.replicas))

    # ------------------------------------------------------------------ metadata
    def apply_delta(self, delta: MetadataDelta, new_image: MetadataImage) -> None:
        """Apply one published image's local replica changes (see the module doc).  Nothing
        after :meth:`shutdown` (the loader may publish while the node stops).

        Deltas are applied in the order they were published.  While a large batch of logs is
        being opened off the loop (:meth:`_materialize`), later deltas wait in
        :attr:`_backlog` and are applied, in order, once it is done; their local changes are
        computed now, against the image published before them."""
        if self._closed:
            return
        prev = self._published
        self._published = new_image
        if delta.topics_delta is not None:
            changes: LocalReplicaChanges | None = delta.topics_delta.local_changes(self.broker_id)
        elif delta.replaced_topics is not None or prev is None:
            base = prev.topics if prev is not None else _NO_TOPICS
            changes = diff_local_changes(base, new_image.topics, self.broker_id)
        else:
            changes = None
        step = _Step(changes, new_image, prev is None, delta.configs_delta is not None)
        if self._opening or self._backlog:
            self._backlog.append(step)
            return
        self._apply_step(step)

    @property
    def first_image_applied(self) -> bool:
        """The first published image is applied in full: its partitions are leaders and
        followers, their logs open (what the broker waits for before it asks to be unfenced)."""
        return self._first_applied

    @property
    def opening_logs(self) -> int:
        """Partition logs being opened or created off the loop right now (0 when none)."""
        return self._opening

    def _apply_step(self, step: _Step) -> None:
        self.image = step.image
        if step.first:
            self._handle_strays(step.image)
        changes = step.changes
        if changes is not None and (changes.deletes or changes.leaders or changes.followers):
            self._apply_changes(changes, step.image)
        if step.configs_changed:
            for tp in self.partitions:
                self.log_manager.update_config(tp, self.topic_config(tp.topic))
        if not self._opening and step.first:
            self._first_applied = True

    def _drain(self) -> None:
        """A batch of logs is open: apply the deltas that waited for it, in order, until one
        starts another batch."""
        while self._backlog and not self._opening and not self._closed:
            self._apply_step(self._backlog.popleft())
        if not self._opening and self.image is not None:
            self._first_applied = True

    def _handle_strays(self, image: MetadataImage) -> None:
        for tp in list(self.log_manager.logs):
            topic = image.topics.get_topic_by_name(tp.topic)
            reg = topic.partitions.get(tp.partition) if topic is not None else None
            known = self.log_manager.topic_ids.get(tp)
            if reg is None or self.broker_id not in reg.replicas or \
                    (known is not None and topic is not None and known != topic.topic_id.bytes):
                self.log_manager.mark_stray(tp)

    def _apply_changes(self, changes: LocalReplicaChanges, image: MetadataImage) -> None:
        woken: list[TopicPartition] = []  # the parked requests on these are tried once, at the end
        if changes.deletes:
            for delete_hook in self.on_delete:
                delete_hook(set(changes.deletes))
            for tp in sorted(changes.deletes):
                p = self.partitions.pop(tp, None)
                if p is not None:
                    woken.append(tp)
                self.log_manager.async_delete(tp)
        for tp in woken:
            self.on_high_watermark_or_append(tp)
        self._materialize(changes)

    def _transition(self, to_lead: Mapping[TopicPartition, PartitionInfo],
                    to_follow: Mapping[TopicPartition, PartitionInfo], level: int = logging.INFO) -> None:
        """Make this broker the leader of ``to_lead`` and a follower of ``to_follow``, those of
        them whose Partition objects exist (Kafka's makeLeaders, makeFollowers)."""
        now = self._clock_ms()
        woken: list[TopicPartition] = []
        leaders: list[Partition] = []
        for tp, info in sorted(to_lead.items()):
            p = self.partitions.get(tp)
            if p is None or p.topic_id != info.topic_id:
                continue  # its log could not be opened (logged by _materialize)
            try:
                was_leader, old_isr = p.is_leader, set(p.isr)
                if p.make_leader(info.partition, now):
                    leaders.append(p)
                elif was_leader:
                    # Kafka's IsrShrinksPerSec / IsrExpandsPerSec: the leader's committed ISR changes
                    new_isr = set(p.isr)
                    if new_isr < old_isr:
                        self.isr_shrinks += 1
                    elif new_isr > old_isr:
                        self.isr_expands += 1
                woken.append(tp)
            except Exception:  # noqa: BLE001 - one bad partition must not stop the others (Kafka logs it too)
                log.exception("broker %d: could not become the leader of %s", self.broker_id, tp)
        followers: list[Partition] = []
        for tp, info in sorted(to_follow.items()):
            p = self.partitions.get(tp)
            if p is None or p.topic_id != info.topic_id:
                continue
            try:
                if p.make_follower(info.partition):
                    followers.append(p)
                woken.append(tp)
            except Exception:  # noqa: BLE001 - as above
                log.exception("broker %d: could not become a follower of %s", self.broker_id, tp)
        # after every change: a parked produce checked per partition, a parked fetch retried once
        # (on_high_watermark_or_append queues it for the end of this loop iteration)
        for tp in woken:
            self.on_high_watermark_or_append(tp)
        if leaders:
            log.log(level, "broker %d: leader of %d partitions (%s)", self.broker_id, len(leaders),
                     ", ".join(str(p.topic_partition) for p in leaders[:10]) + (" ..." if len(leaders) > 10 else ""))
            for hook in self.on_become_leader:
                hook(leaders)
        if followers:
            log.log(level, "broker %d: follower of %d partitions", self.broker_id, len(followers))
            for hook in self.on_become_follower:
                hook(followers)

    def _materialize(self, changes: LocalReplicaChanges) -> None:
        """Make the Partition objects (and open or create their logs) that ``changes`` need and
        do not have, then make the partitions leaders and followers.

        Why threads: a new log costs four fsyncs (~9 ms here) and an existing one the rebuild of
        its producer state; opened one after another on the loop, a thousand new partitions held
        the broker's loop for seconds.  The opening runs in :attr:`_pool` (the fsyncs release the
        GIL and overlap: ~0.8 ms a log with 16 threads); the manager's maps are touched on the
        loop only.

        Why not wait for them: the loop also sends the broker's heartbeats.  With 10,000 new
        partitions the wait outlasted the 9 s session and the controller fenced the broker (Kafka
        opens logs on the metadata publisher's thread; its heartbeats have their own).  Up to
        :data:`OPEN_LOG_INLINE` logs are opened while the loop waits (the common case: a topic
        created); more are opened in chunks of :data:`OPEN_LOG_CHUNK` while the loop runs, each
        chunk's partitions made leaders and followers when it is open, and later deltas wait
        (:attr:`_backlog`) so that every delta still applies in publication order.  Until a
        partition's chunk is open, requests for it are answered NOT_LEADER_OR_FOLLOWER, as for
        any partition this broker is not (yet) the leader of."""
        jobs: list[_OpenJob] = []
        for tp, info in [*changes.leaders.items(), *changes.followers.items()]:
            p = self.partitions.get(tp)
            if p is not None and p.topic_id == info.topic_id:
                continue
            try:
                plan = self.log_manager.prepare_log(tp, info.topic_id.bytes, self.topic_config(tp.topic))
            except Exception:  # noqa: BLE001 - named and logged; the other partitions go on
                log.exception("broker %d: could not open or create the log of %s", self.broker_id, tp)
                continue
            jobs.append((plan, info, self.log_manager.checkpointed_high_watermarks.pop(tp, 0)))
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if len(jobs) <= OPEN_LOG_INLINE or loop is None:
            results = list(self._pool.map(self._build, jobs)) if len(jobs) > 1 else [self._build(j) for j in jobs]
            self._install(jobs, results)
            self._transition(changes.leaders, changes.followers)
            return
        # the partitions that have their Partition already change now; the others by chunk
        waiting = {plan.tp for plan, _info, _hw in jobs}
        self._transition({tp: i for tp, i in changes.leaders.items() if tp not in waiting},
                         {tp: i for tp, i in changes.followers.items() if tp not in waiting})
        log.info("broker %d: opening %d partition logs in the background (the loop keeps running)",
                 self.broker_id, len(jobs))
        for i in range(0, len(jobs), OPEN_LOG_CHUNK):
            chunk = jobs[i:i + OPEN_LOG_CHUNK]
            fut = loop.run_in_executor(self._pool, self._build_chunk, chunk)
            self._opening += len(chunk)
            self._open_futures.add(fut)
            fut.add_done_callback(functools.partial(self._chunk_opened, changes, chunk))

    def _build(self, job: _OpenJob) -> Partition | BaseException:
        """Any thread: open (create) one planned log and make its Partition."""
        plan, info, hw = job
        try:
            kl = self.log_manager.open_prepared(plan)
            return Partition(plan.tp, info.topic_id, kl, self.broker_id, high_watermark=hw,
                             alter_partition=self.alter_partition, producer_state_config=self.producer_state_config,
                             clock_ms=self._clock_ms, isr_eligible=self.isr_eligible,
                             alive_broker_epoch=self.alive_broker_epoch)
        except Exception as exc:  # noqa: BLE001 - reported on the loop by _install
            return exc

    def _build_chunk(self, chunk: list[_OpenJob]) -> list[Partition | BaseException]:
        return [self._build(job) for job in chunk]

    def _install(self, jobs: list[_OpenJob], results: list[Partition | BaseException]) -> None:
        """On the loop: hand the opened logs to the LogManager and keep their Partitions (after
        :meth:`shutdown` the logs only, so that the LogManager closes them)."""
        for (plan, _info, _hw), res in zip(jobs, results):
            if isinstance(res, BaseException):
                self.log_manager.register(plan, None)
                log.error("broker %d: could not open or create the log of %s: %s", self.broker_id, plan.tp, res,
                          exc_info=res)
                continue
            self.log_manager.register(plan, res.log)
            if not self._closed:
                self.partitions[plan.tp] = res

    def _chunk_opened(self, changes: LocalReplicaChanges, chunk: list[_OpenJob],
                      fut: asyncio.Future[list[Partition | BaseException]]) -> None:
        """On the loop: one chunk of a background batch is open (or was cancelled by shutdown)."""
        self._open_futures.discard(fut)
        self._opening -= len(chunk)
        if fut.cancelled():
            results: list[Partition | BaseException] = [RuntimeError("the broker is shutting down")] * len(chunk)
        elif fut.exception() is not None:
            results = [fut.exception() or RuntimeError("failed")] * len(chunk)
        else:
            results = fut.result()
        self._install(chunk, results)
        if not self._closed:
            lead, follow = changes.leaders, changes.followers
            self._transition({plan.tp: lead[plan.tp] for plan, _i, _h in chunk if plan.tp in lead},
                             {plan.tp: follow[plan.tp] for plan, _i, _h in chunk if plan.tp in follow}, logging.DEBUG)
            if not self._opening:
                log.info("broker %d: the background batch of partition logs is open", self.broker_id)
                self._drain()

    # ------------------------------------------------------------------ purgatories
    def wait_for_high_watermarks(self, required: dict[TopicPartition, tuple[int, int]], timeout_ms: int,
                                 callback: Callable[[dict[TopicPartition, Errors]], None]) -> None:
        """Call ``callback({tp: error})`` once every partition's high watermark reached its
        required offset (or failed, or ``timeout_ms`` passed: REQUEST_TIMED_OUT for the rest)."""
        def check(p: Partition, need: tuple[int, int]) -> Errors | None:
            done, error = p.check_enough_replicas_reach_offset(*need)
            return error if done else None
        self._park(_DelayedProduce(required, check, callback), timeout_ms)

    def wait_for_low_watermarks(self, required: dict[TopicPartition, int], timeout_ms: int,
                                callback: Callable[[dict[TopicPartition, Errors]], None]) -> None:
        """DeleteRecords (Kafka's ``DelayedDeleteRecords``): call ``callback`` once every
        partition's low watermark (the minimum log start offset over its replicas) reached the
        requested offset; NOT_LEADER_OR_FOLLOWER if leadership moves, REQUEST_TIMED_OUT after
        ``timeout_ms``."""
        def check(p: Partition, offset: int) -> Errors | None:
            if not p.is_leader:
                return Errors.NOT_LEADER_OR_FOLLOWER
            return Errors.NONE if p.low_watermark() >= offset else None
        self._park(_DelayedProduce(required, check, callback), timeout_ms)

    def _park(self, op: _DelayedProduce, timeout_ms: int) -> None:
        if self._try_complete_produce(op):
            return
        required = op.required
        for tp in required:
            self._produce_waiters.setdefault(tp, []).append(op)
        op.timer = asyncio.get_running_loop().call_later(max(timeout_ms, 0) / 1000, self._expire_produce, op)

    def _try_complete_produce(self, op: _DelayedProduce) -> bool:
        if op.finished:
            return True
        for tp, need in op.required.items():
            if tp in op.done:
                continue
            p = self.partitions.get(tp)
            if p is None:
                op.done[tp] = Errors.NOT_LEADER_OR_FOLLOWER
                continue
            error = op.check(p, need)
            if error is not None:
                op.done[tp] = error
        if len(op.done) < len(op.required):
            return False
        self._finish_produce(op)
        return True

    def _finish_produce(self, op: _DelayedProduce) -> None:
        op.finished = True
        if op.timer is not None:
            op.timer.cancel()
        for tp in op.required:
            waiters = self._produce_waiters.get(tp)
            if waiters is not None and op in waiters:
                waiters.remove(op)
                if not waiters:
                    del self._produce_waiters[tp]
        op.callback(op.done)

    def _expire_produce(self, op: _DelayedProduce) -> None:
        if op.finished:
            return
        if not self._try_complete_produce(op):
            for tp in op.required:
                op.done.setdefault(tp, Errors.REQUEST_TIMED_OUT)
            self._finish_produce(op)

    def park_fetch(self, partitions: list[TopicPartition], max_wait_ms: int, retry: Callable[[bool], bool],
                   may_complete: Callable[[], bool] | None = None) -> None:
        """Park a fetch until a watched partition changes (``retry(False)``) or ``max_wait_ms``
        passes (``retry(True)``, which must answer).  ``may_complete()``, when given, is asked
        first on a wake-up: False skips the retry (Kafka's ``DelayedFetch.tryComplete`` checks
        offsets before it reads; a retry reads every watched partition's log)."""
        op = _DelayedFetch(partitions, retry, may_complete)
        for tp in partitions:
            self._fetch_waiters.setdefault(tp, []).append(op)
        op.timer = asyncio.get_running_loop().call_later(max(max_wait_ms, 0) / 1000, self._run_fetch, op, True)

    def _run_fetch(self, op: _DelayedFetch, force: bool) -> None:
        if op.finished or op.running:
            return
        if not force and op.may_complete is not None:
            try:
                if not op.may_complete():
                    return
            except Exception:  # noqa: BLE001 - the check is an optimisation: retry as if it said yes
                log.exception("a delayed fetch's completion check failed")
        op.running = True
        try:
            answered = op.retry(force)
        except Exception:  # noqa: BLE001 - the retry answers with an error itself; never leave it parked
            log.exception("a delayed fetch failed")
            answered = True
        finally:
            op.running = False
        if answered or force:
            op.finished = True
            if op.timer is not None:
                op.timer.cancel()
            for tp in op.partitions:
                waiters = self._fetch_waiters.get(tp)
                if waiters is not None and op in waiters:
                    waiters.remove(op)
                    if not waiters:
                        del self._fetch_waiters[tp]

    def on_high_watermark_or_append(self, tp: TopicPartition) -> None:
        """A partition was appended to or its high watermark moved: check what waits on it.
        Parked produces are checked at once (a few comparisons each); parked fetches are queued
        and retried once at the end of this loop iteration, however many of their partitions
        moved meanwhile.  Why: a fetch's retry reads every partition it watches, and one follower
        fetch of 500 partitions moves 500 high watermarks -- each woke the other follower's parked
        fetch of the same 500 partitions: 250,000 partition reads on the loop per fetch round (a
        controlled shutdown of 1,000 leaderships took 20-40 s; at 3,000 the brokers livelocked)."""
        for op in list(self._produce_waiters.get(tp, ())):
            self._try_complete_produce(op)
        waiters = self._fetch_waiters.get(tp)
        if waiters:
            for fop in waiters:
                self._queue_fetch(fop)

    def _queue_fetch(self, op: _DelayedFetch) -> None:
        if op.queued or op.finished:
            return
        op.queued = True
        self._queued_fetches.append(op)
        if len(self._queued_fetches) == 1:
            try:
                asyncio.get_running_loop().call_soon(self._run_queued_fetches)
            except RuntimeError:  # no loop (a caller outside asyncio): now
                self._run_queued_fetches()

    def _run_queued_fetches(self) -> None:
        ops, self._queued_fetches = self._queued_fetches, []
        for op in ops:
            op.queued = False
            self._run_fetch(op, False)

    # ------------------------------------------------------------------ ISR upkeep
    def start(self) -> None:
        """Start the ISR-shrink check (every half ``replica.lag.time.max.ms``, as Kafka) and the
        producer expiration (every ``producer.id.expiration.check.interval.ms``)."""
        loop = asyncio.get_running_loop()
        self._shrink_task = loop.create_task(self._shrink_loop())
        self._expire_task = loop.create_task(self._expire_loop())

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(self.producer_id_expiration_check_interval_ms / 1000)
            for p in list(self.partitions.values()):
                try:
                    p.producer_state.remove_expired_producers(self._clock_ms())
                except Exception:  # noqa: BLE001 - next round retries
                    log.exception("producer expiration of %s failed", p.topic_partition)

    async def _shrink_loop(self) -> None:
        while True:
            await asyncio.sleep(self.replica_lag_time_max_ms / 2000)
            now = self._clock_ms()
            for p in list(self.partitions.values()):
                try:
                    p.maybe_shrink_isr(now, self.replica_lag_time_max_ms)
                except Exception:  # noqa: BLE001 - next round retries
                    log.exception("ISR shrink check of %s failed", p.topic_partition)

    async def shutdown(self) -> None:
        """Answer every parked request (produce: REQUEST_TIMED_OUT is not right at shutdown, so
        NOT_LEADER_OR_FOLLOWER, which makes clients look for the new leader), stop the tasks."""
        if self._closed:
            return
        self._closed = True
        for task in (self._shrink_task, self._expire_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        for ops in list(self._produce_waiters.values()):
            for op in list(ops):
                if not op.finished:
                    for tp in op.required:
                        op.done.setdefault(tp, Errors.NOT_LEADER_OR_FOLLOWER)
                    self._finish_produce(op)
        for fops in list(self._fetch_waiters.values()):
            for fop in list(fops):
                self._run_fetch(fop, True)
        # a background batch of logs: the chunks not started are dropped (their plans forgotten),
        # the running ones finish and hand their logs to the LogManager, which closes them
        self._backlog.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._open_futures:
            await asyncio.gather(*list(self._open_futures), return_exceptions=True)
        self._pool.shutdown(wait=True)
        # Kafka snapshots the producer state when a log closes: the next start reads it instead
        # of scanning the log.  A log closed cleanly with no snapshot at all is taken to have no
        # idempotent producers (Kafka's rebuild skips the scan then), so a failed snapshot must not
        # leave a clean close behind: that log is flushed and closed without its clean-shutdown
        # marker, and the next start rebuilds the producers from the log (else it would forget
        # them and append a retried batch twice).
        for tp, p in self.partitions.items():
            try:
                p.producer_state.take_snapshot()
            except Exception:  # noqa: BLE001 - named; the log is then left to recovery
                log.exception("producer state snapshot of %s failed; its log is closed without the clean-shutdown "
                              "marker so that the next start rebuilds the producer state from the log", tp)
                kl = self.log_manager.logs.pop(tp, None)
                if kl is not None:
                    try:
                        kl.flush()
                    finally:
                        kl.close_uncleanly()


class ReplicaManagerPublisher(MetadataPublisher):
    """The loader publisher that feeds the ReplicaManager (Kafka's
    ``BrokerMetadataPublisher`` -> ``replicaManager.applyDelta``)."""

    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.replica_manager = replica_manager

    @property
    def name(self) -> str:
        return f"ReplicaManagerPublisher(id={self.replica_manager.broker_id})"

    def on_metadata_update(self, delta: MetadataDelta, new_image: MetadataImage, manifest: LoaderManifest) -> None:
        self.replica_manager.apply_delta(delta, new_image)

    def on_controller_change(self, new_leader_and_epoch: LeaderAndEpoch) -> None:
        pass

    def close(self) -> None:
        pass


def describe(rm: ReplicaManager) -> dict[str, Any]:
    """A summary for logs and tests: partitions led and followed."""
    leaders = sorted(str(tp) for tp, p in rm.partitions.items() if p.is_leader)
    followers = sorted(str(tp) for tp, p in rm.partitions.items() if not p.is_leader)
    return {"leaders": leaders, "followers": followers}
