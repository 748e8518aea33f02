"""Broker state -> partition changes: what fencing, unfencing, controlled shutdown, a new
incarnation registering, unregistration and offline log directories do to ISRs, ELRs and
leaders (Kafka's ReplicationControlManager.handleBrokerFenced / handleBrokerUnfenced /
handleBrokerInControlledShutdown / handleBrokerShutdown / handleBrokerUnregistered /
handleDirectoriesOffline), in bounded results.

Why bounded: Kafka builds each of these as one result holding a record for every partition
the broker is in; a broker leading 10k partitions, or a zone of brokers going away, is then
one burst of records in one event (KAFKA-13858), and past 10,000 records the controller
refuses the result outright.  Here one result holds at most
``max_partition_changes_per_result`` PartitionChangeRecords; what does not fit is a
*pending change* (soft state of the active controller) that later events continue.

Order and safety -- the rule is Kafka's record order, kept across results:

* **Fencing**: the partition changes first, the fence record (BrokerRegistrationChangeRecord
  ``fenced=1``) in the result that completes them.  Once the fence record is committed the
  broker leads nothing and is in no ISR it could be removed from (as in Kafka).  Before, the
  registration still says unfenced, so the broker is *excluded* in soft state: no election
  picks it and AlterPartition may not add it to an ISR (INELIGIBLE_REPLICA, "fenced").  The
  exclusion lasts until the fence record is *replayed* (a result may finish one fencing and
  go on with other changes built from the state before it), and likewise for an
  unregistration's and offline directories' ending records.  A broker heard from again
  before its fencing is complete (a heartbeat whose contact the RPC path recorded, even if
  its event is still queued) has the fencing dropped instead.  If the
  controller fails over in between, nothing is lost: the new controller sees an unfenced
  broker whose session it will expire (or whose heartbeat asks to be fenced) and fences it
  again from the start.
* **Controlled shutdown**: the in-controlled-shutdown record first (it makes the broker
  inactive, as in Kafka), then the changes, leaderships first.  The broker is told to shut
  down only once the changes are all written and, as in Kafka, every active broker has read
  past them: a chunk that moves leaderships raises the controlled shutdown offset (the next
  heartbeat's batch end) instead of keeping the first one.  Heartbeats in controlled shutdown
  continue the changes.
* **Unfencing**: the unfence record first, then elections for leaderless partitions; what
  does not fit becomes a sweep of the leaderless partitions (also run on activation, so a
  failover mid-sweep leaves nothing leaderless that has an eligible leader).
* **A new incarnation registering** (unclean restart): Kafka writes the cleanup and the
  RegisterBrokerRecord in one atomic batch.  When the cleanup fits it is exactly that.  When it
  does not, the registration is refused with REQUEST_TIMED_OUT (the broker retries) and the
  cleanup runs as a pending change; once what is left fits, the registration goes through
  atomically.  So no committed state ever has the new incarnation registered while it is
  still in ISRs/ELRs of its previous life, whatever fails over when.
* **Unregistration**: the changes, then the UnregisterBrokerRecord when they are complete;
  the request is answered with the first result (the record follows).
* **Offline directories**: the changes for the partitions in them, then the registration
  change listing the remaining online directories (so a failover re-detects the offline
  directory from the next heartbeat and redoes the moves).  Meanwhile the broker is excluded
  for partitions in those directories.

**A zone** (several sessions expired together, :meth:`BrokerLifecycle.brokers_fenced`): each
broker gets its FENCE change as above, but their partition changes are written by one
:class:`_ZoneWalk`, topic by topic, so a topic's changes are consecutive records (one broker's
walk touches one partition per topic on a rack-aware cluster, and every replay pays per topic
touched); each member's own phase then only rescans for what the walk could not cover.

One result may carry several changes (the stale-broker task continues the pending ones, then
may start fencing other brokers).  Each is built from the state before the result, so a
change also looks at the partitions the result's earlier records give its broker (leadership,
ISR or ELR membership) and stops before them (they are not replayed yet), and a finished
change's broker stays excluded until its ending record is replayed.

A pending change is a list of *phases* (e.g. "partitions with B in the ISR", then "with B in
the ELR").  A phase scans its source once into a cursor and works through it across results,
reading each partition as it is when reached; when the cursor runs out it rescans, skipping
partitions whose partition epoch is the one its own record (or its finding "nothing to do")
left, and it is done when a rescan finds nothing new.  So partitions that joined the set
meanwhile are caught, and a finished phase has looked at every partition at its latest epoch.
One step examines at most ``EXAMINE_FACTOR`` times the record budget, so a pass over
partitions that need nothing is bounded per event too.

How a step builds each partition's record: :mod:`.lifecycle_bulk` answers the common case
("the ISR without B, a clean leader") without a PartitionChangeBuilder, the settings read once
a step and who may lead cached by broker and directory; anything else (reassignments, ELR
work, no clean leader left, unfencing) falls back to the builder, with the same record byte
for byte.  Each step's ISR/leader-only records are encoded as soon as they are built, natively
(:class:`EncodedChange`, ``_change_replay.encode_records``: the generated writer's bytes without
its per-record overhead).  On every controller, runs of such records of one topic are replayed
in bulk (``ReplicationControlManager.replay_partition_changes``) and single ones by a short path.

Soft state only: ``deactivate`` (renounce) drops every pending change, since the records
they counted on are reverted with the registry.
"""
from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.metadata.controller.lifecycle_bulk import BulkLifecycleChanges
from kraft_node.metadata.controller.partition_changes import (
    BUDGET_CHECK_EVERY,
    PartitionChangeContext,
    partition_change_count,
)
from kraft_node.metadata.controller.replication_control import LEADER_FLAG, NO_LEADER, TopicIdPartition
from kraft_node.metadata.controller.result import ApiMessageAndVersion, ControllerResult
from kraft_node.protocol.errors import Errors
from kraft_storage.accel import load
from kraft_storage.messages import metadata as m
from kraft_storage.messages.framing import frame_header
from kraft_storage.messages.runtime import Uuid

log = logging.getLogger("kraft.controller.replication")
_change_replay = load("_change_replay", package="kraft_node")


class EncodedChange(ApiMessageAndVersion):
    """A lifecycle change's PartitionChangeRecord encoded as soon as its step is built:
    ``message`` is the record (the active controller replays it, the step's own checks read
    it), ``encode()`` the framed value ``_change_replay.encode_changes`` wrote (the generated
    writer's bytes, ~0.25 us instead of ~2.5 us a record: a controlled shutdown of a broker
    in 30k ISRs writes 30k of them).  Equal to an ApiMessageAndVersion of the same message and
    version, whichever side of ``==`` it is on."""

    __slots__ = ("_value",)
    _value: bytes

    def encode(self) -> bytes:
        return self._value

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ApiMessageAndVersion):
            return bool(self.version == other.version and self.message == other.message)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]


#: the frame headers of the record versions whose ISR/leader-only body the kernel writes (0-2:
#: the fields that differ by version are null in such a record)
_ENCODED_HEADERS = tuple(frame_header(m.PartitionChangeRecord.API_KEY, v) for v in (0, 1, 2))


def encode_changes(records: list[ApiMessageAndVersion], start: int) -> None:
    """Replace each ISR/leader-only PartitionChangeRecord of ``records[start:]`` (an exact
    ApiMessageAndVersion at version 0-2) by an :class:`EncodedChange` of it, in place: the
    records a step just built (``_change_replay.encode_records``).  The others stay as they
    are (the generated writer encodes them when they are appended)."""
    if len(records) > start:
        _change_replay.encode_records(records, start, ApiMessageAndVersion, EncodedChange, m.PartitionChangeRecord,
                                      _ENCODED_HEADERS)

#: One step examines at most this many partitions per record it may write.
EXAMINE_FACTOR = 4

#: A phase that has rescanned this often without settling finishes anyway (logged): only a
#: partition set that other writes keep changing under it can get here.
MAX_SCANS = 16


class ChangeKind(enum.Enum):
    """What a pending change is doing (one per broker and kind at most)."""
    FENCE = "fence"
    CONTROLLED_SHUTDOWN = "controlledShutdown"
    SHUTDOWN = "shutdown"
    UNREGISTER = "unregister"
    OFFLINE_DIRS = "offlineDirs"
    LEADERLESS = "leaderless"


#: Kinds during which the broker may not lead nor join an ISR (its registration does not say
#: so yet, or no longer says it is gone).
_EXCLUDING = (ChangeKind.FENCE, ChangeKind.SHUTDOWN, ChangeKind.UNREGISTER)


_REPLICA_MASK = LEADER_FLAG - 1

#: Index groups: ``(topic id, raw entries)`` as the reverse indexes hold them.
_Groups = Sequence[tuple[Uuid, tuple[int, ...]]]


class _Cursor:
    """What a phase's scan found, handed out one partition at a time (``peek``, ``advance``).

    Why not a list: the first scan of a broker in the ISR of 30k partitions built 30k
    TopicIdPartitions (and a set to put its leaderships first) inside the event that starts the
    change, ~50 ms in process and 140-160 ms on a loaded node, above the 50 ms an event may
    take.  A cursor over a copy of the broker's index groups (``(topic id, entries)``, an
    O(topics) copy whose entry tuples replays never change) costs O(topics) to take and
    O(1) a partition to advance, so the scan's cost is spread over the bounded steps.

    ``passes`` lists which entries each pass over the groups hands out: ``True`` the ones
    flagged as led, ``False`` the others, ``None`` all (a partition is in exactly one of a
    pass's groups, so "leaders first" is the passes ``(True, False)``).  A cursor made with
    :meth:`of` hands out a list instead (a rescan's filtered remainder)."""

    __slots__ = ("_groups", "_passes", "_pass", "_group", "_items", "_pos")

    def __init__(self, groups: _Groups, passes: tuple[bool | None, ...] = (None,)):
        self._groups = groups
        self._passes = passes
        self._pass = 0
        self._group = -1
        #: the current group's partitions (or the whole list of :meth:`of`), and the position
        self._items: Sequence[TopicIdPartition] = ()
        self._pos = 0

    @classmethod
    def of(cls, items: Sequence[TopicIdPartition]) -> "_Cursor":
        cursor = cls((), ())
        cursor._items = items
        return cursor

    def copy(self) -> "_Cursor":
        """An independent cursor at the same place (the groups and item tuples are shared:
        neither is ever changed)."""
        other = _Cursor(self._groups, self._passes)
        other._pass, other._group, other._items, other._pos = self._pass, self._group, self._items, self._pos
        return other

    def peek(self) -> TopicIdPartition | None:
        """The next partition, None once every pass is through."""
        while self._pos >= len(self._items):
            if not self._next_group():
                return None
        return self._items[self._pos]

    def advance(self) -> None:
        self._pos += 1

    def rest(self) -> list[TopicIdPartition]:
        """Every partition not handed out yet (the cursor is left exhausted)."""
        out: list[TopicIdPartition] = []
        while True:
            out.extend(self._items[self._pos:])
            self._pos = len(self._items)
            if not self._next_group():
                return out

    def _next_group(self) -> bool:
        """Move to the next group of the current pass (or the next pass); False at the end."""
        groups, passes = self._groups, self._passes
        while self._pass < len(passes):
            self._group += 1
            if self._group >= len(groups):
                self._pass += 1
                self._group = -1
                continue
            topic_id, entries = groups[self._group]
            led = passes[self._pass]
            if led is None:
                picked = [TopicIdPartition(topic_id, e & _REPLICA_MASK) for e in entries]
            else:
                picked = [TopicIdPartition(topic_id, e & _REPLICA_MASK) for e in entries
                          if bool(e & LEADER_FLAG) is led]
            if picked:
                self._items = picked
                self._pos = 0
                return True
        self._items, self._pos = (), 0
        return False


@dataclass(eq=False)
class _Phase:
    """One pass of Kafka's generateLeaderAndIsrUpdates, resumable: ``source(first)`` gives a
    cursor over the partitions (``first``: the initial scan), ``seen`` the partition epoch each
    one is expected at once this phase's records are replayed."""
    context: str
    broker_to_remove: int
    broker_to_add: int
    broker_with_unclean_shutdown: int
    source: Callable[[bool], _Cursor]
    seen: dict[TopicIdPartition, int] = field(default_factory=dict)
    queue: _Cursor = field(default_factory=lambda: _Cursor.of(()))
    scans: int = 0
    done: bool = False


@dataclass(eq=False)
class PendingChange:
    """A broker lifecycle change not yet written in full.  ``clean``: a SHUTDOWN change built
    for a clean (or non-ELR) restart; ``complete``: a SHUTDOWN change whose records are all
    written, kept (with what it saw) until the broker's registration goes through."""
    kind: ChangeKind
    broker_id: int
    broker_epoch: int
    phases: list[_Phase]
    directories: tuple[Uuid, ...] = ()
    clean: bool = False
    complete: bool = False
    #: a FENCE change started with others (:meth:`BrokerLifecycle.brokers_fenced`): while its
    #: zone walk runs, the walk writes this change's partition changes, not its own phases
    zone: "_ZoneWalk | None" = None

    @property
    def key(self) -> tuple[ChangeKind, int]:
        return self.kind, self.broker_id

    def copy(self) -> "PendingChange":
        """A copy whose progress can be advanced without touching this one."""
        return replace(self, phases=[replace(p, seen=dict(p.seen), queue=p.queue.copy()) for p in self.phases])


class _PendingChanges(dict[tuple[ChangeKind, int], PendingChange]):
    """The pending changes by ``(kind, broker)``, oldest first, and who they exclude: the
    brokers an excluding kind names (``excluding``) and those with offline directories being
    moved (``offline``).  :meth:`BrokerLifecycle.excluded` asks once per candidate leader of
    every partition change (30k times in a controlled shutdown), so it reads two sets instead
    of probing the map per kind; every mutation goes through the methods below, which rebuild
    both (changes start and end rarely; the map holds a handful)."""

    def __init__(self) -> None:
        super().__init__()
        self.excluding: frozenset[int] = frozenset()
        self.offline: frozenset[int] = frozenset()

    def _reindex(self) -> None:
        self.excluding = frozenset(b for (kind, b) in self if kind in _EXCLUDING)
        self.offline = frozenset(b for (kind, b) in self if kind is ChangeKind.OFFLINE_DIRS)

    def __setitem__(self, key: tuple[ChangeKind, int], value: PendingChange) -> None:
        super().__setitem__(key, value)
        self._reindex()

    def __delitem__(self, key: tuple[ChangeKind, int]) -> None:
        super().__delitem__(key)
        self._reindex()

    def pop(self, key: tuple[ChangeKind, int], *default: Any) -> Any:
        value = super().pop(key, *default)
        self._reindex()
        return value

    def clear(self) -> None:
        super().clear()
        self._reindex()


class _ZoneWalk:
    """The fencing of several brokers whose sessions expired together (a zone), walked topic by
    topic: for each topic, every member's ISR entries of that topic are read from the index
    (``isr_topic_entries``, O(members) lookups a topic, nothing copied up front), and each
    partition gets one record per member in its ISR, members in fencing order, each built from
    the partition as the previous record leaves it (so a partition with two members in its ISR
    goes through the states fencing them one after the other would give it).

    Why topic by topic: one broker's fencing walks its own index, one partition per topic on a
    rack-aware cluster, so every result of 200 changes touched 200 topics, and every replay of
    them -- the controllers' runs of one topic's changes, and above all each node's image, which
    re-derives a topic's partition block per topic touched -- paid its per-topic cost once per
    change (benchmarks/results/s19/zonal.md).  Walking the zone's topics, a topic's changes are
    consecutive records of one batch.

    Soft state, like the changes: ``topics`` is the list of topic ids when the walk started
    (a topic created later is caught by the members' own rescans once the walk ends), ``pos``
    the next topic, ``items`` the current topic's ``(partition id, members in its ISR)`` still
    to write."""

    __slots__ = ("changes", "topics", "pos", "topic_id", "items", "item_pos")

    def __init__(self, changes: list[PendingChange], topics: list[Uuid]):
        self.changes = changes
        self.topics = topics
        self.pos = 0
        self.topic_id: Uuid | None = None
        self.items: list[tuple[int, list[PendingChange]]] = []
        self.item_pos = 0


class BrokerLifecycle:
    """The broker lifecycle hooks of the ClusterControlManager (``cluster.set_lifecycle``),
    writing Kafka's partition changes in bounded results (see the module doc).

    Invariants: at most one pending change per (kind, broker); every pending change of a
    broker names the registration epoch it was started for, and is dropped (not finished) once
    the broker's registration has another epoch or is gone."""

    def __init__(self, ctx: PartitionChangeContext):
        self.ctx = ctx
        ctx.exclusions = self
        self._pending = _PendingChanges()
        #: finished changes whose ending record (a fence, an unregistration, directories
        #: offline) was written into a result that may not be replayed yet: the broker stays
        #: excluded until its registration shows that record (see :meth:`excluded`)
        self._ending: dict[tuple[ChangeKind, int], PendingChange] = {}
        #: brokers in controlled shutdown whose leaderships moved after their controlled
        #: shutdown offset was taken: the next heartbeat raises it (and may not grant the shutdown)
        self._cs_offset_stale: set[int] = set()
        #: zone walks under way (:meth:`brokers_fenced`), oldest first
        self._zones: list[_ZoneWalk] = []

    # -- soft state ------------------------------------------------------------------------

    def activate(self) -> None:
        """A new active controller: start from nothing pending but a sweep of leaderless
        partitions (a predecessor may have failed over in the middle of one)."""
        self._pending.clear()
        self._ending.clear()
        self._cs_offset_stale.clear()
        self._zones.clear()
        self._pending[(ChangeKind.LEADERLESS, NO_LEADER)] = self._leaderless_change(NO_LEADER)

    def deactivate(self) -> None:
        self._pending.clear()
        self._ending.clear()
        self._cs_offset_stale.clear()
        self._zones.clear()

    def pending(self) -> list[PendingChange]:
        """The pending changes, oldest first (for tests and diagnostics)."""
        return list(self._pending.values())

    def has_pending(self, kind: ChangeKind, broker_id: int) -> bool:
        return (kind, broker_id) in self._pending

    def excluded(self, broker_id: int, directory: Uuid | None) -> bool:
        """Whether an unfinished change is taking ``broker_id`` (or its ``directory``) out of
        its partitions: it may then neither lead nor join an ISR.

        A change stays unfinished for this until its ending record is *replayed*, not just
        written: a result can finish one broker's fencing (its fence record) and go on with
        another change, whose records are built from the state before that fence record, where
        the broker is still unfenced (found by the simulator: it was elected from an ELR after
        its own fence record)."""
        if self._ending and self._still_ending(broker_id, directory):
            return True
        pending = self._pending
        if broker_id in pending.excluding:
            return True
        if broker_id not in pending.offline:
            return False
        offline = pending.get((ChangeKind.OFFLINE_DIRS, broker_id))
        return offline is not None and directory is not None and directory in offline.directories

    def _still_ending(self, broker_id: int, directory: Uuid | None) -> bool:
        """Whether a finished change of ``broker_id`` excludes it (or ``directory``) because
        the registration does not show its ending record yet; forgets those it does show."""
        ending = self._ending
        for kind in (ChangeKind.FENCE, ChangeKind.UNREGISTER, ChangeKind.OFFLINE_DIRS):
            change = ending.get((kind, broker_id))
            if change is None:
                continue
            registration = self.ctx.cluster.registration(broker_id)
            if registration is None or registration.epoch != change.broker_epoch:
                shown = True  # unregistered (or replaced by a new incarnation)
            elif kind is ChangeKind.FENCE:
                shown = bool(registration.fenced)
            elif kind is ChangeKind.UNREGISTER:
                shown = False
            else:
                shown = not any(registration.has_online_dir(d) for d in change.directories)
            if shown:
                del ending[(kind, broker_id)]
            elif kind is not ChangeKind.OFFLINE_DIRS or (directory is not None and directory in change.directories):
                return True
        return False

    def controlled_shutdown_in_progress(self, broker_id: int) -> bool:
        """Whether the broker's controlled shutdown still has changes to write, or moved
        leaderships its controlled shutdown offset does not cover yet (the heartbeat treats
        either as "still has leaderships": no shutdown yet)."""
        return (ChangeKind.CONTROLLED_SHUTDOWN, broker_id) in self._pending or broker_id in self._cs_offset_stale

    def take_controlled_shutdown_offset_raise(self, broker_id: int) -> bool:
        """True (once) if the broker's controlled shutdown offset must move up to the batch the
        current heartbeat ends, because leaderships moved since it was taken."""
        if broker_id in self._cs_offset_stale:
            self._cs_offset_stale.discard(broker_id)
            return True
        return False

    # -- the hooks -------------------------------------------------------------------------

    def _budget(self, records: Sequence[ApiMessageAndVersion]) -> int:
        return max(0, self.ctx.max_partition_changes_per_result - partition_change_count(records))

    def _cancel(self, broker_id: int, *kinds: ChangeKind) -> None:
        for kind in kinds:
            self._ending.pop((kind, broker_id), None)
            if self._pending.pop((kind, broker_id), None) is not None:
                log.info("Dropping the unfinished %s change of broker %d.", kind.value, broker_id)
        if ChangeKind.CONTROLLED_SHUTDOWN in kinds:
            self._cs_offset_stale.discard(broker_id)

    def _start(self, change: PendingChange, records: list[ApiMessageAndVersion]) -> None:
        """Replace any pending change of the same key with ``change``, take its first step
        within the budget ``records`` leaves, and keep it pending if it is not done."""
        self._pending.pop(change.key, None)
        if self._step(change, records, self._budget(records)):
            self._finish(change, records)
        else:
            self._pending[change.key] = change
            log.info("%s of broker %d continues in later results (%d partition change(s) written so far).",
                     change.kind.value, change.broker_id, partition_change_count(records))

    def broker_fenced(self, broker_id: int, records: list[ApiMessageAndVersion]) -> None:
        """Kafka's handleBrokerFenced: take the broker out of every ISR and move its
        leaderships, then write the fence record (when the changes are complete)."""
        registration = self.ctx.cluster.registration(broker_id)
        if registration is None:
            raise RuntimeError(f"Can't find broker registration for broker {broker_id}")
        self._cancel(broker_id, ChangeKind.CONTROLLED_SHUTDOWN)
        self._start(self._isr_change(ChangeKind.FENCE, "handleBrokerFenced", broker_id, registration.epoch),
                    records)

    def brokers_fenced(self, broker_ids: Sequence[int], records: list[ApiMessageAndVersion]) -> None:
        """:meth:`broker_fenced` for several brokers whose sessions expired together: each gets
        its FENCE change (excluded at once, cancelled alone if heard from again, its fence
        record once its partitions are done), and one :class:`_ZoneWalk` writes all their
        partition changes topic by topic; then each change's own rescan finds what the walk did
        not cover (partitions that gained the broker meanwhile) and finishes it.  The walk
        starts with the next result (:meth:`continue_pending`): it must be the first writer of
        its result, so no earlier record in it changes a partition the walk reads."""
        if len(broker_ids) == 1:
            self.broker_fenced(broker_ids[0], records)
            return
        changes = []
        for broker_id in broker_ids:
            registration = self.ctx.cluster.registration(broker_id)
            if registration is None:
                raise RuntimeError(f"Can't find broker registration for broker {broker_id}")
            self._cancel(broker_id, ChangeKind.CONTROLLED_SHUTDOWN)
            change = self._isr_change(ChangeKind.FENCE, "handleBrokerFenced", broker_id, registration.epoch)
            self._pending.pop(change.key, None)  # as _start: a fencing under way starts over
            self._pending[change.key] = change
            changes.append(change)
        zone = _ZoneWalk(changes, list(self.ctx.replication.topics().values()))
        for change in changes:
            change.zone = zone
        self._zones.append(zone)
        log.info("Fencing %d brokers together (%s): their partition changes follow topic by topic.",
                 len(changes), ", ".join(str(b) for b in broker_ids))

    def broker_unfenced(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None:
        """Kafka's handleBrokerUnfenced: the unfence record, then elections for leaderless
        partitions the broker (or anyone) may now lead.  A fencing or cleanup of the broker
        still pending is dropped: the broker is back."""
        self._cancel(broker_id, ChangeKind.FENCE, ChangeKind.SHUTDOWN)
        self.ctx.cluster.handle_broker_unfenced(broker_id, broker_epoch, records)
        change = self._leaderless_change(broker_id)
        self._pending.pop(change.key, None)
        if self._step(change, records, self._budget(records)):
            return
        # Later steps run after the unfence record is replayed: the broker then counts as
        # active by its registration, and must not be accepted if it is fenced again.
        for phase in change.phases:
            phase.broker_to_add = NO_LEADER
        self._pending[change.key] = change

    def broker_in_controlled_shutdown(self, broker_id: int, broker_epoch: int,
                                      records: list[ApiMessageAndVersion]) -> None:
        """Kafka's handleBrokerInControlledShutdown: the in-controlled-shutdown record (if not
        already), then the broker leaves every ISR, leaderships first."""
        self.ctx.cluster.handle_broker_in_controlled_shutdown(broker_id, broker_epoch, records)
        self._start(self._isr_change(ChangeKind.CONTROLLED_SHUTDOWN, f"enterControlledShutdown[{broker_id}]",
                                     broker_id, broker_epoch), records)

    def broker_controlled_shutdown_heartbeat(self, broker_id: int, broker_epoch: int,
                                             records: list[ApiMessageAndVersion]) -> None:
        """A heartbeat of a broker staying in controlled shutdown continues its changes."""
        change = self._pending.get((ChangeKind.CONTROLLED_SHUTDOWN, broker_id))
        if change is None:
            return
        if self._step(change, records, self._budget(records)):
            self._pending.pop(change.key, None)
            self._finish(change, records)

    def broker_shutdown(self, broker_id: int, is_clean_shutdown: bool, records: list[ApiMessageAndVersion]) -> None:
        """Kafka's handleBrokerShutdown, for a new incarnation registering: with ELR enabled
        and no proof of a clean shutdown, the broker leaves every ISR and ELR (its log may have
        lost data; the last ISR member is remembered in the last known ELR); otherwise it is
        treated as fenced (out of every ISR).  The records go before the RegisterBrokerRecord.

        ApiError REQUEST_TIMED_OUT if they do not fit in one result: they are then written by
        later events (:meth:`continue_pending`) and the broker's retry registers it (see the
        module doc).  A retry starts from what those events saw, so it completes once they have
        written everything, however many partitions needed nothing."""
        registration = self.ctx.cluster.registration(broker_id)
        epoch = -1 if registration is None else registration.epoch
        clean = is_clean_shutdown or not self.ctx.elr_enabled()
        key = (ChangeKind.SHUTDOWN, broker_id)
        pending = self._pending.get(key)
        if pending is None or pending.broker_epoch != epoch or pending.clean != clean:
            pending = self._shutdown_change(broker_id, epoch, clean)
        trial = pending.copy()
        made: list[ApiMessageAndVersion] = []
        if self._step(trial, made, self._budget(records)):
            # Every change of the previous incarnation ends with this registration (each would
            # find the new epoch at its next step and stop; dropping them now also ends their
            # exclusion of the broker id, which the new incarnation must not inherit).
            records.extend(made)
            self._cancel(broker_id, *[kind for kind in ChangeKind if kind is not ChangeKind.LEADERLESS])
            return
        self._pending[key] = pending
        raise ApiError(Errors.REQUEST_TIMED_OUT,
                       f"Broker {broker_id} cannot register yet: its previous incarnation is still being removed from "
                       f"more partitions than one batch changes ({self.ctx.max_partition_changes_per_result}); "
                       "retry the registration.")

    def broker_unregistered(self, broker_id: int, broker_epoch: int, records: list[ApiMessageAndVersion]) -> None:
        """Kafka's handleBrokerUnregistered: out of every ISR, then the ELRs are revisited,
        then the UnregisterBrokerRecord (when the changes are complete)."""
        self._cancel(broker_id, ChangeKind.FENCE, ChangeKind.CONTROLLED_SHUTDOWN, ChangeKind.SHUTDOWN,
                     ChangeKind.OFFLINE_DIRS)
        self._start(PendingChange(ChangeKind.UNREGISTER, broker_id, broker_epoch, [
            _Phase("handleBrokerUnregistered", broker_id, NO_LEADER, NO_LEADER, self._in_isr(broker_id)),
            _Phase("handleBrokerUnregistered", broker_id, NO_LEADER, NO_LEADER, self._in_elr(broker_id)),
        ]), records)

    def directories_offline(self, broker_id: int, broker_epoch: int, offline_dirs: Sequence[Uuid],
                            records: list[ApiMessageAndVersion]) -> None:
        """Kafka's handleDirectoriesOffline: for directories the registration still lists as
        online, the broker leaves the ISR (and leadership) of every partition placed in them,
        then a registration change lists its remaining online directories.  Reported every
        heartbeat, so a heartbeat also continues the changes already under way."""
        key = (ChangeKind.OFFLINE_DIRS, broker_id)
        if not offline_dirs:  # every heartbeat of a healthy broker: nothing to look up
            if key in self._pending and self.ctx.cluster.registration(broker_id) is not None:
                self._pending.pop(key)
            return
        registration = self.ctx.cluster.registration(broker_id)
        if registration is None:
            return
        newly_offline = tuple(registration.directory_intersection(offline_dirs))
        current = self._pending.get(key)
        if not newly_offline:
            if current is not None:
                self._pending.pop(key)
            return
        if current is not None and current.directories == newly_offline and current.broker_epoch == broker_epoch:
            if self._step(current, records, self._budget(records)):
                self._pending.pop(key)
                self._finish(current, records)
            return
        phases = [_Phase(f"handleDirectoriesOffline[{broker_id}:{d}]", broker_id, NO_LEADER, NO_LEADER,
                         self._partitions_in_directory(d)) for d in newly_offline]
        self._start(PendingChange(ChangeKind.OFFLINE_DIRS, broker_id, broker_epoch, phases, newly_offline), records)

    def continue_pending(self, limit: int | None = None) -> ControllerResult[bool]:
        """Continue the pending changes, oldest first, within one result of at most ``limit``
        (default: the per-result bound) partition changes.  The response is True while some
        still have records to write (run again soon)."""
        budget = self.ctx.max_partition_changes_per_result if limit is None else limit
        deadline = self.ctx.result_deadline_ns()
        records: list[ApiMessageAndVersion] = []
        for change in list(self._pending.values()):
            if change.kind is ChangeKind.FENCE and not change.complete and self._heard_again(change):
                # Its heartbeat arrived after the session expired: the RPC path recorded the
                # contact, and the heartbeat event, still queued, would drop this fencing.
                # Drop it now rather than fence a live broker (found by the simulator).
                self._cancel(change.broker_id, ChangeKind.FENCE)
        # The zone walks first (each must be its result's first writer, see brokers_fenced);
        # their members take no step of their own in a result a walk wrote into.
        walked: set[int] = set()
        for zone in list(self._zones):
            if records:
                walked.update(id(c) for c in zone.changes)
                continue
            walked.update(id(c) for c in zone.changes)
            finished = self._step_zone(zone, records, budget, deadline)
            encode_changes(records, 0)  # the walk is its result's first writer
            if finished:
                self._zones.remove(zone)
                for c in zone.changes:
                    if c.zone is zone:
                        c.zone = None
        for change in list(self._pending.values()):
            if change.complete or id(change) in walked or change.zone is not None:
                continue
            left = budget - partition_change_count(records)
            if left <= 0 or (records and self.ctx.past(deadline)):
                break
            if not self._step(change, records, left, deadline):
                continue
            if change.kind is ChangeKind.SHUTDOWN and change.phases:
                change.complete = True  # the registration retry writes the rest (nothing) and registers
                continue
            del self._pending[change.key]
            self._finish(change, records)
        return ControllerResult.of(records, self.has_work())

    def _step_zone(self, zone: _ZoneWalk, records: list[ApiMessageAndVersion], limit: int,
                   deadline_ns: int | None = None) -> bool:
        """Write up to ``limit`` (at least one partition's) of the zone's partition changes
        into ``records`` (empty: the walk is its result's first writer), stopping early once
        the context's clock passes ``deadline_ns``; True once every topic is walked or no member
        is still pending (the members then go on by their own steps)."""
        pending = self._pending
        with self.ctx.reading_once():
            live = [c for c in zone.changes if pending.get(c.key) is c and c.zone is zone and self._still_current(c)]
            for c in zone.changes:
                if c.zone is zone and c not in live:
                    c.zone = None  # cancelled or obsolete: its own step drops it
            if not live:
                return True
            ctx = self.ctx
            replication = ctx.replication
            # each member's bulk builder made when first needed (a step reaches ~2 topics, and
            # only the members with a replica there)
            bulks: dict[int, BulkLifecycleChanges] = {}
            live_ids = {id(c) for c in live}
            made = 0
            examined = 0
            max_examined = EXAMINE_FACTOR * max(limit, 1)
            past = ctx.past
            next_check = BUDGET_CHECK_EVERY  # the clock is read once per BUDGET_CHECK_EVERY changes made
            out_of_time = False
            while True:
                if zone.item_pos >= len(zone.items):
                    if zone.pos >= len(zone.topics):
                        self._log_zone(live, made)
                        return True
                    topic_id = zone.topics[zone.pos]
                    zone.pos += 1
                    by_partition: dict[int, list[PendingChange]] = {}
                    for c in live:
                        for e in replication.isr_topic_entries(c.broker_id, topic_id):
                            by_partition.setdefault(e & _REPLICA_MASK, []).append(c)
                    zone.topic_id = topic_id
                    zone.items = sorted(by_partition.items())
                    zone.item_pos = 0
                    examined += 1
                    continue
                pid, members = zone.items[zone.item_pos]
                if made >= next_check:
                    next_check = made + BUDGET_CHECK_EVERY
                    out_of_time = past(deadline_ns)
                if (made and made + len(members) > limit) or examined >= max_examined or out_of_time:
                    self._log_zone(live, made)
                    return False
                if len(members) > limit - made:
                    # more of the zone in this partition's ISR than the bound lets one result
                    # change: the first ones now, the rest from the state they leave, later
                    zone.items[zone.item_pos] = (pid, members[limit - made:])
                    members = members[:limit - made]
                else:
                    zone.item_pos += 1
                examined += 1
                walking = zone.topic_id
                assert walking is not None
                topic = replication.topic(walking)
                partition = None if topic is None else topic.parts.get(pid)
                if topic is None or partition is None:
                    continue  # deleted since the topic was read
                tp = TopicIdPartition(walking, pid)
                current = partition
                for c in members:
                    if id(c) not in live_ids:
                        continue
                    bulk = bulks.get(id(c))
                    if bulk is None:
                        bulk = bulks[id(c)] = BulkLifecycleChanges(ctx, c.broker_id, NO_LEADER, NO_LEADER)
                    record = bulk.update(topic, pid, current)
                    if record is None:
                        continue
                    records.append(record)
                    made += 1
                    current = current.merge(record.message)
                for c in members:
                    if id(c) in live_ids:
                        c.phases[0].seen[tp] = current.partition_epoch

    @staticmethod
    def _log_zone(live: list[PendingChange], made: int) -> None:
        if made:
            log.info("handleBrokerFenced[zone of %d broker(s)]: changing %d partition(s)", len(live), made)

    def _heard_again(self, change: PendingChange) -> bool:
        """Whether the fenced broker's session (at the change's epoch) is valid again."""
        manager = getattr(self.ctx.cluster, "heartbeat_manager", None)
        return manager is not None and bool(manager.has_valid_session(change.broker_id, change.broker_epoch))

    def has_work(self) -> bool:
        """Whether some pending change still has records to write."""
        return any(not change.complete for change in self._pending.values())

    # -- the changes ---------------------------------------------------------------------------

    def _isr_change(self, kind: ChangeKind, context: str, broker_id: int, broker_epoch: int) -> PendingChange:
        """Out of every ISR the broker is in, the partitions it leads first."""
        return PendingChange(kind, broker_id, broker_epoch,
                             [_Phase(context, broker_id, NO_LEADER, NO_LEADER, self._in_isr(broker_id, (True, False)))])

    def _in_isr(self, broker_id: int, passes: tuple[bool | None, ...] = (None,)) -> Callable[[bool], _Cursor]:
        """A source: the partitions with ``broker_id`` in their ISR (``passes``: see
        :class:`_Cursor`; ``(True, False)``: the ones it leads first)."""
        replication = self.ctx.replication
        return lambda first: _Cursor(replication.isr_entries_by_topic(broker_id), passes)

    def _in_elr(self, broker_id: int) -> Callable[[bool], _Cursor]:
        replication = self.ctx.replication
        return lambda first: _Cursor(replication.elr_entries_by_topic(broker_id))

    def _shutdown_change(self, broker_id: int, broker_epoch: int, clean: bool) -> PendingChange:
        if not clean:
            phases = [
                _Phase("handleBrokerUncleanShutdown", NO_LEADER, NO_LEADER, broker_id, self._in_isr(broker_id)),
                _Phase("handleBrokerUncleanShutdown", NO_LEADER, NO_LEADER, broker_id, self._in_elr(broker_id)),
            ]
        else:
            phases = [_Phase("handleBrokerShutdown", broker_id, NO_LEADER, NO_LEADER, self._in_isr(broker_id))]
        return PendingChange(ChangeKind.SHUTDOWN, broker_id, broker_epoch, phases, clean=clean)

    def _partitions_in_directory(self, directory: Uuid) -> Callable[[bool], _Cursor]:
        replication = self.ctx.replication
        return lambda first: _Cursor.of(list(replication.partitions_in_directory(directory)))

    def _leaderless_change(self, broker_to_add: int) -> PendingChange:
        # the leaderless partitions are the NO_LEADER broker's entries, all flagged as led
        return PendingChange(ChangeKind.LEADERLESS, NO_LEADER, -1, [
            _Phase("handleBrokerUnfenced" if broker_to_add != NO_LEADER else "electLeaderlessPartitions",
                   NO_LEADER, broker_to_add, NO_LEADER, self._in_isr(NO_LEADER, (True,)))])

    def _still_current(self, change: PendingChange) -> bool:
        """Whether the registration the change was started for is still the broker's."""
        if change.kind is ChangeKind.LEADERLESS:
            return True
        registration = self.ctx.cluster.registration(change.broker_id)
        if change.kind is ChangeKind.SHUTDOWN:
            return (-1 if registration is None else registration.epoch) == change.broker_epoch
        if registration is None or registration.epoch != change.broker_epoch:
            return False
        return not (change.kind is ChangeKind.CONTROLLED_SHUTDOWN and registration.fenced)

    def _step(self, change: PendingChange, records: list[ApiMessageAndVersion], limit: int,
              deadline_ns: int | None = None) -> bool:
        """:meth:`_step_once` within ``deadline_ns`` (default: the result's building budget
        from now, see ``PartitionChangeContext.result_deadline_ns``)."""
        if deadline_ns is None:
            deadline_ns = self.ctx.result_deadline_ns()
        start = len(records)
        with self.ctx.reading_once():
            done = self._step_once(change, records, limit, deadline_ns)
        encode_changes(records, start)
        return done

    def _step_once(self, change: PendingChange, records: list[ApiMessageAndVersion], limit: int,
                   deadline_ns: int | None = None) -> bool:
        """Write up to ``limit`` of the change's records, and none once the context's clock has
        passed ``deadline_ns`` (read every ``BUDGET_CHECK_EVERY`` records made); True when it
        is complete (or obsolete: its registration is gone or replaced).

        A partition that already has a record in ``records`` (another change of the same
        result) ends the step before it: its state is not replayed yet, and a second record
        computed from the same state could undo half of the first."""
        if not self._still_current(change):
            log.info("Dropping the %s change of broker %d: its registration at epoch %d is no longer current.",
                     change.kind.value, change.broker_id, change.broker_epoch)
            change.phases.clear()
            return True
        ctx = self.ctx
        replication = ctx.replication
        made = 0
        examined = 0
        max_examined = EXAMINE_FACTOR * max(limit, 1)
        past = ctx.past
        next_check = BUDGET_CHECK_EVERY
        out_of_time = False
        start = len(records)
        touched = {(r.message.topic_id, r.message.partition_id) for r in records
                   if isinstance(r.message, m.PartitionChangeRecord)}
        given = self._given_in_result(change, records) if touched else []
        led_moved = False
        complete = True
        for phase in change.phases:
            if phase.done:
                continue
            made_here: set[TopicIdPartition] = set()
            bulk = BulkLifecycleChanges(ctx, phase.broker_to_remove, phase.broker_to_add,
                                        phase.broker_with_unclean_shutdown)
            while True:
                tp = phase.queue.peek()
                if tp is None:
                    if phase.scans >= MAX_SCANS:
                        log.error("%s: the partitions kept changing over %d scans; finishing with what is written.",
                                  phase.context, phase.scans)
                        phase.done = True
                        break
                    cursor = phase.source(phase.scans == 0)
                    phase.scans += 1
                    if given or phase.seen or made_here:
                        # a rescan (or a scan missing what this result gives the broker): the
                        # partitions left, listed and filtered now
                        candidates = cursor.rest()
                        if given:
                            listed = set(candidates)
                            candidates.extend(tp for tp in given if tp not in listed)
                        if phase.seen or made_here:
                            candidates = [tp for tp in candidates
                                          if tp not in made_here and not self._settled(phase, tp)]
                        cursor = _Cursor.of(candidates)
                    phase.queue = cursor
                    tp = cursor.peek()
                    if tp is None:
                        phase.done = True
                        break
                if made >= next_check:
                    next_check = made + BUDGET_CHECK_EVERY
                    out_of_time = past(deadline_ns)
                if (made >= limit or examined >= max_examined or out_of_time
                        or (tp in touched and tp not in made_here)):
                    complete = False
                    break
                phase.queue.advance()
                examined += 1
                topic = replication.topic(tp.topic_id)
                partition = None if topic is None else topic.parts.get(tp.partition_id)
                if topic is None or partition is None:
                    continue  # deleted since the scan
                record = bulk.update(topic, tp.partition_id, partition)
                if record is None:
                    phase.seen[tp] = partition.partition_epoch
                    continue
                records.append(record)
                made += 1
                made_here.add(tp)
                touched.add(tp)
                phase.seen[tp] = partition.partition_epoch + 1
                if partition.leader == change.broker_id:
                    led_moved = True
            if not complete:
                break
        self._log_changes(change, records, start)
        if led_moved and change.kind is ChangeKind.CONTROLLED_SHUTDOWN:
            self._cs_offset_stale.add(change.broker_id)
        return complete

    @staticmethod
    def _given_in_result(change: PendingChange, records: Sequence[ApiMessageAndVersion]) -> list[TopicIdPartition]:
        """Partitions that earlier records of this result (another change's) make the broker
        this change takes out lead, or put in their ISR (or ELR): the phase's source reads the
        state before the result, where the broker is not there yet (found by the simulator: a
        fencing started after another change elected the broker completed without seeing it).
        They are touched in this result, so the step stops before them and the change goes
        on once they are replayed."""
        if change.kind is ChangeKind.LEADERLESS:
            return []
        b = change.broker_id
        out = []
        for r in records:
            rec = r.message
            if isinstance(rec, m.PartitionChangeRecord) and (
                    rec.leader == b or (rec.isr is not None and b in rec.isr)
                    or (rec.eligible_leader_replicas is not None and b in rec.eligible_leader_replicas)):
                out.append(TopicIdPartition(rec.topic_id, rec.partition_id))
        return out

    def _settled(self, phase: _Phase, tp: TopicIdPartition) -> bool:
        """Whether ``tp`` is at the epoch this phase last left it (so needs no second look);
        a deleted partition is settled."""
        partition = self.ctx.replication.partition(tp.topic_id, tp.partition_id)
        return partition is None or phase.seen.get(tp) == partition.partition_epoch

    def _finish(self, change: PendingChange, records: list[ApiMessageAndVersion]) -> None:
        """The record that ends a complete change, in Kafka's place: after its partition
        changes.  Nothing for an obsolete change (its registration moved on)."""
        if not change.phases and change.kind is not ChangeKind.LEADERLESS:
            return
        cluster = self.ctx.cluster
        if change.kind is ChangeKind.FENCE:
            cluster.handle_broker_fenced(change.broker_id, records)
        elif change.kind is ChangeKind.UNREGISTER:
            cluster.handle_broker_unregistered(change.broker_id, change.broker_epoch, records)
        elif change.kind is ChangeKind.OFFLINE_DIRS:
            cluster.handle_directories_offline(change.broker_id, change.broker_epoch, change.directories, records)
        else:
            return
        self._ending[change.key] = change  # excluded until that record is replayed

    def _log_changes(self, change: PendingChange, records: list[ApiMessageAndVersion], start: int) -> None:
        if len(records) == start:
            return
        context = change.phases[0].context if change.phases else change.kind.value
        if log.isEnabledFor(logging.DEBUG):
            names = ", ".join(self.ctx.describe(r.message) for r in records[start:])
            log.debug("%s: changing partition(s): %s", context, names)
        else:
            log.info("%s: changing %d partition(s)", context, len(records) - start)
