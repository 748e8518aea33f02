"""A run of ISR/leader-only PartitionChangeRecords of one topic, merged and indexed without
changing anything: the pure-Python twin of ``kraft_node._native._change_replay`` (and its
oracle in the tests).

Why: a broker lifecycle change (a controlled shutdown, a fencing) writes tens of thousands of
PartitionChangeRecords that change only a partition's ISR and leader, one per partition of a
topic in a row, and every controller replays each of them
(``ReplicationControlManager.replay_partition_changes``).  The work per record -- check its
shape, merge it into the partition's registration, work out which broker index entries move --
was ~35% of the active controller's CPU and ~55% of a standby's in the 10k-partition
controlled shutdown (benchmarks/results/s20/controller_shutdown.md).  The native twin does it
with typed loops; this one is the same algorithm, written plainly.

Contract (``RunScanner(registration_cls, migrating, change_api_key).scan(records, start,
topic_id, parts, members, key)``):

* the run is ``records[start:end]``: the longest stretch from ``start`` of records whose
  ``API_KEY`` is ``change_api_key``, whose ``topic_id`` equals ``topic_id``, whose
  ``partition_id`` is an int in ``[0, 2**31)`` not seen before in the run and present in
  ``parts`` (the topic's partition map: ``parts.get(pid)``) as an instance of exactly
  ``registration_cls``, and that are *simple*: replicas, directories, removing and adding
  replicas, ELR and last known ELR all None, leader recovery state -1 (no change), the leader
  and every ISR member ints of Java's int range, at most ``MAX_ISR`` of them (the previous
  registration's too, whose ISR and directories must be tuples).  Fewer than two such
  records: ``None`` (the caller replays one by one).
* ``news[k]`` is the registration ``prevs[k]`` merged with the run's record ``k``
  (``PartitionRegistration.merge`` of a simple change: ISR replaced when given, leader and
  leader epoch + 1 when the leader is not -2, partition epoch + 1, directories normalised as
  ``_directories_or_migrating`` does with ``migrating``, every other field kept).  The new
  registration is made without ``__init__`` (``registration_cls`` must be a slotted class
  whose instances have exactly its fields).
* the index: broker ``b``'s entries for the topic are ``members.get(b).get(key)`` (a tuple of
  ``pid | LEADER_FLAG`` where ``b`` leads, ``pid`` else; leaderless partitions under broker
  -1, flagged).  Each record moves its partition's entries as ``BrokersToIsrs.update`` would
  (removals for the previous ISR/leader in the previous set's iteration order, then additions
  in the new one's).  ``finals`` maps each touched broker, in order of first touch, to its
  entries once the run is applied (as the one-by-one replay leaves them: the current tuple without the
  removed entries, then the added ones), ``moved`` holds the brokers whose entries of the topic
  become empty before their last operation while they keep other topics (one by one the topic
  then leaves their map and comes back at its end).  ``finals`` is None when a removal finds no
  entry or a broker would be left with no topic at all before its last operation: the caller
  replays the run one by one, which names the failing record.
* ``attention`` lists ``(k, flags)`` for the positions ``k`` whose record changes the leader
  (``ATTN_LEADER``), whose partition has an ELR (``ATTN_ELR``: the caller checks it against the
  new ISR), or whose new leader is neither -1 nor in the previous ISR (``ATTN_UNCLEAN``: an
  unclean election, logged); for those, ``ATTN_PREFERRED``: the new leader is the preferred
  replica (``replicas[0]``, -1 without replicas: the imbalanced set's rule), ``ATTN_FROM_ELR``:
  the new leader was in the previous ELR and not the previous ISR (an election from the ELR).
  The caller counts elections, keeps the imbalanced set and logs from these.

Nothing is changed: the caller writes ``news`` into ``parts`` and ``finals`` into the index.

``encode_changes(messages, change_cls, header)`` -> ``list[bytes | None]``: the framed record
value of each message that is an ISR/leader-only PartitionChangeRecord (exactly of class
``change_cls``; replicas, directories, removing/adding replicas, ELR, last known ELR None,
recovery state -1, no unknown tagged fields, the partition id, leader and ISR members ints of
Java's int range, at most ``ENCODE_MAX_ISR`` members, a topic id whose ``bytes`` are 16
bytes), None for any other (the caller uses the generated writer).  Why: the active
controller encodes every record it writes, and through the generated writer a lifecycle
change's record costs ~2.5 us (a Writer, version checks, a dispatch per field), the native
loop ~0.25 us; these records are a fixed shape.  ``header`` is the frame header (frame
version, api key, record version: ``framing.frame_header``); the body is the same at every
version (0-2) for such a record, because the fields that differ by version are the null ones::

    header | partition_id int32 | topic_id 16 bytes | uvarint count of tagged fields (0-2)
    | [tag 0 (ISR): uvarint 0, uvarint size, uvarint len + 1, int32 each]   -- when the ISR is not None
    | [tag 1 (leader): uvarint 1, uvarint 4, int32]                          -- when the leader is not -2

(all integers big-endian; the tags in increasing order, as the generated writer writes them).

``encode_records(records, start, record_cls, encoded_cls, change_cls, headers)`` -> ``int``:
in place, each record of ``records[start:]`` (a list) of exactly ``record_cls`` (an
ApiMessageAndVersion: slots ``message``, ``version``) whose version ``v`` is an int with
``headers[v]`` not None and whose message ``encode_changes`` writes with that header, becomes
an ``encoded_cls`` (a slotted subclass of ``record_cls`` adding the slot ``_value``, made
without ``__init__``) of the same message and version object and the value; the number
replaced.  Why in the kernel: swapping the records one by one in Python cost more than the
encoding saved.
"""
from __future__ import annotations

import struct
from typing import Any, Sequence

from kraft_storage.messages.runtime import uvarint_bytes

__all__ = ["ATTN_ELR", "ATTN_FROM_ELR", "ATTN_LEADER", "ATTN_PREFERRED", "ATTN_UNCLEAN", "ENCODE_MAX_ISR",
           "LEADER_FLAG", "MAX_ISR", "RunScanner", "encode_changes", "encode_records"]

#: The index entry's flag for "this broker leads the partition" (bit 31: partition ids are
#: never negative).
LEADER_FLAG = 1 << 31
_NO_LEADER = -1
_NO_LEADER_CHANGE = -2
#: ``attention`` flags (see the module doc)
ATTN_LEADER = 1
ATTN_PREFERRED = 2
ATTN_UNCLEAN = 4
ATTN_FROM_ELR = 8
ATTN_ELR = 16
#: The most ISR members a record or registration of a run may have (the native kernel's buffer);
#: a longer ISR ends the run there (the caller replays that record one by one).
MAX_ISR = 256
#: The most ISR members ``encode_changes`` writes (the native encoder's buffer); a longer ISR
#: is left to the generated writer.
ENCODE_MAX_ISR = 4096
_INT_MIN = -(1 << 31)
_INT_MAX = (1 << 31) - 1
_NULL_FIELDS = ("replicas", "directories", "removing_replicas", "adding_replicas", "eligible_leader_replicas",
                "last_known_elr")
_FIELDS = ("replicas", "directories", "isr", "removing_replicas", "adding_replicas", "leader",
           "leader_recovery_state", "leader_epoch", "partition_epoch", "elr", "last_known_elr")

_new_object = object.__new__
_set = object.__setattr__


def _broker_id(value: Any) -> bool:
    """An exact int that fits Java's int (a broker id, a leader, -1, -2)."""
    return type(value) is int and _INT_MIN <= value <= _INT_MAX


def _broker_ids(values: Any) -> bool:
    """A tuple or list of at most ``MAX_ISR`` broker ids."""
    return len(values) <= MAX_ISR and all(_broker_id(v) for v in values)


def _entries(pid: int, isr: Sequence[int], leader: int) -> dict[int, int]:
    """broker -> the partition's index entry under it (``BrokersToIsrs._entries``)."""
    members = set(isr)
    if leader == _NO_LEADER:
        members.add(_NO_LEADER)
    return {b: pid | LEADER_FLAG if b == leader else pid for b in members}


class RunScanner:
    """Scans runs for one registration class (see the module doc)."""

    def __init__(self, registration_cls: type, migrating: Any, change_api_key: int) -> None:
        slots = registration_cls.__dict__.get("__slots__") if isinstance(registration_cls, type) else None
        if slots is None or sorted(slots) != sorted(_FIELDS):
            raise ValueError(f"RunScanner needs a class whose __slots__ are exactly {_FIELDS}, "
                             f"not {registration_cls!r}")
        self.registration_cls = registration_cls
        self.migrating = migrating
        self.change_api_key = change_api_key

    def _directories(self, directories: tuple[Any, ...], n: int) -> tuple[Any, ...]:
        """``_directories_or_migrating``: none or only MIGRATING ones become ``n`` MIGRATING."""
        migrating = self.migrating
        if directories and directories[0] != migrating:
            return directories
        if all(d == migrating for d in directories):
            return (migrating,) * n
        return directories

    def _merge(self, prev: Any, change: Any) -> Any:
        new: Any = _new_object(self.registration_cls)
        _set(new, "replicas", prev.replicas)
        _set(new, "directories", self._directories(prev.directories, len(prev.replicas)))
        _set(new, "isr", prev.isr if change.isr is None else tuple(change.isr))
        _set(new, "removing_replicas", prev.removing_replicas)
        _set(new, "adding_replicas", prev.adding_replicas)
        if change.leader == _NO_LEADER_CHANGE:
            _set(new, "leader", prev.leader)
            _set(new, "leader_epoch", prev.leader_epoch)
        else:
            _set(new, "leader", change.leader)
            _set(new, "leader_epoch", prev.leader_epoch + 1)
        _set(new, "leader_recovery_state", prev.leader_recovery_state)
        _set(new, "partition_epoch", prev.partition_epoch + 1)
        _set(new, "elr", prev.elr)
        _set(new, "last_known_elr", prev.last_known_elr)
        return new

    @staticmethod
    def _simple(record: Any) -> bool:
        lrs = record.leader_recovery_state
        if type(lrs) is not int or lrs != -1 or not _broker_id(record.leader):
            return False
        for name in _NULL_FIELDS:
            if getattr(record, name) is not None:
                return False
        isr = record.isr
        return isr is None or (type(isr) in (list, tuple) and _broker_ids(isr))

    def scan(self, records: Sequence[Any], start: int, topic_id: Any, parts: Any, members: Any,
             key: Any) -> tuple[int, list[int], list[Any], list[Any], dict[int, tuple[int, ...]] | None,
                                set[int], list[tuple[int, int]]] | None:
        """The run from ``records[start]`` (see the module doc)."""
        n = len(records)
        cls: Any = self.registration_cls
        api_key = self.change_api_key
        pids: list[int] = []
        prevs: list[Any] = []
        news: list[Any] = []
        attention: list[tuple[int, int]] = []
        seen: set[int] = set()
        ops: dict[int, list[tuple[int, bool]]] = {}
        j = start
        while j < n:
            record = records[j]
            if record.API_KEY != api_key:
                break
            rec_topic = record.topic_id
            if rec_topic is not topic_id and not rec_topic == topic_id:
                break
            pid = record.partition_id
            if type(pid) is not int or not 0 <= pid < LEADER_FLAG or pid in seen or not self._simple(record):
                break
            prev: Any = parts.get(pid)
            if (prev is None or type(prev) is not cls or type(prev.isr) is not tuple
                    or type(prev.directories) is not tuple or not _broker_id(prev.leader)
                    or not _broker_ids(prev.isr)):
                break
            new = self._merge(prev, record)
            prev_e = _entries(pid, prev.isr, prev.leader)
            next_e = _entries(pid, new.isr, new.leader)
            for b, e in prev_e.items():
                if next_e.get(b) != e:
                    ops.setdefault(b, []).append((e, False))
            for b, e in next_e.items():
                if prev_e.get(b) != e:
                    ops.setdefault(b, []).append((e, True))
            flags = ((ATTN_LEADER if new.leader != prev.leader else 0) | (ATTN_ELR if new.elr else 0)
                     | (0 if new.leader == _NO_LEADER or new.leader in prev.isr else ATTN_UNCLEAN))
            if flags:
                if new.leader == (prev.replicas[0] if prev.replicas else _NO_LEADER):
                    flags |= ATTN_PREFERRED
                if new.leader >= 0 and new.leader in prev.elr and new.leader not in prev.isr:
                    flags |= ATTN_FROM_ELR
                attention.append((len(pids), flags))
            pids.append(pid)
            prevs.append(prev)
            news.append(new)
            seen.add(pid)
            j += 1
        if len(pids) < 2:
            return None
        computed = _run_entries(members, key, ops)
        if computed is None:
            return j, pids, prevs, news, None, set(), attention
        return j, pids, prevs, news, computed[0], computed[1], attention


def _run_entries(members: Any, key: Any, ops: dict[int, list[tuple[int, bool]]]
                 ) -> tuple[dict[int, tuple[int, ...]], set[int]] | None:
    """Each broker's entries once its operations are applied, and
    the brokers whose entries empty before their last operation (None: a removal finds nothing,
    or a broker would hold no topic at all before its last operation)."""
    out: dict[int, tuple[int, ...]] = {}
    moved: set[int] = set()
    for broker_id, broker_ops in ops.items():
        topic_map = members.get(broker_id)
        current = list(() if topic_map is None else topic_map.get(key, ()))
        other_topics = 0 if topic_map is None else len(topic_map) - (1 if current else 0)
        last = len(broker_ops) - 1
        removed: set[int] = set()
        added: list[int] = []
        for k, (entry, add) in enumerate(broker_ops):
            if add:
                added.append(entry)
                continue
            if entry in added:
                added.remove(entry)
            elif entry in current and entry not in removed:
                removed.add(entry)
            else:
                return None
            if k < last and len(current) - len(removed) + len(added) == 0:
                if not other_topics:
                    return None
                moved.add(broker_id)
        out[broker_id] = tuple(e for e in current if e not in removed) + tuple(added)
    return out, moved


def _int32s(values: Any) -> bool:
    return all(_broker_id(v) for v in values)


def encode_changes(messages: Sequence[Any], change_cls: Any, header: bytes) -> list[bytes | None]:
    """Each ISR/leader-only PartitionChangeRecord's framed value, None for any other message
    (see the module doc)."""
    out: list[bytes | None] = []
    msg: Any
    for msg in messages:
        value = None
        if type(msg) is change_cls:
            topic = getattr(msg.topic_id, "bytes", None)
            isr = msg.isr
            lrs = msg.leader_recovery_state
            if (type(topic) is bytes and len(topic) == 16 and _broker_id(msg.partition_id)
                    and _broker_id(msg.leader) and type(lrs) is int and lrs == -1 and not msg.unknown_tagged_fields
                    and all(getattr(msg, name) is None for name in _NULL_FIELDS)
                    and (isr is None or (type(isr) in (list, tuple) and len(isr) <= ENCODE_MAX_ISR
                                         and _int32s(isr)))):
                tags = []
                if isr is not None:
                    body = uvarint_bytes(len(isr) + 1) + struct.pack(f">{len(isr)}i", *isr)
                    tags.append(b"\x00" + uvarint_bytes(len(body)) + body)
                if msg.leader != _NO_LEADER_CHANGE:
                    tags.append(b"\x01\x04" + struct.pack(">i", msg.leader))
                value = header + struct.pack(">i", msg.partition_id) + topic + uvarint_bytes(len(tags)) + b"".join(tags)
        out.append(value)
    return out


def encode_records(records: list[Any], start: int, record_cls: Any, encoded_cls: Any, change_cls: Any,
                   headers: tuple[bytes | None, ...]) -> int:
    """Swap the records ``encode_changes`` writes for ``encoded_cls`` ones (see the module doc)."""
    if encoded_cls.__new__ is not object.__new__ or not issubclass(encoded_cls, record_cls):
        raise ValueError(f"{encoded_cls!r} must be a slotted subclass of {record_cls!r} without its own __new__")
    replaced = 0
    for k in range(start, len(records)):
        rec = records[k]
        if type(rec) is not record_cls:
            continue
        version = rec.version
        if type(version) is not int or not 0 <= version < len(headers) or headers[version] is None:
            continue
        value = encode_changes([rec.message], change_cls, headers[version])[0]  # type: ignore[arg-type]
        if value is None:
            continue
        new = _new_object(encoded_cls)
        _set(new, "message", rec.message)
        _set(new, "version", version)
        _set(new, "_value", value)
        records[k] = new
        replaced += 1
    return replaced
