"""Model-based test of the PartitionChangeBuilder: one partition driven through random broker
and admin events the way Kafka's ReplicationControlManager drives the builder, checked after
every step against a small set-based specification of KIP-966 / KRaft leadership.

The world: brokers 0-5, each with one log directory; one partition with replication factor
1-4; a topic min.insync.replicas and unclean.leader.election.enable; a metadata.version (and
the ``eligible.leader.replicas.version`` feature when the version supports ELR).  Brokers are
*fenced*, *shutting down* (controlled shutdown), or *active*; a broker that restarted
uncleanly is fenced and remembered until it rejoins the ISR.

Each step builds its input as ReplicationControlManager does (fencing: target ISR without the
broker, acceptable = active and not that broker, ONLINE or UNCLEAN per topic config;
unfencing: leaderless partitions only, the broker counts as active; controlled shutdown as
fencing; unclean restart (ELR-capable versions): ISR without the broker, the broker kept out of
the ELR; AlterPartition from the leader; reassignment start / catch-up / cancel; preferred and
unclean elections; a min.insync.replicas change writes ClearElrRecord), builds, applies the
record with ``PartitionRegistration.merge`` (ClearElrRecord as replay applies it) and checks:

* the registration equals the specification's prediction, field by field -- the leader
  choice for PREFERRED / ONLINE / UNCLEAN, ISR, ELR, last known ELR, replicas, reassignment
  lists, directories, recovery state, and both epochs;
* invariants: leader in the ISR (or none); leader active (or none); ISR within the replicas,
  without inactive brokers except a leaderless partition's single last member; ELR disjoint
  from the ISR, within the replicas, without uncleanly-restarted brokers, empty without ELR;
  last known ELR at most the one last leader, only while leaderless; partition epoch +1 per
  record, leader epoch +1 exactly when the record names a leader; without unclean election a
  new leader comes from the old ISR, ELR, last known leader or the ISR the leader asked for;
  the record encodes at the metadata.version's record version.

Two Kafka quirks are kept for record fidelity and checked as such: a completing reassignment
can leave the replicas it drops in the ELR, and the last known ELR can hold -1 or a replica
a reassignment dropped.  One is not: the builder never elects such a former replica (Kafka
4.2 would; ``test_partition_change.py::test_last_known_leader_must_still_be_a_replica``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from kraft_node.metadata.controller.partition_change import (
    Election,
    PartitionChangeBuilder,
    PartitionReassignmentReplicas,
    PartitionReassignmentRevert,
    new_isr_to_simple_new_isr_with_broker_epochs,
)
from kraft_node.metadata.controller.replication_control import (
    NO_LEADER,
    NO_LEADER_CHANGE,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_node.metadata.versions import MetadataVersion
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

BROKERS = list(range(6))
BROKER_DIRS = {b: Uuid((0x5EED << 64) | (1000 + b)) for b in BROKERS}
TOPIC_ID = Uuid.from_string("FbrrdcfiR-KC2CPSTHaJrg")
RECOVERED = LeaderRecoveryState.RECOVERED
RECOVERING = LeaderRecoveryState.RECOVERING

# (metadata.version, ELR feature on): ISR-shrink epoch bumps (3.5), directories (3.7-IV2),
# an ELR-capable version with the feature off, and ELR on.
CONFIGS = [("3.5-IV2", False), ("3.7-IV2", False), ("4.0-IV1", False), ("4.0-IV1", True), ("4.2-IV1", True)]


@dataclass(frozen=True)
class Intent:
    """What a controller operation asks of the builder (the inputs both the builder and the
    specification are given)."""
    target_isr: list[int]
    acceptable: Callable[[int], bool]
    election: Election = Election.ONLINE
    target_replicas: list[int] | None = None
    target_removing: list[int] | None = None
    target_adding: list[int] | None = None
    unclean_shutdown: list[int] | None = None
    target_recovery: LeaderRecoveryState | None = None


def contains_all(a: Sequence[int], b: Sequence[int]) -> bool:
    return set(b) <= set(a)


class PartitionModel(RuleBasedStateMachine):
    """One partition and its brokers; see the module doc."""

    # -- setup ----------------------------------------------------------------------------
    @initialize(config=st.sampled_from(CONFIGS),
                replicas=st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True),
                min_isr=st.integers(1, 4), unclean=st.booleans())
    def create(self, config: tuple[str, bool], replicas: list[int], min_isr: int, unclean: bool) -> None:
        mv_name, elr_on = config
        self.mv = MetadataVersion.from_version_string(mv_name)
        self.elr = elr_on and self.mv.is_elr_supported()
        self.min_isr = min_isr
        self.unclean = unclean
        self.fenced: set[int] = set()
        self.shutting_down: set[int] = set()
        self.unclean_restarted: set[int] = set()
        self.dropped_in_elr: set[int] = set()
        self.dropped_in_last_known: set[int] = set()
        self.steps = 0
        self.partition = PartitionRegistration(
            replicas=tuple(replicas), directories=self.directories_for(replicas), isr=tuple(replicas),
            removing_replicas=(), adding_replicas=(), leader=replicas[0], leader_recovery_state=RECOVERED,
            leader_epoch=0, partition_epoch=0)

    def directories_for(self, replicas: Sequence[int]) -> tuple[Uuid, ...]:
        if self.mv.is_directory_assignment_supported():
            return tuple(BROKER_DIRS[b] for b in replicas)
        return DirectoryId.migrating_tuple(len(replicas))

    # -- the cluster ----------------------------------------------------------------------
    def active(self, b: int) -> bool:
        return b not in self.fenced and b not in self.shutting_down

    def effective_min_isr(self) -> int:
        """Kafka's getTopicEffectiveMinIsr: min.insync.replicas capped at the replication
        factor (of partition 0's current replica list)."""
        return min(self.min_isr, len(self.partition.replicas))

    def topic_election(self) -> Election:
        return Election.UNCLEAN if self.unclean else Election.ONLINE

    # -- the builder, as ReplicationControlManager drives it ------------------------------
    def builder_for(self, intent: Intent) -> PartitionChangeBuilder:
        builder = (PartitionChangeBuilder(self.partition, TOPIC_ID, 0, intent.acceptable, self.mv,
                                          self.effective_min_isr())
                   .set_eligible_leader_replicas_enabled(self.elr)
                   .set_election(intent.election)
                   .set_default_dir_provider(BROKER_DIRS.__getitem__))
        if intent.unclean_shutdown is not None:
            builder.set_unclean_shutdown_replicas(intent.unclean_shutdown)
        if intent.target_replicas is not None:
            builder.set_target_replicas(intent.target_replicas)
        if intent.target_removing is not None:
            builder.set_target_removing(intent.target_removing)
        if intent.target_adding is not None:
            builder.set_target_adding(intent.target_adding)
        if intent.target_recovery is not None:
            builder.set_target_leader_recovery_state(intent.target_recovery)
        builder.set_target_isr_with_broker_states(new_isr_to_simple_new_isr_with_broker_epochs(intent.target_isr))
        return builder

    def run(self, intent: Intent) -> None:
        old = self.partition
        built = self.builder_for(intent).build()
        predicted = self.predict(intent)
        if built is None:
            new = old
        else:
            assert built.version == self.mv.partition_change_record_version()
            built.encode()  # every field the record sets exists at its version
            rec = built.message
            assert (rec.topic_id, rec.partition_id) == (TOPIC_ID, 0)
            new = old.merge(rec)
            # The leader epoch bumps exactly when the record names a leader.
            assert new.leader_epoch == old.leader_epoch + (rec.leader != NO_LEADER_CHANGE)
            assert new.partition_epoch == old.partition_epoch + 1
        assert new == predicted, f"\nstart     {old}\nintent    {intent}\nbuilt     {built}\npredicted {predicted}"
        if (new.leader != old.leader and new.leader != NO_LEADER and not self.unclean
                and intent.election is not Election.UNCLEAN):
            # Without unclean election a new leader was in sync: old ISR, ELR, the last known
            # leader (KIP-966 balanced recovery), or the ISR its leader asked for.
            assert new.leader in {*old.isr, *old.elr, *old.last_known_elr, *intent.target_isr}
        self.partition = new
        self.unclean_restarted -= set(new.isr)
        # Kafka computes the ELR before a completing reassignment drops the replicas it
        # removes, so those may linger in the ELR (a quirk kept for record fidelity).
        self.dropped_in_elr = (self.dropped_in_elr | (set(old.replicas) - set(new.replicas))) & set(new.elr)
        self.dropped_in_elr -= set(new.replicas)
        dropped = set(old.replicas) - set(new.replicas)
        self.dropped_in_last_known = (self.dropped_in_last_known | dropped) & set(new.last_known_elr)
        self.dropped_in_last_known -= set(new.replicas)

    # -- the specification ----------------------------------------------------------------
    def predict(self, intent: Intent) -> PartitionRegistration:
        """KRaft's leader/ISR/ELR rules, stated on sets (KIP-966, KIP-704, KAFKA-15021)."""
        p = self.partition
        replicas = list(p.replicas if intent.target_replicas is None else intent.target_replicas)
        removing = list(p.removing_replicas if intent.target_removing is None else intent.target_removing)
        adding = list(p.adding_replicas if intent.target_adding is None else intent.target_adding)
        isr = list(intent.target_isr)
        # A reassignment completes once the ISR (less the replicas leaving) holds every
        # replica that stays.
        if removing or adding:
            staying_isr = [r for r in isr if r not in removing]
            staying = [r for r in replicas if r not in removing]
            if staying_isr and staying and set(staying) <= set(staying_isr):
                replicas, isr, removing, adding = staying, staying_isr, [], []
        # ELR: below min ISR, the members that were in sync (ELR + old ISR) and left it,
        # except those that restarted uncleanly.
        elr: set[int] = set()
        if self.elr and len(isr) < self.effective_min_isr():
            elr = (set(p.elr) | set(p.isr)) - set(isr) - set(intent.unclean_shutdown or ())
        # Leader: candidates are the ISR, or the ELR when the ISR is empty.
        candidates = set(isr) if isr else elr

        def valid(r: int) -> bool:
            return r in candidates and intent.acceptable(r)

        unclean = False
        if intent.election is Election.PREFERRED and valid(replicas[0]):
            leader = replicas[0]
        elif valid(p.leader):
            leader = p.leader
        elif any(valid(r) for r in replicas):
            leader = next(r for r in replicas if valid(r))
        elif (self.elr and not isr and not elr and len(p.last_known_elr) == 1
              and intent.acceptable(p.last_known_elr[0]) and p.last_known_elr[0] in replicas):
            leader, unclean = p.last_known_elr[0], True
        elif intent.election is Election.UNCLEAN and any(intent.acceptable(r) for r in replicas):
            leader, unclean = next(r for r in replicas if intent.acceptable(r)), True
        else:
            leader = NO_LEADER
        changed_leader = leader != p.leader
        if changed_leader and leader in elr:
            isr, elr = [leader], elr - {leader}  # led from the ELR: it alone is in sync
        if changed_leader and unclean:
            isr, elr = [leader], set()  # unclean: the leader alone, no ELR
        elif not isr and not self.elr:
            isr = list(p.isr)  # without ELR the ISR never empties: the last member stays
        # Leader epoch: a new leader, a replica dropped, or (before 3.6) an ISR shrink.
        bump = (changed_leader or not contains_all(replicas, p.replicas)
                or (self.mv.is_leader_epoch_bump_required_on_isr_shrink() and isr != list(p.isr)
                    and not contains_all(isr, p.isr)))
        record_leader = leader if changed_leader else (p.leader if bump else NO_LEADER_CHANGE)
        # Last known ELR (with ELR): the last leader, recorded when the partition loses its
        # leader and cleared when it has one again.
        last_known = list(p.last_known_elr)
        if self.elr:
            if record_leader == NO_LEADER and not p.last_known_elr:
                last_known = [p.leader]
            elif record_leader >= 0 and p.last_known_elr:
                last_known = []
        recovery = p.leader_recovery_state
        if changed_leader and unclean:
            recovery = RECOVERING
        if intent.target_recovery is not None and intent.target_recovery != p.leader_recovery_state:
            recovery = intent.target_recovery
        fields = dict(replicas=tuple(replicas), directories=self.directories_for(replicas), isr=tuple(isr),
                      removing_replicas=tuple(removing), adding_replicas=tuple(adding), leader=leader,
                      leader_recovery_state=recovery, elr=tuple(sorted(elr)), last_known_elr=tuple(last_known))
        same = all(getattr(p, k) == v for k, v in fields.items())
        if same and not bump:
            return p
        return PartitionRegistration(**fields, leader_epoch=p.leader_epoch + (1 if bump else 0),  # type: ignore[arg-type]
                                     partition_epoch=p.partition_epoch + 1)

    @invariant()
    def check_partition_invariants(self) -> None:
        """After every step (once its records -- partition changes, broker registration
        changes -- are all applied)."""
        if not hasattr(self, "partition"):
            return
        p = self.partition
        inactive = self.fenced | self.shutting_down
        assert len(set(p.isr)) == len(p.isr) and set(p.isr) <= set(p.replicas), p
        assert p.leader == NO_LEADER or p.leader in p.isr, p
        assert p.leader == NO_LEADER or p.leader in p.replicas, p
        assert p.leader == NO_LEADER or p.leader not in inactive, (p, inactive)
        if set(p.isr) & inactive:
            # Only a leaderless partition's last ISR member may be down (Kafka keeps it so it
            # can come back as a clean leader).
            assert p.leader == NO_LEADER and len(p.isr) == 1, (p, inactive)
        assert not set(p.elr) & set(p.isr), p
        assert set(p.elr) - set(p.replicas) <= self.dropped_in_elr, (p, self.dropped_in_elr)
        assert not set(p.elr) & self.unclean_restarted, (p, self.unclean_restarted)
        if not self.elr:
            assert p.elr == () and p.last_known_elr == (), p
        assert len(p.last_known_elr) <= 1, p
        if p.last_known_elr:
            # The last leader -- or NO_LEADER itself: Kafka records [-1] when a leaderless
            # partition whose last known ELR was cleared gets a leader epoch bump (a quirk
            # of maybeUpdateLastKnownLeader, kept for record fidelity).
            assert p.leader == NO_LEADER, p
            # The last leader; or, Kafka quirks kept for record fidelity, -1 or a replica a
            # reassignment dropped (recorded when a leaderless partition's epoch bumps).
            assert set(p.last_known_elr) - {*p.replicas, NO_LEADER} <= self.dropped_in_last_known, p
        assert len(p.directories) == len(p.replicas), p
        assert p.leader_recovery_state is RECOVERED or len(p.isr) == 1 or p.leader == NO_LEADER, p

    # -- broker events --------------------------------------------------------------------
    @precondition(lambda self: any(b not in self.fenced for b in BROKERS))
    @rule(data=st.data())
    def fence(self, data: st.DataObject) -> None:
        """handleBrokerFenced: out of every ISR it is in, its leaderships moved."""
        self.fence_broker(data.draw(st.sampled_from([b for b in BROKERS if b not in self.fenced]), label="fence"))

    def fence_broker(self, b: int) -> None:
        if b in self.partition.isr:
            self.run(Intent(target_isr=[r for r in self.partition.isr if r != b], election=self.topic_election(),
                            acceptable=lambda r: r != b and self.active(r)))
        self.fenced.add(b)

    @precondition(lambda self: bool(self.fenced))
    @rule(data=st.data())
    def unfence(self, data: st.DataObject) -> None:
        """handleBrokerUnfenced (after a clean restart): leaderless partitions elect again,
        the broker counting as active."""
        b = data.draw(st.sampled_from(sorted(self.fenced)), label="unfence")
        if self.partition.leader == NO_LEADER:
            self.run(Intent(target_isr=list(self.partition.isr), election=self.topic_election(),
                            acceptable=lambda r: r == b or self.active(r)))
        self.fenced.discard(b)
        self.shutting_down.discard(b)

    @precondition(lambda self: any(self.active(b) for b in BROKERS))
    @rule(data=st.data())
    def controlled_shutdown(self, data: st.DataObject) -> None:
        """handleBrokerInControlledShutdown: leaves the ISRs, leaderships moved first."""
        b = data.draw(st.sampled_from([b for b in BROKERS if self.active(b)]), label="shutdown")
        if b in self.partition.isr:
            self.run(Intent(target_isr=[r for r in self.partition.isr if r != b], election=self.topic_election(),
                            acceptable=lambda r: r != b and self.active(r)))
        self.shutting_down.add(b)

    @rule(data=st.data())
    def restart(self, data: st.DataObject) -> None:
        """A broker registers a new incarnation (after its session expired, so fenced first).
        Kafka 4's registerBroker: an unclean restart with ELR on is handleBrokerUncleanShutdown
        (out of ISR and ELR, kept out of the new ELR); otherwise it is handled like a fence.
        It registers fenced."""
        b = data.draw(st.sampled_from(BROKERS), label="restart")
        clean = data.draw(st.booleans(), label="clean")
        if b not in self.fenced:
            self.fence_broker(b)  # the session timed out first
        p = self.partition
        if self.elr and not clean:
            if b in p.isr or b in p.elr:
                self.run(Intent(target_isr=[r for r in p.isr if r != b], election=self.topic_election(),
                                unclean_shutdown=[b], acceptable=lambda r: r != b and self.active(r)))
            self.unclean_restarted.add(b)
        elif b in p.isr:
            self.run(Intent(target_isr=[r for r in p.isr if r != b], election=self.topic_election(),
                            acceptable=lambda r: r != b and self.active(r)))
        self.fenced.add(b)
        self.shutting_down.discard(b)

    # -- AlterPartition from the leader ---------------------------------------------------
    def can_alter(self) -> bool:
        return self.partition.leader != NO_LEADER and self.active(self.partition.leader)

    @precondition(can_alter)
    @rule(data=st.data())
    def alter_partition(self, data: st.DataObject) -> None:
        """The leader shrinks or expands its ISR (only active replicas may join; recovering
        leaders keep an ISR of one until they report RECOVERED)."""
        p = self.partition
        leader = p.leader
        followers = [r for r in p.replicas if r != leader and self.active(r)]
        recovery = RECOVERED
        if p.leader_recovery_state is RECOVERING and data.draw(st.booleans(), label="still recovering"):
            chosen: list[int] = []
            recovery = RECOVERING
        else:
            chosen = data.draw(st.lists(st.sampled_from(followers), unique=True), label="followers") \
                if followers else []
        new_isr = data.draw(st.permutations([leader, *chosen]), label="new isr")
        self.run(Intent(target_isr=list(new_isr), election=self.topic_election(), acceptable=self.active,
                        target_recovery=recovery))

    @precondition(lambda self: self.can_alter() and self.partition.is_reassigning)
    @rule()
    def catch_up_adding_replicas(self) -> None:
        """The leader adds the caught-up (active) adding replicas to its ISR, which may
        complete the reassignment."""
        p = self.partition
        joining = [r for r in p.adding_replicas if r not in p.isr and self.active(r)]
        recovery = p.leader_recovery_state
        new_isr = list(p.isr) + joining
        if recovery is RECOVERING and len(new_isr) > 1:
            recovery = RECOVERED
        self.run(Intent(target_isr=new_isr, election=self.topic_election(), acceptable=self.active,
                        target_recovery=recovery))

    # -- reassignment ---------------------------------------------------------------------
    @precondition(lambda self: not self.partition.is_reassigning)
    @rule(new_replicas=st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True))
    def start_reassignment(self, new_replicas: list[int]) -> None:
        """changePartitionReassignment: ONLINE election, targets set only where they differ."""
        p = self.partition
        r = PartitionReassignmentReplicas.from_assignments(list(p.replicas), new_replicas)
        self.run(Intent(target_isr=list(p.isr), acceptable=self.active,
                        target_replicas=r.replicas if r.replicas != list(p.replicas) else None,
                        target_removing=r.removing or None, target_adding=r.adding or None))

    @precondition(lambda self: self.partition.is_reassigning)
    @rule()
    def cancel_reassignment(self) -> None:
        """cancelPartitionReassignment: back to the original replicas; refused when that
        would need an unclean election the topic does not allow."""
        revert = PartitionReassignmentRevert(self.partition)
        if revert.unclean and not self.unclean:
            return  # Kafka: InvalidReplicaAssignmentException, no record
        self.run(Intent(target_isr=revert.isr, election=self.topic_election(), acceptable=self.active,
                        target_replicas=revert.replicas, target_removing=[], target_adding=[]))

    # -- elections and configs ------------------------------------------------------------
    @precondition(lambda self: self.partition.leader != self.partition.replicas[0])
    @rule()
    def preferred_election(self) -> None:
        """Leader balancing / ElectLeaders PREFERRED on an imbalanced partition."""
        self.run(Intent(target_isr=list(self.partition.isr), election=Election.PREFERRED, acceptable=self.active))

    @precondition(lambda self: self.partition.leader == NO_LEADER)
    @rule()
    def unclean_election(self) -> None:
        """ElectLeaders UNCLEAN on a leaderless partition."""
        self.run(Intent(target_isr=list(self.partition.isr), election=Election.UNCLEAN, acceptable=self.active))

    @rule(min_isr=st.integers(1, 4))
    def set_min_isr(self, min_isr: int) -> None:
        """A min.insync.replicas change; with ELR on it comes with a ClearElrRecord, which
        replay applies as a change emptying ELR and last known ELR."""
        self.min_isr = min_isr
        p = self.partition
        if self.elr and (p.elr or p.last_known_elr):
            self.partition = p.merge(m.PartitionChangeRecord(topic_id=TOPIC_ID, partition_id=0,
                                                             eligible_leader_replicas=[], last_known_elr=[]))
            assert self.partition == dataclasses.replace(p, elr=(), last_known_elr=(),
                                                         partition_epoch=p.partition_epoch + 1)

    @rule(unclean=st.booleans())
    def set_unclean_leader_election(self, unclean: bool) -> None:
        self.unclean = unclean


PartitionModel.TestCase.settings = settings(
    max_examples=250, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestPartitionModel = PartitionModel.TestCase
