"""The replica lists of a partition reassignment: Kafka's PartitionReassignmentReplicas and
PartitionReassignmentRevert.

Why a module of its own: both the PartitionChangeBuilder (which completes a reassignment
once the ISR has caught up) and the reassignment RPCs (which start and cancel one) reason
about the same three lists, and Kafka keeps them in these two small value classes.

A reassignment of a partition from replicas ``C`` to target ``T`` is written as one
PartitionChangeRecord whose lists are (``PartitionReassignmentReplicas.from_assignments``):

* ``removing`` = C - T and ``adding`` = T - C, each **sorted ascending** (Kafka collects
  them in a TreeSet);
* ``replicas`` = T in its order, then ``removing`` (so the target's preferred leader comes
  first and the replicas being removed keep serving until the reassignment completes).

It completes (``maybe_complete_reassignment``) when the ISR, less the removing replicas, is
non-empty and contains every replica that stays; the replicas and ISR then lose the
removing replicas and both lists become empty.  It is cancelled with
:class:`PartitionReassignmentRevert`: the original replicas (``replicas`` less ``adding``)
and the ISR less ``adding`` -- or, if that would leave the ISR empty, the first original
replica, which is an unclean election (``unclean`` True; the caller must refuse it unless
unclean leader election is enabled for the topic).

Lists are plain Python lists of broker ids (as Kafka's ``List<Integer>``), compared by
value; callers treat them as read-only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

from kraft_node.metadata.controller.errors import ApiError
from kraft_node.protocol.errors import Errors

__all__ = [
    "CompletedReassignment",
    "HasReplicas",
    "PartitionReassignmentReplicas",
    "PartitionReassignmentRevert",
    "is_reassignment_in_progress",
]


class HasReplicas(Protocol):
    """Anything with a replica list (Kafka's PartitionAssignment, a PartitionRegistration)."""

    @property
    def replicas(self) -> Sequence[int]: ...


class _Reassigning(Protocol):
    @property
    def removing_replicas(self) -> Sequence[int]: ...

    @property
    def adding_replicas(self) -> Sequence[int]: ...


class _ReassigningRegistration(_Reassigning, Protocol):
    @property
    def replicas(self) -> Sequence[int]: ...

    @property
    def isr(self) -> Sequence[int]: ...


def _replica_list(assignment: Sequence[int] | HasReplicas) -> list[int]:
    if isinstance(assignment, (list, tuple)):
        return [int(r) for r in assignment]
    return [int(r) for r in assignment.replicas]  # type: ignore[union-attr]


def _sorted_difference(a: Iterable[int], b: Iterable[int]) -> list[int]:
    """Kafka's ``calculateDifference``: ``new TreeSet<>(a).removeAll(b)``, ascending."""
    return sorted(set(a).difference(b))


def is_reassignment_in_progress(partition: _Reassigning) -> bool:
    """Kafka's static ``isReassignmentInProgress(PartitionRegistration)``: replicas are being
    added or removed."""
    return bool(partition.removing_replicas) or bool(partition.adding_replicas)


@dataclass(frozen=True, slots=True)
class CompletedReassignment:
    """The replicas and ISR a partition has once its reassignment completes."""
    replicas: list[int]
    isr: list[int]


@dataclass(slots=True, kw_only=True)
class PartitionReassignmentReplicas:
    """The removing, adding and full replica lists of a reassignment (see the module doc).
    Keyword-only (Kafka's three-list constructor); Kafka's two-assignment constructor is
    :meth:`from_assignments`."""
    removing: list[int] = field(default_factory=list)
    adding: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)

    @classmethod
    def from_assignments(cls, current: Sequence[int] | HasReplicas,
                         target: Sequence[int] | HasReplicas) -> PartitionReassignmentReplicas:
        """The lists for moving a partition from ``current`` to ``target`` (replica lists, or
        objects with a ``replicas`` attribute such as a placement's PartitionAssignment)."""
        current_replicas = _replica_list(current)
        target_replicas = _replica_list(target)
        removing = _sorted_difference(current_replicas, target_replicas)
        adding = _sorted_difference(target_replicas, current_replicas)
        return cls(removing=removing, adding=adding, replicas=target_replicas + removing)

    def is_reassignment_in_progress(self) -> bool:
        return bool(self.removing) or bool(self.adding)

    def maybe_complete_reassignment(self, target_isr: Sequence[int]) -> CompletedReassignment | None:
        """The completed replicas and ISR if ``target_isr`` completes this reassignment, else
        None: nothing is being reassigned; or, with replicas being removed, the ISR or the
        replicas would be left empty without them; or the ISR lacks a replica that stays."""
        if not self.is_reassignment_in_progress():
            return None
        new_isr = list(target_isr)
        new_replicas = list(self.replicas)
        if self.removing:
            removing = set(self.removing)
            new_isr = [r for r in target_isr if r not in removing]
            if not new_isr:
                return None
            new_replicas = [r for r in self.replicas if r not in removing]
            if not new_replicas:
                return None
        isr_members = set(new_isr)
        if not all(r in isr_members for r in new_replicas):
            return None
        return CompletedReassignment(replicas=new_replicas, isr=new_isr)

    def original_replicas(self) -> list[int]:
        """The replicas before the reassignment: ``replicas`` without ``adding``."""
        adding = set(self.adding)
        return [r for r in self.replicas if r not in adding]

    def __str__(self) -> str:
        return (f"PartitionReassignmentReplicas(removing={self.removing}, adding={self.adding}, "
                f"replicas={self.replicas})")


class PartitionReassignmentRevert:
    """The replicas and ISR a partition gets back when its ongoing reassignment is cancelled
    (Kafka's ``new PartitionReassignmentRevert(registration)``).

    Raises ``ApiError(INVALID_REPLICA_ASSIGNMENT)`` when every replica is being added (no
    original replica to fall back to; unreachable for a partition created non-empty)."""

    __slots__ = ("replicas", "isr", "unclean")

    def __init__(self, registration: _ReassigningRegistration):
        ongoing = PartitionReassignmentReplicas(
            removing=list(registration.removing_replicas),
            adding=list(registration.adding_replicas),
            replicas=list(registration.replicas))
        self.replicas: list[int] = ongoing.original_replicas()
        adding = set(ongoing.adding)
        self.isr: list[int] = [r for r in registration.isr if r not in adding]
        self.unclean = False
        if not self.isr:
            # Every ISR member is a replica being added: fall back to the first original
            # replica, which is an unclean leader election the caller must allow explicitly.
            if not self.replicas:
                raise ApiError(Errors.INVALID_REPLICA_ASSIGNMENT,
                               "Invalid replica assignment: addingReplicas contains all replicas.")
            self.isr = [self.replicas[0]]
            self.unclean = True

    @classmethod
    def of(cls, registration: _ReassigningRegistration) -> PartitionReassignmentRevert:
        """The same as ``PartitionReassignmentRevert(registration)``."""
        return cls(registration)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PartitionReassignmentRevert):
            return NotImplemented
        return (self.replicas, self.isr, self.unclean) == (other.replicas, other.isr, other.unclean)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return (f"PartitionReassignmentRevert(replicas={self.replicas}, isr={self.isr}, "
                f"unclean={str(self.unclean).lower()})")
