"""Kafka's PartitionChangeBuilder: the one place a partition's leader, ISR, ELR, replicas and
recovery state are recomputed, producing the PartitionChangeRecord that says what changed.

Why one builder: every path that moves a partition (AlterPartition, fencing, unfencing,
controlled shutdown, unclean restart, elections, leader balancing, reassignment, directory
assignment) must pick leaders, keep the ISR/ELR rules and bump epochs identically, or the
brokers would see different partition histories for the same events.  The caller sets the
targets it wants (``set_target_isr`` ...), the builder works out the consequences and
``build()`` returns the record (None when nothing changes).  The builder changes no state;
the record is applied by ``PartitionRegistration.merge`` at replay.

The record (``kraft_storage.messages.metadata.PartitionChangeRecord``) carries only what
changes: every list field is None when unchanged, ``leader`` is ``NO_LEADER_CHANGE`` (-2)
when unchanged (``NO_LEADER`` (-1) means "no leader now"), ``leader_recovery_state`` is -1
when unchanged.  A record that names a leader -- even the current one -- bumps the leader
epoch at replay; every record bumps the partition epoch.  Its version follows the
metadata.version: v0 before 3.7-IV2, v1 (directories) from 3.7-IV2, v2 (ELR fields) from
4.0-IV1 (``MetadataVersion.partition_change_record_version``).

``build()`` runs Kafka's steps in Kafka's order:

1. complete the reassignment if the target ISR allows it (:mod:`.reassignment_replicas`);
2. with ELR enabled (KIP-966), recompute the target ELR: if the target ISR has at least
   ``min_isr`` members the ELR and last known ELR are cleared; otherwise ELR = (ELR + current
   ISR) - target ISR - unclean-shutdown replicas, and last known ELR = (that union + last known
   ELR) - target ISR - ELR;
3. elect (``Election``): a valid leader is in the target ISR -- or, when the target ISR is
   empty, in the target ELR -- and acceptable (``is_acceptable_leader``).  PREFERRED tries
   the first target replica, then keeps the current leader, then the other replicas in order;
   ONLINE and UNCLEAN keep the current leader, then try the replicas in order.  Failing that,
   with ELR enabled and both ISR and ELR empty, the single last known leader is elected if
   acceptable (an unclean election; KAFKA-19522: never a fenced one); failing that UNCLEAN
   takes the first acceptable replica.  A leader from the ELR makes the ISR just that leader;
   an unclean one forces ISR = [leader] and recovery state RECOVERING;
4. bump the leader epoch (name the current leader) when the new replica list drops a
   current replica, and -- only before 3.6-IV0 (KAFKA-15021) -- when the ISR shrinks; the
   ISR-shrink check looks at the record's ISR, so an empty target ISR that cannot be
   written does not bump (KAFKA-16624);
5. write the ELR fields (cleared on an unclean election or with ELR disabled); with
   ``use_last_known_leader_in_balanced_recovery`` (the default) the last known ELR holds only
   the last leader: set to [old leader] when the partition first loses its leader, cleared
   when it gets one (Kafka 4.2's rule);
6. write the ISR if it changed (an empty ISR only with ELR enabled: without ELR the last ISR
   member stays so it can come back cleanly), then replicas, directories (one per target
   replica: ``set_directory`` overrides, else the current assignment, else the default
   directory provider), removing/adding replicas and the recovery state.

Deliberate differences from Kafka's class:

* ``build()`` may be called repeatedly and returns the same record each time (Kafka's
  mutates its targets while building; here they are restored afterwards);
* the ELR and last known ELR come out in the order Kafka's ``HashSet<Integer>`` iterates
  them (see :class:`_JavaIntHashSet`), so the records are Kafka's byte for byte -- ascending
  for broker ids below 16;
* ``set_target_elr`` / ``set_target_last_known_elr`` (not in Kafka) replace the ELR lists
  the build starts from (normally the partition's); step 2 still applies to them;
* ELR can also be switched on in the constructor (Kafka 4.3 moved the flag there);
* the last known leader is elected only while it is still one of the target replicas.
  Kafka 4.2 records the last leader even when a cancelled reassignment has just dropped it
  from the replicas (and records -1 when a leaderless partition whose last known ELR was
  cleared gets a leader epoch bump); we write those records as Kafka does, but where Kafka
  would then elect that former replica -- a leader outside the replica set -- we elect no one.

Kafka quirks kept for record fidelity: the ELR is computed before a completing reassignment
drops its removed replicas, so they can stay in the ELR (never elected: elections only walk
the target replicas); the last known ELR can hold -1 or a former replica (above).
"""
from __future__ import annotations

import enum
import logging
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Protocol, Sequence

from kraft_node.metadata.controller.reassignment_replicas import (
    CompletedReassignment,
    PartitionReassignmentReplicas,
    PartitionReassignmentRevert,
    is_reassignment_in_progress,
)
from kraft_node.metadata.controller.replication_control import (
    LEADER_RECOVERY_NO_CHANGE,
    NO_LEADER,
    NO_LEADER_CHANGE,
    DirectoryId,
    LeaderRecoveryState,
    PartitionRegistration,
)
from kraft_node.metadata.controller.result import ApiMessageAndVersion
from kraft_node.metadata.placement.java_random import TreeNode, balance_insertion
from kraft_node.metadata.versions import MetadataVersion
from kraft_node.protocol.generated.alter_partition import AlterPartitionRequest
from kraft_storage.messages import metadata as m
from kraft_storage.messages.runtime import Uuid

__all__ = [
    "BrokerState",
    "BrokerStateLike",
    "CompletedReassignment",
    "DefaultDirProvider",
    "Election",
    "ElectionResult",
    "PartitionChangeBuilder",
    "PartitionReassignmentReplicas",
    "PartitionReassignmentRevert",
    "Replicas",
    "change_record_is_no_op",
    "is_reassignment_in_progress",
    "new_isr_to_simple_new_isr_with_broker_epochs",
]

log = logging.getLogger("kraft.controller.partition_change")

#: Kafka's DefaultDirProvider: the log directory a replica on a broker goes to when the
#: builder has no assignment for it (the broker's only directory, UNASSIGNED, MIGRATING).
DefaultDirProvider = Callable[[int], Uuid]

#: AlterPartitionRequest's BrokerState (broker_id, broker_epoch; epoch -1 = not checked).
BrokerState: Any = AlterPartitionRequest.BrokerState


class BrokerStateLike(Protocol):
    """What the builder reads from an AlterPartition ``BrokerState``."""

    @property
    def broker_id(self) -> int: ...


def new_isr_to_simple_new_isr_with_broker_epochs(isr: Iterable[int]) -> list[Any]:
    """Kafka's ``AlterPartitionRequest.newIsrToSimpleNewIsrWithBrokerEpochs``: an ISR of
    broker ids as BrokerStates with epoch -1 (how requests before v3 are read)."""
    return [BrokerState(broker_id=int(b), broker_epoch=-1) for b in isr]


class Election(enum.Enum):
    """How to pick a leader (Kafka's PartitionChangeBuilder.Election)."""
    #: Elect the preferred (first) replica if it is in the ISR; else keep the partition online.
    PREFERRED = "PREFERRED"
    #: Keep the partition online with a leader from the ISR (the default).
    ONLINE = "ONLINE"
    #: Prefer the ISR, but elect a replica outside it rather than stay offline (data loss).
    UNCLEAN = "UNCLEAN"


@dataclass(frozen=True, slots=True)
class ElectionResult:
    """The leader an election chose (``NO_LEADER`` if none) and whether it was unclean."""
    node: int
    unclean: bool


def change_record_is_no_op(record: Any) -> bool:
    """True when a PartitionChangeRecord changes nothing (Kafka's changeRecordIsNoOp): every
    nullable field is null, the leader is NO_LEADER_CHANGE and the recovery state NO_CHANGE."""
    return (record.isr is None
            and record.eligible_leader_replicas is None
            and record.last_known_elr is None
            and record.leader == NO_LEADER_CHANGE
            and record.replicas is None
            and record.removing_replicas is None
            and record.adding_replicas is None
            and record.leader_recovery_state == LEADER_RECOVERY_NO_CHANGE
            and record.directories is None)


class Replicas:
    """Kafka's ``Replicas`` helpers on replica lists (any sequence of broker ids)."""

    @staticmethod
    def validate(replicas: Sequence[int]) -> bool:
        """No negative ids and no duplicates (an empty list is valid)."""
        return all(r >= 0 for r in replicas) and len(set(replicas)) == len(replicas)

    @staticmethod
    def validate_isr(replicas: Sequence[int], isr: Sequence[int]) -> bool:
        """``isr`` has no negative ids, no duplicates, and only members of ``replicas``."""
        if not isr:
            return True
        members = set(isr)
        return len(members) == len(isr) and min(members) >= 0 and members <= set(replicas)

    @staticmethod
    def contains_all(a: Sequence[int], b: Sequence[int]) -> bool:
        """Kafka's ``Replicas.contains(List a, int[] b)``: every entry of ``b`` matches a
        distinct entry of ``a`` (multiset containment)."""
        if len(b) > len(a):
            return False
        b_set = set(b)
        if not b_set <= set(a):
            return False
        if len(b_set) == len(b):
            return True
        return not (Counter(b) - Counter(a))

    @staticmethod
    def copy_without(replicas: Sequence[int], values: Iterable[int]) -> list[int]:
        """``replicas`` in order without any of ``values``."""
        drop = set(values)
        return [r for r in replicas if r not in drop]

    @staticmethod
    def copy_with(replicas: Sequence[int], value: int) -> list[int]:
        """``replicas`` with ``value`` appended."""
        return [*replicas, value]


# ---------------------------------------------------------------------------
# Java HashSet<Integer> iteration order
# ---------------------------------------------------------------------------

_JAVA_LOAD_FACTOR = 0.75
_TREEIFY_THRESHOLD = 8
_UNTREEIFY_THRESHOLD = 6
_MIN_TREEIFY_CAPACITY = 64
_MAXIMUM_CAPACITY = 1 << 30


def _java_table_size_for(capacity: int) -> int:
    n = 1
    while n < capacity:
        n <<= 1
    return min(n, _MAXIMUM_CAPACITY)


def _java_spread(key: int) -> int:
    """HashMap.hash(Integer): the int's 32 bits xor their upper half (a bijection, so
    distinct ids never share a hash)."""
    h = key & 0xFFFFFFFF
    return h ^ (h >> 16)


def _Node(key: int, hash_: int, next_: TreeNode | None = None) -> TreeNode:
    """A HashMap node of an int key, kept as its ``position`` too (the placer's
    :class:`TreeNode`, whose tree steps --
    :func:`balance_insertion`, :func:`rotate_left`, :func:`rotate_right` -- are Java's)."""
    node = TreeNode(hash_, key, key)
    node.next = next_
    return node


class _JavaHashMapModel:
    """``java.util.HashMap``'s table for distinct int keys (JDK 19+ sizing), put by put:
    buckets chained in insertion order, a bucket of 9 turned into a red-black tree bin once
    the table has 64+ buckets (else the table doubles), the table doubled past 0.75 x its
    size with each bucket split in order (a tree bin of 6 or fewer reverting to a chain).
    Tree bins iterate their ``next`` chain, which treeify/insert/rotate keep with the root in
    front -- the order Kafka's ELR lists come out in."""

    __slots__ = ("_table", "_tree", "_threshold", "_size")

    def __init__(self, initial_capacity: int):
        capacity = _java_table_size_for(initial_capacity)
        self._table: list[TreeNode | None] = [None] * capacity
        self._tree: list[bool] = [False] * capacity
        self._threshold = int(capacity * _JAVA_LOAD_FACTOR)
        self._size = 0

    def put(self, key: int) -> None:
        table = self._table
        h = _java_spread(key)
        index = h & (len(table) - 1)
        p = table[index]
        if p is None:
            table[index] = _Node(key, h)
        elif p.key == key:
            return
        elif self._tree[index]:
            if not self._put_tree_val(table, index, key, h):
                return
        else:
            bin_count = 0
            while True:
                e = p.next
                if e is None:
                    p.next = _Node(key, h)
                    if bin_count >= _TREEIFY_THRESHOLD - 1:
                        self._treeify_bin(h)
                    break
                if e.key == key:
                    return
                p = e
                bin_count += 1
        self._size += 1
        if self._size > self._threshold:
            self._resize()

    def keys(self) -> Iterator[int]:
        for head in self._table:
            e = head
            while e is not None:
                yield e.position  # the int key (see _Node)
                e = e.next

    def _resize(self) -> None:
        old_table, old_tree = self._table, self._tree
        old_cap = len(old_table)
        new_cap = old_cap << 1
        table: list[TreeNode | None] = [None] * new_cap
        tree = [False] * new_cap
        for j, e in enumerate(old_table):
            if e is None:
                continue
            if e.next is None:
                table[e.hash & (new_cap - 1)] = e
            elif old_tree[j]:
                self._split(table, tree, e, j, old_cap)
            else:
                lo: list[TreeNode] = []
                hi: list[TreeNode] = []
                while e is not None:
                    (lo if e.hash & old_cap == 0 else hi).append(e)
                    e = e.next
                table[j] = self._chain(lo)
                table[j + old_cap] = self._chain(hi)
        self._table, self._tree = table, tree
        self._threshold = int(new_cap * _JAVA_LOAD_FACTOR)

    @staticmethod
    def _chain(nodes: list[TreeNode]) -> TreeNode | None:
        prev: TreeNode | None = None
        for node in nodes:
            node.prev = prev
            node.next = None
            if prev is not None:
                prev.next = node
            prev = node
        return nodes[0] if nodes else None

    def _split(self, table: list[TreeNode | None], tree: list[bool], first: TreeNode, index: int, bit: int) -> None:
        lo: list[TreeNode] = []
        hi: list[TreeNode] = []
        e: TreeNode | None = first
        while e is not None:
            (lo if e.hash & bit == 0 else hi).append(e)
            e = e.next
        for nodes, at, other in ((lo, index, hi), (hi, index + bit, lo)):
            if not nodes:
                continue
            head = self._chain(nodes)
            table[at] = head
            if len(nodes) <= _UNTREEIFY_THRESHOLD:
                for node in nodes:
                    node.parent = node.left = node.right = None
                    node.red = False
            else:
                tree[at] = True
                if other:  # else the tree moved whole and keeps its shape
                    self._treeify(table, at)

    def _treeify_bin(self, h: int) -> None:
        if len(self._table) < _MIN_TREEIFY_CAPACITY:
            self._resize()
            return
        index = h & (len(self._table) - 1)
        self._tree[index] = True
        nodes: list[TreeNode] = []
        e = self._table[index]
        while e is not None:
            nodes.append(e)
            e = e.next
        self._chain(nodes)  # tree nodes are doubly linked
        self._treeify(self._table, index)

    @staticmethod
    def _move_root_to_front(table: list[TreeNode | None], index: int, root: TreeNode) -> None:
        first = table[index]
        if root is first:
            return
        table[index] = root
        rp, rn = root.prev, root.next
        if rn is not None:
            rn.prev = rp
        if rp is not None:
            rp.next = rn
        if first is not None:
            first.prev = root
        root.next = first
        root.prev = None

    def _treeify(self, table: list[TreeNode | None], index: int) -> None:
        root: TreeNode | None = None
        x = table[index]
        while x is not None:
            nxt = x.next
            x.left = x.right = None
            if root is None:
                x.parent = None
                x.red = False
                root = x
            else:
                p = root
                while True:
                    go_left = p.hash > x.hash
                    child = p.left if go_left else p.right
                    if child is None:
                        x.parent = p
                        if go_left:
                            p.left = x
                        else:
                            p.right = x
                        root = balance_insertion(root, x)
                        break
                    p = child
            x = nxt
        if root is not None:
            self._move_root_to_front(table, index, root)

    def _put_tree_val(self, table: list[TreeNode | None], index: int, key: int, h: int) -> bool:
        root = table[index]
        assert root is not None
        while root.parent is not None:
            root = root.parent
        p = root
        while True:
            if p.hash == h:
                return False  # the same key (distinct ints never share a hash)
            go_left = p.hash > h
            child = p.left if go_left else p.right
            if child is None:
                xpn = p.next
                x = _Node(key, h, xpn)
                if go_left:
                    p.left = x
                else:
                    p.right = x
                p.next = x
                x.parent = x.prev = p
                if xpn is not None:
                    xpn.prev = x
                self._move_root_to_front(table, index, balance_insertion(root, x))
                return True
            p = child


class _JavaIntHashSet:
    """The iteration order of a ``java.util.HashSet<Integer>`` built as Kafka's ELR code
    builds it: ``new HashSet<>(initial)``, then ``add`` calls.

    Kafka 4 runs on JDK 21, whose ``HashSet(Collection c)`` sizes its map with
    ``HashMap.newHashMap(max(c.size(), 12))`` (16 buckets up to 12 entries); the puts are then
    replayed through :class:`_JavaHashMapModel`.  (Checked against JDK 17 and 25 on thousands
    of random sets, tree bins included; JDK 17 differs only in that initial sizing.)  Ids below
    16, at most 12 of them, iterate ascending -- every partition of a small cluster.
    """

    __slots__ = ("_initial_capacity", "_keys")

    def __init__(self, initial: Sequence[int]):
        self._initial_capacity = math.ceil(max(len(initial), 12) / _JAVA_LOAD_FACTOR)
        self._keys: dict[int, None] = dict.fromkeys(initial)

    def add(self, key: int) -> None:
        self._keys.setdefault(key)

    def iteration_order(self) -> list[int]:
        keys = list(self._keys)
        if len(keys) <= 12 and all(0 <= k < 16 for k in keys):
            return sorted(keys)  # 16 buckets, one id each
        model = _JavaHashMapModel(self._initial_capacity)
        for key in keys:  # a duplicate put changes nothing, so first insertions suffice
            model.put(key)
        return list(model.keys())


# ---------------------------------------------------------------------------
# The builder
# ---------------------------------------------------------------------------

def _unset_dir_provider(broker_id: int) -> Uuid:
    raise RuntimeError("DefaultDirProvider is not set")


class PartitionChangeBuilder:
    """Builds the PartitionChangeRecord for one partition (see the module doc).

    ``partition``: its current registration; ``is_acceptable_leader(broker_id)``: whether the
    broker may lead it (alive, not shutting down, its directory online ...);
    ``metadata_version``: picks the record version and the epoch-bump rules; ``min_isr``: the
    topic's effective min.insync.replicas (ELR bookkeeping).  Setters return the builder.
    """

    def __init__(self, partition: PartitionRegistration, topic_id: Uuid, partition_id: int,
                 is_acceptable_leader: Callable[[int], bool], metadata_version: MetadataVersion,
                 min_isr: int, *, eligible_leader_replicas_enabled: bool = False):
        self._partition = partition
        self._topic_id = topic_id
        self._partition_id = partition_id
        self._is_acceptable_leader = is_acceptable_leader
        self._metadata_version = metadata_version
        self._min_isr = min_isr
        self._eligible_leader_replicas_enabled = eligible_leader_replicas_enabled
        self._use_last_known_leader_in_balanced_recovery = True
        self._election = Election.ONLINE
        self._target_isr: list[int] = list(partition.isr)
        self._target_replicas: list[int] = list(partition.replicas)
        self._target_removing: list[int] = list(partition.removing_replicas)
        self._target_adding: list[int] = list(partition.adding_replicas)
        self._target_elr: list[int] = list(partition.elr)
        self._target_last_known_elr: list[int] = list(partition.last_known_elr)
        self._unclean_shutdown_replicas: list[int] | None = None
        self._target_leader_recovery_state = partition.leader_recovery_state
        self._target_directories = self._assignment_map(partition)
        self._default_dir_provider: DefaultDirProvider = _unset_dir_provider

    @staticmethod
    def _assignment_map(partition: PartitionRegistration) -> dict[int, Uuid]:
        """Kafka's DirectoryId.createAssignmentMap(replicas, directories)."""
        directories = partition.directories or DirectoryId.migrating_tuple(len(partition.replicas))
        if len(directories) != len(partition.replicas):
            raise ValueError("The lengths for replicas and directories do not match.")
        assignments: dict[int, Uuid] = {}
        for broker_id, directory in zip(partition.replicas, directories):
            if broker_id in assignments:
                raise ValueError("Duplicate broker ID in assignment")
            assignments[broker_id] = directory
        return assignments

    # -- setters ------------------------------------------------------------------------
    def set_target_isr(self, target_isr: Sequence[int]) -> PartitionChangeBuilder:
        self._target_isr = [int(r) for r in target_isr]
        return self

    def set_target_isr_with_broker_states(self, target_isr: Iterable[BrokerStateLike]) -> PartitionChangeBuilder:
        """The ISR of an AlterPartition request (its BrokerStates' ids; epochs are checked by
        the caller)."""
        return self.set_target_isr([state.broker_id for state in target_isr])

    def set_target_replicas(self, target_replicas: Sequence[int]) -> PartitionChangeBuilder:
        self._target_replicas = [int(r) for r in target_replicas]
        return self

    def set_unclean_shutdown_replicas(self, replicas: Sequence[int] | None) -> PartitionChangeBuilder:
        """Replicas that restarted uncleanly: they are kept out of the new ELR."""
        self._unclean_shutdown_replicas = None if replicas is None else [int(r) for r in replicas]
        return self

    def set_election(self, election: Election) -> PartitionChangeBuilder:
        if not isinstance(election, Election):
            raise TypeError(f"Unknown election type {election!r}")
        self._election = election
        return self

    def set_target_removing(self, target_removing: Sequence[int]) -> PartitionChangeBuilder:
        self._target_removing = [int(r) for r in target_removing]
        return self

    def set_target_adding(self, target_adding: Sequence[int]) -> PartitionChangeBuilder:
        self._target_adding = [int(r) for r in target_adding]
        return self

    def set_target_elr(self, target_elr: Sequence[int]) -> PartitionChangeBuilder:
        """The ELR to start from instead of the partition's (not in Kafka's builder)."""
        self._target_elr = [int(r) for r in target_elr]
        return self

    def set_target_last_known_elr(self, target_last_known_elr: Sequence[int]) -> PartitionChangeBuilder:
        """The last known ELR to start from instead of the partition's (not in Kafka's builder)."""
        self._target_last_known_elr = [int(r) for r in target_last_known_elr]
        return self

    def set_target_leader_recovery_state(self, state: LeaderRecoveryState) -> PartitionChangeBuilder:
        self._target_leader_recovery_state = LeaderRecoveryState(state)
        return self

    def set_eligible_leader_replicas_enabled(self, enabled: bool) -> PartitionChangeBuilder:
        self._eligible_leader_replicas_enabled = bool(enabled)
        return self

    def set_use_last_known_leader_in_balanced_recovery(self, enabled: bool) -> PartitionChangeBuilder:
        """True (the default): the last known ELR stores only the last leader, which may be
        elected back when the partition has neither ISR nor ELR."""
        self._use_last_known_leader_in_balanced_recovery = bool(enabled)
        return self

    def set_directory(self, broker_id: int, directory: Uuid) -> PartitionChangeBuilder:
        """Place ``broker_id``'s replica in ``directory`` (AssignReplicasToDirs)."""
        self._target_directories[int(broker_id)] = directory
        return self

    def set_default_dir_provider(self, provider: DefaultDirProvider) -> PartitionChangeBuilder:
        self._default_dir_provider = provider
        return self

    @property
    def target_isr(self) -> list[int]:
        return list(self._target_isr)

    # -- election -------------------------------------------------------------------------
    def elect_leader(self) -> ElectionResult:
        """The leader the configured election picks with the current targets."""
        if self._election is Election.PREFERRED:
            return self._elect_preferred_leader()
        return self._elect_any_leader()

    def _is_valid_new_leader(self, replica: int) -> bool:
        # In the target ISR, or in the target ELR when the ISR is empty; and acceptable.
        in_candidates = replica in self._target_isr or (not self._target_isr and replica in self._target_elr)
        return in_candidates and self._is_acceptable_leader(replica)

    def _elect_preferred_leader(self) -> ElectionResult:
        if not self._target_replicas:
            raise ValueError(f"Cannot elect the preferred leader of {self._topic_id}-{self._partition_id}: "
                             "it has no replicas")
        preferred = self._target_replicas[0]
        if self._is_valid_new_leader(preferred):
            return ElectionResult(preferred, False)
        leader = self._partition.leader
        if self._is_valid_new_leader(leader):
            # The current leader meets every constraint: keep it.
            return ElectionResult(leader, False)
        for replica in self._target_replicas[1:]:
            if self._is_valid_new_leader(replica):
                return ElectionResult(replica, False)
        if self._can_elect_last_known_leader():
            return ElectionResult(self._partition.last_known_elr[0], True)
        return ElectionResult(NO_LEADER, False)

    def _elect_any_leader(self) -> ElectionResult:
        leader = self._partition.leader
        if self._is_valid_new_leader(leader):
            return ElectionResult(leader, False)
        for replica in self._target_replicas:
            if self._is_valid_new_leader(replica):
                return ElectionResult(replica, False)
        if self._can_elect_last_known_leader():
            return ElectionResult(self._partition.last_known_elr[0], True)
        if self._election is Election.UNCLEAN:
            for replica in self._target_replicas:
                if self._is_acceptable_leader(replica):
                    return ElectionResult(replica, True)
        return ElectionResult(NO_LEADER, False)

    def _can_elect_last_known_leader(self) -> bool:
        debug = log.isEnabledFor(logging.DEBUG)
        if not self._eligible_leader_replicas_enabled or not self._use_last_known_leader_in_balanced_recovery:
            return False
        if self._target_elr or self._target_isr:
            return False
        # The last known ELR can only be trusted to hold the last leader when it has exactly
        # one member (with the balanced-recovery flag off it holds real ELR members).
        last_known = self._partition.last_known_elr
        if len(last_known) != 1:
            if debug:
                log.debug("Try to elect last known leader for %s-%d but lastKnownElr does not only have "
                          "1 member. lastKnownElr=%s", self._topic_id, self._partition_id, list(last_known))
            return False
        if not self._is_acceptable_leader(last_known[0]):
            if debug:
                log.debug("Try to elect last known leader for %s-%d but last known leader is not alive. "
                          "last known leader=%d", self._topic_id, self._partition_id, last_known[0])
            return False
        if last_known[0] not in self._target_replicas:
            # Not in Kafka: a cancelled or completed reassignment can leave a former replica
            # (or -1) as the last known leader; Kafka would elect it -- a leader outside the
            # replica set.
            if debug:
                log.debug("Try to elect last known leader for %s-%d but last known leader %d is no longer "
                          "a replica", self._topic_id, self._partition_id, last_known[0])
            return False
        return True

    def _try_election(self, record: Any) -> None:
        result = self.elect_leader()
        partition = self._partition
        if result.node == partition.leader:
            return
        node = result.node
        if node in self._target_elr:
            # Elected from the ELR: it becomes the whole ISR and leaves the ELR.
            self._target_isr = [node]
            self._target_elr = [r for r in self._target_elr if r != node]
            log.info("Setting new leader for topicId %s, partition %d to %d using ELR. Previous partition: %s",
                     self._topic_id, self._partition_id, node, partition)
        elif result.unclean:
            log.info("Setting new leader for topicId %s, partition %d to %d using an unclean election. "
                     "Previous partition: %s", self._topic_id, self._partition_id, node, partition)
        record.leader = node
        if result.unclean:
            # An unclean leader forcibly becomes the whole ISR: this can lose data.
            record.isr = [node]
            if (partition.leader_recovery_state != LeaderRecoveryState.RECOVERING
                    and self._metadata_version.is_leader_recovery_supported()):
                record.leader_recovery_state = int(LeaderRecoveryState.RECOVERING)

    # -- leader epoch bumps ---------------------------------------------------------------
    def trigger_leader_epoch_bump_for_replica_reassignment_if_needed(self, record: Any) -> None:
        """Name the current leader (so its epoch bumps) when the new replica list drops any
        current replica.  (A leader epoch bump always comes with a partition epoch bump.)"""
        if record.leader != NO_LEADER_CHANGE:
            return  # the leader changes anyway
        if not Replicas.contains_all(self._target_replicas, self._partition.replicas):
            record.leader = self._partition.leader

    def trigger_leader_epoch_bump_for_isr_shrink_if_needed(self, record: Any) -> None:
        """Before 3.6-IV0 brokers needed a leader epoch bump on every ISR shrink (KAFKA-15021;
        never on expansion).  Call only after the record's ISR is set: an ISR the record does
        not change does not bump (KAFKA-16624)."""
        if not self._metadata_version.is_leader_epoch_bump_required_on_isr_shrink():
            return
        if record.leader != NO_LEADER_CHANGE:
            return
        if record.isr is None:
            return
        if not Replicas.contains_all(record.isr, self._partition.isr):
            record.leader = self._partition.leader

    # -- reassignment and ELR -------------------------------------------------------------
    def _complete_reassignment_if_needed(self) -> None:
        completed = PartitionReassignmentReplicas(
            removing=self._target_removing, adding=self._target_adding,
            replicas=self._target_replicas).maybe_complete_reassignment(self._target_isr)
        if completed is None:
            return
        self._target_isr = completed.isr
        self._target_replicas = completed.replicas
        self._target_removing = []
        self._target_adding = []

    def _maybe_populate_target_elr(self) -> None:
        if not self._eligible_leader_replicas_enabled:
            return
        if len(self._target_isr) >= self._min_isr:
            self._target_elr = []
            self._target_last_known_elr = []
            return
        isr = set(self._target_isr)
        unclean = set(self._unclean_shutdown_replicas or ())
        # ELR = (ELR + current ISR) - target ISR - unclean-shutdown replicas, in Java HashSet order.
        candidates = _JavaIntHashSet(self._target_elr)
        for replica in self._partition.isr:
            candidates.add(replica)
        self._target_elr = [r for r in candidates.iteration_order() if r not in isr and r not in unclean]
        # Last known ELR = (that union + last known ELR) - target ISR - new ELR.
        for replica in self._target_last_known_elr:
            candidates.add(replica)
        elr = set(self._target_elr)
        self._target_last_known_elr = [r for r in candidates.iteration_order() if r not in isr and r not in elr]

    def _maybe_update_record_elr(self, record: Any) -> None:
        partition = self._partition
        # An unclean election has already set the record's ISR.
        clean_election = record.isr is None
        if not clean_election or not self._eligible_leader_replicas_enabled:
            self._target_elr = []
            self._target_last_known_elr = []
        if self._target_elr != list(partition.elr):
            record.eligible_leader_replicas = list(self._target_elr)
        if (self._use_last_known_leader_in_balanced_recovery and len(partition.last_known_elr) == 1
                and (record.leader == NO_LEADER
                     or (record.leader == NO_LEADER_CHANGE and partition.leader == NO_LEADER))):
            # The last known ELR holds the last leader: keep it while there is no leader.
            self._target_last_known_elr = list(partition.last_known_elr)
        if self._use_last_known_leader_in_balanced_recovery:
            return  # the last known leader is written by _maybe_update_last_known_leader
        if self._target_last_known_elr != list(partition.last_known_elr):
            record.last_known_elr = list(self._target_last_known_elr)

    def _maybe_update_last_known_leader(self, record: Any) -> None:
        if not self._use_last_known_leader_in_balanced_recovery or not self._eligible_leader_replicas_enabled:
            return
        partition = self._partition
        if record.leader == NO_LEADER and not partition.last_known_elr:
            # The partition loses its leader for the first time: remember who it was.
            record.last_known_elr = [partition.leader]
        elif record.leader >= 0 and partition.last_known_elr:
            # The partition has a leader again.
            record.last_known_elr = []

    def _set_assignment_changes(self, record: Any) -> None:
        partition = self._partition
        if self._target_replicas:
            if self._metadata_version.is_directory_assignment_supported():
                provider = self._default_dir_provider
                if provider is _unset_dir_provider:
                    # Kafka evaluates the provider for every replica: unset, it always fails.
                    _unset_dir_provider(self._target_replicas[0])
                directories = []
                for replica in self._target_replicas:
                    directory = self._target_directories.get(replica)
                    directories.append(provider(replica) if directory is None else directory)
                if directories != list(partition.directories):
                    record.directories = directories
            if self._target_replicas != list(partition.replicas):
                record.replicas = list(self._target_replicas)
        if self._target_removing != list(partition.removing_replicas):
            record.removing_replicas = list(self._target_removing)
        if self._target_adding != list(partition.adding_replicas):
            record.adding_replicas = list(self._target_adding)

    # -- build ----------------------------------------------------------------------------
    def build(self) -> ApiMessageAndVersion | None:
        """The PartitionChangeRecord for the targets (at the metadata.version's record
        version), or None when it would change nothing."""
        saved = (self._target_isr, self._target_replicas, self._target_removing, self._target_adding,
                 self._target_elr, self._target_last_known_elr)
        try:
            return self._build()
        finally:
            (self._target_isr, self._target_replicas, self._target_removing, self._target_adding,
             self._target_elr, self._target_last_known_elr) = saved

    def _build(self) -> ApiMessageAndVersion | None:
        partition = self._partition
        record = m.PartitionChangeRecord(topic_id=self._topic_id, partition_id=self._partition_id)
        self._complete_reassignment_if_needed()
        self._maybe_populate_target_elr()
        self._try_election(record)
        self.trigger_leader_epoch_bump_for_replica_reassignment_if_needed(record)
        self._maybe_update_record_elr(record)
        # The ISR may only become empty with ELR enabled.
        if (record.isr is None and (self._target_isr or self._eligible_leader_replicas_enabled)
                and self._target_isr != list(partition.isr)):
            if not self._target_isr:
                log.debug("A partition will have an empty ISR. %r", self)
            record.isr = list(self._target_isr)
        self.trigger_leader_epoch_bump_for_isr_shrink_if_needed(record)
        self._maybe_update_last_known_leader(record)
        self._set_assignment_changes(record)
        if self._target_leader_recovery_state != partition.leader_recovery_state:
            record.leader_recovery_state = int(self._target_leader_recovery_state)
        if change_record_is_no_op(record):
            return None
        return ApiMessageAndVersion(record, self._metadata_version.partition_change_record_version())

    def __repr__(self) -> str:
        return (f"PartitionChangeBuilder(partition={self._partition}, topicId={self._topic_id}, "
                f"partitionId={self._partition_id}, targetIsr={self._target_isr}, "
                f"targetReplicas={self._target_replicas}, targetRemoving={self._target_removing}, "
                f"targetAdding={self._target_adding}, targetElr={self._target_elr}, "
                f"targetLastKnownElr={self._target_last_known_elr}, "
                f"uncleanShutdownReplicas={self._unclean_shutdown_replicas}, election={self._election.name}, "
                f"targetLeaderRecoveryState={self._target_leader_recovery_state.name})")
