"""The voter set as replicated state (KIP-853): Kafka's VoterSet + KRaftControlRecordStateMachine.

Why replicated: with dynamic quorums the set of voters is itself data in the
metadata log.  A ``VotersRecord`` control record at offset ``o`` says "from
``o`` on, these are the voters"; a ``KRaftVersionRecord`` says which
``kraft.version`` is finalized.  Every replica keeps the history of both by
offset (:class:`ControlRecordStateMachine`) so that:

* the set *in effect* is always the latest one in the local log, committed or
  not (Kafka: a new voter set counts for elections and the high watermark as
  soon as it is appended);
* a truncation reverts it (entries at offsets ``>=`` the new end are dropped);
* a snapshot carries the set in effect at its end offset, and loading one
  replaces the history with that single entry (at ``snapshot.offset - 1``,
  ``-1`` for the bootstrap snapshot ``(0, 0)``);
* with no VotersRecord anywhere, the static ``controller.quorum.voters`` set
  applies and kraft.version is 0.

Invariant kept: history offsets strictly increase; the entry that a
truncation to ``end`` keeps is the last one at an offset ``< end``.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Iterable, Protocol, Sequence

from kraft_node.raft.log import RawSnapshotSink
from kraft_node.raft.messages import Batch, KRaftVersionControl, ReplicaKey, SnapshotId, VoterEntry, VotersControl
from kraft_node.raft.snapshot import FramedSnapshotReader, control_frames, data_frame, header_frame


@dataclass(frozen=True, slots=True)
class VoterSet:
    """An immutable set of voters keyed by node id (at most one key per id, as in Kafka)."""
    entries: tuple[VoterEntry, ...]

    @classmethod
    def of(cls, keys: Iterable[ReplicaKey | VoterEntry]) -> "VoterSet":
        out: dict[int, VoterEntry] = {}
        for k in keys:
            e = k if isinstance(k, VoterEntry) else VoterEntry(k)
            if e.key.id in out:
                raise ValueError(f"voter id {e.key.id} appears twice")
            out[e.key.id] = e
        return cls(tuple(out[i] for i in sorted(out)))

    @property
    def ids(self) -> frozenset[int]:
        return frozenset(e.key.id for e in self.entries)

    def keys(self) -> dict[int, ReplicaKey]:
        return {e.key.id: e.key for e in self.entries}

    def entry(self, voter_id: int) -> VoterEntry | None:
        for e in self.entries:
            if e.key.id == voter_id:
                return e
        return None

    def is_voter(self, key: ReplicaKey) -> bool:
        e = self.entry(key.id)
        return e is not None and e.key.matches(key)

    def add(self, entry: VoterEntry) -> "VoterSet | None":
        """The set with ``entry`` added; None if its id is already a voter."""
        if entry.key.id in self.ids:
            return None
        return VoterSet.of(self.entries + (entry,))

    def remove(self, key: ReplicaKey) -> "VoterSet | None":
        """The set without ``key`` (id and directory id must match); None if absent or
        if it would leave no voter."""
        if not self.is_voter(key) or len(self.entries) == 1:
            return None
        return VoterSet(tuple(e for e in self.entries if e.key.id != key.id))

    def update(self, entry: VoterEntry) -> "VoterSet | None":
        """The set with the voter of ``entry.key`` replaced (endpoints, versions); None if absent."""
        if not self.is_voter(entry.key):
            return None
        return VoterSet(tuple(entry if e.key.id == entry.key.id else e for e in self.entries))

    def key_set(self) -> frozenset[ReplicaKey]:
        return frozenset(e.key for e in self.entries)

    def is_single_change_from(self, other: "VoterSet") -> bool:
        """At most one voter key added or removed (endpoint updates are no membership change)."""
        return len(self.key_set() ^ other.key_set()) <= 1

    def to_control(self) -> VotersControl:
        return VotersControl(0, self.entries)


class SnapshotRecordsWriter(Protocol):
    """What :meth:`SnapshotControlCodec.writer` returns: the state machine's records go
    in one batch per ``append``; ``freeze()`` completes the snapshot, ``close()`` before
    that aborts it (``kraft_storage.snapshot.RecordsSnapshotWriter`` in a Kafka log)."""

    def append(self, records: Sequence[bytes]) -> None: ...

    def freeze(self) -> object: ...

    def close(self) -> None: ...


class SnapshotControlCodec(Protocol):
    """How a snapshot is written, with the voter set and kraft.version at its head.

    Kafka writes them as control records at the head of every snapshot; the core stays
    agnostic of the snapshot format and asks this codec to write it.  Reading is the
    log's (``RaftLog.open_snapshot``: a log reads the format it stores, as ``read``
    decodes its batches), so a codec must write the format its log reads:
    :class:`FramedSnapshotControl` for a ``MemoryRaftLog``, ``KafkaSnapshotControl`` for a
    ``KafkaRaftLog``.
    """

    def write(self, data: bytes, kraft_version: int, voters: VoterSet | None) -> bytes:
        """The snapshot bytes with the control state at its end offset included."""

    def writer(self, raw: RawSnapshotSink, kraft_version: int, voters: VoterSet | None,
               last_contained_log_time_ms: int) -> SnapshotRecordsWriter:
        """A streaming writer into ``raw`` (``RaftLog.create_raw_snapshot``) that starts
        with the control state and takes the state machine's records: ``append(records)``
        (one batch), ``freeze()``, ``close()``."""


class FramedSnapshotWriter:
    """The writer of the core's own format (:mod:`kraft_node.raft.snapshot`): a head (header
    and control frames), then one data frame per ``append``."""

    def __init__(self, raw: RawSnapshotSink, head: bytes = b""):
        self.raw = raw
        if head:
            raw.append(head)

    def append(self, records: Sequence[bytes]) -> None:
        if records:
            self.raw.append(data_frame(records))

    def freeze(self) -> None:
        self.raw.freeze()

    def close(self) -> None:
        self.raw.close()


class FramedSnapshotControl:
    """Snapshots in the core's framed format (:mod:`kraft_node.raft.snapshot`), which a
    ``MemoryRaftLog`` reads.  ``carry_control``: write kraft.version and the voter set as
    control frames (the simulator's dynamic quorums); without it they are left out (static
    quorums: the voters come from config)."""

    def __init__(self, carry_control: bool = True):
        self.carry_control = carry_control

    def _control(self, kraft_version: int, voters: VoterSet | None) -> bytes:
        if not self.carry_control:
            return b""
        return control_frames(kraft_version, voters.to_control() if voters is not None else None)

    def write(self, data: bytes, kraft_version: int, voters: VoterSet | None) -> bytes:
        """``data`` (framed: optional header, control and data frames) with its control
        frames replaced by the state at its end offset."""
        if not self.carry_control:
            return data
        old = FramedSnapshotReader(SnapshotId(0, 0), data, "snapshot data")
        ts = old.last_contained_log_time_ms
        head = header_frame(ts) if ts is not None else b""
        return head + self._control(kraft_version, voters) + bytes(data[old.data_position:])

    def writer(self, raw: RawSnapshotSink, kraft_version: int, voters: VoterSet | None,
               last_contained_log_time_ms: int) -> FramedSnapshotWriter:
        return FramedSnapshotWriter(raw, header_frame(last_contained_log_time_ms)
                                    + self._control(kraft_version, voters))


class NoSnapshotControl(FramedSnapshotControl):
    """The core's default: framed snapshots that carry no control state (static quorums:
    the voters come from config)."""

    def __init__(self) -> None:
        super().__init__(carry_control=False)


class ControlRecordStateMachine:
    """Voter set and kraft.version history by offset (Kafka's KRaftControlRecordStateMachine)."""

    def __init__(self, static_voters: VoterSet):
        self.static_voters = static_voters
        self._voter_offsets: list[int] = []
        self._voter_sets: list[VoterSet] = []
        self._version_offsets: list[int] = []
        self._versions: list[int] = []
        #: Bumped on every change, so callers can cache derived views.
        self.generation = 0

    # ---- queries
    def latest_voter_set(self) -> VoterSet:
        return self._voter_sets[-1] if self._voter_sets else self.static_voters

    def previous_voter_set(self) -> VoterSet | None:
        """The voter set before the latest VotersRecord (None if there is no earlier entry)."""
        if len(self._voter_sets) >= 2:
            return self._voter_sets[-2]
        if len(self._voter_sets) == 1 and self.static_voters.entries:
            return self.static_voters
        return None

    def last_voter_set_offset(self) -> int | None:
        """Offset of the latest VotersRecord (-1 for a snapshot/bootstrap entry), None if static."""
        return self._voter_offsets[-1] if self._voter_offsets else None

    def voter_set_at(self, offset: int) -> VoterSet:
        """The voter set in effect for records at ``offset`` (entries at offsets ``<= offset``)."""
        i = bisect.bisect_right(self._voter_offsets, offset) - 1
        return self._voter_sets[i] if i >= 0 else self.static_voters

    def kraft_version(self) -> int:
        return self._versions[-1] if self._versions else 0

    def kraft_version_at(self, offset: int) -> int:
        i = bisect.bisect_right(self._version_offsets, offset) - 1
        return self._versions[i] if i >= 0 else 0

    def voter_history(self) -> list[tuple[int, VoterSet]]:
        return list(zip(self._voter_offsets, self._voter_sets))

    # ---- updates
    def _add_voters(self, offset: int, voters: VoterSet) -> None:
        if self._voter_offsets and offset <= self._voter_offsets[-1]:
            raise ValueError(f"voter set at offset {offset} is not after {self._voter_offsets[-1]}")
        self._voter_offsets.append(offset)
        self._voter_sets.append(voters)
        self.generation += 1

    def _add_version(self, offset: int, version: int) -> None:
        if self._version_offsets and offset <= self._version_offsets[-1]:
            raise ValueError(f"kraft.version at offset {offset} is not after {self._version_offsets[-1]}")
        self._version_offsets.append(offset)
        self._versions.append(version)
        self.generation += 1

    def apply_batches(self, batches: Iterable[Batch]) -> bool:
        """Record the control records of newly appended batches; True if anything changed."""
        changed = False
        for b in batches:
            if not b.is_control:
                continue
            c = b.control
            if isinstance(c, VotersControl):
                self._add_voters(b.base_offset, VoterSet.of(c.voters))
                changed = True
            elif isinstance(c, KRaftVersionControl):
                self._add_version(b.base_offset, c.kraft_version)
                changed = True
        return changed

    def truncate_new_entries(self, end_offset: int) -> bool:
        """Forget entries at offsets ``>= end_offset`` (the log was truncated there)."""
        i = bisect.bisect_left(self._voter_offsets, end_offset)
        j = bisect.bisect_left(self._version_offsets, end_offset)
        changed = i < len(self._voter_offsets) or j < len(self._version_offsets)
        del self._voter_offsets[i:], self._voter_sets[i:]
        del self._version_offsets[j:], self._versions[j:]
        if changed:
            self.generation += 1
        return changed

    def load_snapshot(self, snapshot_id: SnapshotId, kraft_version: int, voters: VoterSet | None) -> None:
        """Replace the history with the snapshot's state, in effect from ``offset - 1``."""
        self._voter_offsets, self._voter_sets = [], []
        self._version_offsets, self._versions = [], []
        at = snapshot_id.offset - 1
        if voters is not None:
            self._add_voters(at, voters)
        if kraft_version:
            self._add_version(at, kraft_version)
        self.generation += 1
