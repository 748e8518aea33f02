"""The bulk path of AlterPartition: a partition leader's plain ISR change answered without
the full validation walk and without a PartitionChangeBuilder.

Why: a broker that restarts and catches up on 10,000 partitions makes their leaders send
AlterPartition requests adding it back to every ISR.  Through the builder each partition cost
~45 us to validate and build (a builder object, its target lists and directory map, the
reassignment, ELR and election steps, a leader acceptor closure, the registration lookups of
every ISR member), on top of the replay: one 5,000-partition request was one 0.4-0.6 s event,
and on the loaded 3-node cluster several of them in a row (1.7-2.1 s each) outlasted the
brokers' sessions (benchmarks/results/NOTES.md, session 19).  For almost every such partition
the answer is simply "the requested ISR, the same leader".

What the bulk path takes (:meth:`BulkAlterPartition.change`), and why each condition is enough
for the answer to be the full path's (``alter_partition.py``'s validation, then
``partition_change.py``'s steps):

* the request is *valid as it stands*: the partition exists, its leader and partition epochs
  are the request's, the sender is its leader, the ISR is duplicate-free, made of replicas
  and holds the leader, the recovery state asked is RECOVERED and the partition's is
  RECOVERED, and every ISR member is registered, unfenced, not in controlled shutdown, not
  excluded by an unfinished lifecycle change (for its directory of this partition) and (v3)
  at the broker epoch it is registered at, or -1.  Each of the validation's refusals needs one
  of these to fail, so the code is NONE; anything else goes the full way, which answers
  Kafka's code and logs it;
* no reassignment in flight (``removing`` and ``adding`` empty): the builder's step 1 does
  nothing, the target replicas are the replicas, no epoch bump for dropped replicas, and no
  replica, directory (one per replica: each keeps its assignment; before 3.7-IV2 a partition
  has none and none is written) or reassignment field;
* ELR and last known ELR empty and -- with ELR enabled -- the new ISR at least the topic's
  effective ``min.insync.replicas``: step 2 clears both targets, which are empty already, so
  no ELR field is written and the last known leader is not touched;
* the leader is acceptable (active, its directory of the partition online, not excluded): the
  election (ONLINE or UNCLEAN alike: both keep a valid current leader) changes nothing;
* the record then is the new ISR when it differs from the current one, with the leader named
  (the leader epoch bump of KAFKA-15021) before 3.6-IV0 when the ISR shrinks; no record when
  the ISR is unchanged.

The answer is the partition as it will be once the record is replayed (the full path merges
the record into the registration; here the fields are computed: same leader, the new ISR, the
epochs bumped as replay bumps them).

Everything else returns :data:`FALLBACK` and the caller takes the full path, so both give the
same record byte for byte and the same answer field for field --
``tests/metadata/test_alter_partition_bulk.py`` runs both on random partitions, requests,
broker states, metadata.versions, ELR and min ISR settings and compares them.

Nothing the checks read changes inside one write (state changes only at replay), so one
:class:`BulkAlterPartition` caches the settings and each broker's standing for one write.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from kraft_node.metadata.controller.lifecycle_bulk import FALLBACK, Fallback
from kraft_node.metadata.controller.partition_change import Replicas
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER_CHANGE,
    LeaderRecoveryState,
    PartitionRegistration,
    TopicControlInfo,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.protocol.errors import Errors
from kraft_node.protocol.generated.alter_partition import AlterPartitionResponse
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

if TYPE_CHECKING:
    from kraft_node.metadata.controller.partition_changes import PartitionChangeContext



#: A v2 ISR member's epoch: "do not check" (Kafka's newIsrToSimpleNewIsrWithBrokerEpochs).
_UNCHECKED = -1
_RECOVERED = LeaderRecoveryState.RECOVERED
_NONE = Errors.NONE
_PartitionData = AlterPartitionResponse.PartitionData


class BulkAlterPartition:
    """One write's AlterPartition bulk path (see the module doc): :meth:`change` per partition.

    Make one per write and drop it after: it caches the metadata.version, the ELR switch and
    each broker's registration standing, which hold only until the write's records are
    replayed."""

    __slots__ = ("_ctx", "_version", "_bump_on_shrink", "_directories_supported", "_elr", "_epochs", "_excluded",
                 "_active", "_leader_dir", "_min_isr_topic", "_min_isr", "taken", "fallbacks")

    def __init__(self, ctx: PartitionChangeContext) -> None:
        self._ctx = ctx
        mv = ctx.metadata_version()
        self._version = mv.partition_change_record_version()
        self._bump_on_shrink = mv.is_leader_epoch_bump_required_on_isr_shrink()
        self._directories_supported = mv.is_directory_assignment_supported()
        self._elr = ctx.elr_enabled()
        #: broker -> its registered epoch if it may join an ISR (registered, unfenced, not in
        #: controlled shutdown), else None
        self._epochs: dict[int, int | None] = {}
        self._excluded = ctx.exclusions.excluded
        #: broker -> ClusterControlManager.is_active
        self._active: dict[int, bool] = {}
        #: (broker, directory) -> the directory is online on the broker
        self._leader_dir: dict[tuple[int, Uuid], bool] = {}
        #: the topic whose effective min ISR ``_min_isr`` is (partitions come topic by topic)
        self._min_isr_topic: TopicControlInfo | None = None
        self._min_isr = 0
        #: partitions answered here / handed to the full path (diagnostics, tests)
        self.taken = 0
        self.fallbacks = 0

    def _epoch(self, broker_id: int) -> int | None:
        epochs = self._epochs
        if broker_id in epochs:
            return epochs[broker_id]
        registration = self._ctx.cluster.registration(broker_id)
        if registration is None or registration.in_controlled_shutdown or registration.fenced:
            epoch = None
        else:
            epoch = int(registration.epoch)
        epochs[broker_id] = epoch
        return epoch

    def _may_stay_leader(self, broker_id: int, directory: Uuid | None) -> bool:
        active = self._active.get(broker_id)
        if active is None:
            active = self._active[broker_id] = bool(self._ctx.cluster.is_active(broker_id))
        if not active:
            return False
        if directory is None:
            return True
        key = (broker_id, directory)
        online = self._leader_dir.get(key)
        if online is None:
            online = self._leader_dir[key] = bool(self._ctx.cluster.has_online_dir(broker_id, directory))
        return online

    def _effective_min_isr(self, topic: TopicControlInfo) -> int:
        if topic is not self._min_isr_topic:
            self._min_isr = self._ctx.effective_min_isr(topic)
            self._min_isr_topic = topic
        return self._min_isr

    def change(self, broker_id: int, topic: TopicControlInfo, data: Any,
               version: int) -> tuple[ApiMessageAndVersion | None, Any] | Fallback:
        """``(record or None, the partition's answer)`` for the request's ``data`` about one
        partition of ``topic``, or :data:`FALLBACK` (see the module doc)."""
        pid = data.partition_index
        p: PartitionRegistration | None = topic.parts.get(pid)
        if (p is None or data.leader_epoch != p.leader_epoch or data.partition_epoch != p.partition_epoch
                or broker_id != p.leader or data.leader_recovery_state != 0
                or p.leader_recovery_state != _RECOVERED
                or p.removing_replicas or p.adding_replicas or p.elr or p.last_known_elr):
            return self._fallback()
        replicas = p.replicas
        directories: Sequence[Uuid | None] = p.directories
        if len(directories) != len(replicas):
            if directories or self._directories_supported:
                return self._fallback()  # the builder writes the directories
            directories = (None,) * len(replicas)  # no assignments before 3.7-IV2
        if version >= 3:
            states = data.new_isr_with_epochs
            new_isr = [s.broker_id for s in states]
            epochs = [s.broker_epoch for s in states]
        else:
            new_isr = list(data.new_isr)
            epochs = None
        n = len(new_isr)
        if len(set(new_isr)) != n or broker_id not in new_isr:
            return self._fallback()
        if self._elr and n < self._effective_min_isr(topic):
            return self._fallback()
        leader_dir = None
        excluded = self._excluded
        epoch_of = self._epoch
        for i, b in enumerate(new_isr):
            try:
                at = replicas.index(b)  # also rules out ids that are no replica (negative ones too)
            except ValueError:
                return self._fallback()
            registered = epoch_of(b)
            if registered is None:
                return self._fallback()
            if epochs is not None:
                asked = epochs[i]
                if asked != _UNCHECKED and asked != registered:
                    return self._fallback()
            directory = directories[at]
            if excluded(b, directory):
                return self._fallback()
            if b == broker_id:
                leader_dir = directory
        if not self._may_stay_leader(broker_id, leader_dir):
            return self._fallback()
        self.taken += 1
        if new_isr == list(p.isr):
            return None, _PartitionData(
                partition_index=pid, error_code=_NONE, leader_id=p.leader, isr=new_isr,
                leader_recovery_state=int(_RECOVERED), leader_epoch=p.leader_epoch,
                partition_epoch=p.partition_epoch)
        leader = NO_LEADER_CHANGE
        leader_epoch = p.leader_epoch
        if self._bump_on_shrink and not Replicas.contains_all(new_isr, p.isr):
            leader = p.leader
            leader_epoch += 1
        record = ApiMessageAndVersion(
            m.PartitionChangeRecord(topic_id=topic.topic_id, partition_id=pid, isr=new_isr, leader=leader),
            self._version)
        return record, _PartitionData(
            partition_index=pid, error_code=_NONE, leader_id=p.leader, isr=list(new_isr),
            leader_recovery_state=int(_RECOVERED), leader_epoch=leader_epoch,
            partition_epoch=p.partition_epoch + 1)

    def _fallback(self) -> Fallback:
        self.fallbacks += 1
        return FALLBACK
