"""The bulk path of a broker lifecycle change: the PartitionChangeRecords for "broker B leaves
the ISR of many partitions" (fencing, controlled shutdown, a clean or unclean restart,
unregistration, offline directories) without a PartitionChangeBuilder per partition.

Why: a controlled shutdown of a broker in 30k ISRs, or a zone of 100 brokers fenced, is one
record per partition, and the builder costs ~28 us each on the active controller (an object,
six target lists, a directory map, the reassignment and ELR steps, a closure per partition),
though for almost every such partition the answer is "the ISR without B, and if B (or another
broker going away) led it, the first acceptable replica of that ISR".  The settings the builder
would read per partition (metadata.version, ELR, the record version, whether an ISR shrink
bumps the leader epoch) are read once per phase step, and whether a broker may lead is computed
once per (broker, directory) instead of once per candidate of every partition.

What the bulk path takes (``BulkLifecycleChanges.change``), and why each condition is enough
for the builder's answer to be the one computed here (``partition_change.py``'s steps):

* ``broker_to_add == NO_LEADER`` (unfencing elects leaderless partitions: builder);
* no reassignment in flight (``removing`` and ``adding`` empty): step 1 does nothing, the
  target replicas are the replicas, so no epoch bump for dropped replicas and no replica,
  directory (each replica keeps its assignment) or reassignment field is written;
* ELR and last known ELR empty, and -- with ELR enabled -- the new ISR keeps at least the
  topic's effective ``min.insync.replicas``: step 2 then clears both target lists, which are
  empty already, so no ELR field is written (without ELR the builder writes ``[]`` over a
  non-empty ELR; that case goes to the builder);
* B (or the uncleanly restarted broker) is in the ISR and the ISR keeps at least one member:
  the record writes the new ISR (an empty one is the builder's: ELR rules, unclean election);
* a leader is found in the new ISR: the current one if it is acceptable, else the first
  acceptable replica (in replica order) of the new ISR -- ONLINE's order, UNCLEAN's too as long
  as a clean candidate exists.  No candidate: the builder (no leader, unclean election, the
  last known leader);
* before 3.6-IV0 an ISR shrink names the current leader (the leader epoch bump of
  KAFKA-15021) when the leader does not change.

Everything else returns ``FALLBACK`` and the caller runs the builder
(``PartitionChangeContext.partition_update``), so the two paths give the same record byte for
byte -- ``tests/metadata/test_lifecycle_bulk.py`` runs both on random partitions, broker
states, metadata.versions, ELR and min ISR settings and compares the encoded records.

"Acceptable" is ``partition_update``'s rule: not the broker taken out nor the uncleanly
restarted one, active (registered, unfenced, not in controlled shutdown), not excluded by an
unfinished lifecycle change (for its directory holding the partition), and that directory
online.  None of that changes inside one write (state changes only at replay), so a step
caches it by ``(broker, directory)``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Final

from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    PartitionRegistration,
    TopicControlInfo,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

if TYPE_CHECKING:
    from kraft_node.metadata.controller.partition_changes import PartitionChangeContext


class Fallback:
    """A bulk path cannot answer this partition: the caller takes the full path (the
    PartitionChangeBuilder).  One instance, :data:`FALLBACK` (also ``alter_partition_bulk``'s)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FALLBACK"


FALLBACK: Final = Fallback()

_Change = ApiMessageAndVersion | None | Fallback


class BulkLifecycleChanges:
    """One lifecycle phase's partition changes within one write (one event): build with
    :meth:`change` (or :meth:`update`, which falls back to the builder itself).

    Make one per step and drop it after: it caches the metadata.version, the ELR switch and
    each broker's eligibility, which hold only until the step's records are replayed."""

    __slots__ = ("_ctx", "_remove", "_unclean", "_add", "_elr", "_bump_on_shrink", "_version",
                 "_accepts", "_is_active", "_excluded", "_has_online_dir", "fallbacks")

    def __init__(self, ctx: PartitionChangeContext, broker_to_remove: int, broker_to_add: int,
                 broker_with_unclean_shutdown: int) -> None:
        self._ctx = ctx
        self._remove = broker_to_remove
        self._unclean = broker_with_unclean_shutdown
        self._add = broker_to_add
        mv = ctx.metadata_version()
        self._elr = ctx.elr_enabled()
        self._bump_on_shrink = mv.is_leader_epoch_bump_required_on_isr_shrink()
        self._version = mv.partition_change_record_version()
        #: (broker, directory) -> may lead; directory None when the broker is not a replica
        self._accepts: dict[tuple[int, Uuid | None], bool] = {}
        self._is_active = ctx.cluster.is_active
        self._excluded = ctx.exclusions.excluded
        self._has_online_dir = ctx.cluster.has_online_dir
        #: partitions handed to the builder (diagnostics, tests)
        self.fallbacks = 0

    def _acceptable(self, broker_id: int, directory: Uuid | None) -> bool:
        key = (broker_id, directory)
        ok = self._accepts.get(key)
        if ok is None:
            ok = (broker_id != self._remove and broker_id != self._unclean
                  and (broker_id == self._add or self._is_active(broker_id))
                  and not self._excluded(broker_id, directory)
                  and (directory is None or self._has_online_dir(broker_id, directory)))
            self._accepts[key] = ok
        return ok

    def change(self, topic: TopicControlInfo, partition_id: int, partition: PartitionRegistration) -> _Change:
        """The partition's record, None when nothing changes, or :data:`FALLBACK` (see the
        module doc for what the bulk path takes)."""
        if self._add != NO_LEADER:
            return FALLBACK
        p = partition
        if (p.removing_replicas or p.adding_replicas or p.elr or p.last_known_elr
                or len(p.directories) != len(p.replicas)):
            return FALLBACK
        remove, unclean = self._remove, self._unclean
        isr = p.isr
        new_isr = [r for r in isr if r != remove and r != unclean]
        if len(new_isr) == len(isr) or not new_isr:
            return FALLBACK
        if self._elr and len(new_isr) < self._ctx.effective_min_isr(topic):
            return FALLBACK
        replicas = p.replicas
        directories = p.directories
        leader = p.leader
        new_leader = -2  # NO_LEADER_CHANGE
        if leader in new_isr:
            if leader not in replicas:
                return FALLBACK  # not a valid state; the builder says what it makes of it
            keep = self._acceptable(leader, directories[replicas.index(leader)])
        else:
            keep = False
        if not keep:
            for i, r in enumerate(replicas):
                if r in new_isr and self._acceptable(r, directories[i]):
                    new_leader = r
                    break
            else:
                return FALLBACK
            if new_leader == leader:  # cannot happen (leader was not acceptable); keep it exact
                new_leader = -2
        if new_leader == -2 and self._bump_on_shrink:
            new_leader = leader
        return ApiMessageAndVersion(
            m.PartitionChangeRecord(topic_id=topic.topic_id, partition_id=partition_id, isr=new_isr,
                                    leader=new_leader),
            self._version)

    def update(self, topic: TopicControlInfo, partition_id: int,
               partition: PartitionRegistration) -> ApiMessageAndVersion | None:
        """:meth:`change`, through the PartitionChangeBuilder where the bulk path cannot answer."""
        record = self.change(topic, partition_id, partition)
        if record is FALLBACK:
            self.fallbacks += 1
            return self._ctx.partition_update(topic, partition_id, partition, self._remove, self._add,
                                              self._unclean)
        assert not isinstance(record, Fallback)
        return record

    def changes(self, items: list[tuple[TopicControlInfo, int, PartitionRegistration]]
                ) -> list[ApiMessageAndVersion | None]:
        """:meth:`update` of each ``(topic, partition id, registration)``, in order."""
        return [self.update(t, pid, p) for t, pid, p in items]
